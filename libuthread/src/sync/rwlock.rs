//! A reader-writer lock with hand-off.

use core::cell::UnsafeCell;
use core::fmt;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};
use core::panic::{RefUnwindSafe, UnwindSafe};
use core::ptr::NonNull;

use crate::sched::blocking::{self, WaitList, WaitNode};
use crate::prim::{AtomicUsize, Ordering};
use crate::spin::SpinLock;
use crate::sync::{TryLockError, TryLockResult};

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
    raw: RawRwLock,
    value: UnsafeCell<T>,
}

/// The lock itself, apart from the value (what the guards, mapped or not, release).
struct RawRwLock {
    state: AtomicUsize,
    waiters: SpinLock<WaitList<Kind>>,
}

// SAFETY: as std's RwLock: writers need `T: Send`, concurrent readers `T: Sync`.
unsafe impl<T: ?Sized + Send> Send for RwLock<T> {}
// SAFETY: as above.
unsafe impl<T: ?Sized + Send + Sync> Sync for RwLock<T> {}

// As std's (never poisoned here).
impl<T: ?Sized> UnwindSafe for RwLock<T> {}
impl<T: ?Sized> RefUnwindSafe for RwLock<T> {}

impl<T> RwLock<T> {
    /// An unlocked lock holding `value`.
    #[cfg(not(loom))]
    pub const fn new(value: T) -> Self {
        RwLock { raw: RawRwLock { state: AtomicUsize::new(0), waiters: SpinLock::new(WaitList::new()) }, value: UnsafeCell::new(value) }
    }

    /// An unlocked lock holding `value`.
    #[cfg(loom)]
    pub fn new(value: T) -> Self {
        RwLock { raw: RawRwLock { state: AtomicUsize::new(0), waiters: SpinLock::new(WaitList::new()) }, value: UnsafeCell::new(value) }
    }

    /// The value, consuming the lock.
    ///
    /// ```
    /// assert_eq!(libuthread::RwLock::new(3).into_inner(), 3);
    /// ```
    pub fn into_inner(self) -> T {
        self.value.into_inner()
    }

    /// A copy of the value, under a read lock (std's `RwLock::get_cloned`, no poison error).
    ///
    /// ```
    /// let l = libuthread::RwLock::new(7);
    /// libuthread::run(1, move || assert_eq!(l.get_cloned(), 7));
    /// ```
    pub fn get_cloned(&self) -> T
    where
        T: Clone,
    {
        self.read().clone()
    }

    /// Stores `value`, dropping the old one after releasing the lock.
    pub fn set(&self, value: T) {
        drop(self.replace(value));
    }

    /// Stores `value` and returns the old one.
    ///
    /// ```
    /// let l = libuthread::RwLock::new(1);
    /// libuthread::run(1, move || {
    ///     assert_eq!(l.replace(2), 1);
    ///     l.set(3);
    ///     assert_eq!(l.get_cloned(), 3);
    /// });
    /// ```
    pub fn replace(&self, value: T) -> T {
        core::mem::replace(&mut *self.write(), value)
    }
}

