//! The scheduler on the machine: per-CPU state, the switch protocol, idle loops, wake-ups,
//! preemption and work stealing. Policy (which thread next) is the host-tested [`RunQueue`].
//!
//! Invariants:
//! - kernel code runs with interrupts disabled; they are enabled only in user mode and while an
//!   idle CPU halts, so no lock is ever held by code an interrupt handler interrupted;
//! - a thread is in at most one run queue, and only when its state is `Ready`; a `Ready` thread
//!   may instead sit in its CPU's hand-next slot (`Cpu::handed`, [`hand_next`]), which that CPU's
//!   next `schedule` empties;
//! - a CPU switching away from a thread leaves it in `Cpu::prev` and the *next* context finishes
//!   the job (requeue or drop) after the switch, so no other CPU can run a thread whose stack
//!   is still in use; `on_cpu` is cleared at that point and a CPU taking a thread waits for it;
//! - a CPU's loaded root is that of its current thread's view (or the kernel's while idle or
//!   running a kernel thread); no root is freed while a CPU has it loaded.

use alloc::sync::Arc;
use alloc::vec::Vec;
use arch::addr::Frame;
use arch::context::{self, KernelContext};
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use arch::sync::Mutex;
use tsumugi_abi::stats::Counter;

use super::runqueue::{Policy, RunQueue};
use crate::stats::Counters;
use crate::thread::{State, Thread};

/// Most CPUs the kernel supports.
pub const MAX_CPUS: usize = 8;

/// What the CPU does with the thread it switches away from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Then {
    /// Still runnable: back into this CPU's run queue.
    Requeue,
    /// Blocked: someone will wake it.
    Block,
    /// Ended: drop the CPU's reference (its stack is freed).
    Exit,
    /// Still runnable, but pinned to another CPU (`thread_pin`): onto that CPU's queue.
    Migrate,
}

/// What the next context finishes for the thread a CPU switched away from (`Cpu::prev`).
#[derive(Clone, Copy, Debug)]
enum Prev {
    /// Nothing (the switch came from the idle loop).
    Nothing,
    /// The thread is back in a run queue already (a yield or preemption, [`requeue_and_switch`]):
    /// the `current` reference moved into the queue, so only `on_cpu` is left to clear.
    Queued(*const Thread),
    /// The thread with the `current` reference (an `Arc` leaked into the pointer), and what to
    /// do with it.
    Owned(*const Thread, Then),
}

/// A reference to a thread held by a run queue (one strong count of the `Arc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadRef(*const Thread);

impl ThreadRef {
    fn new(t: Arc<Thread>) -> Self {
        ThreadRef(Arc::into_raw(t))
    }

    fn take(self) -> Arc<Thread> {
        // SAFETY: made by `new` from an Arc whose count the queue kept.
        unsafe { Arc::from_raw(self.0) }
    }
}

// SAFETY: a ThreadRef is an owned Arc<Thread> in disguise; Thread is Sync.
unsafe impl Send for ThreadRef {}

/// One CPU's scheduler state.
///
/// Aligned to a power of two at least its size, so that finding this CPU's record from its
/// index (on the tick's and every switch's path, several times) is a shift rather than a
/// multiplication by an odd size (on riscv64 and aarch64 a constant load and a multiply); it
/// also keeps each CPU's record off the others' cache lines. Not on x86_64, whose multiply by
/// an immediate is one instruction as the shift is, and where the change measured 2 to 6
/// instructions more on the kn_cost rows.
#[cfg_attr(not(target_arch = "x86_64"), repr(align(512)))]
pub struct Cpu {
    /// The run queue.
    pub runqueue: Mutex<RunQueue<ThreadRef>>,
    /// The run queue's length as of its last change (written under its lock), so other CPUs
    /// see without locking it whether there is anything to steal.
    queued: AtomicUsize,
    /// The run queue's true length as of its last change (written under its lock): lets this
    /// CPU see an empty queue without locking it (a preemption or yield with nothing else to
    /// run). A thread queued by another CPU meanwhile is found at the next pick.
    len: AtomicUsize,
    /// How many pinned threads wait in `runqueue` (changed only under its lock; while it is above 0, `queued` publishes 0). A queue that
    /// holds a pinned thread is not stolen from: a steal takes whole view groups, and putting a
    /// pinned thread back would reorder the queue and void its wait bound.
    pinned_queued: AtomicUsize,
    /// The running thread (an `Arc` leaked into this pointer), or null when idle.
    current: AtomicPtr<Thread>,
    /// A `Ready` thread the running thread handed this CPU to ([`hand_next`]; an `Arc` leaked
    /// into this pointer), or null: the next `schedule` here runs it, without a run-queue round
    /// trip. In no run queue; set and taken only by this CPU.
    handed: AtomicPtr<Thread>,
    /// The idle loop's context (the CPU's boot stack).
    idle: UnsafeCell<KernelContext>,
    /// Work left for the next context: the previous thread and what to do with it.
    prev: UnsafeCell<Prev>,
    /// Frame number of the loaded root.
    loaded_root: AtomicU64,
    /// Tick at which the current thread's quantum began.
    slice_start: AtomicU64,
    /// Whether the CPU is halted in its idle loop (a wake-up for it needs an IPI).
    idle_now: AtomicBool,
    /// Whether this CPU is up.
    pub online: AtomicBool,
    /// The TLB-tag generation this CPU last flushed in (see `mm::tlb_tag`).
    tag_generation: AtomicU64,
    /// Event counters.
    pub counters: Counters,
}

