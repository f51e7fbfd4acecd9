//! riscv64 kernel entries: the single `stvec` entry for exceptions, interrupts and `ecall`,
//! the return path, and the translation of `scause` into an architecture-neutral [`Trap`].
//!
//! Every entry builds the same [`TrapFrame`]: from user mode at the top of the thread's kernel
//! stack (where `thread.rs` also builds the first frame of a thread), from the kernel on the
//! current stack. The full user register state is thus in one place when it must be saved
//! elsewhere (a ThMB, later).

use core::arch::global_asm;
use core::mem::{offset_of, size_of};
use core::sync::atomic::{AtomicUsize, Ordering};
use riscv::interrupt::supervisor::{Exception, Interrupt};

use super::cpu::{
    PERCPU_EMERGENCY_STACK, PERCPU_KERNEL_STACK, PERCPU_SCRATCH_SP, PERCPU_SCRATCH_T0, PERCPU_SCRATCH_T1, PERCPU_SCRATCH_TP, PERCPU_USER_TP,
    SSTATUS_FS, SSTATUS_FS_INITIAL, SSTATUS_SIE, SSTATUS_SPIE, SSTATUS_SPP, SSTATUS_SUM, SSTATUS_UXL_64,
};
use super::layout::PHYS_MAP;
use super::paging::Sv48;
use crate::addr::{PAGE_SHIFT, PAGE_SIZE};
use crate::mapping::{Entry, PageTableFormat};

/// The registers of an interrupted context, as the entry stores them: `x0`..`x31` at eight
/// times their number (the `x0` slot is unused), then the trap CSRs.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(missing_docs)]
pub struct TrapFrame {
    /// Unused: keeps register `xN` at offset `8 * N`.
    pub zero: u64,
    pub ra: u64,
    pub sp: u64,
    pub gp: u64,
    pub tp: u64,
    pub t0: u64,
    pub t1: u64,
    pub t2: u64,
    pub s0: u64,
    pub s1: u64,
    pub a0: u64,
    pub a1: u64,
    pub a2: u64,
    pub a3: u64,
    pub a4: u64,
    pub a5: u64,
    pub a6: u64,
    pub a7: u64,
    pub s2: u64,
    pub s3: u64,
    pub s4: u64,
    pub s5: u64,
    pub s6: u64,
    pub s7: u64,
    pub s8: u64,
    pub s9: u64,
    pub s10: u64,
    pub s11: u64,
    pub t3: u64,
    pub t4: u64,
    pub t5: u64,
    pub t6: u64,
    /// Where the context resumes (`sret` jumps here).
    pub sepc: u64,
    /// Its status: previous privilege (SPP), previous interrupt enable (SPIE), FPU state...
    pub sstatus: u64,
    /// Why the trap happened (bit 63: an interrupt).
    pub scause: u64,
    /// The faulting address of a page fault (or other trap value).
    pub stval: u64,
}

const _: () = assert!(size_of::<TrapFrame>() == 36 * 8);
// Kernel stacks reserve the frame at their 16-byte-aligned top; keep that alignment below it.
const _: () = assert!(size_of::<TrapFrame>() % 16 == 0);
const _: () = assert!(offset_of!(TrapFrame, sp) == 2 * 8);
const _: () = assert!(offset_of!(TrapFrame, tp) == 4 * 8);
const _: () = assert!(offset_of!(TrapFrame, s0) == 8 * 8);
const _: () = assert!(offset_of!(TrapFrame, a0) == 10 * 8);
const _: () = assert!(offset_of!(TrapFrame, t6) == 31 * 8);
const _: () = assert!(offset_of!(TrapFrame, sepc) == FRAME_SEPC);
// `user_store_frame` (usercopy.rs) reads `sepc` at 256.
const _: () = assert!(offset_of!(TrapFrame, sepc) == 32 * 8);
const _: () = assert!(offset_of!(TrapFrame, sstatus) == FRAME_SSTATUS);
const _: () = assert!(offset_of!(TrapFrame, scause) == FRAME_SCAUSE);
const _: () = assert!(offset_of!(TrapFrame, stval) == FRAME_STVAL);

/// Offsets of the CSR slots, used by assembly.
const FRAME_SEPC: usize = 32 * 8;
const FRAME_SSTATUS: usize = 33 * 8;
const FRAME_SCAUSE: usize = 34 * 8;
const FRAME_STVAL: usize = 35 * 8;

