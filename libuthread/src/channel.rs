//! Channels between user threads: [`mpsc`] (`std::sync::mpsc`'s shape) and [`mpmc`] (cloneable
//! receivers), both bounded and unbounded, over one core.
//!
//! The core hands values over directly where it can: a sender that finds a receiver waiting
//! puts the value into the receiver's slot and wakes it; a receiver that frees room in a full
//! bounded channel moves the first waiting sender's value in and wakes it. A bound of 0 makes
//! a rendezvous channel (a send completes when a receiver takes the value). Wait nodes live on
//! the waiting threads' stacks, so waiting allocates nothing.

use alloc::collections::VecDeque;
use alloc::sync::Arc;
use core::fmt;
#[cfg(not(loom))]
use core::time::Duration;

use crate::sched::blocking::{self, WaitList, WaitNode, Waiter};
use crate::spin::{Critical, SpinGuard, SpinLock};
#[cfg(not(loom))]
use crate::sync::timed;

/// What a waiting receiver or sender carries.
struct Slot<T>(Option<T>);

struct State<T> {
    buffer: VecDeque<T>,
    /// `None`: unbounded.
    bound: Option<usize>,
    senders: usize,
    receivers: usize,
    /// Receivers waiting with an empty slot.
    receiving: WaitList<Slot<T>>,
    /// Senders waiting with their value in the slot (taken by a receiver).
    sending: WaitList<Slot<T>>,
}

struct Chan<T> {
    state: SpinLock<State<T>>,
    /// `state.bound` is `None` (set once at creation): a send never waits, so it needs no
    /// `blocking::block` (see [`Chan::send_unbounded`]).
    unbounded: bool,
}

impl<T> Chan<T> {
    fn new(bound: Option<usize>) -> Arc<Chan<T>> {
        Arc::new(Chan {
            state: SpinLock::new(State {
                buffer: VecDeque::new(),
                bound,
                senders: 1,
                receivers: 1,
                receiving: WaitList::new(),
                sending: WaitList::new(),
            }),
            unbounded: bound.is_none(),
        })
    }

    /// Sends `value`, waiting for room when `block`; gives it back when it cannot be sent.
    /// Inlined: only the choice between the unbounded and the bounded send, each a function
    /// of its own (so the unbounded hand-off pays no frame for the bounded one's wait node).
    #[inline(always)]
    fn send(&self, value: T, block: bool) -> Result<(), TrySendError<T>> {
        if self.unbounded {
            return self.send_unbounded(value);
        }
        self.send_bounded(value, block)
    }

    /// `send` on a bounded channel (see [`Chan::send`]).
    #[inline(never)]
    fn send_bounded(&self, value: T, block: bool) -> Result<(), TrySendError<T>> {
        let mut node = WaitNode::new(Slot(Some(value)));
        let mut outcome = Ok(());
        let mut waited = false;
        blocking::block(|me| self.publish_send(&mut node, me, block, &mut outcome, &mut waited));
        Self::sent(&mut node, outcome, waited)
    }

    /// `send` on an unbounded channel, which never waits: hands the value to a waiting receiver
    /// or buffers it, inside a plain critical section — no `blocking::block` (no park-state
    /// stores, no wait node to fill and empty). A receiver found waiting is woken with
    /// `blocking::wake_from_leave`, as in [`Chan::hand_off`]: it goes on this vCPU's own queue,
    /// and the wake ends the critical section by tail calls, so this hand-off — the common
    /// case, tested first — makes no call of its own; buffering and disconnection are
    /// [`Chan::send_unbounded_rest`].
    #[inline(never)]
    fn send_unbounded(&self, value: T) -> Result<(), TrySendError<T>> {
        // By a user thread (the common case) inline, where its `Critical` is known to name it
        // (so the wake-up's test of it folds away); otherwise the same steps out of line.
        match Critical::enter_sorted() {
            Ok(critical) => self.send_unbounded_in(critical, value),
            Err(critical) => self.send_unbounded_outside(critical, value),
        }
    }

    /// [`Chan::send_unbounded`] when no user thread entered the critical section.
    #[inline(never)]
    fn send_unbounded_outside(&self, critical: Critical, value: T) -> Result<(), TrySendError<T>> {
        self.send_unbounded_in(critical, value)
    }

