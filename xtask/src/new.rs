//! `cargo xtask new <dir>`: make a program crate outside the tree.
//!
//! The crate depends on this tree's `libuthread` by path, is its own Cargo workspace, starts
//! with a `main` named by `libuthread::entry!` that runs a few M:N threads, and carries a README
//! saying how to build and boot it (`cargo xtask run --program <dir> -- run=<name>`, from the
//! tree). It takes the tree's `Cargo.lock`, so it builds with the same dependency versions and
//! without asking the registry.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::cmd::workspace_root;
use crate::program::{self, Source, RUNTIME_CRATE};

/// Arguments of `cargo xtask new`.
#[derive(Args, Debug)]
pub struct NewArgs {
    /// Folder to create (must not exist); its last component names the crate and the program.
    pub dir: PathBuf,
}

/// The generated `Cargo.toml`; `{name}` and `{libuthread}` are filled in.
const MANIFEST: &str = r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2021"
publish = false

[dependencies]
libuthread = { path = "{libuthread}" }

# Its own workspace, built for Tsumugi's target by `cargo xtask --program` (README.md).
[workspace]

# As the tree builds its programs: optimised a little, no debug info in the boot archive.
[profile.dev]
opt-level = 1
debug = false
strip = "debuginfo"

# Release: one LTO unit with libuthread, so its statics are reached directly and not through
# the GOT of the position-independent program (fewer instructions on every switch).
[profile.release]
debug = false
strip = "debuginfo"
lto = "fat"
codegen-units = 1
"#;

/// The generated `src/main.rs`.
const MAIN: &str = r#"//! `{name}`: a Tsumugi program (see README.md).
#![no_std]
#![no_main]

extern crate alloc;

use alloc::vec::Vec;
use libuthread::println;

/// Number of user threads the example starts.
const THREADS: usize = 8;
/// Number of vCPUs (kernel threads) they run on.
const VCPUS: usize = 2;

fn main() -> i32 {
    println!("{name}: hello from ring 3");
    // THREADS user threads over VCPUS vCPUs; thread i returns i.
    let sum: usize = libuthread::run(VCPUS, || {
        let threads: Vec<_> = (1..=THREADS).map(|i| libuthread::spawn(move || i)).collect();
        threads.into_iter().map(|t| t.join().unwrap_or(0)).sum()
    });
    println!("{name}: {THREADS} user threads on {VCPUS} vCPUs returned 1 + ... + {THREADS} = {sum}");
    // The exit status: 0 is success.
    if sum == THREADS * (THREADS + 1) / 2 { 0 } else { 1 }
}

libuthread::entry!(main);
"#;

/// The generated `README.md`; `{name}`, `{dir}` and `{tree}` are filled in.
const README: &str = r#"# {name}

A program for Tsumugi: a `no_std` binary linked against
`libuthread` (the runtime, the syscalls and the M:N thread library), from the tree at
`{tree}`.

Build and boot it from that tree:

```sh
cd {tree}
cargo xtask run --program {dir} -- run={name}
```

`--program` builds this crate for the target (`--arch x86_64|riscv64|aarch64`, default x86_64)
with the flags every Tsumugi program needs (static position-independent executable; on aarch64
`x18` reserved, on riscv64 no linker relaxation), puts `{name}` into the boot archive beside
the tree's programs, and `run={name}` tells the kernel to start it. The console shows:

```text
{name}: hello from ring 3
{name}: 8 user threads on 2 vCPUs returned 1 + ... + 8 = 36
domain 1 {name}: exited with status 0
tsumugi: halting with status 0
```

