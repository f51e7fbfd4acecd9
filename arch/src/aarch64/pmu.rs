//! Hardware event counting on aarch64 with PMUv3: the cycle counter `PMCCNTR_EL0` for cycles and
//! event counter 0 programmed with `INST_RETIRED` (0x08) for instructions, counting at EL0 and
//! EL1. Instructions are offered only with PMUv3p5 (64-bit event counters, `PMCR_EL0.LP`), so a
//! per-thread difference can never be cut by a 32-bit wrap, and only where `PMCEID0_EL0` says the
//! CPU implements `INST_RETIRED` (QEMU's TCG does only with `-icount`; without it the counter
//! reads 0, so the kernel answers `NotSup` rather than a silent zero). QEMU's TCG has no TLB-refill events:
//! TLB misses are unsupported (the kernel's software counters stand in, labelled as such).
//!
//! Each CPU's cycle counter starts when that CPU enables it, so the secondary CPUs' counters
//! would lag the boot CPU's by their start-up times, and a thread that reads the cycle clock
//! (`Clock::Cycles`) on one CPU and again on another after a migration would see time go
//! backwards. A secondary CPU therefore sets its counter to the boot CPU's count at that moment,
//! estimated through the generic timer, which all CPUs share: the boot CPU notes (cycle count,
//! timer count) pairs when it sets up its PMU and again just before it starts the CPU
//! ([`note_cpu_start`]); their ratio is cycles per timer tick. The estimate is exact where both
//! counters follow one clock (QEMU: both derive from its virtual clock, also under `-icount`)
//! and close on hardware with a steady core clock.

use core::arch::asm;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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
/// `PMUSERENR_EL0.CR`: EL0 may read the cycle counter (nothing else of the PMU).
const USERENR_CR: u64 = 1 << 2;
/// Common event number of instructions retired (Arm ARM, PMU events).
const INST_RETIRED: u64 = 0x08;

static CYCLES: AtomicBool = AtomicBool::new(false);
static INSTRUCTIONS: AtomicBool = AtomicBool::new(false);

/// The boot CPU's (cycle count, generic-timer count) when it enabled its PMU, and again just
/// before it started the latest secondary CPU (see the module comment).
static BOOT_CYCLES: AtomicU64 = AtomicU64::new(0);
static BOOT_TICKS: AtomicU64 = AtomicU64::new(0);
static START_CYCLES: AtomicU64 = AtomicU64::new(0);
static START_TICKS: AtomicU64 = AtomicU64::new(0);

/// Tries at aligning or sampling the counters: the one whose timer reads around it were
/// closest wins (a hypervisor or the host may stop the CPU between two reads).
const ALIGN_TRIES: usize = 16;
/// Timer ticks between the reads around an alignment that are close enough to stop trying.
const CLOSE_TICKS: u64 = 2;

/// Reads the cycle counter and the generic timer together: the cycle count and the timer count
/// in the middle of the closest pair of timer reads around it.
fn cycles_and_ticks() -> (u64, u64) {
    let mut best = (0, 0, u64::MAX);
    for _ in 0..ALIGN_TRIES {
        let before = super::timer::cycles();
        let cycles: u64;
        // SAFETY: reading a counter has no side effects.
        unsafe { asm!("isb", "mrs {}, PMCCNTR_EL0", out(reg) cycles, options(nomem, nostack, preserves_flags)) };
        let after = super::timer::cycles();
        let width = after.wrapping_sub(before);
        if width < best.2 {
            best = (cycles, before + width / 2, width);
        }
        if width <= CLOSE_TICKS {
            break;
        }
    }
    (best.0, best.1)
}

/// Sets this CPU's cycle counter to the boot CPU's count (estimated through the timer), trying
/// again while a stall between the timer read and the write could have made it late.
fn align_with_boot_cpu() {
    for _ in 0..ALIGN_TRIES {
        let before = super::timer::cycles();
        let Some(boot) = boot_cycles_at(before) else { return };
        // SAFETY: sets this CPU's cycle counter (EL1 may write it); only readers of it see the
        // change, and they are the reason for it.
        unsafe { asm!("msr PMCCNTR_EL0, {}", "isb", in(reg) boot, options(nomem, nostack, preserves_flags)) };
        if super::timer::cycles().wrapping_sub(before) <= CLOSE_TICKS {
            return;
        }
    }
}

/// The boot CPU's cycle count when the generic timer reads `ticks`, extrapolated from the two
/// pairs it noted; `None` if they do not span a measurable interval.
fn boot_cycles_at(ticks: u64) -> Option<u64> {
    let (c0, t0) = (BOOT_CYCLES.load(Ordering::Acquire), BOOT_TICKS.load(Ordering::Acquire));
    let (c1, t1) = (START_CYCLES.load(Ordering::Acquire), START_TICKS.load(Ordering::Acquire));
    if t1 <= t0 || c1 <= c0 || ticks < t1 {
        return None;
    }
    let elapsed = u128::from(ticks - t1) * u128::from(c1 - c0) / u128::from(t1 - t0);
    Some(c1.wrapping_add(elapsed as u64))
}

/// Called on the boot CPU just before it starts another CPU: notes the pair that CPU's cycle
/// counter is aligned from.
pub(crate) fn note_cpu_start() {
    if CYCLES.load(Ordering::Relaxed) {
        let (cycles, ticks) = cycles_and_ticks();
        START_CYCLES.store(cycles, Ordering::Release);
        START_TICKS.store(ticks, Ordering::Release);
    }
}

/// Detects PMUv3 and starts the cycle counter (and the instruction counter with PMUv3p5).
/// Call on every CPU: the boot CPU first, then each secondary CPU as it starts, which aligns
/// its cycle counter with the boot CPU's (module comment).
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
        // User mode may read `PMCCNTR_EL0`, as x86_64 lets it read the TSC: a thread library
        // and benchmarks time themselves without a syscall. Only reads, only that counter.
        asm!("msr PMUSERENR_EL0, {}", "isb", in(reg) USERENR_CR, options(nomem, nostack, preserves_flags));
    }
    if super::cpu::cpu_index() == 0 {
        let (cycles, ticks) = cycles_and_ticks();
        BOOT_CYCLES.store(cycles, Ordering::Release);
        BOOT_TICKS.store(ticks, Ordering::Release);
    } else {
        align_with_boot_cpu();
    }
    let ceid0: u64;
    // SAFETY: reading an ID register of the PMU has no side effects.
    unsafe { asm!("mrs {}, PMCEID0_EL0", out(reg) ceid0, options(nomem, nostack, preserves_flags)) };
    CYCLES.store(true, Ordering::Relaxed);
    INSTRUCTIONS.store(wide_events && ceid0 & (1 << INST_RETIRED) != 0, Ordering::Relaxed);
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
