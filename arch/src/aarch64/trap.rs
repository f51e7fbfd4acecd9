//! aarch64 kernel entries: the `VBAR_EL1` vector table, the common save/restore path, the
//! stack-overflow escape, and the translation of an exception into an architecture-neutral
//! [`Trap`].
//!
//! Every entry (synchronous exceptions including `svc`, IRQs, FIQs, SErrors, from EL0 or EL1)
//! builds the same [`TrapFrame`] on the current kernel stack: all general registers, the
//! interrupted sp, `ELR_EL1`/`SPSR_EL1`/`ESR_EL1`/`FAR_EL1`. No FP/SIMD register is saved: the
//! kernel is built for a target without FP/SIMD (`aarch64-unknown-none-softfloat`), so the
//! user's FP state stays in the registers across kernel entries and is switched lazily
//! (`fpu.rs`: `CPACR_EL1.FPEN` traps, DESIGN §7).
//!
//! A trap from EL0 is taken on `SP_EL1`, which `trap_return` leaves at the top of the thread's
//! kernel stack, so the frame lands exactly where the kernel reserved it. `SP_EL0` holds the
//! user stack pointer only while user code runs: it is saved in the frame on entry and
//! restored from it on the way back, so inside the kernel it is free as a scratch register.
//!
//! The "vector" a report shows is the exception class (`ESR_EL1.EC`) for synchronous
//! exceptions, and [`VECTOR_IRQ`], [`VECTOR_FIQ`], [`VECTOR_SERROR`] (beyond the 6-bit EC) for
//! the asynchronous ones.

use core::arch::global_asm;
use core::mem::{offset_of, size_of};
use core::sync::atomic::{AtomicUsize, Ordering};

use super::cpu::PERCPU_EMERGENCY_FRAME;

/// The registers of an interrupted context, as the vector code saves them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct TrapFrame {
    /// x0..x30 (x29 is the frame pointer, x30 the link register).
    pub x: [u64; 31],
    /// The interrupted stack pointer (`SP_EL0` for EL0, the kernel's sp for EL1).
    pub sp: u64,
    /// `ELR_EL1`: where the exception was taken (the instruction after `svc`).
    pub elr: u64,
    /// `SPSR_EL1`: the interrupted PSTATE.
    pub spsr: u64,
    /// `ESR_EL1` (0 for interrupts).
    pub esr: u64,
    /// `FAR_EL1` (0 for interrupts).
    pub far: u64,
    /// Which of the 16 vector-table slots was taken (set by assembly).
    pub kind: u64,
    /// `ESR_EL1.EC`, or [`VECTOR_IRQ`]/[`VECTOR_FIQ`]/[`VECTOR_SERROR`].
    pub vector: u64,
    /// The GIC INTID acknowledged for an IRQ (`interrupts::NO_INTERRUPT` otherwise).
    pub intid: u64,
    /// Keeps the frame a multiple of 16 bytes, as sp must stay aligned. (`TPIDR_EL0`, the LTN
    /// register, is not in the frame: the kernel saves and loads it per thread through
    /// `cpu::user_ltn`.)
    pub reserved: u64,
}

/// Size of a frame, as the assembly reserves it.
const FRAME_SIZE: usize = size_of::<TrapFrame>();
const _: () = assert!(FRAME_SIZE == 0x140);
// Kernel stacks reserve the frame at their 16-byte-aligned top; keep that alignment below it.
const _: () = assert!(FRAME_SIZE % 16 == 0);
const _: () = assert!(offset_of!(TrapFrame, sp) == 0xf8);
// The prefix is the KN full frame (`store_full_frame`).
const _: () = assert!(offset_of!(TrapFrame, sp) == offset_of!(tsumugi_abi::kn::aarch64::FullFrame, sp));
const _: () = assert!(offset_of!(TrapFrame, elr) == offset_of!(tsumugi_abi::kn::aarch64::FullFrame, pc));
const _: () = assert!(offset_of!(TrapFrame, spsr) == offset_of!(tsumugi_abi::kn::aarch64::FullFrame, pstate));
const _: () = assert!(offset_of!(TrapFrame, elr) == 0x100);
const _: () = assert!(offset_of!(TrapFrame, esr) == 0x110);
const _: () = assert!(offset_of!(TrapFrame, kind) == 0x120);

