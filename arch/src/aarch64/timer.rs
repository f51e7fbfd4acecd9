//! Time on aarch64: the generic timer. The virtual counter `CNTVCT_EL0` is the cycle counter
//! and clock (its rate is `CNTFRQ_EL0`, set by firmware/QEMU, so no calibration is needed),
//! and the EL1 virtual timer (`CNTV_*`, a PPI) is the periodic tick.
//!
//! The virtual timer rather than the physical one: it is the EL1 timer under a hypervisor too
//! (`--accel kvm`), while EL1 access to the physical timer depends on EL2's settings. The
//! timer is one-shot in hardware, so every tick moves the compare value on by one period
//! (`rearm`, before the kernel sees the tick) — drift-free, and the level-triggered interrupt
//! drops at once.
//!
//! `CNTVCT_EL0` counts time, not instructions; a PMU cycle counter (`PMCCNTR_EL0`) is later
//! work with the rest of the PMU.

use aarch64_cpu::asm::barrier;
use aarch64_cpu::registers::{Readable, Writeable, CNTFRQ_EL0, CNTKCTL_EL1, CNTVCT_EL0, CNTV_CTL_EL0, CNTV_CVAL_EL0};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

static COUNTER_HZ: AtomicU64 = AtomicU64::new(0);
/// Counter ticks to nanoseconds (multiply and shift; set at calibration).
static CLOCK: crate::clock::Scale = crate::clock::Scale::new();
/// Counter ticks per timer interrupt.
static PERIOD: AtomicU64 = AtomicU64::new(0);
/// INTID of the timer's PPI (from the device tree at `init`).
static INTID: AtomicU32 = AtomicU32::new(u32::MAX);

/// What the clocks run at.
#[derive(Clone, Copy, Debug)]
pub struct Calibration {
    /// Counter ticks per second (`CNTFRQ_EL0`).
    pub cycles_hz: u64,
    /// Timer ticks per second: the generic timer counts the same counter.
    pub timer_hz: u64,
}

/// The cycle counter: the virtual count `CNTVCT_EL0` (after an `isb`, so it is not read
/// early).
#[inline]
pub fn cycles() -> u64 {
    barrier::isb(barrier::SY);
    CNTVCT_EL0.get()
}

/// Nanoseconds since [`init`] ran (0 before). Inlined: the kernel's `sleep` path reads it.
#[inline]
pub fn nanos() -> u64 {
    CLOCK.nanos(cycles())
}

/// Cycle-counter frequency in Hz (0 before [`init`]).
pub fn cycles_hz() -> u64 {
    COUNTER_HZ.load(Ordering::Relaxed)
}

/// INTID of the tick (`u32::MAX` before [`init`]).
pub fn intid() -> u32 {
    INTID.load(Ordering::Relaxed)
}

/// Reads the counter frequency and starts the boot CPU's periodic tick at `hz`. Needs the
/// interrupt controller (`interrupts::init`).
pub fn init(hz: u64) -> Calibration {
    let freq = CNTFRQ_EL0.get().max(1);
    COUNTER_HZ.store(freq, Ordering::Relaxed);
    CLOCK.calibrate(COUNTER_HZ.load(Ordering::Relaxed), cycles());
    PERIOD.store((freq / hz.max(1)).max(1), Ordering::Relaxed);
    INTID.store(super::boot::platform().timer_intid, Ordering::Relaxed);
    start_periodic();
    Calibration { cycles_hz: freq, timer_hz: freq }
}

/// Starts this CPU's tick (at the rate [`init`] chose): first compare value one period from
/// now, timer on, PPI enabled. Also sets what user mode may read of this CPU's timer.
pub fn start_periodic() {
    // EL0 may read CNTVCT_EL0 (a clock, no secret; as x86 lets ring 3 `rdtsc`) and nothing else
    // of the timer. CNTKCTL_EL1 is per CPU.
    CNTKCTL_EL1.write(CNTKCTL_EL1::EL0VCTEN::TrappedNone);
    CNTV_CVAL_EL0.set(cycles() + PERIOD.load(Ordering::Relaxed));
    // Enabled with IMASK clear: the interrupt is delivered (and handled by trap.rs).
    CNTV_CTL_EL0.write(CNTV_CTL_EL0::ENABLE::SET + CNTV_CTL_EL0::IMASK::CLEAR);
    barrier::isb(barrier::SY);
    super::interrupts::enable_private(intid());
}

/// Moves the compare value on by one period (or to one period from now after a long stall),
/// which also lowers the timer's interrupt line. Called on every tick before the kernel's
/// handler. Inlined into the trap dispatch (one caller; on every tick).
#[inline(always)]
pub(crate) fn rearm() {
    let period = PERIOD.load(Ordering::Relaxed);
    let now = cycles();
    let mut next = CNTV_CVAL_EL0.get().wrapping_add(period);
    if next <= now {
        next = now + period;
    }
    CNTV_CVAL_EL0.set(next);
    barrier::isb(barrier::SY);
}
