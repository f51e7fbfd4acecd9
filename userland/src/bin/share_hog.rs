//! A program that never gives a vCPU up (issue 16 part 2, bad input): it registers 4 vCPUs
//! whose handler spins forever with LTN = 0 — inside "its own critical section", where the
//! kernel cannot tell it anything — and says it runs, so that `share_short` registers beside
//! it. The kernel must still give `share_short` its share: past `FORCE_AFTER_TICKS` it takes
//! the vCPUs back in place (`processors::force`). This program ends once `share_short` has
//! ended (read from the kernel's counts), or reports a failure after a bound.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU64, Ordering};
use libuthread::{println, sys, Clock};
use tsumugi_abi::kn::{Event, RingHeader};
use tsumugi_abi::stats::shares;
use tsumugi_userland::kn;
use tsumugi_userland::space_share::{figures, LONG_READY, VCPUS};

const STACK: usize = 16 * 1024;

static mut RING: kn::Ring = kn::Ring { header: RingHeader { head: 0, tail: 0, capacity: kn::SLOTS as u64, held_back: 0 }, slots: [Event { kind: 0, thread: 0, arg0: 0, arg1: 0 }; kn::SLOTS] };
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
    let ring = core::ptr::addr_of_mut!(RING) as u64;
    if let Err(e) = kn::register_vcpus(handler, ring, core::ptr::addr_of_mut!(STACKS) as u64, STACK, &STACK_TOPS) {
        println!("share_hog: FAILED: register: {e:?}");
        return 1;
    }
    let _ = sys::publish(LONG_READY, 1);
    // vCPU 0 (never revoked) watches, spinning too, until the other program has ended: a
    // revocation seen with one program registered means it came and went (the figures are
    // read under the allocation's lock). Bounded by the clock: 60 s of ticks.
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
