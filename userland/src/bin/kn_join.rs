//! A blocking call that needs a kernel side of its own (`thread_join` of a kernel thread) hands
//! the vCPU to a spare activation, and the activation that waited becomes a spare in turn:
//! `ROUNDS` joins, each answered by `BLOCKED` then `UNBLOCKED` with the joined thread's exit
//! value in the ThMB's result register, run on far fewer distinct activations than joins (one
//! new activation per join would make them all distinct).
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use libuthread::{println, sys};
use tsumugi_abi::kn::{mask, EventKind};
use tsumugi_userland::kn::{self, Ring, Stack, Thmb};

static mut RING: Ring = Ring { header: tsumugi_abi::kn::RingHeader { head: 0, tail: 0, capacity: 0, held_back: 0 }, slots: [tsumugi_abi::kn::Event { kind: 0, thread: 0, arg0: 0, arg1: 0 }; kn::SLOTS] };
static mut STACK: Stack = Stack([0; 64 * 1024]);
static mut THMB: Thmb = Thmb { header: tsumugi_abi::kn::ThmbHeader::EMPTY, rest: [0; 32] };

/// Joins to make.
const ROUNDS: usize = 16;
/// What worker `i` exits with.
const VALUE_BASE: u64 = 1000;

/// Stacks of the joined kernel threads, one per round.
#[repr(C, align(16))]
struct WorkerStacks([[u8; 16 * 1024]; ROUNDS]);
static mut WORKER_STACKS: WorkerStacks = WorkerStacks([[0; 16 * 1024]; ROUNDS]);

static ROUND: AtomicUsize = AtomicUsize::new(0);
/// Kernel thread ids of the activations that entered the handler, by round.
static HANDLER_TIDS: [AtomicU64; ROUNDS] = [const { AtomicU64::new(0) }; ROUNDS];
static FAILURES: AtomicUsize = AtomicUsize::new(0);

/// A joined kernel thread: lets the joiner block first, then exits with its value.
extern "C" fn worker(i: usize) -> ! {
    let _ = sys::sleep_nanos(200_000);
    sys::thread_exit(VALUE_BASE as usize + i)
}

/// Starts round `i`: a worker, then a join of it with the LTN set (answered by an upcall).
fn start_round(i: usize) -> ! {
    // SAFETY: each round's worker gets its own stack, used by nobody else.
    let top = unsafe { core::ptr::addr_of_mut!(WORKER_STACKS.0[i]) as usize + 16 * 1024 };
    let tid = match sys::thread_create(worker as *const () as usize, top, i, 0) {
        Ok(t) => t,
        Err(e) => {
            println!("kn_join: FAILED: thread_create: {e:?}");
            sys::exit(1)
        }
    };
    sys::ltn_write(core::ptr::addr_of_mut!(THMB) as usize);
    let r = sys::thread_join(tid);
    println!("kn_join: FAILED: the join of round {i} returned into the thread ({r:?}) instead of an upcall");
    sys::exit(1)
}

/// Reads the ring until `UNBLOCKED` for the ThMB arrives (parking in between); returns the
/// kinds seen for it, in order.
fn events_until_unblocked() -> ([u64; 4], usize) {
    let me = core::ptr::addr_of_mut!(THMB) as u64;
    let ring = core::ptr::addr_of_mut!(RING);
    let (mut seen, mut n) = ([0u64; 4], 0);
    loop {
        // SAFETY: the ring is ours; the kernel only appends behind `tail`.
        unsafe {
            let tail = core::ptr::read_volatile(&(*ring).header.tail);
            while (*ring).header.head < tail {
                let e = (*ring).slots[((*ring).header.head % kn::SLOTS as u64) as usize];
                if e.thread == me && n < seen.len() {
                    seen[n] = e.kind;
                    n += 1;
                }
                core::ptr::write_volatile(&mut (*ring).header.head, (*ring).header.head + 1);
            }
        }
        if seen[..n].contains(&(EventKind::Unblocked as u64)) {
            return (seen, n);
        }
        let _ = sys::vcpu_park(0);
    }
}

extern "C" fn handler(kind: u64, thread: u64, _vcpu: u64, _: u64) -> ! {
    let i = ROUND.load(Ordering::SeqCst);
    let me = core::ptr::addr_of_mut!(THMB) as u64;
    HANDLER_TIDS[i].store(sys::thread_self() as u64, Ordering::SeqCst);
    if kind != EventKind::Blocked as u64 || thread != me {
        println!("kn_join: FAILED: round {i}: upcall kind {kind} for {thread:#x}");
        sys::exit(1);
    }
    let (seen, n) = events_until_unblocked();
    // SAFETY: the kernel wrote the frame and the result before posting UNBLOCKED.
    let (m, full) = unsafe { (THMB.header.mask, THMB.header.full) };
    let result = full.result();
    let order_ok = n == 2 && seen[0] == EventKind::Blocked as u64 && seen[1] == EventKind::Unblocked as u64;
    if !order_ok || m & mask::FULL == 0 || result != VALUE_BASE + i as u64 {
        println!("kn_join: FAILED: round {i}: events {:?}, mask {m}, result {result} (want {})", &seen[..n], VALUE_BASE + i as u64);
        FAILURES.fetch_add(1, Ordering::SeqCst);
    }
    if i + 1 < ROUNDS {
        ROUND.store(i + 1, Ordering::SeqCst);
        start_round(i + 1);
    }
    let tids: [u64; ROUNDS] = core::array::from_fn(|k| HANDLER_TIDS[k].load(Ordering::SeqCst));
    let distinct = (0..ROUNDS).filter(|&k| !tids[..k].contains(&tids[k])).count();
    let failures = FAILURES.load(Ordering::SeqCst);
    println!("kn_join: {ROUNDS} joins, upcalls on {distinct} distinct activations, {failures} failed");
    // Reuse must have happened: with a new activation per blocking call every round's handler
    // would run on a thread of its own.
    let ok = failures == 0 && distinct < ROUNDS;
    if !ok {
        println!("kn_join: FAILED: activation ids by round {tids:?}");
    }
    sys::exit(if ok { 0 } else { 1 })
}

fn main() -> i32 {
    if kn::register(handler, core::ptr::addr_of_mut!(RING), core::ptr::addr_of_mut!(STACK)).is_err() {
        return 1;
    }
    start_round(0)
}

libuthread::entry!(main);
