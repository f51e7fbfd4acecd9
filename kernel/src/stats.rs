//! Per-CPU and per-domain event counters (`tsumugi_abi::stats::Counter`).

use core::sync::atomic::{AtomicU64, Ordering};
use tsumugi_abi::stats::Counter;

/// One set of counters.
pub struct Counters([AtomicU64; Counter::COUNT]);

impl Counters {
    /// All zero.
    pub const fn new() -> Self {
        #[allow(clippy::declare_interior_mutable_const)]
        const ZERO: AtomicU64 = AtomicU64::new(0);
        Counters([ZERO; Counter::COUNT])
    }

    /// Adds one.
    #[inline]
    pub fn bump(&self, c: Counter) {
        self.0[c as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Reads one.
    pub fn get(&self, c: Counter) -> u64 {
        self.0[c as usize].load(Ordering::Relaxed)
    }

    /// Reads all, in `Counter::ALL` order.
    pub fn snapshot(&self) -> [u64; Counter::COUNT] {
        Counter::ALL.map(|c| self.get(c))
    }
}

impl Default for Counters {
    fn default() -> Self {
        Self::new()
    }
}
