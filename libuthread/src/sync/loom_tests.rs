//! Loom model checks of the primitives' hand-off protocols, over the loom-backed blocking
//! layer (`blocking::loom_impl`): every interleaving (within a preemption bound) of the
//! threads below must keep the invariants and must not deadlock.

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;

use crate::channel::mpsc;
use crate::oneshot;
use crate::sync::{Barrier, Condvar, Mutex, RwLock};

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(f);
}

/// Two lockers: mutual exclusion holds, and a waiter that queued is handed the lock.
#[test]
fn loom_mutex_hands_off() {
    model(|| {
        let mutex = Arc::new(Mutex::new(0usize));
        let inside = Arc::new(AtomicUsize::new(0));
        let other = {
            let (mutex, inside) = (mutex.clone(), inside.clone());
            loom::thread::spawn(move || {
                let mut g = mutex.lock();
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0);
                *g += 1;
                inside.fetch_sub(1, Ordering::SeqCst);
            })
        };
        {
            let mut g = mutex.lock();
            assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0);
            *g += 1;
            inside.fetch_sub(1, Ordering::SeqCst);
        }
        other.join().unwrap();
        assert_eq!(*mutex.lock(), 2);
    });
}

/// Three lockers: the wait list guarded by the state word's `LIST` bit — two waiters queued
/// at once, lockers and an unlocker racing for the bit — keeps mutual exclusion and hands the
/// lock to every waiter (no lost wake-up, no deadlock).
#[test]
fn loom_mutex_list_bit_with_two_waiters() {
    // Three threads spinning on the bit take more branches than loom's default allows.
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.max_branches = 20_000;
    builder.check(|| {
        let mutex = Arc::new(Mutex::new(0usize));
        let others: std::vec::Vec<_> = (0..2)
            .map(|_| {
                let mutex = mutex.clone();
                loom::thread::spawn(move || *mutex.lock() += 1)
            })
            .collect();
        *mutex.lock() += 1;
        for other in others {
            other.join().unwrap();
        }
        assert_eq!(*mutex.lock(), 3);
    });
}

/// A notification sent between the waiter's check and its wait is not lost.
#[test]
fn loom_condvar_does_not_lose_a_notification() {
    model(|| {
        let pair = Arc::new((Mutex::new(false), Condvar::new()));
        let notifier = {
            let pair = pair.clone();
            loom::thread::spawn(move || {
                *pair.0.lock() = true;
                pair.1.notify_one();
            })
        };
        let guard = pair.1.wait_while(pair.0.lock(), |ready| !*ready);
        assert!(*guard);
        drop(guard);
        notifier.join().unwrap();
    });
}

/// Two threads meet at a barrier: exactly one leader, and neither passes early.
#[test]
fn loom_barrier_releases_the_batch() {
    model(|| {
        let barrier = Arc::new(Barrier::new(2));
        let arrived = Arc::new(AtomicUsize::new(0));
        let other = {
            let (barrier, arrived) = (barrier.clone(), arrived.clone());
            loom::thread::spawn(move || {
                arrived.fetch_add(1, Ordering::SeqCst);
                let leader = barrier.wait().is_leader();
                assert_eq!(arrived.load(Ordering::SeqCst), 2);
                leader
            })
        };
        arrived.fetch_add(1, Ordering::SeqCst);
        let leader = barrier.wait().is_leader();
        assert_eq!(arrived.load(Ordering::SeqCst), 2);
        let other_leader = other.join().unwrap();
        assert!(leader ^ other_leader);
    });
}

/// A shared barrier's gathering (`gather`): two waiters of one program at a round and the
/// round's last arrival. The "kernel wait" of whoever leads is modelled as waiting for the
/// round flag the last arrival sets; a waiter may join the leader's slot before or after the
/// round ended, or find the slot released and lead a gathering of its own. Every waiter
/// returns (no lost wake-up) only after the round ended, each with the outcome its leader saw,
/// and the slots are all free at the end.
#[test]
fn loom_gather_releases_every_local_waiter() {
    use super::gather::{Gather, Join};
    const WORD: usize = 8;
    fn arrive(gather: &Gather, over: &AtomicUsize) -> bool {
        match gather.join(WORD, 1) {
            Join::Done(broken) => broken,
            Join::Lead(slot) => {
                // The leader's kernel wait: until the last arrival opens the next round.
                while over.load(Ordering::Acquire) == 0 {
                    loom::thread::yield_now();
                }
                let broken = over.load(Ordering::Acquire) == 2;
                gather.release(slot, broken);
                broken
            }
            Join::Alone => unreachable!("two waiters fit the slots"),
        }
    }
    for outcome in [1, 2] {
        model(move || {
            let gather = Arc::new(Gather::new());
            let over = Arc::new(AtomicUsize::new(0));
            let waiters: std::vec::Vec<_> = (0..2)
                .map(|_| {
                    let (gather, over) = (gather.clone(), over.clone());
                    loom::thread::spawn(move || {
                        let broken = arrive(&gather, &over);
                        assert_ne!(over.load(Ordering::Acquire), 0, "released before the round ended");
                        broken
                    })
                })
                .collect();
            // The last arrival: the round is over (2: the barrier broke).
            over.store(outcome, Ordering::Release);
            for w in waiters {
                assert_eq!(w.join().unwrap(), outcome == 2);
            }
            // Every slot is free again: a new round gathers afresh.
            assert!(matches!(gather.join(WORD, 2), Join::Lead(_)));
        });
    }
}

