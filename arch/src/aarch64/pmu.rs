//! Hardware event counting on aarch64: for now the generic timer's virtual count stands in for
//! cycles (as the TSC does on x86_64); every other event is reported unsupported, so the
//! kernel answers ENOTSUP rather than a made-up zero. PMUv3 (`PMCCNTR_EL0`, the event counters
//! with the events QEMU implements, DESIGN §3) is later work.

/// Hardware events the kernel may ask for.
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

/// Nothing to set up until PMUv3 is driven. Call on every CPU.
pub fn init_this_cpu() {}

/// Whether `event` can be counted on this machine.
pub fn supported(event: HwEvent) -> bool {
    matches!(event, HwEvent::Cycles)
}

/// The current count of a supported event on this CPU (0 for the others, which the kernel
/// never asks for since [`supported`] says no).
pub fn read(event: HwEvent) -> u64 {
    match event {
        HwEvent::Cycles => super::timer::cycles(),
        HwEvent::Instructions | HwEvent::DtlbMiss | HwEvent::ItlbMiss => 0,
    }
}
