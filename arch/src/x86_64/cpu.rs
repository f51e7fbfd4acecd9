//! Per-CPU state of x86_64: feature detection, control registers, GDT and TSS, the per-CPU block
//! reached through GS, interrupt masking, and powering QEMU off with a status.

use core::arch::asm;
use core::mem::offset_of;
use x86_64::instructions::port::Port;
use x86_64::instructions::segmentation::{Segment, CS, DS, ES, SS};
use x86_64::instructions::tables::load_tss;
use x86_64::registers::control::{Cr0, Cr0Flags, Cr4, Cr4Flags};
use x86_64::registers::model_specific::{GsBase, KernelGsBase};
use x86_64::structures::gdt::{Descriptor, GlobalDescriptorTable, SegmentSelector};
use x86_64::structures::tss::TaskStateSegment;
use x86_64::VirtAddr as X86VirtAddr;

/// Kernel code selector (GDT slot 1). `syscall` loads it, so the GDT order below is fixed by the
/// STAR MSR layout: kernel code, kernel data, user data, user code.
pub const KERNEL_CS: u16 = 0x08;
/// Kernel data selector (slot 2).
pub const KERNEL_DS: u16 = 0x10;
/// User data selector (slot 3, RPL 3).
pub const USER_DS: u16 = 0x18 | 3;
/// User code selector (slot 4, RPL 3).
pub const USER_CS: u16 = 0x20 | 3;

/// I/O port of QEMU's `isa-debug-exit` device (xtask passes `iobase=0xf4`).
const DEBUG_EXIT_PORT: u16 = 0xf4;

/// Size of the double-fault stack (IST 1).
const FAULT_STACK_SIZE: usize = 16 * 1024;
/// IST slot (0-based in the TSS, 1-based in the IDT) used for double faults.
pub const DOUBLE_FAULT_IST: u16 = 0;

/// CPU features the kernel cares about, read once with CPUID.
#[derive(Clone, Copy, Debug, Default)]
pub struct Features {
    /// Supervisor-mode execution prevention.
    pub smep: bool,
    /// Supervisor-mode access prevention (needs `stac`/`clac` around user copies).
    pub smap: bool,
    /// Process-context identifiers (TLB tags).
    pub pcid: bool,
    /// The `invpcid` instruction.
    pub invpcid: bool,
    /// `xsave`/`xrstor`.
    pub xsave: bool,
    /// `rdfsbase`/`wrfsbase` and friends usable from user mode.
    pub fsgsbase: bool,
    /// Invariant TSC.
    pub invariant_tsc: bool,
}

/// Reads CPUID leaf `leaf`, subleaf `sub`: (eax, ebx, ecx, edx).
fn cpuid(leaf: u32, sub: u32) -> (u32, u32, u32, u32) {
    // SAFETY: CPUID exists on every x86_64 CPU and has no side effects.
    #[allow(unused_unsafe)]
    let r = unsafe { core::arch::x86_64::__cpuid_count(leaf, sub) };
    (r.eax, r.ebx, r.ecx, r.edx)
}

/// Detects the features of the running CPU.
pub fn detect_features() -> Features {
    let (max_leaf, ..) = cpuid(0, 0);
    let (_, _, ecx1, _) = cpuid(1, 0);
    let (_, ebx7, _, _) = if max_leaf >= 7 { cpuid(7, 0) } else { (0, 0, 0, 0) };
    let (max_ext, ..) = cpuid(0x8000_0000, 0);
    let (_, _, _, edx_ext7) = if max_ext >= 0x8000_0007 { cpuid(0x8000_0007, 0) } else { (0, 0, 0, 0) };
    let bit = |reg: u32, n: u32| reg & (1 << n) != 0;
    Features {
        smep: bit(ebx7, 7),
        smap: bit(ebx7, 20),
        pcid: bit(ecx1, 17),
        invpcid: bit(ebx7, 10),
        xsave: bit(ecx1, 26),
        fsgsbase: bit(ebx7, 0),
        invariant_tsc: bit(edx_ext7, 8),
    }
}

