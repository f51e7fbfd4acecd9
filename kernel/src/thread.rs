//! Kernel threads (KThreads): what the scheduler runs. A user thread's KThread carries its
//! kernel stack (with the user frame at the top while it is in the kernel), its view, and its
//! life: state, exit value, joiners. Kernel threads (no domain) run kernel functions.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use arch::context::KernelContext;
use arch::trap::TrapFrame;
use core::cell::UnsafeCell;
use core::mem::size_of;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use arch::sync::Mutex;

use crate::domain::Domain;
use crate::mm::kernel_stack::{KernelStack, NoStack};
use crate::mm::view_space::ViewId;
use crate::sched::scheduler::{self, Then};

/// A thread's view and the views it left that a CPU may still have loaded.
struct ViewSlot {
    current: Option<ViewId>,
    /// Left behind by rights changes while the thread may still run on them; detached by the
    /// CPU that next loads the thread's root (so no CPU ever runs on a freed table).
    stale: Vec<ViewId>,
}

/// A thread's life-cycle state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Made, or in a run queue.
    Ready,
    /// On a CPU.
    Running,
    /// Waiting (join, sleep, a domain's end).
    Blocked,
    /// Ended.
    Dead,
}

/// What a thread runs.
#[derive(Clone, Copy, Debug)]
pub enum Body {
    /// User code: start at `ip` with stack `sp` and first argument `arg`.
    User {
        /// Entry point.
        ip: u64,
        /// Initial stack pointer.
        sp: u64,
        /// First argument.
        arg: u64,
    },
    /// A kernel function.
    Kernel(fn() -> !),
    /// A new activation of a Kernel-Notification program: enters the handler `ip` on the upcall
    /// stack `sp` with `args` (kind, thread, vCPU, argument) and LTN = 0.
    Upcall {
        /// The handler.
        ip: u64,
        /// Top of the vCPU's upcall stack.
        sp: u64,
        /// The upcall's arguments.
        args: [u64; 4],
    },
}

impl State {
    const fn from_u8(v: u8) -> State {
        match v {
            0 => State::Ready,
            1 => State::Running,
            2 => State::Blocked,
            _ => State::Dead,
        }
    }
}

/// The parts of a thread others change, under one lock. The state itself is an atomic
/// (`Thread::state`) so the switch path can mark threads `Running` and `Ready` without the
/// lock; the transitions that must be atomic with other checks (block unless killed, wake a
/// blocked thread, die) store it while holding this lock, and [`Thread::state`] reads it
/// under the lock.
struct Life {
    exit_value: Option<usize>,
    joiners: Vec<Arc<Thread>>,
}

/// A kernel thread.
pub struct Thread {
    /// Unique id (the `tid` of syscalls).
    pub id: u64,
    /// The program it belongs to (`None` for kernel threads).
    pub domain: Option<Arc<Domain>>,
    /// Opted in to thread-view-affinity scheduling.
    pub affine: bool,
    body: Body,
    /// The saved kernel context; touched only by the CPU switching this thread.
    pub(crate) context: UnsafeCell<KernelContext>,
    /// Whether a CPU is still on this thread's stack (set while running and until the next
    /// context has finished the switch).
    pub(crate) on_cpu: AtomicBool,
    /// Frame number of the view's root table (0 = the kernel's).
    pub(crate) root: AtomicU64,
    /// CPU that ran it last.
    pub(crate) last_cpu: AtomicUsize,
    /// CPU it is pinned to (`thread_pin`), or [`NO_PIN`]. Only the thread itself changes it,
    /// while it runs, so it is stable while the thread waits in a run queue.
    pub(crate) pin: AtomicUsize,
    /// The kernel asked it to end (its program was killed or exited).
    pub killed: AtomicBool,
    /// The user LTN register (x86_64 GS base) while the thread is off its CPU.
    pub(crate) ltn: AtomicU64,
    /// The vCPU of its Kernel-Notification program this thread currently is (`NOT_A_VCPU`
    /// otherwise). Written only by the thread itself, or while it is blocked by the thread that
    /// hands it a vCPU (a spare activation; published by the wake-up), or before it first runs
    /// (published by its first queueing); it guards no other data, and other threads read it only for
    /// reports: every access is `Relaxed` (an Acquire/Release pair would cost a fence on
    /// riscv64 on every stop path).
    pub vcpu: AtomicUsize,
    /// FP/SIMD state (lazy switching, `fpu.rs`).
    pub fp: crate::fpu::ThreadFp,
    /// Performance counters (`perf.rs`).
    pub perf: crate::perf::ThreadPerf,
    /// The view (guarded: grants and revokes by other threads change it).
    view: Mutex<ViewSlot>,
    /// Whether `view.stale` may be non-empty: set under the `view` lock when a view is left
    /// behind, so the switch path looks at one flag instead of taking the lock.
    has_stale: AtomicBool,
    /// Kernel stack, taken when the thread has ended and a CPU has left it.
    stack: Mutex<Option<KernelStack>>,
    /// Top of the kernel stack (cached: the stack never moves).
    stack_top: u64,
    /// The life-cycle state, a `State` as `u8` (written under `life` except by the switch
    /// path's Ready/Running marks, see [`Life`]).
    state: AtomicU8,
    life: Mutex<Life>,
}

