//! User threads: spawning, joining, identity, yielding and sleeping — the `std::thread`-like
//! part of the API.

use alloc::boxed::Box;
use alloc::string::String;
use core::any::Any;
use core::marker::PhantomData;
use core::num::NonZeroUsize;
use core::ptr::NonNull;
use core::time::Duration;

use crate::platform;
use crate::prim::Ordering;
use crate::sched;
use crate::thmb::{Thmb, JOIN_DETACHED, JOIN_EXITED, JOIN_RUNNING};

/// A thread's identity: the address of its ThMB. Unique among live threads; an address may be
/// reused after its thread has exited and been joined (or detached).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ThreadId(NonZeroUsize);

impl ThreadId {
    /// The ThMB address.
    ///
    /// ```
    /// libuthread::run(1, || assert_eq!(libuthread::current().id().as_usize() % 64, 0));
    /// ```
    pub fn as_usize(self) -> usize {
        self.0.get()
    }

    /// The id of the ThMB at `addr` (`None` for 0).
    #[allow(dead_code)] // used by the Tsumugi-only `signal` module
    pub(crate) fn from_usize(addr: usize) -> Option<ThreadId> {
        NonZeroUsize::new(addr).map(ThreadId)
    }
}

/// A handle to the calling thread, from [`current`]. It cannot leave the thread (not `Send`),
/// which is what keeps [`Thread::name`]'s borrow valid.
#[derive(Debug)]
pub struct Thread {
    thmb: NonNull<Thmb>,
    _not_send: PhantomData<*const ()>,
}

impl Thread {
    /// The thread's id.
    ///
    /// ```
    /// libuthread::run(1, || {
    ///     let me = libuthread::current().id();
    ///     let other = libuthread::spawn(|| libuthread::current().id()).join().unwrap();
    ///     assert_ne!(me, other);
    /// });
    /// ```
    pub fn id(&self) -> ThreadId {
        ThreadId(NonZeroUsize::new(self.thmb.as_ptr() as usize).expect("non-null"))
    }

    /// The name given with [`Builder::name`] (the runtime's first thread is `"main"`).
    ///
    /// ```
    /// libuthread::run(1, || {
    ///     let h = libuthread::Builder::new().name("worker".into()).spawn(|| {
    ///         libuthread::current().name().map(String::from)
    ///     });
    ///     assert_eq!(h.join().unwrap().as_deref(), Some("worker"));
    /// });
    /// ```
    pub fn name(&self) -> Option<&str> {
        // SAFETY: a `Thread` exists only inside its own (so live) thread.
        unsafe { (*self.thmb.as_ptr()).name.as_deref() }
    }
}

/// The calling user thread: one read of the LTN register.
///
/// Panics outside a user thread (outside [`run`](crate::run)); see [`try_current`].
///
/// ```
/// libuthread::run(1, || println!("I am {:?}", libuthread::current().id()));
/// ```
#[inline]
pub fn current() -> Thread {
    try_current().expect("libuthread::current() outside a user thread")
}

/// The calling user thread, or `None` outside one.
///
/// ```
/// assert!(libuthread::try_current().is_none());
/// libuthread::run(1, || assert!(libuthread::try_current().is_some()));
/// ```
#[inline]
pub fn try_current() -> Option<Thread> {
    NonNull::new(platform::ltn()).map(|thmb| Thread { thmb, _not_send: PhantomData })
}

/// The index of the vCPU running the calling thread at this moment (it may change at any
/// switch), or `None` outside a user thread.
///
/// ```
/// libuthread::run(2, || assert!(libuthread::current_vcpu().unwrap() < 2));
/// ```
pub fn current_vcpu() -> Option<usize> {
    let t = platform::ltn();
    // SAFETY: a non-null LTN is the live calling thread.
    (!t.is_null()).then(|| unsafe { sched::vcpu_of(t) })
}

/// Number of vCPUs of the running runtime (0 outside [`run`](crate::run)).
///
/// ```
/// libuthread::run(3, || assert_eq!(libuthread::vcpu_count(), 3));
/// ```
pub fn vcpu_count() -> usize {
    sched::vcpu_count()
}

/// Lets the other ready threads of this vCPU run first; returns at once when there are none.
///
/// ```
/// libuthread::run(1, || {
///     let h = libuthread::spawn(|| 7);
///     libuthread::yield_now(); // the new thread runs now
///     assert!(h.is_finished());
/// });
/// ```
#[inline]
pub fn yield_now() {
    sched::yield_current()
}

