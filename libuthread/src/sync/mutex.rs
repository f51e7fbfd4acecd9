//! A mutex with direct hand-off (S3's Auto Lock).

use core::cell::UnsafeCell;
use core::fmt;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};
use core::panic::{RefUnwindSafe, UnwindSafe};
use core::ptr::NonNull;

use crate::sched::blocking::{self, ThreadList, Waiter, WaiterCell};
use crate::prim::{AtomicU32, Ordering};
use crate::prim::spin_hint;
use crate::spin::Critical;

/// Held.
const LOCKED: u32 = 1;
/// Held, and somebody waits (set and cleared only while holding `LIST`).
const WAITERS: u32 = 2;
/// The wait list is being edited: the bit is the list's lock. Taken by the same CAS that
/// records the reason (a locker adding `WAITERS`, an unlocker handing off), released by a
/// plain release store of the new state — while it is set no other CAS on the word can
/// succeed (each expects it clear), so the holder knows the whole word. Held only inside a
/// library critical section (LTN = 0), for a few instructions.
const LIST: u32 = 4;

/// A mutual-exclusion lock for user threads.
///
/// `lock` tries once; if the lock is held, the caller queues and gives up its vCPU (or parks
/// it, when nothing else is runnable). `unlock` with waiters does not release the lock: it
/// passes ownership to the first waiter and makes it runnable, so the waiter resumes already
/// owning the lock, without retrying (S3's Auto Lock: no thundering herd, FIFO fairness).
///
/// ```
/// use std::sync::Arc;
/// use libuthread::Mutex;
/// libuthread::run(2, || {
///     let data = Arc::new(Mutex::new(Vec::new()));
///     let d = data.clone();
///     libuthread::spawn(move || d.lock().push(1)).join().unwrap();
///     data.lock().push(2);
///     assert_eq!(*data.lock(), [1, 2]);
/// });
/// ```
pub struct Mutex<T: ?Sized> {
    raw: RawMutex,
    value: UnsafeCell<T>,
}

/// The lock itself, apart from the value (what a [`MappedMutexGuard`] releases).
pub(crate) struct RawMutex {
    state: AtomicU32,
    /// The waiting threads themselves (no nodes: `ThreadList`). Guarded by the `LIST` bit of
    /// `state`.
    waiters: UnsafeCell<ThreadList>,
}

/// Why [`Mutex::try_lock`] (and `RwLock::try_read`/`try_write`) failed: std's `TryLockError`
/// without its `Poisoned` case, since these locks are never poisoned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TryLockError {
    /// The lock is held (in a conflicting mode) right now.
    WouldBlock,
}

/// The result of a `try_lock`/`try_read`/`try_write` (std's `TryLockResult`).
pub type TryLockResult<Guard> = Result<Guard, TryLockError>;

impl fmt::Display for TryLockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("try_lock failed because the operation would block")
    }
}

impl core::error::Error for TryLockError {}

// SAFETY: the lock hands `&mut T` to one holder at a time, so `T: Send` suffices, as in std.
unsafe impl<T: ?Sized + Send> Send for Mutex<T> {}
// SAFETY: as above.
unsafe impl<T: ?Sized + Send> Sync for Mutex<T> {}

// As std's: never poisoned here, so a panic while holding the lock leaves nothing inconsistent
// that the type system would have to flag.
impl<T: ?Sized> UnwindSafe for Mutex<T> {}
impl<T: ?Sized> RefUnwindSafe for Mutex<T> {}

impl<T> Mutex<T> {
    /// An unlocked mutex holding `value`.
    ///
    /// ```
    /// static COUNT: libuthread::Mutex<u32> = libuthread::Mutex::new(0);
    /// libuthread::run(1, || *COUNT.lock() += 1);
    /// ```
    #[cfg(not(loom))]
    pub const fn new(value: T) -> Self {
        Mutex { raw: RawMutex { state: AtomicU32::new(0), waiters: UnsafeCell::new(ThreadList::new()) }, value: UnsafeCell::new(value) }
    }

    /// An unlocked mutex holding `value`.
    #[cfg(loom)]
    pub fn new(value: T) -> Self {
        Mutex { raw: RawMutex { state: AtomicU32::new(0), waiters: UnsafeCell::new(ThreadList::new()) }, value: UnsafeCell::new(value) }
    }

