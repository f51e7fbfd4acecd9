//! Regions and views of the single address space (Cubix's "thread views").
//!
//! A **region** names a range of the single address space and the frames behind it (taken at
//! creation, or zero-filled on first touch). A **view** is a set of (region, rights); it is what a
//! thread may touch, and it is materialised as a page table. Views are *interned* (hash-consed):
//! the canonical set — regions sorted by id with their rights — is the key of an index, so two
//! threads with identical rights share one view and one page table. Views never change once made:
//! changing a thread's rights moves the thread to another (existing or new) view. So a live page
//! table only ever gains mappings (lazy fills) and nothing cached in a TLB goes stale while the
//! view lives; a thread that lost rights simply runs on another table.
//!
//! **Bounded work per change.** A new view's table is made in bounded work, whatever the size
//! of its regions: derived from the view the thread leaves (a copy of at most [`COPY_BUDGET`]
//! table frames, leaving out the changed region), then at most [`MAP_BUDGET`] pages of the
//! changed region mapped (a view made from nothing maps at most that many of all its
//! regions). What is left out is mapped on first touch (`fault`, `Fault::Mapped`), as a
//! zero-on-touch page is filled, one bounded fault at a time. So a table maps a subset of its
//! view's resident pages, each with exactly the view's rights; kernel accesses to user memory
//! already check the view and populate first, and never rely on a page being mapped.
//!
//! Reference counts: a view lives while threads are attached to it; a region lives while its
//! owner holds it or any view contains it, and its frames are freed when the last of those goes.
//!
//! Everything here is generic over the page-table format and the [`Machine`], and is
//! property-tested on the host against a model.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use arch::addr::{Frame, PhysAddr, VirtAddr, PAGE_SIZE};
use arch::mapping::{MapFlags, PageTableFormat};

use super::machine::{Machine, MachineTables};
use super::page_table::{MapError, PageTable};
use super::region::{RangeError, RegionKind};

/// Names a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RegionId(pub u64);

/// Names a view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ViewId(pub u64);

/// How a region gets its frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backing {
    /// All frames are taken (zeroed) when the region is created.
    Eager,
    /// Each page gets a zeroed frame when first touched through a view that may touch it.
    ZeroOnTouch,
}

/// Most pages of regions a new view's table maps when it is made (the rest fault in on first
/// touch): 1,024 pages (4 MiB) is a few hundred thousand instructions on the ports, the bound
/// one `console_write` keeps, and covers every region of the benchmarks and suites but the
/// ones made to be large.
pub const MAP_BUDGET: usize = 1024;

/// Most table frames a new view's table copies from the view it is derived from (each a 4 KiB
/// copy and a scan of its entries); 64 cover the tables of up to 32 two-MiB stretches.
pub const COPY_BUDGET: usize = 64;

/// Pages a fault that maps a resident page maps at once around it (the resident pages of the
/// same region in the aligned block of this many pages): what a bounded view change left out
/// comes back a block per fault, not a fault per page.
pub const FAULT_AROUND: u64 = 64;

/// Most views one rights change applied to several threads may make (a grant or revoke that
/// reaches a program's view-mates, a region that joins every thread of a Kernel-Notification
/// program): each costs up to [`COPY_BUDGET`] table copies and [`MAP_BUDGET`] pages mapped
/// with interrupts off, so a program of a thousand threads each in its own view made a
/// thousand in one call. A change that would need more is refused before anything changes.
pub const MAX_VIEWS_PER_CHANGE: usize = 16;

/// Whether the threads in `views` (each thread's view; `None` for a thread with none, which a
/// change skips) are in at most `cap` distinct views, counted in O(n·cap) with no allocation
/// and stopping at the first view past the bound.
pub fn views_within(views: impl IntoIterator<Item = Option<ViewId>>, cap: usize) -> bool {
    let mut seen = [ViewId(0); MAX_VIEWS_PER_CHANGE];
    let cap = cap.min(seen.len());
    let mut n = 0;
    for v in views.into_iter().flatten() {
        if seen[..n].contains(&v) {
            continue;
        }
        if n == cap {
            return false;
        }
        seen[n] = v;
        n += 1;
    }
    true
}

/// The rights a view can hold on a region (the user bit is implied).
pub const RIGHTS: MapFlags = MapFlags::READ.union(MapFlags::WRITE).union(MapFlags::EXEC);

/// Errors of view and region operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViewError {
    /// Frames or table memory ran out.
    NoMemory,
    /// No such region (or it is not in the view).
    NoRegion,
    /// No such view.
    NoView,
    /// Rights asked for include both write and execute, or bits that are not rights.
    BadRights(MapFlags),
    /// The region's range overlaps another region or is not page-aligned/inside the user half.
    BadRange(u64),
}

impl From<MapError> for ViewError {
    fn from(_: MapError) -> Self {
        ViewError::NoMemory
    }
}

/// What a page fault in a view turns out to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// A zero-on-touch page was filled and mapped: retry the access.
    Filled,
    /// The page was already mapped in another view; now mapped here too: retry.
    Mapped,
    /// The address is in a region the view does not hold, or holds without the needed right.
    Denied {
        /// The region at the address.
        region: RegionId,
        /// The view's rights on it (empty when the view does not hold it).
        rights: MapFlags,
    },
    /// No region covers the address.
    Unmapped,
}

struct RegionObj {
    start: VirtAddr,
    kind: RegionKind,
    backing: Backing,
    frames: Vec<Option<Frame>>,
    /// Views that contain the region.
    view_refs: usize,
    /// Owners (the creating domain) still holding it.
    owner_refs: usize,
}

impl RegionObj {
    fn end(&self) -> u64 {
        self.start.as_u64() + self.frames.len() as u64 * PAGE_SIZE
    }
}

struct ViewObj<F: PageTableFormat> {
    /// The canonical set: sorted by region id, rights non-empty.
    set: Vec<(RegionId, MapFlags)>,
    table: PageTable<F>,
    /// Threads attached.
    threads: usize,
}

/// Summary of a region, for queries and reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionInfo {
    /// The region.
    pub id: RegionId,
    /// First byte.
    pub start: VirtAddr,
    /// Length in bytes.
    pub len: u64,
    /// What it holds.
    pub kind: RegionKind,
    /// Pages that have a frame.
    pub resident_pages: u64,
}

/// All regions and views of the single address space.
pub struct ViewSpace<F: PageTableFormat> {
    regions: BTreeMap<RegionId, RegionObj>,
    /// Regions by start address, for lookups by pointer.
    by_start: BTreeMap<u64, RegionId>,
    views: BTreeMap<ViewId, ViewObj<F>>,
    /// The interning index: canonical set -> view.
    index: BTreeMap<Vec<(RegionId, MapFlags)>, ViewId>,
    next_region: u64,
    next_view: u64,
    /// The kernel table whose shared root entries every view copies, and which entries.
    kernel: Option<(PageTable<F>, core::ops::Range<usize>)>,
    /// Views created so far (for statistics).
    views_built: u64,
    /// Regions freed since the last [`ViewSpace::take_freed`] (their ranges can be reused).
    freed: Vec<RegionId>,
    /// Roots of views freed since the last [`ViewSpace::take_freed_roots`] (their TLB tags can
    /// be released).
    freed_roots: Vec<Frame>,
    /// Pages a new table maps and table frames it copies at most ([`MAP_BUDGET`],
    /// [`COPY_BUDGET`]; tests make them small).
    budget: (usize, usize),
    /// Whether the tables of freed views and the frames of freed regions wait in `deferred`
    /// (for the kernel, which frees them once its lock is dropped) or are freed at once.
    defer: bool,
    /// What was let go of and waits to be freed ([`ViewSpace::take_deferred`]).
    deferred: Deferred<F>,
}

