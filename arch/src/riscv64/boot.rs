//! riscv64 boot: the entry OpenSBI jumps to, the boot page tables that take the image up to its
//! linked address, and the reading of the device tree into [`BootInfo`] and [`Platform`].
//!
//! OpenSBI (QEMU `-bios default`, measured with QEMU 7.2 / OpenSBI 1.1) enters `_start` in
//! S-mode at physical 0x8020_0000 with the MMU off, `a0` = hart id and `a1` = physical address of
//! the flattened device tree. The first steps must be assembly: there is no stack, and the code
//! runs at its physical address while it is linked 0xffff_ffff_0000_0000 higher, which only
//! PC-relative addressing (`lla`, `call`) tolerates.

use crate::addr::{PhysAddr, PAGE_SIZE};
use crate::bootinfo::{BootInfo, MemoryKind, MemoryRange, MAX_MEMORY_RANGES};

use super::layout::{KERNEL_BASE, PHYS_MAP};

/// Size of the boot hart's stack (in .bss).
pub const BOOT_STACK_SIZE: usize = 64 * 1024;
/// The device tree and boot tables reach physical memory below this (the boot page tables map
/// 0..4 GiB, identity and at `PHYS_MAP`).
const BOOT_MAP_LIMIT: u64 = 4 << 30;
/// Timer frequency assumed when the device tree gives none (QEMU virt's).
const DEFAULT_TIMEBASE_HZ: u64 = 10_000_000;

/// Boot page-table entry bits (privileged specification §4.3.1): a gigapage leaf that is valid,
/// readable, writable, executable, global, accessed and dirty.
const BOOT_LEAF: u64 = 0xef;
/// `satp.MODE` for Sv48, in place.
pub(super) const SATP_SV48: u64 = 9 << 60;