    /// The value, consuming the mutex.
    ///
    /// ```
    /// assert_eq!(libuthread::Mutex::new(5).into_inner(), 5);
    /// ```
    pub fn into_inner(self) -> T {
        self.value.into_inner()
    }

    /// A copy of the value (std's `Mutex::get_cloned`, without the poison error).
    ///
    /// ```
    /// let m = libuthread::Mutex::new(7);
    /// libuthread::run(1, move || assert_eq!(m.get_cloned(), 7));
    /// ```
    pub fn get_cloned(&self) -> T
    where
        T: Clone,
    {
        self.lock().clone()
    }

    /// Stores `value`, dropping the old one (after releasing the lock, as std does).
    ///
    /// ```
    /// let m = libuthread::Mutex::new(1);
    /// libuthread::run(1, move || {
    ///     m.set(2);
    ///     assert_eq!(m.get_cloned(), 2);
    /// });
    /// ```
    pub fn set(&self, value: T) {
        drop(self.replace(value));
    }

    /// Stores `value` and returns the old one.
    ///
    /// ```
    /// let m = libuthread::Mutex::new(1);
    /// libuthread::run(1, move || assert_eq!(m.replace(2), 1));
    /// ```
    pub fn replace(&self, value: T) -> T {
        core::mem::replace(&mut *self.lock(), value)
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Takes the lock, waiting (off the vCPU) while another thread holds it.
    ///
    /// Must be called from a user thread when it may have to wait.
    ///
    /// ```
    /// let m = libuthread::Mutex::new(1);
    /// libuthread::run(1, move || *m.lock() += 1);
    /// ```
    pub fn lock(&self) -> MutexGuard<'_, T> {
        if self.raw.state.compare_exchange(0, LOCKED, Ordering::Acquire, Ordering::Relaxed).is_err() {
            self.raw.lock_slow();
        }
        MutexGuard { mutex: self, _not_send: PhantomData }
    }

    /// Calls `f` with the value, under the lock (std's `Mutex::with_mut`).
    ///
    /// ```
    /// let m = libuthread::Mutex::new(vec![1]);
    /// libuthread::run(1, move || assert_eq!(m.with_mut(|v| { v.push(2); v.len() }), 2));
    /// ```
    pub fn with_mut<R, F: FnOnce(&mut T) -> R>(&self, f: F) -> R {
        f(&mut self.lock())
    }

    /// Takes the lock if it is free; otherwise `Err(TryLockError::WouldBlock)`.
    ///
    /// ```
    /// use libuthread::TryLockError;
    /// let m = libuthread::Mutex::new(());
    /// let g = m.try_lock().unwrap();
    /// assert!(matches!(m.try_lock(), Err(TryLockError::WouldBlock)));
    /// drop(g);
    /// assert!(m.try_lock().is_ok());
    /// ```
    pub fn try_lock(&self) -> TryLockResult<MutexGuard<'_, T>> {
        match self.raw.state.compare_exchange(0, LOCKED, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => Ok(MutexGuard { mutex: self, _not_send: PhantomData }),
            Err(_) => Err(TryLockError::WouldBlock),
        }
    }

    /// Whether the lock is held right now (a hint: it may change at once).
    ///
    /// ```
    /// let m = libuthread::Mutex::new(0);
    /// let g = m.lock();
    /// assert!(m.is_locked());
    /// ```
    pub fn is_locked(&self) -> bool {
        self.raw.state.load(Ordering::Relaxed) & LOCKED != 0
    }

    /// The value, through exclusive access to the mutex itself.
    ///
    /// ```
    /// let mut m = libuthread::Mutex::new(1);
    /// *m.get_mut() = 2;
    /// assert_eq!(*m.lock(), 2);
    /// ```
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }

    /// Releases the lock held by the caller (the guard's drop).
    ///
    /// # Safety
    /// The caller holds the lock and gives up its guard.
    pub(crate) unsafe fn unlock(&self) {
        // SAFETY: forwarded.
        unsafe { self.raw.unlock() }
    }

    /// Gives the lock to a thread that is about to wait on a condition variable: like
    /// `unlock`, but usable from inside `block`'s publish step.
    ///
    /// # Safety
    /// As [`Mutex::unlock`].
    pub(crate) unsafe fn unlock_for_wait(&self) {
        // SAFETY: forwarded.
        unsafe { self.raw.unlock() }
    }
}

