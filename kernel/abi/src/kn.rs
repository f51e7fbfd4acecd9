//! Kernel Notification: the contract between the kernel and a user-level thread library
//! (`libuthread`) in the style of Scheduler Activations, with MULiTh's zero-copy save.
//!
//! # Pieces
//! - **ThMB** (thread management block): a user-memory record per user thread; the thread's id
//!   is its address. It begins with a [`ThmbHeader`]: a save [`mask`] and a [`FullFrame`]. The
//!   library owns the rest.
//! - **LTN** (the running thread's ThMB address) lives in a user-readable register: x86_64
//!   GS base, aarch64 `TPIDR_EL0`, riscv64 `tp`. `current()` is one register read. LTN = 0 means
//!   the library is inside its own critical section (or its handler).
//! - **Zero-copy save**: when the kernel stops a thread involuntarily (timer preemption, a
//!   blocking syscall, a page fault) and LTN ≠ 0, it checks that the ThMB lies in memory the
//!   thread's view may write and is [`THMB_ALIGN`]-aligned, writes the full register frame
//!   straight into `ThmbHeader::full`, and sets the mask to [`mask::FULL`]. A bad LTN ends the
//!   program with a report. With LTN = 0 the kernel saves into its own area and later resumes
//!   the vCPU exactly where it was, with no upcall.
//! - **vCPUs**: kernel threads that run the library; the kernel hands them out like processors.
//!   Each has an upcall stack the library registered.
//! - **Upcalls**: the kernel enters the registered handler (KNH) on a vCPU's upcall stack with
//!   LTN = 0 and the arguments of [`UpcallArgs`]: why the vCPU is being handed to the library.
//! - **Event ring**: every event is also appended, in order, to a per-domain ring in user
//!   memory ([`RingHeader`] followed by [`Event`] slots). The library drains it at its
//!   scheduling points. Order in the ring is the order of events: an `UNBLOCKED(t)` is always
//!   behind the `BLOCKED(t)` it answers. When the ring is full the kernel holds further events
//!   back (they wait, in order, inside the kernel) until the library makes room: nothing is lost.

use core::mem::size_of;

/// Required alignment of a ThMB.
pub const THMB_ALIGN: u64 = 64;

/// Values of `ThmbHeader::mask`: which part of the saved state is valid.
pub mod mask {
    /// Nothing saved (the thread is running, or has not started).
    pub const NONE: u64 = 0;
    /// The library saved the callee-saved window at a voluntary switch.
    pub const WINDOW: u64 = 1;
    /// The full integer register frame is saved (by the kernel at an involuntary stop, or by
    /// the library's full-save baseline).
    pub const FULL: u64 = 2;
    /// With `FULL`: the FP/SIMD registers are saved too, in the area `ThmbHeader::fp_area`
    /// names, in the format `ThmbHeader::fp_format` says. Without it the thread had no live
    /// FP state (it never touched FP), and resuming it leaves the FP registers as they are.
    pub const FP: u64 = 4;
}

/// Values of `ThmbHeader::fp_format`: how an FP area was written.
pub mod fp_format {
    /// x86_64 `fxsave64` (x87 + SSE, 512 bytes); restore with `fxrstor64`.
    pub const FXSAVE: u64 = 1;
    /// x86_64 `xsave64`/`xsaveopt64` standard (non-compacted) format; restore with `xrstor64`
    /// and all request bits set.
    pub const XSAVE: u64 = 2;
    /// riscv64: `f0`..`f31` then `fcsr` (as a u64), 264 bytes.
    pub const RISCV_D: u64 = 3;
    /// aarch64: `q0`..`q31` then `fpcr`, `fpsr` (as u64s), 528 bytes.
    pub const AARCH64_Q: u64 = 4;
}

/// The full user register frame of x86_64 as the kernel writes it into a ThMB. Restoring it in
/// user mode needs no kernel entry (`libuthread` addresses it through the GS base).
pub mod x86_64 {
    /// All general-purpose registers, `rip`, `rsp`, `rflags`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    #[allow(missing_docs)]
    pub struct FullFrame {
        pub rax: u64,
        pub rbx: u64,
        pub rcx: u64,
        pub rdx: u64,
        pub rsi: u64,
        pub rdi: u64,
        pub rbp: u64,
        pub r8: u64,
        pub r9: u64,
        pub r10: u64,
        pub r11: u64,
        pub r12: u64,
        pub r13: u64,
        pub r14: u64,
        pub r15: u64,
        pub rip: u64,
        pub rsp: u64,
        pub rflags: u64,
    }
    impl FullFrame {
        /// Every register zero.
        pub const ZERO: FullFrame = FullFrame {
            rax: 0,
            rbx: 0,
            rcx: 0,
            rdx: 0,
            rsi: 0,
            rdi: 0,
            rbp: 0,
            r8: 0,
            r9: 0,
            r10: 0,
            r11: 0,
            r12: 0,
            r13: 0,
            r14: 0,
            r15: 0,
            rip: 0,
            rsp: 0,
            rflags: 0,
        };

