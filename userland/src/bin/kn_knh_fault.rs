//! A fault inside the Kernel Notification Handler (LTN = 0 there) must not recurse into
//! another upcall: the kernel ends the program with a report.
#![no_std]
#![no_main]

use libuthread::{println, sys};
use tsumugi_userland::kn::{self, Ring, Stack, Thmb};

static mut RING: Ring = Ring { header: tsumugi_abi::kn::RingHeader { head: 0, tail: 0, capacity: 0, held_back: 0 }, slots: [tsumugi_abi::kn::Event { kind: 0, thread: 0, arg0: 0, arg1: 0 }; kn::SLOTS] };
static mut STACK: Stack = Stack([0; 64 * 1024]);
static mut THMB: Thmb = Thmb { header: tsumugi_abi::kn::ThmbHeader::EMPTY, rest: [0; 32] };

/// An address no region covers.
const NOWHERE: usize = 0x10;

extern "C" fn handler(kind: u64, thread: u64, _: u64, _: u64) -> ! {
    println!("kn_knh_fault: upcall {kind} for thread {thread:#x}; now faulting inside the handler");
    // SAFETY: not safe, on purpose: the kernel must end the program, not upcall again.
    let v = unsafe { (NOWHERE as *const u64).read_volatile() };
    println!("kn_knh_fault: FAILED: read {v} at {NOWHERE:#x}");
    sys::exit(1)
}

fn main() -> i32 {
    if kn::register(handler, core::ptr::addr_of_mut!(RING), core::ptr::addr_of_mut!(STACK)).is_err() {
        return 1;
    }
    sys::ltn_write(core::ptr::addr_of_mut!(THMB) as usize);
    // A second thread so the preemption really switches (and upcalls when it comes back).
    let _ = sys::spawn(|_| loop { core::hint::spin_loop() }, 0, 16 * 1024, false);
    kn::spin_ticks(50);
    println!("kn_knh_fault: FAILED: never preempted");
    1
}

libuthread::entry!(main);
