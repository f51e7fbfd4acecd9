//! The first program: greets from ring 3, reads the clocks, exits 0.
#![no_std]
#![no_main]

use libuthread::{println, sys, Clock};

fn main() -> i32 {
    println!("init: hello from ring 3");
    let nanos = sys::clock(Clock::MonotonicNanos).unwrap_or(0);
    let ticks = sys::clock(Clock::Ticks).unwrap_or(0);
    println!("init: {} ms since boot, {} timer ticks", nanos / 1_000_000, ticks);
    0
}
libuthread::entry!(main);
