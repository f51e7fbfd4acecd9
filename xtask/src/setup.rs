//! `cargo xtask setup`: find (or install) what building and booting the kernel needs.
//!
//! A kernel toolchain is looked for in the order of DESIGN §2:
//! 1. the current rustup toolchain with the target's prebuilt `core` installed;
//! 2. the current toolchain with `rust-src`, to build `core`/`alloc` with `-Zbuild-std`;
//! 3. Debian's `rustc-web` + `cargo-web` + `rust-web-src` in `/usr/bin`, also with `-Zbuild-std`.
//!
//! It also needs a linker (`ld.lld`, else the toolchain's `rust-lld`) and the QEMU of every
//! architecture asked for. When something is missing and we are root on Debian/Ubuntu, the Debian
//! packages are installed (saying so); otherwise the exact commands are printed. When everything
//! is present the probes run no package manager and touch no network.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use clap::Args;

use crate::arch::Arch;
use crate::cmd::{find_in_path, is_executable, Cmd};

/// Debian's compiler, whose sysroot is `/usr`.
const DEBIAN_RUSTC: &str = "/usr/bin/rustc";
/// Debian's cargo.
const DEBIAN_CARGO: &str = "/usr/bin/cargo";
/// Debian packages that provide toolchain (3).
const DEBIAN_TOOLCHAIN_PACKAGES: [&str; 3] = ["rustc-web", "cargo-web", "rust-web-src"];
/// Debian package that provides `ld.lld`.
const DEBIAN_LINKER_PACKAGE: &str = "lld";
/// Debian package that provides the debugger `cargo xtask gdb` starts.
const DEBIAN_DEBUGGER_PACKAGE: &str = "gdb-multiarch";
/// File whose presence says the system is Debian or derived from it.
const DEBIAN_MARKER: &str = "/etc/debian_version";
/// The LLVM linker as Debian and most distributions install it.
const LLD: &str = "ld.lld";
/// The LLVM linker as rustup toolchains ship it.
const RUST_LLD: &str = "rust-lld";
/// Where the standard library sources live inside a sysroot.
const LIBRARY_SOURCES: &str = "lib/rustlib/src/rust/library";
/// Where per-target libraries and tools live inside a sysroot.
const RUSTLIB: &str = "lib/rustlib";
/// The user id of root.
const ROOT_UID: u32 = 0;

/// Arguments of `cargo xtask setup`.
#[derive(Args, Debug)]
pub struct SetupArgs {
    /// Only set up this architecture (default: every supported one).
    #[arg(long, value_enum)]
    pub arch: Option<Arch>,
}

/// Where a kernel toolchain comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolchainKind {
    /// A rustup toolchain with the target's `core` prebuilt.
    RustupTarget,
    /// A toolchain with `rust-src`, building `core`/`alloc` itself.
    RustSrc,
    /// Debian's `rustc-web`/`cargo-web`/`rust-web-src`, building `core`/`alloc` itself.
    Debian,
}

/// The compiler and cargo that build target crates.
#[derive(Clone, Debug)]
pub struct Toolchain {
    /// Where it comes from.
    pub kind: ToolchainKind,
    /// `rustc` binary (passed as `RUSTC`).
    pub rustc: PathBuf,
    /// `cargo` binary.
    pub cargo: PathBuf,
    /// The toolchain's sysroot.
    pub sysroot: PathBuf,
    /// `rustc --version`.
    pub version: String,
}

impl Toolchain {
    /// Whether `core`/`alloc` must be built from source (`-Zbuild-std`, `RUSTC_BOOTSTRAP=1`).
    pub fn build_std(&self) -> bool {
        self.kind != ToolchainKind::RustupTarget
    }

    /// A one-line description.
    pub fn describe(&self) -> String {
        let how = match self.kind {
            ToolchainKind::RustupTarget => "rustup toolchain with the target installed",
            ToolchainKind::RustSrc => "toolchain with rust-src, -Zbuild-std",
            ToolchainKind::Debian => "Debian rustc-web with rust-web-src, -Zbuild-std",
        };
        format!("{} ({how}; {})", self.version, self.rustc.display())
    }
}

