//! `cargo xtask test`: the host tests, then every QEMU suite of every supported architecture.
//!
//! Prints one `ok`/`FAIL` line per QEMU check, the tail of the serial log of a failed suite, and
//! ends with exactly one `N passed, M failed` line counting host tests and QEMU checks together.
//! This is what CI runs (`.ci/run`).
//!
//! Besides the suites of `tsumugi_tests`, each architecture gets the suite `new-program`: a
//! crate made by `cargo xtask new` in a temporary folder, built with `--program` and booted
//! (and a crate that does not compile, which the build must refuse); and, when `--program` is
//! given, the suite `programs`, which boots those programs and expects each to exit with 0.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{bail, Context, Result};
use clap::Args;
use tsumugi_abi::bootopt;
use tsumugi_tests::{evaluate, suites, Check, CheckResult, Expected, Outcome, Suite};

use crate::arch::Arch;
use crate::build::{self, Artifacts};
use crate::cmd::{host_cargo, workspace_root, Cmd};
use crate::program::{self, Source};
use crate::qemu::{self, Accel, Console, Machine};
use crate::setup::{self, Tools};

/// Name of the host-test group (for `--filter` and the result lines).
pub const HOST_GROUP: &str = "host";
/// Lines of a failed suite's log printed to the terminal.
pub const LOG_TAIL_LINES: usize = 40;
/// Suite booting a crate made by `cargo xtask new`.
pub const NEW_PROGRAM_SUITE: &str = "new-program";
/// Suite booting the programs given with `--program`.
pub const PROGRAMS_SUITE: &str = "programs";
/// Name of the suite of the scripted gdb session (`cargo xtask gdb`).
pub const GDB_SUITE: &str = "gdb";
/// Suites of `cargo xtask trace`'s build (`crate::trace::selftest`), with their CPU counts.
pub const TRACE_SUITES: [(&str, u8); 2] = [("trace", 1), ("trace-smp4", 4)];
/// Name of the crate (and program) the `new-program` suite makes.
pub const NEW_PROGRAM: &str = "fresh_program";
/// Name of the crate that does not compile, which the `new-program` suite must see refused.
pub const BROKEN_PROGRAM: &str = "broken_program";
/// Name of the crate holding the documentation's program examples.
pub const EXAMPLES_CRATE: &str = "doc_examples";
/// What the broken crate's `main.rs` holds.
const BROKEN_MAIN: &str = "#![no_std]\n#![no_main]\nfn main() -> i32 { this does not compile }\n";
/// How cargo's test harness starts its per-binary result line.
const TEST_RESULT: &str = "test result:";

/// Arguments of `cargo xtask test`.
#[derive(Args, Debug)]
pub struct TestArgs {
    /// Only this architecture (default: every supported one).
    #[arg(long, value_enum)]
    pub arch: Option<Arch>,
    /// Build the kernel with the release profile.
    #[arg(long)]
    pub release: bool,
    /// Only run the test groups whose name contains this text: `host` for `cargo test`,
    /// `<arch>/<suite>` (e.g. `x86_64/kernel`) for a QEMU suite.
    #[arg(long)]
    pub filter: Option<String>,
    /// Run everything selected this many times (builds happen once) and end with how often each
    /// check failed, to show a check holds whatever the host's load and timing.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub repeat: u32,
    /// Also build this program crate (its folder) or ELF file into every boot archive, and boot
    /// it in the suite `programs`, which expects it to exit with status 0; repeatable.
    #[arg(long = "program", value_name = "DIR|ELF")]
    pub programs: Vec<PathBuf>,
    /// How many architectures to test at once, each in a `cargo xtask test --arch` process of
    /// its own whose output is printed when it ends (default: the host's CPU count, at most the
    /// number of architectures); 1 tests them one after another, printing as it goes.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub jobs: Option<u32>,
    /// Leave out the host tests (what `test` gives the per-architecture processes of `--jobs`).
    #[arg(long, hide = true)]
    pub no_host: bool,
}

/// The crates the `new-program` suite makes in a temporary folder (removed on drop).
struct Fixtures {
    /// The temporary folder.
    root: PathBuf,
    /// A crate as `cargo xtask new` makes it.
    fresh: PathBuf,
    /// The same with a `main.rs` that does not compile.
    broken: PathBuf,
    /// The program examples of the documentation, one binary each, and how many.
    examples: (PathBuf, usize),
}

