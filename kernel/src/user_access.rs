//! The kernel's copies to and from the running thread's memory, through the page table the CPU
//! has loaded, with fault fix-up (`arch::usercopy`): a fault in the access is an error, never a
//! kernel panic.
//!
//! The callers check the range against the thread's view first (rights, user half, backing);
//! the page table then enforces the same rights during the copy. The two can disagree only
//! while the view changes (a grant or revoke by another thread, whose reload IPI waits until
//! this CPU leaves the kernel): then the copy faults, these functions load the thread's current
//! root and try once more, and a second fault is the caller's error (`EFAULT` for syscalls) —
//! the semantics of Linux `put_user` racing `munmap`.

pub use arch::usercopy::UserFault;

/// Copies `bytes` to user address `dst` of the running thread.
pub fn copy_out(dst: u64, bytes: &[u8]) -> Result<(), UserFault> {
    // SAFETY: called from a user thread's kernel side (syscall, trap), so its view's table —
    // whose user half holds only that view's user mappings — is the one loaded.
    let first = unsafe { arch::usercopy::copy_to_user(dst, bytes) };
    if first.is_ok() || !crate::sched::scheduler::reload_current_root() {
        return first;
    }
    // SAFETY: as above, with the thread's current root now loaded.
    unsafe { arch::usercopy::copy_to_user(dst, bytes) }
}

/// Copies `out.len()` bytes from user address `src` of the running thread.
pub fn copy_in(out: &mut [u8], src: u64) -> Result<(), UserFault> {
    // SAFETY: as in `copy_out`.
    let first = unsafe { arch::usercopy::copy_from_user(out, src) };
    if first.is_ok() || !crate::sched::scheduler::reload_current_root() {
        return first;
    }
    // SAFETY: as in `copy_out`.
    unsafe { arch::usercopy::copy_from_user(out, src) }
}

/// Most pages [`mapped_for`] walks before it leaves the answer to the view space.
const QUICK_PAGES: u64 = 4;

/// The first and last page of `[addr, addr + len)` (`len` > 0) if the quick checks may answer
/// for it: inside the user half and at most [`QUICK_PAGES`] pages; `None` otherwise.
#[inline(always)]
fn quick_range(addr: u64, len: u64) -> Option<(u64, u64)> {
    const PAGE: u64 = arch::addr::PAGE_SIZE;
    let end = addr.checked_add(len)?;
    if end > arch::layout::USER_END {
        return None;
    }
    let (first, last) = (addr & !(PAGE - 1), (end - 1) & !(PAGE - 1));
    ((last - first) / PAGE < QUICK_PAGES).then_some((first, last))
}

/// Whether the page table loaded on this CPU — the running thread's view — maps every page of
/// `[addr, addr + len)` as user memory with `need`: the quick answer for the checks syscalls
/// make before they copy or block, without the view-space lock. `false` means only "not known
/// here" (a zero-on-touch page not yet backed, a page another view filled, a long range, a
/// range outside the user half): then the caller asks the view space, which also backs pages.
///
/// A yes can be stale only as the copy itself can be (a revoke on another CPU whose reload this
/// CPU has not yet taken): the copy goes through the same table and its fix-up turns a fault
/// into `EFAULT`, so nothing is lost by answering from the table.
pub fn mapped_for(addr: u64, len: u64, need: arch::mapping::MapFlags) -> bool {
    use crate::mm::kernel_space::LiveDirectMap;
    use crate::mm::page_table::PageTable;
    use arch::addr::VirtAddr;
    const PAGE: u64 = arch::addr::PAGE_SIZE;
    if len == 0 {
        return true;
    }
    let Some((first, last)) = quick_range(addr, len) else { return false };
    let Some(mem) = LiveDirectMap::get() else { return false };
    // SAFETY: the root loaded on this CPU is a live table (a CPU's loaded view is never freed
    // while loaded: `drop_stale_views`); this only reads aligned entries, which a concurrent
    // edit (a page backed on another CPU) replaces whole.
    let table = unsafe { PageTable::<arch::PageFormat>::from_root(arch::tlb::current_root()) };
    let want = need | arch::mapping::MapFlags::USER;
    let mut page = first;
    loop {
        match table.leaf_flags(&mem, VirtAddr::new(page)) {
            Some(flags) if flags.contains(want) => {}
            _ => return false,
        }
        if page == last {
            return true;
        }
        page += PAGE;
    }
}

/// Whether the running thread may write every page of `[addr, addr + len)` now, asked of the
/// page table loaded on this CPU by writing to it: one atomic compare-and-swap per page that
/// stores back what the word held (`arch::usercopy::cmpxchg_u64` of 0 with 0: memory is
/// unchanged, but the store is checked as any store is), so the hardware answers rather than
/// a walk of the table ([`mapped_for`]'s four levels). `false` means only "not known here", as
/// for [`mapped_for`] (a page not yet backed, a long range, outside the user half): then the
/// caller asks the view space. For the check a blocking call makes before it blocks.
///
/// A yes can be stale only as [`mapped_for`]'s can (the copy checks again); a probe racing the
/// program's own stores to the word loses none of them (it is atomic and stores what it read).
#[inline]
pub fn writable_now(addr: u64, len: u64) -> bool {
    const PAGE: u64 = arch::addr::PAGE_SIZE;
    let end = addr.wrapping_add(len);
    // The common case, inline: a buffer inside one page of the user half, one probe.
    if len != 0 && end > addr && end <= arch::layout::USER_END && (addr ^ (end - 1)) < PAGE {
        // SAFETY: as in `writable_pages`.
        return unsafe { arch::usercopy::cmpxchg_u64(addr & !7, 0, 0) }.is_ok();
    }
    writable_pages(addr, len)
}

/// [`writable_now`] of any range: a probe per page.
#[inline(never)]
fn writable_pages(addr: u64, len: u64) -> bool {
    const PAGE: u64 = arch::addr::PAGE_SIZE;
    if len == 0 {
        return true;
    }
    let Some((_, last)) = quick_range(addr, len) else { return false };
    // The aligned word holding `addr` (same page), then the first word of each later page.
    let mut word = addr & !7;
    loop {
        // SAFETY: called from a user thread's kernel side (a syscall), so its view's table —
        // whose user half holds only that view's user mappings — is the one loaded; the word
        // is aligned and in the user half (checked above); a fault is an error, not a panic.
        if unsafe { arch::usercopy::cmpxchg_u64(word, 0, 0) }.is_err() {
            return false;
        }
        let next = (word & !(PAGE - 1)) + PAGE;
        if next > last {
            return true;
        }
        word = next;
    }
}