/// Memory freed views and regions let go of, to be given back by [`Deferred::free`] once the
/// lock over the [`ViewSpace`] is dropped: freeing a view's page table walks every table frame
/// it grew (faults add them without bound over its life) and freeing a region gives back each
/// of its frames, work that would otherwise be done under the global view-space lock, which
/// every CPU's faults and syscalls wait for (issue 15, item 5).
pub struct Deferred<F: PageTableFormat> {
    tables: [Option<PageTable<F>>; DEFERRED_SLOTS],
    frames: [Option<Vec<Option<Frame>>>; DEFERRED_SLOTS],
    /// Root entries the tables share with the kernel's (never freed).
    shared: core::ops::Range<usize>,
}

/// Tables and regions one view-space call can leave for later (inline: a heap allocation per
/// call cost ~3,000 instructions on riscv64's `grant_cost`); a call that frees more frees the
/// rest at once.
const DEFERRED_SLOTS: usize = 4;

impl<F: PageTableFormat> Deferred<F> {
    fn new(shared: core::ops::Range<usize>) -> Self {
        Deferred { tables: [const { None }; DEFERRED_SLOTS], frames: [const { None }; DEFERRED_SLOTS], shared }
    }

    /// Whether nothing waits.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.tables[0].is_none() && self.frames[0].is_none()
    }

    /// Keeps `table` for later; gives it back if every slot is taken.
    fn keep_table(&mut self, table: PageTable<F>) -> Option<PageTable<F>> {
        match self.tables.iter_mut().find(|t| t.is_none()) {
            Some(slot) => {
                *slot = Some(table);
                None
            }
            None => Some(table),
        }
    }

    /// Keeps a region's `frames` for later; gives them back if every slot is taken.
    fn keep_frames(&mut self, frames: Vec<Option<Frame>>) -> Option<Vec<Option<Frame>>> {
        match self.frames.iter_mut().find(|f| f.is_none()) {
            Some(slot) => {
                *slot = Some(frames);
                None
            }
            None => Some(frames),
        }
    }

    /// Tables and region frames waiting: what [`free`](Self::free) gives back, counted
    /// without walking the tables' lower levels (for tests and reports).
    pub fn waiting(&self) -> (usize, usize) {
        (self.tables.iter().flatten().count(), self.frames.iter().flatten().map(|f| f.iter().flatten().count()).sum())
    }

    /// Frees everything that waits.
    pub fn free<M: Machine>(self, m: &mut M) {
        for table in self.tables.into_iter().flatten() {
            free_table_of(m, &self.shared, table);
        }
        for frames in self.frames.into_iter().flatten() {
            for f in frames.into_iter().flatten() {
                m.free_frame(f);
            }
        }
    }
}

/// Frees `table` below the root entries it owns (`shared` ones are the kernel's), and its root.
fn free_table_of<F: PageTableFormat, M: Machine>(m: &mut M, shared: &core::ops::Range<usize>, table: PageTable<F>) {
    let mem = m.memory();
    let owned: Vec<usize> = (0..F::ENTRIES).filter(|i| !shared.contains(i)).collect();
    // Free everything below the entries this view owns (the shared ones are the kernel's).
    let (first, last) = (owned.first().copied().unwrap_or(0), owned.last().map_or(0, |l| l + 1));
    table.free_tables(&mem, &mut MachineTables(m), first..last);
}

fn check_rights(rights: MapFlags) -> Result<MapFlags, ViewError> {
    if !RIGHTS.contains(rights) || rights.contains(MapFlags::WRITE | MapFlags::EXEC) {
        return Err(ViewError::BadRights(rights));
    }
    Ok(rights)
}

impl<F: PageTableFormat> ViewSpace<F> {
    /// An empty space. `kernel` names the kernel table and the root entries views share with it.
    pub fn new(kernel: Option<(PageTable<F>, core::ops::Range<usize>)>) -> Self {
        let shared = kernel.as_ref().map(|(_, r)| r.clone()).unwrap_or(0..0);
        ViewSpace {
            regions: BTreeMap::new(),
            by_start: BTreeMap::new(),
            views: BTreeMap::new(),
            index: BTreeMap::new(),
            next_region: 1,
            next_view: 1,
            kernel,
            views_built: 0,
            freed: Vec::new(),
            freed_roots: Vec::new(),
            budget: (MAP_BUDGET, COPY_BUDGET),
            defer: false,
            deferred: Deferred::new(shared),
        }
    }

    /// From now on, the tables of freed views and the frames of freed regions wait for
    /// [`take_deferred`](Self::take_deferred) instead of being freed at once (the kernel frees
    /// them once its lock over this space is dropped).
    pub fn defer_frees(&mut self) {
        self.defer = true;
    }

    /// What freed views and regions let go of since the last call (`None`: nothing), to free
    /// with [`Deferred::free`].
    #[inline]
    pub fn take_deferred(&mut self) -> Option<Deferred<F>> {
        if self.deferred.is_empty() {
            return None;
        }
        let shared = self.deferred.shared.clone();
        Some(core::mem::replace(&mut self.deferred, Deferred::new(shared)))
    }

    /// Sets the bounds of the work of making one view (pages mapped, table frames copied).
    pub fn set_budget(&mut self, map_pages: usize, copy_tables: usize) {
        self.budget = (map_pages, copy_tables);
    }

    /// Makes a region of `pages` pages at `start` (page-aligned, in the user half, not
    /// overlapping another region), held once by its owner.
    pub fn create_region<M: Machine>(
        &mut self,
        m: &mut M,
        start: VirtAddr,
        pages: u64,
        kind: RegionKind,
        backing: Backing,
    ) -> Result<RegionId, ViewError> {
        self.check_new_range(start, pages)?;
        let mut frames = Vec::new();
        frames.try_reserve_exact(pages as usize).map_err(|_| ViewError::NoMemory)?;
        for _ in 0..pages {
            frames.push(None);
        }
        if backing == Backing::Eager {
            for i in 0..frames.len() {
                match m.allocate_zeroed() {
                    Some(f) => frames[i] = Some(f),
                    None => {
                        for f in frames.iter().flatten() {
                            m.free_frame(*f);
                        }
                        return Err(ViewError::NoMemory);
                    }
                }
            }
        }
        Ok(self.insert_region(start, kind, backing, frames))
    }

    /// Makes an eager region at `start` of the zeroed `frames` the caller took (one per page,
    /// in order), held once by its owner: the frames are taken and zeroed before, outside the
    /// lock over this space, so making a region holds that lock for a bounded time whatever its
    /// size (a region of 8,192 pages zeroed 32 MiB under it). On an error the frames are the
    /// caller's again.
    pub fn create_region_from(&mut self, start: VirtAddr, kind: RegionKind, frames: Vec<Option<Frame>>) -> Result<RegionId, (ViewError, Vec<Option<Frame>>)> {
        let pages = frames.len() as u64;
        if let Err(e) = self.check_new_range(start, pages) {
            return Err((e, frames));
        }
        Ok(self.insert_region(start, kind, Backing::Eager, frames))
    }

    /// Whether a new region of `pages` pages at `start` may be made.
    fn check_new_range(&self, start: VirtAddr, pages: u64) -> Result<(), ViewError> {
        let len = pages.checked_mul(PAGE_SIZE).ok_or(ViewError::BadRange(start.as_u64()))?;
        let end = start.as_u64().checked_add(len).ok_or(ViewError::BadRange(start.as_u64()))?;
        if pages == 0 || !start.is_aligned(PAGE_SIZE) || end > F::USER_HALF_END {
            return Err(ViewError::BadRange(start.as_u64()));
        }
        if self.region_overlapping(start.as_u64(), end).is_some() {
            return Err(ViewError::BadRange(start.as_u64()));
        }
        Ok(())
    }

