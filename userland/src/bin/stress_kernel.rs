//! The stress test (issue 15, item 7), kernel-thread half: 500 kernel threads in owner/reader
//! pairs, beside `stress`'s user threads (`run=stress+stress_kernel`). An owner creates a
//! region, fills it, grants it read-only to its reader, waits until the reader has checked every
//! word, revokes it and tells the reader, which must then find the region gone from its view
//! (`view_query`): when `region_revoke` returns, the region is out of the thread's view. Both
//! yield and sleep at random between steps; each returns a value the main thread checks.
//! Nothing depends on timing: the waits are for states, and the checks are exact.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use libuthread::{println, sys};
use tsumugi_abi::syscall::{rights, ViewEntry};
use tsumugi_userland::stress::{Rng, SEED};

/// Kernel threads (owner/reader pairs).
const KERNEL_THREADS: usize = 500;
/// Grant/check/revoke rounds of each pair. One: each region an owner makes reaches all its
/// view-mates (hundreds of threads), so 250 rounds already take 25–50 s of TCG time under
/// host load.
const KERNEL_ROUNDS: usize = 1;
/// Words an owner writes into each region it grants.
const WORDS: usize = 512;
/// Stack of each kernel thread.
const STACK: usize = 16 * 1024;

/// One owner/reader pair's meeting point (a word per pair; owners write, readers answer).
struct Pair {
    /// The region granted this round (0: none yet).
    region: AtomicUsize,
    /// 1 granted, 2 read and checked, 3 revoked, 4 gone from the reader's view; [`FAILED`]
    /// when either side saw a wrong answer (the other stops waiting).
    state: AtomicUsize,
    /// The reader's thread id once it runs.
    reader: AtomicUsize,
}

static PAIRS: [Pair; KERNEL_THREADS / 2] =
    [const { Pair { region: AtomicUsize::new(0), state: AtomicUsize::new(0), reader: AtomicUsize::new(0) } }; KERNEL_THREADS / 2];
/// The state a pair's side sets when it saw a wrong answer.
const FAILED: usize = usize::MAX;

/// Grants and revokes that succeeded.
static GRANTS: AtomicU64 = AtomicU64::new(0);

/// Yields or sleeps at random (shuffles the interleaving; correctness never depends on it).
fn jitter(rng: &mut Rng) {
    match rng.below(4) {
        0 => sys::yield_now(),
        1 => {
            let _ = sys::sleep_nanos(rng.below(100_000));
        }
        _ => {}
    }
}

/// Waits until `pair.state` is `want`; `false` if the other side failed. Yields a few times,
/// then naps a millisecond at a time (500 threads spinning through `yield` would leave the
/// CPUs little else to do).
fn await_state(pair: &Pair, want: usize) -> bool {
    for spins in 0usize.. {
        match pair.state.load(Ordering::Acquire) {
            s if s == want => return true,
            FAILED => return false,
            _ if spins < 4 => sys::yield_now(),
            _ => {
                let _ = sys::sleep_nanos(1_000_000);
            }
        }
    }
    unreachable!()
}

/// Reports a wrong answer of pair `p` and stops its other side; the thread's result (0).
fn fail(p: usize, what: &str, e: impl core::fmt::Debug) -> usize {
    println!("stress_kernel: FAILED: pair {p}: {what}: {e:?}");
    PAIRS[p].state.store(FAILED, Ordering::Release);
    0
}

/// The value an owner writes at word `i` of round `round`.
fn pattern(pair: usize, round: usize, i: usize) -> usize {
    (pair << 24) ^ (round << 16) ^ i ^ 0x5a5a
}

