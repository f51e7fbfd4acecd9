//! `libuthread`: Tsumugi's user-level M:N thread library, and the runtime every user program
//! starts in.
//!
//! These pages describe the library as a program sees it when built for Tsumugi's target
//! (`cargo xtask doc` in the tree builds them). A host `cargo doc` documents the hosted build
//! (Linux, for tests), which has the M:N threads but not [`sys`], [`entry!`], [`println!`] or
//! [`io`]; its links to them lead nowhere.
//!
//! # A program
//! - [`entry!`] names the program's `main` (a `fn() -> i32`); the runtime's `_start` calls it
//!   and ends the program with its result as the exit status;
//! - [`sys`] wraps the raw syscalls with typed results (`Result<usize, Option<Errno>>`);
//! - [`print!`]/[`println!`] write to the console, a line per syscall ([`io`]);
//! - `cargo xtask new <dir>` makes a program crate; `cargo xtask run --program <dir> --
//!   run=<name>` builds and boots it.
//!
#![cfg_attr(target_os = "none", doc = include_str!("../doc/example_program.md"))]
//!
//! # Measuring
//! - [`sys::clock`]`(`[`Clock`]`::Cycles)` reads the cycle counter *of the CPU the caller runs
//!   on* — a user thread that moves to another vCPU, or a kernel thread that moves to another
//!   CPU, reads another counter. What it counts differs by port: x86_64 the TSC; riscv64 the
//!   `cycle` CSR; aarch64 the PMUv3 cycle counter `PMCCNTR_EL0` (the generic timer's
//!   `CNTVCT_EL0` on a CPU without PMUv3), which QEMU's TCG advances at 1 GHz of virtual
//!   time — so its values track nanoseconds, while the 62.5 MHz the kernel's banner prints is
//!   the generic timer's `CNTFRQ_EL0` ([`Clock::MonotonicNanos`] and the tick come from that
//!   timer). The kernel starts each CPU's counter in step with the boot CPU's where it can. Under `cargo xtask run --icount` (`-icount shift=0`) every
//!   port's counter advances by one per guest instruction, so two runs print the same numbers.
//!   [`Clock::MonotonicNanos`] is time since boot, [`Clock::Ticks`] the CPU's timer ticks.
//! - [`sys::perf_open`]`(`[`Event`]`::…)`, then [`sys::perf_start`] / [`sys::perf_read`]:
//!   counters of the calling user thread (they follow it across vCPUs; outside the runtime,
//!   of the calling kernel thread); an event the machine cannot count answers
//!   `Err(Some(Errno::NotSup))`, a 9th counter `Err(Some(Errno::NoMem))`, another thread's
//!   handle `Err(Some(Errno::Inval))`.
//! - [`sys::counters`]`(`[`scope`](mod@scope)`::ALL_CPUS)`: the kernel's event counters ([`Counter`]) for
//!   one CPU ([`scope::cpu`]), all CPUs, or the calling program ([`scope::DOMAIN`]).
//!
#![cfg_attr(target_os = "none", doc = include_str!("../doc/example_counters.md"))]
//!
//! # One runtime per program
//! [`run`] starts the M:N runtime: it registers the program with the kernel's Kernel
//! Notification (its vCPUs, event ring and upcall handler) and returns when `main` returns.
//! On Tsumugi a program registers once: a second `run` in the same program — after the
//! first returned, or from another kernel thread — finds the registration taken and ends the
//! program with status 101 (`libuthread: kn_register failed: Some(Inval)`). Hosted, `run` may
//! be called again after the previous one returned (a second caller waits for the first).
//! Calling `run` from inside a user thread panics everywhere.
//!
//! # Panics
//! On Tsumugi a panic in any thread — a user thread, `main`, or outside `run` — prints
//! `panicked: <message>` and where, and ends the whole program with status 101
//! (`tsumugi_abi::exit::STATUS_USER_PANIC`); the panic does not unwind, so
//! [`JoinHandle::join`] never returns `Err` there. Hosted (`cargo test`), a panicking user
//! thread unwinds: `join` returns `Err(payload)`, and a panic in `main` continues in the caller
//! of `run`.
//!
//! # M:N threads
//! [`run`] starts a runtime of N *vCPUs* (hosted: OS threads; on Tsumugi: kernel threads handed
//! out by the kernel) and runs user threads on them: [`spawn`], [`Builder`], [`JoinHandle`],
//! [`yield_now`], [`current`], [`sleep`], [`Mutex`], [`Condvar`], [`Barrier`], [`RwLock`],
//! [`Once`], channels ([`mpsc`], [`mpmc`]) and user-thread-locals ([`thread_local!`]).
//!
//! ```
//! use std::sync::Arc;
//! let total = libuthread::run(4, || {
//!     let counter = Arc::new(libuthread::Mutex::new(0));
//!     let workers: Vec<_> = (0..8)
//!         .map(|_| {
//!             let counter = counter.clone();
//!             libuthread::spawn(move || *counter.lock() += 1)
//!         })
//!         .collect();
//!     workers.into_iter().for_each(|w| w.join().unwrap());
//!     let n = *counter.lock();
//!     n
//! });
//! assert_eq!(total, 8);
//! ```
//!
//! Design (DESIGN §6–§8): each user thread has a ThMB ([`Thmb`]) whose address is its id and
//! which the LTN register (x86_64 GS base, riscv64 `tp`, aarch64 `TPIDR_EL0`; hosted, a
//! thread-local word of the OS thread) names while it runs; voluntary switches save only the callee-saved register window; a frame the kernel
//! saved at an involuntary stop is restored in user mode; spawning is lazy (a stack is taken
//! from a pool at first run); the mutex hands ownership straight to the next waiter and the
//! barrier releases a whole batch.
//! See the `sched` and `context` module documentation for the protocols.
//!
//! # Hosted caveats
//! Scheduling is cooperative on the host (no preemption): a thread that never yields, blocks
//! or exits keeps its vCPU. User threads move between OS threads, so OS-thread-bound state
//! (`std::thread_local!`, `std::thread::current()`) describes the vCPU, not the user thread.
//!
//! # Tests
//! - `cargo test -p libuthread`: unit tests, proptests, and the conformance suite
//!   ([`conformance`]) with 1 and 4 vCPUs;
//! - `RUSTFLAGS="--cfg loom" cargo test -p libuthread --release --lib loom`: loom model checks
//!   of the lock-free protocols (park token, idle set, run-state handshake, spinlock) and of
//!   the sync primitives' hand-off over a loom-backed blocking layer.
#![cfg_attr(target_os = "none", no_std)]
// The crate documentation names the program runtime (`sys`, `entry!`, `println!`, `io`), which
// exists only on Tsumugi; hosted, those links cannot resolve (`cargo xtask doc` denies every
// rustdoc warning for the target build).
#![cfg_attr(not(target_os = "none"), allow(rustdoc::broken_intra_doc_links))]

