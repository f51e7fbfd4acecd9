//! Syscall dispatch. Every pointer argument is checked against the caller's regions before the
//! kernel reads or writes through it; anything wrong is an error code, never a kernel fault.

use arch::mapping::MapFlags;
use arch::trap::TrapFrame;
use tsumugi_abi::syscall::{encode_result, Clock, Errno, Syscall};

use crate::thread::{self, Outcome};

/// Bytes copied from user memory per step of a console write.
const COPY_CHUNK: usize = 256;

/// Handles the syscall in `frame` and stores its result there.
pub fn dispatch(frame: &mut TrapFrame) {
    let args = frame.syscall_args();
    let result = match Syscall::from_number(frame.syscall_number()) {
        None => Err(Errno::NoSys),
        Some(Syscall::Exit) => thread::exit_current(Outcome::Exited(args[0])),
        Some(Syscall::ConsoleWrite) => console_write(args[0] as u64, args[1] as u64),
        Some(Syscall::Clock) => clock(args[0]),
    };
    frame.set_syscall_result(encode_result(result));
}

/// `console_write(ptr, len)`.
fn console_write(ptr: u64, len: u64) -> Result<usize, Errno> {
    let domain = thread::current_domain().ok_or(Errno::Fault)?;
    domain.space.check(ptr, len, MapFlags::READ).map_err(|_| Errno::Fault)?;
    let mut buf = [0u8; COPY_CHUNK];
    let mut done = 0u64;
    while done < len {
        let n = (len - done).min(COPY_CHUNK as u64) as usize;
        // SAFETY: the whole range was checked readable in the caller's regions, which stay
        // mapped while the caller is inside this syscall.
        unsafe { arch::usercopy::copy_from_user(&mut buf[..n], ptr + done) };
        arch::serial::write_bytes(&buf[..n]);
        done += n as u64;
    }
    Ok(len as usize)
}

/// `clock(which)`.
fn clock(which: usize) -> Result<usize, Errno> {
    match Clock::from_number(which).ok_or(Errno::Inval)? {
        Clock::MonotonicNanos => Ok(arch::timer::nanos() as usize),
        Clock::Cycles => Ok(arch::timer::cycles() as usize),
        Clock::Ticks => Ok(crate::trap::ticks() as usize),
    }
}
