//! The local APIC (xAPIC, memory-mapped) and the legacy 8259 PICs, which are remapped out of
//! the exception range and masked: every interrupt Tsumugi uses arrives through the local APIC.

use crate::addr::PhysAddr;
use core::sync::atomic::{AtomicU64, Ordering};
use x86_64::instructions::port::Port;
use x86_64::registers::model_specific::Msr;

use super::trap::{PIC_BASE_VECTOR, SPURIOUS_VECTOR};

/// `IA32_APIC_BASE` MSR.
const IA32_APIC_BASE: u32 = 0x1b;
/// Bits of `IA32_APIC_BASE` holding the physical base.
const APIC_BASE_MASK: u64 = 0x000f_ffff_ffff_f000;
/// `IA32_APIC_BASE` global enable bit.
const APIC_GLOBAL_ENABLE: u64 = 1 << 11;

/// Local APIC register offsets (Intel SDM vol. 3A table 11-1).
pub mod reg {
    /// Local APIC ID.
    pub const ID: usize = 0x20;
    /// Task priority.
    pub const TPR: usize = 0x80;
    /// End of interrupt.
    pub const EOI: usize = 0xb0;
    /// Spurious interrupt vector (and software enable, bit 8).
    pub const SVR: usize = 0xf0;
    /// Interrupt command, low half.
    pub const ICR_LOW: usize = 0x300;
    /// Interrupt command, high half (destination).
    pub const ICR_HIGH: usize = 0x310;
    /// LVT timer.
    pub const LVT_TIMER: usize = 0x320;
    /// LVT LINT0.
    pub const LVT_LINT0: usize = 0x350;
    /// LVT LINT1.
    pub const LVT_LINT1: usize = 0x360;
    /// LVT error.
    pub const LVT_ERROR: usize = 0x370;
    /// Timer initial count.
    pub const TIMER_INITIAL: usize = 0x380;
    /// Timer current count.
    pub const TIMER_CURRENT: usize = 0x390;
    /// Timer divide configuration.
    pub const TIMER_DIVIDE: usize = 0x3e0;
}

/// SVR: APIC software enable.
const SVR_ENABLE: u32 = 1 << 8;
/// LVT: masked.
pub const LVT_MASKED: u32 = 1 << 16;

/// Virtual address of the local APIC registers (set once by [`init_local_apic`]).
static LAPIC: AtomicU64 = AtomicU64::new(0);

/// Physical address of this CPU's local APIC registers, to be mapped uncached by the kernel.
pub fn local_apic_phys() -> PhysAddr {
    // SAFETY: IA32_APIC_BASE exists on every CPU with a local APIC (all x86_64 CPUs).
    let base = unsafe { Msr::new(IA32_APIC_BASE).read() };
    PhysAddr::new(base & APIC_BASE_MASK)
}

/// Reads a local APIC register.
pub fn read(offset: usize) -> u32 {
    let base = LAPIC.load(Ordering::Relaxed);
    debug_assert!(base != 0, "local APIC used before init_local_apic");
    // SAFETY: `base` maps the APIC's 4 KiB register page uncached (init_local_apic contract).
    unsafe { core::ptr::read_volatile((base as usize + offset) as *const u32) }
}

/// Writes a local APIC register.
pub fn write(offset: usize, value: u32) {
    let base = LAPIC.load(Ordering::Relaxed);
    debug_assert!(base != 0, "local APIC used before init_local_apic");
    // SAFETY: as in `read`.
    unsafe { core::ptr::write_volatile((base as usize + offset) as *mut u32, value) }
}

/// Remaps the legacy PICs to [`PIC_BASE_VECTOR`] and masks every line.
pub fn disable_legacy_pic() {
    // ICW1..ICW4 (8259A data sheet), then mask all.
    const ICW1_INIT_ICW4: u8 = 0x11;
    const ICW4_8086: u8 = 0x01;
    let mut cmd1: Port<u8> = Port::new(0x20);
    let mut data1: Port<u8> = Port::new(0x21);
    let mut cmd2: Port<u8> = Port::new(0xa0);
    let mut data2: Port<u8> = Port::new(0xa1);
    // SAFETY: standard PC PIC ports; the sequence only reprograms and masks the PICs.
    unsafe {
        cmd1.write(ICW1_INIT_ICW4);
        cmd2.write(ICW1_INIT_ICW4);
        data1.write(PIC_BASE_VECTOR);
        data2.write(PIC_BASE_VECTOR + 8);
        data1.write(4); // slave on IRQ2
        data2.write(2); // cascade identity
        data1.write(ICW4_8086);
        data2.write(ICW4_8086);
        data1.write(0xff);
        data2.write(0xff);
    }
}

