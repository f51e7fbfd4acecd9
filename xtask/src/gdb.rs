//! `cargo xtask gdb`: builds, boots QEMU stopped before the first instruction with its gdb stub
//! on a free local port, and starts `gdb-multiarch` attached to it with the kernel's symbols and
//! Tsumugi's gdb extension (`xtask/gdb/tsumugi.py`: `tsumugi programs|load-symbols|cpus|
//! kthreads|uthreads|ubt`), which also knows every program's ELF so `tsumugi load-symbols` can
//! add its symbols at the address the kernel loaded it. `--batch FILE` runs a gdb command file
//! and exits (how the suite tests it). QEMU's console goes to a log file, not the terminal gdb
//! uses.

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::arch::Arch;
use crate::build::{self, Artifacts};
use crate::cmd::{self, Cmd};
use crate::qemu::{self, Machine};
use crate::run::BootArgs;
use crate::setup;

/// Default time limit of a debugging session, in seconds (longer than `run`'s: a human is stepping).
pub const DEFAULT_TIMEOUT_SECS: u64 = 3600;

/// The debugger: Debian's multi-architecture gdb (`cargo xtask setup` installs it).
pub const GDB: &str = "gdb-multiarch";

/// Arguments of `cargo xtask gdb`.
#[derive(Args, Debug)]
pub struct GdbArgs {
    /// How to build and boot.
    #[command(flatten)]
    pub boot: BootArgs,
    /// End the session (gdb and QEMU) after this many seconds.
    #[arg(long, default_value_t = DEFAULT_TIMEOUT_SECS, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: u64,
    /// Run this gdb command file in batch mode, then end (e.g. `break kernel::domain::Domain::end`,
    /// `continue`, `tsumugi uthreads`).
    #[arg(long, value_name = "FILE")]
    pub batch: Option<PathBuf>,
}

/// gdb's name for `arch` (`set architecture`).
fn gdb_architecture(arch: Arch) -> &'static str {
    match arch {
        Arch::X86_64 => "i386:x86-64",
        Arch::Riscv64 => "riscv:rv64",
        Arch::Aarch64 => "aarch64",
    }
}

/// The extension shipped in the repository.
pub fn extension() -> PathBuf {
    cmd::workspace_root().join("xtask/gdb/tsumugi.py")
}

/// Finds `gdb-multiarch`, or says how to get it.
pub fn find_gdb() -> Result<PathBuf> {
    cmd::find_in_path(GDB).with_context(|| {
        format!(
            "`{GDB}` is not on PATH: `cargo xtask setup` installs it on Debian/Ubuntu when run as root; \
             otherwise run `sudo apt-get install -y gdb-multiarch`"
        )
    })
}

/// A local TCP port nobody listens on right now (for QEMU's gdb stub).
fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("finding a free local port for QEMU's gdb stub")?;
    Ok(listener.local_addr()?.port())
}

