//! x86_64 TLB and page-table-root operations.

use crate::addr::{Frame, PhysAddr, VirtAddr};
use x86_64::registers::control::{Cr3, Cr3Flags};
use x86_64::structures::paging::PhysFrame;

/// Makes `root` the active top-level table (loads CR3). Non-global translations are flushed.
///
/// # Safety
/// `root` must be a valid PML4 that maps the kernel half exactly as the current one does
/// (the code running now, its stack and the per-CPU data stay mapped).
#[inline]
pub unsafe fn load_root(root: Frame) {
    let frame = PhysFrame::containing_address(x86_64::PhysAddr::new(root.start().as_u64()));
    // SAFETY: guaranteed by the caller.
    unsafe { Cr3::write(frame, Cr3Flags::empty()) };
}

/// PCIDs the CPU offers once [`enable_tags`] succeeded (0 = untagged).
static TAG_COUNT: core::sync::atomic::AtomicU16 = core::sync::atomic::AtomicU16::new(0);
/// Whether `invpcid` exists.
static INVPCID: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Number of PCID values (4096 when the CPU has PCIDs).
const PCID_COUNT: u16 = 4096;
/// CR3 bit 63: do not flush the PCID being loaded.
const CR3_NO_FLUSH: u64 = 1 << 63;
/// `invpcid` type: every context, global entries kept.
const INVPCID_ALL_NON_GLOBAL: u64 = 3;

/// Turns on PCIDs (CR4.PCIDE) when the CPU has them; returns how many tags views may use
/// (0: untagged). Call on every CPU with the kernel root loaded (PCID 0).
pub fn enable_tags(features: &super::cpu::Features) -> u16 {
    if !features.pcid {
        return 0;
    }
    // SAFETY: the current CR3 has PCID 0 (the kernel's tables are loaded untagged), as
    // setting CR4.PCIDE requires.
    unsafe { x86_64::registers::control::Cr4::update(|f| f.insert(x86_64::registers::control::Cr4Flags::PCID)) };
    INVPCID.store(features.invpcid, core::sync::atomic::Ordering::Relaxed);
    TAG_COUNT.store(PCID_COUNT, core::sync::atomic::Ordering::Relaxed);
    PCID_COUNT
}

/// Turns PCIDs on for an application processor if the boot CPU turned them on.
pub fn enable_tags_on_this_cpu() {
    if TAG_COUNT.load(core::sync::atomic::Ordering::Relaxed) > 0 {
        // SAFETY: as in `enable_tags`: the AP runs on the kernel root loaded untagged.
        unsafe { x86_64::registers::control::Cr4::update(|f| f.insert(x86_64::registers::control::Cr4Flags::PCID)) };
    }
}

/// Loads `root` with TLB tag `tag` (a PCID when tags are on). With `flush_all`, every
/// non-global entry of every tag is dropped first; otherwise the tag's entries are kept.
///
/// # Safety
/// As for [`load_root`].
#[inline]
pub unsafe fn load_root_tagged(root: Frame, tag: u16, flush_all: bool) {
    if TAG_COUNT.load(core::sync::atomic::Ordering::Relaxed) == 0 {
        // SAFETY: guaranteed by the caller; an untagged load flushes all non-global entries.
        unsafe { load_root(root) };
        return;
    }
    if flush_all {
        flush_every_tag();
    }
    let value = root.start().as_u64() | u64::from(tag) | CR3_NO_FLUSH;
    // SAFETY: guaranteed by the caller; the no-flush bit keeps the tag's entries, which belong
    // to this root (the tag allocator's guarantee).
    unsafe { core::arch::asm!("mov cr3, {}", in(reg) value, options(nostack, preserves_flags)) };
}

/// Drops the non-global entries of every PCID on this CPU.
fn flush_every_tag() {
    if INVPCID.load(core::sync::atomic::Ordering::Relaxed) {
        let descriptor = [0u64; 2];
        // SAFETY: invpcid with a valid descriptor only invalidates TLB entries.
        unsafe { core::arch::asm!("invpcid {}, [{}]", in(reg) INVPCID_ALL_NON_GLOBAL, in(reg) descriptor.as_ptr(), options(nostack, preserves_flags)) };
    } else {
        // Toggling CR4.PGE flushes every entry of every PCID, global ones included.
        // SAFETY: PGE is restored at once; only the TLB is affected.
        unsafe {
            use x86_64::registers::control::{Cr4, Cr4Flags};
            Cr4::update(|f| f.remove(Cr4Flags::PAGE_GLOBAL));
            Cr4::update(|f| f.insert(Cr4Flags::PAGE_GLOBAL));
        }
    }
}

/// Installs the kernel's own table at boot. On x86_64 there is one root register, so this is
/// [`load_root`]; ports with a separate kernel root (aarch64 TTBR1) differ here.
///
/// # Safety
/// As for [`load_root`]; `root` must map the running kernel.
pub unsafe fn load_kernel_root(root: Frame) {
    // SAFETY: guaranteed by the caller.
    unsafe { load_root(root) }
}

/// The active top-level table.
#[inline]
pub fn current_root() -> Frame {
    let (frame, _) = Cr3::read();
    Frame::containing(PhysAddr::new(frame.start_address().as_u64()))
}

/// Invalidates the translation of the page holding `va` on this CPU.
pub fn flush_page(va: VirtAddr) {
    x86_64::instructions::tlb::flush(x86_64::VirtAddr::new_truncate(va.as_u64()));
}

/// Invalidates the translation of the page holding `va` on this CPU only: the same as
/// `flush_page`, which is local on this port (`invlpg`).
pub fn flush_page_here(va: VirtAddr) {
    flush_page(va);
}

/// Invalidates every non-global translation on this CPU.
pub fn flush_all() {
    x86_64::instructions::tlb::flush_all();
}