/// Everything the kernel build and boot need, found.
#[derive(Clone, Debug)]
pub struct Tools {
    /// Kernel toolchain.
    pub toolchain: Toolchain,
    /// `ld.lld` or `rust-lld`.
    pub linker: PathBuf,
    /// QEMU per architecture set up.
    pub qemu: Vec<(Arch, PathBuf)>,
}

/// What the probes found; `None` means missing.
#[derive(Debug)]
struct Found {
    toolchain: Option<Toolchain>,
    linker: Option<PathBuf>,
    qemu: Vec<(Arch, Option<PathBuf>)>,
}

impl Found {
    /// Everything, if nothing is missing.
    fn complete(&self) -> Option<Tools> {
        let qemu = self
            .qemu
            .iter()
            .map(|(arch, path)| path.clone().map(|p| (*arch, p)))
            .collect::<Option<Vec<_>>>()?;
        Some(Tools {
            toolchain: self.toolchain.clone()?,
            linker: self.linker.clone()?,
            qemu,
        })
    }

    /// Human descriptions of what is missing.
    fn missing(&self, arches: &[Arch]) -> Vec<String> {
        let mut missing = Vec::new();
        if self.toolchain.is_none() {
            let triples: Vec<_> = arches.iter().flat_map(|a| a.triples()).collect();
            missing.push(format!(
                "a Rust toolchain that can build for {} (target installed, rust-src, or Debian rustc-web + rust-web-src)",
                triples.join(", ")
            ));
        }
        if self.linker.is_none() {
            missing.push(format!("a linker ({LLD} or {RUST_LLD})"));
        }
        for (arch, path) in &self.qemu {
            if path.is_none() {
                missing.push(format!("{} (for {arch})", arch.qemu_binary()));
            }
        }
        missing
    }
}

/// `cargo xtask setup`.
pub fn run(args: &SetupArgs) -> Result<u8> {
    let arches = match args.arch {
        Some(arch) => {
            arch.require_supported()?;
            vec![arch]
        }
        None => Arch::supported(),
    };
    ensure(&arches)?;
    ensure_debugger()?;
    Ok(0)
}

/// Makes sure `cargo xtask gdb`'s debugger is there (installed like the rest when allowed; not
/// needed to build or boot, so `setup` and `test` — whose `gdb` suites use it — install it).
pub fn ensure_debugger() -> Result<()> {
    if crate::cmd::find_in_path(crate::gdb::GDB).is_some() {
        return Ok(());
    }
    if is_root() && Path::new(DEBIAN_MARKER).exists() {
        eprintln!("setup: installing Debian packages: {DEBIAN_DEBUGGER_PACKAGE}");
        return install_debian_packages(&[DEBIAN_DEBUGGER_PACKAGE]);
    }
    eprintln!(
        "setup: `{}` (for `cargo xtask gdb`) is missing; on Debian/Ubuntu: sudo apt-get install -y {DEBIAN_DEBUGGER_PACKAGE}",
        crate::gdb::GDB
    );
    Ok(())
}

/// Finds everything building and booting `arches` needs, installing Debian packages if allowed.
pub fn ensure(arches: &[Arch]) -> Result<Tools> {
    let found = probe(arches);
    if let Some(tools) = found.complete() {
        report(&tools);
        return Ok(tools);
    }
    let missing = found.missing(arches);
    let packages = debian_packages();
    if is_root() && Path::new(DEBIAN_MARKER).exists() {
        eprintln!("setup: missing {}", missing.join("; "));
        eprintln!("setup: installing Debian packages: {}", packages.join(" "));
        install_debian_packages(&packages)?;
        let found = probe(arches);
        if let Some(tools) = found.complete() {
            report(&tools);
            return Ok(tools);
        }
        bail!(
            "still missing after installing packages: {}",
            found.missing(arches).join("; ")
        );
    }
    bail!("{}", manual_instructions(&missing, &packages, arches));
}

