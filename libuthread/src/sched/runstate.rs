//! The state word of a user thread and the handshake between a thread that blocks and the
//! thread (or timer, or kernel event) that wakes it.
//!
//! Blocking happens in three steps: the thread marks itself `PARKING`, makes itself visible to
//! its waker (puts a node on a wait list), then gives up its vCPU. The waker can act at any
//! point after the second step, even before the thread's register window is saved, so neither
//! side may assume the other has finished:
//!
//! | state at wake | waker does | who makes the thread run again |
//! |---|---|---|
//! | `PARKING` | `→ NOTIFIED` | the scheduler, once the window is saved (`commit_park` fails) |
//! | `PARKED` | `→ READY` | the waker: it queues the thread |
//! | `IN_PLACE` | `→ WOKEN` | the waker unparks the vCPU the thread is still sitting on |
//!
//! `IN_PLACE` is MULiTh's fast path: a thread that blocks when its vCPU has nothing else to run
//! keeps the vCPU and parks it (no context switch at all); the waker unparks that vCPU.


// Under loom only the model checks use these (the scheduler is not built).
#![cfg_attr(loom, allow(dead_code))]

use crate::prim::{AtomicU32, Ordering};

/// Queued (a new thread: this or `RUNNING`, see below).
pub(crate) const READY: u32 = 0;
/// On a vCPU.
///
/// The two are told apart only for whoever looks (tests, a debugger): nothing decides on
/// them. A thread's state matters from the moment it blocks, and it writes it itself then
/// ([`RunState::begin_park`], [`RunState::park_direct`]), so a new thread starts with what its
/// ThMB last said — `READY` or `RUNNING`, never a blocking state, since every thread ends
/// running — and a child run inline at its join is not marked `RUNNING` (two stores fewer
/// per spawn + inline join).
pub(crate) const RUNNING: u32 = 1;
/// Decided to block; may not have left its vCPU yet.
pub(crate) const PARKING: u32 = 2;
/// Woken while still `PARKING`.
pub(crate) const NOTIFIED: u32 = 3;
/// Off its vCPU, window saved, in no ready queue.
pub(crate) const PARKED: u32 = 4;
/// Blocked but still holding its (parked) vCPU.
pub(crate) const IN_PLACE: u32 = 5;
/// Woken while `IN_PLACE`.
pub(crate) const WOKEN: u32 = 6;
/// Blocked in the kernel (a `BLOCKED` event); runs again after `UNBLOCKED`.
#[cfg_attr(loom, allow(dead_code))]
pub(crate) const KERNEL_BLOCKED: u32 = 7;

/// What a waker must do after [`RunState::wake`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// Nothing: the thread had not left its vCPU; the scheduler requeues it.
    Notified,
    /// Queue the thread (it is now `READY` and the waker owns it until queued).
    Enqueue,
    /// Unpark the vCPU the thread is parked on.
    UnparkInPlace,
}

/// The state word.
#[repr(transparent)]
pub(crate) struct RunState(AtomicU32);

