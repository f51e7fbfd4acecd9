//! aarch64 context switching (AAPCS64, with Tsumugi's user ABI reserving `x18` for the thread
//! library). Every entry point is plain `global_asm!`: a switch changes the stack pointer,
//! which no Rust function (and no `asm!` block inside one) may do, and the FULL restore must
//! load every general-purpose register, so no compiler-managed register may survive it.
//!
//! Entry points (all `extern "C"`, all in `.text`, `.hidden`):
//!
//! | symbol | Rust signature | does |
//! |---|---|---|
//! | `libuthread_switch_out` | `(from: *mut Thmb, stack_top: usize, entry: Entry, a0: usize, a1: usize)` | save window, mask = WINDOW, `entry(a0, a1)` on `stack_top`; returns when `from` is resumed |
//! | `libuthread_call_on_stack` | `(stack_top: usize, entry: Entry, a0: usize, a1: usize) -> !` | `entry(a0, a1)` on `stack_top`, nothing saved |
//! | `libuthread_switch_window` | `(from: *mut Thmb, to: *mut Thmb, vcpu: *const Vcpu)` | save window into `from` (FP part per the vCPU's `FP_LIVE` word), mask = WINDOW (release), then as `libuthread_resume_window(to, to)`; returns when `from` is resumed |
//! | `libuthread_resume_window` | `(to: *mut Thmb, ltn: *mut Thmb) -> !` | LTN = `ltn`, restore window, jump |
//! | `libuthread_switch_out_full` | as `libuthread_switch_out` | the full-save baseline: `x0`..`x30`, `sp`, NZCV and q0..q31, FPCR, FPSR into the FP area, mask = FULL\|FP |
//! | `libuthread_resume_full` | `(to: *mut Thmb, fp_format: u64) -> !` | [FP from the FP area], LTN = `to`, restore `to.resume` entirely, jump through `x18` |
//! | `libuthread_thread_start` | (jumped to by a window resume) | first instruction of every user thread |
//! | `libuthread_promote_oldest` | `(me: *mut Thmb)` (called by `asm!`, not by Rust) | `sched::promote_oldest_record_c(me)` keeping every general-purpose register but x0, x16, x17 and x30; v8-v15 whole (`context::preserving_call!`) |
//!
//! `Entry` is `unsafe extern "C" fn(usize, usize) -> !`.
//!
//! The window-resume sequences lie between `libuthread_resume_window_start` and
//! `libuthread_resume_window_end` (`context::interrupted_resume`): the direct switch's own
//! resume of `to` is inside, after its save (which runs with LTN = 0, where the kernel never
//! upcalls, so a stop there is resumed in place and the range may include it).
//!
//! # The window and FP
//! AAPCS64 makes a callee preserve `x19`..`x29`, `sp`, and the low 64 bits of `v8`..`v15`
//! (`d8`..`d15`); FPCR is global state that only dedicated functions (`fesetround`…) change, so
//! a switch must give each thread its own. Reading any FP register or FPCR is an FP access,
//! which the kernel traps while it switches FP lazily, so the window takes `d8`..`d15` and FPCR
//! only on a vCPU where FP is live (`crate::platform::fp_live`, set by the kernel at an
//! activation's first FP trap): a program that never touches FP switches without them and never
//! takes an FP trap. The window records whether it holds them (`fp_saved`); a window without
//! them belongs to a thread that never had FP state of its own, so its resume gives it the
//! default FPCR (0: round to nearest, no traps) when FP is live where it resumes, and touches no
//! FP register otherwise.

use core::mem::offset_of;

use tsumugi_abi::kn::{fp_format, mask, FullFrame, FP_AREA_PTR_OFFSET, FP_AREA_SIZE, FP_FORMAT_OFFSET, MASK_OFFSET};

use crate::sched::Vcpu;
use crate::thmb::{Thmb, RESUME_OFFSET, WINDOW_OFFSET};

/// The callee-saved register window of AAPCS64: what a voluntary switch (a call) must
/// preserve.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    /// `x19`..`x28`.
    pub x19_x28: [u64; 10],
    /// `x29`, the frame pointer.
    pub fp: u64,
    /// `x30` (`lr`): where the thread resumes (the switch call's return address).
    pub lr: u64,
    /// The stack pointer (`bl` pushes nothing, so it is the same before and after the call).
    pub sp: u64,
    /// 1 when `d` and `fpcr` below were saved (FP was live on the vCPU), 0 when not.
    pub fp_saved: u64,
    /// `d8`..`d15`.
    pub d: [u64; 8],
    /// FPCR.
    pub fpcr: u64,
}

const _: () = assert!(core::mem::size_of::<Window>() == 23 * 8);
const _: () = assert!(offset_of!(Window, fp) == 80 && offset_of!(Window, sp) == 96);
const _: () = assert!(offset_of!(Window, fp_saved) == 104 && offset_of!(Window, d) == 112 && offset_of!(Window, fpcr) == 176);