/// Prints the one-line choice.
fn report(tools: &Tools) {
    let qemu: Vec<_> = tools
        .qemu
        .iter()
        .map(|(_, path)| path.display().to_string())
        .collect();
    eprintln!(
        "setup: kernel toolchain {}; linker {}; qemu {}",
        tools.toolchain.describe(),
        tools.linker.display(),
        qemu.join(", ")
    );
}

/// Every Debian package setup installs: toolchain, linker, and QEMU for every architecture
/// (supported or not, so a later port finds its emulator already there).
fn debian_packages() -> Vec<&'static str> {
    let mut packages = DEBIAN_TOOLCHAIN_PACKAGES.to_vec();
    packages.push(DEBIAN_LINKER_PACKAGE);
    packages.push(DEBIAN_DEBUGGER_PACKAGE);
    for arch in Arch::ALL {
        if !packages.contains(&arch.debian_qemu_package()) {
            packages.push(arch.debian_qemu_package());
        }
    }
    packages
}

/// `apt-get update` then a non-interactive `apt-get install`.
fn install_debian_packages(packages: &[&str]) -> Result<()> {
    Cmd::new("apt-get").arg("update").run()?;
    Cmd::new("apt-get")
        .env("DEBIAN_FRONTEND", "noninteractive")
        .args(["install", "-y"])
        .args(packages)
        .run()
}

/// The message for a user who must install things themselves.
fn manual_instructions(missing: &[String], packages: &[&str], arches: &[Arch]) -> String {
    let mut text = format!(
        "cannot build and boot Tsumugi yet; missing:\n  - {}\n",
        missing.join("\n  - ")
    );
    let sudo = if is_root() { "" } else { "sudo " };
    text.push_str(&format!(
        "On Debian/Ubuntu install them with:\n  {sudo}apt-get update\n  {sudo}DEBIAN_FRONTEND=noninteractive apt-get install -y {}\n",
        packages.join(" ")
    ));
    let targets: Vec<_> = arches.iter().flat_map(|a| a.triples()).collect();
    text.push_str(&format!(
        "Elsewhere, with rustup and network: `rustup target add {}` (or `rustup component add rust-src`), \
         and install LLVM's {LLD} and {} with your package manager.",
        targets.join(" "),
        arches.iter().map(|a| a.qemu_binary()).collect::<Vec<_>>().join(", ")
    ));
    text
}

/// Runs every probe.
fn probe(arches: &[Arch]) -> Found {
    let toolchain = find_toolchain(arches);
    let linker =
        find_in_path(LLD).or_else(|| toolchain.as_ref().and_then(|t| find_rust_lld(&t.sysroot)));
    let qemu = arches
        .iter()
        .map(|arch| (*arch, find_in_path(arch.qemu_binary())))
        .collect();
    Found {
        toolchain,
        linker,
        qemu,
    }
}

/// The first usable toolchain in DESIGN §2 order.
fn find_toolchain(arches: &[Arch]) -> Option<Toolchain> {
    let current = current_toolchain();
    if let Some((rustc, cargo, sysroot)) = &current {
        if arches
            .iter()
            .all(|arch| arch.triples().into_iter().all(|triple| has_prebuilt_core(rustc, triple)))
        {
            return toolchain(ToolchainKind::RustupTarget, rustc, cargo, sysroot);
        }
        if has_library_sources(sysroot) {
            let kind = if sysroot == Path::new("/usr") {
                ToolchainKind::Debian
            } else {
                ToolchainKind::RustSrc
            };
            return toolchain(kind, rustc, cargo, sysroot);
        }
    }
    let (rustc, cargo) = (Path::new(DEBIAN_RUSTC), Path::new(DEBIAN_CARGO));
    if is_executable(rustc) && is_executable(cargo) {
        let sysroot = sysroot_of(rustc)?;
        if has_library_sources(&sysroot) {
            return toolchain(ToolchainKind::Debian, rustc, cargo, &sysroot);
        }
    }
    None
}

