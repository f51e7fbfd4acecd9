//! Threads that never yield (two pinned to each CPU) do not stop the others: timer preemption
//! works on every CPU. While spinners hold every CPU, workers that yield must still all
//! finish, and every CPU must have preempted someone: with two spinners pinned to it, a CPU
//! always has another thread to switch to when a quantum ends, whatever the host's load.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicUsize, Ordering};
use libuthread::{println, sys};
use tsumugi_abi::stats::{scope, Counter};

const WORKERS: usize = 4;
const ITERATIONS: usize = 20;
/// How long every CPU gets to show a preemption after the workers finished (guest time; a CPU
/// with two spinners preempts every quantum, so this is only a bound that turns a broken
/// preemption into a clear failure before the suite's time limit).
const PATIENCE_NANOS: u64 = 30_000_000_000;
/// Spinners pinned to each CPU.
const SPINNERS_PER_CPU: usize = 2;
/// Most CPUs the kernel brings up.
const MAX_CPUS: usize = 8;

static SPINS: AtomicUsize = AtomicUsize::new(0);
static SPINNERS_UP: AtomicUsize = AtomicUsize::new(0);

fn spinner(cpu: usize) -> usize {
    if sys::thread_pin(Some(cpu)).is_err() {
        return 1;
    }
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
    for cpu in 0..cpus * SPINNERS_PER_CPU {
        if sys::spawn(spinner, cpu % cpus, 16 * 1024, false).is_err() {
            return 1;
        }
    }
    // Let the spinners take every CPU before the workers exist.
    while SPINNERS_UP.load(Ordering::Acquire) < cpus * SPINNERS_PER_CPU {
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
    // The spinners keep every CPU busy: each CPU's tick must preempt one of them. A virtual
    // CPU may have seen few ticks by the time the workers are done (the host decides how much
    // it runs), so wait until every CPU has preempted — or the deadline says it never will.
    let now = || sys::clock(libuthread::Clock::MonotonicNanos).unwrap_or(0) as u64;
    let deadline = now() + PATIENCE_NANOS;
    let after = loop {
        let Some(after) = preemptions(cpus) else { return 1 };
        if (0..cpus).all(|cpu| after[cpu] > before[cpu]) || now() > deadline {
            break after;
        }
        sys::yield_now();
    };
    println!("preempt: {WORKERS} workers finished beside {} spinners ({} spins)", cpus * SPINNERS_PER_CPU, SPINS.load(Ordering::Relaxed));
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