/// The CPU's vendor and brand string, for the banner.
pub fn brand(buf: &mut [u8; 48]) -> &str {
    let (max_ext, ..) = cpuid(0x8000_0000, 0);
    if max_ext < 0x8000_0004 {
        return "unknown x86_64";
    }
    for (i, leaf) in (0x8000_0002u32..=0x8000_0004).enumerate() {
        let (a, b, c, d) = cpuid(leaf, 0);
        for (j, reg) in [a, b, c, d].iter().enumerate() {
            buf[i * 16 + j * 4..i * 16 + j * 4 + 4].copy_from_slice(&reg.to_le_bytes());
        }
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    core::str::from_utf8(&buf[..end]).unwrap_or("x86_64").trim()
}

/// The per-CPU block, reached through the GS base while in the kernel. The first fields are
/// read by the syscall entry in `trap.rs` at fixed offsets (checked below).
#[repr(C, align(64))]
pub struct PerCpu {
    /// Points to this block (`gs:0`), so Rust can find it with one load.
    self_ptr: *mut PerCpu,
    /// Top of the running thread's kernel stack, loaded by the syscall entry.
    kernel_stack_top: u64,
    /// The user stack pointer, parked here by the syscall entry until it is pushed.
    user_rsp: u64,
    /// This CPU's index (0 is the boot CPU).
    cpu_index: u64,
    /// The CPU's task-state segment (kernel stack for interrupts from user mode, IST stacks).
    tss: TaskStateSegment,
    /// The CPU's descriptor table.
    gdt: GlobalDescriptorTable<8>,
    /// Stack for double faults, so a kernel stack overflow is reported rather than a reset.
    fault_stack: [u8; FAULT_STACK_SIZE],
}

/// Offset of `kernel_stack_top` in [`PerCpu`], used by assembly.
pub const PERCPU_KERNEL_STACK: usize = 8;
/// Offset of `user_rsp` in [`PerCpu`], used by assembly.
pub const PERCPU_USER_RSP: usize = 16;
const _: () = assert!(offset_of!(PerCpu, self_ptr) == 0);
const _: () = assert!(offset_of!(PerCpu, kernel_stack_top) == PERCPU_KERNEL_STACK);
const _: () = assert!(offset_of!(PerCpu, user_rsp) == PERCPU_USER_RSP);

/// Most CPUs this port brings up.
pub const MAX_CPUS: usize = 8;

#[allow(clippy::declare_interior_mutable_const)]
const PERCPU_INIT: PerCpu = PerCpu {
    self_ptr: core::ptr::null_mut(),
    kernel_stack_top: 0,
    user_rsp: 0,
    cpu_index: 0,
    tss: TaskStateSegment::new(),
    gdt: GlobalDescriptorTable::new(),
    fault_stack: [0; FAULT_STACK_SIZE],
};

/// Every CPU's block, by index (0 is the boot CPU).
static mut PERCPUS: [PerCpu; MAX_CPUS] = [PERCPU_INIT; MAX_CPUS];

/// Sets up the boot CPU: control registers, GDT, TSS, GS base. Returns the features found.
pub fn init_boot_cpu() -> Features {
    let features = detect_features();
    init_cpu(percpu_slot(0), 0, features);
    // SAFETY: the boot CPU, alone, interrupts off, no user access yet.
    unsafe { super::usercopy::patch_smap_sites(features.smap) };
    features
}

/// Sets up an application processor (index `index`, 1..MAX_CPUS) the same way.
pub fn init_other_cpu(index: usize) -> Features {
    let features = detect_features();
    init_cpu(percpu_slot(index), index as u64, features);
    features
}

fn percpu_slot(index: usize) -> &'static mut PerCpu {
    assert!(index < MAX_CPUS, "CPU index {index} beyond MAX_CPUS");
    // SAFETY: each slot is initialised once, by the CPU it belongs to (the boot CPU starts APs
    // one at a time, each with a distinct index), and used by that CPU only afterwards.
    unsafe { &mut (*core::ptr::addr_of_mut!(PERCPUS))[index] }
}