/// Blocks the calling thread for at least `duration`; other threads keep running (on Tsumugi
/// the vCPU goes to another thread while the kernel times the sleep; hosted, a timer thread
/// wakes it).
///
/// ```
/// use std::time::{Duration, Instant};
/// libuthread::run(1, || {
///     let start = Instant::now();
///     libuthread::sleep(Duration::from_millis(5));
///     assert!(start.elapsed() >= Duration::from_millis(5));
/// });
/// ```
pub fn sleep(duration: Duration) {
    let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
    platform::sleep_current(nanos)
}

/// Blocks the calling thread until `deadline` (std's `thread::sleep_until`); returns at once
/// when it has passed.
///
/// ```
/// use libuthread::Instant;
/// use std::time::Duration;
/// libuthread::run(1, || {
///     let deadline = Instant::now() + Duration::from_millis(3);
///     libuthread::sleep_until(deadline);
///     assert!(Instant::now() >= deadline);
/// });
/// ```
pub fn sleep_until(deadline: Instant) {
    let now = Instant::now();
    if deadline > now {
        sleep(deadline.duration_since(now));
    }
}

/// A point in monotonic time, for [`sleep_until`]: hosted, `std::time::Instant` itself; on
/// Tsumugi a type with the same basic operations over `Clock::MonotonicNanos`.
#[cfg(not(target_os = "none"))]
pub use std::time::Instant;

/// A point in monotonic time (nanoseconds since boot), for [`sleep_until`]; the subset of
/// `std::time::Instant` a program needs.
#[cfg(target_os = "none")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

#[cfg(target_os = "none")]
impl Instant {
    /// Now.
    pub fn now() -> Instant {
        Instant(platform::now_nanos())
    }

    /// Time from `earlier` to `self` (zero if `earlier` is later, as std does now).
    pub fn duration_since(&self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// Same as [`duration_since`](Self::duration_since).
    pub fn saturating_duration_since(&self, earlier: Instant) -> Duration {
        self.duration_since(earlier)
    }

    /// Time since `self`.
    pub fn elapsed(&self) -> Duration {
        Instant::now().duration_since(*self)
    }

    /// `self + duration`, if representable.
    pub fn checked_add(&self, duration: Duration) -> Option<Instant> {
        u64::try_from(duration.as_nanos()).ok().and_then(|d| self.0.checked_add(d)).map(Instant)
    }

    /// `self - duration`, if representable.
    pub fn checked_sub(&self, duration: Duration) -> Option<Instant> {
        u64::try_from(duration.as_nanos()).ok().and_then(|d| self.0.checked_sub(d)).map(Instant)
    }
}

#[cfg(target_os = "none")]
impl core::ops::Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, duration: Duration) -> Instant {
        self.checked_add(duration).expect("overflow when adding duration to instant")
    }
}

#[cfg(target_os = "none")]
impl core::ops::Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, earlier: Instant) -> Duration {
        self.duration_since(earlier)
    }
}

/// How many threads can usefully run at once (std's `thread::available_parallelism`): inside
/// [`run`](crate::run) the runtime's vCPU count, outside it the platform's default (the
/// number of CPUs). Never fails here; the `Result` keeps std's shape (with [`Errno`](crate::Errno)
/// for std's `io::Error`, which a `no_std` library does not have).
///
/// ```
/// libuthread::run(3, || assert_eq!(libuthread::available_parallelism().unwrap().get(), 3));
/// assert!(libuthread::available_parallelism().unwrap().get() >= 1);
/// ```
pub fn available_parallelism() -> Result<NonZeroUsize, crate::Errno> {
    let n = match vcpu_count() {
        0 => platform::default_vcpus(),
        n => n,
    };
    Ok(NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN))
}

/// Spawns a thread running `f` with the default settings; see [`Builder`].
///
/// Creation is lazy: this takes a ThMB (from the vCPU's pool, the closure stored inline when
/// small) and queues it (handing it to an idle vCPU if there is one); the thread gets a stack
/// only when it first runs.
///
/// Panics outside [`run`](crate::run).
///
/// ```
/// libuthread::run(4, || {
///     let handles: Vec<_> = (0..10).map(|i| libuthread::spawn(move || i * i)).collect();
///     let sum: i32 = handles.into_iter().map(|h| h.join().unwrap()).sum();
///     assert_eq!(sum, 285);
/// });
/// ```
pub fn spawn<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    Builder::new().spawn(f)
}

