//! Baseline: signal-style preemption (`preempt=signal`), for comparison only.
//!
//! A conventional kernel tells a user-level scheduler about a preemption with a signal: the
//! interrupted context is copied onto the thread's own stack as a signal frame, a handler runs
//! there, and a `sigreturn` syscall copies the frame back and resumes it. Kernel Notification
//! instead saves into the ThMB (zero-copy) and upcalls on the vCPU's own stack. With
//! `preempt=signal` the kernel preempts a KN program's user threads the conventional way: the
//! handler is the program's registered one, entered on the thread's stack below the frame with
//! `(PREEMPTED, frame, vcpu, 0)`; `kn_sigreturn(frame)` resumes. Copies go through the checked
//! path, as a conventional kernel's signal delivery does. FP state stays in the registers (the
//! handler must not touch FP; the measured row is of a thread without FP). MULiTh Table 2:
//! preemption via KN 341 instructions vs a signal-style copy 718.

use core::mem::size_of;
use arch::mapping::MapFlags;
use arch::trap::TrapFrame;
use tsumugi_abi::kn::{EventKind, FullFrame};
use tsumugi_abi::syscall::Errno;

use crate::mm::space;
use crate::thread::Thread;

/// Whether the baseline is on (`preempt=signal` boot option).
pub static SWITCH: super::state::BootSwitch = super::state::BootSwitch::off();

/// Whether the baseline is on.
#[inline]
pub fn enabled() -> bool {
    SWITCH.is_on()
}

/// Bytes below the interrupted stack pointer left alone (the x86_64 System V red zone; the
/// other ports have none, and keeping it costs them nothing).
const RED_ZONE: u64 = 128;

/// The signal frame: the context, then the LTN the thread had.
#[repr(C)]
#[derive(Clone, Copy)]
struct SignalFrame {
    full: FullFrame,
    ltn: u64,
}

const FRAME_BYTES: usize = size_of::<SignalFrame>();

fn bytes_of(f: &SignalFrame) -> &[u8] {
    // SAFETY: SignalFrame is #[repr(C)] plain u64 fields: its bytes are initialised.
    unsafe { core::slice::from_raw_parts(f as *const SignalFrame as *const u8, FRAME_BYTES) }
}

/// Pushes the interrupted context of `me` (vCPU `vcpu`, LTN `ltn`) on its stack and makes
/// `frame` enter the handler there. `Err` with the report if the stack cannot take the frame.
pub fn deliver(me: &Thread, frame: &mut TrapFrame, vcpu: usize, ltn: u64) -> Result<(), alloc::string::String> {
    let cfg = me.domain.as_ref().and_then(|d| d.kn.config()).ok_or_else(|| alloc::string::String::from("not a KN program"))?;
    let view = me.view().ok_or_else(|| alloc::string::String::from("no view"))?;
    let sig = SignalFrame { full: frame.to_full_frame(), ltn };
    let at = (frame.sp().wrapping_sub(RED_ZONE + FRAME_BYTES as u64)) & !63;
    // The conventional checked copy-out (rights, lazy fill), then the fix-up copy.
    let checked = space::with(|s, m| s.check(view, at, FRAME_BYTES as u64, MapFlags::WRITE).is_ok() && s.populate(m, view, at, FRAME_BYTES as u64).is_ok());
    if !checked || crate::user_access::copy_out(at, bytes_of(&sig)).is_err() {
        return Err(alloc::format!("preempt=signal: the thread's stack at {at:#x} cannot take a signal frame"));
    }
    super::count_upcall(me, me.domain.as_ref().expect("checked"), EventKind::Preempted as u64);
    frame.set_upcall(cfg.handler, at, [EventKind::Preempted as u64, at, vcpu as u64, 0]);
    arch::cpu::set_user_ltn(0);
    Ok(())
}

/// `kn_sigreturn(at)`: resumes the context in the signal frame at `at` (checked copy-in).
/// Returns the value the syscall must store as its result: the resumed context's own result
/// register, so that storing it changes nothing.
pub fn sigreturn(me: &Thread, frame: &mut TrapFrame, at: u64) -> Result<usize, Errno> {
    if !enabled() {
        return Err(Errno::Inval);
    }
    let view = me.view().ok_or(Errno::Fault)?;
    space::with(|s, m| {
        s.check(view, at, FRAME_BYTES as u64, MapFlags::READ).map_err(|_| Errno::Fault)?;
        s.populate(m, view, at, FRAME_BYTES as u64).map_err(|_| Errno::NoMem)
    })?;
    let mut raw = [0u8; FRAME_BYTES];
    crate::user_access::copy_in(&mut raw, at).map_err(|_| Errno::Fault)?;
    // SAFETY: `raw` holds FRAME_BYTES bytes and SignalFrame is plain u64 fields (any bits are a
    // valid value); read unaligned from the byte array.
    let sig: SignalFrame = unsafe { core::ptr::read_unaligned(raw.as_ptr() as *const SignalFrame) };
    if sig.ltn >= arch::layout::KERNEL_HALF || !frame.restore_full_frame(&sig.full) {
        return Err(Errno::Inval);
    }
    arch::cpu::set_user_ltn(sig.ltn);
    Ok(sig.full.result() as usize)
}
