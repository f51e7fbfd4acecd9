//! The kernel's single [`ViewSpace`] (every region and view of the single address space, over
//! the real frame allocator and direct map) and the allocator of its user ranges.
//!
//! A range of the user half is handed out for a group of regions that must keep their relative
//! places (a program image) or for one region; it is given back when the last region inside it
//! is freed, so addresses are never reused while a region that had them lives.
//!
//! Lock order: `SPACE` before the frame allocator (which `KernelMachine` takes); nothing that
//! holds the frame allocator or a run-queue lock takes `SPACE`.

use alloc::collections::BTreeMap;
use arch::addr::{Frame, VirtAddr};
use arch::PageFormat;
use core::sync::atomic::{AtomicUsize, Ordering};
use arch::sync::Mutex;

use super::kernel_space::{allocate_zeroed_frame, kernel_root, with_frames, DirectMap, SHARED_KERNEL_ROOT_ENTRIES};
use super::machine::Machine;
use super::page_table::PageTable;
use super::user_range::UserRangeAllocator;
use super::view_space::{Deferred, RegionId, ViewSpace};

/// The machine as the view code sees it.
pub struct KernelMachine;

impl Machine for KernelMachine {
    type Memory = DirectMap;

    fn memory(&self) -> DirectMap {
        DirectMap
    }

    fn allocate_zeroed(&mut self) -> Option<Frame> {
        // Memory may only look exhausted: frees wait in `PENDING`.
        allocate_zeroed_frame().or_else(|| if free_pending_locked() { allocate_zeroed_frame() } else { None })
    }

    fn free_frame(&mut self, frame: Frame) {
        with_frames(|f| f.free(frame)).expect("a frame the view code owned");
    }
}

/// The view space and the range bookkeeping, under one lock.
pub struct Space {
    /// Regions and views.
    pub views: ViewSpace<PageFormat>,
    ranges: UserRangeAllocator,
    /// Live ranges: start -> (length asked for, regions inside still alive).
    range_users: BTreeMap<u64, (u64, usize)>,
    /// Region -> start of the range holding it.
    region_range: BTreeMap<RegionId, u64>,
}

static SPACE: Mutex<Option<Space>> = Mutex::new(None);

/// Creates the view space once the kernel table exists.
pub fn init() {
    // SAFETY: the kernel table is only read through this handle (its shared root entries are
    // copied into each view); its owner, kernel_space, never frees it.
    let kernel = unsafe { PageTable::from_root(kernel_root()) };
    let mut views = ViewSpace::new(Some((kernel, SHARED_KERNEL_ROOT_ENTRIES)));
    // Freed tables and region frames are given back after `SPACE` is dropped (`with_space`).
    views.defer_frees();
    *SPACE.lock() = Some(Space {
        views,
        ranges: UserRangeAllocator::new(arch::layout::USER_START, arch::layout::USER_END),
        range_users: BTreeMap::new(),
        region_range: BTreeMap::new(),
    });
}

impl Space {
    /// A fresh range of `len` bytes aligned to `align`.
    pub fn allocate_range(&mut self, len: u64, align: u64) -> Option<VirtAddr> {
        let at = self.ranges.allocate(len, align).ok()?;
        self.range_users.insert(at.as_u64(), (len, 0));
        Some(at)
    }

    /// Records that `region` lives inside the range starting at `range`.
    pub fn place(&mut self, region: RegionId, range: VirtAddr) {
        if let Some(users) = self.range_users.get_mut(&range.as_u64()) {
            users.1 += 1;
            self.region_range.insert(region, range.as_u64());
        }
    }

    /// Gives back a range no region was placed in (a failed load).
    pub fn abandon_range(&mut self, range: VirtAddr) {
        if let Some((len, 0)) = self.range_users.get(&range.as_u64()).copied() {
            self.range_users.remove(&range.as_u64());
            let _ = self.ranges.release(range, len);
        }
    }

    /// Gives back the ranges whose last region was freed, and the TLB tags of freed views.
    fn reclaim(&mut self) {
        if !self.views.has_freed() {
            return;
        }
        for root in self.views.take_freed_roots() {
            super::cpu_tags::release(root.number());
        }
        for region in self.views.take_freed() {
            let Some(start) = self.region_range.remove(&region) else { continue };
            let users = self.range_users.get_mut(&start).expect("placed regions have ranges");
            users.1 -= 1;
            if users.1 == 0 {
                let (len, _) = self.range_users.remove(&start).expect("present");
                self.ranges.release(VirtAddr::new(start), len).expect("a range handed out");
            }
        }
    }
}

/// Runs `f` with the view space.
pub fn with<R>(f: impl FnOnce(&mut ViewSpace<PageFormat>, &mut KernelMachine) -> R) -> R {
    with_space(|s, m| f(&mut s.views, m))
}

