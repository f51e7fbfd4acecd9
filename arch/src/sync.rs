//! The kernel's spin lock: `spin`'s mutex, waiting with this port's `cpu::spin_hint`
//! rather than `core::hint::spin_loop`.
//!
//! A CPU that waits for a lock waits for another CPU to run, as `fpu::pull` does: on aarch64
//! the hint is `yield`, which ends the vCPU's turn in QEMU's single-threaded TCG (`-icount`),
//! where QEMU before 8.1 let a spinning vCPU take every instruction until the next timer
//! deadline and starve the vCPUs after it — the lock holder among them (see the aarch64
//! `cpu::spin_hint`). Only the contended path changes: taking a free lock is the same code.

/// How a lock waiter relaxes: the port's spin hint (`core::hint::spin_loop` on the host).
pub struct Relax;

impl spin::RelaxStrategy for Relax {
    #[inline(always)]
    fn relax() {
        #[cfg(target_os = "none")]
        crate::cpu::spin_hint();
        #[cfg(not(target_os = "none"))]
        core::hint::spin_loop();
    }
}

/// A spin lock whose waiters relax with [`Relax`].
pub type Mutex<T> = spin::mutex::Mutex<T, Relax>;

/// The guard of a held [`Mutex`].
pub type MutexGuard<'a, T> = spin::MutexGuard<'a, T>;
