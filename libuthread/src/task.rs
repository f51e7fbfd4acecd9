//! A thread's task, stored in its ThMB: first the closure it runs, then what it ended with (its
//! value or, hosted, the payload of its panic). Both are kept *inline* when they fit in
//! [`TASK_BYTES`] bytes — the closures of fork-everywhere programs capture a few words and
//! return one — so a spawn allocates nothing (a ThMB comes from the vCPU's pool, see
//! `sched::pool`); a larger closure or result is boxed. The closure is consumed before the
//! result is written, so they share the bytes.
//!
//! Who touches it: the spawner writes the closure before the thread is published; the thread
//! (or the joiner running it inline) runs it and writes the result before `join` says EXITED
//! (a release store); the joiner — or the exiting thread itself when the handle was dropped —
//! takes the result after. What is still inside when the ThMB is freed is dropped then.

use alloc::boxed::Box;
use core::any::Any;
use core::cell::{Cell, UnsafeCell};
use core::marker::PhantomData;
use core::mem::{align_of, size_of, MaybeUninit};
use core::ptr;

/// Bytes of inline storage (a closure capturing up to five words, a result up to two words
/// beside its tag).
pub(crate) const TASK_BYTES: usize = 40;
/// Alignment of the inline storage.
const TASK_ALIGN: usize = 8;

/// What a thread ended with: its value, or (hosted) the payload of its panic.
pub(crate) type Outcome<T> = Result<T, Box<dyn Any + Send>>;

#[repr(C, align(8))]
struct Bytes([MaybeUninit<u8>; TASK_BYTES]);
const _: () = assert!(align_of::<Bytes>() == TASK_ALIGN);

/// The operations on what a task holds, for one closure type and result type.
struct Ops {
    /// Runs the closure held and stores its outcome in its place.
    run: unsafe fn(*mut u8),
    /// Runs the closure of the task given and returns its value: an
    /// `unsafe fn(&Task) -> MaybeUninit<T>` with its type erased (only [`Task::run_claimed`],
    /// which knows `T`, calls it). Returned, not written to memory: a small value comes back in
    /// registers (see `run_claimed`). Hosted, a panic is caught and its payload left in the
    /// task, which then says [`PANICKED`] (the value returned is uninitialised).
    run_ret: *const (),
    /// Drops the closure held (never run).
    drop_closure: unsafe fn(*mut u8),
    /// Drops the outcome held (never taken).
    drop_outcome: unsafe fn(*mut u8),
}

// SAFETY: the operations are plain functions (the `*const ()` is one, type-erased), shared
// read-only.
unsafe impl Sync for Ops {}

/// Nothing held.
const EMPTY: u8 = 0;
/// The closure is held — or, in a pooled ThMB, was: a pooled ThMB's task says CLOSURE over
/// spent bytes (the pool's invariant, see [`Task::set_pooled`]), so neither the spawn that
/// reuses it nor the inline join that ran it stores the state.
const CLOSURE: u8 = 1;
/// The outcome is held.
const OUTCOME: u8 = 2;
/// Hosted, between [`Ops::run_ret`] and [`Task::run_claimed`]'s test of it: the closure run
/// inline panicked and the payload is in the bytes.
#[cfg(not(target_os = "none"))]
const PANICKED: u8 = 3;
#[cfg(not(target_os = "none"))]
const _: () = assert!(fits::<Box<dyn Any + Send>>());

/// A task: closure, then outcome (see the module documentation).
pub(crate) struct Task {
    bytes: UnsafeCell<Bytes>,
    ops: Cell<Option<&'static Ops>>,
    holds: Cell<u8>,
}

/// Whether a value of type `X` is stored inline.
const fn fits<X>() -> bool {
    size_of::<X>() <= TASK_BYTES && align_of::<X>() <= TASK_ALIGN
}

struct OpsFor<F, T>(PhantomData<(F, T)>);

impl<F: FnOnce() -> T, T> OpsFor<F, T> {
    const OPS: Ops = Ops { run: Self::run, run_ret: Self::run_ret as unsafe fn(&Task) -> MaybeUninit<T> as *const (), drop_closure: Self::drop_closure, drop_outcome: Self::drop_outcome };

    /// # Safety
    /// `p` holds an `F` stored by [`Task::set`] (inline or boxed).
    unsafe fn take_closure(p: *mut u8) -> F {
        // SAFETY: per the contract, with the layout `set` chose for `F`.
        unsafe {
            if fits::<F>() {
                ptr::read(p as *mut F)
            } else {
                *ptr::read(p as *mut Box<F>)
            }
        }
    }

