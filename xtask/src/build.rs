//! `cargo xtask build`: cross-compile the user programs and the kernel, then pack the boot archive.
//!
//! The user programs are the binaries of the in-tree crate `userland/` plus the crates and ELF
//! files given with `--program` ([`crate::program`]); their names must all differ.
//!
//! Target crates build into `target/cross` with the kernel toolchain chosen by [`crate::setup`], in
//! an environment cleaned of what the outer (host) cargo set, so the two cargos never share a
//! target folder or flags.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::arch::Arch;
use crate::cmd::{workspace_root, Cmd};
use crate::program::{self, Source};
use crate::setup::{self, Tools};

/// Package holding the kernel.
pub const KERNEL_PACKAGE: &str = "tsumugi-kernel";
/// The kernel's bootable binary.
pub const KERNEL_BIN: &str = "tsumugi";
/// Feature that enables the kernel binary.
pub const KERNEL_FEATURE: &str = "image";
/// File name of the boot archive beside the kernel.
pub const INITRD: &str = "initrd.tar";
/// Unix mode of every program in the boot archive.
pub const PROGRAM_MODE: u32 = 0o755;
/// Sysroot crates built from source with `-Zbuild-std`.
const BUILD_STD: &str = "-Zbuild-std=core,alloc,compiler_builtins";
/// `compiler_builtins` provides `memcpy` and friends (there is no libc).
const BUILD_STD_FEATURES: &str = "-Zbuild-std-features=compiler-builtins-mem";
/// Inherited variables that would make the inner cargo use the outer one's flags, wrappers,
/// target folder or toolchain.
const OUTER_CARGO_VARIABLES: [&str; 5] = [
    "CARGO_ENCODED_RUSTFLAGS",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "CARGO_TARGET_DIR",
    "RUSTUP_TOOLCHAIN",
];
/// Prefixes of inherited cargo configuration variables removed for the same reason.
const OUTER_CARGO_PREFIXES: [&str; 2] = ["CARGO_BUILD_", "CARGO_TARGET_"];

/// Arguments of `cargo xtask build`.
#[derive(Args, Debug)]
pub struct BuildArgs {
    /// Target architecture.
    #[arg(long, value_enum, default_value_t = Arch::X86_64)]
    pub arch: Arch,
    /// Build with the release profile.
    #[arg(long)]
    pub release: bool,
    /// Also build this program crate (its folder) or take this ELF file into the boot archive;
    /// repeatable.
    #[arg(long = "program", value_name = "DIR|ELF")]
    pub programs: Vec<PathBuf>,
}

/// What a build produces.
#[derive(Clone, Debug)]
pub struct Artifacts {
    /// Kernel ELF.
    pub kernel: PathBuf,
    /// Boot archive of the user programs.
    pub initrd: PathBuf,
    /// User programs, by name.
    pub programs: Vec<(String, PathBuf)>,
}

/// `cargo xtask build`.
pub fn run(args: &BuildArgs) -> Result<u8> {
    args.arch.require_supported()?;
    let tools = setup::ensure(&[args.arch])?;
    let artifacts = build_with(&tools, args.arch, args.release, &args.programs)?;
    eprintln!("build: kernel {}", artifacts.kernel.display());
    eprintln!(
        "build: boot archive {} ({} programs)",
        artifacts.initrd.display(),
        artifacts.programs.len()
    );
    Ok(0)
}

/// Which build of the target crates: the plain one every command uses, or the one
/// `cargo xtask trace` boots (kernel feature `trace`, libuthread feature `trace`), whose
/// outputs are kept in a folder of their own so the plain build and its benchmarks never boot
/// the feature (see [`Flavor::output_root`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Flavor {
    /// Outputs in `target/cross`, where cargo builds both flavors.
    #[default]
    Plain,
    /// Outputs copied to `target/trace`.
    Trace,
}

