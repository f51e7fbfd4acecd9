//! Counters that follow user threads (issue 17 §3): in an M:N program at 4 vCPUs, each user
//! thread opens its own counters, does known work — `i + 1` kernel sleeps (each a blocking call:
//! the kernel saves the thread, hands its vCPU on, and the library resumes the thread later on
//! whichever vCPU takes it) and yields between chunks of arithmetic — and reads counts that
//! cover its own work only, wherever it ran:
//! - every call on its handles succeeds after it moved (no `EINVAL`);
//! - `ContextSwitches` (its resumes) ≥ its sleeps and < the work of all threads together;
//!   `Upcalls` ≥ its sleeps (each blocking call is one, counted for the thread that blocked);
//! - the main thread's counters, opened before the workers, are not theirs: its 8 handles
//!   stay readable, a worker closing handle 7 (which it never opened) gets `EINVAL`, and main's
//!   resume count stays below the workers' lower bounds together;
//! - the 9th counter of a thread answers `ENOMEM`.
//!
//! No check depends on timing or placement: the bounds count calls each thread makes itself;
//! the vCPUs a thread ran on are printed, not checked.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::vec::Vec;
use core::time::Duration;
use libuthread::{println, sys, Errno, Event};

const VCPUS: usize = 4;
const WORKERS: usize = 8;
/// Yields per worker (each between two chunks of work).
const YIELDS: usize = 20;
/// Loop iterations per chunk of work.
const CHUNK: u64 = 2_000;

fn sleeps(i: usize) -> usize {
    i + 1
}

struct Report {
    ok: bool,
    switches: usize,
    upcalls: usize,
    cpus: u64,
}

fn work(seed: u64) -> u64 {
    let mut x = seed;
    for i in 0..CHUNK {
        x = core::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
    }
    x
}

fn worker(i: usize) -> Report {
    let failed = core::cell::Cell::new(false);
    let fail = |what: &str, r: Result<usize, Option<Errno>>| match r {
        Ok(v) => v,
        Err(e) => {
            println!("perf_mn: FAILED: worker {i}: {what}: {e:?}");
            failed.set(true);
            0
        }
    };
    let cs = fail("open context-switches", sys::perf_open(Event::ContextSwitches));
    let up = fail("open upcalls", sys::perf_open(Event::Upcalls));
    let cy = fail("open cycles", sys::perf_open(Event::Cycles));
    for h in [cs, up, cy] {
        fail("start", sys::perf_start(h));
    }
    let mut cpus = 1u64 << (sys::cpu_id() % 64);
    let mut x = i as u64;
    for k in 0..sleeps(i) + YIELDS {
        x = work(x);
        if k < sleeps(i) {
            libuthread::sleep(Duration::from_millis(1));
        } else {
            libuthread::yield_now();
        }
        cpus |= 1u64 << (sys::cpu_id() % 64);
    }
    core::hint::black_box(x);
    // Handles of another thread (main holds 0..8) are not this thread's.
    if sys::perf_close(7) != Err(Some(Errno::Inval)) || sys::perf_read(5) != Err(Some(Errno::Inval)) {
        println!("perf_mn: FAILED: worker {i} reached handles it never opened");
        failed.set(true);
    }
    let switches = fail("read context-switches", sys::perf_read(cs));
    let upcalls = fail("read upcalls", sys::perf_read(up));
    let cycles = fail("read cycles", sys::perf_read(cy));
    for h in [cs, up, cy] {
        fail("close", sys::perf_close(h));
    }
    let _ = cycles;
    Report { ok: !failed.get(), switches, upcalls, cpus }
}

fn program() -> i32 {
    let mut ok = true;
    // Main's own counters, all 8, open while the workers run.
    let mut mine = Vec::new();
    for _ in 0..tsumugi_abi::perf::MAX_OPEN {
        match sys::perf_open(Event::ContextSwitches) {
            Ok(h) => mine.push(h),
            Err(e) => {
                println!("perf_mn: FAILED: main's counter {}: {e:?}", mine.len());
                return 1;
            }
        }
    }
    if sys::perf_open(Event::ContextSwitches) != Err(Some(Errno::NoMem)) {
        println!("perf_mn: FAILED: a 9th counter did not answer ENOMEM");
        ok = false;
    }
    let _ = sys::perf_start(mine[0]);
    let handles: Vec<_> = (0..WORKERS).map(|i| libuthread::spawn(move || worker(i))).collect();
    let reports: Vec<Report> = handles.into_iter().map(|h| h.join().unwrap_or(Report { ok: false, switches: 0, upcalls: 0, cpus: 0 })).collect();
    let main_switches = sys::perf_read(mine[0]);
    let all_work: usize = (0..WORKERS).map(|i| sleeps(i) + YIELDS).sum();
    let lower_all: usize = (0..WORKERS).map(sleeps).sum();
    for (i, r) in reports.iter().enumerate() {
        println!(
            "perf_mn: worker {i}: {} sleeps, {YIELDS} yields: resumed {} times, {} upcalls, ran on CPUs {:#x}",
            sleeps(i),
            r.switches,
            r.upcalls,
            r.cpus
        );
        ok &= r.ok;
        if r.switches < sleeps(i) || r.switches >= all_work || r.upcalls < sleeps(i) {
            println!("perf_mn: FAILED: worker {i}'s counts are not its own work (resumes in [{}, {all_work}), upcalls >= {})", sleeps(i), sleeps(i));
            ok = false;
        }
    }
    match main_switches {
        Ok(n) if n < lower_all => println!("perf_mn: main resumed {n} times (its own joins), under the workers' {lower_all}"),
        other => {
            println!("perf_mn: FAILED: main's resume count {other:?} is not its own (workers' lower bounds {lower_all})");
            ok = false;
        }
    }
    for h in mine {
        if sys::perf_close(h).is_err() {
            println!("perf_mn: FAILED: main could not close its counter {h}");
            ok = false;
        }
    }
    if ok {
        println!("perf_mn: ok");
        0
    } else {
        1
    }
}

fn main() -> i32 {
    libuthread::run(VCPUS, program)
}

libuthread::entry!(main);
