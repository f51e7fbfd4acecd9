//! Page tables for any architecture, edited through the port's [`PageTableFormat`].
//!
//! The tree lives in physical frames; the code reaches them through a [`PhysMemory`] (the
//! kernel's direct map on the machine, a vector of fake frames in host tests). Edits return a
//! `#[must_use]` [`Flush`] so a forgotten TLB invalidation is a compiler warning.

use arch::addr::{Frame, PhysAddr, VirtAddr, PAGE_SIZE};
use arch::mapping::{Entry, MapFlags, PageTableFormat};
use core::marker::PhantomData;

/// Entries in one table.
pub const ENTRIES: usize = 512;

/// A table in memory.
pub type RawTable = [u64; ENTRIES];

/// Access to the frames that hold page tables.
pub trait PhysMemory {
    /// A pointer to the table stored in `frame`, valid while the frame is allocated.
    fn table(&self, frame: Frame) -> *mut RawTable;
}

/// Where new tables come from (and where freed ones go).
pub trait TableFrames {
    /// A frame for a new table (contents need not be zero).
    fn allocate_table(&mut self) -> Option<Frame>;
    /// Returns a table frame no longer used.
    fn free_table(&mut self, frame: Frame);
}

/// Why a mapping could not be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapError {
    /// The address is not aligned to the page size of the requested level.
    Misaligned(VirtAddr),
    /// Something is already mapped at the address.
    AlreadyMapped(VirtAddr),
    /// A larger page already covers the address.
    HugePageInTheWay(VirtAddr),
    /// No frame was left for an intermediate table.
    OutOfMemory,
}

/// Why an unmapping failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnmapError {
    /// Nothing is mapped at the address.
    NotMapped(VirtAddr),
    /// The address lies in a larger page than asked for.
    HugePageInTheWay(VirtAddr),
}

/// A TLB invalidation owed for one address after a page-table edit.
#[must_use = "the TLB may still hold the old translation; call flush() or ignore()"]
#[derive(Debug)]
pub struct Flush(VirtAddr);

impl Flush {
    /// Performs the invalidation with the given operation (e.g. `arch::tlb::flush_page`).
    pub fn flush(self, invalidate: impl FnOnce(VirtAddr)) {
        invalidate(self.0);
    }

    /// Drops the obligation: correct when the table is not active anywhere yet, or when the
    /// caller flushes everything afterwards.
    pub fn ignore(self) {}

    /// The address to invalidate.
    pub fn address(&self) -> VirtAddr {
        self.0
    }
}

/// A page-table tree rooted at one frame.
pub struct PageTable<F: PageTableFormat> {
    root: Frame,
    format: PhantomData<F>,
}

impl<F: PageTableFormat> PageTable<F> {
    /// Makes a new, empty tree.
    pub fn new(mem: &impl PhysMemory, frames: &mut impl TableFrames) -> Result<Self, MapError> {
        let root = frames.allocate_table().ok_or(MapError::OutOfMemory)?;
        zero(mem, root);
        Ok(PageTable { root, format: PhantomData })
    }

    /// Wraps an existing tree.
    ///
    /// # Safety
    /// `root` must hold a valid table of format `F` that nothing else edits concurrently.
    pub unsafe fn from_root(root: Frame) -> Self {
        PageTable { root, format: PhantomData }
    }

    /// The root frame (what the CPU's root register points at).
    pub fn root(&self) -> Frame {
        self.root
    }

    /// Copies root entries `range` from `other` (sharing the tables below them), e.g. the
    /// kernel half into a new view.
    pub fn share_root_entries(&mut self, mem: &impl PhysMemory, other: &PageTable<F>, range: core::ops::Range<usize>) {
        let src = mem.table(other.root);
        let dst = mem.table(self.root);
        for i in range {
            // SAFETY: both are live tables reachable through `mem`; i < ENTRIES (range is
            // within the root table by the caller's choice, checked by indexing).
            unsafe { (*dst)[i] = (*src)[i] };
        }
    }

