//! The one place that knows how each architecture is built, booted and how it reports its end.
//!
//! Everything per-architecture that `xtask` needs — target triple, kernel `rustc` flags, QEMU binary
//! and Debian package, machine arguments, how the guest's exit status reaches QEMU's exit code,
//! and whether the architecture is supported yet — is a method of [`Arch`], so adding an
//! architecture is one `match` arm per question and nothing else.

use std::fmt;
use std::process::ExitStatus;

use clap::ValueEnum;
use tsumugi_tests::Outcome;

use crate::qemu::Accel;

/// I/O port of QEMU's `isa-debug-exit` device on x86_64 (the kernel writes its status there).
pub const X86_64_DEBUG_EXIT_PORT: u16 = 0xf4;
/// Width in bytes of the `isa-debug-exit` port.
pub const X86_64_DEBUG_EXIT_SIZE: u8 = 0x04;

/// A target architecture, spelled as Rust's `target_arch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, ValueEnum)]
pub enum Arch {
    /// x86_64 (QEMU q35, PVH entry, `isa-debug-exit`).
    #[value(name = "x86_64")]
    X86_64,
    /// RISC-V 64 (QEMU virt with OpenSBI).
    #[value(name = "riscv64")]
    Riscv64,
    /// AArch64 (QEMU virt).
    #[value(name = "aarch64")]
    Aarch64,
}

/// How the guest's status reaches QEMU's exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitReport {
    /// x86_64 `isa-debug-exit`: QEMU exits with `status * 2 + 1`; exit code 0 means the guest
    /// reset or powered off without reporting (with `-no-reboot`, a triple fault ends here).
    IsaDebugExit,
    /// The exit code is the guest status (RISC-V test finisher / SBI SRST, Arm semihosting
    /// `SYS_EXIT`); unverified until those ports exist.
    Direct,
}

impl Arch {
    /// Every architecture, supported or not.
    pub const ALL: [Arch; 3] = [Arch::X86_64, Arch::Riscv64, Arch::Aarch64];

    /// The `target_arch` spelling, also used on the command line and in log names.
    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Riscv64 => "riscv64",
            Arch::Aarch64 => "aarch64",
        }
    }

    /// Whether the kernel runs on this architecture yet.
    pub fn is_supported(self) -> bool {
        match self {
            Arch::X86_64 => true,
            Arch::Riscv64 | Arch::Aarch64 => false,
        }
    }

    /// The supported architectures.
    pub fn supported() -> Vec<Arch> {
        Arch::ALL
            .into_iter()
            .filter(|arch| arch.is_supported())
            .collect()
    }

    /// `Ok` if supported, else the error that makes `xtask` exit with a usage status.
    pub fn require_supported(self) -> Result<(), Unsupported> {
        if self.is_supported() {
            Ok(())
        } else {
            Err(Unsupported(self))
        }
    }

    /// The Rust target triple the kernel and user programs are built for.
    pub fn triple(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-unknown-none",
            Arch::Riscv64 => "riscv64gc-unknown-none-elf",
            Arch::Aarch64 => "aarch64-unknown-none",
        }
    }

    /// Extra `rustc` flags for the kernel binary only (`cargo rustc -- <flags>`); the linker
    /// script comes from `kernel/build.rs`.
    pub fn kernel_rustc_args(self) -> &'static [&'static str] {
        match self {
            // Linked below 2 GiB for the 32-bit PVH trampoline (DESIGN §2), at a fixed address.
            Arch::X86_64 => &["-C", "relocation-model=static", "-C", "code-model=kernel"],
            // Provisional until these ports exist.
            Arch::Riscv64 => &["-C", "relocation-model=static", "-C", "code-model=medium"],
            Arch::Aarch64 => &["-C", "relocation-model=static"],
        }
    }

    /// The QEMU system emulator.
    pub fn qemu_binary(self) -> &'static str {
        match self {
            Arch::X86_64 => "qemu-system-x86_64",
            Arch::Riscv64 => "qemu-system-riscv64",
            Arch::Aarch64 => "qemu-system-aarch64",
        }
    }

    /// The Debian package that ships [`Arch::qemu_binary`].
    pub fn debian_qemu_package(self) -> &'static str {
        match self {
            Arch::X86_64 => "qemu-system-x86",
            Arch::Riscv64 => "qemu-system-misc",
            Arch::Aarch64 => "qemu-system-arm",
        }
    }

    /// Machine, accelerator, CPU and firmware arguments.
    pub fn machine_args(self, accel: Accel) -> Vec<String> {
        let mut args: Vec<String> = match self {
            Arch::X86_64 => vec!["-machine".into(), "q35".into()],
            Arch::Riscv64 => vec![
                "-machine".into(),
                "virt".into(),
                "-bios".into(),
                "default".into(),
            ],
            Arch::Aarch64 => vec!["-machine".into(), "virt".into()],
        };
        args.extend(["-accel".to_string(), accel.name().to_string()]);
        let cpu = match (self, accel) {
            (_, Accel::Kvm) => Some("host"),
            (Arch::X86_64 | Arch::Aarch64, Accel::Tcg) => Some("max"),
            (Arch::Riscv64, Accel::Tcg) => None,
        };
        if let Some(cpu) = cpu {
            args.extend(["-cpu".to_string(), cpu.to_string()]);
        }
        args
    }

    /// Devices through which the guest reports its exit status.
    pub fn exit_device_args(self) -> Vec<String> {
        match self {
            Arch::X86_64 => vec![
                "-device".into(),
                format!(
                    "isa-debug-exit,iobase={X86_64_DEBUG_EXIT_PORT:#x},iosize={X86_64_DEBUG_EXIT_SIZE:#04x}"
                ),
            ],
            // The virt machine's test finisher needs no flag.
            Arch::Riscv64 => Vec::new(),
            Arch::Aarch64 => vec!["-semihosting-config".into(), "enable=on,target=native".into()],
        }
    }

    /// How the guest's status reaches QEMU's exit code.
    pub fn exit_report(self) -> ExitReport {
        match self {
            Arch::X86_64 => ExitReport::IsaDebugExit,
            Arch::Riscv64 | Arch::Aarch64 => ExitReport::Direct,
        }
    }

    /// Turns QEMU's exit status into how the run ended.
    pub fn decode_exit(self, status: ExitStatus) -> Outcome {
        use std::os::unix::process::ExitStatusExt;
        let Some(code) = status.code() else {
            let signal = status
                .signal()
                .map_or_else(|| "?".to_string(), |s| s.to_string());
            return Outcome::QemuFailed(format!("QEMU was killed by signal {signal}"));
        };
        match self.exit_report() {
            ExitReport::IsaDebugExit if code == 0 => Outcome::NoStatus,
            ExitReport::IsaDebugExit if code % 2 == 1 => match u8::try_from((code - 1) / 2) {
                Ok(guest) => Outcome::Guest(guest),
                Err(_) => Outcome::QemuFailed(format!("exit code {code}")),
            },
            ExitReport::IsaDebugExit => Outcome::QemuFailed(format!("exit code {code}")),
            ExitReport::Direct => match u8::try_from(code) {
                Ok(guest) => Outcome::Guest(guest),
                Err(_) => Outcome::QemuFailed(format!("exit code {code}")),
            },
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The error for an architecture the kernel does not run on yet; `xtask` exits with a usage status.
#[derive(Debug)]
pub struct Unsupported(pub Arch);

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let supported: Vec<_> = Arch::supported().iter().map(|a| a.name()).collect();
        write!(
            f,
            "{} is not yet supported ({} only for now)",
            self.0,
            supported.join(", ")
        )
    }
}

