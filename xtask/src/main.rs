//! `cargo xtask`: Tsumugi's host tooling (set up, build, boot, test, benchmark, debug), one module per command.
#![forbid(unsafe_code)]

mod arch;
mod bench;
mod build;
mod cmd;
mod doc;
mod fuzz;
mod gdb;
mod hang;
mod image;
mod new;
mod program;
mod qemu;
mod run;
mod setup;
mod test;
mod trace;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit status for a request `xtask` cannot serve as asked (as clap uses for bad arguments).
const EXIT_USAGE: u8 = 2;

/// Tsumugi's host tooling.
#[derive(Parser, Debug)]
#[command(name = "cargo xtask", bin_name = "cargo xtask", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The commands.
#[derive(Subcommand, Debug)]
enum Command {
    /// Find (or, as root on Debian/Ubuntu, install) the kernel toolchain, linker and QEMU.
    Setup(setup::SetupArgs),
    /// Build the user programs, the kernel and the boot archive into target/cross.
    Build(build::BuildArgs),
    /// Build, then boot in QEMU with the serial console on this terminal.
    Run(run::RunArgs),
    /// Run the host tests and every QEMU test suite (what CI runs).
    Test(test::TestArgs),
    /// Build (release), run the benchmark programs in QEMU and criterion on the host; print the
    /// tables and write CSV and SVG charts under target/bench.
    #[command(after_long_help = bench::HELP)]
    Bench(bench::BenchArgs),
    /// Long runs of the in-guest syscall fuzzer: `--arch A --calls N --seed S`.
    Fuzz(fuzz::FuzzArgs),
    /// Like run, but QEMU waits for gdb on :1234 before the first instruction.
    Gdb(gdb::GdbArgs),
    /// Document libuthread as built for the target (sys, entry!, println!, io), warnings denied.
    Doc(doc::DocArgs),
    /// Make a program crate outside the tree (boot it with `run --program <dir> -- run=<name>`).
    New(new::NewArgs),
    /// Like run, in a tracing build: records switches, view switches, upcalls, preemptions,
    /// syscalls and user-thread switches, checks them against the kernel's counters and writes
    /// a Perfetto-readable trace (target/trace/<arch>.json).
    Trace(trace::TraceArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Setup(args) => setup::run(args),
        Command::Build(args) => build::run(args),
        Command::Run(args) => run::run(args),
        Command::Test(args) => test::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Fuzz(args) => fuzz::run(args),
        Command::Gdb(args) => gdb::run(args),
        Command::Doc(args) => doc::run(args),
        Command::New(args) => new::run(args),
        Command::Trace(args) => trace::run(args),
    };
    match result {
        Ok(status) => ExitCode::from(status),
        Err(error) => {
            eprintln!("error: {error:#}");
            if error.downcast_ref::<arch::Unsupported>().is_some() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