// SAFETY: the UnsafeCell fields are touched only by the CPU owning this record, with interrupts
// disabled (see the module invariants); the rest are atomics or locks.
unsafe impl Sync for Cpu {}

const DEFAULT_POLICY: Policy = Policy { affinity: true, group_bound: 8 };

#[allow(clippy::declare_interior_mutable_const)]
const CPU_INIT: Cpu = Cpu {
    runqueue: Mutex::new(RunQueue::new(DEFAULT_POLICY)),
    queued: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    pinned_queued: AtomicUsize::new(0),
    current: AtomicPtr::new(core::ptr::null_mut()),
    handed: AtomicPtr::new(core::ptr::null_mut()),
    idle: UnsafeCell::new(KernelContext::EMPTY),
    prev: UnsafeCell::new(Prev::Nothing),
    loaded_root: AtomicU64::new(0),
    slice_start: AtomicU64::new(0),
    idle_now: AtomicBool::new(false),
    online: AtomicBool::new(false),
    tag_generation: AtomicU64::new(0),
    counters: Counters::new(),
};

#[cfg(not(target_arch = "x86_64"))]
const _: () = assert!(core::mem::size_of::<Cpu>() == 512, "Cpu outgrew its alignment: raise it to the next power of two");

/// Every CPU's record, by index.
pub static CPUS: [Cpu; MAX_CPUS] = [CPU_INIT; MAX_CPUS];

/// Ticks a thread runs before preemption.
static QUANTUM: AtomicU64 = AtomicU64::new(2);
/// Timer ticks on CPU 0 (the clock of quanta and sleeps).
static TICKS: AtomicU64 = AtomicU64::new(0);
/// The kernel's root frame number (loaded while idle or in kernel threads).
static KERNEL_ROOT: AtomicU64 = AtomicU64::new(0);
/// How many CPUs are online.
static ONLINE: AtomicUsize = AtomicUsize::new(0);

impl Cpu {
    /// Queues `t` here (and publishes the new length for thieves).
    fn push(&self, t: Arc<Thread>) {
        let (view, affine, pinned) = (t.root.load(Ordering::Relaxed), t.affine, t.pinned());
        let mut q = self.runqueue.lock();
        q.push(ThreadRef::new(t), view, affine);
        if pinned {
            self.count_pinned(1);
        }
        self.publish_len(q.len());
    }

    /// Queues the running thread `prev` and takes the next thread, under one lock (a yield or
    /// preemption with something queued here). `prev`'s `current` reference moves into the
    /// queue; the result may be `prev` itself (nothing else is due before it). `prev` is
    /// marked `Ready` and is still on this CPU (`on_cpu`): a CPU that steals it meanwhile puts
    /// it back, as it does with any thread still on a CPU (`pick_queued`).
    fn requeue_and_pop(&self, prev: &Thread, prev_ptr: *const Thread) -> Arc<Thread> {
        let (view, affine, pinned) = (prev.root.load(Ordering::Relaxed), prev.affine, prev.pinned());
        prev.mark(State::Ready);
        let mut q = self.runqueue.lock();
        let (r, _) = q.requeue_and_pop(ThreadRef(prev_ptr), view, affine);
        let next = r.take();
        match (pinned, next.pinned()) {
            (true, false) => self.count_pinned(1),
            (false, true) => self.count_pinned(-1),
            _ => {}
        }
        self.publish_len(q.len());
        next
    }

    /// Adds `delta` to `pinned_queued`. Call with the queue locked: the lock orders every
    /// change, so a plain load and store do (no read-modify-write).
    fn count_pinned(&self, delta: isize) {
        let n = self.pinned_queued.load(Ordering::Relaxed);
        self.pinned_queued.store(n.wrapping_add_signed(delta), Ordering::Relaxed);
    }

    /// Takes this CPU's next thread, if any.
    fn pop(&self) -> Option<Arc<Thread>> {
        let mut q = self.runqueue.lock();
        let (r, _) = q.pop()?;
        let t = r.take();
        if t.pinned() {
            self.count_pinned(-1);
        }
        self.publish_len(q.len());
        Some(t)
    }

    /// Publishes the queue's length for thieves (call with the queue locked): 0 while it holds
    /// a pinned thread, which makes it no victim.
    fn publish_len(&self, len: usize) {
        self.len.store(len, Ordering::Relaxed);
        let stealable = if self.pinned_queued.load(Ordering::Relaxed) > 0 { 0 } else { len };
        self.queued.store(stealable, Ordering::Relaxed);
    }
}

