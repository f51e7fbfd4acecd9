//! x86_64 context switching (System V ABI). Every entry point is plain `global_asm!`: a switch
//! changes the stack pointer, which no Rust function (and no `asm!` block inside one) may do,
//! and the FULL restore must load every general-purpose register, so no compiler-managed
//! register may survive it.
//!
//! Entry points (all `extern "C"`, all in `.text`, `.hidden`):
//!
//! | symbol | Rust signature | does |
//! |---|---|---|
//! | `libuthread_switch_out` | `(from: *mut Thmb, stack_top: usize, entry: Entry, a0: usize, a1: usize)` | save window, mask = WINDOW, `entry(a0, a1)` on `stack_top`; returns when `from` is resumed |
//! | `libuthread_call_on_stack` | `(stack_top: usize, entry: Entry, a0: usize, a1: usize) -> !` | `entry(a0, a1)` on `stack_top`, nothing saved |
//! | `libuthread_switch_window` | `(from: *mut Thmb, to: *mut Thmb, vcpu: *const Vcpu)` | save window into `from` (FP part per the vCPU's `FP_LIVE` word), mask = WINDOW, then as `libuthread_resume_window(to, to)`; returns when `from` is resumed |
//! | `libuthread_resume_window` | `(to: *mut Thmb, ltn: *mut Thmb) -> !` | LTN = `ltn`, restore window, `ret` |
//! | `libuthread_switch_out_full` | as `libuthread_switch_out` | the full-save baseline: every GPR, rflags and the FP/SIMD state (`xsave64`/`fxsave64` into the FP area), mask = FULL\|FP |
//! | `libuthread_resume_full` | `(to: *mut Thmb, fp_format: u64) -> !` | [FP from the FP area], LTN = `to`, restore `to.resume` entirely, jump |
//! | `libuthread_thread_start` | (returned to by a window resume, from the stack slot `init_window` wrote) | first instruction of every user thread |
//! | `libuthread_promote_oldest` | `(me: *mut Thmb)` (called by `asm!`, not by Rust) | `sched::promote_oldest_record_c(me)` keeping every general-purpose register but rdi (`context::preserving_call!`) |
//!
//! `Entry` is `unsafe extern "C" fn(usize, usize) -> !`.
//!
//! The window-resume sequences lie between `libuthread_resume_window_start` and
//! `libuthread_resume_window_end` (`context::interrupted_resume`): the direct switch's own
//! resume of `to` is inside, after its save (which runs with LTN = 0, where the kernel never
//! upcalls, so a stop there is resumed in place and the range may include it).
//!
//! The resume point of a saved window is its switch call's return address, left where the call
//! put it, on the thread's stack at the saved `rsp`: the save stores `rsp` only, and every
//! window resume ends by popping that slot into rip: a `ret` on Tsumugi; hosted, the direct
//! switch is entered with `push` + `jmp` and left with `pop` + `jmp`, so a switch between two
//! threads that switch from different call sites does not mispredict its return (see
//! `switch_return!`). A thread that has never run has `libuthread_thread_start` there
//! ([`init_window`]).

use core::mem::offset_of;

use tsumugi_abi::kn::{fp_format, mask, FullFrame, FP_AREA_PTR_OFFSET, FP_FORMAT_OFFSET, MASK_OFFSET};

use crate::sched::Vcpu;
use crate::thmb::{Thmb, RESUME_OFFSET, WINDOW_OFFSET};

/// The callee-saved register window of the x86_64 System V ABI: what a voluntary switch (a call)
/// must preserve. MXCSR's control bits and the x87 control word are callee-saved too; the
/// vector and x87 data registers are caller-saved, so they are dead at the switch.
///
/// As on riscv64 and aarch64, the FP part is saved only on a vCPU where FP is live
/// (`platform::FP_LIVE[vcpu]`, which the kernel sets at the first #NM of an activation of that
/// vCPU): with CR0.TS set, `stmxcsr`/`fnstcw`/`ldmxcsr`/`fldcw` would trap and turn every
/// activation into an FP user. `fp_saved` says whether the window holds the FP part; a
/// thread whose window holds none never used FP, and where FP is live it resumes with the
/// initial FP environment.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    /// `rbx`.
    pub rbx: u64,
    /// `rbp` (the frame pointer when frame pointers are kept).
    pub rbp: u64,
    /// `r12`.
    pub r12: u64,
    /// `r13`.
    pub r13: u64,
    /// `r14`.
    pub r14: u64,
    /// `r15`.
    pub r15: u64,
    /// The stack pointer inside the switch call: it points to the call's return address, where
    /// the thread resumes (a `ret` with this `rsp`).
    pub rsp: u64,
    /// SSE control/status register.
    pub mxcsr: u32,
    /// x87 control word.
    pub fpucw: u16,
    /// 1 if `mxcsr` and `fpucw` were saved (FP was live on the vCPU), else 0.
    pub fp_saved: u16,
}

