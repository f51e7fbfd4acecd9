//! Bad syscalls get error codes: an unknown number, pointers outside the caller's memory, a
//! range that wraps, a bad clock selector, bad signal numbers, targets and scopes, bad
//! `grant_allow` arguments. Exits 0 when every answer is the expected one.
#![no_std]
#![no_main]

use libuthread::{println, sys, Errno};
use tsumugi_abi::syscall::Syscall;

/// A syscall number no kernel version assigns.
const BOGUS_SYSCALL: usize = 0x7777;
use tsumugi_userland::KERNEL_ADDRESS;
/// A user-half address no region covers (below every program).
const UNMAPPED_ADDRESS: usize = 0x1000;
/// A clock selector that does not exist.
const BOGUS_CLOCK: usize = 99;

fn expect(what: &str, got: sys::SysResult, want: Result<usize, Option<Errno>>) -> bool {
    if got == want {
        println!("syscall_errors: {what}: ok ({got:?})");
        true
    } else {
        println!("syscall_errors: {what}: FAILED: got {got:?}, want {want:?}");
        false
    }
}

/// A write longer than one call's bound: 4,095 spaces and a newline, then more.
static LONG: [u8; 5000] = {
    let mut b = [b' '; 5000];
    b[4095] = b'\n';
    b[4999] = b'\n';
    b
};

/// A zero-on-touch region larger than the machine's memory (256 MiB).
const HUGE_LAZY: usize = 512 << 20;

/// `console_write` of all of a zero-on-touch region larger than memory: the kernel checks the
/// whole buffer but backs only the 4 KiB it writes (it used to back every page, under the
/// view-space lock, and answer `ENOMEM`). The first page holds a line, so the log stays text.
fn huge_lazy_write() -> sys::SysResult {
    use tsumugi_abi::syscall::{region_flags, rights};
    let r = sys::region_create(HUGE_LAZY, rights::READ | rights::WRITE, region_flags::LAZY)?;
    let line = b"syscall_errors: a 512 MiB write of zero-on-touch memory is cut at 4 KiB";
    // SAFETY: the region was just made, writable, larger than a page.
    unsafe {
        core::ptr::write_bytes(r as *mut u8, b' ', 4096);
        core::ptr::copy_nonoverlapping(line.as_ptr(), r as *mut u8, line.len());
        *((r + 4095) as *mut u8) = b'\n';
    }
    sys::call(Syscall::ConsoleWrite as usize, [r, HUGE_LAZY, 0, 0, 0, 0])
}

fn main() -> i32 {
    let write = Syscall::ConsoleWrite as usize;
    let msg = b"syscall_errors: a good write works\n";
    let checks = [
        expect("unknown syscall number", sys::call(BOGUS_SYSCALL, [0; 6]), Err(Some(Errno::NoSys))),
        expect("write from kernel memory", sys::call(write, [KERNEL_ADDRESS, 16, 0, 0, 0, 0]), Err(Some(Errno::Fault))),
        expect("write from unmapped memory", sys::call(write, [UNMAPPED_ADDRESS, 16, 0, 0, 0, 0]), Err(Some(Errno::Fault))),
        expect("write of a wrapping range", sys::call(write, [usize::MAX - 4, 16, 0, 0, 0, 0]), Err(Some(Errno::Fault))),
        expect("write running off the stack", sys::call(write, [msg.as_ptr() as usize, 1 << 40, 0, 0, 0, 0]), Err(Some(Errno::Fault))),
        expect("bad clock selector", sys::call(Syscall::Clock as usize, [BOGUS_CLOCK, 0, 0, 0, 0, 0]), Err(Some(Errno::Inval))),
        expect("signal number out of range", sys::signal(sys::thread_self(), 64, 0), Err(Some(Errno::Inval))),
        expect("signal to no thread", sys::signal(usize::MAX, 15, 0), Err(Some(Errno::Srch))),
        expect("signal with a bad scope", sys::signal(sys::thread_self(), 17, 7), Err(Some(Errno::Inval))),
        expect("signal_allow for no thread", sys::signal_allow(usize::MAX, true), Err(Some(Errno::Srch))),
        expect("grant_allow for no thread", sys::grant_allow(usize::MAX, true), Err(Some(Errno::Srch))),
        expect("grant_allow with allow 2", sys::grant_allow_raw(sys::thread_self(), 2), Err(Some(Errno::Inval))),
        expect("grant_allow of its own program", sys::grant_allow(sys::thread_self(), true), Ok(0)),
        expect("grant_allow withdrawn", sys::grant_allow(sys::thread_self(), false), Ok(0)),
        expect("good write", sys::console_write(msg), Ok(msg.len())),
        expect("empty write", sys::call(write, [0, 0, 0, 0, 0, 0]), Ok(0)),
        expect("a long write is cut at 4 KiB", sys::console_write(&LONG), Ok(4096)),
        expect("a write longer than memory backs only what it writes", huge_lazy_write(), Ok(4096)),
    ];
    if checks.iter().all(|&ok| ok) {
        0
    } else {
        1
    }
}
libuthread::entry!(main);
