//! The attacker of `name_owner+name_thief`: tries to overwrite another program's name (refused
//! with EPERM), fills its own quota of names (the next is ENOMEM: no program can grow the
//! kernel heap through names), and sees the owner's name go when the owner ends.
#![no_std]
#![no_main]

use libuthread::{println, sys, Errno};
use tsumugi_userland::names::{DONE_KEY, FILL_BASE, OWNED_KEY, OWNED_VALUE};

/// Names a program may hold (`tsumugi_kernel::names::NAMES_PER_PROGRAM`).
const QUOTA: usize = 64;

fn main() -> i32 {
    let value = sys::lookup_wait(OWNED_KEY);
    let overwrite = sys::publish(OWNED_KEY, 0xbad);
    let after = sys::lookup(OWNED_KEY);
    println!("name_thief: overwriting another program's name: {overwrite:?}; it still reads {after:x?}");
    let mut ok = value == OWNED_VALUE && overwrite == Err(Some(Errno::Perm)) && after == Ok(OWNED_VALUE);
    // DONE_KEY is the last of the quota.
    for i in 0..QUOTA - 1 {
        ok &= sys::publish(FILL_BASE + i, i).is_ok();
    }
    ok &= sys::publish(DONE_KEY, 1).is_ok();
    let over = sys::publish(FILL_BASE + QUOTA, 0);
    println!("name_thief: name {} of a program: {over:?}", QUOTA + 1);
    ok &= over == Err(Some(Errno::NoMem));
    // The owner ends once it saw DONE_KEY; its name goes with it.
    while sys::lookup(OWNED_KEY).is_ok() {
        sys::yield_now();
    }
    println!("name_thief: the owner's name went with it");
    if ok {
        0
    } else {
        println!("name_thief: FAILED");
        1
    }
}
libuthread::entry!(main);
