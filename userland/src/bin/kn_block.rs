//! A blocking syscall never blocks the vCPU: the thread's sleep hands the vCPU back through a
//! `BLOCKED` upcall, and `UNBLOCKED` for the same thread follows it in the ring (never before),
//! with the thread's full frame and syscall result in its ThMB.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU64, Ordering};
use libuthread::{println, sys};
use tsumugi_abi::kn::{mask, EventKind};
use tsumugi_userland::kn::{self, Ring, Stack, Thmb};

static mut RING: Ring = Ring { header: tsumugi_abi::kn::RingHeader { head: 0, tail: 0, capacity: 0, held_back: 0 }, slots: [tsumugi_abi::kn::Event { kind: 0, thread: 0, arg0: 0, arg1: 0 }; kn::SLOTS] };
static mut STACK: Stack = Stack([0; 64 * 1024]);
static mut THMB: Thmb = Thmb { header: tsumugi_abi::kn::ThmbHeader::EMPTY, rest: [0; 32] };
static PARKS: AtomicU64 = AtomicU64::new(0);

extern "C" fn handler(kind: u64, thread: u64, vcpu: u64, _: u64) -> ! {
    let me = core::ptr::addr_of_mut!(THMB) as u64;
    if kind != EventKind::Blocked as u64 || thread != me || sys::ltn_read() != 0 {
        println!("kn_block: FAILED: first upcall {kind} thread {thread:#x} LTN {:#x}", sys::ltn_read());
        sys::exit(1);
    }
    println!("kn_block: vCPU {vcpu} got BLOCKED for {thread:#x} while the thread sleeps");
    let ring = core::ptr::addr_of_mut!(RING);
    let mut seen = [0u64; 4];
    let mut n = 0;
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
            break;
        }
        PARKS.fetch_add(1, Ordering::Relaxed);
        let _ = sys::vcpu_park(0);
    }
    // SAFETY: the kernel wrote the frame before posting UNBLOCKED.
    let (m, full) = unsafe { (THMB.header.mask, THMB.header.full) };
    let (result, pc) = (full.result(), full.pc());
    let order_ok = n == 2 && seen[0] == EventKind::Blocked as u64 && seen[1] == EventKind::Unblocked as u64;
    println!("kn_block: ring for {me:#x}: {:?}; mask {m}, result {result}, pc {pc:#x}, parked {} times", &seen[..n], PARKS.load(Ordering::Relaxed));
    let main_at = main as *const () as u64;
    let ok = order_ok && m == mask::FULL && result == 0 && pc > main_at.saturating_sub(0x10000) && pc < main_at + 0x10000;
    sys::exit(if ok { 0 } else { 1 })
}

fn main() -> i32 {
    if kn::register(handler, core::ptr::addr_of_mut!(RING), core::ptr::addr_of_mut!(STACK)).is_err() {
        return 1;
    }
    sys::ltn_write(core::ptr::addr_of_mut!(THMB) as usize);
    let _ = sys::sleep_nanos(30_000_000);
    println!("kn_block: FAILED: the sleep returned into the thread instead of an upcall");
    1
}

libuthread::entry!(main);
