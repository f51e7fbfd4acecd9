//! Copies between kernel and user memory. The kernel checks a user range against the thread's
//! view *before* calling these; here we only open the window in which supervisor accesses to
//! user pages are allowed (`sstatus.SUM`) for the copy. Nowhere else does the kernel set SUM,
//! and the trap entry clears it, so a handler never runs with user memory open.

use riscv::register::sstatus;

/// `sstatus.SUM` set for as long as it lives.
struct UserAccessWindow;

impl UserAccessWindow {
    fn open() -> Self {
        // SAFETY: SUM only allows supervisor loads and stores to user pages until it is cleared
        // in `drop`.
        unsafe { sstatus::set_sum() };
        UserAccessWindow
    }
}

impl Drop for UserAccessWindow {
    fn drop(&mut self) {
        // SAFETY: closes the window opened in `open`.
        unsafe { sstatus::clear_sum() };
    }
}

/// Copies `dst.len()` bytes from user address `src`.
///
/// # Safety
/// `[src, src + dst.len())` must be mapped readable for the current thread and must not change
/// mapping during the copy (the kernel checked it against the view).
pub unsafe fn copy_from_user(dst: &mut [u8], src: u64) {
    let _window = UserAccessWindow::open();
    // SAFETY: guaranteed by the caller; volatile so the copy happens inside the window.
    unsafe {
        for (i, b) in dst.iter_mut().enumerate() {
            *b = core::ptr::read_volatile((src as usize + i) as *const u8);
        }
    }
}

/// Copies `src` to user address `dst`.
///
/// # Safety
/// `[dst, dst + src.len())` must be mapped writable for the current thread (checked by the
/// kernel against the view).
pub unsafe fn copy_to_user(dst: u64, src: &[u8]) {
    let _window = UserAccessWindow::open();
    // SAFETY: guaranteed by the caller.
    unsafe {
        for (i, b) in src.iter().enumerate() {
            core::ptr::write_volatile((dst as usize + i) as *mut u8, *b);
        }
    }
}
