//! `cargo xtask run`: build, then boot the kernel in QEMU with the console on this terminal.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use tsumugi_abi::bootopt;

use crate::arch::Arch;
use crate::build;
use crate::qemu::{self, Accel, Console, Machine};
use crate::setup;

/// Default time limit of `run`, in seconds.
pub const DEFAULT_TIMEOUT_SECS: u64 = 600;
/// Largest `--smp` QEMU is asked for.
pub const MAX_CPUS: u8 = 8;

/// Options shared by the commands that boot a kernel (`run`, `gdb`).
#[derive(Args, Debug)]
pub struct BootArgs {
    /// Target architecture.
    #[arg(long, value_enum, default_value_t = Arch::X86_64)]
    pub arch: Arch,
    /// QEMU accelerator (`kvm` needs /dev/kvm able to run ring 3, see DESIGN §2).
    #[arg(long, value_enum, default_value_t = Accel::Tcg)]
    pub accel: Accel,
    /// Number of CPUs.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=i64::from(MAX_CPUS)))]
    pub smp: u8,
    /// Build with the release profile.
    #[arg(long)]
    pub release: bool,
    /// Deterministic mode: one cycle-counter tick per guest instruction (`-icount shift=0`).
    #[arg(long)]
    pub icount: bool,
    /// Also build this program crate (its folder) or take this ELF file into the boot archive;
    /// repeatable. Boot it with `-- run=<name>`.
    #[arg(long = "program", value_name = "DIR|ELF")]
    pub programs: Vec<PathBuf>,
    /// Kernel boot words (e.g. `selftest run=init`); none means the kernel's defaults.
    #[arg(last = true)]
    pub boot_words: Vec<String>,
}

/// Arguments of `cargo xtask run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// How to build and boot.
    #[command(flatten)]
    pub boot: BootArgs,
    /// Kill QEMU after this many seconds.
    #[arg(long, default_value_t = DEFAULT_TIMEOUT_SECS, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: u64,
}

/// `cargo xtask run`.
pub fn run(args: &RunArgs) -> Result<u8> {
    boot(&args.boot, Duration::from_secs(args.timeout), false)
}

/// Builds and boots with the console on this terminal; returns the exit status to end with.
pub fn boot(args: &BootArgs, timeout: Duration, gdb: bool) -> Result<u8> {
    args.arch.require_supported()?;
    let tools = setup::ensure(&[args.arch])?;
    let artifacts = build::build_with(&tools, args.arch, args.release, &args.programs)?;
    if !args.programs.is_empty() && !args.boot_words.iter().any(|w| w.split_once('=').is_some_and(|(key, _)| key == bootopt::RUN)) {
        let names: Vec<String> = build::program_sources(&args.programs)?
            .iter()
            .skip(1)
            .flat_map(|source| source.names().into_iter().map(str::to_string))
            .collect();
        eprintln!(
            "note: the kernel runs `{}` unless told otherwise; boot yours with `-- {}={}`",
            bootopt::DEFAULT_PROGRAM,
            bootopt::RUN,
            names.join(",")
        );
    }
    if args.accel == Accel::Kvm {
        eprintln!(
            "note: with --accel kvm, a /dev/kvm that cannot run ring 3 (a software hypervisor such as PVM) \
             resets the guest at its first return to user mode; see DESIGN §2"
        );
    }
    let cmdline = args.boot_words.join(" ");
    let machine = Machine { gdb, ..Machine::from_boot(args, &artifacts, &cmdline) };
    if gdb {
        eprintln!(
            "gdb: QEMU waits for a debugger; attach with: gdb {} -ex 'target remote :{}'",
            crate::cmd::shell_quote(&artifacts.kernel),
            qemu::GDB_PORT
        );
    }
    // Past the time limit, what each vCPU was doing (kernel code named; the console is the
    // terminal's, so programs' load addresses are unknown here).
    let probe = crate::hang::Probe::new(&artifacts);
    let finished = qemu::run_watched(&qemu::command(&machine), args.arch, timeout, &Console::Inherit, None, Some(&probe))?;
    eprintln!(
        "{}: {}",
        if gdb { "gdb" } else { "run" },
        finished.outcome.describe()
    );
    Ok(finished.outcome.exit_code())
}
