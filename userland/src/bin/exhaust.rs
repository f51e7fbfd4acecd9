//! The attacker of the exhaustion test (issue 15, item 3): takes every kernel resource a
//! syscall can make the kernel allocate — live threads (each a kernel stack), threads made
//! (each a record kept until the program ends), region pages (each a record on the kernel heap),
//! names — until the kernel refuses with `EAGAIN`/`ENOMEM`, which it must do at the program's
//! quota, not by panicking or by starving the victim beside it (`exhaust_victim`, which does its
//! work while this program holds everything). Exits 0 when every refusal came at the quota.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicBool, Ordering};
use libuthread::{println, sys, Errno};
use tsumugi_abi::syscall::{region_flags, rights};
use tsumugi_userland::exhaust::{ACK_KEY, PEAK_KEY, VICTIM_DONE_KEY};

/// The kernel's per-program limits (`kernel/src/domain.rs`).
const MAX_THREADS: usize = 4096;
const MAX_LIVE_THREADS: usize = 1024;
const MAX_REGION_PAGES: usize = 1 << 18;
const NAMES: usize = 64;
/// Size of each region taken in the region phase.
const CHUNK: usize = 64 << 20;

static GO: AtomicBool = AtomicBool::new(false);

/// Spins (yielding) until the main thread says go, then ends.
fn gate(_: usize) -> usize {
    while !GO.load(Ordering::Acquire) {
        sys::yield_now();
    }
    0
}

/// Blocks in the kernel until the gate ends.
fn waiter(gate: usize) -> usize {
    let _ = sys::thread_join(gate);
    0
}

/// A thread that ends at once, through the raw `thread_create` (no stack-pool region needed
/// once the region quota is used up).
extern "C" fn quick(_: usize) -> ! {
    sys::thread_exit(0)
}

/// The stack pointer a new thread starts with (as `sys::spawn` computes it).
fn entry_stack_pointer(top: usize) -> usize {
    if cfg!(target_arch = "x86_64") {
        (top & !15) - 8
    } else {
        top & !15
    }
}

fn fail(what: &str) -> i32 {
    println!("exhaust: FAILED: {what}");
    1
}

fn main() -> i32 {
    // One stack for the threads made one at a time at the end, taken before the regions run out.
    let Ok(stack) = sys::region_create(16 * 1024, rights::READ | rights::WRITE, 0) else { return fail("no stack region") };
    // Live threads: the gate, then waiters blocked in the kernel, until the kernel says no.
    let Ok(gate_tid) = sys::spawn(gate, 0, 4096, false) else { return fail("no gate thread") };
    let mut live = 2; // main and the gate
    let refusal = loop {
        match sys::spawn(waiter, gate_tid, 4096, false) {
            Ok(_) => live += 1,
            Err(e) => break e,
        }
        if live > MAX_LIVE_THREADS {
            return fail("more live threads than the quota");
        }
    };
    println!("exhaust: {live} live threads, then {refusal:?}");
    if refusal != Some(Errno::Again) || live != MAX_LIVE_THREADS {
        return fail("the live-thread refusal was not EAGAIN at the quota");
    }
    // Regions: 64 MiB zero-on-touch ones until the page quota; a 4 GiB one is refused at once.
    let mut regions = 0;
    let refusal = loop {
        match sys::region_create(CHUNK, rights::READ | rights::WRITE, region_flags::LAZY) {
            Ok(_) => regions += 1,
            Err(e) => break e,
        }
        if regions * CHUNK > MAX_REGION_PAGES * 4096 {
            return fail("more region pages than the quota");
        }
    };
    println!("exhaust: {regions} regions of 64 MiB, then {refusal:?}");
    if refusal != Some(Errno::NoMem) || regions == 0 {
        return fail("the region refusal was not ENOMEM at the quota");
    }
    if sys::region_create(1 << 32, rights::READ | rights::WRITE, region_flags::LAZY) != Err(Some(Errno::NoMem)) {
        return fail("a 4 GiB region past the quota was not refused");
    }
    // The victim works while all of this is held.
    if sys::publish(PEAK_KEY, live).is_err() {
        return fail("could not publish the peak");
    }
    let victim = sys::lookup_wait(VICTIM_DONE_KEY);
    println!("exhaust: the victim worked beside it ({victim})");
    if sys::publish(ACK_KEY, 1).is_err() {
        return fail("could not publish the acknowledgement");
    }
    // Names: the two above, the rest until the quota.
    let mut names = 2;
    let refusal = loop {
        match sys::publish(0x4558_1000 + names, names) {
            Ok(_) => names += 1,
            Err(e) => break e,
        }
        if names > NAMES {
            return fail("more names than the quota");
        }
    };
    println!("exhaust: {names} names, then {refusal:?}");
    if refusal != Some(Errno::NoMem) || names != NAMES {
        return fail("the name refusal was not ENOMEM at the quota");
    }
    // Let the waiters end; then threads that end at once, one at a time on one stack, until
    // the quota on threads made (ended ones are kept until the program ends).
    GO.store(true, Ordering::Release);
    if sys::thread_join(gate_tid) != Ok(0) {
        return fail("the gate did not end");
    }
    let mut made = live;
    let mut waits = 0u32;
    let refusal = loop {
        match sys::thread_create(quick as *const () as usize, entry_stack_pointer(stack + 16 * 1024), 0, 0) {
            Ok(t) => {
                made += 1;
                // Joined before the next one starts on the same stack.
                if sys::thread_join(t) != Ok(0) {
                    return fail("a quick thread did not end");
                }
            }
            // Below the made quota, EAGAIN is the live quota: the waiters released above (and
            // the last quick thread) leave the live count only once a CPU has left their
            // stacks, which on several CPUs may come after this call. Let them finish.
            Err(Some(Errno::Again)) if made < MAX_THREADS => {
                waits += 1;
                if waits > 1_000_000 {
                    return fail("ended threads never left the live count");
                }
                sys::yield_now();
            }
            Err(e) => break e,
        }
        if made > MAX_THREADS {
            return fail("more threads made than the quota");
        }
    };
    println!("exhaust: {made} threads made, then {refusal:?}");
    if refusal != Some(Errno::Again) || made != MAX_THREADS {
        return fail("the thread refusal was not EAGAIN at the quota");
    }
    println!("exhaust: every refusal at the quota, no kernel panic");
    0
}
libuthread::entry!(main);