// SAFETY: `context` is an UnsafeCell touched only by the CPU switching the thread (with
// interrupts off, serialised by `on_cpu`); every other field is atomic or locked.
unsafe impl Sync for Thread {}
// SAFETY: as above.
unsafe impl Send for Thread {}

/// `Thread::pin` of a thread that may run on any CPU.
pub const NO_PIN: usize = usize::MAX;

/// `Thread::vcpu` of threads that are not a vCPU.
pub const NOT_A_VCPU: usize = usize::MAX;

static NEXT_TID: AtomicU64 = AtomicU64::new(1);
/// Threads by id, while their domain lives.
static THREADS: Mutex<BTreeMap<u64, Arc<Thread>>> = Mutex::new(BTreeMap::new());
/// Sleeping threads by (deadline in nanoseconds since boot, id).
static SLEEPERS: Mutex<BTreeMap<(u64, u64), Arc<Thread>>> = Mutex::new(BTreeMap::new());
/// The earliest deadline in [`SLEEPERS`] (`u64::MAX`: none), read without its lock by the
/// timer tick, which then skips the queue when nothing is due. Written under the lock, after
/// every change (a stale value is only ever one the lock holder is about to replace).
static SLEEPERS_EARLIEST: AtomicU64 = AtomicU64::new(u64::MAX);

/// Publishes the earliest deadline of `s` (call with the [`SLEEPERS`] lock held).
fn publish_earliest(s: &BTreeMap<(u64, u64), Arc<Thread>>) {
    SLEEPERS_EARLIEST.store(s.first_key_value().map_or(u64::MAX, |(&(d, _), _)| d), Ordering::Release);
}

impl Thread {
    /// Makes a thread (not yet runnable). `view` is the view it is attached to (the caller
    /// attached it) and `root` that view's root.
    pub fn new(domain: Option<Arc<Domain>>, body: Body, view: Option<(ViewId, u64)>, affine: bool) -> Result<Arc<Thread>, NoStack> {
        let stack = KernelStack::new()?;
        let stack_top = stack.top().as_u64();
        let id = NEXT_TID.fetch_add(1, Ordering::Relaxed);
        let thread = Arc::new(Thread {
            id,
            domain,
            affine,
            body,
            context: UnsafeCell::new(KernelContext::EMPTY),
            on_cpu: AtomicBool::new(false),
            root: AtomicU64::new(view.map_or(0, |(_, r)| r)),
            last_cpu: AtomicUsize::new(arch::cpu::cpu_index()),
            pin: AtomicUsize::new(NO_PIN),
            killed: AtomicBool::new(false),
            ltn: AtomicU64::new(0),
            vcpu: AtomicUsize::new(NOT_A_VCPU),
            fp: crate::fpu::ThreadFp::new(),
            perf: crate::perf::ThreadPerf::new(),
            view: Mutex::new(ViewSlot { current: view.map(|(v, _)| v), stale: Vec::new() }),
            has_stale: AtomicBool::new(false),
            stack: Mutex::new(Some(stack)),
            stack_top,
            state: AtomicU8::new(State::Ready as u8),
            life: Mutex::new(Life { exit_value: None, joiners: Vec::new() }),
        });
        // The top of the stack is reserved for the user frame (traps from user mode push
        // theirs there too); the kernel side starts below it.
        let below_frame = stack_top - size_of::<TrapFrame>() as u64;
        // SAFETY: the stack is new and ours; thread_start never returns. The pointer passed
        // as argument stays valid: the thread keeps itself alive while running (`current`).
        unsafe {
            *thread.context.get() = KernelContext::new(below_frame, thread_start, Arc::as_ptr(&thread) as usize);
        }
        THREADS.lock().insert(id, thread.clone());
        Ok(thread)
    }