impl std::error::Error for Unsupported {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    /// A wait status for a process that exited with `code`.
    fn exited(code: i32) -> ExitStatus {
        /// Where a wait status keeps the exit code.
        const EXIT_CODE_SHIFT: i32 = 8;
        ExitStatus::from_raw(code << EXIT_CODE_SHIFT)
    }

    #[test]
    fn x86_64_decodes_isa_debug_exit() {
        assert_eq!(Arch::X86_64.decode_exit(exited(1)), Outcome::Guest(0));
        assert_eq!(Arch::X86_64.decode_exit(exited(255)), Outcome::Guest(127));
        assert_eq!(Arch::X86_64.decode_exit(exited(3)), Outcome::Guest(1));
        assert_eq!(Arch::X86_64.decode_exit(exited(0)), Outcome::NoStatus);
        assert!(matches!(
            Arch::X86_64.decode_exit(exited(2)),
            Outcome::QemuFailed(_)
        ));
        /// SIGKILL.
        const SIGKILL: i32 = 9;
        assert!(matches!(
            Arch::X86_64.decode_exit(ExitStatus::from_raw(SIGKILL)),
            Outcome::QemuFailed(why) if why.contains("signal 9")
        ));
    }

    #[test]
    fn only_x86_64_is_supported_and_says_so() {
        assert_eq!(Arch::supported(), [Arch::X86_64]);
        assert_eq!(
            Arch::Riscv64.require_supported().unwrap_err().to_string(),
            "riscv64 is not yet supported (x86_64 only for now)"
        );
    }

    #[test]
    fn names_round_trip_through_clap() {
        for arch in Arch::ALL {
            assert_eq!(Arch::from_str(arch.name(), false), Ok(arch));
        }
        assert!(Arch::from_str("x86-64", false).is_err());
    }

    #[test]
    fn x86_64_machine_matches_design() {
        assert_eq!(
            Arch::X86_64.machine_args(Accel::Tcg).join(" "),
            "-machine q35 -accel tcg -cpu max"
        );
        assert_eq!(
            Arch::X86_64.machine_args(Accel::Kvm).join(" "),
            "-machine q35 -accel kvm -cpu host"
        );
        assert_eq!(
            Arch::X86_64.exit_device_args().join(" "),
            "-device isa-debug-exit,iobase=0xf4,iosize=0x04"
        );
    }
}
