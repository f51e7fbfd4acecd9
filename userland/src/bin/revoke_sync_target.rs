//! The target of `revoke_sync`: writes a counter into the region it was granted, without
//! pause, on a CPU of its own, until the revoke makes its next write fault (which ends it). It
//! accepts the owner's grants before it says who it is.
#![no_std]
#![no_main]

use libuthread::sys;
use tsumugi_userland::revoke_sync::*;

fn main() -> i32 {
    // CPU 1 if there is one (the owner pins itself to CPU 0); on one CPU both share it.
    let _ = sys::thread_pin(Some(1));
    if sys::grant_allow(sys::lookup_wait(OWNER_TID_KEY), true).is_err() {
        return 1;
    }
    let _ = sys::publish(TARGET_TID_KEY, sys::thread_self());
    let counter = sys::lookup_wait(REGION_KEY) as *mut u64;
    // SAFETY: granted read-write by the owner until it revokes it; then the write faults.
    unsafe { counter.add(1).write_volatile(sys::cpu_id() as u64) };
    let mut n = 0u64;
    loop {
        n += 1;
        // SAFETY: as above.
        unsafe { counter.write_volatile(n) };
    }
}
libuthread::entry!(main);
