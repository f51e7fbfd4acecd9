//! Reads kernel memory from ring 3. The kernel must end this program with a report and go on.
#![no_std]
#![no_main]

use libuthread::println;

use tsumugi_userland::KERNEL_ADDRESS;

fn main() -> i32 {
    println!("fault_kernel_read: reading {KERNEL_ADDRESS:#x}");
    // SAFETY: not safe, on purpose: the kernel must stop this read and end the program.
    let value = unsafe { core::ptr::read_volatile(KERNEL_ADDRESS as *const u64) };
    println!("fault_kernel_read: FAILED: read {value:#x} from kernel memory");
    1
}
libuthread::entry!(main);
