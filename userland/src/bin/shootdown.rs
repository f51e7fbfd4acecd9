//! A region revoked while threads of that view run on other CPUs: the thread it was revoked
//! from faults on its next touch, on the CPU where it runs (the kernel sends a shoot-down).
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicUsize, Ordering};
use libuthread::{println, sys};
use tsumugi_abi::syscall::rights;

const TOUCHERS: usize = 3;

static REGION: AtomicUsize = AtomicUsize::new(0);
static CPU_OF: [AtomicUsize; TOUCHERS] = [const { AtomicUsize::new(usize::MAX) }; TOUCHERS];
static TOUCHES: AtomicUsize = AtomicUsize::new(0);

fn toucher(i: usize) -> usize {
    let r = REGION.load(Ordering::Relaxed);
    CPU_OF[i].store(sys::cpu_id(), Ordering::Release);
    loop {
        // SAFETY: allowed until the region is revoked from this thread; then it must fault.
        let _ = unsafe { (r as *const u64).read_volatile() };
        TOUCHES.fetch_add(1, Ordering::Relaxed);
    }
}

fn main() -> i32 {
    let Ok(r) = sys::region_create(4096, rights::READ | rights::WRITE, 0) else { return 1 };
    REGION.store(r, Ordering::Relaxed);
    let mut tids = [0usize; TOUCHERS];
    for (i, t) in tids.iter_mut().enumerate() {
        let Ok(tid) = sys::spawn(toucher, i, 16 * 1024, true) else { return 1 };
        *t = tid;
    }
    while CPU_OF.iter().any(|c| c.load(Ordering::Acquire) == usize::MAX) || TOUCHES.load(Ordering::Relaxed) < 10_000 {
        sys::yield_now();
    }
    let me = sys::cpu_id();
    let pick = (0..TOUCHERS).find(|&i| CPU_OF[i].load(Ordering::Relaxed) != me).unwrap_or(0);
    println!("shootdown: revoking {r:#x} from thread {} (started on cpu {}; I am on cpu {me})", tids[pick], CPU_OF[pick].load(Ordering::Relaxed));
    if sys::region_revoke(r, tids[pick]).is_err() {
        return 1;
    }
    for t in tids {
        let _ = sys::thread_join(t);
    }
    println!("shootdown: FAILED: the thread survived");
    1
}
libuthread::entry!(main);
