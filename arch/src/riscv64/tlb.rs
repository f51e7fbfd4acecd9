//! riscv64 TLB and page-table-root operations: `satp` and `sfence.vma`.
//!
//! Views get address-space identifiers (`satp.ASID`) from the kernel's tag allocator
//! (`mm::tags`) when the harts implement them: [`enable_tags`] says how many there are, a view
//! switch writes `satp` with the view's ASID and flushes nothing, and a new tag generation
//! (rollover or reclaim, `flush_all`) flushes every address space. User mappings are not
//! global and kernel mappings (the image, the direct map) are, so one ASID's entries never
//! stand for another view's. The kernel's own root uses ASID 0, which no view gets.
//!
//! Untagged (`tlbtag=off`, no ASID bits, or a hart with fewer ASID bits than the boot hart),
//! every view runs with ASID 0 and a switch flushes ASID 0's non-global entries, the analogue
//! of a CR3 load without PCIDs.
//!
//! QEMU (7.2) implements all 16 ASID bits but flushes its whole software TLB on every `satp`
//! write anyway, so tags save the kernel's explicit flushes there, not TLB misses.
//!
//! [`flush_page`] is local, as on x86_64: no kernel protocol needs a remote fence. A view's
//! table only gains mappings while it lives (a view change is a kick IPI to the hart running
//! the thread, which loads the new root), a dead view's ASID is reused only after a generation
//! flush on each hart, and a freed kernel stack's slot is reused only after every CPU flushed
//! its whole TLB (`mm::kernel_stack`). A synchronous SBI RFENCE would also stall QEMU's
//! round-robin TCG (`-icount`): the firmware spins waiting for the other harts, which that
//! mode then never runs (measured with QEMU 7.2 / OpenSBI 1.1).

use core::arch::asm;
use core::sync::atomic::{AtomicU16, AtomicU64, Ordering};

use crate::addr::{Frame, PhysAddr, VirtAddr};
use riscv::register::satp;

/// The ASID of the kernel root and of untagged loads.
const UNTAGGED: u16 = 0;
/// Where `satp.ASID` sits (RV64: bits 44..60).
const SATP_ASID_SHIFT: u32 = 44;
/// `satp.ASID`, in place.
const SATP_ASID: u64 = 0xffff << SATP_ASID_SHIFT;
/// `satp.MODE`, in place.
const SATP_MODE: u64 = 0xf << 60;
/// `satp.MODE` = Sv48, in place.
const SATP_SV48: u64 = 9 << 60;

/// ASIDs views may use once [`enable_tags`] turned tags on (0 = untagged).
static TAG_COUNT: AtomicU16 = AtomicU16::new(0);
/// ASID bits of the boot hart, once [`enable_tags`] turned tags on.
static TAG_BITS: AtomicU16 = AtomicU16::new(0);
/// CPUs (bit = `cpu::cpu_index`) that implement fewer ASID bits than the boot hart, and so run
/// untagged while the others use tags.
static UNTAGGED_CPUS: AtomicU64 = AtomicU64::new(0);

/// Invalidates every non-global translation of ASID `asid` on this hart (`sfence.vma x0, rs2`
/// with rs2 holding the ASID keeps global entries).
fn flush_asid(asid: u16) {
    // SAFETY: a fence only drops cached translations; the page tables in memory are unchanged.
    unsafe { asm!("sfence.vma zero, {asid}", asid = in(reg) u64::from(asid), options(nostack, preserves_flags)) };
}

/// Invalidates every translation of every address space on this hart, global ones included
/// (`sfence.vma x0, x0`: there is no "every ASID, non-global only"; the kernel's global entries
/// refill from the same tables).
fn flush_every_asid() {
    riscv::asm::sfence_vma_all();
}

/// Writes `satp`: Sv48, `root`, `asid`.
///
/// # Safety
/// As for [`load_root_tagged`].
unsafe fn write_satp(root: Frame, asid: u16) {
    let value = SATP_SV48 | (u64::from(asid) << SATP_ASID_SHIFT) | root.number();
    // SAFETY: guaranteed by the caller; the PPN fits satp's 44-bit field (frames are below
    // 2^52) and the ASID field takes any value (unimplemented bits read as zero).
    unsafe { asm!("csrw satp, {}", in(reg) value, options(nostack, preserves_flags)) };
}

/// ASIDLEN of this hart: how many low bits of `satp.ASID` it implements (privileged
/// specification, "Supervisor Address Translation and Protection Register"): write ones to the
/// whole field, read back which stuck, then put the old value back. The probe runs on the same
/// root, so the code keeps its translations; entries cached under the probe's ASID are dropped.
/// Paging must be on (with `satp.MODE` = Bare the other fields must be written as zero); 0 if
/// it is not.
pub fn asid_bits() -> u32 {
    if satp::read().bits() as u64 & SATP_MODE == 0 {
        return 0;
    }
    let probed: u64;
    // SAFETY: the new value differs from the live one only in the ASID field, so the same table
    // keeps translating (the running code, its stack); the old value is restored before anything
    // else runs, and the fence drops what was cached under the probe's ASID.
    unsafe {
        asm!(
            "csrr {old}, satp",
            "or {probe}, {old}, {mask}",
            "csrw satp, {probe}",
            "csrr {probe}, satp",
            "csrw satp, {old}",
            "sfence.vma zero, zero",
            old = out(reg) _,
            probe = out(reg) probed,
            mask = in(reg) SATP_ASID,
            options(nostack, preserves_flags)
        );
    }
    ((probed & SATP_ASID) >> SATP_ASID_SHIFT).trailing_ones()
}

