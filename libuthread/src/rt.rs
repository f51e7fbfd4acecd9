//! The program runtime: `_start`, the call into the program's `main`, and the panic handler.

use tsumugi_abi::exit::STATUS_USER_PANIC;

extern "Rust" {
    /// The program's main, named by [`entry!`](crate::entry).
    fn tsumugi_user_main() -> i32;
}

// _start: the ELF entry point. The kernel enters with a 16-byte-aligned stack and no return
// address; clear the frame pointer (ends backtraces) and call into Rust with the ABI's
// alignment. Must be assembly: Rust functions expect a return address on the stack.
#[cfg(target_arch = "x86_64")]
core::arch::global_asm!(
    ".global _start",
    "_start:",
    "xor ebp, ebp",
    "and rsp, -16",
    "call {start}",
    "ud2",
    start = sym start_rust,
);

// The same on aarch64: clear the frame pointer (x29) and link register (x30) so backtraces end
// here, keep sp 16-byte aligned (the architecture faults on a misaligned sp when SCTLR_EL1.SA0
// is set), and branch-and-link into Rust. `brk` catches a return that must never happen.
#[cfg(target_arch = "aarch64")]
core::arch::global_asm!(
    ".global _start",
    "_start:",
    "mov x29, xzr",
    "mov x30, xzr",
    "mov x9, sp",
    "and x9, x9, #-16",
    "mov sp, x9",
    "bl {start}",
    "brk #0",
    start = sym start_rust,
);

// The same on riscv64: clear the frame pointer (s0) and return address (ra) so backtraces end
// here, keep sp 16-byte aligned as the psABI requires, and call into Rust (`call` is
// PC-relative, so it works wherever the program was loaded). `unimp` catches a return that must
// never happen.
#[cfg(target_arch = "riscv64")]
core::arch::global_asm!(
    ".global _start",
    "_start:",
    "mv s0, zero",
    "mv ra, zero",
    "andi sp, sp, -16",
    "call {start}",
    "unimp",
    start = sym start_rust,
);

extern "C" fn start_rust() -> ! {
    // SAFETY: `tsumugi_user_main` is defined exactly once by the program's `entry!`.
    let status = unsafe { tsumugi_user_main() };
    crate::sys::exit(status as usize)
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    crate::println!("panicked: {}", info.message());
    if let Some(loc) = info.location() {
        crate::println!("  at {}:{}:{}", loc.file(), loc.line(), loc.column());
    }
    crate::sys::exit(STATUS_USER_PANIC as usize)
}

/// Names the program's `main` (a `fn() -> i32`); its result is the exit status.
#[macro_export]
macro_rules! entry {
    ($main:path) => {
        #[no_mangle]
        fn tsumugi_user_main() -> i32 {
            let main: fn() -> i32 = $main;
            main()
        }
    };
}
