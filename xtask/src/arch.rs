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
    /// The exit code is the guest status (RISC-V test finisher; Arm semihosting
    /// `SYS_EXIT_EXTENDED` with `ADP_Stopped_ApplicationExit`; both measured with QEMU 7.2).
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
            Arch::X86_64 | Arch::Riscv64 | Arch::Aarch64 => true,
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

    /// The Rust target triple the user programs are built for.
    pub fn triple(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-unknown-none",
            Arch::Riscv64 => "riscv64gc-unknown-none-elf",
            Arch::Aarch64 => "aarch64-unknown-none",
        }
    }

    /// The Rust target triple the kernel is built for. The kernel must never touch FP/SIMD
    /// registers itself (they hold user state, switched lazily: DESIGN §7), so its target has
    /// no FP/SIMD in its ABI. `x86_64-unknown-none` and `riscv64gc-unknown-none-elf` (whose
    /// kernel code has no floating point) qualify; `aarch64-unknown-none` has NEON, which the
    /// compiler uses for copies and zeroing anywhere, so the aarch64 kernel is built for the
    /// soft-float target (tier 2, built from source by `-Zbuild-std` like the other).
    pub fn kernel_triple(self) -> &'static str {
        match self {
            Arch::X86_64 | Arch::Riscv64 => self.triple(),
            Arch::Aarch64 => "aarch64-unknown-none-softfloat",
        }
    }

    /// Every triple built for this architecture: the user programs', then the kernel's if it
    /// differs.
    pub fn triples(self) -> Vec<&'static str> {
        let mut triples = vec![self.triple()];
        if self.kernel_triple() != self.triple() {
            triples.push(self.kernel_triple());
        }
        triples
    }

    /// Extra `rustc` flags for the kernel binary only (`cargo rustc -- <flags>`); the linker
    /// script comes from `kernel/build.rs`.
    pub fn kernel_rustc_args(self) -> &'static [&'static str] {
        match self {
            // Linked below 2 GiB for the 32-bit PVH trampoline (DESIGN §2), at a fixed address.
            Arch::X86_64 => &["-C", "relocation-model=static", "-C", "code-model=kernel"],
            // Linked at a fixed address in the top 2 GiB; `medany` reaches the whole image
            // PC-relative from anywhere in it (the target's default, spelled out).
            Arch::Riscv64 => &["-C", "relocation-model=static", "-C", "code-model=medium"],
            // Linked at a fixed address (KERNEL_BASE + physical, in the top 2 GiB); the small
            // code model reaches the image PC-relative, and the boot code relies on exactly that
            // to run at its physical address before the MMU is on.
            Arch::Aarch64 => &["-C", "relocation-model=static"],
        }
    }

    /// Extra `rustc` flags for the user programs (and the crates they use), beyond those shared
    /// with the kernel. The programs must be static position-independent executables (the
    /// loader places them anywhere in the single address space); `x86_64-unknown-none` builds
    /// them so by default, `riscv64gc-unknown-none-elf` defaults to static code and links
    /// without `-pie`, so it needs the flags `x86_64-unknown-none` implies. RISC-V objects also
    /// keep a `.L` label per PC-relative access in the symbol table (the relocations pair up
    /// through them), which makes each program about 30 times larger than its code: the linker
    /// drops them (`--discard-locals`).
    ///
    /// x86_64 gets `relocation-model=pie` too: the target's default (`pic`) links the same
    /// static PIE but compiles as for a shared object, where every exported symbol may be
    /// preempted, so calls into another crate go through the GOT (`call [rip + slot]`); `pie`
    /// calls them directly as on riscv64 and aarch64.
    pub fn user_rustflags(self) -> &'static [&'static str] {
        match self {
            Arch::X86_64 => &["-C", "relocation-model=pie"],
            // `aarch64-unknown-none` also defaults to static code linked without `-pie`.
            Arch::Aarch64 => &[
                "-C",
                "relocation-model=pie",
                // The target assumes strict alignment (code that may run with the MMU off), so
                // LLVM turns every copy of data aligned below 8 into a call to the generic
                // byte-and-word `memcpy` (a 28-byte closure: about 100 instructions). Programs
                // run at EL0 with the MMU on, in Normal memory, and the kernel leaves
                // SCTLR_EL1.A clear: unaligned loads and stores are allowed there.
                "-C",
                "target-feature=-strict-align",
                "-C",
                "link-arg=-pie",
                "-C",
                "link-arg=--no-dynamic-linker",
                "-C",
                "link-arg=-z",
                "-C",
                "link-arg=text",
            ],
            Arch::Riscv64 => &[
                "-C",
                "relocation-model=pie",
                "-C",
                "link-arg=-pie",
                "-C",
                "link-arg=--no-dynamic-linker",
                "-C",
                "link-arg=-z",
                "-C",
                "link-arg=text",
                "-C",
                "link-arg=--discard-locals",
                // `gp` belongs to the thread library (a FULL resume jumps through it:
                // `tsumugi_abi::kn::riscv64`). Compilers never allocate it, so only the
                // linker's global-pointer relaxation could make code depend on it; no
                // relaxation at all (LLD 14 relaxes nothing on RISC-V anyway, later versions
                // would only shorten calls).
                "-C",
                "link-arg=--no-relax",
            ],
        }
    }

    /// `rustc` flags that keep compiled user code (and the sysroot crates built with it) off
    /// the registers Tsumugi's user ABI reserves for the thread library: aarch64's `x18`,
    /// through which a FULL resume jumps (`tsumugi_abi::kn::aarch64`), so no compiled code may
    /// keep a value there. With `build_std` (the sysroot is compiled from source under
    /// `RUSTC_BOOTSTRAP`) that is rustc's `-Zfixed-x18`, which it also checks is the same in
    /// every crate; a toolchain with a prebuilt sysroot only takes the LLVM feature
    /// `+reserve-x18` (rustc warns that it is being phased out), and its prebuilt `core` may
    /// still use `x18`.
    pub fn user_reserved_register_flags(self, build_std: bool) -> &'static [&'static str] {
        match (self, build_std) {
            (Arch::X86_64 | Arch::Riscv64, _) => &[],
            (Arch::Aarch64, true) => &["-Zfixed-x18"],
            (Arch::Aarch64, false) => &["-C", "target-feature=+reserve-x18"],
        }
    }

    /// The ELF `e_machine` of code for this architecture (what a program file must say).
    pub fn elf_machine(self) -> u16 {
        match self {
            // EM_X86_64, EM_RISCV, EM_AARCH64 (System V ABI, processor supplements).
            Arch::X86_64 => 62,
            Arch::Riscv64 => 243,
            Arch::Aarch64 => 183,
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
            // GICv3 rather than QEMU's default v2: system-register CPU interface and affinity
            // routing, no 8-CPU limit (arch/src/aarch64/interrupts.rs).
            Arch::Aarch64 => vec!["-machine".into(), "virt,gic-version=3".into()],
        };
        args.extend(["-accel".to_string(), accel.name().to_string()]);
        let cpu = match (self, accel) {
            (_, Accel::Kvm) => Some("host"),
            // aarch64: `max` rather than a named core (cortex-a72 is Armv8.0): it has PAN (the
            // kernel's SMAP analogue), 16-bit ASIDs and the later PMUv3 events, and QEMU's TCG
            // runs it no slower, since the kernel uses no pointer authentication.
            (Arch::X86_64 | Arch::Aarch64, Accel::Tcg) => Some("max"),
            // Sscofpmf: OpenSBI then inhibits M-mode counting on the SBI PMU's TLB-miss counters.
            (Arch::Riscv64, Accel::Tcg) => Some("rv64,sscofpmf=true"),
        };
        if let Some(cpu) = cpu {
            args.extend(["-cpu".to_string(), cpu.to_string()]);
        }
        args
    }

    /// The file QEMU's `-kernel` gets instead of the kernel ELF `elf`, for architectures whose
    /// QEMU loader needs another format (`cargo xtask build` writes it beside the ELF); `None`
    /// boots the ELF itself. aarch64: QEMU 7.2 gives an ELF kernel neither the `-initrd` (it is
    /// not even loaded) nor the device tree's address, but boots any other file with the Linux
    /// arm64 protocol (initrd in `/chosen`, device tree in x0), so it gets the flat image of
    /// the ELF, which starts with an arm64 Image header (arch/src/aarch64/boot.rs). The ELF
    /// stays for gdb: both put the code at the same physical addresses.
    pub fn flat_kernel_image(self, elf: &std::path::Path) -> Option<std::path::PathBuf> {
        match self {
            Arch::X86_64 | Arch::Riscv64 => None,
            Arch::Aarch64 => Some(elf.with_extension("img")),
        }
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
    fn unsupported_architectures_say_so() {
        assert!(Arch::supported().contains(&Arch::X86_64));
        assert!(Arch::supported().contains(&Arch::Riscv64));
        for arch in Arch::ALL {
            match arch.require_supported() {
                Ok(()) => assert!(arch.is_supported()),
                Err(e) => assert!(e
                    .to_string()
                    .starts_with(&format!("{arch} is not yet supported (x86_64, riscv64"))),
            }
        }
    }

    #[test]
    fn aarch64_machine_matches_design() {
        use std::path::{Path, PathBuf};
        assert_eq!(
            Arch::Aarch64.machine_args(Accel::Tcg).join(" "),
            "-machine virt,gic-version=3 -accel tcg -cpu max"
        );
        assert_eq!(
            Arch::Aarch64.exit_device_args().join(" "),
            "-semihosting-config enable=on,target=native"
        );
        // Semihosting SYS_EXIT_EXTENDED makes QEMU exit with the guest status itself.
        assert_eq!(Arch::Aarch64.decode_exit(exited(0)), Outcome::Guest(0));
        assert_eq!(Arch::Aarch64.decode_exit(exited(127)), Outcome::Guest(127));
        assert!(Arch::Aarch64.user_rustflags().contains(&"link-arg=-pie"));
        // Programs may make unaligned accesses (EL0, MMU on, SCTLR_EL1.A clear), so small
        // under-aligned copies are inlined instead of calling the generic `memcpy`.
        assert!(Arch::Aarch64.user_rustflags().contains(&"target-feature=-strict-align"));
        // The kernel has no FP/SIMD (lazy switching); user programs keep NEON.
        assert_eq!(Arch::Aarch64.kernel_triple(), "aarch64-unknown-none-softfloat");
        assert_eq!(Arch::Aarch64.triples(), ["aarch64-unknown-none", "aarch64-unknown-none-softfloat"]);
        assert_eq!(Arch::X86_64.triples(), ["x86_64-unknown-none"]);
        assert_eq!(Arch::Aarch64.user_reserved_register_flags(true), ["-Zfixed-x18"]);
        assert_eq!(
            Arch::Aarch64.user_reserved_register_flags(false).join(" "),
            "-C target-feature=+reserve-x18"
        );
        assert!(Arch::X86_64.user_reserved_register_flags(true).is_empty());
        assert_eq!(
            Arch::Aarch64.flat_kernel_image(Path::new("out/tsumugi")),
            Some(PathBuf::from("out/tsumugi.img"))
        );
        assert_eq!(Arch::X86_64.flat_kernel_image(Path::new("out/tsumugi")), None);
        assert_eq!(Arch::Riscv64.flat_kernel_image(Path::new("out/tsumugi")), None);
    }

    #[test]
    fn riscv64_machine_matches_design() {
        assert_eq!(
            Arch::Riscv64.machine_args(Accel::Tcg).join(" "),
            "-machine virt -bios default -accel tcg -cpu rv64,sscofpmf=true"
        );
        assert!(Arch::Riscv64.exit_device_args().is_empty());
        // The test finisher makes QEMU exit with the guest status itself.
        assert_eq!(Arch::Riscv64.decode_exit(exited(0)), Outcome::Guest(0));
        assert_eq!(Arch::Riscv64.decode_exit(exited(127)), Outcome::Guest(127));
        assert!(Arch::Riscv64
            .user_rustflags()
            .contains(&"relocation-model=pie"));
        // gp is the thread library's: no global-pointer relaxation.
        assert!(Arch::Riscv64.user_rustflags().contains(&"link-arg=--no-relax"));
        assert_eq!(Arch::X86_64.user_rustflags(), ["-C", "relocation-model=pie"]);
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