/// What the manuals call the instruction pointer (for reports).
pub const IP_REGISTER: &str = "sepc";

/// IPI message numbers. RISC-V interrupts have no vectors: the sender leaves the number in the
/// target's mailbox (`interrupts::send_ipi`) and the entry hands it over in `stval`.
pub const RESCHEDULE_VECTOR: u8 = 0;
/// "Enter the kernel and check your thread".
pub const KICK_VECTOR: u8 = 1;
/// "Shoot down TLB entries".
pub const SHOOTDOWN_VECTOR: u8 = 2;
/// "Save your FP owner's registers" (another hart wants that thread's state).
pub const FPU_SAVE_VECTOR: u8 = 3;

/// `scause` bit 63: the trap is an interrupt (the rest is its number).
const SCAUSE_INTERRUPT: u64 = 1 << 63;
/// Size of an `ecall` instruction: a syscall resumes after it.
const ECALL_SIZE: u64 = 4;

/// The trap vocabulary every port shares.
pub use crate::event::{Access, IpiKind, Trap};

impl TrapFrame {
    /// Whether the trap came from user mode (`sstatus.SPP` clear).
    #[inline]
    pub fn from_user(&self) -> bool {
        self.sstatus & SSTATUS_SPP == 0
    }

    /// The interrupted instruction pointer.
    #[inline]
    pub fn ip(&self) -> u64 {
        self.sepc
    }

    /// The interrupted stack pointer.
    #[inline]
    pub fn sp(&self) -> u64 {
        self.sp
    }

    /// The interrupted frame pointer (`s0`, start of a backtrace).
    pub fn frame_pointer(&self) -> u64 {
        self.s0
    }

    /// The cause the hart recorded (`scause`), the nearest thing to an error code.
    pub fn fault_code(&self) -> u64 {
        self.scause
    }

    /// The syscall number (`a7`).
    #[inline]
    pub fn syscall_number(&self) -> usize {
        self.a7 as usize
    }

    /// The six syscall arguments (`a0`..`a5`).
    #[inline]
    pub fn syscall_args(&self) -> [usize; 6] {
        [self.a0, self.a1, self.a2, self.a3, self.a4, self.a5].map(|r| r as usize)
    }

    /// Sets the syscall result (`a0`).
    #[inline]
    pub fn set_syscall_result(&mut self, value: usize) {
        self.a0 = value as u64;
    }

    /// Makes `*slot` [`new_user(0, 0, 0)`](Self::new_user) in place: zeroed a word at a time by
    /// volatile stores (which the compiler unrolls into straight-line stores, where a call to
    /// `memset` costs a loop of several instructions a word on some ports), then the user-mode
    /// fields set. For the frame
    /// a new user entry builds at the top of its kernel stack (`thread::enter_user`).
    ///
    /// # Safety
    /// `slot` is valid for writes of a `TrapFrame` and aligned for it.
    #[inline(always)]
    pub unsafe fn new_user_in_place(slot: *mut TrapFrame) {
        // SAFETY: the caller's contract; the frame is plain u64 fields, all-zero valid, and
        // as aligned as a u64 array.
        unsafe {
            crate::zero_words(slot);
            let f = &mut *slot;
            f.sstatus = SSTATUS_SPIE | SSTATUS_FS_INITIAL | SSTATUS_UXL_64;
        }
    }

    /// A frame that starts user code at `ip` with stack `sp` and first argument `arg`,
    /// interrupts enabled. (Its FS field is informative: the return keeps the live FS, which
    /// the kernel's lazy FP switching manages.)
    pub fn new_user(ip: u64, sp: u64, arg: u64) -> Self {
        TrapFrame { sepc: ip, sp, a0: arg, sstatus: SSTATUS_SPIE | SSTATUS_FS_INITIAL | SSTATUS_UXL_64, ..TrapFrame::default() }
    }

