//! What one rights change costs, in instructions (cycles under `-icount shift=0`), with a large
//! region in play (issue 15 item 5: bounded kernel work with interrupts off). A second thread
//! of the program holds a 32 MiB eager region; the main thread revokes and grants a one-page
//! region and the large one to it, and that thread then reads one word of every page of the
//! large region (the first touches a bounded change leaves to page faults). Between steps both
//! threads switch, so the views they left are freed and each change makes a new view. Prints
//! `BENCH table=grant_cost row=<step> instructions=<n>` (run with `cargo xtask run --release
//! --icount -- run=grantbench`).
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use libuthread::{println, sys};
use tsumugi_abi::syscall::{rights, Clock};

/// Pages of the large region (32 MiB).
const LARGE_PAGES: usize = 8192;
const PAGE: usize = 4096;

/// 1: the helper should read the large region; 2: it should end.
static ASK: AtomicUsize = AtomicUsize::new(0);
/// The large region's address.
static LARGE: AtomicUsize = AtomicUsize::new(0);
/// Instructions the helper's read of every page took (0: not yet).
static TOUCHED: AtomicU64 = AtomicU64::new(0);

fn cycles() -> u64 {
    sys::clock(Clock::Cycles).unwrap_or(0) as u64
}

fn helper(_: usize) -> usize {
    loop {
        match ASK.load(Ordering::Acquire) {
            1 => {
                let large = LARGE.load(Ordering::Acquire);
                let start = cycles();
                let mut sum = 0usize;
                for p in 0..LARGE_PAGES {
                    // SAFETY: granted read-only to this thread before ASK became 1.
                    sum = sum.wrapping_add(unsafe { ((large + p * PAGE) as *const usize).read_volatile() });
                }
                TOUCHED.store((cycles() - start).max(1), Ordering::Release);
                ASK.store(0, Ordering::Release);
                core::hint::black_box(sum);
            }
            2 => return 0,
            _ => sys::yield_now(),
        }
    }
}

/// Lets the helper run, so the views both threads left are freed.
fn settle() {
    for _ in 0..4 {
        sys::yield_now();
    }
}

fn measure(row: &str, f: impl FnOnce() -> sys::SysResult) -> bool {
    settle();
    let start = cycles();
    let r = f();
    let n = cycles() - start;
    println!("BENCH table=grant_cost row={row} instructions={n}");
    if r.is_err() {
        println!("grantbench: FAILED: {row}: {r:?}");
    }
    r.is_ok()
}

fn main() -> i32 {
    let _ = sys::thread_pin(Some(0));
    let Ok(t) = sys::spawn(helper, 0, 16 * 1024, false) else { return 1 };
    // Both threads are view-mates: each region reaches the helper too.
    let (Ok(large), Ok(small)) = (sys::region_create(LARGE_PAGES * PAGE, rights::READ | rights::WRITE, 0), sys::region_create(PAGE, rights::READ | rights::WRITE, 0)) else {
        return 1;
    };
    LARGE.store(large, Ordering::Release);
    let ok = measure("revoke_small_beside_large", || sys::region_revoke(small, t))
        && measure("grant_small_beside_large", || sys::region_grant(small, rights::READ, t))
        && measure("revoke_large", || sys::region_revoke(large, t))
        && measure("grant_large", || sys::region_grant(large, rights::READ, t));
    ASK.store(1, Ordering::Release);
    while TOUCHED.load(Ordering::Acquire) == 0 {
        sys::yield_now();
    }
    println!("BENCH table=grant_cost row=touch_large_after_grant instructions={}", TOUCHED.load(Ordering::Acquire));
    ASK.store(2, Ordering::Release);
    let _ = sys::thread_join(t);
    if ok {
        println!("grantbench: done");
        0
    } else {
        1
    }
}
libuthread::entry!(main);
