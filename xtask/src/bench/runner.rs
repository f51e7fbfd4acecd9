//! Running one benchmark: a QEMU boot or a host criterion run, with a time limit and a log,
//! judged and merged into the tables.

use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result};
use tsumugi_abi::bootopt;
use tsumugi_tests::Outcome;

use crate::arch::Arch;
use crate::build::Artifacts;
use crate::cmd::{find_in_path, host_cargo, workspace_root, Cmd};
use crate::qemu::{self, Accel, Console, Machine};

use super::catalog::{Bench, Runner, HOST, NO_HOST_BENCH};
use super::criterion::{criterion_lines, has_target, parse_criterion};
use super::host_comparison::{parse_go_bench, GO_BENCHTIME, GO_COUNT, NO_GO};
use super::line::scan_log;
use super::table::Tables;

/// What the kernel prints before a program name it cannot start (kernel/src/boot.rs).
pub const CANNOT_RUN: &str = "cannot run ";
/// What follows the program name when the program is not in the boot archive.
pub const NOT_IN_ARCHIVE: &str = ": not in the boot archive";
/// Lines of a failed boot's log printed to the terminal.
pub const LOG_TAIL_LINES: usize = 25;

/// How one benchmark run ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Ran and printed this many good `BENCH` lines.
    Ok(usize),
    /// Did not run, not a failure (why).
    Skipped(String),
    /// Failed (why).
    Failed(String),
}

/// The programs a boot runs (`run=a+b,c` gives `a`, `b`, `c`).
pub fn programs_of(boot_words: &str) -> Vec<&str> {
    bootopt::get(boot_words, bootopt::RUN)
        .unwrap_or(bootopt::DEFAULT_PROGRAM)
        .split([',', '+'])
        .filter(|p| !p.is_empty())
        .collect()
}

/// The program the kernel said it could not find in the boot archive, if any.
pub fn missing_program<'a>(log: &'a str, programs: &[&str]) -> Option<&'a str> {
    log.lines().find_map(|line| {
        let name = line
            .trim()
            .strip_prefix(CANNOT_RUN)?
            .strip_suffix(NOT_IN_ARCHIVE)?;
        programs.contains(&name).then_some(name)
    })
}

/// Judges one finished boot and merges its rows; prints warnings for malformed lines.
fn judge_boot(
    arch: Arch,
    bench: &Bench,
    programs: &[&str],
    outcome: &Outcome,
    log: &str,
    tables: &mut Tables,
) -> Verdict {
    if let Some(name) = missing_program(log, programs) {
        return Verdict::Skipped(format!("{name} is not in the {arch} boot archive"));
    }
    let (good, bad) = scan_log(log);
    for line in &good {
        for warning in tables.add(arch.name(), line, bench.suffix) {
            println!("warning: {warning}");
        }
    }
    for (line, why) in &bad {
        println!(
            "warning: {arch}/{}: malformed BENCH line ({why}): {line}",
            bench.name
        );
    }
    if *outcome != Outcome::Guest(0) {
        Verdict::Failed(outcome.describe())
    } else if good.is_empty() {
        Verdict::Failed("no BENCH line in the log".to_string())
    } else if !bad.is_empty() {
        Verdict::Failed(format!("{} malformed BENCH line(s)", bad.len()))
    } else {
        Verdict::Ok(good.len())
    }
}

/// Where a boot's console log goes.
pub fn log_path(out_dir: &Path, arch: &str, bench: &str) -> PathBuf {
    out_dir.join("logs").join(format!("{arch}-{bench}.log"))
}

/// Prints the end of a failed run's log.
fn print_tail(text: &str, path: &Path) {
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
    println!("---- end of log ----");
}

/// How a benchmark is run this time.
pub struct Settings {
    /// QEMU accelerator.
    pub accel: Accel,
    /// Deterministic mode (`-icount shift=0`).
    pub icount: bool,
    /// Release profile.
    pub release: bool,
    /// `--timeout`, overriding each benchmark's own.
    pub timeout: Option<Duration>,
    /// `target/bench`.
    pub out_dir: PathBuf,
    /// `--program`: more program crates or ELF files for the boot archive.
    pub programs: Vec<PathBuf>,
}

