//! The program heap on Tsumugi (every port): one TLSF allocator (`rlsf`) over zero-on-touch
//! regions, a region added when no free block fits (regions are not contiguous: each is a pool
//! of its own inside the one allocator), behind per-vCPU caches of small blocks.
//!
//! Why TLSF: allocation and free take constant time whatever the heap's history (two bitmap
//! scans and a list head), where the first-fit linked list this replaced walked its holes under
//! the lock — so a block's cost depended on everything allocated before it: the StackThreads
//! `cky` run moved by 4–5 % between builds that differed only in where the checkout lived, and a
//! second suspend-everywhere `fib` run took twice the first (9.4 M → 19.8 M instructions) once a
//! large block had been freed earlier. `rlsf` is a small, maintained `no_std` TLSF (the
//! algorithm of Masmano et al., as in RTOS heaps), with no allocation of its own and no atomics.
//!
//! The caches: a block of at most 256 bytes and alignment at most 16 is one of 16 size classes
//! (16-byte steps, `size_class.rs`). Each vCPU keeps a free list per class,
//! touched only by a user thread running on that vCPU inside a library critical section
//! (LTN = 0: its vCPU cannot change, the kernel never upcalls, so the list is the vCPU's alone,
//! as the ThMB and stack pools are) — no lock, no atomic read-modify-write. An allocation takes
//! the head of its class's list; a free pushes the block on the list of the vCPU it runs on
//! (blocks may change vCPU: every block of a class has the class's size, and all come from the
//! one locked heap). A list holds at most [`CACHE_MAX`] blocks; beyond that, and when a list is
//! empty, the block goes to or comes from the locked heap, with the class's size and alignment
//! (the class follows from the layout alone, so the free finds the size the allocation used).
//! Outside a user thread (LTN = 0 already: scheduler code) everything goes to the locked heap.
//! Why the caches: the heap is one allocator under a lock; a `Box::new(u64)` and its drop cost
//! 289 instructions on x86_64 (-icount) through the locked first-fit heap and 88 through a
//! cache, a channel's creation and drop 412 and 177.

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::NonNull;

use tsumugi_abi::syscall::{region_flags, rights};

#[cfg(mn_core)]
use crate::size_class::{class_layout, class_of, CLASSES};
use crate::sys;

/// Bytes of each heap region added when the heap runs out.
const HEAP_CHUNK: usize = 4 << 20;

/// The allocator: first-level classes up to `32 << 28` bytes (8 GiB, beyond any region a
/// program can have), 16 second-level classes each (a request is rounded up by at most 1/16 to
/// find a block in constant time).
type Tlsf = rlsf::Tlsf<'static, u32, u16, 28, 16>;

struct Blocks {
    tlsf: Tlsf,
}

// SAFETY: the allocator's pointers lead only into the heap's own regions, which any thread may
// touch; it is reached only under the heap lock.
unsafe impl Send for Blocks {}

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

// SAFETY: every allocation and free goes through the locked allocator (or a vCPU cache of
// blocks that came from it, freed back with their class's layout).
unsafe impl GlobalAlloc for RegionHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        #[cfg(mn_core)]
        if let Some(c) = class_of(layout) {
            // SAFETY: a block of class `c` is handed out once.
            return unsafe { self.alloc_small(c) };
        }
        self.alloc_locked(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        #[cfg(mn_core)]
        if let Some(c) = class_of(layout) {
            // SAFETY: `ptr` was allocated with `layout`, so as a block of class `c`.
            return unsafe { self.dealloc_small(ptr, c) };
        }
        // SAFETY: forwarded contract.
        unsafe { self.dealloc_locked(ptr, layout) }
    }
}

/// Most blocks a vCPU keeps per class (so at most 64 × (16 + 32 + … + 256) = 136 KiB a vCPU).
#[cfg(mn_core)]
const CACHE_MAX: u32 = 64;

/// A free block in a cache: its first word links to the next.
#[cfg(mn_core)]
struct FreeBlock {
    next: *mut FreeBlock,
}

/// One vCPU's cache (its own cache lines: only that vCPU writes it).
#[cfg(mn_core)]
#[repr(align(64))]
struct VcpuCache {
    heads: [core::cell::Cell<*mut FreeBlock>; CLASSES],
    counts: [core::cell::Cell<u32>; CLASSES],
}

/// The caches, by vCPU.
#[cfg(mn_core)]
struct Caches([VcpuCache; tsumugi_abi::kn::MAX_VCPUS]);

// SAFETY: vCPU `v`'s cache is touched only on `v` with LTN = 0 (see the module docs), so never
// by two execution contexts at once.
#[cfg(mn_core)]
unsafe impl Sync for Caches {}

#[cfg(mn_core)]
static CACHES: Caches = Caches(
    [const {
        VcpuCache {
            heads: [const { core::cell::Cell::new(core::ptr::null_mut()) }; CLASSES],
            counts: [const { core::cell::Cell::new(0) }; CLASSES],
        }
    }; tsumugi_abi::kn::MAX_VCPUS],
);

