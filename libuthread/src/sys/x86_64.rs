//! The x86_64 syscall instruction: number in `rax`, arguments in `rdi, rsi, rdx, r10, r8, r9`,
//! result in `rax`; the CPU clobbers `rcx` (return address) and `r11` (flags).

/// Enters the kernel with syscall `number` and six arguments; returns the raw result register.
///
/// # Safety
/// Pointer arguments are read or written by the kernel as the syscall documents; the caller
/// must make sure writes land where Rust allows them.
#[inline(always)]
pub unsafe fn syscall6(number: usize, args: [usize; 6]) -> usize {
    let ret: usize;
    // SAFETY: the syscall instruction only transfers to the kernel, which preserves every
    // register except rax (result), rcx and r11 (clobbered by the instruction).
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") number => ret,
            in("rdi") args[0],
            in("rsi") args[1],
            in("rdx") args[2],
            in("r10") args[3],
            in("r8") args[4],
            in("r9") args[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// Reads the LTN register (GS base) with `rdgsbase`.
#[inline(always)]
pub fn ltn_read() -> usize {
    let v: usize;
    // SAFETY: rdgsbase reads a register; the kernel enables FSGSBASE where the CPU has it
    // (the Tsumugi platform checks before using this).
    unsafe { core::arch::asm!("rdgsbase {}", out(reg) v, options(nomem, nostack, preserves_flags)) };
    v
}

/// Writes the LTN register (GS base) with `wrgsbase`.
#[inline(always)]
pub fn ltn_write(v: usize) {
    // SAFETY: as for `ltn_read`; GS is not used for anything else in user mode on Tsumugi.
    // Not `nomem`: writing LTN enters or leaves the library's critical section, so it is a
    // compiler barrier — no memory access (a lock's, a queue's) may move across it.
    unsafe { core::arch::asm!("wrgsbase {}", in(reg) v, options(nostack, preserves_flags)) };
}

/// Writes 0 to the LTN register (`wrgsbase` takes a register: the compiler's zeroed one).
#[inline(always)]
pub fn ltn_clear() {
    ltn_write(0)
}