    /// The user registers as a Kernel Notification full frame (for a zero-copy save into a
    /// ThMB): `x1`..`x31` by number, `pc` in slot 0.
    pub fn to_full_frame(&self) -> tsumugi_abi::kn::riscv64::FullFrame {
        let mut x = [0u64; 32];
        // SAFETY: the first 32 fields are `x0`..`x31`, plain u64s at offsets 8 * N (checked by
        // the layout asserts above), so the frame's prefix reads as that array.
        let regs = unsafe { &*(self as *const TrapFrame as *const [u64; 32]) };
        x.copy_from_slice(regs);
        x[0] = self.sepc;
        tsumugi_abi::kn::riscv64::FullFrame { x }
    }

    /// Makes the frame resume `full` (a user context the kernel saved earlier and user memory
    /// handed back, e.g. a signal frame): `x1`..`x31` and `pc`; `sstatus` stays the kernel's.
    /// Refused (`false`, frame unchanged) if `pc` or `sp` is outside the user half.
    pub fn restore_full_frame(&mut self, full: &tsumugi_abi::kn::riscv64::FullFrame) -> bool {
        if full.x[0] >= super::layout::USER_END || full.x[2] >= super::layout::USER_END {
            return false;
        }
        // SAFETY: the first 32 fields are `x0`..`x31`, plain u64s at offsets 8 * N (checked by
        // the layout asserts above), so the frame's prefix is that array.
        let regs = unsafe { &mut *(self as *mut TrapFrame as *mut [u64; 32]) };
        regs[1..].copy_from_slice(&full.x[1..]);
        self.sepc = full.x[0];
        true
    }

    /// Writes the user registers as a Kernel Notification full frame to user address `dst`
    /// through an open user-access window (the fast ThMB save): the frame's prefix is `x0`..`x31`
    /// in the full frame's order, so it is copied as it lies, then `pc` into slot 0.
    ///
    /// Then, last, stores `word` at `word_at` (the ThMB mask, which says what the rest holds).
    ///
    /// # Safety
    /// `word_at` is 8-byte aligned and `word_at + 8 <= dst`: the frame's range, checked here
    /// before anything is stored, then puts the word in the user half too.
    #[inline]
    pub unsafe fn store_full_frame(&self, user: &crate::usercopy::Access, dst: u64, word_at: u64, word: u64) -> Result<(), crate::usercopy::UserFault> {
        extern "C" {
            fn user_store_frame(dst: u64, frame: *const TrapFrame, word_at: u64, word: u64) -> usize;
        }
        if dst % 8 != 0 || !user.may_access(dst, 32 * 8) {
            return Err(crate::usercopy::UserFault);
        }
        // SAFETY: `dst..+256` is an aligned range in the user half (checked) and the window is
        // open (`user`); the routine (usercopy.rs, between the fix-up labels) reads x1..x31 at
        // offsets 8 * N of this frame and `sepc` at 256, and stores them in the full frame's
        // order.
        // The word: below `dst` by the caller's contract, so in the user half as well.
        match unsafe { user_store_frame(dst, self, word_at, word) } {
            0 => Ok(()),
            _ => Err(crate::usercopy::UserFault),
        }
    }

    /// Builds in `slot` a user frame that enters the upcall handler `handler` on the stack
    /// `stack_top` with `args` ([`TrapFrame::set_upcall`]) over whatever the slot holds, without
    /// zeroing it first: a spare activation's upcall, whose slot holds the registers of an
    /// earlier user frame of the same program (or zeros, on a new stack). The handler's entry
    /// needs only what this sets; the rest is the program's own data.
    ///
    /// # Safety
    /// `slot` is valid for writes, aligned, and holds a frame or zeros.
    #[inline]
    pub unsafe fn upcall_in_place(slot: *mut TrapFrame, handler: u64, stack_top: u64, args: [u64; 4]) {
        // SAFETY: the caller's contract. `set_upcall` sets every mode field the return reads.
        unsafe { (*slot).set_upcall(handler, stack_top, args) };
    }

    /// Turns the frame into an upcall: on return to user mode the hart enters `handler` with
    /// stack pointer `stack_top` (16-byte aligned, as at a call) and `args` in `a0`..`a3`.
    /// Interrupts are on in the handler.
    pub fn set_upcall(&mut self, handler: u64, stack_top: u64, args: [u64; 4]) {
        // Only what the handler's entry needs, as `new_user` sets it: the other registers keep
        // the stopped thread's values, which belong to the same program (its ThMB has them).
        self.sepc = handler;
        self.sp = stack_top & !15;
        self.ra = 0;
        self.sstatus = SSTATUS_SPIE | SSTATUS_FS_INITIAL | SSTATUS_UXL_64;
        self.a0 = args[0];
        self.a1 = args[1];
        self.a2 = args[2];
        self.a3 = args[3];
    }