/// Runs `a` and `b`, possibly in parallel, and returns both results: fork-join with lazy task
/// creation (StackThreads, Cilk, rayon's `join`), the cheap way to fork a child that is joined
/// by the same caller.
///
/// `b` is forked as a *record* in this call's frame (a few words, no ThMB, no stack), then `a`
/// is called. If nobody took the record meanwhile, `b` is then called right here, as a plain
/// call that is part of the calling thread — the same [`current`], the same thread-locals (so
/// a fork nobody takes costs about two dozen instructions over the two plain calls, and the
/// caller keeps no register for it; [`spawn`] + [`JoinHandle::join`] makes a thread of the
/// child even when it runs inline). The record becomes a thread of its own (a
/// detached one, with the default stack size; see [`Builder::join`] for another) as soon as
/// that can matter: when `a` blocks, yields or is preempted (its vCPU enters the scheduler), or
/// when a fork of this thread finds a vCPU idle and `b` is its oldest fork still pending (the
/// outermost, largest piece, as a Cilk thief takes it), so the idle vCPU runs `b` in parallel;
/// `join` then waits for that thread. So `a`
/// may wait for something `b` does, as with two threads. If `b` runs inline and blocks, the
/// caller (about to wait for `b` anyway) blocks with it.
///
/// A panic in `a` (hosted) is propagated after `b` was taken back or finished; a panic in `b`
/// is propagated once `a` has returned. Outside a user thread (outside [`run`](crate::run)) or
/// inside a library critical section, `a` and then `b` are plain calls.
///
/// Both closures may borrow from the caller (`b` need not be `'static`, only `Send`): `join`
/// does not return, nor unwind, before `b` has run — inline or as its thread — as with
/// `std::thread::scope` or `rayon::join`.
///
/// ```
/// fn fib(n: u64) -> u64 {
///     if n < 2 {
///         return n;
///     }
///     let (x, y) = libuthread::join(|| fib(n - 2), move || fib(n - 1));
///     x + y
/// }
/// libuthread::run(2, || assert_eq!(fib(15), 610));
///
/// // Borrowing: sum the halves of a slice in place.
/// fn sum(v: &[u64]) -> u64 {
///     if v.len() <= 4 {
///         return v.iter().sum();
///     }
///     let (left, right) = v.split_at(v.len() / 2);
///     let (a, b) = libuthread::join(|| sum(left), || sum(right));
///     a + b
/// }
/// let v: Vec<u64> = (1..=100).collect();
/// libuthread::run(2, move || assert_eq!(sum(&v), 5050));
/// ```
// Always inlined, as `Builder::join`: a recursive caller (a function whose `a` or `b` calls it
// again) otherwise may be inlined into this function instead, which then becomes the recursion
// and takes both closures by pointer — their captures stored, pointed to and loaded again at
// every fork (StackThreads FK nqueens on x86_64: about 24 instructions a fork, 95 % overhead
// against 24 %).
#[inline(always)]
pub fn join<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA,
    B: FnOnce() -> RB + Send,
    RB: Send,
{
    crate::join::join_with(None, sched::DEFAULT_STACK_SIZE, a, b)
}

/// Thread settings: name and stack size.
///
/// ```
/// libuthread::run(1, || {
///     let h = libuthread::Builder::new()
///         .name("deep".into())
///         .stack_size(1 << 20)
///         .spawn(|| 1 + 1);
///     assert_eq!(h.join().unwrap(), 2);
/// });
/// ```
#[derive(Debug, Default)]
pub struct Builder {
    name: Option<String>,
    stack_size: Option<usize>,
}

impl Builder {
    /// Default settings: no name, a 256 KiB stack.
    pub fn new() -> Builder {
        Builder::default()
    }

    /// Names the thread (see [`Thread::name`]).
    pub fn name(mut self, name: String) -> Builder {
        self.name = Some(name);
        self
    }

    /// Sets the stack size in bytes (rounded up to whole pages by the platform; stacks of
    /// the same size are pooled).
    pub fn stack_size(mut self, size: usize) -> Builder {
        self.stack_size = Some(size);
        self
    }

    /// Spawns the thread. Infallible: creation is lazy, so the only resource that can run out
    /// (a stack) is taken when the thread first runs — if the platform has none left then,
    /// the program ends with a message.
    ///
    /// Panics outside [`run`](crate::run).
    #[inline]
    pub fn spawn<F, T>(self, f: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let size = self.stack_size.unwrap_or(sched::DEFAULT_STACK_SIZE).max(16 * 1024);
        // The name as a `Box<str>` from here on: `None` is one null word, passed in a register.
        let t = sched::spawn(f, self.name.map(String::into_boxed_str), size);
        JoinHandle { thmb: t, _marker: PhantomData }
    }
}

