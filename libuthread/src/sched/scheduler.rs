//! The M:N scheduler: per-vCPU ready queues with work stealing, the vCPU loop, the park/unpark
//! protocol, and spawn/exit/yield/block/wake.
//!
//! # Shape
//! Each vCPU has a FIFO ready queue and a *scheduler stack*. Scheduler code always starts at
//! the top of that stack: a thread that yields, blocks or exits saves its window
//! (`context::switch_out`) and lands in `after_switch` there, which finishes what the thread
//! asked for (queue it, commit its block, reclaim its stack) — only now, because the thread's
//! window is complete only now — and then runs the vCPU loop: own queue, steal, or park. The
//! loop resumes the next thread from its WINDOW or FULL frame and its stack frames are simply
//! abandoned. An upcall on Tsumugi re-enters the same way ([`enter_vcpu_loop`]).
//!
//! # Critical sections
//! Scheduler code runs with LTN = 0 — from the moment a thread enters the library to give up
//! its vCPU until the resume sequence of the next thread writes LTN — so a kernel stop there
//! resumes the vCPU in place and never hands half-edited structures to an upcall. Library code
//! that runs *on behalf of* a user thread with LTN = its ThMB (spawn, wake…) takes
//! `SpinLock`s, which are critical sections themselves.
//!
//! # MULiTh fast paths
//! - spawn and wake hand a thread straight to an idle vCPU (claimed from `IdleSet`) and
//!   unpark it;
//! - a thread that blocks when nothing else is runnable anywhere keeps its vCPU and parks it
//!   (`park_current`, state `IN_PLACE`); the waker unparks that vCPU and the thread continues
//!   with no context switch at all;
//! - exit with nothing runnable parks the vCPU (the loop's idle path).
//!
//! # Lazy creation (StackThreads)
//! `spawn` allocates only the ThMB (one allocation, plus one for a closure that captures
//! anything) and queues it: no stack, no register state. The first dispatch takes a stack from
//! the pool (a free-list pop; the platform allocates only when the pool is empty) and builds a
//! window that starts the thread; exit returns the stack to the pool. So a thread that never
//! runs costs a ThMB, and a stack is held only while a thread is live. Measured hosted
//! (`examples/bench.rs`, release): spawn + first run + exit + join ≈ 0.26 µs; a yield round trip
//! between two threads (two WINDOW switches through the scheduler) ≈ 115 ns.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::ptr;

use tsumugi_abi::kn::{mask, FP_AREA_ALIGN, FP_AREA_SIZE, MAX_VCPUS};

use crate::context;
use crate::sched::idle::IdleSet;
use crate::platform;
use crate::prim::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use crate::sched::queue::Fifo;
use crate::sched::runstate::{Wake, KERNEL_BLOCKED, READY, RUNNING};
use crate::spin::SpinLock;
use crate::thmb::{Body, Thmb, JOIN_DETACHED, JOIN_EXITED, JOIN_RUNNING};

/// Default stack size of a user thread.
pub(crate) const DEFAULT_STACK_SIZE: usize = 256 * 1024;
/// Size of each vCPU's scheduler stack.
const SCHED_STACK_SIZE: usize = 128 * 1024;
/// Stacks kept in the pool at most (beyond that, exiting threads' stacks go back to the
/// platform).
const STACK_POOL_MAX: usize = 256;

/// What a thread asks the scheduler to do when it switches out (low bits of the ThMB address,
/// which is 64-byte aligned).
const ACTION_YIELD: usize = 0;
const ACTION_BLOCK: usize = 1;
const ACTION_EXIT: usize = 2;
const ACTION_MASK: usize = 63;

/// One vCPU's scheduler state.
struct Vcpu {
    /// Ready threads, linked through their ThMBs.
    queue: SpinLock<Fifo<Thmb>>,
    /// `queue`'s length, for looks without the lock (ordered against the idle bits by the
    /// fences in `idle`).
    len: AtomicUsize,
    /// The scheduler stack `(base, len)`, allocated on first use and kept for later runs.
    stack_base: AtomicUsize,
    stack_len: AtomicUsize,
    /// Threads this vCPU resumed from a saved window (or started).
    resumed_window: AtomicU64,
    /// Threads this vCPU resumed from a full frame.
    resumed_full: AtomicU64,
}

