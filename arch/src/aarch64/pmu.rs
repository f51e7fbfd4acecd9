//! Hardware event counting on aarch64 with PMUv3: the cycle counter `PMCCNTR_EL0` for cycles and
//! event counter 0 programmed with `INST_RETIRED` (0x08) for instructions, counting at EL0 and
//! EL1. Instructions are offered only with PMUv3p5 (64-bit event counters, `PMCR_EL0.LP`), so a
//! per-thread difference can never be cut by a 32-bit wrap. QEMU's TCG has no TLB-refill events:
//! TLB misses are unsupported (the kernel's software counters stand in, labelled as such).

use core::arch::asm;
use core::sync::atomic::{AtomicBool, Ordering};

/// The events every port names alike.
pub use crate::event::HwEvent;

/// `ID_AA64DFR0_EL1.PMUVer`: bits 11:8.
const PMUVER_SHIFT: u64 = 8;
const PMUVER_MASK: u64 = 0xf;
/// PMUVer values: none, PMUv3p5 (the first with 64-bit event counters), IMPLEMENTATION DEFINED.
const PMUVER_NONE: u64 = 0;
const PMUVER_V3P5: u64 = 6;
const PMUVER_IMPDEF: u64 = 0xf;
/// `PMCR_EL0` bits: enable, reset event counters, reset cycle counter, 64-bit cycle counter,
/// 64-bit event counters.
const PMCR_E: u64 = 1 << 0;
const PMCR_P: u64 = 1 << 1;
const PMCR_C: u64 = 1 << 2;
const PMCR_LC: u64 = 1 << 6;
const PMCR_LP: u64 = 1 << 7;
/// `PMCNTENSET_EL0` bits: cycle counter, event counter 0.
const CNTEN_CYCLES: u64 = 1 << 31;
const CNTEN_EVENT0: u64 = 1 << 0;
/// Common event number of instructions retired (Arm ARM, PMU events).
const INST_RETIRED: u64 = 0x08;

static CYCLES: AtomicBool = AtomicBool::new(false);
static INSTRUCTIONS: AtomicBool = AtomicBool::new(false);

/// Detects PMUv3 and starts the cycle counter (and the instruction counter with PMUv3p5).
/// Call on every CPU.
pub fn init_this_cpu() {
    let dfr0: u64;
    // SAFETY: reading an ID register has no side effects.
    unsafe { asm!("mrs {}, ID_AA64DFR0_EL1", out(reg) dfr0, options(nomem, nostack, preserves_flags)) };
    let version = (dfr0 >> PMUVER_SHIFT) & PMUVER_MASK;
    if version == PMUVER_NONE || version == PMUVER_IMPDEF {
        return;
    }
    let wide_events = version >= PMUVER_V3P5;
    let pmcr = PMCR_E | PMCR_P | PMCR_C | PMCR_LC | if wide_events { PMCR_LP } else { 0 };
    // SAFETY: programming the PMU only starts counters; the filters (0) count EL0 and EL1.
    unsafe {
        asm!("msr PMCCFILTR_EL0, xzr", options(nomem, nostack, preserves_flags));
        asm!("msr PMSELR_EL0, xzr", "isb", "msr PMXEVTYPER_EL0, {}", in(reg) INST_RETIRED, options(nomem, nostack, preserves_flags));
        asm!("msr PMCR_EL0, {}", "isb", in(reg) pmcr, options(nomem, nostack, preserves_flags));
        asm!("msr PMCNTENSET_EL0, {}", "isb", in(reg) CNTEN_CYCLES | CNTEN_EVENT0, options(nomem, nostack, preserves_flags));
    }
    CYCLES.store(true, Ordering::Relaxed);
    INSTRUCTIONS.store(wide_events, Ordering::Relaxed);
}

/// Whether `event` can be counted on this machine.
pub fn supported(event: HwEvent) -> bool {
    match event {
        // Without PMUv3 the generic timer's count stands in for cycles, as the TSC does on x86.
        HwEvent::Cycles => true,
        HwEvent::Instructions => INSTRUCTIONS.load(Ordering::Relaxed),
        HwEvent::DtlbMiss | HwEvent::ItlbMiss => false,
    }
}

/// The current count of a supported event on this CPU (0 for the others, which the kernel
/// never asks for since [`supported`] says no).
pub fn read(event: HwEvent) -> u64 {
    let v: u64;
    match event {
        HwEvent::Cycles if CYCLES.load(Ordering::Relaxed) => {
            // SAFETY: reading a counter has no side effects.
            unsafe { asm!("mrs {}, PMCCNTR_EL0", out(reg) v, options(nomem, nostack, preserves_flags)) };
            v
        }
        HwEvent::Cycles => super::timer::cycles(),
        HwEvent::Instructions if INSTRUCTIONS.load(Ordering::Relaxed) => {
            // SAFETY: selects event counter 0 and reads it; nothing else uses PMSELR_EL0.
            unsafe { asm!("msr PMSELR_EL0, xzr", "isb", "mrs {}, PMXEVCNTR_EL0", out(reg) v, options(nomem, nostack, preserves_flags)) };
            v
        }
        _ => 0,
    }
}
