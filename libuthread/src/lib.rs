//! `libuthread`: Tsumugi's user-level M:N thread library, and the runtime every user program
//! starts in.
//!
//! # On Tsumugi today
//! - [`entry!`] names the program's `main`; the runtime's `_start` calls it and exits with its
//!   status;
//! - [`sys`] wraps the raw syscalls (console write, exit, clocks) with typed results;
//! - [`print!`]/[`println!`] write to the console;
//! - a panic handler that prints the message and exits with status 101.
//!
//! ```text
//! #![no_std]
//! #![no_main]
//! use libuthread::println;
//!
//! fn main() -> i32 {
//!     println!("hello from ring 3");
//!     0
//! }
//! libuthread::entry!(main);
//! ```
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
//! which the LTN register (x86_64 GS base, riscv64 `tp`, aarch64 `TPIDR_EL0`) names while it
//! runs; voluntary switches save only the callee-saved register window; a frame the kernel
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

// Items loom does not model (the scheduler, the platform, the public thread API) carry
// `cfg(not(loom))`. The M:N core (`cfg(mn_core)`) is built for the bare-metal ports whose
// context switch exists (`build.rs` lists them); on the others only the program runtime (`rt`,
// `sys`, `io`) is built.

extern crate alloc;

#[cfg(mn_core)]
mod channel;
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
mod thmb;
#[cfg(not(loom))]
#[cfg(mn_core)]
mod thread;
#[cfg(not(loom))]
#[cfg(mn_core)]
mod unwind;

#[cfg(mn_core)]
pub use channel::{mpmc, mpsc};
#[cfg(mn_core)]
pub use sync::{Barrier, BarrierWaitResult, Condvar, Mutex, MutexGuard, Once, RwLock, RwLockReadGuard, RwLockWriteGuard};

#[cfg(not(loom))]
#[cfg(mn_core)]
pub use local::LocalKey;
#[cfg(not(loom))]
#[cfg(mn_core)]
pub use runtime::run;
#[cfg(not(loom))]
#[cfg(mn_core)]
pub use thmb::{Thmb, RESUME_OFFSET, STATE_OFFSET, WINDOW_OFFSET};
#[cfg(not(loom))]
#[cfg(mn_core)]
pub use thread::{current, current_vcpu, sleep, spawn, try_current, vcpu_count, yield_now, Builder, JoinHandle, Thread, ThreadId};

#[cfg(target_os = "none")]
mod heap;
#[cfg(target_os = "none")]
pub mod io;
#[cfg(target_os = "none")]
pub mod rt;
#[cfg(target_os = "none")]
pub mod sys;

pub use tsumugi_abi::syscall::{Clock, Errno};
