//! A program's own gathering at a round of a shared barrier (S3; ARCHITECTURE.md "Shared locks
//! and barriers"): one kernel waiter per program per round.
//!
//! The kernel does not count a barrier's arrivals — every arrival adds one to the barrier word
//! in user mode, and the last one (counted across all programs) opens the next round and
//! releases the kernel's sleepers with one `s3_wake`. What a waiting arrival costs is its own
//! kernel wait (about 900 instructions queued). With a [`Gather`], only a program's *first*
//! arrival that must wait at a round (its *leader* here) waits in the kernel; the program's
//! later arrivals at the same round queue on the leader's slot in the library and give up
//! their vCPU, with no kernel call. When the leader's wait ends (the `UNBLOCKED` of the round's
//! release, or it finds the round already over), it takes the slot's whole list and makes every
//! thread on it ready: one batch, no kernel call per thread.
//!
//! No wake-up is lost: a slot exists exactly while its leader has not released it, and the
//! leader releases it (under the slot lock) only after its round ended; an arrival that finds
//! no slot for its round becomes a leader itself and sees the round over at once. A program
//! that ends while its leader waits in the kernel ends its local waiters with it; the others
//! are the kernel's matter as before (the barrier breaks).
//!
//! The slots are few ([`SLOTS`], over all shared barriers of the program at once): when they
//! are all in use an arrival waits in the kernel itself ([`Join::Alone`]), as before.

use crate::sched::blocking::{self, WaitList, WaitNode};
use crate::spin::{Critical, SpinLock};

/// Rounds a program gathers at once, over all its shared barriers.
pub(crate) const SLOTS: usize = 8;

/// One gathering: the round of the barrier word at `word` (0: the slot is free), and the
/// program's threads waiting on its leader. A node's data is what the leader tells it: whether
/// the barrier broke.
struct Slot {
    word: usize,
    round: u64,
    waiters: WaitList<bool>,
}

/// What [`Gather::join`] made of the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Join {
    /// It leads slot `.0`: it waits in the kernel, then calls [`Gather::release`] with the
    /// slot and the outcome, whatever the outcome.
    Lead(usize),
    /// It waited on its leader, who released it: whether the barrier broke.
    Done(bool),
    /// Every slot is in use: it waits in the kernel itself.
    Alone,
}

/// A program's gathering slots (one per program: [`GATHER`]).
pub(crate) struct Gather {
    slots: SpinLock<[Slot; SLOTS]>,
}

impl Gather {
    /// No gathering yet.
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Gather {
        Gather { slots: SpinLock::new([const { Slot { word: 0, round: 0, waiters: WaitList::new() } }; SLOTS]) }
    }

    /// No gathering yet.
    #[cfg(loom)]
    pub(crate) fn new() -> Gather {
        Gather { slots: SpinLock::new(core::array::from_fn(|_| Slot { word: 0, round: 0, waiters: WaitList::new() })) }
    }

    /// The calling thread arrived at round `round` of the barrier at `word` (not zero) and must
    /// wait: it waits on the program's leader of that round if there is one (and returns when
    /// released), or becomes the leader, or finds every slot taken.
    pub(crate) fn join(&self, word: usize, round: u64) -> Join {
        let mut node = WaitNode::new(false);
        let mut joined = Join::Alone;
        blocking::block(|me| {
            let mut slots = self.slots.lock();
            let mut free = None;
            for (i, s) in slots.iter_mut().enumerate() {
                if s.word == word && s.round == round {
                    node.waiter = me;
                    // SAFETY: the node lives on this stack until the leader wakes it.
                    unsafe { s.waiters.push_back(&mut node) };
                    joined = Join::Done(false);
                    return true;
                }
                if s.word == 0 && free.is_none() {
                    free = Some(i);
                }
            }
            if let Some(i) = free {
                slots[i].word = word;
                slots[i].round = round;
                joined = Join::Lead(i);
            }
            false
        });
        match joined {
            // SAFETY: the leader wrote the outcome before its wake, which happens-before this.
            Join::Done(_) => Join::Done(unsafe { core::ptr::read_volatile(&node.data) }),
            other => other,
        }
    }

    /// The leader of slot `slot` ends its gathering: the slot is free again, and every thread
    /// that waited on it is told `broken` and made ready.
    pub(crate) fn release(&self, slot: usize, broken: bool) {
        // One critical section for the slot edit and the whole batch: each thread goes on this
        // vCPU's own queue (`wake_from`) with no critical section of its own.
        let mut critical = Critical::enter();
        let me = critical.waiter();
        let list = {
            // SAFETY: inside `critical` until the guard goes.
            let mut slots = unsafe { self.slots.lock_in_critical() };
            slots[slot].word = 0;
            slots[slot].waiters.take_all()
        };
        for node in list {
            // SAFETY: taken off the slot, so this call owns the node's wake-up; the node lives
            // (on its thread's stack) until then; LTN = 0 (`critical`), `me` the caller.
            unsafe {
                (*node).data = broken;
                blocking::wake_from(me, (*node).waiter);
            }
        }
        critical.leave();
    }
}

/// This program's gathering slots.
#[cfg(not(loom))]
pub(crate) static GATHER: Gather = Gather::new();
