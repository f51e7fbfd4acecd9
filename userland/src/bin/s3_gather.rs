//! The two ways a `SharedBarrier` waiter sleeps in the kernel outside its program's gathering
//! (`libuthread/src/sync/gather.rs`; ARCHITECTURE.md "Shared locks and barriers"), each
//! counted by `libuthread::sync::solo_sleeps`:
//!
//! 1. Every gathering slot in use: `SLOTS` barriers each have a leader asleep in the kernel
//!    (holding a slot until its round ends), then `EXTRA` more barriers get two waiters each,
//!    which find no free slot and must sleep in the kernel themselves. Every waiter must come
//!    back exactly once, `Ok(false)`, only after the releasing arrival came, and the releaser
//!    `Ok(true)`; exactly `2 * EXTRA` waits per round took that path. `ROUNDS` rounds, so a
//!    slot not freed would show as more such waits.
//! 2. A caller that is no user thread of the runtime (LTN 0): the program's main thread before
//!    `libuthread::run`, released by a kernel thread of the program, and that kernel thread,
//!    released by a user thread inside `run`. Both must wait until released.
#![no_std]
#![no_main]
extern crate alloc;

use alloc::vec::Vec;
use core::sync::atomic::{AtomicUsize, Ordering};
use libuthread::sync::{solo_sleeps, SharedBarrier};
use libuthread::{println, sys};
use tsumugi_abi::s3::barrier;
use tsumugi_userland::s3::{until, word};

/// The program's gathering slots (`libuthread::sync::gather::SLOTS`).
const SLOTS: usize = 8;
/// Barriers gathered beyond the slots.
const EXTRA: usize = 4;
const BARRIERS: usize = SLOTS + EXTRA;
/// Each barrier: two waiters and the releaser.
const WAITERS: usize = 2;
const ROUNDS: usize = 3;

static GATHERED: [SharedBarrier; BARRIERS] = [const { SharedBarrier::new(WAITERS + 1) }; BARRIERS];
/// Per barrier: the round (from 1) whose releaser arrived; and how many waiters came back.
static RELEASED: [AtomicUsize; BARRIERS] = [const { AtomicUsize::new(0) }; BARRIERS];
static RETURNED: [AtomicUsize; BARRIERS] = [const { AtomicUsize::new(0) }; BARRIERS];

/// Part 2: the main thread waits at `MAIN_AT` (the kernel thread releases it), the kernel
/// thread at `KERNEL_AT` (a user thread releases it). The flags say the releaser came.
static MAIN_AT: SharedBarrier = SharedBarrier::new(2);
static KERNEL_AT: SharedBarrier = SharedBarrier::new(2);
static MAIN_RELEASED: AtomicUsize = AtomicUsize::new(0);
static KERNEL_RELEASED: AtomicUsize = AtomicUsize::new(0);
static KERNEL_DONE: AtomicUsize = AtomicUsize::new(0);
/// The main thread came back from `MAIN_AT` (if that path is broken, before its releaser: the
/// checks then fail instead of hanging).
static MAIN_BACK: AtomicUsize = AtomicUsize::new(0);
/// The main thread counted its own wait: the kernel thread may go on to `KERNEL_AT`.
static KERNEL_GO: AtomicUsize = AtomicUsize::new(0);

/// Waiters of barrier `b` have all arrived, and one sleeps in the kernel (or, if that path is
/// broken, came back already — the checks below then fail instead of hanging).
fn settled(b: usize) -> bool {
    let w = word(GATHERED[b].word());
    (w & barrier::ARRIVED) as usize == WAITERS && (w & barrier::SLEEPERS != 0 || RETURNED[b].load(Ordering::Acquire) > 0)
}

fn spawn_waiters(b: usize, round: usize) -> Vec<libuthread::JoinHandle<bool>> {
    (0..WAITERS)
        .map(|_| {
            libuthread::spawn(move || {
                let r = GATHERED[b].wait();
                let released = RELEASED[b].load(Ordering::Acquire);
                RETURNED[b].fetch_add(1, Ordering::AcqRel);
                r == Ok(false) && released == round
            })
        })
        .collect()
}

