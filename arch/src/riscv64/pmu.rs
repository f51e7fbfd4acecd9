//! Hardware event counting on riscv64: the `cycle` and `instret` CSRs, which OpenSBI opens to
//! S-mode (`mcounteren`). Under QEMU TCG with `-icount shift=0` both advance once per guest
//! instruction. TLB misses come from the SBI PMU extension (EID 0x504D55): QEMU emulates the
//! DTLB read/write-miss and ITLB miss cache events on programmable counters 3..=18, which
//! [`init_this_cpu`] asks the firmware to map and start; S-mode then reads them directly as
//! `hpmcounterN`. With Sscofpmf (`-cpu rv64,sscofpmf=true`) OpenSBI inhibits M-mode counting, so
//! the firmware's own activity is not counted. QEMU flushes its whole TLB on any `sfence.vma`
//! or `satp` write, so the counts reflect that. An event whose configuration fails is reported
//! unsupported, never a fake zero.

use core::sync::atomic::{AtomicUsize, Ordering};
use sbi_rt::CounterMask;

/// The events every port names alike.
pub use crate::event::HwEvent;

/// SBI PMU hardware cache event indices: `(1 << 16) | (cache_id << 3) | (op << 1) | result`.
const DTLB_READ_MISS: usize = (1 << 16) | (3 << 3) | (0 << 1) | 1; // 0x10019
const DTLB_WRITE_MISS: usize = (1 << 16) | (3 << 3) | (1 << 1) | 1; // 0x1001B
const ITLB_READ_MISS: usize = (1 << 16) | (4 << 3) | (0 << 1) | 1; // 0x10021

/// First and last hardware counter readable from S-mode as `hpmcounterN`.
const FIRST_HPM: usize = 3;
const LAST_HPM: usize = 18;

/// `SBI_PMU_CFG_FLAG_CLEAR_VALUE`. Not `AUTO_START`: OpenSBI 1.1 leaves the counter stopped
/// anyway (measured), so [`configure`] starts it explicitly.
const CFG_CLEAR_VALUE: usize = 1 << 1;
/// `SBI_PMU_START_SET_INIT_VALUE`.
const START_SET_INIT_VALUE: usize = 1 << 0;
/// `SBI_ERR_ALREADY_STARTED`.
const ERR_ALREADY_STARTED: usize = -7isize as usize;

/// Raw flags (sbi-rt implements its flag traits for `usize` only behind a feature).
struct Flags(usize);

impl sbi_rt::ConfigFlags for Flags {
    fn raw(&self) -> usize {
        self.0
    }
}

impl sbi_rt::StartFlags for Flags {
    fn raw(&self) -> usize {
        self.0
    }
}

/// No counter configured.
const NONE: usize = 0;

/// Counter index (3..=18) counting each event, or [`NONE`].
static DTLB_READ: AtomicUsize = AtomicUsize::new(NONE);
static DTLB_WRITE: AtomicUsize = AtomicUsize::new(NONE);
static ITLB_READ: AtomicUsize = AtomicUsize::new(NONE);

/// Asks the firmware for a free hardware counter among 3..=18 counting `event_idx`, cleared and
/// started; returns its index, or [`NONE`] if none can.
fn configure(event_idx: usize, hw_counters: usize) -> usize {
    if hw_counters <= FIRST_HPM {
        return NONE;
    }
    let last = core::cmp::min(hw_counters - 1, LAST_HPM);
    let mask = (1usize << (last - FIRST_HPM + 1)) - 1;
    let ret = sbi_rt::pmu_counter_config_matching(
        CounterMask::from_mask_base(mask, FIRST_HPM),
        Flags(CFG_CLEAR_VALUE),
        event_idx,
        0,
    );
    if ret.error != 0 || !(FIRST_HPM..=LAST_HPM).contains(&ret.value) {
        return NONE;
    }
    let idx = ret.value;
    let start = sbi_rt::pmu_counter_start(CounterMask::from_mask_base(1, idx), Flags(START_SET_INIT_VALUE), 0);
    if start.error == 0 || start.error == ERR_ALREADY_STARTED {
        idx
    } else {
        NONE
    }
}

/// Lets user mode read `cycle` and `instret` (`scounteren` CY and IR), as x86_64 lets it read
/// the TSC: a thread library and benchmarks time themselves without a syscall. Then maps and
/// starts the TLB-miss counters on the calling hart through the SBI PMU extension, when the
/// firmware has it. Call on every hart.
pub fn init_this_cpu() {
    // SAFETY: only opens two read-only counters to U-mode (the firmware's `mcounteren` already
    // opens them to S-mode); no memory is affected.
    unsafe {
        riscv::register::scounteren::set_cy();
        riscv::register::scounteren::set_ir();
    }
    if !sbi_rt::probe_extension(sbi_rt::Pmu).is_available() {
        return;
    }
    let counters = sbi_rt::pmu_num_counters();
    for (slot, event) in [
        (&DTLB_READ, DTLB_READ_MISS),
        (&DTLB_WRITE, DTLB_WRITE_MISS),
        (&ITLB_READ, ITLB_READ_MISS),
    ] {
        let idx = configure(event, counters);
        // Keep the first hart's mapping; the firmware hands out the same indices on every hart.
        if slot.load(Ordering::Relaxed) == NONE {
            slot.store(idx, Ordering::Relaxed);
        }
    }
}

/// Whether `event` can be counted on this machine.
pub fn supported(event: HwEvent) -> bool {
    match event {
        HwEvent::Cycles | HwEvent::Instructions => true,
        HwEvent::DtlbMiss => DTLB_READ.load(Ordering::Relaxed) != NONE,
        HwEvent::ItlbMiss => ITLB_READ.load(Ordering::Relaxed) != NONE,
    }
}

/// Reads `hpmcounter<idx>` (0 for [`NONE`] or an index outside 3..=18).
fn read_hpm(idx: usize) -> u64 {
    macro_rules! csrr {
        ($csr:literal) => {{
            let v: u64;
            // SAFETY: reading a counter CSR the firmware opened to S-mode has no side effects.
            unsafe { core::arch::asm!(concat!("csrr {}, ", $csr), out(reg) v, options(nomem, nostack)) };
            v
        }};
    }
    match idx {
        3 => csrr!("0xC03"),
        4 => csrr!("0xC04"),
        5 => csrr!("0xC05"),
        6 => csrr!("0xC06"),
        7 => csrr!("0xC07"),
        8 => csrr!("0xC08"),
        9 => csrr!("0xC09"),
        10 => csrr!("0xC0A"),
        11 => csrr!("0xC0B"),
        12 => csrr!("0xC0C"),
        13 => csrr!("0xC0D"),
        14 => csrr!("0xC0E"),
        15 => csrr!("0xC0F"),
        16 => csrr!("0xC10"),
        17 => csrr!("0xC11"),
        18 => csrr!("0xC12"),
        _ => 0,
    }
}

/// The current count of a supported event on this hart (0 for unsupported ones, which the
/// kernel never asks for: see [`supported`]). DTLB misses are read plus write misses.
pub fn read(event: HwEvent) -> u64 {
    match event {
        HwEvent::Cycles => super::timer::cycles(),
        HwEvent::Instructions => riscv::register::instret::read64(),
        HwEvent::DtlbMiss => {
            read_hpm(DTLB_READ.load(Ordering::Relaxed)).wrapping_add(read_hpm(DTLB_WRITE.load(Ordering::Relaxed)))
        }
        HwEvent::ItlbMiss => read_hpm(ITLB_READ.load(Ordering::Relaxed)),
    }
}
