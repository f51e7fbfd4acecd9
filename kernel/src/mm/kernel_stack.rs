//! Kernel stacks: each in its own slot of the kernel-stack area with an unmapped guard page
//! below it, so an overflow faults (and is reported on the double-fault stack) instead of
//! corrupting a neighbour.

use alloc::vec::Vec;
use arch::addr::{Frame, VirtAddr, PAGE_SIZE};
use arch::layout;
use arch::mapping::MapFlags;
use core::sync::atomic::{AtomicU64, Ordering};
use arch::sync::Mutex;

use crate::sched::scheduler::MAX_CPUS;

use super::kernel_space::{allocate_zeroed_frame, with_frames, with_kernel_table, AllocatorFrames, DirectMap};

/// Usable pages per stack.
pub const STACK_PAGES: u64 = 8;
/// Bytes reserved per slot: the stack plus its guard page, rounded up.
const SLOT_SIZE: u64 = 64 * 1024;
const _: () = assert!((STACK_PAGES + 1) * PAGE_SIZE <= SLOT_SIZE);

/// Slot numbers given back, with the per-CPU flush epochs when they were freed; reused first,
/// once every CPU has flushed its TLB since (another CPU may still cache the old stack's
/// translations: kernel stack pages are not global, so a root load drops them).
static FREE_SLOTS: Mutex<Vec<(u64, [u64; MAX_CPUS])>> = Mutex::new(Vec::new());
static NEXT_SLOT: Mutex<u64> = Mutex::new(0);

/// Full TLB flushes (root loads) done by each CPU.
#[allow(clippy::declare_interior_mutable_const)]
const ZERO_EPOCH: AtomicU64 = AtomicU64::new(0);
static FLUSH_EPOCHS: [AtomicU64; MAX_CPUS] = [ZERO_EPOCH; MAX_CPUS];

/// Each CPU's flush epoch when a stack was last freed: until the CPU flushes again, it may
/// hold translations of that stack.
static FREED_AT: [AtomicU64; MAX_CPUS] = [ZERO_EPOCH; MAX_CPUS];

/// Records that CPU `cpu` flushed its non-global TLB entries (loaded a root).
pub fn note_full_flush(cpu: usize) {
    FLUSH_EPOCHS[cpu].fetch_add(1, Ordering::Relaxed);
}

/// [`note_full_flush`] for the CPU running this code (a root load's flush, on every view
/// switch of an untagged machine): no bounds check.
#[inline(always)]
pub fn note_full_flush_here() {
    let cpu = arch::cpu::cpu_index();
    debug_assert!(cpu < MAX_CPUS);
    // SAFETY: a CPU's own index is below the port's `MAX_CPUS`, which is at most ours
    // (asserted in `sched::scheduler`).
    unsafe { FLUSH_EPOCHS.get_unchecked(cpu) }.fetch_add(1, Ordering::Relaxed);
}

/// The timer tick on this CPU: if a stack was freed since this CPU last flushed, flush now.
/// With TLB tags (PCIDs, ASIDs) a root load flushes nothing, so without this a CPU could go
/// on forever without a full flush and freed slots would never leave quarantine (a leak of
/// the kernel-stack area, and of the table pages mapping it). At most one flush per tick, and
/// only while slots wait. `cpu`: this CPU's index (the caller has it at hand).
pub fn tick(cpu: usize) {
    if FLUSH_EPOCHS[cpu].load(Ordering::Relaxed) <= FREED_AT[cpu].load(Ordering::Relaxed) {
        arch::tlb::flush_all();
        note_full_flush(cpu);
        crate::sched::scheduler::this_cpu().counters.bump(tsumugi_abi::stats::Counter::TlbFlushes);
    }
}

fn epochs() -> [u64; MAX_CPUS] {
    core::array::from_fn(|i| FLUSH_EPOCHS[i].load(Ordering::Relaxed))
}

/// Whether every CPU that had flushed at least once when the slot was freed has flushed again.
fn quarantine_over(freed_at: &[u64; MAX_CPUS]) -> bool {
    let now = epochs();
    freed_at.iter().zip(now).all(|(&then, now)| then == 0 || now > then)
}

