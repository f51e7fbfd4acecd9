//! Lazy FP/SIMD switching. The kernel neither saves nor restores FP state on a thread switch:
//! it turns FP access off (unless the next thread already owns this CPU's FP registers) and
//! saves the previous owner's registers only when another thread touches FP (the FP-disabled
//! trap). Each CPU has one FP owner; a thread's live registers may stay on a CPU it left, and
//! if it runs on another CPU and touches FP there, that CPU asks the first to save them
//! (an inter-processor request, served at once if the first is waiting itself).
//!
//! **Adaptive** (the default): a thread that took the FP-disabled trap in each of its last
//! [`HOT`] time slices (its last one: `HOT` is 1) gets its registers loaded at the switch
//! instead (no trap), as Linux's `fpu_counter` did; a thread that runs a slice without touching
//! FP goes back to lazy. While it is loaded eagerly it cannot show whether it still uses FP, so
//! a timer tick that finds it running sets its count back to 0: it is re-tested (one trap, then
//! eager again if it still uses FP) — work on the tick, not on the switch path. So the kernel
//! pays the trap only for occasional FP users and the eager save/restore only for steady ones.
//!
//! Why one slice and not a few: the switch paths of adaptive (hot thread) and eager are the
//! same instructions, so every trap adaptive takes beyond eager's one first-use trap is a pure
//! loss against eager. With `HOT` = 3 each FP thread paid two such traps to warm up (and three
//! at each re-test), which put adaptive above eager on the `fp_switch` row `8_of_8_fp`
//! (aarch64 559 vs 557, riscv64 711 vs 707 per switch); with 1 it equals eager there. The price
//! is that a thread that touched FP in one slice is loaded eagerly until a tick re-tests it.
//!
//! `fpu=lazy` (always lazy) and `fpu=eager` (save and restore at every switch) are kept as
//! baselines for comparison.

use alloc::alloc::{alloc_zeroed, dealloc, Layout};
use alloc::sync::Arc;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicUsize, Ordering};
use arch::sync::Mutex;
use tsumugi_abi::stats::Counter;

use crate::sched::scheduler::{self, MAX_CPUS};
use crate::thread::Thread;

/// `Thread::fp_live_on` of a thread whose registers are on no CPU.
pub const NOWHERE: usize = usize::MAX;

/// A thread's FP save area (aligned as the save instructions need).
pub struct FpArea {
    ptr: *mut u8,
    layout: Layout,
}

// SAFETY: the area is plain memory owned by one thread's record, touched under its lock.
unsafe impl Send for FpArea {}

impl FpArea {
    fn new() -> Option<FpArea> {
        let layout = Layout::from_size_align(arch::fpu::area_size(), arch::fpu::AREA_ALIGN).ok()?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        (!ptr.is_null()).then_some(FpArea { ptr, layout })
    }
}

impl Drop for FpArea {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr, self.layout) };
    }
}

/// Per-thread FP state, kept in the thread record.
pub struct ThreadFp {
    /// Saved registers (made at the first save).
    area: Mutex<Option<FpArea>>,
    /// The CPU whose registers hold this thread's live state, or [`NOWHERE`].
    live_on: AtomicUsize,
    /// Whether its first FP use was reported to its program (`notify::note_fp_use`).
    reported: AtomicBool,
    /// Whether it ever had FP state (set when it first takes the registers; never cleared).
    used: AtomicBool,
    /// Consecutive slices that used FP (adaptive mode), counted by its FP-disabled traps up to
    /// [`HOT`]; a timer tick that finds it hot and running sets it back to 0 (see [`tick`]).
    streak: AtomicU8,
    /// It took the FP-disabled trap since it last started running.
    trapped: AtomicBool,
}

impl ThreadFp {
    /// No state yet.
    pub const fn new() -> Self {
        ThreadFp {
            area: Mutex::new(None),
            live_on: AtomicUsize::new(NOWHERE),
            reported: AtomicBool::new(false),
            used: AtomicBool::new(false),
            streak: AtomicU8::new(0),
            trapped: AtomicBool::new(false),
        }
    }
}