    fn insert_region(&mut self, start: VirtAddr, kind: RegionKind, backing: Backing, frames: Vec<Option<Frame>>) -> RegionId {
        let id = RegionId(self.next_region);
        self.next_region += 1;
        self.regions.insert(id, RegionObj { start, kind, backing, frames, view_refs: 0, owner_refs: 1 });
        self.by_start.insert(start.as_u64(), id);
        id
    }

    fn region_overlapping(&self, start: u64, end: u64) -> Option<RegionId> {
        // The only candidates are the last region starting before `end`.
        let (_, id) = self.by_start.range(..end).next_back()?;
        let r = &self.regions[id];
        (r.end() > start).then_some(*id)
    }

    /// The region covering `addr`.
    pub fn region_at(&self, addr: u64) -> Option<RegionId> {
        let (_, id) = self.by_start.range(..=addr).next_back()?;
        (self.regions[id].end() > addr).then_some(*id)
    }

    /// A region's summary.
    pub fn region_info(&self, id: RegionId) -> Option<RegionInfo> {
        let r = self.regions.get(&id)?;
        Some(RegionInfo {
            id,
            start: r.start,
            len: r.frames.len() as u64 * PAGE_SIZE,
            kind: r.kind,
            resident_pages: r.frames.iter().flatten().count() as u64,
        })
    }

    /// Writes bytes into a region's frames (for the loader), filling zero-on-touch pages.
    pub fn write<M: Machine>(&mut self, m: &mut M, id: RegionId, offset: u64, bytes: &[u8], to_virt: impl Fn(PhysAddr) -> *mut u8) -> Result<(), ViewError> {
        let r = self.regions.get_mut(&id).ok_or(ViewError::NoRegion)?;
        let len = r.frames.len() as u64 * PAGE_SIZE;
        if offset.checked_add(bytes.len() as u64).is_none_or(|e| e > len) {
            return Err(ViewError::BadRange(offset));
        }
        let mut done = 0usize;
        while done < bytes.len() {
            let at = offset + done as u64;
            let page = (at / PAGE_SIZE) as usize;
            let frame = match r.frames[page] {
                Some(f) => f,
                None => {
                    let f = m.allocate_zeroed().ok_or(ViewError::NoMemory)?;
                    r.frames[page] = Some(f);
                    f
                }
            };
            let in_page = (at % PAGE_SIZE) as usize;
            let n = (PAGE_SIZE as usize - in_page).min(bytes.len() - done);
            let dst = to_virt(PhysAddr::new(frame.start().as_u64() + in_page as u64));
            // SAFETY: `to_virt` maps the region's own frame; n bytes stay inside the page.
            unsafe { core::ptr::copy_nonoverlapping(bytes[done..].as_ptr(), dst, n) };
            done += n;
        }
        Ok(())
    }

    /// Reads bytes from a region's frames; pages never touched read as zero.
    pub fn read(&self, id: RegionId, offset: u64, out: &mut [u8], to_virt: impl Fn(PhysAddr) -> *const u8) -> Result<(), ViewError> {
        let r = self.regions.get(&id).ok_or(ViewError::NoRegion)?;
        let len = r.frames.len() as u64 * PAGE_SIZE;
        if offset.checked_add(out.len() as u64).is_none_or(|e| e > len) {
            return Err(ViewError::BadRange(offset));
        }
        let mut done = 0usize;
        while done < out.len() {
            let at = offset + done as u64;
            let page = (at / PAGE_SIZE) as usize;
            let in_page = (at % PAGE_SIZE) as usize;
            let n = (PAGE_SIZE as usize - in_page).min(out.len() - done);
            match r.frames[page] {
                Some(frame) => {
                    let src = to_virt(PhysAddr::new(frame.start().as_u64() + in_page as u64));
                    // SAFETY: `to_virt` maps the region's own frame; n bytes stay inside the page.
                    unsafe { core::ptr::copy_nonoverlapping(src, out[done..].as_mut_ptr(), n) };
                }
                None => out[done..done + n].fill(0),
            }
            done += n;
        }
        Ok(())
    }

    /// The owner lets go of a region; it is freed once no view holds it either.
    pub fn release_region<M: Machine>(&mut self, m: &mut M, id: RegionId) -> Result<(), ViewError> {
        let r = self.regions.get_mut(&id).ok_or(ViewError::NoRegion)?;
        if r.owner_refs == 0 {
            return Err(ViewError::NoRegion);
        }
        r.owner_refs -= 1;
        self.maybe_free_region(m, id);
        Ok(())
    }

    fn maybe_free_region<M: Machine>(&mut self, m: &mut M, id: RegionId) {
        let Some(r) = self.regions.get(&id) else { return };
        if r.owner_refs > 0 || r.view_refs > 0 {
            return;
        }
        let r = self.regions.remove(&id).expect("present");
        self.by_start.remove(&r.start.as_u64());
        self.freed.push(id);
        let frames = if self.defer {
            match self.deferred.keep_frames(r.frames) {
                None => return,
                Some(frames) => frames,
            }
        } else {
            r.frames
        };
        for f in frames.into_iter().flatten() {
            m.free_frame(f);
        }
    }

    /// The view for exactly `set` (rights per region), made if needed, with one more thread
    /// attached. Regions listed twice keep the last rights; empty rights drop the region.
    pub fn attach<M: Machine>(&mut self, m: &mut M, set: &[(RegionId, MapFlags)]) -> Result<ViewId, ViewError> {
        let mut canon: Vec<(RegionId, MapFlags)> = Vec::new();
        canon.try_reserve(set.len()).map_err(|_| ViewError::NoMemory)?;
        for &(r, rights) in set {
            check_rights(rights)?;
            if !self.regions.contains_key(&r) {
                return Err(ViewError::NoRegion);
            }
            canon.push((r, rights));
        }
        // Sort (stable: a region listed twice keeps its entries in order), then keep the last
        // entry of each region: O(n log n) — and O(n) for the usual caller, which lists an
        // existing view's sorted set and one changed region after it (the sort finds runs).
        canon.sort_by_key(|(id, _)| *id);
        let mut kept = 0;
        for i in 0..canon.len() {
            if i + 1 < canon.len() && canon[i + 1].0 == canon[i].0 {
                continue;
            }
            if !canon[i].1.is_empty() {
                canon[kept] = canon[i];
                kept += 1;
            }
        }
        canon.truncate(kept);
        if let Some(&v) = self.index.get(&canon) {
            self.views.get_mut(&v).expect("indexed view exists").threads += 1;
            return Ok(v);
        }
        let table = match set.last().and_then(|&(last, _)| self.base_for(&canon, last)) {
            Some((base, added)) => self.derive_table(m, base, added)?,
            None => self.build_table(m, &canon)?,
        };
        Ok(self.intern(canon, table))
    }

    /// The view equal to `from` except that region `r` has `rights` (empty: without `r`), with
    /// one more thread attached; `from` keeps its threads. Made if needed in bounded work:
    /// `from`'s table copied without `r` ([`COPY_BUDGET`]), then `r` mapped ([`MAP_BUDGET`]).
    pub fn attach_changed<M: Machine>(&mut self, m: &mut M, from: ViewId, r: RegionId, rights: MapFlags) -> Result<ViewId, ViewError> {
        check_rights(rights)?;
        if !self.regions.contains_key(&r) {
            return Err(ViewError::NoRegion);
        }
        let base = &self.views.get(&from).ok_or(ViewError::NoView)?.set;
        let mut canon: Vec<(RegionId, MapFlags)> = Vec::new();
        canon.try_reserve(base.len() + 1).map_err(|_| ViewError::NoMemory)?;
        canon.extend_from_slice(base);
        match canon.binary_search_by_key(&r, |(id, _)| *id) {
            Ok(i) if rights.is_empty() => {
                canon.remove(i);
            }
            Ok(i) => canon[i].1 = rights,
            Err(_) if rights.is_empty() => {}
            Err(i) => canon.insert(i, (r, rights)),
        }
        if let Some(&v) = self.index.get(&canon) {
            self.views.get_mut(&v).expect("indexed view exists").threads += 1;
            return Ok(v);
        }
        let table = self.derive_table(m, from, (r, rights))?;
        Ok(self.intern(canon, table))
    }