impl<T: ?Sized> RwLock<T> {
    /// Takes a shared (read) lock, waiting while a writer holds or waits for the lock.
    pub fn read(&self) -> RwLockReadGuard<'_, T> {
        let state = self.raw.state.load(Ordering::Relaxed);
        if state & (WRITER | WAITERS) != 0
            || self.raw.state.compare_exchange(state, state + READER, Ordering::Acquire, Ordering::Relaxed).is_err()
        {
            self.raw.lock_slow(Kind::Read);
        }
        self.read_guard()
    }

    /// The guard of a read hold just taken.
    fn read_guard(&self) -> RwLockReadGuard<'_, T> {
        // SAFETY: `UnsafeCell::get` is never null.
        RwLockReadGuard { data: unsafe { NonNull::new_unchecked(self.value.get()) }, raw: &self.raw, _not_send: PhantomData }
    }

    /// Calls `f` with the value under a read lock (std's `RwLock::with`).
    ///
    /// ```
    /// let l = libuthread::RwLock::new(vec![1, 2]);
    /// libuthread::run(1, move || assert_eq!(l.with(|v| v.len()), 2));
    /// ```
    pub fn with<R, F: FnOnce(&T) -> R>(&self, f: F) -> R {
        f(&self.read())
    }

    /// Calls `f` with the value under the write lock (std's `RwLock::with_mut`).
    ///
    /// ```
    /// let l = libuthread::RwLock::new(1);
    /// libuthread::run(1, move || assert_eq!(l.with_mut(|v| { *v += 1; *v }), 2));
    /// ```
    pub fn with_mut<R, F: FnOnce(&mut T) -> R>(&self, f: F) -> R {
        f(&mut self.write())
    }

    /// Takes the exclusive (write) lock, waiting while anybody holds it.
    pub fn write(&self) -> RwLockWriteGuard<'_, T> {
        if self.raw.state.compare_exchange(0, WRITER, Ordering::Acquire, Ordering::Relaxed).is_err() {
            self.raw.lock_slow(Kind::Write);
        }
        RwLockWriteGuard { lock: self, _not_send: PhantomData }
    }

    /// Takes a read lock if that needs no waiting; otherwise `Err(TryLockError::WouldBlock)`.
    ///
    /// ```
    /// let lock = libuthread::RwLock::new(0);
    /// let w = lock.write();
    /// assert!(lock.try_read().is_err());
    /// drop(w);
    /// assert!(lock.try_read().is_ok());
    /// ```
    pub fn try_read(&self) -> TryLockResult<RwLockReadGuard<'_, T>> {
        let mut state = self.raw.state.load(Ordering::Relaxed);
        while state & (WRITER | WAITERS) == 0 {
            match self.raw.state.compare_exchange_weak(state, state + READER, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return Ok(self.read_guard()),
                Err(now) => state = now,
            }
        }
        Err(TryLockError::WouldBlock)
    }

    /// Takes the write lock if it is free; otherwise `Err(TryLockError::WouldBlock)`.
    ///
    /// ```
    /// let lock = libuthread::RwLock::new(0);
    /// let r = lock.read();
    /// assert!(lock.try_write().is_err());
    /// ```
    pub fn try_write(&self) -> TryLockResult<RwLockWriteGuard<'_, T>> {
        match self.raw.state.compare_exchange(0, WRITER, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => Ok(RwLockWriteGuard { lock: self, _not_send: PhantomData }),
            Err(_) => Err(TryLockError::WouldBlock),
        }
    }

    /// The value, through exclusive access to the lock itself.
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }
}

impl RawRwLock {
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
            self.hand_off(0);
        }
    }

    fn write_unlock(&self) {
        if self.state.compare_exchange(WRITER, 0, Ordering::Release, Ordering::Relaxed).is_err() {
            self.hand_off(0);
        }
    }

    /// Turns the caller's write hold into one read hold; readers waiting at the front of the
    /// queue come in with it.
    fn downgrade(&self) {
        if self.state.compare_exchange(WRITER, READER, Ordering::Release, Ordering::Relaxed).is_err() {
            self.hand_off(READER);
        }
    }

    /// Passes the lock to the front of the queue: one writer, or every reader up to the first
    /// writer. Called with WAITERS set and nobody holding the lock (`state` 0) or, from
    /// `downgrade`, the caller keeping one read hold (`state` READER).
    #[cold]
    fn hand_off(&self, mut state: usize) {
        let mut waiters = self.waiters.lock();
        let mut batch = WaitList::new();
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

/// A shared hold of a [`RwLock`]. Covariant in `T` like std's (it holds a pointer to the value
/// and the bare lock, not `&RwLock<T>`, whose `UnsafeCell` would make it invariant).
#[must_use = "the lock is released at once if the guard is not kept"]
pub struct RwLockReadGuard<'a, T: ?Sized> {
    data: NonNull<T>,
    raw: &'a RawRwLock,
    _not_send: PhantomData<(&'a T, *const ())>,
}

// SAFETY: sharing the guard shares `&T`.
unsafe impl<T: ?Sized + Sync> Sync for RwLockReadGuard<'_, T> {}

impl<'a, T: ?Sized> RwLockReadGuard<'a, T> {
    /// A read guard for a part of the value (std's `RwLockReadGuard::map`).
    ///
    /// ```
    /// use libuthread::{RwLock, RwLockReadGuard};
    /// let l = RwLock::new((1, 2));
    /// libuthread::run(1, move || assert_eq!(*RwLockReadGuard::map(l.read(), |p| &p.1), 2));
    /// ```
    pub fn map<U: ?Sized, F: FnOnce(&T) -> &U>(orig: Self, f: F) -> RwLockReadGuard<'a, U> {
        // SAFETY: a read hold excludes writers; `orig` is forgotten, the new guard releases.
        let data = NonNull::from(f(unsafe { orig.data.as_ref() }));
        let raw = orig.raw;
        core::mem::forget(orig);
        RwLockReadGuard { data, raw, _not_send: PhantomData }
    }

    /// Like [`map`](Self::map), but `f` may decline (then the original guard comes back).
    pub fn filter_map<U: ?Sized, F: FnOnce(&T) -> Option<&U>>(orig: Self, f: F) -> Result<RwLockReadGuard<'a, U>, Self> {
        // SAFETY: as in `map`.
        match f(unsafe { orig.data.as_ref() }).map(NonNull::from) {
            Some(data) => {
                let raw = orig.raw;
                core::mem::forget(orig);
                Ok(RwLockReadGuard { data, raw, _not_send: PhantomData })
            }
            None => Err(orig),
        }
    }
}

