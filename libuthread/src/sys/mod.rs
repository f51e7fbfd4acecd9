//! Raw syscalls with typed results. The calling convention is documented in
//! `tsumugi_abi::syscall`; the instruction that enters the kernel is per architecture.

use tsumugi_abi::syscall::{decode_result, Clock, Errno, Syscall};

#[cfg(target_arch = "x86_64")]
#[path = "x86_64.rs"]
mod imp;
#[cfg(target_arch = "aarch64")]
#[path = "aarch64.rs"]
mod imp;
#[cfg(target_arch = "riscv64")]
#[path = "riscv64.rs"]
mod imp;

pub use imp::syscall6;

/// The result of a syscall: a value, or an error code (`None` when the kernel returned a code
/// this library does not know).
pub type SysResult = Result<usize, Option<Errno>>;

/// Calls syscall `number` with `args` and decodes the result.
pub fn call(number: usize, args: [usize; 6]) -> SysResult {
    // SAFETY: the kernel checks every argument; a bad one is an error code, not a fault.
    decode_result(unsafe { syscall6(number, args) })
}

/// Ends the program with `status`.
pub fn exit(status: usize) -> ! {
    let _ = call(Syscall::Exit as usize, [status, 0, 0, 0, 0, 0]);
    // The kernel never returns from exit; if it did, spinning is the only safe thing left.
    loop {
        core::hint::spin_loop();
    }
}

/// Writes bytes to the console; returns how many were written.
pub fn console_write(bytes: &[u8]) -> SysResult {
    call(Syscall::ConsoleWrite as usize, [bytes.as_ptr() as usize, bytes.len(), 0, 0, 0, 0])
}

/// Reads a clock.
pub fn clock(which: Clock) -> SysResult {
    call(Syscall::Clock as usize, [which as usize, 0, 0, 0, 0, 0])
}