/// Bytes of the FP area a full save writes: q0..q31, FPCR, FPSR (`fp_format::AARCH64_Q`).
const FP_STATE_BYTES: usize = 32 * 16 + 16;
const _: () = assert!(FP_STATE_BYTES <= FP_AREA_SIZE);
/// Offset of FPCR (then FPSR) in the FP area.
const FP_FPCR: usize = 32 * 16;

/// The stack pointer a saved window resumes with: everything below it on that stack is dead
/// while the thread is switched out (a voluntary switch is a call), so a direct switch may run
/// code there before it resumes the thread.
#[inline]
pub(crate) fn window_sp(window: &Window) -> usize {
    window.sp as usize
}

/// Builds the window of a thread that has never run: it "resumes" at `libuthread_thread_start`
/// with `x19` = its ThMB and `x20` = `entry`, on an empty stack whose top is `stack_top`, with
/// no FP state of its own.
pub(crate) fn init_window(window: &mut Window, stack_top: usize, thmb: *mut Thmb, entry: unsafe extern "C" fn(*mut Thmb) -> !) {
    debug_assert_eq!(stack_top % 16, 0);
    let mut x19_x28 = [0; 10];
    x19_x28[0] = thmb as u64;
    x19_x28[1] = entry as *const () as u64;
    *window = Window { x19_x28, sp: stack_top as u64, lr: super::raw::libuthread_thread_start as *const () as u64, ..Window::default() };
}

/// Nothing to find out: every aarch64 CPU Tsumugi runs on has FP/SIMD, saved in one format
/// (`fp_format::AARCH64_Q`).
pub(crate) fn detect_fp() {}