/// Boots one QEMU benchmark on `arch`.
pub fn run_boot(
    settings: &Settings,
    arch: Arch,
    bench: &Bench,
    artifacts: &Artifacts,
    tables: &mut Tables,
) -> Verdict {
    let Runner::Qemu { smp, boot_words, parallel } = bench.runner else {
        return Verdict::Failed("not a QEMU benchmark".to_string());
    };
    let programs = programs_of(boot_words);
    if let Some(missing) = programs
        .iter()
        .find(|p| !artifacts.programs.iter().any(|(name, _)| name == *p))
    {
        return Verdict::Skipped(format!("{missing} is not built for {arch}"));
    }
    let timeout = settings.timeout.unwrap_or(bench.timeout);
    let boots = bench.boots.max(1);
    println!(
        "bench {arch}/{}: {smp} CPU(s){}, boot words `{boot_words}`, time limit {} s{}",
        bench.name,
        if parallel { " in parallel, no -icount (elapsed time)" } else { "" },
        timeout.as_secs(),
        if boots > 1 {
            format!(", median of {boots} boots")
        } else {
            String::new()
        }
    );
    let machine = Machine {
        arch,
        accel: settings.accel,
        smp,
        icount: settings.icount && !parallel,
        gdb: false,
        kernel: &artifacts.kernel,
        initrd: &artifacts.initrd,
        cmdline: boot_words,
    };
    if boots == 1 {
        let log = log_path(&settings.out_dir, arch.name(), bench.name);
        return boot_once(&machine, arch, bench, &programs, timeout, &log, tables);
    }
    let mut samples = Vec::new();
    let mut lines = 0;
    for boot in 1..=boots {
        let log = log_path(
            &settings.out_dir,
            arch.name(),
            &format!("{}-{boot}", bench.name),
        );
        let mut sample = Tables::default();
        match boot_once(&machine, arch, bench, &programs, timeout, &log, &mut sample) {
            Verdict::Ok(count) => lines = count,
            other => return other,
        }
        samples.push(sample);
    }
    let (spreads, warnings) = tables.add_median(&samples);
    for warning in warnings {
        println!("warning: {warning}");
    }
    for spread in spreads {
        println!("bench {arch}/{}: {spread} over {boots} boots", bench.name);
    }
    Verdict::Ok(lines)
}

/// One boot of `machine`, logged to `log`, judged and merged into `tables`.
fn boot_once(
    machine: &Machine,
    arch: Arch,
    bench: &Bench,
    programs: &[&str],
    timeout: Duration,
    log: &Path,
    tables: &mut Tables,
) -> Verdict {
    let console = Console::Capture {
        log: log.to_path_buf(),
    };
    let finished = match qemu::run(&qemu::command(machine), arch, timeout, &console) {
        Ok(finished) => finished,
        Err(error) => return Verdict::Failed(format!("{error:#}")),
    };
    let verdict = judge_boot(
        arch,
        bench,
        programs,
        &finished.outcome,
        &finished.log,
        tables,
    );
    if matches!(verdict, Verdict::Failed(_)) {
        print_tail(&finished.log, log);
    }
    verdict
}

/// Runs a host benchmark.
pub fn run_host(settings: &Settings, bench: &Bench, tables: &mut Tables) -> Verdict {
    match bench.runner {
        Runner::HostGo { dir, table } => run_go(settings, bench, dir, table, tables),
        _ => run_criterion(settings, bench, tables),
    }
}