    /// [`Chan::send_unbounded`] inside the critical section `critical`, which it ends.
    #[inline(always)]
    fn send_unbounded_in(&self, critical: Critical, value: T) -> Result<(), TrySendError<T>> {
        // SAFETY: inside `critical` (LTN = 0), left below after the guard is dropped.
        let mut state = unsafe { self.state.lock_in_critical() };
        let receiver = state.receiving.front();
        // A queued receiver is a live `Receiver` inside `recv` (its node is taken off before
        // that returns, and a borrowed receiver cannot be dropped), so `receivers` is not 0
        // then: not tested again on the hand-off (x86_64 -icount: two instructions per send).
        if receiver.is_null() {
            return Self::send_unbounded_rest(state, critical, value);
        }
        debug_assert!(state.receivers != 0);
        state.receiving.pop_front();
        // SAFETY: taken off the list just now, so live until we wake it, and ours.
        let waiter = unsafe { Self::fill_receiver(receiver, value) };
        drop(state);
        // SAFETY: we took the node off the list, so the wake-up is ours; `critical` was entered
        // by the calling thread (null: none, then a plain wake), and this call ends it.
        unsafe { blocking::wake_from_leave(critical.waiter(), waiter) };
        Ok(())
    }

    /// Puts `value` straight into the slot of the waiting receiver `receiver` and returns the
    /// receiver to wake. The slot is empty (`queue_receiver` wrote it so, and only the sender
    /// that takes the node off writes it), so it is written without dropping what was there:
    /// the hand-off carries no drop code for a `T` (x86_64 -icount, a `T` with drop glue: a
    /// load and a test per send, and its frame four callee-saved registers).
    ///
    /// # Safety
    /// The caller took `receiver` off the receiving list and owns its wake-up.
    #[inline(always)]
    unsafe fn fill_receiver(receiver: *mut WaitNode<Slot<T>>, value: T) -> Waiter {
        // SAFETY: per the contract, the node is live and ours until woken.
        unsafe {
            debug_assert!((*receiver).data.0.is_none());
            core::ptr::write(&raw mut (*receiver).data.0, Some(value));
            (*receiver).waiter
        }
    }

    /// [`Chan::send_unbounded`] when no receiver waits (buffer the value) or none is left
    /// (give it back). Ends the critical section.
    #[inline(never)]
    fn send_unbounded_rest(mut state: SpinGuard<'_, State<T>>, mut critical: Critical, value: T) -> Result<(), TrySendError<T>> {
        if state.receivers == 0 {
            drop(state);
            critical.leave();
            return Err(TrySendError::Disconnected(value));
        }
        state.buffer.push_back(value);
        drop(state);
        critical.leave();
        Ok(())
    }

    /// Wakes the thread a publish step handed a value to (or took one from), from inside that
    /// step — `block`'s critical section, entered by `me` — once the channel's lock is dropped:
    /// the woken thread goes on this vCPU's own queue (no lock, no fence, no second critical
    /// section), where it runs as soon as this thread blocks or yields — the hand-off of a
    /// message to its waiter (`blocking::wake_from`).
    #[inline(always)]
    fn hand_off(state: SpinGuard<'_, State<T>>, me: Waiter, waiter: Waiter) {
        drop(state);
        // SAFETY: the publish step took the waiter's node off its list, so this wake-up is
        // ours (the node stays live until it); `me` entered the critical section we are in.
        unsafe { blocking::wake_from(me, waiter) };
    }

    /// A send's outcome once it no longer waits.
    #[inline(always)]
    fn sent(node: &mut WaitNode<Slot<T>>, outcome: Result<(), TrySendError<T>>, waited: bool) -> Result<(), TrySendError<T>> {
        if waited {
            // A receiver took the value, or the channel lost its receivers and left it here.
            if let Some(value) = node.data.0.take() {
                return Err(TrySendError::Disconnected(value));
            }
        }
        outcome
    }

    /// Sends `value`, waiting for room until `deadline` (`platform::now_nanos` time).
    #[cfg(not(loom))]
    fn send_until(&self, value: T, deadline: u64) -> Result<(), SendTimeoutError<T>> {
        let value = match self.send(value, false) {
            Err(TrySendError::Full(value)) if !timed::expired(deadline) => value,
            Err(TrySendError::Full(value)) => return Err(SendTimeoutError::Timeout(value)),
            Err(TrySendError::Disconnected(value)) => return Err(SendTimeoutError::Disconnected(value)),
            Ok(()) => return Ok(()),
        };
        let mut node = WaitNode::new(Slot(Some(value)));
        let node: *mut WaitNode<Slot<T>> = &mut node;
        let mut outcome = Ok(());
        let mut waited = false;
        // SAFETY: `node` is the one `publish_send` queues on `sending`.
        let cancel = || unsafe { timed::unlink_and_wake(self.state.lock(), sending::<T>, node) };
        // SAFETY (both derefs): the node lives on this stack until `block_until` returns.
        let timed_out = timed::block_until(deadline, |me| self.publish_send(unsafe { &mut *node }, me, true, &mut outcome, &mut waited), &cancel);
        // SAFETY: as above; nobody else touches the node any more.
        let node = unsafe { &mut *node };
        if timed_out {
            return Err(SendTimeoutError::Timeout(node.data.0.take().expect("a cancelled send keeps its value")));
        }
        Self::sent(node, outcome, waited).map_err(|e| match e {
            TrySendError::Disconnected(v) | TrySendError::Full(v) => SendTimeoutError::Disconnected(v),
        })
    }