impl RawMutex {
    #[cold]
    fn lock_slow(&self) {
        // (`block_direct`: the publish step only queues the caller, it wakes nobody.)
        blocking::block_direct(|me| {
            // `block`'s publish step runs inside its critical section (LTN = 0), where `LIST`
            // may be held. The common case first, with no call (so no callee-saved register
            // is saved on it): held, nobody waiting, list free — announce a waiter and take
            // the list in one CAS. The waiter goes on the list itself (`ThreadList`: no node
            // on this stack, so this function needs no frame and ends in a tail call to the
            // park).
            if self.state.compare_exchange(LOCKED, LOCKED | WAITERS | LIST, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                // SAFETY: `LIST` is ours, so is the list; `WAITERS` was clear, so the list is
                // empty; `me` is the calling thread.
                unsafe { self.enqueue_first(me) };
                true
            } else {
                self.publish_contended(me)
            }
        });
        // Here we own the lock: taken in `publish`, or handed over by `unlock`.
    }

    /// Appends the waiting thread `me` to the wait list and lets go of the list (state
    /// `LOCKED | WAITERS`).
    ///
    /// # Safety
    /// The caller holds `LIST` (so the word is `LOCKED | WAITERS | LIST`: no other CAS on it
    /// can succeed meanwhile) with LTN = 0; `me` is the calling thread, in `block`'s publish
    /// step, so it is in no other list until the releaser takes it off and wakes it.
    #[inline(always)]
    unsafe fn enqueue(&self, me: Waiter) {
        // SAFETY: per the contract.
        unsafe { (*self.waiters.get()).push_back(me as *mut WaiterCell) };
        self.state.store(LOCKED | WAITERS, Ordering::Release);
    }

    /// [`RawMutex::enqueue`] into the empty list: the first waiter. The CAS that took `LIST`
    /// found `WAITERS` clear, and `WAITERS` is set exactly while the list is not empty (both
    /// change only under `LIST`), so the list is known empty without looking at it.
    ///
    /// # Safety
    /// As for `enqueue`, and the list is empty.
    #[inline(always)]
    unsafe fn enqueue_first(&self, me: Waiter) {
        // SAFETY: per the contract.
        unsafe { (*self.waiters.get()).push_into_empty(me as *mut WaiterCell) };
        self.state.store(LOCKED | WAITERS, Ordering::Release);
    }

    /// `lock_slow`'s publish step when its first CAS failed (the list busy, waiters already,
    /// or the lock released meanwhile): waits while `LIST` is held, then takes the lock if it is
    /// free (false: no need to wait), else sets `WAITERS | LIST` and queues `me`, the calling
    /// thread (true). Called with LTN = 0, from `block`'s publish step. Inlined: a call here
    /// would keep the thread in a callee-saved register across it, and so give `lock_slow` a
    /// frame on its common path too (the loop makes no call).
    #[inline(always)]
    fn publish_contended(&self, me: Waiter) -> bool {
        let mut state = self.state.load(Ordering::Relaxed);
        loop {
            if state & LIST != 0 {
                spin_hint();
                state = self.state.load(Ordering::Relaxed);
            } else if state & LOCKED == 0 {
                match self.state.compare_exchange(state, state | LOCKED, Ordering::Acquire, Ordering::Relaxed) {
                    Ok(_) => return false,
                    Err(now) => state = now,
                }
            } else {
                match self.state.compare_exchange_weak(state, state | WAITERS | LIST, Ordering::Acquire, Ordering::Relaxed) {
                    Ok(_) => break,
                    Err(now) => state = now,
                }
            }
        }
        // SAFETY: `LIST` is ours; `me` is the caller, in `block`'s publish step.
        unsafe { self.enqueue(me) };
        true
    }

    /// Releases the lock held by the caller.
    ///
    /// # Safety
    /// The caller holds the lock and gives up its guard.
    #[inline]
    unsafe fn unlock(&self) {
        if self.state.compare_exchange(LOCKED, 0, Ordering::Release, Ordering::Relaxed).is_err() {
            self.unlock_slow();
        }
    }

