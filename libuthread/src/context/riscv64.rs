//! riscv64 context switching (LP64D psABI). Every entry point is plain `global_asm!`: a switch
//! changes the stack pointer, which no Rust function (and no `asm!` block inside one) may do,
//! and the FULL restore must load every general-purpose register, so no compiler-managed
//! register may survive it.
//!
//! Entry points (all `extern "C"`, all in `.text`, `.hidden`):
//!
//! | symbol | Rust signature | does |
//! |---|---|---|
//! | `libuthread_switch_out` | `(from: *mut Thmb, stack_top: usize, entry: Entry, a0: usize, a1: usize)` | save window (and `fs0`–`fs11`, `fcsr` if FP is live on the vCPU), mask = WINDOW, `entry(a0, a1)` on `stack_top`; returns when `from` is resumed |
//! | `libuthread_call_on_stack` | `(stack_top: usize, entry: Entry, a0: usize, a1: usize) -> !` | `entry(a0, a1)` on `stack_top`, nothing saved |
//! | `libuthread_switch_window` | `(from: *mut Thmb, to: *mut Thmb, vcpu: *const Vcpu)` | save window into `from` (FP part per the vCPU's `FP_LIVE` word), fence, mask = WINDOW, then as `libuthread_resume_window(to, to)`; returns when `from` is resumed |
//! | `libuthread_resume_window` | `(to: *mut Thmb, ltn: *mut Thmb) -> !` | [FP part of the window], LTN = `ltn`, restore window, jump |
//! | `libuthread_switch_out_full` | as `libuthread_switch_out` | the full-save baseline: `x1`..`x31`, and `f0`..`f31` + `fcsr` into the FP area, mask = FULL\|FP |
//! | `libuthread_resume_full` | `(to: *mut Thmb, fp_format: u64) -> !` | [FP from the FP area], LTN = `to`, restore `to.resume` but `gp`, jump through `gp` |
//! | `libuthread_thread_start` | (jumped to by a window resume) | first instruction of every user thread |
//! | `libuthread_promote_oldest` | `(me: *mut Thmb)` (called by `asm!`, not by Rust) | `sched::promote_oldest_record_c(me)` keeping every general-purpose register but a0 and ra (`context::preserving_call!`) |
//!
//! `Entry` is `unsafe extern "C" fn(usize, usize) -> !`.
//!
//! The window-resume sequences lie between `libuthread_resume_window_start` and
//! `libuthread_resume_window_end` (`context::interrupted_resume`): the direct switch's own
//! resume of `to` is inside, after its save (which runs with LTN = 0, where the kernel never
//! upcalls, so a stop there is resumed in place and the range may include it).
//!
//! # Registers the psABI and Tsumugi give the library
//! - `tp` is the LTN register: the running thread's ThMB (0 in the library's critical section).
//!   Rust code on this target has no thread-locals, so nothing else uses it.
//! - `gp` is reserved for the thread library: programs are linked without global-pointer
//!   relaxation (`xtask` `Arch::user_rustflags`: `--no-relax`), the runtime never sets it, and
//!   LLVM never allocates it. A FULL resume needs one register to jump through after every
//!   other register holds the thread's value; `gp` is that register (`tsumugi_abi::kn::riscv64`).
//! - `fcsr` (rounding mode and accrued exception flags) "has thread storage duration" (psABI,
//!   calling convention: like C11's floating-point environment), so a switch must keep it per
//!   thread: the window carries it with `fs0`–`fs11`.
//!
//! # FP in the window, only where FP is live
//! Reading or writing any FP register or `fcsr` while `sstatus.FS` is Off traps into the kernel,
//! which then turns FP on for the vCPU's activation for good (and from then on saves and restores
//! its state). So a program whose threads never touch FP must not touch FP registers in its
//! switches either. The kernel sets the vCPU's word in `platform::FP_LIVE` at the first FP trap
//! of an activation of that vCPU (`Registration::fp_live`): until then no thread on the vCPU has
//! FP state, and the window leaves FP alone. The window records whether it holds the FP part
//! (`fp_saved`) and the resume restores it only then; a thread whose window holds no FP part
//! never used FP, so where FP is live it resumes with the initial FP environment (`fcsr` = 0).

use core::mem::offset_of;

use tsumugi_abi::kn::{fp_format, mask, FullFrame, FP_AREA_PTR_OFFSET, FP_AREA_SIZE, FP_FORMAT_OFFSET, MASK_OFFSET};

use crate::sched::Vcpu;
use crate::thmb::{Thmb, RESUME_OFFSET, WINDOW_OFFSET};

