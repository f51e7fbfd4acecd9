//! Console input: the timer tick (on CPU 0) polls the UART into a small ring, and threads
//! blocked in `console_read` are woken when bytes arrive.
//!
//! Polling keeps the interrupt controller set-up minimal (no I/O APIC routing); at 100 Hz a
//! typed line arrives well within human patience, and QEMU's UART has a 16-byte FIFO.

use alloc::sync::Arc;
use alloc::vec::Vec;
use arch::sync::Mutex;

use crate::sched::scheduler::{self, Then};
use crate::thread::{self, Thread};
use core::mem::MaybeUninit;
use core::sync::atomic::Ordering;

/// Bytes kept until read.
const CAPACITY: usize = 256;

struct Input {
    bytes: [u8; CAPACITY],
    head: usize,
    len: usize,
    waiters: Vec<Arc<Thread>>,
}

static INPUT: Mutex<Input> = Mutex::new(Input { bytes: [0; CAPACITY], head: 0, len: 0, waiters: Vec::new() });

/// Moves bytes the UART received into the ring and wakes readers (timer tick, CPU 0).
#[inline]
pub fn poll() {
    // Most ticks nothing was typed: one register read, no lock, and (inline, the rest out of
    // line) no registers saved for the rest. (Bytes already in the ring never wait for this:
    // a reader takes them before it would block.)
    if arch::serial::byte_waiting() {
        take_received();
    }
}

/// [`poll`] when the UART holds a byte.
#[inline(never)]
fn take_received() {
    let mut woken = Vec::new();
    {
        let mut input = INPUT.lock();
        while let Some(b) = arch::serial::try_read_byte() {
            if input.len < CAPACITY {
                let at = (input.head + input.len) % CAPACITY;
                input.bytes[at] = b;
                input.len += 1;
            }
        }
        if input.len > 0 {
            woken = core::mem::take(&mut input.waiters);
        }
    }
    for t in woken {
        thread::wake(t);
    }
}

/// Reads at least one byte into `buf` (blocking the calling kernel thread until one arrives);
/// returns the bytes read, the start of `buf`. `buf` need not be initialised: only the bytes
/// read are written (a one-byte read does not pay for zeroing a buffer first).
pub fn read_blocking(buf: &mut [MaybeUninit<u8>]) -> &mut [u8] {
    loop {
        {
            let mut input = INPUT.lock();
            if input.len > 0 {
                let n = input.len.min(buf.len());
                for b in buf.iter_mut().take(n) {
                    b.write(input.bytes[input.head]);
                    input.head = (input.head + 1) % CAPACITY;
                    input.len -= 1;
                }
                // SAFETY: the first `n` bytes of `buf` were just written; MaybeUninit<u8> has
                // u8's layout.
                return unsafe { core::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<u8>(), n) };
            }
            let me = scheduler::current().expect("a reader thread");
            // A kill that came before this point found the thread running and only kicked
            // its CPU: it must not block now, or nobody would wake it.
            if me.block_unless_killed() {
                input.waiters.push(me);
            } else {
                drop(me);
                drop(input);
                thread::exit_if_killed();
            }
        }
        scheduler::schedule(Then::Block);
        if scheduler::with_current(|t| t.is_some_and(|t| t.killed.load(Ordering::Acquire))) {
            // Woken by the kill: leave the waiters (not to be kept until input arrives).
            let id = scheduler::with_current(|t| t.map(|t| t.id));
            INPUT.lock().waiters.retain(|w| Some(w.id) != id);
            thread::exit_if_killed();
        }
    }
}
