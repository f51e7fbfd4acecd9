//! The riscv64 syscall instruction: `ecall` from U-mode, number in `a7`, arguments in `a0..a5`,
//! result in `a0`. The kernel preserves every other register.

/// Enters the kernel with syscall `number` and six arguments; returns the raw result register.
///
/// # Safety
/// Pointer arguments are read or written by the kernel as the syscall documents; the caller
/// must make sure writes land where Rust allows them.
#[inline(always)]
pub unsafe fn syscall6(number: usize, args: [usize; 6]) -> usize {
    let ret: usize;
    // SAFETY: `ecall` only transfers to the kernel, which resumes after it with every register
    // preserved except a0 (the result).
    unsafe {
        core::arch::asm!(
            "ecall",
            inlateout("a0") args[0] => ret,
            in("a1") args[1],
            in("a2") args[2],
            in("a3") args[3],
            in("a4") args[4],
            in("a5") args[5],
            in("a7") number,
            options(nostack),
        );
    }
    ret
}

/// Reads the LTN register (`tp`).
#[inline(always)]
pub fn ltn_read() -> usize {
    let v: usize;
    // SAFETY: reads a register. Rust code on this target never uses `tp` (no thread-locals),
    // so it is the LTN register alone.
    unsafe { core::arch::asm!("mv {}, tp", out(reg) v, options(nomem, nostack, preserves_flags)) };
    v
}

/// Writes the LTN register (`tp`).
///
/// Also a compiler barrier for memory (no `nomem`): writing LTN enters or leaves the library's
/// critical section, so no memory access may be moved across it — a lock taken before LTN = 0
/// or released after LTN is restored would let the kernel hand a lock holder to an upcall.
#[inline(always)]
pub fn ltn_write(v: usize) {
    // SAFETY: as for `ltn_read`; the kernel keeps `tp` per thread across traps. The asm touches
    // no memory; it is only declared as possibly doing so, to keep memory accesses on their side.
    unsafe { core::arch::asm!("mv tp, {}", in(reg) v, options(nostack, preserves_flags)) };
}

/// Writes 0 to the LTN register (`tp`) from the zero register: [`ltn_write`]`(0)` costs a
/// `li` more (its operand is a register the compiler fills). A compiler barrier for memory,
/// as `ltn_write`.
#[inline(always)]
pub fn ltn_clear() {
    // SAFETY: as for `ltn_write`.
    unsafe { core::arch::asm!("mv tp, zero", options(nostack, preserves_flags)) };
}