    /// Copies the trees below root entries `range` of `other` into this table (which has none
    /// there yet): new intermediate tables (made `user`: every view mapping is a user one), the
    /// same leaves — except every leaf in `skip` — and at most `*budget` table frames made
    /// (each one counted off). A subtree wholly inside `skip`, or met once the budget is spent,
    /// is left out: its addresses stay unmapped here. For deriving one user view from another
    /// whose rights differ on the region at `skip` (`view_space.rs`; the new view maps what was left
    /// out on first touch): at most `*budget` table copies and a scan of their entries,
    /// whatever the size of `other`, where mapping every page again is a walk per page. On
    /// running out of table frames, what was copied so far stays (the caller frees it).
    // Inlined into `derive_table` where that is cheaper (grant_cost, per rights change: x86_64
    // -1,100 instructions, aarch64 -100; riscv64 +3,100, so not there).
    #[cfg_attr(not(target_arch = "riscv64"), inline)]
    pub fn copy_root_entries_bounded(
        &mut self,
        mem: &impl PhysMemory,
        frames: &mut impl TableFrames,
        other: &PageTable<F>,
        range: core::ops::Range<usize>,
        skip: &core::ops::Range<u64>,
        budget: &mut usize,
    ) -> Result<(), MapError> {
        for i in range {
            // SAFETY: live root table.
            let entry = unsafe { *slot(mem, other.root, i) };
            if let Entry::Table(next) = F::decode(entry, F::LEVELS - 1) {
                let base = i as u64 * F::leaf_size(F::LEVELS - 1);
                if let Some(copy) = copy_subtree_bounded::<F>(mem, frames, next, F::LEVELS - 2, base, skip, budget)? {
                    // SAFETY: live root table, entry empty (caller's contract).
                    unsafe { *slot(mem, self.root, i) = F::table_entry(copy, true) };
                }
            }
        }
        Ok(())
    }

    /// Makes sure root entry `index` points to a table (creating an empty one), so that
    /// trees sharing this entry see everything later mapped below it.
    pub fn ensure_root_entry(&mut self, mem: &impl PhysMemory, frames: &mut impl TableFrames, index: usize, user: bool) -> Result<(), MapError> {
        let slot = slot(mem, self.root, index);
        // SAFETY: live root table.
        unsafe {
            match F::decode(*slot, F::LEVELS - 1) {
                Entry::Table(_) => Ok(()),
                Entry::Leaf(..) => Err(MapError::HugePageInTheWay(VirtAddr::new(0))),
                Entry::Empty => {
                    let next = frames.allocate_table().ok_or(MapError::OutOfMemory)?;
                    zero(mem, next);
                    *slot = F::table_entry(next, user);
                    Ok(())
                }
            }
        }
    }

    /// Maps `va` to `frame` with `flags` using a leaf at `level` (0 = 4 KiB, 1 = 2 MiB, ...).
    /// Intermediate tables are created as needed; `USER` in `flags` is propagated to them.
    // Inlined: left to itself LLVM stopped specialising the walk into `map_region` and
    // `ViewSpace::fault` after unrelated changes elsewhere (+35 % on grant_cost's grant_large
    // and touch_large_after_grant on x86_64 and riscv64).
    #[inline]
    pub fn map(
        &mut self,
        mem: &impl PhysMemory,
        frames: &mut impl TableFrames,
        va: VirtAddr,
        frame: Frame,
        flags: MapFlags,
        level: usize,
    ) -> Result<Flush, MapError> {
        let size = F::leaf_size(level);
        if !va.is_aligned(size) || !frame.start().is_aligned(size) {
            return Err(MapError::Misaligned(va));
        }
        let user = flags.contains(MapFlags::USER);
        let mut table = self.root;
        for l in (level + 1..F::LEVELS).rev() {
            let slot = slot(mem, table, F::index(va, l));
            // SAFETY: `slot` points into a live table (see `slot`).
            let entry = unsafe { *slot };
            table = match F::decode(entry, l) {
                Entry::Table(next) => {
                    if user && F::table_entry(next, true) != entry && F::table_entry(next, false) == entry {
                        // SAFETY: as above; widening a table entry to user keeps existing leaves'
                        // own rights (each leaf decides).
                        unsafe { *slot = F::table_entry(next, true) };
                    }
                    next
                }
                Entry::Leaf(..) => return Err(MapError::HugePageInTheWay(va)),
                Entry::Empty => {
                    let next = frames.allocate_table().ok_or(MapError::OutOfMemory)?;
                    zero(mem, next);
                    // SAFETY: as above.
                    unsafe { *slot = F::table_entry(next, user) };
                    next
                }
            };
        }
        let slot = slot(mem, table, F::index(va, level));
        // SAFETY: as above.
        unsafe {
            if F::decode(*slot, level) != Entry::Empty {
                return Err(MapError::AlreadyMapped(va));
            }
            *slot = F::leaf_entry(frame, flags, level);
        }
        Ok(Flush(va))
    }