/// Makes `root` the active top-level table with ASID 0, flushing ASID 0 (an untagged load):
/// what every root load does without tags.
///
/// # Safety
/// `root` must be a valid Sv48 root that maps the kernel half exactly as the current one does
/// (the code running now, its stack and the per-CPU data stay mapped).
pub unsafe fn load_root(root: Frame) {
    // SAFETY: guaranteed by the caller.
    unsafe { write_satp(root, UNTAGGED) };
    flush_asid(UNTAGGED);
}

/// Says how many ASIDs views may use on this machine, from the boot hart's ASIDLEN
/// (`features.asid_bits`): 2^ASIDLEN, at most `u16::MAX`; 0 (untagged) without ASID bits.
/// Other harts check theirs in [`enable_tags_on_this_cpu`].
pub fn enable_tags(features: &super::cpu::Features) -> u16 {
    let bits = u32::from(features.asid_bits);
    let count = match bits {
        0 => 0,
        1..=15 => 1u16 << bits,
        _ => u16::MAX,
    };
    TAG_BITS.store(bits as u16, Ordering::Relaxed);
    TAG_COUNT.store(count, Ordering::Relaxed);
    count
}

/// On a hart started after [`enable_tags`]: if tags are on and this hart implements fewer ASID
/// bits than the boot hart, it runs untagged (every view switch flushes) rather than truncate
/// tags into ASIDs other views hold.
pub fn enable_tags_on_this_cpu() {
    if TAG_COUNT.load(Ordering::Relaxed) == 0 {
        return;
    }
    if asid_bits() < u32::from(TAG_BITS.load(Ordering::Relaxed)) {
        let bit = 1u64 << (super::cpu::cpu_index() % 64);
        UNTAGGED_CPUS.fetch_or(bit, Ordering::Relaxed);
    }
}

/// Whether this hart uses the tags the kernel hands out.
/// Inlined into every root load: with no hart short of ASID bits (the usual case) it needs
/// no hart index.
#[inline(always)]
fn tagged_here() -> bool {
    if TAG_COUNT.load(Ordering::Relaxed) == 0 {
        return false;
    }
    let untagged = UNTAGGED_CPUS.load(Ordering::Relaxed);
    untagged == 0 || untagged & (1 << (super::cpu::cpu_index() % 64)) == 0
}

/// Loads `root` with TLB tag `tag` (its ASID when tags are on). With `flush_all`, every
/// address space's entries are dropped (a new tag generation began since this hart last
/// flushed); otherwise nothing is flushed, since entries cached under `tag` belong to `root`.
/// Untagged, the load uses ASID 0 and flushes its non-global entries, whatever `tag` says.
///
/// # Safety
/// `root` must be a valid Sv48 root that maps the kernel half exactly as the current one does;
/// entries cached under `tag` must belong to `root` unless `flush_all` (the tag allocator's
/// guarantee).
#[inline]
pub unsafe fn load_root_tagged(root: Frame, tag: u16, flush_all: bool) {
    if !tagged_here() {
        // SAFETY: guaranteed by the caller.
        unsafe { load_root(root) };
        return;
    }
    // SAFETY: guaranteed by the caller. The flush comes after the write, so nothing cached
    // between the two (only the kernel's own accesses) outlives it either.
    unsafe { write_satp(root, tag) };
    if flush_all {
        flush_every_asid();
    }
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
    flush_every_asid();
}

/// The active top-level table.
#[inline]
pub fn current_root() -> Frame {
    Frame::containing(PhysAddr::new((satp::read().ppn() as u64) << crate::addr::PAGE_SHIFT))
}

/// Invalidates the translation of the page holding `va` on this hart, in every address space,
/// global or not (`sfence.vma rs1, x0`).
pub fn flush_page(va: VirtAddr) {
    // SAFETY: a fence only drops cached translations.
    unsafe { asm!("sfence.vma {va}, zero", va = in(reg) va.as_u64(), options(nostack, preserves_flags)) };
}

/// Invalidates the translation of the page holding `va` on this hart only: the same as
/// `flush_page`, which is local on this port (the other harts are covered by the callers).
pub fn flush_page_here(va: VirtAddr) {
    flush_page(va);
}

/// Invalidates every non-global translation on this hart: ASID 0's untagged, every address
/// space's (global entries too) with tags.
pub fn flush_all() {
    if tagged_here() {
        flush_every_asid();
    } else {
        flush_asid(UNTAGGED);
    }
}