    /// `send`'s publish step: hands the node's value over, buffers it, or (when `block`)
    /// queues the node. Returns whether the caller must wait. Runs only as a `block` publish
    /// step (inside its critical section).
    #[inline(always)]
    fn publish_send(
        &self,
        node: &mut WaitNode<Slot<T>>,
        me: Waiter,
        block: bool,
        outcome: &mut Result<(), TrySendError<T>>,
        waited: &mut bool,
    ) -> bool {
        // SAFETY: a publish step runs inside `block`'s critical section.
        let mut state = unsafe { self.state.lock_in_critical() };
        let value = node.data.0.take().expect("value");
        if state.receivers == 0 {
            *outcome = Err(TrySendError::Disconnected(value));
            return false;
        }
        let receiver = state.receiving.pop_front();
        if !receiver.is_null() {
            // SAFETY: taken off the list just now, so live until we wake it, and ours.
            let waiter = unsafe { Self::fill_receiver(receiver, value) };
            Self::hand_off(state, me, waiter);
            return false;
        }
        if state.bound.is_none_or(|bound| state.buffer.len() < bound) {
            state.buffer.push_back(value);
            return false;
        }
        if !block {
            *outcome = Err(TrySendError::Full(value));
            return false;
        }
        node.data.0 = Some(value);
        node.waiter = me;
        // SAFETY: the node lives on the sender's stack until a receiver (or the last
        // receiver's drop, or a timed send's watchdog) takes it off and wakes it.
        unsafe { state.sending.push_back(node) };
        *waited = true;
        true
    }

    /// Receives a value, waiting for one when `block`.
    ///
    /// The wait node is written only by the publish step that queues it (no stores of a null
    /// waiter, link and slot before `block`'s checks), and `outcome` stays `None` exactly when
    /// it queued it: then the value (or, left empty, the disconnection) is in the node's slot.
    ///
    /// Inlined: only the choice between a receive that may wait and one that may not, each a
    /// function of its own, so the waiting receive's publish step does not test `block`
    /// (x86_64 -icount: two instructions per receive that waits).
    #[inline(always)]
    fn recv(&self, block: bool) -> Result<T, TryRecvError> {
        if block {
            return self.recv_wait();
        }
        self.recv_now()
    }

    /// [`Chan::recv`] that may wait.
    #[inline(never)]
    fn recv_wait(&self) -> Result<T, TryRecvError> {
        self.recv_as(true)
    }

    /// [`Chan::recv`] that may not wait.
    #[inline(never)]
    fn recv_now(&self) -> Result<T, TryRecvError> {
        self.recv_as(false)
    }

    /// The body of [`Chan::recv`], for a `block` known where it is inlined.
    #[inline(always)]
    fn recv_as(&self, block: bool) -> Result<T, TryRecvError> {
        let mut node = core::mem::MaybeUninit::<WaitNode<Slot<T>>>::uninit();
        let mut outcome = None;
        // (`block_waited`: on the waiting path `outcome` is known to be `None`, so it is not
        // looked at again — x86_64 -icount: three instructions fewer per receive that waits.)
        // (`block_direct`: when the publish step queues the receiver it wakes nobody; it wakes
        // a sender only when it takes a value, and then it does not wait.)
        if blocking::block_direct(|me| self.publish_recv(node.as_mut_ptr(), me, block, &mut outcome)) {
            // SAFETY: the publish step queued the node (it returned `true`: `outcome` is still
            // `None`); `block_waited` returned, so whoever took it off has woken us and is done
            // with it.
            return unsafe { (*node.as_mut_ptr()).data.0.take() }.ok_or(TryRecvError::Disconnected);
        }
        match outcome {
            Some(result) => result,
            // `publish_recv` sets `outcome` whenever it returns `false`.
            None => unreachable!("libuthread: a receive that did not wait has no outcome"),
        }
    }

    /// Receives a value, waiting for one until `deadline` (`platform::now_nanos` time).
    #[cfg(not(loom))]
    fn recv_until(&self, deadline: u64) -> Result<T, RecvTimeoutError> {
        match self.recv(false) {
            Err(TryRecvError::Empty) if !timed::expired(deadline) => {}
            Err(TryRecvError::Empty) => return Err(RecvTimeoutError::Timeout),
            Err(TryRecvError::Disconnected) => return Err(RecvTimeoutError::Disconnected),
            Ok(value) => return Ok(value),
        }
        // Initialised here (the cancel below may look at it whether or not it was queued);
        // `publish_recv` writes it again when it queues it.
        let mut node: WaitNode<Slot<T>> = WaitNode::new(Slot(None));
        let node: *mut WaitNode<Slot<T>> = &mut node;
        let mut outcome = None;
        // SAFETY: `node` is the one `publish_recv` queues on `receiving`.
        let cancel = || unsafe { timed::unlink_and_wake(self.state.lock(), receiving::<T>, node) };
        let timed_out = timed::block_until(deadline, |me| self.publish_recv(node, me, true, &mut outcome), &cancel);
        if timed_out {
            // Cancelled while queued: no sender reached the slot.
            return Err(RecvTimeoutError::Timeout);
        }
        match outcome {
            Some(result) => result.map_err(|_| RecvTimeoutError::Disconnected),
            // SAFETY: the node lives on this stack until here; it was queued (`outcome` is
            // `None`) and whoever took it off has woken us, so nobody else touches it.
            None => unsafe { (*node).data.0.take() }.ok_or(RecvTimeoutError::Disconnected),
        }
    }

