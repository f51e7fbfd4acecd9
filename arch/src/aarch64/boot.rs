//! aarch64 boot: the Linux arm64 Image header and entry, the drop from EL2 to EL1, the boot
//! translation tables, and the reading of the device tree into [`BootInfo`] and [`Platform`].
//!
//! QEMU 7.2 (`-machine virt`, measured) treats an ELF `-kernel` as a bare-metal image: it
//! jumps to the entry with x0 = 0, does **not** load `-initrd` at all, and puts the device tree
//! at the start of RAM (0x4000_0000) only if the ELF leaves room below itself. A `-kernel` file
//! that is not ELF is booted with the Linux arm64 protocol instead (Documentation/arm64/
//! booting.rst): it is loaded at RAM base + `text_offset` from the header below, the initrd is
//! loaded and named in `/chosen` (`linux,initrd-start`/`-end`), `/chosen/bootargs` holds
//! `-append`, and the kernel is entered with MMU off, x0 = physical address of the device tree.
//! So `xtask` passes the flat image of our ELF (`tsumugi.img`), and the ELF stays for gdb.
//! Entered directly as an ELF, the kernel still boots (device tree found at the start of RAM)
//! but has no boot archive.
//!
//! The entry must be assembly: the MMU is off, there is no stack, and until the boot tables
//! are on, the code runs at its physical address while linked at `KERNEL_BASE + physical`
//! (every address it takes is PC-relative, so it works at either).

use crate::addr::PhysAddr;
use crate::bootinfo::{BootInfo, MemoryKind, MemoryRange};

use super::layout::KERNEL_BASE;
use super::paging::{bits, ATTR_DEVICE, ATTR_NORMAL, MAIR};

/// Size of the boot CPU's stack (in .bss).
pub const BOOT_STACK_SIZE: usize = 64 * 1024;
/// Where the image asks to be loaded above the 2 MiB-aligned base of RAM (the header's
/// `text_offset`; `linker.ld` links it at 0x4000_0000 + this).
pub const TEXT_OFFSET: u64 = 0x20_0000;
/// Header flags: little-endian kernel, 4 KiB pages, placed 2 MiB-aligned near the RAM base.
const IMAGE_FLAGS: u64 = 0b010;
/// `ARM\x64`, the header's magic.
const IMAGE_MAGIC: u32 = 0x644d_5241;
/// Physical memory identity-mapped by the boot tables, in GiB (the first GiB is devices).
const IDENTITY_GIB: u64 = 4;
/// Physical address QEMU virt puts the device tree at when the kernel is booted as an ELF.
const VIRT_RAM_BASE: u64 = 0x4000_0000;
/// Physical address of QEMU virt's PL011, used if there is no device tree to say so.
const VIRT_UART: u64 = 0x0900_0000;
/// The virtual timer's PPI on every GIC binding (INTID 27), used if the device tree is silent.
const DEFAULT_TIMER_INTID: u32 = 27;
/// Flattened device tree magic.
const FDT_MAGIC: u32 = 0xd00d_feed;

/// `SCTLR_EL1` bits that are RES1 in Armv8.0 (EOS, TSCXT, EIS, SPAN, nTLSMD, LSMAOE).
const SCTLR_RES1: u64 = (1 << 11) | (1 << 20) | (1 << 22) | (1 << 23) | (1 << 28) | (1 << 29);
/// `SCTLR_EL1` with the MMU and caches on: M, C, SA, SA0, I, DZE, UCT, nTWI, nTWE, UCI. A (bit 1,
/// alignment checking) stays clear: user programs are compiled without strict alignment and
/// make unaligned accesses to Normal memory (`xtask`'s `Arch::user_rustflags`).
const SCTLR_MMU_ON: u64 = SCTLR_RES1
    | (1 << 0)
    | (1 << 2)
    | (1 << 3)
    | (1 << 4)
    | (1 << 12)
    | (1 << 14)
    | (1 << 15)
    | (1 << 16)
    | (1 << 18)
    | (1 << 26);
