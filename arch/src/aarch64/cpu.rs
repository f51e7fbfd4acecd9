//! Per-CPU state of aarch64: feature detection, the per-CPU block reached through
//! `TPIDR_EL1`, interrupt masking (`DAIF`), and ending QEMU with a status through semihosting.
//!
//! The boot CPU's block is [`BSP_PERCPU`]; each secondary CPU (started by `smp.rs` through PSCI
//! `CPU_ON`) takes the block of its index in [`AP_PERCPU`] in [`init_other_cpu`].

use aarch64_cpu::registers::{
    Readable, Writeable, DAIF, FAR_EL1, ID_AA64ISAR0_EL1, ID_AA64MMFR0_EL1, ID_AA64MMFR1_EL1, ID_AA64PFR0_EL1, MIDR_EL1, MPIDR_EL1,
    SCTLR_EL1, TPIDR_EL0, TPIDR_EL1,
};
use core::arch::asm;
use core::fmt::Write as _;
use core::mem::offset_of;

/// Size of the emergency stack each CPU switches to when the kernel overflows its stack.
const EMERGENCY_STACK_SIZE: usize = 16 * 1024;

/// `SCTLR_EL1.SPAN`: leave `PSTATE.PAN` alone on exceptions (clear: set PAN on every entry).
const SCTLR_SPAN: u64 = 1 << 23;

/// CPU features the kernel cares about, read once from the ID registers.
#[derive(Clone, Copy, Debug, Default)]
pub struct Features {
    /// Privileged access never (the kernel cannot touch user pages by accident).
    pub pan: bool,
    /// 16-bit ASIDs (TLB tags); otherwise 8-bit.
    pub asid16: bool,
    /// Physical address size in bits.
    pub pa_bits: u8,
    /// Hardware update of the access flag.
    pub hw_access_flag: bool,
    /// The GIC system-register CPU interface (GICv3 or later).
    pub gic_sysregs: bool,
    /// Scalable vector extension.
    pub sve: bool,
    /// Large system extensions (atomic instructions).
    pub lse: bool,
}

/// Detects the features of the running CPU.
pub fn detect_features() -> Features {
    // Fields aarch64-cpu does not name: ID_AA64PFR0_EL1.GIC (bits 27:24) and
    // ID_AA64ISAR0_EL1.Atomic (bits 23:20; 2 = LSE).
    let field = |reg: u64, shift: u32| (reg >> shift) & 0xf;
    const PA_BITS: [u8; 7] = [32, 36, 40, 42, 44, 48, 52];
    const ASID_BITS_16: u64 = 2;
    Features {
        pan: ID_AA64MMFR1_EL1.read(ID_AA64MMFR1_EL1::PAN) != 0,
        asid16: ID_AA64MMFR0_EL1.read(ID_AA64MMFR0_EL1::ASIDBits) == ASID_BITS_16,
        pa_bits: PA_BITS.get(ID_AA64MMFR0_EL1.read(ID_AA64MMFR0_EL1::PARange) as usize).copied().unwrap_or(48),
        hw_access_flag: ID_AA64MMFR1_EL1.read(ID_AA64MMFR1_EL1::HAFDBS) != 0,
        gic_sysregs: field(ID_AA64PFR0_EL1.get(), 24) != 0,
        sve: ID_AA64PFR0_EL1.read(ID_AA64PFR0_EL1::SVE) != 0,
        lse: field(ID_AA64ISAR0_EL1.get(), 20) >= 2,
    }
}

/// Writes into a byte buffer, dropping what does not fit.
struct BufWriter<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl core::fmt::Write for BufWriter<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// The CPU's implementer, part and revision from `MIDR_EL1`, for the banner.
pub fn brand(buf: &mut [u8; 48]) -> &str {
    let midr = MIDR_EL1.get();
    let implementer = MIDR_EL1.read(MIDR_EL1::Implementer);
    let variant = MIDR_EL1.read(MIDR_EL1::Variant);
    let part = MIDR_EL1.read(MIDR_EL1::PartNum);
    let revision = MIDR_EL1.read(MIDR_EL1::Revision);
    let name = match (implementer, part) {
        // QEMU's `max` CPU uses the implementer code reserved for software.
        (0x00, _) => "QEMU max",
        (0x41, 0xd03) => "Arm Cortex-A53",
        (0x41, 0xd07) => "Arm Cortex-A57",
        (0x41, 0xd08) => "Arm Cortex-A72",
        (0x41, 0xd0b) => "Arm Cortex-A76",
        (0x41, 0xd0c) => "Arm Neoverse-N1",
        (0x41, 0xd40) => "Arm Neoverse-V1",
        (0x41, 0xd49) => "Arm Neoverse-N2",
        (0x41, _) => "Arm",
        _ => "aarch64",
    };
    let mut w = BufWriter { buf: &mut buf[..], len: 0 };
    let _ = write!(w, "{name} r{variant}p{revision} (MIDR {midr:#x})");
    let len = w.len;
    core::str::from_utf8(&buf[..len]).unwrap_or("aarch64")
}