    /// `recv`'s publish step: takes a buffered or a waiting sender's value (`outcome` set), or
    /// (when `block`) writes and queues the node at `node` (`outcome` left `None`), or reports
    /// the channel empty or disconnected (`outcome` set). Returns whether the caller must wait.
    /// Runs only as a `block` publish step (inside its critical section), once.
    #[inline(always)]
    fn publish_recv(&self, node: *mut WaitNode<Slot<T>>, me: Waiter, block: bool, outcome: &mut Option<Result<T, TryRecvError>>) -> bool {
        // SAFETY: a publish step runs inside `block`'s critical section.
        let state = unsafe { self.state.lock_in_critical() };
        // The waiting case first, tested on the words themselves (nothing buffered, no sender
        // waiting, senders left, a blocking receive): queue the node, with no call and no
        // callee-saved register kept for the other cases, which `publish_recv_rest` takes.
        if state.buffer.is_empty() && state.sending.is_empty() && state.senders != 0 && block {
            // SAFETY: `node` is the caller's node memory, on its stack until `block` returns.
            unsafe { Self::queue_receiver(state, node, me) };
            return true;
        }
        // Never waits: so the caller's waiting path (`block_direct`'s switch, decided before
        // this step) keeps nothing in a callee-saved register across this call.
        Self::publish_recv_rest(state, me, block, outcome);
        false
    }

    /// Writes the waiting receiver `me`'s node (an empty slot) at `node` and queues it.
    ///
    /// # Safety
    /// `node` is writable memory for a node on the receiver's stack, staying there until a
    /// sender (or the last sender's drop, or a timed receive's watchdog) takes it off and
    /// wakes the receiver; it holds no value to drop.
    #[inline(always)]
    unsafe fn queue_receiver(mut state: SpinGuard<'_, State<T>>, node: *mut WaitNode<Slot<T>>, me: Waiter) {
        // SAFETY: per the contract (a plain write: nothing there needs dropping).
        unsafe {
            node.write(WaitNode::waiting(me, Slot(None)));
            state.receiving.push_back(node);
        }
    }

    /// [`Chan::publish_recv`] when the receive need not wait, or may not: takes a buffered or
    /// a waiting sender's value, or reports the channel empty or disconnected (`outcome` set
    /// in every case). Called only when `publish_recv`'s test for waiting failed, which is
    /// exactly the condition of the cases here, so it never queues the receiver.
    #[inline(never)]
    fn publish_recv_rest(mut state: SpinGuard<'_, State<T>>, me: Waiter, block: bool, outcome: &mut Option<Result<T, TryRecvError>>) {
        if let Some(value) = state.buffer.pop_front() {
            // Room freed: move the first waiting sender's value in.
            let sender = state.sending.pop_front();
            if !sender.is_null() {
                // SAFETY: the sender's node is live until woken; we own the wake-up.
                let waiter = unsafe {
                    let moved = (*sender).data.0.take().expect("sender value");
                    state.buffer.push_back(moved);
                    (*sender).waiter
                };
                *outcome = Some(Ok(value));
                Self::hand_off(state, me, waiter);
                return;
            }
            *outcome = Some(Ok(value));
            return;
        }
        let sender = state.sending.pop_front();
        if !sender.is_null() {
            // Rendezvous: take the value from the waiting sender.
            // SAFETY: as above.
            let waiter = unsafe {
                *outcome = Some(Ok((*sender).data.0.take().expect("sender value")));
                (*sender).waiter
            };
            Self::hand_off(state, me, waiter);
            return;
        }
        if state.senders == 0 {
            *outcome = Some(Err(TryRecvError::Disconnected));
            return;
        }
        if block {
            // Nothing buffered, no sender waiting, senders left: `publish_recv` queues then.
            unreachable!("libuthread: publish_recv_rest for a receive that must wait");
        }
        *outcome = Some(Err(TryRecvError::Empty));
    }

    fn add_sender(&self) {
        self.state.lock().senders += 1;
    }

    fn add_receiver(&self) {
        self.state.lock().receivers += 1;
    }

