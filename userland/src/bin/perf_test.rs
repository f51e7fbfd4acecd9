//! Performance counters are per thread (a thread sees only its own events) and an event the
//! machine cannot count says so instead of reading zero. Both threads are pinned to one CPU, so
//! each yield switches to the other whatever the number of CPUs and the host's load.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicUsize, Ordering};
use libuthread::{println, sys, Errno};
use tsumugi_abi::perf::Event;

const YIELDS: usize = 100;

static OTHER_SWITCHES: AtomicUsize = AtomicUsize::new(0);

fn other(cpu: usize) -> usize {
    if sys::thread_pin(Some(cpu)).is_err() {
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
    let Ok(switches) = sys::perf_open(Event::ContextSwitches) else { return 1 };
    let Ok(cycles) = sys::perf_open(Event::Cycles) else { return 1 };
    let _ = sys::perf_start(switches);
    let _ = sys::perf_start(cycles);
    let t0 = sys::clock(libuthread::Clock::Cycles).unwrap_or(0);
    let Ok(t) = sys::spawn(other, cpu, 16 * 1024, false) else { return 1 };
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
    println!("perf_test: switched to me {mine} times, to the other thread {theirs}, to the program {all}; my cycles {my_cycles} of {elapsed} elapsed");
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
