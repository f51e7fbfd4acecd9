//! A condition variable for [`Mutex`](crate::Mutex).

use core::fmt;
use core::panic::{RefUnwindSafe, UnwindSafe};
#[cfg(not(loom))]
use core::time::Duration;

use crate::sched::blocking::{self, WaitList, WaitNode};
use crate::spin::SpinLock;
#[cfg(not(loom))]
use crate::sync::timed;
use crate::sync::MutexGuard;

/// Whether a timed wait ([`Condvar::wait_timeout`], [`Condvar::wait_timeout_while`]) returned
/// because its time ran out, as `std::sync::WaitTimeoutResult`.
#[derive(Debug, PartialEq, Eq, Copy, Clone)]
pub struct WaitTimeoutResult(bool);

impl WaitTimeoutResult {
    /// Whether the wait ended because the timeout elapsed (rather than by a notification).
    pub fn timed_out(&self) -> bool {
        self.0
    }
}

/// Waits for a condition under a [`Mutex`](crate::Mutex): `wait` releases the mutex and blocks
/// atomically (a notification between the two is not lost), and takes the mutex again before
/// it returns. No spurious wake-ups, but another thread may have changed the condition before
/// the waiter re-acquires the mutex, so wait in a loop (or use [`wait_while`](Self::wait_while)).
///
/// ```
/// use std::sync::Arc;
/// use libuthread::{Condvar, Mutex};
/// libuthread::run(2, || {
///     let pair = Arc::new((Mutex::new(false), Condvar::new()));
///     let p = pair.clone();
///     libuthread::spawn(move || {
///         *p.0.lock() = true;
///         p.1.notify_one();
///     });
///     let (ready, cv) = &*pair;
///     let guard = cv.wait_while(ready.lock(), |ready| !*ready);
///     assert!(*guard);
/// });
/// ```
pub struct Condvar {
    waiters: SpinLock<WaitList<()>>,
}

impl Condvar {
    /// A condition variable nobody waits on.
    #[cfg(not(loom))]
    pub const fn new() -> Condvar {
        Condvar { waiters: SpinLock::new(WaitList::new()) }
    }

    /// A condition variable nobody waits on.
    #[cfg(loom)]
    pub fn new() -> Condvar {
        Condvar { waiters: SpinLock::new(WaitList::new()) }
    }

