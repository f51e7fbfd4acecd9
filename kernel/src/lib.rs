//! The architecture-independent Tsumugi kernel.
//!
//! The modules at the top are pure logic (no hardware) and are unit- and property-tested on the
//! host with `cargo test`; the ones under `target_os = "none"` drive the machine through `arch`
//! and are exercised by the in-kernel self-tests and the QEMU suites. This is the one place that
//! makes that split.
#![cfg_attr(not(test), no_std)]

extern crate alloc;

#[cfg(target_os = "none")]
#[macro_use]
pub mod console;

pub mod initrd;
pub mod loader;
pub mod mm;
pub mod names;
pub mod notify;
pub mod s3;
pub mod sched;
pub mod signals;
pub mod stats;

#[cfg(target_os = "none")]
pub mod boot;
#[cfg(target_os = "none")]
pub mod console_input;
#[cfg(target_os = "none")]
pub mod domain;
#[cfg(target_os = "none")]
pub mod fpu;
#[cfg(target_os = "none")]
pub mod panic;
#[cfg(target_os = "none")]
pub mod perf;
#[cfg(target_os = "none")]
pub mod selftest;
#[cfg(target_os = "none")]
pub mod smp;
#[cfg(target_os = "none")]
pub mod syscall;
#[cfg(target_os = "none")]
pub mod thread;
#[cfg(target_os = "none")]
pub mod trace;
#[cfg(target_os = "none")]
pub mod trap;
#[cfg(target_os = "none")]
pub mod user_access;
