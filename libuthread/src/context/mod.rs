//! Context switching: the per-architecture register window, the switch into the scheduler, and
//! the two ways back into a thread (restore its WINDOW, restore its FULL frame), all in user
//! mode. Every architecture provides the same items in `context/<arch>.rs`; this file selects
//! one and holds what is common.
//!
//! # What is saved, when (DESIGN §7)
//! - A **voluntary** switch (yield, block, exit) happens at a call, so the ABI's caller-saved
//!   registers are dead: only the callee-saved *window* is saved (`switch_out`), and the ThMB
//!   mask becomes `WINDOW`. No kernel entry.
//! - An **involuntary** stop is the kernel's: it writes the full frame into the ThMB (mask
//!   `FULL`). The library never needs to make a FULL save itself: every switch it starts is a
//!   call.
//! - Resuming restores exactly what the mask says (`resume_window`, `resume_full`).
//!
//! # Restartable resume sequences
//! A resume writes LTN (the target ThMB) as its first step, so from there on a kernel stop
//! saves into the target's ThMB although the vCPU is still executing the library's resume code.
//! Such a stop loses nothing: the resume sequences only *read* the ThMB, the window and the
//! library's copy of the full frame (`crate::thmb::Thmb`'s `resume` field) are never written
//! by the kernel, and [`interrupted_resume`] recognises the stop by its instruction pointer so
//! the scheduler simply starts the resume again (like Linux's restartable sequences).
//!
//! # Restartable list edits
//! A thread's own task-record list (`Thmb::records`, `crate::join`) is edited by the thread
//! with plain loads and stores and no critical section (`own_push`, `own_take`): a push
//! is a load of the head, a store of the link, a store of the head; a take a compare, a load,
//! a store. A kernel stop between the first load and the last store would leave a list the
//! scheduler must not take over (the thread, resumed, would finish the edit against a head that
//! is no longer there). Each edit is therefore one `asm!` block that records its range, from
//! its first instruction to just after its committing store, in the section `uthread_restart`
//! (two 32-bit offsets relative to themselves, so the table needs no relocation in a
//! position-independent program); [`restart_point`] finds a stopped PC in it, and the scheduler
//! moves such a thread back to the start of its edit, which then runs again from scratch
//! (`sched::requeue_full`). Nothing before the committing store is visible to anyone but the
//! thread, so running it again is harmless. After that the list is consistent and the
//! scheduler may take it over: a preempted thread's records become threads, so a `join`'s `a`
//! that spins until its `b` has run gets `b` run.

#[cfg(target_arch = "x86_64")]
#[path = "x86_64.rs"]
mod arch;
#[cfg(target_arch = "aarch64")]
#[path = "aarch64.rs"]
mod arch;
#[cfg(target_arch = "riscv64")]
#[path = "riscv64.rs"]
mod arch;

pub use arch::{preserving_call_check, Window};
pub(crate) use arch::{detect_fp, init_window, own_push, own_take, promote_oldest_preserving, set_frame_pc, window_sp};

/// One restartable edit's range in the `uthread_restart` section (see "Restartable list
/// edits"): each offset is relative to the address of the word holding it.
#[repr(C)]
struct RestartEntry {
    start: i32,
    end: i32,
}

/// The `asm!` lines that record the edit between the local labels `2:` (its first instruction)
/// and `3:` (just after its committing store) in the restart table. The entry is linked to the
/// code (`SHF_LINK_ORDER`, to the symbol `<label>_rst` the edit defines at its start, named
/// after one of its `label` operands, which the compiler names uniquely): the linker keeps it
/// exactly when it keeps the function the edit was inlined into. (A table kept whole would keep
/// every function with an edit: `kn_block`, which never forks, grew from 46 to 284 KiB.)
macro_rules! restart_entry {
    ($label:literal) => {
        concat!(
            ".pushsection uthread_restart, \"ao\", %progbits, {", $label, "}_rst\n",
            ".balign 4\n",
            ".long 2b - .\n",
            ".long 3b - .\n",
            ".popsection\n",
        )
    };
}
pub(crate) use restart_entry;