and `cargo xtask run` exits with the program's status. `cargo build` here builds nothing useful:
the crate is only built for Tsumugi's target, by `cargo xtask`. `cargo xtask test --program
{dir}` boots it on every port and checks it exits with status 0.

- `src/main.rs`: `main` returns the exit status and is named by `libuthread::entry!(main)`;
  a panic prints its message and ends the program with status 101.
- More programs: add `src/bin/<other>.rs` (each binary is a program, named by its file).
- The API: `cargo xtask doc --open` in the tree (libuthread as built for the target).
"#;

/// `cargo xtask new`.
pub fn run(args: &NewArgs) -> Result<u8> {
    let name = create(&args.dir)?;
    let dir = args.dir.display();
    println!("new: created program crate `{name}` in {dir}:");
    for file in ["Cargo.toml", "Cargo.lock", "src/main.rs", "README.md", ".gitignore"] {
        println!("new:   {dir}/{file}");
    }
    println!(
        "new: boot it with: cargo xtask run --program {} -- run={name}",
        crate::cmd::shell_quote(&args.dir)
    );
    Ok(0)
}

/// Makes the crate in `dir` (which must not exist); returns the program's name.
pub fn create(dir: &Path) -> Result<String> {
    if dir.exists() || dir.is_symlink() {
        bail!(
            "{} already exists; `cargo xtask new` makes a new folder: give a path that does not \
             exist yet (to boot a crate that is there: cargo xtask run --program {0} -- run=<name>)",
            dir.display()
        );
    }
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    check_crate_name(&name)?;
    if let Source::Crate { bins, .. } = Source::userland()? {
        if bins.contains(&name) {
            bail!(
                "`{name}` is already a program in the tree (userland/src/bin/{name}.rs); the boot \
                 archive needs distinct names, so pick another folder name"
            );
        }
    }
    let tree = workspace_root();
    let absolute = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let libuthread = tree.join(RUNTIME_CRATE);
    let libuthread = libuthread.canonicalize().unwrap_or(libuthread);
    let fill = |template: &str| {
        template
            .replace("{name}", &name)
            .replace("{libuthread}", &libuthread.display().to_string())
            .replace("{tree}", &tree.display().to_string())
            .replace("{dir}", &absolute.display().to_string())
    };
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::create_dir(dir).with_context(|| format!("creating {}", dir.display()))?;
    let write = |file: &str, text: &str| {
        let path = dir.join(file);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    std::fs::create_dir(dir.join("src")).with_context(|| format!("creating {}/src", dir.display()))?;
    write("Cargo.toml", &fill(MANIFEST))?;
    write("src/main.rs", &fill(MAIN))?;
    write("README.md", &fill(README))?;
    write(".gitignore", "/target\n")?;
    let lock = tree.join("Cargo.lock");
    std::fs::copy(&lock, dir.join("Cargo.lock"))
        .with_context(|| format!("copying {}", lock.display()))?;
    Ok(name)
}

/// The lines the generated `main` prints, for the suite that boots a new crate.
pub fn expected_lines(name: &str) -> [String; 2] {
    [
        format!("{name}: hello from ring 3"),
        format!("{name}: 8 user threads on 2 vCPUs returned 1 + ... + 8 = 36"),
    ]
}

/// Checks `name` can be both a Cargo package name and a program name: a lowercase letter, then
/// lowercase letters, digits and `_`.
fn check_crate_name(name: &str) -> Result<()> {
    let valid = name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !valid {
        bail!(
            "`{name}` cannot name a program crate: the folder's name becomes the crate's and the \
             program's, so it must be a lowercase letter followed by lowercase letters, digits \
             or `_` (for example `hello_tsumugi`)"
        );
    }
    program::check_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(what: &str) -> PathBuf {
        std::env::temp_dir().join(format!("xtask-new-{what}-{}", std::process::id()))
    }

    #[test]
    fn makes_a_program_crate_that_xtask_recognises() {
        let parent = scratch("ok");
        let dir = parent.join("hello_tsumugi");
        assert_eq!(create(&dir).unwrap(), "hello_tsumugi");
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        assert!(manifest.contains("name = \"hello_tsumugi\""));
        assert!(manifest.contains("[workspace]"));
        let main = std::fs::read_to_string(dir.join("src/main.rs")).unwrap();
        assert!(main.contains("libuthread::entry!(main);"));
        assert!(!main.contains("{name}"));
        assert!(std::fs::read_to_string(dir.join("README.md")).unwrap().contains("run=hello_tsumugi"));
        let source = Source::from_arg(&dir).unwrap();
        assert_eq!(source.names(), ["hello_tsumugi"]);
        // Into the same folder again: refused, naming the folder.
        let error = create(&dir).unwrap_err().to_string();
        assert!(error.contains("already exists") && error.contains("hello_tsumugi"), "{error}");
        std::fs::remove_dir_all(&parent).unwrap();
    }

    #[test]
    fn refuses_names_that_cannot_be_programs() {
        let parent = scratch("names");
        for bad in ["Hello", "1st", "with-dash", "a.b"] {
            let error = create(&parent.join(bad)).unwrap_err().to_string();
            assert!(error.contains("lowercase letter"), "{bad}: {error}");
        }
        let error = create(&parent.join("init")).unwrap_err().to_string();
        assert!(error.contains("already a program in the tree"), "{error}");
        assert!(!parent.join("init").exists());
        let _ = std::fs::remove_dir_all(&parent);
    }
}
