//! Default actions in a program without Kernel Notification (issue 16 part 3): bad arguments
//! are refused (an ended thread is `ESRCH`, a user thread cannot be named), ignored numbers
//! change nothing — also when sent to a thread asleep in the kernel —, and TERMINATE sent to
//! that sleeping thread, while the main thread waits in a join, ends the program with a report
//! (the suite checks it): the waits do not keep it alive.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicUsize, Ordering};
use libuthread::{println, sys, Errno};
use tsumugi_abi::signal::{scope, CHILD, FIRST_FREE, TERMINATE, WINCH};

static SLEEPER: AtomicUsize = AtomicUsize::new(0);

fn short(_: usize) -> usize {
    5
}

fn sleep_forever(_: usize) -> usize {
    loop {
        let _ = sys::sleep_nanos(3600 * 1_000_000_000);
    }
}

/// Gives the others time to block (they do not need it to be killed: the kill is checked
/// either way), then sends TERMINATE to the sleeper.
fn killer(_: usize) -> usize {
    for _ in 0..200 {
        sys::yield_now();
    }
    let r = sys::signal(SLEEPER.load(Ordering::SeqCst), TERMINATE, scope::THREAD);
    println!("signal_default: FAILED: still running after TERMINATE ({r:?})");
    sys::exit(1)
}

fn main() -> i32 {
    let mut ok = true;
    let mut expect = |what: &str, got: sys::SysResult, want: sys::SysResult| {
        if got != want {
            println!("signal_default: FAILED: {what}: {got:?}, expected {want:?}");
            ok = false;
        }
    };
    let me = sys::thread_self();
    let Ok(ended) = sys::spawn(short, 0, 16 * 1024, false) else { return 1 };
    expect("join", sys::thread_join(ended), Ok(5));
    expect("an ended thread", sys::signal(ended, TERMINATE, scope::THREAD), Err(Some(Errno::Srch)));
    expect("a user thread without Kernel Notification", sys::signal(0x4000_0040, TERMINATE, scope::UTHREAD), Err(Some(Errno::Inval)));
    expect("number 0", sys::signal(me, 0, scope::THREAD), Err(Some(Errno::Inval)));
    expect("number 64", sys::signal(me, 64, scope::PROGRAM), Err(Some(Errno::Inval)));
    expect("allow 2", sys::signal_allow_raw(me, 2), Err(Some(Errno::Inval)));
    expect("allow from nobody", sys::signal_allow(usize::MAX, true), Err(Some(Errno::Srch)));
    expect("allow own program", sys::signal_allow(me, true), Ok(0));
    expect("deny own program", sys::signal_allow(me, false), Ok(0));
    let Ok(sleeper) = sys::spawn(sleep_forever, 0, 16 * 1024, false) else { return 1 };
    SLEEPER.store(sleeper, Ordering::SeqCst);
    for _ in 0..50 {
        sys::yield_now();
    }
    expect("CHILD to the program", sys::signal(me, CHILD, scope::PROGRAM), Ok(0));
    expect("WINCH to the sleeper", sys::signal(sleeper, WINCH, scope::THREAD), Ok(0));
    expect("a free number to the sleeper", sys::signal(sleeper, FIRST_FREE + 3, scope::THREAD), Ok(0));
    if !ok {
        return 1;
    }
    println!("signal_default: bad arguments refused, ignored signals changed nothing; TERMINATE to the sleeping thread next");
    if sys::spawn(killer, 0, 16 * 1024, false).is_err() {
        return 1;
    }
    let r = sys::thread_join(sleeper);
    println!("signal_default: FAILED: the join returned {r:?}");
    1
}

libuthread::entry!(main);
