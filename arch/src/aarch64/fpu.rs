//! FP/SIMD state of aarch64 for the kernel's lazy switching, through `CPACR_EL1.FPEN`: with
//! FPEN = 0b00 every FP/SIMD instruction (and FPCR/FPSR access) at EL0 or EL1 traps with
//! `ESR_EL1.EC` 0x07, which `trap.rs` reports as `Trap::FpuDisabled` when it comes from EL0 —
//! the analogue of x86_64's CR0.TS and #NM.
//!
//! Lazy switching needs a kernel that never touches the FP/SIMD registers, which hold user
//! state while the kernel runs: the kernel is built for `aarch64-unknown-none-softfloat`
//! (`xtask` `Arch::kernel_triple`), whose code generator has no FP/SIMD at all (the assembler
//! even refuses FP instructions), so trap frames and kernel thread switches carry no FP
//! registers. The only kernel code that touches them is the assembly below, run with access
//! turned on by the generic lazy code (`kernel/src/fpu.rs`). A stray FP instruction in the
//! kernel would trap at EL1 and be reported as a kernel exception, not silently clobber a
//! thread's registers: FPEN traps EL1 too whenever access is off.
//!
//! SVE and SME stay trapped (`CPACR_EL1.ZEN`/`SMEN` = 0): their larger registers are not part
//! of the saved state, so a program that uses them ends with an exception report.

use core::arch::{asm, global_asm};

/// How FP/SIMD state is saved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaveKind {
    /// q0–q31 with `stp`/`ldp`, then FPCR and FPSR (the Kernel Notification format
    /// `AARCH64_Q`), saved only when another thread touches FP.
    QRegisters,
}

/// Bytes of FP/SIMD state a thread has: 32 128-bit registers, then FPCR and FPSR as u64s.
const STATE_SIZE: usize = 32 * 16 + 16;
/// Offset of FPCR (FPSR follows it) in a save area.
const FPCR_OFFSET: usize = 32 * 16;
/// Alignment every save area must have (that of `stp q`, kept generous).
pub const AREA_ALIGN: usize = 64;

/// `CPACR_EL1.FPEN`: bits 21:20.
const FPEN_MASK: u64 = 0b11 << 20;
/// `FPEN` = 0b11: no FP/SIMD traps at EL0 or EL1.
const FPEN_ON: u64 = 0b11 << 20;

extern "C" {
    fn fpu_save_registers(area: *mut u8);
    fn fpu_load_registers(area: *const u8);
    fn fpu_zero_registers();
}

