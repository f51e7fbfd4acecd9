//! Space sharing (issue 16 part 2), the long-running half: a libuthread program asking for 4
//! vCPUs runs 24 workers that compute, yield and sleep. `share_short` registers beside it once
//! it says it is running, so the kernel takes vCPUs from this program (`VCPU_REVOKED`: the
//! library moves the revoked vCPU's threads to its other vCPUs) and gives them back when
//! `share_short` ends (`VCPU_GRANTED`). Checked, all from counts the kernel guarantees:
//! - every worker ran exactly once and its result is exact (no thread lost or run twice:
//!   each sums values that depend only on its index and round);
//! - while both programs were registered, at least one vCPU was revoked (the newcomer's vCPU 0
//!   cannot run before one is), and the program waits for that count, not for a sample;
//! - once `share_short` has ended, this program holds all 4 vCPUs again;
//! - the vCPUs granted at once never exceeded the CPUs (the kernel's high-water mark, with
//!   two programs of 4 vCPUs on at least 4 CPUs; on fewer CPUs the lone program's 4).
#![no_std]
#![no_main]

extern crate alloc;

use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use core::time::Duration;
use libuthread::{println, sys};
use tsumugi_abi::stats::shares;
use tsumugi_userland::space_share::{expected, figures, round, LONG_READY, VCPUS};

const WORKERS: usize = 24;
/// Rounds every worker does at least (and keeps going until the other program has ended).
const MIN_ROUNDS: u64 = 40;

static STARTED: AtomicUsize = AtomicUsize::new(0);
static DONE: AtomicBool = AtomicBool::new(false);

fn worker(i: usize) -> (u64, u64) {
    STARTED.fetch_add(1, Ordering::Relaxed);
    let (mut sum, mut rounds) = (0u64, 0u64);
    while rounds < MIN_ROUNDS || !DONE.load(Ordering::Acquire) {
        sum = sum.wrapping_add(round(i, rounds));
        rounds += 1;
        if rounds % 4 == 0 {
            libuthread::yield_now();
        }
        if rounds % 16 == (i as u64 % 16) {
            libuthread::sleep(Duration::from_millis(1));
        }
    }
    (rounds, sum)
}

fn program() -> i32 {
    // The counts are machine-wide: count from here.
    let before = figures().0[shares::REVOCATIONS];
    let handles: Vec<_> = (0..WORKERS).map(|i| libuthread::spawn(move || worker(i))).collect();
    let _ = sys::publish(LONG_READY, 1);
    // Wait for the other program to register and to end (bounded: a failure, not a hang).
    // Read from counts, not sampled: a revocation happens only while both are registered (the
    // other's vCPU 0 cannot run before one), and the figures are read under the allocation's
    // lock, so a revocation seen with one program registered means the other has ended.
    let (mut saw_two, mut saw_end) = (false, false);
    for _ in 0..30_000 {
        let (w, _) = figures();
        saw_two = w[shares::REVOCATIONS] > before;
        if saw_two && w[shares::PROGRAMS] == 1 {
            saw_end = true;
            break;
        }
        libuthread::sleep(Duration::from_millis(2));
    }
    let (after, cpus) = figures();
    DONE.store(true, Ordering::Release);
    let mut ok = saw_two && saw_end;
    if !ok {
        println!("share_long: FAILED: the other program was seen registered {saw_two}, ended {saw_end}");
    }
    let mut rounds_all = 0;
    for (i, h) in handles.into_iter().enumerate() {
        match h.join() {
            Ok((rounds, sum)) if sum == expected(i, rounds) => rounds_all += rounds,
            Ok((rounds, sum)) => {
                println!("share_long: FAILED: worker {i}: {rounds} rounds summed to {sum:#x}, not {:#x}", expected(i, rounds));
                ok = false;
            }
            Err(_) => {
                println!("share_long: FAILED: worker {i} panicked");
                ok = false;
            }
        }
    }
    let started = STARTED.load(Ordering::Relaxed);
    if started != WORKERS {
        println!("share_long: FAILED: {started} worker bodies ran, not {WORKERS}");
        ok = false;
    }
    let (revocations, max_granted, mine) = (after[shares::REVOCATIONS] - before, after[shares::MAX_GRANTED] as usize, after[shares::MINE] as usize);
    println!(
        "share_long: {WORKERS} workers, {rounds_all} rounds, all exact; revocations {revocations}, grants {}, vCPUs granted at most {max_granted} at once on {cpus} CPUs; after the other program ended this one holds {mine} of {VCPUS}",
        after[shares::GRANTS]
    );
    if revocations < 1 {
        println!("share_long: FAILED: no vCPU was revoked while two programs shared the CPUs");
        ok = false;
    }
    if mine != VCPUS {
        println!("share_long: FAILED: {mine} vCPUs after the other program ended, not {VCPUS}");
        ok = false;
    }
    if max_granted > cpus.max(VCPUS) {
        println!("share_long: FAILED: {max_granted} vCPUs granted at once on {cpus} CPUs");
        ok = false;
    }
    if ok {
        println!("share_long: ok");
        0
    } else {
        1
    }
}

fn main() -> i32 {
    libuthread::run(VCPUS, program)
}

libuthread::entry!(main);
