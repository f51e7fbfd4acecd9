//! aarch64 half of the user-memory access with fault fix-up (`crate::usercopy`).
//!
//! Every access is an unprivileged load or store (`ldtr`/`sttr`) through the page table the CPU
//! has loaded: each is checked with EL0's rights, exactly as if the program had made it, so the
//! page table enforces the view's rights, a range the kernel wrongly accepted cannot reach kernel
//! memory, and the accesses work with PAN on — the kernel keeps `PSTATE.PAN` set at all times
//! where the CPU has it (cpu.rs), the analogue of SMAP without opening a window.

use core::arch::{asm, global_asm};
use core::sync::atomic::{AtomicBool, Ordering};

use super::trap::{ec, TrapFrame};

/// Nothing to open: `ldtr`/`sttr` reach user pages with PAN set.
pub(crate) struct Window;

impl Window {
    #[inline(always)]
    pub(crate) fn open() -> Self {
        Window
    }
}

/// Whether the CPUs have PAN (then the kernel keeps it set; `cpu.rs`).
static PAN: AtomicBool = AtomicBool::new(false);

/// Records that the CPUs have PAN and keep it set.
pub(crate) fn set_pan(present: bool) {
    PAN.store(present, Ordering::Relaxed);
}

/// A window for an atomic read-modify-write of a user word: there is no unprivileged exclusive
/// load/store, so PAN is cleared until dropped. The access is then checked with EL1's rights,
/// which for a user page are the same as EL0's for writes (a read-only user page is read-only
/// at EL1 too); a fault inside leaves PAN clear in the saved state, so the drop sets it again
/// whatever happened.
pub(crate) struct AtomicWindow;

impl AtomicWindow {
    #[inline(always)]
    pub(crate) fn open() -> Self {
        if PAN.load(Ordering::Relaxed) {
            // SAFETY: `.inst 0xd500409f` is `msr pan, #0` (FEAT_PAN, present): privileged
            // accesses may reach user pages until the drop sets PAN again.
            unsafe { asm!(".inst 0xd500409f", options(nomem, nostack, preserves_flags)) };
        }
        AtomicWindow
    }
}

impl Drop for AtomicWindow {
    #[inline(always)]
    fn drop(&mut self) {
        if PAN.load(Ordering::Relaxed) {
            // SAFETY: `.inst 0xd500419f` is `msr pan, #1`: closes the window.
            unsafe { asm!(".inst 0xd500419f", options(nomem, nostack, preserves_flags)) };
        }
    }
}

// `user_copy_in(dst, src_user, len) -> 0 | 1`, `user_copy_out(dst_user, src, len) -> 0 | 1`,
// `user_get_u64(src_user, out) -> 0 | 1`, `user_put_u64(dst_user, value) -> 0 | 1`. Aligned
// copies move 32-byte blocks, then doublewords, then bytes; misaligned ones go bytewise.
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
9:  mov x0, #0
    ret

user_get_u64:
    ldtr x9, [x0]
    str x9, [x1]
    mov x0, #0
    ret
user_put_u64:
    sttr x1, [x0]
    mov x0, #0
    ret
user_put_4u64:                          // four aligned words (x1) -> (x0): an event slot
    ldp x9, x10, [x1]
    ldp x11, x12, [x1, #16]
    sttr x9, [x0]
    sttr x10, [x0, #8]
    sttr x11, [x0, #16]
    sttr x12, [x0, #24]
    mov x0, #0
    ret
user_store_frame:                       // TrapFrame (x1) -> FullFrame (x0): x0..x30, sp, elr, spsr; then x3 at x2
    .irp n, 0,2,4,6,8,10,12,14          // words 0..15
    ldp x12, x13, [x1, #8*\n]
    sttr x12, [x0, #8*\n]
    sttr x13, [x0, #8*\n+8]
    .endr
    add x0, x0, #128                    // sttr offsets reach 255 only
    add x1, x1, #128
    .irp n, 0,2,4,6,8,10,12,14,16       // words 16..33
    ldp x12, x13, [x1, #8*\n]
    sttr x12, [x0, #8*\n]
    sttr x13, [x0, #8*\n+8]
    .endr
    sttr x3, [x2]                       // then the word x3 at x2, last (the ThMB mask)
    mov x0, #0
    ret
user_cmpxchg_u64:                       // (addr x0, expected x1, new x2, prev_out x3), PAN open
1:  ldaxr x9, [x0]
    cmp x9, x1
    csel x11, x2, x9, eq                // no match: store back what was there, so that the
    stlxr w10, x11, [x0]                // write right is checked as on x86 (`lock cmpxchg`)
    cbnz w10, 1b
    str x9, [x3]
    mov x0, #0
    ret
user_copy_access_end:
user_copy_fixup:                        // a fault between the labels lands here
    mov x0, #1
    ret
    .text
    "#
);

/// Whether `frame` is a data abort taken at EL1 (the fault a user access can take).
#[inline]
pub(crate) fn kernel_data_fault(frame: &TrapFrame) -> bool {
    frame.vector == ec::DATA_ABORT_SAME && !frame.from_user()
}

/// Continues `frame` at `pc`.
#[inline]
pub(crate) fn resume_at(frame: &mut TrapFrame, pc: u64) {
    frame.elr = pc;
}
