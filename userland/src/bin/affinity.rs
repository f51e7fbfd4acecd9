//! 64 threads in 4 views yield to each other, first with thread-view affinity off, then on:
//! with it on, view switches per context switch must be markedly fewer. Prints both. Every
//! worker is pinned to one CPU: the grouping is a property of one run queue, and with workers
//! spread over CPUs the host's speed for each virtual CPU would decide how many meet.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicUsize, Ordering};
use libuthread::{println, sys};
use tsumugi_abi::stats::{scope, Counter};
use tsumugi_abi::syscall::rights;

const THREADS: usize = 64;
const VIEWS: usize = 4;
const ROUNDS: usize = 30;

static REGIONS: [AtomicUsize; VIEWS] = [const { AtomicUsize::new(0) }; VIEWS];
static GO: AtomicUsize = AtomicUsize::new(0);
/// The CPU every worker runs on.
static CPU: AtomicUsize = AtomicUsize::new(0);

fn worker(i: usize) -> usize {
    if sys::thread_pin(Some(CPU.load(Ordering::Relaxed))).is_err() {
        return 1;
    }
    while GO.load(Ordering::Acquire) == 0 {
        sys::yield_now();
    }
    let r = REGIONS[i % VIEWS].load(Ordering::Relaxed);
    for round in 0..ROUNDS {
        // SAFETY: this thread's view holds its region read-write.
        unsafe { (r as *mut u64).add(i).write_volatile(round as u64) };
        sys::yield_now();
    }
    0
}

/// Runs one phase; returns (context switches, view switches) of this program during it.
fn phase(affinity: bool) -> Option<(u64, u64)> {
    sys::sched_affinity(Some(affinity)).ok()?;
    GO.store(0, Ordering::Release);
    let mut tids = [0usize; THREADS];
    for (i, tid) in tids.iter_mut().enumerate() {
        *tid = sys::spawn(worker, i, 16 * 1024, true).ok()?;
        // Leave the thread only its own region: 4 distinct views of 16 threads each.
        for (v, r) in REGIONS.iter().enumerate() {
            if v != i % VIEWS {
                sys::region_revoke(r.load(Ordering::Relaxed), *tid).ok()?;
            }
        }
    }
    let (before, _) = sys::counters(scope::DOMAIN).ok()?;
    GO.store(1, Ordering::Release);
    for tid in tids {
        if sys::thread_join(tid).ok()? != 0 {
            return None;
        }
    }
    let (after, _) = sys::counters(scope::DOMAIN).ok()?;
    let d = |c: Counter| after[c as usize] - before[c as usize];
    Some((d(Counter::ContextSwitches), d(Counter::ViewSwitches)))
}

fn main() -> i32 {
    CPU.store(sys::cpu_id(), Ordering::Relaxed);
    for r in &REGIONS {
        let Ok(a) = sys::region_create(4096, rights::READ | rights::WRITE, 0) else { return 1 };
        r.store(a, Ordering::Relaxed);
    }
    let (Some(off), Some(on)) = (phase(false), phase(true)) else {
        println!("affinity: FAILED: a phase could not run");
        return 1;
    };
    let (_, cpus) = sys::counters(scope::ALL_CPUS).unwrap_or(([0; Counter::COUNT], 0));
    println!("affinity: {THREADS} threads, {VIEWS} views, {ROUNDS} yields each, {cpus} cpus");
    println!("affinity: off: {} switches, {} view switches", off.0, off.1);
    println!("affinity: on:  {} switches, {} view switches", on.0, on.1);
    // Compare view switches per context switch (cross-multiplied to stay in integers).
    if on.1 * off.0 * 2 < off.1 * on.0 {
        0
    } else {
        println!("affinity: FAILED: affinity did not at least halve view switches per switch");
        1
    }
}
libuthread::entry!(main);
