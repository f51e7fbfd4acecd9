//! The kernel's copies to and from the running thread's memory, through the page table the CPU
//! has loaded, with fault fix-up (`arch::usercopy`): a fault in the access is an error, never a
//! kernel panic.
//!
//! The callers check the range against the thread's view first (rights, user half, backing);
//! the page table then enforces the same rights during the copy. The two can disagree only
//! while the view changes (a grant or revoke by another thread, whose reload IPI waits until
//! this CPU leaves the kernel): then the copy faults, these functions load the thread's current
//! root and try once more, and a second fault is the caller's error (`EFAULT` for syscalls) —
//! the semantics of Linux `put_user` racing `munmap`.

pub use arch::usercopy::UserFault;

/// Copies `bytes` to user address `dst` of the running thread.
pub fn copy_out(dst: u64, bytes: &[u8]) -> Result<(), UserFault> {
    // SAFETY: called from a user thread's kernel side (syscall, trap), so its view's table —
    // whose user half holds only that view's user mappings — is the one loaded.
    let first = unsafe { arch::usercopy::copy_to_user(dst, bytes) };
    if first.is_ok() || !crate::sched::scheduler::reload_current_root() {
        return first;
    }
    // SAFETY: as above, with the thread's current root now loaded.
    unsafe { arch::usercopy::copy_to_user(dst, bytes) }
}

/// Copies `out.len()` bytes from user address `src` of the running thread.
pub fn copy_in(out: &mut [u8], src: u64) -> Result<(), UserFault> {
    // SAFETY: as in `copy_out`.
    let first = unsafe { arch::usercopy::copy_from_user(out, src) };
    if first.is_ok() || !crate::sched::scheduler::reload_current_root() {
        return first;
    }
    // SAFETY: as in `copy_out`.
    unsafe { arch::usercopy::copy_from_user(out, src) }
}