    /// Records a new view of set `canon` (sorted, checked) with `table` and one thread.
    fn intern(&mut self, canon: Vec<(RegionId, MapFlags)>, table: PageTable<F>) -> ViewId {
        for (r, _) in &canon {
            self.regions.get_mut(r).expect("checked").view_refs += 1;
        }
        let v = ViewId(self.next_view);
        self.next_view += 1;
        self.views_built += 1;
        self.index.insert(canon.clone(), v);
        self.views.insert(v, ViewObj { set: canon, table, threads: 1 });
        v
    }

    /// A live view that `canon` extends by region `added` alone (so its table can be copied
    /// rather than built): the view whose set is `canon` without `added`, if there is one.
    /// A thread that makes a region gets it this way (its view plus the new region).
    fn base_for(&self, canon: &[(RegionId, MapFlags)], added: RegionId) -> Option<(ViewId, (RegionId, MapFlags))> {
        let at = canon.binary_search_by_key(&added, |(id, _)| *id).ok()?;
        let mut without = Vec::new();
        without.try_reserve_exact(canon.len() - 1).ok()?;
        without.extend_from_slice(&canon[..at]);
        without.extend_from_slice(&canon[at + 1..]);
        self.index.get(&without).map(|&v| (v, canon[at]))
    }

    /// The table of view `base` with region `changed` given `rights` (empty: left out): a copy
    /// of `base`'s table without `changed`'s range (what `base` has mapped elsewhere holds for
    /// the new view too: same regions, same rights), then `changed`'s resident pages mapped.
    /// Bounded: at most [`COPY_BUDGET`] table frames copied and [`MAP_BUDGET`] pages visited;
    /// what is left out is mapped on first touch.
    fn derive_table<M: Machine>(&self, m: &mut M, base: ViewId, changed: (RegionId, MapFlags)) -> Result<PageTable<F>, ViewError> {
        let mem = m.memory();
        let mut table = PageTable::new(&mem, &mut MachineTables(m))?;
        let shared = self.kernel.as_ref().map(|(_, r)| r.clone()).unwrap_or(0..0);
        if let Some((kernel, shared)) = &self.kernel {
            table.share_root_entries(&mem, kernel, shared.clone());
        }
        let base = &self.views.get(&base).expect("indexed view exists").table;
        let (id, rights) = changed;
        let r = &self.regions[&id];
        let skip = r.start.as_u64()..r.end();
        let (mut pages, mut tables) = self.budget;
        let copied = table
            .copy_root_entries_bounded(&mem, &mut MachineTables(m), base, 0..shared.start, &skip, &mut tables)
            .and_then(|()| table.copy_root_entries_bounded(&mem, &mut MachineTables(m), base, shared.end.max(shared.start)..F::ENTRIES, &skip, &mut tables));
        if let Err(e) = copied {
            self.free_table(m, table);
            return Err(e.into());
        }
        if !rights.is_empty() {
            if let Err(e) = self.map_region(m, &mut table, id, rights, &mut pages) {
                self.free_table(m, table);
                return Err(e);
            }
        }
        Ok(table)
    }

    /// A table for `set` made from nothing: at most [`MAP_BUDGET`] pages of its regions visited
    /// (in the set's order) and mapped; the rest is mapped on first touch.
    fn build_table<M: Machine>(&self, m: &mut M, set: &[(RegionId, MapFlags)]) -> Result<PageTable<F>, ViewError> {
        let mem = m.memory();
        let mut table = PageTable::new(&mem, &mut MachineTables(m))?;
        if let Some((kernel, shared)) = &self.kernel {
            table.share_root_entries(&mem, kernel, shared.clone());
        }
        let mut pages = self.budget.0;
        for (id, rights) in set {
            if let Err(e) = self.map_region(m, &mut table, *id, *rights, &mut pages) {
                self.free_table(m, table);
                return Err(e);
            }
        }
        Ok(table)
    }

    /// Maps the resident pages of region `id` with `rights` into `table` (a new table, active
    /// nowhere: nothing to invalidate), visiting at most `*pages` pages (counted off).
    fn map_region<M: Machine>(&self, m: &mut M, table: &mut PageTable<F>, id: RegionId, rights: MapFlags, pages: &mut usize) -> Result<(), ViewError> {
        let mem = m.memory();
        let r = &self.regions[&id];
        let n = r.frames.len().min(*pages);
        *pages -= n;
        for (i, frame) in r.frames[..n].iter().enumerate() {
            let Some(frame) = frame else { continue };
            let va = VirtAddr::new(r.start.as_u64() + i as u64 * PAGE_SIZE);
            table.map(&mem, &mut MachineTables(m), va, *frame, rights | MapFlags::USER, 0)?.ignore();
        }
        Ok(())
    }

    fn free_table<M: Machine>(&self, m: &mut M, table: PageTable<F>) {
        free_table_of(m, &self.deferred.shared, table);
    }

    /// One more thread attached to the live view `v` (what [`attach`](Self::attach) of `v`'s own
    /// set does, in O(1)): for moving the many threads of one view to the same new view.
    pub fn attach_again(&mut self, v: ViewId) -> Result<(), ViewError> {
        self.views.get_mut(&v).ok_or(ViewError::NoView)?.threads += 1;
        Ok(())
    }

    /// One thread leaves view `v`; the view (and its table) is freed with its last thread.
    pub fn detach<M: Machine>(&mut self, m: &mut M, v: ViewId) -> Result<(), ViewError> {
        let view = self.views.get_mut(&v).ok_or(ViewError::NoView)?;
        view.threads -= 1;
        if view.threads > 0 {
            return Ok(());
        }
        let view = self.views.remove(&v).expect("present");
        self.index.remove(&view.set);
        self.freed_roots.push(view.table.root());
        let table = if self.defer { self.deferred.keep_table(view.table) } else { Some(view.table) };
        if let Some(table) = table {
            self.free_table(m, table);
        }
        for (r, _) in view.set {
            self.regions.get_mut(&r).expect("a view's regions live").view_refs -= 1;
            self.maybe_free_region(m, r);
        }
        Ok(())
    }

    /// Moves one thread from view `v` to the view equal to `v` except that region `r` has
    /// `rights` (empty = revoked). Returns the new view (possibly `v` itself).
    pub fn change_rights<M: Machine>(&mut self, m: &mut M, v: ViewId, r: RegionId, rights: MapFlags) -> Result<ViewId, ViewError> {
        let new = self.attach_changed(m, v, r, rights)?;
        self.detach(m, v)?;
        Ok(new)
    }

    /// The rights view `v` holds on region `r` (empty if none).
    pub fn rights(&self, v: ViewId, r: RegionId) -> MapFlags {
        self.views
            .get(&v)
            .and_then(|view| view.set.binary_search_by_key(&r, |(id, _)| *id).ok().map(|i| view.set[i].1))
            .unwrap_or(MapFlags::empty())
    }

    /// The canonical set of view `v`.
    pub fn set(&self, v: ViewId) -> Option<&[(RegionId, MapFlags)]> {
        self.views.get(&v).map(|view| view.set.as_slice())
    }

    /// The root frame of view `v`'s page table.
    pub fn root(&self, v: ViewId) -> Option<Frame> {
        self.views.get(&v).map(|view| view.table.root())
    }

    /// Threads attached to view `v`.
    pub fn threads(&self, v: ViewId) -> usize {
        self.views.get(&v).map_or(0, |view| view.threads)
    }

