//! `libuthread`: Tsumugi's user-level thread library and the runtime every user program starts in.
//!
//! Today it provides what a program needs to run on Tsumugi at all:
//! - [`entry!`] names the program's `main`; the runtime's `_start` calls it and exits with its
//!   status;
//! - [`sys`] wraps the raw syscalls (console write, exit, clocks) with typed results;
//! - [`print!`]/[`println!`] write to the console;
//! - a panic handler that prints the message and exits with status 101.
//!
//! The M:N threads (vCPUs, Kernel Notification upcalls, ThMBs) arrive with the issue that
//! builds them; this crate already compiles on the host so their logic can be tested there.
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
#![cfg_attr(not(test), no_std)]

#[cfg(target_os = "none")]
pub mod io;
#[cfg(target_os = "none")]
pub mod rt;
#[cfg(target_os = "none")]
pub mod sys;

pub use tsumugi_abi::syscall::{Clock, Errno};
