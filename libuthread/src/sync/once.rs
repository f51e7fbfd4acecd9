//! One-time initialisation.

use core::fmt;
use core::panic::{RefUnwindSafe, UnwindSafe};

use crate::sched::blocking::{self, WaitList, WaitNode};
use crate::prim::{AtomicU32, Ordering};
use crate::spin::SpinLock;

const INCOMPLETE: u32 = 0;
const RUNNING: u32 = 1;
const COMPLETE: u32 = 2;

/// Runs a closure exactly once; concurrent callers wait (off their vCPU) until it has run.
/// Hosted, if the closure panics, the `Once` stays incomplete and the next caller runs its own.
///
/// ```
/// static INIT: libuthread::Once = libuthread::Once::new();
/// libuthread::run(2, || {
///     let hs: Vec<_> = (0..4).map(|_| libuthread::spawn(|| INIT.call_once(|| println!("once")))).collect();
///     hs.into_iter().for_each(|h| h.join().unwrap());
///     assert!(INIT.is_completed());
/// });
/// ```
pub struct Once {
    state: AtomicU32,
    waiters: SpinLock<WaitList<()>>,
}

impl Once {
    /// A `Once` that has not run.
    #[cfg(not(loom))]
    pub const fn new() -> Once {
        Once { state: AtomicU32::new(INCOMPLETE), waiters: SpinLock::new(WaitList::new()) }
    }

    /// A `Once` that has not run.
    #[cfg(loom)]
    pub fn new() -> Once {
        Once { state: AtomicU32::new(INCOMPLETE), waiters: SpinLock::new(WaitList::new()) }
    }

    /// Whether the closure has run to completion.
    pub fn is_completed(&self) -> bool {
        self.state.load(Ordering::Acquire) == COMPLETE
    }

    /// Runs `f` if no call has completed yet; returns after some call's closure completed.
    pub fn call_once<F: FnOnce()>(&self, f: F) {
        self.call_once_force(|_| f());
    }

    /// Like [`call_once`](Self::call_once), with the [`OnceState`] passed to `f` (std's
    /// `call_once_force`; never poisoned here, see [`OnceState::is_poisoned`]).
    ///
    /// ```
    /// static INIT: libuthread::Once = libuthread::Once::new();
    /// libuthread::run(1, || INIT.call_once_force(|state| assert!(!state.is_poisoned())));
    /// assert!(INIT.is_completed());
    /// ```
    pub fn call_once_force<F: FnOnce(&OnceState)>(&self, f: F) {
        let mut f = Some(f);
        loop {
            match self.state.compare_exchange(INCOMPLETE, RUNNING, Ordering::Acquire, Ordering::Acquire) {
                Ok(_) => {
                    let mut finish = Finish { once: self, state: INCOMPLETE };
                    (f.take().expect("run once"))(&OnceState { poisoned: false });
                    finish.state = COMPLETE;
                    return;
                }
                Err(COMPLETE) => return,
                Err(_) => {
                    let mut node = WaitNode::new(());
                    blocking::block(|me| {
                        let mut waiters = self.waiters.lock();
                        if self.state.load(Ordering::Acquire) != RUNNING {
                            return false;
                        }
                        node.waiter = me;
                        // SAFETY: the node lives on this stack until `Finish` wakes us.
                        unsafe { waiters.push_back(&mut node) };
                        true
                    });
                }
            }
        }
    }
}

/// What [`Once::call_once_force`] tells its closure (std's `OnceState`).
#[derive(Debug)]
pub struct OnceState {
    poisoned: bool,
}

impl OnceState {
    /// Whether an earlier call's closure panicked. Always `false` here: a `Once` whose
    /// closure panicked (hosted) returns to incomplete rather than poisoned, so the next call
    /// simply runs.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }
}

/// Publishes the outcome of a run (COMPLETE, or INCOMPLETE when the closure unwound) and wakes
/// the waiters.
struct Finish<'a> {
    once: &'a Once,
    state: u32,
}

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        let all = {
            let mut waiters = self.once.waiters.lock();
            self.once.state.store(self.state, Ordering::Release);
            waiters.take_all()
        };
        // SAFETY: we took every waiter off the list.
        unsafe { blocking::wake_all(all) };
    }
}

impl Once {
    /// Waits (off the vCPU) until some call's closure has completed (std's `Once::wait`).
    ///
    /// ```
    /// use std::sync::Arc;
    /// libuthread::run(2, || {
    ///     let once = Arc::new(libuthread::Once::new());
    ///     let o = once.clone();
    ///     let waiter = libuthread::spawn(move || o.wait());
    ///     once.call_once(|| ());
    ///     waiter.join().unwrap();
    /// });
    /// ```
    pub fn wait(&self) {
        while !self.is_completed() {
            let mut node = WaitNode::new(());
            blocking::block(|me| {
                let mut waiters = self.waiters.lock();
                if self.state.load(Ordering::Acquire) == COMPLETE {
                    return false;
                }
                node.waiter = me;
                // SAFETY: the node lives on this stack until a `Finish` wakes us.
                unsafe { waiters.push_back(&mut node) };
                true
            });
        }
    }
}

// As std's.
impl UnwindSafe for Once {}
impl RefUnwindSafe for Once {}

impl Default for Once {
    fn default() -> Self {
        Once::new()
    }
}

impl fmt::Debug for Once {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Once").field("completed", &self.is_completed()).finish()
    }
}
