//! `cargo xtask gdb`: like `run`, but QEMU stops before the first instruction and waits for gdb.

use std::time::Duration;

use anyhow::Result;
use clap::Args;

use crate::run::{boot, BootArgs};

/// Default time limit of a debugging session, in seconds (longer than `run`'s: a human is stepping).
pub const DEFAULT_TIMEOUT_SECS: u64 = 3600;

/// Arguments of `cargo xtask gdb`.
#[derive(Args, Debug)]
pub struct GdbArgs {
    /// How to build and boot.
    #[command(flatten)]
    pub boot: BootArgs,
    /// Kill QEMU after this many seconds.
    #[arg(long, default_value_t = DEFAULT_TIMEOUT_SECS, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: u64,
}

/// `cargo xtask gdb`.
pub fn run(args: &GdbArgs) -> Result<u8> {
    boot(&args.boot, Duration::from_secs(args.timeout), true)
}