// The entry, the boot page tables, and the jump to the linked address.
//
// Boot page tables (Sv48): root[0] and root[256] (PHYS_MAP) point at one level-2 table whose
// first four entries are 1 GiB leaves for physical 0..4 GiB, so the code keeps running at its
// physical address once paging is on, and physical memory (RAM, the console) is reachable at
// PHYS_MAP + physical as it will be in the kernel's own table; root[511] points at a level-2
// table mapping KERNEL_BASE + 0..4 GiB to physical 0..4 GiB, where the image is linked. The
// kernel replaces these tables with its own as soon as it has a frame allocator.
core::arch::global_asm!(
    r#"
    .section .bss.boot_tables, "aw", @nobits
    .balign 4096
boot_root:      .skip 4096
boot_l2_low:    .skip 4096
boot_l2_high:   .skip 4096

    # Set by the first hart to reach _start. In .data, not .bss: that hart zeroes .bss.
    .section .data.boot_claimed, "aw"
    .balign 4
boot_claimed:   .word 0

    .section .text.boot, "ax"
    .global _start
_start:
    # Interrupts off, and park the hart on any trap until the real vector is installed.
    csrw sie, zero
    csrci sstatus, 0x2
    lla t0, boot_park
    csrw stvec, t0

    # Only the first hart here boots the kernel; a later one is a hart the kernel is starting
    # (smp.rs). OpenSBI 1.1's hart_start marks the hart START_PENDING before it stores the
    # start address, and the hart waiting for that state may read the old address, which is
    # this entry (QEMU with several vCPUs hits this now and then).
    lla t0, boot_claimed
    li t1, 1
    .option push
    .option arch, +a                    # global_asm! does not inherit the target's features
    amoswap.w.aqrl t1, t1, (t0)
    .option pop
    beqz t1, 1f
    j secondary_start
1:
    mv s1, a0                           # hart id
    mv s2, a1                           # device tree, physical

    # Zero .bss (boot tables, boot stack, per-CPU block). `lla` is PC-relative, so it gives
    # physical addresses while the code runs at its physical address.
    lla t0, __bss_start
    lla t1, __bss_end
1:  bgeu t0, t1, 2f
    sd zero, 0(t0)
    addi t0, t0, 8
    j 1b
2:
    # boot_l2_low[0..4]: 1 GiB leaves for physical 0, 1, 2, 3 GiB. A leaf's PPN field is
    # (address >> 12) << 10, so one GiB is 1 << 28 in place.
    lla t0, boot_l2_low
    li t1, {leaf}
    li t2, 1 << 28
    li t3, 4
3:  sd t1, 0(t0)
    add t1, t1, t2
    addi t0, t0, 8
    addi t3, t3, -1
    bnez t3, 3b

    # boot_l2_high[508..512]: the same four leaves, for KERNEL_BASE + 0..4 GiB
    # (508 * 8 = 4064 bytes in, added in two steps that fit an immediate).
    lla t0, boot_l2_high
    addi t0, t0, 2032
    addi t0, t0, 2032
    li t1, {leaf}
    li t3, 4
4:  sd t1, 0(t0)
    add t1, t1, t2
    addi t0, t0, 8
    addi t3, t3, -1
    bnez t3, 4b

    # Root entries are table pointers: PPN of the table in place, V only.
    lla t0, boot_root
    lla t1, boot_l2_low
    srli t1, t1, 12
    slli t1, t1, 10
    ori t1, t1, 1
    sd t1, 0(t0)                        # root[0]: identity
    li t2, 256 * 8
    add t2, t0, t2
    sd t1, 0(t2)                        # root[256]: PHYS_MAP
    lla t1, boot_l2_high
    srli t1, t1, 12
    slli t1, t1, 10
    ori t1, t1, 1
    li t2, 511 * 8
    add t2, t0, t2
    sd t1, 0(t2)                        # root[511]: the image

    # Turn on Sv48 (ASID 0). A hart without Sv48 ignores the whole write: read it back.
    srli t0, t0, 12
    li t1, {satp_sv48}
    or t0, t0, t1
    sfence.vma
    csrw satp, t0
    sfence.vma
    csrr t1, satp
    bne t0, t1, boot_no_sv48

    # Continue at the linked address: physical + KERNEL_BASE.
    lla t0, 5f
    li t1, {kernel_base}
    add t0, t0, t1
    jr t0
5:
    # From here `lla` gives linked (high) addresses.
    lla sp, boot_stack_top
    lla tp, BSP_PERCPU                  # the kernel's per-CPU pointer (cpu.rs)
    csrw sscratch, zero                 # "in the kernel" for the trap entry
    lla t0, trap_entry
    csrw stvec, t0                      # early traps are reported (trap.rs)
    mv s0, zero                         # ends frame-pointer backtraces
    mv ra, zero
    mv a0, s1
    mv a1, s2
    call {entry}
    j boot_park

    # No Sv48: say so on the SBI console (legacy putchar, EID 1) and power off through SBI
    # SRST (EID "SRST", shutdown, reason "system failure"). Still at the physical address.
boot_no_sv48:
    lla s3, boot_no_sv48_message
6:  lbu a0, 0(s3)
    beqz a0, 7f
    li a7, 1
    ecall
    addi s3, s3, 1
    j 6b
7:  li a7, 0x53525354
    li a6, 0
    li a0, 0
    li a1, 1
    ecall

    .balign 4
boot_park:
    wfi
    j boot_park

    # Other harts (smp.rs). SBI HSM starts them here (or, see above, at _start) in S-mode with
    # the MMU off, like the boot hart, with a0 = hart id. .bss is not zeroed again: it holds the
    # boot tables the boot hart built, which take this hart up to the linked address the same
    # way, and the per-CPU blocks. The start record is found PC-relatively rather than through
    # the opaque value in a1, which OpenSBI 1.1 may hand over stale like the address.
    .balign 4
    .global secondary_start
secondary_start:
    csrw sie, zero
    csrci sstatus, 0x2
    lla t0, boot_park
    csrw stvec, t0
    mv s1, a0                           # hart id
    lla t0, boot_root
    srli t0, t0, 12
    li t1, {satp_sv48}
    or t0, t0, t1
    sfence.vma
    csrw satp, t0
    sfence.vma
    csrr t1, satp
    bne t0, t1, boot_park               # no Sv48 on this hart: it stays parked and the kernel
                                        # reports it as not started
    lla t0, 8f
    li t1, {kernel_base}
    add t0, t0, t1
    jr t0
8:
    lla a1, {record}                    # linked address, mapped by the boot tables
    ld t0, {record_hart}(a1)
    bne t0, s1, boot_park               # a hart nobody is starting: it stays parked
    ld t0, {record_satp}(a1)
    ld sp, {record_stack}(a1)
    ld tp, {record_percpu}(a1)          # the kernel's per-CPU pointer (cpu.rs)
    ld t2, {record_entry}(a1)
    ld a0, {record_arg}(a1)
    csrw satp, t0                       # the kernel's table: maps the image here as well
    sfence.vma                          # drop everything, the boot tables' global entries too
    csrw sscratch, zero                 # "in the kernel" for the trap entry
    lla t0, trap_entry
    csrw stvec, t0
    mv s0, zero                         # ends frame-pointer backtraces
    mv ra, zero
    jalr t2
    j boot_park

    .section .rodata.boot, "a"
boot_no_sv48_message:
    .asciz "tsumugi: this hart has no Sv48 paging; cannot boot\n"
    "#,
    leaf = const BOOT_LEAF,
    satp_sv48 = const SATP_SV48,
    kernel_base = const KERNEL_BASE,
    entry = sym riscv64_boot_entry,
    record = sym super::smp::START_RECORD,
    record_hart = const super::smp::RECORD_HART,
    record_satp = const super::smp::RECORD_SATP,
    record_stack = const super::smp::RECORD_STACK_TOP,
    record_percpu = const super::smp::RECORD_PERCPU,
    record_entry = const super::smp::RECORD_ENTRY,
    record_arg = const super::smp::RECORD_ARG,
);