/// The per-CPU block, reached through `TPIDR_EL1` (which user mode cannot read). The first
/// fields are read by the vector code in `trap.rs` at fixed offsets (checked below).
#[repr(C, align(64))]
pub struct PerCpu {
    /// Points to this block.
    self_ptr: *mut PerCpu,
    /// Where the vector code builds its frame when the kernel overflowed its stack: the
    /// `TrapFrame`-sized slot at the top of `emergency_stack`.
    emergency_frame: u64,
    /// Top of the running thread's kernel stack (where a trap from EL0 puts its frame).
    kernel_stack_top: u64,
    /// This CPU's index (0 is the boot CPU).
    cpu_index: u64,
    /// The interrupt acknowledged from the GIC and not yet ended (`interrupts::NO_INTERRUPT`
    /// when none).
    pub(crate) active_interrupt: u32,
    /// Virtual address of this CPU's GIC redistributor (`RD_base`; 0 before
    /// `interrupts::init_this_cpu`).
    pub(crate) redistributor: u64,
    /// Stack for reporting a kernel stack overflow.
    emergency_stack: [u8; EMERGENCY_STACK_SIZE],
}

/// Offset of `emergency_frame` in [`PerCpu`], used by assembly.
pub const PERCPU_EMERGENCY_FRAME: usize = 8;
const _: () = assert!(offset_of!(PerCpu, self_ptr) == 0);
const _: () = assert!(offset_of!(PerCpu, emergency_frame) == PERCPU_EMERGENCY_FRAME);

impl PerCpu {
    /// A block no CPU uses yet.
    const UNUSED: PerCpu = PerCpu {
        self_ptr: core::ptr::null_mut(),
        emergency_frame: 0,
        kernel_stack_top: 0,
        cpu_index: 0,
        active_interrupt: super::interrupts::NO_INTERRUPT,
        redistributor: 0,
        emergency_stack: [0; EMERGENCY_STACK_SIZE],
    };
}

/// The boot CPU's block.
static mut BSP_PERCPU: PerCpu = PerCpu::UNUSED;

/// The secondary CPUs' blocks: CPU index `i` (1..MAX_CPUS) uses entry `i - 1`. Static rather
/// than from the heap, so a CPU has its block (and its emergency stack) before it could fail.
static mut AP_PERCPU: [PerCpu; super::smp::MAX_CPUS - 1] = [PerCpu::UNUSED; super::smp::MAX_CPUS - 1];

/// Sets up the boot CPU: per-CPU block, PAN when present. Returns the features found.
pub fn init_boot_cpu() -> Features {
    let features = detect_features();
    // SAFETY: BSP_PERCPU is used only by the boot CPU, and only through this one reference that
    // lives for the rest of the run.
    let percpu: &'static mut PerCpu = unsafe { &mut *core::ptr::addr_of_mut!(BSP_PERCPU) };
    init_cpu(percpu, 0, features);
    features
}

/// Sets up a secondary CPU with index `index` (1..`smp::MAX_CPUS`): its per-CPU block, PAN
/// when present. Returns the features found, or `None` if there is no block for that index.
/// Called once per index, by the CPU itself.
pub fn init_other_cpu(index: usize) -> Option<Features> {
    if index == 0 || index >= super::smp::MAX_CPUS {
        return None;
    }
    let features = detect_features();
    // SAFETY: each index is started once, and only the CPU with that index takes its block,
    // through this one reference that lives for the rest of the run; the pointer stays inside
    // the array (index - 1 < MAX_CPUS - 1).
    let percpu: &'static mut PerCpu = unsafe { &mut *core::ptr::addr_of_mut!(AP_PERCPU).cast::<PerCpu>().add(index - 1) };
    init_cpu(percpu, index as u64, features);
    Some(features)
}