/// A writer and a reader: the reader never sees a half-done write, and both finish.
#[test]
fn loom_rwlock_writer_and_reader() {
    model(|| {
        let lock = Arc::new(RwLock::new((0usize, 0usize)));
        let writer = {
            let lock = lock.clone();
            loom::thread::spawn(move || {
                let mut g = lock.write();
                g.0 += 1;
                g.1 += 1;
            })
        };
        {
            let g = lock.read();
            assert_eq!(g.0, g.1);
        }
        writer.join().unwrap();
        assert_eq!(*lock.read(), (1, 1));
    });
}

/// A rendezvous channel: the send completes only with the receive, and the value arrives.
#[test]
fn loom_rendezvous_channel() {
    model(|| {
        let (tx, rx) = mpsc::sync_channel::<usize>(0);
        let sender = loom::thread::spawn(move || tx.send(7).is_ok());
        assert_eq!(rx.recv().unwrap(), 7);
        assert!(sender.join().unwrap());
    });
}

/// The unbounded channel's round trip (`uthread_bench`'s `channel_round_trip`): each value is
/// handed straight into the slot of a receiver that may be queueing, waiting or not yet there
/// (`send_unbounded` racing `recv`'s publish step and `block_waited`), both ways, twice; every
/// value arrives once and in order, and neither side sleeps through its wake-up.
#[test]
fn loom_channel_round_trip_hands_off() {
    model(|| {
        let (tx, rx) = mpsc::channel::<usize>();
        let (tx2, rx2) = mpsc::channel::<usize>();
        let echo = loom::thread::spawn(move || {
            for v in rx.iter() {
                tx2.send(v + 1).unwrap();
            }
        });
        for i in 0..2 {
            tx.send(10 * i).unwrap();
            assert_eq!(rx2.recv().unwrap(), 10 * i + 1);
        }
        drop(tx);
        echo.join().unwrap();
        assert!(rx2.recv().is_err());
    });
}

/// A receiver waiting on an empty channel learns that the last sender is gone.
#[test]
fn loom_channel_disconnect_wakes_the_receiver() {
    model(|| {
        let (tx, rx) = mpsc::channel::<usize>();
        let sender = loom::thread::spawn(move || {
            tx.send(1).unwrap();
            drop(tx);
        });
        assert_eq!(rx.recv().unwrap(), 1);
        assert!(rx.recv().is_err());
        sender.join().unwrap();
    });
}

/// A one-shot reply (`oneshot`): the send races the receiver's load, its publish step's CAS
/// and its block; the receiver never sleeps through the wake-up and gets the value.
#[test]
fn loom_oneshot_send_wakes_the_receiver() {
    model(|| {
        let (tx, rx) = oneshot::channel::<usize>();
        let sender = loom::thread::spawn(move || tx.send(7).is_ok());
        assert_eq!(rx.recv(), Ok(7));
        assert!(sender.join().unwrap());
    });
}

/// A one-shot sender dropped unsent while its receiver waits (or is about to) ends the wait
/// with an error.
#[test]
fn loom_oneshot_dropped_sender_ends_the_wait() {
    model(|| {
        let (tx, rx) = oneshot::channel::<usize>();
        let dropper = loom::thread::spawn(move || drop(tx));
        assert_eq!(rx.recv(), Err(oneshot::RecvError));
        dropper.join().unwrap();
    });
}

/// A one-shot receiver dropped while its sender sends: the value is dropped exactly once —
/// with the receiver if it arrived first, else given back to the sender — and whichever half
/// is last frees the channel.
#[test]
fn loom_oneshot_dropped_receiver_and_send_race() {
    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = oneshot::channel::<Counted>();
        let value = Counted(drops.clone());
        let sender = loom::thread::spawn(move || match tx.send(value) {
            Ok(()) => true,
            Err(oneshot::SendError(back)) => {
                drop(back);
                false
            }
        });
        drop(rx);
        sender.join().unwrap();
        assert_eq!(drops.load(Ordering::Relaxed), 1);
    });
}