/// What the manuals call the instruction pointer (for reports).
pub const IP_REGISTER: &str = "elr";

/// Pseudo exception class of an IRQ.
pub const VECTOR_IRQ: u64 = 64;
/// Pseudo exception class of an FIQ.
pub const VECTOR_FIQ: u64 = 65;
/// Pseudo exception class of an SError.
pub const VECTOR_SERROR: u64 = 66;

/// SGI (software-generated interrupt) of the "look at your run queue" inter-processor
/// interrupt. SGIs are INTIDs 0..15; the kernel's IPI "vectors" are these INTIDs.
pub const RESCHEDULE_VECTOR: u8 = 1;
/// SGI of the "enter the kernel and check your thread" inter-processor interrupt.
pub const KICK_VECTOR: u8 = 2;
/// SGI of the "TLB shoot-down" inter-processor interrupt.
pub const SHOOTDOWN_VECTOR: u8 = 3;
/// SGI of the "save your FP owner's registers" inter-processor interrupt.
pub const FPU_SAVE_VECTOR: u8 = 4;

/// Exception classes (`ESR_EL1.EC`, Arm ARM D17.2.37).
pub mod ec {
    /// Unknown reason (undefined instruction).
    pub const UNKNOWN: u64 = 0x00;
    /// Access to SIMD/FP registers trapped by `CPACR_EL1.FPEN`.
    pub const FP_ACCESS: u64 = 0x07;
    /// `svc` from AArch64.
    pub const SVC64: u64 = 0x15;
    /// Instruction abort from a lower exception level.
    pub const INSTRUCTION_ABORT_LOWER: u64 = 0x20;
    /// Instruction abort without a change of level.
    pub const INSTRUCTION_ABORT_SAME: u64 = 0x21;
    /// Data abort from a lower exception level.
    pub const DATA_ABORT_LOWER: u64 = 0x24;
    /// Data abort without a change of level.
    pub const DATA_ABORT_SAME: u64 = 0x25;
}

/// Abort syndrome bits (ISS of data and instruction aborts).
mod iss {
    /// Fault status code.
    pub const FSC: u64 = 0x3f;
    /// Data aborts: the access was a write.
    pub const WNR: u64 = 1 << 6;
    /// Data aborts: a cache-maintenance instruction caused it (reported as a write).
    pub const CM: u64 = 1 << 8;
    /// `FAR_EL1` does not hold the address.
    pub const FNV: u64 = 1 << 10;
    /// FSC >> 2 of a translation fault (no mapping at some level).
    pub const FSC_TRANSLATION: u64 = 0b0001;
    /// FSC >> 2 of an access-flag fault.
    pub const FSC_ACCESS_FLAG: u64 = 0b0010;
    /// FSC >> 2 of a permission fault.
    pub const FSC_PERMISSION: u64 = 0b0011;
}

/// `SPSR_EL1.M[3:0]` of EL0 (EL0t).
const SPSR_MODE_MASK: u64 = 0xf;
/// `SPSR_EL1` of a fresh user context: EL0t, interrupts unmasked.
const SPSR_EL0T: u64 = 0;
/// Vector-table slot groups: slot = group * 4 + type.
const SLOT_SYNC: u64 = 0;
const SLOT_IRQ: u64 = 1;
const SLOT_FIQ: u64 = 2;

/// The trap vocabulary every port shares.
pub use crate::event::{Access, IpiKind, Trap};

impl TrapFrame {
    /// Whether the trap came from user mode (EL0).
    #[inline]
    pub fn from_user(&self) -> bool {
        self.spsr & SPSR_MODE_MASK == 0
    }

    /// The interrupted instruction pointer.
    #[inline]
    pub fn ip(&self) -> u64 {
        self.elr
    }

    /// The interrupted stack pointer.
    #[inline]
    pub fn sp(&self) -> u64 {
        self.sp
    }

