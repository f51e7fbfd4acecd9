//! The contract between the Tsumugi kernel, its user programs and the host tools.
//!
//! Everything that crosses a boundary lives here as a named constant or enum: syscall numbers,
//! error codes, how the guest reports its exit status to the host, the boot options the kernel
//! understands and the lines it prints that host tools parse. The kernel, `libuthread`, the user
//! programs and `xtask` all depend on this crate, so a change here is a change everywhere at once.
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

pub mod bootopt;
pub mod exit;
pub mod kn;
pub mod log;
pub mod perf;
pub mod s3;
pub mod signal;
pub mod stats;
pub mod syscall;
pub mod trace;

pub use syscall::{Errno, Syscall};