impl Default for ThreadFp {
    fn default() -> Self {
        Self::new()
    }
}

/// One CPU's FP bookkeeping.
struct CpuFp {
    /// The thread whose registers are loaded here (a leaked `Arc`), or null.
    owner: AtomicPtr<Thread>,
    /// Another CPU asks this one to save its owner's registers.
    request: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const CPU_FP: CpuFp = CpuFp { owner: AtomicPtr::new(core::ptr::null_mut()), request: AtomicBool::new(false) };
static CPUS: [CpuFp; MAX_CPUS] = [CPU_FP; MAX_CPUS];
/// How FP state follows threads across switches (`fpu=` boot option).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// Lazy, except eager for threads that used FP in their last slices (the default).
    Adaptive = 0,
    /// Always lazy: every thread traps at its first FP use after a switch to another FP user.
    Lazy = 1,
    /// Save and restore at every switch (the baseline).
    Eager = 2,
}

impl Mode {
    /// The name the boot option and the banner use.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Adaptive => "adaptive",
            Mode::Lazy => "lazy",
            Mode::Eager => "eager",
        }
    }
}

/// Slices in a row with FP use after which a thread's registers are loaded at the switch (see
/// the module comment for why it is 1).
pub const HOT: u8 = 1;

static MODE: AtomicU8 = AtomicU8::new(Mode::Adaptive as u8);

/// Chooses the switching mode (boot).
pub fn set_mode(mode: Mode) {
    MODE.store(mode as u8, Ordering::Relaxed);
}

/// The switching mode.
pub fn mode() -> Mode {
    match MODE.load(Ordering::Relaxed) {
        1 => Mode::Lazy,
        2 => Mode::Eager,
        _ => Mode::Adaptive,
    }
}

/// Whether the eager baseline is on.
pub fn eager() -> bool {
    mode() == Mode::Eager
}

fn counters() -> &'static crate::stats::Counters {
    &scheduler::this_cpu().counters
}

/// What a port's `arch::fpu::save` reports. A port whose hardware tracks whether the registers
/// changed since they were loaded (riscv64 `sstatus.FS`) skips the store when they did not and
/// returns whether it stored; a port that always stores returns `()`.
trait SaveOutcome {
    /// Whether the registers were stored.
    fn stored(self) -> bool;
}

impl SaveOutcome for () {
    fn stored(self) -> bool {
        true
    }
}

impl SaveOutcome for bool {
    fn stored(self) -> bool {
        self
    }
}

/// Saves the live FP registers into `area` (the owner's) and counts the save, or the save the
/// port found unnecessary.
fn save_into(area: &FpArea) {
    // SAFETY: the area has the size and alignment the save instruction needs; the callers have
    // turned FP access on.
    let stored = unsafe { arch::fpu::save(area.ptr) }.stored();
    counters().bump(if stored { Counter::FpSaves } else { Counter::FpSavesSkipped });
}

/// Saves the registers of this CPU's owner into its area and forgets the owner. FP access
/// is left on.
fn save_owner(cpu: usize) {
    let owner = CPUS[cpu].owner.swap(core::ptr::null_mut(), Ordering::AcqRel);
    if owner.is_null() {
        return;
    }
    // SAFETY: `owner` is a leaked Arc taken out of the slot; we own that count now.
    let owner = unsafe { Arc::from_raw(owner) };
    arch::fpu::enable();
    {
        let mut area = owner.fp.area.lock();
        if area.is_none() {
            *area = FpArea::new();
        }
        if let Some(a) = area.as_ref() {
            save_into(a);
        }
    }
    owner.fp.live_on.store(NOWHERE, Ordering::Release);
}

/// Whether `t` has ever used FP: its registers are live on some CPU, or saved in its area.
pub fn has_used_fp(t: &Thread) -> bool {
    t.fp.used.load(Ordering::Acquire)
}

