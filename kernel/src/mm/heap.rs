//! The kernel heap (`alloc` works after [`init`]): a linked-list allocator over physically
//! contiguous frames reached through the direct map.
//!
//! Interrupt handlers never allocate, so the heap lock is never taken re-entrantly.

use arch::addr::PAGE_SIZE;
use linked_list_allocator::LockedHeap;

use super::kernel_space::{phys_to_virt, with_frames};

#[global_allocator]
static HEAP: LockedHeap = LockedHeap::empty();

/// Smallest and largest heap sizes; in between it is an eighth of free memory.
const MIN_HEAP: u64 = 1 << 20;
const MAX_HEAP: u64 = 32 << 20;

/// Takes frames for the heap and hands them to the allocator. Returns the heap size in bytes.
pub fn init() -> Result<u64, &'static str> {
    let free_bytes = with_frames(|f| f.free_frames()) * PAGE_SIZE;
    let size = (free_bytes / 8).clamp(MIN_HEAP, MAX_HEAP) / PAGE_SIZE * PAGE_SIZE;
    let first = with_frames(|f| f.allocate_contiguous(size / PAGE_SIZE, 1)).map_err(|_| "no contiguous memory for the kernel heap")?;
    let start = phys_to_virt(first.start());
    // SAFETY: the frames were just taken from the allocator for the heap alone and are mapped
    // read-write by the direct map for the rest of the run.
    unsafe { HEAP.lock().init(start.as_mut_ptr(), size as usize) };
    Ok(size)
}

/// Bytes in use and free on the heap.
pub fn usage() -> (usize, usize) {
    let heap = HEAP.lock();
    (heap.used(), heap.free())
}
