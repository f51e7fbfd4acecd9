//! A region revoked from a running thread faults on that thread's next touch, whichever CPU it
//! runs on: the kernel ends the program with a report.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicUsize, Ordering};
use libuthread::{println, sys};
use tsumugi_abi::syscall::rights;

static REGION: AtomicUsize = AtomicUsize::new(0);
static TOUCHES: AtomicUsize = AtomicUsize::new(0);

fn toucher(_: usize) -> usize {
    let r = REGION.load(Ordering::Relaxed);
    loop {
        // SAFETY: allowed until the region is revoked; then this read must fault.
        let v = unsafe { (r as *const u64).read_volatile() };
        TOUCHES.fetch_add(1 + (v as usize & 0), Ordering::Relaxed);
    }
}

fn main() -> i32 {
    let Ok(r) = sys::region_create(4096, rights::READ | rights::WRITE, 0) else { return 1 };
    REGION.store(r, Ordering::Relaxed);
    let Ok(t) = sys::spawn(toucher, 0, 16 * 1024, false) else { return 1 };
    while TOUCHES.load(Ordering::Relaxed) < 1000 {
        sys::yield_now();
    }
    println!("revoke_faults: thread {t} touched {r:#x} {} times; revoking", TOUCHES.load(Ordering::Relaxed));
    if let Err(e) = sys::region_revoke(r, t) {
        println!("revoke_faults: FAILED: revoke: {e:?}");
        return 1;
    }
    let _ = sys::thread_join(t);
    println!("revoke_faults: FAILED: the toucher survived the revoke");
    1
}
libuthread::entry!(main);