fn init_cpu(percpu: &'static mut PerCpu, index: u64, features: Features) {
    // SAFETY: enabling protections and FPU/SSE support the kernel is written for: write-protect
    // in ring 0, native FPU errors, SSE state (for user programs), global pages, SMEP/SMAP when
    // present (user copies use stac/clac), FSGSBASE when present.
    unsafe {
        Cr0::update(|f| {
            f.insert(Cr0Flags::WRITE_PROTECT | Cr0Flags::MONITOR_COPROCESSOR | Cr0Flags::NUMERIC_ERROR);
            f.remove(Cr0Flags::EMULATE_COPROCESSOR);
        });
        Cr4::update(|f| {
            f.insert(Cr4Flags::OSFXSR | Cr4Flags::OSXMMEXCPT_ENABLE | Cr4Flags::PAGE_GLOBAL);
            if features.smep {
                f.insert(Cr4Flags::SUPERVISOR_MODE_EXECUTION_PROTECTION);
            }
            if features.smap {
                f.insert(Cr4Flags::SUPERVISOR_MODE_ACCESS_PREVENTION);
            }
            if features.fsgsbase {
                f.insert(Cr4Flags::FSGSBASE);
            }
        });
    }
    percpu.self_ptr = percpu as *mut PerCpu;
    percpu.cpu_index = index;
    let fault_stack_top = percpu.fault_stack.as_ptr() as u64 + FAULT_STACK_SIZE as u64;
    percpu.tss.interrupt_stack_table[DOUBLE_FAULT_IST as usize] = X86VirtAddr::new(fault_stack_top);

    // SAFETY: the TSS lives in the 'static per-CPU block; the GDT references it by address.
    let tss: &'static TaskStateSegment = unsafe { &*core::ptr::addr_of!(percpu.tss) };
    let gdt = &mut percpu.gdt;
    let kcode = gdt.append(Descriptor::kernel_code_segment());
    let kdata = gdt.append(Descriptor::kernel_data_segment());
    let udata = gdt.append(Descriptor::user_data_segment());
    let ucode = gdt.append(Descriptor::user_code_segment());
    let tss_sel = gdt.append(Descriptor::tss_segment(tss));
    debug_assert_eq!((kcode.0, kdata.0, udata.0, ucode.0), (KERNEL_CS, KERNEL_DS, USER_DS, USER_CS));

    // SAFETY: the GDT is in the 'static per-CPU block; the selectors were just created in it.
    unsafe {
        let gdt: &'static GlobalDescriptorTable<8> = &*core::ptr::addr_of!(percpu.gdt);
        gdt.load();
        CS::set_reg(SegmentSelector(KERNEL_CS));
        SS::set_reg(SegmentSelector(KERNEL_DS));
        DS::set_reg(SegmentSelector(0));
        ES::set_reg(SegmentSelector(0));
        load_tss(tss_sel);
    }
    // While in the kernel GS points at the per-CPU block; KERNEL_GS_BASE holds the user value
    // and `swapgs` exchanges them on every user<->kernel crossing.
    GsBase::write(X86VirtAddr::new(percpu as *mut PerCpu as u64));
    KernelGsBase::write(X86VirtAddr::new(0));
}

/// This CPU's per-CPU block.
fn percpu() -> *mut PerCpu {
    let p: *mut PerCpu;
    // SAFETY: gs:0 holds self_ptr from init_cpu onwards (kernel GS is active in the kernel).
    unsafe { asm!("mov {}, gs:[0]", out(reg) p, options(nostack, readonly, preserves_flags)) };
    p
}

/// Index of the CPU this runs on (0 = boot CPU).
pub fn cpu_index() -> usize {
    // SAFETY: percpu() is valid after init; cpu_index never changes after init.
    unsafe { (*percpu()).cpu_index as usize }
}

/// This CPU's hardware id (its local APIC ID), used to address inter-processor interrupts.
pub fn hw_id() -> u32 {
    super::interrupts::local_apic_id()
}

/// The MSR number of `IA32_KERNEL_GS_BASE` (SDM vol. 4, table 2-2).
const IA32_KERNEL_GS_BASE: u32 = 0xC000_0102;

/// The user's LTN register (GS base), read while in the kernel (after `swapgs` it is parked in
/// `IA32_KERNEL_GS_BASE`).
#[inline]
pub fn user_ltn() -> u64 {
    // The MSR read without the x86_64 crate's canonical-address check (the base is canonical:
    // only `set_user_ltn` and `wrgsbase` write it, neither can make it otherwise).
    let (low, high): (u32, u32);
    // SAFETY: reads IA32_KERNEL_GS_BASE (ring 0); no other effect.
    unsafe { core::arch::asm!("rdmsr", in("ecx") IA32_KERNEL_GS_BASE, out("eax") low, out("edx") high, options(nomem, nostack, preserves_flags)) };
    (u64::from(high) << 32) | u64::from(low)
}