    /// The interrupted frame pointer (start of a backtrace).
    pub fn frame_pointer(&self) -> u64 {
        self.x[29]
    }

    /// The exception class (`ESR_EL1.EC`) or pseudo class of the trap, for reports (see
    /// [`exception_name`]).
    pub fn vector(&self) -> u8 {
        self.vector as u8
    }

    /// The syndrome (`ESR_EL1`; 0 for interrupts).
    pub fn fault_code(&self) -> u64 {
        self.esr
    }

    /// The syscall number (`x8`).
    #[inline]
    pub fn syscall_number(&self) -> usize {
        self.x[8] as usize
    }

    /// The six syscall arguments (`x0..x5`).
    #[inline]
    pub fn syscall_args(&self) -> [usize; 6] {
        [self.x[0], self.x[1], self.x[2], self.x[3], self.x[4], self.x[5]].map(|r| r as usize)
    }

    /// Sets the syscall result (`x0`).
    #[inline]
    pub fn set_syscall_result(&mut self, value: usize) {
        self.x[0] = value as u64;
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
            f.spsr = SPSR_EL0T;
            f.intid = u64::from(super::interrupts::NO_INTERRUPT);
        }
    }

    /// A frame that starts user code at `ip` with stack `sp` and first argument `arg`, at EL0
    /// with interrupts enabled.
    pub fn new_user(ip: u64, sp: u64, arg: u64) -> Self {
        let mut frame = TrapFrame { elr: ip, sp, spsr: SPSR_EL0T, ..TrapFrame::default() };
        frame.x[0] = arg;
        frame.intid = u64::from(super::interrupts::NO_INTERRUPT);
        frame
    }

    /// The user registers as a Kernel Notification full frame (for a zero-copy save into a
    /// ThMB).
    pub fn to_full_frame(&self) -> tsumugi_abi::kn::aarch64::FullFrame {
        tsumugi_abi::kn::aarch64::FullFrame { x: self.x, sp: self.sp, pc: self.elr, pstate: self.spsr }
    }

    /// Makes the frame resume `full` (a user context the kernel saved earlier and user memory
    /// handed back, e.g. a signal frame): `x0`..`x30`, `sp`, `pc`, and only the condition flags
    /// (NZCV) of its `pstate` (EL0, interrupts on). Refused (`false`, frame unchanged) if `pc`
    /// or `sp` is outside the user half.
    pub fn restore_full_frame(&mut self, full: &tsumugi_abi::kn::aarch64::FullFrame) -> bool {
        const NZCV: u64 = 0xf000_0000;
        if full.pc >= super::layout::USER_END || full.sp >= super::layout::USER_END {
            return false;
        }
        self.x = full.x;
        self.sp = full.sp;
        self.elr = full.pc;
        self.spsr = SPSR_EL0T | (full.pstate & NZCV);
        true
    }

    /// Writes the user registers as a Kernel Notification full frame to user address `dst`
    /// through an open user-access window (the fast ThMB save): the frame begins with `x`, `sp`,
    /// `elr`, `spsr`, exactly the full frame's `x`, `sp`, `pc`, `pstate`, so it is copied as it
    /// lies.
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
        const _: () = assert!(size_of::<tsumugi_abi::kn::aarch64::FullFrame>() == 34 * 8);
        if dst % 8 != 0 || !user.may_access(dst, 34 * 8) {
            return Err(crate::usercopy::UserFault);
        }
        // SAFETY: `dst..+272` is an aligned range in the user half (checked) and the window is
        // open (`user`); the routine (usercopy.rs, between the fix-up labels) reads the first 34
        // words of this frame, laid out as the full frame (asserts below), and stores them with
        // unprivileged stores.
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

    /// Turns the frame into an upcall: on return to user mode the CPU enters `handler` with
    /// stack pointer `stack_top` (16-byte aligned, as at a function's entry) and `args` in the
    /// first four argument registers (`x0..x3`), interrupts on. The link register is 0, so a
    /// handler that returns faults instead of running on.
    pub fn set_upcall(&mut self, handler: u64, stack_top: u64, args: [u64; 4]) {
        // Only what the handler's entry needs, as `new_user` sets it: the other registers keep
        // the stopped thread's values, which belong to the same program (its ThMB has them).
        self.elr = handler;
        self.sp = stack_top & !15;
        self.spsr = SPSR_EL0T;
        self.x[..4].copy_from_slice(&args);
        self.x[30] = 0;
        self.intid = u64::from(super::interrupts::NO_INTERRUPT);
    }

    /// Whether the trap is the timer tick (the preemption path, tested before
    /// [`TrapFrame::trap`]): what `trap()` returns as [`Trap::Timer`].
    #[inline]
    pub fn is_timer(&self) -> bool {
        self.vector == VECTOR_IRQ && self.intid == u64::from(super::timer::intid())
    }

    /// Whether the trap is a syscall (the hot case, tested before [`TrapFrame::trap`]).
    #[inline]
    pub fn is_syscall(&self) -> bool {
        self.vector == ec::SVC64 && self.from_user()
    }

    /// Classifies the trap. Inline: the kernel's dispatch then tests the variant it matches
    /// on directly rather than building the enum in memory.
    #[inline]
    pub fn trap(&self) -> Trap {
        match self.vector {
            VECTOR_IRQ if self.intid == u64::from(super::timer::intid()) => Trap::Timer,
            VECTOR_IRQ if self.intid == u64::from(RESCHEDULE_VECTOR) => Trap::Ipi(IpiKind::Reschedule),
            VECTOR_IRQ if self.intid == u64::from(KICK_VECTOR) => Trap::Ipi(IpiKind::Kick),
            VECTOR_IRQ if self.intid == u64::from(SHOOTDOWN_VECTOR) => Trap::Ipi(IpiKind::Shootdown),
            VECTOR_IRQ if self.intid == u64::from(FPU_SAVE_VECTOR) => Trap::Ipi(IpiKind::FpuSave),
            ec::FP_ACCESS if self.from_user() => Trap::FpuDisabled,
            VECTOR_IRQ => Trap::Spurious(self.intid.min(255) as u8),
            ec::SVC64 if self.from_user() => Trap::Syscall,
            ec::INSTRUCTION_ABORT_LOWER | ec::INSTRUCTION_ABORT_SAME | ec::DATA_ABORT_LOWER | ec::DATA_ABORT_SAME => {
                let present = match (self.esr & iss::FSC) >> 2 {
                    iss::FSC_TRANSLATION => false,
                    iss::FSC_ACCESS_FLAG | iss::FSC_PERMISSION => true,
                    _ => return self.exception(),
                };
                let access = if matches!(self.vector, ec::INSTRUCTION_ABORT_LOWER | ec::INSTRUCTION_ABORT_SAME) {
                    Access::Execute
                } else if self.esr & iss::WNR != 0 && self.esr & iss::CM == 0 {
                    Access::Write
                } else {
                    Access::Read
                };
                let address = if self.esr & iss::FNV != 0 { 0 } else { self.far };
                Trap::PageFault { address, access, present }
            }
            _ => self.exception(),
        }
    }

    fn exception(&self) -> Trap {
        let vector = self.vector as u8;
        Trap::Exception { vector, name: exception_name(vector) }
    }

    /// Writes the registers in the report format shared by every port.
    pub fn dump(&self, out: &mut dyn core::fmt::Write) -> core::fmt::Result {
        writeln!(out, "  elr {:#018x}  sp  {:#018x}  spsr {:#x}  esr {:#x}  far {:#x}", self.elr, self.sp, self.spsr, self.esr, self.far)?;
        for row in 0..8 {
            let mut line = [0u64; 4];
            let first = row * 4;
            let n = (31 - first).min(4);
            line[..n].copy_from_slice(&self.x[first..first + n]);
            write!(out, " ")?;
            for (i, value) in line[..n].iter().enumerate() {
                write!(out, " x{:<2} {:#018x}", first + i, value)?;
            }
            writeln!(out)?;
        }
        Ok(())
    }
}