/// The callee-saved register window of the riscv64 psABI: what a voluntary switch (a call)
/// must preserve. The caller-saved integer and FP registers are dead at the switch.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    /// `ra`: where the thread resumes (the switch call's return address).
    pub ra: u64,
    /// `sp` (unchanged by a call on riscv64).
    pub sp: u64,
    /// `s0` (the frame pointer) .. `s11`.
    pub s: [u64; 12],
    /// 1 if `fcsr` and `fs` below were saved (FP was live on the vCPU), else 0.
    pub fp_saved: u64,
    /// `fcsr` (rounding mode and accrued exception flags), as a u64.
    pub fcsr: u64,
    /// `fs0`..`fs11` (bit patterns of the doubles).
    pub fs: [u64; 12],
}

const _: () = assert!(core::mem::size_of::<Window>() == 28 * 8);
const _: () = assert!(offset_of!(Window, s) == 16 && offset_of!(Window, fp_saved) == 112);
const _: () = assert!(offset_of!(Window, fcsr) == 120 && offset_of!(Window, fs) == 128);
// The FP area as the ABI (and the kernel's `fsd` save) lays it out: f0..f31, then fcsr.
const FP_FCSR_OFFSET: usize = 32 * 8;
const _: () = assert!(FP_AREA_SIZE == FP_FCSR_OFFSET + 8);

/// The stack pointer a saved window resumes with: everything below it on that stack is dead
/// while the thread is switched out (a voluntary switch is a call), so a direct switch may run
/// code there before it resumes the thread.
#[inline]
pub(crate) fn window_sp(window: &Window) -> usize {
    window.sp as usize
}

/// Builds the window of a thread that has never run: it "resumes" at `libuthread_thread_start`
/// with `s1` = its ThMB and `s2` = `entry`, on an empty stack whose top is `stack_top`, with no
/// FP part (a new thread has the initial FP environment).
pub(crate) fn init_window(window: &mut Window, stack_top: usize, thmb: *mut Thmb, entry: unsafe extern "C" fn(*mut Thmb) -> !) {
    debug_assert_eq!(stack_top % 16, 0);
    let mut s = [0; 12];
    s[1] = thmb as u64;
    s[2] = entry as *const () as u64;
    *window = Window { ra: super::raw::libuthread_thread_start as *const () as u64, sp: stack_top as u64, s, ..Window::default() };
}

/// Nothing to detect: riscv64gc has the D extension, and the ABI's FP format
/// (`fp_format::RISCV_D`) is the only one.
pub(crate) fn detect_fp() {}

/// Bytes a switch stores in each mode: the window as a program that never touches FP switches
/// (`ra`, `sp`, `s0`–`s11` and the word saying the FP part is absent; where FP is live on the
/// vCPU, `fs0`–`fs11` and `fcsr` add 104 bytes), or the full frame (`x1`..`x31`, `pc`) and the
/// FP area.
pub(crate) fn bytes_saved() -> (usize, usize) {
    (offset_of!(Window, fcsr), core::mem::size_of::<FullFrame>() + FP_AREA_SIZE)
}

/// `context::switch_window` on this port: a plain call of the assembly (see the module table).
///
/// # Safety
/// As `context::switch_window`.
#[inline(always)]
pub(crate) unsafe fn switch_window(from: *mut Thmb, to: *mut Thmb, vcpu: *const Vcpu) {
    // SAFETY: forwarded contract.
    unsafe { super::raw::libuthread_switch_window(from, to, vcpu) }
}

/// Where a full frame resumes (`pc`, in slot 0).
///
/// # Safety
/// `frame` points to a live frame.
pub(crate) unsafe fn frame_pc(frame: *const FullFrame) -> u64 {
    // SAFETY: forwarded contract.
    unsafe { core::ptr::read_volatile(&raw const (*frame).x[0]) }
}

super::own_list_edits! {
    push: [
        "ld {t}, {head}({me})",
        "sd {t}, -1({e})",
        "sd {e}, {head}({me})",
    ],
    take: [
        "ld {t}, {head}({me})",
        // The miss path may be placed beyond a branch's reach (±4 KiB), or in another section:
        // then the assembler makes this `beq 1f; j {miss}` itself (LLVM's RISC-V assembler
        // relaxes an out-of-range or unresolved conditional branch; a `beq`/`j` pair written
        // here cost the common path an instruction at every join).
        "bne {t}, {e}, {miss}",
        "ld {t}, -1({e})",
        "sd {t}, {head}({me})",
    ],
}

super::preserving_call! {
    call: "call",
    arg: "a0",
    fixed: [out("ra") _,],
    #[cfg(target_feature = "f")]
    vector: [
        out("f0") _, out("f1") _, out("f2") _, out("f3") _, out("f4") _, out("f5") _,
        out("f6") _, out("f7") _, out("f10") _, out("f11") _, out("f12") _, out("f13") _,
        out("f14") _, out("f15") _, out("f16") _, out("f17") _, out("f28") _, out("f29") _,
        out("f30") _, out("f31") _,
    ],
    #[cfg(not(target_feature = "f"))]
    vector: [],
}

