//! Performance counters for user programs (`Syscall::PerfOpen` and friends).
//!
//! Counters are per thread: the kernel saves and restores them when it switches threads, so a
//! thread sees only its own events. An event the machine cannot count is refused with
//! `Errno::NotSup` when opened — never a silent zero.
//!
//! Whose thread: a call made with the LTN register non-zero (a user thread of an M:N program)
//! uses that *user thread's* counters, keyed by (program, LTN); the kernel carries them in
//! whichever activation runs the user thread — the library reports each resume with
//! `Syscall::PerfSwitch` while its program has such counters open. Otherwise the kernel
//! thread's own. A handle another thread opened answers `Errno::Inval`; a thread's
//! `MAX_OPEN + 1`-th counter, or the first of a user thread past the kernel's table of user
//! threads with counters (256), answers `Errno::NoMem`.

/// Countable events.
#[repr(usize)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// CPU cycles while the thread runs (x86_64: the TSC, which counts guest instructions under
    /// QEMU `-icount shift=0`; riscv64 `cycle`; aarch64 PMUv3 cycle counter).
    Cycles = 0,
    /// Instructions retired while the thread runs (needs a hardware PMU).
    Instructions = 1,
    /// Data-TLB misses (riscv64 under QEMU through the SBI PMU; elsewhere unsupported).
    DtlbMiss = 2,
    /// Instruction-TLB misses (as above).
    ItlbMiss = 3,
    /// Page-table root loads when switching to this thread (software).
    ViewSwitches = 16,
    /// Whole-TLB flushes when switching to this thread (software).
    TlbFlushes = 17,
    /// Upcalls delivered to this thread (software; for a user thread: the upcalls its own stops
    /// caused — a blocking call, a preemption — and any delivered while it ran on the vCPU).
    Upcalls = 18,
    /// Times this thread was switched to (software; for a user thread: its resumes by the
    /// library).
    ContextSwitches = 19,
}

impl Event {
    /// Every event.
    pub const ALL: [Event; 8] = [
        Event::Cycles,
        Event::Instructions,
        Event::DtlbMiss,
        Event::ItlbMiss,
        Event::ViewSwitches,
        Event::TlbFlushes,
        Event::Upcalls,
        Event::ContextSwitches,
    ];

    /// Decodes an event number.
    pub fn from_number(n: usize) -> Option<Event> {
        Self::ALL.iter().copied().find(|e| *e as usize == n)
    }

    /// Whether the kernel counts it in software (always supported).
    pub fn is_software(self) -> bool {
        self as usize >= Event::ViewSwitches as usize
    }

    /// Short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            Event::Cycles => "cycles",
            Event::Instructions => "instructions",
            Event::DtlbMiss => "dtlb-misses",
            Event::ItlbMiss => "itlb-misses",
            Event::ViewSwitches => "view-switches",
            Event::TlbFlushes => "tlb-flushes",
            Event::Upcalls => "upcalls",
            Event::ContextSwitches => "context-switches",
        }
    }
}

/// Counters a thread may have open at once.
pub const MAX_OPEN: usize = 8;
