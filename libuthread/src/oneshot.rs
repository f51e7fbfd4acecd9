//! One-value channels between user threads: a [`Sender`] sends one value, a [`Receiver`] waits
//! for it once — the reply of a request/reply exchange (the shape of nightly
//! `std::sync::oneshot` and of `tokio::sync::oneshot`, blocking as a thread does).
//!
//! A one-shot channel is one allocation (the value's slot and a state word) and no lock: the
//! state word is the whole protocol, and each half's last act frees the allocation if the other
//! half is gone. [`ask`] is the same channel with no allocation, for the commonest use — send a
//! request with the sender, wait for the reply: the slot lives in the asking call's frame, which
//! waits until the sender is done. The word is `EMPTY`, `SENT`, `SENDER_GONE`,
//! `RECEIVER_GONE`, or the waiting receiver itself (its thread's address, aligned, so never one
//! of the four):
//! - the receiver waits by CAS `EMPTY -> me` inside the blocking publish step and blocks; a CAS
//!   that fails saw the sender's mark, and it does not wait;
//! - the sender writes the value, then swaps in `SENT` (or, dropped unsent, `SENDER_GONE`) and
//!   wakes the receiver it replaced, if any.
//!
//! Whichever comes second sees the other's mark, so the wake-up is never lost and the receiver
//! never blocks after the sender is done (loom models `loom_oneshot_*`). Against an
//! [`mpsc::channel`](crate::mpsc::channel) used for one reply, it saves the lock, the queue, the
//! sender and receiver counts and the reference count (x86_64 `-icount`: see ARCHITECTURE.md,
//! "One-shot channels").
//!
//! ```
//! use libuthread::{mpsc, oneshot};
//! libuthread::run(1, || {
//!     // A server answering each request on the reply channel that came with it.
//!     let (requests, inbox) = mpsc::channel::<(u32, oneshot::Sender<u32>)>();
//!     let server = libuthread::spawn(move || {
//!         for (n, reply) in inbox {
//!             let _ = reply.send(n * 2);
//!         }
//!     });
//!     let (reply, answer) = oneshot::channel();
//!     requests.send((21, reply)).unwrap();
//!     assert_eq!(answer.recv(), Ok(42));
//!     drop(requests);
//!     server.join().unwrap();
//! });
//! ```

use alloc::boxed::Box;
use core::cell::UnsafeCell;
use core::fmt;
use core::mem::{ManuallyDrop, MaybeUninit};
use core::ptr::NonNull;
#[cfg(not(loom))]
use core::time::Duration;

// The channels' errors: a send whose receiver is gone gives the value back, a receive whose
// sender is gone fails (the same meaning, as std's `oneshot` shares them with `mpsc`).
pub use crate::channel::{RecvError, SendError};
use crate::prim::{AtomicUsize, Ordering};
use crate::sched::blocking::{self, Waiter};
use crate::spin::Critical;
#[cfg(not(loom))]
use crate::sync::timed;

/// Nothing sent, both halves alive, nobody waits.
const EMPTY: usize = 0;
/// The value is in the slot.
const SENT: usize = 1;
/// The sender was dropped without sending.
const SENDER_GONE: usize = 2;
/// The receiver was dropped without receiving.
const RECEIVER_GONE: usize = 3;

// A waiting receiver's word is its `Waiter`'s address: aligned, so none of the marks above.
const _: () = assert!(core::mem::align_of::<blocking::WaiterCell>() > RECEIVER_GONE);

/// The allocation both halves point to.
struct Inner<T> {
    state: AtomicUsize,
    /// Written by the sender before its swap to `SENT`; read (moved out) by whoever sees `SENT`
    /// with the other half gone or waiting no more.
    value: UnsafeCell<MaybeUninit<T>>,
}