    unsafe fn run(p: *mut u8) {
        // SAFETY: `Task::run` calls this only while the closure is held.
        let f = unsafe { Self::take_closure(p) };
        let outcome = crate::unwind::catch(f);
        // SAFETY: the closure was moved out: the bytes are free.
        unsafe {
            if fits::<Outcome<T>>() {
                ptr::write(p as *mut Outcome<T>, outcome)
            } else {
                ptr::write(p as *mut Box<Outcome<T>>, Box::new(outcome))
            }
        }
    }

    /// # Safety
    /// The task holds the closure (`Task::run_claimed` calls this).
    unsafe fn run_ret(task: &Task) -> MaybeUninit<T> {
        // SAFETY: per the contract.
        let f = unsafe { Self::take_closure(task.at()) };
        #[cfg(not(target_os = "none"))]
        {
            match crate::unwind::catch(f) {
                Ok(value) => MaybeUninit::new(value),
                Err(payload) => {
                    // SAFETY: the closure was moved out: the bytes are free, and a payload
                    // fits them (checked at compile time).
                    unsafe { ptr::write(task.at() as *mut Box<dyn Any + Send>, payload) };
                    task.holds.set(PANICKED);
                    MaybeUninit::uninit()
                }
            }
        }
        #[cfg(target_os = "none")]
        {
            MaybeUninit::new(f())
        }
    }

    unsafe fn drop_closure(p: *mut u8) {
        // SAFETY: called only while the closure is held.
        drop(unsafe { Self::take_closure(p) });
    }

    /// # Safety
    /// `p` holds an outcome stored by `run`.
    unsafe fn take_outcome(p: *mut u8) -> Outcome<T> {
        // SAFETY: per the contract, with the layout `run` chose.
        unsafe {
            if fits::<Outcome<T>>() {
                ptr::read(p as *mut Outcome<T>)
            } else {
                *ptr::read(p as *mut Box<Outcome<T>>)
            }
        }
    }

    unsafe fn drop_outcome(p: *mut u8) {
        // SAFETY: called only while the outcome is held.
        drop(unsafe { Self::take_outcome(p) });
    }
}

impl Task {
    /// An empty task.
    pub(crate) const fn new() -> Task {
        Task { bytes: UnsafeCell::new(Bytes([MaybeUninit::uninit(); TASK_BYTES])), ops: Cell::new(None), holds: Cell::new(EMPTY) }
    }

    fn at(&self) -> *mut u8 {
        self.bytes.get() as *mut u8
    }

