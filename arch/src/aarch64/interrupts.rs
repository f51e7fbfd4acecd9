//! The GICv3 interrupt controller: distributor (`GICD`), this CPU's redistributor (`GICR`)
//! and the system-register CPU interface (`ICC_*_EL1`).
//!
//! GICv3 rather than v2: its CPU interface is a set of system registers (no per-CPU MMIO
//! window), it routes by affinity (no 8-CPU limit, which matters once PSCI brings up the
//! other CPUs), and it is what current Arm servers have. QEMU virt needs `gic-version=3`
//! (xtask passes it); the default is a GICv2.
//!
//! Everything is group 1 (non-secure IRQs) at one priority; the interrupts enabled are the EL1
//! virtual timer's PPI and the SGIs the kernel uses as inter-processor interrupts, on every CPU.
//! The distributor is set up once by the boot CPU ([`init`]); each CPU wakes its own
//! redistributor, found by affinity, and turns on its CPU interface ([`init_this_cpu`]).

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::addr::PhysAddr;

use super::boot::{platform, Gic};

/// Marks "no interrupt acknowledged" (also the range start of the GIC's special INTIDs).
pub const NO_INTERRUPT: u32 = 1023;
/// INTIDs from here up are special (1020..1023: spurious and friends); never ended.
const FIRST_SPECIAL_INTID: u32 = 1020;
/// Number of SGIs + PPIs: the private interrupts configured in the redistributor.
const PRIVATE_INTERRUPTS: u32 = 32;
/// Priority of every interrupt we enable (lower is more urgent; 0xff in PMR lets all through).
const DEFAULT_PRIORITY: u8 = 0xa0;

/// Distributor registers (GICv3 architecture spec, 12.9).
mod gicd {
    /// Control.
    pub const CTLR: usize = 0x0000;
    /// `CTLR.RWP`: a register write is still in progress.
    pub const CTLR_RWP: u32 = 1 << 31;
    /// `CTLR.ARE`: affinity routing (with DS = 1, the single security state QEMU virt has).
    pub const CTLR_ARE: u32 = 1 << 4;
    /// `CTLR.EnableGrp1`.
    pub const CTLR_ENABLE_GRP1: u32 = 1 << 1;
    /// Interrupt controller type.
    pub const TYPER: usize = 0x0004;
    /// Group registers (one bit per INTID).
    pub const IGROUPR: usize = 0x0080;
    /// Clear-enable registers.
    pub const ICENABLER: usize = 0x0180;
}

/// Redistributor registers (12.10, 12.11): the `RD_base` frame, then the `SGI_base` frame.
mod gicr {
    /// Type (64-bit): affinity in bits 63:32, `Last` in bit 4.
    pub const TYPER: usize = 0x0008;
    /// `TYPER.Last`: the last redistributor of the region.
    pub const TYPER_LAST: u64 = 1 << 4;
    /// Wake control.
    pub const WAKER: usize = 0x0014;
    /// `WAKER.ProcessorSleep`.
    pub const WAKER_PROCESSOR_SLEEP: u32 = 1 << 1;
    /// `WAKER.ChildrenAsleep`.
    pub const WAKER_CHILDREN_ASLEEP: u32 = 1 << 2;
    /// Offset of the `SGI_base` frame from `RD_base`.
    pub const SGI_BASE: usize = 0x1_0000;
    /// Bytes per redistributor (two 64 KiB frames; no virtual LPIs on QEMU's GICv3).
    pub const STRIDE: u64 = 0x2_0000;
    /// SGI/PPI group register (in `SGI_base`).
    pub const IGROUPR0: usize = SGI_BASE + 0x0080;
    /// SGI/PPI set-enable register.
    pub const ISENABLER0: usize = SGI_BASE + 0x0100;
    /// SGI/PPI clear-enable register.
    pub const ICENABLER0: usize = SGI_BASE + 0x0180;
    /// SGI/PPI priority registers (one byte per INTID).
    pub const IPRIORITYR: usize = SGI_BASE + 0x0400;
}

/// Virtual address of the distributor (set once by [`init`]).
static GICD: AtomicU64 = AtomicU64::new(0);
/// Virtual address and length of the mapped redistributor region (set once by [`init`]).
static GICR_REGION: AtomicU64 = AtomicU64::new(0);
static GICR_REGION_LEN: AtomicU64 = AtomicU64::new(0);
/// `ICC_CTLR_EL1.RSS`: SGIs can target Aff0 values 16..255 (range selector), read by [`init`].
static RANGE_SELECTOR: AtomicBool = AtomicBool::new(false);

/// The distributor's frame.
fn distributor() -> u64 {
    GICD.load(Ordering::Relaxed)
}

