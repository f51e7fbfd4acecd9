//! Interrupt sources of the riscv64 port: the supervisor timer (its own tick, no controller
//! needed) and supervisor software interrupts, which carry inter-processor interrupts. The PLIC,
//! which routes device interrupts, comes with the first driver that needs one.
//!
//! An SBI IPI carries no payload (it only sets the target's `sip.SSIP`), so the sender leaves
//! its message in the target hart's mailbox first; the trap entry takes one message per
//! software interrupt (see `take_ipi`).

use core::sync::atomic::{AtomicU64, Ordering};

use crate::addr::PhysAddr;
use riscv::register::{sie, sip};

/// Most hart ids the mailboxes cover.
pub const MAX_HARTS: usize = 64;
/// What `take_ipi` returns when the mailbox was empty.
pub const NO_MESSAGE: u64 = u64::MAX;

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: AtomicU64 = AtomicU64::new(0);
/// Pending IPI messages per hart id, one bit per message number.
static MAILBOXES: [AtomicU64; MAX_HARTS] = [EMPTY; MAX_HARTS];

/// Brings up this machine's interrupt sources: masks external interrupts, accepts software
/// interrupts (IPIs), and leaves the timer to `timer::init`. `map_mmio` maps device registers
/// uncached; nothing needs it yet.
pub fn init(_map_mmio: &mut dyn FnMut(PhysAddr, u64) -> Option<u64>) -> Result<(), &'static str> {
    // SAFETY: masking sources only holds them off; software interrupts are handled by the trap
    // entry (take_ipi) and taken only once the kernel sets sstatus.SIE.
    unsafe {
        sie::clear_sext();
        sie::clear_stimer();
        sip::clear_ssoft();
        sie::set_ssoft();
    }
    Ok(())
}

/// Signals the end of the interrupt being handled. The timer's pending bit (`sip.STIP`) stays
/// set until the next deadline is programmed, so that is what ends a tick; a software
/// interrupt was already acknowledged when its message was taken. Inline: it re-arms the tick
/// on every timer interrupt (the preemption path), where a call would add a frame of its own.
#[inline]
pub fn end_of_interrupt() {
    if sip::read().stimer() {
        super::timer::next_tick();
    }
}

/// Sends IPI message `vector` (a `trap::*_VECTOR`) to the hart with id `hart`.
pub fn send_ipi(hart: u32, vector: u8) {
    let Some(mailbox) = MAILBOXES.get(hart as usize) else { return };
    mailbox.fetch_or(1 << (vector & 63), Ordering::Release);
    // HartMask: bit 0 of the mask stands for hart `base`.
    let _ = sbi_rt::send_ipi(sbi_rt::HartMask::from_mask_base(1, hart as usize));
}

/// Acknowledges a software interrupt on this hart and takes one message from its mailbox
/// (the lowest-numbered), or [`NO_MESSAGE`]. If more messages wait, the software interrupt is
/// raised again so each gets its own trap.
pub(super) fn take_ipi() -> u64 {
    // SAFETY: clearing SSIP acknowledges the interrupt being handled.
    unsafe { sip::clear_ssoft() };
    let Some(mailbox) = MAILBOXES.get(super::cpu::hw_id() as usize) else { return NO_MESSAGE };
    let pending = mailbox.load(Ordering::Acquire);
    if pending == 0 {
        return NO_MESSAGE;
    }
    let lowest = pending & pending.wrapping_neg();
    let before = mailbox.fetch_and(!lowest, Ordering::AcqRel);
    if before & !lowest != 0 {
        // SAFETY: raising this hart's own software interrupt only makes it trap again.
        unsafe { sip::set_ssoft() };
    }
    u64::from(lowest.trailing_zeros())
}