/// Runs the Go benchmark in `dir` (skipped when `go` is not on PATH).
fn run_go(
    settings: &Settings,
    bench: &Bench,
    dir: &str,
    table: &str,
    tables: &mut Tables,
) -> Verdict {
    if find_in_path("go").is_none() {
        println!("{HOST}: note: {NO_GO}");
        return Verdict::Skipped(NO_GO.to_string());
    }
    let log = log_path(&settings.out_dir, HOST, bench.name);
    let count = GO_COUNT.to_string();
    let cmd = Cmd::new("go")
        .args([
            "test",
            "-run",
            "^$",
            "-bench",
            ".",
            "-benchtime",
            GO_BENCHTIME,
            "-count",
            &count,
        ])
        .env("GOMAXPROCS", "1")
        // The module has no dependency: never reach for the network or another toolchain.
        .env("GOFLAGS", "-mod=mod")
        .env("GOPROXY", "off")
        .env("GOTOOLCHAIN", "local")
        .current_dir(workspace_root().join(dir));
    let timeout = settings.timeout.unwrap_or(bench.timeout);
    let output = match stream_to_log(&cmd, &log, timeout) {
        Ok((output, Some(status))) if status.success() => output,
        Ok((output, Some(status))) => {
            print_tail(&output, &log);
            return Verdict::Failed(format!("`{}` exited with {status}", cmd.display()));
        }
        Ok((_, None)) => {
            return Verdict::Failed(format!("timed out after {} s", timeout.as_secs()));
        }
        Err(error) => return Verdict::Failed(format!("{error:#}")),
    };
    let results = parse_go_bench(&output);
    if results.is_empty() {
        return Verdict::Failed("no `ns/op` line in go test's output".to_string());
    }
    let lines = criterion_lines(&results, table);
    for line in &lines {
        for warning in tables.add(HOST, line, bench.suffix) {
            println!("warning: {warning}");
        }
    }
    Verdict::Ok(lines.len())
}

/// Runs a criterion bench target on the host.
fn run_criterion(settings: &Settings, bench: &Bench, tables: &mut Tables) -> Verdict {
    let Runner::HostCriterion {
        package,
        bench: target,
        table,
    } = bench.runner
    else {
        return Verdict::Failed("not a host benchmark".to_string());
    };
    let metadata = Cmd::new(host_cargo())
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--manifest-path",
        ])
        .arg(workspace_root().join("Cargo.toml"))
        .read_quietly()
        .and_then(|json| has_target(&json, package, "bench", target));
    match metadata {
        Ok(true) => {}
        Ok(false) => {
            println!("{HOST}: {NO_HOST_BENCH}");
            return Verdict::Skipped(format!(
                "{NO_HOST_BENCH} (no bench target `{target}` in {package})"
            ));
        }
        Err(error) => return Verdict::Failed(format!("{error:#}")),
    }
    let log = log_path(&settings.out_dir, HOST, bench.name);
    let cmd = Cmd::new(host_cargo())
        .args(["bench", "-p", package, "--bench", target, "--", "--noplot"])
        .current_dir(workspace_root());
    let timeout = settings.timeout.unwrap_or(bench.timeout);
    let output = match stream_to_log(&cmd, &log, timeout) {
        Ok((output, Some(status))) if status.success() => output,
        Ok((output, Some(status))) => {
            print_tail(&output, &log);
            return Verdict::Failed(format!("`{}` exited with {status}", cmd.display()));
        }
        Ok((_, None)) => {
            return Verdict::Failed(format!("timed out after {} s", timeout.as_secs()));
        }
        Err(error) => return Verdict::Failed(format!("{error:#}")),
    };
    let results = parse_criterion(&output);
    if results.is_empty() {
        return Verdict::Failed("no criterion `time:` line in the output".to_string());
    }
    let lines = criterion_lines(&results, table);
    for line in &lines {
        for warning in tables.add(HOST, line, bench.suffix) {
            println!("warning: {warning}");
        }
    }
    Verdict::Ok(lines.len())
}

