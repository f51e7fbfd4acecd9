//! FP state of riscv64 for the kernel's lazy switching, through `sstatus.FS`: Off makes every
//! FP instruction trap (an illegal-instruction exception, which `trap.rs` reports as
//! `Trap::FpuDisabled` when FS was Off), and the hardware marks the registers Dirty when an
//! instruction changes them — the "window invalid mask" of DESIGN §7 — so a save is skipped
//! when the registers still hold what was last restored.
//!
//! FS is per-hart state the kernel manages here, like CR0.TS on x86_64: the trap return keeps
//! the live FS rather than the one in the interrupted context's frame.

use core::arch::{asm, global_asm};
use core::sync::atomic::{AtomicBool, Ordering};
use riscv::register::sstatus::{self, FS};

/// How state is saved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaveKind {
    /// `fsd` of f0..f31 and `fcsr`, only when `sstatus.FS` says the registers are Dirty.
    DirtyOnly,
}

/// Bytes of a save area: f0..f31, then `fcsr`.
const AREA_SIZE: usize = 33 * 8;
/// Offset of `fcsr` in a save area.
const FCSR_OFFSET: usize = 32 * 8;
/// Alignment every save area must have.
pub const AREA_ALIGN: usize = 16;

/// Most harts tracked (indexed by `cpu::cpu_index`).
const MAX_CPUS: usize = 64;
#[allow(clippy::declare_interior_mutable_const)]
const CLEAN: AtomicBool = AtomicBool::new(false);
/// Per hart: the live registers were Dirty when [`disable`] turned FS Off (Off forgets it).
static DIRTY_WHILE_OFF: [AtomicBool; MAX_CPUS] = [CLEAN; MAX_CPUS];

fn dirty_while_off() -> &'static AtomicBool {
    &DIRTY_WHILE_OFF[super::cpu::cpu_index() % MAX_CPUS]
}

/// Sets up FP on the calling hart and leaves FP access off. Returns the method and the
/// save-area size.
pub fn init_this_cpu(_features: &super::cpu::Features) -> (SaveKind, usize) {
    dirty_while_off().store(false, Ordering::Relaxed);
    // SAFETY: FS Off only makes FP instructions trap; the kernel uses none.
    unsafe { sstatus::set_fs(FS::Off) };
    (SaveKind::DirtyOnly, AREA_SIZE)
}

/// The save method in use.
pub fn kind() -> SaveKind {
    SaveKind::DirtyOnly
}

/// Bytes of a save area.
pub fn area_size() -> usize {
    AREA_SIZE
}

/// Turns FP access off: the next FP instruction traps. Remembers whether the registers were
/// Dirty, which FS Off would otherwise forget.
pub fn disable() {
    if sstatus::read().fs() == FS::Dirty {
        dirty_while_off().store(true, Ordering::Relaxed);
    }
    // SAFETY: FS Off only makes FP instructions trap.
    unsafe { sstatus::set_fs(FS::Off) };
}

/// Turns FP access on (Clean: the registers are as they were; Dirty stays Dirty).
pub fn enable() {
    if sstatus::read().fs() == FS::Off {
        // SAFETY: turning FP on only lets FP instructions run.
        unsafe { sstatus::set_fs(FS::Clean) };
    }
}

/// Whether the live registers may differ from the owner's save area.
fn dirty() -> bool {
    sstatus::read().fs() == FS::Dirty || dirty_while_off().load(Ordering::Relaxed)
}

/// Saves the FP registers into `area` if they changed since they were last restored from it or
/// saved into it (`sstatus.FS` Dirty now, or when FP access was turned off); returns whether it
/// stored them, so the kernel can count the saves the hardware's tracking made unnecessary.
/// `area` must be the FP owner's, the one the registers were last restored from or saved into
/// (else a skipped save would leave it stale). FP access must be on.
///
/// # Safety
/// `area` must be [`area_size`] writable bytes aligned to [`AREA_ALIGN`].
pub unsafe fn save(area: *mut u8) -> bool {
    if !dirty() {
        return false;
    }
    // SAFETY: guaranteed by the caller (size, alignment); FP access is on.
    unsafe {
        asm!(
            "fsd f0, 0*8({a})", "fsd f1, 1*8({a})", "fsd f2, 2*8({a})", "fsd f3, 3*8({a})",
            "fsd f4, 4*8({a})", "fsd f5, 5*8({a})", "fsd f6, 6*8({a})", "fsd f7, 7*8({a})",
            "fsd f8, 8*8({a})", "fsd f9, 9*8({a})", "fsd f10, 10*8({a})", "fsd f11, 11*8({a})",
            "fsd f12, 12*8({a})", "fsd f13, 13*8({a})", "fsd f14, 14*8({a})", "fsd f15, 15*8({a})",
            "fsd f16, 16*8({a})", "fsd f17, 17*8({a})", "fsd f18, 18*8({a})", "fsd f19, 19*8({a})",
            "fsd f20, 20*8({a})", "fsd f21, 21*8({a})", "fsd f22, 22*8({a})", "fsd f23, 23*8({a})",
            "fsd f24, 24*8({a})", "fsd f25, 25*8({a})", "fsd f26, 26*8({a})", "fsd f27, 27*8({a})",
            "fsd f28, 28*8({a})", "fsd f29, 29*8({a})", "fsd f30, 30*8({a})", "fsd f31, 31*8({a})",
            "frcsr {t}",
            "sd {t}, {fcsr}({a})",
            a = in(reg) area,
            t = out(reg) _,
            fcsr = const FCSR_OFFSET,
            options(nostack, preserves_flags),
        );
        // The area now matches the registers.
        sstatus::set_fs(FS::Clean);
    }
    dirty_while_off().store(false, Ordering::Relaxed);
    true
}

