//! Kernel accesses to user memory with fault fix-up (the copy-to-user exception-table pattern).
//!
//! Every access goes through the page table the CPU has loaded, inside the SMAP window
//! (`stac`/`clac`), by one assembly routine, `user_copy`. Its faulting instructions lie between
//! two labels; a kernel-mode page fault whose `rip` is in that range does not panic: the trap path
//! ([`fix_up`], called by `trap_dispatch`) moves `rip` to the routine's fix-up label, which returns
//! "faulted". So a user pointer the kernel checked against a view that changed meanwhile (a
//! revoke racing the copy, a table not yet reloaded after a grant) costs an error, never a panic.
//!
//! The page table enforces the rights: supervisor writes honour read-only pages because CR0.WP
//! is set on every CPU (boot.rs, smp.rs). The range must lie in the user half (checked here), and
//! the loaded table's user half must hold only a view's user mappings — the caller's contract.

use core::arch::{asm, global_asm};
use core::sync::atomic::{AtomicBool, Ordering};

use super::layout::USER_END;
use super::trap::TrapFrame;

static SMAP: AtomicBool = AtomicBool::new(false);

/// Records whether SMAP is on (set by boot code after enabling CR4.SMAP).
pub fn set_smap(enabled: bool) {
    SMAP.store(enabled, Ordering::Relaxed);
}

/// A user access faulted, or its range was not inside the user half.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserFault;

struct UserAccessWindow;

impl UserAccessWindow {
    #[inline(always)]
    fn open() -> Self {
        if SMAP.load(Ordering::Relaxed) {
            // SAFETY: stac only allows supervisor accesses to user pages until clac.
            unsafe { asm!("stac", options(nomem, nostack)) };
        }
        UserAccessWindow
    }
}

impl Drop for UserAccessWindow {
    #[inline(always)]
    fn drop(&mut self) {
        if SMAP.load(Ordering::Relaxed) {
            // SAFETY: closes the window opened in `open`.
            unsafe { asm!("clac", options(nomem, nostack)) };
        }
    }
}

// `extern "C" fn user_copy(dst: *mut u8, src: *const u8, len: usize) -> usize`
//
// Copies `len` bytes; returns 0, or 1 if an access faulted (then some bytes may have been
// copied). Assembly because the fix-up must know exactly which instructions may fault and where
// to continue: the compiler gives no such guarantee for Rust code.
global_asm!(
    r#"
    .section .text.user_copy, "ax"
    .global user_copy
    .global user_copy_access_start
    .global user_copy_access_end
    .global user_copy_fixup
user_copy:
    mov %rdx, %rcx
    shr $3, %rcx                        /* whole words first */
    and $7, %edx
user_copy_access_start:
    rep movsq
    mov %edx, %ecx                      /* then the tail bytes */
    rep movsb
user_copy_access_end:
    xor %eax, %eax
    ret
user_copy_fixup:                        /* a fault between the labels lands here */
    mov $1, %eax
    ret
    .text
    "#,
    options(att_syntax)
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

/// The trap path's exception-table lookup: if `frame` is a kernel-mode page fault inside
/// `user_copy`'s accesses, resumes it at the fix-up (the copy returns "faulted") and returns
/// `true`.
pub fn fix_up(frame: &mut TrapFrame) -> bool {
    const PAGE_FAULT: u64 = 14;
    if frame.vector != PAGE_FAULT || frame.from_user() {
        return false;
    }
    let start = core::ptr::addr_of!(user_copy_access_start) as u64;
    let end = core::ptr::addr_of!(user_copy_access_end) as u64;
    if !(start..end).contains(&frame.rip) {
        return false;
    }
    frame.rip = core::ptr::addr_of!(user_copy_fixup) as u64;
    true
}
