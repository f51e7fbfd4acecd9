//! `cargo xtask fuzz`: long runs of the in-guest syscall fuzzer (`userland/src/bin/fuzz.rs`).
//!
//! The call count and seed reach the program through its build (`TSUMUGI_FUZZ_CALLS`,
//! `TSUMUGI_FUZZ_SEED`, read with `option_env!`: the guest has no other input a test run could
//! give it), so this rebuilds the fuzzer, boots `run=fuzz` and judges the log with the checks of
//! the suite's fuzz run, for the asked count. `cargo xtask test` runs the defaults (100,000
//! calls, a fixed seed); the next build without these variables goes back to them.
//!
//! Runs of [`RELEASE_FROM`] calls or more build the kernel and programs in release (about
//! [`CALLS_PER_SEC_RELEASE`] against [`CALLS_PER_SEC_DEV`] in the dev build, which keeps the
//! kernel's debug assertions and overflow checks for shorter runs); `--profile` chooses. The
//! fuzzer prints a progress line every [`PROGRESS_EVERY`] calls (at most): a run whose
//! progress stops for [`STALL_SECS`] is killed as hung, one that is merely slow gets its whole
//! time limit.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use clap::Args;
use tsumugi_tests::{evaluate, suites, Check};

use crate::arch::Arch;
use crate::build;
use crate::qemu::{self, Accel, Console, Machine};
use crate::setup;

/// The variables the fuzzer's build reads.
pub const CALLS_VAR: &str = "TSUMUGI_FUZZ_CALLS";
/// See [`CALLS_VAR`].
pub const SEED_VAR: &str = "TSUMUGI_FUZZ_SEED";
/// Time allowed for boot and teardown, beyond the calls.
const BASE_SECS: u64 = 120;
/// Calls per second of wall time assumed for the time limit in the dev build (1,000,000 calls
/// took 274 s on x86_64 on a loaded host, 3,600 a second; this leaves a wide margin).
const CALLS_PER_SEC_DEV: u64 = 500;
/// The same for the release build: 10,000,000 calls on x86_64 (4 CPUs, beside another QEMU on
/// a 2-core host) took 1,645 s with boot and teardown, 6,081 calls/s; a third of that leaves
/// room for slower ports and busier hosts (the stall limit catches a hang long before).
const CALLS_PER_SEC_RELEASE: u64 = 2_000;
/// Call counts from which `--profile auto` builds in release.
const RELEASE_FROM: u64 = 1_000_000;
/// The fuzzer's longest progress interval (`userland/src/bin/fuzz.rs`, `PROGRESS_EVERY`: a tenth of the calls, at most this).
const PROGRESS_EVERY: u64 = 1_000_000;
/// What the fuzzer's progress lines start with.
const PROGRESS_PREFIX: &str = "fuzz: progress ";
/// The longest wait for the next progress line (or the first, which also waits for the boot).
const STALL_SECS: u64 = 900;

/// How `cargo xtask fuzz` builds the kernel and the programs.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// Release from 1,000,000 calls, dev below.
    Auto,
    /// The dev build (debug assertions and overflow checks on).
    Dev,
    /// The release build.
    Release,
}

/// Arguments of `cargo xtask fuzz`.
#[derive(Args, Debug)]
pub struct FuzzArgs {
    /// Target architecture.
    #[arg(long, value_enum, default_value_t = Arch::X86_64)]
    pub arch: Arch,
    /// Syscalls to make (spread over the fuzzer's threads).
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub calls: u64,
    /// PRNG seed (decimal or 0x-hex); default: from the host clock, printed for replay.
    #[arg(long, value_parser = parse_seed)]
    pub seed: Option<u64>,
    /// Number of CPUs.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u8).range(1..=i64::from(crate::run::MAX_CPUS)))]
    pub smp: u8,
    /// Build profile of the kernel and programs.
    #[arg(long, value_enum, default_value_t = Profile::Auto)]
    pub profile: Profile,
    /// Kill QEMU after this many seconds (default: from the call count and profile).
    #[arg(long)]
    pub timeout: Option<u64>,
    /// Kill QEMU when no progress line came for this many seconds.
    #[arg(long, default_value_t = STALL_SECS)]
    pub stall: u64,
}