        /// Where the thread resumes.
        pub fn pc(&self) -> u64 {
            self.rip
        }

        /// The syscall-result register (see [`RESULT_IN_FRAME`]).
        pub fn result(&self) -> u64 {
            self.rax
        }
    }
    /// Offset, inside the frame, of the register a syscall's result goes to (`rax`).
    pub const RESULT_IN_FRAME: usize = core::mem::offset_of!(FullFrame, rax);
    /// Bytes the FP area must have: x87 + SSE + AVX in the XSAVE standard format take 832;
    /// the kernel enables no component beyond AVX.
    pub const FP_AREA_SIZE: usize = 1024;
    const _: () = assert!(core::mem::size_of::<FullFrame>() == 18 * 8);
}

/// The full user register frame of riscv64. `x[0]`'s slot (the zero register) holds `pc`.
///
/// Restoring it in user mode: the library loads every register from the frame through `tp`
/// (LTN = the ThMB, which is also the thread's own `tp`), and jumps through `gp`: in Tsumugi's
/// riscv64 user ABI `gp` is reserved for the thread library (programs are linked without
/// global-pointer relaxation, and compilers never allocate `gp`), so it is the one register a
/// FULL resume does not give back.
pub mod riscv64 {
    /// `x1`..`x31` in `x[1..32]`, `pc` in `x[0]`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct FullFrame {
        /// Registers by number; slot 0 is `pc`.
        pub x: [u64; 32],
    }
    impl FullFrame {
        /// Every register zero.
        pub const ZERO: FullFrame = FullFrame { x: [0; 32] };

        /// Where the thread resumes.
        pub fn pc(&self) -> u64 {
            self.x[0]
        }

        /// The syscall-result register (see [`RESULT_IN_FRAME`]).
        pub fn result(&self) -> u64 {
            self.x[10]
        }
    }
    /// Offset of the register a syscall's result goes to (`a0` = `x10`).
    pub const RESULT_IN_FRAME: usize = 10 * 8;
    /// Bytes the FP area must have (`f0`..`f31`, `fcsr`).
    pub const FP_AREA_SIZE: usize = 33 * 8;
}

/// The full user register frame of aarch64.
///
/// Restoring it in user mode: the library loads everything through a base register and jumps
/// through `x18`: in Tsumugi's aarch64 user ABI `x18` is the platform register, reserved for the
/// thread library (programs are built with `+reserve-x18`), so it is the one register a FULL
/// resume does not give back.
pub mod aarch64 {
    /// `x0`..`x30`, `sp`, `pc`, `pstate` (only NZCV matters to user code).
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct FullFrame {
        /// `x0`..`x30`.
        pub x: [u64; 31],
        /// Stack pointer.
        pub sp: u64,
        /// Where the thread resumes.
        pub pc: u64,
        /// Saved program status (NZCV in bits 31..28).
        pub pstate: u64,
    }
    impl FullFrame {
        /// Every register zero.
        pub const ZERO: FullFrame = FullFrame { x: [0; 31], sp: 0, pc: 0, pstate: 0 };

        /// Where the thread resumes.
        pub fn pc(&self) -> u64 {
            self.pc
        }

        /// The syscall-result register (see [`RESULT_IN_FRAME`]).
        pub fn result(&self) -> u64 {
            self.x[0]
        }
    }
    /// Offset of the register a syscall's result goes to (`x0`).
    pub const RESULT_IN_FRAME: usize = 0;
    /// Bytes the FP area must have (`q0`..`q31`, `fpcr`, `fpsr`).
    pub const FP_AREA_SIZE: usize = 32 * 16 + 16;
}

#[cfg(target_arch = "riscv64")]
pub use self::riscv64::{FullFrame, FP_AREA_SIZE, RESULT_IN_FRAME};
#[cfg(target_arch = "aarch64")]
pub use self::aarch64::{FullFrame, FP_AREA_SIZE, RESULT_IN_FRAME};
#[cfg(not(any(target_arch = "riscv64", target_arch = "aarch64")))]
pub use self::x86_64::{FullFrame, FP_AREA_SIZE, RESULT_IN_FRAME};

/// Alignment the FP area must have (XSAVE needs 64).
pub const FP_AREA_ALIGN: u64 = 64;