    /// Releases the guard's mutex, waits for a notification, re-takes the mutex.
    pub fn wait<'a, T: ?Sized>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        let mutex = guard.mutex;
        core::mem::forget(guard);
        let mut node = WaitNode::new(());
        blocking::block(|me| {
            node.waiter = me;
            // SAFETY: the node lives on this stack until a notifier takes it and wakes us.
            unsafe { self.waiters.lock().push_back(&mut node) };
            // Release only after queueing: a notify after this point finds us.
            // SAFETY: the forgotten guard proved we hold the mutex.
            unsafe { mutex.unlock_for_wait() };
            true
        });
        mutex.lock()
    }

    /// Waits while `condition` holds (checked under the mutex before each wait).
    pub fn wait_while<'a, T: ?Sized, F: FnMut(&mut T) -> bool>(
        &self,
        mut guard: MutexGuard<'a, T>,
        mut condition: F,
    ) -> MutexGuard<'a, T> {
        while condition(&mut *guard) {
            guard = self.wait(guard);
        }
        guard
    }

    /// Like [`wait`](Self::wait), but gives up after `timeout`: releases the mutex, waits for
    /// a notification or the time-out, re-takes the mutex. As in std, the result says whether
    /// the time ran out; the condition may or may not hold either way.
    ///
    /// ```
    /// use std::time::Duration;
    /// use libuthread::{Condvar, Mutex};
    /// libuthread::run(1, || {
    ///     let (m, cv) = (Mutex::new(()), Condvar::new());
    ///     let (_guard, result) = cv.wait_timeout(m.lock(), Duration::from_millis(5));
    ///     assert!(result.timed_out()); // nobody notified
    /// });
    /// ```
    #[cfg(not(loom))]
    pub fn wait_timeout<'a, T: ?Sized>(&self, guard: MutexGuard<'a, T>, timeout: Duration) -> (MutexGuard<'a, T>, WaitTimeoutResult) {
        self.wait_until(guard, timed::deadline_after(timeout))
    }

    /// Waits while `condition` holds, for at most `timeout` in all; returns the guard and
    /// whether the time ran out (then the condition still held at the last look).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use libuthread::{Condvar, Mutex};
    /// libuthread::run(2, || {
    ///     let pair = Arc::new((Mutex::new(false), Condvar::new()));
    ///     let p = pair.clone();
    ///     libuthread::spawn(move || {
    ///         *p.0.lock() = true;
    ///         p.1.notify_one();
    ///     });
    ///     let (guard, result) = pair.1.wait_timeout_while(pair.0.lock(), Duration::from_secs(60), |ready| !*ready);
    ///     assert!(*guard && !result.timed_out());
    /// });
    /// ```
    #[cfg(not(loom))]
    pub fn wait_timeout_while<'a, T: ?Sized, F: FnMut(&mut T) -> bool>(
        &self,
        mut guard: MutexGuard<'a, T>,
        timeout: Duration,
        mut condition: F,
    ) -> (MutexGuard<'a, T>, WaitTimeoutResult) {
        let deadline = timed::deadline_after(timeout);
        while condition(&mut *guard) {
            if timed::expired(deadline) {
                return (guard, WaitTimeoutResult(true));
            }
            guard = self.wait_until(guard, deadline).0;
        }
        (guard, WaitTimeoutResult(false))
    }

    /// [`wait`](Self::wait) with a deadline (`platform::now_nanos` time).
    #[cfg(not(loom))]
    fn wait_until<'a, T: ?Sized>(&self, guard: MutexGuard<'a, T>, deadline: u64) -> (MutexGuard<'a, T>, WaitTimeoutResult) {
        let mutex = guard.mutex;
        if timed::expired(deadline) {
            // std releases and re-takes the mutex even for a zero timeout.
            drop(guard);
            return (mutex.lock(), WaitTimeoutResult(true));
        }
        core::mem::forget(guard);
        let mut node = WaitNode::new(());
        let node: *mut WaitNode<()> = &mut node;
        // SAFETY: `node` is the one published below, on `self.waiters`.
        let cancel = || unsafe { timed::unlink_and_wake(self.waiters.lock(), |list| list, node) };
        let timed_out = timed::block_until(
            deadline,
            |me| {
                // SAFETY: the node lives on this stack until `block_until` returns, which is
                // after a notifier or the watchdog took it off the list and woke us.
                unsafe {
                    (*node).waiter = me;
                    self.waiters.lock().push_back(node);
                    // Release only after queueing: a notify after this point finds us.
                    mutex.unlock_for_wait();
                }
                true
            },
            &cancel,
        );
        (mutex.lock(), WaitTimeoutResult(timed_out))
    }

    /// Wakes the longest waiter, if any.
    ///
    /// ```
    /// libuthread::Condvar::new().notify_one(); // nobody waits: nothing happens
    /// ```
    pub fn notify_one(&self) {
        let node = self.waiters.lock().pop_front();
        if !node.is_null() {
            // SAFETY: we took the node off the list; it is live until woken.
            unsafe { blocking::wake((*node).waiter) };
        }
    }

    /// Wakes every waiter.
    ///
    /// ```
    /// libuthread::Condvar::new().notify_all();
    /// ```
    pub fn notify_all(&self) {
        let all = self.waiters.lock().take_all();
        // SAFETY: we took the whole list.
        unsafe { blocking::wake_all(all) };
    }
}

// As std's: a panic while waiting leaves the condition variable usable.
impl UnwindSafe for Condvar {}
impl RefUnwindSafe for Condvar {}

impl Default for Condvar {
    fn default() -> Self {
        Condvar::new()
    }
}

impl fmt::Debug for Condvar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Condvar").finish_non_exhaustive()
    }
}
