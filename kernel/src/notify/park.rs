//! Kernel waits that hold no activation (S3's lock, barrier and futex-style waits; DESIGN §6).
//!
//! A vCPU running a user thread (LTN ≠ 0) that must wait for another thread's action — not for
//! a device or the clock — needs no kernel side at all: the thread is saved into its ThMB,
//! `BLOCKED` is posted, and the calling activation goes straight back to the library with the
//! upcall, as a `sleep` does. The waker later stores the wait's result in the ThMB's result
//! register and posts `UNBLOCKED` ([`Parked::finish`]); the library resumes the thread from
//! its ThMB on whichever vCPU it likes. Against `notify::blocking` this saves a spare
//! activation's switch-in, the waiting activation's switch-out and, at the wake, a kernel
//! switch to the waiting activation and back: the waker posts for every waiter in its own
//! syscall.
//!
//! Ordering: `BLOCKED` is posted before the waiter can be found (the `enqueue` callback runs
//! after it), so a waker on another CPU always posts `UNBLOCKED` after it.
//!
//! Cheaper still, [`queued`]: the library names the thread and parks it itself, so nothing is
//! saved and no upcall is made; only the wake's `UNBLOCKED` (with `kn::UNBLOCKED_QUEUED` and
//! the result) reaches the program, possibly before the queuing syscall returned.

use alloc::sync::Arc;
use arch::trap::TrapFrame;
use tsumugi_abi::kn::{Event, EventKind, UNBLOCKED_QUEUED};
use tsumugi_abi::syscall::Errno;

use super::machine::{current_vcpu, kill, post, post_own, upcall, write_result};
use super::save::{self, Refused};
use crate::domain::Domain;
use crate::sched::scheduler;

/// A user thread waiting in the kernel without an activation: its program and ThMB.
pub struct Parked {
    domain: Arc<Domain>,
    thmb: u64,
    /// Whether the kernel saved the thread into its ThMB (and posted `BLOCKED`); otherwise
    /// the library parked it itself ([`queued`]) and keeps its registers.
    saved: bool,
}

impl Parked {
    /// Ends the wait with `result` (an encoded syscall result): stored in the thread's ThMB,
    /// then `UNBLOCKED` posted. Nothing happens if the program has finished meanwhile.
    pub fn finish(&self, result: usize) {
        if self.domain.outcome().is_some() {
            return;
        }
        if !self.saved {
            // The library holds the thread's registers: only the result travels, in the event.
            let event = Event { kind: EventKind::Unblocked as u64, thread: self.thmb, arg0: result as u64, arg1: UNBLOCKED_QUEUED };
            post(&self.domain, event);
            return;
        }
        // The ThMB was written by the thread's save; it lies in a region of the program (their
        // regions live as long as the program).
        if write_result(&self.domain, self.thmb, result as u64) {
            post(&self.domain, Event { kind: EventKind::Unblocked as u64, thread: self.thmb, arg0: result as u64, arg1: 0 });
        }
    }

    /// Ends the waits of `parked` (threads of one program) with `result` as [`Parked::finish`]
    /// does each, posting with one take of the program's state lock (a batch release). Those
    /// the kernel saved get theirs one by one.
    pub fn finish_all<'a>(domain: &Arc<Domain>, parked: impl Iterator<Item = &'a Parked> + Clone, result: usize) {
        if domain.outcome().is_some() {
            return;
        }
        for p in parked.clone().filter(|p| p.saved) {
            p.finish(result);
        }
        let queued = parked.filter(|p| !p.saved);
        super::machine::post_many(domain, queued.map(|p| Event { kind: EventKind::Unblocked as u64, thread: p.thmb, arg0: result as u64, arg1: UNBLOCKED_QUEUED }));
    }

    /// The waiting thread's program.
    pub fn domain(&self) -> &Arc<Domain> {
        &self.domain
    }
}

/// Parks the calling user thread if the caller is a vCPU running one (LTN ≠ 0): saves it,
/// posts `BLOCKED`, then calls `enqueue`, which either queues the [`Parked`] where a waker
/// will [`Parked::finish`] it, or finishes it at once itself (nothing to wait for, or the
/// wait was refused: the result reaches the library as any wait's does), and turns the return
/// to user mode into the `BLOCKED` upcall. Returns `None` when the caller is not such a vCPU (nothing was done: it
/// must wait as a plain thread), else what the syscall must return — the upcall's first
/// argument, since on some ports the result register is the first argument register.
pub fn park(frame: &mut TrapFrame, enqueue: impl FnOnce(Parked)) -> Option<Result<usize, Errno>> {
    let me = scheduler::current()?;
    let vcpu = current_vcpu(&me)?;
    let thmb = match save::save(&me, frame) {
        Ok(t) => t,
        Err(Refused::NoThmb) => return None,
        Err(Refused::Bad(bad)) => kill(&me, bad),
    };
    let domain = me.domain.clone().expect("a vCPU has a domain");
    post_own(&domain, Event { kind: EventKind::Blocked as u64, thread: thmb, arg0: vcpu as u64, arg1: 0 });
    enqueue(Parked { domain, thmb, saved: true });
    let args = [EventKind::Blocked as u64, thmb, vcpu as u64, 0];
    upcall(&me, frame, vcpu, args);
    Some(Ok(args[0] as usize))
}

/// A wait the library parks itself (S3's queued waits): if the caller is a vCPU of a program
/// registered for Kernel Notification, the [`Parked`] for its user thread `thmb` (named by the
/// library, which parks that thread at user level once the syscall answers "queued"). Nothing
/// is saved and no `BLOCKED` is posted: the waker's `UNBLOCKED(thmb)` carries
/// [`UNBLOCKED_QUEUED`] and the result in `arg0`, and may reach the ring before the syscall
/// that queued the thread has returned (the library's park handshake keeps such a wake-up).
/// `None`: not such a vCPU (it must wait otherwise). `thmb` is only ever echoed back to the
/// same program in its own ring: a wrong one harms only that program.
pub fn queued(me: &crate::thread::Thread, thmb: u64) -> Option<Parked> {
    current_vcpu(me)?;
    let domain = me.domain.clone()?;
    Some(Parked { domain, thmb, saved: false })
}
