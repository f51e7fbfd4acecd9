//! Per-hart state of riscv64: the features the device tree and SBI report, the per-CPU block
//! reached through `tp` in the kernel (and `sscratch` while user code runs), interrupt masking,
//! and ending QEMU with a status.
//!
//! Register conventions (they make the trap entry in `trap.rs` work):
//! - in the kernel, `tp` points at this hart's [`PerCpu`] and `sscratch` is 0;
//! - in user mode, `tp` is the user's (the LTN register, later) and `sscratch` points at the
//!   hart's [`PerCpu`].
//!
//! Rust code never uses `tp` on this target (there are no thread-locals in the kernel), so it
//! stays put.

use core::arch::asm;
use core::mem::offset_of;
use core::sync::atomic::{AtomicUsize, Ordering};
use riscv::register::sstatus;

use super::boot::{platform, Platform};
use crate::addr::PhysAddr;

/// Size of each hart's emergency stack, used when a kernel stack overflows into its guard page.
const EMERGENCY_STACK_SIZE: usize = 16 * 1024;

/// `sstatus.SIE`: supervisor interrupts enabled.
pub const SSTATUS_SIE: u64 = 1 << 1;
/// `sstatus.SPIE`: `SIE` before the trap (restored by `sret`).
pub const SSTATUS_SPIE: u64 = 1 << 5;
/// `sstatus.SPP`: the trap came from S-mode (1) or U-mode (0); `sret` returns there.
pub const SSTATUS_SPP: u64 = 1 << 8;
/// `sstatus.FS`: the FP state field (Off, Initial, Clean, Dirty).
pub const SSTATUS_FS: u64 = 3 << 13;
/// `sstatus.FS` = Initial: the FPU is on and its registers hold their initial state.
pub const SSTATUS_FS_INITIAL: u64 = 1 << 13;
/// `sstatus.SUM`: supervisor accesses to user pages allowed (only inside `usercopy`).
pub const SSTATUS_SUM: u64 = 1 << 18;
/// `sstatus.UXL` = 64-bit user mode.
pub const SSTATUS_UXL_64: u64 = 2 << 32;

/// Values written to the SiFive test finisher (QEMU `hw/misc/sifive_test.c`).
mod finisher {
    /// QEMU exits with status 0.
    pub const PASS: u32 = 0x5555;
    /// QEMU exits with the status in bits 16..32.
    pub const FAIL: u32 = 0x3333;
    /// Where the status goes in a `FAIL` write.
    pub const STATUS_SHIFT: u32 = 16;
}

/// What the kernel can rely on in this hart, from the device tree's `riscv,isa` and
/// `mmu-type` and from probing SBI.
#[derive(Clone, Copy, Debug, Default)]
pub struct Features {
    /// The hart's id (the boot hart is chosen by OpenSBI's lottery, not always 0).
    pub hart_id: u64,
    /// Sv48 paging (4 levels) is available: the kernel needs it.
    pub sv48: bool,
    /// Sv57 paging is available too (unused).
    pub sv57: bool,
    /// The `stimecmp` CSR (Sstc): the tick is programmed with one CSR write instead of an SBI
    /// call into M-mode firmware (see `timer::program`).
    pub sstc: bool,
    /// Page-based memory types (Svpbmt); unused, device memory is uncached by its PMA.
    pub svpbmt: bool,
    /// Fine-grained TLB invalidation (Svinval).
    pub svinval: bool,
    /// ASIDLEN: how many `satp.ASID` bits the hart implements (0: no TLB tags).
    pub asid_bits: u8,
    /// Single and double precision floating point (F and D).
    pub fpu: bool,
    /// SBI TIME extension (the tick).
    pub sbi_timer: bool,
    /// SBI HSM extension (starting other harts).
    pub sbi_hsm: bool,
    /// SBI SRST extension (system reset, the fallback exit).
    pub sbi_reset: bool,
    /// SBI PMU extension (counters, later).
    pub sbi_pmu: bool,
}

