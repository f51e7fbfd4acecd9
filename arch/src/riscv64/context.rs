//! Switching between kernel threads: each thread has its own kernel stack, and a switch saves
//! the callee-saved registers on the old stack and restores them from the new one.
//!
//! Must be assembly: it exchanges the stack pointer, which compiled code cannot do safely.

use core::arch::global_asm;

/// A suspended kernel thread: its stack pointer. The return address (ra) and the callee-saved
/// registers s0-s11 sit on the stack it points to.
#[repr(C)]
#[derive(Debug, Default)]
pub struct KernelContext {
    sp: u64,
}

/// Words `context_switch_asm` keeps on the stack: ra, s0-s11, and one of padding so the stack
/// stays 16-byte aligned as the psABI requires.
const SAVED_WORDS: usize = 14;

extern "C" {
    fn context_switch_asm(from: *mut KernelContext, to: *const KernelContext);
    fn context_thread_start();
}

// context_switch_asm(from: *mut KernelContext (a0), to: *const KernelContext (a1))
//   stores ra and s0-s11 below sp, stores sp in *from, loads sp from *to, reloads ra and s0-s11
//   of `to` and returns into it.
// context_thread_start: first "return address" of a new thread; calls s1(s2) with s0 = 0 so
//   backtraces stop there.
global_asm!(
    r#"
    .section .text.context, "ax"
    .global context_switch_asm
context_switch_asm:
    addi sp, sp, -{frame}
    sd ra, 0(sp)
    sd s0, 8(sp)
    sd s1, 16(sp)
    sd s2, 24(sp)
    sd s3, 32(sp)
    sd s4, 40(sp)
    sd s5, 48(sp)
    sd s6, 56(sp)
    sd s7, 64(sp)
    sd s8, 72(sp)
    sd s9, 80(sp)
    sd s10, 88(sp)
    sd s11, 96(sp)
    sd sp, 0(a0)
    ld sp, 0(a1)
    ld ra, 0(sp)
    ld s0, 8(sp)
    ld s1, 16(sp)
    ld s2, 24(sp)
    ld s3, 32(sp)
    ld s4, 40(sp)
    ld s5, 48(sp)
    ld s6, 56(sp)
    ld s7, 64(sp)
    ld s8, 72(sp)
    ld s9, 80(sp)
    ld s10, 88(sp)
    ld s11, 96(sp)
    addi sp, sp, {frame}
    ret

    .global context_thread_start
context_thread_start:
    mv s0, zero
    mv a0, s2
    jalr s1
    unimp
    "#,
    frame = const SAVED_WORDS * 8,
);

impl KernelContext {
    /// A context to be filled by the first [`switch`] away from it.
    pub const EMPTY: KernelContext = KernelContext { sp: 0 };

    /// A context that, when switched to, calls `entry(arg)` on the stack ending at `stack_top`
    /// (`entry` must never return).
    ///
    /// # Safety
    /// `stack_top` must be the 16-byte-aligned top of a writable kernel stack of at least 112
    /// bytes that nothing else uses.
    pub unsafe fn new(stack_top: u64, entry: extern "C" fn(usize) -> !, arg: usize) -> Self {
        // Layout reloaded by context_switch_asm: ra, s0, s1, s2, s3..s11, padding.
        let mut frame = [0u64; SAVED_WORDS];
        frame[0] = context_thread_start as *const () as usize as u64;
        frame[2] = entry as usize as u64;
        frame[3] = arg as u64;
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
    // SAFETY: guaranteed by the caller; the assembly follows the C ABI.
    unsafe { context_switch_asm(from, to) }
}