    /// Removes the 4 KiB mapping at `va`, returning the frame it mapped.
    pub fn unmap(&mut self, mem: &impl PhysMemory, va: VirtAddr) -> Result<(Frame, Flush), UnmapError> {
        let va = va.align_down(PAGE_SIZE);
        let mut table = self.root;
        for l in (1..F::LEVELS).rev() {
            // SAFETY: live table.
            let entry = unsafe { *slot(mem, table, F::index(va, l)) };
            table = match F::decode(entry, l) {
                Entry::Table(next) => next,
                Entry::Leaf(..) => return Err(UnmapError::HugePageInTheWay(va)),
                Entry::Empty => return Err(UnmapError::NotMapped(va)),
            };
        }
        let slot = slot(mem, table, F::index(va, 0));
        // SAFETY: live table.
        unsafe {
            match F::decode(*slot, 0) {
                Entry::Leaf(frame, _) => {
                    *slot = 0;
                    Ok((frame, Flush(va)))
                }
                _ => Err(UnmapError::NotMapped(va)),
            }
        }
    }

    /// The physical address and rights `va` translates to, if mapped.
    #[inline]
    pub fn translate(&self, mem: &impl PhysMemory, va: VirtAddr) -> Option<(PhysAddr, MapFlags)> {
        let mut table = self.root;
        for l in (0..F::LEVELS).rev() {
            // SAFETY: live table.
            let entry = unsafe { *slot(mem, table, F::index(va, l)) };
            match F::decode(entry, l) {
                Entry::Table(next) if l > 0 => table = next,
                Entry::Leaf(frame, flags) => {
                    let offset = va.as_u64() & (F::leaf_size(l) - 1);
                    return Some((PhysAddr::new(frame.start().as_u64() + offset), flags));
                }
                _ => return None,
            }
        }
        None
    }

    /// The rights `va` is mapped with, if mapped: [`translate`](Self::translate) without the
    /// physical address (the rights check of a syscall's quick path, `user_access::mapped_for`).
    #[inline]
    pub fn leaf_flags(&self, mem: &impl PhysMemory, va: VirtAddr) -> Option<MapFlags> {
        let mut table = self.root;
        for l in (0..F::LEVELS).rev() {
            // SAFETY: live table.
            let entry = unsafe { *slot(mem, table, F::index(va, l)) };
            match F::decode(entry, l) {
                Entry::Table(next) if l > 0 => table = next,
                Entry::Leaf(_, flags) => return Some(flags),
                _ => return None,
            }
        }
        None
    }

    /// Frees every table frame below root entries `range` and the root itself (not the frames
    /// the leaves map: they belong to regions). Entries outside `range` are shared and kept.
    pub fn free_tables(self, mem: &impl PhysMemory, frames: &mut impl TableFrames, range: core::ops::Range<usize>) {
        for i in range {
            // SAFETY: live table.
            let entry = unsafe { *slot(mem, self.root, i) };
            if let Entry::Table(next) = F::decode(entry, F::LEVELS - 1) {
                free_subtree::<F>(mem, frames, next, F::LEVELS - 2);
            }
        }
        frames.free_table(self.root);
    }
}

