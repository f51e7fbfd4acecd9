//! Several CPUs: bringing up the other processors, and inter-processor interrupts.

use arch::addr::{Frame, PhysAddr, VirtAddr, PAGE_SIZE};
use arch::bootinfo::BootInfo;
use arch::mapping::MapFlags;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use crate::mm::kernel_space::{self, phys_to_virt, AllocatorFrames, DirectMap};
use crate::mm::kernel_stack::KernelStack;
use crate::sched::scheduler::{self, MAX_CPUS};

/// Kinds of inter-processor interrupt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ipi {
    /// Something was queued for an idle CPU: look at the run queue.
    Reschedule,
    /// The running thread's view changed or its program ends: reload the root / check.
    Kick,
}

/// Hardware id (local APIC id, hart id, MPIDR) of each CPU index.
#[allow(clippy::declare_interior_mutable_const)]
const NO_CPU: AtomicU32 = AtomicU32::new(u32::MAX);
static HW_IDS: [AtomicU32; MAX_CPUS] = [NO_CPU; MAX_CPUS];

/// Set by a starting CPU once it is online.
static AP_READY: AtomicBool = AtomicBool::new(false);

/// How long to wait for a CPU to come up.
const START_TIMEOUT_US: u64 = 1_000_000;

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

/// Asks CPU `index` to save its FP owner's registers (`fpu.rs`).
pub fn send_fpu_save(index: usize) {
    scheduler::this_cpu().counters.bump(tsumugi_abi::stats::Counter::IpisSent);
    if let Some(id) = HW_IDS.get(index).map(|a| a.load(Ordering::Relaxed)) {
        if id != u32::MAX {
            arch::interrupts::send_ipi(id, arch::trap::FPU_SAVE_VECTOR);
        }
    }
}

/// Makes CPU `index` enter the kernel soon (to notice a kill or a view change).
pub fn kick(index: usize) {
    if index != arch::cpu::cpu_index() {
        scheduler::this_cpu().counters.bump(tsumugi_abi::stats::Counter::IpisSent);
        send_ipi(index, Ipi::Kick);
    }
}

/// Root reloads asked of each CPU (a shoot-down's ticket counter; see [`request_reload`]).
#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicU64 = AtomicU64::new(0);
static RELOADS_ASKED: [AtomicU64; MAX_CPUS] = [ZERO; MAX_CPUS];
/// The highest ticket each CPU has served: it reloaded its current thread's root after it saw
/// that many requests.
static RELOADS_DONE: [AtomicU64; MAX_CPUS] = [ZERO; MAX_CPUS];

/// A reload asked of a CPU, to wait for with [`wait_reloaded`].
#[derive(Clone, Copy, Debug)]
pub struct Ticket {
    cpu: usize,
    number: u64,
}

/// Asks CPU `index` to reload its running thread's root (a view change made before this call
/// — `Thread::set_view` — becomes the one that CPU uses) and kicks it. Returns the ticket to
/// wait for; `None` for this CPU, which reloads at once.
pub fn request_reload(index: usize) -> Option<Ticket> {
    if index == arch::cpu::cpu_index() || index >= MAX_CPUS {
        scheduler::reload_current_root();
        return None;
    }
    // Release: the view change before this is visible to the CPU that takes the ticket.
    let number = RELOADS_ASKED[index].fetch_add(1, Ordering::AcqRel) + 1;
    kick(index);
    Some(Ticket { cpu: index, number })
}

/// Serves the reload requests made of this CPU (its kick IPI, or polled while it waits for
/// another CPU's): reloads the current thread's root, then publishes the requests served.
pub fn serve_reloads() {
    let me = arch::cpu::cpu_index();
    let asked = RELOADS_ASKED[me].load(Ordering::Acquire);
    scheduler::reload_current_root();
    if RELOADS_DONE[me].load(Ordering::Relaxed) < asked {
        RELOADS_DONE[me].fetch_max(asked, Ordering::Release);
    }
}