/// `oneshot::ask`: the asker, whose frame holds the reply's slot, waits for the sender's value
/// (sent before or after the asker blocks) and returns only once the sender is done with it.
#[test]
fn loom_oneshot_ask_waits_for_the_reply() {
    model(|| {
        let mut sender = None;
        let got = oneshot::ask(|reply| sender = Some(loom::thread::spawn(move || reply.send(7).is_ok())));
        assert_eq!(got, Ok(7));
        assert!(sender.unwrap().join().unwrap());
    });
}

/// `oneshot::ask` whose sender is dropped unsent, racing the asker's wait: the wait ends with
/// an error.
#[test]
fn loom_oneshot_ask_ends_when_the_sender_is_dropped() {
    model(|| {
        let mut dropper = None;
        let got = oneshot::ask::<usize, _>(|reply| dropper = Some(loom::thread::spawn(move || drop(reply))));
        assert_eq!(got, Err(oneshot::RecvError));
        dropper.unwrap().join().unwrap();
    });
}

/// A task record's completion (`sched::completion`, used by `join`): the completer writes a
/// value then completes; the waiter, racing it, must not sleep through the completion and must
/// see the value.
#[test]
fn loom_completion_wakes_the_waiter() {
    use crate::sched::completion::Completion;
    use loom::cell::UnsafeCell;

    struct Record {
        done: Completion,
        value: UnsafeCell<usize>,
    }
    // SAFETY: `value` is written before `complete` and read after `wait` (the protocol checked).
    unsafe impl Sync for Record {}
    // SAFETY: as above.
    unsafe impl Send for Record {}

    model(|| {
        let record = Arc::new(Record { done: Completion::new(), value: UnsafeCell::new(0) });
        let completer = {
            let record = record.clone();
            loom::thread::spawn(move || {
                record.value.with_mut(|v| unsafe { *v = 42 });
                // SAFETY: completed once, while `record` is live.
                unsafe { record.done.complete() };
            })
        };
        record.done.wait();
        assert_eq!(record.value.with(|v| unsafe { *v }), 42);
        completer.join().unwrap();
    });
}

/// The mutex's `ThreadList` links a waiting thread through its ready-queue link (`run_next`):
/// the link is written when the thread queues itself on the wait list (under the list's
/// lock), read by the unlocker that takes it off, and written again by whoever then puts the
/// thread on a ready queue — the waker after `Wake::Enqueue`, or the thread itself when its
/// commit finds it already `NOTIFIED`. Every interleaving: those accesses never race (loom's
/// cell checks), and the thread is made ready exactly once (no lost or doubled wake-up).
#[test]
fn loom_thread_list_link_is_handed_over() {
    use crate::sched::runstate::{RunState, Wake, READY, RUNNING};
    use loom::cell::UnsafeCell;
    use loom::sync::Mutex as LoomMutex;

    struct Thread {
        state: RunState,
        /// The thread's `run_next`.
        link: UnsafeCell<usize>,
    }
    // SAFETY: `link` is accessed as the protocol under test says; loom checks it.
    unsafe impl Sync for Thread {}

    model(|| {
        let t = Arc::new(Thread { state: RunState::new(), link: UnsafeCell::new(0) });
        // Whether the thread is on the wait list (the list's lock guards the link's writes
        // while it is there).
        let list = Arc::new(LoomMutex::new(false));
        let readied = Arc::new(AtomicUsize::new(0));
        t.state.set(RUNNING);

        let waker = {
            let (t, list, readied) = (t.clone(), list.clone(), readied.clone());
            loom::thread::spawn(move || {
                loop {
                    let mut on_list = list.lock().unwrap();
                    if *on_list {
                        // `pop_front`: read the link (the next waiter), unlink.
                        t.link.with(|l| unsafe { *l });
                        *on_list = false;
                        break;
                    }
                    drop(on_list);
                    loom::thread::yield_now();
                }
                if t.state.wake() == Wake::Enqueue {
                    // Onto the waker's ready queue: the link is the queue's now.
                    t.link.with_mut(|l| unsafe { *l = 0 });
                    readied.fetch_add(1, Ordering::SeqCst);
                }
            })
        };

        t.state.begin_park();
        {
            // `ThreadList::push_back` of the thread itself, under the list's lock.
            let mut on_list = list.lock().unwrap();
            t.link.with_mut(|l| unsafe { *l = 0 });
            *on_list = true;
        }
        if !t.state.commit_park() {
            // Woken before the switch: back on its own ready queue, through the same link.
            t.state.set(READY);
            t.link.with_mut(|l| unsafe { *l = 0 });
            readied.fetch_add(1, Ordering::SeqCst);
        }
        waker.join().unwrap();
        assert_eq!(readied.load(Ordering::SeqCst), 1);
    });
}