/// Features of the boot hart, found by [`detect_features`].
pub fn detect_features() -> Features {
    let p: &Platform = platform();
    let isa = p.isa();
    // `riscv,isa` is "rv64imafdc_zicsr_..._sstc": single letters after "rv64", then
    // underscore-separated multi-letter extensions.
    let mut parts = isa.split('_');
    let base = parts.next().unwrap_or("").strip_prefix("rv64").unwrap_or("");
    let has_letter = |c: char| base.chars().take_while(|c| c.is_ascii_lowercase()).any(|l| l == c);
    let has = |name: &str| isa.split('_').skip(1).any(|e| e == name);
    let mmu = p.mmu_type();
    fn sbi(extension: impl sbi_rt::Extension) -> bool {
        sbi_rt::probe_extension(extension).is_available()
    }
    Features {
        hart_id: p.hart_id,
        sv48: mmu.ends_with("sv48") || mmu.ends_with("sv57"),
        sv57: mmu.ends_with("sv57"),
        sstc: has("sstc"),
        svpbmt: has("svpbmt"),
        svinval: has("svinval"),
        asid_bits: super::tlb::asid_bits() as u8,
        fpu: has_letter('f') && has_letter('d'),
        sbi_timer: sbi(sbi_rt::Timer),
        sbi_hsm: sbi(sbi_rt::Hsm),
        sbi_reset: sbi(sbi_rt::Reset),
        sbi_pmu: sbi(sbi_rt::Pmu),
    }
}

/// The machine, firmware and hart, for the banner, e.g.
/// `riscv-virtio,qemu, OpenSBI 1.1, hart 0`.
pub fn brand(buf: &mut [u8; 48]) -> &str {
    struct Cursor<'a> {
        buf: &'a mut [u8; 48],
        len: usize,
    }
    impl core::fmt::Write for Cursor<'_> {
        fn write_str(&mut self, s: &str) -> core::fmt::Result {
            // Cut at the buffer's end, on a character boundary.
            for c in s.chars() {
                let mut utf8 = [0; 4];
                let bytes = c.encode_utf8(&mut utf8).as_bytes();
                if self.len + bytes.len() > self.buf.len() {
                    return Err(core::fmt::Error);
                }
                self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
                self.len += bytes.len();
            }
            Ok(())
        }
    }
    /// `sbi_get_impl_id` of OpenSBI (SBI specification, table "SBI Implementation IDs").
    const OPENSBI: usize = 1;
    let p = platform();
    let firmware = if sbi_rt::get_sbi_impl_id() == OPENSBI { "OpenSBI" } else { "SBI" };
    // OpenSBI encodes its version as major << 16 | minor.
    let version = sbi_rt::get_sbi_impl_version();
    let mut out = Cursor { buf, len: 0 };
    let _ = core::fmt::write(
        &mut out,
        format_args!("{}, {firmware} {}.{}, hart {}", p.model(), version >> 16, version & 0xffff, p.hart_id),
    );
    let len = out.len;
    core::str::from_utf8(&buf[..len]).unwrap_or("riscv64")
}

/// The per-CPU block. While in the kernel `tp` holds its address; while user code runs
/// `sscratch` does. The first fields are used by the trap entry at fixed offsets (checked below).
#[repr(C, align(64))]
pub struct PerCpu {
    /// Top of the running thread's kernel stack: where a trap from user mode builds its frame.
    kernel_stack_top: u64,
    /// The interrupted `sp`, parked here by the trap entry until it is stored in the frame.
    scratch_sp: u64,
    /// The interrupted `tp`, parked the same way.
    scratch_tp: u64,
    /// Two temporaries the entry needs for its kernel-stack-overflow check.
    scratch_t0: u64,
    scratch_t1: u64,
    /// Top of [`PerCpu::emergency_stack`].
    emergency_stack_top: u64,
    /// The user's `tp` (the LTN register) while this hart is in the kernel: the entry parks it
    /// here and the return to user mode loads it from here, so the kernel can read and change
    /// it per thread like a register (x86_64 parks GS base in `IA32_KERNEL_GS_BASE` alike).
    user_tp: u64,
    /// This CPU's index (0 is the boot CPU, whatever its hart id).
    cpu_index: u64,
    /// The hart id SBI knows this CPU by.
    hart_id: u64,
    /// Stack for reporting a kernel stack overflow, so it is a report rather than a trap loop.
    emergency_stack: [u8; EMERGENCY_STACK_SIZE],
}

