//! The kernel's side of every trap: syscalls, timer ticks, inter-processor interrupts, and
//! faults — a user fault in a zero-on-touch region is filled, any other ends the program with a
//! report; a kernel fault is a panic report.

use alloc::format;
use alloc::string::String;
use arch::mapping::MapFlags;
use arch::trap::{Access, IpiKind, Trap, TrapFrame};
use core::sync::atomic::{AtomicU64, Ordering};
use tsumugi_abi::log::fault;
use tsumugi_abi::stats::Counter;
use tsumugi_abi::syscall::{encode_result, Syscall};

use crate::domain::Outcome;
use crate::mm::view_space::Fault;
use crate::mm::space;
use crate::sched::scheduler::{self, Then};
use crate::thread;

/// Spurious interrupts seen (all CPUs).
static SPURIOUS: AtomicU64 = AtomicU64::new(0);

/// Timer ticks of the clock CPU.
pub fn ticks() -> u64 {
    scheduler::ticks()
}

/// Spurious interrupts seen so far.
pub fn spurious() -> u64 {
    SPURIOUS.load(Ordering::Relaxed)
}

/// The entry point `arch` calls for every trap. Syscalls, the hot case, are told apart first,
/// with nothing else on their way.
pub fn handle(frame: &mut TrapFrame) {
    if frame.is_syscall() {
        // The two hot calls skip the dispatch table: a vCPU's `sleep` (the KN notification
        // path: saved, `BLOCKED`, upcall; any other caller of `sleep` goes through the table as
        // usual) and `yield` (the kernel switch).
        let number = frame.syscall_number();
        // Recorded before the two shortcuts, so a trace sees every syscall (nothing without
        // the `trace` feature).
        crate::trace::syscall(number);
        if number == Syscall::Sleep as usize {
            if let Some(result) = crate::notify::sleep(frame, frame.syscall_args()[0] as u64) {
                frame.set_syscall_result(encode_result(result));
                thread::exit_if_killed();
                return;
            }
        } else if number == Syscall::Yield as usize {
            yield_now();
            frame.set_syscall_result(0);
            thread::exit_if_killed();
            return;
        }
        crate::syscall::dispatch(frame);
        thread::exit_if_killed();
        return;
    }
    handle_not_syscall(frame);
}

/// Every trap but a syscall: the tick, the preemption path, first — a small function of its
/// own rather than the general match with its large frame. Apart from `handle` so that the
/// syscall path does not test for the tick too.
#[inline(never)]
fn handle_not_syscall(frame: &mut TrapFrame) {
    if frame.is_timer() {
        timer(frame);
    } else {
        handle_other(frame);
    }
}

/// The timer tick: the end of the running thread's quantum preempts it (Kernel Notification
/// turns that into a `PREEMPTED` upcall for a vCPU). Inline into `handle_not_syscall`: the tick
/// then runs in that function's frame, not a second one behind a call.
#[inline(always)]
fn timer(frame: &mut TrapFrame) {
    arch::interrupts::end_of_interrupt();
    let from_user = frame.from_user();
    let quantum_over = scheduler::tick(from_user);
    // Space sharing: a vCPU of a program above its share gives itself up here (one load when
    // no program is).
    if from_user && crate::notify::revoking() && crate::notify::revoke_point(frame) {
        // Revoked and granted again: the frame enters the handler.
    } else if quantum_over {
        crate::notify::preempt(frame);
    }
    if from_user {
        thread::exit_if_killed();
    }
}

/// Every trap but a syscall.
#[inline(never)]
fn handle_other(frame: &mut TrapFrame) {
    match frame.trap() {
        Trap::Syscall => crate::syscall::dispatch(frame),
        // `handle` takes the tick first (`timer`); kept for a frame that classifies as one anyway.
        Trap::Timer => {
            timer(frame);
            return;
        }
        Trap::Ipi(kind) => {
            arch::interrupts::end_of_interrupt();
            match kind {
                // The idle loop looks at its queue after any interrupt; a busy CPU gets to the
                // woken thread at its next switch.
                IpiKind::Reschedule => {}
                IpiKind::Kick | IpiKind::Shootdown => {
                    scheduler::this_cpu().counters.bump(Counter::ShootdownsReceived);
                    crate::smp::serve_reloads();
                    if frame.from_user() {
                        crate::notify::nudged(frame);
                    }
                }
                IpiKind::FpuSave => crate::fpu::serve_request(),
            }
        }
        Trap::FpuDisabled if frame.from_user() => crate::fpu::on_trap(),
        Trap::Spurious(_) => {
            SPURIOUS.fetch_add(1, Ordering::Relaxed);
        }
        Trap::PageFault { address, access, .. } if frame.from_user() => user_page_fault(frame, address, access),
        trap if frame.from_user() => {
            let (ip, report) = (frame.ip(), describe_exception(frame, trap));
            if !crate::notify::fault(frame, ip, 0, || report.clone()) {
                kill_current(report);
            }
        }
        trap => crate::panic::exception(frame, trap),
    }
    if frame.from_user() {
        thread::exit_if_killed();
    }
}

