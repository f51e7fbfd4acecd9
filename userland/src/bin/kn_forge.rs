//! LTN forgery: the LTN register names this program's own code (read-only) when the kernel preempts the program. The kernel must
//! refuse to write a ThMB there and end the program with a report.
#![no_std]
#![no_main]

fn main() -> i32 {
    tsumugi_userland::kn::forge_ltn("kn_forge", (main as *const () as usize) & !(tsumugi_abi::kn::THMB_ALIGN as usize - 1), "my own code")
}

libuthread::entry!(main);
