//! x86_64 half of the user-memory access with fault fix-up (`crate::usercopy`): the SMAP window
//! and the assembly whose faults the trap path fixes up.

use core::arch::{asm, global_asm};
use core::sync::atomic::{AtomicBool, Ordering};

use super::trap::TrapFrame;

static SMAP: AtomicBool = AtomicBool::new(false);

/// Records whether SMAP is on (set by boot code after enabling CR4.SMAP).
pub fn set_smap(enabled: bool) {
    SMAP.store(enabled, Ordering::Relaxed);
}

/// Supervisor access to user pages, from `open` until dropped (`stac`/`clac` under SMAP).
pub(crate) struct Window;

/// An atomic read-modify-write of a user word needs no more than the plain window.
pub(crate) type AtomicWindow = Window;

impl Window {
    #[inline(always)]
    pub(crate) fn open() -> Self {
        if SMAP.load(Ordering::Relaxed) {
            // SAFETY: stac only allows supervisor accesses to user pages until clac.
            unsafe { asm!("stac", options(nomem, nostack)) };
        }
        Window
    }
}

impl Drop for Window {
    #[inline(always)]
    fn drop(&mut self) {
        if SMAP.load(Ordering::Relaxed) {
            // SAFETY: closes the window opened in `open`.
            unsafe { asm!("clac", options(nomem, nostack)) };
        }
    }
}

// `user_copy_in`/`user_copy_out(dst, src, len) -> 0 | 1` (one routine: both sides are plain
// addresses here), `user_get_u64(src, out) -> 0 | 1`, `user_put_u64(dst, value) -> 0 | 1`,
// `user_store_frame(dst, frame, word_at, word) -> 0 | 1` (a trap frame's user registers as a
// Kernel Notification full frame, then one word — the ThMB mask — last: the ThMB save's stores,
// without a copy through the kernel stack).
// Assembly because the fix-up must know exactly which instructions may fault and where to
// continue: the compiler gives no such guarantee for Rust code.
global_asm!(
    r#"
    .section .text.user_copy, "ax"
    .global user_copy_in
    .global user_copy_out
    .global user_get_u64
    .global user_put_u64
    .global user_put_4u64
    .global user_store_frame
    .global user_cmpxchg_u64
    .global user_copy_access_start
    .global user_copy_access_end
    .global user_copy_fixup
user_copy_in:
user_copy_out:
    mov %rdx, %rcx
    shr $3, %rcx                        /* whole words first */
    and $7, %edx
user_copy_access_start:
    rep movsq
    mov %edx, %ecx                      /* then the tail bytes */
    rep movsb
    xor %eax, %eax
    ret
user_get_u64:
    mov (%rdi), %rax
    mov %rax, (%rsi)
    xor %eax, %eax
    ret
user_put_u64:
    mov %rsi, (%rdi)
    xor %eax, %eax
    ret
user_put_4u64:                          /* four aligned words (rsi) -> (rdi): an event slot */
    mov 0(%rsi), %rax
    mov 8(%rsi), %rcx
    mov 16(%rsi), %rdx
    mov 24(%rsi), %r8
    mov %rax, 0(%rdi)
    mov %rcx, 8(%rdi)
    mov %rdx, 16(%rdi)
    mov %r8, 24(%rdi)
    xor %eax, %eax
    ret
user_store_frame:                       /* TrapFrame (rsi) -> FullFrame (rdi), no copy between; then rcx at rdx */
    mov 112(%rsi), %rax
    mov %rax, 0(%rdi)
    mov 104(%rsi), %r10
    mov %r10, 8(%rdi)
    mov 96(%rsi), %r11
    mov %r11, 16(%rdi)
    mov 88(%rsi), %r8
    mov %r8, 24(%rdi)
    mov 80(%rsi), %rax
    mov %rax, 32(%rdi)
    mov 72(%rsi), %r10
    mov %r10, 40(%rdi)
    mov 64(%rsi), %r11
    mov %r11, 48(%rdi)
    mov 56(%rsi), %r8
    mov %r8, 56(%rdi)
    mov 48(%rsi), %rax
    mov %rax, 64(%rdi)
    mov 40(%rsi), %r10
    mov %r10, 72(%rdi)
    mov 32(%rsi), %r11
    mov %r11, 80(%rdi)
    mov 24(%rsi), %r8
    mov %r8, 88(%rdi)
    mov 16(%rsi), %rax
    mov %rax, 96(%rdi)
    mov 8(%rsi), %r10
    mov %r10, 104(%rdi)
    mov 0(%rsi), %r11
    mov %r11, 112(%rdi)
    mov 136(%rsi), %r8
    mov %r8, 120(%rdi)
    mov 160(%rsi), %rax
    mov %rax, 128(%rdi)
    mov 152(%rsi), %r10
    mov %r10, 136(%rdi)
    mov %rcx, (%rdx)                    /* then the word rcx at rdx, last (the ThMB mask) */
    xor %eax, %eax
    ret
user_cmpxchg_u64:                       /* (addr rdi, expected rsi, new rdx, prev_out rcx) */
    mov %rsi, %rax
    lock cmpxchg %rdx, (%rdi)
    mov %rax, (%rcx)
    xor %eax, %eax
    ret
user_copy_access_end:
user_copy_fixup:                        /* a fault between the labels lands here */
    mov $1, %eax
    ret
    .text
    "#,
    options(att_syntax)
);

/// Whether `frame` is a kernel-mode page fault (the only fault a user access can take).
#[inline]
pub(crate) fn kernel_data_fault(frame: &TrapFrame) -> bool {
    const PAGE_FAULT: u64 = 14;
    frame.vector == PAGE_FAULT && !frame.from_user()
}

/// Continues `frame` at `pc`.
#[inline]
pub(crate) fn resume_at(frame: &mut TrapFrame, pc: u64) {
    frame.rip = pc;
}