/// Bytes a switch stores in each mode: the window (`x19`..`x30`, `sp`, the `fp_saved` word,
/// and `d8`..`d15` with FPCR when FP is live on the calling thread's vCPU), or every
/// general-purpose register, `sp`, `pc`, NZCV and the FP/SIMD state.
pub(crate) fn bytes_saved() -> (usize, usize) {
    let fp = crate::thread::current_vcpu().is_some_and(crate::platform::fp_live);
    (14 * 8 + if fp { 9 * 8 } else { 0 }, core::mem::size_of::<FullFrame>() + FP_STATE_BYTES)
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

/// Where a full frame resumes (`pc`).
///
/// # Safety
/// `frame` points to a live frame.
pub(crate) unsafe fn frame_pc(frame: *const FullFrame) -> u64 {
    // SAFETY: forwarded contract.
    unsafe { core::ptr::read_volatile(&raw const (*frame).pc) }
}

super::own_list_edits! {
    push: [
        "ldr {t}, [{me}, #{head}]",
        "stur {t}, [{e}, #-1]",
        "str {e}, [{me}, #{head}]",
    ],
    take: [
        "ldr {t}, [{me}, #{head}]",
        "cmp {t}, {e}",
        "b.ne {miss}",
        "ldur {t}, [{e}, #-1]",
        "str {t}, [{me}, #{head}]",
    ],
}

super::preserving_call! {
    call: "bl",
    arg: "x0",
    fixed: [out("x16") _, out("x17") _, out("lr") _,],
    #[cfg(target_feature = "neon")]
    vector: [
        // Not v8-v15: declared clobbered, they would make every forking function save d8-d15
        // for its own caller; the trampoline keeps their upper halves instead (the callee keeps
        // the lower).
        out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _, out("v5") _,
        out("v6") _, out("v7") _, out("v16") _, out("v17") _, out("v18") _, out("v19") _,
        out("v20") _, out("v21") _, out("v22") _, out("v23") _, out("v24") _, out("v25") _,
        out("v26") _, out("v27") _, out("v28") _, out("v29") _, out("v30") _, out("v31") _,
    ],
    #[cfg(not(target_feature = "neon"))]
    vector: [],
}

#[cfg(target_feature = "neon")]
macro_rules! keep_v8_v15 {
    (save) => {
        concat!(
            "    stp q8, q9, [sp, #-128]!\n",
            "    stp q10, q11, [sp, #32]\n",
            "    stp q12, q13, [sp, #64]\n",
            "    stp q14, q15, [sp, #96]\n",
        )
    };
    (restore) => {
        concat!(
            "    ldp q10, q11, [sp, #32]\n",
            "    ldp q12, q13, [sp, #64]\n",
            "    ldp q14, q15, [sp, #96]\n",
            "    ldp q8, q9, [sp], #128\n",
        )
    };
}
#[cfg(not(target_feature = "neon"))]
macro_rules! keep_v8_v15 {
    ($_:tt) => {
        ""
    };
}
// The trampolines (`context::preserving_trampolines!`): they keep every caller-saved
// general-purpose register but x0, x16, x17 and x30 (the caller's to declare, as are the
// caller-saved SIMD registers: see `preserving_call!`) and, where the target has SIMD
// registers, the whole of v8-v15 (the callee keeps only their lower halves).
super::preserving_trampolines! {
    align: "2",
    body: [
        "    stp x29, x30, [sp, #-160]!",
        "    stp x1, x2, [sp, #16]",
        "    stp x3, x4, [sp, #32]",
        "    stp x5, x6, [sp, #48]",
        "    stp x7, x8, [sp, #64]",
        "    stp x9, x10, [sp, #80]",
        "    stp x11, x12, [sp, #96]",
        "    stp x13, x14, [sp, #112]",
        "    stp x15, x18, [sp, #128]",
        keep_v8_v15!(save),
        "    bl {f}",
        keep_v8_v15!(restore),
        "    ldp x1, x2, [sp, #16]",
        "    ldp x3, x4, [sp, #32]",
        "    ldp x5, x6, [sp, #48]",
        "    ldp x7, x8, [sp, #64]",
        "    ldp x9, x10, [sp, #80]",
        "    ldp x11, x12, [sp, #96]",
        "    ldp x13, x14, [sp, #112]",
        "    ldp x15, x18, [sp, #128]",
        "    ldp x29, x30, [sp], #160",
        "    ret",
    ],
}

#[cfg(target_feature = "neon")]
macro_rules! clobber_v8_v15 {
    () => {
        concat!(
            "    movi v8.2d, #0xffffffffffffffff\n",
            "    movi v9.2d, #0xffffffffffffffff\n",
            "    movi v10.2d, #0xffffffffffffffff\n",
            "    movi v11.2d, #0xffffffffffffffff\n",
            "    movi v12.2d, #0xffffffffffffffff\n",
            "    movi v13.2d, #0xffffffffffffffff\n",
            "    movi v14.2d, #0xffffffffffffffff\n",
            "    movi v15.2d, #0xffffffffffffffff\n",
        )
    };
}
#[cfg(not(target_feature = "neon"))]
macro_rules! clobber_v8_v15 {
    () => {
        ""
    };
}

// libuthread_clobber_caller_saved: writes a garbage value into every caller-saved
// general-purpose register but x16, x17 and x30, and into v8-v15 (the test callee of
// `preserving_call_check`).
core::arch::global_asm!(
    super::asm_fn_start!("libuthread_clobber_caller_saved", "2"),
    "    mov x0, #-1",
    "    mov x1, x0",
    "    mov x2, x0",
    "    mov x3, x0",
    "    mov x4, x0",
    "    mov x5, x0",
    "    mov x6, x0",
    "    mov x7, x0",
    "    mov x8, x0",
    "    mov x9, x0",
    "    mov x10, x0",
    "    mov x11, x0",
    "    mov x12, x0",
    "    mov x13, x0",
    "    mov x14, x0",
    "    mov x15, x0",
    "    mov x18, x0",
    clobber_v8_v15!(),
    "    ret",
    super::asm_fn_end!("libuthread_clobber_caller_saved"),
);

/// Checks the trampoline of [`promote_oldest_preserving`] (the same code, with a callee that
/// clobbers every caller-saved register): each register it promises to keep holds a pattern
/// before the call and must hold it after. Returns the registers that did not, by name.
#[doc(hidden)]
pub fn preserving_call_check() -> alloc::vec::Vec<&'static str> {
    const N: usize = 16;
    let names = ["x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13", "x14", "x15", "x18"];
    let patterns: [u64; N] = core::array::from_fn(|i| 0x0101_0101_0101_0101 * (i as u64 + 1));
    let mut v = patterns;
    // SAFETY: the trampoline keeps the registers below (what is checked) and the stack; the
    // callee touches no memory. (x18 is not an operand: it is this library's, see
    // `context::aarch64`'s FULL resume; the check saves it, writes and reads it itself, and puts it back.)
    unsafe {
        core::arch::asm!(
            "mov x21, x18",
            "mov x18, x20",
            "bl {t}",
            "mov x20, x18",
            "mov x18, x21",
            t = sym libuthread_preserving_check,
            inout("x20") v[15],
            out("x21") _,
            inout("x1") v[0], inout("x2") v[1], inout("x3") v[2], inout("x4") v[3],
            inout("x5") v[4], inout("x6") v[5], inout("x7") v[6], inout("x8") v[7],
            inout("x9") v[8], inout("x10") v[9], inout("x11") v[10], inout("x12") v[11],
            inout("x13") v[12], inout("x14") v[13], inout("x15") v[14],
            inout("x0") 0usize => _,
            out("x16") _, out("x17") _, out("lr") _,
        );
    }
    let mut wrong: alloc::vec::Vec<&'static str> = (0..N).filter(|&i| v[i] != patterns[i]).map(|i| names[i]).collect();
    #[cfg(target_feature = "neon")]
    {
        // v8-v15 whole: a pattern in both halves of each before, the upper halves compared
        // after (the callee clobbers both; the lower halves are the callee's to keep anyway).
        let pattern: u64 = 0x5a5a_5a5a_a5a5_a5a5;
        let differ: u64;
        // SAFETY: registers only; v8-v15 are declared clobbered (the compiler keeps the lower
        // halves of v8-v15 for this function's caller).
        unsafe {
            core::arch::asm!(
                "dup v8.2d, x20", "dup v9.2d, x20", "dup v10.2d, x20", "dup v11.2d, x20",
                "dup v12.2d, x20", "dup v13.2d, x20", "dup v14.2d, x20", "dup v15.2d, x20",
                "bl {t}",
                "mov x21, xzr",
                "mov x22, v8.d[1]", "eor x22, x22, x20", "orr x21, x21, x22",
                "mov x22, v9.d[1]", "eor x22, x22, x20", "orr x21, x21, x22",
                "mov x22, v10.d[1]", "eor x22, x22, x20", "orr x21, x21, x22",
                "mov x22, v11.d[1]", "eor x22, x22, x20", "orr x21, x21, x22",
                "mov x22, v12.d[1]", "eor x22, x22, x20", "orr x21, x21, x22",
                "mov x22, v13.d[1]", "eor x22, x22, x20", "orr x21, x21, x22",
                "mov x22, v14.d[1]", "eor x22, x22, x20", "orr x21, x21, x22",
                "mov x22, v15.d[1]", "eor x22, x22, x20", "orr x21, x21, x22",
                t = sym libuthread_preserving_check,
                in("x20") pattern,
                out("x21") differ,
                out("x22") _,
                inout("x0") 0usize => _,
                out("x1") _, out("x2") _, out("x3") _, out("x4") _, out("x5") _, out("x6") _,
                out("x7") _, out("x8") _, out("x9") _, out("x10") _, out("x11") _, out("x12") _,
                out("x13") _, out("x14") _, out("x15") _, out("x16") _, out("x17") _,
                out("lr") _,
                out("v8") _, out("v9") _, out("v10") _, out("v11") _, out("v12") _,
                out("v13") _, out("v14") _, out("v15") _,
            );
        }
        if differ != 0 {
            wrong.push("v8-v15 (upper halves)");
        }
    }
    wrong
}

