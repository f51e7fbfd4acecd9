//! Starting QEMU: the command line, and a child that always ends (time limit, kill on drop).
//!
//! A run either hands the console to the user ([`Console::Inherit`], for `run` and `gdb`) or captures
//! the serial output into a log file and memory ([`Console::Capture`], for `test`), with reader
//! threads so a chatty guest can never block on a full pipe.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::ValueEnum;
use tsumugi_tests::Outcome;
use wait_timeout::ChildExt;

use crate::arch::Arch;
use crate::cmd::Cmd;
use crate::hang::Probe;

/// Guest memory size.
pub const MEMORY: &str = "256M";
/// TCP port QEMU's `-s` opens for gdb.
pub const GDB_PORT: u16 = 1234;
/// `-icount` shift that makes the cycle counter advance once per guest instruction (DESIGN §2).
pub const ICOUNT_SHIFT: u8 = 0;

/// QEMU accelerator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Accel {
    /// Software emulation: slow but exact, what tests and benchmarks use.
    Tcg,
    /// Hardware virtualisation through `/dev/kvm`.
    Kvm,
}

impl Accel {
    /// The `-accel` spelling.
    pub fn name(self) -> &'static str {
        match self {
            Accel::Tcg => "tcg",
            Accel::Kvm => "kvm",
        }
    }
}

/// Everything that decides one QEMU command line.
#[derive(Clone, Debug)]
pub struct Machine<'a> {
    /// Guest architecture.
    pub arch: Arch,
    /// Accelerator.
    pub accel: Accel,
    /// Number of CPUs.
    pub smp: u8,
    /// Deterministic instruction counting (`-icount shift=0`).
    pub icount: bool,
    /// Wait for gdb on [`GDB_PORT`] before the first instruction (`-s -S`).
    pub gdb: bool,
    /// Kernel ELF.
    pub kernel: &'a Path,
    /// Boot archive.
    pub initrd: &'a Path,
    /// Kernel command line (may be empty: the kernel's defaults).
    pub cmdline: &'a str,
}

impl<'a> Machine<'a> {
    /// The machine `cargo xtask run`/`gdb`/`trace` boot: the flags' architecture, accelerator,
    /// CPUs and `--icount`, the built kernel and archive, without waiting for a debugger.
    pub fn from_boot(args: &crate::run::BootArgs, artifacts: &'a crate::build::Artifacts, cmdline: &'a str) -> Self {
        Machine { arch: args.arch, accel: args.accel, smp: args.smp, icount: args.icount, gdb: false, kernel: &artifacts.kernel, initrd: &artifacts.initrd, cmdline }
    }
}

/// The QEMU command for `machine`.
pub fn command(machine: &Machine<'_>) -> Cmd {
    let arch = machine.arch;
    let mut cmd = Cmd::new(arch.qemu_binary())
        .args(arch.machine_args(machine.accel))
        .args(["-m", MEMORY, "-smp", &machine.smp.to_string()])
        .args([
            "-display",
            "none",
            "-serial",
            "stdio",
            "-monitor",
            "none",
            "-no-reboot",
        ])
        .args(arch.exit_device_args());
    if machine.icount {
        // sleep=off: while every CPU waits for an interrupt, virtual time jumps to the next
        // timer deadline instead of running at host speed, so how long a guest idles does not
        // depend on the host's load (QEMU's default, sleep=on, made multi-CPU runs vary).
        cmd = cmd.args(["-icount".to_string(), format!("shift={ICOUNT_SHIFT},sleep=off")]);
    }
    if machine.gdb {
        cmd = cmd.args(["-s", "-S"]);
    }
    let kernel = arch
        .flat_kernel_image(machine.kernel)
        .unwrap_or_else(|| machine.kernel.to_path_buf());
    cmd.arg("-kernel")
        .arg(kernel)
        .arg("-initrd")
        .arg(machine.initrd)
        .arg("-append")
        .arg(machine.cmdline)
}

/// Where the guest's console goes.
#[derive(Clone, Debug)]
pub enum Console {
    /// The user's terminal (stdin, stdout and stderr inherited).
    Inherit,
    /// A log file, also kept in memory for checking; stdin is closed.
    Capture {
        /// Log file, created or truncated.
        log: PathBuf,
    },
}

