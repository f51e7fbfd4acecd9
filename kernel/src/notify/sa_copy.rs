//! Baseline: Scheduler-Activations-style notification (`kn=sa`), for comparison only.
//!
//! Scheduler Activations (and C-area designs) save a stopped thread's context in memory the
//! kernel owns; the upcall tells the library, which then has the context copied into its own
//! thread structure. Kernel Notification's zero-copy save writes it straight into the ThMB and
//! avoids that copy. With `kn=sa` the kernel does the former: every stop saves into a per-vCPU
//! kernel area (frame, and FP state for an FP user), the upcall and ring event are as usual,
//! and the library calls `kn_fetch(vcpu, thmb)`, which copies the context out into the ThMB
//! through the checked path every conventional syscall copy takes. Everything else is shared
//! with the real path, so `notification_sa_copy` minus `blocking_syscall_to_upcall` in
//! `kn_cost` is the price of the copy (MULiTh Table 2: 418 vs 256 instructions).

use alloc::vec::Vec;
use core::sync::atomic::Ordering;
use tsumugi_abi::kn::FullFrame;
use tsumugi_abi::syscall::Errno;

use crate::thread::{Thread, NOT_A_VCPU};

/// Whether the baseline is on (`kn=sa` boot option).
pub static SWITCH: super::state::BootSwitch = super::state::BootSwitch::off();

/// Whether the baseline is on.
#[inline]
pub fn enabled() -> bool {
    SWITCH.is_on()
}

/// A context saved in the kernel's own memory.
pub struct Saved {
    full: FullFrame,
    /// FP state in the port's save format, if the thread had any.
    fp: Option<Vec<u8>>,
}

/// Saves the stopped context of `me` (a vCPU) in its program's kernel-owned area for its vCPU,
/// replacing what an earlier stop left there.
pub fn save(me: &Thread, full: &FullFrame, uses_fp: bool) {
    let vcpu = me.vcpu.load(Ordering::Relaxed);
    let Some(domain) = &me.domain else { return };
    if vcpu == NOT_A_VCPU {
        return;
    }
    let fp = if uses_fp { crate::fpu::with_current_state(|state| state.to_vec()) } else { None };
    let mut st = domain.kn.state();
    if st.c_area.len() < st.vcpus.len() {
        let n = st.vcpus.len();
        st.c_area.resize_with(n, || None);
    }
    if let Some(slot) = st.c_area.get_mut(vcpu) {
        *slot = Some(Saved { full: *full, fp });
    }
}

/// `kn_fetch(vcpu, thmb)`: copies the context saved for `vcpu` of the caller's program into
/// the ThMB at `thmb`, checked against the caller's view.
pub fn fetch(me: &Thread, vcpu: usize, thmb: u64) -> Result<usize, Errno> {
    if !enabled() {
        return Err(Errno::Inval);
    }
    let domain = me.domain.as_ref().ok_or(Errno::Inval)?;
    let view = me.view().ok_or(Errno::Fault)?;
    let saved = {
        let mut st = domain.kn.state();
        if vcpu >= st.vcpus.len() {
            return Err(Errno::Inval);
        }
        st.c_area.get_mut(vcpu).and_then(Option::take).ok_or(Errno::Again)?
    };
    super::save::write_checked(view, thmb, &saved.full, saved.fp.as_deref()).map_err(|_| Errno::Fault)?;
    Ok(0)
}