/// `TCR_EL1` without IPS and AS (filled from `ID_AA64MMFR0_EL1` at boot): 48-bit halves
/// (T0SZ = T1SZ = 16), 4 KiB granules, write-back inner-shareable walks.
const TCR: u64 = 16 | (0b01 << 8) | (0b01 << 10) | (0b11 << 12) | (16 << 16) | (0b01 << 24) | (0b01 << 26) | (0b11 << 28) | (0b10 << 30);
/// Boot block descriptor of normal memory, executable at EL1 only.
const BOOT_NORMAL_BLOCK: u64 = bits::VALID | bits::ACCESSED | bits::INNER_SHAREABLE | bits::UXN | (ATTR_NORMAL << bits::ATTR_INDEX_SHIFT);
/// Boot block descriptor of device memory.
const BOOT_DEVICE_BLOCK: u64 = bits::VALID | bits::ACCESSED | bits::PXN | bits::UXN | (ATTR_DEVICE << bits::ATTR_INDEX_SHIFT);
/// `HCR_EL2.RW`: EL1 is AArch64.
const HCR_EL2_RW: u64 = 1 << 31;
/// `SPSR_EL2` for the drop to EL1: EL1h with D, A, I, F masked.
const SPSR_EL1H_MASKED: u64 = 0x3c5;
/// `CPACR_EL1` every CPU starts with: FP/SIMD, SVE and SME trapped at EL1 and EL0 (the kernel
/// uses none; `fpu.rs` turns FP/SIMD access on for the thread that owns the registers).
const CPACR_BOOT: u64 = 0;

/// What a secondary CPU reads at `secondary_entry`, which PSCI `CPU_ON` enters with this
/// block's physical address as its context id (`smp::start_cpu` fills it).
#[repr(C, align(64))]
pub(crate) struct SecondaryStart {
    /// Physical address of the kernel's root table, for `TTBR1_EL1`.
    pub root: u64,
    /// Top of the CPU's first kernel stack.
    pub stack_top: u64,
    /// The kernel's entry, `extern "C" fn(arg) -> !`.
    pub entry: u64,
    /// Its argument.
    pub arg: u64,
}

// The assembly loads the fields in pairs.
const _: () = assert!(core::mem::offset_of!(SecondaryStart, stack_top) == core::mem::offset_of!(SecondaryStart, root) + 8);
const _: () = assert!(core::mem::offset_of!(SecondaryStart, arg) == core::mem::offset_of!(SecondaryStart, entry) + 8);

