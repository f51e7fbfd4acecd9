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
//! ```ignore
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
//! which the LTN register (x86_64 GS base) names while it runs; voluntary switches save only
//! the callee-saved register window; a frame the kernel saved at an involuntary stop is
//! restored in user mode; spawning is lazy (a stack is taken from a pool at first run); the
//! mutex hands ownership straight to the next waiter and the barrier releases a whole batch.
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

// The M:N core is built for the host only until `platform/tsumugi.rs` exists: every item
// below carries `cfg(not(target_os = "none"))`. Items loom does not model (the scheduler, the
// platform, the public thread API) also carry `not(loom)`.

#[cfg(not(target_os = "none"))]
extern crate alloc;

#[cfg(not(target_os = "none"))]
mod blocking;
#[cfg(not(target_os = "none"))]
mod channel;
#[cfg(not(target_os = "none"))]
mod idle;
#[cfg(not(target_os = "none"))]
mod prim;
#[cfg(not(target_os = "none"))]
mod queue;
#[cfg(not(target_os = "none"))]
mod runstate;
#[cfg(not(target_os = "none"))]
mod spin;
#[cfg(not(target_os = "none"))]
pub mod sync;
#[cfg(not(target_os = "none"))]
mod token;

#[cfg(all(not(target_os = "none"), not(loom)))]
pub mod conformance;
#[cfg(all(not(target_os = "none"), not(loom)))]
pub mod context;
#[cfg(all(not(target_os = "none"), not(loom)))]
mod local;
#[cfg(all(not(target_os = "none"), not(loom)))]
pub mod platform;
#[cfg(all(not(target_os = "none"), not(loom)))]
mod runtime;
#[cfg(all(not(target_os = "none"), not(loom)))]
pub mod sched;
#[cfg(all(not(target_os = "none"), not(loom)))]
mod thmb;
#[cfg(all(not(target_os = "none"), not(loom)))]
mod thread;
#[cfg(all(not(target_os = "none"), not(loom)))]
mod unwind;

#[cfg(not(target_os = "none"))]
pub use channel::{mpmc, mpsc};
#[cfg(not(target_os = "none"))]
pub use sync::{Barrier, BarrierWaitResult, Condvar, Mutex, MutexGuard, Once, RwLock, RwLockReadGuard, RwLockWriteGuard};

#[cfg(all(not(target_os = "none"), not(loom)))]
pub use local::LocalKey;
#[cfg(all(not(target_os = "none"), not(loom)))]
pub use runtime::run;
#[cfg(all(not(target_os = "none"), not(loom)))]
pub use thmb::{Thmb, RESUME_OFFSET, STATE_OFFSET, WINDOW_OFFSET};
#[cfg(all(not(target_os = "none"), not(loom)))]
pub use thread::{current, current_vcpu, sleep, spawn, try_current, vcpu_count, yield_now, Builder, JoinHandle, Thread, ThreadId};

#[cfg(target_os = "none")]
pub mod io;
#[cfg(target_os = "none")]
pub mod rt;
#[cfg(target_os = "none")]
pub mod sys;

pub use tsumugi_abi::syscall::{Clock, Errno};
