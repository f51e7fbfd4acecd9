//! How the sync primitives and channels wait: the one interface between them and the scheduler.
//!
//! A waiting thread puts a [`WaitNode`] — on its own stack, so waiting allocates nothing — on the
//! object's wait list inside [`block`]'s `publish` step (or, where the waiter carries no data,
//! itself: [`ThreadList`]); whoever takes the node off the list
//! later calls [`wake`] exactly once. Under `--cfg loom` the same interface is backed by loom's
//! threads, so the primitives' hand-off protocols are model-checked unchanged.

use core::ptr;

use crate::sched::queue::{Fifo, Linked};

/// Handle of a blocked thread: its ThMB (or, under loom, a stack cell with a loom thread).
#[cfg(not(loom))]
pub(crate) type Waiter = *mut crate::thmb::Thmb;

/// Handle of a blocked thread: its ThMB (or, under loom, a stack cell with a loom thread).
#[cfg(loom)]
pub(crate) type Waiter = *const loom_impl::LoomWaiter;

/// A node of a wait list, living on the waiting thread's stack while it waits. `data` is what
/// the primitive needs to know about the waiter (a reader/writer kind, a value slot…).
pub(crate) struct WaitNode<D> {
    /// The waiting thread, set in `publish`.
    pub(crate) waiter: Waiter,
    next: *mut WaitNode<D>,
    /// Per-primitive data.
    pub(crate) data: D,
}

impl<D> WaitNode<D> {
    /// A node not yet in any list.
    pub(crate) fn new(data: D) -> Self {
        WaitNode { waiter: ptr::null_mut(), next: ptr::null_mut(), data }
    }

    /// A node for the waiting thread `waiter`, not yet in any list (what a publish step that
    /// writes its node only when it queues it writes).
    pub(crate) fn waiting(waiter: Waiter, data: D) -> Self {
        WaitNode { waiter, next: ptr::null_mut(), data }
    }
}

// SAFETY: `next` is the link field; only the list holding the node touches it.
unsafe impl<D> Linked for WaitNode<D> {
    unsafe fn next_link(this: *mut Self) -> *mut *mut Self {
        // SAFETY: the caller passes a live node.
        unsafe { &raw mut (*this).next }
    }
}

/// A wait list.
pub(crate) type WaitList<D> = Fifo<WaitNode<D>>;

/// What a [`Waiter`] points to: the blocked thread's ThMB (under loom, its stack cell).
#[cfg(not(loom))]
pub(crate) type WaiterCell = crate::thmb::Thmb;

/// What a [`Waiter`] points to: the blocked thread's ThMB (under loom, its stack cell).
#[cfg(loom)]
pub(crate) type WaiterCell = loom_impl::LoomWaiter;

/// A wait list of the blocked threads themselves, for a primitive whose waiters carry no data
/// (the mutex): no node is built on the waiter's stack, so its publish step needs no frame. A
/// thread waits on one object at a time and is in no ready queue while it waits — published
/// in `block` while it runs, taken off by its waker before the wake-up that may queue it — so
/// the list links it through its ready-queue link (`run_next`), free for that whole time.
pub(crate) type ThreadList = Fifo<WaiterCell>;

/// Blocks the calling user thread. `publish(me)` runs first, inside the library's critical
/// section: it either makes `me` reachable by a waker (pushes a node) and returns `true`, or
/// finds that waiting is unnecessary and returns `false` (then `block` returns at once). Once
/// published, `block` returns after the matching [`wake`]; it may not return earlier (no
/// spurious wake-ups).
///
/// Panics when called outside a user thread or inside a critical section.
#[cfg(not(loom))]
#[inline(always)]
pub(crate) fn block(publish: impl FnOnce(Waiter) -> bool) {
    crate::sched::block_current(publish)
}

/// Whether the caller may block here — a user thread outside the library's critical sections
/// — where [`block`] would panic otherwise.
#[cfg(not(loom))]
#[inline(always)]
pub(crate) fn can_block() -> bool {
    !crate::platform::ltn().is_null()
}

/// Whether the caller may block here (under loom, every model thread may).
#[cfg(loom)]
pub(crate) fn can_block() -> bool {
    true
}

/// [`block`], returning whether the caller waited (`true` when `publish` returned `true`, and
/// so the matching [`wake`] came), for a publish step that, when it returns `true`, has woken
/// no thread (it only queued the caller): the scheduler may then decide the switch before the publish step
/// and skip the park's commit (`sched::block_current_direct`). A step that hands a value or a
/// lock to another waiter and still waits (a condition variable's wait) must use [`block`].
#[cfg(not(loom))]
#[inline(always)]
pub(crate) fn block_direct(publish: impl FnOnce(Waiter) -> bool) -> bool {
    crate::sched::block_current_direct(publish)
}

