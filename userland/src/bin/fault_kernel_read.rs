//! Reads kernel memory from ring 3. The kernel must end this program with a report and go on.
#![no_std]
#![no_main]

use libuthread::println;

/// The start of the kernel image in the single address space.
const KERNEL_ADDRESS: usize = 0xffff_ffff_8000_0000;

fn main() -> i32 {
    println!("fault_kernel_read: reading {KERNEL_ADDRESS:#x}");
    // SAFETY: not safe, on purpose: the kernel must stop this read and end the program.
    let value = unsafe { core::ptr::read_volatile(KERNEL_ADDRESS as *const u64) };
    println!("fault_kernel_read: FAILED: read {value:#x} from kernel memory");
    1
}
libuthread::entry!(main);