/// The boot hart's stack.
#[repr(C, align(16))]
struct BootStack([u8; BOOT_STACK_SIZE]);

#[no_mangle]
static mut BOOT_STACK: BootStack = BootStack([0; BOOT_STACK_SIZE]);

core::arch::global_asm!(
    ".global boot_stack_top",
    ".set boot_stack_top, BOOT_STACK + {size}",
    size = const BOOT_STACK_SIZE,
);

/// Boot record filled once by [`riscv64_boot_entry`] before anything else runs.
static mut BOOT_INFO: BootInfo = BootInfo::empty();

extern "C" {
    static __kernel_start: u8;
    static __kernel_end: u8;
}

extern "Rust" {
    /// The kernel's entry point, defined by the kernel binary.
    fn tsumugi_main(info: &'static BootInfo) -> !;
}

/// Text of bounded length kept from the device tree (which the kernel may overwrite later).
#[derive(Clone, Copy)]
pub struct FixedText<const N: usize> {
    bytes: [u8; N],
    len: usize,
}

impl<const N: usize> FixedText<N> {
    const EMPTY: Self = FixedText { bytes: [0; N], len: 0 };

    /// Keeps `s`, cut to `N` bytes on a character boundary.
    fn new(s: &str) -> Self {
        let mut len = s.len().min(N);
        while !s.is_char_boundary(len) {
            len -= 1;
        }
        let mut bytes = [0; N];
        bytes[..len].copy_from_slice(&s.as_bytes()[..len]);
        FixedText { bytes, len }
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.bytes[..self.len]).unwrap_or("")
    }
}

/// What the device tree says about the machine, beyond [`BootInfo`]: the devices the port
/// drives itself and the boot hart's description.
pub struct Platform {
    /// The boot hart's id.
    pub hart_id: u64,
    /// Physical address of the device tree (kept reserved, so SMP and drivers can read it later).
    pub device_tree: PhysAddr,
    /// The 16550 console's registers, if there is one.
    pub uart: Option<PhysAddr>,
    /// The SiFive test finisher (QEMU's exit device), if there is one.
    pub test_finisher: Option<PhysAddr>,
    /// Frequency of the `time` CSR, Hz.
    pub timebase_hz: u64,
    model: FixedText<48>,
    isa: FixedText<256>,
    mmu_type: FixedText<16>,
}

impl Platform {
    const EMPTY: Platform = Platform {
        hart_id: 0,
        device_tree: PhysAddr::new(0),
        uart: None,
        test_finisher: None,
        timebase_hz: DEFAULT_TIMEBASE_HZ,
        model: FixedText::EMPTY,
        isa: FixedText::EMPTY,
        mmu_type: FixedText::EMPTY,
    };

    /// The machine's `model` (e.g. `riscv-virtio,qemu`).
    pub fn model(&self) -> &str {
        self.model.as_str()
    }

    /// The boot hart's `riscv,isa` string.
    pub fn isa(&self) -> &str {
        self.isa.as_str()
    }

    /// The boot hart's `mmu-type` (e.g. `riscv,sv57`).
    pub fn mmu_type(&self) -> &str {
        self.mmu_type.as_str()
    }
}

static PLATFORM: spin::Once<Platform> = spin::Once::new();

/// What the device tree said (an empty description before the boot code has read it).
pub fn platform() -> &'static Platform {
    static NONE: Platform = Platform::EMPTY;
    PLATFORM.get().unwrap_or(&NONE)
}

