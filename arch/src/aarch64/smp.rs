//! Starting the other CPUs through PSCI `CPU_ON`.
//!
//! `boot.rs` lists every enabled `/cpus/cpu@N` of the device tree (its `reg` is the MPIDR
//! affinity) and the PSCI conduit (`hvc` or `smc`, from `/psci`). [`start_cpu`] fills one
//! [`SecondaryStart`] block (the kernel's root, the CPU's first stack, the kernel's entry and
//! its argument), cleans it to memory (the new CPU reads it with its MMU and caches off), and
//! calls `CPU_ON(mpidr, physical address of secondary_entry, physical address of the block)`.
//! `secondary_entry` (boot.rs) is the boot CPU's path without the one-time work: drop from EL2
//! if needed, `CPACR_EL1`, `MAIR_EL1`/`TCR_EL1`, `TTBR0_EL1` = the boot identity map (kept in
//! `.bss`, never changed after boot), `TTBR1_EL1` = the kernel's root, MMU on, jump to the
//! higher half, leave the identity map, load the stack and call the entry. The kernel starts
//! one CPU at a time and waits for it (`kernel/src/smp.rs`), so one block serves them all.
//! No trampoline page is needed: the entry is in the image.
//!
//! [`init_this_cpu`] then takes the per-CPU block of the CPU's index (`TPIDR_EL1`), wakes its
//! GIC redistributor (found by affinity in the region `interrupts::init` mapped) and turns on
//! its CPU interface with the kernel's SGIs, and starts its tick, PMU (its cycle counter
//! aligned with the boot CPU's, `pmu.rs`) and FP settings.

use core::cell::UnsafeCell;
use core::fmt::Write as _;

use crate::addr::{Frame, PhysAddr};
use crate::bootinfo::BootInfo;

use super::boot::{physical_alias, platform, psci, psci_call, SecondaryStart};

/// Most CPUs this port starts and tracks (the kernel's `MAX_CPUS`).
pub const MAX_CPUS: usize = 8;

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

/// The start block the starting CPU reads (one CPU starts at a time).
struct StartBlock(UnsafeCell<SecondaryStart>);

// SAFETY: written only by the boot CPU in `start_cpu`, before the CPU that reads it is started,
// and only while no other CPU is starting (the kernel starts them one by one).
unsafe impl Sync for StartBlock {}

static START: StartBlock = StartBlock(UnsafeCell::new(SecondaryStart { root: 0, stack_top: 0, entry: 0, arg: 0 }));

extern "C" {
    /// The secondary CPUs' entry (boot.rs); only its address is taken.
    fn secondary_entry();
}

/// aarch64 needs no trampoline page (PSCI enters the image itself).
pub fn trampoline() -> Option<Trampoline> {
    None
}

/// Calls `found(hw_id)` for every CPU the device tree lists (the boot CPU included), at most
/// [`MAX_CPUS`]; returns how many were listed. Without a CPU list, only the boot CPU.
pub fn for_each_cpu(_info: &BootInfo, _read_phys: &dyn Fn(u64, &mut [u8]), found: &mut dyn FnMut(u32)) -> usize {
    let plat = platform();
    if plat.listed_cpus == 0 {
        found(super::cpu::hw_id());
        return 1;
    }
    for &id in &plat.cpu_ids[..plat.listed_cpus] {
        found(id);
    }
    plat.listed_cpus
}

/// Starts the CPU with hardware id `hw_id` (packed affinity) through PSCI `CPU_ON`. If the
/// firmware refuses, says why on the console; the kernel then reports that the CPU did not
/// start.
pub fn start_cpu(hw_id: u32, params: &StartParams, _write_phys: &dyn Fn(u64, &[u8])) {
    let block = START.0.get();
    // SAFETY: no CPU is reading the block (see StartBlock); the writes are plain stores.
    unsafe {
        block.write(SecondaryStart {
            root: params.root.start().as_u64(),
            stack_top: params.stack_top,
            entry: params.entry as usize as u64,
            arg: params.arg as u64,
        });
    }
    // The new CPU reads the block with its MMU off (non-cacheable): clean it to the point of
    // coherency first, line by line (the smallest data-cache line, CTR_EL0.DminLine, may be as
    // short as 16 bytes).
    let ctr: u64;
    // SAFETY: reads an ID register.
    unsafe { core::arch::asm!("mrs {}, ctr_el0", out(reg) ctr, options(nomem, nostack, preserves_flags)) };
    let line = 4u64 << ((ctr >> 16) & 0xf);
    let (start, end) = (block as u64, block as u64 + core::mem::size_of::<SecondaryStart>() as u64);
    let mut va = start & !(line - 1);
    while va < end {
        // SAFETY: cache maintenance by virtual address of memory we own; it changes no data.
        unsafe { core::arch::asm!("dc civac, {}", in(reg) va, options(nostack, preserves_flags)) };
        va += line;
    }
    // SAFETY: a barrier: the cleaning completes before the CPU_ON call below.
    unsafe { core::arch::asm!("dsb sy", options(nostack, preserves_flags)) };
    let entry = physical_alias(secondary_entry as *const () as u64);
    let context = physical_alias(block as u64);
    let mpidr = super::boot::mpidr_of_hw_id(hw_id);
    super::pmu::note_cpu_start();
    // SAFETY: the entry is the image's secondary entry, ready for a CPU with its MMU off, and
    // the block it reads is filled and cleaned above.
    match unsafe { psci_call(psci::CPU_ON, mpidr, entry, context) } {
        Some(psci::SUCCESS) => {}
        Some(code) => {
            let _ = writeln!(super::serial::Console, "smp: PSCI CPU_ON of MPIDR {mpidr:#x}: {} ({code})", psci::describe(code));
        }
        None => {
            let _ = writeln!(super::serial::Console, "smp: cannot start MPIDR {mpidr:#x}: the device tree names no PSCI conduit");
        }
    }
}

/// Everything a newly started CPU with index `index` needs from the port before it can run
/// threads: its per-CPU block and PAN, the vector table, its GIC redistributor and CPU
/// interface, FP, PMU and the tick. A CPU that cannot be set up says why and stops for good
/// (the kernel, not hearing from it, reports that it did not start).
pub fn init_this_cpu(index: usize, _tick_hz: u64) {
    let Some(features) = super::cpu::init_other_cpu(index) else {
        let _ = writeln!(super::serial::Console, "smp: no per-CPU block for cpu {index} (at most {MAX_CPUS} CPUs)");
        super::cpu::halt_forever();
    };
    super::trap::load_on_this_cpu();
    if let Err(why) = super::interrupts::init_this_cpu() {
        let _ = writeln!(super::serial::Console, "smp: cpu {index}: {why}");
        super::cpu::halt_forever();
    }
    super::fpu::init_this_cpu(&features);
    super::pmu::init_this_cpu();
    // The tick runs at the rate the boot CPU chose (`timer::init`), the kernel's `tick_hz`.
    super::timer::start_periodic();
}
