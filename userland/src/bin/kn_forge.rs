//! LTN forgery: the LTN register names this program's own code (read-only) when the kernel preempts the program. The kernel must
//! refuse to write a ThMB there and end the program with a report.
#![no_std]
#![no_main]

#[cfg(target_arch = "x86_64")]
fn main() -> i32 {
    tsumugi_userland::kn::forge_ltn("kn_forge", (main as *const () as usize) & !(tsumugi_abi::kn::THMB_ALIGN as usize - 1), "my own code")
}

// The LTN register is written with x86_64's wrgsbase; elsewhere this program reports that it is
// not ported (and fails, so a suite that runs it cannot pass by accident).
#[cfg(not(target_arch = "x86_64"))]
fn main() -> i32 {
    libuthread::println!("kn_forge: not ported to this architecture");
    1
}

libuthread::entry!(main);