core::arch::global_asm!(
    r#"
    /* The Linux arm64 Image header: QEMU finds the magic and boots us as a Linux kernel. */
    .section .text.head, "ax"
    .global _start
_start:
    b       primary_entry                   /* code0 */
    .long   0                               /* code1 */
    .quad   {text_offset}                   /* text_offset */
    .quad   __kernel_image_size             /* image_size: the whole image, .bss included */
    .quad   {flags}                         /* flags */
    .quad   0, 0, 0                         /* res2, res3, res4 */
    .long   {magic}                         /* magic "ARM\x64" */
    .long   0                               /* res5 */

    .section .text.boot, "ax"
primary_entry:
    mov     x19, x0                         /* device tree (physical), kept in a callee-saved reg */
    msr     daifset, #0xf                   /* no interrupts until the kernel asks */
    bl      enter_el1
    bl      el1_setup

    /* Zero .bss (boot tables and boot stack included). Physical addresses: PC-relative. */
    adrp    x0, __bss_start
    add     x0, x0, :lo12:__bss_start
    adrp    x1, __bss_end
    add     x1, x1, :lo12:__bss_end
2:  cmp     x0, x1
    b.hs    3f
    stp     xzr, xzr, [x0], #16
    b       2b
3:
    /* Identity map for TTBR0: 0..1 GiB devices, 1..IDENTITY_GIB GiB normal memory, all in
       1 GiB blocks. The boot code runs from it until it jumps to the higher half, and the
       kernel reads the device tree and builds its tables through it. Secondary CPUs turn
       their MMU on through it too, so it is never changed after this. */
    adrp    x0, boot_identity_l0
    adrp    x1, boot_identity_l1
    orr     x2, x1, #3
    str     x2, [x0]
    ldr     x2, ={device_block}
    str     x2, [x1]
    ldr     x2, ={normal_block}
    mov     x3, #1
4:  orr     x4, x2, x3, lsl #30
    str     x4, [x1, x3, lsl #3]
    add     x3, x3, #1
    cmp     x3, #{identity_gib}
    b.lo    4b

    /* Device window for TTBR0 once the kernel's own table is in TTBR1: the first GiB only. */
    adrp    x0, boot_device_l0
    adrp    x1, boot_device_l1
    orr     x2, x1, #3
    str     x2, [x0]
    ldr     x2, ={device_block}
    str     x2, [x1]

    /* Higher half for TTBR1: the 1 GiB block holding the image, at KERNEL_BASE + physical. */
    ldr     x5, =__text_start               /* link-time (virtual) address */
    adrp    x6, __text_start                /* where we run (physical) */
    adrp    x0, boot_kernel_l0
    adrp    x1, boot_kernel_l1
    orr     x2, x1, #3
    ubfx    x3, x5, #39, #9
    str     x2, [x0, x3, lsl #3]
    ubfx    x3, x5, #30, #9
    and     x4, x6, #0xffffffffc0000000
    ldr     x2, ={normal_block}
    orr     x4, x4, x2
    str     x4, [x1, x3, lsl #3]

    adrp    x0, boot_identity_l0
    msr     ttbr0_el1, x0
    adrp    x0, boot_kernel_l0
    msr     ttbr1_el1, x0
    bl      mmu_on

    /* Continue in the higher half. */
    ldr     x0, =high_entry
    br      x0

    /* secondary_entry(start: x0 = physical address of a SecondaryStart), where PSCI CPU_ON
       starts another CPU (MMU off, at EL2 or EL1): the boot CPU's path without the one-time
       work, with the kernel's own table in TTBR1 at once. The start block is read before the
       MMU is on (device accesses, which is why the boot CPU cleaned it to memory). */
    .global secondary_entry
secondary_entry:
    mov     x19, x0
    msr     daifset, #0xf
    bl      enter_el1
    bl      el1_setup
    ldp     x20, x21, [x19, #{start_root}]  /* kernel root, stack top */
    ldp     x22, x23, [x19, #{start_entry}] /* entry, its argument */
    adrp    x0, boot_identity_l0
    msr     ttbr0_el1, x0
    msr     ttbr1_el1, x20
    bl      mmu_on
    ldr     x0, =secondary_high
    br      x0

    /* enter_el1(): returns to the caller at EL1 (x30 physical, no stack). From EL2 it sets up
       what EL1 needs and returns by `eret`; at any other level it parks the CPU. Uses x0. */
enter_el1:
    mrs     x0, CurrentEL
    ubfx    x0, x0, #2, #2
    cmp     x0, #1
    b.eq    9f
    cmp     x0, #2
    b.ne    park

    /* EL2: EL1 runs AArch64, may read both counters, no EL2 FP/SIMD traps (CPACR_EL1
       decides), no virtual offset. */
    ldr     x0, ={hcr_rw}
    msr     hcr_el2, x0
    mrs     x0, cnthctl_el2
    orr     x0, x0, #3                      /* EL1PCTEN | EL1PCEN */
    msr     cnthctl_el2, x0
    msr     cntvoff_el2, xzr
    mov     x0, #0x32ff                     /* CPTR_EL2: RES1 bits, no traps */
    msr     cptr_el2, x0
    msr     hstr_el2, xzr
    /* With a GICv3 CPU interface, let EL1 use its system registers (ICC_SRE_EL2). */
    mrs     x0, id_aa64pfr0_el1
    ubfx    x0, x0, #24, #4
    cbz     x0, 1f
    mrs     x0, S3_4_C12_C9_5
    orr     x0, x0, #0xf                    /* SRE | DFB | DIB | Enable */
    msr     S3_4_C12_C9_5, x0
    isb
1:  mov     x0, #{spsr_el1h}
    msr     spsr_el2, x0
    msr     elr_el2, x30
    eret
9:  ret

    /* el1_setup(): known EL1 state with the MMU off: FP/SIMD trapped, SCTLR, no per-CPU block
       yet, memory attributes and translation control; IPS from the CPU (at most 48 bits, what
       the descriptors hold), 16-bit ASIDs when the CPU has them. Uses x0..x3. */
el1_setup:
    mov     x0, #{cpacr}
    msr     cpacr_el1, x0
    ldr     x0, ={sctlr_res1}               /* MMU and caches off, known state */
    msr     sctlr_el1, x0
    msr     tpidr_el1, xzr                  /* cpu::cpu_index reads 0 until cpu::init_cpu */
    ldr     x0, ={mair}
    msr     mair_el1, x0
    ldr     x0, ={tcr}
    mrs     x1, id_aa64mmfr0_el1
    ubfx    x2, x1, #0, #4
    mov     x3, #5
    cmp     x2, x3
    csel    x2, x3, x2, hi
    bfi     x0, x2, #32, #3
    ubfx    x2, x1, #4, #4
    cmp     x2, #2
    b.ne    5f
    orr     x0, x0, #(1 << 36)
5:  msr     tcr_el1, x0
    isb
    ret

    /* mmu_on(): with TTBR0 (an identity map of this code) and TTBR1 loaded, drops every TLB
       entry and turns the MMU and caches on; returns through the identity map. */
mmu_on:
    isb
    tlbi    vmalle1
    dsb     nsh
    isb
    ldr     x0, ={sctlr_on}
    msr     sctlr_el1, x0
    isb
    ic      iallu
    dsb     nsh
    isb
    ret

park:
    wfe
    b       park

    .section .text, "ax"
high_entry:
    ldr     x0, =aarch64_vectors
    msr     vbar_el1, x0
    isb
    ldr     x0, =boot_stack_top
    mov     sp, x0
    mov     x29, xzr                        /* ends frame-pointer backtraces */
    mov     x30, xzr
    mov     x0, x19
    bl      {entry}
    b       park

    /* A secondary CPU in the higher half: x21 = stack top, x22 = entry, x23 = its argument.
       It leaves the identity map for good (TTBR0 walks off, as `tlb::load_root_tagged` leaves
       them for the kernel's root) and drops its global entries, which cover user addresses. */
secondary_high:
    ldr     x0, =aarch64_vectors
    msr     vbar_el1, x0
    mov     sp, x21
    mrs     x0, tcr_el1
    orr     x0, x0, #{tcr_epd0}
    msr     tcr_el1, x0
    msr     ttbr0_el1, xzr
    isb
    tlbi    vmalle1
    dsb     nsh
    isb
    mov     x29, xzr                        /* ends frame-pointer backtraces */
    mov     x30, xzr
    mov     x0, x23
    blr     x22
    b       park

    /* switch_ttbr1(root: x0, empty: x1), called at its physical address through the identity
       map: TTBR1 goes through an empty table (with a full flush) to the new root, so no TLB
       holds an old and a new translation of one address at once. Touches no memory. */
    .global switch_ttbr1
switch_ttbr1:
    msr     ttbr1_el1, x1
    isb
    tlbi    vmalle1
    dsb     nsh
    isb
    msr     ttbr1_el1, x0
    isb
    ret

    .section .bss.boot_tables, "aw", %nobits
    .balign 4096
boot_identity_l0:   .skip 4096
boot_identity_l1:   .skip 4096
    .global boot_device_l0
boot_device_l0:     .skip 4096
boot_device_l1:     .skip 4096
boot_kernel_l0:     .skip 4096
boot_kernel_l1:     .skip 4096
    .global boot_empty_table
boot_empty_table:   .skip 4096
    "#,
    text_offset = const TEXT_OFFSET,
    flags = const IMAGE_FLAGS,
    magic = const IMAGE_MAGIC,
    hcr_rw = const HCR_EL2_RW,
    spsr_el1h = const SPSR_EL1H_MASKED,
    sctlr_res1 = const SCTLR_RES1,
    sctlr_on = const SCTLR_MMU_ON,
    device_block = const BOOT_DEVICE_BLOCK,
    normal_block = const BOOT_NORMAL_BLOCK,
    identity_gib = const IDENTITY_GIB,
    mair = const MAIR,
    tcr = const TCR,
    tcr_epd0 = const super::tlb::TCR_EPD0,
    cpacr = const CPACR_BOOT,
    start_root = const core::mem::offset_of!(SecondaryStart, root),
    start_entry = const core::mem::offset_of!(SecondaryStart, entry),
    entry = sym aarch64_boot_entry,
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

extern "C" {
    static __text_start: u8;
    static __data_end: u8;
    static boot_device_l0: u8;
    static boot_empty_table: u8;
}

extern "Rust" {
    /// The kernel's entry point, defined by the kernel binary.
    fn tsumugi_main(info: &'static BootInfo) -> !;
}

/// The physical address the image is loaded at for a kernel virtual address (the image is
/// mapped at `KERNEL_BASE + physical`).
pub fn physical_alias(va: u64) -> u64 {
    va - KERNEL_BASE
}

/// Physical addresses of the boot device-window table and of an empty table, for
/// `tlb::load_kernel_root`.
pub(crate) fn boot_tables_for_switch() -> (u64, u64) {
    // Only the addresses of these assembly symbols are taken.
    (physical_alias(core::ptr::addr_of!(boot_device_l0) as u64), physical_alias(core::ptr::addr_of!(boot_empty_table) as u64))
}

/// The interrupt controller the device tree describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gic {
    /// None found.
    None,
    /// GICv2 (memory-mapped CPU interface), not driven by this port.
    V2,
    /// GICv3: distributor and redistributor regions, (physical base, size).
    V3 {
        /// `GICD`.
        distributor: (u64, u64),
        /// The `GICR` frames of all CPUs.
        redistributors: (u64, u64),
    },
}

/// How PSCI calls reach the firmware (QEMU virt without EL2/EL3: `hvc`, emulated by QEMU).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PsciConduit {
    /// No PSCI.
    None,
    /// `hvc #0`.
    Hvc,
    /// `smc #0`.
    Smc,
}

/// The devices the port drives, from the device tree (QEMU virt's values when it is silent).
#[derive(Clone, Copy, Debug)]
pub struct Platform {
    /// Physical base of the PL011 console.
    pub uart: u64,
    /// The interrupt controller.
    pub gic: Gic,
    /// INTID of the EL1 virtual timer.
    pub timer_intid: u32,
    /// PSCI conduit (`CPU_ON` for secondary CPUs, `SYSTEM_OFF`).
    pub psci: PsciConduit,
    /// Number of CPUs listed.
    pub cpus: usize,
    /// Hardware ids (`cpu::hw_id` form: packed MPIDR affinity) of the first
    /// [`super::smp::MAX_CPUS`] CPUs listed and enabled, in device-tree order.
    pub cpu_ids: [u32; super::smp::MAX_CPUS],
    /// How many entries of `cpu_ids` are filled.
    pub listed_cpus: usize,
}

static mut PLATFORM: Platform = Platform {
    uart: VIRT_UART,
    gic: Gic::None,
    timer_intid: DEFAULT_TIMER_INTID,
    psci: PsciConduit::None,
    cpus: 1,
    cpu_ids: [0; super::smp::MAX_CPUS],
    listed_cpus: 0,
};

/// Boot record filled once by [`aarch64_boot_entry`] before anything else runs.
static mut BOOT_INFO: BootInfo = BootInfo::empty();

/// What the device tree said about the machine (written once at boot, before the kernel runs).
pub fn platform() -> &'static Platform {
    // SAFETY: written only by aarch64_boot_entry, before the kernel (and any other reader) runs.
    unsafe { &*core::ptr::addr_of!(PLATFORM) }
}

/// First Rust code: runs on the boot stack with the boot tables (identity map in TTBR0, the
/// image in TTBR1). `dtb` is x0 at entry.
extern "C" fn aarch64_boot_entry(dtb: u64) -> ! {
    // SAFETY: single-threaded boot; nothing else refers to BOOT_INFO or PLATFORM yet.
    let (info, platform) = unsafe { (&mut *core::ptr::addr_of_mut!(BOOT_INFO), &mut *core::ptr::addr_of_mut!(PLATFORM)) };
    // Linker-script symbols: only their addresses are used.
    info.kernel_image = (
        PhysAddr::new(physical_alias(core::ptr::addr_of!(__text_start) as u64)),
        PhysAddr::new(physical_alias(core::ptr::addr_of!(__data_end) as u64)),
    );
    info.protocol = if has_fdt_magic(dtb) {
        read_device_tree(info, platform, dtb);
        "the arm64 Image protocol (device tree in x0)"
    } else if has_fdt_magic(VIRT_RAM_BASE) {
        read_device_tree(info, platform, VIRT_RAM_BASE);
        "an ELF entry (device tree at the start of RAM, no boot archive)"
    } else {
        "an ELF entry without a device tree"
    };
    // SAFETY: tsumugi_main is the kernel's entry, defined exactly once by the kernel binary.
    unsafe { tsumugi_main(info) }
}

/// Whether physical memory at `pa` starts with the device-tree magic. Only normal memory of
/// the boot identity map (1..IDENTITY_GIB GiB) is looked at: the first GiB is mapped as device
/// memory, where the parser's unaligned reads would fault.
fn has_fdt_magic(pa: u64) -> bool {
    if pa == 0 || pa % 8 != 0 || pa >= IDENTITY_GIB << 30 || pa < 1 << 30 {
        return false;
    }
    // SAFETY: `pa` lies in RAM, identity-mapped as normal memory by the boot tables.
    let word = unsafe { core::ptr::read_volatile(pa as *const u32) };
    u32::from_be(word) == FDT_MAGIC
}

/// Most reserved ranges the device tree may list that are honoured.
const MAX_RESERVED: usize = 16;

/// Copies memory, command line, boot archive and devices from the device tree at `pa`.
fn read_device_tree(info: &mut BootInfo, platform: &mut Platform, pa: u64) {
    // SAFETY: `pa` holds a device-tree header (magic checked) in identity-mapped RAM, and the
    // blob is not written while we read it.
    let Ok(fdt) = (unsafe { fdt::Fdt::from_ptr(pa as *const u8) }) else {
        return;
    };

    let mut reserved = [(0u64, 0u64); MAX_RESERVED];
    let mut n_reserved = 0;
    let mut reserve = |start: u64, size: u64| {
        if n_reserved < MAX_RESERVED && size > 0 {
            reserved[n_reserved] = (start, start.saturating_add(size));
            n_reserved += 1;
        }
    };
    for r in fdt.memory_reservations() {
        reserve(r.address() as u64, r.size() as u64);
    }
    if let Some(node) = fdt.find_node("/reserved-memory") {
        for child in node.children() {
            for region in child.reg().into_iter().flatten() {
                reserve(region.starting_address as u64, region.size.unwrap_or(0) as u64);
            }
        }
    }
    let reserved = &reserved[..n_reserved];
    for (start, end) in reserved {
        push_range(info, *start, *end, MemoryKind::Reserved);
    }

    for node in fdt.all_nodes() {
        let is_memory = node.property("device_type").and_then(|p| p.as_str()) == Some("memory");
        if !is_memory {
            continue;
        }
        for region in node.reg().into_iter().flatten() {
            let start = region.starting_address as u64;
            let end = start.saturating_add(region.size.unwrap_or(0) as u64);
            push_usable_around(info, start, end, reserved);
        }
    }

    if let Some(chosen) = fdt.find_node("/chosen") {
        if let Some(args) = chosen.property("bootargs") {
            let bytes = args.value.split(|&b| b == 0).next().unwrap_or(&[]);
            info.set_cmdline(bytes);
        }
        let start = chosen.property("linux,initrd-start").and_then(|p| p.as_usize());
        let end = chosen.property("linux,initrd-end").and_then(|p| p.as_usize());
        if let (Some(start), Some(end)) = (start, end) {
            if end > start {
                if let (Ok(s), Ok(e)) = (PhysAddr::try_new(start as u64), PhysAddr::try_new(end as u64)) {
                    info.initrd = Some((s, e));
                }
            }
        }
        let stdout = chosen
            .property("stdout-path")
            .and_then(|p| p.as_str())
            .map(|path| path.split(':').next().unwrap_or(path))
            .and_then(|path| fdt.find_node(path));
        let uart = stdout
            .filter(|n| n.compatible().is_some_and(|c| c.all().any(|c| c == "arm,pl011")))
            .or_else(|| fdt.find_compatible(&["arm,pl011"]));
        if let Some(base) = uart.and_then(|n| n.reg()).and_then(|mut r| r.next()) {
            platform.uart = base.starting_address as u64;
        }
    }

    if let Some(gic) = fdt.find_compatible(&["arm,gic-v3"]) {
        if let Some(mut regs) = gic.reg() {
            let mut next = || regs.next().map(|r| (r.starting_address as u64, r.size.unwrap_or(0) as u64));
            if let (Some(distributor), Some(redistributors)) = (next(), next()) {
                platform.gic = Gic::V3 { distributor, redistributors };
            }
        }
    } else if fdt.find_compatible(&["arm,cortex-a15-gic", "arm,gic-400"]).is_some() {
        platform.gic = Gic::V2;
    }

    if let Some(timer) = fdt.find_compatible(&["arm,armv8-timer", "arm,armv7-timer"]) {
        // `interrupts` = <type number flags> for the secure physical, non-secure physical,
        // virtual and hypervisor timers; type 1 is a PPI (INTID = 16 + number).
        if let Some(prop) = timer.property("interrupts") {
            let cell = |i: usize| prop.value.get(i * 4..i * 4 + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
            const VIRTUAL_TIMER: usize = 2;
            const CELLS: usize = 3;
            const PPI: u32 = 1;
            if let (Some(PPI), Some(number)) = (cell(VIRTUAL_TIMER * CELLS), cell(VIRTUAL_TIMER * CELLS + 1)) {
                platform.timer_intid = 16 + number;
            }
        }
    }

    if let Some(psci) = fdt.find_compatible(&["arm,psci-1.0", "arm,psci-0.2", "arm,psci"]) {
        platform.psci = match psci.property("method").and_then(|p| p.as_str()) {
            Some("hvc") => PsciConduit::Hvc,
            Some("smc") => PsciConduit::Smc,
            _ => PsciConduit::None,
        };
    }
    if let Some(cpus) = fdt.find_node("/cpus") {
        let is_cpu = |c: &fdt::node::FdtNode| c.name.split('@').next() == Some("cpu");
        platform.cpus = cpus.children().filter(is_cpu).count().max(1);
        // `reg` of a cpu node is its MPIDR affinity (Aff3 in bits 39:32 with two address
        // cells, Aff2..Aff0 in bits 23:0); a node with `status` other than "okay" is absent.
        let enabled = |c: &fdt::node::FdtNode| c.property("status").and_then(|p| p.as_str()).is_none_or(|s| s == "okay" || s == "ok");
        for cpu in cpus.children().filter(is_cpu).filter(enabled) {
            let Some(mpidr) = cpu.reg().and_then(|mut r| r.next()).map(|r| r.starting_address as u64) else { continue };
            if platform.listed_cpus < platform.cpu_ids.len() {
                platform.cpu_ids[platform.listed_cpus] = hw_id_of_mpidr(mpidr);
                platform.listed_cpus += 1;
            }
        }
    }
}

/// The packed affinity (`cpu::hw_id` form, Aff3.Aff2.Aff1.Aff0) of an MPIDR value.
pub(crate) fn hw_id_of_mpidr(mpidr: u64) -> u32 {
    ((((mpidr >> 32) & 0xff) << 24) | (mpidr & 0xff_ffff)) as u32
}

/// The MPIDR affinity fields (Aff3 in bits 39:32) of a packed hardware id, as PSCI takes them.
pub(crate) fn mpidr_of_hw_id(id: u32) -> u64 {
    (u64::from(id >> 24) << 32) | u64::from(id & 0xff_ffff)
}

/// Appends `[start, end)` to the memory map if it is valid.
fn push_range(info: &mut BootInfo, start: u64, end: u64, kind: MemoryKind) {
    if end <= start {
        return;
    }
    if let (Ok(start), Ok(end)) = (PhysAddr::try_new(start), PhysAddr::try_new(end)) {
        info.push_memory(MemoryRange { start, end, kind });
    }
}

/// Appends the parts of RAM `[start, end)` that no reserved range covers as usable memory.
fn push_usable_around(info: &mut BootInfo, start: u64, end: u64, reserved: &[(u64, u64)]) {
    let mut cursor = start;
    while cursor < end {
        // The first reserved range overlapping [cursor, end), if any.
        let hole = reserved.iter().filter(|(s, e)| *s < end && *e > cursor).min_by_key(|(s, _)| *s);
        match hole {
            Some(&(s, e)) => {
                push_range(info, cursor, s.max(cursor), MemoryKind::Usable);
                cursor = e;
            }
            None => {
                push_range(info, cursor, end, MemoryKind::Usable);
                break;
            }
        }
    }
}

/// PSCI function IDs (Arm DEN 0022, "Arm Power State Coordination Interface").
pub(crate) mod psci {
    /// `CPU_ON` (SMC64): target MPIDR, entry point (physical), context id (x0 at the entry).
    pub const CPU_ON: u64 = 0xc400_0003;
    /// `SYSTEM_OFF`.
    pub const SYSTEM_OFF: u64 = 0x8400_0008;
    /// Return codes.
    pub const SUCCESS: i64 = 0;
    pub const INVALID_PARAMETERS: i64 = -2;
    pub const ALREADY_ON: i64 = -4;
    pub const ON_PENDING: i64 = -5;
    pub const INTERNAL_FAILURE: i64 = -6;
    pub const INVALID_ADDRESS: i64 = -9;

    /// What a PSCI return code means.
    pub fn describe(code: i64) -> &'static str {
        match code {
            SUCCESS => "success",
            INVALID_PARAMETERS => "invalid parameters",
            ALREADY_ON => "already on",
            ON_PENDING => "already starting",
            INTERNAL_FAILURE => "internal failure",
            INVALID_ADDRESS => "invalid address",
            _ => "error",
        }
    }
}

/// Calls PSCI function `function` with up to three arguments through the conduit the device
/// tree names; `None` if there is none.
///
/// # Safety
/// The call must be one whose effect the caller accounts for (starting a CPU at an entry that
/// is ready for it, powering off).
pub(crate) unsafe fn psci_call(function: u64, a1: u64, a2: u64, a3: u64) -> Option<i64> {
    let ret: u64;
    // SAFETY: an SMC Calling Convention call: arguments in x0..x3, result in x0; the firmware
    // may change x0..x17 (SMCCC 1.0), which `clobber_abi("C")` covers. Its effect is the
    // caller's responsibility.
    unsafe {
        match platform().psci {
            PsciConduit::Hvc => core::arch::asm!("hvc #0", inout("x0") function => ret, inout("x1") a1 => _, inout("x2") a2 => _, inout("x3") a3 => _, clobber_abi("C"), options(nostack)),
            PsciConduit::Smc => core::arch::asm!("smc #0", inout("x0") function => ret, inout("x1") a1 => _, inout("x2") a2 => _, inout("x3") a3 => _, clobber_abi("C"), options(nostack)),
            PsciConduit::None => return None,
        }
    }
    Some(ret as i64)
}

/// PSCI `SYSTEM_OFF` through the conduit the device tree names; returns if there is none.
pub fn psci_system_off() {
    // SAFETY: powers the machine off; it does not return on success.
    unsafe { psci_call(psci::SYSTEM_OFF, 0, 0, 0) };
}
