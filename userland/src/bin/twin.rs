//! Run twice at once (`twin+twin`): each instance lives at its own addresses, prints them, and
//! checks its own data is its own.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicUsize, Ordering};
use libuthread::{println, sys};

static MINE: AtomicUsize = AtomicUsize::new(0);

/// How long an instance stays alive after its yields, so that an instance the kernel starts
/// right after this one runs at the same time even when another CPU took this one at once (its
/// yields alone take microseconds there, loading the next program takes milliseconds).
const LINGER_NANOS: u64 = 200_000_000;

fn main() -> i32 {
    let me = sys::thread_self();
    MINE.store(me, Ordering::Relaxed);
    for round in 0..=50 {
        if round < 50 {
            sys::yield_now();
        } else if sys::sleep_nanos(LINGER_NANOS).is_err() {
            return 1;
        }
        if MINE.load(Ordering::Relaxed) != me {
            println!("twin: FAILED: another instance wrote my data");
            return 1;
        }
    }
    println!("twin: thread {me}, code at {:#x}, data at {:#x}", main as *const () as usize, &MINE as *const _ as usize);
    0
}
libuthread::entry!(main);
