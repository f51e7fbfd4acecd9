//! S3 within one program: every bad argument of the S3 syscalls is an error code; a waiter
//! blocked in the kernel resumes owning the lock the kernel acquired for it (the word names it,
//! no retry); a contended counter adds up; a barrier releases each round's batch; and with the
//! program's share of the holder table full, the next waiter falls back to software waiting
//! and still gets its lock.
#![no_std]
#![no_main]
extern crate alloc;

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use libuthread::sync::{fallbacks, SharedBarrier, SharedMutex};
use libuthread::{println, sys, Errno};
use tsumugi_abi::s3::{MAX_BARRIER_COUNT, WAITERS};
use tsumugi_userland::s3::until;
use tsumugi_userland::KERNEL_ADDRESS;

/// Threads and increments of the contended counter.
const THREADS: usize = 16;
const INCREMENTS: usize = 200;
/// Threads and rounds at the barrier.
const BARRIER_THREADS: usize = 8;
const ROUNDS: usize = 30;
/// The program's share of the holder table (`tsumugi_kernel::s3::table::PER_PROGRAM`), and one
/// more lock than that.
const SHARE: usize = 48;
const FILL: usize = SHARE + 1;

static HANDED: SharedMutex<u64> = SharedMutex::new(0);
static COUNTER: SharedMutex<u64> = SharedMutex::new(0);
static BARRIER: SharedBarrier = SharedBarrier::new(BARRIER_THREADS);
static ARRIVALS: [AtomicUsize; ROUNDS] = [const { AtomicUsize::new(0) }; ROUNDS];
static FILLED: [SharedMutex<u64>; FILL] = [const { SharedMutex::new(0) }; FILL];
static RAW: AtomicU64 = AtomicU64::new(0);

fn word(lock: &SharedMutex<u64>) -> u64 {
    tsumugi_userland::s3::word(lock.word())
}

fn check(ok: &mut bool, what: &str, got: sys::SysResult, want: sys::SysResult) {
    println!("s3_lock: {what}: {got:?}");
    if got != want {
        println!("s3_lock: FAILED: {what}: wanted {want:?}");
        *ok = false;
    }
}

fn bad_input(ok: &mut bool) {
    let me = libuthread::current().id().as_usize();
    let w = RAW.as_ptr() as usize;
    let text = (main as *const () as usize) & !7;
    check(ok, "lock of an unaligned word", sys::s3_lock(w + 4, me), Err(Some(Errno::Inval)));
    check(ok, "lock of an unmapped word", sys::s3_lock(0x10, me), Err(Some(Errno::Fault)));
    check(ok, "lock of a kernel word", sys::s3_lock(KERNEL_ADDRESS, me), Err(Some(Errno::Fault)));
    check(ok, "lock of a read-only word", sys::s3_lock(text, me), Err(Some(Errno::Fault)));
    check(ok, "lock with tag 0", sys::s3_lock(w, 0), Err(Some(Errno::Inval)));
    check(ok, "lock with an odd tag", sys::s3_lock(w, me | 1), Err(Some(Errno::Inval)));
    check(ok, "lock of a free word", sys::s3_lock(w, me), Ok(0));
    check(ok, "lock of a word it holds", sys::s3_lock(w, me), Err(Some(Errno::Inval)));
    check(ok, "release by a non-holder", sys::s3_unlock(w, me + 64), Err(Some(Errno::Perm)));
    check(ok, "release by the holder", sys::s3_unlock(w, me), Ok(0));
    check(ok, "release of a free word", sys::s3_unlock(w, me), Err(Some(Errno::Perm)));
    check(ok, "barrier of 0", sys::s3_barrier(w, 0, 0), Err(Some(Errno::Inval)));
    check(ok, "barrier beyond the threads that can exist", sys::s3_barrier(w, 0, MAX_BARRIER_COUNT + 1), Err(Some(Errno::Inval)));
    check(ok, "barrier whose round is complete", sys::s3_barrier(w, 3, 3), Err(Some(Errno::Inval)));
    check(ok, "barrier of a read-only word", sys::s3_barrier(text, 0, 2), Err(Some(Errno::Fault)));
    check(ok, "wait on a changed word", sys::s3_wait(w, 7), Ok(1));
    check(ok, "wait on an unaligned word", sys::s3_wait(w + 1, 0), Err(Some(Errno::Inval)));
    check(ok, "wake of a kernel word", sys::s3_wake(KERNEL_ADDRESS, 1), Err(Some(Errno::Fault)));
    check(ok, "wake with nobody waiting", sys::s3_wake(w, 1), Ok(0));
}