impl RunState {
    /// A thread that has not run yet.
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        RunState(AtomicU32::new(READY))
    }

    /// A thread that has not run yet.
    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        RunState(AtomicU32::new(READY))
    }

    /// The current state (for assertions and tests).
    #[allow(dead_code)]
    pub(crate) fn get(&self) -> u32 {
        self.0.load(Ordering::Acquire)
    }

    /// Sets the state outright; only its owner (the running thread, or the scheduler that holds
    /// it off every list) may.
    #[inline]
    pub(crate) fn set(&self, state: u32) {
        self.0.store(state, Ordering::Release);
    }

    /// [`set`](Self::set) of `READY` or `RUNNING` on a voluntary switch's common path (the
    /// thread taken off, or put on, its vCPU's own queue, which only that vCPU touches with
    /// LTN = 0), where the store publishes nothing: no waker acts on a READY or RUNNING thread
    /// (wakers own the wake-up of a thread they found parking or parked), and whoever takes
    /// the thread from elsewhere synchronises through the queue or its mask, not through this
    /// word. A plain store on every port (a release store is `fence` + `sw` on riscv64, and an
    /// address computation + `stlr` on aarch64: four instructions per yield round trip there).
    #[inline]
    pub(crate) fn set_switching(&self, state: u32) {
        debug_assert!(state == READY || state == RUNNING);
        self.0.store(state, Ordering::Relaxed);
    }

    /// The running thread decides to block (before it becomes visible to a waker).
    #[inline]
    pub(crate) fn begin_park(&self) {
        self.set(PARKING);
    }

    /// The running thread decides to block *and* to leave its vCPU by a direct switch, before
    /// it becomes visible to a waker: `→ PARKED` at once, with no `PARKING` step and so no
    /// commit after the switch (`sched::block_current_direct`). Its mask must say "in flight"
    /// before this store (release): a waker then makes it `READY` and queues it, and whoever
    /// takes it waits for the switch's save (`wait_published`), as after a committed park.
    #[cfg_attr(loom, allow(dead_code))]
    #[inline(always)]
    pub(crate) fn park_direct(&self) {
        self.set(PARKED);
    }

    /// The thread found it need not block after all (it never became visible to a waker).
    #[cfg_attr(loom, allow(dead_code))]
    #[inline]
    pub(crate) fn cancel_park(&self) {
        self.set(RUNNING);
    }

    /// The scheduler, after saving the window: `PARKING → PARKED`. `false`: the thread was woken
    /// meanwhile and must be made runnable again by the caller. Always inlined: the direct
    /// switch that commits with it makes no call on its common path (`park_current`).
    #[inline(always)]
    pub(crate) fn commit_park(&self) -> bool {
        // (The impossible states go to a cold function, so the direct switch's inlined commit
        // is a CAS and one branch: a three-way match here cost ~8 instructions per block.)
        match self.0.compare_exchange(PARKING, PARKED, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            Err(state) => {
                if state != NOTIFIED {
                    bad_state("commit_park", state);
                }
                false
            }
        }
    }

    /// The thread stays on its vCPU and parks it: `PARKING → IN_PLACE`. `false`: it was woken
    /// already (state back to `RUNNING`).
    pub(crate) fn park_in_place(&self) -> bool {
        match self.0.compare_exchange(PARKING, IN_PLACE, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            Err(NOTIFIED) => {
                self.set(RUNNING);
                false
            }
            Err(other) => unreachable!("park_in_place in state {other}"),
        }
    }

    /// The in-place parker gives its vCPU to other work: `IN_PLACE → PARKING` (then it switches
    /// out as an ordinary block). `false`: it was woken first (state back to `RUNNING`).
    pub(crate) fn leave_in_place(&self) -> bool {
        match self.0.compare_exchange(IN_PLACE, PARKING, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            Err(WOKEN) => {
                self.set(RUNNING);
                false
            }
            Err(other) => unreachable!("leave_in_place in state {other}"),
        }
    }

    /// The in-place parker looks whether it was woken (and if so takes the wake-up).
    pub(crate) fn take_in_place_wake(&self) -> bool {
        if self.0.load(Ordering::Acquire) == WOKEN {
            self.set(RUNNING);
            true
        } else {
            false
        }
    }

    /// A waker wakes the thread (exactly once per block: it removed the thread's node from a
    /// wait list, or owns its timer entry).
    #[inline(always)]
    pub(crate) fn wake(&self) -> Wake {
        if self.wake_parked() {
            return Wake::Enqueue;
        }
        self.wake_contended()
    }

    /// [`RunState::wake`]'s common case alone, as one CAS: the thread has left its vCPU
    /// (`PARKED`), so it becomes `READY` and the waker queues it (a mutex or a message handed
    /// to its waiter); `true` then. `false`: nothing changed, and the wake-up is still the
    /// caller's to make, with [`RunState::wake_contended`]. (A hand-off path tests this inline
    /// and leaves everything else to an out-of-line function it tail-calls: see
    /// `sched::wake_from_leave`.)
    ///
    /// A load and a store, not a CAS: `PARKED` is final for everyone but the waker. The thread
    /// itself is off its vCPU and waits for this wake-up; the scheduler's only write on a
    /// blocked thread is `commit_park`'s `PARKING → PARKED`, already done; and the caller owns
    /// the wake-up (it took the node off the list), so no second waker exists. So a `PARKED`
    /// seen here stays `PARKED` until our store (hosted x86_64: a `lock cmpxchg` fewer per
    /// hand-off, ~20 cycles). Acquire pairs with the store that made it `PARKED` (the
    /// thread's `park_direct` or the scheduler's commit), Release with whoever takes the
    /// thread off the queue we put it on — what the CAS's AcqRel gave.
    #[inline(always)]
    pub(crate) fn wake_parked(&self) -> bool {
        if self.0.load(Ordering::Acquire) != PARKED {
            return false;
        }
        self.0.store(READY, Ordering::Release);
        true
    }

    /// [`RunState::wake`] after [`RunState::wake_parked`] found the thread not `PARKED` (or any
    /// time: it starts from a fresh load): the whole table of the module docs.
    #[inline(never)]
    pub(crate) fn wake_contended(&self) -> Wake {
        let mut state = self.0.load(Ordering::Acquire);
        loop {
            let (next, action) = match state {
                PARKING => (NOTIFIED, Wake::Notified),
                PARKED => (READY, Wake::Enqueue),
                IN_PLACE => (WOKEN, Wake::UnparkInPlace),
                other => bad_state("wake", other),
            };
            match self.0.compare_exchange_weak(state, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return action,
                Err(now) => state = now,
            }
        }
    }
}

