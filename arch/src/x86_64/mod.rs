//! The x86_64 port: PVH boot, 16550 console, GDT/TSS/IDT, `syscall`, local APIC timer,
//! 4-level paging. Module names match every other port.

pub mod acpi;
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
pub const NAME: &str = "x86_64";

/// The page-table format of this port.
pub type PageFormat = paging::X86_64;

/// Path of the linker script, for `kernel/build.rs`.
pub const LINKER_SCRIPT: &str = "x86_64/linker.ld";

/// ELF `e_machine` of user programs for this port (`EM_X86_64`).
pub const ELF_MACHINE: u16 = 62;