/// The part of every ThMB the kernel knows.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ThmbHeader {
    /// [`mask`] value.
    pub mask: u64,
    /// Written by the kernel when it stops the thread involuntarily.
    pub full: FullFrame,
    /// Address of this thread's FP area ([`FP_AREA_SIZE`] bytes, [`FP_AREA_ALIGN`]-aligned,
    /// in memory the thread may write), set by the library; 0 = none (the kernel then cannot
    /// save the thread's FP state with a FULL frame, and does not set [`mask::FP`]).
    pub fp_area: u64,
    /// [`fp_format`] of the state in the FP area, written with [`mask::FP`].
    pub fp_format: u64,
}

impl ThmbHeader {
    /// A header with nothing saved and no FP area.
    pub const EMPTY: ThmbHeader = ThmbHeader { mask: mask::NONE, full: FullFrame::ZERO, fp_area: 0, fp_format: 0 };
}

/// Offset of `mask` in a ThMB.
pub const MASK_OFFSET: usize = 0;
/// Offset of the full frame in a ThMB.
pub const FULL_OFFSET: usize = 8;
/// Offset of the syscall-result register inside a ThMB.
pub const RESULT_OFFSET: usize = FULL_OFFSET + RESULT_IN_FRAME;
/// Offset of `fp_area` in a ThMB.
pub const FP_AREA_PTR_OFFSET: usize = core::mem::offset_of!(ThmbHeader, fp_area);
/// Offset of `fp_format` in a ThMB.
pub const FP_FORMAT_OFFSET: usize = core::mem::offset_of!(ThmbHeader, fp_format);
/// Size of the header.
pub const HEADER_SIZE: usize = size_of::<ThmbHeader>();
const _: () = assert!(core::mem::offset_of!(ThmbHeader, full) == FULL_OFFSET);
const _: () = assert!(FP_AREA_PTR_OFFSET == FULL_OFFSET + size_of::<FullFrame>());

/// Why a vCPU is handed to the library (the upcall's first argument) and the kinds of ring
/// events.
#[repr(u64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// Thread `thread` blocked in the kernel; this vCPU is yours to run someone else.
    Blocked = 1,
    /// Thread `thread`'s blocking syscall finished; its result is in its ThMB (the frame's result
    /// register: [`FullFrame::result`], at [`RESULT_IN_FRAME`]). With `arg1` =
    /// [`UNBLOCKED_QUEUED`] the thread was never saved (the library parked it) and its result
    /// is `arg0`.
    Unblocked = 2,
    /// Thread `thread` was preempted at the end of its quantum; its state is in its ThMB.
    Preempted = 3,
    /// Thread `thread` faulted at `arg0` (`arg1`: 1 read, 2 write, 3 execute); its state is in
    /// its ThMB.
    Fault = 4,
    /// Signal number `arg0` arrived (`crate::signal`), sent by kernel thread `arg1`, for user
    /// thread `thread` (0: for the program). The library runs the registered handler.
    Signal = 5,
    /// vCPU `arg0` runs (again): the kernel gave the program a processor for it. As an upcall
    /// it enters the handler on that vCPU with `arg` = how many times the vCPU was revoked
    /// before ([`EventKind::VcpuRevoked`]): the library must have taken in that many of its
    /// revocations before the vCPU runs its threads again. Also posted to the ring (ignored
    /// there) for every vCPU but 0.
    VcpuGranted = 6,
    /// vCPU `arg0` was taken away (space sharing: another program needed the processor).
    /// `thread`: the user thread it was running, saved in its ThMB as for `PREEMPTED`, or 0
    /// when it was idle (parked with [`PARK_IDLE`]); `arg1`: the vCPU's revocations so far,
    /// this one included. Only posted to the ring: another vCPU of the program must take over
    /// the revoked vCPU's ready threads and `thread`. The kernel stops a vCPU only where its
    /// library holds nothing half-edited: with LTN ≠ 0, or parked with [`PARK_IDLE`]; never
    /// vCPU 0.
    VcpuRevoked = 7,
}

impl EventKind {
    /// Decodes a kind.
    pub fn from_u64(v: u64) -> Option<EventKind> {
        [
            EventKind::Blocked,
            EventKind::Unblocked,
            EventKind::Preempted,
            EventKind::Fault,
            EventKind::Signal,
            EventKind::VcpuGranted,
            EventKind::VcpuRevoked,
        ]
        .into_iter()
        .find(|k| *k as u64 == v)
    }
}

/// `vcpu_park(flags)`: the vCPU parks idle — no user thread's registers are live in it, so
/// the kernel may revoke it while parked (space sharing).
pub const PARK_IDLE: usize = 1;

