//! Kernel accesses to user memory with fault fix-up (the copy-to-user exception-table pattern),
//! the same on every port around a few lines of per-port assembly (`<port>/usercopy.rs`).
//!
//! Every access goes through the page table the CPU has loaded, by assembly routines whose
//! faulting instructions all lie between two labels, `user_copy_access_start` and
//! `user_copy_access_end`. A kernel-mode data fault whose program counter is in that range does
//! not panic: the trap path ([`fix_up`], called first by each port's `trap_dispatch`) moves the
//! program counter to `user_copy_fixup`, which returns "faulted" (1) to the routine's caller. So
//! a user pointer the kernel checked against a view that changed meanwhile (a revoke racing the
//! copy, a table not yet reloaded after a grant), or one it did not check at all (the Kernel
//! Notification fast path, which lets the page table decide), costs an error, never a panic.
//!
//! The page table enforces the rights: x86_64 sets CR0.WP (supervisor writes honour read-only
//! pages) and opens SMAP only around the routine (`stac`/`clac`); riscv64 opens `sstatus.SUM`
//! around it; aarch64 uses the unprivileged `ldtr`/`sttr`, checked as EL0 accesses. The range
//! must lie in the user half (checked here), and the loaded table's user half must hold only a
//! view's user mappings — the caller's contract.

use crate::imp::usercopy as port;
use crate::imp::layout::USER_END;
use crate::imp::trap::TrapFrame;

/// A user access faulted, or its range was not inside the user half.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserFault;

extern "C" {
    /// `user_copy_in(dst, src_user, len) -> 0 | 1`.
    fn user_copy_in(dst: *mut u8, src: u64, len: usize) -> usize;
    /// `user_copy_out(dst_user, src, len) -> 0 | 1`.
    fn user_copy_out(dst: u64, src: *const u8, len: usize) -> usize;
    /// `user_get_u64(src_user, out) -> 0 | 1`: one aligned word.
    fn user_get_u64(src: u64, out: *mut u64) -> usize;
    /// `user_put_u64(dst_user, value) -> 0 | 1`: one aligned word.
    fn user_put_u64(dst: u64, value: u64) -> usize;
    /// `user_cmpxchg_u64(addr_user, expected, new, prev_out) -> 0 | 1`: one aligned word,
    /// compared with `expected` and replaced by `new` if equal, atomically (acquire and
    /// release); what it held goes to `prev_out`.
    fn user_cmpxchg_u64(addr: u64, expected: u64, new: u64, prev: *mut u64) -> usize;
    /// `user_put_4u64(dst_user, src) -> 0 | 1`: four aligned words (an event ring slot).
    fn user_put_4u64(dst: u64, src: *const u64) -> usize;
    static user_copy_access_start: u8;
    static user_copy_access_end: u8;
    static user_copy_fixup: u8;
}

/// Whether `[addr, addr + len)` lies inside the user half.
#[inline(always)]
fn in_user_half(addr: u64, len: usize) -> bool {
    addr.checked_add(len as u64).is_some_and(|end| end <= USER_END)
}

#[inline(always)]
fn result(faulted: usize) -> Result<(), UserFault> {
    if faulted == 0 { Ok(()) } else { Err(UserFault) }
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
    let _window = port::Window::open();
    // SAFETY: `dst` is ours and exactly `len` long; the source is user memory (checked above
    // and by the caller's contract) whose faults the fix-up turns into a return of 1.
    result(unsafe { user_copy_in(dst.as_mut_ptr(), src, dst.len()) })
}

/// Copies `src` to user address `dst` through the loaded page table.
///
/// # Safety
/// As for [`copy_from_user`].
#[inline]
pub unsafe fn copy_to_user(dst: u64, src: &[u8]) -> Result<(), UserFault> {
    if !in_user_half(dst, src.len()) {
        return Err(UserFault);
    }
    let _window = port::Window::open();
    // SAFETY: as in `copy_from_user`, in the other direction.
    result(unsafe { user_copy_out(dst, src.as_ptr(), src.len()) })
}

/// An open user-access window (Linux's `user_access_begin`/`unsafe_put_user`/
/// `user_access_end`): several word and block accesses for the price of opening it once —
/// for hot paths that touch user memory a few times in a row. Keep it short: it lets the
/// kernel reach user pages (x86_64 SMAP and riscv64 SUM are open while it lives).
pub struct Access {
    _window: port::Window,
}

impl Access {
    /// Opens the window.
    ///
    /// # Safety
    /// As for [`copy_from_user`], for as long as the window lives.
    #[inline(always)]
    pub unsafe fn open() -> Access {
        Access { _window: port::Window::open() }
    }

    /// Whether `[addr, addr + len)` lies in the user half (what every access of the window
    /// checks first; for per-port routines built on the window).
    #[inline(always)]
    pub fn may_access(&self, addr: u64, len: usize) -> bool {
        in_user_half(addr, len)
    }

    /// Reads the 8-byte-aligned word at user address `src`.
    #[inline(always)]
    pub fn get_u64(&self, src: u64) -> Result<u64, UserFault> {
        if src % 8 != 0 || !in_user_half(src, 8) {
            return Err(UserFault);
        }
        let mut value = 0;
        // SAFETY: the source is user memory (checked above; `open`'s contract) whose faults the
        // fix-up turns into a return of 1; `value` is ours.
        result(unsafe { user_get_u64(src, &mut value) })?;
        Ok(value)
    }

    /// Writes `value` to the 8-byte-aligned word at user address `dst`.
    #[inline(always)]
    pub fn put_u64(&self, dst: u64, value: u64) -> Result<(), UserFault> {
        if dst % 8 != 0 || !in_user_half(dst, 8) {
            return Err(UserFault);
        }
        // SAFETY: as in `get_u64`.
        result(unsafe { user_put_u64(dst, value) })
    }