/// Defines a port's `own_push` and `own_take` from its instructions (see "Restartable list
/// edits"). Both get the thread's ThMB in `{me}`, the entry word in `{e}` (a task record's header
/// address + 1, `sched::JOB_TAG`; the header's first word is its link), a scratch register
/// `{t}` and the head word's offset `{head}`; `own_take` jumps to `{miss}` when the head is not
/// `{e}`. Each is recorded in the restart table from its first instruction to just after its
/// committing store (its last instruction). The symbol each defines at its start (named after
/// a label operand, see [`restart_entry`]) is what its table entry is linked to.
macro_rules! own_list_edits {
    (push: [$($push:literal),* $(,)?], take: [$($take:literal),* $(,)?] $(,)?) => {
        /// Pushes the entry `e` on the own record list of `me` (`Thmb::records`): a restartable
        /// edit (see `context`'s "Restartable list edits"), committed by its store of the head.
        ///
        /// # Safety
        /// `me` is the calling thread's ThMB; `e - 1` is a live record header in no list.
        #[inline(always)]
        #[allow(named_asm_labels)] // `{here}_rst`: unique, as the compiler's name of `here` is
        pub(crate) unsafe fn own_push(me: *mut Thmb, e: usize) {
            // SAFETY: per the contract: the head word is the thread's own, the link the record's.
            unsafe {
                core::arch::asm!(
                    "{here}_rst:",
                    "2:",
                    $($push,)*
                    "3:",
                    super::restart_entry!("here"),
                    me = in(reg) me,
                    e = in(reg) e,
                    t = out(reg) _,
                    head = const crate::thmb::RECORDS_OFFSET,
                    // Never jumped to: it only names the entry's symbol (no code results).
                    here = label {},
                    options(nostack, preserves_flags),
                );
            }
        }

        /// Takes the entry `e` off the own record list of `me` if it is the newest entry (the
        /// head becomes its link): a restartable edit committed by that store. False, changing
        /// nothing, if the head is something else.
        ///
        /// # Safety
        /// `me` is the calling thread's ThMB; `e - 1` is a live record header.
        #[inline(always)]
        #[allow(named_asm_labels)] // `{miss}_rst`: unique, as the compiler's name of `miss` is
        pub(crate) unsafe fn own_take(me: *mut Thmb, e: usize) -> bool {
            // SAFETY: per the contract.
            unsafe {
                core::arch::asm!(
                    "{miss}_rst:",
                    "2:",
                    $($take,)*
                    "3:",
                    super::restart_entry!("miss"),
                    me = in(reg) me,
                    e = in(reg) e,
                    t = out(reg) _,
                    head = const crate::thmb::RECORDS_OFFSET,
                    miss = label { return false; },
                    options(nostack),
                );
            }
            true
        }
    };
}
pub(crate) use own_list_edits;

