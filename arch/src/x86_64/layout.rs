//! The x86_64 virtual memory layout of the single address space.
//!
//! ```text
//! 0x0000_0000_0000_0000  unmapped (null page and below USER_START)
//! 0x0000_0000_4000_0000  USER_START: the user half, handed out by the single-address-space
//!                        range allocator; a pointer means the same in every view
//! 0x0000_7fff_ffe0_0000  USER_END: the last 2 MiB below the canonical hole are never handed out,
//!                        so `sysret` never returns to a non-canonical RIP
//! 0xffff_8000_0000_0000  PHYS_MAP: all physical memory, 2 MiB pages, RW, NX, global
//! 0xffff_8080_0000_0000  MMIO: device registers, uncached
//! 0xffff_8100_0000_0000  KERNEL_STACKS: kernel stacks with unmapped guard pages
//! 0xffff_ffff_8000_0000  KERNEL_BASE: the kernel image (text RX, rodata R, data RW), global
//! ```
//! Top-level (PML4) entries 256..511 are created at boot and never change afterwards, so every
//! view shares the kernel half by copying them.

/// Where the kernel image is linked (physical address + `KERNEL_BASE`); matches `linker.ld`.
pub const KERNEL_BASE: u64 = 0xffff_ffff_8000_0000;
/// Base of the direct map of physical memory.
pub const PHYS_MAP: u64 = 0xffff_8000_0000_0000;
/// Base of the uncached device window.
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

/// Root-table slots that hold the kernel half. They are created at boot and copied into every
/// user page table (on ports with a separate kernel root this range is empty).
pub const SHARED_KERNEL_ROOT_ENTRIES: core::ops::Range<usize> = 256..512;
/// Root-table slots a user page table owns.
pub const USER_ROOT_ENTRIES: core::ops::Range<usize> = 0..256;
