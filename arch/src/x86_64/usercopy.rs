//! x86_64 half of the user-memory access with fault fix-up (`crate::usercopy`): the SMAP window
//! and the assembly whose faults the trap path fixes up.

use core::arch::{asm, global_asm};

use super::trap::TrapFrame;

// Each `stac`/`clac` of a window is recorded (its address, in `.rodata.smap_sites`, bounded by
// `__smap_sites_start`/`__smap_sites_end` in linker.ld) and executes unconditionally: on a CPU
// without SMAP (where both raise #UD) the boot CPU overwrites every site with a 3-byte NOP
// before any window opens ([`patch_smap_sites`]). The choice is then one instruction per
// site, where a flag test cost four (load of the flag's address, load, test, branch).
extern "C" {
    static __smap_sites_start: u64;
    static __smap_sites_end: u64;
}

/// `stac` (`0f 01 cb`) and `clac` (`0f 01 ca`), the instructions at the recorded sites.
const STAC: [u8; 3] = [0x0f, 0x01, 0xcb];
const CLAC: [u8; 3] = [0x0f, 0x01, 0xca];
/// `nopl (%rax)`, the same length.
const NOP3: [u8; 3] = [0x0f, 0x1f, 0x00];

/// Turns every window's `stac`/`clac` into a NOP when SMAP is absent (`enabled` false); with
/// SMAP the sites stay as linked. Boot CPU only, before other CPUs start and before any
/// window opens.
///
/// # Safety
/// Only the boot CPU runs, with interrupts off, and no window is open.
pub unsafe fn patch_smap_sites(enabled: bool) {
    if enabled {
        return;
    }
    // The linker defines both symbols around the array of site addresses.
    let (start, end) = (core::ptr::addr_of!(__smap_sites_start), core::ptr::addr_of!(__smap_sites_end));
    // SAFETY: `start..end` is the linker's array of u64 site addresses (8-aligned quads).
    let sites = unsafe { core::slice::from_raw_parts(start, end.offset_from(start) as usize) };
    // Text is mapped read-only: CR0.WP off lets ring 0 write it for the patch (the caller's
    // guarantee: one CPU, no interrupt, so nothing else runs while WP is off).
    let cr0: u64;
    // SAFETY: reading and writing back CR0 with only WP changed; restored below.
    unsafe {
        asm!("mov {}, cr0", out(reg) cr0, options(nomem, nostack, preserves_flags));
        asm!("mov cr0, {}", in(reg) cr0 & !(1 << 16), options(nostack, preserves_flags));
    }
    for &site in sites {
        let at = site as *mut [u8; 3];
        // SAFETY: each recorded address is a `stac`/`clac` in kernel text (checked before
        // writing); WP is off so the read-only mapping takes the store.
        unsafe {
            let bytes = at.read_volatile();
            assert!(bytes == STAC || bytes == CLAC, "SMAP patch site {site:#x} holds {bytes:x?}");
            at.write_volatile(NOP3);
        }
    }
    // SAFETY: restores CR0 (WP back on); a CR0 write serialises, so the patched bytes are what
    // this CPU fetches next (the other CPUs have not started).
    unsafe { asm!("mov cr0, {}", in(reg) cr0, options(nostack, preserves_flags)) };
}

/// Supervisor access to user pages, from `open` until dropped (`stac`/`clac` under SMAP,
/// NOPs without it: [`patch_smap_sites`]).
pub(crate) struct Window;

/// An atomic read-modify-write of a user word needs no more than the plain window.
pub(crate) type AtomicWindow = Window;

impl Window {
    #[inline(always)]
    pub(crate) fn open() -> Self {
        // SAFETY: stac only allows supervisor accesses to user pages until clac (a NOP when
        // the CPU has no SMAP).
        unsafe {
            asm!(
                "2: stac",
                ".pushsection .rodata.smap_sites, \"a\"",
                ".balign 8",
                ".quad 2b",
                ".popsection",
                options(nomem, nostack)
            )
        };
        Window
    }
}

impl Drop for Window {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: closes the window opened in `open`.
        unsafe {
            asm!(
                "2: clac",
                ".pushsection .rodata.smap_sites, \"a\"",
                ".balign 8",
                ".quad 2b",
                ".popsection",
                options(nomem, nostack)
            )
        };
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