    /// Whether the trap is the timer tick (the preemption path, tested before
    /// [`TrapFrame::trap`]): what `trap()` returns as [`Trap::Timer`].
    #[inline]
    pub fn is_timer(&self) -> bool {
        self.scause == SCAUSE_INTERRUPT | Interrupt::SupervisorTimer as u64
    }

    /// Whether the trap is a syscall (the hot case, tested before [`TrapFrame::trap`]).
    #[inline]
    pub fn is_syscall(&self) -> bool {
        self.scause == Exception::UserEnvCall as u64
    }

    /// Classifies the trap. Inline: the kernel's dispatch then tests the variant it matches
    /// on directly rather than building the enum in memory.
    #[inline]
    pub fn trap(&self) -> Trap {
        let code = self.scause & !SCAUSE_INTERRUPT;
        if self.scause & SCAUSE_INTERRUPT != 0 {
            return match code {
                c if c == Interrupt::SupervisorTimer as u64 => Trap::Timer,
                // The entry put the IPI message in stval (see trap_dispatch).
                c if c == Interrupt::SupervisorSoft as u64 => match self.stval {
                    m if m == u64::from(RESCHEDULE_VECTOR) => Trap::Ipi(IpiKind::Reschedule),
                    m if m == u64::from(KICK_VECTOR) => Trap::Ipi(IpiKind::Kick),
                    m if m == u64::from(SHOOTDOWN_VECTOR) => Trap::Ipi(IpiKind::Shootdown),
                    m if m == u64::from(FPU_SAVE_VECTOR) => Trap::Ipi(IpiKind::FpuSave),
                    _ => Trap::Spurious(code as u8),
                },
                _ => Trap::Spurious(code as u8),
            };
        }
        let access = match code {
            c if c == Exception::UserEnvCall as u64 => return Trap::Syscall,
            c if c == Exception::InstructionPageFault as u64 => Access::Execute,
            c if c == Exception::LoadPageFault as u64 => Access::Read,
            c if c == Exception::StorePageFault as u64 => Access::Write,
            // With FS Off every FP instruction is illegal. Treating any illegal instruction
            // then as "FP wanted" is safe: if it was not an FP instruction, the retry with FP on
            // traps again and is reported as what it is.
            c if c == Exception::IllegalInstruction as u64 && self.sstatus & SSTATUS_FS == 0 => return Trap::FpuDisabled,
            _ => return Trap::Exception { vector: code as u8, name: exception_name(code as u8) },
        };
        Trap::PageFault { address: self.stval, access, present: translation_exists(self.stval) }
    }

    /// The architecture's number of the trap: the `scause` exception code (the interrupt number
    /// for interrupts).
    pub fn vector(&self) -> u8 {
        (self.scause & !SCAUSE_INTERRUPT) as u8
    }

    /// Writes the registers in the report format shared by every port.
    pub fn dump(&self, out: &mut dyn core::fmt::Write) -> core::fmt::Result {
        writeln!(
            out,
            "  sepc {:#018x}  sp {:#018x}  sstatus {:#x}  scause {:#x}  stval {:#x}",
            self.sepc, self.sp, self.sstatus, self.scause, self.stval
        )?;
        writeln!(out, "  ra  {:#018x}  gp  {:#018x}  tp  {:#018x}  t0  {:#018x}", self.ra, self.gp, self.tp, self.t0)?;
        writeln!(out, "  t1  {:#018x}  t2  {:#018x}  s0  {:#018x}  s1  {:#018x}", self.t1, self.t2, self.s0, self.s1)?;
        writeln!(out, "  a0  {:#018x}  a1  {:#018x}  a2  {:#018x}  a3  {:#018x}", self.a0, self.a1, self.a2, self.a3)?;
        writeln!(out, "  a4  {:#018x}  a5  {:#018x}  a6  {:#018x}  a7  {:#018x}", self.a4, self.a5, self.a6, self.a7)?;
        writeln!(out, "  s2  {:#018x}  s3  {:#018x}  s4  {:#018x}  s5  {:#018x}", self.s2, self.s3, self.s4, self.s5)?;
        writeln!(out, "  s6  {:#018x}  s7  {:#018x}  s8  {:#018x}  s9  {:#018x}", self.s6, self.s7, self.s8, self.s9)?;
        writeln!(out, "  s10 {:#018x}  s11 {:#018x}  t3  {:#018x}  t4  {:#018x}", self.s10, self.s11, self.t3, self.t4)?;
        writeln!(out, "  t5  {:#018x}  t6  {:#018x}", self.t5, self.t6)
    }
}

