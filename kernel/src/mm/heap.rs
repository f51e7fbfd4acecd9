//! The kernel heap (`alloc` works after [`init`]): a linked-list allocator over physically
//! contiguous frames reached through the direct map.
//!
//! Interrupt handlers never allocate, so the heap lock is never taken re-entrantly.
//!
//! The lock is the kernel's own [`arch::sync::Mutex`], not `linked_list_allocator`'s
//! `LockedHeap` (a `spinning_top` lock): its waiters relax with the port's `spin_hint`, which
//! on aarch64 ends a vCPU's turn under QEMU's round-robin TCG, so a CPU waiting for the heap
//! cannot starve the CPU that holds it (see `arch::sync`).

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::NonNull;

use arch::addr::PAGE_SIZE;
use arch::sync::Mutex;
use linked_list_allocator::Heap;

use super::kernel_space::{phys_to_virt, with_frames};

/// The allocator behind `alloc`: a first-fit linked-list heap under the kernel's spin lock.
struct KernelHeap(Mutex<Heap>);

// SAFETY: every allocation comes from the one heap under its lock; `allocate_first_fit` returns
// a block of at least `layout.size()` bytes aligned to `layout.align()`, or an error mapped to
// null, and `dealloc` gives back exactly what `alloc` returned with the same layout (the
// `GlobalAlloc` contract).
unsafe impl GlobalAlloc for KernelHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.0.lock().allocate_first_fit(layout).map_or(core::ptr::null_mut(), NonNull::as_ptr)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` with `layout` (the caller's contract), so it is not
        // null and names a block of this heap.
        unsafe { self.0.lock().deallocate(NonNull::new_unchecked(ptr), layout) }
    }
}

#[global_allocator]
static HEAP: KernelHeap = KernelHeap(Mutex::new(Heap::empty()));

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
    unsafe { HEAP.0.lock().init(start.as_mut_ptr(), size as usize) };
    Ok(size)
}

/// Bytes in use and free on the heap.
pub fn usage() -> (usize, usize) {
    let heap = HEAP.0.lock();
    (heap.used(), heap.free())
}