/// Serves another CPU's request to save this CPU's owner (from the IPI or while spinning).
pub fn serve_request() {
    let cpu = arch::cpu::cpu_index();
    if CPUS[cpu].request.swap(false, Ordering::AcqRel) {
        save_owner(cpu);
        arch::fpu::disable();
        // The thread running here (if it was the owner) traps at its next FP use and gets its
        // registers back from the area.
    }
}

/// Makes sure `t`'s live registers are in its area (asking the CPU that holds them).
fn pull(t: &Thread) {
    let me = arch::cpu::cpu_index();
    loop {
        let on = t.fp.live_on.load(Ordering::Acquire);
        if on == NOWHERE || on == me {
            return;
        }
        CPUS[on].request.store(true, Ordering::Release);
        crate::smp::send_fpu_save(on);
        while t.fp.live_on.load(Ordering::Acquire) == on {
            serve_request();
            arch::cpu::spin_hint();
        }
    }
}

/// Self-test hook (`selftest::reload_wait_serves_fp_saves`): [`pull`], as an FP trap on this
/// CPU does for a thread whose registers another CPU holds.
pub fn pull_registers(t: &Thread) {
    pull(t);
}

/// Self-test hook: makes the running thread the owner of this CPU's FP registers, as its
/// first FP trap would.
pub fn own_registers_here() {
    let Some(me) = scheduler::current() else { return };
    save_owner(arch::cpu::cpu_index());
    take_ownership(&me);
}

/// Whether `t`'s registers are in its area rather than live on some CPU.
pub fn registers_saved(t: &Thread) -> bool {
    t.fp.live_on.load(Ordering::Acquire) == NOWHERE
}

/// Loads `t`'s registers here (from its area, or fresh) and makes it the owner.
fn take_ownership(t: &Arc<Thread>) {
    let cpu = arch::cpu::cpu_index();
    pull(t);
    arch::fpu::enable();
    let restored = {
        let area = t.fp.area.lock();
        match area.as_ref() {
            // SAFETY: a state saved by `save` into an area of the right size and alignment.
            Some(a) => unsafe {
                arch::fpu::restore(a.ptr);
                true
            },
            None => false,
        }
    };
    if restored {
        counters().bump(Counter::FpRestores);
    } else {
        arch::fpu::reset();
    }
    t.fp.used.store(true, Ordering::Release);
    t.fp.live_on.store(cpu, Ordering::Release);
    CPUS[cpu].owner.store(Arc::into_raw(t.clone()) as *mut Thread, Ordering::Release);
}

/// The FP-disabled trap: the running thread touched FP. Saves the previous owner (if any),
/// loads this thread's registers, and lets it retry the instruction.
pub fn on_trap() {
    counters().bump(Counter::FpTraps);
    let cpu = arch::cpu::cpu_index();
    let Some(me) = scheduler::current() else { return };
    if CPUS[cpu].owner.load(Ordering::Acquire) == Arc::as_ptr(&me) as *mut Thread {
        arch::fpu::enable();
        return;
    }
    save_owner(cpu);
    take_ownership(&me);
    if !me.fp.trapped.swap(true, Ordering::Relaxed) {
        let s = me.fp.streak.load(Ordering::Relaxed);
        me.fp.streak.store(s.saturating_add(1).min(HOT), Ordering::Relaxed);
    }
    if !me.fp.reported.swap(true, Ordering::Relaxed) {
        crate::notify::note_fp_use(&me);
    }
}

/// At a switch to `next` on this CPU: FP access on only if `next` owns the registers here
/// (lazy), or save/restore now (eager, for threads that used FP).
///
/// Inlined into the kernel switch: a thread that never used FP needs nothing but the lazy trap,
/// in every mode but eager (which saves the owner's registers now), so the common switch
/// decides on two loads without a call. (It cannot own this CPU's registers: ownership comes
/// with the first FP trap, which marks it.)
#[inline(always)]
pub fn switch_to(next: &Arc<Thread>) {
    if !next.fp.used.load(Ordering::Acquire) && MODE.load(Ordering::Relaxed) != Mode::Eager as u8 {
        arch::fpu::disable();
        return;
    }
    switch_to_slow(next);
}

