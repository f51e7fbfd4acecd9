//! The half of `s3_waiter+s3_holder` that ends early: holds the shared locks the waiter's
//! threads queue for, joins the shared barrier's rounds, and ends holding one lock and with a
//! thread waiting at another barrier (what the others get is in ARCHITECTURE.md).
#![no_std]
#![no_main]
extern crate alloc;

use alloc::vec::Vec;
use core::sync::atomic::Ordering;
use libuthread::{println, sys};
use tsumugi_abi::s3::{barrier, WAITERS};
use tsumugi_userland::s3::*;


fn main() -> i32 {
    // The waiter grants this program its region: accept its grants first.
    if let Err(e) = sys::grant_allow(sys::lookup_wait(WAITER_TID_KEY), true) {
        println!("s3_holder: FAILED: grant_allow: {e:?}");
        return 1;
    }
    let _ = sys::publish(HOLDER_TID_KEY, sys::thread_self());
    let region = sys::lookup_wait(REGION_KEY);
    // SAFETY: the waiter initialised the region before publishing it and outlives this program.
    let s: &'static Shared = unsafe { &*(region as *const Shared) };
    libuthread::run(4, move || {
        let mut handed = s.handed.lock();
        let orphaned = s.orphaned.lock();
        let _ = sys::publish(HOLDING_KEY, 1);
        until(|| word(s.handed.word()) & WAITERS != 0);
        *handed = HANDED_VALUE;
        drop(handed);
        let workers: Vec<_> = (0..BARRIER_THREADS)
            .map(|_| {
                libuthread::spawn(move || {
                    for r in 0..BARRIER_ROUNDS {
                        s.arrivals[r].fetch_add(1, Ordering::AcqRel);
                        let _ = s.rounds.wait();
                    }
                })
            })
            .collect();
        workers.into_iter().for_each(|w| w.join().unwrap());
        // One thread at `broken` (count 4), waiting in the kernel: the sleepers bit is its (the
        // waiter's threads arrive only once they saw it).
        let _waiting = libuthread::spawn(move || s.broken.wait());
        until(|| word(s.broken.word()) & barrier::SLEEPERS != 0);
        sys::lookup_wait(END_KEY);
        println!("s3_holder: ending with a lock held and a thread at a barrier");
        core::mem::forget(orphaned);
    });
    0
}
libuthread::entry!(main);
