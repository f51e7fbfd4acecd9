//! Run twice at once (`twin+twin`): each instance lives at its own addresses, prints them, and
//! checks its own data is its own. The kernel loads every program of a `+` group before it
//! starts any, so the two instances are alive at the same time whatever the host's speed.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicUsize, Ordering};
use libuthread::{println, sys};

static MINE: AtomicUsize = AtomicUsize::new(0);

fn main() -> i32 {
    let me = sys::thread_self();
    MINE.store(me, Ordering::Relaxed);
    for _ in 0..50 {
        sys::yield_now();
        if MINE.load(Ordering::Relaxed) != me {
            println!("twin: FAILED: another instance wrote my data");
            return 1;
        }
    }
    println!("twin: thread {me}, code at {:#x}, data at {:#x}", main as *const () as usize, &MINE as *const _ as usize);
    0
}
libuthread::entry!(main);