/// Name of an exception code (privileged specification, table "Supervisor cause register
/// values").
pub fn exception_name(code: u8) -> &'static str {
    match code {
        0 => "instruction address misaligned",
        1 => "instruction access fault",
        2 => "illegal instruction",
        3 => "breakpoint",
        4 => "load address misaligned",
        5 => "load access fault",
        6 => "store/AMO address misaligned",
        7 => "store/AMO access fault",
        8 => "environment call from U-mode",
        9 => "environment call from S-mode",
        12 => "instruction page fault",
        13 => "load page fault",
        15 => "store/AMO page fault",
        18 => "software check",
        19 => "hardware error",
        _ => "reserved exception",
    }
}

/// Whether the active page table has a leaf translation for `va`. Page faults do not say
/// (unlike x86's error code), so the entry walks the table; the tables lie in RAM, which the
/// direct map covers in the boot tables and the kernel's.
fn translation_exists(va: u64) -> bool {
    // Sv48 addresses are 48 bits sign-extended; anything else faults without a walk.
    let top = (va as i64) >> 47;
    if top != 0 && top != -1 {
        return false;
    }
    let mut table = super::tlb::current_root().start().as_u64();
    for level in (0..Sv48::LEVELS).rev() {
        let index = (va >> (PAGE_SHIFT + 9 * level as u32)) & 0x1ff;
        // SAFETY: `table` is a page-table frame of the active tree (satp, then table entries),
        // in RAM, mapped at PHYS_MAP + its address; an aligned u64 read of one entry.
        let entry = unsafe { core::ptr::read_volatile((PHYS_MAP + table + index * 8) as *const u64) };
        match Sv48::decode(entry, level) {
            Entry::Empty => return false,
            Entry::Leaf(..) => return true,
            Entry::Table(frame) => table = frame.start().as_u64(),
        }
    }
    false
}

const _: () = assert!(PAGE_SIZE == 1 << PAGE_SHIFT);

/// The kernel's handler for every entry. It may not return (the thread is switched away), in
/// which case the frame stays on that thread's stack until it is resumed.
pub type Handler = fn(&mut TrapFrame);

static HANDLER: AtomicUsize = AtomicUsize::new(0);

extern "C" {
    fn trap_entry();
}