/// The call a fork makes when it sees an idle vCPU, `sched::promote_oldest_record(me)`, through
/// the port's trampoline `libuthread_promote_oldest`, which keeps every general-purpose
/// register but the argument's (and those the call instruction itself writes). The forking
/// function then keeps nothing in callee-saved registers for this rare call: `a`'s arguments
/// stay where they are, and its fast path saves and restores no register for it. The FP/SIMD
/// registers the callee may use are declared clobbered, per target feature (a soft-float
/// target has none), so the trampoline need not save them.
///
/// `preserving_call!(call: "call", arg: "rdi", fixed: [operands], #[cfg] vector: [operands], ...)`
/// defines `promote_oldest_preserving` for a port: one `asm!` per feature set.
macro_rules! preserving_call {
    (@asm $call:literal, $arg:tt, $me:ident, [$($fixed:tt)*], [$($vector:tt)*]) => {
        core::arch::asm!(
            concat!($call, " {f}"),
            f = sym super::raw::libuthread_promote_oldest,
            inout($arg) $me => _,
            $($fixed)*
            $($vector)*
        )
    };
    (
        call: $call:literal,
        arg: $arg:tt,
        fixed: $fixed:tt,
        $(#[$cfg:meta] vector: $vector:tt),+ $(,)?
    ) => {
        /// See `context::preserving_call!`.
        ///
        /// # Safety
        /// As for `sched::promote_oldest_record`.
        #[inline(always)]
        pub(crate) unsafe fn promote_oldest_preserving(me: *mut Thmb) {
            $(
                #[$cfg]
                // SAFETY: the trampoline keeps every other register and the stack as they were
                // (the block's stack pointer is aligned for a call); the callee's contract is
                // the caller's.
                unsafe {
                    super::preserving_call!(@asm $call, $arg, me, $fixed, $vector)
                }
            )+
        }
    };
}
pub(crate) use preserving_call;

/// The directives that open an assembly function `$name` (global, hidden, in a section of its
/// own, aligned to 2^`$align`) and its label; [`asm_fn_end!`] closes it.
macro_rules! asm_fn_start {
    ($name:literal, $align:literal) => {
        concat!(
            ".pushsection .text.", $name, ", \"ax\", %progbits\n",
            ".globl ", $name, "\n",
            ".hidden ", $name, "\n",
            ".type ", $name, ", %function\n",
            ".p2align ", $align, "\n",
            $name, ":",
        )
    };
}
pub(crate) use asm_fn_start;

/// Closes an assembly function opened by [`asm_fn_start!`].
macro_rules! asm_fn_end {
    ($name:literal) => {
        concat!(".size ", $name, ", . - ", $name, "\n", ".popsection")
    };
}
pub(crate) use asm_fn_end;

/// Defines a port's two trampolines from one body (`body`: its `asm!` lines, each ending in a
/// comma, calling `{f}`), both aligned to 2^`align`: `libuthread_promote_oldest(me)`, which
/// calls `sched::promote_oldest_record_c(me)` keeping the registers the port's
/// [`preserving_call!`] promises, and `libuthread_preserving_check`, the same code around the
/// port's `libuthread_clobber_caller_saved` (which writes every register it may), for its
/// `preserving_call_check`.
macro_rules! preserving_trampolines {
    (align: $align:literal, body: [$($body:tt)*] $(,)?) => {
        core::arch::global_asm!(
            super::asm_fn_start!("libuthread_promote_oldest", $align),
            $($body)*
            super::asm_fn_end!("libuthread_promote_oldest"),
            f = sym crate::sched::promote_oldest_record_c,
        );
        core::arch::global_asm!(
            super::asm_fn_start!("libuthread_preserving_check", $align),
            $($body)*
            super::asm_fn_end!("libuthread_preserving_check"),
            f = sym libuthread_clobber_caller_saved,
        );
        extern "C" {
            fn libuthread_clobber_caller_saved();
            fn libuthread_preserving_check();
        }
    };
}
pub(crate) use preserving_trampolines;

extern "C" {
    // The linker's bounds of the restart table (every port's `global_asm!` puts an empty entry
    // there, linked to its context-switch code, so the section exists in every program that
    // can call `restart_point`).
    static __start_uthread_restart: [RestartEntry; 0];
    static __stop_uthread_restart: [RestartEntry; 0];
}

/// If `pc` is inside a restartable edit of an own record list (a kernel stop before its
/// committing store), the address the edit starts at. See "Restartable list edits".
pub fn restart_point(pc: u64) -> Option<u64> {
    let pc = pc as usize;
    let mut at = (&raw const __start_uthread_restart) as usize;
    let stop = (&raw const __stop_uthread_restart) as usize;
    while at < stop {
        // SAFETY: inside the table the linker put together, of whole entries.
        let entry = unsafe { &*(at as *const RestartEntry) };
        let start = at.wrapping_add_signed(entry.start as isize);
        let end = (at + 4).wrapping_add_signed(entry.end as isize);
        if (start..end).contains(&pc) {
            return Some(start as u64);
        }
        at += core::mem::size_of::<RestartEntry>();
    }
    None
}

use core::sync::atomic::AtomicUsize;

use crate::prim::{AtomicBool, Ordering};
use crate::sched::Vcpu;
use crate::thmb::Thmb;

/// The function a stack switch lands in: `entry(a0, a1)`, never returning.
pub(crate) type Entry = unsafe extern "C" fn(usize, usize) -> !;

/// What a voluntary switch saves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaveMode {
    /// Only the ABI's callee-saved window (the default; DESIGN §7).
    Window,
    /// The baseline kept for comparison: every register and the FP/SIMD state, as a library
    /// without register windows saves at every switch; the thread is then resumed by the FULL
    /// path.
    Full,
}

