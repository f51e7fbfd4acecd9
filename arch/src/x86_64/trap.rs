//! x86_64 kernel entries: the IDT with one stub per vector, the common trap path, the
//! `syscall` entry, and the translation of a vector into an architecture-neutral [`Trap`].
//!
//! Both paths build the same [`TrapFrame`] on the thread's kernel stack, so the kernel sees one
//! shape for every entry, and the full user register state is in one place when it must be
//! saved elsewhere (a ThMB, later).
//!
//! The IDT is written here rather than with `x86_64::structures::idt`: that type models each
//! exception with its own handler signature for `extern "x86-interrupt"` functions (unstable),
//! while our handlers are raw assembly stubs that all look alike.

use core::arch::global_asm;
use core::mem::{offset_of, size_of};
use core::sync::atomic::{AtomicUsize, Ordering};
use x86_64::registers::model_specific::{LStar, SFMask, Star};
use x86_64::registers::rflags::RFlags;
use x86_64::structures::gdt::SegmentSelector;
use x86_64::structures::DescriptorTablePointer;

use super::cpu::{DOUBLE_FAULT_IST, KERNEL_CS, KERNEL_DS, PERCPU_KERNEL_STACK, PERCPU_USER_RSP, USER_CS, USER_DS};
use super::layout::USER_END;

/// The registers of an interrupted context, as the entry stubs push them (lowest address first).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(missing_docs)]
pub struct TrapFrame {
    pub r15: u64,
    pub r14: u64,
    pub r13: u64,
    pub r12: u64,
    pub r11: u64,
    pub r10: u64,
    pub r9: u64,
    pub r8: u64,
    pub rbp: u64,
    pub rdi: u64,
    pub rsi: u64,
    pub rdx: u64,
    pub rcx: u64,
    pub rbx: u64,
    pub rax: u64,
    /// Vector number, or [`SYSCALL_VECTOR`] for the `syscall` entry.
    pub vector: u64,
    /// The CPU's error code (0 for vectors without one).
    pub error_code: u64,
    pub rip: u64,
    pub cs: u64,
    pub rflags: u64,
    pub rsp: u64,
    pub ss: u64,
}

const _: () = assert!(size_of::<TrapFrame>() == 22 * 8);
// Kernel stacks reserve the frame at their 16-byte-aligned top; keep that alignment below it.
const _: () = assert!(size_of::<TrapFrame>() % 16 == 0);
const _: () = assert!(offset_of!(TrapFrame, vector) == 15 * 8);
const _: () = assert!(offset_of!(TrapFrame, cs) == 18 * 8);
// `user_store_frame` (usercopy.rs) reads these slots and writes the ABI's FullFrame order.
const _: () = assert!(offset_of!(TrapFrame, r15) == 0 && offset_of!(TrapFrame, rax) == 14 * 8);
const _: () = assert!(offset_of!(TrapFrame, rip) == 17 * 8 && offset_of!(TrapFrame, rflags) == 19 * 8 && offset_of!(TrapFrame, rsp) == 20 * 8);
const _: () = {
    use tsumugi_abi::kn::FullFrame as F;
    assert!(offset_of!(F, rax) == 0 && offset_of!(F, r15) == 14 * 8);
    assert!(offset_of!(F, rip) == 15 * 8 && offset_of!(F, rsp) == 16 * 8 && offset_of!(F, rflags) == 17 * 8);
    assert!(size_of::<F>() == 18 * 8);
};

/// What the manuals call the instruction pointer (for reports).
pub const IP_REGISTER: &str = "rip";

/// Vector of #NM, "device not available": an FP instruction with CR0.TS set.
const DEVICE_NOT_AVAILABLE: u8 = 7;

/// Pseudo-vector recorded in frames built by the `syscall` entry.
pub const SYSCALL_VECTOR: u64 = 0x100;
/// Vector of the local APIC timer.
pub const TIMER_VECTOR: u8 = 0x20;
/// First vector the legacy PICs are remapped to (they stay masked; anything arriving is spurious).
pub const PIC_BASE_VECTOR: u8 = 0xe0;
/// Vector of the "look at your run queue" inter-processor interrupt.
pub const RESCHEDULE_VECTOR: u8 = 0xf0;
/// Vector of the "enter the kernel and check your thread" inter-processor interrupt.
pub const KICK_VECTOR: u8 = 0xf1;
/// Vector of the "TLB shoot-down" inter-processor interrupt.
pub const SHOOTDOWN_VECTOR: u8 = 0xf2;

