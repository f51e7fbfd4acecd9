//! The long-lived half of `s3_waiter+s3_holder` (S3 across programs): makes the shared region,
//! grants it to the holder, then checks that a lock the holder releases comes to a waiter
//! queued in the kernel, already acquired for it; that a barrier of both programs' threads
//! releases every round together; and what the waiters get when the holder's program ends
//! holding a lock (it, marked inherited) and with a thread at a barrier (`BarrierBroken`).
#![no_std]
#![no_main]
extern crate alloc;

use alloc::vec::Vec;
use core::sync::atomic::{AtomicUsize, Ordering};
use libuthread::sync::{SharedBarrier, SharedMutex};
use libuthread::{println, sys};
use tsumugi_abi::s3::{barrier, WAITERS};
use tsumugi_abi::syscall::rights;
use tsumugi_userland::s3::*;


fn main() -> i32 {
    let Ok(region) = sys::region_create(4096, rights::READ | rights::WRITE, 0) else {
        println!("s3_waiter: FAILED: region_create");
        return 1;
    };
    let shared = region as *mut Shared;
    // SAFETY: a fresh region of this program, large enough, used only through these types.
    unsafe {
        SharedMutex::init_at(core::ptr::addr_of_mut!((*shared).handed), 0);
        SharedMutex::init_at(core::ptr::addr_of_mut!((*shared).orphaned), 0);
        SharedBarrier::init_at(core::ptr::addr_of_mut!((*shared).rounds), 2 * BARRIER_THREADS);
        SharedBarrier::init_at(core::ptr::addr_of_mut!((*shared).broken), 4);
    }
    // SAFETY: initialised above; the region lives as long as this program.
    let s: &'static Shared = unsafe { &*shared };
    let _ = sys::publish(WAITER_TID_KEY, sys::thread_self());
    let holder = sys::lookup_wait(HOLDER_TID_KEY);
    if let Err(e) = sys::region_grant(region, rights::READ | rights::WRITE, holder) {
        println!("s3_waiter: FAILED: grant to the holder: {e:?}");
        return 1;
    }
    let _ = sys::publish(REGION_KEY, region);
    let ok = libuthread::run(4, move || {
        let mut ok = true;
        sys::lookup_wait(HOLDING_KEY);
        // 1. Auto Lock across programs.
        let me_word = s.handed.word();
        let (owned, value) = libuthread::spawn(move || {
            let g = s.handed.lock();
            (word(me_word) == libuthread::current().id().as_usize() as u64, *g)
        })
        .join()
        .unwrap();
        println!("s3_waiter: the holder's release handed the lock to this program's waiter: owning {owned}, value {value:#x}");
        ok &= owned && value == HANDED_VALUE;
        // 2. A barrier of both programs' threads.
        let workers: Vec<_> = (0..BARRIER_THREADS)
            .map(|_| {
                libuthread::spawn(move || {
                    let mut early = 0;
                    for r in 0..BARRIER_ROUNDS {
                        s.arrivals[r].fetch_add(1, Ordering::AcqRel);
                        if s.rounds.wait().is_err() || s.arrivals[r].load(Ordering::Acquire) != 2 * BARRIER_THREADS {
                            early += 1;
                        }
                    }
                    early
                })
            })
            .collect();
        let early: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
        println!("s3_waiter: {BARRIER_ROUNDS} rounds of a barrier of both programs' threads: {early} early releases");
        ok &= early == 0;
        // 3. The holder ends holding `orphaned`, with a thread waiting at `broken`.
        let orphaned = libuthread::spawn(move || s.orphaned.lock().inherited());
        // The holder's thread arrives first and sleeps in the kernel (its sleepers bit).
        until(|| word(s.broken.word()) == 1 | barrier::SLEEPERS);
        // Two of this program's threads arrive at `broken` (count 4): the first waits in the
        // kernel, the second on it in the library (one kernel waiter per program and round).
        let at_broken: Vec<_> = (0..2).map(|_| libuthread::spawn(move || s.broken.wait())).collect();
        let arrived = AtomicUsize::new(0);
        until(|| {
            arrived.store((word(s.broken.word()) & barrier::ARRIVED) as usize, Ordering::Relaxed);
            word(s.orphaned.word()) & WAITERS != 0 && arrived.load(Ordering::Relaxed) == 3
        });
        let _ = sys::publish(END_KEY, 1);
        let inherited = orphaned.join().unwrap();
        let broken: Vec<_> = at_broken.into_iter().map(|t| t.join().unwrap()).collect();
        println!("s3_waiter: the holder ended holding a lock: the waiter got it, inherited {inherited}; its barrier: {:?}", broken[0]);
        println!("s3_waiter: both of this program's threads at that barrier got {:?}", broken);
        ok &= inherited && broken.iter().all(|b| b.is_err());
        ok
    });
    if ok {
        println!("s3_waiter: all checks passed");
        0
    } else {
        println!("s3_waiter: FAILED");
        1
    }
}
libuthread::entry!(main);