    /// Number of live views, live regions, and views ever built.
    pub fn counts(&self) -> (usize, usize, u64) {
        (self.views.len(), self.regions.len(), self.views_built)
    }

    /// Checks that view `v` may touch `[addr, addr+len)` with `need` rights.
    pub fn check(&self, v: ViewId, addr: u64, len: u64, need: MapFlags) -> Result<(), RangeError> {
        if len == 0 {
            return Ok(());
        }
        let end = addr.checked_add(len).ok_or(RangeError::Overflow)?;
        // The view's set once; each region found by one search of the start index and one of
        // the region table (a range within one region, the usual case, costs one round).
        let set = self.views.get(&v).map_or(&[][..], |view| view.set.as_slice());
        let mut at = addr;
        while at < end {
            let (_, id) = self.by_start.range(..=at).next_back().ok_or(RangeError::Unmapped(at))?;
            let region_end = self.regions[id].end();
            if region_end <= at {
                return Err(RangeError::Unmapped(at));
            }
            let rights = set.binary_search_by_key(id, |(r, _)| *r).map_or(MapFlags::empty(), |i| set[i].1);
            if !rights.contains(need) {
                return Err(RangeError::Denied(at));
            }
            at = region_end;
        }
        Ok(())
    }

    /// Makes sure every page of `[addr, addr+len)` that view `v` may touch is backed and mapped
    /// (so the kernel can copy there without faulting). Call after [`check`](Self::check).
    pub fn populate<M: Machine>(&mut self, m: &mut M, v: ViewId, addr: u64, len: u64) -> Result<(), ViewError> {
        // An empty range passes `check` anywhere, even in the last page of the address space,
        // where stepping past the page would overflow (found by the syscall fuzzer).
        let end = addr.saturating_add(len);
        let mut page = addr / PAGE_SIZE * PAGE_SIZE;
        while page < end {
            match self.fault(m, v, page, MapFlags::READ)? {
                Fault::Filled | Fault::Mapped | Fault::Denied { .. } | Fault::Unmapped => {}
            }
            let Some(next) = page.checked_add(PAGE_SIZE) else { break };
            page = next;
        }
        Ok(())
    }

    /// Resolves a page fault of view `v` at `addr` for an access needing `need`: fills and maps
    /// a zero-on-touch page, or maps a page another view already filled, or says why not.
    pub fn fault<M: Machine>(&mut self, m: &mut M, v: ViewId, addr: u64, need: MapFlags) -> Result<Fault, ViewError> {
        let Some(r) = self.region_at(addr) else { return Ok(Fault::Unmapped) };
        let rights = self.rights(v, r);
        if rights.is_empty() || !rights.contains(need) {
            return Ok(Fault::Denied { region: r, rights });
        }
        let region = self.regions.get_mut(&r).expect("found");
        let page = ((addr - region.start.as_u64()) / PAGE_SIZE) as usize;
        let va = VirtAddr::new(region.start.as_u64() + page as u64 * PAGE_SIZE);
        let (frame, filled) = match region.frames[page] {
            Some(f) => (f, false),
            None => {
                let f = m.allocate_zeroed().ok_or(ViewError::NoMemory)?;
                region.frames[page] = Some(f);
                (f, true)
            }
        };
        let view = self.views.get_mut(&v).ok_or(ViewError::NoView)?;
        let mem = m.memory();
        match view.table.map(&mem, &mut MachineTables(m), va, frame, rights | MapFlags::USER, 0) {
            // Not-present to present: no stale translation can exist, nothing to invalidate.
            Ok(flush) => flush.ignore(),
            Err(MapError::AlreadyMapped(_)) => return Ok(if filled { Fault::Filled } else { Fault::Mapped }),
            Err(e) => return Err(e.into()),
        }
        if !filled {
            // A resident page this view had not mapped (left out by a bounded change, or
            // filled through another view): its resident neighbours most likely were too.
            let first = page as u64 / FAULT_AROUND * FAULT_AROUND;
            let last = (first + FAULT_AROUND).min(region.frames.len() as u64);
            for p in first..last {
                let Some(f) = region.frames[p as usize] else { continue };
                let at = VirtAddr::new(region.start.as_u64() + p * PAGE_SIZE);
                match view.table.map(&mem, &mut MachineTables(m), at, f, rights | MapFlags::USER, 0) {
                    Ok(flush) => flush.ignore(),
                    Err(MapError::AlreadyMapped(_)) => {}
                    // Out of table frames: the faulting page is mapped, the rest can wait.
                    Err(_) => break,
                }
            }
        }
        Ok(if filled { Fault::Filled } else { Fault::Mapped })
    }

    /// Regions of view `v` with their rights, in address order.
    pub fn view_regions(&self, v: ViewId) -> Vec<(RegionInfo, MapFlags)> {
        let mut out: Vec<(RegionInfo, MapFlags)> = self
            .set(v)
            .unwrap_or(&[])
            .iter()
            .filter_map(|(r, rights)| self.region_info(*r).map(|i| (i, *rights)))
            .collect();
        out.sort_by_key(|(i, _)| i.start);
        out
    }

    /// The translation of `va` in view `v`'s table (tests and self-tests).
    pub fn translate<M: Machine>(&self, m: &M, v: ViewId, va: VirtAddr) -> Option<(PhysAddr, MapFlags)> {
        self.views.get(&v)?.table.translate(&m.memory(), va)
    }

    /// Regions freed since the last call (so their address ranges can be handed out again).
    pub fn take_freed(&mut self) -> Vec<RegionId> {
        core::mem::take(&mut self.freed)
    }

    /// Whether regions or view roots were freed since they were last taken (the common case
    /// after a view-space call is no: then there is nothing to reclaim).
    #[inline]
    pub fn has_freed(&self) -> bool {
        !self.freed.is_empty() || !self.freed_roots.is_empty()
    }

    /// Roots of the views freed since the last call.
    pub fn take_freed_roots(&mut self) -> Vec<Frame> {
        core::mem::take(&mut self.freed_roots)
    }

    /// Whether region `id` still exists.
    pub fn region_exists(&self, id: RegionId) -> bool {
        self.regions.contains_key(&id)
    }

