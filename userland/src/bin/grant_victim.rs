//! The victim of the grant-consent test (see `grant_pusher`): two threads that share one view.
//! The pusher's grants without its consent change nothing — its view is the same entry for
//! entry, its own region keeps its word, and a region it creates afterwards still reaches its
//! other thread (no split). With its consent the pushed region arrives read-only in both
//! threads; after it withdraws consent, nothing more arrives and the rights stay as granted.
//! Exits 0 when all of that holds.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicUsize, Ordering};
use libuthread::{println, sys};
use tsumugi_abi::syscall::{rights, ViewEntry};
use tsumugi_userland::grant_consent::*;

/// An address the main thread asks its view-mate to read (0: none; 1: stop).
static ASK: AtomicUsize = AtomicUsize::new(0);
/// What the mate read there.
static ANSWER: AtomicUsize = AtomicUsize::new(0);
/// Answers given.
static ANSWERS: AtomicUsize = AtomicUsize::new(0);

const STOP: usize = 1;
const MAX_VIEW: usize = 32;

/// Reads what the main thread asks for, in the view both share: a region missing from the
/// mate's view would fault and end the program.
fn mate(_: usize) -> usize {
    loop {
        match ASK.swap(0, Ordering::AcqRel) {
            0 => sys::yield_now(),
            STOP => return 7,
            at => {
                // SAFETY: the main thread asks only for regions in its view, which the mate shares.
                ANSWER.store(unsafe { (at as *const usize).read_volatile() }, Ordering::Release);
                ANSWERS.fetch_add(1, Ordering::AcqRel);
            }
        }
    }
}

/// The word at `at` as the mate reads it.
fn mate_reads(at: usize) -> usize {
    let before = ANSWERS.load(Ordering::Acquire);
    ASK.store(at, Ordering::Release);
    while ANSWERS.load(Ordering::Acquire) == before {
        sys::yield_now();
    }
    ANSWER.load(Ordering::Acquire)
}

/// The caller's view.
fn view() -> ([ViewEntry; MAX_VIEW], usize) {
    let mut v = [ViewEntry::default(); MAX_VIEW];
    let n = sys::view_query(&mut v).unwrap_or(usize::MAX);
    (v, n)
}

/// Rights on the region at `at` in the caller's view (`None`: not in it).
fn held(at: usize) -> Option<u64> {
    let (v, n) = view();
    v[..n.min(MAX_VIEW)].iter().find(|e| e.start == at as u64).map(|e| e.rights)
}

fn main() -> i32 {
    let Ok(own) = sys::region_create(4096, rights::READ | rights::WRITE, 0) else { return 1 };
    // SAFETY: just created, writable.
    unsafe { (own as *mut usize).write_volatile(OWN) };
    let Ok(m) = sys::spawn(mate, 0, 16 * 1024, false) else { return 1 };
    let before = view();
    let _ = sys::publish(VICTIM_MATE_KEY, m);
    let _ = sys::publish(VICTIM_TID_KEY, sys::thread_self());
    let pusher = sys::lookup_wait(PUSHER_TID_KEY);
    sys::lookup_wait(REFUSED_KEY);
    // 1. Refused: nothing changed.
    let after_refusal = view();
    let unchanged = before.1 == after_refusal.1 && before.1 <= MAX_VIEW && before.0[..before.1] == after_refusal.0[..after_refusal.1];
    let Ok(later) = sys::region_create(4096, rights::READ | rights::WRITE, 0) else { return 1 };
    // SAFETY: just created, writable.
    unsafe { (later as *mut usize).write_volatile(OWN ^ 1) };
    let still_mates = mate_reads(later) == OWN ^ 1;
    // 2. Consent: the push arrives, read-only, in both threads.
    if sys::grant_allow(pusher, true).is_err() {
        println!("grant_victim: FAILED: grant_allow");
        return 1;
    }
    let _ = sys::publish(ALLOWED_KEY, 1);
    let pushed = sys::lookup_wait(GRANTED_KEY);
    let arrived = held(pushed) == Some(rights::READ as u64)
        // SAFETY: granted read-only to this thread (the kernel said so just above).
        && unsafe { (pushed as *const usize).read_volatile() } == PUSHED
        && mate_reads(pushed) == PUSHED;
    // 3. Withdrawn: nothing more arrives, the granted rights stay as they were.
    let withdrawn = sys::grant_allow(pusher, false);
    let _ = sys::publish(WITHDRAWN_KEY, 1);
    let second = sys::lookup_wait(DONE_KEY);
    let refused_again = withdrawn == Ok(0) && held(second).is_none() && held(pushed) == Some(rights::READ as u64);
    // SAFETY: its own region, which nobody else may take away.
    let own_kept = unsafe { (own as *const usize).read_volatile() } == OWN;
    let ok = unchanged && still_mates && arrived && refused_again && own_kept;
    if ok {
        println!("grant_victim: the refused grants changed nothing and left its threads view-mates; the allowed one reached both; none after the withdrawal");
    } else {
        println!(
            "grant_victim: FAILED: unchanged {unchanged}, view-mates {still_mates}, arrived {arrived}, refused again {refused_again}, own region {own_kept}"
        );
    }
    let _ = sys::publish(ACK_KEY, 1);
    // The pushed region goes with the pusher: the mate reads nothing more.
    ASK.store(STOP, Ordering::Release);
    let joined = sys::thread_join(m);
    if ok && joined == Ok(7) {
        0
    } else {
        1
    }
}
libuthread::entry!(main);
