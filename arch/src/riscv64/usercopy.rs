//! Kernel accesses to user memory with fault fix-up (the copy-to-user exception-table pattern).
//!
//! Every access goes through the page table the hart has loaded, inside the one window in which
//! supervisor accesses to user pages are allowed (`sstatus.SUM`), by one assembly routine,
//! `user_copy`. Its faulting instructions lie between two labels; a supervisor page or access
//! fault whose `sepc` is in that range does not panic: the trap path ([`fix_up`], called by
//! `trap_dispatch`) moves `sepc` to the routine's fix-up label, which returns "faulted". So a
//! user pointer the kernel checked against a view that changed meanwhile costs an error, never a
//! panic. The trap entry clears SUM, so the fault handler itself runs with user memory closed;
//! `sret` restores the interrupted SUM and the window closes when the copy returns.
//!
//! The page table enforces the rights (a supervisor store honours a clear W bit). The range must
//! lie in the user half (checked here), and the loaded table's user half must hold only a view's
//! user mappings — the caller's contract.

use core::arch::global_asm;
use riscv::interrupt::supervisor::Exception;
use riscv::register::sstatus;

use super::layout::USER_END;
use super::trap::TrapFrame;

/// A user access faulted, or its range was not inside the user half.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserFault;

/// `sstatus.SUM` set for as long as it lives.
struct UserAccessWindow;

impl UserAccessWindow {
    #[inline(always)]
    fn open() -> Self {
        // SAFETY: SUM only allows supervisor loads and stores to user pages until it is cleared
        // in `drop`.
        unsafe { sstatus::set_sum() };
        UserAccessWindow
    }
}

impl Drop for UserAccessWindow {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: closes the window opened in `open`.
        unsafe { sstatus::clear_sum() };
    }
}

// `extern "C" fn user_copy(dst: *mut u8, src: *const u8, len: usize) -> usize`
//
// Copies `len` bytes; returns 0, or 1 if an access faulted (then some bytes may have been
// copied). Doublewords (four at a time) when both addresses are 8-byte aligned, bytes
// otherwise. Assembly because the fix-up must know exactly which instructions may fault and
// where to continue: the compiler gives no such guarantee for Rust code.
global_asm!(
    r#"
    .section .text.user_copy, "ax"
    .global user_copy
    .global user_copy_access_start
    .global user_copy_access_end
    .global user_copy_fixup
user_copy:
    or t0, a0, a1
    andi t0, t0, 7
    bnez t0, 5f                         # misaligned: bytes only
    srli t1, a2, 5                      # 32-byte blocks
    srli t3, a2, 3
    andi t3, t3, 3                      # then doublewords
    andi a2, a2, 7                      # then bytes
user_copy_access_start:
1:  beqz t1, 3f
    ld t0, 0(a1)
    ld t2, 8(a1)
    ld t4, 16(a1)
    ld t5, 24(a1)
    sd t0, 0(a0)
    sd t2, 8(a0)
    sd t4, 16(a0)
    sd t5, 24(a0)
    addi a1, a1, 32
    addi a0, a0, 32
    addi t1, t1, -1
    j 1b
3:  beqz t3, 5f
    ld t0, 0(a1)
    sd t0, 0(a0)
    addi a1, a1, 8
    addi a0, a0, 8
    addi t3, t3, -1
    j 3b
5:  beqz a2, 6f
    lbu t0, 0(a1)
    sb t0, 0(a0)
    addi a1, a1, 1
    addi a0, a0, 1
    addi a2, a2, -1
    j 5b
user_copy_access_end:
6:  li a0, 0
    ret
user_copy_fixup:                        # a fault between the labels lands here
    li a0, 1
    ret
    .text
    "#
);

extern "C" {
    fn user_copy(dst: *mut u8, src: *const u8, len: usize) -> usize;
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
    let _window = UserAccessWindow::open();
    // SAFETY: `dst` is ours and exactly `len` long; the source is user memory (checked above
    // and by the caller's contract) whose faults the fix-up turns into a return of 1.
    let r = unsafe { user_copy(dst.as_mut_ptr(), src as *const u8, dst.len()) };
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
    let _window = UserAccessWindow::open();
    // SAFETY: as in `copy_from_user`, in the other direction.
    let r = unsafe { user_copy(dst as *mut u8, src.as_ptr(), src.len()) };
    if r == 0 { Ok(()) } else { Err(UserFault) }
}

/// The trap path's exception-table lookup: if `frame` is a supervisor load/store page or access
/// fault inside `user_copy`'s accesses, resumes it at the fix-up (the copy returns "faulted")
/// and returns `true`.
pub fn fix_up(frame: &mut TrapFrame) -> bool {
    let cause = frame.scause;
    let memory_fault = [Exception::LoadPageFault, Exception::StorePageFault, Exception::LoadFault, Exception::StoreFault]
        .iter()
        .any(|e| *e as u64 == cause);
    if !memory_fault || frame.from_user() {
        return false;
    }
    let start = core::ptr::addr_of!(user_copy_access_start) as u64;
    let end = core::ptr::addr_of!(user_copy_access_end) as u64;
    if !(start..end).contains(&frame.sepc) {
        return false;
    }
    frame.sepc = core::ptr::addr_of!(user_copy_fixup) as u64;
    true
}