/// Name of an exception class (`ESR_EL1.EC`, Arm ARM D17.2.37) or pseudo class.
pub fn exception_name(vector: u8) -> &'static str {
    match u64::from(vector) {
        ec::UNKNOWN => "undefined instruction",
        0x01 => "trapped WFI/WFE",
        ec::FP_ACCESS => "SIMD/FP access trap",
        0x0e => "illegal execution state",
        ec::SVC64 => "SVC",
        0x16 => "HVC",
        0x17 => "SMC",
        0x18 => "trapped system register access",
        0x19 => "SVE access trap",
        0x1c => "pointer authentication failure",
        ec::INSTRUCTION_ABORT_LOWER => "instruction abort from EL0",
        ec::INSTRUCTION_ABORT_SAME => "instruction abort from EL1",
        0x22 => "PC alignment fault",
        ec::DATA_ABORT_LOWER => "data abort from EL0",
        ec::DATA_ABORT_SAME => "data abort from EL1",
        0x26 => "SP alignment fault",
        0x2c => "floating-point exception",
        0x2f => "SError",
        0x30 | 0x31 => "breakpoint",
        0x32 | 0x33 => "software step",
        0x34 | 0x35 => "watchpoint",
        0x3c => "BRK instruction",
        VECTOR_IRQ => "IRQ",
        VECTOR_FIQ => "FIQ",
        VECTOR_SERROR => "SError interrupt",
        _ => "reserved exception class",
    }
}

