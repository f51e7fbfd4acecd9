//! The runtime entry: [`run`].

use alloc::boxed::Box;

use crate::sched;

/// Starts the runtime on `vcpus` vCPUs (0: the platform's default — the number of CPUs),
/// runs `main` as its first user thread (named `"main"`), and returns `main`'s result when
/// it returns. Hosted, a panic in `main` continues in the caller.
///
/// When `main` returns the runtime ends, like a process whose `main` returns: every vCPU stops
/// at its next scheduling point, and threads still alive are abandoned (never resumed, their
/// memory leaked). Hosted, `run` first waits for a runtime started by another OS thread to
/// end: one runtime at a time per process (as on Tsumugi, one per program). Calling `run` from
/// inside a user thread panics.
///
/// Hosted, vCPUs are OS threads and scheduling is cooperative: a thread that never yields,
/// blocks or exits keeps its vCPU.
///
/// ```
/// let answer = libuthread::run(2, || {
///     let h = libuthread::spawn(|| 6 * 7);
///     h.join().unwrap()
/// });
/// assert_eq!(answer, 42);
/// ```
pub fn run<F, T>(vcpus: usize, main: F) -> T
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let outcome = sched::run(vcpus, Some(Box::from("main")), main);
    crate::trace::dump();
    match outcome {
        Ok(value) => value,
        Err(payload) => crate::unwind::resume(payload),
    }
}
