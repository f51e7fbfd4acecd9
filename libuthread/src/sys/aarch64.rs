//! The aarch64 syscall instruction: `svc #0` with the number in `x8`, arguments in `x0..x5`,
//! result in `x0`. The kernel preserves every other register (it saves and restores the whole
//! frame), so only `x0` changes.

/// Enters the kernel with syscall `number` and six arguments; returns the raw result register.
///
/// # Safety
/// Pointer arguments are read or written by the kernel as the syscall documents; the caller
/// must make sure writes land where Rust allows them.
#[inline(always)]
pub unsafe fn syscall6(number: usize, args: [usize; 6]) -> usize {
    let ret: usize;
    // SAFETY: `svc #0` only transfers to the kernel, which restores every register except x0
    // (the result) before returning to the next instruction.
    unsafe {
        core::arch::asm!(
            "svc #0",
            inlateout("x0") args[0] => ret,
            in("x1") args[1],
            in("x2") args[2],
            in("x3") args[3],
            in("x4") args[4],
            in("x5") args[5],
            in("x8") number,
            options(nostack),
        );
    }
    ret
}

/// Reads the LTN register (`TPIDR_EL0`).
#[inline(always)]
pub fn ltn_read() -> usize {
    let v: usize;
    // SAFETY: reads a register. Rust code on this target has no thread-locals, so `TPIDR_EL0`
    // is the LTN register alone; the kernel keeps it per thread.
    unsafe { core::arch::asm!("mrs {}, tpidr_el0", out(reg) v, options(nomem, nostack, preserves_flags)) };
    v
}

/// Writes the LTN register (`TPIDR_EL0`).
#[inline(always)]
pub fn ltn_write(v: usize) {
    // SAFETY: as for `ltn_read`; EL0 may write TPIDR_EL0, and nothing else in user mode uses it.
    // Not `nomem`: writing LTN enters or leaves the library's critical section, so it is a
    // compiler barrier — no memory access (a lock's, a queue's) may move across it.
    unsafe { core::arch::asm!("msr tpidr_el0, {}", in(reg) v, options(nostack, preserves_flags)) };
}

/// Writes 0 to the LTN register (`tpidr_el0`) from the zero register: [`ltn_write`]`(0)` costs
/// a `mov` more (its operand is a register the compiler fills). A compiler barrier for memory,
/// as `ltn_write`.
#[inline(always)]
pub fn ltn_clear() {
    // SAFETY: as for `ltn_write`.
    unsafe { core::arch::asm!("msr tpidr_el0, xzr", options(nostack, preserves_flags)) };
}