    /// Top of the kernel stack.
    pub fn kernel_stack_top(&self) -> u64 {
        self.stack_top
    }

    /// The slot of the thread's user frame at the top of its kernel stack: where traps from
    /// user mode put theirs, and from which it enters user mode.
    #[inline]
    pub(crate) fn user_frame_slot(&self) -> *mut TrapFrame {
        (self.stack_top - size_of::<TrapFrame>() as u64) as *mut TrapFrame
    }

    /// Makes the thread start afresh at `entry(arg)`, on its kernel stack below the user frame
    /// slot, when a CPU next switches to it: what its stack holds is abandoned (never unwound).
    ///
    /// # Safety
    /// The thread is blocked and off every CPU (`on_cpu` read false with Acquire, which orders
    /// this after the switch that saved its context), nothing switches to it before the caller
    /// makes it runnable, and nothing on its stack still owns anything.
    #[inline]
    pub(crate) unsafe fn restart_at(&self, entry: extern "C" fn(usize) -> !, arg: usize) {
        let below_frame = self.stack_top - size_of::<TrapFrame>() as u64;
        // SAFETY: the caller's contract: no CPU uses this context or the stack below the frame
        // slot, which is 16-byte aligned (as in `new`).
        unsafe { *self.context.get() = KernelContext::new(below_frame, entry, arg) };
    }

    /// Frees the kernel stack of an ended thread (called once a CPU has left it).
    pub(crate) fn release_stack(&self) {
        drop(self.stack.lock().take());
    }

    /// Whether the thread is pinned to one CPU.
    pub(crate) fn pinned(&self) -> bool {
        self.pin.load(Ordering::Relaxed) != NO_PIN
    }

    /// The CPU whose run queue the thread goes to when it becomes runnable: the one it is
    /// pinned to, else the one that ran it last.
    pub(crate) fn home_cpu(&self) -> usize {
        match self.pin.load(Ordering::Relaxed) {
            NO_PIN => self.last_cpu.load(Ordering::Relaxed),
            cpu => cpu,
        }
        .min(scheduler::MAX_CPUS - 1)
    }

    /// Sets the life-cycle state (under the life lock, ordered with wakers and killers).
    pub(crate) fn set_state(&self, state: State) {
        let _life = self.life.lock();
        self.state.store(state as u8, Ordering::Release);
    }

    /// Marks a thread the scheduler takes (`Running`) or requeues (`Ready`), without the life
    /// lock: those moves race with no waker (a wake acts only on `Blocked`) and no killer (which
    /// kicks a `Running` thread and leaves a `Ready` one to notice at its next kernel exit).
    pub(crate) fn mark(&self, state: State) {
        debug_assert!(matches!(state, State::Running | State::Ready));
        self.state.store(state as u8, Ordering::Release);
    }

    /// Marks the running thread `Blocked` before it gives up its CPU — unless it was killed:
    /// then it must not block, since `Domain::end` found it running and only kicked its CPU,
    /// so nobody would wake it. Returns whether it is `Blocked` now. `end` sets `killed` before
    /// it reads the state under the same lock, so either it finds `Blocked` (and wakes the
    /// thread) or this finds `killed`.
    pub(crate) fn block_unless_killed(&self) -> bool {
        let _life = self.life.lock();
        if self.killed.load(Ordering::Acquire) {
            return false;
        }
        self.state.store(State::Blocked as u8, Ordering::Release);
        true
    }

    /// The exit value (`None` while alive, or when killed).
    pub fn exit_value(&self) -> Option<usize> {
        self.life.lock().exit_value
    }

