//! Starting the other CPUs — not done yet on aarch64: only the boot CPU is listed, so the
//! kernel runs on one CPU whatever `-smp` says.
//!
//! The plan (later work): `boot.rs` records each `/cpus/cpu@N` `reg` (its MPIDR) and the PSCI
//! conduit; [`start_cpu`] calls PSCI `CPU_ON(mpidr, physical address of a secondary entry,
//! 0)`. That entry reuses the boot CPU's path (drop from EL2, `CPACR_EL1`, `MAIR_EL1`/`TCR_EL1`,
//! `TTBR0_EL1` = the boot identity map, which stays in `.bss`, `TTBR1_EL1` = [`StartParams`]'
//! root, MMU on, jump to the higher half), then [`init_this_cpu`] takes a per-CPU block of its
//! own, finds its GIC redistributor by affinity (`interrupts::init` maps every CPU's frame
//! already) and starts its tick. No trampoline page is needed: the entry is in the image.

use crate::addr::{Frame, PhysAddr};
use crate::bootinfo::BootInfo;

/// Code that must sit at a fixed physical page, identity-mapped, while other CPUs start
/// (x86_64's real-mode trampoline); aarch64 has none.
pub struct Trampoline {
    /// The page it must be copied to.
    pub page: PhysAddr,
    /// Its bytes.
    pub code: &'static [u8],
}

/// How to start one CPU.
pub struct StartParams {
    /// The kernel's root table (loaded into `TTBR1_EL1` by the new CPU).
    pub root: Frame,
    /// Top of the CPU's first kernel stack.
    pub stack_top: u64,
    /// Where it enters the kernel, with `arg`.
    pub entry: extern "C" fn(usize) -> !,
    /// The entry's argument (the CPU index).
    pub arg: usize,
}

/// aarch64 needs no trampoline page (PSCI enters the image itself).
pub fn trampoline() -> Option<Trampoline> {
    None
}

/// Calls `found(hw_id)` for every CPU that can be started, the boot CPU included: for now
/// only the boot CPU (see the module comment). Returns how many were listed.
pub fn for_each_cpu(_info: &BootInfo, _read_phys: &dyn Fn(u64, &mut [u8]), found: &mut dyn FnMut(u32)) -> usize {
    found(super::cpu::hw_id());
    1
}

/// Would start the CPU with hardware id `hw_id` through PSCI `CPU_ON`; never called while
/// [`for_each_cpu`] lists only the boot CPU, and does nothing (the kernel then reports that
/// the CPU did not start).
pub fn start_cpu(_hw_id: u32, _params: &StartParams, _write_phys: &dyn Fn(u64, &[u8])) {}

/// Everything a newly started CPU needs from the port before it can run threads; unreachable
/// until [`start_cpu`] starts CPUs.
pub fn init_this_cpu(index: usize, _tick_hz: u64) {
    unreachable!("aarch64 does not start CPU {index} yet (PSCI CPU_ON is later work)");
}