impl Builder {
    /// [`join`](crate::join) whose `b`, if it becomes a thread, gets these settings (name and
    /// stack size); when `b` runs inline they cost nothing.
    ///
    /// ```
    /// libuthread::run(1, || {
    ///     let (a, b) = libuthread::Builder::new().stack_size(16 * 1024).join(|| 1, || 2);
    ///     assert_eq!(a + b, 3);
    /// });
    /// ```
    // Always inlined: see `join`.
    #[inline(always)]
    pub fn join<A, B, RA, RB>(self, a: A, b: B) -> (RA, RB)
    where
        A: FnOnce() -> RA,
        B: FnOnce() -> RB + Send,
        RB: Send,
    {
        let size = self.stack_size.unwrap_or(sched::DEFAULT_STACK_SIZE).max(16 * 1024);
        crate::join::join_with(self.name, size, a, b)
    }
}

/// Owns the right to join a thread. Dropping it detaches the thread.
#[derive(Debug)]
pub struct JoinHandle<T> {
    thmb: *mut Thmb,
    _marker: PhantomData<fn() -> T>,
}

// SAFETY: the handle only reaches the ThMB through atomics and the once-written outcome; the
// result it yields is a `T: Send`.
unsafe impl<T: Send> Send for JoinHandle<T> {}
// SAFETY: `&JoinHandle` only reads the id and the join word.
unsafe impl<T: Send> Sync for JoinHandle<T> {}

impl<T: 'static> JoinHandle<T> {
    /// Waits for the thread to finish and returns its result, or (hosted) the payload of the
    /// panic that ended it. The waiting thread gives up its vCPU — or, when nothing else is
    /// runnable, keeps and parks it until the exiting thread unparks it.
    ///
    /// ```
    /// libuthread::run(2, || {
    ///     let h = libuthread::spawn(|| "done");
    ///     assert_eq!(h.join().unwrap(), "done");
    /// });
    /// ```
    // Always inlined: the fast path (the child run inline) is a few dozen instructions, and as
    // a call of its own it paid a frame and five callee-saved registers (about 16 instructions
    // of `create_exit`'s 112 on x86_64); the waiting path stays out of line.
    #[inline(always)]
    pub fn join(self) -> Result<T, Box<dyn Any + Send + 'static>> {
        let t = self.thmb;
        core::mem::forget(self);
        // A child that has not started yet runs right here, on this stack, as itself
        // (work-first; see `sched::run_inline`, which also looks at the join word when the
        // child is not on the unpublished list); otherwise wait for it.
        // SAFETY: our reference, and `T` is the spawned closure's result type. On success the
        // call also took the outcome and gave up our reference.
        let outcome = match unsafe { crate::sched::run_inline::<T>(t) } {
            Some(outcome) => outcome,
            // SAFETY: our reference, not given up above.
            None => unsafe { Self::join_waiting(t) },
        };
        crate::unwind::settled(outcome)
    }

    /// [`join`](Self::join) of a child that started (or finished) already: waits for it, then
    /// returns its result.
    ///
    /// # Safety
    /// The caller gives up its handle's reference to `t`, whose result type is `T`.
    #[inline(never)]
    unsafe fn join_waiting(t: *mut Thmb) -> Result<T, Box<dyn Any + Send + 'static>> {
        // SAFETY: our reference keeps `t` live.
        let join = unsafe { &(*t).join };
        if join.load(Ordering::Acquire) != JOIN_EXITED {
            crate::sched::blocking::block(|me| {
                join.compare_exchange(JOIN_RUNNING, me as usize, Ordering::AcqRel, Ordering::Acquire).is_ok()
            });
        }
        // Synchronise with the exiting thread's write of its outcome.
        let exited = join.load(Ordering::Acquire);
        debug_assert_eq!(exited, JOIN_EXITED);
        // SAFETY: EXITED: the outcome is written and only we read it; the handle's `T` is the
        // spawned closure's result type.
        let outcome = unsafe { (*t).task.take::<T>() };
        // SAFETY: our reference.
        unsafe { Thmb::release(t) };
        outcome
    }

    /// The thread's id.
    pub fn id(&self) -> ThreadId {
        ThreadId(NonZeroUsize::new(self.thmb as usize).expect("non-null"))
    }

    /// Whether the thread has finished (so [`join`](Self::join) would not wait).
    pub fn is_finished(&self) -> bool {
        // SAFETY: our reference keeps the ThMB live.
        unsafe { (*self.thmb).join.load(Ordering::Acquire) == JOIN_EXITED }
    }
}

impl<T> Drop for JoinHandle<T> {
    fn drop(&mut self) {
        let t = self.thmb;
        // SAFETY: our reference keeps `t` live.
        if unsafe { (*t).join.swap(JOIN_DETACHED, Ordering::AcqRel) } == JOIN_EXITED {
            // The result is ours to drop, here in user context.
            // SAFETY: EXITED: written, and nobody else reads it.
            unsafe { (*t).task.clear() };
        }
        // SAFETY: our reference.
        unsafe { Thmb::release(t) };
    }
}
