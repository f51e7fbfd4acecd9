//! A program that never gives a vCPU up (issue 16 part 2, bad input): it registers 4 vCPUs
//! whose handler spins forever with LTN = 0 — inside "its own critical section", where the
//! kernel cannot tell it anything — and says it runs, so that `share_short` registers beside
//! it. The kernel must still give `share_short` its share: past `FORCE_AFTER_TICKS` it takes
//! the vCPUs back in place (`processors::force`). This program ends once `share_short` has
//! ended (read from the kernel's counts), or reports a failure after a bound.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU64, Ordering};
use libuthread::{println, scope, sys, Clock};
use tsumugi_abi::kn::{Event, Registration, RingHeader};
use tsumugi_abi::stats::shares;
use tsumugi_userland::space_share::{LONG_READY, VCPUS};

const SLOTS: usize = 16;
const STACK: usize = 16 * 1024;

#[repr(C, align(64))]
struct Ring {
    header: RingHeader,
    slots: [Event; SLOTS],
}

static mut RING: Ring = Ring { header: RingHeader { head: 0, tail: 0, capacity: SLOTS as u64, held_back: 0 }, slots: [Event { kind: 0, thread: 0, arg0: 0, arg1: 0 }; SLOTS] };
#[repr(C, align(16))]
struct Stacks([[u8; STACK]; VCPUS]);
static mut STACKS: Stacks = Stacks([[0; STACK]; VCPUS]);
static STACK_TOPS: [AtomicU64; VCPUS] = [const { AtomicU64::new(0) }; VCPUS];
static SPINS: AtomicU64 = AtomicU64::new(0);

/// Every vCPU the kernel starts spins here for ever, with LTN = 0.
extern "C" fn handler(_: u64, _: u64, _: u64, _: u64) -> ! {
    loop {
        SPINS.fetch_add(1, Ordering::Relaxed);
        core::hint::spin_loop();
    }
}

fn main() -> i32 {
    let stacks = core::ptr::addr_of_mut!(STACKS) as u64;
    for (v, top) in STACK_TOPS.iter().enumerate() {
        top.store(stacks + ((v + 1) * STACK) as u64, Ordering::Relaxed);
    }
    let ring = core::ptr::addr_of_mut!(RING);
    let reg = Registration { handler: handler as *const () as u64, ring: ring as u64, upcall_stacks: STACK_TOPS.as_ptr() as u64, vcpus: VCPUS as u64, fp_live: 0 };
    if let Err(e) = sys::kn_register(&reg) {
        println!("share_hog: FAILED: register: {e:?}");
        return 1;
    }
    let _ = sys::publish(LONG_READY, 1);
    // vCPU 0 (never revoked) watches, spinning too, until the other program has ended: a
    // revocation seen with one program registered means it came and went (the figures are
    // read under the allocation's lock). Bounded by the clock: 60 s of ticks.
    let figures = || sys::counters(scope::SHARES).unwrap_or(([0; libuthread::Counter::COUNT], 0));
    // The count is machine-wide: count from here.
    let before = figures().0[shares::REVOCATIONS];
    let start = sys::clock(Clock::Ticks).unwrap_or(0);
    loop {
        let (w, cpus) = figures();
        if w[shares::REVOCATIONS] > before && w[shares::PROGRAMS] == 1 {
            println!(
                "share_hog: the other program ran and ended beside vCPUs that never gave themselves up ({} taken back by force, {cpus} CPUs); now holding {} of {VCPUS}",
                w[shares::REVOCATIONS] - before,
                w[shares::MINE]
            );
            println!("share_hog: ok");
            return 0;
        }
        if sys::clock(Clock::Ticks).unwrap_or(0) > start + 6000 {
            println!("share_hog: FAILED: the other program did not run to its end within 60 s");
            return 1;
        }
        for _ in 0..10_000 {
            core::hint::spin_loop();
        }
    }
}

libuthread::entry!(main);
