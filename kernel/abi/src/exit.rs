//! How the guest tells the host how it ended.
//!
//! The kernel ends QEMU with a *guest status* in `0..=127`. Each architecture carries it out
//! differently (x86_64: `isa-debug-exit`, which makes QEMU exit with `status * 2 + 1`; riscv64:
//! SBI SRST / the test finisher; aarch64: semihosting `SYS_EXIT`); `xtask` turns the QEMU exit
//! code back into the guest status and then into its own exit status.

/// Largest exit status a program can pass through to the host unchanged; larger statuses are
/// reported as this value.
pub const MAX_PROGRAM_STATUS: u8 = 125;

/// Guest status when the last program run was ended by the kernel (a fault, a bad ThMB...).
pub const STATUS_PROGRAM_KILLED: u8 = 126;

/// Guest status when the kernel itself panicked or took an exception it could not handle.
pub const STATUS_KERNEL_PANIC: u8 = 127;

/// Status a user program's panic handler exits with (as Rust's test harness does).
pub const STATUS_USER_PANIC: u8 = 101;

/// Maps a program's exit status to the guest status that carries it to the host.
pub fn guest_status_for_program(status: usize) -> u8 {
    if status > MAX_PROGRAM_STATUS as usize {
        MAX_PROGRAM_STATUS
    } else {
        status as u8
    }
}

/// What a guest status means, for messages on the host.
pub fn describe_guest_status(status: u8) -> &'static str {
    match status {
        0 => "success",
        STATUS_PROGRAM_KILLED => "the last program was killed by the kernel",
        STATUS_KERNEL_PANIC => "kernel panic",
        STATUS_USER_PANIC => "a user program panicked",
        _ => "the last program exited with a non-zero status",
    }
}
