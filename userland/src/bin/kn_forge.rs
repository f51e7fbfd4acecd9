//! LTN forgery: the LTN register names this program's own code (read-only) when the kernel
//! preempts it. The kernel must refuse to write a ThMB there and end the program with a report.
#![no_std]
#![no_main]

// This program uses x86_64 instructions or registers directly; on other architectures it
// reports that it is not ported (and fails, so a suite that runs it cannot pass by accident).
#[cfg(target_arch = "x86_64")]
mod x86_64 {
    use libuthread::{println, sys};
    use tsumugi_userland::kn::{self, Ring, Stack};

    static mut RING: Ring = Ring { header: tsumugi_abi::kn::RingHeader { head: 0, tail: 0, capacity: 0, held_back: 0 }, slots: [tsumugi_abi::kn::Event { kind: 0, thread: 0, arg0: 0, arg1: 0 }; kn::SLOTS] };
    static mut STACK: Stack = Stack([0; 64 * 1024]);

    extern "C" fn handler(kind: u64, _: u64, _: u64, _: u64) -> ! {
        println!("kn_forge: FAILED: upcall {kind} with a forged LTN");
        sys::exit(1)
    }

    pub fn main() -> i32 {
        if let Err(e) = kn::register(handler, core::ptr::addr_of_mut!(RING), core::ptr::addr_of_mut!(STACK)) {
            println!("kn_forge: FAILED: register: {e:?}");
            return 1;
        }
        let text = (main as *const () as usize) & !63;
        println!("kn_forge: LTN := {text:#x} (my own code)");
        sys::ltn_write(text);
        kn::spin_ticks(20);
        sys::ltn_write(0);
        println!("kn_forge: FAILED: survived a forged LTN");
        1
    }
}

#[cfg(target_arch = "x86_64")]
use x86_64::main;

#[cfg(not(target_arch = "x86_64"))]
fn main() -> i32 {
    libuthread::println!("kn_forge: not ported to this architecture");
    1
}

libuthread::entry!(main);