/// Frees `inner`.
///
/// # Safety
/// The other half is gone (its mark seen through an acquiring access) and the slot is empty
/// (never written, or its value moved out or dropped).
unsafe fn free<T>(inner: NonNull<Inner<T>>) {
    // SAFETY: allocated by `channel` as a `Box`, and nobody else refers to it any more.
    drop(unsafe { Box::from_raw(inner.as_ptr()) });
}

/// Makes a one-shot channel: the [`Sender`] sends one value, the [`Receiver`] receives it.
pub fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let inner = NonNull::from(Box::leak(Box::new(Inner { state: AtomicUsize::new(EMPTY), value: UnsafeCell::new(MaybeUninit::uninit()) })));
    (Sender { inner }, Receiver { inner })
}

/// Runs `request` with the [`Sender`] of a one-shot channel whose receiver is the caller, then
/// waits for its value: a request/reply exchange (seL4's *Call*) with no allocation. The
/// value's slot and the state word live in this call's frame, and the call neither returns nor
/// unwinds before the sender is done — it sent, or was dropped (then `Err(RecvError)`; so is a
/// request that never left: `request`'s result, such as a failed send's error holding the
/// sender, is dropped before the wait). A sender that is neither (leaked with `mem::forget`)
/// makes the call wait for ever.
///
/// ```
/// use libuthread::{mpsc, oneshot};
/// libuthread::run(1, || {
///     let (requests, inbox) = mpsc::channel::<(u32, oneshot::Sender<u32>)>();
///     let server = libuthread::spawn(move || {
///         for (n, reply) in inbox {
///             let _ = reply.send(n * 2);
///         }
///     });
///     assert_eq!(oneshot::ask(|reply| requests.send((21, reply))), Ok(42));
///     drop(requests);
///     server.join().unwrap();
/// });
/// ```
///
/// Panics, before `request` runs, when called outside a user thread (there is no thread to
/// block), as every blocking call of the library.
pub fn ask<T, R>(request: impl FnOnce(Sender<T>) -> R) -> Result<T, RecvError> {
    if !blocking::can_block() {
        ask_outside_thread();
    }
    let inner = Inner { state: AtomicUsize::new(EMPTY), value: UnsafeCell::new(MaybeUninit::uninit()) };
    /// Waits out the sender when `request` unwinds (hosted), so that the frame outlives it.
    struct Outlive<'a, T>(&'a Inner<T>);
    impl<T> Drop for Outlive<'_, T> {
        fn drop(&mut self) {
            // SAFETY: the wait saw the sender done; this is the slot's one reader.
            drop(unsafe { take(self.0, wait_sender(self.0)) });
        }
    }
    let outlive = Outlive(&inner);
    // This half is never `RECEIVER_GONE`, so the sender never frees the slot (nor gives a value
    // back): it only writes it and swaps its mark in.
    drop(request(Sender { inner: NonNull::from(&inner) }));
    core::mem::forget(outlive);
    // SAFETY: as in `Outlive::drop`.
    unsafe { take(&inner, wait_sender(&inner)) }
}

/// Waits until the sender of `inner` is done and gives its mark, `SENT` or `SENDER_GONE`, read
/// with acquire ordering: the receiver waits by CAS `EMPTY -> me` in `block_direct`'s publish
/// step, and a CAS that fails saw the mark (`Receiver::recv` and `ask`).
fn wait_sender<T>(inner: &Inner<T>) -> usize {
    let state = &inner.state;
    if state.load(Ordering::Acquire) == EMPTY {
        blocking::block_direct(|me| state.compare_exchange(EMPTY, me as usize, Ordering::AcqRel, Ordering::Acquire).is_ok());
    }
    state.load(Ordering::Acquire)
}

/// The outcome of a receive that found the sender done with mark `state`: the value moved out
/// of the slot if it was sent.
///
/// # Safety
/// `state` (`SENT` or `SENDER_GONE`) was read with acquire ordering, and the caller is the
/// slot's one reader.
unsafe fn take<T>(inner: &Inner<T>, state: usize) -> Result<T, RecvError> {
    debug_assert!(state == SENT || state == SENDER_GONE);
    if state == SENT {
        // SAFETY: written before the `SENT` swap we synchronised with; only we read it.
        Ok(unsafe { (*inner.value.get()).assume_init_read() })
    } else {
        Err(RecvError)
    }
}