impl Vcpu {
    const fn new() -> Vcpu {
        Vcpu {
            queue: SpinLock::new(Fifo::new()),
            len: AtomicUsize::new(0),
            stack_base: AtomicUsize::new(0),
            stack_len: AtomicUsize::new(0),
            resumed_window: AtomicU64::new(0),
            resumed_full: AtomicU64::new(0),
        }
    }

    /// Counts a resume on this vCPU (only this vCPU writes its counters: no atomic add).
    #[inline(always)]
    fn count_resume(&self, full: bool) {
        let c = if full { &self.resumed_full } else { &self.resumed_window };
        c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// Appends a ready thread.
    fn push(&self, t: *mut Thmb) {
        let mut queue = self.queue.lock();
        // SAFETY: a READY thread is in no other queue and stays live while queued (its own
        // reference is dropped only at exit).
        unsafe { queue.push_back(t) };
        self.len.store(queue.len(), Ordering::Release);
    }

    /// Takes the oldest ready thread, or null.
    fn pop(&self) -> *mut Thmb {
        if self.len.load(Ordering::Acquire) == 0 {
            return ptr::null_mut();
        }
        let mut queue = self.queue.lock();
        let t = queue.pop_front();
        self.len.store(queue.len(), Ordering::Release);
        t
    }

    fn has_work(&self) -> bool {
        self.len.load(Ordering::Acquire) > 0
    }

    /// Forgets whatever a previous runtime left queued (those threads were abandoned).
    fn reset(&self) {
        *self.queue.lock() = Fifo::new();
        self.len.store(0, Ordering::Release);
    }

    /// The top of the scheduler stack (allocated on first use).
    fn top(&self) -> usize {
        self.stack_base.load(Ordering::Relaxed) + self.stack_len.load(Ordering::Relaxed)
    }

    fn ensure_stack(&self) {
        if self.stack_base.load(Ordering::Relaxed) == 0 {
            let (base, len) = platform::alloc_stack(SCHED_STACK_SIZE)
                .unwrap_or_else(|| fatal("libuthread: no memory for a scheduler stack\n"));
            self.stack_len.store(len, Ordering::Relaxed);
            self.stack_base.store(base, Ordering::Relaxed);
        }
    }
}

/// A root context: the `run` caller's registers while the runtime runs on vCPU 0.
struct RootCell(core::cell::UnsafeCell<Thmb>);
// SAFETY: only vCPU 0 touches it, at `run`'s start and at shutdown (one runtime at a time).
unsafe impl Sync for RootCell {}

static VCPUS: [Vcpu; MAX_VCPUS] = [const { Vcpu::new() }; MAX_VCPUS];
/// vCPUs of the running runtime (0 when none runs).
static VCPU_COUNT: AtomicUsize = AtomicUsize::new(0);
/// vCPUs that have not retired yet.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);
static IDLE: IdleSet = IdleSet::new();
/// Set when the main thread has exited.
static SHUTDOWN: AtomicBool = AtomicBool::new(false);
/// Counts runtimes, so late events of an earlier one (a hosted sleep timer) can be dropped.
static GENERATION: AtomicU64 = AtomicU64::new(0);
/// One runtime at a time (`run` waits for the previous one).
static RUN_LOCK: AtomicBool = AtomicBool::new(false);
static ROOT: RootCell = RootCell(core::cell::UnsafeCell::new(Thmb::blank()));
/// Free thread stacks: `(requested size, base, len)`.
static STACKS: SpinLock<Vec<(usize, usize, usize)>> = SpinLock::new(Vec::new());

/// Prints `message` and ends the program (a resource the scheduler cannot do without is gone).
pub(crate) fn fatal(message: &str) -> ! {
    platform::console_write(message.as_bytes());
    platform::exit_process(101)
}

/// How many times threads were resumed from a saved window (or started) and from a full frame,
/// over every vCPU since the program started.
pub fn resume_counts() -> (u64, u64) {
    VCPUS.iter().fold((0, 0), |(w, f), v| {
        (w + v.resumed_window.load(Ordering::Relaxed), f + v.resumed_full.load(Ordering::Relaxed))
    })
}

/// Number of vCPUs of the running runtime (0 outside `run`).
pub fn vcpu_count() -> usize {
    VCPU_COUNT.load(Ordering::Relaxed)
}

/// The runtime generation (changes with every `run`).
#[cfg_attr(target_os = "none", allow(dead_code))]
pub(crate) fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

fn vcpus() -> &'static [Vcpu] {
    &VCPUS[..vcpu_count()]
}

