//! The other half of `share_writer`: accepts grants from the writer's program, publishes its
//! thread id, waits for the buffer's address, and checks it sees the writer's data at that same
//! address.
#![no_std]
#![no_main]

use libuthread::{println, sys};
use tsumugi_userland::share::{pattern, BUFFER_KEY, BUFFER_LEN, DONE_KEY, READER_KEY, WRITER_KEY};

fn main() -> i32 {
    if sys::grant_allow(sys::lookup_wait(WRITER_KEY), true).is_err() {
        println!("share_reader: FAILED: grant_allow");
        return 1;
    }
    let _ = sys::publish(READER_KEY, sys::thread_self());
    let buf = sys::lookup_wait(BUFFER_KEY);
    let mut bad = 0;
    for i in 0..BUFFER_LEN {
        // SAFETY: the writer granted this thread read access to the region at `buf`.
        let b = unsafe { ((buf + i) as *const u8).read_volatile() };
        if b != pattern(i) {
            bad += 1;
        }
    }
    let mut view = [tsumugi_abi::syscall::ViewEntry::default(); 16];
    let n = sys::view_query(&mut view).unwrap_or(0);
    let held = view[..n.min(16)].iter().find(|e| e.start == buf as u64).map(|e| e.rights);
    println!("share_reader: read {BUFFER_LEN} bytes at {buf:#x}, {bad} wrong; rights in my view: {held:?}");
    if sys::publish(DONE_KEY, 1).is_err() {
        return 1;
    }
    // The writer ends now, and its names with it.
    while sys::lookup(BUFFER_KEY).is_ok() {
        sys::yield_now();
    }
    println!("share_reader: the writer's name went with it");
    if bad == 0 && held == Some(tsumugi_abi::syscall::rights::READ as u64) {
        0
    } else {
        1
    }
}
libuthread::entry!(main);
