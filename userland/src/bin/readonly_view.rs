//! A thread whose view holds a region read-only tries to write it: the kernel must end this
//! program with a report (and go on with the others).
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicUsize, Ordering};
use libuthread::{println, sys};
use tsumugi_abi::syscall::rights;

static REGION: AtomicUsize = AtomicUsize::new(0);
static GO: AtomicUsize = AtomicUsize::new(0);

fn writer(_: usize) -> usize {
    while GO.load(Ordering::Acquire) == 0 {
        sys::yield_now();
    }
    let r = REGION.load(Ordering::Relaxed);
    // SAFETY: reading is allowed: the view holds the region read-only.
    let v = unsafe { (r as *const u64).read_volatile() };
    println!("readonly_view: read {v:#x}, now writing {r:#x}");
    // SAFETY: not safe, on purpose: the view holds the region read-only.
    unsafe { (r as *mut u64).write_volatile(2) };
    println!("readonly_view: FAILED: wrote through a read-only view");
    1
}

fn main() -> i32 {
    let Ok(r) = sys::region_create(4096, rights::READ | rights::WRITE, 0) else { return 1 };
    // SAFETY: the region is writable for this thread.
    unsafe { (r as *mut u64).write_volatile(0x5eed) };
    REGION.store(r, Ordering::Relaxed);
    let Ok(t) = sys::spawn(writer, 0, 16 * 1024, false) else { return 1 };
    if sys::region_grant(r, rights::READ, t).is_err() {
        println!("readonly_view: FAILED: could not make the region read-only for {t}");
        return 1;
    }
    GO.store(1, Ordering::Release);
    let _ = sys::thread_join(t);
    println!("readonly_view: FAILED: the writer survived");
    1
}
libuthread::entry!(main);
