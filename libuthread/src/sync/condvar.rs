//! A condition variable for [`Mutex`](crate::Mutex).

use core::fmt;

use crate::sched::blocking::{self, WaitList, WaitNode};
use crate::spin::SpinLock;
use crate::sync::MutexGuard;

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