    /// The backing of a region.
    pub fn backing(&self, id: RegionId) -> Option<Backing> {
        self.regions.get(&id).map(|r| r.backing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mm::machine::fake::FakeMachine;
    use arch::paging::X86_64;
    use proptest::prelude::*;
    use std::collections::BTreeMap as Map;

    const R: MapFlags = MapFlags::READ;
    const RW: MapFlags = MapFlags::READ.union(MapFlags::WRITE);
    const RX: MapFlags = MapFlags::READ.union(MapFlags::EXEC);

    fn space() -> ViewSpace<X86_64> {
        ViewSpace::new(None)
    }

    #[test]
    fn deferred_frees_leave_the_locked_call_bounded() {
        // With frees deferred (the kernel's setting), a detach that frees a view with a large
        // table and a release that frees a large region give back nothing inside the call (run
        // under the view-space lock): all of it waits for `Deferred::free`, after the lock.
        let mut m = FakeMachine::new(20_000);
        let mut s = space();
        s.defer_frees();
        let big = s.create_region(&mut m, VirtAddr::new(0x4000_0000), 4096, RegionKind::Shared, Backing::Eager).unwrap();
        let v = s.attach(&mut m, &[(big, RW)]).unwrap();
        for p in (0..4096u64).step_by(FAULT_AROUND as usize) {
            s.fault(&mut m, v, 0x4000_0000 + p * PAGE_SIZE, R).unwrap();
        }
        s.release_region(&mut m, big).unwrap();
        let live = m.live();
        assert!(live > 4096 + 8, "the region's frames and a root, two upper and eight leaf tables");
        s.detach(&mut m, v).unwrap();
        assert!(!s.region_exists(big));
        assert_eq!(m.live(), live, "nothing freed inside the call");
        let deferred = s.take_deferred().expect("the view's table and the region's frames wait");
        assert_eq!(deferred.waiting(), (1, 4096));
        assert!(s.take_deferred().is_none(), "taken once");
        deferred.free(&mut m);
        assert_eq!(m.live(), 0, "every frame and table is returned after the call");
    }

    #[test]
    fn an_eager_region_from_frames_taken_before_allocates_nothing() {
        let mut m = FakeMachine::new(100);
        let mut s = space();
        let frames: Vec<Option<Frame>> = (0..8).map(|_| m.allocate_zeroed()).collect();
        let live = m.live();
        let a = s.create_region_from(VirtAddr::new(0x40_0000), RegionKind::Shared, frames).unwrap();
        assert_eq!(m.live(), live, "the call under the lock takes no frame");
        assert_eq!(s.region_info(a).unwrap().resident_pages, 8);
        assert_eq!(s.backing(a), Some(Backing::Eager));
        // An overlapping one is refused and its frames come back to the caller.
        let more: Vec<Option<Frame>> = (0..2).map(|_| m.allocate_zeroed()).collect();
        let (e, back) = s.create_region_from(VirtAddr::new(0x40_4000), RegionKind::Shared, more).unwrap_err();
        assert_eq!(e, ViewError::BadRange(0x40_4000));
        assert_eq!(back.len(), 2);
        for f in back.into_iter().flatten() {
            m.free_frame(f);
        }
        s.release_region(&mut m, a).unwrap();
        assert_eq!(m.live(), 0);
    }

    #[test]
    fn a_change_reaching_too_many_views_is_refused() {
        // 1,024 threads in 16 views: one change may make them all; a 17th view is one too many
        // (whatever its place), and threads without a view do not count.
        let in_16 = (0..1024u64).map(|t| Some(ViewId(1 + t % 16)));
        assert!(views_within(in_16, MAX_VIEWS_PER_CHANGE));
        let in_17 = (0..1024u64).map(|t| Some(ViewId(1 + t % 17)));
        assert!(!views_within(in_17, MAX_VIEWS_PER_CHANGE));
        let last_differs = (0..1024u64).map(|t| Some(ViewId(if t == 1023 { 99 } else { 1 + t % 16 })));
        assert!(!views_within(last_differs, MAX_VIEWS_PER_CHANGE));
        let with_none = (0..1024u64).map(|t| if t % 2 == 0 { None } else { Some(ViewId(1 + t % 32)) });
        assert!(views_within(with_none, MAX_VIEWS_PER_CHANGE), "odd threads use the 16 odd views");
        assert!(views_within(core::iter::empty(), MAX_VIEWS_PER_CHANGE));
        assert!(!views_within([Some(ViewId(1)), Some(ViewId(2))], 1));
    }

    #[test]
    fn attach_again_counts_one_more_thread() {
        let mut m = FakeMachine::new(1000);
        let mut s = space();
        let a = s.create_region(&mut m, VirtAddr::new(0x40_0000), 2, RegionKind::Data, Backing::Eager).unwrap();
        let v = s.attach(&mut m, &[(a, RW)]).unwrap();
        s.attach_again(v).unwrap();
        assert_eq!(s.threads(v), 2);
        s.detach(&mut m, v).unwrap();
        assert!(s.root(v).is_some(), "one thread still holds it");
        s.detach(&mut m, v).unwrap();
        assert!(s.root(v).is_none(), "freed with its last thread");
        assert!(matches!(s.attach_again(v), Err(ViewError::NoView)));
    }

    #[test]
    fn identical_views_share_a_table() {
        let mut m = FakeMachine::new(1000);
        let mut s = space();
        let a = s.create_region(&mut m, VirtAddr::new(0x40_0000), 4, RegionKind::Data, Backing::Eager).unwrap();
        let b = s.create_region(&mut m, VirtAddr::new(0x80_0000), 2, RegionKind::Text, Backing::Eager).unwrap();
        let v1 = s.attach(&mut m, &[(a, RW), (b, RX)]).unwrap();
        let v2 = s.attach(&mut m, &[(b, RX), (a, RW)]).unwrap();
        assert_eq!(v1, v2);
        assert_eq!(s.threads(v1), 2);
        let v3 = s.change_rights(&mut m, v2, a, R).unwrap();
        assert_ne!(v3, v1);
        assert_eq!(s.threads(v1), 1);
        assert_eq!(s.translate(&m, v3, VirtAddr::new(0x40_0000)).unwrap().1, R | MapFlags::USER);
        assert_eq!(s.translate(&m, v1, VirtAddr::new(0x40_0000)).unwrap().1, RW | MapFlags::USER);
        // Revoking a again lands on a view without it.
        let v4 = s.change_rights(&mut m, v3, a, MapFlags::empty()).unwrap();
        assert_eq!(s.translate(&m, v4, VirtAddr::new(0x40_0000)), None);
        assert_eq!(s.check(v4, 0x40_0000, 1, R), Err(RangeError::Denied(0x40_0000)));
        assert!(s.check(v4, 0x80_0000, 8, R).is_ok());
    }

    #[test]
    fn a_view_plus_a_region_is_derived_from_the_view() {
        let mut m = FakeMachine::new(1000);
        let mut s = space();
        let a = s.create_region(&mut m, VirtAddr::new(0x40_0000), 4, RegionKind::Data, Backing::Eager).unwrap();
        let b = s.create_region(&mut m, VirtAddr::new(0x80_0000), 4, RegionKind::Heap, Backing::ZeroOnTouch).unwrap();
        let c = s.create_region(&mut m, VirtAddr::new(0x4000_0000), 2, RegionKind::Heap, Backing::ZeroOnTouch).unwrap();
        let v1 = s.attach(&mut m, &[(a, RW), (b, R)]).unwrap();
        assert_eq!(s.fault(&mut m, v1, 0x80_2000, R).unwrap(), Fault::Filled);
        // c gets a resident page through another view first.
        let vc = s.attach(&mut m, &[(c, RW)]).unwrap();
        assert_eq!(s.fault(&mut m, vc, 0x4000_1000, MapFlags::WRITE).unwrap(), Fault::Filled);
        // The way the region syscall asks: v1's set, then the new region.
        let mut set = s.set(v1).unwrap().to_vec();
        set.push((c, R));
        let v2 = s.attach(&mut m, &set).unwrap();
        assert_ne!(s.root(v2), s.root(v1));
        assert_eq!(s.translate(&m, v2, VirtAddr::new(0x40_3000)).unwrap().1, RW | MapFlags::USER);
        assert_eq!(s.translate(&m, v2, VirtAddr::new(0x80_2000)), s.translate(&m, v1, VirtAddr::new(0x80_2000)));
        assert_eq!(s.translate(&m, v2, VirtAddr::new(0x4000_1000)).unwrap().1, R | MapFlags::USER);
        assert_eq!(s.translate(&m, v1, VirtAddr::new(0x4000_1000)), None, "the base did not gain the region");
        // A fault in the derived view does not reach the base.
        assert_eq!(s.fault(&mut m, v2, 0x80_3000, R).unwrap(), Fault::Filled);
        assert_eq!(s.translate(&m, v1, VirtAddr::new(0x80_3000)), None);
        for v in [v1, v2, vc] {
            s.detach(&mut m, v).unwrap();
        }
        for r in [a, b, c] {
            s.release_region(&mut m, r).unwrap();
        }
        assert_eq!(m.live(), 0, "every frame and table is returned");
    }

    #[test]
    fn a_change_beside_a_large_region_is_bounded_and_the_rest_faults_in() {
        let mut m = FakeMachine::new(10_000);
        let mut s = space();
        s.set_budget(16, 3);
        // 1,500 pages over three leaf tables, and a one-page region.
        let big = s.create_region(&mut m, VirtAddr::new(0x4000_0000), 1500, RegionKind::Shared, Backing::Eager).unwrap();
        let small = s.create_region(&mut m, VirtAddr::new(0x8000_0000), 1, RegionKind::Shared, Backing::Eager).unwrap();
        let v = s.attach(&mut m, &[(big, RW), (small, RW)]).unwrap();
        let mapped = |s: &ViewSpace<X86_64>, m: &FakeMachine, v| (0..1500u64).filter(|p| s.translate(m, v, VirtAddr::new(0x4000_0000 + p * PAGE_SIZE)).is_some()).count();
        assert_eq!(mapped(&s, &m, v), 16, "a view made from nothing maps the budget's pages");
        for p in 0..1500u64 {
            assert_eq!(s.fault(&mut m, v, 0x4000_0000 + p * PAGE_SIZE, R).unwrap(), Fault::Mapped);
        }
        assert_eq!(mapped(&s, &m, v), 1500);
        // Revoking the small region: the copy makes 3 tables (two upper, the first leaf table);
        // the big region's other two leaf tables are left to first touch.
        let before = m.live();
        let w = s.attach_changed(&mut m, v, small, MapFlags::empty()).unwrap();
        assert_eq!(m.live() - before, 1 + 3, "the root and three copied tables");
        assert_eq!(mapped(&s, &m, w), 512);
        assert_eq!(s.translate(&m, w, VirtAddr::new(0x8000_0000)), None);
        // Narrowing the big region: none of its pages copied, 16 mapped read-only.
        let x = s.attach_changed(&mut m, w, big, R).unwrap();
        assert_eq!(mapped(&s, &m, x), 16);
        assert_eq!(s.translate(&m, x, VirtAddr::new(0x4000_0000)).unwrap().1, R | MapFlags::USER);
        // The rest faults in, read-only; a write is denied.
        assert_eq!(s.fault(&mut m, x, 0x4000_0000 + 1499 * PAGE_SIZE, R).unwrap(), Fault::Mapped);
        assert_eq!(s.translate(&m, x, VirtAddr::new(0x4000_0000 + 1499 * PAGE_SIZE)).unwrap().1, R | MapFlags::USER);
        assert_eq!(mapped(&s, &m, x), 16 + (1500 - 1472), "the fault mapped its block of FAULT_AROUND pages");
        assert_eq!(s.fault(&mut m, x, 0x4000_0000 + 1000 * PAGE_SIZE, MapFlags::WRITE).unwrap(), Fault::Denied { region: big, rights: R });
        for view in [v, w, x] {
            s.detach(&mut m, view).unwrap();
        }
        for r in [big, small] {
            s.release_region(&mut m, r).unwrap();
        }
        assert_eq!(m.live(), 0, "every frame and table is returned");
    }

    #[test]
    fn frames_freed_with_the_last_reference() {
        let mut m = FakeMachine::new(1000);
        let mut s = space();
        let a = s.create_region(&mut m, VirtAddr::new(0x40_0000), 4, RegionKind::Shared, Backing::Eager).unwrap();
        let v = s.attach(&mut m, &[(a, RW)]).unwrap();
        s.release_region(&mut m, a).unwrap();
        assert!(s.region_exists(a), "still in a view");
        s.detach(&mut m, v).unwrap();
        assert!(!s.region_exists(a));
        assert_eq!(m.live(), 0);
    }

    #[test]
    fn zero_on_touch_fills_once_and_maps_per_view() {
        let mut m = FakeMachine::new(1000);
        let mut s = space();
        let a = s.create_region(&mut m, VirtAddr::new(0x40_0000), 4, RegionKind::Heap, Backing::ZeroOnTouch).unwrap();
        let v1 = s.attach(&mut m, &[(a, RW)]).unwrap();
        let v2 = s.attach(&mut m, &[(a, R)]).unwrap();
        assert_eq!(s.fault(&mut m, v1, 0x40_1234, MapFlags::WRITE).unwrap(), Fault::Filled);
        assert_eq!(s.fault(&mut m, v2, 0x40_1000, MapFlags::WRITE).unwrap(), Fault::Denied { region: a, rights: R });
        assert_eq!(s.fault(&mut m, v2, 0x40_1000, R).unwrap(), Fault::Mapped);
        assert_eq!(s.translate(&m, v1, VirtAddr::new(0x40_1000)).unwrap().0, s.translate(&m, v2, VirtAddr::new(0x40_1000)).unwrap().0);
        assert_eq!(s.fault(&mut m, v1, 0x90_0000, R).unwrap(), Fault::Unmapped);
        assert_eq!(s.region_info(a).unwrap().resident_pages, 1);
    }

    #[test]
    fn populate_at_the_top_of_the_address_space_ends() {
        // An empty or a wrapping range in the last page passes or fails `check` without the
        // page walk overflowing (a syscall fuzzer's find: `console_write(u64::MAX - 7, 0)`).
        let mut m = FakeMachine::new(1000);
        let mut s = space();
        let a = s.create_region(&mut m, VirtAddr::new(0x40_0000), 1, RegionKind::Heap, Backing::ZeroOnTouch).unwrap();
        let v = s.attach(&mut m, &[(a, RW)]).unwrap();
        for addr in [u64::MAX, u64::MAX - 7, u64::MAX - PAGE_SIZE + 1, 0xffff_ffff_ffff_f000] {
            for len in [0, 1, 8, PAGE_SIZE, u64::MAX] {
                s.populate(&mut m, v, addr, len).unwrap();
            }
        }
        assert_eq!(s.region_info(a).unwrap().resident_pages, 0);
    }

    #[test]
    fn exhaustion_is_an_error_and_leaks_nothing() {
        let mut m = FakeMachine::new(10);
        let mut s = space();
        assert_eq!(s.create_region(&mut m, VirtAddr::new(0x40_0000), 20, RegionKind::Heap, Backing::Eager), Err(ViewError::NoMemory));
        assert_eq!(m.live(), 0);
        let a = s.create_region(&mut m, VirtAddr::new(0x40_0000), 9, RegionKind::Heap, Backing::Eager).unwrap();
        // A view needs table frames too: 9 + 4 > 10.
        assert_eq!(s.attach(&mut m, &[(a, RW)]), Err(ViewError::NoMemory));
        assert_eq!(m.live(), 9);
        s.release_region(&mut m, a).unwrap();
        assert_eq!(m.live(), 0);
    }

    #[test]
    fn rejects_bad_requests() {
        let mut m = FakeMachine::new(100);
        let mut s = space();
        let a = s.create_region(&mut m, VirtAddr::new(0x40_0000), 2, RegionKind::Data, Backing::Eager).unwrap();
        assert_eq!(s.create_region(&mut m, VirtAddr::new(0x40_1000), 2, RegionKind::Data, Backing::Eager), Err(ViewError::BadRange(0x40_1000)));
        assert_eq!(s.create_region(&mut m, VirtAddr::new(0x40_0001), 1, RegionKind::Data, Backing::Eager), Err(ViewError::BadRange(0x40_0001)));
        assert_eq!(s.create_region(&mut m, VirtAddr::new(0x7fff_ffff_f000), 2, RegionKind::Data, Backing::Eager), Err(ViewError::BadRange(0x7fff_ffff_f000)));
        assert_eq!(s.attach(&mut m, &[(a, RW | MapFlags::EXEC)]), Err(ViewError::BadRights(RW | MapFlags::EXEC)));
        assert_eq!(s.attach(&mut m, &[(RegionId(99), R)]), Err(ViewError::NoRegion));
    }

    /// Operations of the model test.
    #[derive(Clone, Debug)]
    enum Op {
        Create { slot: u64, pages: u64, lazy: bool },
        Release(usize),
        Attach(Vec<(usize, u8)>),
        Detach(usize),
        Change { thread: usize, region: usize, rights: u8 },
        Touch { thread: usize, region: usize, page: u64, write: bool },
    }

    fn rights_of(code: u8) -> MapFlags {
        [MapFlags::empty(), R, RW, RX][code as usize % 4]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u64..8, 1u64..4, any::<bool>()).prop_map(|(slot, pages, lazy)| Op::Create { slot, pages, lazy }),
            (0usize..8).prop_map(Op::Release),
            proptest::collection::vec((0usize..8, 0u8..4), 0..4).prop_map(Op::Attach),
            (0usize..8).prop_map(Op::Detach),
            (0usize..8, 0usize..8, 0u8..4).prop_map(|(thread, region, rights)| Op::Change { thread, region, rights }),
            (0usize..8, 0usize..8, 0u64..4, any::<bool>()).prop_map(|(thread, region, page, write)| Op::Touch { thread, region, page, write }),
        ]
    }