impl Flavor {
    /// The folder the flavor's outputs (programs, kernel, boot archive) end up in. Cargo builds
    /// every flavor in `target/cross` ([`cross_target_dir`], the plain flavor's own): a flavor differs only in
    /// features, which cargo keeps apart by itself, so the tracing build shares `core`, `alloc`
    /// and every dependency with the plain one instead of building them all again in a folder
    /// of its own (two sysroot builds and a whole kernel per architecture, about a tenth of a
    /// fresh `cargo xtask test`). Its outputs are copied here after each build (`publish`);
    /// the plain build's files in `target/cross` are the plain flavor's again at its next
    /// build (cargo re-links a fresh unit's outputs where it puts them).
    pub fn output_root(self) -> PathBuf {
        let name = match self {
            Flavor::Plain => "cross",
            Flavor::Trace => "trace",
        };
        workspace_root().join("target").join(name)
    }

    /// Features of the kernel package beyond [`KERNEL_FEATURE`].
    fn kernel_features(self) -> &'static str {
        match self {
            Flavor::Plain => KERNEL_FEATURE,
            Flavor::Trace => "image,trace",
        }
    }

    /// `--features` of a program crate's build, if any.
    pub fn program_features(self) -> Option<&'static str> {
        match self {
            Flavor::Plain => None,
            Flavor::Trace => Some("libuthread/trace"),
        }
    }
}

/// `target/cross` in the workspace.
pub fn cross_target_dir() -> PathBuf {
    Flavor::Plain.output_root()
}

/// Folder of the outputs for `arch`, a profile and a flavor (user programs, boot archive).
pub fn output_dir_for(arch: Arch, release: bool, flavor: Flavor) -> PathBuf {
    let profile = if release { "release" } else { "debug" };
    flavor.output_root().join(arch.triple()).join(profile)
}

/// Folder of the kernel for `arch`, a profile and a flavor (its triple may differ from the
/// programs').
pub fn kernel_output_dir_for(arch: Arch, release: bool, flavor: Flavor) -> PathBuf {
    let profile = if release { "release" } else { "debug" };
    flavor.output_root().join(arch.kernel_triple()).join(profile)
}

/// The sources of the programs of a build: `userland/`, then each `--program` argument;
/// fails (naming what is valid) on an argument that is no program or a name used twice.
pub fn program_sources(extra: &[PathBuf]) -> Result<Vec<Source>> {
    let mut sources = vec![Source::userland()?];
    for path in extra {
        sources.push(Source::from_arg(path)?);
    }
    program::check_unique(&sources)?;
    Ok(sources)
}

/// Builds the in-tree user programs, the programs `extra` names (crate folders or ELF files)
/// and the kernel for `arch`, and packs the boot archive.
pub fn build_with(tools: &Tools, arch: Arch, release: bool, extra: &[PathBuf]) -> Result<Artifacts> {
    build_flavor(tools, arch, release, extra, Flavor::Plain)
}

/// [`build_with`] of a flavor (into its own target folder).
pub fn build_flavor(tools: &Tools, arch: Arch, release: bool, extra: &[PathBuf], flavor: Flavor) -> Result<Artifacts> {
    build_flavor_of(tools, arch, release, extra, flavor, None)
}

