//! Property tests of the primitives through the public API: channels against a queue model,
//! and random mixes of locking, yielding and blocking across threads and vCPUs.
#![cfg(not(loom))]

use std::collections::VecDeque;
use std::sync::Arc;

use proptest::prelude::*;

#[derive(Debug, Clone)]
enum ChanOp {
    TrySend(u8),
    TryRecv,
}

fn chan_op() -> impl Strategy<Value = ChanOp> {
    prop_oneof![any::<u8>().prop_map(ChanOp::TrySend), Just(ChanOp::TryRecv)]
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Lock,
    Read,
    Write,
    Yield,
    Sleep,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![Just(Step::Lock), Just(Step::Read), Just(Step::Write), Just(Step::Yield), Just(Step::Sleep)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// A bounded mpsc channel used from one thread behaves like a bounded queue.
    #[test]
    fn sync_channel_is_a_bounded_queue(bound in 0usize..5, ops in proptest::collection::vec(chan_op(), 0..64)) {
        let failures = libuthread::run(1, move || {
            let (tx, rx) = libuthread::mpsc::sync_channel::<u8>(bound);
            let mut model = VecDeque::new();
            for op in ops {
                match op {
                    ChanOp::TrySend(v) => {
                        let sent = tx.try_send(v).is_ok();
                        let fits = model.len() < bound;
                        if sent != fits {
                            return Err(format!("try_send({v}) = {sent} with {} of {bound}", model.len()));
                        }
                        if fits {
                            model.push_back(v);
                        }
                    }
                    ChanOp::TryRecv => {
                        let got = rx.try_recv().ok();
                        if got != model.pop_front() {
                            return Err(format!("try_recv = {got:?}"));
                        }
                    }
                }
            }
            drop(tx);
            let rest: Vec<u8> = rx.iter().collect();
            if rest != model.into_iter().collect::<Vec<_>>() {
                return Err(String::from("drained values differ"));
            }
            Ok(())
        });
        prop_assert_eq!(failures, Ok(()));
    }

    /// Threads running random mixes of mutex, read and write locking, yields and sleeps on
    /// random vCPU counts: every increment is counted and readers never see a torn write.
    #[test]
    fn random_mixes_keep_the_invariants(
        vcpus in 1usize..5,
        programs in proptest::collection::vec(proptest::collection::vec(step(), 1..40), 1..10),
    ) {
        let locks: usize = programs.iter().flatten().filter(|s| matches!(s, Step::Lock)).count();
        let writes: usize = programs.iter().flatten().filter(|s| matches!(s, Step::Write)).count();
        let (counted, written, torn) = libuthread::run(vcpus, move || {
            let mutex = Arc::new(libuthread::Mutex::new(0usize));
            let rw = Arc::new(libuthread::RwLock::new((0usize, 0usize)));
            let torn = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let threads: Vec<_> = programs
                .into_iter()
                .map(|program| {
                    let (mutex, rw, torn) = (mutex.clone(), rw.clone(), torn.clone());
                    libuthread::spawn(move || {
                        for step in program {
                            match step {
                                Step::Lock => {
                                    let mut g = mutex.lock();
                                    let v = *g;
                                    libuthread::yield_now();
                                    *g = v + 1;
                                }
                                Step::Read => {
                                    let g = rw.read();
                                    if g.0 != g.1 {
                                        torn.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                    }
                                }
                                Step::Write => {
                                    let mut g = rw.write();
                                    g.0 += 1;
                                    libuthread::yield_now();
                                    g.1 += 1;
                                }
                                Step::Yield => libuthread::yield_now(),
                                Step::Sleep => libuthread::sleep(std::time::Duration::from_micros(20)),
                            }
                        }
                    })
                })
                .collect();
            threads.into_iter().for_each(|t| t.join().unwrap());
            let counted = *mutex.lock();
            let written = rw.read().0;
            (counted, written, torn.load(std::sync::atomic::Ordering::Relaxed))
        });
        prop_assert_eq!(counted, locks);
        prop_assert_eq!(written, writes);
        prop_assert_eq!(torn, 0);
    }
}
