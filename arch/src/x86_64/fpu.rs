//! FP/SIMD state of x86_64 for the kernel's lazy switching: CR0.TS turns FP access off (the
//! next FP instruction raises #NM), XSAVEOPT/XSAVE (or FXSAVE) save the registers, XRSTOR (or
//! FXRSTOR) restore them.

use core::arch::asm;
use core::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use x86_64::registers::control::{Cr0, Cr0Flags, Cr4, Cr4Flags};
use x86_64::registers::xcontrol::{XCr0, XCr0Flags};

/// How state is saved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaveKind {
    /// `fxsave64`/`fxrstor64` (x87 + SSE, 512 bytes).
    Fxsave,
    /// `xsave`/`xrstor`.
    Xsave,
    /// `xsaveopt`/`xrstor` (skips unmodified components).
    Xsaveopt,
}

const KIND_FXSAVE: u8 = 0;
const KIND_XSAVE: u8 = 1;
const KIND_XSAVEOPT: u8 = 2;

static KIND: AtomicU8 = AtomicU8::new(KIND_FXSAVE);
static AREA_SIZE: AtomicUsize = AtomicUsize::new(FXSAVE_SIZE);
/// The XCR0 components saved.
static COMPONENTS: AtomicU64 = AtomicU64::new(0);

/// Size of the legacy FXSAVE area.
const FXSAVE_SIZE: usize = 512;
/// Alignment every save area must have.
pub const AREA_ALIGN: usize = 64;
/// MXCSR after reset: all exceptions masked.
const MXCSR_DEFAULT: u32 = 0x1f80;

fn cpuid(leaf: u32, sub: u32) -> (u32, u32, u32, u32) {
    // SAFETY: CPUID has no side effects.
    #[allow(unused_unsafe)]
    let r = unsafe { core::arch::x86_64::__cpuid_count(leaf, sub) };
    (r.eax, r.ebx, r.ecx, r.edx)
}

/// Sets up FP on the calling CPU (the boot CPU chooses the save method; APs follow it) and
/// leaves FP access off (CR0.TS set). Returns the method and the save-area size.
pub fn init_this_cpu(features: &super::cpu::Features) -> (SaveKind, usize) {
    if features.xsave {
        // SAFETY: enabling XSAVE support the CPU has.
        unsafe { Cr4::update(|f| f.insert(Cr4Flags::OSXSAVE)) };
        let (supported, ..) = cpuid(0xd, 0);
        let mut want = XCr0Flags::X87 | XCr0Flags::SSE;
        if supported & XCr0Flags::AVX.bits() as u32 != 0 {
            want |= XCr0Flags::AVX;
        }
        // SAFETY: only components the CPU reports, in a valid combination.
        unsafe { XCr0::write(want) };
        COMPONENTS.store(want.bits(), Ordering::Relaxed);
        let (_, size_for_enabled, ..) = cpuid(0xd, 0);
        let (sub1, ..) = cpuid(0xd, 1);
        KIND.store(if sub1 & 1 != 0 { KIND_XSAVEOPT } else { KIND_XSAVE }, Ordering::Relaxed);
        AREA_SIZE.store(size_for_enabled as usize, Ordering::Relaxed);
    }
    disable();
    (kind(), area_size())
}

/// The save method in use.
pub fn kind() -> SaveKind {
    match KIND.load(Ordering::Relaxed) {
        KIND_XSAVEOPT => SaveKind::Xsaveopt,
        KIND_XSAVE => SaveKind::Xsave,
        _ => SaveKind::Fxsave,
    }
}

/// Bytes of a save area.
pub fn area_size() -> usize {
    AREA_SIZE.load(Ordering::Relaxed)
}

/// Turns FP access off: the next FP/SIMD instruction traps (#NM).
pub fn disable() {
    // Most switches go from one thread that did not use FP to another: TS is set already, and
    // a CR0 read is cheaper than a write.
    let cr0 = Cr0::read_raw();
    if cr0 & Cr0Flags::TASK_SWITCHED.bits() == 0 {
        // SAFETY: setting TS only makes FP instructions trap.
        unsafe { Cr0::write_raw(cr0 | Cr0Flags::TASK_SWITCHED.bits()) };
    }
}

