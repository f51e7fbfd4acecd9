//! The kernel's TLB tags: one [`TagAllocator`] for all CPUs, and the tag each view (named by its
//! root frame) holds. See `tag_alloc.rs` for the scheme and the per-CPU protocol this follows.

use alloc::collections::BTreeMap;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use arch::sync::Mutex;

use crate::sched::scheduler::MAX_CPUS;

use super::tag_alloc::{Tag, TagAllocator, UNTAGGED};

struct Tags {
    allocator: TagAllocator,
    /// Root frame number -> its tag.
    held: BTreeMap<u64, Tag>,
}

static TAGS: Mutex<Option<Tags>> = Mutex::new(None);
/// Whether views get tags (fixed by `init`): an untagged machine's root loads need not take
/// the `TAGS` lock.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Changes whenever a view's tag may change or its root be reused by another view: at every
/// release and every rollover (bumped under the `TAGS` lock). Within one epoch a live view's
/// tag is fixed, so a CPU may reuse what it was told earlier in the same epoch.
static EPOCH: AtomicU64 = AtomicU64::new(0);

/// One remembered answer: `root` had tag `tag` in `epoch`.
#[derive(Clone, Copy)]
struct Remembered {
    epoch: u64,
    root: u64,
    tag: Tag,
}

/// Views a CPU loaded lately, so switching back and forth between a few views takes no lock.
const REMEMBERED: usize = 4;

struct CpuTags {
    entries: [Option<Remembered>; REMEMBERED],
    next: usize,
}

/// Per-CPU remembered tags, each touched only by its own CPU with interrupts off.
struct PerCpu(UnsafeCell<CpuTags>);

// SAFETY: each entry is only used by the CPU of its index, with interrupts disabled (root
// loads happen in kernel code, which runs with interrupts off), so there is never a second
// access at the same time.
unsafe impl Sync for PerCpu {}

#[allow(clippy::declare_interior_mutable_const)]
const PER_CPU_INIT: PerCpu = PerCpu(UnsafeCell::new(CpuTags { entries: [None; REMEMBERED], next: 0 }));
static PER_CPU: [PerCpu; MAX_CPUS] = [PER_CPU_INIT; MAX_CPUS];

/// Sets up tagging with `count` hardware tags (0 or 1: untagged).
pub fn init(count: u16) {
    let allocator = TagAllocator::new(count);
    ENABLED.store(allocator.enabled(), Ordering::Release);
    *TAGS.lock() = Some(Tags { allocator, held: BTreeMap::new() });
}

/// Whether views get tags.
#[inline(always)]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Acquire)
}

/// The tag to load view root `root` with on a CPU whose generation is `cpu_generation`, and
/// whether that CPU must flush its whole TLB first. The kernel's own root (`kernel`) always
/// uses the untagged value: its user half is empty, so it shares nothing with any view.
///
/// Inlined into the switch: an untagged machine, the kernel's root and a view this CPU loaded
/// lately in this epoch are answered here; the rest is [`choose_locked`]'s.
#[inline(always)]
pub fn choose(root: u64, kernel: u64, cpu_generation: &mut u64) -> (u16, bool) {
    if !enabled() {
        return (UNTAGGED, true);
    }
    if root == kernel {
        return (UNTAGGED, false);
    }
    let cpu = arch::cpu::cpu_index();
    debug_assert!(cpu < MAX_CPUS);
    // SAFETY: this CPU's own entry, with interrupts off (see `PerCpu`); a CPU's index is below
    // the port's `MAX_CPUS`, which is at most ours (asserted in `sched::scheduler`).
    let mine = unsafe { &*PER_CPU.get_unchecked(cpu).0.get() };
    let epoch = EPOCH.load(Ordering::Acquire);
    // The view is live (a thread runs on it), so no release of its root can be under way; if
    // this CPU learnt its tag in this epoch, the tag is still the view's and still valid. A
    // tag of a later generation than this CPU's flush needs the allocator (and a flush).
    for e in mine.entries.iter().flatten() {
        if e.root == root && e.epoch == epoch && e.tag.generation <= *cpu_generation {
            return (e.tag.value, false);
        }
    }
    choose_locked(root, cpu, cpu_generation)
}

/// [`choose`] for a view this CPU has no current answer for: asks the allocator under the
/// `TAGS` lock and remembers the answer.
#[inline(never)]
fn choose_locked(root: u64, cpu: usize, cpu_generation: &mut u64) -> (u16, bool) {
    // SAFETY: this CPU's own entry, with interrupts off (see `PerCpu`); `choose`'s shared
    // borrow of it has ended.
    let mine = unsafe { &mut *PER_CPU[cpu].0.get() };
    let mut guard = TAGS.lock();
    let Some(tags) = guard.as_mut() else { return (UNTAGGED, true) };
    let current = tags.held.get(&root).copied();
    let rollovers = tags.allocator.rollovers();
    let choice = tags.allocator.tag_for(current, cpu_generation);
    tags.held.insert(root, choice.tag);
    if tags.allocator.rollovers() != rollovers {
        EPOCH.fetch_add(1, Ordering::Release);
    }
    let epoch = EPOCH.load(Ordering::Relaxed);
    let slot = match mine.entries.iter().position(|e| e.is_some_and(|e| e.root == root)) {
        Some(at) => at,
        None => {
            let at = mine.next;
            mine.next = (at + 1) % REMEMBERED;
            at
        }
    };
    mine.entries[slot] = Some(Remembered { epoch, root, tag: choice.tag });
    (choice.tag.value, choice.flush_all)
}

/// A view died (no CPU has it loaded): its tag may be recycled.
pub fn release(root: u64) {
    let mut guard = TAGS.lock();
    if let Some(tags) = guard.as_mut() {
        if let Some(tag) = tags.held.remove(&root) {
            tags.allocator.release(tag);
        }
        // The root may come back as another view's: forget every CPU's remembered answers.
        EPOCH.fetch_add(1, Ordering::Release);
    }
}

/// Generations rolled over so far (for reports).
pub fn rollovers() -> u64 {
    TAGS.lock().as_ref().map_or(0, |t| t.allocator.rollovers())
}