/// Owner of pair `p`: create, fill, grant, wait for the check, revoke, wait for the reader to
/// see it gone. Returns `p + 1` when every step answered as it must, 0 otherwise.
fn owner(p: usize) -> usize {
    let pair = &PAIRS[p];
    let mut rng = Rng::new(1 << 40 | p as u64);
    let reader = loop {
        match pair.reader.load(Ordering::Acquire) {
            0 => {
                let _ = sys::sleep_nanos(1_000_000);
            }
            t => break t,
        }
    };
    for round in 0..KERNEL_ROUNDS {
        let r = match sys::region_create(WORDS * 8, rights::READ | rights::WRITE, 0) {
            Ok(r) => r,
            Err(e) => return fail(p, "region_create", e),
        };
        for i in 0..WORDS {
            // SAFETY: the region was just created writable for this thread.
            unsafe { ((r + i * 8) as *mut usize).write_volatile(pattern(p, round, i)) };
        }
        jitter(&mut rng);
        if let Err(e) = sys::region_grant(r, rights::READ, reader) {
            return fail(p, "region_grant", e);
        }
        pair.region.store(r, Ordering::Release);
        pair.state.store(1, Ordering::Release);
        if !await_state(pair, 2) {
            return 0;
        }
        jitter(&mut rng);
        if let Err(e) = sys::region_revoke(r, reader) {
            return fail(p, "region_revoke", e);
        }
        let done = GRANTS.fetch_add(1, Ordering::Relaxed) + 1;
        if done % 50 == 0 {
            println!("stress_kernel: {done} rounds at {} ms", sys::clock(libuthread::Clock::MonotonicNanos).unwrap_or(0) / 1_000_000);
        }
        pair.state.store(3, Ordering::Release);
        if !await_state(pair, 4) {
            return 0;
        }
        jitter(&mut rng);
    }
    p + 1
}

/// Whether the calling thread's view holds the region starting at `r`. `entries` is the
/// caller's buffer, grown to the view's size (a reader's view also holds every region its
/// view-mates made: hundreds).
fn in_my_view(r: usize, entries: &mut Vec<ViewEntry>) -> Option<bool> {
    loop {
        let n = sys::view_query(entries).ok()?;
        if n <= entries.len() {
            return Some(entries[..n].iter().any(|e| e.start == r as u64));
        }
        entries.resize(n + 64, ViewEntry::default());
    }
}

/// Reader of pair `p`: check every word of each granted region, then see the revoke land.
fn reader(p: usize) -> usize {
    let pair = &PAIRS[p];
    let mut rng = Rng::new(2 << 40 | p as u64);
    let mut entries = Vec::new();
    pair.reader.store(sys::thread_self(), Ordering::Release);
    for round in 0..KERNEL_ROUNDS {
        if !await_state(pair, 1) {
            return 0;
        }
        let r = pair.region.load(Ordering::Acquire);
        if in_my_view(r, &mut entries) != Some(true) {
            return fail(p, "granted region not in the reader's view", r);
        }
        for i in 0..WORDS {
            // SAFETY: granted read-only to this thread; the owner revokes only after state 2.
            if unsafe { ((r + i * 8) as *const usize).read_volatile() } != pattern(p, round, i) {
                return fail(p, "wrong word", i);
            }
        }
        jitter(&mut rng);
        pair.state.store(2, Ordering::Release);
        if !await_state(pair, 3) {
            return 0;
        }
        // region_revoke has returned: the region must be out of this thread's view.
        if in_my_view(r, &mut entries) != Some(false) {
            return fail(p, "revoked region still in the reader's view", r);
        }
        pair.state.store(4, Ordering::Release);
        jitter(&mut rng);
    }
    p + 1
}

fn kernel_thread(k: usize) -> usize {
    if k % 2 == 0 {
        owner(k / 2)
    } else {
        reader(k / 2)
    }
}

fn main() -> i32 {
    println!("stress_kernel: seed {SEED:#x}; {KERNEL_THREADS} kernel threads in owner/reader pairs, {KERNEL_ROUNDS} rounds each");
    let mut tids = Vec::with_capacity(KERNEL_THREADS);
    for k in 0..KERNEL_THREADS {
        match sys::spawn(kernel_thread, k, STACK, false) {
            Ok(t) => tids.push(t),
            Err(e) => {
                println!("stress_kernel: FAILED: kernel thread {k}: {e:?}");
                return 1;
            }
        }
    }
    let wrong = tids.iter().enumerate().filter(|(k, t)| sys::thread_join(**t) != Ok(k / 2 + 1)).count();
    let grants = GRANTS.load(Ordering::Relaxed);
    if wrong != 0 || grants != (KERNEL_THREADS / 2 * KERNEL_ROUNDS) as u64 {
        println!("stress_kernel: FAILED: {wrong} kernel threads saw a wrong answer; {grants} rounds");
        return 1;
    }
    println!("stress_kernel: {KERNEL_THREADS} kernel threads, {grants} grant/check/revoke rounds; 0 wrong");
    0
}
libuthread::entry!(main);
