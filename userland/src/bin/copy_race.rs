//! Syscalls that write into a region race grants and revokes of that region (attack-surface
//! finding 1): the kernel checks the pointer against the thread's view, then copies through the
//! table the CPU has loaded, which may be older or newer than the view checked. Each such copy
//! must either succeed or fail with EFAULT — never fault in the kernel. Bounded rounds, no
//! timing assumptions; meaningful on 2-4 CPUs, harmless on one.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use libuthread::{println, sys};
use tsumugi_abi::stats::{scope, Counter};
use tsumugi_abi::syscall::{rights, Errno, Syscall};

/// Revoke+grant rounds the main thread makes. The writer runs until they are done (a bound on
/// its own calls made it end first once revokes waited for the target's CPU, and the rounds
/// then failed with ESRCH: the test depended on which thread was faster).
const ROUNDS: usize = 1500;

static REGION: AtomicUsize = AtomicUsize::new(0);
static DONE: AtomicBool = AtomicBool::new(false);
static WRITES: AtomicUsize = AtomicUsize::new(0);
static FAULTS: AtomicUsize = AtomicUsize::new(0);

/// One syscall whose kernel side writes into `at` (counters, or the view query).
fn write_into(at: usize, which: usize) -> sys::SysResult {
    if which % 2 == 0 {
        sys::call(Syscall::Counters as usize, [scope::ALL_CPUS, at, Counter::COUNT, 0, 0, 0])
    } else {
        // Eight 32-byte entries in the second half of the page.
        sys::call(Syscall::ViewQuery as usize, [at + 2048, 8, 0, 0, 0, 0])
    }
}

fn writer(_: usize) -> usize {
    let r = REGION.load(Ordering::Relaxed);
    let mut i = 0;
    while !DONE.load(Ordering::Relaxed) {
        match write_into(r, i) {
            Ok(_) => {}
            Err(Some(Errno::Fault)) => {
                FAULTS.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                println!("copy_race: FAILED: syscall {i} returned {e:?}");
                return 1;
            }
        }
        i += 1;
        WRITES.store(i, Ordering::Relaxed);
    }
    0
}

fn main() -> i32 {
    let Ok(r) = sys::region_create(4096, rights::READ | rights::WRITE, 0) else { return 1 };
    REGION.store(r, Ordering::Relaxed);
    let Ok(t) = sys::spawn(writer, 0, 16 * 1024, false) else { return 1 };
    for round in 0..ROUNDS {
        if sys::region_revoke(r, t).is_err() || sys::region_grant(r, rights::READ | rights::WRITE, t).is_err() {
            println!("copy_race: FAILED: revoke/grant round {round}");
            DONE.store(true, Ordering::Relaxed);
            return 1;
        }
        // The creator's own rights never change: its copies into the region always succeed.
        if let Err(e) = write_into(r, round) {
            println!("copy_race: FAILED: the creator's copy in round {round} returned {e:?}");
            DONE.store(true, Ordering::Relaxed);
            return 1;
        }
    }
    DONE.store(true, Ordering::Relaxed);
    let status = sys::thread_join(t);
    if status != Ok(0) {
        println!("copy_race: FAILED: the writer ended with {status:?}");
        return 1;
    }
    println!(
        "copy_race: {ROUNDS} revoke/grant rounds raced {} copies into {r:#x}, {} of them EFAULT, no kernel fault",
        WRITES.load(Ordering::Relaxed),
        FAULTS.load(Ordering::Relaxed)
    );
    0
}
libuthread::entry!(main);