fn need(access: Access) -> MapFlags {
    match access {
        Access::Read => MapFlags::READ,
        Access::Write => MapFlags::WRITE,
        Access::Execute => MapFlags::EXEC,
    }
}

/// Resolves a user page fault, or hands it to the program's library (Kernel Notification), or
/// ends the program with a report.
fn user_page_fault(frame: &mut TrapFrame, address: u64, access: Access) {
    if address < arch::layout::KERNEL_HALF {
        let view = scheduler::with_current(|t| t.and_then(|t| t.view()));
        if let Some(view) = view {
            match space::with(|s, m| s.fault(m, view, address, need(access))) {
                // The page is there now. If it was there already, this CPU may still run an older
                // root of the thread: a change of its view (another vCPU's `region_create`) can
                // race with the switch that loaded the root, and then no kick comes. Reload it,
                // or the thread would fault on that page forever.
                Ok(Fault::Filled | Fault::Mapped) => {
                    scheduler::reload_current_root();
                    return;
                }
                // The view changed under the thread (a grant by another thread): load it, retry.
                Ok(_) if scheduler::reload_current_root() => return,
                Ok(_) => {}
                Err(_) => return kill_current(format!("page fault: out of memory filling {address:#x}; {} {:#x}", arch::trap::IP_REGISTER, frame.ip())),
            }
        }
    }
    let kind = match access {
        Access::Read => 1,
        Access::Write => 2,
        Access::Execute => 3,
    };
    let report = describe_page_fault(frame, address, access);
    if !crate::notify::fault(frame, address, kind, || report.clone()) {
        kill_current(report);
    }
}

/// Ends the running thread's whole program with `reason`, then the thread.
fn kill_current(reason: String) {
    let domain = scheduler::with_current(|t| t.and_then(|t| t.domain.clone()));
    if let Some(d) = domain {
        d.end(Outcome::Killed(reason));
    }
    thread::exit_current(None);
}

fn rights_text(r: MapFlags) -> String {
    let bit = |f: MapFlags, c: char| if r.contains(f) { c } else { '-' };
    format!("{}{}{}", bit(MapFlags::READ, 'r'), bit(MapFlags::WRITE, 'w'), bit(MapFlags::EXEC, 'x'))
}

/// The report for a page fault the view does not allow (wording in `tsumugi_abi::log`).
fn describe_page_fault(frame: &TrapFrame, address: u64, access: Access) -> String {
    let verb = match access {
        Access::Read => "read",
        Access::Write => "write",
        Access::Execute => "execute",
    };
    let view = scheduler::with_current(|t| t.and_then(|t| t.view()));
    let found = space::with(|s, _| {
        let r = s.region_at(address)?;
        let info = s.region_info(r)?;
        Some((info, view.map_or(MapFlags::empty(), |v| s.rights(v, r))))
    });
    let why = if address >= arch::layout::KERNEL_HALF {
        fault::KERNEL_MEMORY
    } else {
        match (&found, access) {
            (None, _) => fault::UNMAPPED,
            (Some((_, rights)), _) if rights.is_empty() => "of memory outside the view",
            (Some(_), Access::Write) => fault::READ_ONLY,
            (Some(_), Access::Execute) => fault::NOT_EXECUTABLE,
            (Some(_), Access::Read) => "of unreadable memory",
        }
    };
    let region = match found {
        Some((info, rights)) => format!(" (region {} at {:#x}, view rights {})", info.kind.name(), info.start.as_u64(), rights_text(rights)),
        None => String::new(),
    };
    format!("page fault: {verb} {why} at {address:#x}{region}; {} {:#x}", arch::trap::IP_REGISTER, frame.ip())
}

fn describe_exception(frame: &TrapFrame, trap: Trap) -> String {
    match trap {
        Trap::Exception { vector, name } => {
            format!("{name} (vector {vector}, error {:#x}) at {} {:#x}", frame.fault_code(), arch::trap::IP_REGISTER, frame.ip())
        }
        other => format!("unexpected trap {other:?} at {} {:#x}", arch::trap::IP_REGISTER, frame.ip()),
    }
}

/// Yields the CPU from a syscall.
pub fn yield_now() {
    scheduler::schedule(Then::Requeue);
}