// Every port numbers its CPUs below its own bound, which is at most this kernel's.
#[cfg(target_arch = "x86_64")]
const _: () = assert!(arch::cpu::MAX_CPUS <= MAX_CPUS);
#[cfg(target_arch = "riscv64")]
const _: () = assert!(arch::cpu::MAX_CPUS <= MAX_CPUS);
#[cfg(target_arch = "aarch64")]
const _: () = assert!(arch::smp::MAX_CPUS <= MAX_CPUS);

/// The record of the CPU running this code. Inlined, without a bounds check: it is on every
/// switch, syscall return and tick.
#[inline(always)]
pub fn this_cpu() -> &'static Cpu {
    own_record(arch::cpu::cpu_index())
}

/// The record of this CPU, whose index (`arch::cpu::cpu_index`) the caller has at hand.
#[inline(always)]
fn own_record(index: usize) -> &'static Cpu {
    debug_assert!(index < MAX_CPUS);
    // SAFETY: `index` is this CPU's: a port numbers its CPUs below its `MAX_CPUS` (its
    // per-CPU blocks are an array of that many), which is at most ours (asserted above).
    unsafe { CPUS.get_unchecked(index) }
}

/// Number of CPUs online.
pub fn online_cpus() -> usize {
    ONLINE.load(Ordering::Acquire)
}

/// Sets the policy on every CPU and the quantum. Called at boot before threads exist.
pub fn configure(policy: Policy, quantum_ticks: u64) {
    for cpu in &CPUS {
        cpu.runqueue.lock().set_policy(policy);
    }
    QUANTUM.store(quantum_ticks.max(1), Ordering::Relaxed);
}

/// Changes the policy on every CPU at run time (queued threads are kept).
pub fn set_policy(policy: Policy) {
    for cpu in &CPUS {
        cpu.runqueue.lock().set_policy(policy);
    }
}

/// The current policy.
pub fn policy() -> Policy {
    CPUS[0].runqueue.lock().policy()
}

/// Marks the calling CPU online. Its idle context is filled at its first switch.
pub fn cpu_online(kernel_root: Frame) {
    KERNEL_ROOT.store(kernel_root.number(), Ordering::Relaxed);
    crate::mm::kernel_stack::note_full_flush(arch::cpu::cpu_index());
    let cpu = this_cpu();
    cpu.loaded_root.store(kernel_root.number(), Ordering::Relaxed);
    cpu.online.store(true, Ordering::Release);
    ONLINE.fetch_add(1, Ordering::AcqRel);
}

/// The running thread, if any.
pub fn current() -> Option<Arc<Thread>> {
    let p = this_cpu().current.load(Ordering::Relaxed);
    if p.is_null() {
        return None;
    }
    // SAFETY: `current` holds a leaked Arc while the thread runs here; take another count.
    unsafe {
        Arc::increment_strong_count(p);
        Some(Arc::from_raw(p))
    }
}

/// The running thread, borrowed (no reference-count traffic on hot paths).
pub fn with_current<R>(f: impl FnOnce(Option<&Thread>) -> R) -> R {
    let p = this_cpu().current.load(Ordering::Relaxed);
    // SAFETY: the current thread lives at least until this CPU switches away from it, which
    // cannot happen inside `f` (no scheduling from inside this borrow by convention).
    f(unsafe { p.as_ref() })
}

/// Timer ticks counted on CPU 0.
pub fn ticks() -> u64 {
    TICKS.load(Ordering::Relaxed)
}

/// Makes `t` runnable: puts it on its home CPU's queue (the one it is pinned to, else the one
/// that ran it last) and wakes that CPU if it idles.
pub fn make_ready(t: Arc<Thread>) {
    let target = t.home_cpu();
    let target = if CPUS[target].online.load(Ordering::Acquire) { target } else { arch::cpu::cpu_index() };
    CPUS[target].push(t);
    // Pairs with the fence in the idle loop: either it sees this thread in its queue, or this
    // sees it idle and sends the IPI (a store then a load on each side: needs a full fence).
    core::sync::atomic::fence(Ordering::SeqCst);
    if target != arch::cpu::cpu_index() && CPUS[target].idle_now.load(Ordering::SeqCst) {
        send_reschedule(target);
    }
}

/// Makes `t` (already marked `Ready`) the thread this CPU runs next: the running thread is
/// about to give the CPU up (a blocking call handing its vCPU to a spare activation), and the
/// next `schedule` here switches straight to `t` instead of queueing and picking it (with
/// [`switch_handed`]: neither thread's user LTN register is kept, so `t` must set it before it
/// enters user mode, and the running thread must not return to its user context without
/// setting it either). Falls back to [`make_ready`] when `t` is pinned to another CPU, or when
/// a thread is handed already.
pub fn hand_next(t: Arc<Thread>) {
    let index = arch::cpu::cpu_index();
    let cpu = own_record(index);
    let pin = t.pin.load(Ordering::Relaxed);
    if (pin != crate::thread::NO_PIN && pin != index) || cpu.current.load(Ordering::Relaxed).is_null() || !cpu.handed.load(Ordering::Relaxed).is_null() {
        make_ready(t);
        return;
    }
    cpu.handed.store(Arc::into_raw(t) as *mut Thread, Ordering::Relaxed);
}