/// Offset of `kernel_stack_top` in [`PerCpu`], used by assembly.
pub const PERCPU_KERNEL_STACK: usize = 0;
/// Offset of `scratch_sp`, used by assembly.
pub const PERCPU_SCRATCH_SP: usize = 8;
/// Offset of `scratch_tp`, used by assembly.
pub const PERCPU_SCRATCH_TP: usize = 16;
/// Offset of `scratch_t0`, used by assembly.
pub const PERCPU_SCRATCH_T0: usize = 24;
/// Offset of `scratch_t1`, used by assembly.
pub const PERCPU_SCRATCH_T1: usize = 32;
/// Offset of `emergency_stack_top`, used by assembly.
pub const PERCPU_EMERGENCY_STACK: usize = 40;
/// Offset of `user_tp`, used by assembly.
pub const PERCPU_USER_TP: usize = 48;
const _: () = assert!(offset_of!(PerCpu, kernel_stack_top) == PERCPU_KERNEL_STACK);
const _: () = assert!(offset_of!(PerCpu, scratch_sp) == PERCPU_SCRATCH_SP);
const _: () = assert!(offset_of!(PerCpu, scratch_tp) == PERCPU_SCRATCH_TP);
const _: () = assert!(offset_of!(PerCpu, scratch_t0) == PERCPU_SCRATCH_T0);
const _: () = assert!(offset_of!(PerCpu, scratch_t1) == PERCPU_SCRATCH_T1);
const _: () = assert!(offset_of!(PerCpu, emergency_stack_top) == PERCPU_EMERGENCY_STACK);
const _: () = assert!(offset_of!(PerCpu, user_tp) == PERCPU_USER_TP);

/// Most CPUs (harts) this port runs the kernel on, the boot hart included; the kernel's own
/// limit (`scheduler::MAX_CPUS`) is the same.
pub const MAX_CPUS: usize = 8;

/// A block no hart uses yet.
const PERCPU_UNUSED: PerCpu = PerCpu {
    kernel_stack_top: 0,
    scratch_sp: 0,
    scratch_tp: 0,
    scratch_t0: 0,
    scratch_t1: 0,
    emergency_stack_top: 0,
    user_tp: 0,
    cpu_index: 0,
    hart_id: 0,
    emergency_stack: [0; EMERGENCY_STACK_SIZE],
};

/// The boot hart's block. The boot code points `tp` at it before the first Rust code runs, so
/// `cpu_index` works from the start.
#[no_mangle]
static mut BSP_PERCPU: PerCpu = PERCPU_UNUSED;

/// The other harts' blocks, by CPU index - 1 (in .bss, like the boot hart's: the harts are
/// few, and a block must exist before its hart runs any Rust code).
static mut OTHER_PERCPU: [PerCpu; MAX_CPUS - 1] = [PERCPU_UNUSED; MAX_CPUS - 1];

/// Physical address of the test finisher, once known (0: none, use SBI SRST).
static FINISHER: AtomicUsize = AtomicUsize::new(0);

/// Sets up the boot hart: its per-CPU block, and the FPU state user programs start with.
/// Returns the features found.
pub fn init_boot_cpu() -> Features {
    let features = detect_features();
    super::timer::use_sstc(features.sstc);
    // SAFETY: BSP_PERCPU is used only by the boot hart, which `tp` already points it at; the
    // fields written here are not read by the trap entry until a thread runs.
    let percpu: &'static mut PerCpu = unsafe { &mut *core::ptr::addr_of_mut!(BSP_PERCPU) };
    init_cpu(percpu, 0, features.hart_id);
    features
}

/// Fills the per-CPU block of CPU `index` (1 up to [`MAX_CPUS`] - 1) for hart `hart_id` before
/// that hart is started, and returns its address, which the hart's entry puts in `tp` (see
/// `smp.rs`). `None` if the index is out of range.
pub(super) fn prepare_other_cpu(index: usize, hart_id: u64) -> Option<u64> {
    let slot = index.checked_sub(1).filter(|&slot| slot < MAX_CPUS - 1)?;
    // SAFETY: slot `index - 1` belongs to CPU `index`, which the kernel starts once and which is
    // not running yet, so nothing else refers to this block; the reference ends here, before
    // the hart is started.
    let percpu: &mut PerCpu = unsafe { &mut (*core::ptr::addr_of_mut!(OTHER_PERCPU))[slot] };
    fill(percpu, index as u64, hart_id);
    Some(percpu as *mut PerCpu as u64)
}

