//! Shares a buffer with `share_reader` by passing a pointer: creates a region, fills it, grants
//! the reader's thread read access (the reader accepted grants from this program first), and
//! publishes the address. Run as `share_writer+share_reader`.
#![no_std]
#![no_main]

use libuthread::{println, sys};
use tsumugi_abi::syscall::rights;
use tsumugi_userland::share::{pattern, BUFFER_KEY, BUFFER_LEN, DONE_KEY, READER_KEY, WRITER_KEY};

fn main() -> i32 {
    let Ok(buf) = sys::region_create(BUFFER_LEN, rights::READ | rights::WRITE, 0) else {
        println!("share_writer: FAILED: region_create");
        return 1;
    };
    for i in 0..BUFFER_LEN {
        // SAFETY: the region was just created writable for this thread.
        unsafe { ((buf + i) as *mut u8).write_volatile(pattern(i)) };
    }
    if sys::publish(WRITER_KEY, sys::thread_self()).is_err() {
        println!("share_writer: FAILED: publish");
        return 1;
    }
    let reader = sys::lookup_wait(READER_KEY);
    match sys::region_grant(buf, rights::READ, reader) {
        Ok(_) => println!("share_writer: granted {buf:#x} to thread {reader} (read only)"),
        Err(e) => {
            println!("share_writer: FAILED: grant: {e:?}");
            return 1;
        }
    }
    if sys::publish(BUFFER_KEY, buf).is_err() {
        println!("share_writer: FAILED: publish");
        return 1;
    }
    // The buffer's name goes with this program: stay until the reader has read it.
    sys::lookup_wait(DONE_KEY);
    0
}
libuthread::entry!(main);
