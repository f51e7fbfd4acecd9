//! Kernel counters a user program can read (`schedstat`), by index.
//!
//! `Syscall::Counters` copies `[u64; Counter::COUNT]` for one CPU (or the sum over all CPUs, or
//! the calling domain) into the caller's buffer.

/// The counters, in the order they are copied.
#[repr(usize)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// Switches from one thread to another.
    ContextSwitches = 0,
    /// Loads of a different page-table root (view switches).
    ViewSwitches = 1,
    /// Whole-TLB flushes (untagged root loads and explicit full flushes).
    TlbFlushes = 2,
    /// Single-page TLB invalidations.
    TlbPageFlushes = 3,
    /// Shoot-down requests sent to other CPUs.
    ShootdownsSent = 4,
    /// Shoot-down requests received from other CPUs.
    ShootdownsReceived = 5,
    /// Threads taken from another CPU's run queue.
    Steals = 6,
    /// Timer ticks.
    Ticks = 7,
    /// Threads preempted at the end of their quantum.
    Preemptions = 8,
    /// Inter-processor interrupts sent (all kinds).
    IpisSent = 9,
    /// FP-disabled traps taken (lazy FP switching).
    FpTraps = 10,
    /// FP register saves into a thread's area.
    FpSaves = 11,
    /// FP register restores from a thread's area.
    FpRestores = 12,
    /// FP saves the port skipped because the registers still held what the thread's area
    /// holds (riscv64: `sstatus.FS` Clean); ports that cannot tell always save.
    FpSavesSkipped = 13,
}

impl Counter {
    /// Number of counters.
    pub const COUNT: usize = 14;
    /// Every counter in copy order.
    pub const ALL: [Counter; Counter::COUNT] = [
        Counter::ContextSwitches,
        Counter::ViewSwitches,
        Counter::TlbFlushes,
        Counter::TlbPageFlushes,
        Counter::ShootdownsSent,
        Counter::ShootdownsReceived,
        Counter::Steals,
        Counter::Ticks,
        Counter::Preemptions,
        Counter::IpisSent,
        Counter::FpTraps,
        Counter::FpSaves,
        Counter::FpRestores,
        Counter::FpSavesSkipped,
    ];

    /// Short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            Counter::ContextSwitches => "switches",
            Counter::ViewSwitches => "view-switches",
            Counter::TlbFlushes => "tlb-flushes",
            Counter::TlbPageFlushes => "tlb-page-flushes",
            Counter::ShootdownsSent => "shootdowns-sent",
            Counter::ShootdownsReceived => "shootdowns-recv",
            Counter::Steals => "steals",
            Counter::Ticks => "ticks",
            Counter::Preemptions => "preemptions",
            Counter::IpisSent => "ipis",
            Counter::FpTraps => "fp-traps",
            Counter::FpSaves => "fp-saves",
            Counter::FpRestores => "fp-restores",
            Counter::FpSavesSkipped => "fp-skipped",
        }
    }
}

/// Which set of counters `Syscall::Counters` reads (its first argument).
pub mod scope {
    /// Sum over all CPUs.
    pub const ALL_CPUS: usize = usize::MAX;
    /// The calling domain (only context and view switches are kept per domain).
    pub const DOMAIN: usize = usize::MAX - 1;
    /// The processor allocation between programs (space sharing): copies the words indexed by
    /// [`super::shares`] instead of the counters.
    pub const SHARES: usize = usize::MAX - 2;
    /// Number of CPUs online (returned by the syscall as its value for any scope).
    pub const fn cpu(index: usize) -> usize {
        index
    }
}

/// Words of `Syscall::Counters` with scope [`scope::SHARES`]: the kernel's processor
/// allocation between programs using Kernel Notification (ARCHITECTURE.md, "Processor
/// allocation").
pub mod shares {
    /// vCPUs granted now, over all programs.
    pub const GRANTED: usize = 0;
    /// The most vCPUs ever granted at once (the space-sharing invariant: never more than the
    /// CPUs while at most that many programs share them).
    pub const MAX_GRANTED: usize = 1;
    /// Grants made (a vCPU started or started again), machine-wide.
    pub const GRANTS: usize = 2;
    /// Revocations made, machine-wide.
    pub const REVOCATIONS: usize = 3;
    /// Programs registered now.
    pub const PROGRAMS: usize = 4;
    /// vCPUs granted now to the calling program.
    pub const MINE: usize = 5;
    /// The calling program's share now (its target).
    pub const MY_TARGET: usize = 6;
    /// Words copied.
    pub const COUNT: usize = 7;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_is_listed_in_copy_order_with_a_distinct_name() {
        for (index, counter) in Counter::ALL.iter().enumerate() {
            assert_eq!(*counter as usize, index);
        }
        for (i, a) in Counter::ALL.iter().enumerate() {
            assert!(Counter::ALL[i + 1..].iter().all(|b| a.name() != b.name()));
        }
    }
}