fn work_anywhere() -> bool {
    vcpus().iter().any(Vcpu::has_work)
}

// ------------------------------------------------------------------------------------------
// Stacks.

fn take_stack(size: usize) -> Option<(usize, usize)> {
    {
        let mut pool = STACKS.lock();
        if let Some(i) = pool.iter().rposition(|&(s, _, _)| s == size) {
            let (_, base, len) = pool.swap_remove(i);
            return Some((base, len));
        }
    }
    platform::alloc_stack(size)
}

fn give_stack(size: usize, base: usize, len: usize) {
    {
        let mut pool = STACKS.lock();
        if pool.len() < STACK_POOL_MAX {
            pool.push((size, base, len));
            return;
        }
    }
    platform::free_stack(base, len);
}

// ------------------------------------------------------------------------------------------
// Making threads runnable.

/// Queues a READY thread: on an idle vCPU if there is one (preferring `home`), which is then
/// unparked — MULiTh's "hand it straight to an idle processor" — else on `home`.
fn make_ready(t: *mut Thmb, home: usize) {
    // SAFETY: the caller owns the READY thread until it is queued.
    unsafe { (*t).vcpu.store(home, Ordering::Relaxed) };
    match IDLE.claim(home) {
        Some(v) => {
            VCPUS[v].push(t);
            platform::unpark(v);
        }
        None => VCPUS[home].push(t),
    }
}

/// If other vCPUs idle while `v` has a backlog, wakes one to steal.
fn wake_helper(v: usize) {
    if VCPUS[v].has_work() {
        if let Some(w) = IDLE.claim(v) {
            platform::unpark(w);
        }
    }
}

/// Queues a new thread (lazy creation: no stack yet).
pub(crate) fn spawn(t: Box<Thmb>) -> *mut Thmb {
    assert!(vcpu_count() > 0, "libuthread: spawn outside libuthread::run");
    let t = Box::into_raw(t);
    let mut critical = crate::spin::Critical::enter();
    let me = critical.thread();
    // Read the spawner's vCPU inside the critical section: it cannot change there.
    // SAFETY: `me` is the live calling thread.
    let home = if me.is_null() { 0 } else { unsafe { (*me).vcpu.load(Ordering::Relaxed) } };
    // SAFETY: `t` is new and ours.
    unsafe { (*t).state.set(READY) };
    make_ready(t, home);
    critical.leave();
    t
}

/// Wakes a thread blocked in [`block_current`].
///
/// # Safety
/// The caller owns this wake-up (see `blocking::wake`).
pub(crate) unsafe fn wake(t: *mut Thmb) {
    // Read where it sits before the state change: afterwards the thread may run, exit and be
    // freed at any moment.
    // SAFETY: blocked, so live.
    let home = unsafe { (*t).vcpu.load(Ordering::Relaxed) };
    // SAFETY: as above.
    match unsafe { (*t).state.wake() } {
        Wake::Notified => {}
        Wake::Enqueue => make_ready(t, home),
        Wake::UnparkInPlace => platform::unpark(home),
    }
}

/// Blocks the calling thread (see `blocking::block`).
pub(crate) fn block_current(publish: impl FnOnce(*mut Thmb) -> bool) {
    let t = platform::ltn();
    assert!(!t.is_null(), "libuthread: a blocking call outside a user thread or inside a library critical section");
    platform::set_ltn(ptr::null_mut());
    // SAFETY: `t` is the calling thread; from here until it runs again it is in the library.
    unsafe {
        (*t).state.begin_park();
        if !publish(t) {
            (*t).state.cancel_park();
            platform::set_ltn(t);
            return;
        }
        park_current(t);
    }
}

