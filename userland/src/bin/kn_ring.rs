//! No event is lost when the ring is full: a program registers 8 vCPUs with a 2-slot ring, so
//! the kernel must hold back 5 of the 7 `VCPU_GRANTED` events until the library makes room.
//! vCPU 0 drains slowly and must see all 7, in order, and see the kernel report held events.
#![no_std]
#![no_main]

use core::sync::atomic::AtomicU64;
use libuthread::{println, sys};
use tsumugi_abi::kn::{Event, EventKind, RingHeader};

const VCPUS: usize = 8;
const SLOTS: usize = 2;
const STACK: usize = 16 * 1024;

#[repr(C, align(64))]
struct SmallRing {
    header: RingHeader,
    slots: [Event; SLOTS],
}

static mut RING: SmallRing = SmallRing { header: RingHeader { head: 0, tail: 0, capacity: SLOTS as u64, held_back: 0 }, slots: [Event { kind: 0, thread: 0, arg0: 0, arg1: 0 }; SLOTS] };
#[repr(C, align(16))]
struct Stacks([[u8; STACK]; VCPUS]);
static mut STACKS: Stacks = Stacks([[0; STACK]; VCPUS]);
static STACK_TOPS: [AtomicU64; VCPUS] = [const { AtomicU64::new(0) }; VCPUS];

/// The other vCPUs just park: only vCPU 0 reads the ring.
extern "C" fn handler(_: u64, _: u64, _: u64, _: u64) -> ! {
    loop {
        let _ = sys::vcpu_park(0);
    }
}

fn main() -> i32 {
    let ring = core::ptr::addr_of_mut!(RING);
    if let Err(e) = tsumugi_userland::kn::register_vcpus(handler, ring as u64, core::ptr::addr_of_mut!(STACKS) as u64, STACK, &STACK_TOPS) {
        println!("kn_ring: FAILED: register: {e:?}");
        return 1;
    }
    let mut granted = [0u64; VCPUS];
    let mut n = 0;
    let mut max_held = 0;
    for _ in 0..1000 {
        // SAFETY: the ring is ours; the kernel appends behind `tail` only.
        unsafe {
            max_held = max_held.max(core::ptr::read_volatile(&(*ring).header.held_back));
            let tail = core::ptr::read_volatile(&(*ring).header.tail);
            while (*ring).header.head < tail {
                let e = (*ring).slots[((*ring).header.head % SLOTS as u64) as usize];
                if e.kind == EventKind::VcpuGranted as u64 && n < VCPUS {
                    granted[n] = e.arg0;
                    n += 1;
                }
                core::ptr::write_volatile(&mut (*ring).header.head, (*ring).header.head + 1);
            }
        }
        if n == VCPUS - 1 {
            break;
        }
        // Parking lets the kernel move held-back events into the room just made (it returns at
        // once when there is something to read).
        let _ = sys::vcpu_park(0);
    }
    let in_order = granted[..n].iter().enumerate().all(|(i, &v)| v == i as u64 + 1);
    println!("kn_ring: {n} of {} VCPU_GRANTED events through a {SLOTS}-slot ring, in order: {in_order}; the kernel held back up to {max_held}", VCPUS - 1);
    sys::exit(if n == VCPUS - 1 && in_order && max_held > 0 { 0 } else { 1 })
}
libuthread::entry!(main);