/// Takes the thread handed to this CPU ([`hand_next`]), if any.
#[inline(always)]
fn take_handed(cpu: &Cpu) -> Option<Arc<Thread>> {
    let p = cpu.handed.load(Ordering::Relaxed);
    if p.is_null() {
        return None;
    }
    cpu.handed.store(core::ptr::null_mut(), Ordering::Relaxed);
    // SAFETY: `hand_next` leaked this Arc into the slot; taken once (the slot is cleared, and
    // only this CPU touches it, with interrupts off).
    Some(unsafe { Arc::from_raw(p) })
}

fn send_reschedule(cpu: usize) {
    this_cpu().counters.bump(Counter::IpisSent);
    crate::smp::send_ipi(cpu, crate::smp::Ipi::Reschedule);
}

/// Takes the next thread for this CPU: its own queue first, then a steal.
///
/// A thread can be woken (and queued) while its CPU is still on its stack, finishing the switch
/// away (or about to find itself in its queue and keep running). Such a thread is not taken: it
/// goes back to its own CPU's queue. Waiting for it here could deadlock — two CPUs each holding
/// the other's thread — so the wait happens nowhere; `self_ptr` (the caller's own thread) is
/// always taken.
#[inline(always)]
fn pick_next(cpu_index: usize, self_ptr: *const Thread) -> Option<Arc<Thread>> {
    if let Some(t) = take_handed(own_record(cpu_index)) {
        return Some(t);
    }
    // Nothing queued here and no other CPU to steal from (a preemption or yield of the only
    // runnable thread): answer before setting up the loop below.
    if own_record(cpu_index).len.load(Ordering::Relaxed) == 0 && ONLINE.load(Ordering::Relaxed) <= 1 {
        return None;
    }
    pick_queued(cpu_index, self_ptr)
}

/// [`pick_next`] when there may be something to take.
#[inline(never)]
fn pick_queued(cpu_index: usize, self_ptr: *const Thread) -> Option<Arc<Thread>> {
    for _ in 0..MAX_REQUEUES {
        let cpu = own_record(cpu_index);
        let local = if cpu.len.load(Ordering::Relaxed) > 0 { cpu.pop() } else { None };
        let candidate = match local {
            Some(c) => c,
            None if ONLINE.load(Ordering::Relaxed) > 1 => steal(cpu_index)?,
            None => return None,
        };
        if Arc::as_ptr(&candidate) == self_ptr || !candidate.on_cpu.load(Ordering::Acquire) {
            return Some(candidate);
        }
        CPUS[candidate.home_cpu()].push(candidate);
        arch::cpu::spin_hint();
    }
    None
}

/// How often `pick_next` puts back a thread still on another CPU before giving up for now.
const MAX_REQUEUES: usize = 64;

/// Takes a view group (or half a queue) from the busiest other CPU whose queue holds no
/// pinned thread (such a queue publishes a length of 0). The queues' published
/// lengths choose the victim without locking anything, so a CPU with nothing to do (or a yield
/// with nothing else runnable) costs other CPUs nothing when they have nothing to steal.
fn steal(thief: usize) -> Option<Arc<Thread>> {
    let mut victim = None;
    let mut most = 0;
    for (i, cpu) in CPUS.iter().enumerate() {
        let queued = cpu.queued.load(Ordering::Relaxed);
        if queued > most && i != thief {
            (victim, most) = (Some(i), queued);
        }
    }
    let victim = victim?;
    let loot = {
        let mut q = CPUS[victim].runqueue.lock();
        if q.is_empty() || CPUS[victim].pinned_queued.load(Ordering::Relaxed) > 0 {
            return None;
        }
        let loot = q.steal();
        CPUS[victim].publish_len(q.len());
        loot
    };
    if loot.is_empty() {
        return None;
    }
    let cpu = &CPUS[thief];
    cpu.counters.bump(Counter::Steals);
    let mut it = loot.into_iter();
    let (first, _, _) = it.next().expect("non-empty");
    let mut q = cpu.runqueue.lock();
    for (r, view, affine) in it {
        q.push(r, view, affine);
    }
    cpu.publish_len(q.len());
    Some(first.take())
}