/// Kills a child on drop unless it has been reaped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// Waits for `child` until `deadline`; `None` when the time ran out.
fn wait_until(child: &mut Child, deadline: Instant) -> Result<Option<std::process::ExitStatus>> {
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The gdb command line for a session.
pub fn gdb_command(gdb: &Path, arch: Arch, artifacts: &Artifacts, port: u16, batch: Option<&Path>) -> Cmd {
    let programs: Vec<String> = artifacts
        .programs
        .iter()
        .map(|(name, path)| format!("{name:?}: {:?}", path.display().to_string()))
        .collect();
    let mut cmd = Cmd::new(gdb).args(["-q", "-nx"]);
    if batch.is_some() {
        cmd = cmd.arg("--batch");
    }
    cmd = cmd
        .args(["-ex", "set pagination off", "-ex", "set confirm off"])
        .args(["-ex".to_string(), format!("set architecture {}", gdb_architecture(arch))])
        .args(["-ex".to_string(), format!("file {}", artifacts.kernel.display())])
        .args([
            "-ex".to_string(),
            format!(
                "set substitute-path {} {}",
                crate::build::REMAPPED_ROOT,
                crate::cmd::workspace_root().display()
            ),
        ])
        .args(["-ex".to_string(), format!("python tsumugi_programs = {{{}}}", programs.join(", "))])
        .args(["-ex".to_string(), format!("source {}", extension().display())])
        .args(["-ex".to_string(), format!("target remote 127.0.0.1:{port}")]);
    if let Some(file) = batch {
        cmd = cmd.arg("-x").arg(file);
    }
    cmd
}

/// The scripted session the suite runs (`xtask/gdb/selftest.gdb`) and the boot words it needs.
pub const SELFTEST_SCRIPT: &str = "xtask/gdb/selftest.gdb";
/// Boot words of the scripted session: a program whose user threads sleep in the kernel.
pub const SELFTEST_BOOT: &str = "run=uthread_kn";
/// Time limit of the scripted session, in seconds.
pub const SELFTEST_TIMEOUT_SECS: u64 = 300;

/// How a session's gdb gets its terminal.
enum Output {
    /// The user's terminal.
    Inherit,
    /// Captured and returned.
    Capture,
}

/// Boots QEMU stopped with its gdb stub on a free port, runs gdb against it (batch when
/// `batch` is given), ends QEMU; returns gdb's exit status and, with [`Output::Capture`], what it
/// printed.
#[allow(clippy::too_many_arguments)]
fn session(
    gdb: &Path,
    arch: Arch,
    artifacts: &Artifacts,
    boot: &BootArgs,
    cmdline: &str,
    batch: Option<&Path>,
    timeout: Duration,
    output: Output,
) -> Result<(std::process::ExitStatus, String)> {
    let port = free_port()?;
    let machine = Machine { arch, ..Machine::from_boot(boot, artifacts, cmdline) };
    let qemu_cmd = qemu::command(&machine).args(["-gdb".to_string(), format!("tcp:127.0.0.1:{port}"), "-S".to_string()]);
    let log = cmd::workspace_root().join(format!("target/gdb/{}.log", arch.name()));
    std::fs::create_dir_all(log.parent().expect("has a folder"))?;
    let console = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    qemu_cmd.echo();
    let qemu = qemu_cmd
        .to_command()
        .stdin(Stdio::null())
        .stdout(console.try_clone()?)
        .stderr(console)
        .spawn()
        .with_context(|| format!("could not start {}", arch.qemu_binary()))?;
    let mut qemu = Killed(qemu);
    eprintln!("gdb: QEMU waits on 127.0.0.1:{port}; its console goes to {}", log.display());
    let deadline = Instant::now() + timeout;
    let gdb_cmd = gdb_command(gdb, arch, artifacts, port, batch);
    gdb_cmd.echo();
    let mut command = gdb_cmd.to_command();
    let captured = cmd::workspace_root().join(format!("target/gdb/{}-gdb.log", arch.name()));
    if let Output::Capture = output {
        let file = File::create(&captured).with_context(|| format!("creating {}", captured.display()))?;
        command.stdin(Stdio::null()).stdout(file.try_clone()?).stderr(file);
    }
    let mut session = Killed(command.spawn().with_context(|| format!("could not start {}", gdb.display()))?);
    let Some(status) = wait_until(&mut session.0, deadline)? else {
        bail!("gdb: the session passed its time limit of {} s (ended)", timeout.as_secs());
    };
    // gdb kills the inferior when it exits; give QEMU a moment, then end it anyway.
    let _ = wait_until(&mut qemu.0, Instant::now() + Duration::from_secs(5))?;
    drop(qemu);
    let text = match output {
        Output::Capture => std::fs::read_to_string(&captured).unwrap_or_default(),
        Output::Inherit => String::new(),
    };
    Ok((status, text))
}

/// What the scripted session must print on every port: the program at its load base with its
/// symbols added, the CPU running its vCPU, and a backtrace of a stopped user thread through
/// libuthread's thread entry (`libuthread_thread_start`) from its saved frame.
pub fn selftest_expectations() -> [&'static str; 5] {
    [
        "program 1 uthread_kn: base 0x",
        "uthread_kn: symbols of ",
        "cpu 0: kernel thread ",
        "from its full frame save: pc 0x",
        " in libuthread_thread_start",
    ]
}

/// Runs the scripted session on `arch` (its artifacts built) and says which expected lines are
/// missing (empty: passed), with gdb's output.
pub fn selftest(arch: Arch, artifacts: &Artifacts) -> Result<(Vec<&'static str>, String)> {
    let gdb = find_gdb()?;
    let boot = BootArgs {
        arch,
        accel: qemu::Accel::Tcg,
        smp: 1,
        release: false,
        icount: false,
        programs: Vec::new(),
        boot_words: Vec::new(),
    };
    let script = cmd::workspace_root().join(SELFTEST_SCRIPT);
    let (status, text) = session(
        &gdb,
        arch,
        artifacts,
        &boot,
        SELFTEST_BOOT,
        Some(&script),
        Duration::from_secs(SELFTEST_TIMEOUT_SECS),
        Output::Capture,
    )?;
    let mut missing: Vec<&'static str> = selftest_expectations().into_iter().filter(|line| !text.contains(line)).collect();
    if !status.success() {
        missing.push("gdb exit status 0");
    }
    Ok((missing, text))
}

/// `cargo xtask gdb`.
pub fn run(args: &GdbArgs) -> Result<u8> {
    let arch = args.boot.arch;
    arch.require_supported()?;
    let gdb = find_gdb()?;
    let tools = setup::ensure(&[arch])?;
    let artifacts = build::build_with(&tools, arch, args.boot.release, &args.boot.programs)?;
    let cmdline = args.boot.boot_words.join(" ");
    let (status, _) = session(
        &gdb,
        arch,
        &artifacts,
        &args.boot,
        &cmdline,
        args.batch.as_deref(),
        Duration::from_secs(args.timeout),
        Output::Inherit,
    )?;
    if !status.success() {
        bail!("gdb: `{GDB}` ended with {status}");
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_port_has_a_gdb_architecture() {
        for arch in Arch::supported() {
            assert!(!gdb_architecture(arch).is_empty());
        }
    }

    #[test]
    fn the_session_loads_the_kernel_the_extension_and_the_programs() {
        let artifacts = Artifacts {
            kernel: PathBuf::from("/k/tsumugi"),
            initrd: PathBuf::from("/k/initrd.tar"),
            programs: vec![("init".to_string(), PathBuf::from("/k/init"))],
        };
        let text = gdb_command(Path::new("gdb-multiarch"), Arch::Riscv64, &artifacts, 4242, Some(Path::new("s.gdb"))).display();
        assert!(text.contains("--batch"), "{text}");
        assert!(text.contains("set architecture riscv:rv64"), "{text}");
        assert!(text.contains("file /k/tsumugi"), "{text}");
        assert!(text.contains(r#"tsumugi_programs = {"init": "/k/init"}"#), "{text}");
        assert!(text.contains("xtask/gdb/tsumugi.py"), "{text}");
        assert!(text.contains("target remote 127.0.0.1:4242"), "{text}");
        assert!(text.ends_with("-x s.gdb"), "{text}");
    }
}