/// Runs `f` on the calling vCPU's cache, inside a library critical section (LTN = 0, so the
/// vCPU cannot change and its cache is ours: module docs); `None` outside a user thread.
#[cfg(mn_core)]
#[inline(always)]
fn with_own_cache<R>(f: impl FnOnce(&VcpuCache) -> Option<R>) -> Option<R> {
    let me = crate::platform::ltn();
    if me.is_null() {
        return None;
    }
    crate::platform::clear_ltn();
    // SAFETY: `me` is the calling thread, live; its `vcpu` is exact with LTN = 0.
    let v = unsafe { crate::sched::vcpu_of(me) } % tsumugi_abi::kn::MAX_VCPUS;
    let r = f(&CACHES.0[v]);
    crate::platform::set_ltn(me);
    r
}

#[cfg(mn_core)]
impl RegionHeap {
    /// A block of class `c`: from the calling vCPU's cache, else from the locked heap.
    ///
    /// # Safety
    /// As `GlobalAlloc::alloc` for a layout of class `c`.
    #[inline(always)]
    unsafe fn alloc_small(&self, c: usize) -> *mut u8 {
        let cached = with_own_cache(|cache| {
            let head = cache.heads[c].get();
            if head.is_null() {
                return None;
            }
            // SAFETY: a listed block is free and ours to take (the cache is ours).
            cache.heads[c].set(unsafe { (*head).next });
            cache.counts[c].set(cache.counts[c].get() - 1);
            Some(head)
        });
        match cached {
            Some(block) => block.cast(),
            None => self.alloc_locked(class_layout(c)),
        }
    }

    /// Frees a block of class `c`: onto the calling vCPU's cache, else to the locked heap.
    ///
    /// # Safety
    /// As `GlobalAlloc::dealloc` for a layout of class `c`.
    #[inline(always)]
    unsafe fn dealloc_small(&self, ptr: *mut u8, c: usize) {
        let cached = with_own_cache(|cache| {
            let count = cache.counts[c].get();
            if count >= CACHE_MAX {
                return None;
            }
            let block = ptr.cast::<FreeBlock>();
            // SAFETY: the block is the caller's, at least 16 bytes and 16-aligned (its class's
            // layout in the locked heap), so it holds the link.
            unsafe { (*block).next = cache.heads[c].get() };
            cache.heads[c].set(block);
            cache.counts[c].set(count + 1);
            Some(())
        });
        if cached.is_none() {
            // SAFETY: a block of class `c` came from the locked heap with the class's layout.
            unsafe { self.dealloc_locked(ptr, class_layout(c)) }
        }
    }
}

impl RegionHeap {
    /// An allocation from the locked heap (out of line: the cache paths save no register).
    #[inline(never)]
    fn alloc_locked(&self, layout: Layout) -> *mut u8 {
        self.0.with(|b| alloc_in(b, layout))
    }

    /// A free into the locked heap (out of line, as [`Self::alloc_locked`]).
    ///
    /// # Safety
    /// `ptr` was allocated from the locked heap with `layout`.
    #[inline(never)]
    unsafe fn dealloc_locked(&self, ptr: *mut u8, layout: Layout) {
        self.0.with(|b| dealloc_in(b, ptr, layout))
    }
}

fn alloc_in(b: &mut Blocks, layout: Layout) -> *mut u8 {
    if let Some(p) = b.tlsf.allocate(layout) {
        return p.as_ptr();
    }
    // No free block fits: a new region, with room for the request however TLSF rounds it (at
    // most 1/16 up), its alignment, and the pool's header and sentinel.
    let Some(need) = layout
        .size()
        .checked_add(layout.size() / 8)
        .and_then(|n| n.checked_add(layout.align() + 256))
        .and_then(|n| n.checked_next_multiple_of(HEAP_CHUNK))
    else {
        return core::ptr::null_mut();
    };
    let Ok(region) = sys::region_create(need, rights::READ | rights::WRITE, region_flags::LAZY) else {
        return core::ptr::null_mut();
    };
    let Some(start) = NonNull::new(region as *mut u8) else {
        return core::ptr::null_mut();
    };
    // SAFETY: a fresh writable region of `need` bytes that nobody else uses and that lives as
    // long as the program (heap regions are never given back).
    unsafe { b.tlsf.insert_free_block_ptr(NonNull::slice_from_raw_parts(start, need)) };
    b.tlsf.allocate(layout).map_or(core::ptr::null_mut(), NonNull::as_ptr)
}

fn dealloc_in(b: &mut Blocks, ptr: *mut u8, layout: Layout) {
    if let Some(ptr) = NonNull::new(ptr) {
        // SAFETY: `ptr` came from `alloc_in` (this allocator) with `layout`.
        unsafe { b.tlsf.deallocate(ptr, layout.align()) };
    }
}

#[global_allocator]
static HEAP: RegionHeap = RegionHeap(Lock {
    held: core::sync::atomic::AtomicBool::new(false),
    value: core::cell::UnsafeCell::new(Blocks { tlsf: Tlsf::new() }),
});
