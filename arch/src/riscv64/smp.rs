//! Other harts, started through the SBI HSM extension.
//!
//! The device tree lists the harts (`/cpus/cpu@N`, `Platform::device_tree`); [`for_each_cpu`]
//! keeps those whose status is okay and that have the Sv48 MMU the kernel needs. [`start_cpu`]
//! fills the hart's per-CPU block (`cpu::PerCpu`, reached through `tp`) and a start record with
//! the kernel's `satp`, stack, entry and argument, then asks SBI to start the hart
//! (`sbi_rt::hart_start(hart, physical entry, 0)`). The hart starts in S-mode with the MMU off,
//! like the boot hart, so its entry (`secondary_start` in `boot.rs`) reuses the boot path: the
//! boot page tables (kept in .bss) take it to the linked address, where it loads the kernel's
//! root, stack and per-CPU pointer and calls the entry. (OpenSBI 1.1 may start it at the
//! image's own entry instead, with stale arguments; `_start` sends it on, and the record names
//! the hart it is for, so no other hart can take it.) [`init_this_cpu`] then installs
//! the trap vector, enables software interrupts for IPIs (the mailboxes in `interrupts` are per
//! hart id) and starts the hart's tick (`timer::start_periodic`, deadlines per CPU). No
//! trampoline page is needed: the image's own code runs at its physical address.
//!
//! One start record serves every hart: the kernel starts them one at a time and waits until
//! each is online (long after it read its record) before it starts the next.

use core::mem::offset_of;

use super::layout::{KERNEL_BASE, PHYS_MAP};
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

/// What `secondary_start` (boot.rs) loads, at the offsets below.
#[repr(C)]
pub(super) struct StartRecord {
    /// The hart being started: any other hart that reaches the entry stays parked.
    hart: u64,
    /// `satp` for the kernel's root table (Sv48, ASID 0).
    satp: u64,
    /// The hart's first stack pointer.
    stack_top: u64,
    /// Its per-CPU block, for `tp`.
    percpu: u64,
    /// The kernel's entry, `extern "C" fn(usize) -> !`.
    entry: u64,
    /// The entry's argument.
    arg: u64,
}

/// Offset of `StartRecord::hart`, used by assembly.
pub(super) const RECORD_HART: usize = 0;
/// Offset of `StartRecord::satp`, used by assembly.
pub(super) const RECORD_SATP: usize = 8;
/// Offset of `StartRecord::stack_top`, used by assembly.
pub(super) const RECORD_STACK_TOP: usize = 16;
/// Offset of `StartRecord::percpu`, used by assembly.
pub(super) const RECORD_PERCPU: usize = 24;
/// Offset of `StartRecord::entry`, used by assembly.
pub(super) const RECORD_ENTRY: usize = 32;
/// Offset of `StartRecord::arg`, used by assembly.
pub(super) const RECORD_ARG: usize = 40;
const _: () = assert!(offset_of!(StartRecord, hart) == RECORD_HART);
const _: () = assert!(offset_of!(StartRecord, satp) == RECORD_SATP);
const _: () = assert!(offset_of!(StartRecord, stack_top) == RECORD_STACK_TOP);
const _: () = assert!(offset_of!(StartRecord, percpu) == RECORD_PERCPU);
const _: () = assert!(offset_of!(StartRecord, entry) == RECORD_ENTRY);
const _: () = assert!(offset_of!(StartRecord, arg) == RECORD_ARG);

/// The start record of the hart being started (no hart id matches it before the first start).
pub(super) static mut START_RECORD: StartRecord = StartRecord { hart: u64::MAX, satp: 0, stack_top: 0, percpu: 0, entry: 0, arg: 0 };

extern "C" {
    /// The entry of other harts (boot.rs); reached at its physical address.
    fn secondary_start();
}

/// riscv64 needs no trampoline: a hart started through SBI HSM enters the image itself.
pub fn trampoline() -> Option<Trampoline> {
    None
}

/// Whether a `/cpus` child is a hart the kernel can run on: a `cpu` node, enabled, with an MMU
/// that does Sv48 (Sv57 hardware does Sv48 too).
fn usable_hart(node: &fdt::node::FdtNode<'_, '_>) -> bool {
    let text = |name: &str| node.property(name).and_then(|p| p.as_str());
    node.name.split('@').next() == Some("cpu")
        && text("device_type").is_none_or(|t| t == "cpu")
        && text("status").is_none_or(|s| s == "okay" || s == "ok")
        && text("mmu-type").is_some_and(|m| m.ends_with("sv48") || m.ends_with("sv57"))
}