/// A copy of the table `table` at `level`, covering the addresses from `base`, and of the
/// tables below it, without the leaves in `skip` and with at most `*budget` tables made
/// (leaves are shared). `None`: nothing to copy (wholly in `skip`, or the budget is spent).
fn copy_subtree_bounded<F: PageTableFormat>(
    mem: &impl PhysMemory,
    frames: &mut impl TableFrames,
    table: Frame,
    level: usize,
    base: u64,
    skip: &core::ops::Range<u64>,
    budget: &mut usize,
) -> Result<Option<Frame>, MapError> {
    let entry_span = F::leaf_size(level);
    let end = base.saturating_add(entry_span * ENTRIES as u64);
    if (skip.start <= base && end <= skip.end) || *budget == 0 {
        return Ok(None);
    }
    *budget -= 1;
    let copy = frames.allocate_table().ok_or(MapError::OutOfMemory)?;
    let overlaps = |at: u64| at < skip.end && skip.start < at.saturating_add(entry_span);
    if level == 0 {
        // SAFETY: both frames are whole live tables reachable through `mem`.
        unsafe { mem.table(copy).write(*mem.table(table)) };
        if skip.start < end && base < skip.end {
            for i in 0..ENTRIES {
                if overlaps(base + i as u64 * entry_span) {
                    // SAFETY: `copy` is ours and live.
                    unsafe { *slot(mem, copy, i) = 0 };
                }
            }
        }
        return Ok(Some(copy));
    }
    // Entries are filled one by one, so the copy never names `table`'s children and freeing
    // it on failure frees only what it owns.
    zero(mem, copy);
    for i in 0..ENTRIES {
        let at = base + i as u64 * entry_span;
        // SAFETY: live table.
        let entry = unsafe { *slot(mem, table, i) };
        match F::decode(entry, level) {
            Entry::Table(next) => match copy_subtree_bounded::<F>(mem, frames, next, level - 1, at, skip, budget) {
                // SAFETY: `copy` is ours and live.
                Ok(Some(sub)) => unsafe { *slot(mem, copy, i) = F::table_entry(sub, true) },
                Ok(None) => {}
                Err(e) => {
                    free_subtree::<F>(mem, frames, copy, level);
                    return Err(e);
                }
            },
            // A large leaf (views make none): kept unless it covers part of `skip`.
            // SAFETY: `copy` is ours and live.
            Entry::Leaf(..) if !overlaps(at) => unsafe { *slot(mem, copy, i) = entry },
            Entry::Leaf(..) | Entry::Empty => {}
        }
    }
    Ok(Some(copy))
}

fn free_subtree<F: PageTableFormat>(mem: &impl PhysMemory, frames: &mut impl TableFrames, table: Frame, level: usize) {
    if level > 0 {
        for i in 0..ENTRIES {
            // SAFETY: live table.
            let entry = unsafe { *slot(mem, table, i) };
            if let Entry::Table(next) = F::decode(entry, level) {
                free_subtree::<F>(mem, frames, next, level - 1);
            }
        }
    }
    frames.free_table(table);
}

/// A pointer to entry `index` of `table`. Valid while the table frame is allocated.
fn slot(mem: &impl PhysMemory, table: Frame, index: usize) -> *mut u64 {
    assert!(index < ENTRIES);
    // SAFETY: `mem.table` points at a whole table; index is in bounds.
    unsafe { (mem.table(table) as *mut u64).add(index) }
}

