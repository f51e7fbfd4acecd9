//! External commands: building them, printing them as a shell would read them, and running them.
//!
//! Every command `xtask` runs on the user's behalf goes through [`Cmd`] so it is printed before it
//! runs (environment changes included), and a failure names the command that failed.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

/// The workspace root (the folder holding the root `Cargo.toml`).
pub fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf()
}

/// The cargo that runs host builds: the one that started `xtask` (`$CARGO`), else `cargo` on `PATH`.
pub fn host_cargo() -> OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"))
}

/// A command line with the environment changes it needs.
#[derive(Clone, Debug)]
pub struct Cmd {
    program: OsString,
    args: Vec<OsString>,
    set_env: Vec<(String, OsString)>,
    removed_env: Vec<String>,
    current_dir: Option<PathBuf>,
}

impl Cmd {
    /// A command running `program` with no arguments.
    pub fn new(program: impl AsRef<OsStr>) -> Cmd {
        Cmd {
            program: program.as_ref().to_os_string(),
            args: Vec::new(),
            set_env: Vec::new(),
            removed_env: Vec::new(),
            current_dir: None,
        }
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Cmd {
        self.args.push(arg.as_ref().to_os_string());
        self
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> Cmd
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_os_string()));
        self
    }

    /// Sets an environment variable for the command (shown when the command is printed).
    pub fn env(mut self, key: &str, value: impl AsRef<OsStr>) -> Cmd {
        self.set_env
            .push((key.to_string(), value.as_ref().to_os_string()));
        self
    }

    /// Removes an inherited environment variable (not shown: it only undoes the outer cargo's).
    pub fn env_remove(mut self, key: &str) -> Cmd {
        self.removed_env.push(key.to_string());
        self
    }

    /// Runs the command in `dir`.
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Cmd {
        self.current_dir = Some(dir.into());
        self
    }

    /// The program this command runs.
    pub fn program(&self) -> &OsStr {
        &self.program
    }

    /// The command as one shell line: `VAR=value program arg...`, quoted where needed.
    pub fn display(&self) -> String {
        let env = self
            .set_env
            .iter()
            .map(|(k, v)| format!("{k}={}", shell_quote(v)));
        let words =
            std::iter::once(shell_quote(&self.program)).chain(self.args.iter().map(shell_quote));
        env.chain(words).collect::<Vec<_>>().join(" ")
    }

    /// A `std::process::Command` with the arguments, environment and folder set.
    pub fn to_command(&self) -> Command {
        let mut command = Command::new(&self.program);
        command.args(&self.args);
        for key in &self.removed_env {
            command.env_remove(key);
        }
        for (key, value) in &self.set_env {
            command.env(key, value);
        }
        if let Some(dir) = &self.current_dir {
            command.current_dir(dir);
        }
        command
    }

    /// Prints the command on stderr, prefixed with `$`.
    pub fn echo(&self) {
        eprintln!("$ {}", self.display());
    }

    /// Prints and runs the command with inherited stdio; fails unless it exits with status 0.
    pub fn run(&self) -> Result<()> {
        self.echo();
        let status = self
            .to_command()
            .status()
            .with_context(|| format!("could not start `{}`", self.program.to_string_lossy()))?;
        if !status.success() {
            bail!("`{}` failed ({status})", self.display());
        }
        Ok(())
    }

    /// Prints and runs the command, returning its stdout; stderr passes through.
    pub fn read(&self) -> Result<String> {
        self.echo();
        self.read_quietly()
    }

    /// Runs the command without printing it (for read-only probes such as `rustc --print sysroot`)
    /// and returns its stdout; stderr is discarded.
    pub fn read_quietly(&self) -> Result<String> {
        let output = self
            .to_command()
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .with_context(|| format!("could not start `{}`", self.program.to_string_lossy()))?;
        if !output.status.success() {
            bail!(
                "`{}` failed ({}): {}",
                self.display(),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        String::from_utf8(output.stdout)
            .with_context(|| format!("`{}` printed non-UTF-8", self.display()))
    }
}

/// Quotes a word for a POSIX shell when it holds anything but safe characters.
pub fn shell_quote(word: impl AsRef<OsStr>) -> String {
    let word = word.as_ref().to_string_lossy();
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c);
    if !word.is_empty() && word.chars().all(safe) {
        word.into_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Finds `name` in the folders of `PATH`, as a shell would.
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

/// Whether `path` is a file the user may execute.
pub fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    /// Any of the owner, group or other execute bits.
    const EXECUTE_BITS: u32 = 0o111;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & EXECUTE_BITS != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_only_what_needs_it() {
        assert_eq!(
            shell_quote("-Zbuild-std=core,alloc"),
            "-Zbuild-std=core,alloc"
        );
        assert_eq!(
            shell_quote("-C force-frame-pointers=yes"),
            "'-C force-frame-pointers=yes'"
        );
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn displays_environment_then_words() {
        let cmd = Cmd::new("/usr/bin/cargo")
            .env("RUSTC_BOOTSTRAP", "1")
            .env_remove("RUSTUP_TOOLCHAIN")
            .args(["build", "--target", "x86_64-unknown-none"])
            .arg("target remote :1234");
        assert_eq!(
            cmd.display(),
            "RUSTC_BOOTSTRAP=1 /usr/bin/cargo build --target x86_64-unknown-none 'target remote :1234'"
        );
    }

    #[test]
    fn workspace_root_holds_the_workspace_manifest() {
        assert!(workspace_root().join("Cargo.toml").is_file());
        assert!(workspace_root().join("xtask").is_dir());
    }

    #[test]
    fn finds_sh_in_path() {
        assert!(find_in_path("sh").is_some());
        assert!(find_in_path("surely-no-such-program-here").is_none());
    }
}