/// A state transition found a state the protocol rules out (a library bug).
#[cold]
#[inline(never)]
fn bad_state(op: &str, state: u32) -> ! {
    unreachable!("{op} in state {state}")
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn wake_before_the_window_is_saved_is_kept() {
        let s = RunState::new();
        s.set(RUNNING);
        s.begin_park();
        assert_eq!(s.wake(), Wake::Notified);
        assert!(!s.commit_park());
    }

    #[test]
    fn wake_after_the_switch_queues() {
        let s = RunState::new();
        s.set(RUNNING);
        s.begin_park();
        assert!(s.commit_park());
        assert_eq!(s.wake(), Wake::Enqueue);
        assert_eq!(s.get(), READY);
    }

    #[test]
    fn in_place_round_trips() {
        let s = RunState::new();
        s.set(RUNNING);
        s.begin_park();
        assert!(s.park_in_place());
        assert!(!s.take_in_place_wake());
        assert_eq!(s.wake(), Wake::UnparkInPlace);
        assert!(s.take_in_place_wake());
        assert_eq!(s.get(), RUNNING);
        s.begin_park();
        assert!(s.park_in_place());
        assert!(s.leave_in_place());
        assert!(s.commit_park());
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::atomic::AtomicUsize;
    use loom::sync::Arc;

    /// Whatever the interleaving, exactly one side makes the blocked thread runnable again, and
    /// the in-place parker never sleeps through its wake-up.
    #[test]
    fn loom_handshake_resumes_exactly_once() {
        loom::model(|| {
            let state = Arc::new(RunState::new());
            let published = Arc::new(loom::sync::atomic::AtomicBool::new(false));
            let resumed = Arc::new(AtomicUsize::new(0));
            state.set(RUNNING);

            let waker = {
                let (state, published, resumed) = (state.clone(), published.clone(), resumed.clone());
                loom::thread::spawn(move || {
                    while !published.load(Ordering::Acquire) {
                        loom::thread::yield_now();
                    }
                    match state.wake() {
                        Wake::Enqueue => {
                            resumed.fetch_add(1, Ordering::Relaxed);
                        }
                        Wake::Notified | Wake::UnparkInPlace => {}
                    }
                })
            };

            state.begin_park();
            published.store(true, Ordering::Release);
            // The scheduler side: try the in-place path, give it up once, then switch out.
            if state.park_in_place() {
                if !state.take_in_place_wake() {
                    if state.leave_in_place() {
                        if !state.commit_park() {
                            resumed.fetch_add(1, Ordering::Relaxed);
                        }
                    } else {
                        resumed.fetch_add(1, Ordering::Relaxed);
                    }
                } else {
                    resumed.fetch_add(1, Ordering::Relaxed);
                }
            } else {
                resumed.fetch_add(1, Ordering::Relaxed);
            }
            waker.join().unwrap();
            // A thread parked for good (commit_park succeeded, waker then enqueued) counts once
            // through the waker; every other path counts once through the scheduler.
            assert_eq!(resumed.load(Ordering::Relaxed), 1);
        });
    }

    /// A wait the kernel queues and the library parks (`platform::queued_wait`, S3): the
    /// thread is `PARKING` before its syscall queues it in the kernel's holder table; a release
    /// on another CPU may take it off at once and post `UNBLOCKED`, which another vCPU drains
    /// — storing the result, then waking — before the syscall has even returned. Modelled with
    /// the kernel's queue as a mutex, the result word and the real `RunState`: the thread
    /// resumes exactly once (through the failed commit or the waker's queueing) and reads the
    /// result the waker stored, in every interleaving.
    #[test]
    fn loom_queued_wait_keeps_an_early_unblocked() {
        use loom::sync::atomic::AtomicBool;
        use loom::sync::Mutex;
        loom::model(|| {
            let state = Arc::new(RunState::new());
            let kernel_queue = Arc::new(Mutex::new(false));
            let result = Arc::new(AtomicUsize::new(0));
            // Set by the waker when it queued the thread (the ready queue's publication).
            let queued = Arc::new(AtomicBool::new(false));
            state.set(RUNNING);

            let waker = {
                let (state, kernel_queue, result, queued) = (state.clone(), kernel_queue.clone(), result.clone(), queued.clone());
                loom::thread::spawn(move || {
                    // The release: take the waiter off the kernel's queue if it is there.
                    let taken = core::mem::take(&mut *kernel_queue.lock().unwrap());
                    if taken {
                        // The drain of UNBLOCKED(t, result).
                        result.store(42, Ordering::Relaxed);
                        if state.wake() == Wake::Enqueue {
                            queued.store(true, Ordering::Release);
                        }
                    }
                    taken
                })
            };

            state.begin_park();
            // The syscall: queued (answers QUEUED) — the waker may act from here on.
            *kernel_queue.lock().unwrap() = true;
            // The library's park: the direct switch's commit.
            let resumed_by_commit = !state.commit_park();
            let woken = waker.join().unwrap();
            if !woken {
                // No release came in this run: take it back off the queue as a release would,
                // so the model ends (the release is what the test is about, not its absence).
                assert!(!resumed_by_commit);
                return;
            }
            if resumed_by_commit {
                assert!(!queued.load(Ordering::Acquire));
            } else {
                assert!(queued.load(Ordering::Acquire));
            }
            // The resumed thread reads its result (ordered by the state CAS or the queue).
            assert_eq!(result.load(Ordering::Relaxed), 42);
        });
    }

    /// The direct switch's publication (`sched::scheduler::switch_direct`): a thread is made
    /// reachable — queued behind the others at a yield, or its park committed at a block —
    /// *before* its vCPU saves its window, with its mask "in flight"; the save ends with a
    /// release store of mask WINDOW, and whoever takes the thread off a queue waits for it
    /// (`wait_published`). Modelled with the real `RunState`, a queue, the mask as an atomic
    /// and the window as a cell loom checks for races: the thread is queued exactly once (no
    /// lost wake-up, no double queueing), a thief never sees the mask of the running thread
    /// (NONE: it would take it for a thread that never ran), and it reads a complete window.
    ///
    /// `direct`: the block of `sched::block_current_direct`, which decides the switch before
    /// it publishes the thread: the mask in flight, then `PARKED` at once, then the publication
    /// — no `PARKING`, no commit after it.
    fn model_direct_switch(block: bool, direct: bool) {
        use loom::cell::UnsafeCell;
        use loom::sync::atomic::{AtomicBool, AtomicU64};
        use loom::sync::Mutex;
        const NONE: u64 = 0;
        const WINDOW: u64 = 1;
        const IN_FLIGHT: u64 = 1 << 63;

        struct Thread {
            state: RunState,
            mask: AtomicU64,
            window: UnsafeCell<u64>,
        }
        // SAFETY: the window cell is shared on purpose: loom reports any racy access to it.
        unsafe impl Sync for Thread {}

        loom::model(move || {
            let t = Arc::new(Thread { state: RunState::new(), mask: AtomicU64::new(NONE), window: UnsafeCell::new(0) });
            let queue = Arc::new(Mutex::new(0usize)); // how many times the thread is queued
            let published = Arc::new(AtomicBool::new(false));
            t.state.set(RUNNING);

            // The switching vCPU.
            let switcher = {
                let (t, queue, published) = (t.clone(), queue.clone(), published.clone());
                loom::thread::spawn(move || {
                    if block && direct {
                        t.mask.store(IN_FLIGHT, Ordering::Relaxed);
                        t.state.park_direct();
                        published.store(true, Ordering::Release); // on a wait list now
                    } else if block {
                        t.state.begin_park();
                        published.store(true, Ordering::Release); // on a wait list now
                        t.mask.store(IN_FLIGHT, Ordering::Relaxed);
                        if !t.state.commit_park() {
                            t.state.set(READY);
                            *queue.lock().unwrap() += 1;
                        }
                    } else {
                        t.state.set(READY);
                        let mut q = queue.lock().unwrap();
                        t.mask.store(IN_FLIGHT, Ordering::Relaxed);
                        *q += 1;
                    }
                    // libuthread_switch_window: the window, then the mask (release).
                    t.window.with_mut(|w| {
                        // SAFETY: loom checks this write against the thief's read.
                        unsafe { *w = 42 }
                    });
                    t.mask.store(WINDOW, Ordering::Release);
                })
            };
            // The waker (a blocked thread only), on another vCPU: it queues the thread there
            // (`make_ready`) and is also the thief below that runs it.
            if block {
                while !published.load(Ordering::Acquire) {
                    loom::thread::yield_now();
                }
                if t.state.wake() == Wake::Enqueue {
                    *queue.lock().unwrap() += 1;
                }
            }
            // A thief on another vCPU: takes the thread off the queue and runs it.
            loop {
                let mut q = queue.lock().unwrap();
                if *q > 0 {
                    *q -= 1;
                    break;
                }
                drop(q);
                loom::thread::yield_now();
            }
            // `prepare`: wait while in flight; never the running thread's NONE.
            loop {
                match t.mask.load(Ordering::Acquire) {
                    IN_FLIGHT => loom::thread::yield_now(),
                    m => {
                        assert_eq!(m, WINDOW);
                        break;
                    }
                }
            }
            t.state.set(RUNNING);
            // SAFETY: loom checks this read against the switcher's write.
            let window = t.window.with(|w| unsafe { *w });
            assert_eq!(window, 42);
            switcher.join().unwrap();
            assert_eq!(*queue.lock().unwrap(), 0, "queued twice");
        });
    }

    #[test]
    fn loom_direct_yield_publishes_before_the_save() {
        model_direct_switch(false, false);
    }

    #[test]
    fn loom_direct_block_loses_no_wakeup() {
        model_direct_switch(true, false);
    }

    #[test]
    fn loom_block_decided_before_publishing_loses_no_wakeup() {
        model_direct_switch(true, true);
    }
}