/// This CPU's redistributor frame (0 before [`init_this_cpu`] found it).
fn redistributor() -> u64 {
    let p = super::cpu::percpu();
    if p.is_null() {
        return 0;
    }
    // SAFETY: this CPU's block; the field is written only by this CPU, with interrupts off.
    unsafe { (*p).redistributor }
}

fn read32(base: u64, offset: usize) -> u32 {
    debug_assert!(base != 0, "GIC used before it was set up");
    // SAFETY: `base` maps a GIC frame as device memory for the whole run (init's contract).
    unsafe { core::ptr::read_volatile((base as usize + offset) as *const u32) }
}

fn write32(base: u64, offset: usize, value: u32) {
    debug_assert!(base != 0, "GIC used before it was set up");
    // SAFETY: as in `read32`.
    unsafe { core::ptr::write_volatile((base as usize + offset) as *mut u32, value) }
}

/// Writes a CPU-interface system register.
macro_rules! write_icc {
    ($name:literal, $value:expr) => {
        // SAFETY: programs this CPU's GIC CPU interface; the values below only enable group-1
        // interrupt delivery, which the kernel handles.
        unsafe { core::arch::asm!(concat!("msr ", $name, ", {}"), "isb", in(reg) $value as u64, options(nostack, preserves_flags)) }
    };
}

/// Brings up the interrupt controller on the boot CPU: maps the console into the kernel's
/// device window (it was reached through the boot window until now), then the GIC's
/// distributor and the redistributors of every listed CPU, sets up the distributor and this
/// CPU's part ([`init_this_cpu`]). `map_mmio(phys, len)` maps device registers and returns
/// their virtual address.
pub fn init(map_mmio: &mut dyn FnMut(PhysAddr, u64) -> Option<u64>) -> Result<(), &'static str> {
    let plat = platform();
    let uart = map_mmio(PhysAddr::new(plat.uart), crate::addr::PAGE_SIZE).ok_or("cannot map the console")?;
    // SAFETY: `uart` maps the PL011's register page as device memory for the rest of the run.
    unsafe { super::serial::remap(uart) };

    let (distributor, redistributors) = match plat.gic {
        Gic::V3 { distributor, redistributors } => (distributor, redistributors),
        Gic::V2 => return Err("the device tree describes a GICv2; this port drives GICv3 (QEMU: -machine virt,gic-version=3)"),
        Gic::None => return Err("the device tree describes no interrupt controller"),
    };
    if !super::cpu::detect_features().gic_sysregs {
        return Err("the CPU has no GICv3 system-register interface");
    }
    let gicd = map_mmio(PhysAddr::new(distributor.0), distributor.1.max(0x1_0000)).ok_or("cannot map the GIC distributor")?;
    GICD.store(gicd, Ordering::Relaxed);
    // Only the frames of the CPUs that exist are mapped (the region has room for many more).
    let redist_len = redistributors.1.min(gicr::STRIDE * plat.cpus as u64).max(gicr::STRIDE);
    let gicr_region = map_mmio(PhysAddr::new(redistributors.0), redist_len).ok_or("cannot map the GIC redistributors")?;
    GICR_REGION.store(gicr_region, Ordering::Relaxed);
    GICR_REGION_LEN.store(redist_len, Ordering::Relaxed);

    init_distributor();
    init_this_cpu()?;
    /// `ICC_CTLR_EL1.RSS`.
    const CTLR_RSS: u64 = 1 << 18;
    let ctlr: u64;
    // SAFETY: reads this CPU's ICC_CTLR_EL1 (by encoding, see init_cpu_interface).
    unsafe { core::arch::asm!("mrs {}, S3_0_C12_C12_4", out(reg) ctlr, options(nomem, nostack, preserves_flags)) };
    RANGE_SELECTOR.store(ctlr & CTLR_RSS != 0, Ordering::Relaxed);
    Ok(())
}

/// The calling CPU's part of the GIC: finds its redistributor (by affinity) in the region
/// [`init`] mapped, wakes it, turns on the CPU interface and enables the kernel's SGIs. The
/// boot CPU runs it from [`init`]; every other CPU when it starts (`smp::init_this_cpu`).
pub fn init_this_cpu() -> Result<(), &'static str> {
    let (region, len) = (GICR_REGION.load(Ordering::Relaxed), GICR_REGION_LEN.load(Ordering::Relaxed));
    if region == 0 {
        return Err("the GIC redistributors are not mapped");
    }
    let rd = find_redistributor(region, len).ok_or("no GIC redistributor for this CPU")?;
    let p = super::cpu::percpu();
    if p.is_null() {
        return Err("no per-CPU block");
    }
    // SAFETY: this CPU's block, touched only by this CPU with interrupts off.
    unsafe { (*p).redistributor = rd };
    init_redistributor()?;
    init_cpu_interface()?;
    for sgi in [super::trap::RESCHEDULE_VECTOR, super::trap::KICK_VECTOR, super::trap::SHOOTDOWN_VECTOR, super::trap::FPU_SAVE_VECTOR] {
        enable_private(u32::from(sgi));
    }
    Ok(())
}