// fpu_save_registers(area: x0): q0..q31, FPCR, FPSR into the area.
// fpu_load_registers(area: x0): the same from the area.
// fpu_zero_registers(): q0..q31, FPCR and FPSR to zero (round to nearest, no flags).
//
// Assembly functions rather than inline asm, on purpose: the kernel's target has no FP/SIMD,
// so Rust can neither name the vector registers as clobbers nor hold values in them, and
// nothing in the kernel notices that a call changed them (they belong to user threads). The
// soft-float target does not let the assembler accept FP instructions either, so this block
// turns the FP and SIMD extensions on for itself only. Callers must have FP access on
// (`enable`).
global_asm!(
    r#"
    .section .text.fpu, "ax"
    .arch_extension fp
    .arch_extension simd
    .balign 4
    .global fpu_save_registers
fpu_save_registers:
    stp     q0, q1, [x0, #0x000]
    stp     q2, q3, [x0, #0x020]
    stp     q4, q5, [x0, #0x040]
    stp     q6, q7, [x0, #0x060]
    stp     q8, q9, [x0, #0x080]
    stp     q10, q11, [x0, #0x0a0]
    stp     q12, q13, [x0, #0x0c0]
    stp     q14, q15, [x0, #0x0e0]
    stp     q16, q17, [x0, #0x100]
    stp     q18, q19, [x0, #0x120]
    stp     q20, q21, [x0, #0x140]
    stp     q22, q23, [x0, #0x160]
    stp     q24, q25, [x0, #0x180]
    stp     q26, q27, [x0, #0x1a0]
    stp     q28, q29, [x0, #0x1c0]
    stp     q30, q31, [x0, #0x1e0]
    mrs     x1, fpcr
    mrs     x2, fpsr
    str     x1, [x0, #{fpcr}]
    str     x2, [x0, #{fpsr}]
    ret

    .global fpu_load_registers
fpu_load_registers:
    ldp     q0, q1, [x0, #0x000]
    ldp     q2, q3, [x0, #0x020]
    ldp     q4, q5, [x0, #0x040]
    ldp     q6, q7, [x0, #0x060]
    ldp     q8, q9, [x0, #0x080]
    ldp     q10, q11, [x0, #0x0a0]
    ldp     q12, q13, [x0, #0x0c0]
    ldp     q14, q15, [x0, #0x0e0]
    ldp     q16, q17, [x0, #0x100]
    ldp     q18, q19, [x0, #0x120]
    ldp     q20, q21, [x0, #0x140]
    ldp     q22, q23, [x0, #0x160]
    ldp     q24, q25, [x0, #0x180]
    ldp     q26, q27, [x0, #0x1a0]
    ldp     q28, q29, [x0, #0x1c0]
    ldp     q30, q31, [x0, #0x1e0]
    ldr     x1, [x0, #{fpcr}]
    ldr     x2, [x0, #{fpsr}]
    msr     fpcr, x1
    msr     fpsr, x2
    ret

    .global fpu_zero_registers
fpu_zero_registers:
    movi    v0.2d, #0
    movi    v1.2d, #0
    movi    v2.2d, #0
    movi    v3.2d, #0
    movi    v4.2d, #0
    movi    v5.2d, #0
    movi    v6.2d, #0
    movi    v7.2d, #0
    movi    v8.2d, #0
    movi    v9.2d, #0
    movi    v10.2d, #0
    movi    v11.2d, #0
    movi    v12.2d, #0
    movi    v13.2d, #0
    movi    v14.2d, #0
    movi    v15.2d, #0
    movi    v16.2d, #0
    movi    v17.2d, #0
    movi    v18.2d, #0
    movi    v19.2d, #0
    movi    v20.2d, #0
    movi    v21.2d, #0
    movi    v22.2d, #0
    movi    v23.2d, #0
    movi    v24.2d, #0
    movi    v25.2d, #0
    movi    v26.2d, #0
    movi    v27.2d, #0
    movi    v28.2d, #0
    movi    v29.2d, #0
    movi    v30.2d, #0
    movi    v31.2d, #0
    msr     fpcr, xzr
    msr     fpsr, xzr
    ret
    .arch_extension nosimd
    .arch_extension nofp
    "#,
    fpcr = const FPCR_OFFSET,
    fpsr = const FPCR_OFFSET + 8,
);

/// Sets up FP on the calling CPU and leaves FP access off (every FP/SIMD instruction traps).
/// Returns the method and the size of the state.
pub fn init_this_cpu(_features: &super::cpu::Features) -> (SaveKind, usize) {
    disable();
    (SaveKind::QRegisters, STATE_SIZE)
}

/// The save method in use.
pub fn kind() -> SaveKind {
    SaveKind::QRegisters
}

/// Bytes of a save area.
pub fn area_size() -> usize {
    STATE_SIZE
}

/// Sets `CPACR_EL1.FPEN` to `fpen` if it differs (a write needs an `isb` before the next
/// instruction sees it, so unchanged settings are not written again).
fn set_fpen(fpen: u64) {
    let cpacr: u64;
    // SAFETY: reads a system register.
    unsafe { asm!("mrs {}, cpacr_el1", out(reg) cpacr, options(nomem, nostack, preserves_flags)) };
    if cpacr & FPEN_MASK != fpen {
        // SAFETY: FPEN only decides whether FP/SIMD instructions trap; the kernel executes
        // none outside this module's assembly.
        unsafe { asm!("msr cpacr_el1, {}", "isb", in(reg) (cpacr & !FPEN_MASK) | fpen, options(nomem, nostack, preserves_flags)) };
    }
}

/// Turns FP access off: the next FP/SIMD instruction at EL0 (or EL1) traps.
pub fn disable() {
    set_fpen(0);
}

/// Turns FP access on, for EL0 and for this module's save and load.
pub fn enable() {
    set_fpen(FPEN_ON);
}

/// Saves the FP/SIMD registers into `area`. FP access must be on.
///
/// # Safety
/// `area` must be [`area_size`] writable bytes aligned to [`AREA_ALIGN`].
pub unsafe fn save(area: *mut u8) {
    // SAFETY: guaranteed by the caller (size, alignment, FP on); the function only stores the
    // FP/SIMD registers into the area.
    unsafe { fpu_save_registers(area) }
}

/// Loads the FP/SIMD registers from `area` (made by [`save`]). FP access must be on.
///
/// # Safety
/// As for [`save`], and `area` must hold a valid saved state.
pub unsafe fn restore(area: *const u8) {
    // SAFETY: guaranteed by the caller; the function only loads the FP/SIMD registers (see
    // the comment above the assembly for why it may change them behind the compiler's back).
    unsafe { fpu_load_registers(area) }
}

/// Puts the FP/SIMD registers in their initial state (zero; FPCR 0: round to nearest, no
/// traps; FPSR 0: no flags) for a thread's first FP use, so it sees nothing of the previous
/// owner's. FP access must be on.
pub fn reset() {
    // SAFETY: only the FP/SIMD registers, FPCR and FPSR change (see above).
    unsafe { fpu_zero_registers() }
}

/// The Kernel Notification format (`tsumugi_abi::kn::fp_format`) of what [`save`] writes.
pub fn thmb_format() -> u64 {
    tsumugi_abi::kn::fp_format::AARCH64_Q
}