/// What every voluntary switch tests, folded into one word so that the scheduler's direct
/// switch decides with one load whether anything is unusual ([`switch_flags`] == 0 is the
/// common case): [`FLAG_FULL_SAVE`] (this module's) and [`FLAG_SHUTDOWN`] (the scheduler's).
/// The scheduler's fast path reads a copy of it in each vCPU (`sched::mirror_switch_flag`,
/// updated by [`set_switch_flag`]), ORed with that vCPU's own words (`Vcpu::unusual`): a word,
/// as they are.
static SWITCH_FLAGS: AtomicUsize = AtomicUsize::new(0);

/// [`SWITCH_FLAGS`]: voluntary switches use the full-save baseline.
pub(crate) const FLAG_FULL_SAVE: usize = 1;
/// [`SWITCH_FLAGS`]: the runtime is shutting down (a mirror of the scheduler's `SHUTDOWN`, set
/// and cleared right after it).
pub(crate) const FLAG_SHUTDOWN: usize = 2;

/// The [`SWITCH_FLAGS`] (a Relaxed look, as the scheduler's other fast-path looks).
#[inline(always)]
pub(crate) fn switch_flags() -> usize {
    SWITCH_FLAGS.load(Ordering::Relaxed)
}

/// Sets or clears `flag` in [`SWITCH_FLAGS`], leaving the others as they are.
pub(crate) fn set_switch_flag(flag: usize, on: bool) {
    if on {
        SWITCH_FLAGS.fetch_or(flag, Ordering::Relaxed);
    } else {
        SWITCH_FLAGS.fetch_and(!flag, Ordering::Relaxed);
    }
    // The scheduler's fast path reads per-vCPU copies.
    crate::sched::mirror_switch_flag(flag, on);
}

/// Whether voluntary switches use the full-save baseline.
#[inline(always)]
fn full_save() -> bool {
    switch_flags() & FLAG_FULL_SAVE != 0
}

/// The mode [`set_save_mode`] chose (the program's choice).
static CHOSEN_FULL: AtomicBool = AtomicBool::new(false);

/// Whether user threads have performance counters open (`sys::perf_open`): then voluntary
/// switches save full frames, so that every resume goes through `prepare_slow`, which tells the
/// kernel which user thread runs (the window path stays free of that test).
static COUNTING: AtomicBool = AtomicBool::new(false);

/// Chooses what voluntary switches save from now on (for benchmarks; `Window` is the
/// library's normal mode). Threads already switched out resume by what they saved. While user
/// threads have performance counters open, switches save full frames whatever the choice.
pub fn set_save_mode(mode: SaveMode) {
    CHOSEN_FULL.store(mode == SaveMode::Full, Ordering::Relaxed);
    set_switch_flag(FLAG_FULL_SAVE, mode == SaveMode::Full || COUNTING.load(Ordering::Relaxed));
}