/// Vector of the "save your FP owner's registers" inter-processor interrupt.
pub const FPU_SAVE_VECTOR: u8 = 0xf3;

/// Vector of the local APIC's spurious interrupt.
pub const SPURIOUS_VECTOR: u8 = 0xff;

/// Page-fault error-code bits (Intel SDM vol. 3A §4.7).
mod pf {
    pub const PRESENT: u64 = 1 << 0;
    pub const WRITE: u64 = 1 << 1;
    pub const USER: u64 = 1 << 2;
    pub const INSTRUCTION: u64 = 1 << 4;
}

/// The trap vocabulary every port shares.
pub use crate::event::{Access, IpiKind, Trap};

impl TrapFrame {
    /// Whether the trap came from user mode.
    #[inline]
    pub fn from_user(&self) -> bool {
        self.cs & 3 == 3
    }

    /// The interrupted instruction pointer.
    #[inline]
    pub fn ip(&self) -> u64 {
        self.rip
    }

    /// The interrupted stack pointer.
    #[inline]
    pub fn sp(&self) -> u64 {
        self.rsp
    }

    /// The interrupted frame pointer (start of a backtrace).
    pub fn frame_pointer(&self) -> u64 {
        self.rbp
    }

    /// The vector number of the trap (for reports; [`SYSCALL_VECTOR`] truncates to 0).
    pub fn vector(&self) -> u8 {
        self.vector as u8
    }

    /// The error code the CPU pushed (0 for vectors without one).
    pub fn fault_code(&self) -> u64 {
        self.error_code
    }

    /// The syscall number (`rax`).
    #[inline]
    pub fn syscall_number(&self) -> usize {
        self.rax as usize
    }

    /// The six syscall arguments (`rdi, rsi, rdx, r10, r8, r9`).
    #[inline]
    pub fn syscall_args(&self) -> [usize; 6] {
        [self.rdi, self.rsi, self.rdx, self.r10, self.r8, self.r9].map(|r| r as usize)
    }

