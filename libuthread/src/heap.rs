//! The program heap on Tsumugi (every port): linked-list allocators, one per zero-on-touch
//! region, a region added when none has room (regions are not contiguous: each keeps its own
//! free list).

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::NonNull;
use linked_list_allocator::Heap;

use tsumugi_abi::syscall::{region_flags, rights};

use crate::sys;

/// Bytes of each heap region added when the heap runs out.
const HEAP_CHUNK: usize = 4 << 20;

/// Most heap regions.
const MAX_BLOCKS: usize = 64;

struct Blocks {
    heaps: [Heap; MAX_BLOCKS],
    used: usize,
}

/// A spinlock held with LTN = 0 (in a critical section of the M:N core). A thread holding the
/// heap lock must not be stopped and replaced on its vCPU: the kernel would save it with a
/// `PREEMPTED` upcall, and the vCPUs that then wait for the lock — one of them inside the
/// scheduler, with LTN = 0 and so never preempted — could be the ones that would have to run
/// it (seen: every vCPU spinning here while the holder sat in a queue). With LTN = 0 a
/// preemption resumes the holder in place.
struct Lock<T> {
    held: core::sync::atomic::AtomicBool,
    value: core::cell::UnsafeCell<T>,
}

// SAFETY: the value is only reached through `with`, which holds the lock.
unsafe impl<T: Send> Sync for Lock<T> {}

impl<T> Lock<T> {
    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        use core::sync::atomic::Ordering;
        #[cfg(mn_core)]
        let mut critical = crate::spin::Critical::enter();
        while self.held.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            core::hint::spin_loop();
        }
        // SAFETY: the lock is held.
        let r = f(unsafe { &mut *self.value.get() });
        self.held.store(false, Ordering::Release);
        #[cfg(mn_core)]
        critical.leave();
        r
    }
}

struct RegionHeap(Lock<Blocks>);

// SAFETY: every allocation and free goes through the locked blocks; a pointer is freed into
// the block whose range holds it, which is the block it came from.
unsafe impl GlobalAlloc for RegionHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.0.with(|b| alloc_in(b, layout))
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        self.0.with(|b| dealloc_in(b, ptr, layout))
    }
}

fn alloc_in(b: &mut Blocks, layout: Layout) -> *mut u8 {
        let used = b.used;
        for heap in b.heaps[..used].iter_mut().rev() {
            if let Ok(p) = heap.allocate_first_fit(layout) {
                return p.as_ptr();
            }
        }
        if used == MAX_BLOCKS {
            return core::ptr::null_mut();
        }
        let chunk = (layout.size() + layout.align() + 64).div_ceil(HEAP_CHUNK) * HEAP_CHUNK;
        let Ok(region) = sys::region_create(chunk, rights::READ | rights::WRITE, region_flags::LAZY) else {
            return core::ptr::null_mut();
        };
        // SAFETY: a fresh writable region nobody else uses.
        unsafe { b.heaps[used].init(region as *mut u8, chunk) };
        b.used += 1;
        b.heaps[used].allocate_first_fit(layout).map_or(core::ptr::null_mut(), NonNull::as_ptr)
}

fn dealloc_in(b: &mut Blocks, ptr: *mut u8, layout: Layout) {
        let used = b.used;
        for heap in b.heaps[..used].iter_mut() {
            let start = heap.bottom() as usize;
            if (start..start + heap.size()).contains(&(ptr as usize)) {
                // SAFETY: allocated from this block with this layout.
                unsafe { heap.deallocate(NonNull::new_unchecked(ptr), layout) };
                return;
            }
        }
}

#[global_allocator]
static HEAP: RegionHeap = RegionHeap(Lock {
    held: core::sync::atomic::AtomicBool::new(false),
    value: core::cell::UnsafeCell::new(Blocks { heaps: [const { Heap::empty() }; MAX_BLOCKS], used: 0 }),
});
