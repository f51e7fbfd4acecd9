//! The sender of the cross-program signal test (see `signal_victim`), a program without Kernel
//! Notification: refused (`EPERM`) until the victim accepts its program, delivered then, and
//! refused again once the victim withdraws the right.
#![no_std]
#![no_main]

use libuthread::{println, sys, Errno};
use tsumugi_abi::signal::{scope, KILL, TERMINATE, USER2};
use tsumugi_userland::signal_test::*;

/// Sends until the victim's ring takes it.
fn send(victim: usize, scope: usize) -> sys::SysResult {
    loop {
        match sys::signal(victim, USER2, scope) {
            Err(Some(Errno::Again)) => sys::yield_now(),
            r => return r,
        }
    }
}

fn main() -> i32 {
    let _ = sys::publish(SENDER_TID_KEY, sys::thread_self());
    let victim = sys::lookup_wait(VICTIM_TID_KEY);
    let refused = [
        sys::signal(victim, USER2, scope::PROGRAM),
        sys::signal(victim, USER2, scope::THREAD),
        sys::signal(victim, TERMINATE, scope::PROGRAM),
        sys::signal(victim, KILL, scope::PROGRAM),
    ];
    println!("signal_sender: without the victim's consent: {refused:?}");
    // A number out of range is refused before the right is looked at; a user thread of
    // another program cannot be named at all (the sender has no Kernel Notification).
    let bad = [sys::signal(victim, 0, scope::PROGRAM), sys::signal(victim, 64, scope::THREAD), sys::signal(victim, USER2, scope::UTHREAD)];
    let _ = sys::publish(REFUSED_KEY, 1);
    sys::lookup_wait(ALLOWED_KEY);
    let allowed = [send(victim, scope::PROGRAM), send(victim, scope::THREAD)];
    println!("signal_sender: with it: {allowed:?}");
    sys::lookup_wait(DENIED_KEY);
    let denied = sys::signal(victim, USER2, scope::PROGRAM);
    println!("signal_sender: after the victim withdrew it: {denied:?}");
    let _ = sys::publish(DONE_KEY, 1);
    // The victim reads DONE before it ends; names go with their program, so stay until then.
    while sys::lookup(VICTIM_TID_KEY).is_ok() {
        sys::yield_now();
    }
    let perm = Err(Some(Errno::Perm));
    let inval = Err(Some(Errno::Inval));
    if refused.iter().all(|r| *r == perm) && bad.iter().all(|r| *r == inval) && allowed == [Ok(0), Ok(0)] && denied == perm {
        println!("signal_sender: all checks passed");
        0
    } else {
        println!("signal_sender: FAILED: bad arguments {bad:?}");
        1
    }
}

libuthread::entry!(main);
