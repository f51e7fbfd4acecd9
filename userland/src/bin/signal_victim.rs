//! The target of the cross-program signal test (see `signal_sender`), on libuthread: while it
//! has not accepted the sender's program, the sender's signals (KILL among them) are refused
//! and nothing reaches it; after `signal_allow` they run its handler, which sees the sender's
//! thread id; after it withdraws the right, they are refused again.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicUsize, Ordering};
use libuthread::signal::{self, Signal, USER2};
use libuthread::{println, sys};
use tsumugi_userland::signal_test::*;

static RAN: AtomicUsize = AtomicUsize::new(0);
/// Runs whose sender was the sender's published thread and whose target the program.
static FROM_SENDER: AtomicUsize = AtomicUsize::new(0);
static SENDER: AtomicUsize = AtomicUsize::new(0);

fn on_user2(s: Signal) {
    if s.sender == SENDER.load(Ordering::SeqCst) && s.thread.is_none() {
        FROM_SENDER.fetch_add(1, Ordering::SeqCst);
    }
    RAN.fetch_add(1, Ordering::SeqCst);
}

/// Yields (to the library's threads and to the other program) until `cond` holds; the
/// suite's time limit catches a hang.
fn until(cond: impl Fn() -> bool) {
    while !cond() {
        libuthread::yield_now();
        sys::yield_now();
    }
}

fn main() -> i32 {
    // The program's first kernel thread: vCPU 0 once the runtime starts.
    let me = sys::thread_self();
    libuthread::run(2, move || {
        if signal::set_handler(USER2, Some(on_user2)).is_err() {
            return 1;
        }
        let _ = sys::publish(VICTIM_TID_KEY, me);
        let sender = sys::lookup_wait(SENDER_TID_KEY);
        SENDER.store(sender, Ordering::SeqCst);
        sys::lookup_wait(REFUSED_KEY);
        // Refused sends must not have queued anything: let the library drain its ring first.
        for _ in 0..100 {
            libuthread::yield_now();
            sys::yield_now();
        }
        let before = RAN.load(Ordering::SeqCst);
        if signal::allow_from(sender).is_err() {
            return 1;
        }
        let _ = sys::publish(ALLOWED_KEY, 1);
        until(|| RAN.load(Ordering::SeqCst) >= ALLOWED_SENDS);
        let from = FROM_SENDER.load(Ordering::SeqCst);
        if signal::deny_from(sender).is_err() {
            return 1;
        }
        let _ = sys::publish(DENIED_KEY, 1);
        sys::lookup_wait(DONE_KEY);
        for _ in 0..100 {
            libuthread::yield_now();
            sys::yield_now();
        }
        let after = RAN.load(Ordering::SeqCst);
        println!(
            "signal_victim: {before} handled before it accepted the sender; then {from} of {ALLOWED_SENDS} ran the handler from the sender's thread; {after} after it withdrew the right"
        );
        if before == 0 && from == ALLOWED_SENDS && after == ALLOWED_SENDS {
            println!("signal_victim: all checks passed");
            0
        } else {
            println!("signal_victim: FAILED");
            1
        }
    })
}

libuthread::entry!(main);
