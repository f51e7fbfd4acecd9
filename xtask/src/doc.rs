//! `cargo xtask doc`: libuthread's documentation as a program sees it — built for Tsumugi's
//! target, where `sys`, `entry!`, `println!` and `io` exist (a host `cargo doc` documents the
//! hosted build, which has none of them) — with every rustdoc warning an error.
//!
//! Also the examples of the documentation: every fenced code block of `README.md` and of
//! libuthread's crate documentation that names a `main` with `libuthread::entry!` is a
//! program, and [`examples_crate`] makes them a crate that the suite builds for every
//! port, so an example that stops compiling fails the tests. The crate documentation's
//! program examples live in `libuthread/doc/*.md`, included only in the target's build of
//! the documentation: hosted they could not compile, and `cargo test` would list them as
//! ignored doctests.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::arch::Arch;
use crate::build::{self, cross_target_dir};
use crate::cmd::{workspace_root, Cmd};
use crate::program::RUNTIME_CRATE;
use crate::setup::{self, Tools};

/// Files whose examples are built, relative to the workspace root.
pub const EXAMPLE_FILES: [&str; 4] = [
    "README.md",
    "libuthread/doc/example_program.md",
    "libuthread/doc/example_counters.md",
    "libuthread/src/signal.rs",
];
/// What marks a code block as a program example.
const EXAMPLE_MARK: &str = "libuthread::entry!(";
/// rustdoc flags: every warning (an unresolved link, a bad code-block attribute) is an error.
const RUSTDOC_DENY: &str = "-D warnings";

/// Arguments of `cargo xtask doc`.
#[derive(Args, Debug)]
pub struct DocArgs {
    /// Target architecture whose build is documented.
    #[arg(long, value_enum, default_value_t = Arch::X86_64)]
    pub arch: Arch,
    /// Open the documentation in a browser afterwards (`xdg-open`).
    #[arg(long)]
    pub open: bool,
}

/// `cargo xtask doc`.
pub fn run(args: &DocArgs) -> Result<u8> {
    args.arch.require_supported()?;
    let tools = setup::ensure(&[args.arch])?;
    let index = build_docs(&tools, args.arch)?;
    println!("doc: libuthread for {}: {}", args.arch.triple(), index.display());
    if args.open {
        Cmd::new("xdg-open").arg(&index).run()?;
    }
    Ok(0)
}

/// `cargo doc -p libuthread --no-deps` for `arch`'s user target, warnings denied.
pub fn doc_command(tools: &Tools, arch: Arch) -> Cmd {
    let reserved = arch.user_reserved_register_flags(tools.toolchain.build_std());
    let mut rustflags = arch.user_rustflags().to_vec();
    rustflags.extend(reserved);
    // rustdoc compiles the crate too: it needs the flags that must agree across crates.
    let mut rustdocflags = RUSTDOC_DENY.to_string();
    for flag in reserved {
        rustdocflags.push(' ');
        rustdocflags.push_str(flag);
    }
    // The kernel toolchain's rustdoc (beside its rustc), not whichever is first on PATH: it
    // must read the sysroot crates that rustc built.
    let rustdoc = tools.toolchain.rustc.with_file_name("rustdoc");
    build::cross_cargo(tools, arch.triple(), "doc", &rustflags)
        .env("RUSTDOC", rustdoc)
        .env("RUSTDOCFLAGS", rustdocflags)
        .args(["-p", RUNTIME_CRATE, "--no-deps"])
}

/// Builds the documentation; returns its `index.html`.
pub fn build_docs(tools: &Tools, arch: Arch) -> Result<PathBuf> {
    doc_command(tools, arch)
        .run()
        .with_context(|| format!("documenting {RUNTIME_CRATE} for {}", arch.triple()))?;
    let index = cross_target_dir()
        .join(arch.triple())
        .join("doc")
        .join(RUNTIME_CRATE)
        .join("index.html");
    if !index.is_file() {
        bail!("rustdoc succeeded but wrote no {}", index.display());
    }
    Ok(index)
}