    /// The life-cycle state.
    pub fn state(&self) -> State {
        let _life = self.life.lock();
        State::from_u8(self.state.load(Ordering::Acquire))
    }

    /// The thread's view (`None` for kernel threads).
    pub fn view(&self) -> Option<ViewId> {
        self.view.lock().current
    }

    /// Moves the thread to `view` (already attached for it) with root `root`. The old view is
    /// kept as stale until a CPU that loads the new root detaches it ([`Thread::drop_stale_views`]).
    /// Returns `false`, changing nothing, if the thread has left its views (it is ending): the
    /// caller still holds `view` and must detach it — else nobody would (attack-surface
    /// finding 8: a grant racing the target's exit left a view, its tables and frames, behind).
    #[must_use]
    pub fn set_view(&self, view: ViewId, root: u64) -> bool {
        let mut slot = self.view.lock();
        if slot.current.is_none() {
            return false;
        }
        self.root.store(root, Ordering::Release);
        if let Some(old) = slot.current.replace(view) {
            slot.stale.push(old);
            self.has_stale.store(true, Ordering::Release);
        }
        true
    }

    /// Detaches the views this thread left, except those whose table some CPU still has loaded:
    /// a `set_view` racing the load of the current root (attack-surface finding 4) can make the
    /// root just loaded here stale, and freeing it would leave this CPU on a freed table. Those
    /// stay on the list for the thread's next switch or reload.
    #[inline]
    pub fn drop_stale_views(&self) {
        // The flag is set under the lock after the push; a set this load misses is one the
        // lock-taking version could have missed as well (the change raced with this switch,
        // and its kick reloads the root and comes back here).
        if self.has_stale.load(Ordering::Acquire) {
            self.detach_stale_views();
        }
    }

    /// [`Thread::drop_stale_views`] when there may be some (out of line: the switch path).
    #[cold]
    #[inline(never)]
    fn detach_stale_views(&self) {
        let mut stale = {
            let mut slot = self.view.lock();
            self.has_stale.store(false, Ordering::Relaxed);
            core::mem::take(&mut slot.stale)
        };
        if stale.is_empty() {
            return;
        }
        crate::mm::space::with(|s, m| {
            stale.retain(|&v| {
                let busy = s.root(v).is_some_and(|r| crate::sched::scheduler::root_loaded_anywhere(r.number()));
                if !busy {
                    s.detach(m, v).expect("a stale view is still attached for its thread");
                }
                busy
            });
        });
        if !stale.is_empty() {
            let mut slot = self.view.lock();
            slot.stale.extend(stale);
            self.has_stale.store(true, Ordering::Release);
        }
    }

    /// Takes the view away (at exit), with the stale ones.
    fn take_views(&self) -> Vec<ViewId> {
        let mut slot = self.view.lock();
        self.root.store(0, Ordering::Release);
        self.has_stale.store(false, Ordering::Relaxed);
        let mut all = core::mem::take(&mut slot.stale);
        all.extend(slot.current.take());
        all
    }
}

/// A thread by id.
pub fn find(id: u64) -> Option<Arc<Thread>> {
    THREADS.lock().get(&id).cloned()
}

/// Forgets the threads of a finished domain.
pub fn forget(ids: &[u64]) {
    let mut table = THREADS.lock();
    for id in ids {
        table.remove(id);
    }
}

/// First code of every thread, on its own kernel stack.
extern "C" fn thread_start(arg: usize) -> ! {
    scheduler::finish_switch();
    // SAFETY: `arg` is the thread itself, alive while it runs (the CPU's `current` holds it).
    let thread = unsafe { &*(arg as *const Thread) };
    match thread.body {
        Body::Kernel(f) => f(),
        Body::User { .. } | Body::Upcall { .. } => {
            if thread.killed.load(Ordering::Acquire) {
                exit_current(None);
            }
            let frame_addr = thread.stack_top - size_of::<TrapFrame>() as u64;
            let frame = match thread.body {
                Body::User { ip, sp, arg } => TrapFrame::new_user(ip, sp, arg),
                Body::Upcall { ip, sp, args } => {
                    let mut f = TrapFrame::new_user(ip, sp, 0);
                    f.set_upcall(ip, sp, args);
                    arch::cpu::set_user_ltn(0);
                    f
                }
                Body::Kernel(_) => unreachable!("matched above"),
            };
            // SAFETY: the frame goes to the top of this thread's own stack, where traps from
            // user mode put theirs; `enter` abandons this stack frame, which holds nothing
            // still needed.
            unsafe {
                core::ptr::write(frame_addr as *mut TrapFrame, frame);
                arch::trap::enter(frame_addr as *const TrapFrame)
            }
        }
    }
}

