//! Programs as crates: the in-tree `userland` crate and the crates and ELF files given with
//! `--program`, found, named, built for a target and checked the same way.
//!
//! A *program crate* is a Cargo package that depends on `libuthread` and has binaries (each
//! binary is one program, named by the binary). It is its own Cargo workspace, built only for
//! the bare-metal target (host `cargo build`/`cargo test` in the tree never see it), with the
//! flags of [`crate::build::user_rustflags`]. `userland/` is one such crate, whose binaries
//! cargo discovers in `src/bin/`; `cargo xtask new` makes others ([`crate::new`]).

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};

use crate::arch::Arch;
use crate::build;
use crate::cmd::{host_cargo, workspace_root, Cmd};
use crate::setup::Tools;

/// Folder of the in-tree program crate, under the workspace root.
pub const USERLAND_DIR: &str = "userland";
/// The library every program links against (what makes a crate a Tsumugi program).
pub const RUNTIME_CRATE: &str = "libuthread";
/// Longest program name (the boot archive's ustar header holds 100 bytes; `run=` lists many).
pub const MAX_NAME_LEN: usize = 64;
/// What `--program` accepts, for error messages.
pub const WHAT_IS_VALID: &str = "--program takes the folder of a program crate (a Cargo.toml whose \
     package depends on libuthread and has a binary, as `cargo xtask new <dir>` makes) or a \
     static-pie ELF built for the target";

/// `e_type` of a position-independent executable (what the kernel's loader takes).
const ET_DYN: u16 = 3;
/// ELF identification bytes.
const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
/// `EI_CLASS` of a 64-bit ELF file.
const ELFCLASS64: u8 = 2;
/// `EI_DATA` of a little-endian ELF file.
const ELFDATA2LSB: u8 = 1;
/// Offset of `e_type` in the ELF header.
const E_TYPE: usize = 0x10;
/// Offset of `e_machine` in the ELF header.
const E_MACHINE: usize = 0x12;

/// Where programs come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A program crate: its folder and the names of its binaries (sorted).
    Crate {
        /// The folder holding `Cargo.toml`.
        dir: PathBuf,
        /// Its binaries, each one program.
        bins: Vec<String>,
    },
    /// An ELF file built elsewhere; the program is named by the file.
    Elf {
        /// The file.
        path: PathBuf,
        /// The file name.
        name: String,
    },
}

impl Source {
    /// The in-tree crate `userland/`.
    pub fn userland() -> Result<Source> {
        crate_source(&workspace_root().join(USERLAND_DIR))
    }

    /// What a `--program` argument names: a crate folder (or its `Cargo.toml`) or an ELF file.
    pub fn from_arg(path: &Path) -> Result<Source> {
        if path.is_dir() {
            return crate_source(path);
        }
        if path.file_name().is_some_and(|n| n == "Cargo.toml") && path.is_file() {
            return crate_source(path.parent().unwrap_or(Path::new(".")));
        }
        if !path.exists() {
            bail!("{} does not exist; {WHAT_IS_VALID}", path.display());
        }
        let bytes =
            std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        ensure!(
            bytes.starts_with(ELF_MAGIC),
            "{} is neither a folder nor an ELF file; {WHAT_IS_VALID}",
            path.display()
        );
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        check_name(&name).with_context(|| format!("the program {}", path.display()))?;
        Ok(Source::Elf { path: path.to_path_buf(), name })
    }

    /// The names of the programs it holds.
    pub fn names(&self) -> Vec<&str> {
        match self {
            Source::Crate { bins, .. } => bins.iter().map(String::as_str).collect(),
            Source::Elf { name, .. } => vec![name.as_str()],
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Crate { dir, .. } => write!(f, "the crate {}", dir.display()),
            Source::Elf { path, .. } => write!(f, "the ELF file {}", path.display()),
        }
    }
}