// The entry (stvec, direct mode) and the return path.
//
// Register conventions (cpu.rs): in the kernel tp = this hart's PerCpu and sscratch = 0; in user
// mode sscratch = PerCpu. So swapping tp and sscratch tells where the trap came from.
// From user mode the frame goes at the top of the thread's kernel stack; from the kernel, below
// the interrupted sp. If saving the frame itself faults, the kernel stack has run into its guard
// page: the nested trap moves to this hart's emergency stack so the fault is reported instead of
// recurring forever (the report shows the save instruction as sepc and the guard address as
// stval; s0 still chains the interrupted frames).
//
// trap_return restores a frame at sp and returns with sret; entering user mode for the first
// time also goes through it.
global_asm!(
    r#"
    .section .text.trap, "ax"
    .balign 4
    .global trap_entry
trap_entry:
    csrrw tp, sscratch, tp              # user: tp = PerCpu, sscratch = user tp
    bnez tp, .Lfrom_user                # kernel: tp = 0, sscratch = PerCpu

    csrrw tp, sscratch, zero            # tp = PerCpu; sscratch = 0 again
    sd sp, {scratch_sp}(tp)
    sd tp, {scratch_tp}(tp)
    sd t0, {scratch_t0}(tp)
    sd t1, {scratch_t1}(tp)
    csrr t0, sepc                       # did the frame save below fault?
    lla t1, trap_save_start
    bltu t0, t1, 1f
    lla t1, trap_save_end
    bgeu t0, t1, 1f
    ld sp, {emergency}(tp)              # yes: kernel stack overflow
1:  ld t0, {scratch_t0}(tp)
    ld t1, {scratch_t1}(tp)
    addi sp, sp, -{frame_size}
    j trap_save_start

.Lfrom_user:
    sd sp, {scratch_sp}(tp)
    csrrw sp, sscratch, zero            # sp = user tp (as a temporary); sscratch = 0
    sd sp, {scratch_tp}(tp)
    sd sp, {user_tp}(tp)                # the LTN register, while in the kernel (cpu.rs)
    ld sp, {kernel_stack}(tp)
    addi sp, sp, -{frame_size}

    .global trap_save_start
trap_save_start:
    sd ra, 1*8(sp)
    sd gp, 3*8(sp)
    sd t0, 5*8(sp)
    sd t1, 6*8(sp)
    sd t2, 7*8(sp)
    sd s0, 8*8(sp)
    sd s1, 9*8(sp)
    sd a0, 10*8(sp)
    sd a1, 11*8(sp)
    sd a2, 12*8(sp)
    sd a3, 13*8(sp)
    sd a4, 14*8(sp)
    sd a5, 15*8(sp)
    sd a6, 16*8(sp)
    sd a7, 17*8(sp)
    sd s2, 18*8(sp)
    sd s3, 19*8(sp)
    sd s4, 20*8(sp)
    sd s5, 21*8(sp)
    sd s6, 22*8(sp)
    sd s7, 23*8(sp)
    sd s8, 24*8(sp)
    sd s9, 25*8(sp)
    sd s10, 26*8(sp)
    sd s11, 27*8(sp)
    sd t3, 28*8(sp)
    sd t4, 29*8(sp)
    sd t5, 30*8(sp)
    sd t6, 31*8(sp)
    ld t0, {scratch_sp}(tp)
    sd t0, 2*8(sp)
    ld t0, {scratch_tp}(tp)
    sd t0, 4*8(sp)
    csrr t0, sepc
    sd t0, {sepc}(sp)
    csrr t0, sstatus
    sd t0, {sstatus}(sp)
    csrr t0, scause
    sd t0, {scause}(sp)
    csrr t0, stval
    sd t0, {stval}(sp)
    .global trap_save_end
trap_save_end:
    li t0, {sum}
    csrc sstatus, t0                    # handlers never run with user memory open
    mv a0, sp
    call {dispatch}

    .global trap_return
trap_return:
    csrci sstatus, {sie}                # nothing may trap between here and sret
    ld t0, {sepc}(sp)
    csrw sepc, t0
    ld t0, {sstatus}(sp)
    li t1, {fs}                         # sstatus.FS is per-hart state the kernel manages
    csrr t2, sstatus                    # (fpu.rs): keep the live value, not the frame's:
    xor t2, t2, t0                      # frame ^ ((live ^ frame) & FS)
    and t2, t2, t1
    xor t0, t0, t2
    csrw sstatus, t0
    andi t0, t0, {spp}
    bnez t0, 2f
    csrw sscratch, tp                   # back to user mode: the next trap finds PerCpu
    ld t0, {user_tp}(tp)                # and the user's tp is the LTN register, which the
    sd t0, 4*8(sp)                      # kernel may have changed: restored below
2:  ld ra, 1*8(sp)
    ld gp, 3*8(sp)
    ld tp, 4*8(sp)
    ld t0, 5*8(sp)
    ld t1, 6*8(sp)
    ld t2, 7*8(sp)
    ld s0, 8*8(sp)
    ld s1, 9*8(sp)
    ld a0, 10*8(sp)
    ld a1, 11*8(sp)
    ld a2, 12*8(sp)
    ld a3, 13*8(sp)
    ld a4, 14*8(sp)
    ld a5, 15*8(sp)
    ld a6, 16*8(sp)
    ld a7, 17*8(sp)
    ld s2, 18*8(sp)
    ld s3, 19*8(sp)
    ld s4, 20*8(sp)
    ld s5, 21*8(sp)
    ld s6, 22*8(sp)
    ld s7, 23*8(sp)
    ld s8, 24*8(sp)
    ld s9, 25*8(sp)
    ld s10, 26*8(sp)
    ld s11, 27*8(sp)
    ld t3, 28*8(sp)
    ld t4, 29*8(sp)
    ld t5, 30*8(sp)
    ld t6, 31*8(sp)
    ld sp, 2*8(sp)                      # last: the frame is gone from here on
    sret
    "#,
    scratch_sp = const PERCPU_SCRATCH_SP,
    scratch_tp = const PERCPU_SCRATCH_TP,
    scratch_t0 = const PERCPU_SCRATCH_T0,
    scratch_t1 = const PERCPU_SCRATCH_T1,
    emergency = const PERCPU_EMERGENCY_STACK,
    kernel_stack = const PERCPU_KERNEL_STACK,
    user_tp = const PERCPU_USER_TP,
    frame_size = const size_of::<TrapFrame>(),
    sepc = const FRAME_SEPC,
    sstatus = const FRAME_SSTATUS,
    scause = const FRAME_SCAUSE,
    stval = const FRAME_STVAL,
    sum = const SSTATUS_SUM,
    sie = const SSTATUS_SIE,
    fs = const SSTATUS_FS,
    spp = const SSTATUS_SPP,
    dispatch = sym trap_dispatch,
);