impl Fixtures {
    fn create() -> Result<Fixtures> {
        let root = std::env::temp_dir().join(format!("tsumugi-xtask-test-{}", std::process::id()));
        if root.exists() {
            std::fs::remove_dir_all(&root).with_context(|| format!("removing {}", root.display()))?;
        }
        let fresh = root.join(NEW_PROGRAM);
        crate::new::create(&fresh)?;
        let broken = root.join(BROKEN_PROGRAM);
        crate::new::create(&broken)?;
        std::fs::write(broken.join("src").join("main.rs"), BROKEN_MAIN)
            .with_context(|| format!("writing {}", broken.display()))?;
        let examples = root.join(EXAMPLES_CRATE);
        let count = crate::doc::examples_crate(&examples)?;
        Ok(Fixtures { root, fresh, broken, examples: (examples, count) })
    }
}

impl Drop for Fixtures {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The `new-program` suite: the fresh crate's program runs and exits with 0.
fn new_program_suite() -> Suite {
    let [greeting, sum] = crate::new::expected_lines(NEW_PROGRAM);
    Suite {
        name: NEW_PROGRAM_SUITE,
        smp: 1,
        boot_words: format!("{}={NEW_PROGRAM}", bootopt::RUN),
        timeout: suites::KERNEL_SUITE_TIMEOUT,
        expected: Expected::Status(suites::STATUS_SUCCESS),
        checks: vec![
            Check::DomainExited { program: NEW_PROGRAM.to_string(), status: 0 },
            Check::LogLine(greeting),
            Check::LogLine(sum),
            Check::Halting(0),
        ],
    }
}

/// The `gdb` suite: the program the scripted gdb session stops in runs to its end on its own;
/// then (see [`gdb_session`]) `cargo xtask gdb --batch xtask/gdb/selftest.gdb` must show it.
fn gdb_suite() -> Suite {
    Suite {
        name: GDB_SUITE,
        smp: 1,
        boot_words: crate::gdb::SELFTEST_BOOT.to_string(),
        timeout: suites::KERNEL_SUITE_TIMEOUT,
        expected: Expected::Status(suites::STATUS_SUCCESS),
        checks: vec![Check::DomainExited { program: "uthread_kn".to_string(), status: 0 }, Check::Halting(0)],
    }
}

/// Runs the scripted gdb session on `arch` and records whether it printed what it must.
fn gdb_session(arch: Arch, artifacts: &Artifacts, tally: &mut Tally) {
    let group = format!("{arch}/{GDB_SUITE}");
    let description = format!(
        "a scripted `cargo xtask gdb` session ({}) lists the program, its CPU and a user thread's backtrace",
        crate::gdb::SELFTEST_SCRIPT
    );
    let (passed, detail) = match crate::gdb::selftest(arch, artifacts) {
        Ok((missing, _)) if missing.is_empty() => (true, "ok".to_string()),
        Ok((missing, text)) => {
            print_tail(&text, &workspace_root().join(format!("target/gdb/{}-gdb.log", arch.name())));
            (false, format!("missing: {}", missing.join("; ")))
        }
        Err(error) => (false, format!("{error:#}")),
    };
    tally.record(&group, &CheckResult { description, passed, detail });
}

/// A trace suite: boots `crate::trace::SUITE_PROGRAM` in the tracing build with `smp` CPUs and
/// records its checks (the trace decodes, its JSON has the tracks, its counts equal the
/// kernel's counters).
fn trace_suite(tools: &Tools, arch: Arch, name: &str, smp: u8, release: bool, tally: &mut Tally) {
    let group = format!("{arch}/{name}");
    println!("test {group}: {smp} CPU(s), `cargo xtask trace` build, run={}", crate::trace::SUITE_PROGRAM);
    match crate::trace::selftest(tools, arch, smp, release) {
        Ok(results) => {
            for (description, problem) in results {
                let (passed, detail) = match problem {
                    None => (true, "ok".to_string()),
                    Some(p) => (false, p),
                };
                tally.record(&group, &CheckResult { description, passed, detail });
            }
        }
        Err(error) => tally.could_not_run(&group, "build and boot the tracing build", &error),
    }
}

/// The `programs` suite: every program named runs and exits with 0.
fn programs_suite(names: &[String]) -> Suite {
    let mut checks: Vec<Check> = names
        .iter()
        .map(|name| Check::DomainExited { program: name.clone(), status: 0 })
        .collect();
    checks.push(Check::Halting(0));
    Suite {
        name: PROGRAMS_SUITE,
        smp: 1,
        boot_words: format!("{}={}", bootopt::RUN, names.join(",")),
        timeout: suites::KERNEL_SUITE_TIMEOUT,
        expected: Expected::Status(suites::STATUS_SUCCESS),
        checks,
    }
}

/// Running totals.
#[derive(Debug, Default)]
struct Tally {
    passed: u64,
    failed: u64,
    /// Each failed check (`group: description`) with the runs it failed in, for `--repeat`.
    failures: std::collections::BTreeMap<String, Vec<u32>>,
    /// The run under way (1-based).
    run: u32,
}

impl Tally {
    /// Prints and counts one check of `group`.
    fn record(&mut self, group: &str, result: &CheckResult) {
        if result.passed {
            self.passed += 1;
            println!("ok   {group}: {}", result.description);
        } else {
            self.failed += 1;
            println!("FAIL {group}: {} ({})", result.description, result.detail);
            self.note_failure(format!("{group}: {}", result.description));
        }
    }

