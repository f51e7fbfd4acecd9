//! Hardware event counting on x86_64: the TSC for cycles, and the architectural PMU's fixed
//! instruction counter when CPUID leaf 0xA reports one (under KVM on hosts that expose a PMU).
//! Under QEMU TCG leaf 0xA is all zero: detected, never probed (rdpmc would fault). TLB-miss
//! events have no architectural encoding: unsupported.

use core::sync::atomic::{AtomicBool, Ordering};
use x86_64::registers::model_specific::Msr;

/// The events every port names alike.
pub use crate::event::HwEvent;

/// IA32_FIXED_CTR0 (instructions retired).
const IA32_FIXED_CTR0: u32 = 0x309;
/// IA32_FIXED_CTR_CTRL.
const IA32_FIXED_CTR_CTRL: u32 = 0x38d;
/// IA32_PERF_GLOBAL_CTRL.
const IA32_PERF_GLOBAL_CTRL: u32 = 0x38f;
/// Fixed counter 0 counts in ring 0 and ring 3.
const FIXED0_OS_USR: u64 = 0b11;
/// Global enable bit of fixed counter 0.
const GLOBAL_FIXED0: u64 = 1 << 32;

static INSTRUCTIONS: AtomicBool = AtomicBool::new(false);

/// Detects the PMU (CPUID 0xA) and starts the fixed instruction counter if there is one.
/// Call on every CPU.
pub fn init_this_cpu() {
    // SAFETY: CPUID has no side effects.
    #[allow(unused_unsafe)]
    let max = unsafe { core::arch::x86_64::__cpuid(0) }.eax;
    if max < 0xa {
        return;
    }
    // SAFETY: as above.
    #[allow(unused_unsafe)]
    let leaf = unsafe { core::arch::x86_64::__cpuid(0xa) };
    let version = leaf.eax & 0xff;
    let fixed = leaf.edx & 0x1f;
    if version < 2 || fixed == 0 {
        return;
    }
    // SAFETY: the MSRs exist when leaf 0xA reports version ≥ 2 with a fixed counter; enabling
    // counter 0 only counts instructions.
    unsafe {
        Msr::new(IA32_FIXED_CTR_CTRL).write(FIXED0_OS_USR);
        let mut global = Msr::new(IA32_PERF_GLOBAL_CTRL);
        let g = global.read();
        global.write(g | GLOBAL_FIXED0);
    }
    INSTRUCTIONS.store(true, Ordering::Relaxed);
}

/// Whether `event` can be counted on this machine.
pub fn supported(event: HwEvent) -> bool {
    match event {
        HwEvent::Cycles => true,
        HwEvent::Instructions => INSTRUCTIONS.load(Ordering::Relaxed),
        HwEvent::DtlbMiss | HwEvent::ItlbMiss => false,
    }
}

/// The current count of a supported event on this CPU.
pub fn read(event: HwEvent) -> u64 {
    match event {
        HwEvent::Cycles => super::timer::cycles(),
        // SAFETY: only called when supported (the MSR exists).
        HwEvent::Instructions if INSTRUCTIONS.load(Ordering::Relaxed) => unsafe { Msr::new(IA32_FIXED_CTR0).read() },
        _ => 0,
    }
}