/// Runs `f` with the whole space (views and ranges). The page tables of views and the frames
/// of regions that `f` freed are not given back under the lock: their number has no bound (a
/// table grows by faults over its view's life), and every CPU's faults and syscalls wait for
/// this lock. A few region frames are freed once it is dropped; anything larger waits in
/// [`PENDING`] for [`free_pending`], because `f`'s caller may hold other locks with interrupts
/// off (the switch path detaches stale views) where no interrupt window may open.
pub fn with_space<R>(f: impl FnOnce(&mut Space, &mut KernelMachine) -> R) -> R {
    let mut guard = SPACE.lock();
    let space = guard.as_mut().expect("views used before mm::space::init");
    let r = f(space, &mut KernelMachine);
    space.reclaim();
    let deferred = space.views.take_deferred();
    drop(guard);
    if let Some(deferred) = deferred {
        let (tables, frames) = deferred.waiting();
        if tables == 0 && frames <= FREE_AT_ONCE {
            deferred.free(&mut KernelMachine);
        } else if let Some(deferred) = keep_pending(deferred) {
            // Every slot waits already: freed here after all (as before pending frees).
            deferred.free(&mut KernelMachine);
        }
    }
    r
}

/// Region frames a [`with_space`] call frees itself once the view-space lock is dropped (as
/// many as [`free_frames`] frees between two interrupt windows).
const FREE_AT_ONCE: usize = 16 * WINDOW_PAGES as usize;

/// Deferred frees too large for the call that made them (page tables, large regions), given
/// back by [`free_pending`] where interrupts may be let in. Inline slots, not a `Vec`: the
/// kernel heap's use after a program group must equal its use before.
static PENDING: Mutex<[Option<Deferred<PageFormat>>; PENDING_SLOTS]> = Mutex::new([const { None }; PENDING_SLOTS]);

/// Slots of [`PENDING`].
const PENDING_SLOTS: usize = 16;

/// Deferred frees not yet given back: slots of [`PENDING`] in use, and frees a CPU took out of
/// them and is still doing (read without the lock: the common "nothing waits" test is one load;
/// [`settle_pending`] waits for it to reach 0).
static PENDING_COUNT: AtomicUsize = AtomicUsize::new(0);

/// Puts `deferred` into a free slot of [`PENDING`]; gives it back if none is free.
fn keep_pending(deferred: Deferred<PageFormat>) -> Option<Deferred<PageFormat>> {
    let mut pending = PENDING.lock();
    match pending.iter_mut().find(|d| d.is_none()) {
        Some(slot) => {
            *slot = Some(deferred);
            PENDING_COUNT.fetch_add(1, Ordering::Release);
            None
        }
        None => Some(deferred),
    }
}

/// Takes one waiting [`Deferred`] out of [`PENDING`] and frees it on `m`; whether one waited.
fn free_one_pending(m: &mut impl Machine) -> bool {
    let Some(deferred) = PENDING.lock().iter_mut().find_map(Option::take) else { return false };
    deferred.free(m);
    // Counted until given back, so that `settle_pending` sees frees in progress elsewhere.
    PENDING_COUNT.fetch_sub(1, Ordering::Release);
    true
}

/// Gives back every page table and region frame waiting in [`PENDING`], letting interrupts
/// in every [`FREE_AT_ONCE`] frames, so the time with interrupts masked stays bounded whatever
/// was freed. Returns whether anything was waiting.
///
/// Called where the CPU holds no lock: an allocating syscall (`region_create`,
/// `thread_create`) before it allocates, and the boot thread before it counts a program
/// group's frames. An allocation that finds memory exhausted frees what waits without
/// windows ([`free_pending_locked`]). (Not the idle loop since a8628a5: with it there,
/// aarch64's `share_time` benchmark hung under `-icount` with a CPU in `wfi` never taking
/// the IPI another waited for in `fpu::pull`. The cause was QEMU 7.2's round-robin vCPU
/// scheduling, which let the spinning CPU starve the other; the aarch64 `cpu::spin_hint`
/// now yields the vCPU's turn. The drain's removal only changed the timing.)
#[inline]
pub fn free_pending() -> bool {
    if PENDING_COUNT.load(Ordering::Acquire) == 0 {
        return false;
    }
    free_pending_windowed();
    true
}

#[cold]
#[inline(never)]
fn free_pending_windowed() {
    let mut m = Windowed(0);
    while free_one_pending(&mut m) {}
}

/// [`free_pending`], then waits for the frees other CPUs took out of [`PENDING`] to finish:
/// for a count of free frames that must see everything given back (the boot thread after a
/// program group, the self-tests). Called where the CPU holds no lock.
pub fn settle_pending() {
    while free_pending() {
        arch::cpu::spin_hint();
    }
}

/// [`free_pending`] for an allocation that found memory exhausted: its caller may hold locks
/// (the view-space lock during a fault), so no interrupt window opens. Whether anything was
/// freed.
#[cold]
#[inline(never)]
fn free_pending_locked() -> bool {
    let mut freed = false;
    while free_one_pending(&mut KernelMachine) {
        freed = true;
    }
    freed
}

/// [`KernelMachine`] that lets interrupts in every [`FREE_AT_ONCE`] frames it frees.
struct Windowed(usize);

impl Machine for Windowed {
    type Memory = DirectMap;