    /// Prints and counts something that could not run.
    fn could_not_run(&mut self, group: &str, what: &str, error: &anyhow::Error) {
        self.failed += 1;
        println!("FAIL {group}: {what} ({error:#})");
        self.note_failure(format!("{group}: {what}"));
    }

    fn note_failure(&mut self, check: String) {
        let run = self.run;
        self.failures.entry(check).or_default().push(run);
    }

    /// The `--repeat` report: how often each check failed over `runs` runs.
    fn repeat_report(&self, runs: u32) -> Vec<String> {
        let mut lines = vec![format!(
            "repeat: {runs} runs, {} checks failed at least once",
            self.failures.len()
        )];
        for (check, failed_runs) in &self.failures {
            let which: Vec<String> = failed_runs.iter().map(u32::to_string).collect();
            lines.push(format!(
                "repeat: {}/{runs} failed: {check} (runs {})",
                failed_runs.len(),
                which.join(", ")
            ));
        }
        lines
    }
}

/// `cargo xtask test`.
pub fn run(args: &TestArgs) -> Result<u8> {
    let arches = match args.arch {
        Some(arch) => {
            arch.require_supported()?;
            vec![arch]
        }
        None => Arch::supported(),
    };
    let selected = |group: &str| {
        args.filter
            .as_deref()
            .is_none_or(|filter| group.contains(filter))
    };
    let run_host = selected(HOST_GROUP) && !args.no_host;
    // The programs of --program, checked (and named) before anything is built.
    let extra_names: Vec<String> = build::program_sources(&args.programs)?
        .iter()
        .skip(1)
        .flat_map(|source| source.names().into_iter().map(str::to_string))
        .collect();
    let mut plan = Vec::new();
    let mut known_groups = vec![HOST_GROUP.to_string()];
    for arch in arches {
        let mut suites = suites::for_arch(arch.name()).with_context(|| {
            format!("{arch} is supported but the tests crate defines no suites for it")
        })?;
        suites.push(new_program_suite());
        suites.push(gdb_suite());
        if !extra_names.is_empty() {
            suites.push(programs_suite(&extra_names));
        }
        known_groups.extend(suites.iter().map(|suite| group_name(arch, suite)));
        known_groups.extend(TRACE_SUITES.iter().map(|(name, _)| format!("{arch}/{name}")));
        let suites: Vec<Suite> = suites
            .into_iter()
            .filter(|suite| selected(&group_name(arch, suite)))
            .collect();
        let traces: Vec<(&str, u8)> = TRACE_SUITES.into_iter().filter(|(name, _)| selected(&format!("{arch}/{name}"))).collect();
        if !suites.is_empty() || !traces.is_empty() {
            plan.push((arch, suites, traces));
        }
    }
    if !run_host && plan.is_empty() {
        bail!(
            "--filter {:?} matches no test group (groups: {})",
            args.filter.as_deref().unwrap_or_default(),
            known_groups.join(", ")
        );
    }

    let jobs = args.jobs.map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get()),
        |jobs| jobs as usize,
    );
    if plan.len() > 1 && jobs > 1 {
        let arches: Vec<Arch> = plan.iter().map(|(arch, _, _)| *arch).collect();
        return run_arches_at_once(args, &arches, jobs.min(arches.len()), run_host);
    }

    let fixtures = if plan
        .iter()
        .any(|(_, suites, _)| suites.iter().any(|s| s.name == NEW_PROGRAM_SUITE))
    {
        Some(Fixtures::create()?)
    } else {
        None
    };
    let mut tally = Tally::default();
    let tools = if plan.is_empty() {
        None
    } else {
        let arches: Vec<Arch> = plan.iter().map(|(arch, _, _)| *arch).collect();
        // The `gdb` suites need the debugger: install it too where setup may install.
        match setup::ensure(&arches).and_then(|tools| setup::ensure_debugger().map(|()| tools)) {
            Ok(tools) => Some(tools),
            Err(error) => {
                tally.could_not_run("setup", "cannot build or boot the kernel", &error);
                None
            }
        }
    };
    for run in 1..=args.repeat {
        tally.run = run;
        if args.repeat > 1 {
            println!("==== run {run} of {} ====", args.repeat);
        }
        if run_host {
            host_tests(&mut tally);
        }
        if let Some(tools) = &tools {
            for (arch, suites, traces) in &plan {
                let mut programs = args.programs.clone();
                let fixtures = fixtures
                    .as_ref()
                    .filter(|_| suites.iter().any(|s| s.name == NEW_PROGRAM_SUITE));
                if let Some(fixtures) = fixtures {
                    programs.push(fixtures.fresh.clone());
                }
                let artifacts = if suites.is_empty() { None } else { run_arch(tools, *arch, suites, args.release, &programs, &mut tally) };
                if let Some(artifacts) = artifacts.filter(|_| suites.iter().any(|s| s.name == GDB_SUITE)) {
                    gdb_session(*arch, &artifacts, &mut tally);
                }
                if let Some(fixtures) = fixtures {
                    refuses_broken_crate(tools, *arch, args.release, &fixtures.broken, &mut tally);
                    docs_build(tools, *arch, args.release, &fixtures.examples, &mut tally);
                }
                for (name, smp) in traces {
                    trace_suite(tools, *arch, name, *smp, args.release, &mut tally);
                }
            }
        }
    }
    if args.repeat > 1 {
        for line in tally.repeat_report(args.repeat) {
            println!("{line}");
        }
    }
    println!("{} passed, {} failed", tally.passed, tally.failed);
    Ok(if tally.failed == 0 { 0 } else { 1 })
}

