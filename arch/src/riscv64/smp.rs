//! Other harts. Not started yet: this port runs the kernel on the boot hart only, so
//! [`for_each_cpu`] lists just that hart and the kernel's bring-up loop has nothing to start.
//!
//! How it will work (the pieces are in place): the device tree lists the harts (`/cpus/cpu@N`,
//! `Platform::device_tree`); [`start_cpu`] fills a per-CPU block (`cpu::PerCpu`, reached through
//! `tp`) and a start record with the kernel's `satp`, stack, entry and argument, then asks SBI HSM
//! to start the hart (`sbi_rt::hart_start(hart, physical entry, physical record)`). The hart
//! starts in S-mode with the MMU off, like the boot hart, so its entry can reuse the boot path:
//! the boot page tables (kept in .bss) take it to the linked address, where it loads the
//! kernel's root and stack and calls the entry. [`init_this_cpu`] then installs the trap vector
//! (`trap::load_on_this_cpu`), enables software interrupts for IPIs (the mailboxes in
//! `interrupts` are per hart id) and starts the hart's tick (`timer::start_periodic`, deadlines
//! per CPU). No trampoline page is needed: the image's own code runs at its physical address.

use crate::addr::{Frame, PhysAddr};
use crate::bootinfo::BootInfo;

/// Code that must sit at a fixed physical page while other CPUs start (none on riscv64).
pub struct Trampoline {
    /// The page it must be copied to.
    pub page: PhysAddr,
    /// Its bytes.
    pub code: &'static [u8],
}

/// How to start one CPU.
pub struct StartParams {
    /// The kernel's root table (loaded by the new CPU).
    pub root: Frame,
    /// Top of the CPU's first kernel stack.
    pub stack_top: u64,
    /// Where it enters the kernel, with `arg`.
    pub entry: extern "C" fn(usize) -> !,
    /// The entry's argument (the CPU index).
    pub arg: usize,
}

/// riscv64 needs no trampoline: a hart started through SBI HSM enters the image itself.
pub fn trampoline() -> Option<Trampoline> {
    None
}

/// Calls `found(hart_id)` for every hart the kernel can run on, the boot hart included; returns
/// how many. Only the boot hart for now (see the module comment).
pub fn for_each_cpu(_info: &BootInfo, _read_phys: &dyn Fn(u64, &mut [u8]), found: &mut dyn FnMut(u32)) -> usize {
    found(super::cpu::hw_id());
    1
}

/// Starts the hart `hw_id` at `params`. Not implemented yet: [`for_each_cpu`] lists no other
/// hart, so the kernel never asks.
pub fn start_cpu(_hw_id: u32, _params: &StartParams, _write_phys: &dyn Fn(u64, &[u8])) {}

/// Everything a newly started hart needs from the port before it can run threads: FP off,
/// counters, its trap vector, IPIs, and its tick.
pub fn init_this_cpu(_index: usize, tick_hz: u64) {
    let features = super::cpu::detect_features();
    super::tlb::enable_tags_on_this_cpu();
    super::fpu::init_this_cpu(&features);
    super::pmu::init_this_cpu();
    super::trap::load_on_this_cpu();
    // SAFETY: software interrupts (IPIs) are handled by the trap entry; they are taken only once
    // the kernel sets sstatus.SIE.
    unsafe { riscv::register::sie::set_ssoft() };
    super::timer::start_periodic(tick_hz);
}