/// A trap before the kernel installed its handler: nothing sensible can continue. Out of
/// line, so that the trap path saves no registers for it.
#[cold]
#[inline(never)]
fn no_handler() -> ! {
    super::serial::write_str_panic("trap before the kernel installed its handler\n");
    super::cpu::shutdown(tsumugi_abi::exit::STATUS_KERNEL_PANIC);
}

/// Called by `trap_entry` with the frame it built.
extern "C" fn trap_dispatch(frame: &mut TrapFrame) {
    // The hot traps first — a syscall, an interrupt (the tick) — so that they skip the fix-up
    // test, which only a kernel-mode data fault can need.
    let cause = frame.scause;
    if cause == Exception::UserEnvCall as u64 {
        // The syscall resumes after the `ecall`, not on it.
        frame.sepc += ECALL_SIZE;
    } else if cause & SCAUSE_INTERRUPT != 0 {
        // Bit 63 is known set here: compare the rest (shifted out of the way, which is
        // cheaper than building the 64-bit constant).
        if cause << 1 == (Interrupt::SupervisorSoft as u64) << 1 {
            // Software interrupts carry no value of their own; hand the IPI message over in
            // stval.
            frame.stval = super::interrupts::take_ipi();
        }
    } else if crate::usercopy::fix_up(frame) {
        // A fault in a kernel access to user memory became that access's error (usercopy.rs).
        return;
    }
    let handler = HANDLER.load(Ordering::Acquire);
    if handler == 0 {
        no_handler();
    }
    // SAFETY: HANDLER only ever holds a `Handler` stored by `install`.
    let handler: Handler = unsafe { core::mem::transmute::<usize, Handler>(handler) };
    handler(frame);
}

/// Routes every trap of this hart to `handler` (and installs the entry, which the boot code
/// already pointed `stvec` at so early faults are reported).
pub fn install(handler: Handler) {
    HANDLER.store(handler as usize, Ordering::Release);
    load_on_this_cpu();
}

/// Points this hart's `stvec` at the entry (direct mode: one vector for everything) and marks
/// it as running in the kernel (`sscratch` = 0).
pub fn load_on_this_cpu() {
    use riscv::register::{sscratch, stvec};
    // SAFETY: trap_entry is the entry above (4-byte aligned, as direct mode needs); sscratch = 0
    // is the kernel's convention and `tp` already holds the per-CPU pointer.
    unsafe {
        sscratch::write(0);
        stvec::write(stvec::Stvec::new(trap_entry as *const () as usize, stvec::TrapMode::Direct));
    }
}

/// Starts (or resumes) the context in `frame`, which must lie at the top of the current
/// thread's kernel stack, by restoring it with `sret`.
///
/// # Safety
/// `frame` must be a valid frame for user mode (SPP clear, user addresses) or a kernel frame
/// the kernel built; the kernel stack above it must hold nothing still needed.
pub unsafe fn enter(frame: *const TrapFrame) -> ! {
    // SAFETY: the caller guarantees the frame; trap_return restores it and never returns.
    unsafe {
        core::arch::asm!(
            "mv sp, {frame}",
            "j trap_return",
            frame = in(reg) frame,
            options(noreturn)
        )
    }
}
