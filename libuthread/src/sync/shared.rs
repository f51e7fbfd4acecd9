//! Locks and barriers shared between programs, with the kernel's help (S3, seed 002; the word
//! layouts are `tsumugi_abi::s3`, the protocol ARCHITECTURE.md "Shared locks and barriers").
//!
//! Programs share memory by pointer, so a lock shared between them is an explicit type placed
//! in a shared region: [`SharedMutex`] and [`SharedBarrier`] are `#[repr(C)]` words (plus the
//! guarded value) that any program holding the region with write rights may use. [`Mutex`](super::Mutex) and
//! [`Barrier`](super::Barrier) stay the within-program types: their waiters are queued in the library's own
//! memory, which another program cannot see.
//!
//! - [`SharedMutex::lock`]: one user-mode compare-exchange; when it fails the rest is the
//!   kernel's (`s3_lock`): the kernel queues the thread and answers at once, the library parks
//!   the thread at user level and runs another, and the thread comes back (`UNBLOCKED`) owning
//!   the lock, which the kernel acquired for it when the holder released (Auto Lock) — no
//!   retry. A release with no waiter never enters the kernel.
//! - [`SharedBarrier::wait`]: arrivals count in user mode (every one adds one to the word);
//!   one waiter per program and round sleeps in the kernel, the program's other waiters of the
//!   round wait on it in the library (`gather`), and the last arrival releases every program's
//!   sleeper with one `s3_wake`, each of which then releases its program's waiters in a batch.
//! - When the kernel's holder table is full (`EAGAIN`), both wait in software (spin, then
//!   yield) and try the kernel again between rounds; [`fallbacks`] counts those.
//! - [`SoftMutex`] keeps the soft-sync baselines the benchmarks compare with: spin,
//!   spin-then-yield and a futex-style wait/wake.
//!
//! ```no_run
//! use libuthread::sync::SharedMutex;
//! # fn f(shared: *mut SharedMutex<u64>) {
//! // `shared` points into a region another program was granted with write rights.
//! // SAFETY: the region lives while both programs use it; this program initialises it once.
//! let lock: &SharedMutex<u64> = unsafe { SharedMutex::init_at(shared, 0) };
//! *lock.lock() += 1;
//! # }
//! ```

use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tsumugi_abi::s3::{barrier, OWNER_DIED};
use tsumugi_abi::syscall::Errno;

use super::gather::{Join, GATHER};
use crate::platform;
use crate::sys;

/// Compare-exchanges in a spin round of the software fallback before it yields.
const SPINS: usize = 64;

static FALLBACKS: AtomicUsize = AtomicUsize::new(0);

/// How many times a shared lock or barrier of this program waited in software because the
/// kernel's holder table was full.
pub fn fallbacks() -> usize {
    FALLBACKS.load(Ordering::Relaxed)
}

static SLOTS_FULL: AtomicUsize = AtomicUsize::new(0);
static OUTSIDE: AtomicUsize = AtomicUsize::new(0);

/// How many waits at a [`SharedBarrier`] of this program slept in the kernel on their own,
/// outside the program's gathering (both are rare paths; the `s3_gather` test checks them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SoloSleeps {
    /// Every gathering slot of the program was in use.
    pub slots_full: usize,
    /// The caller was no user thread of the runtime (LTN 0: a program's main thread outside
    /// [`run`](crate::run), or a kernel thread of its own).
    pub outside: usize,
}

/// This program's [`SoloSleeps`] so far.
pub fn solo_sleeps() -> SoloSleeps {
    SoloSleeps { slots_full: SLOTS_FULL.load(Ordering::Relaxed), outside: OUTSIDE.load(Ordering::Relaxed) }
}

fn tag() -> u64 {
    crate::current().id().as_usize() as u64
}

/// A mutual-exclusion lock that threads of several programs may share (it lives in a region
/// they share). Not recursive; released by the thread that holds it (its guard).
#[repr(C)]
pub struct SharedMutex<T> {
    word: AtomicU64,
    value: UnsafeCell<T>,
}

// SAFETY: the lock word serialises access to the value, as for `Mutex`.
unsafe impl<T: Send> Sync for SharedMutex<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for SharedMutex<T> {}

/// Owns a [`SharedMutex`] until dropped.
pub struct SharedMutexGuard<'a, T> {
    lock: &'a SharedMutex<T>,
    inherited: bool,
}

impl<T> SharedMutex<T> {
    /// An unlocked lock holding `value`.
    pub const fn new(value: T) -> Self {
        SharedMutex { word: AtomicU64::new(0), value: UnsafeCell::new(value) }
    }

    /// Writes an unlocked lock holding `value` at `at` and returns it.
    ///
    /// # Safety
    /// `at` is aligned, writable, nobody uses the memory as a lock yet, and it lives for as
    /// long as the returned reference is used.
    pub unsafe fn init_at<'a>(at: *mut Self, value: T) -> &'a Self {
        // SAFETY: the caller's promise.
        unsafe {
            at.write(Self::new(value));
            &*at
        }
    }