/// Prepares `percpu` for CPU `index` and makes it this CPU's block.
fn init_cpu(percpu: &'static mut PerCpu, index: u64, features: Features) {
    percpu.self_ptr = percpu as *mut PerCpu;
    percpu.cpu_index = index;
    let top = percpu.emergency_stack.as_ptr() as u64 + EMERGENCY_STACK_SIZE as u64;
    percpu.emergency_frame = (top - core::mem::size_of::<super::trap::TrapFrame>() as u64) & !15;
    percpu.active_interrupt = super::interrupts::NO_INTERRUPT;
    percpu.redistributor = 0;
    // SAFETY: TPIDR_EL1 is ours (EL1-only); from here on it names this 'static block.
    unsafe { asm!("msr tpidr_el1, {}", in(reg) percpu as *mut PerCpu as u64, options(nomem, nostack, preserves_flags)) };
    super::usercopy::set_pan(features.pan);
    if features.pan {
        // SAFETY: with SCTLR_EL1.SPAN clear every exception to EL1 sets PSTATE.PAN, and we set
        // it now: the kernel then faults on any plain access to user pages. User copies use
        // ldtr/sttr, which PAN does not restrict (usercopy.rs).
        unsafe {
            let sctlr = SCTLR_EL1.get() & !SCTLR_SPAN;
            // `.inst 0xd500419f` is `msr pan, #1` (FEAT_PAN), spelled as a word because the base
            // target's assembler does not know the v8.1 instruction.
            asm!("msr sctlr_el1, {}", "isb", ".inst 0xd500419f", in(reg) sctlr, options(nostack, preserves_flags));
        }
    }
}

/// This CPU's per-CPU block (null before `init_boot_cpu`).
pub(crate) fn percpu() -> *mut PerCpu {
    TPIDR_EL1.get() as *mut PerCpu
}

/// Index of the CPU this runs on (0 = boot CPU, and before the per-CPU block exists).
pub fn cpu_index() -> usize {
    let p = percpu();
    if p.is_null() {
        return 0;
    }
    // SAFETY: a non-null TPIDR_EL1 names this CPU's 'static block; cpu_index never changes.
    unsafe { (*p).cpu_index as usize }
}

/// This CPU's hardware id, used to address inter-processor interrupts: the affinity fields
/// of `MPIDR_EL1` packed as Aff3.Aff2.Aff1.Aff0 (the form GICv3 routing uses).
pub fn hw_id() -> u32 {
    super::boot::hw_id_of_mpidr(MPIDR_EL1.get())
}

/// The user's LTN register (`TPIDR_EL0`, DESIGN §6). The kernel never changes it, so while a
/// thread is in the kernel it still holds that thread's value.
#[inline]
pub fn user_ltn() -> u64 {
    TPIDR_EL0.get()
}

/// Sets the user's LTN register for the next return to user mode.
#[inline]
pub fn set_user_ltn(value: u64) {
    TPIDR_EL0.set(value);
}

/// Records the stack the CPU uses when user mode traps or calls the kernel. On aarch64 the
/// hardware takes EL0 exceptions on `SP_EL1`, which `trap::enter` leaves at exactly this top
/// when it returns to user mode, so this is bookkeeping (for reports).
#[inline]
pub fn set_kernel_stack(top: u64) {
    let p = percpu();
    if !p.is_null() {
        // SAFETY: this CPU's block, touched only by this CPU with interrupts off.
        unsafe { (*p).kernel_stack_top = top };
    }
}

/// Whether interrupts are enabled on this CPU.
pub fn interrupts_enabled() -> bool {
    !DAIF.is_set(DAIF::I)
}

/// Runs `f` with interrupts disabled, restoring the previous state afterwards.
pub fn without_interrupts<R>(f: impl FnOnce() -> R) -> R {
    let enabled = interrupts_enabled();
    if enabled {
        disable_interrupts();
    }
    let r = f();
    if enabled {
        enable_interrupts();
    }
    r
}

/// Enables interrupts (IRQs; FIQs stay masked: nothing is routed to them).
pub fn enable_interrupts() {
    // SAFETY: unmasking IRQs; the vector table is installed before the kernel enables them.
    unsafe { asm!("msr daifclr, #2", options(nomem, nostack, preserves_flags)) };
}

/// Disables interrupts.
pub fn disable_interrupts() {
    // SAFETY: masking IRQs is always safe.
    unsafe { asm!("msr daifset, #2", options(nomem, nostack, preserves_flags)) };
}

/// Lets interrupts that are pending be taken, then masks them again: a preemption point for
/// long kernel work (the kernel runs with interrupts masked). Call only where no lock is held
/// and nothing is half-done that an interrupt handler could look at.
pub fn interrupt_window() {
    // SAFETY: unmasks IRQs, synchronises (a pending IRQ is taken there), masks them again; no
    // `nomem`: its handler may write memory the caller then reads.
    unsafe { asm!("msr daifclr, #2", "isb", "msr daifset, #2", options(nostack)) };
}

/// Enables interrupts and waits for one, atomically: `wfi` wakes on a pending interrupt even
/// while IRQs are masked, and the interrupt is taken as soon as they are unmasked after it, so
/// none arriving after the caller's last check is missed.
pub fn wait_for_interrupt() {
    // SAFETY: waits, then unmasks IRQs (see enable_interrupts).
    unsafe { asm!("wfi", "msr daifclr, #2", options(nomem, nostack, preserves_flags)) };
}

