//! x86_64 TLB and page-table-root operations.

use crate::addr::{Frame, PhysAddr, VirtAddr};
use x86_64::registers::control::{Cr3, Cr3Flags};
use x86_64::structures::paging::PhysFrame;

/// Makes `root` the active top-level table (loads CR3). Non-global translations are flushed.
///
/// # Safety
/// `root` must be a valid PML4 that maps the kernel half exactly as the current one does
/// (the code running now, its stack and the per-CPU data stay mapped).
pub unsafe fn load_root(root: Frame) {
    let frame = PhysFrame::containing_address(x86_64::PhysAddr::new(root.start().as_u64()));
    // SAFETY: guaranteed by the caller.
    unsafe { Cr3::write(frame, Cr3Flags::empty()) };
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
pub fn current_root() -> Frame {
    let (frame, _) = Cr3::read();
    Frame::containing(PhysAddr::new(frame.start_address().as_u64()))
}

/// Invalidates the translation of the page holding `va` on this CPU.
pub fn flush_page(va: VirtAddr) {
    x86_64::instructions::tlb::flush(x86_64::VirtAddr::new_truncate(va.as_u64()));
}

/// Invalidates every non-global translation on this CPU.
pub fn flush_all() {
    x86_64::instructions::tlb::flush_all();
}