/// [`build_flavor`] with only the programs named `only`, if given, built and packed (what a
/// suite that boots one program needs: the tracing flavor's whole second build of every
/// program cost about a minute per architecture in CI).
pub fn build_flavor_of(tools: &Tools, arch: Arch, release: bool, extra: &[PathBuf], flavor: Flavor, only: Option<&[&str]>) -> Result<Artifacts> {
    if tools.linker.to_string_lossy().contains(char::is_whitespace) {
        // RUSTFLAGS is split at whitespace, so such a path cannot be passed as `-C linker=`.
        bail!(
            "the linker path {} contains whitespace; put ld.lld in a folder without spaces",
            tools.linker.display()
        );
    }
    let sources = program_sources(extra)?;
    let mut programs = Vec::new();
    for source in &sources {
        programs.extend(program::build_some(tools, arch, release, source, flavor, only)?);
    }
    kernel_command_for(tools, arch, release, flavor)
        .run()
        .context("building the kernel")?;
    let built = kernel_output_dir_for(arch, release, Flavor::Plain).join(KERNEL_BIN);
    if !built.is_file() {
        bail!(
            "the kernel build succeeded but {} does not exist",
            built.display()
        );
    }
    let kernel = publish(&built, &kernel_output_dir_for(arch, release, flavor))?;
    if let Some(image) = arch.flat_kernel_image(&kernel) {
        crate::image::write_flat(&kernel, &image)?;
    }
    programs.sort();
    let initrd = output_dir_for(arch, release, flavor).join(INITRD);
    pack_initrd(&programs, &initrd)?;
    Ok(Artifacts {
        kernel,
        initrd,
        programs,
    })
}

/// A file cargo built, as a flavor's output in `dir`: the file itself for the plain flavor
/// (`dir` is where cargo put it), else a copy (see [`Flavor::output_root`]).
pub fn publish(built: &Path, dir: &Path) -> Result<PathBuf> {
    let name = built.file_name().with_context(|| format!("{} names no file", built.display()))?;
    let out = dir.join(name);
    if built.parent() == Some(dir) {
        return Ok(out);
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // Written beside and renamed: a boot never sees half a file.
    let partial = out.with_extension("partial");
    std::fs::copy(built, &partial).with_context(|| format!("copying {} to {}", built.display(), partial.display()))?;
    std::fs::rename(&partial, &out).with_context(|| format!("renaming {}", partial.display()))?;
    Ok(out)
}

/// The cargo invocation shared by both builds: toolchain, flags (plus `extra_rustflags`),
/// cleaned environment, `-Z` flags, target `triple` and target folder, after the subcommand.
pub fn cross_cargo(tools: &Tools, triple: &str, subcommand: &str, extra_rustflags: &[&str]) -> Cmd {
    cross_cargo_with(tools, triple, subcommand, extra_rustflags, FramePointers::Forced)
}

/// Whether a target build keeps a frame pointer in every function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FramePointers {
    /// `-C force-frame-pointers=yes`: the kernel (its panic backtraces walk them) and debug
    /// builds of programs.
    Forced,
    /// The compiler's choice (Rust's release default): release builds of programs, whose hot
    /// paths lose a `push`/`mov`/`pop` per call that needs no frame (x86_64 -icount:
    /// mutex_handoff -4, channel_round_trip -14, create_exit -4). Nothing walks a program's
    /// frame pointers (the kernel's backtraces are its own).
    Omitted,
}

/// [`cross_cargo`] with the frame-pointer choice made by the caller.
pub fn cross_cargo_with(
    tools: &Tools,
    triple: &str,
    subcommand: &str,
    extra_rustflags: &[&str],
    frame_pointers: FramePointers,
) -> Cmd {
    let toolchain = &tools.toolchain;
    let forced = if frame_pointers == FramePointers::Forced { "-C force-frame-pointers=yes " } else { "" };
    let mut rustflags = format!("{forced}-C linker={}", tools.linker.display());
    for flag in remap_path_flags().iter().map(String::as_str).chain(extra_rustflags.iter().copied()) {
        rustflags.push(' ');
        rustflags.push_str(flag);
    }
    let mut cmd = Cmd::new(&toolchain.cargo)
        .current_dir(workspace_root())
        .env("RUSTC", &toolchain.rustc);
    if toolchain.build_std() {
        cmd = cmd.env("RUSTC_BOOTSTRAP", "1");
    }
    cmd = cmd.env("RUSTFLAGS", rustflags);
    for key in outer_cargo_variables() {
        cmd = cmd.env_remove(&key);
    }
    cmd = cmd.arg(subcommand);
    if toolchain.build_std() {
        cmd = cmd.args([BUILD_STD, BUILD_STD_FEATURES]);
    }
    cmd.args(["--target", triple])
        .arg("--target-dir")
        .arg(cross_target_dir())
}

