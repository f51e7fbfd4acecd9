//! LTN = 0 is the library's critical section: preemptions there must resume the vCPU in place,
//! with no upcall. Spinning threads keep every CPU busy so preemptions really switch.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicUsize, Ordering};
use libuthread::{println, sys};
use tsumugi_abi::stats::{scope, Counter};
use tsumugi_userland::kn::{self, Ring, Stack};

static mut RING: Ring = Ring { header: tsumugi_abi::kn::RingHeader { head: 0, tail: 0, capacity: 0, held_back: 0 }, slots: [tsumugi_abi::kn::Event { kind: 0, thread: 0, arg0: 0, arg1: 0 }; kn::SLOTS] };
static mut STACK: Stack = Stack([0; 64 * 1024]);
static SPINS: AtomicUsize = AtomicUsize::new(0);

extern "C" fn handler(kind: u64, _: u64, _: u64, _: u64) -> ! {
    println!("kn_ltn0: FAILED: upcall {kind} while LTN = 0");
    sys::exit(1)
}

fn spinner(_: usize) -> usize {
    loop {
        SPINS.fetch_add(1, Ordering::Relaxed);
    }
}

fn main() -> i32 {
    if kn::register(handler, core::ptr::addr_of_mut!(RING), core::ptr::addr_of_mut!(STACK)).is_err() {
        return 1;
    }
    // One spinner per CPU, so this thread's CPU is contended and preemptions really switch.
    let Ok((_, cpus)) = sys::counters(scope::ALL_CPUS) else { return 1 };
    for _ in 0..cpus {
        if sys::spawn(spinner, 0, 16 * 1024, false).is_err() {
            return 1;
        }
    }
    sys::ltn_write(0);
    let Ok((before, _)) = sys::counters(scope::DOMAIN) else { return 1 };
    kn::spin_ticks(20);
    let Ok((after, _)) = sys::counters(scope::DOMAIN) else { return 1 };
    let switches = after[Counter::ContextSwitches as usize] - before[Counter::ContextSwitches as usize];
    println!("kn_ltn0: {switches} switches while in the critical section, no upcall, spinner ran {} times", SPINS.load(Ordering::Relaxed));
    sys::exit(if switches >= 4 { 0 } else { 1 })
}

libuthread::entry!(main);