fn slots_full(ok: &mut bool) {
    for round in 1..=ROUNDS {
        let before = solo_sleeps();
        RETURNED.iter().for_each(|r| r.store(0, Ordering::Relaxed));
        // A leader asleep in the kernel on each of the first `SLOTS` barriers holds every slot.
        let mut waiters: Vec<_> = (0..SLOTS).flat_map(|b| spawn_waiters(b, round)).collect();
        until(|| (0..SLOTS).all(settled));
        let gathered = solo_sleeps();
        // The others find no free slot.
        waiters.extend((SLOTS..BARRIERS).flat_map(|b| spawn_waiters(b, round)));
        until(|| (SLOTS..BARRIERS).all(settled));
        let early: usize = RETURNED.iter().map(|r| r.load(Ordering::Acquire)).sum();
        let mut leaders = 0;
        for b in (0..BARRIERS).rev() {
            RELEASED[b].store(round, Ordering::Release);
            leaders += usize::from(GATHERED[b].wait() == Ok(true));
        }
        let right = waiters.into_iter().map(|w| w.join().unwrap()).filter(|&r| r).count();
        let returned: usize = RETURNED.iter().map(|r| r.load(Ordering::Acquire)).sum();
        let after = solo_sleeps();
        let full = after.slots_full - before.slots_full;
        println!(
            "s3_gather: round {round}: {BARRIERS} barriers gathered at once: {} waits without a slot ({} before the slots filled), {early} back before release, {right} of {} released right, {returned} returns, {leaders} releasers Ok(true)",
            full,
            gathered.slots_full - before.slots_full,
            BARRIERS * WAITERS
        );
        *ok &= full == EXTRA * WAITERS
            && gathered.slots_full == before.slots_full
            && after.outside == before.outside
            && early == 0
            && right == BARRIERS * WAITERS
            && returned == BARRIERS * WAITERS
            && leaders == BARRIERS;
    }
}

/// The kernel thread (LTN 0): releases the main thread at `MAIN_AT`, then waits at `KERNEL_AT`.
/// Its value: bit 0 it released the main thread as the round's last arrival, bit 1 it came
/// back from `KERNEL_AT` after its releaser arrived, with `Ok(false)`.
fn kernel_thread(_: usize) -> usize {
    while word(MAIN_AT.word()) != 1 | barrier::SLEEPERS && MAIN_BACK.load(Ordering::Acquire) == 0 {
        sys::yield_now();
    }
    MAIN_RELEASED.store(1, Ordering::Release);
    let released_main = MAIN_AT.wait() == Ok(true);
    while KERNEL_GO.load(Ordering::Acquire) == 0 {
        sys::yield_now();
    }
    let r = KERNEL_AT.wait();
    let released = KERNEL_RELEASED.load(Ordering::Acquire) == 1;
    KERNEL_DONE.store(1, Ordering::Release);
    usize::from(released_main) | usize::from(r == Ok(false) && released) << 1
}

fn main() -> i32 {
    let mut ok = true;
    // 2a. The main thread, outside the runtime, waits in the kernel until the kernel thread
    // arrives.
    let before = solo_sleeps();
    let Ok(k) = sys::spawn(kernel_thread, 0, 64 * 1024, false) else {
        println!("s3_gather: FAILED: spawn");
        return 1;
    };
    let r = MAIN_AT.wait();
    MAIN_BACK.store(1, Ordering::Release);
    let released = MAIN_RELEASED.load(Ordering::Acquire) == 1;
    let outside = solo_sleeps().outside - before.outside;
    println!("s3_gather: the main thread outside the runtime (LTN 0) waited in the kernel: {r:?}, after its releaser: {released}, {outside} waits outside");
    ok &= r == Ok(false) && released && outside == 1;
    KERNEL_GO.store(1, Ordering::Release);
    ok &= libuthread::run(4, || {
        let mut ok = true;
        // 2b. The kernel thread (LTN 0) waits at `KERNEL_AT`; a user thread releases it.
        until(|| word(KERNEL_AT.word()) == 1 | barrier::SLEEPERS || KERNEL_DONE.load(Ordering::Acquire) != 0);
        let early = KERNEL_DONE.load(Ordering::Acquire);
        KERNEL_RELEASED.store(1, Ordering::Release);
        let r = KERNEL_AT.wait();
        println!("s3_gather: a user thread released the kernel thread asleep at a barrier: {r:?}, it was back before: {early}");
        ok &= r == Ok(true) && early == 0;
        slots_full(&mut ok);
        ok
    });
    let joined = sys::thread_join(k);
    let outside = solo_sleeps().outside - before.outside;
    println!("s3_gather: the kernel thread (LTN 0): {joined:?} (3: released the main thread, and was released), {outside} waits outside");
    ok &= joined == Ok(3) && outside == 2;
    if ok {
        println!("s3_gather: all checks passed");
        0
    } else {
        println!("s3_gather: FAILED");
        1
    }
}
libuthread::entry!(main);
