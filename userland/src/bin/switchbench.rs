//! Thread switch costs: two threads yield to each other N times, first sharing one view (no
//! page-table switch), then in two different views (a root load at every switch). Prints
//! cycles per switch (instructions under `cargo xtask run --icount`) and the kernel's counts
//! of view switches and TLB flushes. Run on one CPU (`-- cpus=1`) so the threads alternate.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicUsize, Ordering};
use libuthread::{println, sys, Clock};
use tsumugi_abi::stats::{scope, Counter};
use tsumugi_abi::syscall::rights;

const SWITCHES: usize = 10_000;

static GO: AtomicUsize = AtomicUsize::new(0);

fn partner(_: usize) -> usize {
    while GO.load(Ordering::Acquire) == 0 {
        sys::yield_now();
    }
    for _ in 0..SWITCHES / 2 {
        sys::yield_now();
    }
    0
}

/// One phase: returns (cycles, switches, view switches, tlb flushes) over it.
fn phase(separate_views: bool, extra: usize) -> Option<(u64, u64, u64, u64)> {
    GO.store(0, Ordering::Release);
    let t = sys::spawn(partner, 0, 16 * 1024, true).ok()?;
    if separate_views {
        sys::region_revoke(extra, t).ok()?;
    }
    // Let the partner reach its wait loop in its final view.
    sys::yield_now();
    let (before, _) = sys::counters(scope::ALL_CPUS).ok()?;
    let c0 = sys::clock(Clock::Cycles).ok()? as u64;
    GO.store(1, Ordering::Release);
    for _ in 0..SWITCHES / 2 {
        sys::yield_now();
    }
    let c1 = sys::clock(Clock::Cycles).ok()? as u64;
    let (after, _) = sys::counters(scope::ALL_CPUS).ok()?;
    sys::thread_join(t).ok()?;
    let d = |c: Counter| after[c as usize] - before[c as usize];
    Some((c1 - c0, d(Counter::ContextSwitches), d(Counter::ViewSwitches), d(Counter::TlbFlushes)))
}

fn main() -> i32 {
    let Ok(extra) = sys::region_create(4096, rights::READ | rights::WRITE, 0) else { return 1 };
    let (Some(same), Some(diff)) = (phase(false, extra), phase(true, extra)) else {
        println!("switchbench: FAILED: a phase could not run");
        return 1;
    };
    for (name, (cycles, switches, views, flushes)) in [("same_view", same), ("two_views", diff)] {
        println!(
            "BENCH table=kernel_switch row={name} switches={switches} view_switches={views} tlb_flushes={flushes} cycles_per_switch={}",
            cycles / switches.max(1)
        );
    }
    0
}
libuthread::entry!(main);
