//! aarch64 translation-table roots and TLB maintenance.
//!
//! The kernel half is translated through `TTBR1_EL1`, loaded once at boot with the kernel's
//! table; a view's user table goes into `TTBR0_EL1` with its ASID (the kernel's `mm::tags`
//! hands them out; [`enable_tags`] says how many the CPU has). User mappings are not global,
//! kernel mappings are, so an ASID keeps a view's entries apart from every other view's and a
//! view switch needs no flush. Untagged (`tlbtag=off`, or a CPU without ASIDs), every view
//! uses ASID 0 and a switch flushes it, the analogue of a CR3 load without PCIDs.
//!
//! Instruction-cache maintenance for code the loader writes through the direct map is not done
//! here: QEMU's TCG keeps instruction fetch coherent with stores, but hardware needs
//! `dc cvau` + `ic ivau` over the written code, which wants a hook the loader calls.

use core::arch::asm;
use core::sync::atomic::{AtomicU16, AtomicU64, Ordering};

use crate::addr::{Frame, PhysAddr, VirtAddr};

/// `TCR_EL1.EPD0`: no walks through `TTBR0_EL1` (low addresses fault at once).
pub(crate) const TCR_EPD0: u64 = 1 << 7;
/// The ASID of the kernel root and of untagged loads.
const UNTAGGED: u16 = 0;
/// Where the ASID sits in `TTBR0_EL1` and in TLBI operands.
const ASID_SHIFT: u32 = 48;

/// Physical address of the kernel's root table, once [`load_kernel_root`] ran (0 before).
static KERNEL_ROOT: AtomicU64 = AtomicU64::new(0);
/// ASIDs views may use once [`enable_tags`] ran (0 = untagged).
static TAG_COUNT: AtomicU16 = AtomicU16::new(0);

extern "C" {
    /// Physical-address alias of `switch_ttbr1` (see `boot.rs`).
    fn switch_ttbr1(root: u64, empty: u64);
}

/// Makes `root` the active user table with ASID 0, flushing ASID 0 (an untagged load).
///
/// # Safety
/// As for [`load_root_tagged`].
pub unsafe fn load_root(root: Frame) {
    // SAFETY: guaranteed by the caller.
    unsafe { load_root_tagged(root, UNTAGGED, false) }
}

/// Says how many ASIDs views may use: 65535 with 16-bit ASIDs (`TCR_EL1.AS` is set at boot
/// when the CPU has them), 256 with 8-bit ones. ASIDs need no switching on; every CPU uses the
/// same setting.
pub fn enable_tags(features: &super::cpu::Features) -> u16 {
    let count = if features.asid16 { u16::MAX } else { 256 };
    TAG_COUNT.store(count, Ordering::Relaxed);
    count
}

/// Nothing to do on another CPU: the boot code sets `TCR_EL1.AS` on every CPU the same way.
pub fn enable_tags_on_this_cpu() {}

/// Makes `root` the active user table (`TTBR0_EL1`) with ASID `tag`. With `flush_all`, every
/// TLB entry is dropped first (an ASID rollover or reclaim; the kernel's global entries are
/// refilled at once); an untagged load (`tag` 0) flushes ASID 0, whose entries may belong to
/// any view. Loading the kernel's own root means "no user half": walks through `TTBR0_EL1` are
/// then turned off, so a stray low address faults instead of reaching the kernel table's slots
/// through the wrong register.
///
/// # Safety
/// `root` must be a valid level-0 table of user mappings, or the kernel root; entries cached
/// under `tag` must belong to `root` unless `flush_all` (the tag allocator's guarantee).
#[inline]
pub unsafe fn load_root_tagged(root: Frame, tag: u16, flush_all: bool) {
    let pa = root.start().as_u64();
    let is_kernel = pa == KERNEL_ROOT.load(Ordering::Relaxed);
    let tag = if TAG_COUNT.load(Ordering::Relaxed) == 0 { UNTAGGED } else { tag };
    let asid = u64::from(tag) << ASID_SHIFT;
    // SAFETY: the kernel half lives in TTBR1 and is untouched, so the running code and stack
    // stay mapped. Order: flush (if asked), new TTBR0 or EPD0, `isb` so later walks use them,
    // then for an untagged view drop what other views left under ASID 0.
    unsafe {
        if flush_all {
            asm!("dsb ishst", "tlbi vmalle1", "dsb nsh", "isb", options(nostack, preserves_flags));
        }
        let mut tcr: u64;
        asm!("mrs {}, tcr_el1", out(reg) tcr, options(nomem, nostack, preserves_flags));
        if is_kernel {
            tcr |= TCR_EPD0;
            asm!("msr tcr_el1, {tcr}", "msr ttbr0_el1, xzr", "isb", tcr = in(reg) tcr, options(nostack, preserves_flags));
        } else {
            tcr &= !TCR_EPD0;
            asm!("msr ttbr0_el1, {ttbr}", "msr tcr_el1, {tcr}", "isb", ttbr = in(reg) pa | asid, tcr = in(reg) tcr, options(nostack, preserves_flags));
            if tag == UNTAGGED && !flush_all {
                asm!("tlbi aside1, {asid}", "dsb nsh", "isb", asid = in(reg) asid, options(nostack, preserves_flags));
            }
        }
    }
}

