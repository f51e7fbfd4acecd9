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
    /// The kernel saved the full register frame at an involuntary stop.
    pub const FULL: u64 = 2;
}

/// The full user register frame of x86_64 as the kernel writes it into a ThMB. Restoring it in
/// user mode needs no kernel entry (see `libuthread`'s context switch).
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

/// The part of every ThMB the kernel knows.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ThmbHeader {
    /// [`mask`] value.
    pub mask: u64,
    /// Written by the kernel when it stops the thread involuntarily.
    pub full: FullFrame,
}

/// Offset of `mask` in a ThMB.
pub const MASK_OFFSET: usize = 0;
/// Offset of the full frame in a ThMB.
pub const FULL_OFFSET: usize = 8;
const _: () = assert!(size_of::<FullFrame>() == 18 * 8);
const _: () = assert!(core::mem::offset_of!(ThmbHeader, full) == FULL_OFFSET);

/// Why a vCPU is handed to the library (the upcall's first argument) and the kinds of ring
/// events.
#[repr(u64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// Thread `thread` blocked in the kernel; this vCPU is yours to run someone else.
    Blocked = 1,
    /// Thread `thread`'s blocking syscall finished; its result is in its ThMB (`full.rax`).
    Unblocked = 2,
    /// Thread `thread` was preempted at the end of its quantum; its state is in its ThMB.
    Preempted = 3,
    /// Thread `thread` faulted at `arg0` (`arg1`: 1 read, 2 write, 3 execute); its state is in
    /// its ThMB.
    Fault = 4,
    /// Signal number `arg0` arrived for the program.
    Signal = 5,
    /// A new vCPU (`arg0` = its index) starts.
    VcpuGranted = 6,
    /// vCPU `arg0` is taken away after this upcall returns control (it parks for good).
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

/// Register arguments of an upcall (x86_64: `rdi, rsi, rdx, rcx`): `(kind, thread, vcpu, arg0)`.
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
}