/// Where the checkout's sources appear in the built binaries (panic locations, debug info).
pub const REMAPPED_ROOT: &str = "/tsumugi";

/// `--remap-path-prefix` flags that make the target binaries the same whatever folder the
/// checkout (and cargo's registry) lives in. Without them the source paths in panic locations
/// shift every section after `.rodata` by the path's length, and with them the heap's start and
/// the instruction counts of programs whose allocations depend on addresses: CI's clone in
/// another folder measured `stackthreads/cky` 4,880 instructions (4 %) below the blessed figure.
/// A path with whitespace cannot go through `RUSTFLAGS` and is left unmapped (the build still
/// works; only the figures' independence of the folder is lost).
fn remap_path_flags() -> Vec<String> {
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")));
    [(Some(workspace_root()), REMAPPED_ROOT), (cargo_home, "/cargo")]
        .into_iter()
        .filter_map(|(from, to)| {
            let from = from?.display().to_string();
            (!from.is_empty() && !from.contains(char::is_whitespace))
                .then(|| format!("--remap-path-prefix={from}={to}"))
        })
        .collect()
}

/// Names of the inherited variables to remove.
fn outer_cargo_variables() -> Vec<String> {
    let mut keys: Vec<String> = OUTER_CARGO_VARIABLES
        .iter()
        .map(|k| k.to_string())
        .collect();
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if OUTER_CARGO_PREFIXES
            .iter()
            .any(|prefix| key.starts_with(prefix))
            && !keys.iter().any(|k| *k == key)
        {
            keys.push(key.into_owned());
        }
    }
    keys
}

/// `cargo rustc ... -p tsumugi-kernel --bin tsumugi --features image -- <kernel rustc args>`
/// (`--features image,trace` for the trace flavor).
pub fn kernel_command_for(tools: &Tools, arch: Arch, release: bool, flavor: Flavor) -> Cmd {
    let mut cmd = cross_cargo(tools, arch.kernel_triple(), "rustc", &[]).args([
        "-p",
        KERNEL_PACKAGE,
        "--bin",
        KERNEL_BIN,
        "--features",
        flavor.kernel_features(),
    ]);
    if release {
        // The release kernel is one fat-LTO unit with `arch` and the ABI crate (the workspace's
        // release profile stays as it is for the host crates: these variables reach this cargo
        // only). x86_64 -icount: preemption_to_upcall 398 -> 376, blocking_syscall_to_upcall
        // 385 -> 376, a same-view kernel switch 309 -> 306; a kernel rebuild takes about 20 s.
        cmd = cmd
            .arg("--release")
            .env("CARGO_PROFILE_RELEASE_LTO", "fat")
            .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1");
    }
    cmd.arg("--").args(arch.kernel_rustc_args())
}

