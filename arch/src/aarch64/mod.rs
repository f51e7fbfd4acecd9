//! The aarch64 port: Linux arm64 Image boot at EL1 (dropping from EL2), device tree, PL011
//! console, VBAR_EL1 vectors and `svc`, generic timer, GICv3, TTBR1 kernel / TTBR0 user
//! tables with a 4 KiB granule. Module names match every other port.

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
pub const NAME: &str = "aarch64";

/// The page-table format of this port.
pub type PageFormat = paging::Aarch64;

/// Path of the linker script, for `kernel/build.rs`.
pub const LINKER_SCRIPT: &str = "aarch64/linker.ld";

/// ELF `e_machine` of user programs for this port (`EM_AARCH64`).
pub const ELF_MACHINE: u16 = 183;
