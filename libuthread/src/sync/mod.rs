//! Synchronisation primitives for user threads, in the style of S3 (DESIGN §8): a waiter queues
//! after one failed attempt and gives up its vCPU; the releaser hands ownership straight to the
//! first waiter ([`Mutex`], [`RwLock`]) or releases a whole batch at once ([`Barrier`]).
//!
//! They block through the library's scheduler, so they must be used from user threads (inside
//! [`run`](crate::run)); the non-blocking operations (unlock, notify, `try_*`) work anywhere.
//!
//! # Where they differ from `std::sync`
//! - No poisoning: on Tsumugi a panic ends the whole program (status 101), so no thread can see
//!   a lock a panicking holder left; hosted, a panic unwinds and releases the lock like any drop.
//!   So `lock()`/`read()`/`write()` return the guard directly, `get_cloned`/`set`/`replace`
//!   their values, `try_*` a [`TryLockResult`] whose error has only `WouldBlock`, and
//!   [`OnceState::is_poisoned`] is always `false` (a `Once` whose closure panicked stays
//!   incomplete and the next call runs its own closure, as with `call_once_force`).
//! - Timed waits ([`Condvar::wait_timeout`], channels' `recv_timeout`/`send_timeout`) spawn a
//!   small watchdog user thread per wait that sleeps until the deadline and then cancels the
//!   wait; the untimed paths are unchanged. A time-out is therefore as precise as the
//!   platform's sleep (the kernel's timer tick on Tsumugi), and a wait costs a thread spawn.
//! - No spurious wake-ups: `wait` returns only after a notification (std allows spurious ones).

mod barrier;
mod condvar;
#[cfg(any(loom, target_os = "none"))]
mod gather;
mod mutex;
mod once;
mod rwlock;
#[cfg(all(target_os = "none", not(loom)))]
mod shared;
#[cfg(not(loom))]
pub(crate) mod timed;

pub use barrier::{Barrier, BarrierWaitResult};
pub use condvar::{Condvar, WaitTimeoutResult};
pub use mutex::{MappedMutexGuard, Mutex, MutexGuard, TryLockError, TryLockResult};
pub use once::{Once, OnceState};
pub use rwlock::{MappedRwLockWriteGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
#[cfg(all(target_os = "none", not(loom)))]
pub use shared::{fallbacks, solo_sleeps, BarrierBroken, SharedBarrier, SharedMutex, SharedMutexGuard, SoftMutex, SoftStrategy, SoloSleeps};

#[cfg(all(test, loom))]
mod loom_tests;