/// Sets the user's LTN register for the next return to user mode.
#[inline]
pub fn set_user_ltn(value: u64) {
    // A non-canonical value would fault the wrmsr; user values were checked canonical by
    // whoever made them (wrgsbase cannot make a non-canonical one).
    KernelGsBase::write(X86VirtAddr::new_truncate(value));
}

/// Sets the stack the CPU switches to when user mode traps or calls the kernel. Called on every
/// switch to a thread that runs in user mode.
#[inline]
pub fn set_kernel_stack(top: u64) {
    // SAFETY: this CPU's block, touched only by this CPU with interrupts off (the scheduler
    // switches threads with interrupts disabled).
    unsafe {
        let p = percpu();
        (*p).kernel_stack_top = top;
        // Without `new`'s canonical check and its panic path (on every switch): a kernel
        // stack top is a kernel-half address, canonical already, which `new_truncate` keeps.
        (*p).tss.privilege_stack_table[0] = X86VirtAddr::new_truncate(top);
    }
}

/// Whether interrupts are enabled on this CPU.
pub fn interrupts_enabled() -> bool {
    x86_64::instructions::interrupts::are_enabled()
}

/// Runs `f` with interrupts disabled, restoring the previous state afterwards.
pub fn without_interrupts<R>(f: impl FnOnce() -> R) -> R {
    x86_64::instructions::interrupts::without_interrupts(f)
}

/// Enables interrupts.
pub fn enable_interrupts() {
    x86_64::instructions::interrupts::enable();
}

/// Disables interrupts.
pub fn disable_interrupts() {
    x86_64::instructions::interrupts::disable();
}

/// Lets interrupts that are pending be taken, then masks them again: a preemption point for
/// long kernel work (the kernel runs with interrupts masked). Call only where no lock is held
/// and nothing is half-done that an interrupt handler could look at.
pub fn interrupt_window() {
    // SAFETY: `sti` takes effect after the next instruction, so a pending interrupt is taken at
    // the `nop`; no `nomem`: its handler may write memory the caller then reads.
    unsafe { core::arch::asm!("sti", "nop", "cli", options(nostack)) };
}

/// Enables interrupts and waits for one, atomically (no wake-up is lost between the two).
pub fn wait_for_interrupt() {
    x86_64::instructions::interrupts::enable_and_hlt();
}

/// Spins politely.
pub fn spin_hint() {
    core::hint::spin_loop();
}

/// What the manuals call the register holding the faulting address (for reports).
pub const FAULT_ADDRESS_REGISTER: &str = "cr2";

/// The faulting address of the last page fault.
pub fn fault_address() -> u64 {
    x86_64::registers::control::Cr2::read_raw()
}

/// Ends the machine with `status` (0..=127) through QEMU's `isa-debug-exit`
/// (QEMU exits with `status * 2 + 1`). Never returns: if the device is absent, halts forever.
pub fn shutdown(status: u8) -> ! {
    let mut port: Port<u32> = Port::new(DEBUG_EXIT_PORT);
    // SAFETY: writing to the debug-exit port only ends QEMU; on hardware the port is unused.
    unsafe { port.write(u32::from(status)) };
    halt_forever()
}

/// Stops this CPU for good.
pub fn halt_forever() -> ! {
    loop {
        x86_64::instructions::interrupts::disable();
        x86_64::instructions::hlt();
    }
}

/// Where the frame record (the caller's frame pointer, then the return address) of the frame
/// whose frame pointer is `fp` lies: on x86_64 `rbp` points at it.
pub fn frame_record(fp: u64) -> u64 {
    fp
}

/// Reads the frame pointer of the caller, to start a backtrace.
#[inline(always)]
pub fn frame_pointer() -> u64 {
    let rbp: u64;
    // SAFETY: reads a register.
    unsafe { asm!("mov {}, rbp", out(reg) rbp, options(nomem, nostack, preserves_flags)) };
    rbp
}