// The trampolines (`context::preserving_trampolines!`): they keep every caller-saved
// general-purpose register but a0 (ra is the caller's to declare; FP registers too, see
// `preserving_call!`).
super::preserving_trampolines! {
    align: "2",
    body: [
        "    addi sp, sp, -128",
        "    sd ra, 0(sp)",
        "    sd t0, 8(sp)",
        "    sd t1, 16(sp)",
        "    sd t2, 24(sp)",
        "    sd a1, 32(sp)",
        "    sd a2, 40(sp)",
        "    sd a3, 48(sp)",
        "    sd a4, 56(sp)",
        "    sd a5, 64(sp)",
        "    sd a6, 72(sp)",
        "    sd a7, 80(sp)",
        "    sd t3, 88(sp)",
        "    sd t4, 96(sp)",
        "    sd t5, 104(sp)",
        "    sd t6, 112(sp)",
        "    call {f}",
        "    ld ra, 0(sp)",
        "    ld t0, 8(sp)",
        "    ld t1, 16(sp)",
        "    ld t2, 24(sp)",
        "    ld a1, 32(sp)",
        "    ld a2, 40(sp)",
        "    ld a3, 48(sp)",
        "    ld a4, 56(sp)",
        "    ld a5, 64(sp)",
        "    ld a6, 72(sp)",
        "    ld a7, 80(sp)",
        "    ld t3, 88(sp)",
        "    ld t4, 96(sp)",
        "    ld t5, 104(sp)",
        "    ld t6, 112(sp)",
        "    addi sp, sp, 128",
        "    ret",
    ],
}

// libuthread_clobber_caller_saved: writes a garbage value into every caller-saved
// general-purpose register but ra (the test callee of `preserving_call_check`).
core::arch::global_asm!(
    super::asm_fn_start!("libuthread_clobber_caller_saved", "2"),
    "    li t0, -1",
    "    mv t1, t0",
    "    mv t2, t0",
    "    mv a0, t0",
    "    mv a1, t0",
    "    mv a2, t0",
    "    mv a3, t0",
    "    mv a4, t0",
    "    mv a5, t0",
    "    mv a6, t0",
    "    mv a7, t0",
    "    mv t3, t0",
    "    mv t4, t0",
    "    mv t5, t0",
    "    mv t6, t0",
    "    ret",
    super::asm_fn_end!("libuthread_clobber_caller_saved"),
);

/// Checks the trampoline of [`promote_oldest_preserving`] (the same code, with a callee that
/// clobbers every caller-saved register): each register it promises to keep holds a pattern
/// before the call and must hold it after. Returns the registers that did not, by name.
#[doc(hidden)]
pub fn preserving_call_check() -> alloc::vec::Vec<&'static str> {
    const N: usize = 14;
    let names = ["t0", "t1", "t2", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "t3", "t4", "t5", "t6"];
    let patterns: [u64; N] = core::array::from_fn(|i| 0x0101_0101_0101_0101 * (i as u64 + 1));
    let mut v = patterns;
    // SAFETY: the trampoline keeps the registers below (what is checked) and the stack; the
    // callee touches no memory.
    unsafe {
        core::arch::asm!(
            "call {t}",
            t = sym libuthread_preserving_check,
            inout("t0") v[0], inout("t1") v[1], inout("t2") v[2], inout("a1") v[3],
            inout("a2") v[4], inout("a3") v[5], inout("a4") v[6], inout("a5") v[7],
            inout("a6") v[8], inout("a7") v[9], inout("t3") v[10], inout("t4") v[11],
            inout("t5") v[12], inout("t6") v[13],
            inout("a0") 0usize => _,
            out("ra") _,
        );
    }
    (0..N).filter(|&i| v[i] != patterns[i]).map(|i| names[i]).collect()
}

/// Makes a full frame resume at `pc`.
///
/// # Safety
/// `frame` points to a live frame, which nobody else touches.
pub(crate) unsafe fn set_frame_pc(frame: *mut FullFrame, pc: u64) {
    // SAFETY: forwarded contract.
    unsafe { (*frame).x[0] = pc }
}

// Offsets used by the assembly, checked against the Rust layout at compile time (the `const`
// operands below are computed from `offset_of!`, so they cannot drift). Every one fits a load's
// 12-bit signed offset (the assembler refuses the instruction otherwise).
const W: usize = WINDOW_OFFSET;
const R: usize = RESUME_OFFSET;
const _: () = assert!(MASK_OFFSET == 0);
const _: () = assert!(R + core::mem::size_of::<FullFrame>() < 2048 && W + core::mem::size_of::<Window>() < 2048);

