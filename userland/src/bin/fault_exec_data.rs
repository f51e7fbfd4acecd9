//! Executes bytes in a writable data region. W^X must make this fault and end the program.
#![no_std]
#![no_main]

use libuthread::println;

/// `ret` in x86_64 encoding, placed in writable data.
static mut CODE_IN_DATA: [u8; 16] = [0xc3; 16];

fn main() -> i32 {
    let target = core::ptr::addr_of_mut!(CODE_IN_DATA) as *mut u8;
    println!("fault_exec_data: jumping to data at {:#x}", target as usize);
    // SAFETY: not safe, on purpose: the data page is not executable, so the call must fault.
    let f: extern "C" fn() = unsafe { core::mem::transmute(target) };
    f();
    println!("fault_exec_data: FAILED: executed data");
    1
}
libuthread::entry!(main);