/// Writes a deterministic ustar archive: one regular file per program, named by the program, no
/// folders, mode 0755, owner 0:0, mtime 0, in the given order. Written beside and renamed so a
/// failed write never leaves a half archive.
pub fn pack_initrd(programs: &[(String, PathBuf)], out: &Path) -> Result<()> {
    let partial = out.with_extension("tar.partial");
    let file = File::create(&partial).with_context(|| format!("creating {}", partial.display()))?;
    let mut builder = tar::Builder::new(BufWriter::new(file));
    for (name, path) in programs {
        let mut program =
            File::open(path).with_context(|| format!("opening program {}", path.display()))?;
        let size = program
            .metadata()
            .with_context(|| format!("reading {}", path.display()))?
            .len();
        let mut header = tar::Header::new_ustar();
        header
            .set_path(name)
            .with_context(|| format!("program name `{name}` does not fit a tar header"))?;
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(size);
        header.set_mode(PROGRAM_MODE);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(0);
        header.set_cksum();
        builder
            .append(&header, &mut program)
            .with_context(|| format!("adding {} to {}", path.display(), partial.display()))?;
    }
    let writer = builder
        .into_inner()
        .with_context(|| format!("finishing {}", partial.display()))?;
    writer
        .into_inner()
        .map_err(|e| e.into_error())
        .and_then(|file| file.sync_all())
        .with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, out)
        .with_context(|| format!("renaming {} to {}", partial.display(), out.display()))
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;
    use crate::setup::{Toolchain, ToolchainKind};

    /// The command that builds the in-tree programs.
    fn userland_command(tools: &Tools, arch: Arch, release: bool) -> Cmd {
        program::build_command_for(tools, arch, release, &workspace_root().join(program::USERLAND_DIR), Flavor::Plain, None)
    }

    fn debian_tools() -> Tools {
        Tools {
            toolchain: Toolchain {
                kind: ToolchainKind::Debian,
                rustc: "/usr/bin/rustc".into(),
                cargo: "/usr/bin/cargo".into(),
                sysroot: "/usr".into(),
                version: "rustc 1.96.0".into(),
            },
            linker: "/usr/bin/ld.lld".into(),
            qemu: Vec::new(),
        }
    }

    #[test]
    fn a_build_of_some_programs_names_each() {
        let only = ["trace_demo".to_string(), "init".to_string()];
        let dir = workspace_root().join(program::USERLAND_DIR);
        let some = program::build_command_for(&debian_tools(), Arch::Riscv64, false, &dir, Flavor::Trace, Some(&only)).display();
        assert!(some.ends_with(" --bin trace_demo --bin init --features libuthread/trace"), "{some}");
        assert!(!some.contains("--bins"), "{some}");
        assert!(userland_command(&debian_tools(), Arch::Riscv64, false).display().ends_with(" --bins"));
    }

    #[test]
    fn debian_commands_match_the_documented_ones() {
        let target_dir = cross_target_dir();
        let target_dir = target_dir.display();
        let remap: String = remap_path_flags().iter().map(|flag| format!(" {flag}")).collect();
        let env = format!(
            "RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 \
             RUSTFLAGS='-C force-frame-pointers=yes -C linker=/usr/bin/ld.lld{remap}' \
             CARGO_PROFILE_RELEASE_LTO=fat CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 /usr/bin/cargo"
        );
        let common = format!(
            "-Zbuild-std=core,alloc,compiler_builtins -Zbuild-std-features=compiler-builtins-mem \
             --target x86_64-unknown-none --target-dir {target_dir}"
        );
        assert_eq!(
            userland_command(&debian_tools(), Arch::X86_64, false).display(),
            format!(
                "RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 RUSTFLAGS='-C force-frame-pointers=yes \
                 -C linker=/usr/bin/ld.lld{remap} -C relocation-model=pie' \
                 /usr/bin/cargo build {common} --manifest-path {}/userland/Cargo.toml --bins",
                workspace_root().display()
            )
        );
        assert_eq!(
            kernel_command_for(&debian_tools(), Arch::X86_64, true, Flavor::Plain).display(),
            format!(
                "{env} rustc {common} -p tsumugi-kernel --bin tsumugi --features image --release \
                 -- -C relocation-model=static -C code-model=kernel"
            )
        );
    }

    #[test]
    fn release_programs_leave_frame_pointers_to_the_compiler() {
        let release = userland_command(&debian_tools(), Arch::X86_64, true).display();
        assert!(!release.contains("force-frame-pointers"), "{release}");
        let debug = userland_command(&debian_tools(), Arch::X86_64, false).display();
        assert!(debug.contains("-C force-frame-pointers=yes"), "{debug}");
        let kernel = kernel_command_for(&debian_tools(), Arch::X86_64, true, Flavor::Plain).display();
        assert!(kernel.contains("-C force-frame-pointers=yes"), "{kernel}");
    }

    #[test]
    fn sources_are_remapped_to_a_fixed_root() {
        let flags = remap_path_flags();
        let root = workspace_root().display().to_string();
        if !root.contains(char::is_whitespace) {
            assert!(flags.contains(&format!("--remap-path-prefix={root}={REMAPPED_ROOT}")));
        }
        assert!(flags.iter().all(|flag| !flag.contains(char::is_whitespace)));
    }

    #[test]
    fn prebuilt_target_needs_no_build_std() {
        let mut tools = debian_tools();
        tools.toolchain.kind = ToolchainKind::RustupTarget;
        let line = userland_command(&tools, Arch::X86_64, true).display();
        assert!(!line.contains("-Zbuild-std") && !line.contains("RUSTC_BOOTSTRAP"));
        assert!(line.ends_with("--bins --release"));
    }

    #[test]
    fn removes_the_outer_cargo_environment() {
        let cmd = userland_command(&debian_tools(), Arch::X86_64, false).to_command();
        let removed: Vec<_> = cmd
            .get_envs()
            .filter(|(_, v)| v.is_none())
            .map(|(k, _)| k.to_owned())
            .collect();
        for key in OUTER_CARGO_VARIABLES {
            assert!(removed.iter().any(|k| k == key), "{key} kept");
        }
    }

    #[test]
    fn output_paths_follow_the_profile() {
        assert!(output_dir_for(Arch::X86_64, false, Flavor::Plain).ends_with("target/cross/x86_64-unknown-none/debug"));
        assert!(
            output_dir_for(Arch::X86_64, true, Flavor::Plain).ends_with("target/cross/x86_64-unknown-none/release")
        );
        assert_eq!(kernel_output_dir_for(Arch::X86_64, true, Flavor::Plain), output_dir_for(Arch::X86_64, true, Flavor::Plain));
        // The aarch64 kernel is built without FP/SIMD, the programs with NEON.
        assert!(kernel_output_dir_for(Arch::Aarch64, false, Flavor::Plain)
            .ends_with("target/cross/aarch64-unknown-none-softfloat/debug"));
        assert!(output_dir_for(Arch::Aarch64, false, Flavor::Plain).ends_with("target/cross/aarch64-unknown-none/debug"));
        assert!(kernel_command_for(&debian_tools(), Arch::Aarch64, false, Flavor::Plain)
            .display()
            .contains("--target aarch64-unknown-none-softfloat "));
        assert!(userland_command(&debian_tools(), Arch::Aarch64, false)
            .display()
            .contains("--target aarch64-unknown-none "));
    }

    #[test]
    fn boot_archive_is_deterministic_ustar() {
        let dir = std::env::temp_dir().join(format!("xtask-initrd-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let init = dir.join("init");
        std::fs::write(&init, b"\x7fELF init").unwrap();
        let other = dir.join("fault");
        std::fs::write(&other, vec![0xAB; 1000]).unwrap();
        let programs = vec![("fault".to_string(), other), ("init".to_string(), init)];
        let first = dir.join("a.tar");
        let second = dir.join("b.tar");
        pack_initrd(&programs, &first).unwrap();
        pack_initrd(&programs, &second).unwrap();
        let bytes = std::fs::read(&first).unwrap();
        assert_eq!(bytes, std::fs::read(&second).unwrap());

        let mut archive = tar::Archive::new(bytes.as_slice());
        let mut seen = Vec::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let header = entry.header();
            assert!(header.as_ustar().is_some());
            assert_eq!(header.mode().unwrap(), PROGRAM_MODE);
            assert_eq!(header.mtime().unwrap(), 0);
            assert_eq!((header.uid().unwrap(), header.gid().unwrap()), (0, 0));
            let name = entry.path().unwrap().to_string_lossy().into_owned();
            let mut content = Vec::new();
            entry.read_to_end(&mut content).unwrap();
            seen.push((name, content.len()));
        }
        assert_eq!(seen, [("fault".to_string(), 1000), ("init".to_string(), 9)]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