/// Enables this CPU's local APIC, whose registers the kernel mapped at `virt`.
///
/// # Safety
/// `virt` must map the 4 KiB register page of [`local_apic_phys`] uncached, for the whole run.
pub unsafe fn init_local_apic(virt: u64) {
    LAPIC.store(virt, Ordering::Relaxed);
    enable_local_apic();
}

/// Enables the calling CPU's local APIC (every CPU sees its own at the same address). The
/// boot CPU's [`init`] must have run.
pub fn enable_local_apic() {
    // SAFETY: setting the global enable bit of the APIC base MSR keeps the same base.
    unsafe {
        let mut msr = Msr::new(IA32_APIC_BASE);
        let v = msr.read();
        msr.write(v | APIC_GLOBAL_ENABLE);
    }
    write(reg::TPR, 0);
    write(reg::LVT_LINT0, LVT_MASKED);
    write(reg::LVT_LINT1, LVT_MASKED);
    write(reg::LVT_ERROR, LVT_MASKED);
    write(reg::SVR, SVR_ENABLE | u32::from(SPURIOUS_VECTOR));
}

/// Brings up this machine's interrupt controllers: masks the legacy PICs and enables the boot
/// CPU's local APIC, whose register page `map_mmio(phys, len)` maps uncached (and returns the
/// virtual address of).
pub fn init(map_mmio: &mut dyn FnMut(PhysAddr, u64) -> Option<u64>) -> Result<(), &'static str> {
    let virt = map_mmio(local_apic_phys(), crate::addr::PAGE_SIZE).ok_or("cannot map the local APIC")?;
    disable_legacy_pic();
    // SAFETY: `virt` maps the APIC register page uncached for the rest of the run (map_mmio's
    // contract).
    unsafe { init_local_apic(virt) };
    Ok(())
}

/// Signals the end of the interrupt being handled.
pub fn end_of_interrupt() {
    write(reg::EOI, 0);
}

/// This CPU's local APIC ID.
pub fn local_apic_id() -> u32 {
    read(reg::ID) >> 24
}

/// ICR delivery-status bit (send pending).
const ICR_PENDING: u32 = 1 << 12;
/// ICR level "assert" bit.
const ICR_ASSERT: u32 = 1 << 14;
/// ICR delivery mode INIT.
const ICR_INIT: u32 = 0b101 << 8;
/// ICR delivery mode start-up.
const ICR_STARTUP: u32 = 0b110 << 8;
/// ICR trigger mode level (for INIT de-assert).
const ICR_LEVEL: u32 = 1 << 15;

fn wait_icr_idle() {
    while read(reg::ICR_LOW) & ICR_PENDING != 0 {
        core::hint::spin_loop();
    }
}

fn send_icr(apic_id: u32, low: u32) {
    wait_icr_idle();
    write(reg::ICR_HIGH, apic_id << 24);
    write(reg::ICR_LOW, low);
    wait_icr_idle();
}

/// Sends a fixed interrupt with `vector` to the CPU whose local APIC ID is `apic_id`.
pub fn send_ipi(apic_id: u32, vector: u8) {
    send_icr(apic_id, ICR_ASSERT | u32::from(vector));
}

/// Sends INIT then two start-up IPIs to `apic_id`, starting it in real mode at physical
/// `start_page * 4096` (Intel SDM vol. 3A §8.4.4.1). `delay_us` waits the given microseconds.
pub fn start_cpu(apic_id: u32, start_page: u8, delay_us: &dyn Fn(u64)) {
    send_icr(apic_id, ICR_INIT | ICR_ASSERT | ICR_LEVEL);
    delay_us(200);
    send_icr(apic_id, ICR_INIT | ICR_LEVEL);
    delay_us(10_000);
    for _ in 0..2 {
        send_icr(apic_id, ICR_STARTUP | u32::from(start_page));
        delay_us(200);
    }
}