const _: () = assert!(core::mem::size_of::<Window>() == 64);
const _: () = assert!(offset_of!(Window, rsp) == 48);
const _: () = assert!(offset_of!(Window, mxcsr) == 56 && offset_of!(Window, fpucw) == 60);
const _: () = assert!(offset_of!(Window, fp_saved) == 62);

/// MXCSR at process start: all exceptions masked, round to nearest (what a window resume loads
/// for a thread that never used FP, on a vCPU where another thread did).
static MXCSR_DEFAULT: u32 = 0x1F80;
/// x87 control word at process start: all exceptions masked, 64-bit precision, round to nearest.
static FPUCW_DEFAULT: u16 = 0x037F;

/// A 16-aligned stack top below everything a saved window still needs on its stack (its
/// return address, at the saved `rsp`): everything below it on that stack is dead while the
/// thread is switched out (a voluntary switch is a call), so a direct switch may run code there
/// before it resumes the thread.
#[inline]
pub(crate) fn window_sp(window: &Window) -> usize {
    window.rsp as usize & !15
}

/// Builds the window of a thread that has never run: it "resumes" at `libuthread_thread_start`
/// with `r12` = its ThMB and `r13` = `entry`, on an empty stack whose top is `stack_top`: the
/// resume's `ret` pops the start address, which this writes to the stack's top slot, and
/// leaves `rsp` = `stack_top`.
///
/// # Safety
/// `stack_top` is the 16-aligned top of a stack the thread owns and nothing else uses.
pub(crate) unsafe fn init_window(window: &mut Window, stack_top: usize, thmb: *mut Thmb, entry: unsafe extern "C" fn(*mut Thmb) -> !) {
    debug_assert_eq!(stack_top % 16, 0);
    let rsp = stack_top - 8;
    // SAFETY: the stack's top slot is the thread's (contract), 8-aligned.
    unsafe { (rsp as *mut u64).write(super::raw::libuthread_thread_start as *const () as u64) };
    *window = Window {
        rsp: rsp as u64,
        r12: thmb as u64,
        r13: entry as *const () as u64,
        // No FP part: the thread has not used FP yet (its resume gives it the initial FP
        // environment where FP is live, and touches no FP register elsewhere).
        fp_saved: 0,
        ..Window::default()
    };
}

/// XSAVE components the library saves and restores: x87, SSE, AVX (the kernel enables no
/// more, and the ABI's FP area is sized for these).
const XCOMPONENTS: u32 = 0b111;

/// Offset of MXCSR in an FXSAVE area and in the legacy region of an XSAVE area (SDM vol. 1,
/// table 10-2): the FULL paths touch it with an SSE instruction before `xsave`/`xrstor`.
const FP_AREA_MXCSR: usize = 24;

/// The FP format the library's own full saves use (`fp_format::XSAVE` when the OS enabled
/// XSAVE, else `FXSAVE`); set by [`detect_fp`] before any switch.
/// (An atomic so the assembly can read it as a plain `u64` through `sym`.)
static NATIVE_FP_FORMAT: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(fp_format::FXSAVE);

/// Bytes of FP/SIMD state a full save writes (set with the format).
static FP_BYTES: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(512);

/// Finds how this CPU and OS save FP/SIMD state: `xsave64` with x87|SSE|AVX when CPUID says
/// the OS turned XSAVE on (`OSXSAVE`), else `fxsave64`.
pub(crate) fn detect_fp() {
    // SAFETY: CPUID has no side effects.
    #[allow(unused_unsafe)]
    let leaf1 = unsafe { core::arch::x86_64::__cpuid(1) };
    let (format, bytes) = {
        if leaf1.ecx & (1 << 27) != 0 {
            let xcr0: u32;
            // SAFETY: XGETBV is allowed once the OS set OSXSAVE (CPUID just said so); it reads
            // XCR0 only.
            unsafe { core::arch::asm!("xgetbv", in("ecx") 0, out("eax") xcr0, out("edx") _, options(nomem, nostack, preserves_flags)) };
            // Legacy area + XSAVE header, plus AVX's upper halves when enabled.
            let bytes = 512 + 64 + if xcr0 & XCOMPONENTS & 0b100 != 0 { 256 } else { 0 };
            (fp_format::XSAVE, bytes)
        } else {
            (fp_format::FXSAVE, 512)
        }
    };
    NATIVE_FP_FORMAT.store(format, core::sync::atomic::Ordering::Relaxed);
    FP_BYTES.store(bytes, core::sync::atomic::Ordering::Relaxed);
}

/// Bytes a switch stores in each mode: the window (7 registers, MXCSR, x87 control word; the
/// return address stays on the stack, where the call put it), or every general-purpose
/// register, rflags, rip, rsp and the FP/SIMD state.
pub(crate) fn bytes_saved() -> (usize, usize) {
    (7 * 8 + 4 + 2, core::mem::size_of::<FullFrame>() + FP_BYTES.load(core::sync::atomic::Ordering::Relaxed))
}

