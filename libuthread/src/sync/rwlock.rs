//! A reader-writer lock with hand-off.

use core::cell::UnsafeCell;
use core::fmt;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};

use crate::sched::blocking::{self, WaitList, WaitNode};
use crate::prim::{AtomicUsize, Ordering};
use crate::spin::SpinLock;

/// A writer holds the lock.
const WRITER: usize = 1;
/// Somebody waits (set and cleared only under `waiters`' lock; implies the lock is held).
const WAITERS: usize = 2;
/// One reader (the reader count is `state / READER`).
const READER: usize = 4;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Read,
    Write,
}

/// A reader-writer lock: many readers or one writer.
///
/// Fair and handing off like [`Mutex`](crate::Mutex): once a thread waits, newcomers queue
/// behind it (so writers do not starve); a releasing writer hands the lock to the next writer,
/// or to every reader at the front of the queue at once; the last releasing reader hands it to
/// the waiting writer. Woken threads resume already holding the lock.
///
/// ```
/// libuthread::run(2, || {
///     let lock = libuthread::RwLock::new(5);
///     {
///         let a = lock.read();
///         let b = lock.read();
///         assert_eq!(*a + *b, 10);
///     }
///     *lock.write() += 1;
///     assert_eq!(*lock.read(), 6);
/// });
/// ```
pub struct RwLock<T: ?Sized> {
    state: AtomicUsize,
    waiters: SpinLock<WaitList<Kind>>,
    value: UnsafeCell<T>,
}

// SAFETY: as std's RwLock: writers need `T: Send`, concurrent readers `T: Sync`.
unsafe impl<T: ?Sized + Send> Send for RwLock<T> {}
// SAFETY: as above.
unsafe impl<T: ?Sized + Send + Sync> Sync for RwLock<T> {}

impl<T> RwLock<T> {
    /// An unlocked lock holding `value`.
    #[cfg(not(loom))]
    pub const fn new(value: T) -> Self {
        RwLock { state: AtomicUsize::new(0), waiters: SpinLock::new(WaitList::new()), value: UnsafeCell::new(value) }
    }

    /// An unlocked lock holding `value`.
    #[cfg(loom)]
    pub fn new(value: T) -> Self {
        RwLock { state: AtomicUsize::new(0), waiters: SpinLock::new(WaitList::new()), value: UnsafeCell::new(value) }
    }

    /// The value, consuming the lock.
    ///
    /// ```
    /// assert_eq!(libuthread::RwLock::new(3).into_inner(), 3);
    /// ```
    pub fn into_inner(self) -> T {
        self.value.into_inner()
    }
}