fn zero(mem: &impl PhysMemory, frame: Frame) {
    // SAFETY: a freshly allocated table frame, reachable through `mem`.
    unsafe { mem.table(frame).write([0; ENTRIES]) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mm::machine::fake::FakeMachine;
    use crate::mm::machine::{Machine, MachineTables};
    use arch::paging::X86_64;

    #[test]
    fn map_translate_unmap() {
        let mut m = FakeMachine::new(64);
        let mem = &m.memory();
        let mut pt = PageTable::<X86_64>::new(mem, &mut MachineTables(&mut m)).unwrap();
        let va = VirtAddr::new(0x4000_1000);
        let frame = Frame::from_number(0x777);
        let flags = MapFlags::READ | MapFlags::WRITE | MapFlags::USER;
        pt.map(mem, &mut MachineTables(&mut m), va, frame, flags, 0).unwrap().ignore();
        assert_eq!(pt.translate(mem, VirtAddr::new(0x4000_1abc)), Some((PhysAddr::new(0x777abc), flags)));
        assert_eq!(pt.leaf_flags(mem, VirtAddr::new(0x4000_1abc)), Some(flags));
        assert_eq!(pt.leaf_flags(mem, VirtAddr::new(0x4000_2000)), None, "the next page is not mapped");
        assert_eq!(pt.map(mem, &mut MachineTables(&mut m), va, frame, flags, 0).unwrap_err(), MapError::AlreadyMapped(va));
        let odd = VirtAddr::new(0x4000_1001);
        assert_eq!(pt.map(mem, &mut MachineTables(&mut m), odd, frame, flags, 0).unwrap_err(), MapError::Misaligned(odd));
        let huge = VirtAddr::new(0x8000_0000);
        pt.map(mem, &mut MachineTables(&mut m), huge, Frame::from_number(0x200), MapFlags::READ, 1).unwrap().ignore();
        assert_eq!(pt.translate(mem, VirtAddr::new(0x8000_5000)).unwrap().0, PhysAddr::new(0x205000));
        assert_eq!(pt.leaf_flags(mem, VirtAddr::new(0x8000_5000)), Some(MapFlags::READ), "a huge leaf's rights");
        let inside = VirtAddr::new(0x8000_5000);
        assert_eq!(pt.unmap(mem, inside).unwrap_err(), UnmapError::HugePageInTheWay(inside));
        let (f, flush) = pt.unmap(mem, va).unwrap();
        assert_eq!(f, frame);
        assert_eq!(flush.address(), va);
        flush.ignore();
        assert_eq!(pt.translate(mem, va), None);
        assert_eq!(pt.leaf_flags(mem, va), None);
        assert_eq!(pt.unmap(mem, va).unwrap_err(), UnmapError::NotMapped(va));
        pt.free_tables(mem, &mut MachineTables(&mut m), 0..ENTRIES);
        assert_eq!(m.live(), 0, "every table frame is returned");
    }

    #[test]
    fn bounded_copy_leaves_out_the_skipped_range_and_stops_at_the_budget() {
        let mut m = FakeMachine::new(256);
        let mem = &m.memory();
        let flags = MapFlags::READ | MapFlags::USER;
        let mut pt = PageTable::<X86_64>::new(mem, &mut MachineTables(&mut m)).unwrap();
        // Three 2 MiB-apart groups of pages: 0x4000_0000.., 0x4020_0000.., 0x4040_0000.. .
        let pages: Vec<u64> = (0..3u64).flat_map(|g| (0..4u64).map(move |p| 0x4000_0000 + g * 0x20_0000 + p * 0x1000)).collect();
        for (n, va) in pages.iter().enumerate() {
            pt.map(mem, &mut MachineTables(&mut m), VirtAddr::new(*va), Frame::from_number(0x100 + n as u64), flags, 0).unwrap().ignore();
        }
        // Skip two pages of the middle group; budget enough for everything.
        let skip = 0x4020_1000..0x4020_3000;
        let mut copy = PageTable::<X86_64>::new(mem, &mut MachineTables(&mut m)).unwrap();
        let mut budget = 100;
        copy.copy_root_entries_bounded(mem, &mut MachineTables(&mut m), &pt, 0..ENTRIES, &skip, &mut budget).unwrap();
        // Tables: one at each of levels 3, 2 and one leaf table per group.
        assert_eq!(budget, 100 - 5);
        for va in &pages {
            let want = if skip.contains(va) { None } else { pt.translate(mem, VirtAddr::new(*va)) };
            assert_eq!(copy.translate(mem, VirtAddr::new(*va)), want, "{va:#x}");
        }
        // A range covering a whole leaf table: that table is not copied at all.
        let mut copy2 = PageTable::<X86_64>::new(mem, &mut MachineTables(&mut m)).unwrap();
        let mut budget = 100;
        copy2.copy_root_entries_bounded(mem, &mut MachineTables(&mut m), &pt, 0..ENTRIES, &(0x4020_0000..0x4040_0000), &mut budget).unwrap();
        assert_eq!(budget, 100 - 4);
        // A budget of 3: the two upper tables and the first leaf table; the rest is left out.
        let mut copy3 = PageTable::<X86_64>::new(mem, &mut MachineTables(&mut m)).unwrap();
        let mut budget = 3;
        copy3.copy_root_entries_bounded(mem, &mut MachineTables(&mut m), &pt, 0..ENTRIES, &(0..0), &mut budget).unwrap();
        assert_eq!(budget, 0);
        for va in &pages {
            let want = if *va < 0x4020_0000 { pt.translate(mem, VirtAddr::new(*va)) } else { None };
            assert_eq!(copy3.translate(mem, VirtAddr::new(*va)), want, "{va:#x}");
        }
        for t in [pt, copy, copy2, copy3] {
            t.free_tables(mem, &mut MachineTables(&mut m), 0..ENTRIES);
        }
        assert_eq!(m.live(), 0, "every table frame is returned");
    }
}