/// [`ask`] outside a user thread: a misuse, reported before any sender exists.
#[cold]
#[inline(never)]
fn ask_outside_thread() -> ! {
    panic!("libuthread: oneshot::ask outside a user thread or inside a library critical section")
}

/// The sending half of a one-shot [`channel`] (or of an [`ask`]).
pub struct Sender<T> {
    inner: NonNull<Inner<T>>,
}

// SAFETY: the halves hand a `T` from one thread to another through the state word's
// release/acquire pairs; neither half gives shared access to it.
unsafe impl<T: Send> Send for Sender<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for Receiver<T> {}
// SAFETY: nothing can be done through a shared reference to a half.
unsafe impl<T: Send> Sync for Sender<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Receiver<T> {}

impl<T> Sender<T> {
    /// Sends `value`, waking the receiver if it waits. Fails, giving the value back, when the
    /// receiver is gone.
    pub fn send(self, value: T) -> Result<(), SendError<T>> {
        let inner = ManuallyDrop::new(self).inner;
        // SAFETY: the slot is the sender's until its swap below; the allocation lives until
        // both halves are done, and this half is not done yet.
        unsafe { (*(*inner.as_ptr()).value.get()).write(value) };
        // Inside a critical section, so that a waiting receiver goes on this vCPU's own queue
        // with no second one (as an unbounded `mpsc` send hands a value over).
        let mut critical = Critical::enter();
        // SAFETY: as above.
        match unsafe { inner.as_ref() }.state.swap(SENT, Ordering::AcqRel) {
            EMPTY => {
                critical.leave();
                Ok(())
            }
            RECEIVER_GONE => {
                critical.leave();
                // SAFETY: the receiver is gone (seen by the swap), the value ours again.
                let value = unsafe { (*(*inner.as_ptr()).value.get()).assume_init_read() };
                // SAFETY: as above, and the slot is empty again.
                unsafe { free(inner) };
                Err(SendError(value))
            }
            waiter => {
                // SAFETY: the receiver published itself by its CAS and waits for exactly this
                // wake-up (it frees the allocation afterwards); `critical` was entered by this
                // thread and the call ends it.
                unsafe { blocking::wake_from_leave(critical.waiter(), waiter as Waiter) };
                Ok(())
            }
        }
    }

    /// Whether the receiver is gone (a `send` would fail). A `false` may be stale at once.
    pub fn is_closed(&self) -> bool {
        // SAFETY: live while this half is.
        unsafe { self.inner.as_ref() }.state.load(Ordering::Relaxed) == RECEIVER_GONE
    }
}

impl<T> Drop for Sender<T> {
    /// Dropped unsent: the receiver learns there is nothing to come.
    fn drop(&mut self) {
        let inner = self.inner;
        // SAFETY: live while this half is.
        match unsafe { inner.as_ref() }.state.swap(SENDER_GONE, Ordering::AcqRel) {
            EMPTY => {}
            // SAFETY: the receiver is gone and nothing was sent.
            RECEIVER_GONE => unsafe { free(inner) },
            // SAFETY: as in `send`: ours to wake; the receiver frees the allocation.
            waiter => unsafe { blocking::wake(waiter as Waiter) },
        }
    }
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("oneshot::Sender { .. }")
    }
}

/// The receiving half of a one-shot [`channel`].
pub struct Receiver<T> {
    inner: NonNull<Inner<T>>,
}

