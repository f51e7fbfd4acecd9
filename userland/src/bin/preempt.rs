//! Threads that never yield (one per CPU) do not stop the others: timer preemption works on
//! every CPU. Workers that yield must all finish while the spinners spin.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicUsize, Ordering};
use libuthread::{println, sys};
use tsumugi_abi::stats::{scope, Counter};

const WORKERS: usize = 4;
const ITERATIONS: usize = 20;

static SPINS: AtomicUsize = AtomicUsize::new(0);

fn spinner(_: usize) -> usize {
    loop {
        SPINS.fetch_add(1, Ordering::Relaxed);
    }
}

fn worker(_: usize) -> usize {
    for _ in 0..ITERATIONS {
        for _ in 0..1000 {
            core::hint::spin_loop();
        }
        sys::yield_now();
    }
    0
}

fn main() -> i32 {
    let Ok((before, cpus)) = sys::counters(scope::ALL_CPUS) else { return 1 };
    for _ in 0..cpus {
        if sys::spawn(spinner, 0, 16 * 1024, false).is_err() {
            return 1;
        }
    }
    let mut tids = [0usize; WORKERS];
    for t in tids.iter_mut() {
        let Ok(tid) = sys::spawn(worker, 0, 16 * 1024, false) else { return 1 };
        *t = tid;
    }
    for t in tids {
        if sys::thread_join(t).is_err() {
            return 1;
        }
    }
    let Ok((after, _)) = sys::counters(scope::ALL_CPUS) else { return 1 };
    let preemptions = after[Counter::Preemptions as usize] - before[Counter::Preemptions as usize];
    println!("preempt: {WORKERS} workers finished beside {cpus} spinners ({} spins); {preemptions} preemptions", SPINS.load(Ordering::Relaxed));
    // End the program (and its spinners).
    sys::exit(if preemptions > 0 { 0 } else { 1 })
}
libuthread::entry!(main);