/// Makes a full frame resume at `pc`.
///
/// # Safety
/// `frame` points to a live frame, which nobody else touches.
pub(crate) unsafe fn set_frame_pc(frame: *mut FullFrame, pc: u64) {
    // SAFETY: forwarded contract.
    unsafe { (*frame).pc = pc }
}

// Offsets used by the assembly, checked against the Rust layout at compile time (the `const`
// operands below are computed from `offset_of!`, so they cannot drift). Window fields are
// addressed from a base register holding the window's address, the resume copy from one
// holding its own (`stp`/`ldp` reach only 504 bytes).
const W: usize = WINDOW_OFFSET;
const R: usize = RESUME_OFFSET;
const WX: usize = offset_of!(Window, x19_x28);
const WD: usize = offset_of!(Window, d);
const RX: usize = offset_of!(FullFrame, x);
const _: () = assert!(MASK_OFFSET == 0);
const _: () = assert!(W < 4096 && R < 4096, "the assembly forms these addresses with one `add`");

/// The FP part of a window save (both window saves, where FP is live): d8–d15 and FPCR into
/// the window at x9. Clobbers x10.
macro_rules! save_fp {
    () => {
        concat!(
            "    stp d8, d9, [x9, #{wd8}]\n",
            "    stp d10, d11, [x9, #{wd10}]\n",
            "    stp d12, d13, [x9, #{wd12}]\n",
            "    stp d14, d15, [x9, #{wd14}]\n",
            "    mrs x10, fpcr\n",
            "    str x10, [x9, #{w_fpcr}]\n",
        )
    };
}

/// The start both window saves share ([`save_window`], [`switch_window_body`]): x0 = the ThMB;
/// x9 = its window, the callee-saved registers (x30 as the resume point) and sp stored.
/// Clobbers x9, x10.
macro_rules! save_gprs {
    () => {
        concat!(
            "    add x9, x0, #{w}\n",
            "    stp x19, x20, [x9, #{wx19}]\n",
            "    stp x21, x22, [x9, #{wx21}]\n",
            "    stp x23, x24, [x9, #{wx23}]\n",
            "    stp x25, x26, [x9, #{wx25}]\n",
            "    stp x27, x28, [x9, #{wx27}]\n",
            "    stp x29, x30, [x9, #{w_fp}]\n",
            "    mov x10, sp\n",
            "    str x10, [x9, #{w_sp}]\n",
        )
    };
}