/// How a QEMU run ended and what it printed.
#[derive(Clone, Debug)]
pub struct Finished {
    /// How it ended.
    pub outcome: Outcome,
    /// Serial output and QEMU's own messages (empty with [`Console::Inherit`]).
    pub log: String,
}

/// A child process that is killed and reaped when dropped, so no QEMU outlives `xtask`
/// (an error, a panic or a timeout all end it).
struct ChildGuard {
    child: Child,
    reaped: bool,
}

impl ChildGuard {
    /// Waits up to `timeout`; `None` if the child is still running.
    fn wait_timeout(&mut self, timeout: Duration) -> Result<Option<ExitStatus>> {
        let status = self
            .child
            .wait_timeout(timeout)
            .context("waiting for QEMU")?;
        self.reaped = status.is_some();
        Ok(status)
    }

    /// Kills the child and waits for it.
    fn kill(&mut self) {
        if !self.reaped {
            // Either may fail only if the child already ended, which is what we want anyway.
            let _ = self.child.kill();
            let _ = self.child.wait();
            self.reaped = true;
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The log being written by the reader threads.
struct Capture {
    file: File,
    text: String,
    /// When the last progress line (see [`Progress`]) arrived.
    last_progress: Instant,
}

/// Progress lines a long run prints: each is echoed to the terminal as it arrives, and a run
/// whose last one (or whose start) is more than `stall` old is killed as stalled, so a hang
/// shows within `stall` and a slow run may take its whole time limit.
#[derive(Clone, Debug)]
pub struct Progress {
    /// What a progress line starts with.
    pub prefix: String,
    /// The longest wait for the next progress line.
    pub stall: Duration,
}

/// Copies `source` line by line into `capture` until it closes.
fn spawn_reader(
    source: impl Read + Send + 'static,
    capture: Arc<Mutex<Capture>>,
    progress: Option<String>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(source);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    // A poisoned lock only means another reader panicked; keep logging.
                    let mut capture = capture
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner());
                    // Losing a log line must not stop the run; the text copy still gets it.
                    let _ = capture
                        .file
                        .write_all(&line)
                        .and_then(|()| capture.file.flush());
                    let text = String::from_utf8_lossy(&line);
                    if progress.as_deref().is_some_and(|p| text.starts_with(p)) {
                        capture.last_progress = Instant::now();
                        print!("  {text}");
                        let _ = std::io::stdout().flush();
                    }
                    capture.text.push_str(&text);
                }
            }
        }
    })
}

/// With a probe, asks the still-running QEMU what its vCPUs are doing, prints the answer and
/// appends it to the captured log (the guest is stopped by then, so nothing interleaves).
fn report_hang(probe: Option<&Probe>, arch: Arch, capture: Option<&Arc<Mutex<Capture>>>) {
    let Some(probe) = probe else { return };
    let log = capture.map(|c| c.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).text.clone()).unwrap_or_default();
    let report = probe.report(arch, &log);
    print!("{report}");
    let _ = std::io::stdout().flush();
    if let Some(capture) = capture {
        let mut capture = capture.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if !capture.text.is_empty() && !capture.text.ends_with('\n') {
            capture.text.push('\n');
        }
        capture.text.push_str(&report);
        let _ = capture.file.write_all(report.as_bytes()).and_then(|()| capture.file.flush());
    }
}

/// Runs QEMU with a time limit and decodes how it ended.
pub fn run(cmd: &Cmd, arch: Arch, timeout: Duration, console: &Console) -> Result<Finished> {
    run_watched(cmd, arch, timeout, console, None, None)
}