/// User-thread counters opened (the first) or all closed (see [`COUNTING`]).
#[cfg_attr(not(target_os = "none"), allow(dead_code))]
pub(crate) fn set_counting(on: bool) {
    COUNTING.store(on, Ordering::Relaxed);
    set_switch_flag(FLAG_FULL_SAVE, on || CHOSEN_FULL.load(Ordering::Relaxed));
}

/// What voluntary switches save now.
pub fn save_mode() -> SaveMode {
    if full_save() {
        SaveMode::Full
    } else {
        SaveMode::Window
    }
}

/// Bytes a voluntary switch stores in `mode` on this machine.
pub fn bytes_saved(mode: SaveMode) -> usize {
    let (window, full) = arch::bytes_saved();
    match mode {
        SaveMode::Window => window,
        SaveMode::Full => full,
    }
}

/// Saves the caller's window into `from` (mask `WINDOW`), moves to `stack_top` and calls
/// `entry(a0, a1)` there. Returns when `from` is resumed by [`resume_window`].
///
/// # Safety
/// `from` is a valid ThMB nobody else touches until this call has moved off the caller's stack;
/// `stack_top` is the 16-byte-aligned top of a stack nobody else uses; `entry` never returns.
#[inline(always)]
pub(crate) unsafe fn switch_out(from: *mut Thmb, stack_top: usize, entry: Entry, a0: usize, a1: usize) {
    if full_save() {
        // SAFETY: forwarded contract (the full save writes `from.resume` and its FP area,
        // which the thread set up when it first ran).
        unsafe { raw::libuthread_switch_out_full(from, stack_top, entry, a0, a1) }
    } else {
        // SAFETY: forwarded contract.
        unsafe { raw::libuthread_switch_out(from, stack_top, entry, a0, a1) }
    }
}

/// As [`switch_out`], always saving only the window (root contexts have no FP area).
///
/// # Safety
/// As [`switch_out`].
#[inline(always)]
pub(crate) unsafe fn switch_out_window(from: *mut Thmb, stack_top: usize, entry: Entry, a0: usize, a1: usize) {
    // SAFETY: forwarded contract.
    unsafe { raw::libuthread_switch_out(from, stack_top, entry, a0, a1) }
}

/// Switches from the calling thread straight to `to`, with no stack hop: saves the caller's
/// window into `from` (its FP part if FP is live on `vcpu`), publishes it (mask `WINDOW`,
/// a release store: whoever took `from` off a queue waits for it, see
/// `sched::scheduler::MASK_IN_FLIGHT`) and resumes `to` from its window with LTN = `to`.
/// Returns when `from` is resumed.
///
/// # Safety
/// `from` is the calling thread, running on `vcpu` with LTN = 0; `to` holds a window as for
/// [`resume_window`] and is owned by the caller; nobody resumes `from` before its mask says
/// `WINDOW`.
#[inline(always)]
pub(crate) unsafe fn switch_window(from: *mut Thmb, to: *mut Thmb, vcpu: *const Vcpu) {
    // SAFETY: forwarded contract.
    unsafe { arch::switch_window(from, to, vcpu) }
}

/// Where a full frame resumes.
///
/// # Safety
/// `frame` points to a live frame (read volatile: the kernel writes it).
pub(crate) unsafe fn frame_pc(frame: *const tsumugi_abi::kn::FullFrame) -> u64 {
    // SAFETY: forwarded contract.
    unsafe { arch::frame_pc(frame) }
}

/// Moves to `stack_top` and calls `entry(a0, a1)` there, saving nothing.
///
/// # Safety
/// As [`switch_out`]; whatever ran on the current stack is abandoned.
#[inline(always)]
pub(crate) unsafe fn call_on_stack(stack_top: usize, entry: Entry, a0: usize, a1: usize) -> ! {
    // SAFETY: forwarded contract.
    unsafe { raw::libuthread_call_on_stack(stack_top, entry, a0, a1) }
}

