//! One view with 32 busy threads and another with a single thread, all opted in to affinity:
//! the group bound must let the lone thread run. Prints the longest wait it saw.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicUsize, Ordering};
use libuthread::{println, sys};
use tsumugi_abi::stats::{scope, Counter};
use tsumugi_abi::syscall::rights;

const BUSY: usize = 32;
const LONE_TURNS: usize = 20;
/// The kernel's default group bound (`groupbound=`).
const GROUP_BOUND: usize = 8;

static BUSY_TURNS: AtomicUsize = AtomicUsize::new(0);
static EXTRA: AtomicUsize = AtomicUsize::new(0);

fn busy(_: usize) -> usize {
    loop {
        BUSY_TURNS.fetch_add(1, Ordering::Relaxed);
        sys::yield_now();
    }
}

fn lone(_: usize) -> usize {
    let mut max_gap = 0;
    let mut last = BUSY_TURNS.load(Ordering::Relaxed);
    for _ in 0..LONE_TURNS {
        sys::yield_now();
        let now = BUSY_TURNS.load(Ordering::Relaxed);
        max_gap = max_gap.max(now - last);
        last = now;
    }
    max_gap
}

fn main() -> i32 {
    let Ok(extra) = sys::region_create(4096, rights::READ | rights::WRITE, 0) else { return 1 };
    EXTRA.store(extra, Ordering::Relaxed);
    let Ok((_, cpus)) = sys::counters(scope::ALL_CPUS) else { return 1 };
    for _ in 0..BUSY {
        let Ok(t) = sys::spawn(busy, 0, 16 * 1024, true) else { return 1 };
        // The busy threads share one view: without the extra region.
        if sys::region_revoke(extra, t).is_err() {
            return 1;
        }
    }
    let Ok(t) = sys::spawn(lone, 0, 16 * 1024, true) else { return 1 };
    let Ok(max_gap) = sys::thread_join(t) else { return 1 };
    let bound = GROUP_BOUND * cpus.max(1) * 2;
    println!("starvation: lone thread ran {LONE_TURNS} turns beside {BUSY} busy threads; longest wait {max_gap} busy turns (bound {bound})");
    let _ = Counter::COUNT;
    sys::exit(if max_gap <= bound { 0 } else { 1 })
}
libuthread::entry!(main);
