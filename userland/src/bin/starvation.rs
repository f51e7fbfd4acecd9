//! One view with 32 busy threads and another with a single thread, all opted in to affinity:
//! the group bound must let the lone thread run. Every thread is pinned to one CPU, since the
//! bound holds per run queue (with threads on several CPUs, steals and the host's speed for
//! each virtual CPU would decide what the lone thread sees). Prints the longest wait it saw,
//! counted in busy turns.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicUsize, Ordering};
use libuthread::{println, sys};
use tsumugi_abi::syscall::rights;

const BUSY: usize = 32;
const LONE_TURNS: usize = 20;
/// The kernel's default group bound (`groupbound=`).
const GROUP_BOUND: usize = 8;

/// Most CPUs the kernel brings up.
const MAX_CPUS: usize = 8;

static BUSY_TURNS: [AtomicUsize; MAX_CPUS] = [const { AtomicUsize::new(0) }; MAX_CPUS];
static EXTRA: AtomicUsize = AtomicUsize::new(0);

fn busy(cpu: usize) -> usize {
    if sys::thread_pin(Some(cpu)).is_err() {
        return 1;
    }
    loop {
        BUSY_TURNS[sys::cpu_id() % MAX_CPUS].fetch_add(1, Ordering::Relaxed);
        sys::yield_now();
    }
}

fn lone(cpu: usize) -> usize {
    if sys::thread_pin(Some(cpu)).is_err() {
        return usize::MAX;
    }
    let mut max_gap = 0;
    let mut last = BUSY_TURNS[cpu % MAX_CPUS].load(Ordering::Relaxed);
    for _ in 0..LONE_TURNS {
        sys::yield_now();
        if sys::cpu_id() != cpu {
            // Pinned threads never move: a steal took it.
            return usize::MAX;
        }
        let now = BUSY_TURNS[cpu % MAX_CPUS].load(Ordering::Relaxed);
        max_gap = max_gap.max(now - last);
        last = now;
    }
    max_gap
}

fn main() -> i32 {
    let Ok(extra) = sys::region_create(4096, rights::READ | rights::WRITE, 0) else { return 1 };
    EXTRA.store(extra, Ordering::Relaxed);
    let cpu = sys::cpu_id();
    for _ in 0..BUSY {
        let Ok(t) = sys::spawn(busy, cpu, 16 * 1024, true) else { return 1 };
        // The busy threads share one view: without the extra region.
        if sys::region_revoke(extra, t).is_err() {
            return 1;
        }
    }
    let Ok(t) = sys::spawn(lone, cpu, 16 * 1024, true) else { return 1 };
    let Ok(max_gap) = sys::thread_join(t) else { return 1 };
    // One rotation of the busy group, plus a group's worth of slack for threads a steal
    // pushes in front.
    let bound = GROUP_BOUND * 2;
    println!("starvation: lone thread ran {LONE_TURNS} turns beside {BUSY} busy threads; longest wait {max_gap} busy turns (bound {bound})");
    sys::exit(if max_gap <= bound { 0 } else { 1 })
}
libuthread::entry!(main);