/// Completes a toolchain with its version.
fn toolchain(kind: ToolchainKind, rustc: &Path, cargo: &Path, sysroot: &Path) -> Option<Toolchain> {
    let version = Cmd::new(rustc)
        .arg("--version")
        .read_quietly()
        .ok()?
        .trim()
        .to_string();
    Some(Toolchain {
        kind,
        rustc: rustc.to_path_buf(),
        cargo: cargo.to_path_buf(),
        sysroot: sysroot.to_path_buf(),
        version,
    })
}

/// The current toolchain (`$RUSTC` or `rustc` on `PATH`, as cargo would pick): its real `rustc`,
/// the `cargo` beside it and its sysroot. Absolute paths, so the inner cargo does not depend on
/// rustup's proxies or `RUSTUP_TOOLCHAIN`.
fn current_toolchain() -> Option<(PathBuf, PathBuf, PathBuf)> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let sysroot = sysroot_of(Path::new(&rustc))?;
    let bin = sysroot.join("bin");
    let (real_rustc, cargo) = (bin.join("rustc"), bin.join("cargo"));
    (is_executable(&real_rustc) && is_executable(&cargo)).then_some((real_rustc, cargo, sysroot))
}

/// `rustc --print sysroot`.
fn sysroot_of(rustc: &Path) -> Option<PathBuf> {
    let out = Cmd::new(rustc)
        .args(["--print", "sysroot"])
        .read_quietly()
        .ok()?;
    Some(PathBuf::from(out.trim()))
}

/// Whether `rustc` has a prebuilt `core` for `triple`.
fn has_prebuilt_core(rustc: &Path, triple: &str) -> bool {
    let Ok(out) = Cmd::new(rustc)
        .args(["--print", "target-libdir", "--target", triple])
        .read_quietly()
    else {
        return false;
    };
    let Ok(entries) = std::fs::read_dir(out.trim()) else {
        return false;
    };
    entries.flatten().any(|entry| {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        name.starts_with("libcore-") && name.ends_with(".rlib")
    })
}

/// Whether the sysroot has the standard library sources `-Zbuild-std` needs.
fn has_library_sources(sysroot: &Path) -> bool {
    sysroot.join(LIBRARY_SOURCES).join("core").is_dir()
}

/// `rust-lld` inside a rustup sysroot (`lib/rustlib/<host>/bin/rust-lld`).
fn find_rust_lld(sysroot: &Path) -> Option<PathBuf> {
    let entries = std::fs::read_dir(sysroot.join(RUSTLIB)).ok()?;
    entries
        .flatten()
        .map(|entry| entry.path().join("bin").join(RUST_LLD))
        .find(|path| is_executable(path))
}

/// Whether this process runs as root (effective uid 0), read from `/proc/self/status`.
fn is_root() -> bool {
    effective_uid().is_some_and(|uid| uid == ROOT_UID)
}

/// The effective user id (second field of the `Uid:` line of `/proc/self/status`).
fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installs_the_documented_package_list() {
        assert_eq!(
            debian_packages().join(" "),
            "rustc-web cargo-web rust-web-src lld gdb-multiarch qemu-system-x86 qemu-system-misc qemu-system-arm"
        );
    }

    #[test]
    fn reads_the_effective_uid() {
        assert!(effective_uid().is_some());
    }

    #[test]
    fn manual_instructions_name_every_command() {
        let text = manual_instructions(&["ld.lld".into()], &debian_packages(), &[Arch::X86_64]);
        assert!(text.contains("apt-get update"));
        assert!(text.contains("apt-get install -y rustc-web"));
        assert!(text.contains("rustup target add x86_64-unknown-none"));
    }

    #[test]
    fn missing_lists_each_part() {
        let found = Found {
            toolchain: None,
            linker: None,
            qemu: vec![(Arch::X86_64, None)],
        };
        assert!(found.complete().is_none());
        let missing = found.missing(&[Arch::X86_64]);
        assert_eq!(missing.len(), 3);
        assert!(missing[2].starts_with("qemu-system-x86_64"));
    }
}
