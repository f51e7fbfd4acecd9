//! The ThMB (thread management block): one per user thread, in ordinary user memory; **a
//! thread's id is its ThMB's address**. It begins with the kernel's [`ThmbHeader`] (the save
//! mask and the full frame the kernel writes at an involuntary stop), followed by what only the
//! library reads and writes.
//!
//! Layout (x86_64, checked at compile time; on aarch64 the frame is 34 words and the window
//! 184 bytes, so `window` is at `0x128`, `state` at `0x1e0`, `resume` at `0x1f0`; on riscv64
//! the frame is 32 words and the window 224 bytes: `window` at `0x118`, `state` at `0x1f8`,
//! `resume` at `0x208`):
//!
//! | offset | field | written by |
//! |---|---|---|
//! | `0x000` | `header.mask` | kernel (FULL, FULL\|FP), library (`switch_out`: WINDOW or, in the full-save baseline, FULL\|FP; dispatch: NONE) |
//! | `0x008` | `header.full` (18 × u64) | kernel |
//! | `0x098` | `header.fp_area` (address of the FP area) | library, when the thread first runs |
//! | `0x0a0` | `header.fp_format` | kernel / library, with the FP area |
//! | `0x0a8` | `window` (72 bytes) | library, at a voluntary switch |
//! | `0x0f0` | `state` (u32) | library |
//! | `0x0f8` | `vcpu` | library |
//! | `0x100` | `resume` (a copy of `header.full`) | library |
//! | `0x190…` | links, stack, entry, result, join word, thread-locals, name | library |
//!
//! The FP area (`tsumugi_abi::kn::FP_AREA_SIZE` bytes, 64-byte aligned) sits at the top of the
//! thread's stack allocation, above the stack: it costs nothing at spawn (lazy creation) and
//! nothing at a WINDOW switch; it is written only by a FULL save of a thread with live FP
//! state.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::any::Any;
use core::cell::{Cell, UnsafeCell};
use core::mem::offset_of;
use core::ptr;

use tsumugi_abi::kn::{mask, FullFrame, ThmbHeader, THMB_ALIGN};

use crate::context::Window;
use crate::task::Task;
use crate::prim::{AtomicPtr, AtomicUsize, Ordering};
use crate::sched::queue::Linked;
use crate::sched::runstate::{RunState, READY, RUNNING};


/// `join` word: the thread is still running and nobody waits.
pub(crate) const JOIN_RUNNING: usize = 0;
/// References of a spawned thread (its `JoinHandle` and its run), and what a pooled ThMB's
/// count says (`sched::free_thmb` resets it; an inline join pools its ThMB with both).
pub(crate) const SPAWN_REFS: usize = 2;
/// `join` word: the thread has exited (its result is ready).
pub(crate) const JOIN_EXITED: usize = 1;
/// `join` word: the `JoinHandle` was dropped; the thread drops its own result at exit.
pub(crate) const JOIN_DETACHED: usize = 2;

/// A thread management block. See the module documentation for the layout.
#[repr(C, align(64))]
pub struct Thmb {
    /// The kernel's part: save mask and full frame.
    pub header: ThmbHeader,
    /// The callee-saved window of the last voluntary switch.
    pub(crate) window: Window,
    /// Scheduling state ([`crate::sched::runstate`]).
    pub(crate) state: RunState,
    /// The vCPU running the thread, or the last one that did (never null: see
    /// `sched::home_of`).
    pub(crate) vcpu: AtomicPtr<crate::sched::Vcpu>,
    /// The library's copy of the last full frame, which the FULL resume reads (the kernel may
    /// overwrite `header.full` while a resume is under way; see `context`).
    pub(crate) resume: FullFrame,

    // -- Linked into at most one ready queue at a time; guarded by that queue's lock.
    pub(crate) run_next: Cell<*mut Thmb>,

