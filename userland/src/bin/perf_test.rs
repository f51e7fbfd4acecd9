//! Performance counters are per thread (a thread sees only its own events) and an event the
//! machine cannot count says so instead of reading zero. Both threads are pinned to one CPU, so
//! each yield switches to the other whatever the number of CPUs and the host's load. The
//! counting starts only once the second thread is pinned there: before that it may start on
//! another CPU, and the first thread's yields would find nobody to switch to (seen on aarch64
//! with 4 CPUs: 42 and 41 switches of 100).
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use libuthread::{println, sys, Errno};
use tsumugi_abi::perf::Event;

const YIELDS: usize = 100;

static OTHER_SWITCHES: AtomicUsize = AtomicUsize::new(0);

/// Set by the second thread once it is pinned to the first one's CPU (or could not be).
static OTHER_PINNED: AtomicBool = AtomicBool::new(false);

fn other(cpu: usize) -> usize {
    let pinned = sys::thread_pin(Some(cpu));
    // Set even when the pin failed: the first thread then counts no switch of this one and
    // fails, instead of waiting for ever.
    OTHER_PINNED.store(true, Ordering::Release);
    if pinned.is_err() {
        return 1;
    }
    let Ok(h) = sys::perf_open(Event::ContextSwitches) else { return 1 };
    let _ = sys::perf_start(h);
    for _ in 0..YIELDS {
        sys::yield_now();
    }
    OTHER_SWITCHES.store(sys::perf_read(h).unwrap_or(0), Ordering::Relaxed);
    0
}

/// A thread's counts survive its blocks: a long loop, then a sleep, a short loop and another
/// sleep (with nothing else to run, this CPU goes to its idle loop at each). The thread's cycles
/// are at least half of what the long loop took on the clock — the half allows for time it
/// was not running — where the kernel, which lost the counts of every run that ended in the
/// idle loop, counted only the last short run. Called pinned, so clock and counter are one
/// CPU's.
fn counts_across_sleeps() -> bool {
    let Ok(h) = sys::perf_open(Event::Cycles) else { return false };
    let _ = sys::perf_start(h);
    let t0 = sys::clock(libuthread::Clock::Cycles).unwrap_or(0);
    let mut x = 0u64;
    for i in 0..200_000u64 {
        x = core::hint::black_box(x.wrapping_add(i));
    }
    let long = sys::clock(libuthread::Clock::Cycles).unwrap_or(0) - t0;
    let _ = sys::sleep_nanos(1_000_000);
    for i in 0..100u64 {
        x = core::hint::black_box(x.wrapping_add(i));
    }
    let _ = sys::sleep_nanos(1_000_000);
    let _ = sys::perf_stop(h);
    let n = sys::perf_read(h).unwrap_or(0);
    let _ = sys::perf_close(h);
    if n < long / 2 {
        println!("perf_test: FAILED: my cycles {n} over a loop that took {long} on the clock and two sleeps ({x})");
        false
    } else {
        println!("perf_test: my cycles {n} over a loop that took {long} on the clock and two sleeps");
        true
    }
}

fn main() -> i32 {
    let mut ok = true;
    for e in [Event::Instructions, Event::DtlbMiss, Event::ItlbMiss] {
        match sys::perf_open(e) {
            Ok(h) => {
                // Supported means counted: a thousand loop iterations read as more than zero.
                let _ = sys::perf_start(h);
                let mut x = 0u64;
                for i in 0..1000u64 {
                    x = core::hint::black_box(x.wrapping_add(i));
                }
                let _ = sys::perf_stop(h);
                let n = sys::perf_read(h).unwrap_or(0);
                if e == Event::Instructions && n < 1000 {
                    println!("perf_test: FAILED: {} opens but counted {n} over a 1,000-iteration loop ({x})", e.name());
                    ok = false;
                } else {
                    println!("perf_test: {} supported here ({n} over a 1,000-iteration loop)", e.name());
                }

                let _ = sys::perf_close(h);
            }
            Err(Some(Errno::NotSup)) => println!("perf_test: {}: unsupported (ENOTSUP), as it should say", e.name()),
            Err(other) => {
                println!("perf_test: FAILED: {} gave {other:?}", e.name());
                ok = false;
            }
        }
    }
    let cpu = sys::cpu_id();
    if sys::thread_pin(Some(cpu)).is_err() {
        println!("perf_test: FAILED: could not pin to cpu {cpu}");
        return 1;
    }
    ok &= counts_across_sleeps();
    let Ok(t) = sys::spawn(other, cpu, 16 * 1024, false) else { return 1 };
    // Wait (yielding, which does nothing until it is here) for the other thread to be on this
    // CPU; its thread_pin moves it here if it started elsewhere.
    while !OTHER_PINNED.load(Ordering::Acquire) {
        sys::yield_now();
    }
    let Ok(switches) = sys::perf_open(Event::ContextSwitches) else { return 1 };
    let Ok(cycles) = sys::perf_open(Event::Cycles) else { return 1 };
    let _ = sys::perf_start(switches);
    let _ = sys::perf_start(cycles);
    let t0 = sys::clock(libuthread::Clock::Cycles).unwrap_or(0);
    for _ in 0..YIELDS {
        sys::yield_now();
    }
    let _ = sys::thread_join(t);
    let _ = sys::perf_stop(switches);
    let mine = sys::perf_read(switches).unwrap_or(0);
    let theirs = OTHER_SWITCHES.load(Ordering::Relaxed);
    let my_cycles = sys::perf_read(cycles).unwrap_or(0);
    let elapsed = sys::clock(libuthread::Clock::Cycles).unwrap_or(0) - t0;
    let Ok((domain, _)) = sys::counters(tsumugi_abi::stats::scope::DOMAIN) else { return 1 };
    let all = domain[tsumugi_abi::stats::Counter::ContextSwitches as usize] as usize;
    // Where it ended: the cycle counters are per CPU, so `elapsed` means something only if the
    // pin held (the two reads on one CPU). Printed, and a failure says which case it was.
    let end_cpu = sys::cpu_id();
    println!("perf_test: switched to me {mine} times, to the other thread {theirs}, to the program {all}; my cycles {my_cycles} of {elapsed} elapsed (cpu {cpu} -> {end_cpu})");
    if end_cpu != cpu {
        println!("perf_test: FAILED: pinned to cpu {cpu} but ended on cpu {end_cpu}");
        ok = false;
    } else if my_cycles >= elapsed {
        println!("perf_test: FAILED: on one cpu, my cycles {my_cycles} >= the {elapsed} that elapsed");
    }
    // Each thread counts only the switches to itself, and only its own cycles.
    ok &= mine >= YIELDS / 2 && mine <= YIELDS + 4 && theirs >= YIELDS / 2 && theirs <= YIELDS + 4;
    ok &= mine + theirs <= all && my_cycles < elapsed;
    if ok {
        0
    } else {
        1
    }
}
libuthread::entry!(main);