/// Runs `cmd` in a process group of its own with a time limit, echoing its stdout (criterion's
/// summaries) and copying it to `log`; stderr (cargo's and criterion's progress) stays on the
/// terminal. Returns the output and the exit status, `None` if the time limit ended it (then the
/// whole group, benchmark binary included, is killed).
fn stream_to_log(
    cmd: &Cmd,
    log: &Path,
    timeout: Duration,
) -> Result<(String, Option<std::process::ExitStatus>)> {
    use std::os::unix::process::CommandExt;
    use wait_timeout::ChildExt;
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut file =
        std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    cmd.echo();
    let mut child = cmd
        .to_command()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .process_group(0)
        .spawn()
        .with_context(|| format!("could not start `{}`", cmd.display()))?;
    let reader = child.stdout.take().map(|stdout| {
        std::thread::spawn(move || {
            let mut output = String::new();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                println!("{line}");
                // Losing a log line must not stop the run; the returned text still has it.
                let _ = writeln!(file, "{line}");
                output.push_str(&line);
                output.push('\n');
            }
            output
        })
    });
    let status = match child
        .wait_timeout(timeout)
        .context("waiting for cargo bench")?
    {
        Some(status) => Some(status),
        None => {
            // The group's id is the child's pid (process_group(0)); `kill -KILL -<pgid>` ends
            // cargo and the benchmark binary it started.
            let group = format!("-{}", child.id());
            let _ = Cmd::new("kill")
                .args(["-KILL", "--", &group])
                .read_quietly();
            let _ = child.kill();
            let _ = child.wait();
            None
        }
    };
    let output = reader
        .map(|r| r.join().unwrap_or_default())
        .unwrap_or_default();
    Ok((output, status))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::catalog::BENCHES;
    use crate::bench::criterion::parse_criterion;

    #[test]
    fn host_runs_are_logged_and_time_limited() {
        let dir = std::env::temp_dir().join(format!("xtask-bench-test-{}", std::process::id()));
        let log = dir.join("logs").join("host-host.log");
        let cmd = Cmd::new("sh").args(["-c", "echo 'a/b  time:   [1 ns 2 ns 3 ns]'; echo err >&2"]);
        let (output, status) = stream_to_log(&cmd, &log, Duration::from_secs(30)).unwrap();
        assert!(status.is_some_and(|s| s.success()));
        assert_eq!(parse_criterion(&output)[0].mid_ns, 2.0);
        assert_eq!(std::fs::read_to_string(&log).unwrap(), output);
        // The limit ends the whole group: the backgrounded sleep holds stdout open otherwise.
        let cmd = Cmd::new("sh").args(["-c", "echo started; sleep 30 & wait"]);
        let started = std::time::Instant::now();
        let (output, status) = stream_to_log(&cmd, &log, Duration::from_millis(300)).unwrap();
        assert!(status.is_none());
        assert_eq!(output, "started\n");
        assert!(started.elapsed() < Duration::from_secs(10));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn finds_programs_and_missing_ones() {
        assert_eq!(programs_of("quiet cpus=1 run=tlbbench"), ["tlbbench"]);
        assert_eq!(programs_of("run=a+b,c"), ["a", "b", "c"]);
        assert_eq!(programs_of("quiet"), ["init"]);
        let log = "Tsumugi booting\ncannot run fpbench: not in the boot archive\r\n";
        assert_eq!(missing_program(log, &["fpbench"]), Some("fpbench"));
        assert_eq!(missing_program(log, &["tlbbench"]), None);
    }

    #[test]
    fn judges_boots() {
        let bench = &BENCHES[2];
        assert_eq!(bench.suffix, "_tagoff");
        let mut tables = Tables::default();
        let ok = "BENCH table=cubix row=2nd dtlb=0\ndomain 1 tlbbench: exited with status 0\n";
        let judge = |outcome: Outcome, log: &str, tables: &mut Tables| {
            judge_boot(Arch::X86_64, bench, &["tlbbench"], &outcome, log, tables)
        };
        assert_eq!(judge(Outcome::Guest(0), ok, &mut tables), Verdict::Ok(1));
        assert_eq!(tables.tables[0].columns, ["dtlb_tagoff"]);
        let missing = "cannot run tlbbench: not in the boot archive\n";
        assert!(matches!(
            judge(Outcome::Guest(3), missing, &mut tables),
            Verdict::Skipped(_)
        ));
        assert!(
            matches!(judge(Outcome::Guest(0), "hello\n", &mut tables), Verdict::Failed(w) if w.contains("no BENCH"))
        );
        assert!(matches!(
            judge(Outcome::Guest(1), ok, &mut tables),
            Verdict::Failed(_)
        ));
        assert!(matches!(
            judge(Outcome::TimedOut(Duration::from_secs(3)), ok, &mut tables),
            Verdict::Failed(w) if w.contains("timed out")
        ));
        let bad = "BENCH table=cubix row=2nd dtlb=0\nBENCH table=cubix row=2nd cycles=12ns\n";
        assert!(
            matches!(judge(Outcome::Guest(0), bad, &mut tables), Verdict::Failed(w) if w.contains("malformed"))
        );
    }
}