/// Reads a crate folder's metadata and checks it is a program crate.
fn crate_source(dir: &Path) -> Result<Source> {
    let manifest = dir.join("Cargo.toml");
    ensure!(
        manifest.is_file(),
        "{} has no Cargo.toml; {WHAT_IS_VALID}",
        dir.display()
    );
    let json = Cmd::new(host_cargo())
        .args(["metadata", "--no-deps", "--format-version", "1", "--manifest-path"])
        .arg(&manifest)
        .read()
        .with_context(|| format!("reading the metadata of {}", manifest.display()))?;
    let bins = program_bins(&json, &manifest)
        .with_context(|| format!("{} is not a Tsumugi program", dir.display()))?;
    for bin in &bins {
        check_name(bin).with_context(|| format!("{}", dir.display()))?;
    }
    Ok(Source::Crate { dir: dir.to_path_buf(), bins })
}

/// The binaries of the package whose manifest is `manifest`, in `cargo metadata` output, if it
/// is a program crate (depends on [`RUNTIME_CRATE`], has at least one binary); sorted.
pub fn program_bins(metadata_json: &str, manifest: &Path) -> Result<Vec<String>> {
    let metadata: serde_json::Value =
        serde_json::from_str(metadata_json).context("cargo metadata is not JSON")?;
    let packages = metadata["packages"]
        .as_array()
        .context("cargo metadata has no package list")?;
    let wanted = manifest.canonicalize().unwrap_or_else(|_| manifest.to_path_buf());
    let package = packages
        .iter()
        .find(|p| {
            p["manifest_path"]
                .as_str()
                .is_some_and(|m| Path::new(m).canonicalize().ok().as_deref() == Some(&wanted))
        })
        .or_else(|| (packages.len() == 1).then(|| &packages[0]))
        .with_context(|| {
            format!("{} defines no package (a virtual workspace?); {WHAT_IS_VALID}", manifest.display())
        })?;
    let name = package["name"].as_str().unwrap_or("?");
    let depends = package["dependencies"]
        .as_array()
        .is_some_and(|deps| deps.iter().any(|d| d["name"] == RUNTIME_CRATE));
    ensure!(
        depends || name == RUNTIME_CRATE,
        "its package `{name}` does not depend on {RUNTIME_CRATE}; {WHAT_IS_VALID}"
    );
    let mut bins: Vec<String> = package["targets"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|t| t["kind"].as_array().is_some_and(|k| k.iter().any(|k| k == "bin")))
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect();
    bins.sort();
    ensure!(
        !bins.is_empty(),
        "its package `{name}` has no binary (src/main.rs or src/bin/*.rs); {WHAT_IS_VALID}"
    );
    Ok(bins)
}

/// Checks that `name` can name a program in the boot archive and in `run=` (letters, digits,
/// `_`, `-`; at most [`MAX_NAME_LEN`] bytes).
pub fn check_name(name: &str) -> Result<()> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    ensure!(
        !name.is_empty() && name.len() <= MAX_NAME_LEN && name.chars().all(ok_char),
        "`{name}` cannot name a program: a program name is 1 to {MAX_NAME_LEN} letters, digits, \
         `_` or `-` (it goes into the boot archive and into `run=`)"
    );
    Ok(())
}

/// Checks that no two programs of `sources` share a name; the error names both sources.
pub fn check_unique(sources: &[Source]) -> Result<()> {
    let mut seen: Vec<(&str, &Source)> = Vec::new();
    for source in sources {
        for name in source.names() {
            if let Some((_, first)) = seen.iter().find(|(n, _)| *n == name) {
                bail!(
                    "two programs are named `{name}`: one in {first}, one in {source}; every \
                     program in the boot archive needs a name of its own (rename the package, \
                     the binary, or the file)"
                );
            }
            seen.push((name, source));
        }
    }
    Ok(())
}

/// Checks that `bytes` are a program the kernel can load on `arch`: a 64-bit little-endian
/// position-independent ELF executable for its machine.
pub fn check_elf(bytes: &[u8], arch: Arch) -> Result<()> {
    ensure!(bytes.starts_with(ELF_MAGIC), "not an ELF file");
    ensure!(
        bytes.get(4) == Some(&ELFCLASS64) && bytes.get(5) == Some(&ELFDATA2LSB),
        "not a 64-bit little-endian ELF file"
    );
    let half = |at: usize| {
        bytes
            .get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .context("ELF header cut short")
    };
    let machine = half(E_MACHINE)?;
    ensure!(
        machine == arch.elf_machine(),
        "built for ELF machine {machine}, not {arch} (machine {})",
        arch.elf_machine()
    );
    ensure!(
        half(E_TYPE)? == ET_DYN,
        "not a position-independent executable (the kernel loads static-pie programs anywhere in \
         the single address space; build it with `cargo xtask build --program <crate>`)"
    );
    Ok(())
}