    proptest! {
        /// After any sequence of operations: every view's table maps exactly its regions'
        /// resident pages with exactly its rights; identical views share a root; every live
        /// frame is owned by a region or a table; nothing mapped is freed.
        #[test]
        fn views_match_their_sets(
            ops in proptest::collection::vec(op(), 1..60),
            budget in 20usize..200,
            work in proptest::option::of((0usize..6, 0usize..4)),
        ) {
            let mut m = FakeMachine::new(budget);
            let mut s = space();
            // Tiny bounds on the work of making a view (some pages left to first touch), or
            // the kernel's, which these small views never reach (every resident page mapped).
            if let Some((pages, tables)) = work {
                s.set_budget(pages, tables);
            }
            // Model: regions owned (by slot), threads -> view.
            let mut owned: Vec<Option<RegionId>> = vec![None; 8];
            let mut known: Vec<RegionId> = Vec::new();
            let mut threads: Vec<ViewId> = Vec::new();
            for op in ops {
                match op {
                    Op::Create { slot, pages, lazy } => {
                        let start = VirtAddr::new(0x100_0000 + slot * 0x10_0000);
                        let backing = if lazy { Backing::ZeroOnTouch } else { Backing::Eager };
                        if let Ok(id) = s.create_region(&mut m, start, pages, RegionKind::Shared, backing) {
                            owned[slot as usize] = Some(id);
                            known.push(id);
                        }
                    }
                    Op::Release(slot) => {
                        if let Some(id) = owned[slot].take() {
                            s.release_region(&mut m, id).unwrap();
                        }
                    }
                    Op::Attach(set) => {
                        let live: Vec<RegionId> = known.iter().copied().filter(|r| s.region_exists(*r)).collect();
                        if live.is_empty() { continue; }
                        let set: Vec<(RegionId, MapFlags)> = set.iter().map(|(i, c)| (live[i % live.len()], rights_of(*c))).collect();
                        if let Ok(v) = s.attach(&mut m, &set) { threads.push(v); }
                    }
                    Op::Detach(t) => {
                        if threads.is_empty() { continue; }
                        let v = threads.remove(t % threads.len());
                        s.detach(&mut m, v).unwrap();
                    }
                    Op::Change { thread, region, rights } => {
                        let live: Vec<RegionId> = known.iter().copied().filter(|r| s.region_exists(*r)).collect();
                        if threads.is_empty() || live.is_empty() { continue; }
                        let t = thread % threads.len();
                        if let Ok(v) = s.change_rights(&mut m, threads[t], live[region % live.len()], rights_of(rights)) {
                            threads[t] = v;
                        }
                    }
                    Op::Touch { thread, region, page, write } => {
                        let live: Vec<RegionId> = known.iter().copied().filter(|r| s.region_exists(*r)).collect();
                        if threads.is_empty() || live.is_empty() { continue; }
                        let info = s.region_info(live[region % live.len()]).unwrap();
                        let addr = info.start.as_u64() + (page % (info.len / PAGE_SIZE)) * PAGE_SIZE;
                        let need = if write { MapFlags::WRITE } else { R };
                        let _ = s.fault(&mut m, threads[thread % threads.len()], addr, need);
                    }
                }
                // Invariants.
                let mut roots: Map<Frame, Vec<(RegionId, MapFlags)>> = Map::new();
                let mut region_frames = 0usize;
                for id in known.iter().filter(|r| s.region_exists(**r)) {
                    region_frames += s.region_info(*id).unwrap().resident_pages as usize;
                }
                for v in threads.iter() {
                    let set = s.set(*v).unwrap().to_vec();
                    let root = s.root(*v).unwrap();
                    if let Some(prev) = roots.insert(root, set.clone()) {
                        prop_assert_eq!(&prev, &set, "one root, two different views");
                    }
                    for id in known.iter().filter(|r| s.region_exists(**r)) {
                        let info = s.region_info(*id).unwrap();
                        let rights = s.rights(*v, *id);
                        for p in 0..info.len / PAGE_SIZE {
                            let va = VirtAddr::new(info.start.as_u64() + p * PAGE_SIZE);
                            match s.translate(&m, *v, va) {
                                Some((pa, flags)) => {
                                    prop_assert!(!rights.is_empty(), "view maps a region it does not hold");
                                    prop_assert_eq!(flags, rights | MapFlags::USER);
                                    prop_assert!(m.is_live(Frame::containing(pa)), "mapped frame was freed");
                                }
                                None => {
                                    // Unmapped is fine only for regions not held or pages not yet
                                    // resident / not yet faulted into this view (zero-on-touch),
                                    // or left to first touch by a bounded view change.
                                    if !rights.is_empty() && s.backing(*id) == Some(Backing::Eager) && work.is_none() {
                                        prop_assert!(false, "eager region page missing from a view that holds it");
                                    }
                                }
                            }
                        }
                    }
                }
                // Identical sets share one view.
                let mut by_set: Map<Vec<(RegionId, MapFlags)>, ViewId> = Map::new();
                for v in threads.iter() {
                    let set = s.set(*v).unwrap().to_vec();
                    if let Some(prev) = by_set.insert(set, *v) {
                        prop_assert_eq!(prev, *v);
                    }
                }
                prop_assert!(m.live() >= region_frames);
            }
            // Every page a view holds is reachable: a first touch maps it with exactly the
            // view's rights (what a bounded change left out included).
            let live: Vec<RegionId> = known.iter().copied().filter(|r| s.region_exists(*r)).collect();
            for v in threads.iter() {
                for id in live.iter() {
                    let info = s.region_info(*id).unwrap();
                    let rights = s.rights(*v, *id);
                    for p in 0..info.len / PAGE_SIZE {
                        let va = info.start.as_u64() + p * PAGE_SIZE;
                        match s.fault(&mut m, *v, va, R) {
                            Ok(Fault::Filled | Fault::Mapped) => {
                                prop_assert_eq!(s.translate(&m, *v, VirtAddr::new(va)).map(|(_, f)| f), Some(rights | MapFlags::USER));
                            }
                            Ok(Fault::Denied { rights: held, .. }) => prop_assert!(!held.contains(R), "a readable page denied"),
                            Ok(Fault::Unmapped) => prop_assert!(false, "a live region's page unmapped"),
                            Err(_) => {} // out of frames for a table or a zero-on-touch page
                        }
                    }
                }
            }
            // Tear down: everything is returned.
            for v in threads.drain(..) { s.detach(&mut m, v).unwrap(); }
            for slot in owned.iter_mut() { if let Some(id) = slot.take() { s.release_region(&mut m, id).unwrap(); } }
            prop_assert_eq!(m.live(), 0, "frames leaked");
            prop_assert_eq!(s.counts().0, 0);
            prop_assert_eq!(s.counts().1, 0);
        }
    }
}