/// The window save both voluntary switches share (`libuthread_switch_out`,
/// `libuthread_switch_window`), up to the mask store: x0 = the ThMB, `$vcpu` = the register
/// holding the `*const Vcpu` whose `FP_LIVE` word decides the FP part (d8–d15 and FPCR, saved only
/// where FP is live). x30 is where the thread resumes. Clobbers x9, x10, x11.
macro_rules! save_window {
    ($vcpu:literal) => {
        concat!(
            save_gprs!(),
            "    ldr x11, [", $vcpu, ", #{vcpu_fp_live}]\n",
            "    ldr x10, [x11]\n",
            "    cmp x10, #0\n",
            "    cset x10, ne\n",
            "    str x10, [x9, #{w_fp_saved}]\n",
            "    cbz x10, 1f\n",
            save_fp!(),
            "1:",
        )
    };
}

/// The direct switch `libuthread_switch_window` (`from` = x0, `to` = x1, vCPU = x2, a
/// `*const Vcpu`), with
/// `$ltn` the instruction that sets LTN = `to` (or nothing): the window save of
/// [`save_window`] with its FP test shared by the resume of `to`. Fast path (FP not live on
/// the vCPU, `to` without an FP part): no FP instruction, one FP_LIVE load, one `fp_saved`
/// test. Clobbers x9, x10, x11; local labels 5–7.
macro_rules! switch_window_body {
    ($ltn:literal) => {
        concat!(
            save_gprs!(),
            "    ldr x11, [x2, #{vcpu_fp_live}]\n",
            "    ldr x10, [x11]\n",
            "    cbnz x10, 5f\n",
            "    str xzr, [x9, #{w_fp_saved}]\n",
            "    mov x10, #{mask_window}\n",                // published: release store (mask is
            "    stlr x10, [x0]\n",                         //   at offset 0, checked below)
            $ltn,
            "    add x9, x1, #{w}\n",
            "    ldr x10, [x9, #{w_fp_saved}]\n",           // `to` has an FP part (FP not live
            "    cbnz x10, 6f\n",                           //   here: its restore makes it live)
            "7:\n",
            "    ldp x19, x20, [x9, #{wx19}]\n",
            "    ldp x21, x22, [x9, #{wx21}]\n",
            "    ldp x23, x24, [x9, #{wx23}]\n",
            "    ldp x25, x26, [x9, #{wx25}]\n",
            "    ldp x27, x28, [x9, #{wx27}]\n",
            "    ldp x29, x30, [x9, #{w_fp}]\n",
            "    ldr x10, [x9, #{w_sp}]\n",
            "    mov sp, x10\n",                            // `to`'s stack, exactly as it left it
            "    ret\n",                                    // = the return of its switch
            "5:\n",                                      // FP live on this vCPU: the FP part too
            save_fp!(),
            "    mov x10, #1\n",
            "    str x10, [x9, #{w_fp_saved}]\n",
            "    mov x10, #{mask_window}\n",
            "    stlr x10, [x0]\n",
            $ltn,
            "    add x9, x1, #{w}\n",
            "    ldr x10, [x9, #{w_fp_saved}]\n",
            "    cbnz x10, 6f\n",
            "    msr fpcr, xzr\n",                          // `to` never used FP: the default FPCR
            "    b 7b\n",
            "6:\n",                                      // `to`'s own FP registers and FPCR
            "    ldp d8, d9, [x9, #{wd8}]\n",
            "    ldp d10, d11, [x9, #{wd10}]\n",
            "    ldp d12, d13, [x9, #{wd12}]\n",
            "    ldp d14, d15, [x9, #{wd14}]\n",
            "    ldr x10, [x9, #{w_fpcr}]\n",
            "    msr fpcr, x10\n",
            "    b 7b\n",
        )
    };
}