fn hand_off(ok: &mut bool) {
    let mut held = HANDED.lock();
    let waiter = libuthread::spawn(|| {
        let me = libuthread::current().id().as_usize() as u64;
        let guard = HANDED.lock();
        // Resumed by the kernel: the word must already name this thread.
        (word(&HANDED) == me, *guard)
    });
    until(|| word(&HANDED) & WAITERS != 0);
    *held = 42;
    drop(held);
    let (owned, value) = waiter.join().unwrap();
    println!("s3_lock: the waiter queued in the kernel resumed owning the lock: {owned}, and read {value}");
    *ok &= owned && value == 42;
}

fn contended(ok: &mut bool) {
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            libuthread::spawn(|| {
                for _ in 0..INCREMENTS {
                    *COUNTER.lock() += 1;
                    libuthread::yield_now();
                }
            })
        })
        .collect();
    workers.into_iter().for_each(|w| w.join().unwrap());
    let total = *COUNTER.lock();
    println!("s3_lock: {THREADS} threads x {INCREMENTS} increments under one shared lock: {total}");
    *ok &= total == (THREADS * INCREMENTS) as u64;
}

fn barrier(ok: &mut bool) {
    let bad = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..BARRIER_THREADS)
        .map(|_| {
            let bad = bad.clone();
            libuthread::spawn(move || {
                let mut leaders = 0;
                for r in 0..ROUNDS {
                    ARRIVALS[r].fetch_add(1, Ordering::AcqRel);
                    match BARRIER.wait() {
                        Ok(leader) => leaders += usize::from(leader),
                        Err(_) => {
                            bad.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    if ARRIVALS[r].load(Ordering::Acquire) != BARRIER_THREADS {
                        bad.fetch_add(1, Ordering::Relaxed);
                    }
                }
                leaders
            })
        })
        .collect();
    let leaders: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    let bad = bad.load(Ordering::Relaxed);
    println!("s3_lock: barrier of {BARRIER_THREADS}, {ROUNDS} rounds: {leaders} leaders, {bad} early releases");
    *ok &= leaders == ROUNDS && bad == 0;
}

fn fill_table(ok: &mut bool) {
    let mut guards: Vec<_> = FILLED.iter().enumerate().map(|(i, l)| {
        let mut g = l.lock();
        *g = 1000 + i as u64;
        g
    }).collect();
    let before = fallbacks();
    let waiters: Vec<_> = (0..FILL)
        .map(|i| libuthread::spawn(move || *FILLED[i].lock() == 1000 + i as u64))
        .collect();
    until(|| FILLED.iter().filter(|l| word(l) & WAITERS != 0).count() == SHARE && fallbacks() > before);
    println!("s3_lock: {SHARE} waiters in the kernel's holder table (the program's share); the next waits in software");
    guards.drain(..).for_each(drop);
    let right = waiters.into_iter().map(|w| w.join().unwrap()).filter(|&r| r).count();
    println!("s3_lock: {right} of {FILL} waiters got their lock with the holder's value");
    *ok &= right == FILL;
}

fn main() -> i32 {
    let ok = libuthread::run(4, || {
        let mut ok = true;
        bad_input(&mut ok);
        hand_off(&mut ok);
        contended(&mut ok);
        barrier(&mut ok);
        fill_table(&mut ok);
        ok
    });
    if ok {
        println!("s3_lock: all checks passed");
        0
    } else {
        println!("s3_lock: FAILED");
        1
    }
}
libuthread::entry!(main);
