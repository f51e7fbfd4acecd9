//! The victim of the exhaustion test: while `exhaust` holds every resource its quotas allow,
//! this program makes threads, regions and names and checks its memory — all must work.
#![no_std]
#![no_main]

use libuthread::{println, sys};
use tsumugi_abi::syscall::rights;
use tsumugi_userland::exhaust::{ACK_KEY, PEAK_KEY, VICTIM_DONE_KEY};

const THREADS: usize = 8;
const REGION: usize = 1 << 20;

fn work(i: usize) -> usize {
    let Ok(r) = sys::region_create(REGION, rights::READ | rights::WRITE, 0) else { return 1000 };
    for off in (0..REGION).step_by(4096) {
        // SAFETY: the region was just created writable for this thread.
        unsafe { ((r + off) as *mut usize).write_volatile(i + off) };
    }
    let sum = (0..REGION).step_by(4096).all(|off| {
        // SAFETY: as above.
        unsafe { ((r + off) as *const usize).read_volatile() == i + off }
    });
    if sum {
        i
    } else {
        2000
    }
}

fn main() -> i32 {
    let peak = sys::lookup_wait(PEAK_KEY);
    println!("exhaust_victim: the attacker holds {peak} live threads and its regions; working");
    let mut tids = [0; THREADS];
    for (i, t) in tids.iter_mut().enumerate() {
        match sys::spawn(work, i, 64 * 1024, false) {
            Ok(tid) => *t = tid,
            Err(e) => {
                println!("exhaust_victim: FAILED: thread {i}: {e:?}");
                return 1;
            }
        }
    }
    for (i, t) in tids.iter().enumerate() {
        if sys::thread_join(*t) != Ok(i) {
            println!("exhaust_victim: FAILED: thread {i} did not work");
            return 1;
        }
    }
    if sys::publish(VICTIM_DONE_KEY, THREADS).is_err() {
        println!("exhaust_victim: FAILED: publish");
        return 1;
    }
    // The attacker looks the name up before it goes on; stay until it has.
    sys::lookup_wait(ACK_KEY);
    println!("exhaust_victim: {THREADS} threads with 1 MiB regions each worked beside the attacker");
    0
}
libuthread::entry!(main);