/// `context::switch_window` on x86_64. On Tsumugi a plain call of the assembly. Hosted, a
/// `call` without the return-stack push: the switch leaves with `pop` + `jmp` (see
/// `switch_return!`), so the return-stack predictor stays in step across the switch. The stack
/// looks as after a `call`: the asm is not `nostack`, so rsp is 16-aligned here and the red zone
/// holds nothing. Callee-saved registers come back as they were (the switch saves and restores
/// them); the rest are clobbered as by a call.
///
/// # Safety
/// As `context::switch_window`.
#[inline(always)]
pub(crate) unsafe fn switch_window(from: *mut Thmb, to: *mut Thmb, vcpu: *const Vcpu) {
    // SAFETY: forwarded contract.
    #[cfg(target_os = "none")]
    unsafe {
        super::raw::libuthread_switch_window(from, to, vcpu)
    }
    // SAFETY: forwarded contract; the switch returns to label 2 with rsp as before the push.
    #[cfg(not(target_os = "none"))]
    unsafe {
        core::arch::asm!(
            "lea rax, [rip + 2f]",
            "push rax",
            "jmp {switch}",
            "2:",
            switch = sym super::raw::libuthread_switch_window,
            in("rdi") from,
            in("rsi") to,
            in("rdx") vcpu,
            clobber_abi("C"),
        )
    }
}

/// Where a full frame resumes (`rip`).
///
/// # Safety
/// `frame` points to a live frame.
pub(crate) unsafe fn frame_pc(frame: *const FullFrame) -> u64 {
    // SAFETY: forwarded contract.
    unsafe { core::ptr::read_volatile(&raw const (*frame).rip) }
}

super::own_list_edits! {
    push: [
        "mov {t}, qword ptr [{me} + {head}]",
        "mov qword ptr [{e} - 1], {t}",
        "mov qword ptr [{me} + {head}], {e}",
    ],
    take: [
        "cmp qword ptr [{me} + {head}], {e}",
        "jne {miss}",
        "mov {t}, qword ptr [{e} - 1]",
        "mov qword ptr [{me} + {head}], {t}",
    ],
}

super::preserving_call! {
    call: "call",
    arg: "rdi",
    fixed: [],
    #[cfg(target_feature = "avx512f")]
    vector: [
        out("xmm0") _, out("xmm1") _, out("xmm2") _, out("xmm3") _, out("xmm4") _, out("xmm5") _,
        out("xmm6") _, out("xmm7") _, out("xmm8") _, out("xmm9") _, out("xmm10") _, out("xmm11") _,
        out("xmm12") _, out("xmm13") _, out("xmm14") _, out("xmm15") _,
        out("zmm16") _, out("zmm17") _, out("zmm18") _, out("zmm19") _, out("zmm20") _,
        out("zmm21") _, out("zmm22") _, out("zmm23") _, out("zmm24") _, out("zmm25") _,
        out("zmm26") _, out("zmm27") _, out("zmm28") _, out("zmm29") _, out("zmm30") _,
        out("zmm31") _, out("k1") _, out("k2") _, out("k3") _, out("k4") _, out("k5") _,
        out("k6") _, out("k7") _,
    ],
    #[cfg(all(target_feature = "sse", not(target_feature = "avx512f")))]
    vector: [
        out("xmm0") _, out("xmm1") _, out("xmm2") _, out("xmm3") _, out("xmm4") _, out("xmm5") _,
        out("xmm6") _, out("xmm7") _, out("xmm8") _, out("xmm9") _, out("xmm10") _, out("xmm11") _,
        out("xmm12") _, out("xmm13") _, out("xmm14") _, out("xmm15") _,
    ],
    #[cfg(not(target_feature = "sse"))]
    vector: [],
}

// The trampolines (`context::preserving_trampolines!`): they keep every caller-saved
// general-purpose register but rdi (the flags are clobbered; the vector registers are the
// caller's to declare, see `preserving_call!`).
super::preserving_trampolines! {
    align: "4",
    body: [
        "    push rax",
        "    push rcx",
        "    push rdx",
        "    push rsi",
        "    push r8",
        "    push r9",
        "    push r10",
        "    push r11",
        "    sub rsp, 8", // the return address and eight registers: 72 bytes; a call needs 16n
        "    call {f}",
        "    add rsp, 8",
        "    pop r11",
        "    pop r10",
        "    pop r9",
        "    pop r8",
        "    pop rsi",
        "    pop rdx",
        "    pop rcx",
        "    pop rax",
        "    ret",
    ],
}

// libuthread_clobber_caller_saved: writes a garbage value into every caller-saved
// general-purpose register (the test callee of `preserving_call_check`).
core::arch::global_asm!(
    super::asm_fn_start!("libuthread_clobber_caller_saved", "4"),
    "    mov rax, -1",
    "    mov rcx, rax",
    "    mov rdx, rax",
    "    mov rsi, rax",
    "    mov rdi, rax",
    "    mov r8, rax",
    "    mov r9, rax",
    "    mov r10, rax",
    "    mov r11, rax",
    "    ret",
    super::asm_fn_end!("libuthread_clobber_caller_saved"),
);

