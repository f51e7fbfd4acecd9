//! The attacker of the grant/revoke authority test: holding read rights the victim granted it,
//! it tries to revoke the victim's own region from the victim, to pass those rights on to
//! another of the victim's threads, and pushes a region of its own into one victim thread (the
//! victim accepts its grants: `grant_pusher+grant_victim` tests a push without consent) —
//! which must reach all of the victim's view-mates, never split them. Exits 0 when each answer
//! is the one the authority rules give (ARCHITECTURE.md).
#![no_std]
#![no_main]

use libuthread::{println, sys, Errno};
use tsumugi_abi::syscall::rights;
use tsumugi_userland::grab::*;

fn main() -> i32 {
    // The victim grants this program read rights on its region: accept its grants first.
    if sys::grant_allow(sys::lookup_wait(VICTIM_FIRST_KEY), true).is_err() {
        println!("grabber: FAILED: grant_allow");
        return 1;
    }
    if sys::publish(ATTACKER_TID_KEY, sys::thread_self()).is_err() {
        return 1;
    }
    let victim = sys::lookup_wait(VICTIM_TID_KEY);
    let mate = sys::lookup_wait(VICTIM_MATE_KEY);
    let region = sys::lookup_wait(VICTIM_REGION_KEY);
    // SAFETY: the victim granted this thread read rights on its region before publishing it.
    let seen = unsafe { (region as *const usize).read_volatile() };
    let revoke = sys::region_revoke(region, victim);
    println!("grabber: revoking the owner's region from the owner: {revoke:?}");
    let pass_on = sys::region_grant(region, rights::READ, mate);
    println!("grabber: passing a granted region on to another program's thread: {pass_on:?}");
    let Ok(mine) = sys::region_create(4096, rights::READ | rights::WRITE, 0) else { return 1 };
    let push = sys::region_grant(mine, rights::READ, victim);
    println!("grabber: pushing its own region into one victim thread: {push:?}");
    // A machine-wide setting, while the victim runs: refused (reading it is not).
    let flip = sys::sched_affinity(Some(false));
    let read = sys::sched_affinity(None);
    println!("grabber: switching the scheduler's affinity off while another program runs: {flip:?} (reading it: {})", read.is_ok());
    let ok = seen == PATTERN
        && revoke == Err(Some(Errno::Perm))
        && pass_on == Err(Some(Errno::Perm))
        && push == Ok(0)
        && flip == Err(Some(Errno::Perm))
        && read.is_ok();
    let _ = sys::publish(ATTACKER_DONE_KEY, mine);
    // Stay (names go with their program) until the victim has read that name: it says so in
    // the second word of its region, which this thread may read (and which lives on in this
    // view whatever the victim does).
    // SAFETY: read rights on the victim's region, granted before it was published.
    while unsafe { ((region + 8) as *const usize).read_volatile() } == 0 {
        sys::yield_now();
    }
    if ok {
        0
    } else {
        println!("grabber: FAILED: an answer broke the authority rules");
        1
    }
}
libuthread::entry!(main);