/// Switches away from the running thread (or the idle loop) to the next runnable thread.
/// `then` says what becomes of the thread switching away. Interrupts must be disabled.
/// Returns when this thread is switched back to (never for `Then::Exit`), saying whether it
/// was switched away at all (a `Requeue` with nothing else to run keeps running).
pub fn schedule(then: Then) -> bool {
    debug_assert!(!arch::cpu::interrupts_enabled());
    let index = arch::cpu::cpu_index();
    let cpu = own_record(index);
    let prev_ptr = cpu.current.load(Ordering::Relaxed);
    if let Some(next) = take_handed(cpu) {
        // The running thread handed the CPU to `next` (never itself: it was running then).
        switch_handed(cpu, prev_ptr, next, Prev::Owned(prev_ptr, then));
        return true;
    }
    if then == Then::Requeue && !prev_ptr.is_null() && cpu.len.load(Ordering::Relaxed) > 0 {
        return requeue_and_switch(cpu, prev_ptr);
    }
    let next = pick_next(index, prev_ptr);
    let next = match next {
        // The running thread itself: it was woken (and queued) before it finished blocking.
        // Take the queue's reference back and keep running.
        Some(n) if Arc::as_ptr(&n) == prev_ptr as *const Thread => {
            n.mark(State::Running);
            return false;
        }
        Some(n) => n,
        None if then == Then::Requeue && !prev_ptr.is_null() => return false, // nothing else to run
        None => {
            // Nothing runnable: park this thread's context and run the idle loop.
            // SAFETY: prev is current (a leaked Arc); the idle context was saved when the idle
            // loop last switched to a thread, or this is a thread that never ran from idle
            // (impossible: every thread is first run by a switch from some context).
            unsafe {
                // The user LTN register belongs to the thread, as in `switch_to`: keep its value
                // for the CPU that runs it next, which loads it from here.
                (*prev_ptr).ltn.store(arch::cpu::user_ltn(), Ordering::Relaxed);
                switch_to_idle(cpu, Prev::Owned(prev_ptr, then));
            }
            return true;
        }
    };
    switch_to(cpu, prev_ptr, next, Prev::Owned(prev_ptr, then));
    true
}

/// A yield or preemption of `prev_ptr` (the running thread) while this CPU's queue holds
/// threads: requeue and pick under one lock, and leave only `on_cpu` for the next context.
/// Returns whether another thread ran.
fn requeue_and_switch(cpu: &'static Cpu, prev_ptr: *mut Thread) -> bool {
    // SAFETY: the current thread lives while it runs here.
    let prev = unsafe { &*prev_ptr };
    let next = cpu.requeue_and_pop(prev, prev_ptr);
    if core::ptr::eq(Arc::as_ptr(&next), prev_ptr) {
        // Nothing else is due: the queue's reference is `current`'s again.
        next.mark(State::Running);
        let _ = Arc::into_raw(next);
        return false;
    }
    if next.on_cpu.load(Ordering::Acquire) {
        // Rare: a thread woken while its CPU is still leaving its stack. Waiting for it could
        // deadlock (that CPU may wait for `prev`, which is queued now), so it goes back to its
        // own CPU as in `pick_queued`, and this CPU runs its idle loop, which picks again.
        CPUS[next.home_cpu()].push(next);
        prev.ltn.store(arch::cpu::user_ltn(), Ordering::Relaxed);
        // SAFETY: prev is queued with `current`'s reference; its context stays valid until
        // `on_cpu` is cleared on the idle stack.
        unsafe { switch_to_idle(cpu, Prev::Queued(prev_ptr)) };
        return true;
    }
    switch_to_inline::<true>(cpu, prev_ptr, next, Prev::Queued(prev_ptr));
    true
}

/// Switches from the current thread to this CPU's idle loop, leaving `leftover` for it.
///
/// # Safety
/// Interrupts are off; `leftover` names the current thread, whose LTN is saved already.
unsafe fn switch_to_idle(cpu: &Cpu, leftover: Prev) {
    let (Prev::Queued(prev) | Prev::Owned(prev, _)) = leftover else { return };
    // SAFETY: the caller's; the thread's context stays valid until the idle loop has
    // finished the switch (`on_cpu`).
    unsafe {
        // What its hardware counters counted since it came is its own, as in a switch to a
        // thread: the switch from idle back to it restarts them (`switch_in`), so without this
        // a thread that blocks into the idle loop lost every count of its last run.
        crate::perf::switch_out(&*prev);
        let prev_ctx = (*prev).context.get();
        *cpu.prev.get() = leftover;
        crate::trace::idle();
        cpu.current.store(core::ptr::null_mut(), Ordering::Relaxed);
        load_root(cpu, KERNEL_ROOT.load(Ordering::Relaxed));
        context::switch(prev_ctx, cpu.idle.get());
    }
    finish_switch();
}

/// Switches from the current context (thread `prev_ptr`, or the idle loop if null) to `next`;
/// `leftover` is what the next context does with `prev_ptr`. Out of line: the idle loop, the
/// hand-over and blocking switches share it; the yield and preemption switch inlines
/// [`switch_to_inline`] instead (one frame less on the kernel's hottest switch).
#[inline(never)]
fn switch_to(cpu: &Cpu, prev_ptr: *mut Thread, next: Arc<Thread>, leftover: Prev) {
    switch_to_inline::<true>(cpu, prev_ptr, next, leftover)
}

/// The switch to a thread handed this CPU ([`hand_next`]): [`switch_to`] without the user LTN
/// register's save and load (an MSR read and write on x86_64), which neither thread needs —
/// the blocking thread never resumes its user context, and the spare sets the register (0)
/// as it enters its upcall.
#[inline(never)]
fn switch_handed(cpu: &Cpu, prev_ptr: *mut Thread, next: Arc<Thread>, leftover: Prev) {
    switch_to_inline::<false>(cpu, prev_ptr, next, leftover)
}