/// Checks the trampoline of [`promote_oldest_preserving`] (the same code, with a callee that
/// clobbers every caller-saved register): each register it promises to keep holds a pattern
/// before the call and must hold it after. Returns the registers that did not, by name.
#[doc(hidden)]
pub fn preserving_call_check() -> alloc::vec::Vec<&'static str> {
    const P: [u64; 8] = [
        0x0101_0101_0101_0101,
        0x0202_0202_0202_0202,
        0x0303_0303_0303_0303,
        0x0404_0404_0404_0404,
        0x0505_0505_0505_0505,
        0x0606_0606_0606_0606,
        0x0707_0707_0707_0707,
        0x0808_0808_0808_0808,
    ];
    let mut v = P;
    // SAFETY: the trampoline keeps the registers below (what is checked) and the stack; the
    // callee touches no memory.
    unsafe {
        core::arch::asm!(
            "call {t}",
            t = sym libuthread_preserving_check,
            inout("rax") v[0], inout("rcx") v[1], inout("rdx") v[2], inout("rsi") v[3],
            inout("r8") v[4], inout("r9") v[5], inout("r10") v[6], inout("r11") v[7],
            inout("rdi") 0usize => _,
        );
    }
    let names = ["rax", "rcx", "rdx", "rsi", "r8", "r9", "r10", "r11"];
    (0..8).filter(|&i| v[i] != P[i]).map(|i| names[i]).collect()
}

/// Makes a full frame resume at `pc`.
///
/// # Safety
/// `frame` points to a live frame, which nobody else touches.
pub(crate) unsafe fn set_frame_pc(frame: *mut FullFrame, pc: u64) {
    // SAFETY: forwarded contract.
    unsafe { (*frame).rip = pc }
}

// Offsets used by the assembly, checked against the Rust layout at compile time (the `const`
// operands below are computed from `offset_of!`, so they cannot drift).
const W: usize = WINDOW_OFFSET;
const R: usize = RESUME_OFFSET;
const _: () = assert!(MASK_OFFSET == 0);

/// LTN = the register named (`"rsi"`, `"rdi"`): on Tsumugi GS base (`wrgsbase`); hosted the
/// OS thread's LTN word (`platform::ltn`), through FS. Clobbers r11 hosted.
#[cfg(target_os = "none")]
macro_rules! write_ltn {
    ($reg:literal) => {
        concat!("    wrgsbase ", $reg, "\n")
    };
}
#[cfg(not(target_os = "none"))]
macro_rules! write_ltn {
    ($reg:literal) => {
        concat!(
            "    mov r11, qword ptr [rip + libuthread_hosted_ltn@GOTTPOFF]\n",
            "    mov qword ptr fs:[r11], ", $reg, "\n",
        )
    };
}

/// How `libuthread_switch_window` goes back into the thread it resumes: to the return address
/// at the top of `to`'s stack, with that slot popped.
///
/// On Tsumugi, a `ret`: the switch is entered by `call`, and under QEMU's TCG, where the port's
/// figures are taken, no return stack predicts anything, so the shortest sequence wins.
/// Hosted, on a real CPU, a `ret` here is predicted from the return-stack buffer, which holds
/// `from`'s return address, not `to`'s: every switch between two threads that switch from
/// different call sites would mispredict (about 6 ns each on the AMD EPYC of our measurements,
/// the yield round trip 26.8 → 15.5 ns without it). So hosted the switch is entered with a jump
/// that pushes the return address without a `call` (`context::switch_window`) and left with
/// `pop` + `jmp`: the return-stack buffer is never touched, stays in step with the calling
/// code, and the jump to `to` is predicted by the indirect-branch predictor. Clobbers rcx hosted.
#[cfg(target_os = "none")]
macro_rules! switch_return {
    () => {
        "    ret\n"
    };
}
#[cfg(not(target_os = "none"))]
macro_rules! switch_return {
    () => {
        concat!("    pop rcx\n", "    jmp rcx\n")
    };
}

/// The start both window saves share ([`save_window`], [`switch_window_body`]): the
/// callee-saved registers and rsp, which points to the return address (the resume point, left
/// on the stack: see the module docs), into the window of rdi.
macro_rules! store_gprs {
    () => {
        concat!(
            "    mov [rdi + {w_rbx}], rbx\n",
            "    mov [rdi + {w_rbp}], rbp\n",
            "    mov [rdi + {w_r12}], r12\n",
            "    mov [rdi + {w_r13}], r13\n",
            "    mov [rdi + {w_r14}], r14\n",
            "    mov [rdi + {w_r15}], r15\n",
            "    mov [rdi + {w_rsp}], rsp\n",
        )
    };
}

