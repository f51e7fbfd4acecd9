//! A one-shot completion word: one side finishes something and says so once ([`complete`]),
//! the other waits for it at most once ([`wait`]). The word is `PENDING`, `DONE`, or the waiting
//! thread (a [`Waiter`]): the waiter publishes itself by CAS `PENDING -> me` and blocks; the
//! completer swaps in `DONE` and wakes whoever it replaced. Whichever comes second sees the
//! other's mark, so the wake-up is never lost and the waiter never blocks after `DONE`. It is the
//! join word protocol of a ThMB, for the task records of `crate::join` (their promoted thread
//! completes, the joiner waits); the loom model `loom_completion_wakes_the_waiter` checks it.
//!
//! [`complete`]: Completion::complete
//! [`wait`]: Completion::wait

use crate::prim::{AtomicUsize, Ordering};
use crate::sched::blocking::{self, Waiter};

/// Not complete, nobody waits.
const PENDING: usize = 0;
/// Complete.
const DONE: usize = 1;

/// See the module documentation.
pub(crate) struct Completion {
    word: AtomicUsize,
}

impl Completion {
    /// Not complete.
    #[inline(always)]
    pub(crate) fn new() -> Completion {
        Completion { word: AtomicUsize::new(PENDING) }
    }

    /// Returns once [`complete`](Self::complete) has been called, with everything written
    /// before that call visible; blocks the calling user thread until then.
    ///
    /// Call at most once per completion, from one thread.
    pub(crate) fn wait(&self) {
        if self.word.load(Ordering::Acquire) != DONE {
            blocking::block(|me| {
                self.word.compare_exchange(PENDING, me as usize, Ordering::AcqRel, Ordering::Acquire).is_ok()
            });
        }
        // Synchronise with the completer's writes (when `block` returned at once on DONE, the
        // failed CAS already did; this load makes it explicit for every path).
        let done = self.word.load(Ordering::Acquire);
        debug_assert_eq!(done, DONE);
    }

    /// Marks the completion done and wakes its waiter, if one waits. The completion (and what
    /// holds it) may be gone as soon as the swap is made: nothing of it is touched after.
    ///
    /// # Safety
    /// Called once per completion; the completion is live until the call.
    pub(crate) unsafe fn complete(&self) {
        match self.word.swap(DONE, Ordering::AcqRel) {
            PENDING => {}
            // SAFETY: the waiter published itself by CAS and waits for exactly this wake-up.
            waiter => unsafe { blocking::wake(waiter as Waiter) },
        }
    }
}
