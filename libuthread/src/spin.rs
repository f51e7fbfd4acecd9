//! The library's internal spinlock. It guards short edits of the library's own structures (run
//! queues, wait lists, pools) and is the library's **critical section**: while it is held the
//! calling vCPU has LTN = 0, so a kernel stop there resumes the vCPU in place instead of handing
//! the thread to the Kernel Notification Handler (which could otherwise park a lock holder in a
//! ready queue while other vCPUs spin on the lock).
//!
//! Never block (park the current user thread) while holding one: the guard would hold the lock
//! across an arbitrary wait.

use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};

use crate::prim::{spin_hint, AtomicBool, Ordering};

/// A test-and-test-and-set spinlock around `T`.
pub(crate) struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the lock gives one holder at a time exclusive access to `value`; `T: Send` is enough
// for that, as for `std::sync::Mutex`.
unsafe impl<T: Send> Sync for SpinLock<T> {}
// SAFETY: moving the lock moves the value; `T: Send` allows that.
unsafe impl<T: Send> Send for SpinLock<T> {}

impl<T> SpinLock<T> {
    /// An unlocked lock around `value`.
    #[cfg(not(loom))]
    pub(crate) const fn new(value: T) -> Self {
        SpinLock { locked: AtomicBool::new(false), value: UnsafeCell::new(value) }
    }

    /// An unlocked lock around `value` (loom's atomics are not `const`).
    #[cfg(loom)]
    pub(crate) fn new(value: T) -> Self {
        SpinLock { locked: AtomicBool::new(false), value: UnsafeCell::new(value) }
    }

    /// Enters the critical section (LTN = 0) and takes the lock.
    #[inline(always)]
    pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
        let critical = Critical::enter();
        while self.locked.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            // Wait with plain loads so the cache line is not bounced by failed exchanges.
            while self.locked.load(Ordering::Relaxed) {
                spin_hint();
            }
        }
        SpinGuard { lock: self, critical }
    }
}

/// Proof that a [`SpinLock`] is held; releases it (and leaves the critical section) on drop.
impl<T> SpinLock<T> {
    /// [`SpinLock::lock`] for a caller already inside a critical section (LTN = 0): `block`'s
    /// publish step, or a section the caller entered itself. Takes the lock without reading
    /// LTN again (the nested `Critical::enter` would find it 0 and do nothing).
    ///
    /// # Safety
    /// LTN is 0 from the call until the guard is dropped (an enclosing critical section).
    #[inline(always)]
    pub(crate) unsafe fn lock_in_critical(&self) -> SpinGuard<'_, T> {
        // A first try outside the loop: its CAS is then no loop header, so the free lock — a
        // channel's send and receive take it on their hand-off paths — runs no alignment
        // padding before it and no jump out of the loop after it (x86_64 -icount: two
        // instructions fewer per acquisition). The wait stays inline: a call here would keep
        // more of the caller's values in callee-saved registers.
        if self.locked.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            while self.locked.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
                while self.locked.load(Ordering::Relaxed) {
                    spin_hint();
                }
            }
        }
        SpinGuard { lock: self, critical: Critical::nested() }
    }
}

pub(crate) struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
    critical: Critical,
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while `locked` is held by us.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes this the only reference.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    #[inline(always)]
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
        self.critical.leave();
    }
}

/// A library critical section: LTN = 0 from `enter` to `leave`, so the kernel resumes this vCPU
/// in place if it stops it, and no upcall can move the running user thread elsewhere. Nests:
/// an inner section sees LTN = 0 already and restores 0.
pub(crate) struct Critical {
    #[cfg(not(loom))]
    saved: *mut crate::thmb::Thmb,
}

impl Critical {
    /// Sets LTN = 0 and remembers what it was.
    #[inline(always)]
    pub(crate) fn enter() -> Critical {
        #[cfg(not(loom))]
        {
            // Read the identity first: if the kernel moves this thread to another vCPU between
            // the read and the write, the thread (and so `saved`) is still the same.
            let saved = crate::platform::ltn();
            if !saved.is_null() {
                crate::platform::clear_ltn();
            }
            Critical { saved }
        }
        #[cfg(loom)]
        Critical {}
    }

    /// [`Critical::enter`], sorted by who entered: `Ok` when a user thread did (its LTN is 0
    /// now and [`Critical::waiter`] is that thread, not null), `Err` when LTN was 0 already
    /// (scheduler code, no user thread, a nested section; under loom always). A hand-off path
    /// that goes on only with `Ok` inline knows the thread is not null there, so the tests of
    /// it on the way (`sched::wake_from_leave`) fold away; the `Err` case takes a copy of the
    /// path out of line.
    #[inline(always)]
    pub(crate) fn enter_sorted() -> Result<Critical, Critical> {
        #[cfg(not(loom))]
        {
            let saved = crate::platform::ltn();
            if saved.is_null() {
                return Err(Critical { saved });
            }
            crate::platform::clear_ltn();
            Ok(Critical { saved })
        }
        #[cfg(loom)]
        Err(Critical {})
    }

    /// [`Critical::enter`] by the user thread `me`, known to be the caller (its LTN is `me`,
    /// not 0): skips the read of LTN.
    #[cfg(not(loom))]
    #[inline(always)]
    pub(crate) fn enter_as(me: *mut crate::thmb::Thmb) -> Critical {
        debug_assert!(!me.is_null() && crate::platform::ltn() == me);
        crate::platform::clear_ltn();
        Critical { saved: me }
    }

    /// The user thread that entered (null when entered from scheduler code or outside any
    /// user thread).
    /// A critical section inside another one (LTN is 0 already): leaving it does nothing.
    #[inline(always)]
    pub(crate) fn nested() -> Critical {
        #[cfg(not(loom))]
        {
            Critical { saved: core::ptr::null_mut() }
        }
        #[cfg(loom)]
        Critical {}
    }

    #[cfg(not(loom))]
    #[inline(always)]
    pub(crate) fn thread(&self) -> *mut crate::thmb::Thmb {
        self.saved
    }

    /// Restores LTN.
    /// The user thread that entered this critical section, as a wait-list `Waiter` (null if
    /// none did, and always under loom): the `me` of `blocking::wake_from`.
    #[inline(always)]
    pub(crate) fn waiter(&self) -> crate::sched::blocking::Waiter {
        #[cfg(not(loom))]
        {
            self.saved
        }
        #[cfg(loom)]
        {
            core::ptr::null()
        }
    }

    #[inline(always)]
    pub(crate) fn leave(&mut self) {
        #[cfg(not(loom))]
        if !self.saved.is_null() {
            crate::platform::set_ltn(self.saved);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn guards_give_exclusive_access() {
        let lock = std::sync::Arc::new(SpinLock::new(0u64));
        let threads: std::vec::Vec<_> = (0..4)
            .map(|_| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        *lock.lock() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*lock.lock(), 40_000);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    /// Two threads increment through the lock; no increment is lost.
    #[test]
    fn loom_spinlock_excludes() {
        loom::model(|| {
            let lock = Arc::new(SpinLock::new(0usize));
            let other = {
                let lock = lock.clone();
                loom::thread::spawn(move || *lock.lock() += 1)
            };
            *lock.lock() += 1;
            other.join().unwrap();
            assert_eq!(*lock.lock(), 2);
        });
    }
}
