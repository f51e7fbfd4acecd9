//! Space sharing (issue 16 part 2), the short half: registers beside `share_long` once that
//! one runs (so the kernel must take vCPUs from it first), runs 16 workers of fixed work with
//! yields and sleeps, checks each result, and ends — its CPUs go back to `share_long`.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::vec::Vec;
use core::time::Duration;
use libuthread::{println, sys};
use tsumugi_abi::stats::shares;
use tsumugi_userland::space_share::{expected, figures, round, LONG_READY, VCPUS};

const WORKERS: usize = 16;
const ROUNDS: u64 = 120;

fn worker(i: usize) -> u64 {
    let mut sum = 0u64;
    for r in 0..ROUNDS {
        sum = sum.wrapping_add(round(i, r));
        if r % 4 == 3 {
            libuthread::yield_now();
        }
        if r % 32 == 31 {
            libuthread::sleep(Duration::from_millis(1));
        }
    }
    sum
}

fn program() -> i32 {
    let handles: Vec<_> = (0..WORKERS).map(|i| libuthread::spawn(move || worker(i))).collect();
    let mut ok = true;
    for (i, h) in handles.into_iter().enumerate() {
        match h.join() {
            Ok(sum) if sum == expected(i, ROUNDS) => {}
            other => {
                println!("share_short: FAILED: worker {i}: {other:?}");
                ok = false;
            }
        }
    }
    let (w, cpus) = figures();
    println!("share_short: {WORKERS} workers exact; this program's share {} of {VCPUS} vCPUs, {} granted now, on {cpus} CPUs", w[shares::MY_TARGET], w[shares::MINE]);
    if w[shares::PROGRAMS] < 2 {
        println!("share_short: FAILED: ran without the other program registered");
        ok = false;
    }
    if ok {
        println!("share_short: ok");
        0
    } else {
        1
    }
}

fn main() -> i32 {
    // The other program runs first: this one then needs a vCPU it gives up.
    let _ = sys::lookup_wait(LONG_READY);
    libuthread::run(VCPUS, program)
}

libuthread::entry!(main);