/// The program examples of a Markdown text: the bodies of its fenced code blocks that contain
/// [`EXAMPLE_MARK`].
pub fn markdown_examples(text: &str) -> Vec<String> {
    let mut examples = Vec::new();
    let mut block: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            match block.take() {
                Some(body) => {
                    if body.contains(EXAMPLE_MARK) {
                        examples.push(body);
                    }
                }
                None => block = Some(String::new()),
            }
        } else if let Some(body) = block.as_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    examples
}

/// The Markdown of a Rust file's inner and outer doc comments (`//!`, `///`), one line each;
/// other lines become blank lines.
pub fn doc_comment_markdown(source: &str) -> String {
    source
        .lines()
        .map(|line| {
            let line = line.trim_start();
            let text = line
                .strip_prefix("//!")
                .or_else(|| line.strip_prefix("///"))
                .unwrap_or("");
            text.strip_prefix(' ').unwrap_or(text)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The program examples of [`EXAMPLE_FILES`], each with the file it comes from.
pub fn examples() -> Result<Vec<(&'static str, String)>> {
    let mut found = Vec::new();
    for file in EXAMPLE_FILES {
        let path = workspace_root().join(file);
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let markdown = if file.ends_with(".rs") { doc_comment_markdown(&text) } else { text };
        found.extend(markdown_examples(&markdown).into_iter().map(|e| (file, e)));
    }
    Ok(found)
}

/// Makes, in `dir` (which must not exist), a program crate with one binary per example
/// (`example_<n>`, its first line naming where it comes from); returns how many there are.
/// `program::build` then builds them for a target.
pub fn examples_crate(dir: &Path) -> Result<usize> {
    let examples = examples()?;
    if examples.is_empty() {
        bail!("no program examples found in {}", EXAMPLE_FILES.join(", "));
    }
    crate::new::create(dir)?;
    let bin = dir.join("src").join("bin");
    std::fs::create_dir_all(&bin).with_context(|| format!("creating {}", bin.display()))?;
    for (n, (file, example)) in examples.iter().enumerate() {
        let path = bin.join(format!("example_{n}.rs"));
        let text = format!("// Example {n} of {file}.\n{example}");
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(examples.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_program_examples_in_markdown_and_doc_comments() {
        let markdown = "text\n```rust\nfn main() -> i32 { 0 }\nlibuthread::entry!(main);\n```\n```sh\necho\n```\n";
        assert_eq!(markdown_examples(markdown), ["fn main() -> i32 { 0 }\nlibuthread::entry!(main);\n"]);
        let source = "//! Docs.\n//! ```rust,ignore\n//! libuthread::entry!(main);\n//! ```\nfn x() {}\n";
        assert_eq!(markdown_examples(&doc_comment_markdown(source)), ["libuthread::entry!(main);\n"]);
    }

    #[test]
    fn the_readme_and_the_crate_docs_have_examples() {
        let examples = examples().unwrap();
        for file in EXAMPLE_FILES {
            assert!(examples.iter().any(|(f, _)| *f == file), "no example in {file}");
        }
    }

    #[test]
    fn doc_denies_warnings_for_the_user_target() {
        let tools = Tools {
            toolchain: setup::Toolchain {
                kind: setup::ToolchainKind::Debian,
                rustc: "/usr/bin/rustc".into(),
                cargo: "/usr/bin/cargo".into(),
                sysroot: "/usr".into(),
                version: "rustc 1.96.0".into(),
            },
            linker: "/usr/bin/ld.lld".into(),
            qemu: Vec::new(),
        };
        let line = doc_command(&tools, Arch::Aarch64).display();
        assert!(line.contains("RUSTDOC=/usr/bin/rustdoc RUSTDOCFLAGS='-D warnings -Zfixed-x18'"), "{line}");
        assert!(line.contains(" doc ") && line.contains("--target aarch64-unknown-none ") && line.ends_with("-p libuthread --no-deps"), "{line}");
    }
}