/// The FP part of a window save (both window saves, where FP is live): `fs0`–`fs11` and
/// `fcsr` into the ThMB at a0. Clobbers t2.
macro_rules! save_fp {
    () => {
        concat!(
            "    fsd fs0, {w_fs}+0*8(a0)\n",
            "    fsd fs1, {w_fs}+1*8(a0)\n",
            "    fsd fs2, {w_fs}+2*8(a0)\n",
            "    fsd fs3, {w_fs}+3*8(a0)\n",
            "    fsd fs4, {w_fs}+4*8(a0)\n",
            "    fsd fs5, {w_fs}+5*8(a0)\n",
            "    fsd fs6, {w_fs}+6*8(a0)\n",
            "    fsd fs7, {w_fs}+7*8(a0)\n",
            "    fsd fs8, {w_fs}+8*8(a0)\n",
            "    fsd fs9, {w_fs}+9*8(a0)\n",
            "    fsd fs10, {w_fs}+10*8(a0)\n",
            "    fsd fs11, {w_fs}+11*8(a0)\n",
            "    frcsr t2\n",
            "    sd t2, {w_fcsr}(a0)\n",
        )
    };
}

/// The start both window saves share ([`save_window`], [`switch_window_body`]): a0 = the ThMB;
/// `ra` (the resume point), `sp` and `s0`–`s11` stored.
macro_rules! save_gprs {
    () => {
        concat!(
            "    sd ra, {w_ra}(a0)\n",
            "    sd sp, {w_sp}(a0)\n",
            "    sd s0, {w_s}+0*8(a0)\n",
            "    sd s1, {w_s}+1*8(a0)\n",
            "    sd s2, {w_s}+2*8(a0)\n",
            "    sd s3, {w_s}+3*8(a0)\n",
            "    sd s4, {w_s}+4*8(a0)\n",
            "    sd s5, {w_s}+5*8(a0)\n",
            "    sd s6, {w_s}+6*8(a0)\n",
            "    sd s7, {w_s}+7*8(a0)\n",
            "    sd s8, {w_s}+8*8(a0)\n",
            "    sd s9, {w_s}+9*8(a0)\n",
            "    sd s10, {w_s}+10*8(a0)\n",
            "    sd s11, {w_s}+11*8(a0)\n",
        )
    };
}

/// The window save both voluntary switches share (`libuthread_switch_out`,
/// `libuthread_switch_window`), up to the mask store: a0 = the ThMB, `$vcpu` = the register
/// holding the `*const Vcpu` whose `FP_LIVE` word decides the FP part (`fs0`–`fs11` and `fcsr`, saved
/// only where FP is live: elsewhere FS may be Off and no FP instruction runs). `ra` is where
/// the thread resumes. Clobbers t0, t1, t2.
macro_rules! save_window {
    ($vcpu:literal) => {
        concat!(
            save_gprs!(),
            "    ld t1, {vcpu_fp_live}(", $vcpu, ")\n",
            "    ld t1, 0(t1)\n",
            "    snez t1, t1\n",
            "    sd t1, {w_fp_saved}(a0)\n",
            "    beqz t1, 1f\n",
            save_fp!(),
            "1:",
        )
    };
}

/// The direct switch `libuthread_switch_window` (`from` = a0, `to` = a1, vCPU = a2, a
/// `*const Vcpu`), with
/// `$ltn` the instruction that sets LTN = `to` (or nothing): the window save of
/// [`save_window`] with its FP test shared by the resume of `to`, whose FP part (if any) is
/// restored before LTN is written, as `libuthread_resume_window` does. Fast path (FP not live
/// on the vCPU, `to` without an FP part): no FP instruction, one FP_LIVE load, one `fp_saved`
/// test. Clobbers t0, t1, t2; local labels 5–7.
macro_rules! switch_window_body {
    ($ltn:literal) => {
        concat!(
            save_gprs!(),
            "    ld t1, {vcpu_fp_live}(a2)\n",
            "    ld t1, 0(t1)\n",
            "    bnez t1, 5f\n",
            "    sd zero, {w_fp_saved}(a0)\n",
            "    fence rw, w\n",                            // the window before the mask (release)
            "    li t0, {mask_window}\n",
            "    sd t0, {mask_off}(a0)\n",
            "    ld t0, {w_fp_saved}(a1)\n",                // `to` has an FP part (FP not live
            "    bnez t0, 6f\n",                            //   here: its restore makes it live)
            "7:\n",
            $ltn,
            "    ld s0, {w_s}+0*8(a1)\n",
            "    ld s1, {w_s}+1*8(a1)\n",
            "    ld s2, {w_s}+2*8(a1)\n",
            "    ld s3, {w_s}+3*8(a1)\n",
            "    ld s4, {w_s}+4*8(a1)\n",
            "    ld s5, {w_s}+5*8(a1)\n",
            "    ld s6, {w_s}+6*8(a1)\n",
            "    ld s7, {w_s}+7*8(a1)\n",
            "    ld s8, {w_s}+8*8(a1)\n",
            "    ld s9, {w_s}+9*8(a1)\n",
            "    ld s10, {w_s}+10*8(a1)\n",
            "    ld s11, {w_s}+11*8(a1)\n",
            "    ld ra, {w_ra}(a1)\n",
            "    ld sp, {w_sp}(a1)\n",                      // `to`'s stack, exactly as it left it
            "    jr ra\n",                                  // = the return of its switch
            "5:\n",                                      // FP live on this vCPU: the FP part too
            save_fp!(),
            "    li t1, 1\n",
            "    sd t1, {w_fp_saved}(a0)\n",
            "    fence rw, w\n",
            "    li t0, {mask_window}\n",
            "    sd t0, {mask_off}(a0)\n",
            "    ld t0, {w_fp_saved}(a1)\n",
            "    bnez t0, 6f\n",
            "    fscsr zero\n",                             // `to` never used FP: the initial fcsr
            "    j 7b\n",
            "6:\n",                                      // `to`'s own FP registers and fcsr
            "    fld fs0, {w_fs}+0*8(a1)\n",
            "    fld fs1, {w_fs}+1*8(a1)\n",
            "    fld fs2, {w_fs}+2*8(a1)\n",
            "    fld fs3, {w_fs}+3*8(a1)\n",
            "    fld fs4, {w_fs}+4*8(a1)\n",
            "    fld fs5, {w_fs}+5*8(a1)\n",
            "    fld fs6, {w_fs}+6*8(a1)\n",
            "    fld fs7, {w_fs}+7*8(a1)\n",
            "    fld fs8, {w_fs}+8*8(a1)\n",
            "    fld fs9, {w_fs}+9*8(a1)\n",
            "    fld fs10, {w_fs}+10*8(a1)\n",
            "    fld fs11, {w_fs}+11*8(a1)\n",
            "    ld t1, {w_fcsr}(a1)\n",
            "    fscsr t1\n",
            "    j 7b\n",
        )
    };
}