impl<T: ?Sized> Deref for RwLockReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: a read hold excludes writers.
        unsafe { self.data.as_ref() }
    }
}

impl<T: ?Sized> Drop for RwLockReadGuard<'_, T> {
    fn drop(&mut self) {
        self.raw.read_unlock();
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for RwLockReadGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
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

impl<'a, T: ?Sized> RwLockWriteGuard<'a, T> {
    /// Turns the write hold into a read hold without letting a writer in between (std's
    /// `RwLockWriteGuard::downgrade`); readers queued behind are let in with it.
    ///
    /// ```
    /// use libuthread::{RwLock, RwLockWriteGuard};
    /// let l = RwLock::new(1);
    /// libuthread::run(1, move || {
    ///     let mut w = l.write();
    ///     *w = 2;
    ///     let r = RwLockWriteGuard::downgrade(w);
    ///     assert_eq!(*r, 2);
    ///     assert!(l.try_read().is_ok() && l.try_write().is_err());
    /// });
    /// ```
    pub fn downgrade(s: Self) -> RwLockReadGuard<'a, T> {
        let lock = s.lock;
        core::mem::forget(s);
        lock.raw.downgrade();
        lock.read_guard()
    }

    /// A write guard for a part of the value (std's `RwLockWriteGuard::map`).
    ///
    /// ```
    /// use libuthread::{RwLock, RwLockWriteGuard};
    /// let l = RwLock::new((1, 2));
    /// libuthread::run(1, move || {
    ///     *RwLockWriteGuard::map(l.write(), |p| &mut p.0) = 5;
    ///     assert_eq!(l.get_cloned(), (5, 2));
    /// });
    /// ```
    pub fn map<U: ?Sized, F: FnOnce(&mut T) -> &mut U>(orig: Self, f: F) -> MappedRwLockWriteGuard<'a, U> {
        let raw = &orig.lock.raw;
        // SAFETY: the write hold is exclusive; `orig` is forgotten, the new guard releases.
        let data = NonNull::from(f(unsafe { &mut *orig.lock.value.get() }));
        core::mem::forget(orig);
        MappedRwLockWriteGuard { data, raw, _marker: PhantomData }
    }

    /// Like [`map`](Self::map), but `f` may decline (then the original guard comes back).
    pub fn filter_map<U: ?Sized, F: FnOnce(&mut T) -> Option<&mut U>>(orig: Self, f: F) -> Result<MappedRwLockWriteGuard<'a, U>, Self> {
        let raw = &orig.lock.raw;
        // SAFETY: as in `map`.
        match f(unsafe { &mut *orig.lock.value.get() }).map(NonNull::from) {
            Some(data) => {
                core::mem::forget(orig);
                Ok(MappedRwLockWriteGuard { data, raw, _marker: PhantomData })
            }
            None => Err(orig),
        }
    }
}

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
        self.lock.raw.write_unlock();
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for RwLockWriteGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// A [`RwLockWriteGuard`] narrowed by [`RwLockWriteGuard::map`]; releases the lock on drop.
#[must_use = "the lock is released at once if the guard is not kept"]
pub struct MappedRwLockWriteGuard<'a, T: ?Sized> {
    data: NonNull<T>,
    raw: &'a RawRwLock,
    _marker: PhantomData<&'a mut T>,
}

// SAFETY: sharing the guard shares `&T`.
unsafe impl<T: ?Sized + Sync> Sync for MappedRwLockWriteGuard<'_, T> {}

impl<T: ?Sized> Deref for MappedRwLockWriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the write hold is exclusive.
        unsafe { self.data.as_ref() }
    }
}

impl<T: ?Sized> DerefMut for MappedRwLockWriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as above, and `&mut self` is unique.
        unsafe { self.data.as_mut() }
    }
}

impl<T: ?Sized> Drop for MappedRwLockWriteGuard<'_, T> {
    fn drop(&mut self) {
        self.raw.write_unlock();
    }
}