/// `cargo build --manifest-path <dir>/Cargo.toml --bins` for `arch` (`--bin` each of `only`
/// instead, if given), with the user programs' flags (and `--features libuthread/trace` for
/// the trace flavor).
pub fn build_command_for(tools: &Tools, arch: Arch, release: bool, dir: &Path, flavor: build::Flavor, only: Option<&[String]>) -> Cmd {
    let mut rustflags = arch.user_rustflags().to_vec();
    rustflags.extend(arch.user_reserved_register_flags(tools.toolchain.build_std()));
    let frame_pointers = if release { build::FramePointers::Omitted } else { build::FramePointers::Forced };
    let mut cmd = build::cross_cargo_with(tools, arch.triple(), "build", &rustflags, frame_pointers)
        .arg("--manifest-path")
        .arg(dir.join("Cargo.toml"));
    cmd = match only {
        Some(bins) => bins.iter().fold(cmd, |cmd, bin| cmd.args(["--bin", bin.as_str()])),
        None => cmd.arg("--bins"),
    };
    if let Some(features) = flavor.program_features() {
        cmd = cmd.args(["--features", features]);
    }
    if release {
        cmd.arg("--release")
    } else {
        cmd
    }
}

/// Builds `source` for `arch` (an ELF is only checked) and returns its programs with their
/// files, each checked with [`check_elf`].
pub fn build(tools: &Tools, arch: Arch, release: bool, source: &Source) -> Result<Vec<(String, PathBuf)>> {
    build_for(tools, arch, release, source, build::Flavor::Plain)
}

/// [`build`] of a flavor.
pub fn build_for(tools: &Tools, arch: Arch, release: bool, source: &Source, flavor: build::Flavor) -> Result<Vec<(String, PathBuf)>> {
    build_some(tools, arch, release, source, flavor, None)
}