/// Turns FP access on.
pub fn enable() {
    // SAFETY: clts only clears CR0.TS.
    unsafe { asm!("clts", options(nomem, nostack, preserves_flags)) };
}

/// Saves the FP/SIMD registers into `area`. FP access must be on.
///
/// # Safety
/// `area` must be [`area_size`] writable bytes aligned to [`AREA_ALIGN`].
pub unsafe fn save(area: *mut u8) {
    let mask = COMPONENTS.load(Ordering::Relaxed);
    let (lo, hi) = (mask as u32, (mask >> 32) as u32);
    // SAFETY: guaranteed by the caller; the instruction matches what init chose.
    unsafe {
        match kind() {
            SaveKind::Xsaveopt => asm!("xsaveopt64 [{}]", in(reg) area, in("eax") lo, in("edx") hi, options(nostack, preserves_flags)),
            SaveKind::Xsave => asm!("xsave64 [{}]", in(reg) area, in("eax") lo, in("edx") hi, options(nostack, preserves_flags)),
            SaveKind::Fxsave => asm!("fxsave64 [{}]", in(reg) area, options(nostack, preserves_flags)),
        }
    }
}

/// Loads the FP/SIMD registers from `area` (made by [`save`]). FP access must be on.
///
/// # Safety
/// As for [`save`], and `area` must hold a valid saved state.
pub unsafe fn restore(area: *const u8) {
    let mask = COMPONENTS.load(Ordering::Relaxed);
    let (lo, hi) = (mask as u32, (mask >> 32) as u32);
    // SAFETY: guaranteed by the caller.
    unsafe {
        match kind() {
            SaveKind::Xsaveopt | SaveKind::Xsave => asm!("xrstor64 [{}]", in(reg) area, in("eax") lo, in("edx") hi, options(nostack, preserves_flags)),
            SaveKind::Fxsave => asm!("fxrstor64 [{}]", in(reg) area, options(nostack, preserves_flags)),
        }
    }
}

/// Puts the FP/SIMD registers in their initial state (for a thread's first FP use). FP access
/// must be on.
pub fn reset() {
    let mxcsr = MXCSR_DEFAULT;
    // SAFETY: fninit resets the x87 unit; ldmxcsr loads a valid MXCSR; the xmm registers are
    // zeroed so no other thread's values are visible.
    unsafe {
        asm!(
            "fninit",
            "ldmxcsr [{m}]",
            "xorps xmm0, xmm0", "xorps xmm1, xmm1", "xorps xmm2, xmm2", "xorps xmm3, xmm3",
            "xorps xmm4, xmm4", "xorps xmm5, xmm5", "xorps xmm6, xmm6", "xorps xmm7, xmm7",
            "xorps xmm8, xmm8", "xorps xmm9, xmm9", "xorps xmm10, xmm10", "xorps xmm11, xmm11",
            "xorps xmm12, xmm12", "xorps xmm13, xmm13", "xorps xmm14, xmm14", "xorps xmm15, xmm15",
            m = in(reg) &mxcsr,
            options(nostack),
        );
    }
    if COMPONENTS.load(Ordering::Relaxed) & XCr0Flags::AVX.bits() != 0 {
        // SAFETY: vzeroall clears the upper halves too (AVX is enabled in XCR0).
        unsafe { asm!("vzeroall", options(nomem, nostack, preserves_flags)) };
    }
}

/// The Kernel Notification format (`tsumugi_abi::kn::fp_format`) of what [`save`] writes.
pub fn thmb_format() -> u64 {
    match kind() {
        SaveKind::Fxsave => tsumugi_abi::kn::fp_format::FXSAVE,
        SaveKind::Xsave | SaveKind::Xsaveopt => tsumugi_abi::kn::fp_format::XSAVE,
    }
}