core::arch::global_asm!(
    ".pushsection .text.libuthread_context, \"ax\", @progbits",
    ".option push",
    ".option arch, +d",                           // global_asm! does not get the target's features
    // ---------------------------------------------------------------------------------------
    // libuthread_switch_out(from = a0, stack_top = a1, entry = a2, a0 = a3, a1 = a4)
    // A voluntary switch: the caller-saved registers are dead (this is a call), so only the
    // window is saved; `ra` is where the thread resumes and `sp` is as the caller sees it.
    ".globl libuthread_switch_out",
    ".hidden libuthread_switch_out",
    ".type libuthread_switch_out, @function",
    ".p2align 2",
    "libuthread_switch_out:",
    "    ld t0, {vcpu}(a0)",                      // FP live on this vCPU? (from.vcpu's word;
    save_window!("t0"),                          //   the vCPU cannot change: LTN = 0 here)
    "    li t0, {mask_window}",                   // the window is now valid
    "    sd t0, {mask_off}(a0)",
    "    mv sp, a1",                              // onto the scheduler's stack (16-aligned top)
    "    mv s0, zero",                            // a backtrace ends here
    "    mv t0, a2",
    "    mv a0, a3",                              // entry(a0, a1)
    "    mv a1, a4",
    "    jalr t0",
    "    unimp",                                  // entry never returns
    ".size libuthread_switch_out, . - libuthread_switch_out",
    // ---------------------------------------------------------------------------------------
    // libuthread_switch_out_full(from = a0, stack_top = a1, entry = a2, a0 = a3, a1 = a4)
    // The full-save baseline (`SaveMode::Full`): what a library without register windows does
    // at every switch — x1..x31 into `from.resume` (pc = this call's return address), the whole
    // FP state into the FP area, mask FULL|FP; `from` is resumed by the FULL path.
    ".globl libuthread_switch_out_full",
    ".hidden libuthread_switch_out_full",
    ".type libuthread_switch_out_full, @function",
    ".p2align 2",
    "libuthread_switch_out_full:",
    "    sd ra, {r}+0*8(a0)",                     // pc: resumes where this call returns
    "    sd x1, {r}+1*8(a0)",
    "    sd x2, {r}+2*8(a0)",
    "    sd x3, {r}+3*8(a0)",
    "    sd x4, {r}+4*8(a0)",
    "    sd x5, {r}+5*8(a0)",
    "    sd x6, {r}+6*8(a0)",
    "    sd x7, {r}+7*8(a0)",
    "    sd x8, {r}+8*8(a0)",
    "    sd x9, {r}+9*8(a0)",
    "    sd x10, {r}+10*8(a0)",
    "    sd x11, {r}+11*8(a0)",
    "    sd x12, {r}+12*8(a0)",
    "    sd x13, {r}+13*8(a0)",
    "    sd x14, {r}+14*8(a0)",
    "    sd x15, {r}+15*8(a0)",
    "    sd x16, {r}+16*8(a0)",
    "    sd x17, {r}+17*8(a0)",
    "    sd x18, {r}+18*8(a0)",
    "    sd x19, {r}+19*8(a0)",
    "    sd x20, {r}+20*8(a0)",
    "    sd x21, {r}+21*8(a0)",
    "    sd x22, {r}+22*8(a0)",
    "    sd x23, {r}+23*8(a0)",
    "    sd x24, {r}+24*8(a0)",
    "    sd x25, {r}+25*8(a0)",
    "    sd x26, {r}+26*8(a0)",
    "    sd x27, {r}+27*8(a0)",
    "    sd x28, {r}+28*8(a0)",
    "    sd x29, {r}+29*8(a0)",
    "    sd x30, {r}+30*8(a0)",
    "    sd x31, {r}+31*8(a0)",
    "    ld t0, {fp_area}(a0)",                   // the whole FP state, in the ABI's format
    "    fsd f0, 0*8(t0)",
    "    fsd f1, 1*8(t0)",
    "    fsd f2, 2*8(t0)",
    "    fsd f3, 3*8(t0)",
    "    fsd f4, 4*8(t0)",
    "    fsd f5, 5*8(t0)",
    "    fsd f6, 6*8(t0)",
    "    fsd f7, 7*8(t0)",
    "    fsd f8, 8*8(t0)",
    "    fsd f9, 9*8(t0)",
    "    fsd f10, 10*8(t0)",
    "    fsd f11, 11*8(t0)",
    "    fsd f12, 12*8(t0)",
    "    fsd f13, 13*8(t0)",
    "    fsd f14, 14*8(t0)",
    "    fsd f15, 15*8(t0)",
    "    fsd f16, 16*8(t0)",
    "    fsd f17, 17*8(t0)",
    "    fsd f18, 18*8(t0)",
    "    fsd f19, 19*8(t0)",
    "    fsd f20, 20*8(t0)",
    "    fsd f21, 21*8(t0)",
    "    fsd f22, 22*8(t0)",
    "    fsd f23, 23*8(t0)",
    "    fsd f24, 24*8(t0)",
    "    fsd f25, 25*8(t0)",
    "    fsd f26, 26*8(t0)",
    "    fsd f27, 27*8(t0)",
    "    fsd f28, 28*8(t0)",
    "    fsd f29, 29*8(t0)",
    "    fsd f30, 30*8(t0)",
    "    fsd f31, 31*8(t0)",
    "    frcsr t1",
    "    sd t1, {fp_fcsr}(t0)",
    "    li t1, {fmt_riscv_d}",
    "    sd t1, {fp_format_off}(a0)",
    "    li t1, {mask_full_fp}",
    "    sd t1, {mask_off}(a0)",
    "    mv sp, a1",
    "    mv s0, zero",
    "    mv t0, a2",
    "    mv a0, a3",
    "    mv a1, a4",
    "    jalr t0",
    "    unimp",
    ".size libuthread_switch_out_full, . - libuthread_switch_out_full",
    // ---------------------------------------------------------------------------------------
    // libuthread_call_on_stack(stack_top = a0, entry = a1, a0 = a2, a1 = a3) -> !
    ".globl libuthread_call_on_stack",
    ".hidden libuthread_call_on_stack",
    ".type libuthread_call_on_stack, @function",
    ".p2align 2",
    "libuthread_call_on_stack:",
    "    mv sp, a0",                              // abandon the current stack
    "    mv s0, zero",
    "    mv t0, a1",
    "    mv a0, a2",                              // entry(a0, a1)
    "    mv a1, a3",
    "    jalr t0",
    "    unimp",
    ".size libuthread_call_on_stack, . - libuthread_call_on_stack",
    // ---------------------------------------------------------------------------------------
    // The window-resume range: everything from here to `libuthread_resume_window_end`.
    ".globl libuthread_resume_window_start",
    ".hidden libuthread_resume_window_start",
    ".p2align 4",
    "libuthread_resume_window_start:",
    // libuthread_switch_window(from = a0, to = a1, vcpu = a2)
    // A direct thread-to-thread switch without the scheduler-stack hop: save the caller's
    // window into `from` (the FP part if FP is live on `vcpu`, passed in because `from.vcpu`
    // may already be rewritten by a waker), publish it (fence, then mask = WINDOW: a vCPU that
    // took `from` off a queue waits for this store), then resume `to` as
    // `libuthread_resume_window(to, to)` does. Returns when `from` is resumed. From the mask
    // store on, nothing touches `from`'s stack. The FP decision is taken once: the FP_LIVE word
    // read for the save also decides the resume.
    ".globl libuthread_switch_window",
    ".hidden libuthread_switch_window",
    ".type libuthread_switch_window, @function",
    "libuthread_switch_window:",
    switch_window_body!("    mv tp, a1\n"),           // LTN = to
    ".size libuthread_switch_window, . - libuthread_switch_window",
    // libuthread_resume_window(to = a0, ltn = a1) -> !
    // The FP part first (LTN is still 0, as everywhere in the scheduler), then LTN, then the
    // integer window. Restartable: from the LTN write on, a kernel stop saves into `to` (not
    // harmful: only the window is read here and the kernel never writes it); no stack is read.
    ".globl libuthread_resume_window",
    ".hidden libuthread_resume_window",
    ".type libuthread_resume_window, @function",
    "libuthread_resume_window:",
    "    ld t0, {w_fp_saved}(a0)",
    "    beqz t0, 3f",
    "    fld fs0, {w_fs}+0*8(a0)",                // the thread's FP callee-saved registers
    "    fld fs1, {w_fs}+1*8(a0)",
    "    fld fs2, {w_fs}+2*8(a0)",
    "    fld fs3, {w_fs}+3*8(a0)",
    "    fld fs4, {w_fs}+4*8(a0)",
    "    fld fs5, {w_fs}+5*8(a0)",
    "    fld fs6, {w_fs}+6*8(a0)",
    "    fld fs7, {w_fs}+7*8(a0)",
    "    fld fs8, {w_fs}+8*8(a0)",
    "    fld fs9, {w_fs}+9*8(a0)",
    "    fld fs10, {w_fs}+10*8(a0)",
    "    fld fs11, {w_fs}+11*8(a0)",
    "    ld t1, {w_fcsr}(a0)",                    // and its FP environment
    "    fscsr t1",
    "    j 4f",
    "3:",                                         // no FP part: the thread never used FP.
    "    ld t0, {vcpu}(a0)",                      // If FP is live on this vCPU, another
    "    ld t1, {vcpu_fp_live}(t0)",              // thread's environment is in fcsr: give
    "    ld t1, 0(t1)",                           // this one the initial environment. (Where
                                                  // FP is not live, FS may be Off: no FP
                                                  // instruction then.)
    "    beqz t1, 4f",
    "    fscsr zero",
    "4:",
    "    mv tp, a1",                              // LTN = the thread (or 0 for a root context)
    "    ld s0, {w_s}+0*8(a0)",
    "    ld s1, {w_s}+1*8(a0)",
    "    ld s2, {w_s}+2*8(a0)",
    "    ld s3, {w_s}+3*8(a0)",
    "    ld s4, {w_s}+4*8(a0)",
    "    ld s5, {w_s}+5*8(a0)",
    "    ld s6, {w_s}+6*8(a0)",
    "    ld s7, {w_s}+7*8(a0)",
    "    ld s8, {w_s}+8*8(a0)",
    "    ld s9, {w_s}+9*8(a0)",
    "    ld s10, {w_s}+10*8(a0)",
    "    ld s11, {w_s}+11*8(a0)",
    "    ld ra, {w_ra}(a0)",
    "    ld sp, {w_sp}(a0)",                      // the thread's stack, exactly as it left it
    "    jr ra",                                  // = the return of its switch_out
    ".size libuthread_resume_window, . - libuthread_resume_window",
    ".globl libuthread_resume_window_end",
    ".hidden libuthread_resume_window_end",
    "libuthread_resume_window_end:",
    // ---------------------------------------------------------------------------------------
    // libuthread_resume_full(to = a0, fp_format = a1) -> !
    // Restores x1..x31 but gp (and tp, which is LTN = `to`) from `to.resume` and jumps to its
    // pc without entering the kernel and without touching the thread's stack:
    //   0. the FP state from the FP area if it was saved with the frame — while LTN is still 0,
    //      so a kernel stop here resumes in place: once LTN names `to`, a stop would save the
    //      half-restored FP registers into that same FP area;
    //   1. LTN (tp) = to, the addressing base of every load below;
    //   2. every register but gp and tp, sp among them (nothing is pushed anywhere);
    //   3. pc into gp (reserved for the library: see the module documentation), `jr gp`.
    // Restartable like the window resume: the kernel writes only `to.header`, never `to.resume`.
    // Only one FP format exists here (`fp_format::RISCV_D`): any non-zero `fp_format` means it.
    ".globl libuthread_resume_full",
    ".hidden libuthread_resume_full",
    ".type libuthread_resume_full, @function",
    ".p2align 2",
    "libuthread_resume_full:",
    "    beqz a1, 3f",                            // 0. FP state saved with the frame?
    "    ld t0, {fp_area}(a0)",
    "    fld f0, 0*8(t0)",
    "    fld f1, 1*8(t0)",
    "    fld f2, 2*8(t0)",
    "    fld f3, 3*8(t0)",
    "    fld f4, 4*8(t0)",
    "    fld f5, 5*8(t0)",
    "    fld f6, 6*8(t0)",
    "    fld f7, 7*8(t0)",
    "    fld f8, 8*8(t0)",
    "    fld f9, 9*8(t0)",
    "    fld f10, 10*8(t0)",
    "    fld f11, 11*8(t0)",
    "    fld f12, 12*8(t0)",
    "    fld f13, 13*8(t0)",
    "    fld f14, 14*8(t0)",
    "    fld f15, 15*8(t0)",
    "    fld f16, 16*8(t0)",
    "    fld f17, 17*8(t0)",
    "    fld f18, 18*8(t0)",
    "    fld f19, 19*8(t0)",
    "    fld f20, 20*8(t0)",
    "    fld f21, 21*8(t0)",
    "    fld f22, 22*8(t0)",
    "    fld f23, 23*8(t0)",
    "    fld f24, 24*8(t0)",
    "    fld f25, 25*8(t0)",
    "    fld f26, 26*8(t0)",
    "    fld f27, 27*8(t0)",
    "    fld f28, 28*8(t0)",
    "    fld f29, 29*8(t0)",
    "    fld f30, 30*8(t0)",
    "    fld f31, 31*8(t0)",
    "    ld t1, {fp_fcsr}(t0)",
    "    fscsr t1",
    "3:",
    "    mv tp, a0",                              // 1. LTN = to
    "    ld x1, {r}+1*8(tp)",                     // 2. every register but gp (x3) and tp (x4)
    "    ld x2, {r}+2*8(tp)",                     //    (sp: the thread's stack, untouched)
    "    ld x5, {r}+5*8(tp)",
    "    ld x6, {r}+6*8(tp)",
    "    ld x7, {r}+7*8(tp)",
    "    ld x8, {r}+8*8(tp)",
    "    ld x9, {r}+9*8(tp)",
    "    ld x10, {r}+10*8(tp)",
    "    ld x11, {r}+11*8(tp)",
    "    ld x12, {r}+12*8(tp)",
    "    ld x13, {r}+13*8(tp)",
    "    ld x14, {r}+14*8(tp)",
    "    ld x15, {r}+15*8(tp)",
    "    ld x16, {r}+16*8(tp)",
    "    ld x17, {r}+17*8(tp)",
    "    ld x18, {r}+18*8(tp)",
    "    ld x19, {r}+19*8(tp)",
    "    ld x20, {r}+20*8(tp)",
    "    ld x21, {r}+21*8(tp)",
    "    ld x22, {r}+22*8(tp)",
    "    ld x23, {r}+23*8(tp)",
    "    ld x24, {r}+24*8(tp)",
    "    ld x25, {r}+25*8(tp)",
    "    ld x26, {r}+26*8(tp)",
    "    ld x27, {r}+27*8(tp)",
    "    ld x28, {r}+28*8(tp)",
    "    ld x29, {r}+29*8(tp)",
    "    ld x30, {r}+30*8(tp)",
    "    ld x31, {r}+31*8(tp)",
    "    ld gp, {r}+0*8(tp)",                     // 3. pc
    "    jr gp",
    ".globl libuthread_resume_full_end",
    ".hidden libuthread_resume_full_end",
    "libuthread_resume_full_end:",
    ".size libuthread_resume_full, . - libuthread_resume_full",
    // ---------------------------------------------------------------------------------------
    // libuthread_thread_start: a new thread's first instruction, reached by a window resume
    // of the window `init_window` built: s1 = its ThMB, s2 = its Rust entry, sp = the empty
    // stack's 16-aligned top, s0 = 0. The CFI marks the outermost frame so backtraces stop here.
    ".globl libuthread_thread_start",
    ".hidden libuthread_thread_start",
    ".type libuthread_thread_start, @function",
    ".p2align 2",
    "libuthread_thread_start:",
    "    .cfi_startproc",
    "    .cfi_undefined ra",
    "    mv a0, s1",                              // entry(thmb)
    "    jalr s2",
    "    unimp",                                  // entry never returns
    "    .cfi_endproc",
    ".size libuthread_thread_start, . - libuthread_thread_start",
    ".option pop",
    ".popsection",
    // An empty entry of the restart table (`context::restart_point`), linked to this code like
    // every entry (`restart_entry!`): the section exists wherever the scheduler does, also in a
    // program that never forks.
    ".pushsection uthread_restart, \"ao\", %progbits, libuthread_switch_out",
    "    .balign 4",
    "    .long 0",
    "    .long -4",
    ".popsection",
    mask_off = const MASK_OFFSET,
    mask_window = const mask::WINDOW,
    mask_full_fp = const mask::FULL | mask::FP,
    fp_area = const FP_AREA_PTR_OFFSET,
    fp_format_off = const FP_FORMAT_OFFSET,
    fp_fcsr = const FP_FCSR_OFFSET,
    fmt_riscv_d = const fp_format::RISCV_D,
    vcpu_fp_live = const crate::sched::VCPU_FP_LIVE_OFFSET,
    vcpu = const offset_of!(Thmb, vcpu),
    w_ra = const W + offset_of!(Window, ra),
    w_sp = const W + offset_of!(Window, sp),
    w_s = const W + offset_of!(Window, s),
    w_fp_saved = const W + offset_of!(Window, fp_saved),
    w_fcsr = const W + offset_of!(Window, fcsr),
    w_fs = const W + offset_of!(Window, fs),
    r = const R,
);
