//! Kernel threads and the per-CPU record of what runs.
//!
//! Every user thread has a kernel thread: its own kernel stack (holding the user frame at the
//! top while it is in the kernel) and a saved kernel context. This first version runs one
//! program at a time on the boot CPU: the boot context switches to the program's thread and gets
//! control back when the thread exits or is killed. The scheduler of a later step replaces the
//! direct switch with run queues, without changing the thread's shape.

use alloc::boxed::Box;
use alloc::string::String;
use arch::context::{self, KernelContext};
use arch::trap::TrapFrame;
use core::cell::UnsafeCell;
use core::mem::size_of;

use crate::domain::Domain;
use crate::mm::kernel_stack::{KernelStack, NoStack};

/// Most CPUs the kernel supports.
pub const MAX_CPUS: usize = 8;

/// How a thread ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It called `exit` with this status.
    Exited(usize),
    /// The kernel ended it for this reason.
    Killed(String),
}

/// A kernel thread running one user thread.
pub struct Thread {
    stack: KernelStack,
    context: KernelContext,
    domain: *const Domain,
    outcome: Option<Outcome>,
}

/// What one CPU is doing. Only that CPU touches it, with interrupts disabled.
struct CpuState {
    /// Where the CPU's boot/scheduler loop is parked while a thread runs.
    scheduler: KernelContext,
    /// The running thread, or null.
    current: *mut Thread,
}

struct CpuCell(UnsafeCell<CpuState>);

// SAFETY: each CpuCell is used only by the CPU whose index it has, with interrupts disabled, so
// there is never concurrent access.
unsafe impl Sync for CpuCell {}

#[allow(clippy::declare_interior_mutable_const)]
const IDLE_CPU: CpuCell = CpuCell(UnsafeCell::new(CpuState { scheduler: KernelContext::EMPTY, current: core::ptr::null_mut() }));
static CPUS: [CpuCell; MAX_CPUS] = [IDLE_CPU; MAX_CPUS];

fn this_cpu() -> *mut CpuState {
    CPUS[arch::cpu::cpu_index()].0.get()
}

/// Runs the first thread of `domain` until it ends; returns how it ended.
pub fn run(domain: &Domain) -> Result<Outcome, NoStack> {
    let stack = KernelStack::new()?;
    let mut thread = Box::new(Thread { stack, context: KernelContext::EMPTY, domain, outcome: None });
    let arg = &mut *thread as *mut Thread as usize;
    // The top of the stack is reserved for the user frame (traps from user mode push theirs
    // there too); the kernel side of the thread starts below it.
    let below_frame = thread.stack.top().as_u64() - size_of::<TrapFrame>() as u64;
    // SAFETY: the stack is new and ours; user_thread_start never returns.
    thread.context = unsafe { KernelContext::new(below_frame, user_thread_start, arg) };
    arch::cpu::disable_interrupts();
    let cpu = this_cpu();
    // SAFETY: interrupts are off and this CPU owns `cpu`; the thread outlives the switch (it is
    // only dropped below, after it switched back for good). The domain's table shares the
    // kernel half, so the code and stacks in use stay mapped.
    unsafe {
        (*cpu).current = &mut *thread;
        arch::cpu::set_kernel_stack(thread.stack.top().as_u64());
        arch::tlb::load_root(domain.space.root());
        context::switch(&mut (*cpu).scheduler, &thread.context);
        // The thread has ended: back on the boot stack.
        arch::tlb::load_root(crate::mm::kernel_space::kernel_root());
        (*cpu).current = core::ptr::null_mut();
    }
    arch::cpu::enable_interrupts();
    Ok(thread.outcome.take().expect("a thread only switches back when it has ended"))
}

/// First code of a new thread, on its own kernel stack: builds the user frame at the top of the
/// stack and enters user mode.
extern "C" fn user_thread_start(arg: usize) -> ! {
    let thread = arg as *mut Thread;
    // SAFETY: `arg` is the Box'ed thread `run` keeps alive until this thread ends.
    let (domain, top) = unsafe { (&*(*thread).domain, (*thread).stack.top().as_u64()) };
    let frame_addr = top - size_of::<TrapFrame>() as u64;
    let frame = TrapFrame::new_user(domain.entry.as_u64(), domain.stack_top.as_u64(), 0);
    // SAFETY: the frame lies at the top of this thread's own stack, where traps from user mode
    // will put theirs; `enter` abandons the current stack frame, which holds nothing needed.
    unsafe {
        core::ptr::write(frame_addr as *mut TrapFrame, frame);
        arch::trap::enter(frame_addr as *const TrapFrame)
    }
}

/// Ends the running thread with `outcome` and returns to the CPU's scheduler context.
pub fn exit_current(outcome: Outcome) -> ! {
    arch::cpu::disable_interrupts();
    let cpu = this_cpu();
    // SAFETY: interrupts off; `current` is the live thread running this code. After the switch
    // nothing resumes this context again (the thread is dropped by `run`).
    unsafe {
        let thread = (*cpu).current;
        assert!(!thread.is_null(), "exit_current without a current thread");
        (*thread).outcome = Some(outcome);
        context::switch(&mut (*thread).context, &(*cpu).scheduler);
    }
    unreachable!("an ended thread was resumed");
}

/// The domain of the running thread, if a user thread runs on this CPU.
pub fn current_domain() -> Option<&'static Domain> {
    let cpu = this_cpu();
    // SAFETY: read by the owning CPU; the domain outlives its running thread, and callers use
    // the reference only while that thread is current (inside its own traps).
    unsafe {
        let thread = (*cpu).current;
        if thread.is_null() {
            None
        } else {
            Some(&*(*thread).domain)
        }
    }
}
