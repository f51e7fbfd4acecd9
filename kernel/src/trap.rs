//! The kernel's side of every trap: syscalls, timer ticks, and faults — a user fault ends the
//! program with a report, a kernel fault is a panic report.

use alloc::format;
use alloc::string::String;
use arch::trap::{Access, Trap, TrapFrame};
use core::sync::atomic::{AtomicU64, Ordering};
use tsumugi_abi::log::fault;

use crate::thread::{self, Outcome, MAX_CPUS};

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicU64 = AtomicU64::new(0);
/// Timer interrupts taken, per CPU.
static TICKS: [AtomicU64; MAX_CPUS] = [ZERO; MAX_CPUS];
/// Spurious interrupts seen (all CPUs).
static SPURIOUS: AtomicU64 = AtomicU64::new(0);

/// Timer ticks this CPU has taken.
pub fn ticks() -> u64 {
    TICKS[arch::cpu::cpu_index()].load(Ordering::Relaxed)
}

/// Spurious interrupts seen so far.
pub fn spurious() -> u64 {
    SPURIOUS.load(Ordering::Relaxed)
}

/// The entry point `arch` calls for every trap.
pub fn handle(frame: &mut TrapFrame) {
    match frame.trap() {
        Trap::Syscall => crate::syscall::dispatch(frame),
        Trap::Timer => {
            TICKS[arch::cpu::cpu_index()].fetch_add(1, Ordering::Relaxed);
            arch::interrupts::end_of_interrupt();
        }
        Trap::Spurious(_) => {
            SPURIOUS.fetch_add(1, Ordering::Relaxed);
        }
        trap if frame.from_user() => thread::exit_current(Outcome::Killed(describe_user_fault(frame, trap))),
        trap => crate::panic::exception(frame, trap),
    }
}

/// The report for a fault in user mode (see `tsumugi_abi::log` for the wording tests match).
fn describe_user_fault(frame: &TrapFrame, trap: Trap) -> String {
    let region = |addr: u64| -> String {
        thread::current_domain()
            .and_then(|d| crate::mm::region::find(d.space.regions(), addr))
            .map(|r| format!(" (region {} at {:#x})", r.kind.name(), r.start.as_u64()))
            .unwrap_or_default()
    };
    match trap {
        Trap::PageFault { address, access, present } => {
            let verb = match access {
                Access::Read => "read",
                Access::Write => "write",
                Access::Execute => "execute",
            };
            let why = if address >= arch::layout::KERNEL_HALF {
                fault::KERNEL_MEMORY
            } else if !present {
                fault::UNMAPPED
            } else {
                match access {
                    Access::Write => fault::READ_ONLY,
                    Access::Execute => fault::NOT_EXECUTABLE,
                    Access::Read => "of protected memory",
                }
            };
            format!("page fault: {verb} {why} at {address:#x}{}; rip {:#x}", region(address), frame.ip())
        }
        Trap::Exception { vector, name } => {
            format!("{name} (vector {vector}, error {:#x}) at rip {:#x}{}", frame.fault_code(), frame.ip(), region(frame.ip()))
        }
        other => format!("unexpected trap {other:?} at rip {:#x}", frame.ip()),
    }
}