    fn drop_sender(&self) {
        let waiting = {
            let mut state = self.state.lock();
            state.senders -= 1;
            if state.senders > 0 {
                return;
            }
            state.receiving.take_all()
        };
        // Receivers waiting on an empty channel with no senders left: their slots stay empty.
        // SAFETY: we took them all off the list.
        unsafe { blocking::wake_all(waiting) };
    }

    fn drop_receiver(&self) {
        let (waiting, buffered) = {
            let mut state = self.state.lock();
            state.receivers -= 1;
            if state.receivers > 0 {
                return;
            }
            (state.sending.take_all(), core::mem::take(&mut state.buffer))
        };
        // Senders keep their values (their `send` reports the disconnection); buffered values
        // are dropped here, outside the lock, since dropping them may run any code.
        // SAFETY: we took them all off the list.
        unsafe { blocking::wake_all(waiting) };
        drop(buffered);
    }
}

/// The list timed senders wait on (for `timed::unlink_and_wake`).
#[cfg(not(loom))]
fn sending<T>(state: &mut State<T>) -> &mut WaitList<Slot<T>> {
    &mut state.sending
}

/// The list timed receivers wait on (for `timed::unlink_and_wake`).
#[cfg(not(loom))]
fn receiving<T>(state: &mut State<T>) -> &mut WaitList<Slot<T>> {
    &mut state.receiving
}

/// The value could not be sent: every receiver is gone. Carries the value back.
#[derive(PartialEq, Eq, Clone, Copy)]
pub struct SendError<T>(pub T);

/// Why a non-blocking send failed. Carries the value back.
#[derive(PartialEq, Eq, Clone, Copy)]
pub enum TrySendError<T> {
    /// The channel is full (or, for a bound of 0, no receiver is waiting).
    Full(T),
    /// Every receiver is gone.
    Disconnected(T),
}

/// Nothing can be received any more: the channel is empty and every sender is gone.
#[derive(PartialEq, Eq, Clone, Copy, Debug)]
pub struct RecvError;

/// Why a non-blocking receive failed.
#[derive(PartialEq, Eq, Clone, Copy, Debug)]
pub enum TryRecvError {
    /// Nothing buffered right now.
    Empty,
    /// Empty, and every sender is gone.
    Disconnected,
}

impl<T> fmt::Debug for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SendError { .. }")
    }
}
impl<T> fmt::Display for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("sending on a closed channel")
    }
}
impl<T> core::error::Error for SendError<T> {}

impl<T> fmt::Debug for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::Full(_) => f.write_str("Full(..)"),
            TrySendError::Disconnected(_) => f.write_str("Disconnected(..)"),
        }
    }
}
impl<T> fmt::Display for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::Full(_) => f.write_str("sending on a full channel"),
            TrySendError::Disconnected(_) => f.write_str("sending on a closed channel"),
        }
    }
}
impl<T> core::error::Error for TrySendError<T> {}

/// Why a receive with a time-out failed (std's `RecvTimeoutError`).
#[derive(PartialEq, Eq, Clone, Copy, Debug)]
pub enum RecvTimeoutError {
    /// Nothing arrived before the time ran out.
    Timeout,
    /// Empty, and every sender is gone.
    Disconnected,
}

/// Why a send with a time-out failed (std's `SendTimeoutError`). Carries the value back.
#[derive(PartialEq, Eq, Clone, Copy)]
pub enum SendTimeoutError<T> {
    /// No room (or, for a bound of 0, no receiver) before the time ran out.
    Timeout(T),
    /// Every receiver is gone.
    Disconnected(T),
}

impl fmt::Display for RecvTimeoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecvTimeoutError::Timeout => f.write_str("timed out waiting on channel"),
            RecvTimeoutError::Disconnected => f.write_str("channel is empty and sending half is closed"),
        }
    }
}
impl core::error::Error for RecvTimeoutError {}

impl From<RecvError> for RecvTimeoutError {
    fn from(_: RecvError) -> Self {
        RecvTimeoutError::Disconnected
    }
}

impl From<RecvError> for TryRecvError {
    fn from(_: RecvError) -> Self {
        TryRecvError::Disconnected
    }
}

impl<T> From<SendError<T>> for TrySendError<T> {
    fn from(SendError(value): SendError<T>) -> Self {
        TrySendError::Disconnected(value)
    }
}

impl<T> From<SendError<T>> for SendTimeoutError<T> {
    fn from(SendError(value): SendError<T>) -> Self {
        SendTimeoutError::Disconnected(value)
    }
}

impl<T> fmt::Debug for SendTimeoutError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendTimeoutError::Timeout(_) => f.write_str("Timeout(..)"),
            SendTimeoutError::Disconnected(_) => f.write_str("Disconnected(..)"),
        }
    }
}
impl<T> fmt::Display for SendTimeoutError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendTimeoutError::Timeout(_) => f.write_str("timed out waiting on send operation"),
            SendTimeoutError::Disconnected(_) => f.write_str("sending on a closed channel"),
        }
    }
}
impl<T> core::error::Error for SendTimeoutError<T> {}