    /// Sets the syscall result (`rax`).
    #[inline]
    pub fn set_syscall_result(&mut self, value: usize) {
        self.rax = value as u64;
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
            f.cs = u64::from(USER_CS);
            f.ss = u64::from(USER_DS);
            f.rflags = RFlags::INTERRUPT_FLAG.bits() | 0x2;
        }
    }

    /// A frame that starts user code at `ip` with stack `sp` and first argument `arg`,
    /// interrupts enabled.
    pub fn new_user(ip: u64, sp: u64, arg: u64) -> Self {
        TrapFrame {
            rip: ip,
            rsp: sp,
            rdi: arg,
            cs: u64::from(USER_CS),
            ss: u64::from(USER_DS),
            rflags: RFlags::INTERRUPT_FLAG.bits() | 0x2,
            ..TrapFrame::default()
        }
    }

    /// The user registers as a Kernel Notification full frame (for a zero-copy save into a
    /// ThMB).
    pub fn to_full_frame(&self) -> tsumugi_abi::kn::FullFrame {
        tsumugi_abi::kn::FullFrame {
            rax: self.rax,
            rbx: self.rbx,
            rcx: self.rcx,
            rdx: self.rdx,
            rsi: self.rsi,
            rdi: self.rdi,
            rbp: self.rbp,
            r8: self.r8,
            r9: self.r9,
            r10: self.r10,
            r11: self.r11,
            r12: self.r12,
            r13: self.r13,
            r14: self.r14,
            r15: self.r15,
            rip: self.rip,
            rsp: self.rsp,
            rflags: self.rflags,
        }
    }

    /// Makes the frame resume `full` (a user context the kernel saved earlier and user memory
    /// handed back, e.g. a signal frame): every register, `rip`, `rsp`, and the flags user
    /// code may set (interrupts on, I/O privilege 0). Refused (`false`, frame unchanged) if
    /// `rip` or `rsp` is outside the user half.
    pub fn restore_full_frame(&mut self, full: &tsumugi_abi::kn::FullFrame) -> bool {
        /// CF, PF, AF, ZF, SF, DF, OF, AC: the flags a user context may carry.
        const USER_FLAGS: u64 = 0x4_0cd5;
        if full.rip >= USER_END || full.rsp >= USER_END {
            return false;
        }
        let (cs, ss, vector, error_code) = (self.cs, self.ss, self.vector, self.error_code);
        *self = TrapFrame {
            rax: full.rax,
            rbx: full.rbx,
            rcx: full.rcx,
            rdx: full.rdx,
            rsi: full.rsi,
            rdi: full.rdi,
            rbp: full.rbp,
            r8: full.r8,
            r9: full.r9,
            r10: full.r10,
            r11: full.r11,
            r12: full.r12,
            r13: full.r13,
            r14: full.r14,
            r15: full.r15,
            rip: full.rip,
            rsp: full.rsp,
            rflags: (full.rflags & USER_FLAGS) | RFlags::INTERRUPT_FLAG.bits() | 0x2,
            cs,
            ss,
            vector,
            error_code,
        };
        true
    }

    /// Writes the user registers as a Kernel Notification full frame to user address `dst`
    /// through an open user-access window (the fast ThMB save).
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
        if !user.may_access(dst, size_of::<tsumugi_abi::kn::FullFrame>()) {
            return Err(crate::usercopy::UserFault);
        }
        // SAFETY: `dst..+size` lies in the user half (checked) and the window is open (`user`);
        // the routine reads this frame and stores into user memory between the fix-up labels.
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
        // SAFETY: the caller's contract.
        let f = unsafe { &mut *slot };
        f.cs = u64::from(USER_CS);
        f.ss = u64::from(USER_DS);
        f.set_upcall(handler, stack_top, args);
    }

    /// Turns the frame into an upcall: on return to user mode the CPU enters `handler` with
    /// stack pointer `stack_top` (aligned as after a call) and `args` in the first four
    /// argument registers (`rdi, rsi, rdx, rcx`). Interrupts are on in the handler.
    pub fn set_upcall(&mut self, handler: u64, stack_top: u64, args: [u64; 4]) {
        // Only what the handler's entry needs: the other registers keep the stopped thread's
        // values, which belong to the same program (its ThMB has them anyway).
        self.rip = handler;
        self.rsp = (stack_top & !15) - 8;
        self.rflags = RFlags::INTERRUPT_FLAG.bits() | 0x2;
        self.rdi = args[0];
        self.rsi = args[1];
        self.rdx = args[2];
        self.rcx = args[3];
    }

    /// Whether the trap is the timer tick (the preemption path, tested before
    /// [`TrapFrame::trap`]): what `trap()` returns as [`Trap::Timer`].
    #[inline]
    pub fn is_timer(&self) -> bool {
        self.vector == u64::from(TIMER_VECTOR)
    }

    /// Whether the trap is a syscall (the hot case, tested before [`TrapFrame::trap`]).
    #[inline]
    pub fn is_syscall(&self) -> bool {
        self.vector == SYSCALL_VECTOR
    }

    /// Classifies the trap. Inline: the kernel's dispatch then tests the variant it matches
    /// on directly rather than building the enum in memory.
    #[inline]
    pub fn trap(&self) -> Trap {
        if self.vector == SYSCALL_VECTOR {
            return Trap::Syscall;
        }
        let vector = self.vector as u8;
        match vector {
            TIMER_VECTOR => Trap::Timer,
            RESCHEDULE_VECTOR => Trap::Ipi(IpiKind::Reschedule),
            KICK_VECTOR => Trap::Ipi(IpiKind::Kick),
            SHOOTDOWN_VECTOR => Trap::Ipi(IpiKind::Shootdown),
            FPU_SAVE_VECTOR => Trap::Ipi(IpiKind::FpuSave),
            DEVICE_NOT_AVAILABLE => Trap::FpuDisabled,
            14 => {
                let e = self.error_code;
                let access = if e & pf::INSTRUCTION != 0 {
                    Access::Execute
                } else if e & pf::WRITE != 0 {
                    Access::Write
                } else {
                    Access::Read
                };
                Trap::PageFault { address: super::cpu::fault_address(), access, present: e & pf::PRESENT != 0 }
            }
            0..=31 => Trap::Exception { vector, name: exception_name(vector) },
            _ => Trap::Spurious(vector),
        }
    }

    /// Writes the registers in the report format shared by every port.
    pub fn dump(&self, out: &mut dyn core::fmt::Write) -> core::fmt::Result {
        writeln!(out, "  rip {:#018x}  rsp {:#018x}  rflags {:#x}  cs {:#x}  ss {:#x}", self.rip, self.rsp, self.rflags, self.cs, self.ss)?;
        writeln!(out, "  rax {:#018x}  rbx {:#018x}  rcx {:#018x}  rdx {:#018x}", self.rax, self.rbx, self.rcx, self.rdx)?;
        writeln!(out, "  rsi {:#018x}  rdi {:#018x}  rbp {:#018x}  r8  {:#018x}", self.rsi, self.rdi, self.rbp, self.r8)?;
        writeln!(out, "  r9  {:#018x}  r10 {:#018x}  r11 {:#018x}  r12 {:#018x}", self.r9, self.r10, self.r11, self.r12)?;
        writeln!(out, "  r13 {:#018x}  r14 {:#018x}  r15 {:#018x}", self.r13, self.r14, self.r15)
    }

    /// Whether the user-error bit of a page fault is set (the access came from ring 3).
    pub fn page_fault_from_user(&self) -> bool {
        self.error_code & pf::USER != 0
    }
}

