//! Synchronisation primitives for user threads, in the style of S3 (DESIGN §8): a waiter queues
//! after one failed attempt and gives up its vCPU; the releaser hands ownership straight to the
//! first waiter ([`Mutex`], [`RwLock`]) or releases a whole batch at once ([`Barrier`]).
//!
//! They block through the library's scheduler, so they must be used from user threads (inside
//! [`run`](crate::run)); the non-blocking operations (unlock, notify, `try_*`) work anywhere.
//! Unlike `std`, locks are not poisoned by a panicking holder (on Tsumugi a panic ends the
//! program anyway), so `lock()` returns the guard directly.

mod barrier;
mod condvar;
mod mutex;
mod once;
mod rwlock;
#[cfg(all(target_os = "none", not(loom)))]
mod shared;

pub use barrier::{Barrier, BarrierWaitResult};
pub use condvar::Condvar;
pub use mutex::{Mutex, MutexGuard};
pub use once::Once;
pub use rwlock::{RwLock, RwLockReadGuard, RwLockWriteGuard};
#[cfg(all(target_os = "none", not(loom)))]
pub use shared::{fallbacks, BarrierBroken, SharedBarrier, SharedMutex, SharedMutexGuard, SoftMutex, SoftStrategy};

#[cfg(all(test, loom))]
mod loom_tests;