    /// Stores the closure the thread will run.
    ///
    /// # Safety
    /// The task is empty and only the caller touches it.
    pub(crate) unsafe fn set<F, T>(&self, f: F)
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        debug_assert_eq!(self.holds.get(), EMPTY);
        // SAFETY: forwarded contract.
        unsafe { self.write_closure(f) };
        self.holds.set(CLOSURE);
    }

    /// Stores the closure and its operations, not the state.
    ///
    /// # Safety
    /// The bytes hold nothing to drop and only the caller touches the task.
    #[inline(always)]
    unsafe fn write_closure<F, T>(&self, f: F)
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        // SAFETY: free storage, ours; the layout matches what `OpsFor<F, T>` reads.
        unsafe {
            if fits::<F>() {
                ptr::write(self.at() as *mut F, f)
            } else {
                ptr::write(self.at() as *mut Box<F>, Box::new(f))
            }
        }
        self.ops.set(Some(&OpsFor::<F, T>::OPS));
    }

    /// [`Task::set`] for a pooled ThMB's task, which says CLOSURE already (over spent bytes):
    /// stores the closure and its operations, not the state.
    ///
    /// # Safety
    /// The task is a pooled ThMB's ([`Task::mark_pooled`] or left by
    /// [`Task::run_claimed`]) and only the caller touches it.
    #[inline(always)]
    pub(crate) unsafe fn set_pooled<F, T>(&self, f: F)
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        debug_assert_eq!(self.holds.get(), CLOSURE);
        // SAFETY: forwarded contract; the bytes are spent (nothing to drop).
        unsafe { self.write_closure(f) }
    }

    /// Makes an empty task a pooled ThMB's: says CLOSURE over bytes that hold nothing (see
    /// [`CLOSURE`]). Until [`Task::set_pooled`] or [`Task::forget_spent`], nothing may drop it.
    #[inline(always)]
    pub(crate) fn mark_pooled(&self) {
        debug_assert_eq!(self.holds.get(), EMPTY);
        self.holds.set(CLOSURE);
    }

    /// Empties the task of a ThMB whose closure [`Task::run_claimed`] ran (it still says
    /// CLOSURE), before the ThMB leaves the pool's rules (freed to the heap, or retired).
    #[inline(always)]
    pub(crate) fn forget_spent(&self) {
        self.holds.set(EMPTY);
    }

    /// Runs the closure (catching a panic where unwinding exists) and keeps its outcome.
    ///
    /// # Safety
    /// Only the caller touches the task, which holds a closure.
    #[inline]
    pub(crate) unsafe fn run(&self) {
        assert_eq!(self.holds.get(), CLOSURE, "libuthread: thread started twice");
        let ops = self.ops.get().expect("a closure has its operations");
        // Marked empty while it runs: the closure is moved out first.
        self.holds.set(EMPTY);
        // SAFETY: the closure is held, with the layout `ops` reads.
        unsafe { (ops.run)(self.at()) };
        self.holds.set(OUTCOME);
    }

    /// Runs the held closure, for a joiner that runs the task inline (`sched::run_inline`),
    /// and returns its outcome. The task still says CLOSURE after, over spent bytes — what a
    /// pooled ThMB's must say, and the inline join pools it: a caller that does not must
    /// [`Task::forget_spent`] before anything drops the task. (Nothing reads the state
    /// meanwhile: the child runs on the joiner's stack and never exits; if it blocks, its ThMB
    /// is only saved into and resumed.) The value is returned, not stored anywhere: a word
    /// comes back in a register, and the closure's own function ends in a tail call of the
    /// body; hosted, a panic's payload comes back through the task. (Written into the joiner's
    /// memory, it cost 8 instructions more a spawn + join on x86_64 — the tag and value stores,
    /// a frame to keep the pointer in, the reload; and a whole `Outcome` returned, or copied out
    /// of the ThMB, cost hosted a stall: two 8-byte stores read back by one 16-byte SSE load
    /// cannot be forwarded, 5–10 ns per spawn + join.)
    ///
    /// # Safety
    /// The task holds a closure (claimed: nobody else runs or drops it) returning `T`.
    #[inline(always)]
    pub(crate) unsafe fn run_claimed<T>(&self) -> Outcome<T> {
        debug_assert_eq!(self.holds.get(), CLOSURE);
        // SAFETY: per the contract a closure is held, so its operations were set with it, and
        // `run_ret` is `OpsFor::<F, T>::run_ret` for this `T`, erased: the same signature.
        let run: unsafe fn(&Task) -> MaybeUninit<T> = unsafe { core::mem::transmute(self.ops.get().unwrap_unchecked().run_ret) };
        // SAFETY: the closure is held, with the layout `run` reads (contract).
        let value = unsafe { run(self) };
        // Hosted, a panic's payload comes back through the task, so the value still comes
        // back in registers: an `Outcome<T>` returned went through memory, and its two 8-byte
        // stores read back by one 16-byte load stalled store forwarding (spawn + join 7 ->
        // 12 ns). On Tsumugi no run panics (`crate::unwind`), and nothing is tested.
        #[cfg(not(target_os = "none"))]
        if self.holds.get() == PANICKED {
            self.holds.set(CLOSURE);
            // SAFETY: `run_ret` left a payload there.
            return Err(unsafe { ptr::read(self.at() as *mut Box<dyn Any + Send>) });
        }
        // SAFETY: no panic: `run_ret` returned the value.
        Ok(unsafe { value.assume_init() })
    }

    /// Takes the outcome of a task that ran a closure returning `T`.
    ///
    /// # Safety
    /// Only the caller touches the task; `T` is the result type given to [`Task::set`].
    #[inline]
    pub(crate) unsafe fn take<T>(&self) -> Outcome<T> {
        assert_eq!(self.holds.get(), OUTCOME, "libuthread: joined thread left no result");
        self.holds.set(EMPTY);
        // SAFETY: the outcome of a `T` closure is held; the closure type only decides whether
        // the *closure* was boxed, so any `F` reads the outcome the same way.
        unsafe { OpsFor::<fn() -> T, T>::take_outcome(self.at()) }
    }

    /// Whether the task holds nothing (neither a closure nor an outcome).
    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        self.holds.get() == EMPTY
    }

    /// Drops whatever the task still holds.
    ///
    /// # Safety
    /// Only the caller touches the task.
    #[inline]
    pub(crate) unsafe fn clear(&self) {
        let held = self.holds.replace(EMPTY);
        let Some(ops) = self.ops.get() else { return };
        // SAFETY: what `held` says is there, with the layout `ops` reads.
        unsafe {
            match held {
                CLOSURE => (ops.drop_closure)(self.at()),
                OUTCOME => (ops.drop_outcome)(self.at()),
                _ => {}
            }
        }
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: nobody else touches it.
        unsafe { self.clear() }
    }
}
