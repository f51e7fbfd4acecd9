//! The owner's side of `revoke_sync+revoke_sync_target` (issue 15 item 2, revocation that means
//! it): it grants a region to a thread of another program, which writes a counter into it
//! without pause, pinned to another CPU; then it revokes the region. Once `region_revoke`
//! returns, the target's CPU has left the view that held the region, so the counter never moves
//! again (before, the kick that made that CPU reload was asynchronous and the target went on
//! writing until it landed). The target's next write faults, which ends its program.
#![no_std]
#![no_main]

use libuthread::{println, sys};
use tsumugi_abi::syscall::rights;
use tsumugi_userland::revoke_sync::*;

/// Reads of the counter after the revoke (the target, if it still could, would move it).
const WATCH: usize = 200_000;

fn main() -> i32 {
    let _ = sys::thread_pin(Some(0));
    let Ok(region) = sys::region_create(4096, rights::READ | rights::WRITE, 0) else { return 1 };
    let counter = region as *const u64;
    let _ = sys::publish(OWNER_TID_KEY, sys::thread_self());
    let target = sys::lookup_wait(TARGET_TID_KEY);
    if sys::region_grant(region, rights::READ | rights::WRITE, target).is_err() {
        println!("revoke_sync: FAILED: could not grant the region to the target");
        return 1;
    }
    let _ = sys::publish(REGION_KEY, region);
    // SAFETY (all reads): the owner's own region, readable.
    while unsafe { counter.read_volatile() } < 10_000 {
        sys::yield_now();
    }
    let target_cpu = unsafe { counter.add(1).read_volatile() };
    if let Err(e) = sys::region_revoke(region, target) {
        println!("revoke_sync: FAILED: region_revoke {e:?}");
        return 1;
    }
    let stopped = unsafe { counter.read_volatile() };
    let mut last = stopped;
    for _ in 0..WATCH {
        last = unsafe { counter.read_volatile() };
        if last != stopped {
            break;
        }
        core::hint::spin_loop();
    }
    if last != stopped {
        println!("revoke_sync: FAILED: the target wrote {stopped} then {last} after region_revoke returned");
        return 1;
    }
    println!(
        "revoke_sync: the target (cpu {target_cpu}; the owner on cpu {}) wrote nothing after region_revoke returned (it stopped at {stopped})",
        sys::cpu_id()
    );
    0
}
libuthread::entry!(main);