/// Name of an exception vector (Intel SDM vol. 3A table 6-1).
pub fn exception_name(vector: u8) -> &'static str {
    match vector {
        0 => "divide error",
        1 => "debug",
        2 => "non-maskable interrupt",
        3 => "breakpoint",
        4 => "overflow",
        5 => "bound range exceeded",
        6 => "invalid opcode",
        7 => "device not available",
        8 => "double fault",
        10 => "invalid TSS",
        11 => "segment not present",
        12 => "stack-segment fault",
        13 => "general protection fault",
        14 => "page fault",
        16 => "x87 floating-point error",
        17 => "alignment check",
        18 => "machine check",
        19 => "SIMD floating-point exception",
        20 => "virtualization exception",
        21 => "control protection exception",
        _ => "reserved exception",
    }
}

/// The kernel's handler for every entry. It may not return (the thread is switched away), in
/// which case the frame stays on that thread's stack until it is resumed.
pub type Handler = fn(&mut TrapFrame);

static HANDLER: AtomicUsize = AtomicUsize::new(0);

/// One 16-byte IDT gate.
#[repr(C)]
#[derive(Clone, Copy)]
struct Gate {
    offset_low: u16,
    selector: u16,
    ist: u8,
    type_attr: u8,
    offset_mid: u16,
    offset_high: u32,
    reserved: u32,
}

const _: () = assert!(size_of::<Gate>() == 16);

/// Present, DPL 0, 64-bit interrupt gate (interrupts off on entry).
const GATE_INTERRUPT: u8 = 0x8e;
/// Bytes between consecutive entry stubs (see the `.balign` in the assembly).
const STUB_SIZE: u64 = 16;
/// Number of IDT vectors.
const VECTORS: usize = 256;

static mut IDT: [Gate; VECTORS] =
    [Gate { offset_low: 0, selector: 0, ist: 0, type_attr: 0, offset_mid: 0, offset_high: 0, reserved: 0 }; VECTORS];

extern "C" {
    static trap_stubs: u8;
    fn syscall_entry();
}

