//! Time on x86_64: the TSC as cycle counter and clock, and the local APIC timer as the periodic
//! tick, both calibrated once against the PIT (whose frequency is fixed by the PC standard).

use core::sync::atomic::{AtomicU64, Ordering};
use x86_64::instructions::port::Port;

use super::interrupts::{self, reg, LVT_MASKED};
use super::trap::TIMER_VECTOR;

/// The PIT input clock, Hz.
const PIT_HZ: u64 = 1_193_182;
/// Calibration interval, ms.
const CALIBRATION_MS: u64 = 10;
/// PIT ports and bits.
const PIT_CHANNEL2: u16 = 0x42;
const PIT_COMMAND: u16 = 0x43;
const PIT_GATE_PORT: u16 = 0x61;
const GATE_BIT: u8 = 0x01;
const SPEAKER_BIT: u8 = 0x02;
const OUT2_BIT: u8 = 0x20;
/// Channel 2, lobyte/hibyte access, mode 0 (interrupt on terminal count), binary.
const PIT_CH2_MODE0: u8 = 0xb0;
/// LVT timer periodic mode bit.
const LVT_PERIODIC: u32 = 1 << 17;
/// Divide configuration value for "divide by 16".
const DIVIDE_BY_16: u32 = 0x3;

static TSC_HZ: AtomicU64 = AtomicU64::new(0);
/// Counter ticks to nanoseconds (multiply and shift; set at calibration).
static CLOCK: crate::clock::Scale = crate::clock::Scale::new();
static LAPIC_TIMER_HZ: AtomicU64 = AtomicU64::new(0);

/// What calibration measured.
#[derive(Clone, Copy, Debug)]
pub struct Calibration {
    /// TSC ticks per second.
    pub cycles_hz: u64,
    /// Local APIC timer ticks per second (after the divider).
    pub timer_hz: u64,
}

/// The cycle counter (TSC). Under QEMU with `-icount shift=0` it advances by one per guest
/// instruction.
#[inline]
pub fn cycles() -> u64 {
    // SAFETY: rdtsc is always available on x86_64 and has no side effects.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Nanoseconds since [`calibrate`] ran (0 before). Inlined: the kernel's `sleep` path reads it.
#[inline]
pub fn nanos() -> u64 {
    CLOCK.nanos(cycles())
}

/// Busy-waits at least `us` microseconds (after calibration).
pub fn delay_us(us: u64) {
    let hz = TSC_HZ.load(Ordering::Relaxed).max(1_000_000);
    let end = cycles() + us * (hz / 1_000_000);
    while cycles() < end {
        core::hint::spin_loop();
    }
}

/// Cycle-counter frequency in Hz (0 before calibration).
pub fn cycles_hz() -> u64 {
    TSC_HZ.load(Ordering::Relaxed)
}

/// Measures the TSC and local APIC timer rates against the PIT. Needs the local APIC.
pub fn calibrate() -> Calibration {
    let mut gate: Port<u8> = Port::new(PIT_GATE_PORT);
    let mut command: Port<u8> = Port::new(PIT_COMMAND);
    let mut channel2: Port<u8> = Port::new(PIT_CHANNEL2);
    let count = PIT_HZ * CALIBRATION_MS / 1000;
    interrupts::write(reg::TIMER_DIVIDE, DIVIDE_BY_16);
    interrupts::write(reg::LVT_TIMER, LVT_MASKED);
    // SAFETY: PIT channel 2 is wired to the speaker gate only; with the speaker bit off
    // programming it has no effect besides its OUT2 status bit.
    let (tsc_start, tsc_end, apic_elapsed) = unsafe {
        let g = gate.read() & !(SPEAKER_BIT | GATE_BIT);
        gate.write(g);
        command.write(PIT_CH2_MODE0);
        channel2.write((count & 0xff) as u8);
        channel2.write((count >> 8) as u8);
        interrupts::write(reg::TIMER_INITIAL, u32::MAX);
        let apic_start = interrupts::read(reg::TIMER_CURRENT);
        let tsc_start = cycles();
        gate.write(g | GATE_BIT);
        while gate.read() & OUT2_BIT == 0 {
            core::hint::spin_loop();
        }
        let tsc_end = cycles();
        let apic_end = interrupts::read(reg::TIMER_CURRENT);
        (tsc_start, tsc_end, u64::from(apic_start.wrapping_sub(apic_end)))
    };
    interrupts::write(reg::TIMER_INITIAL, 0);
    let cycles_hz = (tsc_end - tsc_start) * 1000 / CALIBRATION_MS;
    let timer_hz = apic_elapsed * 1000 / CALIBRATION_MS;
    TSC_HZ.store(cycles_hz.max(1), Ordering::Relaxed);
    CLOCK.calibrate(TSC_HZ.load(Ordering::Relaxed), tsc_start);
    LAPIC_TIMER_HZ.store(timer_hz.max(1), Ordering::Relaxed);
    Calibration { cycles_hz, timer_hz }
}

/// Calibrates the clocks and starts the boot CPU's periodic tick at `hz`.
pub fn init(hz: u64) -> Calibration {
    let cal = calibrate();
    start_periodic(hz);
    cal
}

/// Starts this CPU's periodic tick at `hz` interrupts per second on [`TIMER_VECTOR`].
pub fn start_periodic(hz: u64) {
    let per_tick = (LAPIC_TIMER_HZ.load(Ordering::Relaxed) / hz.max(1)).clamp(1, u64::from(u32::MAX));
    interrupts::write(reg::TIMER_DIVIDE, DIVIDE_BY_16);
    interrupts::write(reg::LVT_TIMER, LVT_PERIODIC | u32::from(TIMER_VECTOR));
    interrupts::write(reg::TIMER_INITIAL, per_tick as u32);
}
