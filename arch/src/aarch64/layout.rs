//! The aarch64 virtual memory layout of the single address space.
//!
//! ```text
//! TTBR0_EL1 (T0SZ = 16: 0x0000_0000_0000_0000..0x0000_ffff_ffff_ffff, the user table of a view)
//! 0x0000_0000_0000_0000  unmapped (null page and below USER_START)
//! 0x0000_0000_4000_0000  USER_START: the user half, handed out by the single-address-space
//!                        range allocator; a pointer means the same in every view
//! 0x0000_7fff_ffe0_0000  USER_END: kept equal to x86_64's so a program's addresses do not depend
//!                        on the architecture; root slots 256..511 of a user table stay empty
//!
//! TTBR1_EL1 (T1SZ = 16: 0xffff_0000_0000_0000..0xffff_ffff_ffff_ffff, the one kernel table)
//! 0xffff_8000_0000_0000  PHYS_MAP: all RAM, 2 MiB blocks, RW, XN, global
//! 0xffff_8080_0000_0000  MMIO: device registers (Device-nGnRE)
//! 0xffff_8100_0000_0000  KERNEL_STACKS: kernel stacks with unmapped guard pages
//! 0xffff_ffff_8000_0000  KERNEL_BASE: the kernel image at KERNEL_BASE + its physical address
//!                        (QEMU virt RAM starts at 1 GiB, so the image sits at 0xffff_ffff_c020_0000)
//! ```
//! The kernel half has its own root register, so no root slot is shared with user tables: a
//! view's table holds user mappings only, and the kernel's TTBR1 table is built once at boot.
//! The values match x86_64's, so the kernel's root slots (256..511 of the TTBR1 table, indexed
//! by VA bits 47:39 exactly as a PML4) are the same on both ports.

/// Where the kernel image is linked (physical address + `KERNEL_BASE`); matches `linker.ld`.
pub const KERNEL_BASE: u64 = 0xffff_ffff_8000_0000;
/// Base of the direct map of physical memory.
pub const PHYS_MAP: u64 = 0xffff_8000_0000_0000;
/// Base of the device window.
pub const MMIO: u64 = 0xffff_8080_0000_0000;
/// Size of the device window.
pub const MMIO_SIZE: u64 = 1 << 30;
/// Base of the kernel-stack area.
pub const KERNEL_STACKS: u64 = 0xffff_8100_0000_0000;
/// Size of the kernel-stack area.
pub const KERNEL_STACKS_SIZE: u64 = 1 << 39;
/// First address the user range allocator may hand out.
pub const USER_START: u64 = 0x0000_0000_4000_0000;
/// End (exclusive) of what the user range allocator may hand out.
pub const USER_END: u64 = 0x0000_7fff_ffe0_0000;
/// First address of the kernel half.
pub const KERNEL_HALF: u64 = 0xffff_8000_0000_0000;

/// Root-table slots shared between the kernel table and user tables: none, the kernel half is
/// translated through TTBR1_EL1 and never appears in a user table.
pub const SHARED_KERNEL_ROOT_ENTRIES: core::ops::Range<usize> = 0..0;
/// Root-table slots a user page table owns: the ones below `USER_END` (VA bits 47:39 < 256).
pub const USER_ROOT_ENTRIES: core::ops::Range<usize> = 0..256;