/// Resumes `to` from its saved window, with LTN = `ltn` (the thread itself, or 0 for a root
/// context).
///
/// # Safety
/// `to` holds a window saved by [`switch_out`] (or built by [`init_window`]) whose stack is
/// intact and owned by the caller now; the caller is in a critical section.
pub(crate) unsafe fn resume_window(to: *mut Thmb, ltn: *mut Thmb) -> ! {
    // SAFETY: forwarded contract.
    unsafe { raw::libuthread_resume_window(to, ltn) }
}

/// Resumes `to` from the library's copy of its full frame (`Thmb::resume`), with LTN = `to`;
/// with `fp`, its FP/SIMD registers first, from its FP area (format `to.header.fp_format`).
///
/// # Safety
/// `to.resume` holds a frame saved for `to` (by the kernel, or by the full-save baseline),
/// whose stack is intact; with `fp`, its FP area holds a state saved with it; the caller is in
/// a critical section (LTN = 0).
pub(crate) unsafe fn resume_full(to: *mut Thmb, fp: bool) -> ! {
    // SAFETY: `to` is live; the format word was written with the FP area.
    let format = if fp { unsafe { core::ptr::read_volatile(&raw const (*to).header.fp_format) } } else { 0 };
    // Hosted, LTN is not GS base; the full resume still addresses the frame through it.
    #[cfg(not(target_os = "none"))]
    crate::platform::set_full_resume_base(to);
    // SAFETY: forwarded contract.
    unsafe { raw::libuthread_resume_full(to, format) }
}

/// The instruction ranges of the two resume sequences (see [`interrupted_resume`]).
fn resume_ranges() -> (core::ops::Range<usize>, core::ops::Range<usize>) {
    use raw::*;
    (
        libuthread_resume_window_start as *const () as usize..libuthread_resume_window_end as *const () as usize,
        libuthread_resume_full as *const () as usize..libuthread_resume_full_end as *const () as usize,
    )
}

/// Which resume sequence a kernel stop at `rip` interrupted, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interrupted {
    /// A window resume: the thread's window is intact; resume it again.
    Window,
    /// A full resume: the library's copy of the full frame is intact; resume it again.
    Full,
}

/// Recognises a kernel stop inside a resume sequence by its instruction pointer.
pub fn interrupted_resume(rip: u64) -> Option<Interrupted> {
    let rip = rip as usize;
    let (window, full) = resume_ranges();
    if window.contains(&rip) {
        Some(Interrupted::Window)
    } else if full.contains(&rip) {
        Some(Interrupted::Full)
    } else {
        None
    }
}

/// The assembly's symbols: every port's `context/<arch>.rs` defines these, with these
/// signatures (its module table says what each does).
pub(crate) mod raw {
    use super::Entry;
    use crate::sched::Vcpu;
    use crate::thmb::Thmb;

