//! FP/SIMD state of aarch64 for the kernel's lazy switching — which has nothing to switch here
//! yet: the state already travels with every trap frame.
//!
//! The kernel is built for `aarch64-unknown-none`, whose ABI has NEON: compiled kernel code
//! may use any vector register at any time (copies, zeroing), so the user's registers cannot
//! stay untouched in the hardware while the kernel runs, as lazy switching assumes. Instead
//! every entry saves q0–q31, FPCR and FPSR in the [`TrapFrame`](super::trap::TrapFrame) and
//! every return restores them, so each thread's FP state moves with its frame, eagerly. FP
//! access therefore stays on for EL0 and EL1 (`CPACR_EL1.FPEN` = 0b11): [`disable`] leaves it
//! on, the FP-disabled trap (`ESR_EL1.EC` 0x07) never comes, and the kernel's lazy code never
//! needs [`save`]/[`restore`]; they have nothing to move, since the hardware registers hold
//! kernel values whenever the kernel calls them.
//!
//! Real lazy switching (DESIGN §7: `CPACR_EL1.FPEN` trapping EL0 only, save/restore in
//! [`save`]/[`restore`], no FP in trap frames or in `context::switch`) needs a kernel that
//! never touches FP/SIMD registers, i.e. a kernel built for `aarch64-unknown-none-softfloat`
//! (x86_64's `x86_64-unknown-none` is soft-float already).

/// How FP/SIMD state is saved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaveKind {
    /// q0–q31, FPCR and FPSR saved in every trap frame and restored at every return.
    EagerInTrapFrame,
}

/// Bytes of FP/SIMD state a thread has: 32 128-bit registers, FPCR and FPSR.
const STATE_SIZE: usize = 32 * 16 + 16;
/// Alignment every save area must have (that of `stp q`, kept generous).
pub const AREA_ALIGN: usize = 64;

/// Sets up FP on the calling CPU (the boot code already turned access on for EL0 and EL1).
/// Returns the method and the size of the state.
pub fn init_this_cpu(_features: &super::cpu::Features) -> (SaveKind, usize) {
    (SaveKind::EagerInTrapFrame, STATE_SIZE)
}

/// The save method in use.
pub fn kind() -> SaveKind {
    SaveKind::EagerInTrapFrame
}

/// Bytes of a save area.
pub fn area_size() -> usize {
    STATE_SIZE
}

/// Would turn FP access off for user mode; it stays on (see the module comment).
pub fn disable() {}

/// FP access is always on.
pub fn enable() {}

/// Nothing to save: the current thread's registers are in its trap frame.
///
/// # Safety
/// `area` must be [`area_size`] writable bytes aligned to [`AREA_ALIGN`] (not touched).
pub unsafe fn save(_area: *mut u8) {}

/// Nothing to load: the trap frame restores the thread's registers on its way back.
///
/// # Safety
/// As for [`save`].
pub unsafe fn restore(_area: *const u8) {}

/// Nothing to reset: a new thread's frame starts with zeroed FP/SIMD registers
/// (`TrapFrame::new_user`).
pub fn reset() {}

/// The Kernel Notification format (`tsumugi_abi::kn::fp_format`) of what [`save`] writes.
pub fn thmb_format() -> u64 {
    tsumugi_abi::kn::fp_format::AARCH64_Q
}
