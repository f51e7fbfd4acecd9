//! The kernel's spin lock, whose waiters relax with this port's `cpu::spin_hint` rather than
//! `core::hint::spin_loop`.
//!
//! On riscv64 a test-and-set lock on a 32-bit word ([`word`]); elsewhere `spin`'s mutex, whose
//! lock is a byte. riscv64 has atomic operations on words only, so every take of a byte lock
//! there was a masked `amoor.w` on the word around it (ten instructions on the preemption
//! path's KN state lock, where the word's swap takes three: `li`, `amoswap.w.aq`, `bnez`).
//! x86_64 and aarch64 take a byte lock in as many instructions as a word; on aarch64 the word
//! lock measured a few instructions worse on some kn_cost rows, so they keep `spin`'s.
//!
//! A CPU that waits for a lock waits for another CPU to run, as `fpu::pull` does: on aarch64
//! the hint is `yield`, which ends the vCPU's turn in QEMU's single-threaded TCG (`-icount`),
//! where QEMU before 8.1 let a spinning vCPU take every instruction until the next timer
//! deadline and starve the vCPUs after it — the lock holder among them (see the aarch64
//! `cpu::spin_hint`). Only the contended path changes: taking a free lock is the same code.

/// How a lock waiter relaxes: the port's spin hint (`core::hint::spin_loop` on the host).
pub struct Relax;

impl Relax {
    #[inline(always)]
    fn relax() {
        #[cfg(target_os = "none")]
        crate::cpu::spin_hint();
        #[cfg(not(target_os = "none"))]
        core::hint::spin_loop();
    }
}

impl spin::RelaxStrategy for Relax {
    #[inline(always)]
    fn relax() {
        Relax::relax();
    }
}

/// A spin lock whose waiters relax with [`Relax`].
#[cfg(not(target_arch = "riscv64"))]
pub type Mutex<T> = spin::mutex::Mutex<T, Relax>;

/// The guard of a held [`Mutex`].
#[cfg(not(target_arch = "riscv64"))]
pub type MutexGuard<'a, T> = spin::MutexGuard<'a, T>;

#[cfg(target_arch = "riscv64")]
pub use word::{Mutex, MutexGuard};

/// The word lock (riscv64's [`Mutex`]; built on the host too, for its tests). A free lock is
/// taken with one swap; the contended path waits with plain loads until the lock looks free
/// before it swaps again.
#[cfg(any(target_arch = "riscv64", test))]
#[cfg_attr(not(target_arch = "riscv64"), allow(dead_code))]
pub mod word {
    use super::Relax;
    use core::cell::UnsafeCell;
    use core::fmt;
    use core::ops::{Deref, DerefMut};
    use core::sync::atomic::{AtomicU32, Ordering};

    /// A spin lock (a word: 0 free, 1 held) around a `T`.
    pub struct Mutex<T: ?Sized> {
        locked: AtomicU32,
        data: UnsafeCell<T>,
    }

    // SAFETY: the lock hands out access to `data` to one holder at a time (the swap that takes it
    // is Acquire, the store that frees it Release), so sharing the mutex shares `T` only by moving
    // access between threads: `T: Send` suffices, as for `std::sync::Mutex`.
    unsafe impl<T: ?Sized + Send> Sync for Mutex<T> {}
    // SAFETY: the mutex owns its `T`.
    unsafe impl<T: ?Sized + Send> Send for Mutex<T> {}

    /// The guard of a held [`Mutex`]: access to the data; dropping it frees the lock.
    pub struct MutexGuard<'a, T: ?Sized + 'a> {
        lock: &'a Mutex<T>,
    }

    // SAFETY: a guard gives `&T` through `&self`, so sharing it needs `T: Sync`.
    unsafe impl<T: ?Sized + Sync> Sync for MutexGuard<'_, T> {}

    impl<T> Mutex<T> {
        /// A free lock around `value`.
        #[inline(always)]
        pub const fn new(value: T) -> Self {
            Mutex { locked: AtomicU32::new(0), data: UnsafeCell::new(value) }
        }

        /// The data, the mutex consumed.
        #[inline]
        pub fn into_inner(self) -> T {
            self.data.into_inner()
        }
    }

    impl<T: ?Sized> Mutex<T> {
        /// Takes the lock, spinning while another holder has it.
        #[inline(always)]
        pub fn lock(&self) -> MutexGuard<'_, T> {
            if self.locked.swap(1, Ordering::Acquire) != 0 {
                self.lock_contended();
            }
            MutexGuard { lock: self }
        }

        /// The lock was held: wait with loads until it looks free, then try again.
        #[cold]
        #[inline(never)]
        fn lock_contended(&self) {
            loop {
                while self.locked.load(Ordering::Relaxed) != 0 {
                    Relax::relax();
                }
                if self.locked.swap(1, Ordering::Acquire) == 0 {
                    return;
                }
            }
        }

        /// Takes the lock if it is free.
        #[inline(always)]
        pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
            if self.locked.load(Ordering::Relaxed) == 0 && self.locked.swap(1, Ordering::Acquire) == 0 {
                Some(MutexGuard { lock: self })
            } else {
                None
            }
        }

        /// Whether some holder has the lock now (a snapshot).
        #[inline]
        pub fn is_locked(&self) -> bool {
            self.locked.load(Ordering::Relaxed) != 0
        }

        /// The data, through exclusive access to the mutex (no locking needed).
        #[inline]
        pub fn get_mut(&mut self) -> &mut T {
            self.data.get_mut()
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
                Some(guard) => f.debug_struct("Mutex").field("data", &&*guard).finish(),
                None => f.write_str("Mutex { <locked> }"),
            }
        }
    }

    impl<T: ?Sized> Deref for MutexGuard<'_, T> {
        type Target = T;
        #[inline(always)]
        fn deref(&self) -> &T {
            // SAFETY: the guard holds the lock: no other access to the data exists.
            unsafe { &*self.lock.data.get() }
        }
    }

    impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
        #[inline(always)]
        fn deref_mut(&mut self) -> &mut T {
            // SAFETY: the guard holds the lock: no other access to the data exists.
            unsafe { &mut *self.lock.data.get() }
        }
    }

    impl<T: ?Sized> Drop for MutexGuard<'_, T> {
        #[inline(always)]
        fn drop(&mut self) {
            self.lock.locked.store(0, Ordering::Release);
        }
    }

    impl<T: ?Sized + fmt::Debug> fmt::Debug for MutexGuard<'_, T> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            fmt::Debug::fmt(&**self, f)
        }
    }

    #[cfg(test)]
    mod tests {
        extern crate std;
        use super::Mutex;
        use std::sync::Arc;

        #[test]
        fn holders_exclude_each_other() {
            let m = Arc::new(Mutex::new(0u64));
            let threads: std::vec::Vec<_> = (0..4)
                .map(|_| {
                    let m = m.clone();
                    std::thread::spawn(move || {
                        for _ in 0..20_000 {
                            // A read-modify-write in two steps: lost updates if two holders overlap.
                            let mut g = m.lock();
                            let v = *g;
                            std::hint::black_box(&v);
                            *g = v + 1;
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            assert_eq!(*m.lock(), 80_000);
        }

        #[test]
        fn try_lock_fails_while_held_and_succeeds_after() {
            let m = Mutex::new(5);
            let g = m.lock();
            assert!(m.is_locked());
            assert!(m.try_lock().is_none());
            drop(g);
            assert!(!m.is_locked());
            assert_eq!(*m.try_lock().expect("free"), 5);
            let mut m = m;
            *m.get_mut() = 7;
            assert_eq!(m.into_inner(), 7);
        }
    }
}