    // -- Owned by the thread while it runs and by the scheduler while it is off every vCPU.
    /// The thread's own task records (`crate::join`): the newest entry of a LIFO list linked
    /// through the records' headers (entry words tagged as on a vCPU's unpublished list), or 0.
    /// Touched by the thread alone while it runs — a fork and its join are a few plain loads and
    /// stores (`context::own_push`, `context::own_take`), no critical section —, and by the
    /// scheduler only where the thread is not in the middle of one: when it enters the
    /// scheduler itself (`sched::flush_records`), is blocked in the kernel
    /// (`sched::note_blocked`), or was stopped by the kernel and rewound out of any push or take
    /// (`sched::requeue_full`, `context::restart_point`). 0 in a pooled ThMB (a thread ends with
    /// every record taken back).
    pub(crate) records: Cell<usize>,
    /// Its stack `(base, len)`, or `(0, 0)` before it first runs (lazy creation).
    pub(crate) stack: Cell<(usize, usize)>,
    /// Stack size asked for at spawn. A pooled ThMB's says `DEFAULT_STACK_SIZE` (invariant:
    /// a spawn of the default size stores nothing here); a thread that asked for another size
    /// has `extras` set, so the inline join's one test of `extras` also resets this.
    pub(crate) stack_size: usize,
    /// The closure, until the thread starts; then its outcome, until joined ([`Task`]).
    pub(crate) task: Task,
    /// Its thread-locals ([`crate::local`]), indexed by key.
    pub(crate) locals: UnsafeCell<Vec<Option<Box<dyn Any>>>>,
    /// Its name (a `Box<str>`, not a `String`: `None` is a null pointer, so the test a
    /// retiring ThMB makes of it is one compare with zero).
    pub(crate) name: Option<Box<str>>,
    /// Whether this is the runtime's main thread (its exit ends the runtime).
    pub(crate) is_main: bool,
    /// Whether the ThMB holds a name, an allocated thread-local table or a stack size other
    /// than the default: set where one is made (`new_thread`, `LocalKey::with`), cleared only by
    /// `retire_slow`, so a pooled ThMB has it clear and a retiring or inline-joined thread
    /// tests one byte for all three.
    pub(crate) extras: Cell<bool>,

    // -- Atomic.
    /// `JOIN_RUNNING`, `JOIN_EXITED`, `JOIN_DETACHED`, or the waiting joiner's ThMB address.
    pub(crate) join: AtomicUsize,
    /// References: one for the running thread, one for its `JoinHandle`.
    pub(crate) refs: AtomicUsize,
    /// The result of a wait the kernel queued and the library parked (`UNBLOCKED` with
    /// `kn::UNBLOCKED_QUEUED`), stored before the wake-up that makes the thread ready.
    pub(crate) wait_result: AtomicUsize,
}

/// Offset of the saved window.
pub const WINDOW_OFFSET: usize = offset_of!(Thmb, window);
/// Offset of the state word.
pub const STATE_OFFSET: usize = offset_of!(Thmb, state);
/// Offset of the library's copy of the full frame.
pub const RESUME_OFFSET: usize = offset_of!(Thmb, resume);
/// Offset of the own record list's head word (read and written by `context::own_push` and
/// `context::own_take`).
pub const RECORDS_OFFSET: usize = offset_of!(Thmb, records);

const _: () = assert!(offset_of!(Thmb, header) == 0);
const _: () = assert!(core::mem::align_of::<Thmb>() as u64 == THMB_ALIGN);
#[cfg(target_arch = "x86_64")]
const _: () = assert!(WINDOW_OFFSET == 0xa8 && STATE_OFFSET == 0xe8 && RESUME_OFFSET == 0xf8);
#[cfg(target_arch = "aarch64")]
const _: () = assert!(WINDOW_OFFSET == 0x128 && STATE_OFFSET == 0x1e0 && RESUME_OFFSET == 0x1f0);
#[cfg(target_arch = "riscv64")]
const _: () = assert!(WINDOW_OFFSET == 0x118 && STATE_OFFSET == 0x1f8 && RESUME_OFFSET == 0x208);

const ZERO_FRAME: FullFrame = FullFrame::ZERO;

// SAFETY: every port's `Window` is plain integers (and arrays of them), for which all-zero
// bytes are a valid value.
const ZERO_WINDOW: Window = unsafe { core::mem::zeroed() };