/// [`build_for`] of only the programs named `only` of a crate, if given (an ELF is taken as it
/// is).
pub fn build_some(tools: &Tools, arch: Arch, release: bool, source: &Source, flavor: build::Flavor, only: Option<&[&str]>) -> Result<Vec<(String, PathBuf)>> {
    let programs: Vec<(String, PathBuf)> = match source {
        Source::Crate { dir, bins } => {
            let chosen: Option<Vec<String>> = only.map(|names| bins.iter().filter(|bin| names.contains(&bin.as_str())).cloned().collect());
            let bins = chosen.as_ref().unwrap_or(bins);
            build_command_for(tools, arch, release, dir, flavor, chosen.as_deref()).run().with_context(|| {
                format!(
                    "{source} does not build for {} (cargo's messages are above)",
                    arch.triple()
                )
            })?;
            let built = build::output_dir_for(arch, release, build::Flavor::Plain);
            let out = build::output_dir_for(arch, release, flavor);
            bins.iter()
                .map(|bin| Ok((bin.clone(), build::publish(&built.join(bin), &out)?)))
                .collect::<Result<_>>()?
        }
        Source::Elf { path, name } => vec![(name.clone(), path.clone())],
    };
    for (name, path) in &programs {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        check_elf(&bytes, arch).with_context(|| {
            format!("program `{name}` ({}) is not a Tsumugi program for {arch}", path.display())
        })?;
    }
    Ok(programs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(manifest: &str, deps: &str, targets: &str) -> String {
        format!(
            r#"{{"packages":[{{"name":"p","manifest_path":"{manifest}","dependencies":[{deps}],"targets":[{targets}]}}]}}"#
        )
    }

    #[test]
    fn a_program_crate_depends_on_libuthread_and_has_binaries() {
        let manifest = Path::new("/nowhere/p/Cargo.toml");
        let lib = r#"{"name":"libuthread"}"#;
        let bins = r#"{"name":"b","kind":["bin"]},{"name":"a","kind":["bin"]},{"name":"p","kind":["lib"]}"#;
        let json = metadata("/nowhere/p/Cargo.toml", lib, bins);
        assert_eq!(program_bins(&json, manifest).unwrap(), ["a", "b"]);
        let error = program_bins(&metadata("/nowhere/p/Cargo.toml", "", bins), manifest).unwrap_err();
        assert!(error.to_string().contains("does not depend on libuthread"), "{error}");
        let error = program_bins(
            &metadata("/nowhere/p/Cargo.toml", lib, r#"{"name":"p","kind":["lib"]}"#),
            manifest,
        )
        .unwrap_err();
        assert!(error.to_string().contains("has no binary"), "{error}");
    }

    #[test]
    fn program_names_fit_the_archive_and_the_boot_line() {
        assert!(check_name("hello_world-2").is_ok());
        for bad in ["", "a,b", "a+b", "a b", "run=x", &"x".repeat(MAX_NAME_LEN + 1)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn duplicate_names_are_refused_naming_both() {
        let tree = Source::Crate { dir: "userland".into(), bins: vec!["init".into(), "twin".into()] };
        let mine = Source::Elf { path: "/tmp/init".into(), name: "init".into() };
        let other = Source::Elf { path: "/tmp/other".into(), name: "other".into() };
        assert!(check_unique(&[tree.clone(), other]).is_ok());
        let error = check_unique(&[tree, mine]).unwrap_err().to_string();
        assert!(error.contains("`init`") && error.contains("userland") && error.contains("/tmp/init"), "{error}");
    }

    /// A minimal ELF header with `e_type` and `e_machine`.
    fn elf_header(e_type: u16, machine: u16) -> Vec<u8> {
        let mut header = vec![0u8; 64];
        header[..4].copy_from_slice(ELF_MAGIC);
        header[4] = ELFCLASS64;
        header[5] = ELFDATA2LSB;
        header[E_TYPE..E_TYPE + 2].copy_from_slice(&e_type.to_le_bytes());
        header[E_MACHINE..E_MACHINE + 2].copy_from_slice(&machine.to_le_bytes());
        header
    }

    #[test]
    fn only_static_pie_elves_for_the_arch_are_programs() {
        for arch in Arch::ALL {
            assert!(check_elf(&elf_header(ET_DYN, arch.elf_machine()), arch).is_ok());
        }
        let x86 = Arch::X86_64.elf_machine();
        assert!(check_elf(&elf_header(ET_DYN, x86), Arch::Riscv64).is_err());
        /// `ET_EXEC`: linked at a fixed address.
        const ET_EXEC: u16 = 2;
        assert!(check_elf(&elf_header(ET_EXEC, x86), Arch::X86_64).is_err());
        assert!(check_elf(b"#!/bin/sh\n", Arch::X86_64).is_err());
    }

    #[test]
    fn arguments_that_are_neither_crates_nor_elves_are_refused() {
        let dir = std::env::temp_dir().join(format!("xtask-program-arg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("script");
        std::fs::write(&script, b"#!/bin/sh\n").unwrap();
        let error = Source::from_arg(&script).unwrap_err().to_string();
        assert!(error.contains("neither a folder nor an ELF") && error.contains("--program takes"), "{error}");
        let error = Source::from_arg(&dir.join("missing")).unwrap_err().to_string();
        assert!(error.contains("does not exist"), "{error}");
        let error = Source::from_arg(&dir).unwrap_err().to_string();
        assert!(error.contains("has no Cargo.toml"), "{error}");
        let elf = dir.join("prog");
        std::fs::write(&elf, elf_header(ET_DYN, Arch::X86_64.elf_machine())).unwrap();
        assert_eq!(
            Source::from_arg(&elf).unwrap(),
            Source::Elf { path: elf.clone(), name: "prog".into() }
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn userland_is_a_program_crate_with_init() {
        let Source::Crate { bins, .. } = Source::userland().unwrap() else { panic!("a crate") };
        assert!(bins.iter().any(|b| b == "init"));
    }
}
