//! Copies between kernel and user memory. The kernel checks a user range against the thread's
//! view *before* calling these; here the copy itself goes through `ldtrb`/`sttrb`, the
//! unprivileged loads and stores: each access is checked with EL0's rights, exactly as if the
//! program had made it. So even a range the check wrongly accepted cannot reach kernel memory
//! (it faults), and the accesses work with PAN on — the kernel keeps `PSTATE.PAN` set at all
//! times where the CPU has it (cpu.rs), the analogue of SMAP without opening a window.

use core::arch::asm;

/// Copies `dst.len()` bytes from user address `src`.
///
/// # Safety
/// `[src, src + dst.len())` must be mapped readable for the current thread and must not change
/// mapping during the copy (the kernel checked it against the view).
pub unsafe fn copy_from_user(dst: &mut [u8], src: u64) {
    if dst.is_empty() {
        return;
    }
    // SAFETY: guaranteed by the caller; the loop reads `len` user bytes with EL0's rights and
    // writes them into `dst`, which is ours and exactly that long.
    unsafe {
        asm!(
            "2:",
            "ldtrb {byte:w}, [{src}]",
            "strb {byte:w}, [{dst}], #1",
            "add {src}, {src}, #1",
            "subs {len}, {len}, #1",
            "b.ne 2b",
            src = inout(reg) src => _,
            dst = inout(reg) dst.as_mut_ptr() => _,
            len = inout(reg) dst.len() => _,
            byte = out(reg) _,
            options(nostack)
        );
    }
}

/// Copies `src` to user address `dst`.
///
/// # Safety
/// `[dst, dst + src.len())` must be mapped writable for the current thread (checked by the
/// kernel against the view).
pub unsafe fn copy_to_user(dst: u64, src: &[u8]) {
    if src.is_empty() {
        return;
    }
    // SAFETY: guaranteed by the caller; writes `len` user bytes with EL0's rights.
    unsafe {
        asm!(
            "2:",
            "ldrb {byte:w}, [{src}], #1",
            "sttrb {byte:w}, [{dst}]",
            "add {dst}, {dst}, #1",
            "subs {len}, {len}, #1",
            "b.ne 2b",
            src = inout(reg) src.as_ptr() => _,
            dst = inout(reg) dst => _,
            len = inout(reg) src.len() => _,
            byte = out(reg) _,
            options(nostack)
        );
    }
}
