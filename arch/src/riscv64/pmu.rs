//! Hardware event counting on riscv64: the `cycle` and `instret` CSRs, which OpenSBI opens to
//! S-mode (`mcounteren`). Under QEMU TCG with `-icount shift=0` both advance once per guest
//! instruction. TLB-miss events need the SBI PMU extension (QEMU emulates DTLB/ITLB misses
//! through it, DESIGN §3): not programmed yet, so they are reported unsupported, never a fake
//! zero.

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

/// Prepares counting on the calling hart. The two architectural counters need nothing.
pub fn init_this_cpu() {}

/// Whether `event` can be counted on this machine.
pub fn supported(event: HwEvent) -> bool {
    match event {
        HwEvent::Cycles | HwEvent::Instructions => true,
        HwEvent::DtlbMiss | HwEvent::ItlbMiss => false,
    }
}

/// The current count of a supported event on this hart (0 for unsupported ones, which the
/// kernel never asks for: see [`supported`]).
pub fn read(event: HwEvent) -> u64 {
    match event {
        HwEvent::Cycles => super::timer::cycles(),
        HwEvent::Instructions => riscv::register::instret::read64(),
        HwEvent::DtlbMiss | HwEvent::ItlbMiss => 0,
    }
}
