//! LTN forgery on the blocking path: the LTN register names this program's own code (read-only)
//! when it calls `sleep`. The kernel's fast save faults there, the checked one refuses, and the
//! program must end with a report (no upcall, no panic).
#![no_std]
#![no_main]

fn main() -> i32 {
    tsumugi_userland::kn::forge_ltn_sleep("kn_forge_sleep", (main as *const () as usize) & !(tsumugi_abi::kn::THMB_ALIGN as usize - 1), "my own code")
}

libuthread::entry!(main);