/// `cargo xtask test` over several architectures at once: one `test --arch <arch> --no-host`
/// process per architecture, at most `jobs` running (each boots its suites one after another,
/// so a 2-CPU host keeps both CPUs busy), the host tests meanwhile in this process. Setup runs
/// here first, so the processes only find what it installed. Each process writes into
/// `target/test-logs/<arch>-all.log`, printed whole when it ends; its final count line is
/// renamed `<arch>: N passed, M failed`, so the output still ends with exactly one
/// `N passed, M failed`, the sum.
fn run_arches_at_once(args: &TestArgs, arches: &[Arch], jobs: usize, run_host: bool) -> Result<u8> {
    let mut tally = Tally::default();
    if let Err(error) = setup::ensure(arches).and_then(|_| setup::ensure_debugger()) {
        tally.could_not_run("setup", "cannot build or boot the kernel", &error);
        println!("{} passed, {} failed", tally.passed, tally.failed);
        return Ok(1);
    }
    let exe = std::env::current_exe().context("finding the xtask executable")?;
    let logs = workspace_root().join("target").join("test-logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    println!(
        "test: {} architectures, {jobs} at a time, each in its own process (--jobs 1: one after another)",
        arches.len()
    );
    let start = |arch: Arch| -> Result<ArchRun> {
        let log = logs.join(format!("{arch}-all.log"));
        let out = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone().with_context(|| format!("opening {}", log.display()))?;
        let mut cmd = std::process::Command::new(&exe);
        cmd.args(["test", "--no-host", "--jobs", "1", "--arch", arch.name()])
            .args(["--repeat", &args.repeat.to_string()])
            .current_dir(workspace_root())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        if args.release {
            cmd.arg("--release");
        }
        if let Some(filter) = &args.filter {
            cmd.args(["--filter", filter]);
        }
        for program in &args.programs {
            cmd.arg("--program").arg(program);
        }
        let child = cmd.spawn().with_context(|| format!("starting `{}` for {arch}", exe.display()))?;
        println!("test {arch}: started, output in {}", log.display());
        Ok(ArchRun { arch, child, log, started: std::time::Instant::now() })
    };
    let mut waiting: std::collections::VecDeque<Arch> = arches.iter().copied().collect();
    let mut running: Vec<ArchRun> = Vec::new();
    let mut fill = |running: &mut Vec<ArchRun>, tally: &mut Tally| {
        while running.len() < jobs {
            let Some(arch) = waiting.pop_front() else { break };
            match start(arch) {
                Ok(run) => running.push(run),
                Err(error) => tally.could_not_run(arch.name(), "start its test process", &error),
            }
        }
    };
    fill(&mut running, &mut tally);
    if run_host {
        for run in 1..=args.repeat {
            tally.run = run;
            host_tests(&mut tally);
        }
    }
    while !running.is_empty() {
        let mut index = 0;
        while index < running.len() {
            match running[index].child.try_wait() {
                Ok(None) => index += 1,
                Ok(Some(status)) => {
                    let run = running.swap_remove(index);
                    run.report(status, &mut tally);
                    fill(&mut running, &mut tally);
                }
                Err(error) => {
                    let run = running.swap_remove(index);
                    tally.could_not_run(run.arch.name(), "wait for its test process", &error.into());
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    if args.repeat > 1 && run_host {
        for line in tally.repeat_report(args.repeat) {
            println!("{line}");
        }
    }
    println!("{} passed, {} failed", tally.passed, tally.failed);
    Ok(if tally.failed == 0 { 0 } else { 1 })
}

/// One architecture's `cargo xtask test --arch` process of [`run_arches_at_once`].
struct ArchRun {
    arch: Arch,
    child: std::process::Child,
    log: PathBuf,
    started: std::time::Instant,
}

impl ArchRun {
    /// Prints the ended process's output and adds its counts to `tally` (a process that ended
    /// without its count line counts as one failure).
    fn report(self, status: std::process::ExitStatus, tally: &mut Tally) {
        let arch = self.arch;
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        println!("==== test {arch}: ended after {} s ({status}) ====", self.started.elapsed().as_secs());
        let counts = text.lines().rev().find_map(parse_count_line);
        let mut lines: Vec<&str> = text.lines().collect();
        if counts.is_some() {
            if let Some(last) = lines.iter().rposition(|line| parse_count_line(line).is_some()) {
                lines.remove(last);
            }
        }
        for line in lines {
            println!("{line}");
        }
        match counts {
            Some((passed, failed)) => {
                println!("{arch}: {passed} passed, {failed} failed");
                tally.passed += passed;
                tally.failed += failed;
                if failed > 0 {
                    tally.note_failure(format!("{arch}: {failed} check(s), see above"));
                }
            }
            None => {
                let error = anyhow::anyhow!("it ended ({status}) without its count line; its output is in {}", self.log.display());
                tally.could_not_run(arch.name(), "its test process", &error);
            }
        }
    }
}

/// The counts of a `N passed, M failed` line (the last line `cargo xtask test` prints).
fn parse_count_line(line: &str) -> Option<(u64, u64)> {
    let (passed, failed) = line.trim().split_once(" passed, ")?;
    Some((passed.parse().ok()?, failed.strip_suffix(" failed")?.parse().ok()?))
}

/// `<arch>/<suite>`, the name of a QEMU suite in filters and result lines.
fn group_name(arch: Arch, suite: &Suite) -> String {
    format!("{arch}/{}", suite.name)
}

/// Runs `cargo test --workspace` on the host, streaming its output and counting its results.
fn host_tests(tally: &mut Tally) {
    let cmd = Cmd::new(host_cargo())
        .args(["test", "--workspace", "--no-fail-fast"])
        .current_dir(workspace_root());
    match stream_cargo_test(&cmd) {
        Ok((passed, failed, status)) => {
            tally.passed += passed;
            tally.failed += failed;
            println!("{HOST_GROUP}: {passed} passed, {failed} failed");
            if !status.success() && failed == 0 {
                let error =
                    anyhow::anyhow!("exited with {status} before any test failed (does it build?)");
                tally.could_not_run(HOST_GROUP, "cargo test --workspace", &error);
            }
        }
        Err(error) => tally.could_not_run(HOST_GROUP, "cargo test --workspace", &error),
    }
}

/// Runs a `cargo test` command, echoing its stdout, and sums its `test result:` lines.
fn stream_cargo_test(cmd: &Cmd) -> Result<(u64, u64, std::process::ExitStatus)> {
    cmd.echo();
    let mut child = cmd
        .to_command()
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("could not start `{}`", cmd.display()))?;
    let (mut passed, mut failed) = (0, 0);
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines() {
            let line = line.context("reading cargo test output")?;
            println!("{line}");
            if let Some((p, f)) = parse_test_result(&line) {
                passed += p;
                failed += f;
            }
        }
    }
    let status = child.wait().context("waiting for cargo test")?;
    Ok((passed, failed, status))
}

/// The passed and failed counts of a `test result: ok. 5 passed; 0 failed; ...` line.
pub fn parse_test_result(line: &str) -> Option<(u64, u64)> {
    let rest = line.trim_start().strip_prefix(TEST_RESULT)?;
    let words: Vec<&str> = rest.split_whitespace().collect();
    let count = |label: &str| {
        words
            .windows(2)
            .find(|pair| pair[1].trim_end_matches([';', ',', '.']) == label)
            .and_then(|pair| pair[0].parse::<u64>().ok())
    };
    Some((count("passed")?, count("failed")?))
}

/// Builds `broken` (a crate that does not compile) for `arch` and records whether the build
/// refused it with an error naming the crate.
fn refuses_broken_crate(tools: &Tools, arch: Arch, release: bool, broken: &Path, tally: &mut Tally) {
    let group = format!("{arch}/{NEW_PROGRAM_SUITE}");
    let description = format!("a crate that does not compile ({BROKEN_PROGRAM}) is refused");
    let result = Source::from_arg(broken).and_then(|source| program::build(tools, arch, release, &source));
    let (passed, detail) = match result {
        Ok(_) => (false, "it built".to_string()),
        Err(error) => {
            let text = format!("{error:#}");
            (text.contains("does not build") && text.contains(BROKEN_PROGRAM), text)
        }
    };
    tally.record(&group, &CheckResult { description, passed, detail });
}

/// Builds libuthread's documentation for `arch` (warnings denied) and the documentation's
/// program examples, and records both.
fn docs_build(tools: &Tools, arch: Arch, release: bool, examples: &(PathBuf, usize), tally: &mut Tally) {
    let group = format!("{arch}/{NEW_PROGRAM_SUITE}");
    let verdict = |result: Result<()>| match result {
        Ok(()) => (true, "ok".to_string()),
        Err(error) => (false, format!("{error:#}")),
    };
    let (passed, detail) = verdict(crate::doc::build_docs(tools, arch).map(|_| ()));
    let description = format!("libuthread documents for {} with rustdoc warnings denied", arch.triple());
    tally.record(&group, &CheckResult { description, passed, detail });
    let (dir, count) = examples;
    let built = Source::from_arg(dir).and_then(|source| program::build(tools, arch, release, &source));
    let (passed, detail) = verdict(built.map(|_| ()));
    let description = format!(
        "the {count} program examples of {} build for {}",
        crate::doc::EXAMPLE_FILES.join(" and "),
        arch.triple()
    );
    tally.record(&group, &CheckResult { description, passed, detail });
}

/// Builds for `arch` (with the programs of `programs` too) and runs its suites, one after
/// another.
fn run_arch(tools: &Tools, arch: Arch, suites: &[Suite], release: bool, programs: &[PathBuf], tally: &mut Tally) -> Option<Artifacts> {
    let artifacts = match build::build_with(tools, arch, release, programs) {
        Ok(artifacts) => artifacts,
        Err(error) => {
            tally.could_not_run(arch.name(), "build", &error);
            return None;
        }
    };
    for suite in suites {
        run_suite(arch, suite, &artifacts, tally);
    }
    Some(artifacts)
}

/// Where a suite's serial log goes: `target/test-logs/<arch>-<suite>.log`.
pub fn log_path(arch: Arch, suite: &Suite) -> PathBuf {
    workspace_root()
        .join("target")
        .join("test-logs")
        .join(format!("{arch}-{}.log", suite.name))
}

/// Boots one suite and prints its checks.
fn run_suite(arch: Arch, suite: &Suite, artifacts: &Artifacts, tally: &mut Tally) {
    let group = group_name(arch, suite);
    let log = log_path(arch, suite);
    println!(
        "test {group}: {} CPU(s), boot words `{}`, time limit {} s",
        suite.smp,
        suite.boot_words,
        suite.timeout.as_secs()
    );
    let machine = Machine {
        arch,
        accel: Accel::Tcg,
        smp: suite.smp,
        icount: false,
        gdb: false,
        kernel: &artifacts.kernel,
        initrd: &artifacts.initrd,
        cmdline: &suite.boot_words,
    };
    let console = Console::Capture { log: log.clone() };
    // A run that passes its time limit first reports what each vCPU was doing (crate::hang).
    let probe = crate::hang::Probe::new(artifacts);
    let finished = match qemu::run_watched(&qemu::command(&machine), arch, suite.timeout, &console, None, Some(&probe)) {
        Ok(finished) => finished,
        Err(error) => {
            tally.could_not_run(&group, "boot", &error);
            return;
        }
    };
    if matches!(finished.outcome, Outcome::TimedOut(_)) && suite.expected != Expected::Timeout {
        println!("{group}: {}", finished.outcome.describe());
    }
    let results = evaluate(suite, &finished.outcome, &finished.log);
    for result in &results {
        tally.record(&group, result);
    }
    if results.iter().any(|result| !result.passed) {
        // Keep each failed run's log (the next run of the suite writes `log` again).
        let kept = log.with_extension(format!("run{}.log", tally.run));
        let log = if std::fs::copy(&log, &kept).is_ok() { kept } else { log };
        print_tail(&finished.log, &log);
    }
}

/// Prints the last [`LOG_TAIL_LINES`] lines of a failed suite's log and where the whole log is.
fn print_tail(text: &str, path: &std::path::Path) {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(LOG_TAIL_LINES);
    println!(
        "---- last {} lines of {} ----",
        lines.len() - start,
        path.display()
    );
    for line in &lines[start..] {
        println!("{line}");
    }
    println!("---- end of log; full log: {} ----", path.display());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_count_line() {
        assert_eq!(parse_count_line("742 passed, 3 failed"), Some((742, 3)));
        assert_eq!(parse_count_line("host: 12 passed, 0 failed"), None);
        assert_eq!(parse_count_line("ok   x86_64/kernel: 2 passed, 0 failed in the log"), None);
    }

    #[test]
    fn parses_cargo_test_result_lines() {
        assert_eq!(
            parse_test_result(
                "test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s"
            ),
            Some((12, 0))
        );
        assert_eq!(
            parse_test_result(
                "test result: FAILED. 3 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out"
            ),
            Some((3, 2))
        );
        assert_eq!(parse_test_result("running 3 tests"), None);
        assert_eq!(parse_test_result("test result: garbage"), None);
        assert_eq!(parse_test_result("test foo ... ok"), None);
    }

    #[test]
    fn repeat_report_counts_failures_per_check() {
        let mut tally = Tally::default();
        let failed = CheckResult { description: "a check".to_string(), passed: false, detail: "why".to_string() };
        let passed = CheckResult { description: "other".to_string(), passed: true, detail: "ok".to_string() };
        for run in 1..=3 {
            tally.run = run;
            tally.record("x86_64/sched", &passed);
            if run != 2 {
                tally.record("x86_64/sched", &failed);
            }
        }
        assert_eq!((tally.passed, tally.failed), (3, 2));
        assert_eq!(
            tally.repeat_report(3),
            [
                "repeat: 3 runs, 1 checks failed at least once",
                "repeat: 2/3 failed: x86_64/sched: a check (runs 1, 3)"
            ]
        );
    }

    #[test]
    fn log_paths_name_arch_and_suite() {
        let suite = &suites::x86_64()[0];
        assert!(log_path(Arch::X86_64, suite).ends_with("target/test-logs/x86_64-kernel.log"));
        assert_eq!(group_name(Arch::X86_64, suite), "x86_64/kernel");
    }
}