    /// `unlock` with waiters: hands the lock to the first and wakes it inside the same critical
    /// section as the list edit (`blocking::wake_from`: it goes on this vCPU's own queue, no
    /// second critical section). The common case — waiters, the list free — takes the list with
    /// one CAS and makes no call before the wake.
    #[cold]
    fn unlock_slow(&self) {
        // By a user thread (the common case) inline, where its `Critical` is known to name it;
        // otherwise the same steps out of line.
        match Critical::enter_sorted() {
            Ok(critical) => self.unlock_slow_in(critical),
            Err(critical) => self.unlock_slow_outside(critical),
        }
    }

    /// [`RawMutex::unlock_slow`] when no user thread entered the critical section.
    #[inline(never)]
    fn unlock_slow_outside(&self, critical: Critical) {
        self.unlock_slow_in(critical)
    }

    /// [`RawMutex::unlock_slow`] inside the critical section `critical`, which it ends.
    #[inline(always)]
    fn unlock_slow_in(&self, critical: Critical) {
        if self.state.compare_exchange(LOCKED | WAITERS, LOCKED | WAITERS | LIST, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            // SAFETY: `LIST` is ours, with LTN = 0 (`critical`).
            unsafe { self.hand_off(critical) }
        } else {
            self.unlock_contended(critical)
        }
    }

    /// `unlock_slow` when its first CAS failed: waits while `LIST` is held, then releases the
    /// lock if nobody waits, else takes the list and hands off.
    #[inline(never)]
    fn unlock_contended(&self, mut critical: Critical) {
        let mut state = self.state.load(Ordering::Relaxed);
        loop {
            if state & LIST != 0 {
                spin_hint();
                state = self.state.load(Ordering::Relaxed);
            } else if state & WAITERS == 0 {
                // Nobody waits (not reached today: a locker takes `LIST` only together with
                // `WAITERS`, and only an unlock clears it): release.
                match self.state.compare_exchange(state, 0, Ordering::Release, Ordering::Relaxed) {
                    Ok(_) => {
                        critical.leave();
                        return;
                    }
                    Err(now) => state = now,
                }
            } else {
                match self.state.compare_exchange_weak(state, state | LIST, Ordering::Acquire, Ordering::Relaxed) {
                    Ok(_) => break,
                    Err(now) => state = now,
                }
            }
        }
        // SAFETY: `LIST` is ours, with LTN = 0 (`critical`).
        unsafe { self.hand_off(critical) }
    }

    /// Takes the first waiter off the list, lets go of the list with the lock still `LOCKED`
    /// (now the waiter's), and wakes the waiter.
    ///
    /// # Safety
    /// The caller holds `LIST` with `WAITERS` set (the list is not empty), inside `critical`.
    #[inline(always)]
    unsafe fn hand_off(&self, critical: Critical) {
        // SAFETY: per the contract the list is ours.
        let list = unsafe { &mut *self.waiters.get() };
        // (Its link is read here, before the store that lets others at the list.)
        // SAFETY: `WAITERS` is set exactly while the list is not empty (both change only under
        // `LIST`, which is ours), so there is a first waiter: not tested again.
        let waiter: Waiter = unsafe { list.pop_front_nonempty() };
        let state = if list.is_empty() { LOCKED } else { LOCKED | WAITERS };
        self.state.store(state, Ordering::Release);
        // SAFETY: we took the node off the list, so the wake-up is ours; we are inside the
        // critical section `critical` entered for its thread, which this call ends (tail
        // calls only: `unlock_slow` needs no stack frame).
        unsafe { blocking::wake_from_leave(critical.waiter(), waiter) };
    }
}

impl<T: Default> Default for Mutex<T> {
    fn default() -> Self {
        Mutex::new(T::default())
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.try_lock() {
            Ok(guard) => f.debug_struct("Mutex").field("data", &&*guard).finish(),
            Err(_) => f.debug_struct("Mutex").field("data", &format_args!("<locked>")).finish(),
        }
    }
}

/// Proof of holding a [`Mutex`]; unlocks (handing off to a waiter) on drop.
#[must_use = "the lock is released at once if the guard is not kept"]
pub struct MutexGuard<'a, T: ?Sized> {
    pub(crate) mutex: &'a Mutex<T>,
    _not_send: PhantomData<*const ()>,
}

// SAFETY: sharing the guard shares `&T`.
unsafe impl<T: ?Sized + Sync> Sync for MutexGuard<'_, T> {}