// Entry stubs and the common path.
//
// Each stub pushes a zero error code (unless the CPU pushed one) and its vector, then jumps to
// trap_common, which swaps to the kernel GS if the trap came from ring 3, pushes the general
// registers (forming a TrapFrame), and calls the Rust dispatcher with the frame.
// `trap_return` pops the frame and returns with iretq; entering user mode for the first time
// also goes through it.
global_asm!(
    r#"
    .section .text.trap_stubs, "ax"
    .balign 16
    .global trap_stubs
trap_stubs:
    .set vec, 0
    .rept 256
    .balign 16
    .if (vec == 8) || ((vec >= 10) && (vec <= 14)) || (vec == 17) || (vec == 21) || (vec == 29) || (vec == 30)
    .else
    pushq $0
    .endif
    pushq $vec
    jmp trap_common
    .set vec, vec + 1
    .endr

    .section .text.trap_common, "ax"
    .balign 16
trap_common:
    testb $3, 24(%rsp)          /* cs of the interrupted context */
    jz 1f
    swapgs
1:  push %rax
    push %rbx
    push %rcx
    push %rdx
    push %rsi
    push %rdi
    push %rbp
    push %r8
    push %r9
    push %r10
    push %r11
    push %r12
    push %r13
    push %r14
    push %r15
    mov %rsp, %rdi
    cld
    call {dispatch}

    .global trap_return
trap_return:
    pop %r15
    pop %r14
    pop %r13
    pop %r12
    pop %r11
    pop %r10
    pop %r9
    pop %r8
    pop %rbp
    pop %rdi
    pop %rsi
    pop %rdx
    pop %rcx
    pop %rbx
    pop %rax
    testb $3, 24(%rsp)
    jz 2f
    swapgs
2:  add $16, %rsp               /* vector, error code */
    iretq

    /* The syscall instruction: rcx = user rip, r11 = user rflags, still on the user stack,
       interrupts masked by SFMASK. Build a TrapFrame on the kernel stack. */
    .global syscall_entry
    .balign 16
syscall_entry:
    swapgs
    mov %rsp, %gs:{user_rsp}
    mov %gs:{kernel_stack}, %rsp
    pushq ${user_ds}
    pushq %gs:{user_rsp}
    push %r11
    pushq ${user_cs}
    push %rcx
    pushq $0
    pushq ${syscall_vector}
    push %rax
    push %rbx
    push %rcx
    push %rdx
    push %rsi
    push %rdi
    push %rbp
    push %r8
    push %r9
    push %r10
    push %r11
    push %r12
    push %r13
    push %r14
    push %r15
    mov %rsp, %rdi
    call {syscall_dispatch}
    /* sysret loads rip from rcx and rflags from r11: it restores the frame exactly only if
       the kernel left those pairs equal (as the syscall instruction made them), rip in the
       user half and the selectors the user's. An upcall or a resumed FULL frame changes them
       (rcx first: an upcall's differs) and goes back through iretq. rax and rdx are free
       here: the pops below reload them. */
    mov {f_rip}(%rsp), %rax
    cmp {f_rcx}(%rsp), %rax
    jne trap_return
    movabsq ${user_end}, %rdx
    cmp %rdx, %rax
    jae trap_return
    mov {f_rflags}(%rsp), %rax
    cmp {f_r11}(%rsp), %rax
    jne trap_return
    cmpq ${user_cs}, {f_cs}(%rsp)
    jne trap_return
    cmpq ${user_ds}, {f_ss}(%rsp)
    jne trap_return
    pop %r15
    pop %r14
    pop %r13
    pop %r12
    pop %r11
    pop %r10
    pop %r9
    pop %r8
    pop %rbp
    pop %rdi
    pop %rsi
    pop %rdx
    pop %rcx
    pop %rbx
    pop %rax
    mov 16(%rsp), %rcx          /* rip */
    mov 32(%rsp), %r11          /* rflags */
    mov 40(%rsp), %rsp          /* user rsp */
    swapgs
    sysretq
    "#,
    dispatch = sym trap_dispatch,
    syscall_dispatch = sym syscall_dispatch,
    user_rsp = const PERCPU_USER_RSP,
    kernel_stack = const PERCPU_KERNEL_STACK,
    user_ds = const USER_DS,
    user_cs = const USER_CS,
    syscall_vector = const SYSCALL_VECTOR,
    user_end = const USER_END,
    f_rip = const offset_of!(TrapFrame, rip),
    f_rcx = const offset_of!(TrapFrame, rcx),
    f_rflags = const offset_of!(TrapFrame, rflags),
    f_r11 = const offset_of!(TrapFrame, r11),
    f_cs = const offset_of!(TrapFrame, cs),
    f_ss = const offset_of!(TrapFrame, ss),
    options(att_syntax)
);

