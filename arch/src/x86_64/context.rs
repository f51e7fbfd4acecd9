//! Switching between kernel threads: each thread has its own kernel stack, and a switch saves
//! the callee-saved registers on the old stack and restores them from the new one.
//!
//! Must be assembly: it exchanges the stack pointer, which compiled code cannot do safely.

use core::arch::global_asm;

/// A suspended kernel thread: its stack pointer. The callee-saved registers (rbp, rbx, r12-r15)
/// and the return address sit on the stack it points to.
#[repr(C)]
#[derive(Debug, Default)]
pub struct KernelContext {
    rsp: u64,
}

extern "C" {
    fn context_switch_asm(from: *mut KernelContext, to: *const KernelContext);
    fn context_thread_start();
}

// context_switch_asm(from: *mut KernelContext (rdi), to: *const KernelContext (rsi))
//   pushes the callee-saved registers, stores rsp in *from, loads rsp from *to, pops the
//   callee-saved registers of `to` and returns into it.
// context_thread_start: first "return address" of a new thread; calls r12(r13) with rbp = 0 so
//   backtraces stop there.
global_asm!(
    r#"
    .section .text.context, "ax"
    .global context_switch_asm
context_switch_asm:
    push %rbp
    push %rbx
    push %r12
    push %r13
    push %r14
    push %r15
    mov %rsp, (%rdi)
    mov (%rsi), %rsp
    pop %r15
    pop %r14
    pop %r13
    pop %r12
    pop %rbx
    pop %rbp
    ret

    .global context_thread_start
context_thread_start:
    xor %ebp, %ebp
    mov %r13, %rdi
    call *%r12
    ud2
    "#,
    options(att_syntax)
);

impl KernelContext {
    /// A context to be filled by the first [`switch`] away from it.
    pub const EMPTY: KernelContext = KernelContext { rsp: 0 };

    /// A context that, when switched to, calls `entry(arg)` on the stack ending at `stack_top`
    /// (`entry` must never return).
    ///
    /// # Safety
    /// `stack_top` must be the 16-byte-aligned top of a writable kernel stack of at least 64
    /// bytes that nothing else uses.
    pub unsafe fn new(stack_top: u64, entry: extern "C" fn(usize) -> !, arg: usize) -> Self {
        // Layout popped by context_switch_asm: r15, r14, r13, r12, rbx, rbp, return address.
        // Seven words below a 16-byte-aligned top leave rsp aligned at the `call` in
        // context_thread_start, as the ABI wants.
        let frame: [u64; 7] = [0, 0, arg as u64, entry as usize as u64, 0, 0, context_thread_start as *const () as usize as u64];
        let rsp = stack_top - core::mem::size_of_val(&frame) as u64;
        // SAFETY: the caller guarantees the stack is ours and large enough.
        unsafe { core::ptr::write(rsp as *mut [u64; 7], frame) };
        KernelContext { rsp }
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