impl<T: ?Sized> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard proves we hold the lock.
        unsafe { &*self.mutex.value.get() }
    }
}

impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as above, and `&mut self` is unique.
        unsafe { &mut *self.mutex.value.get() }
    }
}

impl<T: ?Sized> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: the guard proves we hold the lock, and it is going away.
        unsafe { self.mutex.unlock() };
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<'a, T: ?Sized> MutexGuard<'a, T> {
    /// A guard for a part of the locked value (std's `MutexGuard::map`); the lock is released
    /// when the returned guard drops.
    ///
    /// ```
    /// use libuthread::{Mutex, MutexGuard};
    /// let m = Mutex::new((1, 2));
    /// libuthread::run(1, move || {
    ///     *MutexGuard::map(m.lock(), |pair| &mut pair.1) += 40;
    ///     assert_eq!(m.get_cloned(), (1, 42));
    /// });
    /// ```
    pub fn map<U: ?Sized, F: FnOnce(&mut T) -> &mut U>(orig: Self, f: F) -> MappedMutexGuard<'a, U> {
        let raw = &orig.mutex.raw;
        // SAFETY: the guard proves we hold the lock; `orig` is forgotten below, so the value
        // is reached only through the mapped guard, which releases the lock.
        let data = NonNull::from(f(unsafe { &mut *orig.mutex.value.get() }));
        core::mem::forget(orig);
        MappedMutexGuard { data, raw, _marker: PhantomData }
    }

    /// Like [`map`](Self::map), but `f` may decline (then the original guard comes back).
    ///
    /// ```
    /// use libuthread::{Mutex, MutexGuard};
    /// let m = Mutex::new(vec![1, 2]);
    /// libuthread::run(1, move || {
    ///     assert!(MutexGuard::filter_map(m.lock(), |v| v.get_mut(5)).is_err());
    ///     *MutexGuard::filter_map(m.lock(), |v| v.get_mut(1)).unwrap() = 3;
    ///     assert_eq!(m.get_cloned(), [1, 3]);
    /// });
    /// ```
    pub fn filter_map<U: ?Sized, F: FnOnce(&mut T) -> Option<&mut U>>(orig: Self, f: F) -> Result<MappedMutexGuard<'a, U>, Self> {
        let raw = &orig.mutex.raw;
        // SAFETY: as in `map`; on `None` the borrow ends here and `orig` stays the holder.
        match f(unsafe { &mut *orig.mutex.value.get() }).map(NonNull::from) {
            Some(data) => {
                core::mem::forget(orig);
                Ok(MappedMutexGuard { data, raw, _marker: PhantomData })
            }
            None => Err(orig),
        }
    }
}

/// A [`MutexGuard`] narrowed to a part of the value by [`MutexGuard::map`]; releases the lock
/// on drop.
#[must_use = "the lock is released at once if the guard is not kept"]
pub struct MappedMutexGuard<'a, T: ?Sized> {
    data: NonNull<T>,
    raw: &'a RawMutex,
    _marker: PhantomData<&'a mut T>,
}

// SAFETY: sharing the guard shares `&T`.
unsafe impl<T: ?Sized + Sync> Sync for MappedMutexGuard<'_, T> {}

impl<'a, T: ?Sized> MappedMutexGuard<'a, T> {
    /// Narrows further (std's `MappedMutexGuard::map`).
    pub fn map<U: ?Sized, F: FnOnce(&mut T) -> &mut U>(mut orig: Self, f: F) -> MappedMutexGuard<'a, U> {
        // SAFETY: the guard holds the lock and is forgotten below.
        let data = NonNull::from(f(unsafe { orig.data.as_mut() }));
        let raw = orig.raw;
        core::mem::forget(orig);
        MappedMutexGuard { data, raw, _marker: PhantomData }
    }
}

impl<T: ?Sized> Deref for MappedMutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock.
        unsafe { self.data.as_ref() }
    }
}

impl<T: ?Sized> DerefMut for MappedMutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as above, and `&mut self` is unique.
        unsafe { self.data.as_mut() }
    }
}

impl<T: ?Sized> Drop for MappedMutexGuard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: the guard holds the lock, and it is going away.
        unsafe { self.raw.unlock() };
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for MappedMutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}