extern "C" {
    fn fpu_load_registers(area: *const u8);
    fn fpu_zero_registers();
}

// fpu_load_registers(area: *const u8 (a0)): f0..f31 and fcsr from the area.
// fpu_zero_registers(): f0..f31 and fcsr to zero.
//
// Assembly functions rather than inline asm, on purpose: they change fs0..fs11, which the psABI
// says survive a call. The FP registers belong to user threads; kernel code holds no FP values
// (it has no floating-point code), so nothing in the kernel notices. Inline asm would have to
// declare the registers clobbered, and the compiler would then save fs0..fs11 around it and put
// the previous thread's values back — undoing the load.
global_asm!(
    r#"
    .section .text.fpu, "ax"
    .option push
    .option arch, +d                    # global_asm! does not inherit the target's features
    .balign 4
    .global fpu_load_registers
fpu_load_registers:
    fld f0, 0*8(a0)
    fld f1, 1*8(a0)
    fld f2, 2*8(a0)
    fld f3, 3*8(a0)
    fld f4, 4*8(a0)
    fld f5, 5*8(a0)
    fld f6, 6*8(a0)
    fld f7, 7*8(a0)
    fld f8, 8*8(a0)
    fld f9, 9*8(a0)
    fld f10, 10*8(a0)
    fld f11, 11*8(a0)
    fld f12, 12*8(a0)
    fld f13, 13*8(a0)
    fld f14, 14*8(a0)
    fld f15, 15*8(a0)
    fld f16, 16*8(a0)
    fld f17, 17*8(a0)
    fld f18, 18*8(a0)
    fld f19, 19*8(a0)
    fld f20, 20*8(a0)
    fld f21, 21*8(a0)
    fld f22, 22*8(a0)
    fld f23, 23*8(a0)
    fld f24, 24*8(a0)
    fld f25, 25*8(a0)
    fld f26, 26*8(a0)
    fld f27, 27*8(a0)
    fld f28, 28*8(a0)
    fld f29, 29*8(a0)
    fld f30, 30*8(a0)
    fld f31, 31*8(a0)
    ld t0, {fcsr}(a0)
    fscsr t0
    ret

    .global fpu_zero_registers
fpu_zero_registers:
    fmv.d.x f0, zero
    fmv.d.x f1, zero
    fmv.d.x f2, zero
    fmv.d.x f3, zero
    fmv.d.x f4, zero
    fmv.d.x f5, zero
    fmv.d.x f6, zero
    fmv.d.x f7, zero
    fmv.d.x f8, zero
    fmv.d.x f9, zero
    fmv.d.x f10, zero
    fmv.d.x f11, zero
    fmv.d.x f12, zero
    fmv.d.x f13, zero
    fmv.d.x f14, zero
    fmv.d.x f15, zero
    fmv.d.x f16, zero
    fmv.d.x f17, zero
    fmv.d.x f18, zero
    fmv.d.x f19, zero
    fmv.d.x f20, zero
    fmv.d.x f21, zero
    fmv.d.x f22, zero
    fmv.d.x f23, zero
    fmv.d.x f24, zero
    fmv.d.x f25, zero
    fmv.d.x f26, zero
    fmv.d.x f27, zero
    fmv.d.x f28, zero
    fmv.d.x f29, zero
    fmv.d.x f30, zero
    fmv.d.x f31, zero
    fscsr zero
    ret
    .option pop
    "#,
    fcsr = const FCSR_OFFSET,
);

/// Loads the FP registers from `area` (made by [`save`], or zeroed: the initial state). FP
/// access must be on.
///
/// # Safety
/// As for [`save`], and `area` must hold a valid saved state.
pub unsafe fn restore(area: *const u8) {
    // SAFETY: guaranteed by the caller; the function only loads the FP registers (see the
    // comment above the assembly for why it may change fs0..fs11).
    unsafe {
        fpu_load_registers(area);
        // The registers now match the area.
        sstatus::set_fs(FS::Clean);
    }
    dirty_while_off().store(false, Ordering::Relaxed);
}

/// Puts the FP registers in their initial state (zero, `fcsr` 0: round to nearest, no flags)
/// for a thread's first FP use. FP access must be on. The registers are left Dirty, so the
/// first save writes them.
pub fn reset() {
    // SAFETY: only FP registers and fcsr change (see the comment above the assembly).
    unsafe { fpu_zero_registers() };
}

/// The Kernel Notification format (`tsumugi_abi::kn::fp_format`) of what [`save`] writes.
pub fn thmb_format() -> u64 {
    tsumugi_abi::kn::fp_format::RISCV_D
}
