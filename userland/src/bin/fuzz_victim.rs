//! The program beside the syscall fuzzer: loaded first, so its thread ids are among the
//! "foreign" ids the fuzzer aims at. While the fuzzer runs, it writes and checks its own memory
//! and makes threads; nothing the fuzzer does may change what it sees. Exits 0 when every round
//! found its memory intact.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicUsize, Ordering};
use libuthread::{println, sys};
use tsumugi_abi::syscall::rights;
use tsumugi_userland::fuzz::RUNNING_KEY;

const WORDS: usize = 3 * 4096 / 8;
/// Rounds that also make and join a thread (the rest only touch memory).
const THREAD_ROUNDS: usize = 200;

static BAD: AtomicUsize = AtomicUsize::new(0);

fn check(region: usize, round: usize) {
    let base = region as *mut usize;
    for i in 0..WORDS {
        // SAFETY: the region is this program's, writable, WORDS words long.
        unsafe { base.add(i).write_volatile(round ^ i) };
    }
    sys::yield_now();
    for i in 0..WORDS {
        // SAFETY: as above.
        if unsafe { base.add(i).read_volatile() } != round ^ i {
            BAD.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn helper(region: usize) -> usize {
    check(region, 0x5a5a);
    0
}

fn main() -> i32 {
    let Ok(region) = sys::region_create(WORDS * 8, rights::READ | rights::WRITE, 0) else { return 1 };
    sys::lookup_wait(RUNNING_KEY);
    let mut rounds = 0;
    while sys::lookup(RUNNING_KEY).is_ok() {
        check(region, rounds);
        if rounds < THREAD_ROUNDS {
            match sys::spawn(helper, region, 16 * 1024, false) {
                Ok(t) if sys::thread_join(t) == Ok(0) => {}
                other => {
                    println!("fuzz_victim: FAILED: a thread in round {rounds}: {other:?}");
                    return 1;
                }
            }
        }
        rounds += 1;
    }
    let bad = BAD.load(Ordering::Relaxed);
    println!("fuzz_victim: {rounds} rounds beside the fuzzer, {bad} words changed under it");
    if bad == 0 && rounds > 0 {
        0
    } else {
        1
    }
}
libuthread::entry!(main);