core::arch::global_asm!(
    ".pushsection .text.libuthread_context, \"ax\", %progbits",
    // ---------------------------------------------------------------------------------------
    // libuthread_switch_out(from = x0, stack_top = x1, entry = x2, a0 = x3, a1 = x4)
    // A voluntary switch: the caller-saved registers are dead (this is a call), so only the
    // window is saved. x9..x11 are scratch (caller-saved).
    ".globl libuthread_switch_out",
    ".hidden libuthread_switch_out",
    ".type libuthread_switch_out, %function",
    ".p2align 4",
    "libuthread_switch_out:",
    "    ldr x12, [x0, #{vcpu}]",                 // FP live on this vCPU? (the thread's vCPU
    save_window!("x12"),                         //   cannot change here: LTN is 0)
    "    mov x10, #{mask_window}",                // the window is now valid
    "    str x10, [x0, #{mask_off}]",
    "    mov sp, x1",                             // onto the scheduler's stack (16-aligned top)
    "    mov x29, #0",                            // a backtrace ends here
    "    mov x0, x3",                             // entry(a0, a1)
    "    mov x1, x4",
    "    blr x2",
    "    brk #1",                                 // entry never returns
    ".size libuthread_switch_out, . - libuthread_switch_out",
    // ---------------------------------------------------------------------------------------
    // libuthread_switch_out_full(from = x0, stack_top = x1, entry = x2, a0 = x3, a1 = x4)
    // The full-save baseline (`SaveMode::Full`): what a library without register windows does
    // at every switch — every general-purpose register, sp, NZCV into `from.resume`, the whole
    // FP/SIMD state into the FP area, mask FULL|FP; `from` is resumed by the FULL path. x18 (the
    // library's register) is the base; its own slot is not worth keeping.
    ".globl libuthread_switch_out_full",
    ".hidden libuthread_switch_out_full",
    ".type libuthread_switch_out_full, %function",
    ".p2align 4",
    "libuthread_switch_out_full:",
    "    add x18, x0, #{r}",
    "    stp x0, x1, [x18, #{rx0}]",
    "    stp x2, x3, [x18, #{rx2}]",
    "    stp x4, x5, [x18, #{rx4}]",
    "    stp x6, x7, [x18, #{rx6}]",
    "    stp x8, x9, [x18, #{rx8}]",
    "    stp x10, x11, [x18, #{rx10}]",
    "    stp x12, x13, [x18, #{rx12}]",
    "    stp x14, x15, [x18, #{rx14}]",
    "    stp x16, x17, [x18, #{rx16}]",
    "    str x19, [x18, #{rx19}]",
    "    stp x20, x21, [x18, #{rx20}]",
    "    stp x22, x23, [x18, #{rx22}]",
    "    stp x24, x25, [x18, #{rx24}]",
    "    stp x26, x27, [x18, #{rx26}]",
    "    stp x28, x29, [x18, #{rx28}]",
    "    str x30, [x18, #{rx30}]",
    "    str x30, [x18, #{r_pc}]",                // resumes where this call returns
    "    mov x9, sp",
    "    str x9, [x18, #{r_sp}]",
    "    mrs x9, nzcv",
    "    str x9, [x18, #{r_pstate}]",
    "    ldr x9, [x0, #{fp_area}]",
    "    stp q0, q1, [x9, #0]",
    "    stp q2, q3, [x9, #32]",
    "    stp q4, q5, [x9, #64]",
    "    stp q6, q7, [x9, #96]",
    "    stp q8, q9, [x9, #128]",
    "    stp q10, q11, [x9, #160]",
    "    stp q12, q13, [x9, #192]",
    "    stp q14, q15, [x9, #224]",
    "    stp q16, q17, [x9, #256]",
    "    stp q18, q19, [x9, #288]",
    "    stp q20, q21, [x9, #320]",
    "    stp q22, q23, [x9, #352]",
    "    stp q24, q25, [x9, #384]",
    "    stp q26, q27, [x9, #416]",
    "    stp q28, q29, [x9, #448]",
    "    stp q30, q31, [x9, #480]",
    "    mrs x10, fpcr",
    "    str x10, [x9, #{fp_fpcr}]",
    "    mrs x10, fpsr",
    "    str x10, [x9, #{fp_fpsr}]",
    "    mov x10, #{fmt_q}",
    "    str x10, [x0, #{fp_format_off}]",
    "    mov x10, #{mask_full_fp}",
    "    str x10, [x0, #{mask_off}]",
    "    mov sp, x1",
    "    mov x29, #0",
    "    mov x0, x3",
    "    mov x1, x4",
    "    blr x2",
    "    brk #1",
    ".size libuthread_switch_out_full, . - libuthread_switch_out_full",
    // ---------------------------------------------------------------------------------------
    // libuthread_call_on_stack(stack_top = x0, entry = x1, a0 = x2, a1 = x3) -> !
    ".globl libuthread_call_on_stack",
    ".hidden libuthread_call_on_stack",
    ".type libuthread_call_on_stack, %function",
    ".p2align 4",
    "libuthread_call_on_stack:",
    "    mov sp, x0",                             // abandon the current stack
    "    mov x29, #0",
    "    mov x9, x1",
    "    mov x0, x2",                             // entry(a0, a1)
    "    mov x1, x3",
    "    blr x9",
    "    brk #1",
    ".size libuthread_call_on_stack, . - libuthread_call_on_stack",
    // ---------------------------------------------------------------------------------------
    // The window-resume range: everything from here to `libuthread_resume_window_end`.
    ".globl libuthread_resume_window_start",
    ".hidden libuthread_resume_window_start",
    ".p2align 4",
    "libuthread_resume_window_start:",
    // libuthread_switch_window(from = x0, to = x1, vcpu = x2)
    // A direct thread-to-thread switch without the scheduler-stack hop: save the caller's
    // window into `from` (the FP part if FP is live on `vcpu`, passed in because `from.vcpu`
    // may already be rewritten by a waker), publish it with a release store of mask = WINDOW
    // (a vCPU that took `from` off a queue waits for it), LTN = `to`, and resume `to` from its
    // window. Returns when `from` is resumed. From the mask store on, nothing touches `from`'s
    // stack. The FP decision is taken once: the FP_LIVE word read for the save also decides
    // the resume.
    ".globl libuthread_switch_window",
    ".hidden libuthread_switch_window",
    ".type libuthread_switch_window, %function",
    "libuthread_switch_window:",
    switch_window_body!("    msr tpidr_el0, x1\n"),  // LTN = to
    ".size libuthread_switch_window, . - libuthread_switch_window",
    // libuthread_resume_window(to = x0, ltn = x1) -> !
    // Restartable: from the `msr tpidr_el0` on, a kernel stop saves into `to` (not harmful:
    // only the window is read here and the kernel never writes it); no stack is touched.
    ".globl libuthread_resume_window",
    ".hidden libuthread_resume_window",
    ".type libuthread_resume_window, %function",
    ".p2align 4",
    "libuthread_resume_window:",
    "    msr tpidr_el0, x1",                      // LTN = the thread (or 0 for a root context)
    "    add x9, x0, #{w}",
    "    ldr x10, [x9, #{w_fp_saved}]",
    "    cbz x10, 3f",
    "    ldp d8, d9, [x9, #{wd8}]",               // its callee-saved FP registers and FPCR
    "    ldp d10, d11, [x9, #{wd10}]",
    "    ldp d12, d13, [x9, #{wd12}]",
    "    ldp d14, d15, [x9, #{wd14}]",
    "    ldr x10, [x9, #{w_fpcr}]",
    "    msr fpcr, x10",
    "    b 4f",
    "3:",                                         // none saved: no FP state of its own; where
    "    ldr x10, [x0, #{vcpu}]",                 // FP is live, it gets the default FPCR rather
    "    ldr x11, [x10, #{vcpu_fp_live}]",        // than another thread's
    "    ldr x10, [x11]",
    "    cbz x10, 4f",
    "    msr fpcr, xzr",
    "4:",
    "    ldp x19, x20, [x9, #{wx19}]",
    "    ldp x21, x22, [x9, #{wx21}]",
    "    ldp x23, x24, [x9, #{wx23}]",
    "    ldp x25, x26, [x9, #{wx25}]",
    "    ldp x27, x28, [x9, #{wx27}]",
    "    ldp x29, x30, [x9, #{w_fp}]",
    "    ldr x10, [x9, #{w_sp}]",
    "    mov sp, x10",                            // the thread's stack, exactly as it left it
    "    ret",                                    // = the return of its switch_out
    ".size libuthread_resume_window, . - libuthread_resume_window",
    ".globl libuthread_resume_window_end",
    ".hidden libuthread_resume_window_end",
    "libuthread_resume_window_end:",
    // ---------------------------------------------------------------------------------------
    // libuthread_resume_full(to = x0, fp_format = x1) -> !
    // Restores every general-purpose register, sp, NZCV and pc from `to.resume` without
    // entering the kernel and without touching the thread's stack (memory below its sp may be
    // live: nothing is pushed). x18 is the one register the thread does not own (Tsumugi's
    // aarch64 user ABI reserves it for the library), so it serves as the base and then as the
    // jump target:
    //   0. FP state from the FP area, while LTN is still 0 (a kernel stop here resumes in
    //      place, so the thread's FP state is never saved half restored);
    //   1. NZCV (nothing below changes flags);
    //   2. LTN (TPIDR_EL0) = to;
    //   3. sp, then x0..x30 except x18, through x18 = &to.resume;
    //   4. x18 = pc; `br x18`.
    // Restartable like the window resume: the kernel writes only `to.header`, never `to.resume`.
    ".globl libuthread_resume_full",
    ".hidden libuthread_resume_full",
    ".type libuthread_resume_full, %function",
    ".p2align 4",
    "libuthread_resume_full:",
    "    cbz x1, 3f",                             // 0. FP/SIMD state saved with the frame?
    "    ldr x9, [x0, #{fp_area}]",
    "    ldp q0, q1, [x9, #0]",
    "    ldp q2, q3, [x9, #32]",
    "    ldp q4, q5, [x9, #64]",
    "    ldp q6, q7, [x9, #96]",
    "    ldp q8, q9, [x9, #128]",
    "    ldp q10, q11, [x9, #160]",
    "    ldp q12, q13, [x9, #192]",
    "    ldp q14, q15, [x9, #224]",
    "    ldp q16, q17, [x9, #256]",
    "    ldp q18, q19, [x9, #288]",
    "    ldp q20, q21, [x9, #320]",
    "    ldp q22, q23, [x9, #352]",
    "    ldp q24, q25, [x9, #384]",
    "    ldp q26, q27, [x9, #416]",
    "    ldp q28, q29, [x9, #448]",
    "    ldp q30, q31, [x9, #480]",
    "    ldr x10, [x9, #{fp_fpcr}]",
    "    msr fpcr, x10",
    "    ldr x10, [x9, #{fp_fpsr}]",
    "    msr fpsr, x10",
    "3:",
    "    add x18, x0, #{r}",
    "    ldr x9, [x18, #{r_pstate}]",             // 1. NZCV (bits 31..28 of the saved PSTATE)
    "    and x9, x9, #{nzcv_bits}",
    "    msr nzcv, x9",
    "    msr tpidr_el0, x0",                      // 2. LTN = to
    "    ldr x9, [x18, #{r_sp}]",                 // 3. the thread's stack, nothing stored on it
    "    mov sp, x9",
    "    ldp x0, x1, [x18, #{rx0}]",
    "    ldp x2, x3, [x18, #{rx2}]",
    "    ldp x4, x5, [x18, #{rx4}]",
    "    ldp x6, x7, [x18, #{rx6}]",
    "    ldp x8, x9, [x18, #{rx8}]",
    "    ldp x10, x11, [x18, #{rx10}]",
    "    ldp x12, x13, [x18, #{rx12}]",
    "    ldp x14, x15, [x18, #{rx14}]",
    "    ldp x16, x17, [x18, #{rx16}]",
    "    ldr x19, [x18, #{rx19}]",
    "    ldp x20, x21, [x18, #{rx20}]",
    "    ldp x22, x23, [x18, #{rx22}]",
    "    ldp x24, x25, [x18, #{rx24}]",
    "    ldp x26, x27, [x18, #{rx26}]",
    "    ldp x28, x29, [x18, #{rx28}]",
    "    ldr x30, [x18, #{rx30}]",
    "    ldr x18, [x18, #{r_pc}]",                // 4. the base becomes the target
    "    br x18",
    ".globl libuthread_resume_full_end",
    ".hidden libuthread_resume_full_end",
    "libuthread_resume_full_end:",
    ".size libuthread_resume_full, . - libuthread_resume_full",
    // ---------------------------------------------------------------------------------------
    // libuthread_thread_start: a new thread's first instruction, reached by a window resume
    // of the window `init_window` built: x19 = its ThMB, x20 = its Rust entry, sp = the empty
    // stack's 16-aligned top, x29 = 0. The CFI marks the outermost frame so backtraces stop here.
    ".globl libuthread_thread_start",
    ".hidden libuthread_thread_start",
    ".type libuthread_thread_start, %function",
    ".p2align 4",
    "libuthread_thread_start:",
    "    .cfi_startproc",
    "    .cfi_undefined x30",
    "    mov x29, #0",
    "    mov x0, x19",                            // entry(thmb)
    "    blr x20",
    "    brk #1",                                 // entry never returns
    "    .cfi_endproc",
    ".size libuthread_thread_start, . - libuthread_thread_start",
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
    fmt_q = const fp_format::AARCH64_Q,
    fp_fpcr = const FP_FPCR,
    fp_fpsr = const FP_FPCR + 8,
    nzcv_bits = const 0xf000_0000u64,
    vcpu = const offset_of!(Thmb, vcpu),
    vcpu_fp_live = const crate::sched::VCPU_FP_LIVE_OFFSET,
    w = const W,
    wx19 = const WX,
    wx21 = const WX + 16,
    wx23 = const WX + 32,
    wx25 = const WX + 48,
    wx27 = const WX + 64,
    w_fp = const offset_of!(Window, fp),
    w_sp = const offset_of!(Window, sp),
    w_fp_saved = const offset_of!(Window, fp_saved),
    wd8 = const WD,
    wd10 = const WD + 16,
    wd12 = const WD + 32,
    wd14 = const WD + 48,
    w_fpcr = const offset_of!(Window, fpcr),
    r = const R,
    rx0 = const RX,
    rx2 = const RX + 2 * 8,
    rx4 = const RX + 4 * 8,
    rx6 = const RX + 6 * 8,
    rx8 = const RX + 8 * 8,
    rx10 = const RX + 10 * 8,
    rx12 = const RX + 12 * 8,
    rx14 = const RX + 14 * 8,
    rx16 = const RX + 16 * 8,
    rx19 = const RX + 19 * 8,
    rx20 = const RX + 20 * 8,
    rx22 = const RX + 22 * 8,
    rx24 = const RX + 24 * 8,
    rx26 = const RX + 26 * 8,
    rx28 = const RX + 28 * 8,
    rx30 = const RX + 30 * 8,
    r_sp = const offset_of!(FullFrame, sp),
    r_pc = const offset_of!(FullFrame, pc),
    r_pstate = const offset_of!(FullFrame, pstate),
);