/// Leaves the kernel for user mode with the frame `frame` makes of a default user frame (entry
/// 0, stack 0), abandoning the running thread's kernel stack: the frame goes where traps from user mode put theirs (the top of the stack), as in
/// `thread_start`. Nothing on the stack may still own anything (it is never unwound). For an
/// activation that is reused for a new upcall (`notify`'s spare activations).
pub fn enter_user(frame: impl FnOnce(&mut TrapFrame)) -> ! {
    let top = scheduler::with_current(|t| t.expect("entering user mode from a thread").stack_top);
    let frame_addr = top - size_of::<TrapFrame>() as u64;
    // SAFETY: the frame slot at the top of this thread's own stack lies above every live kernel
    // frame (kernel code runs below it); `enter` abandons this stack. The frame is built in its
    // slot (a default user frame `frame` then fills in), not built elsewhere and copied.
    unsafe {
        let slot = frame_addr as *mut TrapFrame;
        TrapFrame::new_user_in_place(slot);
        frame(&mut *slot);
        arch::trap::enter(frame_addr as *const TrapFrame)
    }
}

/// Makes a thread that was created (or is blocked) runnable.
pub fn start(t: Arc<Thread>) {
    t.set_state(State::Ready);
    scheduler::make_ready(t);
}

/// Wakes `t` if it is blocked.
pub fn wake(t: Arc<Thread>) {
    {
        let _life = t.life.lock();
        if t.state.load(Ordering::Acquire) != State::Blocked as u8 {
            return;
        }
        t.state.store(State::Ready as u8, Ordering::Release);
    }
    scheduler::make_ready(t);
}

/// Wakes `t` if it is blocked, to run next on this CPU once the running thread gives it up
/// (`scheduler::hand_next`): for a running thread about to block that hands its CPU on.
/// `restart`: if `t` is off every CPU, it starts afresh at this entry and argument
/// ([`Thread::restart_at`]) instead of resuming where it blocked.
///
/// # Safety
/// With `restart`, nothing on `t`'s stack owns anything while it is blocked.
pub unsafe fn wake_next(t: Arc<Thread>, restart: Option<(extern "C" fn(usize) -> !, usize)>) {
    {
        let _life = t.life.lock();
        if t.state.load(Ordering::Acquire) != State::Blocked as u8 {
            return;
        }
        if let Some((entry, arg)) = restart {
            if !t.on_cpu.load(Ordering::Acquire) {
                // SAFETY: blocked under its life lock (no waker can run it meanwhile) and off
                // every CPU (Acquire above); the caller vouches for its stack.
                unsafe { t.restart_at(entry, arg) };
            }
        }
        t.state.store(State::Ready as u8, Ordering::Release);
    }
    scheduler::hand_next(t);
}

/// Ends the running thread. `value` is its exit value (`None` when it was killed). The last
/// thread of a domain ends the domain.
pub fn exit_current(value: Option<usize>) -> ! {
    let me = scheduler::current().expect("exit_current on an idle CPU");
    let joiners = {
        let mut life = me.life.lock();
        me.state.store(State::Dead as u8, Ordering::Release);
        life.exit_value = value;
        core::mem::take(&mut life.joiners)
    };
    for j in joiners {
        wake(j);
    }
    // Leave the views before they can be freed: run on the kernel's root from here on.
    let views = me.take_views();
    if !views.is_empty() {
        scheduler::reload_current_root();
        crate::mm::space::with(|s, m| {
            for v in views {
                s.detach(m, v).expect("a thread's view exists");
            }
        });
    }
    // The domain counts this thread as ended once a CPU has left its stack
    // (`scheduler::finish_switch`).
    drop(me);
    scheduler::schedule(Then::Exit);
    unreachable!("an ended thread was resumed");
}

