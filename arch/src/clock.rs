//! Counter ticks to nanoseconds by multiply and shift (the Linux `clocksource` `mult`/`shift`
//! pair), shared by every port's `timer::nanos`.
//!
//! `nanos = ticks × 10⁹ / hz` done literally is a 128-bit division (a library call of about a
//! hundred instructions) on every clock read, and the clock is read on hot paths (every
//! Kernel-Notification sleep). The scale computes `mult = ⌊10⁹ · 2^shift / hz⌋` once, and a
//! conversion is then one widening multiply and a shift. The relative error is below
//! `2^-32` (under a nanosecond per four seconds of uptime), and the conversion is monotonic.

use core::sync::atomic::{AtomicU64, Ordering};

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// A published tick-to-nanosecond scale and the counter value that is time zero.
///
/// Calibrated once, at boot, before another CPU reads it: `mult` is published last (Release)
/// and read first (Acquire), so a reader sees either 0 (uncalibrated: every reading 0) or the
/// whole scale. Kept in separate words so a reading needs no unpacking (the `sleep` hot path).
pub struct Scale {
    mult: AtomicU64,
    shift: AtomicU64,
    base: AtomicU64,
}

/// Bits `mult` may use (so `ticks × mult` keeps headroom in 128 bits for any counter).
const MULT_BITS: u32 = 58;

/// The `(mult, shift)` pair for a counter of `hz` ticks per second: the largest shift ≤ 40
/// whose `mult` fits in [`MULT_BITS`] bits (for counters from 4 kHz to 10 GHz that is 40, and
/// `mult` ≥ 2^36, so the relative error of a conversion stays below 2^-36).
pub fn scale_for(hz: u64) -> (u64, u32) {
    let hz = u128::from(hz.max(1));
    let mut shift = 40;
    loop {
        let mult = (NANOS_PER_SEC << shift) / hz;
        if mult < (1u128 << MULT_BITS) || shift == 0 {
            return (mult.min((1u128 << MULT_BITS) - 1) as u64, shift);
        }
        shift -= 1;
    }
}

/// `ticks` converted with `(mult, shift)` (`shift` < 64, as [`scale_for`] gives: saying so lets
/// the compiler shift the 128-bit product with one double shift, no test for shifts ≥ 64).
#[inline(always)]
pub fn convert(ticks: u64, mult: u64, shift: u32) -> u64 {
    ((u128::from(ticks) * u128::from(mult)) >> (shift & 63)) as u64
}

impl Scale {
    /// Uncalibrated: every reading is 0.
    pub const fn new() -> Self {
        Scale { mult: AtomicU64::new(0), shift: AtomicU64::new(0), base: AtomicU64::new(0) }
    }

    /// Publishes the counter's frequency and the value that counts as zero (once, at boot).
    pub fn calibrate(&self, hz: u64, base: u64) {
        let (mult, shift) = scale_for(hz);
        self.base.store(base, Ordering::Relaxed);
        self.shift.store(u64::from(shift), Ordering::Relaxed);
        self.mult.store(mult, Ordering::Release);
    }

    /// Nanoseconds since the base for a counter reading `now` (0 before calibration).
    #[inline(always)]
    pub fn nanos(&self, now: u64) -> u64 {
        let mult = self.mult.load(Ordering::Acquire);
        let shift = self.shift.load(Ordering::Relaxed) as u32;
        convert(now.wrapping_sub(self.base.load(Ordering::Relaxed)), mult, shift)
    }
}

impl Default for Scale {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const YEAR_SECS: u64 = 365 * 24 * 3600;

    fn exact(ticks: u64, hz: u64) -> u128 {
        u128::from(ticks) * NANOS_PER_SEC / u128::from(hz)
    }

    #[test]
    fn uncalibrated_reads_zero() {
        assert_eq!(Scale::new().nanos(12345), 0);
    }

    #[test]
    fn one_gigahertz_is_the_identity() {
        let s = Scale::new();
        s.calibrate(1_000_000_000, 100);
        assert_eq!(s.nanos(100), 0);
        assert_eq!(s.nanos(100 + 123_456_789), 123_456_789);
    }

    #[test]
    fn a_year_at_the_slowest_rate_converts() {
        let hz = 1_000_000;
        let (mult, shift) = scale_for(hz);
        let ticks = YEAR_SECS * hz - 1;
        let want = exact(ticks, hz);
        let got = u128::from(convert(ticks, mult, shift));
        assert!(got <= want && want - got <= want / (1 << 32) + 1, "{got} vs {want}");
    }

    proptest! {
        /// Within 2^-32 relative (plus one for rounding) of the exact division, for every
        /// counter rate the ports meet (10 MHz timebases up to 10 GHz cycle counters) and an
        /// uptime up to a year.
        #[test]
        fn close_to_exact(hz in 1_000_000u64..10_000_000_000, raw in any::<u64>()) {
            // A year of uptime *at this rate*: at 1 MHz a year at 10 GHz's tick count would be
            // 10,000 years, past what a u64 of nanoseconds holds (the test's bug, not the scale's).
            let ticks = raw % (YEAR_SECS * hz);
            let (mult, shift) = scale_for(hz);
            let got = u128::from(convert(ticks, mult, shift));
            let want = exact(ticks, hz);
            prop_assert!(got <= want, "never ahead of the exact value: {got} > {want}");
            prop_assert!(want - got <= want / (1 << 32) + 1, "{got} vs {want}");
        }

        /// Later counter readings never give earlier times.
        #[test]
        fn monotonic(hz in 1_000_000u64..10_000_000_000, a in 0u64..1 << 50, d in 0u64..1 << 40) {
            let (mult, shift) = scale_for(hz);
            prop_assert!(convert(a, mult, shift) <= convert(a + d, mult, shift));
        }
    }
}