impl<T> Receiver<T> {
    /// Waits for the value; fails when the sender was dropped without sending.
    ///
    /// Panics when called outside a user thread (there is no thread to block), as every
    /// blocking call of the library.
    pub fn recv(self) -> Result<T, RecvError> {
        let inner = ManuallyDrop::new(self).inner;
        // SAFETY: live until this half frees it below (the sender never frees it while this
        // half is alive).
        let done = wait_sender(unsafe { inner.as_ref() });
        // SAFETY: the sender is done (its mark read with acquire ordering by the wait).
        unsafe { Self::finish(inner, done) }
    }

    /// Takes the value if it was sent, without waiting; gives the receiver back in
    /// [`TryRecvError::Empty`] if not yet.
    pub fn try_recv(self) -> Result<T, TryRecvError<T>> {
        // SAFETY: live while this half is.
        match unsafe { self.inner.as_ref() }.state.load(Ordering::Acquire) {
            EMPTY => Err(TryRecvError::Empty(self)),
            // SAFETY: the sender is done (its mark seen by the acquiring load).
            done => unsafe { Self::finish(ManuallyDrop::new(self).inner, done) }.map_err(|RecvError| TryRecvError::Disconnected),
        }
    }

    /// Waits for the value at most `timeout`; gives the receiver back in
    /// [`RecvTimeoutError::Timeout`] if it did not come in time (wait again, or drop it).
    ///
    /// ```
    /// use std::time::Duration;
    /// use libuthread::oneshot::{self, RecvTimeoutError};
    /// libuthread::run(1, || {
    ///     let (tx, rx) = oneshot::channel();
    ///     let Err(RecvTimeoutError::Timeout(rx)) = rx.recv_timeout(Duration::from_millis(2)) else {
    ///         panic!("nothing was sent yet");
    ///     };
    ///     tx.send(1).unwrap();
    ///     assert_eq!(rx.recv_timeout(Duration::from_secs(60)).ok(), Some(1));
    /// });
    /// ```
    ///
    /// A timed wait is [`recv`](Receiver::recv)'s, with a watchdog thread that takes the
    /// receiver back out of the state word at the deadline (CAS `me -> EMPTY`, then its
    /// wake-up) unless the sender's mark replaced it first (then the sender's wake-up comes
    /// and the value is taken): exactly one of the two wakes the receiver.
    #[cfg(not(loom))]
    pub fn recv_timeout(self, timeout: Duration) -> Result<T, RecvTimeoutError<T>> {
        let deadline = timed::deadline_after(timeout);
        let inner = self.inner;
        // SAFETY: live while this half is (it is kept until the end).
        let state = &unsafe { inner.as_ref() }.state;
        if state.load(Ordering::Acquire) == EMPTY {
            if timed::expired(deadline) {
                return Err(RecvTimeoutError::Timeout(self));
            }
            let cancel = || {
                let word = state.load(Ordering::Acquire);
                if word > RECEIVER_GONE && state.compare_exchange(word, EMPTY, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                    // SAFETY: the receiver's own mark taken back out of the word: its wake-up is
                    // ours (the sender will find `EMPTY`).
                    unsafe { blocking::wake(word as Waiter) };
                    return true;
                }
                false
            };
            let published = |me: Waiter| state.compare_exchange(EMPTY, me as usize, Ordering::AcqRel, Ordering::Acquire).is_ok();
            if timed::block_until(deadline, published, &cancel) {
                return Err(RecvTimeoutError::Timeout(self));
            }
        }
        let done = state.load(Ordering::Acquire);
        // SAFETY: the sender is done (see `recv`; a wait the watchdog cancelled returned above).
        unsafe { Self::finish(ManuallyDrop::new(self).inner, done) }.map_err(|RecvError| RecvTimeoutError::Disconnected)
    }

    /// The end of a receive that found the sender done (`state` `SENT` or `SENDER_GONE`):
    /// takes the value, frees the allocation.
    ///
    /// # Safety
    /// `state` was read with acquire ordering, the sender is done, and the receiver's drop will
    /// not run.
    unsafe fn finish(inner: NonNull<Inner<T>>, state: usize) -> Result<T, RecvError> {
        // SAFETY: per the contract; the receiver is the slot's one reader.
        let result = unsafe { take(inner.as_ref(), state) };
        // SAFETY: the sender is gone and the slot empty.
        unsafe { free(inner) };
        result
    }
}