/// [`switch_to`], inlined into its caller. `LTN`: whether the user LTN register moves with
/// the threads (every switch but [`switch_handed`]).
#[inline(always)]
fn switch_to_inline<const LTN: bool>(cpu: &Cpu, prev_ptr: *mut Thread, next: Arc<Thread>, leftover: Prev) {
    if next.on_cpu.load(Ordering::Acquire) {
        wait_off_cpu(&next);
    }
    next.on_cpu.store(true, Ordering::Relaxed);
    next.mark(State::Running);
    next.perf.tally(tsumugi_abi::perf::Event::ContextSwitches);
    // SAFETY (of the dereference): prev is the current thread, alive while it runs here.
    let prev = unsafe { prev_ptr.as_ref() };
    if let Some(prev) = prev {
        crate::perf::switch_out(prev);
    }
    next.last_cpu.store(arch::cpu::cpu_index(), Ordering::Relaxed);
    // Pairs with the fence of a rights change (`syscall::move_to_view`) between its root store
    // and its look at where `next` runs: either it sees `next` running here and waits for this
    // CPU's reload, or the root loaded below is the new one.
    core::sync::atomic::fence(Ordering::SeqCst);
    cpu.counters.bump(Counter::ContextSwitches);
    crate::trace::switch(&next);
    if let Some(d) = &next.domain {
        d.counters.bump(Counter::ContextSwitches);
    }
    let root = match next.root.load(Ordering::Relaxed) {
        0 => KERNEL_ROOT.load(Ordering::Relaxed),
        r => r,
    };
    if let Some(flushed) = load_root(cpu, root) {
        count_view_switch(&next, flushed);
    }
    crate::perf::switch_in(&next);
    next.drop_stale_views();
    arch::cpu::set_kernel_stack(next.kernel_stack_top());
    // The user LTN register belongs to the thread: park the old one's, load the new one's —
    // only when it differs (on x86_64 each access is an MSR access; most programs leave it 0).
    if LTN {
        let current_ltn = arch::cpu::user_ltn();
        if let Some(prev) = prev {
            prev.ltn.store(current_ltn, Ordering::Relaxed);
        }
        let next_ltn = next.ltn.load(Ordering::Relaxed);
        if next_ltn != current_ltn {
            arch::cpu::set_user_ltn(next_ltn);
        }
    }
    crate::fpu::switch_to(&next);
    cpu.slice_start.store(TICKS.load(Ordering::Relaxed), Ordering::Relaxed);
    let next_ctx = next.context.get();
    cpu.current.store(Arc::into_raw(next) as *mut Thread, Ordering::Relaxed);
    // SAFETY: interrupts are off and this CPU owns its record; `prev`'s context stays valid
    // (its Arc is kept in cpu.prev until the next context takes it); `next`'s context was
    // saved by a switch away from it or made by KernelContext::new, and nobody else runs it
    // (on_cpu).
    unsafe {
        let from = if prev_ptr.is_null() { cpu.idle.get() } else { (*prev_ptr).context.get() };
        *cpu.prev.get() = leftover;
        context::switch(from, next_ctx);
    }
    finish_switch();
}

/// Waits until the CPU that last ran `next` has left its stack. That CPU may be waiting for
/// this one to save FP registers (`fpu::pull`): serve such requests while waiting. Out of line:
/// a thread taken from a queue has almost always left its CPU already.
#[cold]
#[inline(never)]
fn wait_off_cpu(next: &Thread) {
    let mut spins = 0u64;
    while next.on_cpu.load(Ordering::Acquire) {
        crate::fpu::serve_request();
        arch::cpu::spin_hint();
        spins += 1;
        if spins == 50_000_000 {
            crate::println!(
                "scheduler: cpu {} waits for thread {} (state {:?}, vcpu {:#x}, last cpu {}) to leave its stack",
                arch::cpu::cpu_index(),
                next.id,
                next.state(),
                next.vcpu.load(Ordering::Relaxed),
                next.last_cpu.load(Ordering::Relaxed)
            );
            dump();
        }
    }
}

/// Loads `root` (a frame number) on this CPU if it is not loaded already; counts view switches
/// and the TLB flush an untagged load implies. Returns `None` when `root` was loaded already,
/// else whether the load flushed the whole TLB. Inlined: the switch checks it on every switch.
#[inline(always)]
fn load_root(cpu: &Cpu, root: u64) -> Option<bool> {
    if cpu.loaded_root.load(Ordering::Relaxed) == root {
        return None;
    }
    cpu.loaded_root.store(root, Ordering::Release);
    let (tag, flush_all) = if crate::mm::cpu_tags::enabled() {
        let mut generation = cpu.tag_generation.load(Ordering::Relaxed);
        let choice = crate::mm::cpu_tags::choose(root, KERNEL_ROOT.load(Ordering::Relaxed), &mut generation);
        cpu.tag_generation.store(generation, Ordering::Relaxed);
        choice
    } else {
        // Untagged: every load flushes (what `choose` answers), and no generation moves.
        (crate::mm::tag_alloc::UNTAGGED, true)
    };
    // SAFETY: every root is a view table or the kernel table, all sharing the kernel half.
    unsafe { arch::tlb::load_root_tagged(Frame::from_number(root), tag, flush_all) };
    cpu.counters.bump(Counter::ViewSwitches);
    crate::trace::view_switch(root, flush_all);
    if flush_all {
        crate::mm::kernel_stack::note_full_flush_here();
        cpu.counters.bump(Counter::TlbFlushes);
    }
    Some(flush_all)
}

