//! A thread's closure and result, stored inline in its ThMB or boxed when too large, and the
//! pooled ThMBs they live in: every value arrives once and is dropped once, whatever its size
//! or alignment, whether the thread ran inline at its join or on a stack of its own, joined or
//! detached.
#![cfg(not(loom))]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Counts drops into a shared counter.
struct Counted(Arc<AtomicUsize>);
impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Over-aligned: never stored inline.
#[derive(Clone, Copy, PartialEq, Debug)]
#[repr(align(64))]
struct Aligned(u64);

#[test]
fn small_large_and_aligned_closures_and_results_round_trip() {
    libuthread::run(1, || {
        for round in 0..200u64 {
            // Small closure, small result (inline both ways), joined at once: runs inline.
            assert_eq!(libuthread::spawn(move || round * 2).join().unwrap(), round * 2);
            // A closure and a result larger than the inline bytes.
            let big = [round; 16];
            let sum = libuthread::spawn(move || big.iter().sum::<u64>()).join().unwrap();
            assert_eq!(sum, round * 16);
            let array = libuthread::spawn(move || [round; 12]).join().unwrap();
            assert_eq!(array, [round; 12]);
            // Over-aligned closure capture and result.
            let a = Aligned(round);
            assert_eq!(libuthread::spawn(move || Aligned(a.0 + 1)).join().unwrap(), Aligned(round + 1));
            // Started on a stack of its own before the join (the spawner yields first).
            let h = libuthread::spawn(move || [round; 9]);
            libuthread::yield_now();
            assert!(h.is_finished());
            assert_eq!(h.join().unwrap(), [round; 9]);
        }
    });
}

#[test]
fn captures_and_results_are_dropped_exactly_once() {
    let drops = Arc::new(AtomicUsize::new(0));
    let d = drops.clone();
    libuthread::run(2, move || {
        let mut expected = 0;
        for _ in 0..100 {
            // Joined: the closure's capture is dropped when it runs, the result by the caller.
            let captured = Counted(d.clone());
            let inner = d.clone();
            let result = libuthread::spawn(move || {
                drop(captured);
                Counted(inner)
            })
            .join()
            .unwrap();
            drop(result);
            expected += 2;
            // Detached after it finished: the thread's result is dropped by the handle's drop.
            let h = libuthread::spawn({
                let d = d.clone();
                move || Counted(d)
            });
            libuthread::yield_now();
            while !h.is_finished() {
                libuthread::yield_now();
            }
            drop(h);
            expected += 1;
            // Detached before it ran: the thread drops its own result at exit.
            let h = libuthread::spawn({
                let d = d.clone();
                move || [Counted(d.clone()), Counted(d)]
            });
            drop(h);
            expected += 2;
        }
        // Wait (bounded) for every detached thread to finish.
        for _ in 0..1_000_000 {
            if d.load(Ordering::SeqCst) == expected {
                break;
            }
            libuthread::yield_now();
        }
    });
    assert_eq!(drops.load(Ordering::SeqCst), 500);
}
