//! The stress test (issue 15, item 7), user-thread half: more than 10,000 libuthread user
//! threads over four vCPUs doing random work whose every result is checked, while
//! `stress_kernel` runs 500 kernel threads beside it (`run=stress+stress_kernel`).
//!
//! - User threads come in waves of groups of [`GROUP`]. Each member runs [`ROUNDS`] rounds; in a
//!   round it picks, from its own seeded generator, one of: yield, a short sleep in the kernel, an
//!   addition under the program-wide `Mutex`, a message on the program-wide channel, a condvar
//!   hand-shake with a child thread it spawns (the child sets a flag and notifies; a lost wake-up
//!   hangs the run and the suite's time limit catches it), or a child spawned and joined for a
//!   result. Every round ends at its group's `Barrier`. Each thread returns what it added and
//!   sent; the sums must equal the mutex's total and the channel's contents exactly.
//!
//! Nothing here depends on timing: sleeps only shuffle the interleaving, and the checks are
//! exact counts. The seed is printed so a failing interleaving's choices can be replayed.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicUsize, Ordering};
use core::time::Duration;
use libuthread::{mpsc, println, Barrier, Condvar, Mutex};
use tsumugi_userland::stress::{Rng, SEED};

/// vCPUs of the user-thread phase.
const VCPUS: usize = 4;
/// Members of a group (they meet at the group's barrier every round).
const GROUP: usize = 16;
/// Groups per wave; a wave's threads are alive together.
const GROUPS_PER_WAVE: usize = 40;
/// Waves (16 × 40 × 16 = 10,240 group members, plus the children they spawn).
const WAVES: usize = 16;
/// Rounds each group member runs.
const ROUNDS: usize = 6;
/// Stack of every user thread (the library's minimum).
const USER_STACK: usize = 16 * 1024;

/// User threads started (group members and their children).
static USER_THREADS: AtomicUsize = AtomicUsize::new(0);
/// Operations by kind: yield, sleep, lock, message, condvar, child.
static OPS: [AtomicUsize; 6] = [const { AtomicUsize::new(0) }; 6];

/// What the user threads share.
struct Shared {
    total: Mutex<u64>,
    messages: mpsc::Sender<u64>,
}

/// Counts a started user thread.
fn started() {
    USER_THREADS.fetch_add(1, Ordering::Relaxed);
}

/// Spawns a user thread on the stress stack size.
fn spawn<F, T>(f: F) -> libuthread::JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    libuthread::Builder::new().stack_size(USER_STACK).spawn(f)
}

/// One group member: its rounds, then what it added under the lock and what it sent.
fn member(shared: Arc<Shared>, barrier: Arc<Barrier>, stream: u64) -> Result<(u64, u64), &'static str> {
    started();
    let mut rng = Rng::new(stream);
    let (mut added, mut sent) = (0, 0);
    for _ in 0..ROUNDS {
        let op = rng.below(6) as usize;
        OPS[op].fetch_add(1, Ordering::Relaxed);
        match op {
            0 => libuthread::yield_now(),
            1 => libuthread::sleep(Duration::from_micros(rng.below(200))),
            2 => {
                let v = rng.below(1000) + 1;
                *shared.total.lock() += v;
                added += v;
            }
            3 => {
                let v = rng.below(1000) + 1;
                shared.messages.send(v).map_err(|_| "send failed")?;
                sent += v;
            }
            4 => {
                let pair = Arc::new((Mutex::new(false), Condvar::new()));
                let theirs = pair.clone();
                let child = spawn(move || {
                    started();
                    *theirs.0.lock() = true;
                    theirs.1.notify_one();
                });
                let guard = pair.1.wait_while(pair.0.lock(), |done| !*done);
                if !*guard {
                    return Err("condvar woke before the flag was set");
                }
                drop(guard);
                child.join().map_err(|_| "condvar child panicked")?;
            }
            _ => {
                let x = rng.below(1 << 20);
                let child = spawn(move || {
                    started();
                    x * 3 + 1
                });
                if child.join().map_err(|_| "child panicked")? != x * 3 + 1 {
                    return Err("child returned a wrong value");
                }
            }
        }
        barrier.wait();
    }
    Ok((added, sent))
}

/// The user-thread phase: every wave's members joined and their sums checked.
fn user_phase() -> Result<(u64, u64), &'static str> {
    let (tx, rx) = mpsc::channel();
    let shared = Arc::new(Shared { total: Mutex::new(0), messages: tx });
    let (mut added, mut sent) = (0, 0);
    for wave in 0..WAVES {
        let mut members = Vec::with_capacity(GROUPS_PER_WAVE * GROUP);
        for g in 0..GROUPS_PER_WAVE {
            let barrier = Arc::new(Barrier::new(GROUP));
            for m in 0..GROUP {
                let stream = ((wave * GROUPS_PER_WAVE + g) * GROUP + m) as u64;
                let (shared, barrier) = (shared.clone(), barrier.clone());
                members.push(spawn(move || member(shared, barrier, stream)));
            }
        }
        for h in members {
            let (a, s) = h.join().map_err(|_| "member panicked")??;
            added += a;
            sent += s;
        }
    }
    let total = *shared.total.lock();
    drop(shared);
    let received: u64 = rx.iter().sum();
    if total != added {
        println!("stress: FAILED: the mutex holds {total}, the threads added {added}");
        return Err("lost update");
    }
    if received != sent {
        println!("stress: FAILED: received {received}, the threads sent {sent}");
        return Err("lost message");
    }
    Ok((added, sent))
}

fn main() -> i32 {
    println!("stress: seed {SEED:#x}; {} group members in waves of {} on {VCPUS} vCPUs", WAVES * GROUPS_PER_WAVE * GROUP, GROUPS_PER_WAVE * GROUP);
    let result = libuthread::run(VCPUS, user_phase);
    let ops: Vec<usize> = OPS.iter().map(|o| o.load(Ordering::Relaxed)).collect();
    let users = USER_THREADS.load(Ordering::Relaxed);
    match result {
        Ok(_) if users < 10_000 => {
            println!("stress: FAILED: only {users} user threads started");
            1
        }
        Ok((added, sent)) => {
            println!(
                "stress: {users} user threads; ops yield {} sleep {} lock {} message {} condvar {} child {}; lock and message sums {added}/{sent} exact; 0 wrong",
                ops[0], ops[1], ops[2], ops[3], ops[4], ops[5]
            );
            0
        }
        Err(why) => {
            println!("stress: FAILED: {why}");
            1
        }
    }
}
libuthread::entry!(main);