/// Reloads the current thread's root if its view changed under it (after a grant or revoke by
/// another thread) and detaches the views it left. Returns whether a new root was loaded.
pub fn reload_current_root() -> bool {
    let cpu = this_cpu();
    with_current(|t| {
        let root = match t.map_or(0, |t| t.root.load(Ordering::Acquire)) {
            0 => KERNEL_ROOT.load(Ordering::Relaxed),
            r => r,
        };
        let flushed = load_root(cpu, root);
        if let Some(t) = t {
            if let Some(flushed) = flushed {
                count_view_switch(t, flushed);
            }
            t.drop_stale_views();
        }
        flushed.is_some()
    })
}

/// Counts a root load made for thread `t` (by a switch to it, or a reload while it runs) for
/// its program and its own counters. Every such load is counted, so the program's figure is
/// the number of page-table loads its threads caused — the figure a trace's records add up to.
fn count_view_switch(t: &Thread, flushed: bool) {
    if let Some(d) = &t.domain {
        d.counters.bump(Counter::ViewSwitches);
    }
    t.perf.tally(tsumugi_abi::perf::Event::ViewSwitches);
    if flushed {
        t.perf.tally(tsumugi_abi::perf::Event::TlbFlushes);
    }
}

/// Whether any CPU, this one included, has `root` loaded.
pub fn root_loaded_anywhere(root: u64) -> bool {
    this_cpu().loaded_root.load(Ordering::Acquire) == root || cpus_with_root(root).next().is_some()
}

/// CPUs (other than this one) whose loaded root is `root`.
pub fn cpus_with_root(root: u64) -> impl Iterator<Item = usize> {
    let me = arch::cpu::cpu_index();
    (0..MAX_CPUS).filter(move |&i| i != me && CPUS[i].online.load(Ordering::Acquire) && CPUS[i].loaded_root.load(Ordering::Acquire) == root)
}

/// Completes a switch on the new context: requeues, forgets or frees the previous thread.
/// Inlined: the yield and preemption switch leaves only `on_cpu` to clear (`Prev::Queued`),
/// which costs less than the call; the rest is [`finish_owned`].
#[inline(always)]
pub fn finish_switch() {
    let cpu = this_cpu();
    // SAFETY: only this CPU touches its `prev`, with interrupts off.
    let leftover = unsafe { core::mem::replace(&mut *cpu.prev.get(), Prev::Nothing) };
    match leftover {
        Prev::Nothing => {}
        Prev::Queued(prev) => {
            // SAFETY: a queued thread lives at least until a CPU runs it to its end, which
            // waits for this store; it is the last access.
            unsafe { (*prev).on_cpu.store(false, Ordering::Release) };
        }
        // SAFETY: the `current` reference the switch left here.
        Prev::Owned(prev, then) => finish_owned(cpu, unsafe { Arc::from_raw(prev) }, then),
    }
}

/// [`finish_switch`] in a context started by a hand-over ([`switch_handed`] to a thread
/// restarted at a new entry, `thread::wake_next`): the thread left behind is usually the one
/// that blocked as it handed the CPU over, and then only its `on_cpu` and reference are left
/// (without [`finish_owned`]'s call).
#[inline(always)]
pub fn finish_hand_over() {
    let cpu = this_cpu();
    // SAFETY: only this CPU touches its `prev`, with interrupts off.
    let leftover = unsafe { core::mem::replace(&mut *cpu.prev.get(), Prev::Nothing) };
    match leftover {
        Prev::Owned(prev, Then::Block) => {
            // SAFETY: the `current` reference the switch left here; `on_cpu` is the last
            // access before it is dropped, as in `finish_owned`.
            let prev = unsafe { Arc::from_raw(prev) };
            prev.on_cpu.store(false, Ordering::Release);
            drop(prev);
        }
        Prev::Nothing => {}
        Prev::Queued(prev) => {
            // SAFETY: as in `finish_switch`.
            unsafe { (*prev).on_cpu.store(false, Ordering::Release) };
        }
        // SAFETY: the `current` reference the switch left here.
        Prev::Owned(prev, then) => finish_owned(cpu, unsafe { Arc::from_raw(prev) }, then),
    }
}

/// [`finish_switch`] for a thread the switch left with its `current` reference: requeue,
/// migrate, drop or count its end, as `then` says.
#[inline(never)]
fn finish_owned(cpu: &Cpu, prev: Arc<Thread>, then: Then) {
    prev.on_cpu.store(false, Ordering::Release);
    match then {
        Then::Requeue => {
            prev.mark(State::Ready);
            cpu.push(prev);
        }
        Then::Migrate => {
            prev.mark(State::Ready);
            make_ready(prev);
        }
        Then::Block => drop(prev),
        Then::Exit => {
            // Now that no CPU is on its stack, the thread's end can be counted: the domain
            // finishes (and its waiters learn so) only with every stack given back.
            prev.release_stack();
            crate::fpu::thread_ended(&prev);
            if let Some(d) = &prev.domain {
                d.thread_ended(prev.exit_value());
            }
        }
    }
}