    // The assembly touches only the `#[repr(C)]` prefix of a ThMB (header, window, vCPU word,
    // resume copy), whose offsets each port checks at compile time; the rest of the type need
    // not be FFI-safe.
    #[allow(improper_ctypes)]
    extern "C" {
        /// See the module table.
        pub(crate) fn libuthread_switch_out(from: *mut Thmb, stack_top: usize, entry: Entry, a0: usize, a1: usize);
        /// `sched::promote_oldest_record_c(me)`, preserving the caller's registers (see
        /// `promote_oldest_preserving`; not an `extern "C"` callee).
        pub(crate) fn libuthread_promote_oldest(me: *mut Thmb);
        /// See the module table.
        pub(crate) fn libuthread_switch_window(from: *mut Thmb, to: *mut Thmb, vcpu: *const Vcpu);
        /// See the module table.
        pub(crate) fn libuthread_call_on_stack(stack_top: usize, entry: Entry, a0: usize, a1: usize) -> !;
        /// See the module table.
        pub(crate) fn libuthread_resume_window(to: *mut Thmb, ltn: *mut Thmb) -> !;
        /// Start of the window resume sequences, the direct switch's included (a label).
        pub(crate) fn libuthread_resume_window_start();
        /// End of the window resume sequences (a label, not a function).
        pub(crate) fn libuthread_resume_window_end();
        /// See the module table.
        pub(crate) fn libuthread_resume_full(to: *mut Thmb, fp_format: u64) -> !;
        /// See the module table.
        pub(crate) fn libuthread_switch_out_full(from: *mut Thmb, stack_top: usize, entry: Entry, a0: usize, a1: usize);
        /// End of the full resume sequence (a label, not a function).
        pub(crate) fn libuthread_resume_full_end();
        /// A new thread's first instruction (jumped to, never called from Rust).
        pub(crate) fn libuthread_thread_start();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The restart table as [`restart_point`] reads it: the ranges of the edits in this binary.
    fn ranges() -> Vec<(usize, usize)> {
        let mut at = (&raw const __start_uthread_restart) as usize;
        let stop = (&raw const __stop_uthread_restart) as usize;
        let mut out = Vec::new();
        while at < stop {
            // SAFETY: inside the table.
            let entry = unsafe { &*(at as *const RestartEntry) };
            out.push((at.wrapping_add_signed(entry.start as isize), (at + 4).wrapping_add_signed(entry.end as isize)));
            at += core::mem::size_of::<RestartEntry>();
        }
        out
    }

    #[test]
    fn restart_points_cover_each_edit_up_to_its_commit() {
        // A push and a take, so that this binary has both edits.
        let mut me = crate::thmb::Thmb::blank();
        let me = &raw mut me;
        let record = [0usize; 2];
        let e = &raw const record as usize | 1;
        // SAFETY: `me` is a blank ThMB nobody else sees; the "record" is two words of ours.
        unsafe {
            own_push(me, e);
            assert_eq!((*me).records.get(), e);
            assert!(own_take(me, e));
            assert_eq!((*me).records.get(), 0);
            assert!(!own_take(me, e), "a take of an entry that is not the head changes nothing");
        }
        let edits: Vec<_> = ranges().into_iter().filter(|(start, end)| start < end).collect();
        // The empty entry every port's assembly adds, plus at least one push and one take.
        assert!(edits.len() >= 2, "restart table: {edits:x?}");
        for (start, end) in edits {
            // Every instruction of an edit up to its committing store restarts it; the address
            // after that store (the next instruction) does not (edits never touch).
            assert_eq!(restart_point(start as u64), Some(start as u64));
            assert_eq!(restart_point((end - 1) as u64), Some(start as u64));
            assert_ne!(restart_point(end as u64), Some(start as u64));
            // The edit's code is the asm itself: at most a handful of instructions.
            assert!(end - start <= 32, "an edit of {} bytes", end - start);
        }
        assert_eq!(restart_point(restart_point as *const () as u64), None);
    }

    #[test]
    fn the_preserving_call_keeps_every_register_it_promises() {
        // Fails if the trampoline misses a register: `libuthread_clobber_caller_saved` writes
        // them all.
        assert_eq!(preserving_call_check(), Vec::<&str>::new());
    }

    #[test]
    fn a_fork_seeing_an_idle_vcpu_with_nothing_left_to_promote_does_nothing() {
        // The fork's rare path with an own list the kernel emptied meanwhile (see
        // `sched::promote_oldest_record`): it must leave the list empty and the thread running.
        crate::run(1, || {
            let me = crate::platform::ltn();
            // SAFETY: `me` is the calling thread, its own list empty.
            unsafe {
                assert_eq!((*me).records.get(), 0);
                promote_oldest_preserving(me);
                assert_eq!((*me).records.get(), 0);
            }
            assert_eq!(crate::platform::ltn(), me);
        });
    }
}
