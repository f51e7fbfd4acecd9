//! Creates regions until memory runs out: the kernel must answer ENOMEM (not stop), and free
//! everything when the program ends (the kernel prints frames before and after).
#![no_std]
#![no_main]

use libuthread::{println, sys, Errno};
use tsumugi_abi::syscall::rights;

/// Size of each region.
const CHUNK: usize = 1 << 20;

fn main() -> i32 {
    let mut made = 0usize;
    loop {
        match sys::region_create(CHUNK, rights::READ | rights::WRITE, 0) {
            Ok(addr) => {
                made += 1;
                // SAFETY: the region was just created writable for this thread.
                unsafe { (addr as *mut u64).write_volatile(made as u64) };
            }
            Err(Some(Errno::NoMem)) => break,
            Err(e) => {
                println!("oom_regions: FAILED: unexpected {e:?} after {made} regions");
                return 1;
            }
        }
    }
    println!("oom_regions: {made} regions of 1 MiB, then ENOMEM");
    if made == 0 {
        return 1;
    }
    0
}
libuthread::entry!(main);
