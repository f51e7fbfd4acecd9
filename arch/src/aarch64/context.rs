//! Switching between kernel threads: each thread has its own kernel stack, and a switch saves
//! the callee-saved registers (AAPCS64: x19-x28, the frame pointer x29, the link register x30)
//! on the old stack and restores them from the new one. The callee-saved d8-d15 are not among
//! them: the kernel is built without FP/SIMD, so kernel code never holds a value there, and the
//! FP/SIMD registers belong to the CPU's FP owner, switched lazily (`fpu.rs`); restoring them
//! here would overwrite the owner's state.
//!
//! Must be assembly: it exchanges the stack pointer, which compiled code cannot do safely.

use core::arch::global_asm;

/// A suspended kernel thread: its stack pointer. The callee-saved registers and the return
/// address sit on the stack it points to.
#[repr(C)]
#[derive(Debug, Default)]
pub struct KernelContext {
    sp: u64,
}

extern "C" {
    fn context_switch_asm(from: *mut KernelContext, to: *const KernelContext);
    fn context_thread_start();
}

/// Words `context_switch_asm` keeps on a suspended stack: x19..x30.
const SAVED_WORDS: usize = 12;
/// Index of x19 (the entry of a new thread), x20 (its argument) and x30 (where `ret` goes).
const SLOT_X19: usize = 0;
const SLOT_X20: usize = 1;
const SLOT_X30: usize = 11;

// context_switch_asm(from: *mut KernelContext (x0), to: *const KernelContext (x1))
//   saves x19-x30 below sp, stores sp in *from, loads sp from *to, restores the registers of
//   `to` and returns into it (x30).
// context_thread_start: first "return address" of a new thread; calls x19(x20) with x29 = 0 so
//   backtraces stop there.
global_asm!(
    r#"
    .section .text.context, "ax"
    .global context_switch_asm
context_switch_asm:
    sub     sp, sp, #{frame}
    stp     x19, x20, [sp, #0]
    stp     x21, x22, [sp, #16]
    stp     x23, x24, [sp, #32]
    stp     x25, x26, [sp, #48]
    stp     x27, x28, [sp, #64]
    stp     x29, x30, [sp, #80]
    mov     x9, sp
    str     x9, [x0]
    ldr     x9, [x1]
    mov     sp, x9
    ldp     x19, x20, [sp, #0]
    ldp     x21, x22, [sp, #16]
    ldp     x23, x24, [sp, #32]
    ldp     x25, x26, [sp, #48]
    ldp     x27, x28, [sp, #64]
    ldp     x29, x30, [sp, #80]
    add     sp, sp, #{frame}
    ret

    .global context_thread_start
context_thread_start:
    mov     x29, xzr
    mov     x30, xzr
    mov     x0, x20
    blr     x19
    brk     #0
    "#,
    frame = const SAVED_WORDS * 8,
);

// sp must stay 16-byte aligned (SCTLR_EL1.SA).
const _: () = assert!((SAVED_WORDS * 8) % 16 == 0);

impl KernelContext {
    /// A context to be filled by the first [`switch`] away from it.
    pub const EMPTY: KernelContext = KernelContext { sp: 0 };

    /// A context that, when switched to, calls `entry(arg)` on the stack ending at `stack_top`
    /// (`entry` must never return).
    ///
    /// # Safety
    /// `stack_top` must be the 16-byte-aligned top of a writable kernel stack of at least 96
    /// bytes that nothing else uses.
    pub unsafe fn new(stack_top: u64, entry: extern "C" fn(usize) -> !, arg: usize) -> Self {
        let mut frame = [0u64; SAVED_WORDS];
        frame[SLOT_X19] = entry as usize as u64;
        frame[SLOT_X20] = arg as u64;
        frame[SLOT_X30] = context_thread_start as *const () as usize as u64;
        // The saved words keep sp 16-byte aligned, as the architecture checks (SCTLR_EL1.SA).
        let sp = stack_top - core::mem::size_of_val(&frame) as u64;
        // SAFETY: the caller guarantees the stack is ours and large enough.
        unsafe { core::ptr::write(sp as *mut [u64; SAVED_WORDS], frame) };
        KernelContext { sp }
    }
}

/// Saves the running thread's context in `from` and resumes `to`. Returns when another thread
/// switches back to `from`.
///
/// # Safety
/// `to` must hold a context made by [`KernelContext::new`] or saved by this function, whose
/// stack is still alive; `from` must stay valid until it is resumed. Interrupts should be off.
#[inline(always)]
pub unsafe fn switch(from: *mut KernelContext, to: *const KernelContext) {
    // SAFETY: guaranteed by the caller; the assembly follows the AAPCS64.
    unsafe { context_switch_asm(from, to) }
}