    /// The lock word's address (what the kernel calls name).
    pub fn word(&self) -> usize {
        &self.word as *const AtomicU64 as usize
    }

    /// Takes the lock, waiting in the kernel (or, when its table is full, in software).
    pub fn lock(&self) -> SharedMutexGuard<'_, T> {
        let me = tag();
        if self.word.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            return SharedMutexGuard { lock: self, inherited: false };
        }
        loop {
            let word = self.word();
            match platform::queued_wait(|t| sys::s3_lock_queued(word, me as usize, t), || sys::s3_lock(word, me as usize)) {
                Ok(0) => return SharedMutexGuard { lock: self, inherited: false },
                Ok(OWNER_DIED) => return SharedMutexGuard { lock: self, inherited: true },
                Err(Some(Errno::Again)) => {
                    FALLBACKS.fetch_add(1, Ordering::Relaxed);
                    for _ in 0..SPINS {
                        if self.word.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                            return SharedMutexGuard { lock: self, inherited: false };
                        }
                        core::hint::spin_loop();
                    }
                    crate::yield_now();
                }
                other => panic!("SharedMutex at {:#x}: s3_lock answered {other:?}", self.word()),
            }
        }
    }

    /// Takes the lock if it is free.
    pub fn try_lock(&self) -> Option<SharedMutexGuard<'_, T>> {
        self.word.compare_exchange(0, tag(), Ordering::Acquire, Ordering::Relaxed).ok().map(|_| SharedMutexGuard { lock: self, inherited: false })
    }

    fn unlock(&self) {
        let me = tag();
        if self.word.compare_exchange(me, 0, Ordering::Release, Ordering::Relaxed).is_err() {
            // The waiters bit: the kernel hands the lock to the first waiter.
            if let Err(e) = sys::s3_unlock(self.word(), me as usize) {
                panic!("SharedMutex at {:#x}: s3_unlock answered {e:?}", self.word());
            }
            // The waiter it went to is most often one of ours: make it ready now.
            platform::drain_from_thread();
        }
    }
}

impl<T> SharedMutexGuard<'_, T> {
    /// Whether the lock came to this thread because its previous holder's program ended
    /// holding it (what it guards may be half-updated).
    pub fn inherited(&self) -> bool {
        self.inherited
    }
}

impl<T> Deref for SharedMutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard owns the lock.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SharedMutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard owns the lock.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SharedMutexGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.unlock();
    }
}

/// A barrier broke: a program ended while one of its threads waited at it, so the round can
/// never be completed as planned (every later wait fails too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BarrierBroken;

/// A barrier for `count` threads of any programs sharing it, with batch release.
#[repr(C)]
pub struct SharedBarrier {
    word: AtomicU64,
    count: usize,
}

impl SharedBarrier {
    /// A barrier for `count` threads. The kernel refuses a `count` of 0 or above
    /// `tsumugi_abi::s3::MAX_BARRIER_COUNT` (`wait` then panics naming it).
    pub const fn new(count: usize) -> Self {
        SharedBarrier { word: AtomicU64::new(0), count }
    }

    /// Writes a barrier for `count` threads at `at` and returns it.
    ///
    /// # Safety
    /// As [`SharedMutex::init_at`].
    pub unsafe fn init_at<'a>(at: *mut Self, count: usize) -> &'a Self {
        // SAFETY: the caller's promise.
        unsafe {
            at.write(Self::new(count));
            &*at
        }
    }

    /// The barrier word's address.
    pub fn word(&self) -> usize {
        &self.word as *const AtomicU64 as usize
    }

    /// Waits until `count` threads arrived in this round; `Ok(true)` for the round's last
    /// arrival (its leader), which released the others.
    pub fn wait(&self) -> Result<bool, BarrierBroken> {
        // One compare-exchange arrives: it counts a non-last arrival, or — for the last — opens
        // the next round at once (arrivals and `SLEEPERS` cleared). So the word never shows a
        // complete round that is not yet open, which a waiter could only wait out by spinning
        // (on QEMU's round-robin CPUs, whole time slices: aarch64 phase_v8_g4).
        let mut now = self.word.load(Ordering::Relaxed);
        let (before, last) = loop {
            if now & barrier::BROKEN != 0 {
                return Err(BarrierBroken);
            }
            let last = (now & barrier::ARRIVED) as usize + 1 >= self.count;
            let next = if last { (now & !(barrier::ARRIVED | barrier::SLEEPERS)) + barrier::ROUND } else { now + 1 };
            match self.word.compare_exchange_weak(now, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => break (now, last),
                Err(seen) => now = seen,
            }
        };
        let round = before / barrier::ROUND;
        if last {
            if before & barrier::SLEEPERS != 0 && sys::s3_wake(self.word(), usize::MAX).is_ok_and(|n| n > 0) {
                platform::drain_from_thread();
            }
            return Ok(true);
        }
        // One kernel waiter per program per round: the program's first arrival here waits in
        // the kernel for all of its later ones (`gather`). A caller that is no user thread of
        // the runtime (LTN 0) cannot park in the library: it sleeps in the kernel itself.
        if platform::ltn().is_null() {
            return self.sleep_alone(round, &OUTSIDE);
        }
        match GATHER.join(self.word(), round) {
            Join::Done(false) => Ok(false),
            Join::Done(true) => Err(BarrierBroken),
            Join::Lead(slot) => {
                let r = self.sleep(round);
                GATHER.release(slot, r.is_err());
                r.map(|()| false)
            }
            Join::Alone => self.sleep_alone(round, &SLOTS_FULL),
        }
    }

