//! x86_64 boot: the PVH entry note, the 32-bit trampoline into long mode, and the reading of
//! `hvm_start_info` into [`BootInfo`].
//!
//! QEMU (`-kernel`, measured on 7.2) finds the `XEN_ELFNOTE_PHYS32_ENTRY` note, loads the ELF by
//! physical address and jumps to `pvh_start` in 32-bit protected mode with paging off and `ebx`
//! pointing at `hvm_start_info`. The trampoline must be assembly: there is no stack and the CPU is
//! not yet in the mode Rust code is compiled for.

use crate::addr::PhysAddr;
use crate::bootinfo::{BootInfo, MemoryKind, MemoryRange};

/// `hvm_start_info.magic` (xen/include/public/arch-x86/hvm/start_info.h).
const HVM_START_MAGIC: u32 = 0x336e_c578;
/// `XEN_ELFNOTE_PHYS32_ENTRY`.
const _XEN_ELFNOTE_PHYS32_ENTRY: u32 = 18;
/// Memory map entry types of `hvm_memmap_table_entry` (the E820 numbering).
const E820_RAM: u32 = 1;
const E820_ACPI: u32 = 3;
const E820_NVS: u32 = 4;
const E820_UNUSABLE: u32 = 5;

/// Size of the boot CPU's stack (in .bss).
pub const BOOT_STACK_SIZE: usize = 64 * 1024;

// The entry note, the trampoline and the boot page tables.
//
// Boot page tables: PML4[0] identity-maps the low 4 GiB (so the trampoline keeps running and
// start_info can be read), PML4[511] maps KERNEL_BASE.. to physical 0..2 GiB, both with 2 MiB
// pages. The kernel replaces them with its own tables as soon as it has a frame allocator.
core::arch::global_asm!(
    r#"
    .section .note.Xen, "a", @note
    .balign 4
    .long 4                 /* namesz: "Xen\0" */
    .long 8                 /* descsz */
    .long 18                /* XEN_ELFNOTE_PHYS32_ENTRY */
    .asciz "Xen"
    .balign 4
    .quad pvh_start
    .balign 4

    .section .boot.bss, "aw", @nobits
    .balign 4096
boot_pml4:      .skip 4096
boot_pdpt_low:  .skip 4096
boot_pdpt_high: .skip 4096
boot_pd:        .skip 4096 * 4
boot_tables_end:

    .section .boot.rodata, "a"
    .balign 16
boot_gdt:
    .quad 0
    .quad 0x00af9a000000ffff    /* 0x08: 64-bit code, DPL 0 */
    .quad 0x00cf92000000ffff    /* 0x10: data, DPL 0 */
boot_gdt_end:
boot_gdt_ptr:
    .word boot_gdt_end - boot_gdt - 1
    .long boot_gdt

    .section .boot.text, "ax"
    .code32
    .global pvh_start
pvh_start:
    cli
    cld
    mov %ebx, %esi                      /* keep the start_info pointer */

    /* zero the boot tables */
    mov $boot_pml4, %edi
    mov $((boot_tables_end - boot_pml4) / 4), %ecx
    xor %eax, %eax
    rep stosl

    /* 2048 PD entries: 2 MiB pages covering 0..4 GiB, present + writable + huge */
    mov $boot_pd, %edi
    xor %eax, %eax
    mov $2048, %ecx
1:  mov %eax, %edx
    or $0x83, %edx
    mov %edx, (%edi)
    add $0x200000, %eax
    add $8, %edi
    loop 1b

    /* PDPT low: four PDs (identity 0..4 GiB) */
    mov $boot_pdpt_low, %edi
    mov $boot_pd, %eax
    or $0x3, %eax
    mov $4, %ecx
2:  mov %eax, (%edi)
    add $4096, %eax
    add $8, %edi
    loop 2b

    /* PDPT high: entries 510, 511 -> physical 0..2 GiB at KERNEL_BASE */
    mov $boot_pd, %eax
    or $0x3, %eax
    mov %eax, boot_pdpt_high + 510 * 8
    add $4096, %eax
    mov %eax, boot_pdpt_high + 511 * 8

    mov $boot_pdpt_low, %eax
    or $0x3, %eax
    mov %eax, boot_pml4
    mov $boot_pdpt_high, %eax
    or $0x3, %eax
    mov %eax, boot_pml4 + 511 * 8

    /* CR4.PAE | CR4.PGE */
    mov %cr4, %eax
    or $((1 << 5) | (1 << 7)), %eax
    mov %eax, %cr4
    mov $boot_pml4, %eax
    mov %eax, %cr3

    /* EFER.SCE | EFER.LME | EFER.NXE */
    mov $0xC0000080, %ecx
    rdmsr
    or $((1 << 0) | (1 << 8) | (1 << 11)), %eax
    wrmsr

    /* CR0.PG | CR0.WP | CR0.PE */
    mov %cr0, %eax
    or $((1 << 31) | (1 << 16) | (1 << 0)), %eax
    mov %eax, %cr0

    lgdt boot_gdt_ptr
    ljmp $0x08, $long_mode_start

    .code64
long_mode_start:
    mov $0x10, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    xor %eax, %eax
    mov %ax, %fs
    mov %ax, %gs

    /* zero .bss (it holds the boot stack) */
    movabs $__bss_start, %rdi
    movabs $__bss_end, %rcx
    sub %rdi, %rcx
    shr $3, %rcx
    xor %eax, %eax
    rep stosq

    movabs $boot_stack_top, %rsp
    xor %ebp, %ebp                      /* ends frame-pointer backtraces */
    mov %esi, %edi                      /* start_info physical address */
    movabs ${entry}, %rax
    call *%rax
    ud2
    "#,
    entry = sym x86_64_boot_entry,
    options(att_syntax)
);

