//! Several CPUs: inter-processor interrupts, and (on x86_64) bringing up the application
//! processors.

use core::sync::atomic::{AtomicU32, Ordering};

use crate::sched::scheduler::MAX_CPUS;

/// Kinds of inter-processor interrupt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ipi {
    /// Something was queued for an idle CPU: look at the run queue.
    Reschedule,
    /// The running thread's view changed or its program ends: reload the root / check.
    Kick,
}

/// Local APIC (or hart / MPIDR) id of each CPU index.
#[allow(clippy::declare_interior_mutable_const)]
const NO_CPU: AtomicU32 = AtomicU32::new(u32::MAX);
static HW_IDS: [AtomicU32; MAX_CPUS] = [NO_CPU; MAX_CPUS];

/// Records the hardware id of CPU `index`.
pub fn set_hw_id(index: usize, id: u32) {
    HW_IDS[index].store(id, Ordering::Relaxed);
}

/// Sends `ipi` to CPU `index` (ignored for CPUs that are not up).
pub fn send_ipi(index: usize, ipi: Ipi) {
    let Some(id) = HW_IDS.get(index).map(|a| a.load(Ordering::Relaxed)) else { return };
    if id == u32::MAX {
        return;
    }
    let vector = match ipi {
        Ipi::Reschedule => arch::trap::RESCHEDULE_VECTOR,
        Ipi::Kick => arch::trap::KICK_VECTOR,
    };
    arch::interrupts::send_ipi(id, vector);
}

/// Makes CPU `index` enter the kernel soon (to notice a kill or a view change).
pub fn kick(index: usize) {
    if index != arch::cpu::cpu_index() {
        crate::sched::scheduler::this_cpu().counters.bump(tsumugi_abi::stats::Counter::IpisSent);
        send_ipi(index, Ipi::Kick);
    }
}

/// Brings up the other CPUs (at most `limit`, default all the firmware lists).
pub fn start_other_cpus(_limit: Option<usize>) {}
