//! Per-vCPU caches of thread objects: free ThMBs and free stacks (each stack with its FP area at
//! the top), so spawning, starting and ending a thread take no lock and make no allocation or
//! kernel call in the steady state.
//!
//! # Ownership
//! Each vCPU has one [`Pool`], touched only by code running *on that vCPU with LTN = 0*: the
//! scheduler (which always runs with LTN = 0) or a user thread inside a library critical
//! section (`spin::Critical`, which sets LTN = 0). With LTN = 0 the kernel never upcalls, so a
//! stop there resumes the vCPU in place: nothing else can run on the vCPU in the middle of a
//! pool edit, and no other vCPU touches the pool at all. So the pool needs no lock and no
//! atomic — and, being touched by one execution context only, no loom model (the free lists are
//! not shared structures). A thread object freed on another vCPU than the one that made it goes
//! to the freeing vCPU's pool.
//!
//! # Where the memory comes from
//! On Tsumugi every region is a kernel object in every view of the program, so one region per
//! stack made a program with thousands of threads pay for thousands of regions (StackThreads FK
//! `fib(20)` timed out). Stacks are therefore *carved* out of large zero-on-touch chunks
//! ([`crate::platform::STACK_CHUNK`]); a chunk is never given back (neither were the per-stack
//! regions), and the pages of a stack cost frames only once touched. Carved stacks have no guard
//! gap between them (a region's rights are all-or-nothing): a thread that overflows its stack
//! runs into the FP area of the stack below. Hosted, stacks stay separate mappings with a guard
//! page (an mmap is cheap there), and only the free lists are used.
//!
//! Bounds: a vCPU keeps at most [`KEEP_THMBS`] + 1 free ThMBs (the list and the hot one) and
//! [`KEEP_STACKS`] free stacks per size; beyond that a ThMB goes back to the heap and a stack to the shared, locked overflow
//! list in `scheduler`. A vCPU whose pool has no free stack of the size takes one from that
//! list before it carves a new one (`scheduler::take_stack`), so on Tsumugi stack memory stays
//! bounded by the peak number of live threads (the conformance check
//! `freed_stacks_are_used_again`: on one vCPU a second round of 1,400 live threads makes no
//! stack). A stack reaches a free list only once nothing runs on it (its thread exited and its
//! vCPU left it: `scheduler::give_stack`), so another vCPU may take it from the shared list at
//! once.

use core::cell::UnsafeCell;
use core::ptr;

use crate::platform;
use crate::thmb::Thmb;

/// Free ThMBs a vCPU keeps.
const KEEP_THMBS: usize = 1024;
/// Free stacks of one size a vCPU keeps.
pub(crate) const KEEP_STACKS: usize = 1024;
/// Stack sizes a vCPU keeps free lists for (threads asking for other sizes use the shared
/// overflow list).
const CLASSES: usize = 4;

/// Free stacks of one requested size, linked through the last word of each (inside the FP
/// area, which is unused while the stack is free).
#[derive(Clone, Copy)]
struct Class {
    /// Requested size (0: class unused).
    size: usize,
    /// Length of each stack of the class, as allocated.
    len: usize,
    /// Base of the first free stack (0: none).
    head: usize,
    count: usize,
}

struct Inner {
    /// The free ThMB given last (or null), kept out of the list: a thread spawned and joined
    /// (or exiting) in turn takes it and gives it back with two memory operations each, where
    /// the list costs three and the count's update.
    hot: *mut Thmb,
    /// Free ThMBs, linked through `run_next` (retired: every field valid, nothing held).
    thmbs: *mut Thmb,
    thmb_count: usize,
    stacks: [Class; CLASSES],
    /// The part of the current chunk not carved yet: `[cursor, end)`.
    cursor: usize,
    end: usize,
}

/// One vCPU's cache (see the module documentation for who may touch it).
pub(crate) struct Pool(UnsafeCell<Inner>);

// SAFETY: only the owning vCPU touches a pool, with LTN = 0 (module documentation).
unsafe impl Sync for Pool {}

/// Where a stack of the requested size comes from.
pub(crate) enum Stack {
    /// Carved from this vCPU's chunk: `(base, len)`.
    Ready(usize, usize),
    /// None (nothing is carved on this platform, or the size exceeds a chunk, or no chunk
    /// could be had): the caller asks the platform for one.
    Elsewhere,
}

impl Pool {
    /// An empty pool.
    pub(crate) const fn new() -> Pool {
        Pool(UnsafeCell::new(Inner {
            hot: ptr::null_mut(),
            thmbs: ptr::null_mut(),
            thmb_count: 0,
            stacks: [Class { size: 0, len: 0, head: 0, count: 0 }; CLASSES],
            cursor: 0,
            end: 0,
        }))
    }