/// Calls `found(hart_id)` for every hart the kernel can run on, the boot hart included, as the
/// device tree lists them; returns how many. Without a readable tree, only the boot hart.
pub fn for_each_cpu(_info: &BootInfo, _read_phys: &dyn Fn(u64, &mut [u8]), found: &mut dyn FnMut(u32)) -> usize {
    let boot_hart = super::cpu::hw_id();
    let tree = super::boot::platform().device_tree.as_u64();
    // SAFETY: the boot code checked a device tree is at `tree` (else it is 0) and keeps its
    // range reserved; the kernel's direct map covers it at PHYS_MAP, as the boot tables did.
    // `from_ptr` checks the header before reading further.
    let fdt = if tree == 0 { None } else { unsafe { fdt::Fdt::from_ptr((PHYS_MAP + tree) as *const u8) }.ok() };
    let mut count = 0;
    if let Some(cpus) = fdt.as_ref().and_then(|f| f.find_node("/cpus")) {
        for node in cpus.children().filter(usable_hart) {
            let hart = node.reg().and_then(|mut r| r.next()).map(|r| r.starting_address as u64);
            // IPIs (the mailboxes) reach hart ids below MAX_HARTS only.
            if let Some(hart) = hart.and_then(|h| u32::try_from(h).ok()).filter(|&h| (h as usize) < super::interrupts::MAX_HARTS) {
                found(hart);
                count += 1;
            }
        }
    }
    if count == 0 {
        found(boot_hart);
        count = 1;
    }
    count
}

/// Starts the hart `hw_id` as CPU `params.arg` at `params`: fills its per-CPU block and the
/// start record, then asks SBI HSM to start it at `secondary_start`. If SBI refuses (no such
/// hart, already started) nothing happens and the kernel reports that the CPU did not start.
pub fn start_cpu(hw_id: u32, params: &StartParams, _write_phys: &dyn Fn(u64, &[u8])) {
    let Some(percpu) = super::cpu::prepare_other_cpu(params.arg, u64::from(hw_id)) else { return };
    let record = StartRecord {
        hart: u64::from(hw_id),
        satp: super::boot::SATP_SV48 | params.root.number(),
        stack_top: params.stack_top,
        percpu,
        entry: params.entry as usize as u64,
        arg: params.arg as u64,
    };
    let record_address = core::ptr::addr_of_mut!(START_RECORD);
    // SAFETY: only this function writes the record, on the boot hart, and no hart reads it now:
    // the kernel starts harts one at a time and waits until the previous one is online.
    unsafe { record_address.write_volatile(record) };
    // The record and the per-CPU block must be in memory before the hart can look.
    core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
    // The image is linked at KERNEL_BASE + physical. The opaque value is not used: the entry
    // finds the record itself (boot.rs says why).
    let entry = secondary_start as *const () as u64 - KERNEL_BASE;
    if sbi_rt::hart_start(hw_id as usize, entry as usize, 0).error != 0 {
        return;
    }
    // Wait until the firmware has let the hart go. Under QEMU's round-robin TCG (`-icount`) the
    // hart runs only when this one reaches a timer deadline, so keep one near while waiting;
    // with real parallelism this ends at once.
    for _ in 0..HSM_START_POLLS {
        if sbi_rt::hart_get_status(hw_id as usize).value != HSM_START_PENDING {
            break;
        }
        super::timer::arm_soon(HSM_START_POLL_MICROS);
        riscv::asm::wfi();
    }
    super::timer::resume_tick();
}

/// `hart_get_status` value of a hart the firmware is still starting (SBI specification, HSM
/// hart states).
const HSM_START_PENDING: usize = 2;
/// How often [`start_cpu`] looks whether the hart left START_PENDING...
const HSM_START_POLLS: u32 = 10_000;
/// ...and how long it waits in between (so at most 0.5 s in all).
const HSM_START_POLL_MICROS: u64 = 50;

/// Everything a newly started hart needs from the port before it can run threads: FP off,
/// counters, its trap vector, IPIs, and its tick.
pub fn init_this_cpu(_index: usize, tick_hz: u64) {
    let features = super::cpu::detect_features();
    super::tlb::enable_tags_on_this_cpu();
    super::fpu::init_this_cpu(&features);
    super::pmu::init_this_cpu();
    super::trap::load_on_this_cpu();
    // SAFETY: clearing a stale pending software interrupt only drops a request nobody sent to
    // this CPU index yet; software interrupts (IPIs) are handled by the trap entry and taken only
    // once the kernel sets sstatus.SIE.
    unsafe {
        riscv::register::sip::clear_ssoft();
        riscv::register::sie::set_ssoft();
    }
    super::timer::start_periodic(tick_hz);
}