/// The boot CPU's stack.
#[repr(C, align(16))]
struct BootStack([u8; BOOT_STACK_SIZE]);

#[no_mangle]
static mut BOOT_STACK: BootStack = BootStack([0; BOOT_STACK_SIZE]);

core::arch::global_asm!(
    ".global boot_stack_top",
    ".set boot_stack_top, BOOT_STACK + {size}",
    size = const BOOT_STACK_SIZE,
);

/// Boot record filled once by [`x86_64_boot_entry`] before anything else runs.
static mut BOOT_INFO: BootInfo = BootInfo::empty();

extern "C" {
    static __kernel_phys_start: u8;
    static __kernel_phys_end: u8;
}

extern "Rust" {
    /// The kernel's entry point, defined by the kernel binary.
    fn tsumugi_main(info: &'static BootInfo) -> !;
}

/// `struct hvm_start_info` (version 1).
#[repr(C)]
struct HvmStartInfo {
    magic: u32,
    version: u32,
    flags: u32,
    nr_modules: u32,
    modlist_paddr: u64,
    cmdline_paddr: u64,
    rsdp_paddr: u64,
    memmap_paddr: u64,
    memmap_entries: u32,
    reserved: u32,
}

/// `struct hvm_modlist_entry`.
#[repr(C)]
struct HvmModlistEntry {
    paddr: u64,
    size: u64,
    cmdline_paddr: u64,
    reserved: u64,
}

/// `struct hvm_memmap_table_entry`.
#[repr(C)]
struct HvmMemmapEntry {
    addr: u64,
    size: u64,
    kind: u32,
    reserved: u32,
}

const _: () = assert!(core::mem::size_of::<HvmStartInfo>() == 56);
const _: () = assert!(core::mem::size_of::<HvmModlistEntry>() == 32);
const _: () = assert!(core::mem::size_of::<HvmMemmapEntry>() == 24);

/// Largest physical address the boot page tables identity-map.
const BOOT_IDENTITY_LIMIT: u64 = 4 << 30;

/// Reads a structure the firmware left in low physical memory.
///
/// # Safety
/// `paddr..paddr+size_of::<T>()` must be below [`BOOT_IDENTITY_LIMIT`] (identity-mapped by the
/// boot tables) and hold a valid `T`.
unsafe fn read_phys<T>(paddr: u64) -> T {
    // SAFETY: the caller guarantees the address is identity-mapped and holds a T.
    unsafe { core::ptr::read_unaligned(paddr as usize as *const T) }
}

/// Whether `[paddr, paddr + len)` is readable through the boot identity map.
fn identity_mapped(paddr: u64, len: u64) -> bool {
    paddr != 0 && paddr.checked_add(len).is_some_and(|end| end <= BOOT_IDENTITY_LIMIT)
}

/// First Rust code: runs on the boot stack with the boot page tables.
extern "C" fn x86_64_boot_entry(start_info: u32) -> ! {
    // SAFETY: single-threaded boot; nothing else refers to BOOT_INFO yet.
    let info = unsafe { &mut *core::ptr::addr_of_mut!(BOOT_INFO) };
    info.protocol = "PVH";
    // Linker-script symbols: only their addresses are used.
    info.kernel_image = (
        PhysAddr::new(core::ptr::addr_of!(__kernel_phys_start) as u64),
        PhysAddr::new(core::ptr::addr_of!(__kernel_phys_end) as u64),
    );
    read_start_info(info, u64::from(start_info));
    // SAFETY: tsumugi_main is the kernel's entry, defined exactly once by the kernel binary.
    unsafe { tsumugi_main(info) }
}

/// Copies what `hvm_start_info` says into `info`. A missing or malformed record leaves the
/// fields empty; the kernel then reports that it found no memory.
fn read_start_info(info: &mut BootInfo, paddr: u64) {
    if !identity_mapped(paddr, core::mem::size_of::<HvmStartInfo>() as u64) {
        return;
    }
    // SAFETY: checked to be identity-mapped; the firmware wrote a start_info there.
    let si: HvmStartInfo = unsafe { read_phys(paddr) };
    if si.magic != HVM_START_MAGIC {
        return;
    }
    if si.cmdline_paddr != 0 {
        let mut buf = [0u8; crate::bootinfo::MAX_CMDLINE + 1];
        let mut len = 0;
        while len < buf.len() && identity_mapped(si.cmdline_paddr + len as u64, 1) {
            // SAFETY: identity-mapped byte of the NUL-terminated command line.
            let b: u8 = unsafe { read_phys(si.cmdline_paddr + len as u64) };
            if b == 0 {
                break;
            }
            buf[len] = b;
            len += 1;
        }
        info.set_cmdline(&buf[..len]);
    }
    if si.rsdp_paddr != 0 {
        info.acpi_rsdp = PhysAddr::try_new(si.rsdp_paddr).ok();
    }
    if si.nr_modules > 0 && identity_mapped(si.modlist_paddr, 32) {
        // SAFETY: identity-mapped first module entry.
        let m: HvmModlistEntry = unsafe { read_phys(si.modlist_paddr) };
        if m.size > 0 {
            if let (Ok(start), Ok(end)) = (PhysAddr::try_new(m.paddr), PhysAddr::try_new(m.paddr + m.size)) {
                info.initrd = Some((start, end));
            }
        }
    }
    if si.version >= 1 {
        let entry_size = core::mem::size_of::<HvmMemmapEntry>() as u64;
        for i in 0..u64::from(si.memmap_entries) {
            let at = si.memmap_paddr + i * entry_size;
            if !identity_mapped(at, entry_size) {
                break;
            }
            // SAFETY: identity-mapped memory-map entry.
            let e: HvmMemmapEntry = unsafe { read_phys(at) };
            let kind = match e.kind {
                E820_RAM => MemoryKind::Usable,
                E820_ACPI => MemoryKind::AcpiReclaimable,
                E820_NVS => MemoryKind::AcpiNvs,
                E820_UNUSABLE => MemoryKind::Unusable,
                _ => MemoryKind::Reserved,
            };
            let (Ok(start), Ok(end)) = (PhysAddr::try_new(e.addr), PhysAddr::try_new(e.addr.saturating_add(e.size))) else {
                continue;
            };
            info.push_memory(MemoryRange { start, end, kind });
        }
    }
}
