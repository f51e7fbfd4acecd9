//! The kernel's TLB tags: one [`TagAllocator`] for all CPUs, and the tag each view (named by its
//! root frame) holds. See `tlb_tag.rs` for the scheme and the per-CPU protocol this follows.

use alloc::collections::BTreeMap;
use core::sync::atomic::{AtomicBool, Ordering};
use spin::Mutex;

use super::tlb_tag::{Tag, TagAllocator, UNTAGGED};

struct Tags {
    allocator: TagAllocator,
    /// Root frame number -> its tag.
    held: BTreeMap<u64, Tag>,
}

static TAGS: Mutex<Option<Tags>> = Mutex::new(None);
/// Whether views get tags (fixed by `init`): an untagged machine's root loads need not take
/// the `TAGS` lock.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Sets up tagging with `count` hardware tags (0 or 1: untagged).
pub fn init(count: u16) {
    let allocator = TagAllocator::new(count);
    ENABLED.store(allocator.enabled(), Ordering::Release);
    *TAGS.lock() = Some(Tags { allocator, held: BTreeMap::new() });
}

/// Whether views get tags.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Acquire)
}

/// The tag to load view root `root` with on a CPU whose generation is `cpu_generation`, and
/// whether that CPU must flush its whole TLB first. The kernel's own root (`kernel`) always
/// uses the untagged value: its user half is empty, so it shares nothing with any view.
pub fn choose(root: u64, kernel: u64, cpu_generation: &mut u64) -> (u16, bool) {
    if !enabled() {
        return (UNTAGGED, true);
    }
    let mut guard = TAGS.lock();
    let Some(tags) = guard.as_mut() else { return (UNTAGGED, true) };
    if !tags.allocator.enabled() {
        return (UNTAGGED, true);
    }
    if root == kernel {
        return (UNTAGGED, false);
    }
    let current = tags.held.get(&root).copied();
    let choice = tags.allocator.tag_for(current, cpu_generation);
    tags.held.insert(root, choice.tag);
    (choice.tag.value, choice.flush_all)
}

/// A view died (no CPU has it loaded): its tag may be recycled.
pub fn release(root: u64) {
    let mut guard = TAGS.lock();
    if let Some(tags) = guard.as_mut() {
        if let Some(tag) = tags.held.remove(&root) {
            tags.allocator.release(tag);
        }
    }
}

/// Generations rolled over so far (for reports).
pub fn rollovers() -> u64 {
    TAGS.lock().as_ref().map_or(0, |t| t.allocator.rollovers())
}