impl<T> Drop for Receiver<T> {
    /// Dropped without receiving: a value already sent is dropped; a later `send` fails.
    fn drop(&mut self) {
        let inner = self.inner;
        // (Never a waiter here: a receiver that waits is inside `recv`, which consumed it.)
        // SAFETY: live while this half is.
        match unsafe { inner.as_ref() }.state.swap(RECEIVER_GONE, Ordering::AcqRel) {
            EMPTY => {}
            // SAFETY: the sender is done (seen by the swap) and the value ours to drop.
            SENT => unsafe {
                (*(*inner.as_ptr()).value.get()).assume_init_drop();
                free(inner);
            },
            // SAFETY: the sender is gone and nothing was sent.
            _ => unsafe { free(inner) },
        }
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("oneshot::Receiver { .. }")
    }
}

/// [`Receiver::try_recv`]'s error.
pub enum TryRecvError<T> {
    /// Nothing sent yet: the receiver, to try again or wait with.
    Empty(Receiver<T>),
    /// The sender was dropped without sending.
    Disconnected,
}

impl<T> fmt::Debug for TryRecvError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryRecvError::Empty(_) => f.write_str("Empty(..)"),
            TryRecvError::Disconnected => f.write_str("Disconnected"),
        }
    }
}

impl<T> fmt::Display for TryRecvError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryRecvError::Empty(_) => f.write_str("nothing sent on the one-shot channel yet"),
            TryRecvError::Disconnected => f.write_str("receiving on a one-shot channel whose sender is gone"),
        }
    }
}

impl<T> core::error::Error for TryRecvError<T> {}

/// [`Receiver::recv_timeout`]'s error.
pub enum RecvTimeoutError<T> {
    /// Nothing came in time: the receiver, to wait again with.
    Timeout(Receiver<T>),
    /// The sender was dropped without sending.
    Disconnected,
}

impl<T> fmt::Debug for RecvTimeoutError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecvTimeoutError::Timeout(_) => f.write_str("Timeout(..)"),
            RecvTimeoutError::Disconnected => f.write_str("Disconnected"),
        }
    }
}

impl<T> fmt::Display for RecvTimeoutError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecvTimeoutError::Timeout(_) => f.write_str("timed out waiting on a one-shot channel"),
            RecvTimeoutError::Disconnected => f.write_str("receiving on a one-shot channel whose sender is gone"),
        }
    }
}

