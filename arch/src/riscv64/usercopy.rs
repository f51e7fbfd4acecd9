//! riscv64 half of the user-memory access with fault fix-up (`crate::usercopy`): the
//! `sstatus.SUM` window and the assembly whose faults the trap path fixes up. The trap entry
//! clears SUM, so the fault handler itself runs with user memory closed; `sret` restores the
//! interrupted SUM and the window closes when the access returns.

use core::arch::global_asm;
use riscv::interrupt::supervisor::Exception;
use riscv::register::sstatus;

use super::trap::TrapFrame;

/// Supervisor access to user pages (`sstatus.SUM`), from `open` until dropped.
pub(crate) struct Window;

/// An atomic read-modify-write of a user word needs no more than the plain window.
pub(crate) type AtomicWindow = Window;

impl Window {
    #[inline(always)]
    pub(crate) fn open() -> Self {
        // SAFETY: SUM only lets supervisor loads and stores reach user pages until cleared.
        unsafe { sstatus::set_sum() };
        Window
    }
}

impl Drop for Window {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: closes the window opened in `open`.
        unsafe { sstatus::clear_sum() };
    }
}

// `user_copy_in`/`user_copy_out(dst, src, len) -> 0 | 1` (one routine), `user_get_u64(src,
// out)`, `user_put_u64(dst, value)`. Aligned copies move 32-byte blocks, then doublewords, then
// bytes; misaligned ones go bytewise (user copies are small and rarely misaligned).
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
6:  li a0, 0
    ret
user_get_u64:
    ld t0, 0(a0)
    sd t0, 0(a1)
    li a0, 0
    ret
user_put_u64:
    sd a1, 0(a0)
    li a0, 0
    ret
user_put_4u64:                          # four aligned words (a1) -> (a0): an event slot
    ld t0, 0(a1)
    ld t1, 8(a1)
    ld t2, 16(a1)
    ld t3, 24(a1)
    sd t0, 0(a0)
    sd t1, 8(a0)
    sd t2, 16(a0)
    sd t3, 24(a0)
    li a0, 0
    ret
user_store_frame:                       # TrapFrame (a1) -> FullFrame (a0): x1..x31 as they lie, pc in slot 0; then a3 at a2
    .irp n, 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    ld t0, 8*\n(a1)
    sd t0, 8*\n(a0)
    .endr
    ld t0, 256(a1)
    sd t0, 0(a0)
    sd a3, 0(a2)                        # then the word a3 at a2, last (the ThMB mask)
    li a0, 0
    ret
user_cmpxchg_u64:                       # (addr a0, expected a1, new a2, prev_out a3)
    .option push
    .option arch, +a                    # global_asm! does not inherit the target's features
1:  lr.d.aqrl t0, (a0)
    mv t2, a2
    beq t0, a1, 2f
    mv t2, t0                           # no match: store back what was there, so that the
2:  sc.d.rl t1, t2, (a0)                # write right is checked as on x86 (`lock cmpxchg`)
    bnez t1, 1b
    .option pop
    sd t0, 0(a3)
    li a0, 0
    ret
user_copy_access_end:
user_copy_fixup:                        # a fault between the labels lands here
    li a0, 1
    ret
    .text
    "#
);

/// Whether `frame` is a kernel-mode load or store fault (the faults a user access can take).
#[inline]
pub(crate) fn kernel_data_fault(frame: &TrapFrame) -> bool {
    let cause = frame.scause;
    let memory_fault = [Exception::LoadPageFault, Exception::StorePageFault, Exception::LoadFault, Exception::StoreFault]
        .iter()
        .any(|e| *e as u64 == cause);
    memory_fault && !frame.from_user()
}

/// Continues `frame` at `pc`.
#[inline]
pub(crate) fn resume_at(frame: &mut TrapFrame, pc: u64) {
    frame.sepc = pc;
}