    /// A waiter that sleeps in the kernel outside the gathering (`why` counts it): kept out of
    /// line, off the gathering's paths.
    #[cold]
    #[inline(never)]
    fn sleep_alone(&self, round: u64, why: &AtomicUsize) -> Result<bool, BarrierBroken> {
        why.fetch_add(1, Ordering::Relaxed);
        self.sleep(round).map(|()| false)
    }

    /// Waits in the kernel until round `round` is over (or the barrier broke).
    fn sleep(&self, round: u64) -> Result<(), BarrierBroken> {
        loop {
            let now = self.word.load(Ordering::Acquire);
            if now & barrier::BROKEN != 0 {
                return Err(BarrierBroken);
            }
            if now / barrier::ROUND != round {
                return Ok(());
            }
            if (now & barrier::ARRIVED) as usize >= self.count {
                // A complete round that is not open: only a program arriving with another
                // count (or an older library's two-step arrival) leaves one; the kernel refuses
                // to sleep on it (EINVAL). Let whoever opens it run.
                crate::yield_now();
                continue;
            }
            let (word, count) = (self.word(), self.count);
            match platform::queued_wait(|t| sys::s3_barrier_queued(word, now, count, t), || sys::s3_barrier(word, now, count)) {
                Ok(_) => {}
                Err(Some(Errno::Srch)) => return Err(BarrierBroken),
                Err(Some(Errno::Again)) => {
                    FALLBACKS.fetch_add(1, Ordering::Relaxed);
                    for _ in 0..SPINS {
                        if self.word.load(Ordering::Acquire) / barrier::ROUND != round {
                            break;
                        }
                        core::hint::spin_loop();
                    }
                    crate::yield_now();
                }
                Err(e) => panic!("SharedBarrier at {:#x} for {}: s3_barrier answered {e:?}", self.word(), self.count),
            }
        }
    }
}

/// How a [`SoftMutex`] waits: the soft-sync baselines S3 is measured against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SoftStrategy {
    /// Retry the compare-exchange until it succeeds.
    Spin,
    /// Spin a round, then yield the vCPU, and again.
    SpinThenYield,
    /// Futex-style (Drepper's three-state mutex): sleep in the kernel with `s3_wait`; a
    /// release that saw waiters wakes one with `s3_wake`, which must retry.
    FutexWait,
}

/// A lock shared between programs that waits without the kernel acquiring for it: the
/// baselines of the `s3` benchmark.
#[repr(C)]
pub struct SoftMutex {
    word: AtomicU64,
    strategy: SoftStrategy,
}

impl SoftMutex {
    /// A free lock that waits by `strategy`.
    pub const fn new(strategy: SoftStrategy) -> Self {
        SoftMutex { word: AtomicU64::new(0), strategy }
    }

    /// Takes the lock; returns the number of failed attempts (compare-exchanges that lost, or
    /// wake-ups that found it taken again).
    pub fn lock(&self) -> usize {
        let mut failed = 0;
        match self.strategy {
            SoftStrategy::Spin | SoftStrategy::SpinThenYield => loop {
                for _ in 0..SPINS {
                    if self.word.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                        return failed;
                    }
                    failed += 1;
                    core::hint::spin_loop();
                }
                if self.strategy == SoftStrategy::SpinThenYield {
                    crate::yield_now();
                }
            },
            SoftStrategy::FutexWait => {
                // 0 free, 1 held, 2 held with sleepers.
                let Err(mut seen) = self.word.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed) else { return 0 };
                loop {
                    failed += 1;
                    if seen != 2 {
                        seen = self.word.swap(2, Ordering::Acquire);
                        if seen == 0 {
                            return failed;
                        }
                    }
                    let _ = sys::s3_wait(self.word(), 2);
                    seen = self.word.swap(2, Ordering::Acquire);
                    if seen == 0 {
                        return failed;
                    }
                }
            }
        }
    }

    /// Releases the lock.
    pub fn unlock(&self) {
        if self.word.swap(0, Ordering::Release) == 2 {
            let _ = sys::s3_wake(self.word(), 1);
        }
    }

    fn word(&self) -> usize {
        &self.word as *const AtomicU64 as usize
    }
}