/// First Rust code: runs on the boot stack with the boot page tables, at the linked address.
extern "C" fn riscv64_boot_entry(hart_id: u64, device_tree: u64) -> ! {
    // SAFETY: single-threaded boot; nothing else refers to BOOT_INFO yet.
    let info = unsafe { &mut *core::ptr::addr_of_mut!(BOOT_INFO) };
    info.protocol = "SBI + device tree";
    // Linker-script symbols: only their addresses are used. The image is linked at
    // KERNEL_BASE + physical.
    let (start, end) = (core::ptr::addr_of!(__kernel_start) as u64, core::ptr::addr_of!(__kernel_end) as u64);
    info.kernel_image = (PhysAddr::new(start - KERNEL_BASE), PhysAddr::new(end - KERNEL_BASE));
    let mut platform = Platform::EMPTY;
    platform.hart_id = hart_id;
    read_device_tree(info, &mut platform, device_tree);
    super::cpu::set_finisher(platform.test_finisher);
    PLATFORM.call_once(|| platform);
    // SAFETY: tsumugi_main is the kernel's entry, defined exactly once by the kernel binary.
    unsafe { tsumugi_main(info) }
}

/// Most ranges of each kind collected while reading the device tree.
const MAX_COLLECTED: usize = 16;

/// A small list of `[start, end)` ranges, without a heap.
struct Ranges {
    items: [(u64, u64); MAX_COLLECTED],
    len: usize,
}

impl Ranges {
    const fn new() -> Self {
        Ranges { items: [(0, 0); MAX_COLLECTED], len: 0 }
    }

    /// Adds a non-empty range; a full list drops it (QEMU's trees have a handful).
    fn push(&mut self, start: u64, end: u64) {
        if start < end && self.len < MAX_COLLECTED {
            self.items[self.len] = (start, end);
            self.len += 1;
        }
    }

    fn as_slice(&self) -> &[(u64, u64)] {
        &self.items[..self.len]
    }
}

/// Copies what the device tree says into `info` and `platform`. A missing or malformed tree
/// leaves them empty; the kernel then reports that it found no memory.
fn read_device_tree(info: &mut BootInfo, platform: &mut Platform, paddr: u64) {
    if paddr == 0 || paddr >= BOOT_MAP_LIMIT {
        return;
    }
    // SAFETY: the boot tables map physical 0..4 GiB at PHYS_MAP; the firmware put a device tree
    // at `paddr`, and `from_ptr` checks its header (magic, sizes) before reading further.
    let Ok(fdt) = (unsafe { fdt::Fdt::from_ptr((PHYS_MAP + paddr) as *const u8) }) else {
        return;
    };
    platform.device_tree = PhysAddr::new(paddr);
    platform.model = FixedText::new(fdt.root().property("model").and_then(|p| p.as_str()).unwrap_or("riscv64"));

    let chosen = fdt.find_node("/chosen");
    let chosen_prop = |name: &str| chosen.and_then(|c| c.property(name));
    if let Some(args) = chosen_prop("bootargs").and_then(|p| p.as_str()) {
        info.set_cmdline(args.as_bytes());
    }
    if let (Some(start), Some(end)) =
        (chosen_prop("linux,initrd-start").and_then(|p| p.as_usize()), chosen_prop("linux,initrd-end").and_then(|p| p.as_usize()))
    {
        if let (Ok(s), Ok(e)) = (PhysAddr::try_new(start as u64), PhysAddr::try_new(end as u64)) {
            if s < e {
                info.initrd = Some((s, e));
            }
        }
    }

    // The console: what /chosen/stdout-path names ("path:options"), else any 16550.
    const UART_COMPATIBLE: [&str; 2] = ["ns16550a", "ns16550"];
    let stdout = chosen_prop("stdout-path")
        .and_then(|p| p.as_str())
        .and_then(|path| fdt.find_node(path.split(':').next().unwrap_or(path)))
        .filter(|n| n.compatible().is_some_and(|c| c.all().any(|s| UART_COMPATIBLE.contains(&s))));
    let uart = stdout.or_else(|| fdt.find_compatible(&UART_COMPATIBLE));
    platform.uart = uart.and_then(first_reg).and_then(|(start, _)| PhysAddr::try_new(start).ok());
    let finisher = fdt.find_compatible(&["sifive,test1", "sifive,test0"]);
    platform.test_finisher = finisher.and_then(first_reg).and_then(|(start, _)| PhysAddr::try_new(start).ok());

    if let Some(cpus) = fdt.find_node("/cpus") {
        let hart = cpus.children().find(|c| {
            c.name.split('@').next() == Some("cpu") && c.reg().and_then(|mut r| r.next()).is_some_and(|r| r.starting_address as u64 == platform.hart_id)
        });
        let timebase = hart.and_then(|h| h.property("timebase-frequency")).or_else(|| cpus.property("timebase-frequency"));
        if let Some(hz) = timebase.and_then(|p| p.as_usize()).filter(|&hz| hz > 0) {
            platform.timebase_hz = hz as u64;
        }
        if let Some(h) = hart {
            platform.isa = FixedText::new(h.property("riscv,isa").and_then(|p| p.as_str()).unwrap_or(""));
            platform.mmu_type = FixedText::new(h.property("mmu-type").and_then(|p| p.as_str()).unwrap_or(""));
        }
    }

    // Memory: RAM from the memory nodes, with holes for what must not be handed out.
    let mut ram = Ranges::new();
    for node in fdt.all_nodes().filter(|n| n.property("device_type").and_then(|p| p.as_str()) == Some("memory")) {
        for region in node.reg().into_iter().flatten() {
            let start = region.starting_address as u64;
            ram.push(start, start.saturating_add(region.size.unwrap_or(0) as u64));
        }
    }
    let mut holes = Ranges::new();
    // Firmware-owned memory (OpenSBI lists its own under /reserved-memory)...
    if let Some(reserved) = fdt.find_node("/reserved-memory") {
        for child in reserved.children() {
            for region in child.reg().into_iter().flatten() {
                let start = region.starting_address as u64;
                holes.push(start, start.saturating_add(region.size.unwrap_or(0) as u64));
            }
        }
    }
    for r in fdt.memory_reservations() {
        let start = r.address() as u64;
        holes.push(start, start.saturating_add(r.size() as u64));
    }
    // ...and, to be safe with firmware that lists nothing, all RAM below the image: OpenSBI's
    // fw_dynamic is loaded at the start of RAM and the image at the next 2 MiB boundary.
    let image_start = info.kernel_image.0.as_u64();
    if let Some(&(ram_start, _)) = ram.as_slice().iter().find(|(s, e)| (*s..*e).contains(&image_start)) {
        holes.push(ram_start, image_start);
    }
    // The device tree itself stays readable for later (SMP bring-up, drivers).
    holes.push(paddr, paddr + fdt.total_size() as u64);
    carve(info, ram.as_slice(), holes.as_slice());

    // The devices the port drives before the kernel maps anything: listing them as reserved
    // makes the kernel's direct map cover them, at the same address the boot tables use.
    for device in [platform.uart, platform.test_finisher].into_iter().flatten() {
        let start = device.as_u64() / PAGE_SIZE * PAGE_SIZE;
        push_range(info, start, start + PAGE_SIZE, MemoryKind::Reserved);
    }
    let len = info.memory_len.min(MAX_MEMORY_RANGES);
    info.memory[..len].sort_unstable_by_key(|r| r.start);
}