/// [`run`], also killing the run when its progress lines stop (with a [`Console::Capture`]),
/// and, with a `probe`, first reporting what every vCPU was doing when it ran out of time or
/// stalled (printed, and appended to the log after the guest's output; see [`crate::hang`]).
pub fn run_watched(
    cmd: &Cmd,
    arch: Arch,
    timeout: Duration,
    console: &Console,
    progress: Option<&Progress>,
    probe: Option<&Probe>,
) -> Result<Finished> {
    let probed;
    let cmd = match probe {
        Some(probe) => {
            probed = cmd.clone().args(probe.qemu_args());
            &probed
        }
        None => cmd,
    };
    cmd.echo();
    let mut command = cmd.to_command();
    let capture = match console {
        Console::Inherit => None,
        Console::Capture { log } => {
            if let Some(dir) = log.parent() {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
            let file = File::create(log).with_context(|| format!("creating {}", log.display()))?;
            command
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            Some(Arc::new(Mutex::new(Capture {
                file,
                text: String::new(),
                last_progress: Instant::now(),
            })))
        }
    };
    let child = command
        .spawn()
        .with_context(|| format!("could not start {}", cmd.program().to_string_lossy()))?;
    let mut guard = ChildGuard {
        child,
        reaped: false,
    };
    let mut readers = Vec::new();
    if let Some(capture) = &capture {
        if let Some(stdout) = guard.child.stdout.take() {
            readers.push(spawn_reader(stdout, Arc::clone(capture), progress.map(|p| p.prefix.clone())));
        }
        if let Some(stderr) = guard.child.stderr.take() {
            readers.push(spawn_reader(stderr, Arc::clone(capture), None));
        }
    }
    let outcome = match (progress, &capture) {
        (Some(progress), Some(capture)) => {
            let started = Instant::now();
            // Look every few seconds whether the run ended, stalled or ran out of time.
            let slice = Duration::from_secs(5).min(progress.stall);
            loop {
                if let Some(status) = guard.wait_timeout(slice)? {
                    break arch.decode_exit(status);
                }
                let last = capture.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).last_progress;
                let elapsed = started.elapsed();
                if last.elapsed() > progress.stall || elapsed >= timeout {
                    report_hang(probe, arch, Some(capture));
                    guard.kill();
                    if elapsed < timeout {
                        println!(
                            "stalled: no line starting {:?} for {} s; killed after {} s",
                            progress.prefix,
                            last.elapsed().as_secs(),
                            elapsed.as_secs()
                        );
                    }
                    break Outcome::TimedOut(elapsed);
                }
            }
        }
        _ => match guard.wait_timeout(timeout)? {
            Some(status) => arch.decode_exit(status),
            None => {
                report_hang(probe, arch, capture.as_ref());
                guard.kill();
                Outcome::TimedOut(timeout)
            }
        },
    };
    for reader in readers {
        // A reader only ends by itself once QEMU is gone and its pipes are closed.
        let _ = reader.join();
    }
    let log = capture
        .map(|capture| {
            let capture = capture
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            capture.text.clone()
        })
        .unwrap_or_default();
    Ok(Finished { outcome, log })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x86_64_command_matches_the_documented_one() {
        let machine = Machine {
            arch: Arch::X86_64,
            accel: Accel::Tcg,
            smp: 2,
            icount: true,
            gdb: false,
            kernel: Path::new("k"),
            initrd: Path::new("i.tar"),
            cmdline: "selftest quiet",
        };
        assert_eq!(
            command(&machine).display(),
            "qemu-system-x86_64 -machine q35 -accel tcg -cpu max -m 256M -smp 2 -display none \
             -serial stdio -monitor none -no-reboot -device isa-debug-exit,iobase=0xf4,iosize=0x04 \
             -icount shift=0,sleep=off -kernel k -initrd i.tar -append 'selftest quiet'"
        );
        let gdb = Machine {
            gdb: true,
            icount: false,
            cmdline: "",
            ..machine
        };
        assert!(command(&gdb)
            .display()
            .ends_with("-s -S -kernel k -initrd i.tar -append ''"));
    }

    #[test]
    fn captures_output_and_times_out() {
        let log = std::env::temp_dir().join(format!("xtask-qemu-test-{}.log", std::process::id()));
        let console = Console::Capture { log: log.clone() };
        let cmd = Cmd::new("sh").args(["-c", "echo hello; echo oops >&2; exit 3"]);
        let done = run(&cmd, Arch::X86_64, Duration::from_secs(30), &console).unwrap();
        assert_eq!(done.outcome, Outcome::Guest(1));
        assert!(done.log.contains("hello\n") && done.log.contains("oops\n"));
        assert_eq!(std::fs::read_to_string(&log).unwrap().len(), done.log.len());

        let cmd = Cmd::new("sh").args(["-c", "echo started; exec sleep 30"]);
        let done = run(&cmd, Arch::X86_64, Duration::from_millis(300), &console).unwrap();
        assert_eq!(done.outcome, Outcome::TimedOut(Duration::from_millis(300)));
        assert!(done.log.contains("started"));
        let _ = std::fs::remove_file(&log);
    }
}