/// Takes the published, `PARKING` thread `t` (the caller) off its vCPU until woken. Called with
/// LTN = 0; returns with LTN = `t`.
unsafe fn park_current(t: *mut Thmb) {
    // SAFETY: `t` is the calling thread.
    let state = unsafe { &(*t).state };
    // SAFETY: as above; the vCPU cannot change inside the critical section.
    let v = unsafe { (*t).vcpu.load(Ordering::Relaxed) };
    if !work_anywhere() && !SHUTDOWN.load(Ordering::SeqCst) {
        // Nothing else to run: keep the vCPU, with the thread's registers live in it, and park.
        if !state.park_in_place() {
            platform::set_ltn(t);
            return;
        }
        loop {
            IDLE.announce(v);
            if state.take_in_place_wake() {
                IDLE.retract(v);
                wake_helper(v);
                platform::set_ltn(t);
                return;
            }
            if work_anywhere() || SHUTDOWN.load(Ordering::SeqCst) {
                // Work arrived for this vCPU: give it up properly.
                IDLE.retract(v);
                if state.leave_in_place() {
                    break;
                }
                wake_helper(v);
                platform::set_ltn(t);
                return;
            }
            platform::park(v);
        }
    }
    // SAFETY: `t` is the caller, the scheduler stack of `v` is free (this vCPU is in the
    // library, not in the loop), and `after_switch` never returns.
    unsafe { context::switch_out(t, VCPUS[v].top(), after_switch, v, t as usize | ACTION_BLOCK) };
}

/// Lets other ready threads of this vCPU run (returns at once when there are none).
pub(crate) fn yield_current() {
    let t = platform::ltn();
    if t.is_null() {
        return;
    }
    // A look before entering the critical section (saves two LTN writes when there is nothing
    // to yield to). The vCPU read here may be stale if the thread is moved right now; that only
    // makes the look a hint, and the decision below is taken with LTN = 0.
    // SAFETY: `t` is the calling thread.
    if !VCPUS[unsafe { (*t).vcpu.load(Ordering::Relaxed) }].has_work() && !SHUTDOWN.load(Ordering::Relaxed) {
        return;
    }
    platform::set_ltn(ptr::null_mut());
    // SAFETY: `t` is the calling thread; its vCPU cannot change with LTN = 0.
    let v = unsafe { (*t).vcpu.load(Ordering::Relaxed) };
    if !VCPUS[v].has_work() && !SHUTDOWN.load(Ordering::SeqCst) {
        platform::set_ltn(t);
        return;
    }
    // SAFETY: as in `park_current`.
    unsafe { context::switch_out(t, VCPUS[v].top(), after_switch, v, t as usize | ACTION_YIELD) };
}

// ------------------------------------------------------------------------------------------
// Thread start and exit.

/// The Rust entry of every user thread (reached from `libuthread_thread_start`).
unsafe extern "C" fn thread_main(t: *mut Thmb) -> ! {
    // SAFETY: the scheduler started `t` on its own fresh stack; `body` is set at spawn.
    let body = unsafe { (*(*t).body.get()).take() }.expect("libuthread: thread started twice");
    let outcome = crate::unwind::catch(body);
    // SAFETY: nobody reads `outcome` before `join` says EXITED.
    unsafe { *(*t).outcome.get() = Some(outcome) };
    crate::local::destroy_all(t);
    // SAFETY: `t` is live (this thread holds a reference until it leaves the vCPU).
    match unsafe { (*t).join.swap(JOIN_EXITED, Ordering::AcqRel) } {
        JOIN_RUNNING => {}
        // Nobody will join: drop the result here, in user context (it may run user code).
        // SAFETY: the handle is gone; only we can reach `outcome`.
        JOIN_DETACHED => drop(unsafe { (*(*t).outcome.get()).take() }),
        // SAFETY: the joiner published itself by CAS and waits for exactly this wake-up.
        joiner => unsafe { wake(joiner as *mut Thmb) },
    }
    platform::set_ltn(ptr::null_mut());
    // SAFETY: vCPU fixed now (LTN = 0).
    let v = unsafe { (*t).vcpu.load(Ordering::Relaxed) };
    // SAFETY: the thread's stack is abandoned; `after_switch` reclaims it.
    unsafe { context::call_on_stack(VCPUS[v].top(), after_switch, v, t as usize | ACTION_EXIT) }
}

// ------------------------------------------------------------------------------------------
// The vCPU loop.

