//! Timed waits (`Condvar::wait_timeout*`, `recv_timeout`, `send_timeout`) built on the untimed
//! blocking mechanism, without touching it: the waiter blocks exactly as an untimed one does,
//! and a *watchdog* user thread, spawned for the wait, sleeps until the deadline and then
//! cancels the wait — it takes the waiter's node off the object's wait list (under the object's
//! lock) and, if the node was still there, wakes the waiter itself.
//!
//! Why a thread and not a timer inside the scheduler: the scheduler, `block` and `wake` stay as
//! they are (no extra instruction on any untimed path), and the only clock the library has on
//! Tsumugi is the kernel's sleep, which a user thread can use without holding up its vCPU.
//!
//! The hand-shake (one word, [`Watch::state`]): the waiter publishes its node, then marks the
//! watch `PUBLISHED`; once woken it tries `PUBLISHED -> DONE`. The watchdog, at the deadline,
//! tries `PUBLISHED -> CANCELLING`, calls the cancel closure (which lives on the waiter's stack
//! and may touch the object: the waiter cannot return while the watch says `CANCELLING`) and
//! stores `FIRED` (it removed the node: the wait timed out) or `MISSED` (a waker had taken the
//! node first and owns the wake-up). Whichever side wins the first exchange decides; the loser
//! of a `DONE` never touches the object again, and a waiter that lost waits for `FIRED` or
//! `MISSED` before its stack frame (node, closure) goes away.

use alloc::sync::Arc;
use core::sync::atomic::{AtomicU8, Ordering};
use core::time::Duration;

use crate::platform;
use crate::sched::blocking::{self, WaitList, WaitNode, Waiter};
use crate::spin::SpinGuard;

/// The waiter has not published its node yet.
const ARMED: u8 = 0;
/// The waiter waits on the object.
const PUBLISHED: u8 = 1;
/// The waiter is done without the watchdog; the watchdog only exits.
const DONE: u8 = 2;
/// The watchdog is cancelling the wait (the waiter must not return yet).
const CANCELLING: u8 = 3;
/// The watchdog removed the node and woke the waiter: the wait timed out.
const FIRED: u8 = 4;
/// The watchdog found the node gone (a waker owns the wake-up): not a time-out.
const MISSED: u8 = 5;

/// Longest single sleep of a watchdog, in nanoseconds: a watchdog whose waiter was woken
/// early notices it (and exits) within this time, while its waiter never waits on it.
const SLICE_NANOS: u64 = 10_000_000;

/// Stack of a watchdog thread (it only sleeps and runs the cancel closure).
const WATCHDOG_STACK: usize = 16 * 1024;

/// What a waiter and its watchdog share.
struct Watch {
    state: AtomicU8,
    /// When the watchdog cancels (`platform::now_nanos` time).
    deadline: u64,
    /// Takes the waiter's node off its list and wakes it, if it is still there (then `true`).
    /// Lives on the waiter's stack; called only in `CANCELLING`, while the waiter cannot return.
    cancel: *const (dyn Fn() -> bool + 'static),
}

// SAFETY: `cancel` is called only under the state protocol above: by one thread (the
// watchdog), while the waiter is blocked or waiting for `FIRED`/`MISSED` — never by two threads
// at once — and the closures given only lock the object and wake the waiter.
unsafe impl Send for Watch {}
// SAFETY: as above.
unsafe impl Sync for Watch {}

/// The deadline `timeout` from now, in `platform::now_nanos` time (saturating: a huge timeout
/// is "never").
pub(crate) fn deadline_after(timeout: Duration) -> u64 {
    platform::now_nanos().saturating_add(u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX))
}

/// Whether `deadline` has passed.
pub(crate) fn expired(deadline: u64) -> bool {
    platform::now_nanos() >= deadline
}

/// Blocks like [`blocking::block`], giving up at `deadline`. `publish` is `block`'s step;
/// `cancel` must take the published node off the object's list under the object's lock and,
/// when it was still there, wake its waiter and answer `true` (`false`: somebody else took it
/// and will wake the waiter). Returns whether the wait timed out (the node was cancelled).
///
/// Must be called from a user thread; costs one (lazy) thread spawn per wait.
pub(crate) fn block_until(deadline: u64, publish: impl FnOnce(Waiter) -> bool, cancel: &dyn Fn() -> bool) -> bool {
    let cancel: *const (dyn Fn() -> bool + '_) = cancel;
    // SAFETY: only the lifetime is erased; the protocol keeps the closure's frame alive for
    // every call (the waiter returns only after `DONE`, `FIRED` or `MISSED`).
    let cancel: *const (dyn Fn() -> bool + 'static) = unsafe { core::mem::transmute(cancel) };
    let watch = Arc::new(Watch { state: AtomicU8::new(ARMED), deadline, cancel });
    let dog = watch.clone();
    // Detached: it exits by itself (at the deadline, or within a slice of `DONE`).
    drop(crate::Builder::new().name("libuthread-timeout".into()).stack_size(WATCHDOG_STACK).spawn(move || watchdog(&dog)));
    blocking::block(|me| {
        if publish(me) {
            watch.state.store(PUBLISHED, Ordering::Release);
            true
        } else {
            watch.state.store(DONE, Ordering::Release);
            false
        }
    });
    match watch.state.compare_exchange(PUBLISHED, DONE, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) | Err(DONE) => false,
        Err(_) => loop {
            // The watchdog is cancelling: it finishes without waiting for anybody.
            match watch.state.load(Ordering::Acquire) {
                FIRED => return true,
                MISSED => return false,
                _ => crate::yield_now(),
            }
        },
    }
}

/// The watchdog thread: sleeps to the deadline in slices, then cancels a wait still published.
fn watchdog(watch: &Watch) {
    loop {
        let state = watch.state.load(Ordering::Acquire);
        if state == DONE {
            return;
        }
        let now = platform::now_nanos();
        if now >= watch.deadline && state == PUBLISHED {
            if watch.state.compare_exchange(PUBLISHED, CANCELLING, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                // SAFETY: `CANCELLING`: the waiter cannot return, so the closure is alive.
                let fired = unsafe { (*watch.cancel)() };
                watch.state.store(if fired { FIRED } else { MISSED }, Ordering::Release);
                return;
            }
            continue;
        }
        // Past the deadline but not yet published: the waiter is about to block; look again soon.
        let nap = watch.deadline.saturating_sub(now).clamp(1, SLICE_NANOS);
        platform::sleep_current(nap);
    }
}

/// A cancel closure's work: unlink `node` from the list `list` picks out of the locked
/// object if it is there, then wake its waiter after releasing the lock.
///
/// # Safety
/// `node` is the caller's published node (alive while its waiter waits), and `list(guard)` is
/// the list it was published on.
pub(crate) unsafe fn unlink_and_wake<S, D>(
    mut guard: SpinGuard<'_, S>,
    list: fn(&mut S) -> &mut WaitList<D>,
    node: *mut WaitNode<D>,
) -> bool {
    if !list(&mut guard).remove_near_front(node, usize::MAX) {
        return false;
    }
    drop(guard);
    // SAFETY: we took the node off its list, so the wake-up is ours; it is alive until woken.
    unsafe { blocking::wake((*node).waiter) };
    true
}
