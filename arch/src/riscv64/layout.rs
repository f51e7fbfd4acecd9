//! The riscv64 (Sv48) virtual memory layout of the single address space.
//!
//! Sv48 has the same shape as x86_64's 4-level paging (48-bit addresses, bits 63..48 copies of
//! bit 47), so every constant but the image base matches the x86_64 port:
//!
//! ```text
//! 0x0000_0000_0000_0000  unmapped (null page and below USER_START)
//! 0x0000_0000_4000_0000  USER_START: the user half, handed out by the single-address-space
//!                        range allocator; a pointer means the same in every view
//! 0x0000_7fff_ffe0_0000  USER_END (kept equal to x86_64's, which needs the 2 MiB gap for sysret)
//! 0xffff_8000_0000_0000  PHYS_MAP: all physical memory, 2 MiB pages, RW, global; also the
//!                        console and the test finisher, which the boot map lists as reserved
//! 0xffff_8080_0000_0000  MMIO: device registers mapped on request
//! 0xffff_8100_0000_0000  KERNEL_STACKS: kernel stacks with unmapped guard pages
//! 0xffff_ffff_0000_0000  KERNEL_BASE: the image lies at KERNEL_BASE + physical, i.e. at
//!                        0xffff_ffff_8020_0000 for QEMU virt's load address 0x8020_0000
//! ```
//! On x86_64 the image is loaded at 1 MiB and `KERNEL_BASE` is the start of the top 2 GiB; RAM
//! starts at 2 GiB on the virt machine, so the base is 2 GiB lower here and the image still lands
//! in the top 2 GiB (in reach of `auipc` from anywhere in the image: code model `medany`).
//!
//! Root-table entries 256..511 are created at boot and never change afterwards, so every view
//! shares the kernel half by copying them.

/// Where the kernel image is linked (physical address + `KERNEL_BASE`); matches `linker.ld`.
pub const KERNEL_BASE: u64 = 0xffff_ffff_0000_0000;
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

/// Root-table slots that hold the kernel half. They are created at boot and copied into every
/// user page table (`satp` is the only root register, as CR3 is on x86_64).
pub const SHARED_KERNEL_ROOT_ENTRIES: core::ops::Range<usize> = 256..512;
/// Root-table slots a user page table owns.
pub const USER_ROOT_ENTRIES: core::ops::Range<usize> = 0..256;

// The image must sit in the top 2 GiB of the address space for the medany code model, and the
// boot page tables map it with the gigapages of root slot 511.
const _: () = assert!(KERNEL_BASE.wrapping_add(0x8020_0000) >= 0xffff_ffff_8000_0000);