impl fmt::Display for RecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("receiving on a closed channel")
    }
}
impl core::error::Error for RecvError {}

impl fmt::Display for TryRecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryRecvError::Empty => f.write_str("receiving on an empty channel"),
            TryRecvError::Disconnected => f.write_str("receiving on a closed channel"),
        }
    }
}
impl core::error::Error for TryRecvError {}

fn blocking_send<T>(chan: &Chan<T>, value: T) -> Result<(), SendError<T>> {
    chan.send(value, true).map_err(|e| match e {
        TrySendError::Disconnected(v) | TrySendError::Full(v) => SendError(v),
    })
}

fn blocking_recv<T>(chan: &Chan<T>) -> Result<T, RecvError> {
    chan.recv(true).map_err(|_| RecvError)
}

/// What std gives both kinds of receiver beyond `recv`/`try_recv`/`iter`: `recv_timeout`,
/// `try_iter` and `IntoIterator` (by reference and owning), written once for [`mpsc`] and
/// [`mpmc`].
#[cfg(not(loom))]
macro_rules! receiver_extras {
    () => {
        impl<T> Receiver<T> {
            /// Receives a value, waiting at most `timeout` for one (std's `recv_timeout`).
            ///
            /// ```
            /// use std::time::Duration;
            /// use libuthread::mpsc::{self, RecvTimeoutError};
            /// libuthread::run(1, || {
            ///     let (tx, rx) = mpsc::channel::<i32>();
            ///     assert_eq!(rx.recv_timeout(Duration::from_millis(2)), Err(RecvTimeoutError::Timeout));
            ///     tx.send(1).unwrap();
            ///     assert_eq!(rx.recv_timeout(Duration::from_millis(2)), Ok(1));
            ///     drop(tx);
            ///     assert_eq!(rx.recv_timeout(Duration::from_secs(60)), Err(RecvTimeoutError::Disconnected));
            /// });
            /// ```
            pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
                self.chan.recv_until(timed::deadline_after(timeout))
            }

            /// Iterates over the values there are right now, without waiting (std's `try_iter`).
            ///
            /// ```
            /// libuthread::run(1, || {
            ///     let (tx, rx) = libuthread::mpsc::channel();
            ///     tx.send(1).unwrap();
            ///     tx.send(2).unwrap();
            ///     assert_eq!(rx.try_iter().collect::<Vec<_>>(), [1, 2]);
            ///     assert_eq!(rx.try_iter().count(), 0); // the sender lives, but nothing is there
            /// });
            /// ```
            pub fn try_iter(&self) -> TryIter<'_, T> {
                TryIter { receiver: self }
            }
        }

        /// Non-blocking iterator of [`Receiver::try_iter`].
        #[derive(Debug)]
        pub struct TryIter<'a, T> {
            receiver: &'a Receiver<T>,
        }

        impl<T> Iterator for TryIter<'_, T> {
            type Item = T;
            fn next(&mut self) -> Option<T> {
                self.receiver.try_recv().ok()
            }
        }

        impl<'a, T> IntoIterator for &'a Receiver<T> {
            type Item = T;
            type IntoIter = Iter<'a, T>;
            fn into_iter(self) -> Iter<'a, T> {
                self.iter()
            }
        }

        /// Owning blocking iterator (`for value in receiver`).
        #[derive(Debug)]
        pub struct IntoIter<T> {
            receiver: Receiver<T>,
        }

        impl<T> Iterator for IntoIter<T> {
            type Item = T;
            fn next(&mut self) -> Option<T> {
                self.receiver.recv().ok()
            }
        }

        impl<T> IntoIterator for Receiver<T> {
            type Item = T;
            type IntoIter = IntoIter<T>;
            fn into_iter(self) -> IntoIter<T> {
                IntoIter { receiver: self }
            }
        }
    };
}

/// `send_timeout` for a bounded channel's sender, written once for [`mpsc::SyncSender`] and
/// [`mpmc::Sender`].
#[cfg(not(loom))]
macro_rules! send_timeout {
    ($sender:ident) => {
        impl<T> $sender<T> {
            /// Sends a value, waiting at most `timeout` for room (std's `send_timeout`); on
            /// failure the value comes back in the error.
            ///
            /// ```
            /// use std::time::Duration;
            /// libuthread::run(1, || {
            ///     let (tx, rx) = libuthread::mpmc::sync_channel(1);
            ///     tx.send_timeout(1, Duration::from_millis(2)).unwrap();
            ///     let full = tx.send_timeout(2, Duration::from_millis(2));
            ///     assert!(matches!(full, Err(libuthread::mpmc::SendTimeoutError::Timeout(2))));
            ///     assert_eq!(rx.recv().unwrap(), 1);
            /// });
            /// ```
            pub fn send_timeout(&self, value: T, timeout: Duration) -> Result<(), SendTimeoutError<T>> {
                self.chan.send_until(value, timed::deadline_after(timeout))
            }
        }
    };
}