impl Thmb {
    /// A blank ThMB (also used for root contexts, which only ever use the window).
    pub(crate) const fn blank() -> Thmb {
        Thmb {
            header: ThmbHeader::EMPTY,
            window: ZERO_WINDOW,
            state: RunState::new(),
            vcpu: AtomicPtr::new(crate::sched::FIRST_VCPU),
            resume: ZERO_FRAME,
            run_next: Cell::new(ptr::null_mut()),
            records: Cell::new(0),
            stack: Cell::new((0, 0)),
            stack_size: crate::sched::DEFAULT_STACK_SIZE,
            task: Task::new(),
            locals: UnsafeCell::new(Vec::new()),
            name: None,
            is_main: false,
            extras: Cell::new(false),
            join: AtomicUsize::new(JOIN_RUNNING),
            refs: AtomicUsize::new(0),
            wait_result: AtomicUsize::new(0),
        }
    }

    /// A new, never-run thread with `refs` references: a ThMB from the pool of the vCPU `v` (if
    /// given and not empty), else a blank one from the heap. With `v` given, the thread's vCPU
    /// is `v`.
    ///
    /// A pooled ThMB is an old thread's, emptied by [`Thmb::retire`]: only the fields a thread
    /// that never ran reads are set again (about a dozen stores, where a blank ThMB is 600
    /// bytes). The window, the full frames and the FP format are left as they were: nothing
    /// reads them while the mask is NONE, and the kernel writes them before it sets the mask.
    ///
    /// # Safety
    /// If `v` is given, the caller runs on that vCPU with LTN = 0.
    #[inline(always)]
    pub(crate) unsafe fn new_thread<F, T>(v: Option<&'static crate::sched::Vcpu>, f: F, name: Option<Box<str>>, stack_size: usize, refs: usize) -> *mut Thmb
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        // SAFETY: forwarded contract.
        let (t, pooled) = unsafe { crate::sched::alloc_thmb(v) };
        // SAFETY: `t` is ours: a retired ThMB (every field valid, nothing held) or blank memory.
        unsafe {
            if pooled {
                // Not set again: `run_next` (whoever lists the thread sets it) and
                // `header.fp_area` (set before the thread first runs, on a stack of its own or
                // inline, and read by the kernel only while the thread runs). Nor its save
                // mask and vCPU: a pooled ThMB's say NONE and the pool's vCPU (`free_thmb`
                // sets both; an inline join pools a ThMB that says so already).
                debug_assert_eq!(Thmb::mask(t), mask::NONE);
                debug_assert!(v.is_some_and(|v| ptr::eq((*t).vcpu.load(Ordering::Relaxed) as *const crate::sched::Vcpu, v)));
                // The run state is not set either: a pooled ThMB's says READY or RUNNING (a
                // running thread's is one of the two, and it ended running), and nothing reads
                // a thread's state before the thread itself writes it as it blocks (see
                // `runstate`).
                debug_assert!(matches!((*t).state.get(), READY | RUNNING));
                debug_assert_eq!((*t).stack.get(), (0, 0));
                // A pooled ThMB never was the main thread's: `run` takes the main thread's
                // from the heap and gives it back there (`Thmb::release` outside any thread).
                debug_assert!(!(*t).is_main);
                // The join word too is reset already: `free_thmb` resets it, and an inline
                // join pools a ThMB whose word was never changed (see `sched::run_inline`).
                debug_assert_eq!((*t).join.load(Ordering::Relaxed), JOIN_RUNNING);
                // And its count says SPAWN_REFS (reset by `free_thmb`, never changed by an
                // inline join): a spawn's constant `refs` folds this test away.
                debug_assert_eq!((*t).refs.load(Ordering::Relaxed), SPAWN_REFS);
                if refs != SPAWN_REFS {
                    (*t).refs.store(refs, Ordering::Relaxed);
                }
                // Its stack size is the default and its task says it holds a closure (over
                // spent bytes): `free_thmb` and the inline join leave both so, and a spawn of
                // the default size stores neither.
                debug_assert_eq!((*t).stack_size, crate::sched::DEFAULT_STACK_SIZE);
                (*t).task.set_pooled(f);
            } else {
                ptr::write(t, Thmb::blank());
                (*t).refs.store(refs, Ordering::Relaxed);
                if let Some(v) = v {
                    crate::sched::set_home(t, v);
                }
                (*t).task.set(f);
            }
            debug_assert!(!(*t).extras.get());
            if name.is_some() {
                (*t).name = name;
                (*t).extras.set(true);
            }
            // Another size is an extra too: the inline join's test of `extras` (its one
            // branch for whatever a pooled ThMB must not keep) leads to `retire_slow`, which
            // resets it.
            if stack_size != crate::sched::DEFAULT_STACK_SIZE {
                (*t).stack_size = stack_size;
                (*t).extras.set(true);
            }
        }
        t
    }