    /// The pool's state.
    ///
    /// # Safety
    /// The caller runs on the pool's vCPU with LTN = 0 and holds no other reference from here.
    #[allow(clippy::mut_from_ref)]
    unsafe fn inner(&self) -> &mut Inner {
        // SAFETY: per the contract, this is the only reference.
        unsafe { &mut *self.0.get() }
    }

    /// A retired ThMB (`Thmb::retire`: every field valid, nothing held), or null.
    ///
    /// # Safety
    /// As for [`Pool::inner`].
    #[inline]
    pub(crate) unsafe fn take_thmb(&self) -> *mut Thmb {
        // SAFETY: forwarded contract.
        let p = unsafe { self.inner() };
        let t = p.hot;
        if !t.is_null() {
            p.hot = ptr::null_mut();
            return t;
        }
        let t = p.thmbs;
        if !t.is_null() {
            // SAFETY: a free ThMB's memory is ours; its link was written by `give_thmb`.
            p.thmbs = unsafe { (*t).run_next.get() };
            p.thmb_count -= 1;
        }
        t
    }

    /// Keeps a retired ThMB; returns false when the pool is full (the caller frees it).
    ///
    /// # Safety
    /// As for [`Pool::inner`]; `t` is a retired ThMB reachable by nobody.
    #[inline]
    pub(crate) unsafe fn give_thmb(&self, t: *mut Thmb) -> bool {
        // SAFETY: forwarded contract.
        let p = unsafe { self.inner() };
        if p.hot.is_null() {
            p.hot = t;
            return true;
        }
        if p.thmb_count == KEEP_THMBS {
            return false;
        }
        // SAFETY: the ThMB is ours; a free one is in no queue, so its link is free.
        unsafe { (*t).run_next.set(p.thmbs) };
        p.thmbs = t;
        p.thmb_count += 1;
        true
    }

    /// A free stack of this vCPU's for a thread that asked for `size` bytes, if it keeps one.
    ///
    /// # Safety
    /// As for [`Pool::inner`].
    #[inline]
    pub(crate) unsafe fn take_free_stack(&self, size: usize) -> Option<(usize, usize)> {
        // SAFETY: forwarded contract.
        let p = unsafe { self.inner() };
        let c = p.stacks.iter_mut().find(|c| c.size == size && c.head != 0)?;
        let base = c.head;
        // SAFETY: a free stack's last word holds the link (`give_stack`).
        c.head = unsafe { ptr::read((base + c.len - 8) as *const usize) };
        c.count -= 1;
        Some((base, c.len))
    }

    /// A new stack for a thread that asked for `size` bytes, carved from this vCPU's chunk
    /// (a new chunk from the platform when it is used up). The caller has looked at the free
    /// lists first: this vCPU's ([`Pool::take_free_stack`]) and the shared one.
    ///
    /// # Safety
    /// As for [`Pool::inner`].
    pub(crate) unsafe fn carve_stack(&self, size: usize) -> Stack {
        // SAFETY: forwarded contract.
        let p = unsafe { self.inner() };
        let chunk = platform::STACK_CHUNK;
        if chunk == 0 {
            return Stack::Elsewhere;
        }
        // Page-rounded, as the platform would round a stack of its own.
        let len = (size + 4095) & !4095;
        if p.end - p.cursor < len {
            if len > chunk {
                return Stack::Elsewhere;
            }
            match platform::alloc_stack(chunk) {
                Some((base, chunk_len)) => {
                    p.cursor = base;
                    p.end = base + chunk_len;
                }
                None => return Stack::Elsewhere,
            }
        }
        let base = p.cursor;
        p.cursor += len;
        super::STACKS_MADE.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
        Stack::Ready(base, len)
    }

    /// Keeps a free stack of a thread that asked for `size` bytes; returns false when this
    /// vCPU keeps no more of that size (the caller puts it elsewhere).
    ///
    /// # Safety
    /// As for [`Pool::inner`]; `[base, base + len)` is a stack nobody uses any more.
    #[inline]
    pub(crate) unsafe fn give_stack(&self, size: usize, base: usize, len: usize) -> bool {
        // SAFETY: forwarded contract.
        let p = unsafe { self.inner() };
        let class = match p.stacks.iter().position(|c| c.size == size && c.len == len) {
            Some(i) => i,
            None => match p.stacks.iter().position(|c| c.count == 0) {
                Some(i) => {
                    p.stacks[i] = Class { size, len, head: 0, count: 0 };
                    i
                }
                None => return false,
            },
        };
        let c = &mut p.stacks[class];
        if c.count == KEEP_STACKS {
            return false;
        }
        // SAFETY: the stack is ours and writable; its last word is inside its FP area.
        unsafe { ptr::write((base + len - 8) as *mut usize, c.head) };
        c.head = base;
        c.count += 1;
        true
    }
}