// Items loom does not model (the scheduler, the platform, the public thread API) carry
// `cfg(not(loom))`. The M:N core (`cfg(mn_core)`) is built for the bare-metal ports whose
// context switch exists (`build.rs` lists them); on the others only the program runtime (`rt`,
// `sys`, `io`) is built.

extern crate alloc;

#[cfg(mn_core)]
mod channel;
#[cfg(mn_core)]
pub mod oneshot;
#[cfg(mn_core)]
mod prim;
#[cfg(mn_core)]
pub mod sched;
#[cfg(mn_core)]
mod spin;
#[cfg(mn_core)]
pub mod sync;

#[cfg(not(loom))]
#[cfg(mn_core)]
pub mod conformance;
#[cfg(not(loom))]
#[cfg(mn_core)]
pub mod context;
#[cfg(not(loom))]
#[cfg(mn_core)]
mod join;
#[cfg(not(loom))]
#[cfg(mn_core)]
mod local;
#[cfg(not(loom))]
#[cfg(mn_core)]
pub mod platform;
#[cfg(not(loom))]
#[cfg(mn_core)]
mod runtime;
#[cfg(not(loom))]
#[cfg(mn_core)]
mod task;
#[cfg(not(loom))]
#[cfg(mn_core)]
mod scoped;
#[cfg(not(loom))]
#[cfg(mn_core)]
mod thmb;
#[cfg(not(loom))]
#[cfg(mn_core)]
mod thread;
#[cfg(not(loom))]
#[cfg(mn_core)]
mod trace;
#[cfg(not(loom))]
#[cfg(mn_core)]
mod unwind;

#[cfg(mn_core)]
pub use channel::{mpmc, mpsc};
#[cfg(mn_core)]
pub use sync::{
    Barrier, BarrierWaitResult, Condvar, MappedMutexGuard, MappedRwLockWriteGuard, Mutex, MutexGuard, Once, OnceState, RwLock,
    RwLockReadGuard, RwLockWriteGuard, TryLockError, TryLockResult, WaitTimeoutResult,
};

#[cfg(not(loom))]
#[cfg(mn_core)]
pub use local::{AccessError, LocalKey};
#[cfg(not(loom))]
#[cfg(mn_core)]
pub use runtime::run;
#[cfg(not(loom))]
#[cfg(mn_core)]
pub use thmb::{Thmb, RESUME_OFFSET, STATE_OFFSET, WINDOW_OFFSET};
#[cfg(not(loom))]
#[cfg(mn_core)]
pub use scoped::{scope, Scope, ScopedJoinHandle};
#[cfg(not(loom))]
#[cfg(mn_core)]
pub use thread::{
    available_parallelism, current, current_vcpu, join, sleep, sleep_until, spawn, try_current, vcpu_count, yield_now, Builder, Instant,
    JoinHandle, Thread, ThreadId,
};

#[cfg(target_os = "none")]
mod heap;
#[cfg(any(test, target_os = "none"))]
mod size_class;
#[cfg(target_os = "none")]
pub mod io;
#[cfg(target_os = "none")]
pub mod rt;
#[cfg(target_os = "none")]
pub mod sys;
#[cfg(all(target_os = "none", mn_core))]
pub mod signal;

pub use tsumugi_abi::perf::Event;
pub use tsumugi_abi::stats::{scope, Counter};
pub use tsumugi_abi::syscall::{Clock, Errno};