/// `arg1` of an [`EventKind::Unblocked`] for a wait the library parked itself (an S3 call
/// given the thread's ThMB, `crate::s3::QUEUED`): nothing was saved in the ThMB, no
/// `BLOCKED` came before it (it may even arrive before the queuing syscall returns), and
/// `arg0` is the wait's result (encoded as a syscall result). The library makes the thread
/// ready through its park handshake, which keeps a wake-up that comes before the park.
pub const UNBLOCKED_QUEUED: u64 = 1;

/// `vcpu_park`'s result when the kernel wants the vCPU back (space sharing) and the park was
/// not [`PARK_IDLE`]: the library should give the vCPU up properly (switch its thread out and
/// park idle), so that the kernel can take it.
pub const PARK_GIVE_UP: usize = 1;

/// One ring slot.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Event {
    /// [`EventKind`] value; 0 = empty.
    pub kind: u64,
    /// The thread concerned (its ThMB address), or 0.
    pub thread: u64,
    /// First argument (see [`EventKind`]).
    pub arg0: u64,
    /// Second argument.
    pub arg1: u64,
}

/// The ring's header, followed in memory by `capacity` [`Event`] slots.
///
/// The kernel writes slot `tail % capacity` then advances `tail`; the library reads slot
/// `head % capacity` then advances `head`. Both counters only grow. The ring is full when
/// `tail - head == capacity`.
#[repr(C)]
#[derive(Debug, Default)]
pub struct RingHeader {
    /// Next slot the library will read (written by the library).
    pub head: u64,
    /// Next slot the kernel will write (written by the kernel).
    pub tail: u64,
    /// Number of slots (a power of two).
    pub capacity: u64,
    /// Events the kernel is holding back because the ring was full (for statistics).
    pub held_back: u64,
}

/// Offset of the first slot after the header.
pub const RING_SLOTS_OFFSET: usize = size_of::<RingHeader>();
const _: () = assert!(RING_SLOTS_OFFSET == 32);
const _: () = assert!(size_of::<Event>() == 32);

/// Register arguments of an upcall (x86_64: `rdi, rsi, rdx, rcx`; riscv64: `a0`..`a3`; aarch64: `x0`..`x3`):
/// `(kind, thread, vcpu, arg0)`.
/// The handler runs on the vCPU's upcall stack with LTN = 0 and must never return: it switches
/// to a thread or parks the vCPU.
pub struct UpcallArgs;

/// Largest number of vCPUs a program may have.
pub const MAX_VCPUS: usize = 64;

/// What `kn_register` takes (pointed to by its first argument).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Registration {
    /// Entry of the Kernel Notification Handler.
    pub handler: u64,
    /// Address of the ring (a [`RingHeader`] then its slots), in memory the caller may write.
    pub ring: u64,
    /// Address of an array of `vcpus` upcall-stack tops, one per vCPU.
    pub upcall_stacks: u64,
    /// Number of vCPUs the program asks for (1..=[`MAX_VCPUS`]); the caller's thread is vCPU 0.
    pub vcpus: u64,
    /// Address of an array of `vcpus` u64 words in memory the caller may write, or 0. The
    /// kernel sets word `v` to 1 the first time an activation of vCPU `v` uses FP (its
    /// FP-disabled trap) and never clears it: the library's WINDOW switch saves the ABI's
    /// callee-saved FP registers (riscv64 `fs0`..`fs11`, aarch64 `d8`..`d15`) only on vCPUs
    /// whose word is set, so threads of a program that never touches FP switch without them.
    pub fp_live: u64,
}

#[cfg(test)]
mod tests {
    #[test]
    fn result_and_pc_read_the_slots_the_layouts_name() {
        // Each register holds its own offset in the frame.
        let at = |off: usize| off as u64;
        let x = super::x86_64::FullFrame { rax: at(0), rip: at(15 * 8), ..super::x86_64::FullFrame::ZERO };
        assert_eq!(x.result(), at(super::x86_64::RESULT_IN_FRAME));
        assert_eq!(x.pc(), at(core::mem::offset_of!(super::x86_64::FullFrame, rip)));
        let mut r = super::riscv64::FullFrame::ZERO;
        r.x.iter_mut().enumerate().for_each(|(i, v)| *v = at(i * 8));
        assert_eq!(r.result(), at(super::riscv64::RESULT_IN_FRAME));
        assert_eq!(r.pc(), 0);
        let mut a = super::aarch64::FullFrame { sp: at(31 * 8), pc: at(32 * 8), pstate: at(33 * 8), ..super::aarch64::FullFrame::ZERO };
        a.x.iter_mut().enumerate().for_each(|(i, v)| *v = at(i * 8));
        assert_eq!(a.result(), at(super::aarch64::RESULT_IN_FRAME));
        assert_eq!(a.pc(), at(core::mem::offset_of!(super::aarch64::FullFrame, pc)));
    }
}