/// Makes a thread blocked in [`block`] runnable again. Call once per published node, after
/// taking it off its list; the node may be gone as soon as this returns.
///
/// # Safety
/// `waiter` comes from a node the caller removed from a wait list (and so owns the wake-up).
#[cfg(not(loom))]
#[inline]
pub(crate) unsafe fn wake(waiter: Waiter) {
    // SAFETY: forwarded contract.
    unsafe { crate::sched::wake(waiter) }
}

/// [`wake`] from inside a library critical section entered by `me` (a `SpinGuard`'s, or
/// `block`'s around its `publish` step, where `me` is the `Waiter` that step was given): the
/// hand-off of a lock or a message to its waiter, which goes on `me`'s vCPU's own queue with
/// no second critical section and no call. `me` null (no user thread entered the section):
/// exactly [`wake`]. The run-state handshake is [`wake`]'s, so a wake-up made here is never
/// lost (the loom models in `sync/loom_tests.rs` run the primitives over it).
///
/// # Safety
/// As [`wake`]; the caller is inside a critical section and `me`, if not null, is the calling
/// user thread.
#[cfg(not(loom))]
#[inline(always)]
pub(crate) unsafe fn wake_from(me: Waiter, waiter: Waiter) {
    // SAFETY: forwarded contract.
    unsafe { crate::sched::wake_from(me, waiter) }
}

/// [`wake_from`], ending the critical section `me` entered: LTN = `me` afterwards (`me` null:
/// untouched). Every call on its way is a tail call, so the caller's hand-off path needs no
/// callee-saved register for `me` (the mutex's unlock, an unbounded send).
///
/// # Safety
/// As [`wake_from`]; the caller's critical section ends here (it restores nothing itself).
#[cfg(not(loom))]
#[inline(always)]
pub(crate) unsafe fn wake_from_leave(me: Waiter, waiter: Waiter) {
    // SAFETY: forwarded contract.
    unsafe { crate::sched::wake_from_leave(me, waiter) }
}

/// Wakes every node of `list` (a barrier's batch release, `notify_all`, disconnection).
///
/// # Safety
/// The caller took `list` off its object, so it owns every node's wake-up.
pub(crate) unsafe fn wake_all<D>(list: WaitList<D>) {
    for node in list {
        // SAFETY: the node is live until woken; we own its wake-up.
        unsafe { wake((*node).waiter) };
    }
}

#[cfg(loom)]
pub(crate) use loom_impl::{block, block_waited as block_direct, wake, wake_from, wake_from_leave};

#[cfg(loom)]
mod loom_impl {
    use super::Waiter;
    use loom::sync::atomic::{AtomicBool, Ordering};

    /// A loom thread blocked in `block`.
    pub(crate) struct LoomWaiter {
        thread: loom::thread::Thread,
        woken: AtomicBool,
        /// The `ThreadList` link (the ThMB's `run_next` outside loom).
        next: core::cell::Cell<*mut LoomWaiter>,
    }

    // SAFETY: `next` is the list link; only the `ThreadList` holding the cell touches it, under
    // its owner's lock.
    unsafe impl crate::sched::queue::Linked for LoomWaiter {
        unsafe fn next_link(this: *mut Self) -> *mut *mut Self {
            // SAFETY: the caller passes a live cell.
            unsafe { (*this).next.as_ptr() }
        }
    }

    /// `block` for loom: the waiter lives on the blocked thread's stack.
    pub(crate) fn block(publish: impl FnOnce(Waiter) -> bool) {
        block_waited(publish);
    }

    /// `block_waited` for loom.
    pub(crate) fn block_waited(publish: impl FnOnce(Waiter) -> bool) -> bool {
        let me = LoomWaiter { thread: loom::thread::current(), woken: AtomicBool::new(false), next: core::cell::Cell::new(core::ptr::null_mut()) };
        if !publish(&me) {
            return false;
        }
        while !me.woken.load(Ordering::Acquire) {
            loom::thread::park();
        }
        true
    }

    /// `wake_from` for loom: `wake` (the queue the waiter goes on is the scheduler's matter).
    ///
    /// # Safety
    /// As the real `wake_from`.
    pub(crate) unsafe fn wake_from(_me: Waiter, waiter: Waiter) {
        // SAFETY: forwarded contract.
        unsafe { wake(waiter) }
    }

    /// `wake_from_leave` for loom: `wake` (loom has no LTN to restore).
    ///
    /// # Safety
    /// As the real `wake_from_leave`.
    pub(crate) unsafe fn wake_from_leave(_me: Waiter, waiter: Waiter) {
        // SAFETY: forwarded contract.
        unsafe { wake(waiter) }
    }

    /// `wake` for loom.
    ///
    /// # Safety
    /// As the real `wake`.
    pub(crate) unsafe fn wake(waiter: Waiter) {
        // SAFETY: the waiter is still blocked (it waits for `woken`), so its cell is live; take
        // the thread handle before setting `woken`, after which the cell may disappear.
        let thread = unsafe { (*waiter).thread.clone() };
        // SAFETY: as above.
        unsafe { (*waiter).woken.store(true, Ordering::Release) };
        thread.unpark();
    }
}
