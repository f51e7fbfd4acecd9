//! The architecture-neutral words for why the kernel was entered: every port classifies its
//! traps into these, so the kernel handles them once.

/// How a faulting access touched memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// A data read.
    Read,
    /// A data write.
    Write,
    /// An instruction fetch.
    Execute,
}

/// Kinds of inter-processor interrupt the kernel sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpiKind {
    /// Look at the run queue.
    Reschedule,
    /// Enter the kernel and check the running thread.
    Kick,
    /// Shoot down TLB entries.
    Shootdown,
    /// Save the FP registers of this CPU's FP owner (another CPU wants that thread's state).
    FpuSave,
}

/// Why the kernel was entered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trap {
    /// A syscall (x86_64 `syscall`, riscv64 `ecall`, aarch64 `svc`).
    Syscall,
    /// The timer tick.
    Timer,
    /// An FP/SIMD instruction while FP access is off (lazy FP switching).
    FpuDisabled,
    /// A page fault at `address`; `present` says a translation existed (a rights violation).
    PageFault {
        /// The faulting address.
        address: u64,
        /// The kind of access.
        access: Access,
        /// Whether a translation existed (rights violation) or not.
        present: bool,
    },
    /// Any other exception.
    Exception {
        /// The port's exception number (x86_64 vector, riscv64 `scause`, aarch64 `ESR.EC`).
        vector: u8,
        /// Its name in the architecture manual.
        name: &'static str,
    },
    /// An inter-processor interrupt.
    Ipi(IpiKind),
    /// An interrupt nobody asked for (its number).
    Spurious(u8),
}

/// Hardware events the kernel may ask a port's PMU for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HwEvent {
    /// Cycles.
    Cycles,
    /// Instructions retired.
    Instructions,
    /// Data-TLB misses.
    DtlbMiss,
    /// Instruction-TLB misses.
    ItlbMiss,
}
