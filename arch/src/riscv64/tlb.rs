//! riscv64 TLB and page-table-root operations: `satp` and `sfence.vma`.
//!
//! Every view runs with ASID 0 for now (TLB tags come with a later step), so a root switch must
//! flush the old view's translations; kernel mappings are global and survive that flush, as
//! they survive a CR3 load on x86_64.

use core::arch::asm;

use crate::addr::{Frame, PhysAddr, VirtAddr};
use riscv::register::satp::{self, Mode};

/// The ASID every view uses until TLB tagging is implemented.
const ASID: usize = 0;

/// Invalidates every non-global translation of [`ASID`] on this hart
/// (`sfence.vma x0, rs2` with rs2 holding the ASID keeps global entries).
fn flush_asid() {
    // SAFETY: a fence only drops cached translations; the page tables in memory are unchanged.
    unsafe { asm!("sfence.vma zero, {asid}", asid = in(reg) ASID, options(nostack, preserves_flags)) };
}

/// Makes `root` the active top-level table (writes `satp`: Sv48, ASID 0) and flushes the
/// non-global translations, which a `satp` write alone does not do.
///
/// # Safety
/// `root` must be a valid Sv48 root that maps the kernel half exactly as the current one does
/// (the code running now, its stack and the per-CPU data stay mapped).
pub unsafe fn load_root(root: Frame) {
    // SAFETY: guaranteed by the caller; the PPN fits satp's 44-bit field (frames are below
    // 2^52) and ASID 0 is valid.
    unsafe { satp::set(Mode::Sv48, ASID, root.number() as usize) };
    flush_asid();
}

/// Turns on TLB tags if this port used them and returns how many views may use (0: untagged).
/// riscv64 keeps every view on ASID 0 for now (the tagged path, `satp.ASID` = tag with a fence
/// only when a tag is recycled, comes later; QEMU flushes on every `satp` write anyway).
pub fn enable_tags(_features: &super::cpu::Features) -> u16 {
    0
}

/// Turns tags on for another hart if the boot hart turned them on (never, for now).
pub fn enable_tags_on_this_cpu() {}

/// Loads `root` with TLB tag `tag`. Tags are off ([`enable_tags`] returned 0), so `tag` is 0
/// and every load flushes the non-global entries, whatever `flush_all` says.
///
/// # Safety
/// As for [`load_root`].
pub unsafe fn load_root_tagged(root: Frame, tag: u16, flush_all: bool) {
    debug_assert_eq!(tag, 0, "TLB tags are off on riscv64");
    let _ = flush_all;
    // SAFETY: guaranteed by the caller.
    unsafe { load_root(root) };
}

/// Installs the kernel's own table at boot. riscv64 has one root register (`satp`), so this is
/// [`load_root`]; ports with a separate kernel root (aarch64 TTBR1) differ here. The boot
/// tables mapped everything global, so this flush must drop global entries too.
///
/// # Safety
/// As for [`load_root`]; `root` must map the running kernel.
pub unsafe fn load_kernel_root(root: Frame) {
    // SAFETY: guaranteed by the caller.
    unsafe { load_root(root) };
    riscv::asm::sfence_vma_all();
}

/// The active top-level table.
pub fn current_root() -> Frame {
    Frame::containing(PhysAddr::new((satp::read().ppn() as u64) << crate::addr::PAGE_SHIFT))
}

/// Invalidates the translation of the page holding `va` on this hart, global or not
/// (`sfence.vma rs1, x0`).
pub fn flush_page(va: VirtAddr) {
    // SAFETY: a fence only drops cached translations.
    unsafe { asm!("sfence.vma {va}, zero", va = in(reg) va.as_u64(), options(nostack, preserves_flags)) };
}

/// Invalidates every non-global translation on this hart.
pub fn flush_all() {
    flush_asid();
}
