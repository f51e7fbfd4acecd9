//! LTN forgery: the LTN register names kernel memory when the kernel preempts the program. The kernel must
//! refuse to write a ThMB there and end the program with a report.
#![no_std]
#![no_main]

#[cfg(target_arch = "x86_64")]
fn main() -> i32 {
    tsumugi_userland::kn::forge_ltn("kn_forge_kernel", tsumugi_userland::KERNEL_ADDRESS, "kernel memory")
}

// The LTN register is written with x86_64's wrgsbase; elsewhere this program reports that it is
// not ported (and fails, so a suite that runs it cannot pass by accident).
#[cfg(not(target_arch = "x86_64"))]
fn main() -> i32 {
    libuthread::println!("kn_forge_kernel: not ported to this architecture");
    1
}

libuthread::entry!(main);