/// Called by `trap_common` with the frame it built.
extern "C" fn trap_dispatch(frame: &mut TrapFrame) {
    // A fault in a kernel access to user memory becomes that access's error (usercopy.rs).
    if crate::usercopy::fix_up(frame) {
        return;
    }
    call_handler(frame);
}

/// Called by `syscall_entry`, which then decides between `sysret` and `iretq` (in assembly:
/// a failing test leaves after its first compare, the iretq case an upcall takes).
extern "C" fn syscall_dispatch(frame: &mut TrapFrame) {
    call_handler(frame);
}

/// A trap before the kernel installed its handler: nothing sensible can continue. Out of
/// line, so that the trap paths save no registers for it.
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

/// Installs the IDT and the syscall MSRs on this CPU, routing every entry to `handler`.
pub fn install(handler: Handler) {
    HANDLER.store(handler as usize, Ordering::Release);
    // trap_stubs is the start of 256 stubs of STUB_SIZE bytes each (assembly above).
    let stubs = core::ptr::addr_of!(trap_stubs) as u64;
    // SAFETY: the IDT is written before it is loaded; later CPUs load the same finished table.
    let idt = unsafe { &mut *core::ptr::addr_of_mut!(IDT) };
    for (vector, gate) in idt.iter_mut().enumerate() {
        let addr = stubs + vector as u64 * STUB_SIZE;
        *gate = Gate {
            offset_low: addr as u16,
            selector: KERNEL_CS,
            ist: if vector == 8 { DOUBLE_FAULT_IST as u8 + 1 } else { 0 },
            type_attr: GATE_INTERRUPT,
            offset_mid: (addr >> 16) as u16,
            offset_high: (addr >> 32) as u32,
            reserved: 0,
        };
    }
    load_on_this_cpu();
}

/// Loads the (already built) IDT and syscall MSRs on the calling CPU.
pub fn load_on_this_cpu() {
    let ptr = DescriptorTablePointer {
        limit: (size_of::<[Gate; VECTORS]>() - 1) as u16,
        base: x86_64::VirtAddr::new(core::ptr::addr_of!(IDT) as u64),
    };
    // SAFETY: the IDT is 'static and filled with gates to valid stubs.
    unsafe { x86_64::instructions::tables::lidt(&ptr) };
    LStar::write(x86_64::VirtAddr::new(syscall_entry as *const () as usize as u64));
    // sysret derives CS = base + 16, SS = base + 8 from USER_DS - 8; syscall uses KERNEL_CS/DS.
    Star::write(
        SegmentSelector(USER_CS),
        SegmentSelector(USER_DS),
        SegmentSelector(KERNEL_CS),
        SegmentSelector(KERNEL_DS),
    )
    .expect("GDT layout matches the STAR MSR");
    SFMask::write(
        RFlags::INTERRUPT_FLAG
            | RFlags::TRAP_FLAG
            | RFlags::DIRECTION_FLAG
            | RFlags::ALIGNMENT_CHECK
            | RFlags::NESTED_TASK,
    );
}

/// Starts (or resumes) the context in `frame`, which must lie at the top of the current
/// thread's kernel stack, by restoring it with `iretq`.
///
/// # Safety
/// `frame` must be a valid frame for user mode (user selectors, canonical user addresses) or a
/// kernel frame the kernel built; the kernel stack above it must hold nothing still needed.
pub unsafe fn enter(frame: *const TrapFrame) -> ! {
    // SAFETY: the caller guarantees the frame; trap_return pops it and never returns.
    unsafe {
        core::arch::asm!(
            "mov rsp, {frame}",
            "jmp trap_return",
            frame = in(reg) frame,
            options(noreturn)
        )
    }
}