    /// Drops what a thread left in its ThMB (result, name, thread-locals), leaving a ThMB that
    /// [`Thmb::new_thread`] can reuse. Runs drop code of user types.
    ///
    /// # Safety
    /// Nobody else can reach `this` any more.
    #[inline(always)]
    pub(crate) unsafe fn retire(this: *mut Thmb) {
        // The common case — a thread whose result was taken, with no name and no thread-local
        // ever touched — holds nothing: two loads.
        // SAFETY: per the contract.
        unsafe {
            if (*this).task.is_empty() && !(*this).extras.get() {
                return;
            }
            Thmb::retire_slow(this)
        }
    }

    /// [`Thmb::retire`] when something is held (also for a ThMB whose task is empty and which
    /// has extras).
    ///
    /// # Safety
    /// As for `retire`.
    #[inline(never)]
    pub(crate) unsafe fn retire_slow(this: *mut Thmb) {
        // SAFETY: per the contract.
        unsafe {
            (*this).task.clear();
            if (*this).extras.replace(false) {
                drop((*this).name.take());
                drop(core::mem::take(&mut *(*this).locals.get()));
                (*this).stack_size = crate::sched::DEFAULT_STACK_SIZE;
            }
        }
    }

    /// The save mask as the kernel may have left it.
    #[inline]
    pub(crate) fn mask(this: *const Thmb) -> u64 {
        // SAFETY: `this` is a live ThMB; volatile because the kernel writes it behind the
        // compiler's back (while this vCPU was stopped).
        unsafe { ptr::read_volatile(&raw const (*this).header.mask) }
    }

    /// Sets the save mask.
    #[inline]
    pub(crate) fn set_mask(this: *mut Thmb, mask: u64) {
        // SAFETY: as in `mask`.
        unsafe { ptr::write_volatile(&raw mut (*this).header.mask, mask) }
    }

    /// Drops one reference; frees the ThMB on the last (into the pool of the caller's vCPU
    /// when it runs in a user thread, else to the heap).
    ///
    /// # Safety
    /// `this` is live and the caller owns one of its references.
    pub(crate) unsafe fn release(this: *mut Thmb) {
        // SAFETY: caller's reference keeps it live until the decrement.
        if unsafe { (*this).refs.fetch_sub(1, Ordering::AcqRel) } == 1 {
            // SAFETY: the last reference: nobody else can reach it.
            unsafe { Thmb::retire(this) };
            let mut critical = crate::spin::Critical::enter();
            let me = critical.thread();
            // SAFETY: inside the critical section the caller's vCPU cannot change.
            let v = (!me.is_null()).then(|| unsafe { crate::sched::home_of(me) });
            // SAFETY: retired and unreachable; `v` is the vCPU we run on with LTN = 0.
            unsafe { crate::sched::free_thmb(this, v) };
            critical.leave();
        }
    }

    /// [`Thmb::release`] for scheduler code running on vCPU `v` with LTN = 0.
    ///
    /// # Safety
    /// As for `release`, and the caller runs on vCPU `v` with LTN = 0.
    pub(crate) unsafe fn release_on(this: *mut Thmb, v: usize) {
        // SAFETY: caller's reference keeps it live until the decrement.
        if unsafe { (*this).refs.fetch_sub(1, Ordering::AcqRel) } == 1 {
            // SAFETY: the last reference: nobody else can reach it.
            unsafe {
                Thmb::retire(this);
                crate::sched::free_thmb(this, Some(crate::sched::vcpu_at(v)));
            }
        }
    }
}

// SAFETY: `run_next` is the ready-queue link; only the queue holding the thread (under its
// lock) touches it.
unsafe impl Linked for Thmb {
    unsafe fn next_link(this: *mut Self) -> *mut *mut Self {
        // SAFETY: the caller passes a live ThMB.
        unsafe { (*this).run_next.as_ptr() }
    }
}