/// The idle loop of a CPU: runs threads as they become runnable and halts in between.
pub fn idle_loop() -> ! {
    let index = arch::cpu::cpu_index();
    let cpu = own_record(index);
    loop {
        arch::cpu::disable_interrupts();
        match pick_next(index, core::ptr::null()) {
            Some(next) => switch_to(cpu, core::ptr::null_mut(), next, Prev::Nothing),
            None => {
                cpu.idle_now.store(true, Ordering::SeqCst);
                core::sync::atomic::fence(Ordering::SeqCst);
                // A wake-up between the check above and the halt sends an IPI, which ends
                // the halt (interrupts are enabled atomically with hlt).
                if cpu.runqueue.lock().is_empty() {
                    arch::cpu::wait_for_interrupt();
                }
                cpu.idle_now.store(false, Ordering::Release);
            }
        }
    }
}

/// Timer tick on this CPU (interrupt context, interrupts off). `from_user` says whether user
/// code was interrupted: only then may the thread be preempted. Returns whether the running
/// thread's quantum is over (the caller then preempts it with [`preempt`]).
pub fn tick(from_user: bool) -> bool {
    // The index once: each `cpu_index` is a per-CPU load and a bounds check.
    let index = arch::cpu::cpu_index();
    let cpu = own_record(index);
    cpu.counters.bump(Counter::Ticks);
    crate::mm::kernel_stack::tick(index);
    if index == 0 {
        let t = TICKS.fetch_add(1, Ordering::Relaxed) + 1;
        let w = WATCHDOG_SECS.load(Ordering::Relaxed);
        if w > 0 && t % (w * crate::boot::TICK_HZ) == 0 {
            dump();
            crate::notify::dump();
        }
        // Most ticks have no timed wait at all (then not even the clock is read), or none due:
        // both queues check their earliest deadline first.
        if crate::thread::earliest_sleeper().min(crate::notify::earliest_sleeper()) != u64::MAX {
            let now = arch::timer::nanos();
            crate::thread::wake_sleepers(now);
            crate::notify::wake_sleepers(now);
        }
        crate::console_input::poll();
    }
    let current = cpu.current.load(Ordering::Relaxed);
    // SAFETY: the current thread lives while it runs here (this tick interrupted it).
    if let Some(t) = unsafe { current.as_ref() } {
        crate::fpu::tick(t);
    }
    if !from_user || current.is_null() {
        return false;
    }
    let now = TICKS.load(Ordering::Relaxed);
    now.wrapping_sub(cpu.slice_start.load(Ordering::Relaxed)) >= QUANTUM.load(Ordering::Relaxed)
}

/// Preempts the running thread: back into the run queue, and the CPU to the next one (if any).
/// Returns when the thread runs again; says whether another thread ran in between.
#[inline(always)]
pub fn preempt() -> bool {
    let cpu = this_cpu();
    // Nothing queued here and no CPU to steal from: the thread keeps running (what
    // `schedule(Requeue)` would find, without its set-up).
    if cpu.len.load(Ordering::Relaxed) == 0 && ONLINE.load(Ordering::Relaxed) <= 1 {
        cpu.slice_start.store(TICKS.load(Ordering::Relaxed), Ordering::Relaxed);
        return false;
    }
    preempt_switch()
}

/// [`preempt`] when another thread may run.
#[inline(never)]
fn preempt_switch() -> bool {
    let switched = schedule(Then::Requeue);
    let cpu = this_cpu();
    cpu.slice_start.store(TICKS.load(Ordering::Relaxed), Ordering::Relaxed);
    if switched {
        cpu.counters.bump(Counter::Preemptions);
        crate::trace::preempted();
    }
    switched
}

/// Seconds between state dumps (`watchdog=` boot option; 0 = off).
pub static WATCHDOG_SECS: AtomicU64 = AtomicU64::new(0);

/// Prints what every CPU runs (for diagnosing a stuck run; `watchdog=` boot option).
pub fn dump() {
    for (i, cpu) in CPUS.iter().enumerate().filter(|(_, c)| c.online.load(Ordering::Acquire)) {
        let cur = cpu.current.load(Ordering::Relaxed);
        // SAFETY: read-only peek for a diagnostic; the thread may be switching (values are hints).
        let (tid, vcpu) = unsafe { cur.as_ref() }.map_or((0, usize::MAX), |t| (t.id, t.vcpu.load(Ordering::Relaxed)));
        let queued = cpu.runqueue.try_lock().map_or(usize::MAX, |q| q.len());
        crate::println!("watchdog: cpu {i}: thread {tid} (vcpu {vcpu:#x}), {queued} queued, idle {}", cpu.idle_now.load(Ordering::Relaxed));
    }
}

/// Threads queued on every CPU (for reports).
pub fn queued() -> Vec<usize> {
    CPUS.iter().map(|c| c.runqueue.lock().len()).collect()
}