/// Where every switch into the scheduler lands, on the top of vCPU `v`'s scheduler stack, with
/// LTN = 0 and the previous thread's window complete.
unsafe extern "C" fn after_switch(v: usize, word: usize) -> ! {
    let t = (word & !ACTION_MASK) as *mut Thmb;
    // SAFETY: `t` just left this vCPU and is owned by the scheduler until queued or parked.
    unsafe {
        match word & ACTION_MASK {
            ACTION_YIELD => {
                (*t).state.set(READY);
                VCPUS[v].push(t);
            }
            ACTION_BLOCK => {
                if !(*t).state.commit_park() {
                    // Woken before the switch finished: runnable again (behind what is queued).
                    (*t).state.set(READY);
                    VCPUS[v].push(t);
                }
            }
            _ => {
                let (base, len) = (*t).stack.replace((0, 0));
                give_stack((*t).stack_size, base, len);
                let is_main = (*t).is_main;
                Thmb::release(t);
                if is_main {
                    SHUTDOWN.store(true, Ordering::SeqCst);
                    for w in 0..vcpu_count() {
                        platform::unpark(w);
                    }
                }
            }
        }
    }
    vcpu_loop(v)
}

unsafe extern "C" fn loop_entry(v: usize, _: usize) -> ! {
    vcpu_loop(v)
}

fn vcpu_loop(v: usize) -> ! {
    loop {
        // Once the main thread has exited, stop at once: what is still queued is abandoned.
        if SHUTDOWN.load(Ordering::SeqCst) {
            retire(v);
        }
        let t = VCPUS[v].pop();
        if !t.is_null() {
            wake_helper(v);
            // SAFETY: a popped thread is READY and ours.
            unsafe { dispatch(v, t) }
        }
        let t = steal(v);
        if !t.is_null() {
            // SAFETY: as above.
            unsafe { dispatch(v, t) }
        }
        IDLE.announce(v);
        if work_anywhere() || SHUTDOWN.load(Ordering::SeqCst) {
            IDLE.retract(v);
            continue;
        }
        platform::park(v);
        IDLE.retract(v);
    }
}

fn steal(v: usize) -> *mut Thmb {
    let n = vcpu_count();
    for i in 1..n {
        let t = VCPUS[(v + i) % n].pop();
        if !t.is_null() {
            return t;
        }
    }
    ptr::null_mut()
}

/// Runs `t` on vCPU `v`: starts it (lazy creation) or restores what its mask says.
unsafe fn dispatch(v: usize, t: *mut Thmb) -> ! {
    // SAFETY: `t` is READY and owned by this vCPU now.
    unsafe {
        (*t).vcpu.store(v, Ordering::Relaxed);
        (*t).state.set(RUNNING);
        if (*t).stack.get().0 == 0 {
            let size = (*t).stack_size;
            let (base, len) = take_stack(size).unwrap_or_else(|| fatal("libuthread: no memory for a thread stack\n"));
            (*t).stack.set((base, len));
            // The FP area sits at the top of the stack allocation, the stack below it.
            let fp_area = (base + len - FP_AREA_SIZE) & !(FP_AREA_ALIGN as usize - 1);
            (*t).header.fp_area = fp_area as u64;
            context::init_window(&mut (*t).window, fp_area, t, thread_main);
            VCPUS[v].count_resume(false);
            context::resume_window(t, t)
        }
        let m = Thmb::mask(t);
        match m & !mask::FP {
            mask::WINDOW => {
                Thmb::set_mask(t, mask::NONE);
                VCPUS[v].count_resume(false);
                context::resume_window(t, t)
            }
            mask::FULL => {
                Thmb::set_mask(t, mask::NONE);
                VCPUS[v].count_resume(true);
                context::resume_full(t, m & mask::FP != 0)
            }
            _ => fatal("libuthread: a started thread with nothing saved\n"),
        }
    }
}

fn retire(v: usize) -> ! {
    if v == 0 {
        while ACTIVE.load(Ordering::SeqCst) > 1 {
            platform::park(0);
        }
        // SAFETY: `run` saved the root window before entering this loop and waits in it.
        unsafe { context::resume_window(ROOT.0.get(), ptr::null_mut()) }
    }
    ACTIVE.fetch_sub(1, Ordering::SeqCst);
    platform::unpark(0);
    platform::retire_vcpu(v)
}

// ------------------------------------------------------------------------------------------
// The platform's side (Tsumugi upcalls).

/// (Re)enters vCPU `vcpu`'s scheduler loop from the top of its scheduler stack; never returns.
/// Call with LTN = 0 (the platform's vCPU start and upcall handler).
pub fn enter_vcpu_loop(vcpu: usize) -> ! {
    assert!(vcpu < vcpu_count(), "libuthread: no vCPU {vcpu}");
    // SAFETY: with LTN = 0 nothing of this vCPU's scheduler stack is live (a user thread was
    // running, or the vCPU is new), and `loop_entry` never returns.
    unsafe { context::call_on_stack(VCPUS[vcpu].top(), loop_entry, vcpu, 0) }
}

