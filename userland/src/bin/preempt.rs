//! Threads that never yield (one per CPU) do not stop the others: timer preemption works on
//! every CPU. Once a spinner holds every CPU, workers that yield must still all finish, and
//! every CPU must have preempted someone.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicUsize, Ordering};
use libuthread::{println, sys};
use tsumugi_abi::stats::{scope, Counter};

const WORKERS: usize = 4;
const ITERATIONS: usize = 20;
/// How long every CPU gets to show a preemption after the workers finished.
const PATIENCE_NANOS: u64 = 5_000_000_000;
/// Most CPUs the kernel brings up.
const MAX_CPUS: usize = 8;

static SPINS: AtomicUsize = AtomicUsize::new(0);
static SPINNERS_UP: AtomicUsize = AtomicUsize::new(0);

fn spinner(_: usize) -> usize {
    SPINNERS_UP.fetch_add(1, Ordering::AcqRel);
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

fn preemptions(cpus: usize) -> Option<[u64; MAX_CPUS]> {
    let mut out = [0u64; MAX_CPUS];
    for (cpu, slot) in out.iter_mut().enumerate().take(cpus) {
        *slot = sys::counters(scope::cpu(cpu)).ok()?.0[Counter::Preemptions as usize];
    }
    Some(out)
}

fn main() -> i32 {
    let Ok((_, cpus)) = sys::counters(scope::ALL_CPUS) else { return 1 };
    let cpus = cpus.min(MAX_CPUS);
    let Some(before) = preemptions(cpus) else { return 1 };
    for _ in 0..cpus {
        if sys::spawn(spinner, 0, 16 * 1024, false).is_err() {
            return 1;
        }
    }
    // Let the spinners take every CPU before the workers exist.
    while SPINNERS_UP.load(Ordering::Acquire) < cpus {
        sys::yield_now();
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
    // The spinners keep every CPU busy: each CPU's tick must preempt one of them. On a
    // loaded host a virtual CPU may have seen few ticks by the time the workers are done, so
    // wait (guest time, bounded) until every CPU has preempted — or the deadline says it never
    // will.
    let now = || sys::clock(libuthread::Clock::MonotonicNanos).unwrap_or(0) as u64;
    let deadline = now() + PATIENCE_NANOS;
    let after = loop {
        let Some(after) = preemptions(cpus) else { return 1 };
        if (0..cpus).all(|cpu| after[cpu] > before[cpu]) || now() > deadline {
            break after;
        }
        sys::yield_now();
    };
    println!("preempt: {WORKERS} workers finished beside {cpus} spinners ({} spins)", SPINS.load(Ordering::Relaxed));
    let mut ok = true;
    for cpu in 0..cpus {
        let n = after[cpu] - before[cpu];
        println!("preempt: cpu {cpu}: {n} preemptions");
        ok &= n > 0;
    }
    // End the program (and its spinners).
    sys::exit(if ok { 0 } else { 1 })
}
libuthread::entry!(main);