    fn memory(&self) -> DirectMap {
        DirectMap
    }

    fn allocate_zeroed(&mut self) -> Option<Frame> {
        KernelMachine.allocate_zeroed()
    }

    fn free_frame(&mut self, frame: Frame) {
        KernelMachine.free_frame(frame);
        self.0 += 1;
        if self.0 % FREE_AT_ONCE == 0 {
            arch::cpu::interrupt_window();
        }
    }
}

/// Takes and zeroes the frames of an eager region of `pages` pages, without the view-space
/// lock (each frame is one short hold of the frame allocator's), for
/// [`ViewSpace::create_region_from`]. `None`: memory ran out (nothing is kept).
pub fn eager_frames(pages: u64) -> Option<alloc::vec::Vec<Option<Frame>>> {
    let mut frames = alloc::vec::Vec::new();
    frames.try_reserve_exact(usize::try_from(pages).ok()?).ok()?;
    for i in 0..pages {
        // Zeroing is ~4 KiB of stores a page: let interrupts in every `WINDOW_PAGES`, so the
        // time with interrupts masked stays bounded whatever the region's size (the caller
        // holds no lock).
        if i % WINDOW_PAGES == WINDOW_PAGES - 1 {
            arch::cpu::interrupt_window();
        }
        match allocate_zeroed_frame().or_else(|| free_pending().then(allocate_zeroed_frame).flatten()) {
            Some(f) => frames.push(Some(f)),
            None => {
                free_frames(frames);
                return None;
            }
        }
    }
    Some(frames)
}

/// Frames zeroed (or freed) between two interrupt windows in [`eager_frames`] and
/// [`free_frames`].
const WINDOW_PAGES: u64 = 64;

/// Gives back frames taken by [`eager_frames`] that no region got (the caller holds no lock).
pub fn free_frames(frames: alloc::vec::Vec<Option<Frame>>) {
    for (i, f) in frames.into_iter().flatten().enumerate() {
        if i % FREE_AT_ONCE == FREE_AT_ONCE - 1 {
            arch::cpu::interrupt_window();
        }
        KernelMachine.free_frame(f);
    }
}

/// Why a kernel access to user memory on a thread's behalf was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused(pub u64);

/// Writes `bytes` at user address `addr` as view `view` would (the view must hold every byte
/// with write rights), through the region's frames: no page table needs to be loaded, so the
/// kernel can write into a thread's memory from any CPU and any context.
pub fn write_as(view: super::view_space::ViewId, addr: u64, bytes: &[u8]) -> Result<(), Refused> {
    with(|s, m| {
        s.check(view, addr, bytes.len() as u64, arch::mapping::MapFlags::WRITE).map_err(|_| Refused(addr))?;
        let mut done = 0usize;
        while done < bytes.len() {
            let at = addr + done as u64;
            let r = s.region_at(at).ok_or(Refused(at))?;
            let info = s.region_info(r).ok_or(Refused(at))?;
            let n = ((info.start.as_u64() + info.len - at) as usize).min(bytes.len() - done);
            s.write(m, r, at - info.start.as_u64(), &bytes[done..done + n], |pa| super::kernel_space::phys_to_virt(pa).as_mut_ptr())
                .map_err(|_| Refused(at))?;
            done += n;
        }
        Ok(())
    })
}

/// Reads `out.len()` bytes at user address `addr` as view `view` would (read rights needed).
pub fn read_as(view: super::view_space::ViewId, addr: u64, out: &mut [u8]) -> Result<(), Refused> {
    with(|s, _| {
        s.check(view, addr, out.len() as u64, arch::mapping::MapFlags::READ).map_err(|_| Refused(addr))?;
        let mut done = 0usize;
        while done < out.len() {
            let at = addr + done as u64;
            let r = s.region_at(at).ok_or(Refused(at))?;
            let info = s.region_info(r).ok_or(Refused(at))?;
            let n = ((info.start.as_u64() + info.len - at) as usize).min(out.len() - done);
            s.read(r, at - info.start.as_u64(), &mut out[done..done + n], |pa| super::kernel_space::phys_to_virt(pa).as_ptr())
                .map_err(|_| Refused(at))?;
            done += n;
        }
        Ok(())
    })
}

/// Writes `bytes` at `addr` in a region `domain` owns, through the region's frames (for kernel
/// writes on behalf of a thread that is not running, into memory checked when it was named).
pub fn write_owned(domain: &crate::domain::Domain, addr: u64, bytes: &[u8]) -> Result<(), Refused> {
    let region = with(|s, _| s.region_at(addr)).ok_or(Refused(addr))?;
    if !domain.owns(region) {
        return Err(Refused(addr));
    }
    with(|s, m| {
        let info = s.region_info(region).ok_or(Refused(addr))?;
        if addr + bytes.len() as u64 > info.start.as_u64() + info.len {
            return Err(Refused(addr));
        }
        s.write(m, region, addr - info.start.as_u64(), bytes, |pa| super::kernel_space::phys_to_virt(pa).as_mut_ptr()).map_err(|_| Refused(addr))
    })
}