/// The kernel's handler for every entry. It may not return (the thread is switched away), in
/// which case the frame stays on that thread's stack until it is resumed.
pub type Handler = fn(&mut TrapFrame);

static HANDLER: AtomicUsize = AtomicUsize::new(0);

// The vector table: 16 slots of 0x80 bytes, 2 KiB aligned (Arm ARM D1.10.2). Each slot saves
// x0/x1 in a new frame, puts its slot number in x0 and jumps to trap_common, which saves the
// rest and calls trap_dispatch(frame). trap_return restores a frame and `eret`s; entering user
// mode for the first time also goes through it.
//
// Slot 4 (synchronous, from EL1) first checks for a kernel stack overflow: a data abort whose
// address lies within a few pages below sp means the stack ran into its guard page, and
// pushing a frame there would fault again forever. Such a trap moves to the per-CPU emergency
// stack (el1_stack_overflow) so the kernel can still print its report. The check needs a
// scratch register before anything is saved: SP_EL0 (see the module comment).
global_asm!(
    r#"
    .macro vector_slot kind
    .balign 0x80
    sub     sp, sp, #{frame_size}
    stp     x0, x1, [sp]
    mov     x0, #\kind
    b       trap_common
    .endm

    .section .text.vectors, "ax"
    .balign 2048
    .global aarch64_vectors
aarch64_vectors:
    vector_slot 0                           /* EL1 with SP_EL0: synchronous */
    vector_slot 1                           /*                  IRQ */
    vector_slot 2                           /*                  FIQ */
    vector_slot 3                           /*                  SError */

    .balign 0x80                            /* EL1 with SP_EL1: synchronous */
    msr     sp_el0, x0                      /* scratch: the user's SP_EL0 is in its frame */
    mrs     x0, esr_el1
    lsr     x0, x0, #26
    cmp     x0, #{ec_data_abort_same}
    b.ne    1f
    mrs     x0, far_el1
    sub     x0, sp, x0                      /* how far below sp the fault is ... */
    add     x0, x0, #1, lsl #12             /* ... counting one page above sp too */
    cmp     x0, #4, lsl #12
    b.lo    el1_stack_overflow
1:  mrs     x0, sp_el0
    sub     sp, sp, #{frame_size}
    stp     x0, x1, [sp]
    mov     x0, #4
    b       trap_common

    vector_slot 5                           /* EL1 with SP_EL1: IRQ */
    vector_slot 6                           /*                  FIQ */
    vector_slot 7                           /*                  SError */
    vector_slot 8                           /* EL0 AArch64: synchronous (svc, aborts) */
    vector_slot 9                           /*              IRQ */
    vector_slot 10                          /*              FIQ */
    vector_slot 11                          /*              SError */
    vector_slot 12                          /* EL0 AArch32 (never enabled) */
    vector_slot 13
    vector_slot 14
    vector_slot 15

    .section .text.trap_common, "ax"
    /* x0 = slot, x0/x1 saved at [sp]. Work out the interrupted sp: SP_EL0 if the trap came
       from EL0 (SPSR.M[3:0] == 0), else the kernel sp above this frame. */
trap_common:
    mrs     x1, spsr_el1
    tst     x1, #0xf
    b.ne    1f
    mrs     x1, sp_el0
    b       trap_common_with_sp
1:  add     x1, sp, #{frame_size}
    /* x0 = slot, x1 = interrupted sp. */
trap_common_with_sp:
    stp     x2, x3, [sp, #0x10]
    stp     x4, x5, [sp, #0x20]
    stp     x6, x7, [sp, #0x30]
    stp     x8, x9, [sp, #0x40]
    stp     x10, x11, [sp, #0x50]
    stp     x12, x13, [sp, #0x60]
    stp     x14, x15, [sp, #0x70]
    stp     x16, x17, [sp, #0x80]
    stp     x18, x19, [sp, #0x90]
    stp     x20, x21, [sp, #0xa0]
    stp     x22, x23, [sp, #0xb0]
    stp     x24, x25, [sp, #0xc0]
    stp     x26, x27, [sp, #0xd0]
    stp     x28, x29, [sp, #0xe0]
    stp     x30, x1, [sp, #0xf0]            /* x30, sp */
    mrs     x2, elr_el1
    mrs     x3, spsr_el1
    stp     x2, x3, [sp, #0x100]
    mrs     x2, esr_el1
    mrs     x3, far_el1
    stp     x2, x3, [sp, #0x110]
    str     x0, [sp, #0x120]                /* kind */
    mov     x0, sp
    bl      {dispatch}

    /* Restore the frame at sp and return to it. */
    .global trap_return
trap_return:
    ldp     x2, x3, [sp, #0x100]
    msr     elr_el1, x2
    msr     spsr_el1, x3
    tst     x3, #0xf                        /* back to EL0: its sp goes to SP_EL0 */
    b.ne    2f
    ldr     x1, [sp, #0xf8]
    msr     sp_el0, x1
2:  ldp     x2, x3, [sp, #0x10]
    ldp     x4, x5, [sp, #0x20]
    ldp     x6, x7, [sp, #0x30]
    ldp     x8, x9, [sp, #0x40]
    ldp     x10, x11, [sp, #0x50]
    ldp     x12, x13, [sp, #0x60]
    ldp     x14, x15, [sp, #0x70]
    ldp     x16, x17, [sp, #0x80]
    ldp     x18, x19, [sp, #0x90]
    ldp     x20, x21, [sp, #0xa0]
    ldp     x22, x23, [sp, #0xb0]
    ldp     x24, x25, [sp, #0xc0]
    ldp     x26, x27, [sp, #0xd0]
    ldp     x28, x29, [sp, #0xe0]
    ldr     x30, [sp, #0xf0]
    ldp     x0, x1, [sp]
    add     sp, sp, #{frame_size}           /* for EL0: the kernel stack top again */
    eret

    /* The kernel stack overflowed (x0 in SP_EL0, sp at the faulting stack). Swap sp with the
       per-CPU emergency frame without a free register (sp += f; x0 = sp - f = old sp;
       sp -= old sp), then save as trap_common does, with the old sp as the interrupted sp. */
el1_stack_overflow:
    mrs     x0, tpidr_el1
    cbz     x0, 9f                          /* no per-CPU block yet: nothing to report on */
    ldr     x0, [x0, #{emergency_frame}]
    add     sp, sp, x0
    sub     x0, sp, x0
    sub     sp, sp, x0
    str     x1, [sp, #8]
    mov     x1, x0
    mrs     x0, sp_el0
    str     x0, [sp]
    mov     x0, #4
    b       trap_common_with_sp
9:  wfe
    b       9b
    "#,
    frame_size = const FRAME_SIZE,
    ec_data_abort_same = const ec::DATA_ABORT_SAME,
    emergency_frame = const PERCPU_EMERGENCY_FRAME,
    dispatch = sym trap_dispatch,
);

extern "C" {
    static aarch64_vectors: u8;
}

/// Called by `trap_common` with the frame it built.
extern "C" fn trap_dispatch(frame: &mut TrapFrame) {
    match frame.kind & 3 {
        SLOT_SYNC => {
            frame.vector = (frame.esr >> 26) & 0x3f;
            frame.intid = u64::from(super::interrupts::NO_INTERRUPT);
            // A fault in a kernel access to user memory becomes that access's error (usercopy.rs).
            if crate::usercopy::fix_up(frame) {
                return;
            }
            if frame.vector == ec::UNKNOWN && !frame.from_user() && frame.elr == super::cpu::semihosting_call as *const () as u64 {
                // Semihosting is off, so its `hlt` is undefined: report failure to the caller.
                frame.elr += 4;
                frame.x[0] = u64::MAX;
                return;
            }
        }
        SLOT_IRQ => {
            frame.vector = VECTOR_IRQ;
            frame.esr = 0;
            frame.far = 0;
            let intid = super::interrupts::acknowledge();
            frame.intid = u64::from(intid);
            if intid == super::timer::intid() {
                super::timer::rearm();
            }
            call_handler(frame);
            // End the interrupt if the kernel did not (one it does not know about): an active
            // interrupt would hold off every other one of its priority.
            super::interrupts::end_if_active(intid);
            return;
        }
        SLOT_FIQ => {
            frame.vector = VECTOR_FIQ;
            frame.intid = u64::from(super::interrupts::NO_INTERRUPT);
        }
        _ => {
            frame.vector = VECTOR_SERROR;
            frame.intid = u64::from(super::interrupts::NO_INTERRUPT);
        }
    }
    call_handler(frame);
}

/// A trap before the kernel installed its handler: nothing sensible can continue. Out of
/// line, so that the trap path saves no registers for it.
#[cold]
#[inline(never)]
fn no_handler() -> ! {
    super::serial::write_str_panic("trap before the kernel installed its handler\n");
    super::cpu::shutdown(tsumugi_abi::exit::STATUS_KERNEL_PANIC);
}

fn call_handler(frame: &mut TrapFrame) {
    let handler = HANDLER.load(Ordering::Acquire);
    if handler == 0 {
        no_handler();
    }
    // SAFETY: HANDLER only ever holds a `Handler` stored by `install`.
    let handler: Handler = unsafe { core::mem::transmute::<usize, Handler>(handler) };
    handler(frame);
}

/// Installs the vector table on this CPU, routing every entry to `handler`.
pub fn install(handler: Handler) {
    HANDLER.store(handler as usize, Ordering::Release);
    load_on_this_cpu();
}

/// Points this CPU's `VBAR_EL1` at the vector table (the boot code already did on the boot CPU).
pub fn load_on_this_cpu() {
    // SAFETY: the vector table is 'static, 2 KiB aligned, and every slot is a valid entry.
    unsafe {
        core::arch::asm!("msr vbar_el1, {}", "isb", in(reg) core::ptr::addr_of!(aarch64_vectors), options(nostack, preserves_flags));
    }
}

/// Starts (or resumes) the context in `frame`, which must lie at the top of the current
/// thread's kernel stack, by restoring it with `eret`.
///
/// # Safety
/// `frame` must be a valid frame for EL0 (`SPSR` EL0t, user addresses) or a kernel frame the
/// kernel built; the kernel stack above it must hold nothing still needed.
pub unsafe fn enter(frame: *const TrapFrame) -> ! {
    // SAFETY: the caller guarantees the frame; trap_return restores it and never returns.
    // Interrupts are masked first so none is taken on the half-restored state (the frame's
    // SPSR decides what they are after `eret`).
    unsafe {
        core::arch::asm!(
            "msr daifset, #2",
            "mov sp, {frame}",
            "b trap_return",
            frame = in(reg) frame,
            options(noreturn)
        )
    }
}