/// The first `reg` entry of a node: (address, size).
fn first_reg(node: fdt::node::FdtNode<'_, '_>) -> Option<(u64, u64)> {
    let region = node.reg()?.next()?;
    Some((region.starting_address as u64, region.size.unwrap_or(0) as u64))
}

/// Adds `[start, end)` of `kind` to the memory map if it is non-empty and representable.
fn push_range(info: &mut BootInfo, start: u64, end: u64, kind: MemoryKind) {
    if start >= end {
        return;
    }
    if let (Ok(start), Ok(end)) = (PhysAddr::try_new(start), PhysAddr::try_new(end)) {
        info.push_memory(MemoryRange { start, end, kind });
    }
}

/// Lists each RAM range as usable pieces around the holes that fall into it (holes listed as
/// reserved), so the map has no overlaps: the kernel frees every usable range and reserves only
/// what it knows of itself. Usable pieces shrink to whole pages, holes grow to whole pages.
fn carve(info: &mut BootInfo, ram: &[(u64, u64)], holes: &[(u64, u64)]) {
    let mut sorted = [(0u64, 0u64); MAX_COLLECTED];
    let sorted = &mut sorted[..holes.len()];
    for (slot, &(start, end)) in sorted.iter_mut().zip(holes) {
        *slot = (start / PAGE_SIZE * PAGE_SIZE, end.div_ceil(PAGE_SIZE) * PAGE_SIZE);
    }
    sorted.sort_unstable();
    for &(ram_start, ram_end) in ram {
        let (ram_start, ram_end) = (ram_start.div_ceil(PAGE_SIZE) * PAGE_SIZE, ram_end / PAGE_SIZE * PAGE_SIZE);
        let mut cursor = ram_start;
        for &(hole_start, hole_end) in sorted.iter() {
            if hole_end <= cursor || hole_start >= ram_end {
                continue;
            }
            push_range(info, cursor, hole_start.max(cursor), MemoryKind::Usable);
            let reserved_end = hole_end.min(ram_end);
            push_range(info, hole_start.max(cursor), reserved_end, MemoryKind::Reserved);
            cursor = reserved_end;
        }
        push_range(info, cursor, ram_end, MemoryKind::Usable);
    }
}
