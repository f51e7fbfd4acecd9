//! Kernel accesses to user memory with fault fix-up (the copy-to-user exception-table pattern).
//!
//! Every access is an unprivileged load or store (`ldtr`/`sttr`) through the page table the CPU
//! has loaded: each is checked with EL0's rights, exactly as if the program had made it, so the
//! page table enforces the view's rights, a range the kernel wrongly accepted cannot reach kernel
//! memory, and the accesses work with PAN on — the kernel keeps `PSTATE.PAN` set at all times
//! where the CPU has it (cpu.rs), the analogue of SMAP without opening a window.
//!
//! The accesses are made by two assembly routines whose faulting instructions lie between
//! labels; a data abort from EL1 whose `elr` is in one of those ranges does not panic: the trap
//! path ([`fix_up`], called by `trap_dispatch`) moves `elr` to the routine's fix-up label, which
//! returns "faulted". So a user pointer the kernel checked against a view that changed
//! meanwhile costs an error, never a panic.

use core::arch::global_asm;

use super::layout::USER_END;
use super::trap::{ec, TrapFrame};

/// A user access faulted, or its range was not inside the user half.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserFault;

// `extern "C" fn user_copy_in(dst: *mut u8, src_user: u64, len: usize) -> usize`
// `extern "C" fn user_copy_out(dst_user: u64, src: *const u8, len: usize) -> usize`
//
// Copy `len` bytes; return 0, or 1 if an access faulted (then some bytes may have been copied).
// Doublewords (four at a time) when both addresses are 8-byte aligned, bytes otherwise.
// Assembly because the fix-up must know exactly which instructions may fault and where to
// continue: the compiler gives no such guarantee for Rust code.
global_asm!(
    r#"
    .section .text.user_copy, "ax"
    .global user_copy_in
    .global user_copy_out
    .global user_copy_access_start
    .global user_copy_access_end
    .global user_copy_fixup
user_copy_in:
    orr x9, x0, x1
    tst x9, #7
    b.ne 5f                             // misaligned: bytes only
    lsr x10, x2, #5                     // 32-byte blocks
    ubfx x11, x2, #3, #2                // then doublewords
    and x2, x2, #7                      // then bytes
user_copy_access_start:
1:  cbz x10, 3f
    ldtr x12, [x1]
    ldtr x13, [x1, #8]
    ldtr x14, [x1, #16]
    ldtr x15, [x1, #24]
    stp x12, x13, [x0]
    stp x14, x15, [x0, #16]
    add x1, x1, #32
    add x0, x0, #32
    sub x10, x10, #1
    b 1b
3:  cbz x11, 5f
    ldtr x12, [x1]
    str x12, [x0], #8
    add x1, x1, #8
    sub x11, x11, #1
    b 3b
5:  cbz x2, 9f
    ldtrb w12, [x1]
    strb w12, [x0], #1
    add x1, x1, #1
    sub x2, x2, #1
    b 5b

user_copy_out:
    orr x9, x0, x1
    tst x9, #7
    b.ne 5f
    lsr x10, x2, #5
    ubfx x11, x2, #3, #2
    and x2, x2, #7
1:  cbz x10, 3f
    ldp x12, x13, [x1]
    ldp x14, x15, [x1, #16]
    sttr x12, [x0]
    sttr x13, [x0, #8]
    sttr x14, [x0, #16]
    sttr x15, [x0, #24]
    add x1, x1, #32
    add x0, x0, #32
    sub x10, x10, #1
    b 1b
3:  cbz x11, 5f
    ldr x12, [x1], #8
    sttr x12, [x0]
    add x0, x0, #8
    sub x11, x11, #1
    b 3b
5:  cbz x2, 9f
    ldrb w12, [x1], #1
    sttrb w12, [x0]
    add x0, x0, #1
    sub x2, x2, #1
    b 5b
user_copy_access_end:
9:  mov x0, #0
    ret
user_copy_fixup:                        // a fault between the labels lands here
    mov x0, #1
    ret
    .text
    "#
);

extern "C" {
    fn user_copy_in(dst: *mut u8, src_user: u64, len: usize) -> usize;
    fn user_copy_out(dst_user: u64, src: *const u8, len: usize) -> usize;
    static user_copy_access_start: u8;
    static user_copy_access_end: u8;
    static user_copy_fixup: u8;
}

/// Whether `[addr, addr + len)` lies inside the user half.
#[inline(always)]
fn in_user_half(addr: u64, len: usize) -> bool {
    addr.checked_add(len as u64).is_some_and(|end| end <= USER_END)
}

/// Copies `dst.len()` bytes from user address `src` through the loaded page table.
///
/// # Safety
/// The loaded table's user half must hold only user mappings (a view's table is loaded).
#[inline]
pub unsafe fn copy_from_user(dst: &mut [u8], src: u64) -> Result<(), UserFault> {
    if !in_user_half(src, dst.len()) {
        return Err(UserFault);
    }
    // SAFETY: `dst` is ours and exactly `len` long; the source is read with EL0's rights, and a
    // fault there is turned by the fix-up into a return of 1.
    let r = unsafe { user_copy_in(dst.as_mut_ptr(), src, dst.len()) };
    if r == 0 { Ok(()) } else { Err(UserFault) }
}

/// Copies `src` to user address `dst` through the loaded page table.
///
/// # Safety
/// The loaded table's user half must hold only user mappings (a view's table is loaded).
#[inline]
pub unsafe fn copy_to_user(dst: u64, src: &[u8]) -> Result<(), UserFault> {
    if !in_user_half(dst, src.len()) {
        return Err(UserFault);
    }
    // SAFETY: as in `copy_from_user`, in the other direction (stores with EL0's rights).
    let r = unsafe { user_copy_out(dst, src.as_ptr(), src.len()) };
    if r == 0 { Ok(()) } else { Err(UserFault) }
}

/// The trap path's exception-table lookup: if `frame` is a data abort from EL1 inside the copy
/// routines' accesses, resumes it at the fix-up (the copy returns "faulted") and returns `true`.
/// `frame.vector` must already hold the exception class.
pub fn fix_up(frame: &mut TrapFrame) -> bool {
    if frame.vector != ec::DATA_ABORT_SAME || frame.from_user() {
        return false;
    }
    let start = core::ptr::addr_of!(user_copy_access_start) as u64;
    let end = core::ptr::addr_of!(user_copy_access_end) as u64;
    if !(start..end).contains(&frame.elr) {
        return false;
    }
    frame.elr = core::ptr::addr_of!(user_copy_fixup) as u64;
    true
}
