//! The platform boundary: everything the portable core needs from below, as free functions
//! with the same names and signatures on every platform.
//!
//! | function | hosted (Linux) | Tsumugi |
//! |---|---|---|
//! | `ltn() -> *mut Thmb` / `set_ltn(t)` | a thread-local word of the OS thread (FS-relative) | the LTN register (x86_64 GS base, riscv64 `tp`, aarch64 `TPIDR_EL0`) |
//! | `default_vcpus()` | `available_parallelism` | number of CPUs |
//! | `start_vcpus(n, vcpu_main)` | OS threads 1..n | `kn_register`; `VcpuGranted` upcalls |
//! | `park(v)` / `unpark(v)` | futex on a per-vCPU token | `vcpu_park` / `vcpu_unpark` |
//! | `retire_vcpu(v) -> !` | the OS thread ends | the vCPU parks for good |
//! | `sleep_current(ns)` | timer thread + library block | blocking syscall (`BLOCKED`/`UNBLOCKED`) |
//! | `sleep_current_until(deadline)` | the same, with the deadline itself | one clock read, then `sleep_current` |
//! | `now_nanos()` | monotonic clock | `Clock::MonotonicNanos` |
//! | `alloc_stack(size)` / `free_stack(base, len)` | `mmap` with a guard page | stack region |
//! | `exit_process(code)` / `console_write(bytes)` | `std::process::exit` / stderr | syscalls |
//!
//! The core gives the platform `sched::{enter_vcpu_loop, requeue_full, note_blocked,
//! vcpu_count}` for upcalls.

#[cfg(not(target_os = "none"))]
mod hosted;
#[cfg(not(target_os = "none"))]
pub use hosted::*;

#[cfg(target_os = "none")]
mod tsumugi;
#[cfg(target_os = "none")]
pub use tsumugi::*;