/// Writes the fields of a per-CPU block that say which CPU it belongs to.
fn fill(percpu: &mut PerCpu, index: u64, hart_id: u64) {
    percpu.kernel_stack_top = 0;
    percpu.user_tp = 0;
    percpu.cpu_index = index;
    percpu.hart_id = hart_id;
    percpu.emergency_stack_top = percpu.emergency_stack.as_ptr() as u64 + EMERGENCY_STACK_SIZE as u64;
}

/// Fills `percpu` for the calling hart and points `tp` at it.
fn init_cpu(percpu: &'static mut PerCpu, index: u64, hart_id: u64) {
    fill(percpu, index, hart_id);
    let block = percpu as *mut PerCpu;
    // SAFETY: `tp` is reserved for the per-CPU pointer in the kernel (module comment); pointing
    // it at this hart's own 'static block changes nothing compiled code relies on.
    unsafe { asm!("mv tp, {}", in(reg) block, options(nomem, nostack, preserves_flags)) };
}

/// This hart's per-CPU block.
fn percpu() -> *mut PerCpu {
    let p: *mut PerCpu;
    // SAFETY: reads a register; `tp` holds the per-CPU pointer in the kernel (set by boot.rs
    // before any Rust code, then by init_cpu).
    unsafe { asm!("mv {}, tp", out(reg) p, options(nomem, nostack, preserves_flags)) };
    p
}

/// Loads a `u64` field of this hart's [`PerCpu`] with one `ld` off `tp` (through
/// [`percpu`], `tp` is first copied to another register: one instruction more at every use,
/// several of which lie on the tick's path).
macro_rules! percpu_u64 {
    ($field:ident) => {{
        let value: u64;
        // SAFETY: `tp` holds this hart's PerCpu pointer in the kernel (set by boot.rs before
        // any Rust code, then by init_cpu); an aligned load of one of its u64 fields, at an
        // offset that fits `ld`'s immediate (asserted below).
        unsafe {
            asm!("ld {}, {off}(tp)", out(reg) value, off = const offset_of!(PerCpu, $field), options(pure, readonly, nostack, preserves_flags))
        };
        value
    }};
}
const _: () = assert!(offset_of!(PerCpu, cpu_index) < 2048 && offset_of!(PerCpu, hart_id) < 2048 && offset_of!(PerCpu, user_tp) < 2048);

/// Index of the CPU this runs on (0 = boot CPU).
#[inline]
pub fn cpu_index() -> usize {
    // Never changes after init.
    percpu_u64!(cpu_index) as usize
}

/// This CPU's hardware id (its hart id), used to address inter-processor interrupts.
#[inline]
pub fn hw_id() -> u32 {
    // Set once by init_cpu.
    percpu_u64!(hart_id) as u32
}

/// The user's LTN register (`tp`), as the next return to user mode will load it.
#[inline]
pub fn user_ltn() -> u64 {
    // This hart's block; user_tp is only touched by this hart (the entry, the return path, and
    // the kernel with interrupts off).
    percpu_u64!(user_tp)
}

/// Sets the user's LTN register (`tp`) for the next return to user mode.
#[inline]
pub fn set_user_ltn(value: u64) {
    // SAFETY: as in `user_ltn`.
    unsafe { (*percpu()).user_tp = value };
}

/// Sets the stack the trap entry switches to when user mode traps or calls the kernel. Called
/// on every switch to a thread that runs in user mode.
#[inline]
pub fn set_kernel_stack(top: u64) {
    // SAFETY: this hart's block, touched only by this hart with interrupts off (the scheduler
    // switches threads with interrupts disabled).
    unsafe { (*percpu()).kernel_stack_top = top };
}

/// Whether interrupts are enabled on this hart.
pub fn interrupts_enabled() -> bool {
    sstatus::read().sie()
}

/// Runs `f` with interrupts disabled, restoring the previous state afterwards.
pub fn without_interrupts<R>(f: impl FnOnce() -> R) -> R {
    let were_enabled = interrupts_enabled();
    disable_interrupts();
    let r = f();
    if were_enabled {
        enable_interrupts();
    }
    r
}

