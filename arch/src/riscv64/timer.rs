//! Time on riscv64: the `cycle` CSR as cycle counter, the `time` CSR (whose frequency the
//! device tree gives) as clock, and the SBI TIME extension as the periodic tick. The cycle
//! counter's rate is not given anywhere (under QEMU TCG it follows the host's TSC, under
//! `-icount shift=0` one per guest instruction), so it is measured against `time`.

use core::sync::atomic::{AtomicU64, Ordering};
use riscv::register::{cycle, sie, time};

/// Calibration interval, ms.
const CALIBRATION_MS: u64 = 10;

static TIMEBASE_HZ: AtomicU64 = AtomicU64::new(0);
/// Counter ticks to nanoseconds (multiply and shift; set at calibration).
static CLOCK: crate::clock::Scale = crate::clock::Scale::new();
static CYCLES_HZ: AtomicU64 = AtomicU64::new(0);
/// `time` ticks between two timer interrupts.
static PERIOD: AtomicU64 = AtomicU64::new(0);
/// Most CPUs whose deadlines are kept (indexed by `cpu::cpu_index`).
const MAX_CPUS: usize = 64;
#[allow(clippy::declare_interior_mutable_const)]
const NO_DEADLINE: AtomicU64 = AtomicU64::new(0);
/// When each CPU's next timer interrupt is due, in `time` ticks. Each CPU touches only its own.
static NEXT_DEADLINE: [AtomicU64; MAX_CPUS] = [NO_DEADLINE; MAX_CPUS];

/// This CPU's deadline slot.
fn next_deadline() -> &'static AtomicU64 {
    &NEXT_DEADLINE[super::cpu::cpu_index() % MAX_CPUS]
}

/// What calibration measured.
#[derive(Clone, Copy, Debug)]
pub struct Calibration {
    /// Cycle-counter ticks per second.
    pub cycles_hz: u64,
    /// `time` ticks per second (the device tree's `timebase-frequency`), which the tick timer
    /// counts in.
    pub timer_hz: u64,
}

/// The cycle counter (`cycle` CSR). Under QEMU with `-icount shift=0` it advances by one per
/// guest instruction.
#[inline]
pub fn cycles() -> u64 {
    cycle::read64()
}

/// The `time` CSR.
#[inline]
fn now() -> u64 {
    time::read64()
}

/// Nanoseconds since [`calibrate`] ran (0 before). Inlined: the kernel's `sleep` path reads it.
#[inline]
pub fn nanos() -> u64 {
    CLOCK.nanos(now())
}

/// Cycle-counter frequency in Hz (0 before calibration).
pub fn cycles_hz() -> u64 {
    CYCLES_HZ.load(Ordering::Relaxed)
}

/// Takes the `time` frequency from the device tree and measures the cycle counter against it.
pub fn calibrate() -> Calibration {
    let timebase_hz = super::boot::platform().timebase_hz.max(1);
    let interval = timebase_hz * CALIBRATION_MS / 1000;
    let time_start = now();
    let cycles_start = cycles();
    while now().wrapping_sub(time_start) < interval {
        core::hint::spin_loop();
    }
    let cycles_end = cycles();
    let cycles_hz = cycles_end.wrapping_sub(cycles_start) * 1000 / CALIBRATION_MS;
    TIMEBASE_HZ.store(timebase_hz, Ordering::Relaxed);
    CLOCK.calibrate(TIMEBASE_HZ.load(Ordering::Relaxed), time_start);
    CYCLES_HZ.store(cycles_hz.max(1), Ordering::Relaxed);
    Calibration { cycles_hz, timer_hz: timebase_hz }
}

/// Calibrates the clocks and starts the boot hart's periodic tick at `hz`.
pub fn init(hz: u64) -> Calibration {
    let cal = calibrate();
    start_periodic(hz);
    cal
}

/// Starts this hart's periodic tick at `hz` interrupts per second (supervisor timer interrupt).
/// Other harts call this too once they are started (the period is shared, deadlines are not).
pub fn start_periodic(hz: u64) {
    let period = (TIMEBASE_HZ.load(Ordering::Relaxed) / hz.max(1)).max(1);
    PERIOD.store(period, Ordering::Relaxed);
    let deadline = now() + period;
    next_deadline().store(deadline, Ordering::Relaxed);
    program(deadline);
    // SAFETY: the trap entry is installed and handles the timer interrupt; it is taken only
    // once the kernel sets sstatus.SIE.
    unsafe { sie::set_stimer() };
}

/// Programs the tick after the one being handled; ticks missed meanwhile (a long stretch with
/// interrupts off) are dropped rather than delivered in a burst.
#[inline]
pub fn next_tick() {
    let period = PERIOD.load(Ordering::Relaxed);
    // The slot once (each lookup is a per-CPU load and an index).
    let slot = next_deadline();
    let mut deadline = slot.load(Ordering::Relaxed) + period;
    let t = now();
    if deadline <= t {
        deadline = t + period;
    }
    slot.store(deadline, Ordering::Relaxed);
    program(deadline);
}

/// Arms this hart's timer `micros` microseconds from now, for a wait with interrupts off that
/// needs other harts to make progress (`smp.rs`): QEMU's single-threaded round-robin TCG
/// (`-icount`) lets a busy vCPU run on until the next timer deadline, and this hart's tick is
/// already pending there. [`resume_tick`] puts the tick's own deadline back.
pub(super) fn arm_soon(micros: u64) {
    let hz = TIMEBASE_HZ.load(Ordering::Relaxed);
    program(now() + (hz / 1_000_000).max(1) * micros);
}

/// Programs this hart's next tick again after [`arm_soon`] (a deadline already past makes the
/// tick pending at once, as it was).
pub(super) fn resume_tick() {
    program(next_deadline().load(Ordering::Relaxed));
}

/// Whether the harts have Sstc (every hart of a QEMU virt machine is alike).
static SSTC: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Says whether to program the tick through `stimecmp` (Sstc, which the firmware enables for
/// S-mode through `menvcfg.STCE` when the hart has it) instead of SBI.
pub(super) fn use_sstc(on: bool) {
    SSTC.store(on, Ordering::Relaxed);
}

/// Requests a timer interrupt at `deadline` (in `time` ticks); this also clears the pending
/// one. With Sstc one CSR write; otherwise an SBI call, whose firmware path runs a few hundred
/// instructions in M-mode at every tick.
///
/// Inline: on the tick's path (`next_tick`) the Sstc case is a load, a branch and the CSR
/// write, where a call cost a frame besides; the SBI call stays out of line.
#[inline]
fn program(deadline: u64) {
    if SSTC.load(Ordering::Relaxed) {
        // SAFETY: `stimecmp` (CSR 0x14d) only sets this hart's next timer interrupt.
        unsafe { core::arch::asm!("csrw 0x14d, {}", in(reg) deadline, options(nomem, nostack)) };
        return;
    }
    program_sbi(deadline);
}

/// [`program`] without Sstc: the firmware's timer call.
#[cold]
#[inline(never)]
fn program_sbi(deadline: u64) {
    let _ = sbi_rt::set_timer(deadline);
}