/// Waits until every CPU of `tickets` has reloaded (a revoke then means it: no CPU reaches the
/// region through the old view any more). Call with no lock held: the CPUs waited for may need
/// them before they take their interrupt.
///
/// A CPU waited for may itself be spinning with interrupts off for this one, so both kinds of
/// request another CPU spins for are served here meanwhile, not only at their IPIs (which this
/// CPU, interrupts off, does not take): reloads (two CPUs waiting for each other's reload both
/// get through) and FP saves (`fpu::pull`, on an FP trap or a switch, spins until this CPU has
/// saved the registers it holds; serving only reloads here deadlocked aarch64's `fuzz-smp4`: CPU
/// 3 waited here for CPU 2's reload while CPU 2 waited in `pull` for CPU 3's save). `pull` does
/// not serve reloads in turn: it may run in the middle of a switch, where the root to reload
/// is not yet the current thread's; this side serving saves is enough to break the cycle.
pub fn wait_reloaded(tickets: &[Ticket]) {
    for t in tickets {
        while RELOADS_DONE[t.cpu].load(Ordering::Acquire) < t.number {
            if !scheduler::CPUS[t.cpu].online.load(Ordering::Acquire) {
                break;
            }
            let me = arch::cpu::cpu_index();
            if RELOADS_DONE[me].load(Ordering::Relaxed) < RELOADS_ASKED[me].load(Ordering::Acquire) {
                serve_reloads();
            }
            crate::fpu::serve_request();
            arch::cpu::spin_hint();
        }
    }
}

fn read_phys(pa: u64, buf: &mut [u8]) {
    // SAFETY: firmware tables lie in RAM ranges of the memory map, all covered by the direct
    // map; reading them has no side effects.
    unsafe { core::ptr::copy_nonoverlapping(phys_to_virt(PhysAddr::new(pa)).as_ptr::<u8>(), buf.as_mut_ptr(), buf.len()) };
}

fn write_phys(pa: u64, bytes: &[u8]) {
    // SAFETY: only the trampoline page (reserved low memory, never handed out) is written.
    unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), phys_to_virt(PhysAddr::new(pa)).as_mut_ptr::<u8>(), bytes.len()) };
}

/// Brings up the other CPUs the firmware lists (at most `limit` CPUs in all).
pub fn start_other_cpus(info: &BootInfo, limit: Option<usize>) {
    let me = arch::cpu::hw_id();
    let mut others = [u32::MAX; MAX_CPUS];
    let mut n = 0;
    arch::smp::for_each_cpu(info, &read_phys, &mut |id| {
        if id != me && n < MAX_CPUS - 1 {
            others[n] = id;
            n += 1;
        }
    });
    let n = n.min(limit.unwrap_or(MAX_CPUS).saturating_sub(1));
    if n == 0 {
        return;
    }
    let tramp = arch::smp::trampoline();
    if let Some(t) = &tramp {
        write_phys(t.page.as_u64(), t.code);
        map_identity(t.page, true);
    }
    for (i, &id) in others[..n].iter().enumerate() {
        let index = i + 1;
        let Ok(stack) = KernelStack::new() else {
            crate::println!("smp: no memory for cpu {index}'s stack");
            break;
        };
        let params = arch::smp::StartParams { root: kernel_space::kernel_root(), stack_top: stack.top().as_u64(), entry: ap_entry, arg: index };
        // The stack is the CPU's idle stack for the rest of the run.
        core::mem::forget(stack);
        AP_READY.store(false, Ordering::Release);
        arch::smp::start_cpu(id, &params, &write_phys);
        let deadline = arch::timer::cycles() + arch::timer::cycles_hz() / 1_000_000 * START_TIMEOUT_US;
        while !AP_READY.load(Ordering::Acquire) && arch::timer::cycles() < deadline {
            arch::cpu::spin_hint();
        }
        if !AP_READY.load(Ordering::Acquire) {
            crate::println!("smp: cpu {index} (hardware id {id}) did not start");
            break;
        }
    }
    if let Some(t) = &tramp {
        map_identity(t.page, false);
    }
}

/// Maps (or unmaps) one page at its physical address in the kernel table, for the trampoline.
/// The kernel table's user half is never shared with views, so this touches no view.
fn map_identity(page: PhysAddr, map: bool) {
    let va = VirtAddr::new(page.as_u64());
    kernel_space::with_kernel_table(|table, frames| {
        if map {
            if let Ok(flush) = table.map(&DirectMap, &mut AllocatorFrames(frames), va, Frame::containing(page), MapFlags::READ | MapFlags::EXEC, 0) {
                flush.flush(arch::tlb::flush_page);
            }
        } else if let Ok((_, flush)) = table.unmap(&DirectMap, va) {
            flush.flush(arch::tlb::flush_page);
        }
    });
    let _ = PAGE_SIZE;
}

/// First kernel code of an application processor, on its own stack, on the kernel's table.
extern "C" fn ap_entry(index: usize) -> ! {
    arch::smp::init_this_cpu(index, crate::boot::TICK_HZ);
    set_hw_id(index, arch::cpu::hw_id());
    scheduler::cpu_online(kernel_space::kernel_root());
    AP_READY.store(true, Ordering::Release);
    scheduler::idle_loop()
}