/// Installs the kernel's own table in `TTBR1_EL1` at boot. `TTBR0_EL1` keeps only the boot
/// device window (the first GiB, device memory, EL1 only) so the console keeps working until
/// `interrupts::init` moves it into the kernel's device window; the first [`load_root`]
/// replaces it.
///
/// # Safety
/// `root` must map the running kernel image, its stack and data exactly where the boot tables
/// do; interrupts must be off.
pub unsafe fn load_kernel_root(root: Frame) {
    let pa = root.start().as_u64();
    KERNEL_ROOT.store(pa, Ordering::Relaxed);
    let (device_window, empty) = super::boot::boot_tables_for_switch();
    // SAFETY: `switch_ttbr1` runs from the boot identity map (TTBR0), so changing TTBR1 under
    // it is safe, and goes through an empty table so no TLB ever holds the boot block and the
    // new page for one address at once (break-before-make). Its physical alias is identity
    // mapped and executable at EL1 by the boot tables; it touches no memory.
    unsafe {
        let alias: unsafe extern "C" fn(u64, u64) = core::mem::transmute(super::boot::physical_alias(switch_ttbr1 as *const () as u64));
        alias(pa, empty);
        asm!(
            "msr ttbr0_el1, {window}",
            "isb",
            "tlbi vmalle1",
            "dsb nsh",
            "isb",
            window = in(reg) device_window,
            options(nostack, preserves_flags)
        );
    }
}

/// The active top-level table: the user table in `TTBR0_EL1`, or the kernel's when no user
/// half is loaded.
pub fn current_root() -> Frame {
    let (ttbr0, ttbr1, tcr): (u64, u64, u64);
    // SAFETY: reads system registers.
    unsafe {
        asm!("mrs {}, ttbr0_el1", "mrs {}, ttbr1_el1", "mrs {}, tcr_el1", out(reg) ttbr0, out(reg) ttbr1, out(reg) tcr, options(nomem, nostack, preserves_flags));
    }
    let address = |ttbr: u64| Frame::containing(PhysAddr::new(ttbr & super::paging::bits::ADDRESS));
    let user = ttbr0 & super::paging::bits::ADDRESS;
    if tcr & TCR_EPD0 != 0 || user == 0 || user == super::boot::boot_tables_for_switch().0 {
        address(ttbr1)
    } else {
        address(ttbr0)
    }
}

/// Invalidates the translation of the page holding `va` (every ASID, every level, so a
/// changed table entry is covered too) on every CPU: `tlbi vaae1is` is broadcast to the
/// inner-shareable domain, and the `dsb ish` after it waits until every CPU has dropped the
/// entry. The kernel calls this for edits of the kernel's own table, which every CPU walks
/// through `TTBR1_EL1` (an unmapped kernel stack, a new mapping); a broadcast costs no
/// interrupt and completes even while the other CPUs run with interrupts off, where an IPI
/// would wait for them.
pub fn flush_page(va: VirtAddr) {
    // SAFETY: TLB maintenance only drops cached translations. The store to the table must be
    // visible to every walker first (dsb ishst), and the invalidation complete on every CPU
    // before the next access (dsb ish; isb).
    unsafe {
        asm!(
            "dsb ishst",
            "tlbi vaae1is, {page}",
            "dsb ish",
            "isb",
            page = in(reg) (va.as_u64() >> crate::addr::PAGE_SHIFT) & ((1 << 44) - 1),
            options(nostack, preserves_flags)
        );
    }
}

/// Invalidates the translation of the page holding `va` (every ASID, every level) on this CPU
/// only. For kernel-table edits whose other CPUs are covered otherwise: a kernel stack slot is
/// reused only after every CPU has flushed its whole TLB since it was freed (the quarantine in
/// `kernel_stack`), so no other CPU can hold a translation of it when it is mapped again. Under
/// `-icount` QEMU runs every CPU in one thread, and a broadcast `tlbi …is` + `dsb ish` issued
/// while another CPU spins on a lock this one holds does not complete there.
pub fn flush_page_here(va: VirtAddr) {
    // SAFETY: as in `flush_page`; the table store is made visible first (dsb ishst).
    unsafe {
        asm!(
            "dsb ishst",
            "tlbi vaae1, {page}",
            "dsb nsh",
            "isb",
            page = in(reg) (va.as_u64() >> crate::addr::PAGE_SHIFT) & ((1 << 44) - 1),
            options(nostack, preserves_flags)
        );
    }
}

/// Invalidates every non-global translation on this CPU. There is no instruction for "every
/// ASID, non-global only", so this drops the (global) kernel entries too; they refill from the
/// kernel table.
pub fn flush_all() {
    // SAFETY: as in `flush_page`.
    unsafe { asm!("dsb ishst", "tlbi vmalle1", "dsb nsh", "isb", options(nostack, preserves_flags)) };
}