/// Enables interrupts.
pub fn enable_interrupts() {
    // SAFETY: setting sstatus.SIE only lets the interrupts enabled in `sie` be taken; the trap
    // entry is installed before the kernel enables anything in `sie`.
    unsafe { sstatus::set_sie() };
}

/// Disables interrupts.
pub fn disable_interrupts() {
    // SAFETY: clearing sstatus.SIE only holds interrupts off.
    unsafe { sstatus::clear_sie() };
}

/// Lets interrupts that are pending be taken, then masks them again: a preemption point for
/// long kernel work (the kernel runs with interrupts masked). Call only where no lock is held
/// and nothing is half-done that an interrupt handler could look at.
pub fn interrupt_window() {
    // SAFETY: sets and clears sstatus.SIE: a pending interrupt enabled in `sie` is taken at the
    // boundary between the two; no `nomem`: its handler may write memory the caller then reads.
    unsafe { core::arch::asm!("csrsi sstatus, 2", "csrci sstatus, 2", options(nostack)) };
}

/// Enables interrupts and waits for one, atomically (no wake-up is lost between the two):
/// `wfi` wakes up for an interrupt pending in `sie` even while `sstatus.SIE` is clear, and the
/// interrupt is taken as soon as `SIE` is set after it.
pub fn wait_for_interrupt() {
    disable_interrupts();
    riscv::asm::wfi();
    enable_interrupts();
}

/// Spins politely (`pause` where Zihintpause exists; it is a hint that decodes as a no-op
/// elsewhere).
pub fn spin_hint() {
    core::hint::spin_loop();
}

/// What the manuals call the register holding the faulting address (for reports).
pub const FAULT_ADDRESS_REGISTER: &str = "stval";

/// The faulting address (or other trap value) of the last trap.
pub fn fault_address() -> u64 {
    riscv::register::stval::read() as u64
}

/// Records where the test finisher is (boot code, from the device tree).
pub(super) fn set_finisher(phys: Option<PhysAddr>) {
    FINISHER.store(phys.map_or(0, |p| p.as_u64() as usize), Ordering::Relaxed);
}

/// Ends the machine with `status` (0..=127) through QEMU virt's test finisher, so QEMU exits
/// with exactly `status`. Without a finisher, asks SBI for a system reset (shutdown, with
/// "system failure" as the reason when `status` is not 0). Never returns.
pub fn shutdown(status: u8) -> ! {
    disable_interrupts();
    let finisher = FINISHER.load(Ordering::Relaxed) as u64;
    if finisher != 0 {
        let value = if status == 0 { finisher::PASS } else { finisher::FAIL | (u32::from(status) << finisher::STATUS_SHIFT) };
        // The finisher lies in a range the boot map lists as reserved, so the direct map covers
        // it in the boot tables and the kernel's alike.
        let register = (super::layout::PHYS_MAP + finisher) as *mut u32;
        // SAFETY: a 32-bit store to the finisher's register only ends QEMU.
        unsafe { core::ptr::write_volatile(register, value) };
    }
    if status == 0 {
        sbi_rt::system_reset(sbi_rt::Shutdown, sbi_rt::NoReason);
    } else {
        sbi_rt::system_reset(sbi_rt::Shutdown, sbi_rt::SystemFailure);
    }
    halt_forever()
}

/// Stops this hart for good.
pub fn halt_forever() -> ! {
    loop {
        disable_interrupts();
        riscv::asm::wfi();
    }
}

/// Where the frame record (the caller's frame pointer, then the return address) of the frame
/// whose frame pointer is `fp` lies: the RISC-V psABI puts `s0` at the frame's top (the caller's
/// `sp`), with the return address just below it and the caller's `s0` below that.
pub fn frame_record(fp: u64) -> u64 {
    fp.wrapping_sub(16)
}

/// Reads the frame pointer (`s0`) of the caller, to start a backtrace.
#[inline(always)]
pub fn frame_pointer() -> u64 {
    let fp: u64;
    // SAFETY: reads a register.
    unsafe { asm!("mv {}, s0", out(reg) fp, options(nomem, nostack, preserves_flags)) };
    fp
}
