//! Writes over its own code. W^X must make this fault and end the program.
#![no_std]
#![no_main]

use libuthread::println;

fn main() -> i32 {
    let target = main as *const () as *mut u8;
    println!("fault_write_text: writing to code at {:#x}", target as usize);
    // SAFETY: not safe, on purpose: text is mapped read+execute, so the write must fault.
    unsafe { core::ptr::write_volatile(target, 0xcc) };
    println!("fault_write_text: FAILED: wrote to code");
    1
}
libuthread::entry!(main);
