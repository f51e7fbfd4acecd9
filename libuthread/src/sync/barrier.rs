//! A barrier with batch release.

use core::fmt;
use core::panic::{RefUnwindSafe, UnwindSafe};

use crate::sched::blocking::{self, WaitList, WaitNode};
use crate::spin::SpinLock;

struct State {
    arrived: usize,
    waiters: WaitList<()>,
}

/// Lets `n` threads wait for each other. Arrivals before the last queue and give up their vCPU;
/// the last arrival releases the whole batch in one operation (S3's barrier) and becomes the
/// round's leader. Reusable: the next `n` arrivals form the next round.
///
/// ```
/// use std::sync::Arc;
/// libuthread::run(4, || {
///     let barrier = Arc::new(libuthread::Barrier::new(3));
///     let handles: Vec<_> = (0..3)
///         .map(|_| {
///             let b = barrier.clone();
///             libuthread::spawn(move || b.wait().is_leader())
///         })
///         .collect();
///     let leaders = handles.into_iter().map(|h| h.join().unwrap()).filter(|&l| l).count();
///     assert_eq!(leaders, 1);
/// });
/// ```
pub struct Barrier {
    n: usize,
    state: SpinLock<State>,
}

/// What [`Barrier::wait`] tells a thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BarrierWaitResult(bool);

impl BarrierWaitResult {
    /// Whether this thread was the round's last arrival (exactly one per round).
    pub fn is_leader(&self) -> bool {
        self.0
    }
}

impl Barrier {
    /// A barrier for `n` threads (`n` of 0 or 1: nobody ever waits).
    #[cfg(not(loom))]
    pub const fn new(n: usize) -> Barrier {
        Barrier { n, state: SpinLock::new(State { arrived: 0, waiters: WaitList::new() }) }
    }

    /// A barrier for `n` threads.
    #[cfg(loom)]
    pub fn new(n: usize) -> Barrier {
        Barrier { n, state: SpinLock::new(State { arrived: 0, waiters: WaitList::new() }) }
    }

    /// Waits until `n` threads have called `wait` in this round.
    pub fn wait(&self) -> BarrierWaitResult {
        let mut node = WaitNode::new(());
        let mut leader = false;
        blocking::block(|me| {
            let mut state = self.state.lock();
            state.arrived += 1;
            if state.arrived >= self.n {
                state.arrived = 0;
                let batch = state.waiters.take_all();
                drop(state);
                // SAFETY: we took the whole batch off the barrier.
                unsafe { blocking::wake_all(batch) };
                leader = true;
                return false;
            }
            node.waiter = me;
            // SAFETY: the node lives on this stack until the leader wakes us.
            unsafe { state.waiters.push_back(&mut node) };
            true
        });
        BarrierWaitResult(leader)
    }
}

// As std's: a panic while waiting leaves the barrier usable.
impl UnwindSafe for Barrier {}
impl RefUnwindSafe for Barrier {}

impl fmt::Debug for Barrier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Barrier").field("n", &self.n).finish_non_exhaustive()
    }
}
