//! Syscall numbers and error codes.
//!
//! Calling convention (every architecture): the syscall number goes in the first syscall register
//! (x86_64 `rax`, riscv64 `a7`, aarch64 `x8`), up to six arguments in the argument registers
//! (x86_64 `rdi, rsi, rdx, r10, r8, r9`; riscv64 `a0..a5`; aarch64 `x0..x5`), and the result comes
//! back in the return register (`rax`/`a0`/`x0`) as an `isize`: non-negative on success, `-errno`
//! on failure (see [`encode_result`]/[`decode_result`]).

/// Syscall numbers.
#[repr(usize)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syscall {
    /// `exit(status: usize) -> !`: end the calling program with `status`.
    Exit = 0,
    /// `console_write(ptr: *const u8, len: usize) -> usize`: write bytes to the console; returns
    /// the number written. The buffer must lie in memory the caller may read.
    ConsoleWrite = 1,
    /// `clock(which: usize) -> u64`: read a clock (see [`Clock`]).
    Clock = 2,
}

impl Syscall {
    /// Every syscall, in number order.
    pub const ALL: [Syscall; 3] = [Syscall::Exit, Syscall::ConsoleWrite, Syscall::Clock];

    /// Decodes a syscall number.
    pub fn from_number(number: usize) -> Option<Syscall> {
        Self::ALL.iter().copied().find(|s| *s as usize == number)
    }
}

/// Clocks readable through [`Syscall::Clock`].
#[repr(usize)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// Nanoseconds since boot, monotonic.
    MonotonicNanos = 0,
    /// The raw cycle counter of the CPU the caller runs on (TSC, `cycle`, `CNTVCT`).
    /// Under QEMU with `-icount shift=0` it advances by exactly one per guest instruction.
    Cycles = 1,
    /// Timer interrupts taken by the CPU since boot.
    Ticks = 2,
}

impl Clock {
    /// Decodes a clock selector.
    pub fn from_number(number: usize) -> Option<Clock> {
        [Clock::MonotonicNanos, Clock::Cycles, Clock::Ticks]
            .into_iter()
            .find(|c| *c as usize == number)
    }
}

/// Error codes returned (negated) by syscalls.
#[repr(isize)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Errno {
    /// No syscall has this number.
    NoSys = 1,
    /// A pointer argument does not name memory the caller may access in the needed way.
    Fault = 2,
    /// An argument is out of range.
    Inval = 3,
    /// The kernel ran out of memory (or another resource) for this request.
    NoMem = 4,
}

impl Errno {
    /// Every error code.
    pub const ALL: [Errno; 4] = [Errno::NoSys, Errno::Fault, Errno::Inval, Errno::NoMem];

    /// The code's short name, as a C programmer would spell it.
    pub fn name(self) -> &'static str {
        match self {
            Errno::NoSys => "ENOSYS",
            Errno::Fault => "EFAULT",
            Errno::Inval => "EINVAL",
            Errno::NoMem => "ENOMEM",
        }
    }
}

/// Encodes a syscall result into the return register.
pub fn encode_result(result: Result<usize, Errno>) -> usize {
    match result {
        Ok(value) => value,
        Err(errno) => (-(errno as isize)) as usize,
    }
}

/// Decodes the return register of a syscall. Values in `-4095..0` are errors (as on Linux), so
/// every result below that, including large addresses, is a success.
pub fn decode_result(raw: usize) -> Result<usize, Option<Errno>> {
    let signed = raw as isize;
    if (-4095..0).contains(&signed) {
        Err(Errno::ALL.iter().copied().find(|e| *e as isize == -signed))
    } else {
        Ok(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_round_trip() {
        for errno in Errno::ALL {
            assert_eq!(decode_result(encode_result(Err(errno))), Err(Some(errno)));
        }
        for value in [0usize, 1, 4096, usize::MAX / 2, 0xffff_8000_0000_0000] {
            assert_eq!(decode_result(encode_result(Ok(value))), Ok(value));
        }
    }

    #[test]
    fn syscall_numbers_decode() {
        for s in Syscall::ALL {
            assert_eq!(Syscall::from_number(s as usize), Some(s));
        }
        assert_eq!(Syscall::from_number(9999), None);
    }
}