fn parse_seed(s: &str) -> Result<u64, String> {
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16),
        None => s.replace('_', "").parse(),
    };
    parsed.map_err(|e| format!("not a number: {e}"))
}

/// `cargo xtask fuzz`.
pub fn run(args: &FuzzArgs) -> Result<u8> {
    args.arch.require_supported()?;
    let seed = args.seed.unwrap_or_else(|| {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        now.as_nanos() as u64 ^ u64::from(std::process::id()).rotate_left(32)
    });
    let release = match args.profile {
        Profile::Auto => args.calls >= RELEASE_FROM,
        Profile::Dev => false,
        Profile::Release => true,
    };
    println!(
        "fuzz: {} calls, seed {seed:#x}, {} CPU(s) on {}, {} build",
        args.calls,
        args.smp,
        args.arch,
        if release { "release" } else { "dev" }
    );
    let tools = setup::ensure(&[args.arch])?;
    // xtask is single-threaded here; the variables matter only to the cargo children.
    std::env::set_var(CALLS_VAR, args.calls.to_string());
    std::env::set_var(SEED_VAR, format!("{seed:#x}"));
    let artifacts = build::build_with(&tools, args.arch, release, &[])?;
    let rate = if release { CALLS_PER_SEC_RELEASE } else { CALLS_PER_SEC_DEV };
    let timeout = Duration::from_secs(args.timeout.unwrap_or(BASE_SECS + args.calls / rate));
    println!(
        "fuzz: time limit {} s; killed as hung after {} s without a progress line (one every {} calls)",
        timeout.as_secs(),
        args.stall,
        (args.calls / 10).clamp(1, PROGRESS_EVERY)
    );
    let progress = qemu::Progress { prefix: PROGRESS_PREFIX.to_string(), stall: Duration::from_secs(args.stall) };
    let mut suite = suites::fuzz_suite("fuzz-long", args.smp);
    suite.timeout = timeout;
    // One run of the group (the suite runs it twice to warm the kernel's caches; a long run
    // does not need that, since the frame count accounts for the one that grows).
    suite.boot_words = format!("{}={}", tsumugi_abi::bootopt::RUN, suites::FUZZ_GROUP);
    for check in &mut suite.checks {
        if let Check::LogContains(text) = check {
            if text.starts_with("fuzz: ") && text.ends_with(" calls,") {
                *text = format!("fuzz: {} calls,", args.calls);
            }
        }
    }
    let log = crate::cmd::workspace_root().join("target").join("test-logs").join(format!("{}-fuzz-long.log", args.arch));
    let machine = Machine {
        arch: args.arch,
        accel: Accel::Tcg,
        smp: args.smp,
        icount: false,
        gdb: false,
        kernel: &artifacts.kernel,
        initrd: &artifacts.initrd,
        cmdline: &suite.boot_words,
    };
    let started = std::time::Instant::now();
    let finished = qemu::run_watched(
        &qemu::command(&machine),
        args.arch,
        timeout,
        &Console::Capture { log: log.clone() },
        Some(&progress),
        Some(&crate::hang::Probe::new(&artifacts)),
    )?;
    let results = evaluate(&suite, &finished.outcome, &finished.log);
    let mut failed = 0;
    for r in &results {
        if r.passed {
            println!("ok   fuzz: {}", r.description);
        } else {
            failed += 1;
            println!("FAIL fuzz: {} ({})", r.description, r.detail);
        }
    }
    for line in finished
        .log
        .lines()
        .filter(|l| {
            (l.starts_with("fuzz") && !l.starts_with(PROGRESS_PREFIX) && !l.starts_with("fuzz: a well-formed"))
                || l.contains("PANIC")
                || l.contains("killed")
        })
    {
        println!("  {line}");
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "fuzz: {} calls, seed {seed:#x}, {} in {secs:.0} s ({:.0} calls/s with boot and teardown); log: {}",
        args.calls,
        if failed == 0 { "passed" } else { "FAILED" },
        args.calls as f64 / secs.max(1.0),
        log.display()
    );
    Ok(if failed == 0 { 0 } else { 1 })
}
