//! LTN forgery: the LTN register names kernel memory when the kernel preempts the program. The kernel must
//! refuse to write a ThMB there and end the program with a report.
#![no_std]
#![no_main]

fn main() -> i32 {
    tsumugi_userland::kn::forge_ltn("kn_forge_kernel", tsumugi_userland::KERNEL_ADDRESS, "kernel memory")
}

libuthread::entry!(main);
