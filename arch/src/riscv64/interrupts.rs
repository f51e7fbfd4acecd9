//! Interrupt sources of the riscv64 port. Only the supervisor timer is used so far; it needs no
//! interrupt controller (the PLIC routes device interrupts and comes with the first driver that
//! needs one; IPIs for SMP arrive as supervisor software interrupts).

use crate::addr::PhysAddr;
use riscv::register::{sie, sip};

/// Brings up this machine's interrupt sources: masks everything in `sie` until the parts of
/// the kernel that use a source enable it (`timer::init` enables the timer). `map_mmio` maps
/// device registers uncached; nothing needs it yet.
pub fn init(_map_mmio: &mut dyn FnMut(PhysAddr, u64) -> Option<u64>) -> Result<(), &'static str> {
    // SAFETY: masking interrupt sources has no effect beyond holding them off.
    unsafe {
        sie::clear_ssoft();
        sie::clear_sext();
        sie::clear_stimer();
    }
    Ok(())
}

/// Signals the end of the interrupt being handled. The only interrupt is the timer, whose
/// pending bit (`sip.STIP`) stays set until the next deadline is programmed, so that is what
/// ends it.
pub fn end_of_interrupt() {
    if sip::read().stimer() {
        super::timer::next_tick();
    }
}
