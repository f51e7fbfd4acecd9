//! The riscv64 port: OpenSBI entry in S-mode, device tree, 16550 console, `stvec` trap entry
//! with `ecall` syscalls, SBI timer, Sv48 paging. Module names match every other port.

pub mod boot;
pub mod context;
pub mod cpu;
pub mod fpu;
pub mod interrupts;
pub mod layout;
pub mod paging;
pub mod pmu;
pub mod serial;
pub mod smp;
pub mod timer;
pub mod tlb;
pub mod trap;
pub(crate) mod usercopy;

/// Name of this architecture, as `target_arch` spells it.
pub const NAME: &str = "riscv64";

/// The page-table format of this port.
pub type PageFormat = paging::Sv48;

/// Path of the linker script, for `kernel/build.rs`.
pub const LINKER_SCRIPT: &str = "riscv64/linker.ld";

/// ELF `e_machine` of user programs for this port (`EM_RISCV`).
pub const ELF_MACHINE: u16 = 243;