/// [`switch_to`] for an FP user, or any thread in eager mode.
#[inline(never)]
fn switch_to_slow(next: &Arc<Thread>) {
    if !next.fp.used.load(Ordering::Acquire) {
        // Eager mode (the fast path took every other case): the owner's registers are saved
        // now.
        save_owner(arch::cpu::cpu_index());
        arch::fpu::disable();
        return;
    }
    let cpu = arch::cpu::cpu_index();
    let owner = CPUS[cpu].owner.load(Ordering::Acquire);
    if owner == Arc::as_ptr(next) as *mut Thread {
        arch::fpu::enable();
        return;
    }
    // An FP user. The default mode is tested first; the baselines pay the extra compare.
    let mode = mode();
    if mode == Mode::Adaptive {
        // A steady FP user: load its registers now rather than at a trap.
        let streak = next.fp.streak.load(Ordering::Relaxed);
        if streak >= HOT {
            save_owner(cpu);
            take_ownership(next);
            return;
        }
        // Its last slice did not touch FP: the streak is broken.
        if !next.fp.trapped.swap(false, Ordering::Relaxed) {
            next.fp.streak.store(0, Ordering::Relaxed);
        }
    } else if mode == Mode::Eager {
        save_owner(cpu);
        take_ownership(next);
        return;
    }
    arch::fpu::disable();
}

/// The timer tick, with `current` running (adaptive mode): a thread loaded eagerly is made to
/// prove again that it uses FP (see the module comment).
pub fn tick(current: &Thread) {
    if current.fp.streak.load(Ordering::Relaxed) >= HOT {
        current.fp.streak.store(0, Ordering::Relaxed);
    }
}

/// A thread ended on this CPU: if it owns the registers here, forget it (nothing to save).
pub fn thread_ended(t: &Thread) {
    let cpu = arch::cpu::cpu_index();
    let owner = CPUS[cpu].owner.load(Ordering::Acquire);
    if owner == t as *const Thread as *mut Thread {
        let p = CPUS[cpu].owner.swap(core::ptr::null_mut(), Ordering::AcqRel);
        if !p.is_null() {
            // SAFETY: a leaked Arc taken out of the slot.
            drop(unsafe { Arc::from_raw(p) });
        }
        arch::fpu::disable();
    }
}

/// Calls `f` with the running thread's FP/SIMD state in the port's save format (for a FULL save
/// into its ThMB), or returns `None` if the thread has never used FP. Live registers are saved
/// first (the thread stays their owner); registers left on another CPU are fetched. Inlined:
/// the FP part of a stop's fast save (`notify::save`) runs it on every stop of an FP user.
#[inline(always)]
pub fn with_current_state<R>(f: impl FnOnce(&[u8]) -> R) -> Option<R> {
    let cpu = arch::cpu::cpu_index();
    let me = scheduler::current()?;
    if CPUS[cpu].owner.load(Ordering::Acquire) == Arc::as_ptr(&me) as *mut Thread {
        arch::fpu::enable();
        let mut area = me.fp.area.lock();
        if area.is_none() {
            *area = FpArea::new();
        }
        let a = area.as_ref()?;
        save_into(a);
        // SAFETY: the area holds `layout.size()` initialised bytes (zeroed at allocation).
        return Some(f(unsafe { core::slice::from_raw_parts(a.ptr, a.layout.size()) }));
    }
    pull(&me);
    let area = me.fp.area.lock();
    let a = area.as_ref()?;
    // SAFETY: as above.
    Some(f(unsafe { core::slice::from_raw_parts(a.ptr, a.layout.size()) }))
}
