//! The attacker of the grant-consent test (`grant_victim+grant_pusher`, issue 15 items 1 and
//! 8): it owns two regions and pushes them into the victim's threads. Without the victim's
//! consent every push is `EPERM` — to its main thread, to its view-mate, read-write, and after
//! this program consented to the *victim's* grants (consent goes one way); once the victim
//! accepts its grants (`grant_allow`) a push goes through; once the victim withdraws that,
//! pushes are `EPERM` again, a new region and a rights upgrade alike. Exits 0 when every
//! answer is the one the rule gives (ARCHITECTURE.md "Authority"); the victim checks it was
//! unaffected.
#![no_std]
#![no_main]

use libuthread::{println, sys, Errno};
use tsumugi_abi::syscall::rights;
use tsumugi_userland::grant_consent::*;

const PERM: sys::SysResult = Err(Some(Errno::Perm));

fn main() -> i32 {
    let (Ok(first), Ok(second)) = (
        sys::region_create(4096, rights::READ | rights::WRITE, 0),
        sys::region_create(4096, rights::READ | rights::WRITE, 0),
    ) else {
        return 1;
    };
    for r in [first, second] {
        // SAFETY: just created, writable, this program's own.
        unsafe { (r as *mut usize).write_volatile(PUSHED) };
    }
    if sys::publish(PUSHER_TID_KEY, sys::thread_self()).is_err() {
        return 1;
    }
    let victim = sys::lookup_wait(VICTIM_TID_KEY);
    let mate = sys::lookup_wait(VICTIM_MATE_KEY);
    let mut refused = [
        sys::region_grant(first, rights::READ, victim),
        sys::region_grant(first, rights::READ, mate),
        sys::region_grant(first, rights::READ | rights::WRITE, victim),
        Ok(0),
    ];
    // Consenting to the victim's grants gives this program no right to push into the victim.
    let own_consent = sys::grant_allow(victim, true);
    refused[3] = sys::region_grant(first, rights::READ, victim);
    println!("grant_pusher: without the victim's consent: {refused:?}");
    let _ = sys::publish(REFUSED_KEY, 1);
    sys::lookup_wait(ALLOWED_KEY);
    let granted = sys::region_grant(first, rights::READ, victim);
    println!("grant_pusher: with it: {granted:?}");
    let _ = sys::publish(GRANTED_KEY, first);
    sys::lookup_wait(WITHDRAWN_KEY);
    let after = [sys::region_grant(second, rights::READ, victim), sys::region_grant(first, rights::READ | rights::WRITE, mate)];
    println!("grant_pusher: after the victim withdrew it: {after:?}");
    let _ = sys::publish(DONE_KEY, second);
    // The victim reads this program's names and its region: stay until it has checked. It
    // publishes its answer just before it ends, and its names go with it: one whose CPU this
    // one's did not see between the two waited for ever (riscv64 views-smp4 on a loaded host).
    while sys::lookup(ACK_KEY).is_err() && sys::lookup(VICTIM_TID_KEY).is_ok() {
        sys::yield_now();
    }
    if refused.iter().all(|r| *r == PERM) && own_consent == Ok(0) && granted == Ok(0) && after.iter().all(|r| *r == PERM) {
        0
    } else {
        println!("grant_pusher: FAILED: an answer broke the consent rule");
        1
    }
}
libuthread::entry!(main);
