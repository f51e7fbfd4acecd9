//! Starting the application processors: a real-mode trampoline copied to a low page, entered
//! by INIT-SIPI-SIPI, that switches the CPU to long mode on the kernel's page table and jumps to
//! the kernel's AP entry with its own stack.
//!
//! Must be assembly: an AP starts in 16-bit real mode at a physical page address.

use core::arch::global_asm;

use crate::addr::{Frame, PhysAddr};
use crate::bootinfo::BootInfo;

/// Physical page the trampoline is copied to (below 1 MiB, page-aligned, in low RAM the kernel
/// never hands out).
pub const TRAMPOLINE_PAGE: u64 = 0x8000;

/// What the trampoline needs, written at [`Params`]'s offset in the copied page before each AP
/// is started.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// Physical address of the kernel's root table (below 4 GiB).
    pub cr3: u64,
    /// Top of the AP's kernel stack.
    pub stack_top: u64,
    /// The kernel's AP entry: `extern "C" fn(arg: usize) -> !`.
    pub entry: u64,
    /// Its argument (the CPU index).
    pub arg: u64,
}

extern "C" {
    static ap_trampoline_start: u8;
    static ap_trampoline_end: u8;
    static ap_trampoline_params: u8;
}

global_asm!(
    r#"
    .section .rodata.ap_trampoline, "a"
    .set TRAMP, 0x8000
    .global ap_trampoline_start
    .global ap_trampoline_end
    .global ap_trampoline_params
    .code16
ap_trampoline_start:
    cli
    cld
    xor %ax, %ax
    mov %ax, %ds
    lgdtl TRAMP + (ap_gdt_ptr - ap_trampoline_start)
    mov %cr0, %eax
    or $1, %eax
    mov %eax, %cr0
    ljmpl $0x08, $(TRAMP + (ap_pm32 - ap_trampoline_start))

    .code32
ap_pm32:
    mov $0x10, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    mov %cr4, %eax
    or $((1 << 5) | (1 << 7)), %eax          /* PAE | PGE */
    mov %eax, %cr4
    mov TRAMP + (ap_trampoline_params - ap_trampoline_start), %eax
    mov %eax, %cr3
    mov $0xC0000080, %ecx
    rdmsr
    or $((1 << 0) | (1 << 8) | (1 << 11)), %eax   /* SCE | LME | NXE */
    wrmsr
    mov %cr0, %eax
    or $((1 << 31) | (1 << 16)), %eax        /* PG | WP */
    mov %eax, %cr0
    ljmp $0x18, $(TRAMP + (ap_lm64 - ap_trampoline_start))

    .code64
ap_lm64:
    mov $0x10, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    mov TRAMP + (ap_trampoline_params - ap_trampoline_start) + 8, %rsp
    mov TRAMP + (ap_trampoline_params - ap_trampoline_start) + 24, %rdi
    mov TRAMP + (ap_trampoline_params - ap_trampoline_start) + 16, %rax
    xor %ebp, %ebp
    call *%rax
    ud2

    .balign 16
ap_gdt:
    .quad 0
    .quad 0x00cf9a000000ffff    /* 0x08: 32-bit code */
    .quad 0x00cf92000000ffff    /* 0x10: data */
    .quad 0x00af9a000000ffff    /* 0x18: 64-bit code */
ap_gdt_end:
ap_gdt_ptr:
    .word ap_gdt_end - ap_gdt - 1
    .long TRAMP + (ap_gdt - ap_trampoline_start)
    .balign 8
ap_trampoline_params:
    .quad 0, 0, 0, 0
ap_trampoline_end:
    "#,
    options(att_syntax)
);

const _: () = assert!(TRAMPOLINE_PAGE == 0x8000, "the assembly hard-codes TRAMP");

/// Code that must sit at a fixed physical page, identity-mapped, while other CPUs start.
pub struct Trampoline {
    /// The page it must be copied to.
    pub page: PhysAddr,
    /// Its bytes.
    pub code: &'static [u8],
}

/// How to start one CPU.
pub struct StartParams {
    /// The kernel's root table (loaded by the new CPU).
    pub root: Frame,
    /// Top of the CPU's first kernel stack.
    pub stack_top: u64,
    /// Where it enters the kernel, with `arg`.
    pub entry: extern "C" fn(usize) -> !,
    /// The entry's argument (the CPU index).
    pub arg: usize,
}

/// The real-mode trampoline of x86_64.
pub fn trampoline() -> Option<Trampoline> {
    let start = core::ptr::addr_of!(ap_trampoline_start);
    let end = core::ptr::addr_of!(ap_trampoline_end) as usize;
    // SAFETY: both symbols delimit the trampoline in .rodata.
    let code = unsafe { core::slice::from_raw_parts(start, end - start as usize) };
    Some(Trampoline { page: PhysAddr::new(TRAMPOLINE_PAGE), code })
}

/// Calls `found(hw_id)` for every CPU the firmware lists (ACPI MADT), the boot CPU included.
pub fn for_each_cpu(info: &BootInfo, read_phys: &dyn Fn(u64, &mut [u8]), found: &mut dyn FnMut(u32)) -> usize {
    match info.acpi_rsdp {
        Some(rsdp) => super::acpi::for_each_cpu(rsdp.as_u64(), read_phys, found),
        None => 0,
    }
}

/// Starts the CPU with local APIC id `hw_id`: writes `params` into the trampoline (through
/// `write_phys`, at its page) and sends INIT-SIPI-SIPI.
pub fn start_cpu(hw_id: u32, params: &StartParams, write_phys: &dyn Fn(u64, &[u8])) {
    let offset = core::ptr::addr_of!(ap_trampoline_params) as u64 - core::ptr::addr_of!(ap_trampoline_start) as u64;
    let p = Params {
        cr3: params.root.start().as_u64(),
        stack_top: params.stack_top,
        entry: params.entry as usize as u64,
        arg: params.arg as u64,
    };
    let words = [p.cr3, p.stack_top, p.entry, p.arg];
    let mut bytes = [0u8; 32];
    for (i, w) in words.iter().enumerate() {
        bytes[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
    write_phys(TRAMPOLINE_PAGE + offset, &bytes);
    super::interrupts::start_cpu(hw_id, (TRAMPOLINE_PAGE >> 12) as u8, &super::timer::delay_us);
}

/// Everything a newly started CPU needs from the port before it can run threads: control
/// registers, GDT/TSS/GS, IDT and syscall MSRs, its local APIC and timer tick.
pub fn init_this_cpu(index: usize, tick_hz: u64) {
    let features = super::cpu::init_other_cpu(index);
    super::tlb::enable_tags_on_this_cpu();
    super::fpu::init_this_cpu(&features);
    super::pmu::init_this_cpu();
    super::trap::load_on_this_cpu();
    super::interrupts::enable_local_apic();
    super::timer::start_periodic(tick_hz);
}