/// Ends the running thread if its program was killed; called before returning to user mode.
pub fn exit_if_killed() {
    let killed = scheduler::with_current(|t| t.is_some_and(|t| t.killed.load(Ordering::Acquire)));
    if killed {
        exit_current(None);
    }
}

/// Blocks the running thread until `target` (of the same domain) ends; returns its value.
pub fn join(target: &Arc<Thread>) -> Option<usize> {
    let me = scheduler::current().expect("join from an idle CPU");
    {
        let mut life = target.life.lock();
        if target.state.load(Ordering::Acquire) == State::Dead as u8 {
            return life.exit_value;
        }
        life.joiners.push(me.clone());
        me.set_state(State::Blocked);
    }
    drop(me);
    scheduler::schedule(Then::Block);
    target.life.lock().exit_value
}

/// Blocks the running thread for at least `nanos` nanoseconds.
pub fn sleep_nanos(nanos: u64) {
    let me = scheduler::current().expect("sleep from an idle CPU");
    // The deadline is a time, not a tick count: a tick already under way must not shorten
    // the sleep. Sleepers wake at the first tick at or after it.
    let deadline = arch::timer::nanos().saturating_add(nanos.max(1));
    let key = (deadline, me.id);
    // A kill that came first found it running and only kicked its CPU: it must not block
    // (its way out of the syscall ends it).
    if !me.block_unless_killed() {
        return;
    }
    // `Blocked` before it is in the list, so a timer tick that takes it off the list wakes it
    // (a wake before the switch below is one the scheduler keeps).
    {
        let mut s = SLEEPERS.lock();
        s.insert(key, me);
        publish_earliest(&s);
    }
    scheduler::schedule(Then::Block);
    // A kill that woke it before it was in the list left the entry there (holding the thread
    // until its deadline, which may be never): take it out.
    let mut s = SLEEPERS.lock();
    if s.remove(&key).is_some() {
        publish_earliest(&s);
    }
}

/// The earliest deadline of a sleeping thread (nanoseconds; `u64::MAX`: none), without the lock.
#[inline(always)]
pub fn earliest_sleeper() -> u64 {
    SLEEPERS_EARLIEST.load(Ordering::Acquire)
}

/// Wakes sleepers whose deadline has passed at `now` (timer tick, CPU 0; nanoseconds). Most
/// ticks have none due: the earliest deadline is checked first, without the lock.
#[inline(always)]
pub fn wake_sleepers(now: u64) {
    if now >= SLEEPERS_EARLIEST.load(Ordering::Acquire) {
        wake_due(now);
    }
}

/// [`wake_sleepers`] when some sleeper may be due.
#[inline(never)]
fn wake_due(now: u64) {
    loop {
        let next = {
            let mut s = SLEEPERS.lock();
            let t = match s.first_key_value() {
                Some((&(deadline, id), _)) if deadline <= now => s.remove(&(deadline, id)),
                _ => None,
            };
            publish_earliest(&s);
            t
        };
        match next {
            Some(t) => wake(t),
            None => break,
        }
    }
}

/// Wakes `t` early if it sleeps (its program is being killed).
pub fn interrupt_sleep(t: &Thread) {
    let found = {
        let mut s = SLEEPERS.lock();
        let key = s.iter().find(|(_, v)| v.id == t.id).map(|(k, _)| *k);
        let found = key.and_then(|k| s.remove(&k));
        publish_earliest(&s);
        found
    };
    if let Some(t) = found {
        wake(t);
    }
}

/// A kernel thread running `f`.
pub fn spawn_kernel(f: fn() -> !) -> Result<Arc<Thread>, NoStack> {
    let t = Thread::new(None, Body::Kernel(f), None, false)?;
    start(t.clone());
    Ok(t)
}

/// Description of the running thread for reports.
pub fn describe_current() -> Option<(u64, Option<(u64, String)>)> {
    scheduler::with_current(|t| t.map(|t| (t.id, t.domain.as_ref().map(|d| (d.id, d.name.clone())))))
}