/// Multi-producer, single-consumer channels, shaped like `std::sync::mpsc`.
///
/// ```
/// use libuthread::mpsc;
/// libuthread::run(2, || {
///     let (tx, rx) = mpsc::channel();
///     for i in 0..3 {
///         let tx = tx.clone();
///         libuthread::spawn(move || tx.send(i).unwrap());
///     }
///     drop(tx);
///     let mut got: Vec<i32> = rx.iter().collect();
///     got.sort();
///     assert_eq!(got, [0, 1, 2]);
/// });
/// ```
pub mod mpsc {
    use super::*;

    pub use super::{RecvError, RecvTimeoutError, SendError, SendTimeoutError, TryRecvError, TrySendError};

    /// An unbounded channel: `send` never waits.
    pub fn channel<T>() -> (Sender<T>, Receiver<T>) {
        let chan = Chan::new(None);
        (Sender { chan: chan.clone() }, Receiver { chan })
    }

    /// A channel holding at most `bound` values: `send` waits while it is full. A bound of 0
    /// makes every send wait for a receiver (rendezvous).
    ///
    /// ```
    /// use libuthread::mpsc;
    /// libuthread::run(1, || {
    ///     let (tx, rx) = mpsc::sync_channel(1);
    ///     tx.send(1).unwrap();
    ///     assert!(matches!(tx.try_send(2), Err(mpsc::TrySendError::Full(2))));
    ///     assert_eq!(rx.recv().unwrap(), 1);
    /// });
    /// ```
    pub fn sync_channel<T>(bound: usize) -> (SyncSender<T>, Receiver<T>) {
        let chan = Chan::new(Some(bound));
        (SyncSender { chan: chan.clone() }, Receiver { chan })
    }

    /// The sending half of [`channel`]; clone it for more producers.
    pub struct Sender<T> {
        chan: Arc<Chan<T>>,
    }

    impl<T> Sender<T> {
        /// Sends a value; fails only when the receiver is gone.
        pub fn send(&self, value: T) -> Result<(), SendError<T>> {
            blocking_send(&self.chan, value)
        }
    }

    impl<T> Clone for Sender<T> {
        fn clone(&self) -> Self {
            self.chan.add_sender();
            Sender { chan: self.chan.clone() }
        }
    }

    impl<T> Drop for Sender<T> {
        fn drop(&mut self) {
            self.chan.drop_sender();
        }
    }

    impl<T> fmt::Debug for Sender<T> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("Sender { .. }")
        }
    }

    /// The sending half of [`sync_channel`]; clone it for more producers.
    pub struct SyncSender<T> {
        chan: Arc<Chan<T>>,
    }

    impl<T> SyncSender<T> {
        /// Sends a value, waiting while the channel is full.
        pub fn send(&self, value: T) -> Result<(), SendError<T>> {
            blocking_send(&self.chan, value)
        }

        /// Sends a value if that needs no waiting.
        pub fn try_send(&self, value: T) -> Result<(), TrySendError<T>> {
            self.chan.send(value, false)
        }
    }

    impl<T> Clone for SyncSender<T> {
        fn clone(&self) -> Self {
            self.chan.add_sender();
            SyncSender { chan: self.chan.clone() }
        }
    }

    impl<T> Drop for SyncSender<T> {
        fn drop(&mut self) {
            self.chan.drop_sender();
        }
    }

    impl<T> fmt::Debug for SyncSender<T> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("SyncSender { .. }")
        }
    }

    /// The receiving half (one consumer: not `Clone`; see [`mpmc`](crate::mpmc) for that).
    pub struct Receiver<T> {
        chan: Arc<Chan<T>>,
    }

    impl<T> Receiver<T> {
        /// Receives a value, waiting for one; fails when the channel is empty and every sender
        /// is gone.
        pub fn recv(&self) -> Result<T, RecvError> {
            blocking_recv(&self.chan)
        }

        /// Receives a value if one is there.
        pub fn try_recv(&self) -> Result<T, TryRecvError> {
            self.chan.recv(false)
        }

        /// Iterates over received values until every sender is gone.
        pub fn iter(&self) -> Iter<'_, T> {
            Iter { receiver: self }
        }
    }

    impl<T> Drop for Receiver<T> {
        fn drop(&mut self) {
            self.chan.drop_receiver();
        }
    }

    impl<T> fmt::Debug for Receiver<T> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("Receiver { .. }")
        }
    }

    /// Blocking iterator of [`Receiver::iter`].
    #[derive(Debug)]
    pub struct Iter<'a, T> {
        receiver: &'a Receiver<T>,
    }

    impl<T> Iterator for Iter<'_, T> {
        type Item = T;
        fn next(&mut self) -> Option<T> {
            self.receiver.recv().ok()
        }
    }

    #[cfg(not(loom))]
    receiver_extras!();
    #[cfg(not(loom))]
    send_timeout!(SyncSender);
}