    /// Copies `src` to user address `dst`.
    #[inline(always)]
    pub fn copy_to(&self, dst: u64, src: &[u8]) -> Result<(), UserFault> {
        if !in_user_half(dst, src.len()) {
            return Err(UserFault);
        }
        // SAFETY: as in `get_u64`; `src` is ours.
        result(unsafe { user_copy_out(dst, src.as_ptr(), src.len()) })
    }

    /// [`get_u64`](Self::get_u64) of a word whose address the caller proved once for all (an
    /// event ring checked at registration): no per-access check on the hot path.
    ///
    /// # Safety
    /// `src` is 8-byte aligned and `[src, src + 8)` lies in the user half.
    #[inline(always)]
    pub unsafe fn get_u64_prechecked(&self, src: u64) -> Result<u64, UserFault> {
        debug_assert!(src % 8 == 0 && in_user_half(src, 8));
        let mut value = 0;
        // SAFETY: the caller's contract; as in `get_u64`.
        result(unsafe { user_get_u64(src, &mut value) })?;
        Ok(value)
    }

    /// [`put_u64`](Self::put_u64) of a word whose address the caller proved (see
    /// [`get_u64_prechecked`](Self::get_u64_prechecked)).
    ///
    /// # Safety
    /// `dst` is 8-byte aligned and `[dst, dst + 8)` lies in the user half.
    #[inline(always)]
    pub unsafe fn put_u64_prechecked(&self, dst: u64, value: u64) -> Result<(), UserFault> {
        debug_assert!(dst % 8 == 0 && in_user_half(dst, 8));
        // SAFETY: the caller's contract; as in `get_u64`.
        result(unsafe { user_put_u64(dst, value) })
    }

    /// Stores the four words `words` at `dst` (an event ring slot), which the caller proved
    /// (see [`get_u64_prechecked`](Self::get_u64_prechecked)): one straight run of loads and
    /// stores, not the general copy's set-up and loops.
    ///
    /// # Safety
    /// `dst` is 8-byte aligned and `[dst, dst + 32)` lies in the user half.
    #[inline(always)]
    pub unsafe fn put_4u64_prechecked(&self, dst: u64, words: &[u64; 4]) -> Result<(), UserFault> {
        debug_assert!(dst % 8 == 0 && in_user_half(dst, 32));
        // SAFETY: the caller's contract; as in `put_u64`.
        result(unsafe { user_put_4u64(dst, words.as_ptr()) })
    }

    /// [`copy_to`](Self::copy_to) a range the caller proved (see
    /// [`get_u64_prechecked`](Self::get_u64_prechecked)).
    ///
    /// # Safety
    /// `[dst, dst + src.len())` lies in the user half.
    #[inline(always)]
    pub unsafe fn copy_to_prechecked(&self, dst: u64, src: &[u8]) -> Result<(), UserFault> {
        debug_assert!(in_user_half(dst, src.len()));
        // SAFETY: the caller's contract; as in `copy_to`.
        result(unsafe { user_copy_out(dst, src.as_ptr(), src.len()) })
    }
}

/// Reads the 8-byte-aligned word at user address `src` (one load).
///
/// # Safety
/// As for [`copy_from_user`].
#[inline]
pub unsafe fn get_u64(src: u64) -> Result<u64, UserFault> {
    // SAFETY: the caller's contract.
    unsafe { Access::open() }.get_u64(src)
}

/// Writes `value` to the 8-byte-aligned word at user address `dst` (one store).
///
/// # Safety
/// As for [`copy_from_user`].
#[inline]
pub unsafe fn put_u64(dst: u64, value: u64) -> Result<(), UserFault> {
    // SAFETY: the caller's contract.
    unsafe { Access::open() }.put_u64(dst, value)
}

/// Compares the 8-byte-aligned user word at `addr` with `expected` and, if equal, replaces it
/// with `new`, atomically against every CPU (and the program's own atomics on it), through the
/// loaded page table: `Ok(Ok(expected))` when it swapped, `Ok(Err(seen))` when the word held
/// `seen`, `Err` when the access faulted (not mapped, or not writable by the program) — what a
/// futex-style kernel operation needs on a word the program shares. The word is written even
/// when it does not match (with what it held, atomically), so the write right is checked every
/// time, as x86's `lock cmpxchg` does: a word the program may only read always faults.
///
/// # Safety
/// As for [`copy_from_user`].
#[inline]
pub unsafe fn cmpxchg_u64(addr: u64, expected: u64, new: u64) -> Result<Result<u64, u64>, UserFault> {
    if addr % 8 != 0 || !in_user_half(addr, 8) {
        return Err(UserFault);
    }
    let _window = port::AtomicWindow::open();
    let mut seen = 0;
    // SAFETY: the word is user memory (checked above; the caller's contract) whose faults the
    // fix-up turns into a return of 1; `seen` is ours.
    result(unsafe { user_cmpxchg_u64(addr, expected, new, &mut seen) })?;
    Ok(if seen == expected { Ok(seen) } else { Err(seen) })
}

/// The trap path's exception-table lookup: if `frame` is a kernel-mode data fault inside the
/// user-access routines, resumes it at the fix-up (the access returns "faulted") and returns
/// `true`.
pub fn fix_up(frame: &mut TrapFrame) -> bool {
    if !port::kernel_data_fault(frame) {
        return false;
    }
    let start = core::ptr::addr_of!(user_copy_access_start) as u64;
    let end = core::ptr::addr_of!(user_copy_access_end) as u64;
    if !(start..end).contains(&frame.ip()) {
        return false;
    }
    port::resume_at(frame, core::ptr::addr_of!(user_copy_fixup) as u64);
    true
}