/// Group 1 for every shared interrupt, all disabled, affinity routing on.
fn init_distributor() {
    write32(distributor(), gicd::CTLR, 0);
    wait_for_distributor();
    let lines = ((read32(distributor(), gicd::TYPER) & 0x1f) + 1) * 32;
    for n in 1..lines / 32 {
        write32(distributor(), gicd::IGROUPR + 4 * n as usize, u32::MAX);
        write32(distributor(), gicd::ICENABLER + 4 * n as usize, u32::MAX);
    }
    wait_for_distributor();
    write32(distributor(), gicd::CTLR, gicd::CTLR_ARE | gicd::CTLR_ENABLE_GRP1);
    wait_for_distributor();
}

fn wait_for_distributor() {
    while read32(distributor(), gicd::CTLR) & gicd::CTLR_RWP != 0 {
        core::hint::spin_loop();
    }
}

/// The redistributor whose affinity matches this CPU's `MPIDR_EL1`.
fn find_redistributor(region: u64, len: u64) -> Option<u64> {
    let affinity = u64::from(super::cpu::hw_id());
    let mut offset = 0;
    while offset + gicr::STRIDE <= len {
        let rd = region + offset;
        // SAFETY: `rd` lies in the mapped redistributor region; TYPER is a 64-bit register.
        let typer = unsafe { core::ptr::read_volatile((rd as usize + gicr::TYPER) as *const u64) };
        if typer >> 32 == affinity {
            return Some(rd);
        }
        if typer & gicr::TYPER_LAST != 0 {
            break;
        }
        offset += gicr::STRIDE;
    }
    None
}

/// Wakes this CPU's redistributor and puts its SGIs and PPIs in group 1, disabled, at the
/// default priority.
fn init_redistributor() -> Result<(), &'static str> {
    let waker = read32(redistributor(), gicr::WAKER) & !gicr::WAKER_PROCESSOR_SLEEP;
    write32(redistributor(), gicr::WAKER, waker);
    let mut spins = 0u32;
    while read32(redistributor(), gicr::WAKER) & gicr::WAKER_CHILDREN_ASLEEP != 0 {
        spins += 1;
        if spins == u32::MAX {
            return Err("the GIC redistributor does not wake up");
        }
        core::hint::spin_loop();
    }
    write32(redistributor(), gicr::ICENABLER0, u32::MAX);
    write32(redistributor(), gicr::IGROUPR0, u32::MAX);
    let priority = u32::from_ne_bytes([DEFAULT_PRIORITY; 4]);
    for n in 0..PRIVATE_INTERRUPTS / 4 {
        write32(redistributor(), gicr::IPRIORITYR + 4 * n as usize, priority);
    }
    Ok(())
}

/// System-register interface on, every priority unmasked, group 1 enabled.
fn init_cpu_interface() -> Result<(), &'static str> {
    /// `ICC_SRE_EL1.SRE`.
    const SRE: u64 = 1;
    let sre: u64;
    // SAFETY: enabling the system-register interface of this CPU's GIC CPU interface
    // (ICC_SRE_EL1, written by encoding: the base target's assembler does not know the GIC
    // register names), then reading back whether it stuck.
    unsafe {
        core::arch::asm!(
            "mrs {sre}, S3_0_C12_C12_5",
            "orr {sre}, {sre}, #1",
            "msr S3_0_C12_C12_5, {sre}",
            "isb",
            "mrs {sre}, S3_0_C12_C12_5",
            sre = out(reg) sre,
            options(nostack, preserves_flags)
        );
    }
    if sre & SRE == 0 {
        return Err("the GIC system-register interface cannot be enabled");
    }
    write_icc!("S3_0_C4_C6_0", 0xffu64); // ICC_PMR_EL1: let every priority through
    write_icc!("S3_0_C12_C12_3", 0u64); // ICC_BPR1_EL1: no priority grouping
    write_icc!("S3_0_C12_C12_4", 0u64); // ICC_CTLR_EL1: EOImode 0 (EOI also deactivates)
    write_icc!("S3_0_C12_C12_7", 1u64); // ICC_IGRPEN1_EL1: group 1 on
    Ok(())
}

/// Enables private interrupt `intid` (a PPI or SGI) on this CPU.
pub fn enable_private(intid: u32) {
    debug_assert!(intid < PRIVATE_INTERRUPTS);
    write32(redistributor(), gicr::ISENABLER0, 1 << intid);
}

