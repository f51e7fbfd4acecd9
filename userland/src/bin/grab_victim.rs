//! The victim of the grant/revoke authority test (see `grabber`): after the attack its region
//! is still its own, and both its threads — view-mates — still share one view: a region it
//! creates afterwards reaches its other thread, and the region the attacker pushed reached both.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicUsize, Ordering};
use libuthread::{println, sys};
use tsumugi_abi::syscall::rights;
use tsumugi_userland::grab::*;

/// Set by the main thread: a region the mate must write (0: not yet).
static LATER: AtomicUsize = AtomicUsize::new(0);
/// The attacker's region, for the mate to read.
static PUSHED: AtomicUsize = AtomicUsize::new(0);

fn mate(_: usize) -> usize {
    loop {
        let later = LATER.load(Ordering::Acquire);
        if later != 0 {
            // SAFETY: the main thread created it after the attack; a view-mate holds it too.
            unsafe { (later as *mut usize).write_volatile(PATTERN) };
            // SAFETY: pushed into the main thread's view, so into this view-mate's as well.
            let _ = unsafe { (PUSHED.load(Ordering::Acquire) as *const usize).read_volatile() };
            return 7;
        }
        sys::yield_now();
    }
}

fn main() -> i32 {
    let Ok(region) = sys::region_create(4096, rights::READ | rights::WRITE, 0) else { return 1 };
    // SAFETY: just created, writable.
    unsafe { (region as *mut usize).write_volatile(PATTERN) };
    let Ok(m) = sys::spawn(mate, 0, 16 * 1024, false) else { return 1 };
    let _ = sys::publish(VICTIM_FIRST_KEY, sys::thread_self());
    let attacker = sys::lookup_wait(ATTACKER_TID_KEY);
    // Accept the attacker's grants: its push is let in, and must reach both view-mates.
    if sys::grant_allow(attacker, true).is_err() {
        println!("grab_victim: FAILED: grant_allow");
        return 1;
    }
    if sys::region_grant(region, rights::READ, attacker).is_err() {
        println!("grab_victim: FAILED: could not grant the attacker read rights");
        return 1;
    }
    let _ = sys::publish(VICTIM_REGION_KEY, region);
    let _ = sys::publish(VICTIM_MATE_KEY, m);
    let _ = sys::publish(VICTIM_TID_KEY, sys::thread_self());
    let pushed = sys::lookup_wait(ATTACKER_DONE_KEY);
    // SAFETY: its own region, writable; the attacker waits for this word.
    unsafe { ((region + 8) as *mut usize).write_volatile(1) };
    // A fault here (the revoke went through) kills this program: the suite sees it.
    // SAFETY: the victim's own region, which the attacker may not take away.
    let still = unsafe { (region as *const usize).read_volatile() };
    let Ok(later) = sys::region_create(4096, rights::READ | rights::WRITE, 0) else { return 1 };
    PUSHED.store(pushed, Ordering::Release);
    LATER.store(later, Ordering::Release);
    let joined = sys::thread_join(m);
    // SAFETY: created above, writable.
    let written = unsafe { (later as *const usize).read_volatile() };
    if still == PATTERN && joined == Ok(7) && written == PATTERN {
        println!("grab_victim: its region stayed its own and its threads stayed view-mates");
        0
    } else {
        println!("grab_victim: FAILED: region {still:#x}, mate {joined:?}, written {written:#x}");
        1
    }
}
libuthread::entry!(main);