/// Slots of the kernel-stack area used so far. The area only grows (freed slots are reused,
/// after their quarantine), so under fast thread churn it grows beyond the most stacks ever
/// alive at once, and the kernel's page tables that map it grow with it.
pub fn slots_made() -> u64 {
    *NEXT_SLOT.lock()
}

/// Page-table frames of the kernel's table that map the first `slots` slots: one table per
/// 2 MiB, 1 GiB and 512 GiB the slots span (4-level tables with 4 KiB pages on every port).
/// Kernel memory that is never given back, which the leak check counts apart.
pub fn table_frames(slots: u64) -> u64 {
    let span = slots * SLOT_SIZE;
    [2u64 << 20, 1 << 30, 512 << 30].iter().map(|&level| span.div_ceil(level)).sum()
}

/// A mapped kernel stack, unmapped and freed on drop.
#[derive(Debug)]
pub struct KernelStack {
    slot: u64,
    frames: [Option<Frame>; STACK_PAGES as usize],
}

/// No memory (or no slot) was left for a kernel stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoStack;

impl KernelStack {
    /// Maps a new stack.
    pub fn new() -> Result<Self, NoStack> {
        let reusable = {
            let mut free = FREE_SLOTS.lock();
            let at = free.iter().position(|(_, epochs)| quarantine_over(epochs));
            at.map(|i| free.swap_remove(i).0)
        };
        let slot = match reusable {
            Some(s) => s,
            None => {
                let mut next = NEXT_SLOT.lock();
                if (*next + 1) * SLOT_SIZE > layout::KERNEL_STACKS_SIZE {
                    return Err(NoStack);
                }
                *next += 1;
                *next - 1
            }
        };
        let mut stack = KernelStack { slot, frames: [None; STACK_PAGES as usize] };
        for i in 0..STACK_PAGES {
            let frame = allocate_zeroed_frame().ok_or(NoStack)?; // drop unmaps what was mapped
            let va = stack.bottom().as_u64() + i * PAGE_SIZE;
            let mapped = with_kernel_table(|table, frames| {
                table.map(&DirectMap, &mut AllocatorFrames(frames), VirtAddr::new(va), frame, MapFlags::READ | MapFlags::WRITE, 0)
            });
            match mapped {
                // Local only: no CPU holds a translation of a slot out of quarantine.
                Ok(flush) => flush.flush(arch::tlb::flush_page_here),
                Err(_) => {
                    with_frames(|f| f.free(frame)).expect("fresh frame");
                    return Err(NoStack);
                }
            }
            stack.frames[i as usize] = Some(frame);
        }
        Ok(stack)
    }

    /// Lowest usable address (the guard page lies just below).
    pub fn bottom(&self) -> VirtAddr {
        VirtAddr::new(layout::KERNEL_STACKS + self.slot * SLOT_SIZE + PAGE_SIZE)
    }

    /// One past the highest usable address (16-byte aligned): the initial stack pointer.
    pub fn top(&self) -> VirtAddr {
        VirtAddr::new(self.bottom().as_u64() + STACK_PAGES * PAGE_SIZE)
    }
}

impl Drop for KernelStack {
    fn drop(&mut self) {
        let bottom = self.bottom().as_u64();
        for (i, frame) in self.frames.iter_mut().enumerate() {
            if frame.take().is_some() {
                let va = VirtAddr::new(bottom + i as u64 * PAGE_SIZE);
                with_kernel_table(|table, frames| {
                    let (f, flush) = table.unmap(&DirectMap, va).expect("stack page mapped");
                    // Local only: the other CPUs that may cache this page flush before the slot
                    // is mapped again (quarantine), and nothing touches a dead thread's stack.
                    flush.flush(arch::tlb::flush_page_here);
                    frames.free(f).expect("stack frame owned");
                });
            }
        }
        let now = epochs();
        for (freed_at, epoch) in FREED_AT.iter().zip(now) {
            freed_at.fetch_max(epoch, Ordering::Relaxed);
        }
        FREE_SLOTS.lock().push((self.slot, now));
    }
}