impl<T> core::error::Error for RecvTimeoutError<T> {}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use alloc::sync::Arc;
    use core::sync::atomic::AtomicUsize as Count;

    /// Counts its drops.
    struct Tracked(Arc<Count>);
    impl Drop for Tracked {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_value_sent_before_the_receive_arrives() {
        crate::run(1, || {
            let (tx, rx) = channel();
            tx.send(5).unwrap();
            assert_eq!(rx.recv(), Ok(5));
        });
    }

    #[test]
    fn a_waiting_receiver_is_woken_by_the_send() {
        crate::run(1, || {
            let (tx, rx) = channel();
            let sender = crate::spawn(move || tx.send(String::from("reply")).unwrap());
            assert_eq!(rx.recv().as_deref(), Ok("reply"));
            sender.join().unwrap();
        });
    }

    #[test]
    fn a_sender_dropped_unsent_ends_the_wait() {
        crate::run(2, || {
            let (tx, rx) = channel::<u32>();
            let dropper = crate::spawn(move || drop(tx));
            assert_eq!(rx.recv(), Err(RecvError));
            dropper.join().unwrap();
        });
    }

    #[test]
    fn a_send_to_a_dropped_receiver_gives_the_value_back() {
        crate::run(1, || {
            let (tx, rx) = channel();
            assert!(!tx.is_closed());
            drop(rx);
            assert!(tx.is_closed());
            assert_eq!(tx.send(7), Err(SendError(7)));
        });
    }

    #[test]
    fn try_recv_gives_the_receiver_back_until_the_value_is_there() {
        crate::run(1, || {
            let (tx, rx) = channel();
            let rx = match rx.try_recv() {
                Err(TryRecvError::Empty(rx)) => rx,
                other => panic!("expected Empty, got {other:?}"),
            };
            tx.send(3).unwrap();
            assert_eq!(rx.try_recv().ok(), Some(3));
            let (tx, rx) = channel::<u32>();
            drop(tx);
            assert!(matches!(rx.try_recv(), Err(TryRecvError::Disconnected)));
        });
    }

    #[test]
    fn every_value_is_dropped_exactly_once() {
        let drops = Arc::new(Count::new(0));
        let d = drops.clone();
        crate::run(1, move || {
            // Sent and received: dropped by the receiver's owner.
            let (tx, rx) = channel();
            tx.send(Tracked(d.clone())).unwrap();
            drop(rx.recv().unwrap());
            // Sent, never received: dropped with the receiver.
            let (tx, rx) = channel();
            tx.send(Tracked(d.clone())).unwrap();
            drop(rx);
            // Sent to a dropped receiver: comes back, dropped by the sender's owner.
            let (tx, rx) = channel();
            drop(rx);
            drop(tx.send(Tracked(d.clone())));
        });
        assert_eq!(drops.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn recv_timeout_times_out_then_receives() {
        crate::run(2, || {
            let (tx, rx) = channel();
            let rx = match rx.recv_timeout(core::time::Duration::from_millis(5)) {
                Err(RecvTimeoutError::Timeout(rx)) => rx,
                other => panic!("expected Timeout, got {other:?}"),
            };
            let sender = crate::spawn(move || {
                crate::sleep(core::time::Duration::from_millis(2));
                tx.send(9).unwrap();
            });
            assert_eq!(rx.recv_timeout(core::time::Duration::from_secs(60)).ok(), Some(9));
            sender.join().unwrap();
            let (tx, rx) = channel::<u32>();
            drop(tx);
            assert!(matches!(rx.recv_timeout(core::time::Duration::from_secs(60)), Err(RecvTimeoutError::Disconnected)));
        });
    }

    /// Sends racing the watchdog's cancel across 4 vCPUs: each value arrives exactly once,
    /// through the timed receive or the plain one after its time-out.
    #[test]
    fn recv_timeout_racing_sends_loses_nothing() {
        let (timely, late) = crate::run(4, || {
            let (mut timely, mut late) = (0u64, 0u64);
            for i in 0..300u64 {
                let (tx, rx) = channel();
                let sender = crate::spawn(move || {
                    for _ in 0..(i % 4) {
                        crate::yield_now();
                    }
                    tx.send(i).unwrap();
                });
                match rx.recv_timeout(core::time::Duration::from_micros(i % 50)) {
                    Ok(v) => {
                        assert_eq!(v, i);
                        timely += 1;
                    }
                    Err(RecvTimeoutError::Timeout(rx)) => {
                        assert_eq!(rx.recv(), Ok(i));
                        late += 1;
                    }
                    Err(RecvTimeoutError::Disconnected) => panic!("request {i}: disconnected"),
                }
                sender.join().unwrap();
            }
            (timely, late)
        });
        assert_eq!(timely + late, 300);
    }

    #[test]
    fn ask_gets_the_reply_or_an_error() {
        crate::run(2, || {
            let (requests, inbox) = crate::mpsc::channel::<(u32, Sender<u32>)>();
            let server = crate::spawn(move || {
                for (n, reply) in inbox {
                    match n {
                        // Dropped unsent.
                        0 => drop(reply),
                        // Answered later, after the asker blocked.
                        1 => {
                            crate::yield_now();
                            reply.send(10).unwrap();
                        }
                        n => reply.send(n * 2).unwrap(),
                    }
                }
            });
            assert_eq!(ask(|reply| requests.send((21, reply))), Ok(42));
            assert_eq!(ask(|reply| requests.send((0, reply))), Err(RecvError));
            assert_eq!(ask(|reply| requests.send((1, reply))), Ok(10));
            // Answered inside `request`, before the wait.
            assert_eq!(ask(|reply| reply.send(String::from("now")).unwrap()).as_deref(), Ok("now"));
            drop(requests);
            server.join().unwrap();
            // A request that never left: the sender comes back in the error and is dropped.
            let (requests, inbox) = crate::mpsc::channel::<Sender<u32>>();
            drop(inbox);
            assert_eq!(ask(|reply| requests.send(reply)), Err(RecvError));
        });
    }

    #[test]
    fn ask_hands_the_reply_over_undropped() {
        let drops = Arc::new(Count::new(0));
        let d = drops.clone();
        crate::run(1, move || {
            let value = ask(|reply| reply.send(Tracked(d.clone())).is_ok()).unwrap();
            assert_eq!(d.load(Ordering::Relaxed), 0);
            drop(value);
        });
        assert_eq!(drops.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn ask_outside_a_user_thread_panics_before_the_request() {
        let asked = std::panic::catch_unwind(|| ask::<u32, ()>(|_| unreachable!("the request ran")));
        let message = asked.unwrap_err().downcast::<&str>().map(|m| *m).unwrap_or("?");
        assert!(message.contains("outside a user thread"), "{message}");
    }

    /// A request whose `request` panics after the sender went to a server: the unwinding
    /// `ask` waits for the reply before its frame goes, and drops it (hosted: panics unwind).
    #[test]
    fn ask_unwinding_waits_for_the_sender() {
        let drops = Arc::new(Count::new(0));
        let d = drops.clone();
        crate::run(2, move || {
            let (requests, inbox) = crate::mpsc::channel::<Sender<Tracked>>();
            let server = crate::spawn(move || {
                for reply in inbox {
                    crate::yield_now();
                    let _ = reply.send(Tracked(d.clone()));
                }
            });
            let asked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                ask(|reply| {
                    requests.send(reply).unwrap();
                    panic!("after the request");
                })
            }));
            assert!(asked.is_err());
            drop(requests);
            server.join().unwrap();
        });
        assert_eq!(drops.load(Ordering::Relaxed), 1);
    }

    /// Many replies across 4 vCPUs, each receiver racing its sender (half of them asking):
    /// every value arrives once.
    #[test]
    fn replies_across_vcpus_all_arrive() {
        let total = crate::run(4, || {
            let (requests, inbox) = crate::mpmc::channel::<(u64, Sender<u64>)>();
            let servers: Vec<_> = (0..2)
                .map(|_| {
                    let inbox = inbox.clone();
                    crate::spawn(move || {
                        while let Ok((n, reply)) = inbox.recv() {
                            let _ = reply.send(n + 1);
                        }
                    })
                })
                .collect();
            drop(inbox);
            let clients: Vec<_> = (0..8u64)
                .map(|c| {
                    let requests = requests.clone();
                    crate::spawn(move || {
                        (0..200u64)
                            .map(|i| {
                                let n = c * 1000 + i;
                                // Half the clients wait on a slot in their frame (`ask`).
                                let answer = if c % 2 == 0 {
                                    let (reply, answer) = channel();
                                    requests.send((n, reply)).unwrap();
                                    answer.recv()
                                } else {
                                    ask(|reply| requests.send((n, reply)).unwrap())
                                };
                                answer.unwrap() - n
                            })
                            .sum::<u64>()
                    })
                })
                .collect();
            drop(requests);
            let total = clients.into_iter().map(|c| c.join().unwrap()).sum::<u64>();
            for s in servers {
                s.join().unwrap();
            }
            total
        });
        assert_eq!(total, 8 * 200);
    }
}