/// Spins politely, while waiting for another CPU: `yield`, the hint Arm defines for a
/// busy-wait (Linux's arm64 `cpu_relax` is the same instruction), not `isb`, which
/// `core::hint::spin_loop` emits.
///
/// On hardware both only slow the loop down. Under QEMU's single-threaded TCG (`-icount`
/// runs every vCPU in turn on one host thread) `yield` also ends the vCPU's turn, and that
/// is what keeps a waiting CPU from starving the one it waits for: QEMU before 8.1 gives
/// each vCPU in turn all the instructions left until the next timer deadline (fixed upstream
/// by 83ecdb18eb65, "accel/tcg/tcg-accel-ops-rr: ensure fairness with icount"), so a CPU
/// spinning with interrupts masked used them all on every round and a CPU after it in QEMU's
/// order got none — not even the few it needs to leave `wfi` and take the interrupt it was
/// sent (its GIC had the SGI pending and the IRQ line raised). QEMU 7.2 hung aarch64's
/// `share=time` benchmark that way (CPU 2 in `fpu::pull`, CPU 3 in the idle `wfi`). x86_64's
/// `pause` already ends the turn in QEMU.
#[inline]
pub fn spin_hint() {
    // SAFETY: a hint without architectural effect; not `nomem`, so it also keeps the
    // compiler from hoisting the awaited load out of the caller's loop.
    unsafe { asm!("yield", options(nostack, preserves_flags)) };
}

/// What the manuals call the register holding the faulting address (for reports).
pub const FAULT_ADDRESS_REGISTER: &str = "far";

/// The faulting address of the last abort (`FAR_EL1`).
pub fn fault_address() -> u64 {
    FAR_EL1.get()
}

/// Semihosting operation numbers and values (Arm "Semihosting for AArch32 and AArch64").
mod semihosting {
    /// `SYS_EXIT`: on AArch64 it takes a two-word block (reason, subcode).
    pub const SYS_EXIT: u64 = 0x18;
    /// `SYS_EXIT_EXTENDED`: the same block on every architecture; the subcode is the status.
    pub const SYS_EXIT_EXTENDED: u64 = 0x20;
    /// `ADP_Stopped_ApplicationExit`: the program ended normally with the subcode as status.
    pub const ADP_STOPPED_APPLICATION_EXIT: u64 = 0x20026;
}

// semihosting_call(op: x0, param: x1) -> x0: the A64 semihosting trap. Must be assembly: the
// debugger (QEMU) recognises exactly this instruction. Its address is what trap.rs compares
// against to skip it when semihosting is off.
core::arch::global_asm!(
    ".section .text.semihosting, \"ax\"",
    ".global semihosting_call",
    "semihosting_call:",
    "hlt #0xf000",
    "ret",
);

extern "C" {
    /// `hlt #0xf000` with the operation in x0 and the parameter in x1 (see `trap.rs`, which
    /// skips it when semihosting is off and the instruction is undefined).
    pub(crate) fn semihosting_call(op: u64, param: u64) -> u64;
}

/// Ends the machine with `status` (0..=127): semihosting `SYS_EXIT_EXTENDED` with
/// `ADP_Stopped_ApplicationExit`, which makes QEMU exit with `status`. If semihosting is off,
/// powers off through PSCI `SYSTEM_OFF` (status lost), or halts forever.
pub fn shutdown(status: u8) -> ! {
    disable_interrupts();
    let block: [u64; 2] = [semihosting::ADP_STOPPED_APPLICATION_EXIT, u64::from(status)];
    for op in [semihosting::SYS_EXIT_EXTENDED, semihosting::SYS_EXIT] {
        // SAFETY: the block is a valid parameter block for both calls; QEMU reads it through
        // the current translation and ends. A host without semihosting makes the call fail
        // and return (trap.rs skips the undefined `hlt`), and we try the next way.
        unsafe { semihosting_call(op, block.as_ptr() as u64) };
    }
    super::boot::psci_system_off();
    halt_forever()
}

/// Stops this CPU for good.
pub fn halt_forever() -> ! {
    loop {
        disable_interrupts();
        // SAFETY: waits for an interrupt that, masked, only wakes us to wait again.
        unsafe { asm!("wfi", options(nomem, nostack, preserves_flags)) };
    }
}

/// Where the frame record (the caller's frame pointer, then the return address) of the frame
/// whose frame pointer is `fp` lies: on aarch64 x29 points at it.
pub fn frame_record(fp: u64) -> u64 {
    fp
}

/// Reads the frame pointer of the caller, to start a backtrace (x29 points at the
/// {previous x29, return address} record, as rbp does on x86_64).
#[inline(always)]
pub fn frame_pointer() -> u64 {
    let fp: u64;
    // SAFETY: reads a register.
    unsafe { asm!("mov {}, x29", out(reg) fp, options(nomem, nostack, preserves_flags)) };
    fp
}