/// The window save both voluntary switches share (`libuthread_switch_out`,
/// `libuthread_switch_window`), up to the mask store: rdi = the ThMB, `$vcpu` = the register
/// holding the `*const Vcpu` whose `FP_LIVE` word decides the FP part. The return address at rsp is
/// where the thread resumes. Where FP is not live
/// no FP instruction runs at all (CR0.TS may be set); where it is, the callee-saved control
/// state of SSE and of the x87 unit is saved too. Clobbers r9, r10.
macro_rules! save_window {
    ($vcpu:literal) => {
        concat!(
            store_gprs!(),
            "    mov r9, [", $vcpu, " + {vcpu_fp_live}]\n",
            "    xor r10d, r10d\n",
            "    cmp qword ptr [r9], 0\n",
            "    je 1f\n",
            "    stmxcsr dword ptr [rdi + {w_mxcsr}]\n",
            "    fnstcw word ptr [rdi + {w_fpucw}]\n",
            "    inc r10d\n",
            "1:\n",
            "    mov word ptr [rdi + {w_fp_saved}], r10w",
        )
    };
}

/// The direct switch `libuthread_switch_window` (`from` = rdi, `to` = rsi, vCPU = rdx, a
/// `*const Vcpu`), with
/// `$ltn` the instruction that sets LTN = `to` (or nothing): the window save of
/// [`save_window`] with its FP test shared by the resume of `to`. Fast path (FP not live on
/// the vCPU, `to` without an FP part): no FP instruction, one FP_LIVE load, one `fp_saved`
/// test. Local labels 5–8.
macro_rules! switch_window_body {
    ($ltn:expr) => {
        concat!(
            "    mov r9, [rdx + {vcpu_fp_live}]\n",
            "    cmp qword ptr [r9], 0\n",
            "    jne 5f\n",
            store_gprs!(),
            // fp_saved = 0, and fpucw with it (read only when fp_saved is 1): one dword store,
            // no 16-bit immediate (a length-changing prefix the decoders stall on).
            "    mov dword ptr [rdi + {w_fpucw}], 0\n",
            "    mov qword ptr [rdi + {mask_off}], {mask_window}\n", // published (x86 stores are ordered)
            $ltn,
            "    cmp word ptr [rsi + {w_fp_saved}], 0\n", // `to` has an FP part (FP not live here:
            "    jne 6f\n",                                 //   its restore makes it live)
            "7:\n",
            "    mov rbx, [rsi + {w_rbx}]\n",
            "    mov rbp, [rsi + {w_rbp}]\n",
            "    mov r12, [rsi + {w_r12}]\n",
            "    mov r13, [rsi + {w_r13}]\n",
            "    mov r14, [rsi + {w_r14}]\n",
            "    mov r15, [rsi + {w_r15}]\n",
            "    mov rsp, [rsi + {w_rsp}]\n",               // `to`'s stack, exactly as it left it
            switch_return!(),                            // = the return of its switch
            "5:\n",                                      // FP live on this vCPU: save the FP part,
            "    stmxcsr dword ptr [rdi + {w_mxcsr}]\n",  //   `stmxcsr` first (a slow microcoded
            store_gprs!(),                               //   instruction: the stores overlap it)
            "    fnstcw word ptr [rdi + {w_fpucw}]\n",
            "    mov word ptr [rdi + {w_fp_saved}], 1\n",
            "    mov qword ptr [rdi + {mask_off}], {mask_window}\n",
            $ltn,
            "    cmp word ptr [rsi + {w_fp_saved}], 0\n",
            "    jne 8f\n",
            "    ldmxcsr dword ptr [rip + {mxcsr_default}]\n", // `to` never used FP: the initial
            "    fldcw word ptr [rip + {fpucw_default}]\n",  //   environment, not `from`'s
            "    jmp 7b\n",
            "8:\n",                                      // `to`'s environment is loaded only where
            "    mov r10d, dword ptr [rsi + {w_mxcsr}]\n", //   it differs from the CPU's, `from`'s
            "    cmp r10d, dword ptr [rdi + {w_mxcsr}]\n", //   just saved (ldmxcsr costs ≈ 20
            "    jne 6f\n",                                  //   cycles on AMD Zen). Each compare
            "    movzx r10d, word ptr [rsi + {w_fpucw}]\n", //   reads what one store wrote: a
            "    cmp r10w, word ptr [rdi + {w_fpucw}]\n",  //   wider load would wait for all
            "    je 7b\n",                                   //   three stores (no forwarding)
            "6:\n",                                      // `to`'s own FP environment
            "    ldmxcsr dword ptr [rsi + {w_mxcsr}]\n",
            "    fldcw word ptr [rsi + {w_fpucw}]\n",
            "    jmp 7b\n",
        )
    };
}