/// Acknowledges the highest-priority pending interrupt (`ICC_IAR1_EL1`) and records it as
/// this CPU's active one; returns its INTID (1020..1023 when none was really pending).
pub(crate) fn acknowledge() -> u32 {
    let iar: u64;
    // SAFETY: reading IAR1 acknowledges an interrupt; it is ended by `end_of_interrupt`.
    unsafe { core::arch::asm!("mrs {}, S3_0_C12_C12_0", out(reg) iar, options(nomem, nostack, preserves_flags)) };
    let intid = (iar & 0xff_ffff) as u32;
    if intid < FIRST_SPECIAL_INTID {
        let p = super::cpu::percpu();
        // SAFETY: this CPU's block, touched only by this CPU with interrupts off.
        unsafe { (*p).active_interrupt = intid };
    }
    intid
}

/// Signals the end of the interrupt being handled (`ICC_EOIR1_EL1` with its INTID).
pub fn end_of_interrupt() {
    let p = super::cpu::percpu();
    // SAFETY: as in `acknowledge`.
    let intid = unsafe { core::mem::replace(&mut (*p).active_interrupt, NO_INTERRUPT) };
    if intid != NO_INTERRUPT {
        write_icc!("S3_0_C12_C12_1", intid); // ICC_EOIR1_EL1
    }
}

/// Ends `intid` if it is still this CPU's active interrupt (the kernel did not end it).
pub(crate) fn end_if_active(intid: u32) {
    let p = super::cpu::percpu();
    // SAFETY: as in `acknowledge`.
    if unsafe { (*p).active_interrupt } == intid {
        end_of_interrupt();
    }
}

/// Sends software-generated interrupt `vector` (an SGI, 0..15) to the CPU whose hardware id
/// (`cpu::hw_id`, packed affinity) is `id`, through `ICC_SGI1R_EL1`: the target list names
/// Aff0 values 16 at a time, within the cluster Aff3.Aff2.Aff1; Aff0 values from 16 up need
/// the range selector (`RS` = Aff0 / 16), which only a CPU interface with `ICC_CTLR_EL1.RSS`
/// has. Without it such a CPU cannot be targeted (QEMU virt numbers Aff0 0..15 in every
/// cluster, so this never happens there), and the SGI is not sent.
pub fn send_ipi(id: u32, vector: u8) {
    if let Some(sgi1r) = sgi1r_value(id, vector, RANGE_SELECTOR.load(Ordering::Relaxed)) {
        // SAFETY: ICC_SGI1R_EL1 only raises a group-1 SGI at the target; the barrier makes
        // earlier stores (the reason for the IPI) visible before it arrives.
        unsafe { core::arch::asm!("dsb ishst", "msr S3_0_C12_C11_5, {}", "isb", in(reg) sgi1r, options(nostack, preserves_flags)) };
    }
}

/// The `ICC_SGI1R_EL1` value that sends SGI `vector` to the CPU with packed affinity `id`, or
/// `None` if it needs the range selector and `range_selector` says there is none.
const fn sgi1r_value(id: u32, vector: u8, range_selector: bool) -> Option<u64> {
    let aff3 = (id >> 24) as u64;
    let aff2 = ((id >> 16) & 0xff) as u64;
    let aff1 = ((id >> 8) & 0xff) as u64;
    let aff0 = (id & 0xff) as u64;
    let (range, bit) = (aff0 / 16, aff0 % 16);
    if range != 0 && !range_selector {
        return None;
    }
    Some((aff3 << 48) | (range << 44) | (aff2 << 32) | (((vector & 0xf) as u64) << 24) | (aff1 << 16) | (1 << bit))
}

/// Whether `sgi1r_value(id, vector, range_selector)` is `expected` (for the checks below).
const fn sgi1r_is(id: u32, vector: u8, range_selector: bool, expected: Option<u64>) -> bool {
    match (sgi1r_value(id, vector, range_selector), expected) {
        (Some(a), Some(b)) => a == b,
        (None, None) => true,
        _ => false,
    }
}

// QEMU virt's CPUs 0..15: cluster 0, one target-list bit each.
const _: () = assert!(sgi1r_is(0x0000_0003, 1, false, Some((1 << 24) | (1 << 3))));
// Aff1 = 1 (QEMU's CPU 16 and up), Aff2 and Aff3 in their fields.
const _: () = assert!(sgi1r_is(0x0102_0105, 4, false, Some((1 << 48) | (2 << 32) | (4 << 24) | (1 << 16) | (1 << 5))));
// Aff0 = 0x21 needs range 2, bit 1.
const _: () = assert!(sgi1r_is(0x0000_0021, 2, true, Some((2 << 44) | (2 << 24) | (1 << 1))));
const _: () = assert!(sgi1r_is(0x0000_0021, 2, false, None));