/// Multi-producer, multi-consumer channels: both halves can be cloned; each value goes to one
/// receiver.
///
/// ```
/// use libuthread::mpmc;
/// libuthread::run(4, || {
///     let (tx, rx) = mpmc::bounded(4);
///     let consumers: Vec<_> = (0..3)
///         .map(|_| {
///             let rx = rx.clone();
///             libuthread::spawn(move || rx.iter().count())
///         })
///         .collect();
///     drop(rx);
///     for i in 0..100 {
///         tx.send(i).unwrap();
///     }
///     drop(tx);
///     let total: usize = consumers.into_iter().map(|c| c.join().unwrap()).sum();
///     assert_eq!(total, 100);
/// });
/// ```
pub mod mpmc {
    use super::*;

    pub use super::{RecvError, RecvTimeoutError, SendError, SendTimeoutError, TryRecvError, TrySendError};

    /// An unbounded channel, under std's `mpmc` name (the same as [`unbounded`]).
    ///
    /// ```
    /// libuthread::run(1, || {
    ///     let (tx, rx) = libuthread::mpmc::channel();
    ///     tx.send(1).unwrap();
    ///     assert_eq!(rx.clone().recv().unwrap(), 1);
    /// });
    /// ```
    pub fn channel<T>() -> (Sender<T>, Receiver<T>) {
        unbounded()
    }

    /// A bounded channel, under std's `mpmc` name (the same as [`bounded`]).
    pub fn sync_channel<T>(bound: usize) -> (Sender<T>, Receiver<T>) {
        bounded(bound)
    }

    /// An unbounded channel.
    pub fn unbounded<T>() -> (Sender<T>, Receiver<T>) {
        let chan = Chan::new(None);
        (Sender { chan: chan.clone() }, Receiver { chan })
    }

    /// A channel holding at most `bound` values (0: rendezvous).
    pub fn bounded<T>(bound: usize) -> (Sender<T>, Receiver<T>) {
        let chan = Chan::new(Some(bound));
        (Sender { chan: chan.clone() }, Receiver { chan })
    }

    /// The sending half; cloneable.
    pub struct Sender<T> {
        chan: Arc<Chan<T>>,
    }

    impl<T> Sender<T> {
        /// Sends a value, waiting while a bounded channel is full; fails when every receiver
        /// is gone.
        pub fn send(&self, value: T) -> Result<(), SendError<T>> {
            blocking_send(&self.chan, value)
        }

        /// Sends a value if that needs no waiting.
        pub fn try_send(&self, value: T) -> Result<(), TrySendError<T>> {
            self.chan.send(value, false)
        }
    }

    impl<T> Clone for Sender<T> {
        fn clone(&self) -> Self {
            self.chan.add_sender();
            Sender { chan: self.chan.clone() }
        }
    }

    impl<T> Drop for Sender<T> {
        fn drop(&mut self) {
            self.chan.drop_sender();
        }
    }

    impl<T> fmt::Debug for Sender<T> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("Sender { .. }")
        }
    }

    /// The receiving half; cloneable.
    pub struct Receiver<T> {
        chan: Arc<Chan<T>>,
    }

    impl<T> Receiver<T> {
        /// Receives a value, waiting for one; fails when the channel is empty and every sender
        /// is gone.
        pub fn recv(&self) -> Result<T, RecvError> {
            blocking_recv(&self.chan)
        }

        /// Receives a value if one is there.
        pub fn try_recv(&self) -> Result<T, TryRecvError> {
            self.chan.recv(false)
        }

        /// Iterates over received values until every sender is gone.
        pub fn iter(&self) -> Iter<'_, T> {
            Iter { receiver: self }
        }
    }

    impl<T> Clone for Receiver<T> {
        fn clone(&self) -> Self {
            self.chan.add_receiver();
            Receiver { chan: self.chan.clone() }
        }
    }

    impl<T> Drop for Receiver<T> {
        fn drop(&mut self) {
            self.chan.drop_receiver();
        }
    }

    impl<T> fmt::Debug for Receiver<T> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("Receiver { .. }")
        }
    }

    /// Blocking iterator of [`Receiver::iter`].
    #[derive(Debug)]
    pub struct Iter<'a, T> {
        receiver: &'a Receiver<T>,
    }

    impl<T> Iterator for Iter<'_, T> {
        type Item = T;
        fn next(&mut self) -> Option<T> {
            self.receiver.recv().ok()
        }
    }

    #[cfg(not(loom))]
    receiver_extras!();
    #[cfg(not(loom))]
    send_timeout!(Sender);
}
