//! Teardown that always finishes (issue 15, item 4): while threads of this program enter
//! `sleep(u64::MAX)`, block in `console_read`, join, and create threads that spin in user mode,
//! its main thread faults. The kill must reach every one of them — a thread entering its block
//! as the kill lands, and a thread created after the kill took its list of threads, included —
//! so the program ends (the suite runs it several times; a hang is a time-out).
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicUsize, Ordering};
use libuthread::sys;

const SLEEPERS: usize = 24;
const READERS: usize = 8;
const CREATORS: usize = 3;
/// Threads each creator makes at most (the program's quota stops it anyway).
const CREATIONS: usize = 150;

static STARTED: AtomicUsize = AtomicUsize::new(0);

fn sleeper(_: usize) -> usize {
    STARTED.fetch_add(1, Ordering::Relaxed);
    let _ = sys::sleep_nanos(u64::MAX);
    1
}

fn reader(_: usize) -> usize {
    STARTED.fetch_add(1, Ordering::Relaxed);
    let mut buf = [0u8; 8];
    loop {
        let _ = sys::console_read(&mut buf);
    }
}

fn spinner(_: usize) -> usize {
    loop {
        core::hint::spin_loop();
    }
}

fn joiner(tid: usize) -> usize {
    STARTED.fetch_add(1, Ordering::Relaxed);
    let _ = sys::thread_join(tid);
    1
}

fn creator(_: usize) -> usize {
    STARTED.fetch_add(1, Ordering::Relaxed);
    for _ in 0..CREATIONS {
        let _ = sys::spawn(spinner, 0, 4096, false);
    }
    // Then block for ever too.
    let _ = sys::sleep_nanos(u64::MAX);
    1
}

fn main() -> i32 {
    let mut first = 0;
    for i in 0..SLEEPERS {
        if let Ok(t) = sys::spawn(sleeper, i, 4096, false) {
            first = if first == 0 { t } else { first };
        }
    }
    for i in 0..READERS {
        let _ = sys::spawn(reader, i, 4096, false);
    }
    let _ = sys::spawn(joiner, first, 4096, false);
    for i in 0..CREATORS {
        let _ = sys::spawn(creator, i, 16 * 1024, false);
    }
    // Fault while the others are starting, blocking and creating: a bounded wait for some of
    // them to have started, whatever the host's speed.
    let mut spins = 0u64;
    while STARTED.load(Ordering::Relaxed) < (SLEEPERS + READERS) / 2 && spins < 1_000_000 {
        sys::yield_now();
        spins += 1;
    }
    // SAFETY: not safe, on purpose: address 0x1000 is in no region, so this write faults and
    // the kernel kills the program.
    unsafe { core::ptr::write_volatile(0x1000 as *mut u8, 1) };
    0
}
libuthread::entry!(main);