impl<T: ?Sized> RwLock<T> {
    /// Takes a shared (read) lock, waiting while a writer holds or waits for the lock.
    pub fn read(&self) -> RwLockReadGuard<'_, T> {
        let state = self.state.load(Ordering::Relaxed);
        if state & (WRITER | WAITERS) != 0
            || self.state.compare_exchange(state, state + READER, Ordering::Acquire, Ordering::Relaxed).is_err()
        {
            self.lock_slow(Kind::Read);
        }
        RwLockReadGuard { lock: self, _not_send: PhantomData }
    }

    /// Takes the exclusive (write) lock, waiting while anybody holds it.
    pub fn write(&self) -> RwLockWriteGuard<'_, T> {
        if self.state.compare_exchange(0, WRITER, Ordering::Acquire, Ordering::Relaxed).is_err() {
            self.lock_slow(Kind::Write);
        }
        RwLockWriteGuard { lock: self, _not_send: PhantomData }
    }

    /// Takes a read lock if that needs no waiting.
    ///
    /// ```
    /// let lock = libuthread::RwLock::new(0);
    /// let w = lock.write();
    /// assert!(lock.try_read().is_none());
    /// drop(w);
    /// assert!(lock.try_read().is_some());
    /// ```
    pub fn try_read(&self) -> Option<RwLockReadGuard<'_, T>> {
        let mut state = self.state.load(Ordering::Relaxed);
        while state & (WRITER | WAITERS) == 0 {
            match self.state.compare_exchange_weak(state, state + READER, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return Some(RwLockReadGuard { lock: self, _not_send: PhantomData }),
                Err(now) => state = now,
            }
        }
        None
    }

    /// Takes the write lock if it is free.
    ///
    /// ```
    /// let lock = libuthread::RwLock::new(0);
    /// let r = lock.read();
    /// assert!(lock.try_write().is_none());
    /// ```
    pub fn try_write(&self) -> Option<RwLockWriteGuard<'_, T>> {
        self.state
            .compare_exchange(0, WRITER, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| RwLockWriteGuard { lock: self, _not_send: PhantomData })
    }

    /// The value, through exclusive access to the lock itself.
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }

    #[cold]
    fn lock_slow(&self, kind: Kind) {
        let mut node = WaitNode::new(kind);
        blocking::block(|me| {
            node.waiter = me;
            let mut waiters = self.waiters.lock();
            let mut state = self.state.load(Ordering::Relaxed);
            loop {
                let (free, taken) = match kind {
                    Kind::Read => (state & (WRITER | WAITERS) == 0, state + READER),
                    Kind::Write => (state == 0, WRITER),
                };
                let (next, got_it) = if free { (taken, true) } else { (state | WAITERS, false) };
                match self.state.compare_exchange(state, next, Ordering::Acquire, Ordering::Relaxed) {
                    Ok(_) if got_it => return false,
                    Ok(_) => break,
                    Err(now) => state = now,
                }
            }
            // SAFETY: the node lives on this stack until the releaser wakes us.
            unsafe { waiters.push_back(&mut node) };
            true
        });
    }

    fn read_unlock(&self) {
        let before = self.state.fetch_sub(READER, Ordering::Release);
        if before == READER | WAITERS {
            // Last reader out, somebody waits (a writer): hand over.
            self.hand_off();
        }
    }

    fn write_unlock(&self) {
        if self.state.compare_exchange(WRITER, 0, Ordering::Release, Ordering::Relaxed).is_err() {
            self.hand_off();
        }
    }

    /// Passes the released lock to the front of the queue: one writer, or every reader up to
    /// the first writer. Called with nobody holding the lock and WAITERS set.
    #[cold]
    fn hand_off(&self) {
        let mut waiters = self.waiters.lock();
        let mut batch = WaitList::new();
        let mut state = 0;
        loop {
            let front = waiters.front();
            if front.is_null() {
                break;
            }
            // SAFETY: queued nodes are live.
            let kind = unsafe { (*front).data };
            if kind == Kind::Write && state != 0 {
                break;
            }
            let node = waiters.pop_front();
            // SAFETY: just popped, live until woken.
            unsafe { batch.push_back(node) };
            if kind == Kind::Write {
                state = WRITER;
                break;
            }
            state += READER;
        }
        if !waiters.is_empty() {
            state |= WAITERS;
        }
        self.state.store(state, Ordering::Release);
        drop(waiters);
        // SAFETY: we took these nodes off the list.
        unsafe { blocking::wake_all(batch) };
    }
}

impl<T: Default> Default for RwLock<T> {
    fn default() -> Self {
        RwLock::new(T::default())
    }
}

impl<T: ?Sized> fmt::Debug for RwLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock").finish_non_exhaustive()
    }
}

/// A shared hold of a [`RwLock`].
#[must_use = "the lock is released at once if the guard is not kept"]
pub struct RwLockReadGuard<'a, T: ?Sized> {
    lock: &'a RwLock<T>,
    _not_send: PhantomData<*const ()>,
}

// SAFETY: sharing the guard shares `&T`.
unsafe impl<T: ?Sized + Sync> Sync for RwLockReadGuard<'_, T> {}

impl<T: ?Sized> Deref for RwLockReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: a read hold excludes writers.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T: ?Sized> Drop for RwLockReadGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.read_unlock();
    }
}

/// The exclusive hold of a [`RwLock`].
#[must_use = "the lock is released at once if the guard is not kept"]
pub struct RwLockWriteGuard<'a, T: ?Sized> {
    lock: &'a RwLock<T>,
    _not_send: PhantomData<*const ()>,
}

// SAFETY: sharing the guard shares `&T`.
unsafe impl<T: ?Sized + Sync> Sync for RwLockWriteGuard<'_, T> {}

impl<T: ?Sized> Deref for RwLockWriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the write hold is exclusive.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T: ?Sized> DerefMut for RwLockWriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as above.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T: ?Sized> Drop for RwLockWriteGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.write_unlock();
    }
}