core::arch::global_asm!(
    ".pushsection .text.libuthread_context, \"ax\", @progbits",
    // ---------------------------------------------------------------------------------------
    // libuthread_switch_out(from = rdi, stack_top = rsi, entry = rdx, a0 = rcx, a1 = r8)
    // A voluntary switch: the caller's caller-saved registers are dead (this is a call), so
    // only the window is saved; its return address stays on the stack (the resume point).
    ".globl libuthread_switch_out",
    ".hidden libuthread_switch_out",
    ".type libuthread_switch_out, @function",
    ".p2align 4",
    "libuthread_switch_out:",
    "    mov rax, [rdi + {vcpu}]",                // FP live on this vCPU? (from.vcpu's word;
    save_window!("rax"),                         //   the vCPU cannot change: LTN = 0 here)
    "    mov qword ptr [rdi + {mask_off}], {mask_window}", // the window is now valid
    "    mov rsp, rsi",                           // onto the scheduler's stack (16-aligned top)
    "    xor ebp, ebp",                           // a backtrace ends here
    "    mov rdi, rcx",                           // entry(a0, a1)
    "    mov rsi, r8",
    "    call rdx",                               // `call` gives entry the ABI's alignment
    "    ud2",                                    // entry never returns
    ".size libuthread_switch_out, . - libuthread_switch_out",
    // ---------------------------------------------------------------------------------------
    // libuthread_switch_out_full(from = rdi, stack_top = rsi, entry = rdx, a0 = rcx, a1 = r8)
    // The full-save baseline (`SaveMode::Full`): what a library without register windows does
    // at every switch — every general-purpose register and rflags into `from.resume`, the whole
    // FP/SIMD state into the FP area, mask FULL|FP; `from` is resumed by the FULL path.
    ".globl libuthread_switch_out_full",
    ".hidden libuthread_switch_out_full",
    ".type libuthread_switch_out_full, @function",
    ".p2align 4",
    "libuthread_switch_out_full:",
    "    mov [rdi + {r_rax}], rax",
    "    mov [rdi + {r_rbx}], rbx",
    "    mov [rdi + {r_rcx}], rcx",
    "    mov [rdi + {r_rdx}], rdx",
    "    mov [rdi + {r_rsi}], rsi",
    "    mov [rdi + {r_rdi}], rdi",
    "    mov [rdi + {r_rbp}], rbp",
    "    mov [rdi + {r_r8}], r8",
    "    mov [rdi + {r_r9}], r9",
    "    mov [rdi + {r_r10}], r10",
    "    mov [rdi + {r_r11}], r11",
    "    mov [rdi + {r_r12}], r12",
    "    mov [rdi + {r_r13}], r13",
    "    mov [rdi + {r_r14}], r14",
    "    mov [rdi + {r_r15}], r15",
    "    pushfq",
    "    pop qword ptr [rdi + {r_rflags}]",
    "    mov rax, [rsp]",                         // resumes where this call returns
    "    mov [rdi + {r_rip}], rax",
    "    lea rax, [rsp + 8]",
    "    mov [rdi + {r_rsp}], rax",
    "    mov r9, [rdi + {fp_area}]",
    "    stmxcsr dword ptr [r9 + {fp_mxcsr}]",    // take the #NM first (see `resume_full`)
    "    mov r10, qword ptr [rip + {native_format}]",
    "    mov r11, rdx",                           // keep `entry`
    "    cmp r10, {fmt_xsave}",
    "    jne 4f",
    "    mov eax, {xcomponents}",
    "    xor edx, edx",
    "    xsave64 [r9]",
    "    jmp 3f",
    "4:",
    "    fxsave64 [r9]",
    "3:",
    "    mov [rdi + {fp_format_off}], r10",
    "    mov qword ptr [rdi + {mask_off}], {mask_full_fp}",
    "    mov rsp, rsi",
    "    xor ebp, ebp",
    "    mov rdi, rcx",
    "    mov rsi, r8",
    "    call r11",
    "    ud2",
    ".size libuthread_switch_out_full, . - libuthread_switch_out_full",
    // ---------------------------------------------------------------------------------------
    // libuthread_call_on_stack(stack_top = rdi, entry = rsi, a0 = rdx, a1 = rcx) -> !
    ".globl libuthread_call_on_stack",
    ".hidden libuthread_call_on_stack",
    ".type libuthread_call_on_stack, @function",
    ".p2align 4",
    "libuthread_call_on_stack:",
    "    mov rsp, rdi",                           // abandon the current stack
    "    xor ebp, ebp",
    "    mov rax, rsi",
    "    mov rdi, rdx",                           // entry(a0, a1)
    "    mov rsi, rcx",
    "    call rax",
    "    ud2",
    ".size libuthread_call_on_stack, . - libuthread_call_on_stack",
    // ---------------------------------------------------------------------------------------
    // The window-resume range: everything from here to `libuthread_resume_window_end`.
    ".globl libuthread_resume_window_start",
    ".hidden libuthread_resume_window_start",
    ".p2align 4",
    "libuthread_resume_window_start:",
    // libuthread_switch_window(from = rdi, to = rsi, vcpu = rdx)
    // A direct thread-to-thread switch without the scheduler-stack hop: save the caller's
    // window into `from` (the FP part if FP is live on `vcpu`, passed in because `from.vcpu`
    // may already be rewritten by a waker), publish it (mask = WINDOW: a vCPU that took `from`
    // off a queue waits for this store), LTN = `to`, and resume `to` from its window. Returns
    // when `from` is resumed. From the mask store on, nothing touches `from`'s stack.
    // The FP decision is taken once: the FP_LIVE word read for the save also decides the
    // resume, so where FP is not live (the common case) a `to` without an FP part costs one
    // test and no FP instruction runs.
    ".globl libuthread_switch_window",
    ".hidden libuthread_switch_window",
    ".type libuthread_switch_window, @function",
    "libuthread_switch_window:",
    switch_window_body!(write_ltn!("rsi")),               // LTN = to
    ".size libuthread_switch_window, . - libuthread_switch_window",
    // libuthread_resume_window(to = rdi, ltn = rsi) -> !
    // Restartable: from the LTN write on, a kernel stop saves into `to` (not harmful: only the
    // window is read here and the kernel never writes it); no stack is read after LTN is set.
    ".globl libuthread_resume_window",
    ".hidden libuthread_resume_window",
    ".type libuthread_resume_window, @function",
    ".p2align 4",
    "libuthread_resume_window:",
    write_ltn!("rsi"),                            // LTN = the thread (or 0 for a root context)
    "    cmp word ptr [rdi + {w_fp_saved}], 0",   // the window holds an FP part:
    "    je 3f",
    "    ldmxcsr dword ptr [rdi + {w_mxcsr}]",    //   restore it
    "    fldcw word ptr [rdi + {w_fpucw}]",
    "    jmp 4f",
    "3:",                                         // none: the thread never used FP. Where FP
    "    mov rax, [rdi + {vcpu}]",                // is live on this vCPU another thread's
    "    mov rcx, [rax + {vcpu_fp_live}]",        // environment is loaded: give this one the
    "    cmp qword ptr [rcx], 0",                 // initial one. (Elsewhere CR0.TS may be set:
    "    je 4f",                                  // no FP instruction then.)
    "    ldmxcsr dword ptr [rip + {mxcsr_default}]",
    "    fldcw word ptr [rip + {fpucw_default}]",
    "4:",
    "    mov rbx, [rdi + {w_rbx}]",
    "    mov rbp, [rdi + {w_rbp}]",
    "    mov r12, [rdi + {w_r12}]",
    "    mov r13, [rdi + {w_r13}]",
    "    mov r14, [rdi + {w_r14}]",
    "    mov r15, [rdi + {w_r15}]",
    "    mov rsp, [rdi + {w_rsp}]",               // the thread's stack, exactly as it left it
    "    ret",                                    // = the `ret` of its switch_out
    ".size libuthread_resume_window, . - libuthread_resume_window",
    ".globl libuthread_resume_window_end",
    ".hidden libuthread_resume_window_end",
    "libuthread_resume_window_end:",
    // ---------------------------------------------------------------------------------------
    // libuthread_resume_full(to = rdi, fp_format = rsi) -> !
    // Restores every general-purpose register, rflags, rsp and rip from `to.resume` without
    // entering the kernel and without touching the thread's stack (its red zone below rsp may
    // hold live data). GS base = `to` gives an addressing base that needs no register:
    //   1. LTN (GS base) = to;
    //   2. rflags via push/popfq on the *scheduler's* stack (the only stack use);
    //   3. each GPR with `mov reg, gs:[off]` (movs leave flags alone);
    //   4. rsp last, then `jmp gs:[rip]`.
    // Restartable like the window resume: the kernel writes only `to.header`, never `to.resume`.
    //
    // The `ldmxcsr` of the saved MXCSR (offset 24 in the FXSAVE and XSAVE layouts; xrstor loads
    // it again) is there for QEMU's TCG, which raises #NM for SSE instructions but not for
    // `xsave`/`xrstor` while CR0.TS is set: an `xrstor` there would load the registers of this
    // CPU's FP owner — another activation — behind the kernel's back, which saved them as its
    // own at the next trap, and this one got its stale state (regmix saw another thread's xmm
    // registers and MXCSR, about once in 30 runs under load). Real hardware traps either way.
    ".globl libuthread_resume_full",
    ".hidden libuthread_resume_full",
    ".type libuthread_resume_full, @function",
    ".p2align 4",
    "libuthread_resume_full:",
    "    test rsi, rsi",                          // 0. FP/SIMD state saved with the frame?
    "    jz 3f",                                  //    (LTN is still 0: a stop here resumes
    "    mov rcx, [rdi + {fp_area}]",             //    in place, FP registers kept)
    "    ldmxcsr dword ptr [rcx + {fp_mxcsr}]",   //    take the #NM first (see below)
    "    cmp rsi, {fmt_xsave}",
    "    jne 4f",
    "    mov eax, {xcomponents}",                 //    x87 | SSE | AVX
    "    xor edx, edx",
    "    xrstor64 [rcx]",
    "    jmp 3f",
    "4:",
    "    fxrstor64 [rcx]",
    "3:",
    write_ltn!("rdi"),                            // 1. LTN = to
    "    push qword ptr [rdi + {r_rflags}]",      // 2. onto the scheduler's stack ...
    "    popfq",                                  //    ... and into rflags
    "    mov rax, qword ptr gs:[{r_rax}]",        // 3. every GPR, flags untouched from here
    "    mov rbx, qword ptr gs:[{r_rbx}]",
    "    mov rcx, qword ptr gs:[{r_rcx}]",
    "    mov rdx, qword ptr gs:[{r_rdx}]",
    "    mov rsi, qword ptr gs:[{r_rsi}]",
    "    mov rdi, qword ptr gs:[{r_rdi}]",
    "    mov rbp, qword ptr gs:[{r_rbp}]",
    "    mov r8, qword ptr gs:[{r_r8}]",
    "    mov r9, qword ptr gs:[{r_r9}]",
    "    mov r10, qword ptr gs:[{r_r10}]",
    "    mov r11, qword ptr gs:[{r_r11}]",
    "    mov r12, qword ptr gs:[{r_r12}]",
    "    mov r13, qword ptr gs:[{r_r13}]",
    "    mov r14, qword ptr gs:[{r_r14}]",
    "    mov r15, qword ptr gs:[{r_r15}]",
    "    mov rsp, qword ptr gs:[{r_rsp}]",        // 4. the thread's stack, nothing pushed on it
    "    jmp qword ptr gs:[{r_rip}]",
    ".globl libuthread_resume_full_end",
    ".hidden libuthread_resume_full_end",
    "libuthread_resume_full_end:",
    ".size libuthread_resume_full, . - libuthread_resume_full",
    // ---------------------------------------------------------------------------------------
    // libuthread_thread_start: a new thread's first instruction, reached by a window resume
    // of the window `init_window` built: r12 = its ThMB, r13 = its Rust entry, rsp = the empty
    // stack's 16-aligned top. The CFI marks the outermost frame so backtraces stop here.
    ".globl libuthread_thread_start",
    ".hidden libuthread_thread_start",
    ".type libuthread_thread_start, @function",
    ".p2align 4",
    "libuthread_thread_start:",
    "    .cfi_startproc",
    "    .cfi_undefined rip",
    "    xor ebp, ebp",
    "    mov rdi, r12",                           // entry(thmb)
    "    call r13",
    "    ud2",                                    // entry never returns
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
    fmt_xsave = const fp_format::XSAVE,
    xcomponents = const XCOMPONENTS,
    fp_mxcsr = const FP_AREA_MXCSR,
    native_format = sym NATIVE_FP_FORMAT,
    w_rbx = const W + offset_of!(Window, rbx),
    w_rbp = const W + offset_of!(Window, rbp),
    w_r12 = const W + offset_of!(Window, r12),
    w_r13 = const W + offset_of!(Window, r13),
    w_r14 = const W + offset_of!(Window, r14),
    w_r15 = const W + offset_of!(Window, r15),
    w_rsp = const W + offset_of!(Window, rsp),
    w_mxcsr = const W + offset_of!(Window, mxcsr),
    w_fpucw = const W + offset_of!(Window, fpucw),
    w_fp_saved = const W + offset_of!(Window, fp_saved),
    vcpu = const offset_of!(Thmb, vcpu),
    vcpu_fp_live = const crate::sched::VCPU_FP_LIVE_OFFSET,
    mxcsr_default = sym MXCSR_DEFAULT,
    fpucw_default = sym FPUCW_DEFAULT,
    r_rax = const R + offset_of!(FullFrame, rax),
    r_rbx = const R + offset_of!(FullFrame, rbx),
    r_rcx = const R + offset_of!(FullFrame, rcx),
    r_rdx = const R + offset_of!(FullFrame, rdx),
    r_rsi = const R + offset_of!(FullFrame, rsi),
    r_rdi = const R + offset_of!(FullFrame, rdi),
    r_rbp = const R + offset_of!(FullFrame, rbp),
    r_r8 = const R + offset_of!(FullFrame, r8),
    r_r9 = const R + offset_of!(FullFrame, r9),
    r_r10 = const R + offset_of!(FullFrame, r10),
    r_r11 = const R + offset_of!(FullFrame, r11),
    r_r12 = const R + offset_of!(FullFrame, r12),
    r_r13 = const R + offset_of!(FullFrame, r13),
    r_r14 = const R + offset_of!(FullFrame, r14),
    r_r15 = const R + offset_of!(FullFrame, r15),
    r_rip = const R + offset_of!(FullFrame, rip),
    r_rsp = const R + offset_of!(FullFrame, rsp),
    r_rflags = const R + offset_of!(FullFrame, rflags),
);