/// `t` was stopped by the kernel (mask FULL: `PREEMPTED`, `UNBLOCKED`, or a handled `FAULT`):
/// makes it ready again.
///
/// # Safety
/// `t` is a live ThMB of this runtime, stopped by the kernel, which wrote its full frame; it is
/// in no ready queue. Call with LTN = 0.
pub unsafe fn requeue_full(t: *mut Thmb) {
    // SAFETY: per the contract the frame is complete and nobody else edits `t`.
    unsafe {
        let pc = context::frame_pc(&raw const (*t).header.full);
        // The kernel's mask: FULL, and FP if it saved live FP/SIMD state into the FP area.
        let fp = Thmb::mask(t) & mask::FP;
        match context::interrupted_resume(pc) {
            // Stopped inside a resume sequence: what was being restored is still intact. A
            // FULL resume restores FP before it sets LTN, so a stop after that saved the
            // thread's own FP state again (bit FP); a WINDOW resume needs none (FP is dead).
            Some(context::Interrupted::Window) => Thmb::set_mask(t, mask::WINDOW),
            Some(context::Interrupted::Full) => Thmb::set_mask(t, mask::FULL | fp),
            None => {
                (*t).resume = ptr::read_volatile(&raw const (*t).header.full);
                Thmb::set_mask(t, mask::FULL | fp);
            }
        }
        (*t).state.set(READY);
        let home = (*t).vcpu.load(Ordering::Relaxed);
        make_ready(t, home);
    }
}

/// `t` blocked in the kernel (`BLOCKED`): it is not runnable until [`requeue_full`].
///
/// # Safety
/// `t` is a live ThMB of this runtime. Call with LTN = 0.
pub unsafe fn note_blocked(t: *mut Thmb) {
    // SAFETY: per the contract.
    unsafe { (*t).state.set(KERNEL_BLOCKED) };
}

/// What the platform runs on each new vCPU.
fn vcpu_main(vcpu: usize) -> ! {
    enter_vcpu_loop(vcpu)
}

// ------------------------------------------------------------------------------------------
// Runtime entry.

/// Runs `main` as the first user thread on `vcpus` vCPUs (0: the platform's default) and
/// returns its result once it returns. See [`crate::run`].
pub(crate) fn run(vcpus: usize, name: Option<String>, body: Body) -> crate::thmb::Outcome {
    assert!(platform::ltn().is_null(), "libuthread::run called inside a user thread");
    let n = if vcpus == 0 { platform::default_vcpus() } else { vcpus }.clamp(1, MAX_VCPUS);
    while RUN_LOCK.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
        platform::sleep_current(1_000_000);
    }
    SHUTDOWN.store(false, Ordering::SeqCst);
    context::detect_fp();
    IDLE.clear();
    ACTIVE.store(n, Ordering::SeqCst);
    GENERATION.fetch_add(1, Ordering::AcqRel);
    VCPU_COUNT.store(n, Ordering::SeqCst);
    for vcpu in &VCPUS[..n] {
        vcpu.reset();
        vcpu.ensure_stack();
    }
    let mut main = Thmb::new_thread(body, name, DEFAULT_STACK_SIZE, 2);
    main.is_main = true;
    let main = Box::into_raw(main);
    // SAFETY: new and ours.
    unsafe { (*main).state.set(READY) };
    VCPUS[0].push(main);
    platform::start_vcpus(n, vcpu_main);
    // vCPU 0: park the caller's registers in the root context and run the loop.
    // SAFETY: ROOT is only used here and by `retire(0)`; the scheduler stack is free.
    unsafe { context::switch_out_window(ROOT.0.get(), VCPUS[0].top(), loop_entry, 0, 0) };
    // Every vCPU has retired.
    // SAFETY: the main thread exited (so `outcome` is written) and we hold a reference.
    let outcome = unsafe { (*(*main).outcome.get()).take() }.expect("libuthread: main thread left no result");
    // SAFETY: our reference.
    unsafe { Thmb::release(main) };
    VCPU_COUNT.store(0, Ordering::SeqCst);
    RUN_LOCK.store(false, Ordering::Release);
    outcome
}
