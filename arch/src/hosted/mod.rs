//! Host stand-in for the hardware, so the kernel's logic builds and is tested with `cargo test`.
//!
//! It carries the pure-logic parts of the ports (page-table entry formats) so host tests can
//! exercise every format, and a layout like x86_64's for code that needs address-space limits.

/// The x86_64 entry format, compiled on the host.
#[path = "../x86_64/paging.rs"]
pub mod paging;

/// The x86_64 layout, compiled on the host.
#[path = "../x86_64/layout.rs"]
pub mod layout;

/// The riscv64 Sv48 entry format, compiled on the host.
#[path = "../riscv64/paging.rs"]
pub mod riscv64_paging;

/// The aarch64 VMSAv8-64 (4 KiB granule) descriptor format, compiled on the host.
#[path = "../aarch64/paging.rs"]
pub mod aarch64_paging;

/// Name of this stand-in.
pub const NAME: &str = "hosted";

/// The page-table format host tests use by default.
pub type PageFormat = paging::X86_64;

/// ELF `e_machine` host tests load (`EM_X86_64`).
pub const ELF_MACHINE: u16 = 62;
