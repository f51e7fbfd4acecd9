//! The M:N scheduler: per-vCPU ready queues with work stealing, the vCPU loop, the park/unpark
//! protocol, and spawn/exit/yield/block/wake.
//!
//! # Shape
//! Each vCPU has two ready queues and a *scheduler stack*. Its **own queue** ([`Local`]) is
//! touched only by the vCPU itself with LTN = 0 — plain loads and stores, no lock: the kernel
//! never upcalls while LTN = 0, and no other vCPU looks inside. Yields, blocks that find
//! another thread ready, and wake-ups made by a user thread (an unlock, a send) queue and take
//! threads there. Its **shared queue** (a spinlocked FIFO) receives what other vCPUs, upcalls
//! and threads outside the runtime make ready, and what the vCPU offers to idle vCPUs, which
//! steal from it ([`offer_work`]: when one is idle, the own queue moves there and an idle vCPU
//! is claimed and unparked). The owner drains the shared queue into its own one
//! ([`take_next`]) when its own runs dry and every [`DRAIN_EVERY`] switches otherwise, so a
//! thread made ready from elsewhere is not starved by two threads yielding to each other.
//! (Remote wake-ups go to the locked shared queue rather than a lock-free inbox only its owner
//! could empty: a thief must be able to take them while the owner runs a thread that never
//! enters the scheduler, which nothing preempts on the hosted platform.)
//!
//! A thread that yields or blocks while its vCPU's queue holds another ready thread that
//! resumes from a window switches **directly** to it, thread to thread, with no hop
//! ([`switch_direct`]): it takes the next thread off the own queue, publishes itself first
//! (queued behind the others, or its park committed) with its mask *in flight*
//! ([`MASK_IN_FLIGHT`]: `offer_work` may pass it to a thief before its window is saved), and
//! `libuthread_switch_window` saves its window, stores mask `WINDOW` and resumes the next
//! thread. A vCPU that takes an in-flight thread to run it waits for that store. No scheduler
//! loop runs, no second stack is touched, and no lock is taken.
//!
//! The other switches keep a hop: an exit (its stack must be freed once off it), a switch to a
//! thread that resumes from a FULL frame, and the full-save baseline land in `after_switch_to`
//! on the next thread's stack (below its saved stack pointer, dead while it is switched out;
//! the scheduler stack for a thread that resumes from a FULL frame), which finishes what the
//! thread asked for (queue it, commit its block, reclaim its stack) — only now, because the
//! thread's window is complete only now — and resumes the next thread.
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
//! `spawn` takes only a ThMB — from its vCPU's pool (`pool`: no lock, no allocation), with the
//! closure stored inline (`task`) — and lists it on its vCPU's unpublished list (`Vcpu::fresh`,
//! owner-only like the pool: two plain stores): no stack, no register state, no queue lock. The
//! list goes to the ready queue (`Vcpu::publish_fresh`) when the vCPU enters the scheduler, or
//! at once when a vCPU is idle; a join on the same vCPU takes its child straight off it. The first
//! dispatch takes a stack from the vCPU's pool (else from the shared `STACKS` list, which holds
//! what pools overflow with, else carved from a large chunk) and builds a window that
//! starts the thread; exit returns the stack and the ThMB to the pool of the vCPU it exits on.
//! So a thread that never runs costs a ThMB, and a stack is held only while a thread is live.
//! A join that finds its
//! child still unstarted takes it off its queue and runs it inline on the joiner's stack, as
//! the child ([`run_inline`]: work-first at the join, where Rust's fixed frames allow it). Measured hosted
//! (`examples/bench.rs`, release, before the direct switch): spawn + first run + exit + join
//! ≈ 0.26 µs; a yield round trip between two threads (two WINDOW switches through the
//! scheduler loop) ≈ 115 ns. Current figures: `cargo bench -p libuthread --bench switch`.
//!
//! # Deferred promotion
//! A task record (`crate::join`) lives on its thread's own list (`Thmb::records`) until the
//! thread enters the scheduler, which puts the thread's records on top of its vCPU's
//! unpublished list ([`flush_records`]); there it becomes a thread when the list is
//! published. A thread that *blocks* while another thread is ready on its vCPU and no vCPU is
//! idle does not publish its records ([`Vcpu::keep_unpublished`], from [`park_slow`]): it
//! switches to the ready thread and leaves them listed, the vCPU's deferral naming it as their
//! owner (spawned children on the list are published then: nobody may ever join them). When it is
//! woken and runs again it takes them back as if it had never blocked. Other threads that block
//! meanwhile keep the list so if nothing was listed since (the list head is the one the owner
//! left) and at most [`DEFER_BLOCKS`] times; otherwise, and on every other way into the
//! scheduler (a yield, an exit, the loop, an upcall), when the vCPU has nothing else to run, when
//! a vCPU is idle, and when a join misses its record ([`take_job`]), the list is published as
//! before. So a record whose joiner waits for it (`a` blocked on what `b` will do) still becomes
//! a thread, after at most `DEFER_BLOCKS` blocks of other threads on the vCPU. An owner woken
//! again without `b` (a timeout, a poll loop) that blocks again with the same list counts on
//! (its block is one of the `DEFER_BLOCKS`); one that forked or joined in between starts a new
//! count (it made progress; a poll loop that forks between polls can so keep its `b` a record
//! until the vCPU runs dry, a vCPU is idle, or another thread yields, exits or forks and blocks).
//!
//! When the list it left held nothing but its own records ([`Vcpu::defer_whole`]: nothing was
//! listed before them, or every record lies in its own stack), the woken owner's first join
//! takes the whole list back as its own list ([`Vcpu::reclaim_deferred`]), so its later joins
//! cost the own list's loads and stores rather than a critical section each, and its next block
//! hands over a list with nothing under it, which [`Vcpu::keep_unpublished`] need not walk for
//! spawned children (SW on x86_64 -icount: `fib` -6.0 %, `nqueens` -6.2 %).
//!
//! Why: promoting at every block made a suspend-everywhere program (every leaf of a
//! divide-and-conquer waits once for another thread, StackThreads' SW) promote *every* record.
//! The leaf's block promoted its thread's pending records behind the thread that would wake it;
//! the woken leaf queued behind them (FIFO), they ran first, forked, and their leaves blocked in
//! turn: breadth-first, every fork a thread with a stack, thousands live at once (SW `fib(20)`:
//! 10,945 promotions, about 7,000 16 KiB stacks live, 120 M instructions on x86_64 against 1 M
//! for fork-everywhere; now no promotion and 12.7 M, two switches per leaf).

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::ptr;

use tsumugi_abi::kn::{mask, FP_AREA_ALIGN, FP_AREA_SIZE, MAX_VCPUS};

use crate::context;
use crate::join::JobHeader;
use crate::sched::idle::IdleSet;
use crate::platform;
use crate::prim::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use crate::sched::pool::{Pool, Stack};
use crate::sched::queue::Fifo;
use crate::sched::runstate::{Wake, KERNEL_BLOCKED, READY, RUNNING};
use crate::spin::SpinLock;
use crate::thmb::{Thmb, JOIN_DETACHED, JOIN_EXITED, JOIN_RUNNING};

/// Default stack size of a user thread.
pub(crate) const DEFAULT_STACK_SIZE: usize = 256 * 1024;
/// Size of each vCPU's scheduler stack.
const SCHED_STACK_SIZE: usize = 128 * 1024;
/// Stacks kept on the shared overflow list at most where the platform can take memory back
/// (beyond that, exiting threads' stacks go back to it). Where it cannot (Tsumugi: `free_stack`
/// does nothing, stacks are carved from chunks that live as long as the program) every stack is
/// kept, and [`take_stack`] takes from the list before it carves: the program's stacks stay
/// bounded by its peak number of live threads instead of growing by every stack freed beyond
/// the vCPUs' pools.
const STACK_POOL_MAX: usize = if platform::FREES_STACKS { 256 } else { usize::MAX };

/// What a thread asks the scheduler to do when it switches out (low bits of the ThMB address,
/// which is 64-byte aligned).
const ACTION_YIELD: usize = 0;
const ACTION_BLOCK: usize = 1;
const ACTION_EXIT: usize = 2;
const ACTION_MASK: usize = 63;

/// The save mask of a thread that is in a ready queue (or may be woken) while its vCPU is still
/// saving its window: a direct switch ([`switch_direct`]) publishes the thread *before* it saves
/// it, and its `libuthread_switch_window` replaces this value with `WINDOW` (a release store)
/// once the window is complete. Whoever takes such a thread to run it waits for that store
/// ([`wait_published`]); the switching vCPU runs with LTN = 0 and touches nothing of the thread
/// after the store, so the wait is a few instructions long. A library-only value: the kernel
/// writes a ThMB's mask only while LTN names it, and LTN is 0 for the whole switch. A bit the
/// ABI's masks do not use (`mask::{WINDOW, FULL, FP}` are bits 0 to 2), low enough to be the
/// immediate of a single store (x86_64: `1 << 63` took a `movabs` and a store; riscv64 two
/// instructions to build it; one instruction fewer per direct switch that publishes a thread).
const MASK_IN_FLIGHT: u64 = 1 << 30;

/// One vCPU's scheduler state. A thread reaches its vCPU through the pointer in its ThMB
/// ([`home_of`]), so the hot paths never index [`VCPUS`]; the vCPU's number ([`Vcpu::id`]) and
/// the address of its `FP_LIVE` word ([`Vcpu::fp_live`], which the context switches read, at
/// [`VCPU_FP_LIVE_OFFSET`]) are fields.
pub(crate) struct Vcpu {
    /// This vCPU's number: its index in [`VCPUS`].
    id: usize,
    /// `platform::FP_LIVE[id]`, for the context switches (one load instead of an index).
    fp_live: &'static AtomicU64,
    /// This vCPU's own ready threads (owner-only: no lock, see [`Local`]).
    local: Local,
    /// Switches since the shared queue was last drained into `local` (owner-only).
    pops: AtomicUsize,
    /// The shared ready queue: threads made ready from elsewhere (another vCPU's wake, an
    /// upcall, a hosted timer) and the threads this vCPU offers to idle vCPUs; thieves take
    /// from here. Linked through the ThMBs.
    queue: SpinLock<Fifo<Thmb>>,
    /// Bit [`QUEUED`]: set while `queue` is not empty (every look only asks whether there is
    /// work), for looks without the lock (ordered against the idle bits by the fences in
    /// `idle`); changed only under `queue`'s lock. The other bits: a copy of
    /// `context::switch_flags` (written by [`mirror_switch_flag`] after every change there).
    /// Bit [`IDLE_SEEN`]: this vCPU's mirror of "some vCPU is idle" (set by announcing vCPUs,
    /// cleared only by this one: the protocol of `IdleSet::settle`). One word, so that
    /// [`Vcpu::unusual`] tests them all with one load (all change by read-modify-writes, so
    /// none overwrites another).
    attention: AtomicUsize,
    /// The scheduler stack `(base, len)`, allocated on first use and kept for later runs.
    stack_base: AtomicUsize,
    stack_len: AtomicUsize,
    /// Threads this vCPU resumed from a saved window (or started).
    resumed_window: AtomicU64,
    /// Threads this vCPU resumed from a full frame.
    resumed_full: AtomicU64,
    /// The thread a switch through the hop goes to, read in `after_switch_to`.
    /// Only this vCPU touches it, with LTN = 0.
    handoff: AtomicUsize,
    /// Free ThMBs and stacks, touched only by this vCPU with LTN = 0 (`pool`).
    pool: Pool,
    /// Unpublished children: the head of a LIFO list (linked through `run_next`, newest first)
    /// of threads spawned on this vCPU that have not been handed to the ready queue yet.
    /// Touched only by this vCPU with LTN = 0, like `pool` (an atomic only so that the yield
    /// look, which may read a stale vCPU's word, is not a data race; every access is Relaxed
    /// and compiles to a plain load or store). See "Lazy creation" in the module docs.
    fresh: AtomicUsize,
    /// The deferral of the unpublished list (see "Deferred promotion" in the module docs;
    /// owner-only, LTN = 0, like `fresh`): the blocked thread whose block left its task records
    /// unpublished (0: none), the list's head at that block, and how many more blocks of other
    /// threads may leave the list so.
    defer_owner: AtomicUsize,
    defer_head: AtomicUsize,
    defer_left: AtomicUsize,
    /// Whether the deferred list held nothing but its owner's task records when it was left
    /// (the list was empty before the owner's block handed its own list over): then the owner
    /// may take the whole list back as its own list ([`take_job_elsewhere`], "Deferred
    /// promotion"). Owner-only, LTN = 0, like `fresh`.
    defer_whole: AtomicBool,
}

/// Where a [`Vcpu`] holds the address of its `FP_LIVE` word: the context switches, given a
/// `*const Vcpu`, test FP liveness with two loads.
pub(crate) const VCPU_FP_LIVE_OFFSET: usize = core::mem::offset_of!(Vcpu, fp_live);

/// [`Vcpu::attention`]'s bit for a non-empty shared queue: clear of the switch flags.
const QUEUED: usize = 4;
/// [`Vcpu::attention`]'s bit that mirrors "some vCPU is idle" (see `sched::idle`).
const IDLE_SEEN: usize = 8;
const _: () = assert!(IDLE_SEEN & (QUEUED | context::FLAG_FULL_SAVE | context::FLAG_SHUTDOWN) == 0);
const _: () = assert!(QUEUED & (context::FLAG_FULL_SAVE | context::FLAG_SHUTDOWN) == 0);

impl Vcpu {
    const fn new(id: usize, fp_live: &'static AtomicU64) -> Vcpu {
        Vcpu {
            id,
            fp_live,
            local: Local::new(),
            pops: AtomicUsize::new(0),
            queue: SpinLock::new(Fifo::new()),
            attention: AtomicUsize::new(0),
            stack_base: AtomicUsize::new(0),
            stack_len: AtomicUsize::new(0),
            resumed_window: AtomicU64::new(0),
            resumed_full: AtomicU64::new(0),
            handoff: AtomicUsize::new(0),
            pool: Pool::new(),
            fresh: AtomicUsize::new(0),
            defer_owner: AtomicUsize::new(0),
            defer_head: AtomicUsize::new(0),
            defer_left: AtomicUsize::new(0),
            defer_whole: AtomicBool::new(false),
        }
    }

    /// Whether this vCPU has unpublished children (a hint when read from another vCPU).
    #[inline(always)]
    fn has_fresh(&self) -> bool {
        self.fresh.load(Ordering::Relaxed) != 0
    }

    /// Non-zero if a voluntary switch of the thread `t` on this vCPU has more to do than switch
    /// to the head of its own queue: a switch flag ([`context::switch_flags`]: full-save
    /// baseline, shutdown), threads on the shared queue or some vCPU idle (then work is to be
    /// offered) — all three in `attention` —, unpublished children, or task records of `t`'s
    /// own (to hand over, [`flush_records`]). One value ORed from the three words, tested
    /// with one branch (x86_64: an `or` per word instead of a `test` and a branch each; the
    /// flags, the queue bit and the idle mirror in one word: x86_64 -icount, the mirror instead
    /// of a look at the shared idle word saved a load and an `or` per look). Relaxed looks,
    /// hints as in [`take_direct`].
    ///
    /// # Safety
    /// `t` is the calling thread, switching on this vCPU with LTN = 0.
    ///
    /// The unpublished list's head is read with a plain load, which the compiler folds into
    /// the `or` (an atomic load it keeps as a load of its own): only this vCPU writes it (with
    /// LTN = 0, as here), or the adopter of a revoked vCPU, which is stopped then — so no write
    /// races this read. (x86_64 -icount: one instruction per voluntary switch, which pays for
    /// the look at `t`'s own records.)
    #[inline(always)]
    unsafe fn unusual(&self, t: *mut Thmb) -> usize {
        #[cfg(not(loom))]
        // SAFETY: no write races this read (see above).
        let fresh = unsafe { *self.fresh.as_ptr() };
        #[cfg(loom)]
        let fresh = self.fresh.load(Ordering::Relaxed);
        // SAFETY: per the contract, `t`'s own list is its own.
        self.attention.load(Ordering::Relaxed) | fresh | unsafe { (*t).records.get() }
    }

    /// Whether the shared queue holds a thread (a hint without its lock).
    #[inline(always)]
    fn queued(&self, order: Ordering) -> bool {
        self.attention.load(order) & QUEUED != 0
    }

    /// Records whether the shared queue holds a thread; called under its lock after a change.
    #[inline(always)]
    fn set_queued(&self, queued: bool) {
        if queued {
            self.attention.fetch_or(QUEUED, Ordering::Release);
        } else {
            self.attention.fetch_and(!QUEUED, Ordering::Release);
        }
    }

    /// Puts the never-run thread `t`, spawned on this vCPU, on the unpublished list.
    ///
    /// # Safety
    /// The caller runs on this vCPU with LTN = 0; `t` is new, READY and in no list.
    #[inline(always)]
    unsafe fn push_fresh(&self, t: *mut Thmb) {
        // SAFETY: per the contract, `t` and the list are ours.
        unsafe { (*t).run_next.set(self.fresh.load(Ordering::Relaxed) as *mut Thmb) };
        self.fresh.store(t as usize, Ordering::Relaxed);
    }

    /// Takes `t` off the unpublished list if it is among its first `INLINE_LOOKUP` entries
    /// (almost always the first: a child joined is usually the last one spawned).
    ///
    /// # Safety
    /// The caller runs on this vCPU with LTN = 0.
    #[inline(always)]
    unsafe fn take_fresh(&self, t: *mut Thmb) -> bool {
        let head = self.fresh.load(Ordering::Relaxed) as *mut Thmb;
        if head == t {
            // SAFETY: a listed thread is live and its link is the list's.
            self.fresh.store(unsafe { (*t).run_next.get() } as usize, Ordering::Relaxed);
            return true;
        }
        // SAFETY: forwarded contract.
        !head.is_null() && unsafe { self.take_fresh_deeper(head as usize, t as usize) }
    }

    /// Takes the task record `h` off the unpublished list if it is among its first
    /// `INLINE_LOOKUP` entries (almost always the head).
    ///
    /// # Safety
    /// The caller runs on this vCPU with LTN = 0.
    #[inline(always)]
    unsafe fn take_job(&self, h: *const JobHeader) -> bool {
        let head = self.fresh.load(Ordering::Relaxed);
        let entry = h as usize | JOB_TAG;
        if head == entry {
            // SAFETY: a listed record is live and its link is the list's.
            self.fresh.store(unsafe { (*h).next() }, Ordering::Relaxed);
            return true;
        }
        // SAFETY: forwarded contract.
        head != 0 && unsafe { self.take_fresh_deeper(head, entry) }
    }

    /// [`Vcpu::take_fresh`] and [`Vcpu::take_job`] past the head: unlinks the entry word
    /// `entry`.
    ///
    /// # Safety
    /// As for `take_fresh`; `head` is the list's non-zero head.
    #[inline(never)]
    unsafe fn take_fresh_deeper(&self, head: usize, entry: usize) -> bool {
        let mut prev = head;
        // SAFETY: listed entries are live and their links are the list's (contract).
        unsafe {
            for _ in 0..INLINE_LOOKUP {
                let cur = entry_next(prev);
                if cur == 0 {
                    return false;
                }
                if cur == entry {
                    set_entry_next(prev, entry_next(entry));
                    return true;
                }
                prev = cur;
            }
        }
        false
    }

    /// Publishes this vCPU's unpublished children: appends them to its own ready queue in the
    /// order they were spawned, then offers them to an idle vCPU if one is idle
    /// ([`offer_work`]). Called by the vCPU itself
    /// whenever it enters the scheduler (yield, block, exit, the loop, an upcall) and by a
    /// spawn that sees an idle vCPU.
    ///
    /// # Safety
    /// The caller runs on this vCPU with LTN = 0.
    #[inline(always)]
    unsafe fn publish_fresh(&'static self) {
        if self.has_fresh() {
            // SAFETY: forwarded contract.
            unsafe { self.publish_fresh_slow() }
        }
    }

    /// [`Vcpu::publish_fresh`] when there is something to publish.
    ///
    /// # Safety
    /// As for `publish_fresh`.
    #[inline(never)]
    unsafe fn publish_fresh_slow(&'static self) {
        let newest = self.fresh.load(Ordering::Relaxed);
        self.fresh.store(0, Ordering::Relaxed);
        self.defer_owner.store(0, Ordering::Relaxed);
        // SAFETY: the list's entries are ours (contract): live threads, READY, and records,
        // linked only here.
        unsafe {
            // Oldest first, so the queue keeps spawn order.
            let mut oldest = reverse_entries(newest);
            while oldest != 0 {
                let next = entry_next(oldest);
                // A task record becomes a thread now (`crate::join`).
                let t = entry_thread(oldest, Some(self));
                set_home(t, self);
                self.local.push(t);
                oldest = next;
            }
            offer_work(self.id);
        }
    }

    /// Whether the thread `t`, blocking on this vCPU (`v`), may leave the unpublished list's task
    /// records unpublished (see "Deferred promotion" in the module docs): true when another
    /// thread is ready here to switch to, no vCPU is idle, and either the records are `t`'s own
    /// (then `t` becomes the deferral's owner, and the spawned children among them are published
    /// now, in spawn order) or they are the deferral owner's, untouched since its block, and the
    /// deferral has blocks left (also when `t` is the owner blocking again with the list it left
    /// last time). False: the caller publishes the whole list.
    ///
    /// `only_own`: the list was empty before `t` handed its own list over, so it holds `t`'s
    /// task records and nothing else — no spawned child to look for (the walk that finds them
    /// costs a few instructions per record: SW `fib(20)` on x86_64, about a hundred a leaf),
    /// and `t` may take the whole list back after it is woken ([`take_job_elsewhere`]).
    ///
    /// # Safety
    /// The caller is `t`, on this vCPU with LTN = 0, the list not empty.
    #[inline(never)]
    unsafe fn keep_unpublished(&'static self, t: *mut Thmb, only_own: bool) -> bool {
        if IDLE.any() {
            return false;
        }
        let head = self.fresh.load(Ordering::Relaxed);
        let owner = self.defer_owner.load(Ordering::Relaxed);
        if owner != 0 && owner != t as usize {
            // Another blocked thread's records. Anything listed since (`t`'s own forks or
            // spawns) would mix two threads' entries: publish then.
            return !self.nothing_ready() && self.count_deferral(head);
        }
        // `t`'s own entries (no deferral, or `t` owned it and has run since): every entry on the
        // list was listed by `t` since it was last switched to, or was its own deferred list then
        // (every other way off the vCPU publishes the list). Records stay; spawned children go to
        // the ready queue as a publication would put them there (a record's joiner is `t`, which
        // takes it back; a spawned child may never be joined).
        // (A record "listed by `t`" may also be one of a joiner whose spawned child `t` runs
        // inline on the joiner's stack: its join flushed them. Whether the list is `t`'s alone
        // — `defer_whole` — is known for sure when nothing was listed before `t`'s records
        // (`only_own`), or when every record lies in `t`'s own stack: only `t`'s frames live
        // there while `t` runs, and the children it ran inline have joined every record they
        // made before returning to it.)
        let (head, whole) = if only_own {
            (head, true)
        } else {
            // SAFETY: per the contract, the list and its entries are ours, `t` is the caller.
            unsafe { self.publish_threads(head, (*t).stack.get()) }
        };
        head != 0 && !self.nothing_ready() && self.defer_own(t, head, whole)
    }

    /// Another thread's block keeps the deferred list whose head is `head`: true, counting the
    /// block, if the list is untouched since its owner's block (anything listed since would mix
    /// two threads' entries) and the deferral has blocks left.
    #[inline(always)]
    fn count_deferral(&self, head: usize) -> bool {
        let left = self.defer_left.load(Ordering::Relaxed);
        if head != self.defer_head.load(Ordering::Relaxed) || left == 0 {
            return false;
        }
        self.defer_left.store(left - 1, Ordering::Relaxed);
        true
    }

    /// `t`'s block leaves the list whose head is `head`, holding `t`'s records (`whole`: and
    /// nothing else), unpublished with `t` its owner: a new deferral, or — blocked again with
    /// the very list it left last time, no fork or join since (woken by a timeout, polling) —
    /// one more block of the current one. False when that one has no blocks left.
    #[inline(always)]
    fn defer_own(&self, t: *mut Thmb, head: usize, whole: bool) -> bool {
        self.defer_whole.store(whole, Ordering::Relaxed);
        if self.defer_owner.load(Ordering::Relaxed) == t as usize {
            if head == self.defer_head.load(Ordering::Relaxed) {
                return self.count_deferral(head);
            }
        }
        self.defer_owner.store(t as usize, Ordering::Relaxed);
        self.defer_head.store(head, Ordering::Relaxed);
        self.defer_left.store(DEFER_BLOCKS, Ordering::Relaxed);
        true
    }

    /// The head of the own queue if it resumes from a window (a direct switch can take it),
    /// else null. Owner-only, LTN = 0.
    #[inline(always)]
    fn window_head(&self) -> *mut Thmb {
        let to = self.local.head.load(Ordering::Relaxed) as *mut Thmb;
        if !to.is_null() && Thmb::mask(to) & !mask::FP == mask::WINDOW {
            return to;
        }
        ptr::null_mut()
    }

    /// The join of `me`'s record `h` after `me` was woken from a block that left its records
    /// unpublished ("Deferred promotion"): if the deferral is still `me`'s, the list held only
    /// `me`'s records when it was left ([`Vcpu::defer_whole`]) and `h` is its head, takes `h`
    /// and makes the rest of the list `me`'s own list again, as if `me` had never blocked — its
    /// later joins then take their records back with the own list's plain loads and stores
    /// (SW `fib(20)` on x86_64: a library critical section less per join, and the next block
    /// hands over a list with nothing under it, so [`Vcpu::keep_unpublished`] need not walk
    /// it). True if so.
    ///
    /// Why the list is `me`'s alone then: since the block, entries were only taken off it (by
    /// `me`'s joins) or pushed on top; a push by another thread (a spawn, its own records) is
    /// followed by a publication at that thread's next way into the scheduler, which ends the
    /// deferral, before this vCPU can run `me` again; `me`'s own pushes since (spawns) sit above
    /// its newest record, so with `h` at the head there are none left. Below `h` lie only the
    /// records `me` left and has not joined yet, in its stack's order (the own list's).
    ///
    /// # Safety
    /// `me` is the calling thread, on this vCPU with LTN = 0; `h`, its newest unjoined record,
    /// is not on its own list; `h` was listed by `me` and not taken back.
    #[inline(always)]
    unsafe fn reclaim_deferred(&self, h: *const JobHeader, me: *mut Thmb) -> bool {
        let entry = h as usize | JOB_TAG;
        if self.fresh.load(Ordering::Relaxed) != entry
            || self.defer_owner.load(Ordering::Relaxed) != me as usize
            || !self.defer_whole.load(Ordering::Relaxed)
            // SAFETY: `me`'s own list is its own (contract).
            || unsafe { (*me).records.get() } != 0
        {
            return false;
        }
        // SAFETY: per the contract, `me`'s own list is its own (and empty); the list's entries
        // are `me`'s live records (see above), linked in its stack's order.
        unsafe {
            debug_assert!(records_only_in_stack((*h).next(), (*me).stack.get()));
            (*me).records.set((*h).next());
        }
        self.fresh.store(0, Ordering::Relaxed);
        self.defer_owner.store(0, Ordering::Relaxed);
        true
    }

    /// The common cases of a block under "Deferred promotion", decided here without the rest of
    /// `park_slow` when everything else is the common case of a switch (no switch flag,
    /// shared-queue or idle bit set, no vCPU idle, the head of the own queue resuming from a
    /// window, as [`take_direct`] asks):
    /// - `t` has no records and another thread's deferred list is here, untouched since its
    ///   owner's block, with blocks left: the block counts against the deferral (what
    ///   [`Vcpu::keep_unpublished`] decides for another thread's block) — the server thread of a
    ///   suspend-everywhere run, at every request;
    /// - `t` has records and nothing is listed here: they are handed over and left unpublished
    ///   with `t` the owner, the whole list its own (what `park_slow`'s flush and
    ///   `keep_unpublished` decide then) — a suspend-everywhere leaf whose joiner took its list
    ///   back after its last block ([`Vcpu::reclaim_deferred`]).
    ///
    /// Then takes the own queue's head and returns it; else null, changing nothing (the
    /// general path decides). Each went through the whole of `park_slow` (x86_64 -icount:
    /// about 100 instructions a block).
    ///
    /// # Safety
    /// `t` is the calling thread, on this vCPU with LTN = 0.
    #[inline(always)]
    unsafe fn defer_direct(&'static self, t: *mut Thmb) -> *mut Thmb {
        if self.attention.load(Ordering::Relaxed) != 0 || IDLE.any() || SHUTDOWN.load(Ordering::Relaxed) {
            return ptr::null_mut();
        }
        let to = self.window_head();
        if to.is_null() {
            return ptr::null_mut();
        }
        let head = self.fresh.load(Ordering::Relaxed);
        let owner = self.defer_owner.load(Ordering::Relaxed);
        // SAFETY: `t`'s own list is its own (contract).
        let own = unsafe { (*t).records.get() };
        if own == 0 {
            if head == 0 || owner == 0 || owner == t as usize || !self.count_deferral(head) {
                return ptr::null_mut();
            }
        } else {
            if head != 0 || !self.defer_own(t, own, true) {
                return ptr::null_mut();
            }
            self.fresh.store(own, Ordering::Relaxed);
            // SAFETY: as above.
            unsafe { (*t).records.set(0) };
        }
        // SAFETY: on this vCPU with LTN = 0: the own queue is ours, its head `to` READY and
        // ours once taken.
        unsafe {
            self.local.pop_head(to);
            take_head(self, to);
        }
        to
    }

    /// Whether neither of this vCPU's ready queues holds a thread (the shared one: a hint).
    #[inline(always)]
    fn nothing_ready(&self) -> bool {
        self.local.is_empty() && !self.queued(Ordering::Relaxed)
    }

    /// Moves the spawned children (untagged entries) of the unpublished list whose head is
    /// `head` to the own ready queue, oldest first, leaving the task records listed in their
    /// order; returns the list's new head, and whether every record left lies in `stack` (a
    /// thread's `(base, len)`; none does in `(0, 0)`).
    ///
    /// # Safety
    /// As for [`Vcpu::publish_fresh`]; `head` is the list's head.
    unsafe fn publish_threads(&'static self, head: usize, stack: (usize, usize)) -> (usize, bool) {
        let mut new_head = head;
        // The last record kept (its link is rewritten when a child after it is taken out).
        let mut kept = 0;
        // The children taken out, oldest first (the walk goes newest first and prepends).
        let mut children: *mut Thmb = ptr::null_mut();
        let mut in_stack = stack.1 != 0;
        let mut e = head;
        // SAFETY: the list's entries are ours (contract), linked only here.
        unsafe {
            while e != 0 {
                let next = entry_next(e);
                if e & JOB_TAG != 0 {
                    kept = e;
                    in_stack &= (e & !JOB_TAG).wrapping_sub(stack.0) < stack.1;
                } else {
                    if kept == 0 {
                        new_head = next;
                    } else {
                        set_entry_next(kept, next);
                    }
                    let t = e as *mut Thmb;
                    (*t).run_next.set(children);
                    children = t;
                }
                e = next;
            }
            if new_head != head {
                self.fresh.store(new_head, Ordering::Relaxed);
            }
            while !children.is_null() {
                let next = (*children).run_next.get();
                set_home(children, self);
                self.local.push(children);
                children = next;
            }
        }
        (new_head, in_stack)
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
        self.set_queued(!queue.is_empty());
    }

    /// Takes the oldest ready thread, or null.
    fn pop(&self) -> *mut Thmb {
        if !self.queued(Ordering::Acquire) {
            return ptr::null_mut();
        }
        let mut queue = self.queue.lock();
        let t = queue.pop_front();
        self.set_queued(!queue.is_empty());
        t
    }

    fn has_work(&self) -> bool {
        self.queued(Ordering::Acquire)
    }

    /// Forgets whatever a previous runtime left queued (those threads were abandoned).
    fn reset(&self) {
        *self.queue.lock() = Fifo::new();
        self.local.clear();
        self.fresh.store(0, Ordering::Relaxed);
        self.defer_owner.store(0, Ordering::Relaxed);
        self.set_queued(false);
        self.attention.fetch_and(!IDLE_SEEN, Ordering::Relaxed);
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

/// A vCPU's own ready queue: a FIFO of ThMBs linked through `run_next`, touched only by its
/// vCPU with LTN = 0 (the scheduler, and library code inside a critical section on that vCPU).
/// The kernel never upcalls while LTN = 0, so nothing can interrupt an edit and look at the
/// half-edited list, and no other vCPU touches it: a push or a pop is a few plain loads and
/// stores — no lock, no fence, no atomic read-modify-write. Other vCPUs reach this vCPU's
/// threads through the shared queue only, which the owner fills from here when it sees an idle
/// vCPU ([`offer_work`]) and drains into here ([`take_next`]).
///
/// `head` is an atomic only so that another vCPU's look (`yield_current` may read a stale
/// vCPU's word, a hint) is not a data race; every access is Relaxed, a plain load or store.
struct Local {
    /// The oldest thread, or 0.
    head: AtomicUsize,
    /// The newest thread (meaningful while `head` is not 0).
    tail: core::cell::UnsafeCell<*mut Thmb>,
}

// SAFETY: `tail` is touched only by the owning vCPU with LTN = 0 (see the type's docs); `head`
// is atomic.
unsafe impl Sync for Local {}

impl Local {
    const fn new() -> Local {
        Local { head: AtomicUsize::new(0), tail: core::cell::UnsafeCell::new(ptr::null_mut()) }
    }

    /// Whether it holds no thread (a hint when read from another vCPU).
    #[inline(always)]
    fn is_empty(&self) -> bool {
        self.head.load(Ordering::Relaxed) == 0
    }

    /// Appends `t`.
    ///
    /// # Safety
    /// The caller is the owning vCPU with LTN = 0; `t` is live, READY and in no list.
    #[inline(always)]
    unsafe fn push(&self, t: *mut Thmb) {
        // SAFETY: per the contract, the list and `t` are ours.
        unsafe {
            (*t).run_next.set(ptr::null_mut());
            let head = self.head.load(Ordering::Relaxed) as *mut Thmb;
            if head.is_null() {
                self.head.store(t as usize, Ordering::Relaxed);
            } else {
                (**self.tail.get()).run_next.set(t);
            }
            *self.tail.get() = t;
        }
    }

    /// Takes the oldest thread, or null.
    ///
    /// # Safety
    /// The caller is the owning vCPU with LTN = 0.
    #[inline(always)]
    unsafe fn pop(&self) -> *mut Thmb {
        let t = self.head.load(Ordering::Relaxed) as *mut Thmb;
        if !t.is_null() {
            // SAFETY: a listed thread is live and its link is the list's.
            self.head.store(unsafe { (*t).run_next.get() } as usize, Ordering::Relaxed);
        }
        t
    }

    /// Takes the oldest thread, `head`, which the caller has just read as the head (not null):
    /// [`Local::pop`] without loading and testing the head again.
    ///
    /// # Safety
    /// As for `pop`; `head` is the current head, not null.
    #[inline(always)]
    unsafe fn pop_head(&self, head: *mut Thmb) {
        debug_assert_eq!(self.head.load(Ordering::Relaxed), head as usize);
        // SAFETY: a listed thread is live and its link is the list's.
        self.head.store(unsafe { (*head).run_next.get() } as usize, Ordering::Relaxed);
    }

    /// Takes the head `head` off and appends `t` (a yield's two queue operations in one: no
    /// second look at the head).
    ///
    /// # Safety
    /// As for `push`; `head` is the current head, not null.
    #[inline(always)]
    unsafe fn rotate(&self, head: *mut Thmb, t: *mut Thmb) {
        debug_assert_eq!(self.head.load(Ordering::Relaxed), head as usize);
        // SAFETY: per the contract, the list, `head` and `t` are ours.
        unsafe {
            let next = (*head).run_next.get();
            (*t).run_next.set(ptr::null_mut());
            if next.is_null() {
                self.head.store(t as usize, Ordering::Relaxed);
            } else {
                self.head.store(next as usize, Ordering::Relaxed);
                (**self.tail.get()).run_next.set(t);
            }
            *self.tail.get() = t;
        }
    }

    /// Unlinks `t` if it is among the first `limit` threads.
    ///
    /// # Safety
    /// As for `pop`.
    unsafe fn remove_near_front(&self, t: *mut Thmb, limit: usize) -> bool {
        let mut prev: *mut Thmb = ptr::null_mut();
        let mut cur = self.head.load(Ordering::Relaxed) as *mut Thmb;
        // SAFETY: listed threads are live and their links are the list's (contract).
        unsafe {
            for _ in 0..limit {
                if cur.is_null() {
                    return false;
                }
                let next = (*cur).run_next.get();
                if cur == t {
                    if prev.is_null() {
                        self.head.store(next as usize, Ordering::Relaxed);
                    } else {
                        (*prev).run_next.set(next);
                    }
                    if next.is_null() && !prev.is_null() {
                        *self.tail.get() = prev;
                    }
                    return true;
                }
                prev = cur;
                cur = next;
            }
        }
        false
    }

    /// Forgets every thread (a previous runtime's, abandoned).
    fn clear(&self) {
        self.head.store(0, Ordering::Relaxed);
    }
}

/// How many switches may pass between two drains of a vCPU's shared queue into its own while
/// its own queue is not empty (a thread made ready from elsewhere waits at most this many
/// switches plus the length of the own queue: the two queues together stay fair).
const DRAIN_EVERY: usize = 8;

/// How many blocks of other threads on its vCPU a blocked thread's deferred task records
/// survive unpublished (`Vcpu::keep_unpublished`): the bound on how long a record whose joiner
/// waits for it (`a` blocked on what `b` will do) stays a record while other threads keep the
/// vCPU busy.
const DEFER_BLOCKS: usize = 8;

/// Takes the next thread vCPU `v` runs: the oldest of its own queue, after moving what its
/// shared queue holds behind it when that queue is not empty and either the own queue is empty
/// or [`DRAIN_EVERY`] switches have passed. Null when both are empty.
///
/// # Safety
/// The caller runs on vCPU `v` with LTN = 0.
#[inline(always)]
unsafe fn take_next(v: usize) -> *mut Thmb {
    // SAFETY: `v` is a vCPU number (see `vcpu_at`).
    let vcpu = unsafe { vcpu_at(v) };
    // A Relaxed look: the lock in `drain_shared` orders what it takes. A thread pushed just
    // now that this look misses is found at the next switch, or by the idle re-check (which
    // follows a SeqCst fence) before this vCPU parks.
    if vcpu.queued(Ordering::Relaxed) {
        let pops = vcpu.pops.load(Ordering::Relaxed) + 1;
        vcpu.pops.store(pops, Ordering::Relaxed);
        if vcpu.local.is_empty() || pops >= DRAIN_EVERY {
            vcpu.pops.store(0, Ordering::Relaxed);
            // SAFETY: forwarded contract.
            unsafe { drain_shared(v) };
        }
    }
    // SAFETY: forwarded contract.
    unsafe { vcpu.local.pop() }
}

/// Moves every thread of vCPU `v`'s shared queue to the back of its own.
///
/// # Safety
/// As for [`take_next`].
#[inline(never)]
unsafe fn drain_shared(v: usize) {
    // SAFETY: `v` is a vCPU number (see `vcpu_at`).
    let vcpu = unsafe { vcpu_at(v) };
    let mut queue = vcpu.queue.lock();
    loop {
        let t = queue.pop_front();
        if t.is_null() {
            break;
        }
        // SAFETY: a queued thread is READY, live and now off the shared queue; we are `v`.
        unsafe {
            set_home(t, vcpu_at(v));
            vcpu.local.push(t);
        }
    }
    vcpu.set_queued(false);
}

/// If a vCPU is idle, offers vCPU `v`'s backlog to it: moves `v`'s own queue to the front of
/// its shared queue, where idle vCPUs steal, and claims and unparks one (publish, then claim:
/// the idle protocol's order, as in `make_ready`). The look is one Relaxed load; a vCPU that
/// goes idle unseen just stays parked while `v`, which is running, works through its queue.
///
/// # Safety
/// The caller runs on vCPU `v` with LTN = 0.
#[inline(always)]
unsafe fn offer_work(v: usize) {
    if IDLE.any() {
        // SAFETY: forwarded contract.
        unsafe { offer_work_slow(v) }
    }
}

/// [`offer_work`] when some vCPU is idle.
///
/// # Safety
/// As for `offer_work`.
#[inline(never)]
unsafe fn offer_work_slow(v: usize) {
    // SAFETY: `v` is a vCPU number (see `vcpu_at`).
    let vcpu = unsafe { vcpu_at(v) };
    if !vcpu.local.is_empty() {
        let mut queue = vcpu.queue.lock();
        let newer = queue.take_all();
        // SAFETY: we are `v` with LTN = 0; every thread moved is READY and live.
        unsafe {
            loop {
                let t = vcpu.local.pop();
                if t.is_null() {
                    break;
                }
                queue.push_back(t);
            }
            for t in newer {
                queue.push_back(t);
            }
        }
        vcpu.set_queued(!queue.is_empty());
    }
    if vcpu.has_work() {
        if let Some(w) = IDLE.claim(v) {
            platform::unpark(w);
        }
    }
}

/// A root context: the `run` caller's registers while the runtime runs on vCPU 0.
struct RootCell(core::cell::UnsafeCell<Thmb>);
// SAFETY: only vCPU 0 touches it, at `run`'s start and at shutdown (one runtime at a time).
unsafe impl Sync for RootCell {}

static VCPUS: [Vcpu; MAX_VCPUS] = {
    let mut vcpus = [const { Vcpu::new(0, &platform::FP_LIVE[0]) }; MAX_VCPUS];
    let mut v = 1;
    while v < MAX_VCPUS {
        vcpus[v].id = v;
        vcpus[v].fp_live = &platform::FP_LIVE[v];
        v += 1;
    }
    vcpus
};

/// vCPU 0, the vCPU of a blank ThMB ([`Thmb::blank`]): every ThMB's `vcpu` points to a vCPU.
pub(crate) const FIRST_VCPU: *mut Vcpu = &VCPUS[0] as *const Vcpu as *mut Vcpu;

/// vCPU `v`'s state, with no bounds check. Every vCPU number the scheduler hands around, and
/// every ThMB's `vcpu` word, is below `MAX_VCPUS`: they come from the runtime's own vCPU loop
/// (`0..vcpu_count()`), from [`route`], from an upcall's vCPU (the kernel gives numbers below
/// the count the program asked for) or from another such word, and nothing else writes them.
/// The `% MAX_VCPUS` each look used to clamp with cost an instruction per look (x86_64
/// -icount: one per block, per wake-up and per yield).
///
/// # Safety
/// `v < MAX_VCPUS`.
#[inline(always)]
pub(crate) unsafe fn vcpu_at(v: usize) -> &'static Vcpu {
    debug_assert!(v < MAX_VCPUS);
    // SAFETY: per the contract.
    unsafe { VCPUS.get_unchecked(v) }
}

/// The vCPU of thread `t` (the one running it, or the last one that did). A ThMB's `vcpu` word
/// always points into [`VCPUS`]: it starts at [`FIRST_VCPU`] and is only ever set by
/// [`set_home`] or copied from another such word.
///
/// # Safety
/// `t` is live.
#[inline(always)]
pub(crate) unsafe fn home_of(t: *const Thmb) -> &'static Vcpu {
    // SAFETY: per the contract and the invariant above.
    unsafe { &*(*t).vcpu.load(Ordering::Relaxed) }
}

/// The number of [`home_of`]`(t)`.
///
/// # Safety
/// `t` is live.
#[inline(always)]
pub(crate) unsafe fn vcpu_of(t: *const Thmb) -> usize {
    // SAFETY: forwarded.
    unsafe { home_of(t) }.id
}

/// Makes `vcpu` thread `t`'s vCPU.
///
/// # Safety
/// `t` is live, and the caller may write its `vcpu` word (it runs `t` with LTN = 0, or `t` is
/// READY and the caller's until queued).
#[inline(always)]
pub(crate) unsafe fn set_home(t: *mut Thmb, vcpu: &'static Vcpu) {
    // SAFETY: per the contract.
    unsafe { (*t).vcpu.store(vcpu as *const Vcpu as *mut Vcpu, Ordering::Relaxed) }
}

/// Sets or clears `flag` in every vCPU's copy of the switch flags (`Vcpu::attention`), after
/// `context::set_switch_flag` has done so in the original. A read-modify-write per copy, as
/// there, so that changes of different flags at once cannot leave a stale copy; Relaxed, as
/// the fast path's look, which was a hint before (a switch that misses a change sees it at the
/// next one).
pub(crate) fn mirror_switch_flag(flag: usize, on: bool) {
    for vcpu in &VCPUS {
        if on {
            vcpu.attention.fetch_or(flag, Ordering::Relaxed);
        } else {
            vcpu.attention.fetch_and(!flag, Ordering::Relaxed);
        }
    }
}
/// vCPUs of the running runtime (0 when none runs).
static VCPU_COUNT: AtomicUsize = AtomicUsize::new(0);
/// vCPUs in the runtime now, one bit each: started and neither retired nor revoked (space
/// sharing). vCPU 0 waits for the others to leave before `run` returns.
static LIVE: AtomicU64 = AtomicU64::new(0);
/// vCPUs the kernel has revoked (space sharing), one bit each: their queues were adopted by
/// the others, and nothing is queued on them until they are granted again ([`route`]).
static REVOKED: AtomicU64 = AtomicU64::new(0);
/// Revocations of each vCPU taken in ([`adopt_revoked`]), compared with the count a
/// `VCPU_GRANTED` upcall carries ([`rejoin`]).
static REVOCATIONS_SEEN: [AtomicU64; MAX_VCPUS] = [const { AtomicU64::new(0) }; MAX_VCPUS];
static IDLE: IdleSet = IdleSet::new();

/// vCPU `v` is going idle: the idle bit, then the mirror bit of every other vCPU of the runtime
/// (`IdleSet::announce_to`); after this, look for work once more before parking.
fn announce_idle(v: usize) {
    IDLE.announce_to(v, vcpus().iter().filter(|w| w.id != v).map(|w| &w.attention), IDLE_SEEN);
}
/// Set when the main thread has exited.
static SHUTDOWN: AtomicBool = AtomicBool::new(false);
/// Counts runtimes, so late events of an earlier one (a hosted sleep timer) can be dropped.
static GENERATION: AtomicU64 = AtomicU64::new(0);
/// One runtime at a time (`run` waits for the previous one).
static RUN_LOCK: AtomicBool = AtomicBool::new(false);
static ROOT: RootCell = RootCell(core::cell::UnsafeCell::new(Thmb::blank()));
/// Free thread stacks the vCPUs' pools had no room for: `(requested size, base, len)`.
static STACKS: SpinLock<Vec<(usize, usize, usize)>> = SpinLock::new(Vec::new());
/// How many stacks `STACKS` holds, stored under its lock: a look without the lock, so that a
/// vCPU whose pool is empty carves without taking the lock while the list is empty (the common
/// case as a program grows). A stale 0 only makes the vCPU carve instead of reusing one stack.
static STACKS_KEPT: AtomicUsize = AtomicUsize::new(0);

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

/// How many kernel stops found a thread inside an edit of its own record list and moved it back
/// to the edit's start (`context::restart_point`), since the program started.
pub fn restart_count() -> u64 {
    RESTARTS.load(Ordering::Relaxed)
}

/// See [`restart_count`].
static RESTARTS: AtomicU64 = AtomicU64::new(0);

/// Number of vCPUs of the running runtime (0 outside `run`).
#[inline]
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

/// Stacks made so far: carved from a chunk or taken from the platform (not those reused from a
/// free list). The conformance check `freed_stacks_are_used_again` reads it.
pub(crate) static STACKS_MADE: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

/// A stack for a thread that asked for `size` bytes, starting on vCPU `v`: a free one from `v`'s
/// pool (no lock), else from the shared overflow list, else a new one carved from `v`'s chunk,
/// else from the platform. Free stacks come before new ones, the shared list's too: a stack
/// that went there is used again rather than left while chunks grow.
///
/// A stack on either free list may go to any vCPU at once, so nothing may run on it any more
/// when it is put there. [`give_stack`] is called from one place only, the exit hop
/// (`after_switch_to` / `after_switch`), on another stack (the next thread's, below its saved
/// stack pointer, or the scheduler stack) after `thread_main` has left the exiting thread's
/// for good; see [`give_stack`] for why nobody else is on it then.
///
/// # Safety
/// Runs on vCPU `v` with LTN = 0.
unsafe fn take_stack(v: usize, size: usize) -> Option<(usize, usize)> {
    // SAFETY: forwarded contract.
    if let Some(stack) = unsafe { vcpu_at(v).pool.take_free_stack(size) } {
        return Some(stack);
    }
    if STACKS_KEPT.load(Ordering::Relaxed) != 0 {
        let mut pool = STACKS.lock();
        if let Some(i) = pool.iter().rposition(|&(s, _, _)| s == size) {
            let (_, base, len) = pool.swap_remove(i);
            STACKS_KEPT.store(pool.len(), Ordering::Relaxed);
            return Some((base, len));
        }
    }
    // SAFETY: forwarded contract.
    if let Stack::Ready(base, len) = unsafe { vcpu_at(v).pool.carve_stack(size) } {
        return Some((base, len));
    }
    STACKS_MADE.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
    platform::alloc_stack(size)
}

/// Gives back the stack of a thread that asked for `size` bytes, on vCPU `v`: to `v`'s pool,
/// else to the shared overflow list (from which any vCPU may take it at once), else to the
/// platform.
///
/// When a stack is free: its thread has exited and the vCPU it exited on has left it. Only the
/// exit hop calls this, on vCPU `v`, for the thread that just ended there: `thread_main` ran to
/// its end on the thread's own stack (its joiner woken, its unjoined children published, the
/// next thread prepared), then moved to another stack with `call_on_stack`, and nothing of it
/// comes back. Nobody else is on the stack: a thread runs only on its own vCPU's stack (it was
/// RUNNING here, so no other vCPU holds it), a child run inline (`run_inline`) runs on its
/// joiner's stack and has none of its own (`stack` stays (0, 0), so its end frees nothing),
/// a task record promoted to a thread (`crate::join`) lives in its joiner's frame, which the
/// joiner leaves only after the record is complete, and a thread blocked in the kernel or parked
/// in place has not exited. The joiner frees only the ThMB, by its reference count.
///
/// # Safety
/// Runs on vCPU `v` with LTN = 0, not on the stack; nothing runs on the stack any more.
unsafe fn give_stack(v: usize, size: usize, base: usize, len: usize) {
    // The caller's frame is on another stack (a look at the part of the contract that can be
    // checked here).
    debug_assert!(
        !(base..base + len).contains(&(&size as *const usize as usize)),
        "libuthread: a stack freed while the freeing code runs on it"
    );
    // SAFETY: forwarded contract.
    if unsafe { vcpu_at(v).pool.give_stack(size, base, len) } {
        return;
    }
    {
        let mut pool = STACKS.lock();
        if pool.len() < STACK_POOL_MAX {
            pool.push((size, base, len));
            STACKS_KEPT.store(pool.len(), Ordering::Relaxed);
            return;
        }
    }
    platform::free_stack(base, len);
}

/// A ThMB for a new thread: a retired one from the pool of the vCPU the caller runs on (`v`,
/// if it knows it runs on one with LTN = 0) — then `(t, true)` —, else uninitialised memory
/// from the heap, `(t, false)`.
///
/// # Safety
/// If `v` is given, the caller runs on that vCPU with LTN = 0.
#[inline(always)]
pub(crate) unsafe fn alloc_thmb(v: Option<&'static Vcpu>) -> (*mut Thmb, bool) {
    if let Some(vcpu) = v {
        // SAFETY: forwarded contract.
        let t = unsafe { vcpu.pool.take_thmb() };
        if !t.is_null() {
            return (t, true);
        }
    }
    (alloc_thmb_from_heap(), false)
}

/// [`alloc_thmb`] when no pool has one: uninitialised heap memory.
#[inline(never)]
fn alloc_thmb_from_heap() -> *mut Thmb {
    let layout = core::alloc::Layout::new::<Thmb>();
    // SAFETY: a ThMB is not zero-sized.
    let t = unsafe { alloc::alloc::alloc(layout) } as *mut Thmb;
    if t.is_null() {
        alloc::alloc::handle_alloc_error(layout);
    }
    t
}

/// Frees a retired ThMB (`Thmb::retire`): into the pool of vCPU `v` if given, else (or when
/// that pool is full) to the heap.
///
/// # Safety
/// `t` came from [`alloc_thmb`], is retired and nobody can reach it; if `v` is given, the
/// caller runs on vCPU `v` with LTN = 0.
#[inline]
pub(crate) unsafe fn free_thmb(t: *mut Thmb, v: Option<&'static Vcpu>) {
    if let Some(vcpu) = v {
        // A pooled ThMB's join word says RUNNING (invariant; `Thmb::new_thread` relies on
        // it): reset here, where the thread exited, not at every spawn — the inline join's
        // ThMB, pooled by `run_inline`, never left RUNNING.
        // The same for its count (`SPAWN_REFS`, which an inline join's ThMB still has).
        // Its save mask says NONE and its vCPU is the pool's too (invariants `Thmb::new_thread`
        // relies on, as for the join word): an exited thread's may say anything.
        // SAFETY: retired and unreachable (contract): ours.
        unsafe {
            (*t).join.store(JOIN_RUNNING, Ordering::Relaxed);
            (*t).refs.store(crate::thmb::SPAWN_REFS, Ordering::Relaxed);
            // (Its stack size is the default already: a thread that asked for another had
            // `extras`, which its retire cleared, resetting the size.)
            (*t).task.mark_pooled();
            Thmb::set_mask(t, mask::NONE);
            set_home(t, vcpu);
        }
        // SAFETY: forwarded contract.
        if unsafe { vcpu.pool.give_thmb(t) } {
            return;
        }
        // SAFETY: as above.
        unsafe { (*t).task.forget_spent() };
    }
    // SAFETY: forwarded contract.
    unsafe { free_thmb_to_heap(t) }
}

/// [`free_thmb`] when no pool takes the ThMB.
///
/// # Safety
/// As for `free_thmb`.
#[cold]
unsafe fn free_thmb_to_heap(t: *mut Thmb) {
    // SAFETY: a valid ThMB holding nothing but heap-free fields now; allocated by `alloc_thmb`
    // with this layout.
    unsafe {
        ptr::drop_in_place(t);
        alloc::alloc::dealloc(t as *mut u8, core::alloc::Layout::new::<Thmb>())
    }
}

// ------------------------------------------------------------------------------------------
// Making threads runnable.

/// Queues a READY thread: on an idle vCPU if there is one (preferring `home`), which is then
/// unparked — MULiTh's "hand it straight to an idle processor" — else on `home`.
fn make_ready(t: *mut Thmb, home: usize) {
    // Publish first, then claim (the idle protocol's order, `idle.rs`): a vCPU that announces
    // itself idle after the claim has looked finds the thread in its re-check. Claiming first
    // lost wake-ups: with no vCPU idle at the claim, `home` could announce, re-check its
    // still-empty queue and park just before the push — the thread stranded on a parked vCPU
    // (every vCPU parked, the hosted conformance run hung about once in 50).
    // A queued thread's `vcpu` names the queue it is on (`run_inline` looks there).
    // SAFETY: the caller owns the READY thread until it is queued.
    let home = route(home);
    // SAFETY: as above.
    unsafe { set_home(t, vcpu_at(home)) };
    // SAFETY: `home` is a vCPU number (see `vcpu_at`).
    unsafe { vcpu_at(home) }.push(t);
    // An idle vCPU other than `home` takes it from `home`'s queue by stealing.
    if let Some(v) = IDLE.claim(home) {
        platform::unpark(v);
    }
    // `home` revoked after `route` looked (the claim's SeqCst fence orders this load after the
    // push): the adopter may have emptied the queue before the push; move it on.
    if REVOKED.load(Ordering::Relaxed) & (1 << home) != 0 {
        rescue(home);
    }
}

/// How far into a ready queue `run_inline` looks for the child (a spawn joined at once is at
/// the queue's tail, which a short queue's walk reaches; beyond that, joining blocks). Divide
/// and conquer keeps about (depth × fan-out) unjoined children queued — `fib(20)` about 10,
/// `nqueens(8)` up to about 50 — and a child missed here is not a small loss: the joiner
/// blocks, the front of the queue starts on a stack of its own and spawns in turn, so the
/// queue goes breadth-first and thousands of threads end up with stacks (FK `fib(20)` cost
/// 11,000 instructions per spawn with a lookup of 8). The walk is a few loads per node.
const INLINE_LOOKUP: usize = 64;

/// Work-first at join (lazy thread creation, StackThreads/Cilk): if `t` — a child the caller
/// is about to join — has not started yet and is near the front of its ready queue, takes it
/// off the queue (under the queue lock: that is the claim, no vCPU can start it after) and
/// runs its body here, on the joiner's stack, as `t`: LTN and `current()` name the child, it
/// has its own thread-locals, and its ThMB is the one the kernel saves into. Returns its
/// outcome if it ran `t`.
///
/// A child run this way that blocks is an ordinary blocked thread: its window (on the joiner's
/// stack) goes into its own ThMB and another thread runs; the joiner, beneath it on the same
/// stack, cannot run meanwhile (it is in no queue and nobody can wake it: it is not blocked,
/// only buried), and continues when the child's body returns — on whatever vCPU the child
/// was then, which the joiner takes over. Rust cannot move frames between stacks, so a child
/// is run inline only at a join (where the joiner would wait anyway) and never moved later.
/// While inline, the child uses the joiner's FP area (the joiner is off every vCPU and saves
/// nothing there until it runs again).
///
/// On success (`Some`) it also does the join's part: it returns the child's outcome and `t`
/// is freed (the caller's handle and the running reference are the only ones, and both are
/// ours now), so the caller gives up its handle's reference by this call. (The outcome comes
/// back in registers when it fits: see `Task::run_claimed`.)
///
/// # Safety
/// The caller holds a reference to `t` (its `JoinHandle`), and `T` is `t`'s result type.
#[inline(always)]
pub(crate) unsafe fn run_inline<T>(t: *mut Thmb) -> Option<crate::task::Outcome<T>> {
    let mut critical = crate::spin::Critical::enter();
    let me = critical.thread();
    if me.is_null() {
        return None;
    }
    // SAFETY: `me` is the calling thread; its vCPU cannot change with LTN = 0.
    let vcpu = unsafe { home_of(me) };
    // The common case: `t` is still on this vCPU's unpublished list (it was spawned here and
    // nobody else can see it), usually at its head. Taking it off is the claim. Only then the
    // join word: a child on the list never started, so it cannot have exited, and the common
    // case skips the load; one that exited is left to the caller (whose wait returns at once).
    // SAFETY: on `v` with LTN = 0; the caller's reference keeps `t` live.
    let claimed = unsafe { vcpu.take_fresh(t) }
        || (unsafe { (*t).join.load(Ordering::Acquire) } != JOIN_EXITED && unsafe { claim_queued(vcpu.id, t) });
    if !claimed {
        critical.leave();
        return None;
    }
    // SAFETY: `t` never ran and is in no list: it is ours, and its `vcpu` says `v` (spawned
    // here, or set by `claim_queued`). `me` is the calling thread.
    unsafe {
        // The joiner's own task records go to the unpublished list: the child, on the joiner's
        // stack, may block, and what it waits for may be one of them — which its block (that
        // hands over the records of the thread that blocks, the child's) must be able to
        // promote. The joiner takes them back from there (`take_job_elsewhere`).
        flush_records(me, vcpu);
        (*t).header.fp_area = (*me).header.fp_area;
        // Its run state is left as it is (READY or RUNNING, see `Thmb::new_thread`): nothing
        // reads it before the child writes it itself, as it blocks.
        platform::set_ltn(t);
        // From here this code runs as `t`. (Its task holds the closure: a thread off every
        // list that never ran.) Its outcome comes back as the call's result.
        let outcome = (*t).task.run_claimed::<T>();
        // Its thread-locals and name, if it has any, go now, while it is still `t`; then the
        // ThMB holds nothing but the outcome (one test, and the retire has nothing left to do).
        // (Its task still says CLOSURE, over spent bytes: what a pooled ThMB's says.)
        if (*t).extras.get() {
            drop_extras(t);
        }
        // No JOIN_EXITED store: only a `JoinHandle` reads the join word, and the one handle is
        // the caller's, consumed by this join. So the word still says RUNNING, as a pooled
        // ThMB's must (the caller, who alone could change it, is here and not waiting).
        // Back to the joiner, on the vCPU the child is on now.
        platform::clear_ltn();
        let home = home_of(t);
        set_home(me, home);
        // The join: both references are ours (the handle's and the finished run's), so no
        // count to decrement; the ThMB, holding nothing now, goes straight to this vCPU's pool.
        debug_assert_eq!((*t).join.load(Ordering::Relaxed), JOIN_RUNNING);
        debug_assert_eq!((*t).refs.load(Ordering::Relaxed), crate::thmb::SPAWN_REFS);
        // Its save mask says NONE (it runs: see `resume`), and its vCPU is `home`, the pool's:
        // what a pooled ThMB's must say, with nothing to store.
        debug_assert_eq!(Thmb::mask(t), mask::NONE);
        let pooled = home.pool.give_thmb(t);
        if !pooled {
            (*t).task.forget_spent();
            free_thmb_to_heap(t);
        }
        platform::set_ltn(me);
        Some(outcome)
    }
}

/// [`run_inline`]'s end of a child with thread-locals, a name or a stack size of its own:
/// destroys the thread-locals (as the child: the caller's LTN is `t`), drops the name and the
/// table and resets the size, leaving the ThMB's extras clear.
///
/// # Safety
/// `t` is the running thread, just finished inline, its task's closure spent (it still says
/// CLOSURE: `Task::run_claimed`).
#[cold]
#[inline(never)]
unsafe fn drop_extras(t: *mut Thmb) {
    crate::local::destroy_all(t);
    // SAFETY: the task's bytes are spent (contract), so only the name and the table are
    // dropped (and the stack size reset); then the task says CLOSURE again, as a pooled
    // ThMB's must.
    unsafe {
        (*t).task.forget_spent();
        Thmb::retire_slow(t);
        (*t).task.mark_pooled();
    }
}

/// [`run_inline`]'s claim of a child that was published: takes it off the ready queue it was
/// put on if it is still there, unstarted, near the front.
///
/// # Safety
/// The caller runs on vCPU `v` with LTN = 0 and holds a reference to `t`.
#[inline(never)]
unsafe fn claim_queued(v: usize, t: *mut Thmb) -> bool {
    // SAFETY: the caller holds a reference to `t`; `vcpu` of a queued thread names the vCPU
    // whose queues hold it. On our own vCPU (`v`, LTN = 0) the own queue is ours to edit; the
    // shared queue's lock makes the look final (a thread in a queue is READY, not running).
    unsafe {
        let q = vcpu_of(t);
        if q == v
            && Thmb::mask(t) == mask::NONE
            && (*t).stack.get().0 == 0
            && vcpu_at(v).local.remove_near_front(t, INLINE_LOOKUP)
        {
            return true;
        }
        let vcpu = vcpu_at(q);
        let mut queue = vcpu.queue.lock();
        let ours = Thmb::mask(t) == mask::NONE
            && (*t).stack.get().0 == 0
            && queue.remove_near_front(t, INLINE_LOOKUP);
        if ours {
            vcpu.set_queued(!queue.is_empty());
            // It runs on `v` now (`run_inline` reads it back after the run).
            set_home(t, vcpu_at(v));
        }
        ours
    }
}

/// Queues a new thread (lazy creation: no stack yet).
#[inline]
pub(crate) fn spawn<F, T>(f: F, name: Option<Box<str>>, stack_size: usize) -> *mut Thmb
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let mut critical = crate::spin::Critical::enter();
    let me = critical.thread();
    if me.is_null() {
        return spawn_outside(f, name, stack_size);
    }
    // (A user thread exists only inside `run`, so the runtime runs.)
    // Read the spawner's vCPU inside the critical section: it cannot change there.
    // SAFETY: `me` is the live calling thread.
    let vcpu = unsafe { home_of(me) };
    // A new ThMB's state is READY already. It goes on this vCPU's unpublished list — no lock,
    // no fence —, where a join on this vCPU finds it (`run_inline`); it is published to the
    // ready queue when this vCPU next enters the scheduler, or right now if a vCPU is idle
    // (which could run it in parallel).
    // SAFETY: LTN = 0 on `v`; the new thread is ours until listed.
    unsafe {
        // Its vCPU is this one already (`Thmb::new_thread` given a vCPU).
        let t = Thmb::new_thread(Some(vcpu), f, name, stack_size, crate::thmb::SPAWN_REFS);
        vcpu.push_fresh(t);
        if IDLE.any() {
            vcpu.publish_fresh();
        }
        critical.leave();
        t
    }
}

/// [`spawn`] from outside any user thread (scheduler code, or no runtime at all): a heap ThMB,
/// published at once on vCPU 0.
#[inline(never)]
fn spawn_outside<F, T>(f: F, name: Option<Box<str>>, stack_size: usize) -> *mut Thmb
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    assert!(vcpu_count() > 0, "libuthread: spawn outside libuthread::run");
    // SAFETY: no vCPU given: heap memory.
    let t = unsafe { Thmb::new_thread(None, f, name, stack_size, crate::thmb::SPAWN_REFS) };
    make_ready(t, 0);
    t
}

/// Tag (low bit) of an unpublished-list entry that is a task record (`crate::join`), not a ThMB.
const JOB_TAG: usize = 1;
// `context::own_push` and `own_take` find a record's link at its entry word minus one (the
// link is a header's first word: `crate::join`).
const _: () = assert!(JOB_TAG == 1);

/// Reverses the list of entries whose newest is `newest` (links rewritten): returns its oldest
/// entry, now its head.
///
/// # Safety
/// The list's entries are live and the caller's (off every other list, linked only here).
unsafe fn reverse_entries(mut newest: usize) -> usize {
    let mut oldest = 0;
    // SAFETY: per the contract.
    unsafe {
        while newest != 0 {
            let next = entry_next(newest);
            set_entry_next(newest, oldest);
            oldest = newest;
            newest = next;
        }
    }
    oldest
}

/// The entry after the unpublished-list entry `e` (a ThMB's `run_next`, a record's `next`).
///
/// # Safety
/// `e` is a listed entry, live; the caller owns the list.
#[inline(always)]
unsafe fn entry_next(e: usize) -> usize {
    // SAFETY: per the contract.
    unsafe {
        if e & JOB_TAG != 0 {
            (*((e & !JOB_TAG) as *const JobHeader)).next()
        } else {
            (*(e as *mut Thmb)).run_next.get() as usize
        }
    }
}

/// Sets the link of the unpublished-list entry `e`.
///
/// # Safety
/// As for [`entry_next`].
#[inline(always)]
unsafe fn set_entry_next(e: usize, next: usize) {
    // SAFETY: per the contract.
    unsafe {
        if e & JOB_TAG != 0 {
            (*((e & !JOB_TAG) as *const JobHeader)).set_next(next)
        } else {
            (*(e as *mut Thmb)).run_next.set(next as *mut Thmb)
        }
    }
}

/// The thread of an entry just taken off an unpublished list: the ThMB itself, or a record
/// promoted to a thread (`JobHeader::promote`, a ThMB from vCPU `v`'s pool if given).
///
/// # Safety
/// `e` was just unlisted by the caller; if `v` is given, the caller runs on `v` with LTN = 0.
#[inline(always)]
unsafe fn entry_thread(e: usize, v: Option<&'static Vcpu>) -> *mut Thmb {
    if e & JOB_TAG != 0 {
        let h = (e & !JOB_TAG) as *const JobHeader;
        // SAFETY: per the contract, the record is off the list and ours to promote.
        unsafe { ((*h).promote)(h, v) }
    } else {
        e as *mut Thmb
    }
}

/// `crate::join`'s fork: lists the task record `h` on the calling thread's own list
/// (`Thmb::records`; promoting the list's oldest record at once if a vCPU is idle, see
/// [`promote_oldest_record`]). Returns the calling thread, for [`take_job`]; null, listing
/// nothing, outside a user thread or inside a library critical section.
///
/// No critical section: the list is the thread's, and nothing but the thread touches it while
/// it runs; the list moves with the thread wherever it is resumed. The scheduler takes it over
/// only where the thread is not in the middle of a push or take: when the thread enters the
/// scheduler itself ([`flush_records`]), blocks in the kernel ([`note_blocked`]), or was
/// stopped by the kernel ([`requeue_full`], which first moves a thread stopped inside the push
/// or take back to its start: both are restartable edits, `context::own_push`).
///
/// # Safety
/// `h` is a live record in no list; it stays live and unmoved until [`take_job`] returned true
/// or its promoted thread completed it.
#[inline(always)]
pub(crate) unsafe fn push_job(h: *const JobHeader) -> *mut Thmb {
    let me = platform::ltn();
    if me.is_null() {
        return me;
    }
    // SAFETY: `me` is the live calling thread, whose own list only it touches now (see above);
    // the record is live (contract).
    unsafe {
        context::own_push(me, h as usize | JOB_TAG);
        if IDLE.any() {
            // Through a trampoline that keeps every register: the forking function then keeps
            // nothing in callee-saved registers for this rare call (`a`'s arguments stay where
            // they are), which saves it their saves and restores at every fork.
            context::promote_oldest_preserving(me);
        }
    }
    me
}

/// `crate::join`'s join: takes the task record `h` back off the calling thread's own list
/// (where, if it is there at all, it is the newest entry: records are joined in the reverse
/// order of their forks); else [`take_job_elsewhere`].
///
/// # Safety
/// `h` was listed by [`push_job`], which returned `me`, from the calling user thread, and not
/// taken back since.
#[inline(always)]
pub(crate) unsafe fn take_job(h: *const JobHeader, me: *mut Thmb) -> bool {
    // SAFETY: `me` is the calling thread (contract), its own list only its own to touch; a
    // listed record is live and its link the list's.
    unsafe {
        take_own_job(h, me) || take_job_elsewhere(h, me)
    }
}

/// The first half of [`take_job`]: takes the task record `h` back off the calling thread's own
/// list if it is the newest entry there; false (changing nothing) if not — then the caller
/// goes on with [`take_job_elsewhere`].
///
/// # Safety
/// As for [`take_job`].
#[inline(always)]
pub(crate) unsafe fn take_own_job(h: *const JobHeader, me: *mut Thmb) -> bool {
    // SAFETY: `me` is the calling thread (contract), its own list only its own to touch; a
    // listed record is live and its link the list's.
    unsafe { context::own_take(me, h as usize | JOB_TAG) }
}

/// [`take_job`] of a record that is not its thread's newest own entry: the own list went to a
/// vCPU's unpublished list when the thread entered the scheduler ([`flush_records`]) or
/// blocked in the kernel ([`note_blocked`]), or the record was promoted
/// ([`promote_oldest_record`]). Takes it off the calling thread's vCPU's unpublished list if it
/// is near the head there (the thread blocked, its records were left unpublished — "Deferred
/// promotion" — and it runs on that vCPU again); false if not: then it was promoted, or is
/// still listed on a vCPU the caller has left, which promotes it when it next enters the
/// scheduler. Either way the caller waits on the record's state word next; a list left here is
/// published now, so that the record is a thread by then if it is here.
///
/// # Safety
/// As for [`take_job`].
#[inline(always)]
pub(crate) unsafe fn take_job_elsewhere(h: *const JobHeader, me: *mut Thmb) -> bool {
    // SAFETY: `me` is the caller (contract).
    debug_assert!(unsafe { !own_records_hold(me, h as usize | JOB_TAG) });
    let mut critical = crate::spin::Critical::enter_as(me);
    // SAFETY: `me` is the live calling thread; its vCPU cannot change with LTN = 0, and on it
    // the unpublished list is ours.
    let vcpu = unsafe { home_of(me) };
    // SAFETY: as above.
    if unsafe { vcpu.reclaim_deferred(h, me) } {
        critical.leave();
        return true;
    }
    // SAFETY: as above.
    let taken = unsafe { vcpu.take_job(h) };
    if !taken {
        // SAFETY: on `v` with LTN = 0.
        unsafe { vcpu.publish_fresh() };
    }
    critical.leave();
    taken
}

/// Whether the list from `e` on holds task records only, each inside `stack` if that is a
/// thread's stack (not `(0, 0)`) — a debug check of what [`Vcpu::reclaim_deferred`] takes.
///
/// # Safety
/// The list is the caller's and its entries live.
unsafe fn records_only_in_stack(mut e: usize, (base, len): (usize, usize)) -> bool {
    while e != 0 {
        if e & JOB_TAG == 0 || (len != 0 && (e & !JOB_TAG).wrapping_sub(base) >= len) {
            return false;
        }
        // SAFETY: per the contract.
        e = unsafe { entry_next(e) };
    }
    true
}

/// Whether the own list of `t` holds the entry `e` (a debug check).
///
/// # Safety
/// `t` is the calling thread.
unsafe fn own_records_hold(t: *mut Thmb, e: usize) -> bool {
    // SAFETY: per the contract, the list is ours; listed entries are live.
    let mut cur = unsafe { (*t).records.get() };
    while cur != 0 {
        if cur == e {
            return true;
        }
        // SAFETY: as above.
        cur = unsafe { entry_next(cur) };
    }
    false
}

/// A fork that sees an idle vCPU: promotes the *oldest* record of the calling thread's own list
/// — the outermost fork, in divide-and-conquer the largest piece of work, the one a Cilk thief
/// steals — and offers it to an idle vCPU; the newer records stay records that their joiner
/// takes back. (Publishing every pending record made each fork of the forking thread a thread
/// at each idle moment: FK `fib(25)` hosted took 3.8 ms on 2 vCPUs against 1.0 ms on one.)
///
/// The list may have been emptied since the fork pushed on it: the kernel can stop the thread
/// between its test of [`IDLE`] and the critical section here, and `requeue_full` then
/// promotes every record of the list; nothing is left to do.
///
/// # Safety
/// `me` is the calling thread.
#[cold]
#[inline(never)]
unsafe fn promote_oldest_record(me: *mut Thmb) {
    let mut critical = crate::spin::Critical::enter_as(me);
    // SAFETY: `me` is the caller: its own list is its own, its vCPU fixed with LTN = 0.
    unsafe {
        let vcpu = home_of(me);
        let head = (*me).records.get();
        if head == 0 {
            critical.leave();
            return;
        }
        let mut before = 0;
        let mut oldest = head;
        loop {
            let next = entry_next(oldest);
            if next == 0 {
                break;
            }
            before = oldest;
            oldest = next;
        }
        if before == 0 {
            (*me).records.set(0);
        } else {
            set_entry_next(before, 0);
        }
        let t = entry_thread(oldest, Some(vcpu));
        set_home(t, vcpu);
        vcpu.local.push(t);
        offer_work(vcpu.id);
    }
    critical.leave();
}

/// [`promote_oldest_record`] with the C ABI: what `context::promote_oldest_preserving`'s
/// trampoline calls.
///
/// # Safety
/// As for [`promote_oldest_record`].
pub(crate) unsafe extern "C" fn promote_oldest_record_c(me: *mut Thmb) {
    // SAFETY: forwarded contract.
    unsafe { promote_oldest_record(me) }
}

/// Hands the own records of `t`, which enters the scheduler on `vcpu`, to `vcpu`'s unpublished
/// list, on top (the newest first, as if they had been listed there): from here that list's
/// rules apply — published, or left for a while when `t` blocks ("Deferred promotion"), and
/// taken back from there by `t`'s joins ([`take_job_elsewhere`]).
///
/// # Safety
/// `t` is the calling thread, entering the scheduler on `vcpu` with LTN = 0 (so not in the
/// middle of a fork or a join).
#[inline(always)]
unsafe fn flush_records(t: *mut Thmb, vcpu: &'static Vcpu) {
    // SAFETY: forwarded contract.
    unsafe {
        if (*t).records.get() != 0 {
            flush_records_slow(t, vcpu);
        }
    }
}

/// [`flush_records`] with records to hand over.
///
/// # Safety
/// As for `flush_records`; the own list is not empty.
#[inline(never)]
unsafe fn flush_records_slow(t: *mut Thmb, vcpu: &'static Vcpu) {
    // SAFETY: per the contract, the own list and `vcpu`'s unpublished list are ours.
    unsafe {
        let head = (*t).records.get();
        let below = vcpu.fresh.load(Ordering::Relaxed);
        if below != 0 {
            // Linked on top: the own list's oldest entry gets the old head. (The own list is
            // the short one here: a thread that blocks again after running on has only what
            // it forked since on it, its older records being on this list already.)
            let mut last = head;
            loop {
                let next = entry_next(last);
                if next == 0 {
                    break;
                }
                last = next;
            }
            set_entry_next(last, below);
        }
        vcpu.fresh.store(head, Ordering::Relaxed);
        (*t).records.set(0);
    }
}

/// Wakes a thread blocked in [`block_current`].
///
/// # Safety
/// The caller owns this wake-up (see `blocking::wake`).
pub(crate) unsafe fn wake(t: *mut Thmb) {
    // Read where it sits before the state change: afterwards the thread may run, exit and be
    // freed at any moment.
    // SAFETY: blocked, so live.
    let home = unsafe { vcpu_of(t) };
    // SAFETY: as above.
    match unsafe { (*t).state.wake() } {
        Wake::Notified => {}
        Wake::Enqueue => ready_woken(t, home),
        Wake::UnparkInPlace => platform::unpark(home),
    }
}

/// Wakes a thread blocked in [`block_current`] from inside a library critical section that the
/// user thread `me` entered (null if the caller is no user thread, or its critical section was
/// entered with LTN = 0 already): what [`wake`] does, without entering a critical section of its
/// own and without a call. The hand-off of a lock or a message to its waiter
/// (`blocking::wake_from`): the primitive takes the waiter's node off its list and wakes it
/// right there, and the waiter goes on `me`'s vCPU's own queue.
///
/// # Safety
/// The caller owns this wake-up (see `blocking::wake`); `me`, if not null, is the calling user
/// thread and LTN = 0 (a critical section).
#[inline(always)]
pub(crate) unsafe fn wake_from(me: *mut Thmb, t: *mut Thmb) {
    // SAFETY: blocked, so live; read before the state change, as in `wake`.
    let home = unsafe { vcpu_of(t) };
    // SAFETY: as above.
    match unsafe { (*t).state.wake() } {
        Wake::Notified => {}
        // SAFETY: forwarded contract; `t` is READY and ours until queued.
        Wake::Enqueue => unsafe { queue_woken(me, t, home) },
        Wake::UnparkInPlace => platform::unpark(home),
    }
}

/// [`wake_from`], then the end of the critical section that `me` entered (LTN = `me` again; `me`
/// null: nothing to restore), arranged so that every call on the way is the last thing done —
/// the LTN restore comes before the unpark of an in-place waiter, and an offer of work to an
/// idle vCPU restores it itself ([`offer_work_leave`]). So the primitive's hand-off path
/// (`RawMutex::unlock_slow`, an unbounded send) keeps `me` in no callee-saved register and needs
/// no stack frame of its own.
///
/// # Safety
/// As [`wake_from`]; the caller ends its critical section by this call (it must not restore
/// LTN itself).
#[inline(always)]
pub(crate) unsafe fn wake_from_leave(me: *mut Thmb, t: *mut Thmb) {
    // The common case inline — the thread has left its vCPU (`PARKED`), the waker is a user
    // thread on a vCPU — and everything else in [`wake_from_leave_rest`], tail-called: the
    // common path falls through after its CAS, does not read the thread's old `vcpu` (after a
    // successful CAS the thread is READY and ours, so it could wait; here it is not needed at
    // all), and no path makes a call that returns (x86_64 -icount, with the mutex's list
    // change: mutex_handoff 160 -> 154).
    // SAFETY: blocked, so live.
    if !unsafe { (*t).state.wake_parked() } {
        // SAFETY: forwarded contract; the wake-up is still ours (nothing changed).
        return unsafe { wake_from_leave_rest(me, t) };
    }
    if me.is_null() || !platform::on_vcpu_thread() {
        // SAFETY: `t` is READY and ours until queued.
        return unsafe { enqueue_leave(me, t) };
    }
    // SAFETY: `me` is the calling thread, on vCPU `v` with LTN = 0 (as in `queue_woken`); `t`
    // is READY and ours until queued (so its `vcpu` is not read: it is overwritten).
    unsafe {
        let vcpu = home_of(me);
        set_home(t, vcpu);
        vcpu.local.push(t);
        if IDLE.any() {
            offer_work_leave(vcpu.id, me);
        } else {
            platform::set_ltn(me);
        }
    }
}

/// [`wake_from_leave`] when the thread was not `PARKED` (still `PARKING`, parked in place, or
/// `PARKED` after a retry): the whole of [`RunState::wake`](super::runstate::RunState::wake)'s
/// table, then the end of `me`'s critical section.
///
/// # Safety
/// As for `wake_from_leave`.
#[inline(never)]
unsafe fn wake_from_leave_rest(me: *mut Thmb, t: *mut Thmb) {
    // SAFETY: blocked, so live; read before the state change, as in `wake`.
    let home = unsafe { vcpu_of(t) };
    // SAFETY: as above.
    match unsafe { (*t).state.wake_contended() } {
        Wake::Notified => leave_to(me),
        Wake::Enqueue => {
            // SAFETY: `t` is READY and ours until queued; `me` as the caller's.
            unsafe { queue_woken(me, t, home) };
            leave_to(me);
        }
        Wake::UnparkInPlace => {
            leave_to(me);
            platform::unpark(home);
        }
    }
}

/// [`wake_from_leave`] for a `t` made READY by a waker that is not a user thread on a vCPU:
/// [`make_ready`], then the end of `me`'s critical section.
///
/// # Safety
/// `t` is READY and ours until queued; LTN = 0, `me` as for `wake_from_leave`.
#[cold]
#[inline(never)]
unsafe fn enqueue_leave(me: *mut Thmb, t: *mut Thmb) {
    // SAFETY: READY and ours, so nobody else writes its `vcpu`.
    let home = unsafe { vcpu_of(t) };
    make_ready(t, home);
    leave_to(me);
}

/// Restores LTN = `me` when `me` is not null (the end of a critical section entered by `me`).
#[inline(always)]
fn leave_to(me: *mut Thmb) {
    if !me.is_null() {
        platform::set_ltn(me);
    }
}

/// [`offer_work`]'s slow part, then LTN = `me` (see [`wake_from_leave`]).
///
/// # Safety
/// As for `offer_work`; `me` (not null) is the calling thread, whose critical section ends here.
#[cold]
#[inline(never)]
unsafe fn offer_work_leave(v: usize, me: *mut Thmb) {
    // SAFETY: forwarded contract.
    unsafe { offer_work_slow(v) };
    platform::set_ltn(me);
}

/// Queues the thread `t` that a wake-up just made READY. Woken by a user thread (the common
/// case: an unlock, a send, an exit that a joiner waits for), it goes on the waker's vCPU's own
/// queue — no lock, no fence: it runs as soon as the waker blocks, yields or exits (a mutex or a
/// message handed to its waiter, seL4-style, without a hop through any shared structure) — and
/// is offered to an idle vCPU if one is idle. Woken from scheduler code, an upcall or a thread
/// outside the runtime (a hosted timer), it goes through [`make_ready`].
#[inline(always)]
fn ready_woken(t: *mut Thmb, home: usize) {
    let mut critical = crate::spin::Critical::enter();
    // SAFETY: `critical.thread()` is the calling user thread (or null) and LTN = 0 now; `t` is
    // READY and ours until queued.
    unsafe { queue_woken(critical.thread(), t, home) };
    critical.leave();
}

/// [`ready_woken`]'s queueing, inside a critical section entered by the user thread `me` (null:
/// none, then [`make_ready`]).
///
/// # Safety
/// LTN = 0; `me`, if not null, is the calling user thread; `t` is READY and ours until queued.
#[inline(always)]
unsafe fn queue_woken(me: *mut Thmb, t: *mut Thmb, home: usize) {
    if me.is_null() || !platform::on_vcpu_thread() {
        make_ready(t, home);
        return;
    }
    // SAFETY: `me` is the calling thread, on vCPU `v` with LTN = 0 (its vCPU cannot change
    // inside the critical section); `t` is READY and ours until queued.
    unsafe {
        let vcpu = home_of(me);
        set_home(t, vcpu);
        vcpu.local.push(t);
        if IDLE.any() {
            offer_work_slow(vcpu.id);
        }
    }
}

/// Blocks the calling thread (see `blocking::block`). Always inlined: into the primitive's
/// slow path (a mutex's `lock_slow`, a channel's send or receive), which then makes no call
/// of its own before the tail call to [`park_current`].
#[inline(always)]
pub(crate) fn block_current(publish: impl FnOnce(*mut Thmb) -> bool) {
    // (The result dropped, the park is a tail call where `block` ends its caller.)
    block_current_waited(publish);
}

/// [`block_current`], returning whether the thread waited (`publish` returned `true`, and the
/// matching wake-up came): a caller whose publish step leaves a result only when it did not
/// queue the thread needs no second look at that result on the waiting path.
#[inline(always)]
pub(crate) fn block_current_waited(publish: impl FnOnce(*mut Thmb) -> bool) -> bool {
    let Some(t) = enter_block() else { return false };
    // SAFETY: `t` is the calling thread; from here until it runs again it is in the library.
    unsafe {
        (*t).state.begin_park();
        if !publish(t) {
            (*t).state.cancel_park();
            platform::set_ltn(t);
            return false;
        }
        park_current(t);
    }
    true
}

/// [`block_current_waited`] for a publish step that, when it returns `true` (the thread waits),
/// has made no thread ready and touched no run queue (the mutex's lock, a channel's receive):
/// the direct switch is decided *before* the publish step, so the thread goes straight to
/// `PARKED` ([`RunState::park_direct`](super::runstate::RunState::park_direct)) with its mask
/// in flight, and leaves with no commit CAS after it (x86_64 -icount: the `PARKING` store, the
/// commit's CAS and its branch, and the call to [`park_current`] with its second computation
/// of the vCPU go from every such block). When [`take_direct`]'s common case does not hold, it
/// is [`block_current_waited`]'s path, without its second look for that case.
///
/// Why the head looked at before the publish step is still the head after it: the own queue is
/// this vCPU's alone and LTN = 0 throughout (no upcall, no other code here; nobody stops the
/// vCPU and adopts its queue before the switch writes LTN), and the only code that runs, the
/// publish step, touches no queue when it returns `true` (its contract). A publish step that
/// returns `false` may wake threads (a receive that takes a waiting sender's value): then the
/// thread is running again, unpublished, and nothing else was decided.
#[inline(always)]
pub(crate) fn block_current_direct(publish: impl FnOnce(*mut Thmb) -> bool) -> bool {
    let Some(t) = enter_block() else { return false };
    // SAFETY: `t` is the calling thread; from here until it runs again it is in the library,
    // on vCPU `v` with LTN = 0 (its vCPU cannot change inside the critical section).
    unsafe {
        let vcpu = home_of(t);
        let to = peek_direct(vcpu, t);
        if to.is_null() {
            (*t).state.begin_park();
        } else {
            // The mask before the state (a release store): a waker that finds the thread
            // `PARKED` queues it with its mask in flight, so whoever takes it waits for the
            // switch's save (as after `park_current`'s commit).
            Thmb::set_mask(t, MASK_IN_FLIGHT);
            (*t).state.park_direct();
        }
        if !publish(t) {
            // Never visible to a waker: plain stores undo the decision (a running thread's
            // mask is NONE, so it is stored whatever was decided: `to` need not be kept
            // across the publish step for this, which may make calls on this path).
            (*t).state.cancel_park();
            Thmb::set_mask(t, mask::NONE);
            platform::set_ltn(t);
            return false;
        }
        if to.is_null() {
            // The common case did not hold before the publish step, so it is not looked for
            // again (`park_current`'s `take_direct`): the general path at once (it finds a
            // thread to run, or parks in place, whatever changed meanwhile). Looking twice
            // cost a block that misses the common case (a thread with unpublished children,
            // as in stackthreads' SW leaves) a second `Vcpu::unusual` test and a call.
            park_slow(t, vcpu);
        } else {
            // Still the head: see above.
            debug_assert_eq!(vcpu.local.head.load(Ordering::Relaxed), to as usize);
            vcpu.local.pop_head(to);
            take_head(vcpu, to);
            resume_direct_on(vcpu, t, to);
        }
    }
    true
}

/// The start of every block: the calling thread, LTN = 0 from here; `None` (after reporting
/// the misuse) outside a user thread or inside a library critical section.
#[inline(always)]
fn enter_block() -> Option<*mut Thmb> {
    let t = platform::ltn();
    if t.is_null() {
        // (A function that returns, so where `block` ends its caller, as in
        // `RawMutex::lock_slow`, this is a tail jump, not a call on that path.)
        blocking_outside_thread();
        return None;
    }
    platform::clear_ltn();
    Some(t)
}

/// [`block_current`] called outside a user thread or inside a library critical section: a
/// misuse, reported by a panic. Declared to return (it never does) so that the call is a tail
/// call where `block_current` ends its caller (see there).
///
/// The panic sits behind an opaque `true` (`black_box`): a body the compiler can prove never
/// returns would be marked so (with LTO it sees the body), and the call to it would stay a
/// call, whose stack alignment costs every caller's fast path a `push`/`pop` (x86_64 -icount:
/// mutex_handoff 2 per acquisition).
#[cold]
#[inline(never)]
fn blocking_outside_thread() {
    if core::hint::black_box(true) {
        panic!("libuthread: a blocking call outside a user thread or inside a library critical section");
    }
}

/// Takes the published, `PARKING` thread `t` (the caller) off its vCPU until woken. Called with
/// LTN = 0; returns with LTN = `t`.
///
/// The common case — the same one as [`yield_to_next`]'s, decided by [`take_direct`] with no
/// call so no callee-saved register is saved — switches directly to the head of the own queue as
/// [`block_to`] does; everything else is [`park_slow`].
#[inline(never)]
unsafe fn park_current(t: *mut Thmb) {
    // SAFETY: `t` is the calling thread; the vCPU cannot change inside the critical section.
    let vcpu = unsafe { home_of(t) };
    // SAFETY: on `vcpu` with LTN = 0.
    let to = unsafe { take_direct(vcpu, t) };
    if !to.is_null() {
        // SAFETY: `to` is prepared on `v` and ours; `t` is the caller, PARKING and published.
        unsafe { park_direct_to(vcpu, t, to) };
        return;
    }
    // SAFETY: forwarded contract.
    unsafe { park_slow(t, vcpu) }
}

/// The end of a park that switches straight to `to`: commits `t`'s park (or, woken before the
/// switch, queues it behind what is ready) and switches windows. Returns when `t` is resumed.
///
/// # Safety
/// `t` is the calling thread on `vcpu`, `PARKING` and published to its waker, LTN = 0; `to`
/// was taken off `vcpu`'s own queue and prepared ([`take_head`]).
#[inline(always)]
unsafe fn park_direct_to(vcpu: &'static Vcpu, t: *mut Thmb, to: *mut Thmb) {
    // SAFETY: per the contract (as in `block_to`).
    unsafe {
        Thmb::set_mask(t, MASK_IN_FLIGHT);
        // The mask store above is ordered before the commit (a release CAS): a waker that
        // then queues `t` publishes it with the mask already in flight.
        if !(*t).state.commit_park() {
            // Woken before the switch: runnable again (behind what is queued).
            (*t).state.set(READY);
            vcpu.local.push(t);
        }
        resume_direct_on(vcpu, t, to);
    }
}

/// [`park_current`] for every case but the common one.
///
/// # Safety
/// `t` is the calling thread on `vcpu`, `PARKING` and published to its waker; LTN = 0.
#[inline(never)]
unsafe fn park_slow(t: *mut Thmb, vcpu: &'static Vcpu) {
    // The common cases under a deferral (another thread's records kept, or `t`'s own records
    // left with nothing under them): switch straight on, as the general path would. A small
    // function of its own in front of it, so that these cases pay none of its frame.
    // SAFETY: `t` is the caller on `vcpu` with LTN = 0.
    let to = unsafe { vcpu.defer_direct(t) };
    if !to.is_null() {
        // SAFETY: `t` is the caller, PARKING and published; `to` taken and prepared.
        unsafe { park_direct_to(vcpu, t, to) };
        return;
    }
    // SAFETY: forwarded contract.
    unsafe { park_general(t, vcpu) }
}

/// [`park_slow`] when [`Vcpu::defer_direct`] did not decide.
///
/// # Safety
/// As for `park_slow`.
#[inline(never)]
unsafe fn park_general(t: *mut Thmb, vcpu: &'static Vcpu) {
    // SAFETY: `t` is the calling thread.
    let state = unsafe { &(*t).state };
    let v = vcpu.id;
    IDLE.settle(&vcpu.attention, IDLE_SEEN);
    // Nothing listed yet: after the hand-over below the list is `t`'s own records alone.
    let only_own = !vcpu.has_fresh();
    // Its own records join the unpublished list, whose rules decide from here.
    // SAFETY: `t` is the caller entering the scheduler on `vcpu` with LTN = 0.
    unsafe { flush_records(t, vcpu) };
    // Task records left unpublished while another thread runs ("Deferred promotion").
    // SAFETY: `t` is the caller on `v` with LTN = 0, the list not empty.
    let keep = vcpu.has_fresh() && !SHUTDOWN.load(Ordering::Relaxed) && unsafe { vcpu.keep_unpublished(t, only_own) };
    if !keep {
        // SAFETY: on `v` with LTN = 0.
        unsafe { vcpu.publish_fresh() };
    }
    // The common case first: another thread is ready here, switch straight to it (the checks
    // below would find work and come to the same switch).
    if !SHUTDOWN.load(Ordering::Relaxed) {
        // SAFETY: on `v` with LTN = 0.
        let mut to = unsafe { take_next(v) };
        if to.is_null() && keep {
            // The thread seen ready was taken meanwhile (stolen): nothing else to run after
            // all, so the records become threads.
            // SAFETY: on `v` with LTN = 0.
            unsafe {
                vcpu.publish_fresh();
                to = take_next(v);
            }
        }
        if !to.is_null() {
            // SAFETY: `t` is the caller on `v`; `to` is READY and ours now.
            unsafe { block_to(v, t, to) };
            return;
        }
    } else if keep {
        // SAFETY: on `v` with LTN = 0.
        unsafe { vcpu.publish_fresh() };
    }
    if !work_anywhere() && !SHUTDOWN.load(Ordering::SeqCst) {
        // Nothing else to run: keep the vCPU, with the thread's registers live in it, and park.
        if !state.park_in_place() {
            platform::set_ltn(t);
            return;
        }
        let mut give_up = false;
        loop {
            announce_idle(v);
            if state.take_in_place_wake() {
                IDLE.retract(v);
                // SAFETY: on `v` with LTN = 0.
                unsafe { offer_work(v) };
                platform::set_ltn(t);
                return;
            }
            if work_anywhere() || SHUTDOWN.load(Ordering::SeqCst) || give_up {
                // Work arrived for this vCPU, or the kernel wants it back (space sharing):
                // give it up properly.
                IDLE.retract(v);
                if state.leave_in_place() {
                    break;
                }
                // SAFETY: on `v` with LTN = 0.
                unsafe { offer_work(v) };
                platform::set_ltn(t);
                return;
            }
            give_up = platform::park(v);
        }
    }
    if !SHUTDOWN.load(Ordering::Relaxed) {
        // SAFETY: on `v` with LTN = 0.
        let to = unsafe { take_next(v) };
        if !to.is_null() {
            // SAFETY: `t` is the caller on `v`; `to` is READY and ours now.
            unsafe { block_to(v, t, to) };
            return;
        }
    }
    // SAFETY: `t` is the caller, the scheduler stack of `v` is free (this vCPU is in the
    // library, not in the loop), and `after_switch` never returns.
    unsafe { context::switch_out(t, vcpu.top(), after_switch, v, t as usize | ACTION_BLOCK) };
}

/// Lets other ready threads of this vCPU run (returns at once when there are none).
///
/// Every look is taken once, with LTN = 0, where the vCPU read is exact. Always inlined, with
/// [`yield_to_next`]: the common cases ("nothing else is ready here", "switch to the head of
/// the own queue") are decided in the caller, whose frame the switch call uses, so they pay no
/// call, frame and return of a function of their own, and the caller's loop keeps the
/// addresses of the statics in registers (-icount yield round trip: x86_64 134 → 126,
/// riscv64 188 → 168, aarch64 174 → 162; the inlined code replaces a call and a check of about
/// the same size: `uthread_bench` did not grow). (An earlier version looked at the queues before
/// entering, from the thread's possibly stale vCPU, and again inside: x86_64 -icount yield
/// round trip 190 → 152 together with the one-pass switch of `context::switch_window`.)
#[inline(always)]
pub(crate) fn yield_current() {
    let t = platform::ltn();
    if t.is_null() {
        return;
    }
    platform::clear_ltn();
    // SAFETY: `t` is the calling thread; its vCPU cannot change with LTN = 0.
    let vcpu = unsafe { home_of(t) };
    let to = vcpu.local.head.load(Ordering::Relaxed) as *mut Thmb;
    if !to.is_null() {
        // SAFETY: `t` is the caller on `vcpu` with LTN = 0; `to` is the head of its own queue.
        unsafe { yield_to_next(t, to, vcpu) }
    } else if unsafe { vcpu.unusual(t) } != 0 {
        // SAFETY: as above.
        unsafe { yield_slow(t, vcpu) }
    } else {
        // Nothing else is ready here.
        platform::set_ltn(t);
    }
}

/// [`yield_current`] when there is a thread to yield to, `to` being the head of `vcpu`'s own
/// queue (not null).
///
/// Inlined into [`yield_current`]'s caller (see there). The common case is
/// [`take_direct`]'s, shared with [`park_current`] — then `t` goes behind the others and the
/// switch is direct, a call to `libuthread_switch_window` from the caller's frame. Everything
/// else goes to [`yield_slow`].
///
/// `t` is queued with its running mask (NONE), not [`MASK_IN_FLIGHT`]: on this path nobody can
/// take it before its window is saved — the own queue is this vCPU's alone (LTN = 0 until the
/// switch has stored mask `WINDOW`), no vCPU is idle so no work is offered, and the switch
/// stores the mask before it writes LTN, the first point where the kernel may stop the vCPU
/// (and an adopter of a revoked vCPU read its queue).
///
/// # Safety
/// `t` is the calling thread, on `vcpu`, with LTN = 0; `to` is the head of `vcpu`'s own queue,
/// not null.
#[inline(always)]
unsafe fn yield_to_next(t: *mut Thmb, to: *mut Thmb, vcpu: &'static Vcpu) {
    // (The arguments in the order `libuthread_switch_window` takes them: no register moves.)
    // SAFETY: `t` is live (the caller).
    debug_assert!(!to.is_null() && ptr::eq(vcpu, unsafe { home_of(t) }));
    if unsafe { vcpu.unusual(t) } == 0 && Thmb::mask(to) & !mask::FP == mask::WINDOW {
        // SAFETY: on `vcpu` with LTN = 0: the own queue is ours, its head `to` READY and ours
        // once taken; `t` is the caller (see above for its mask).
        unsafe {
            take_head(vcpu, to);
            (*t).state.set_switching(READY);
            vcpu.local.rotate(to, t);
            resume_direct_on(vcpu, t, to);
        }
        return;
    }
    // SAFETY: as above.
    unsafe { yield_slow(t, vcpu) }
}

/// The common case of a voluntary switch on vCPU `v`, shared by [`yield_to_next`] and
/// [`park_current`]: windows are saved (not the full-save baseline) and no shutdown (both in
/// one byte, `context::switch_flags`), nothing is unpublished, nothing waits on the shared
/// queue, no vCPU is idle (so there is no work to
/// offer), and the head of the own queue resumes from a window. Then takes that head off the
/// queue, [`prepare_direct`]s it (RUNNING on `v`) and returns it; otherwise returns null having
/// done nothing, and the caller takes its slow path. Always inlined and call-free, so its
/// callers save no callee-saved register on their fast path.
///
/// The looks are Relaxed, as in `publish_fresh`, `take_next` and `offer_work`: the unpublished
/// list and the own queue are this vCPU's alone (LTN = 0); a thread pushed on the shared queue
/// or a vCPU gone idle that these miss is seen at the next switch or by the idle re-check.
///
/// # Safety
/// The caller is the thread `t`, switching on `vcpu` with LTN = 0.
#[inline(always)]
unsafe fn take_direct(vcpu: &'static Vcpu, t: *mut Thmb) -> *mut Thmb {
    // (Switch flags, unpublished children and records, shared queue and idle bits: one test.)
    // SAFETY: per the contract.
    if unsafe { vcpu.unusual(t) } == 0 {
        let to = vcpu.window_head();
        if !to.is_null() {
            // SAFETY: on `vcpu` with LTN = 0: the own queue is ours, its head `to` READY and
            // ours once taken.
            unsafe {
                vcpu.local.pop_head(to);
                take_head(vcpu, to);
            }
            return to;
        }
    }
    ptr::null_mut()
}

/// [`take_direct`]'s test alone: the head of `vcpu`'s own queue when the common case of a
/// voluntary switch holds (see there), left on the queue; else null.
///
/// # Safety
/// The caller is the thread `t`, switching on `vcpu` with LTN = 0.
#[inline(always)]
unsafe fn peek_direct(vcpu: &'static Vcpu, t: *mut Thmb) -> *mut Thmb {
    // SAFETY: per the contract.
    if unsafe { vcpu.unusual(t) } == 0 {
        return vcpu.window_head();
    }
    ptr::null_mut()
}

/// Makes `to`, just taken off `vcpu`'s own queue, the thread `vcpu` runs next (RUNNING). Its
/// `vcpu` word already names `vcpu`: a thread on a vCPU's own queue names that vCPU (every push
/// there sets it or finds it so), so a direct switch stores nothing for it.
///
/// # Safety
/// On `vcpu` with LTN = 0; `to` was the head of `vcpu`'s own queue and is ours now.
#[inline(always)]
unsafe fn take_head(vcpu: &'static Vcpu, to: *mut Thmb) {
    crate::trace::user_switch(vcpu.id, to as usize);
    // SAFETY: per the contract.
    unsafe {
        debug_assert!(ptr::eq(home_of(to), vcpu));
        (*to).state.set_switching(RUNNING);
    }
}

/// The end of a direct switch on vCPU `v` from the calling thread `from`, already published
/// (mask [`MASK_IN_FLIGHT`], queued or parked), to `to`, prepared on `v` (by
/// [`take_direct`] or [`prepare_direct`]): counts the resume and switches windows. Returns
/// when `from` is resumed.
///
/// # Safety
/// As for [`switch_direct`], with idle vCPUs already offered work (or none idle).
#[inline(always)]
unsafe fn resume_direct(v: usize, from: *mut Thmb, to: *mut Thmb) {
    // SAFETY: forwarded contract.
    unsafe { resume_direct_on(vcpu_at(v), from, to) }
}

/// [`resume_direct`] with the vCPU at hand.
///
/// # Safety
/// As for `resume_direct`, on `vcpu`.
#[inline(always)]
unsafe fn resume_direct_on(vcpu: &'static Vcpu, from: *mut Thmb, to: *mut Thmb) {
    Thmb::set_mask(to, mask::NONE);
    vcpu.count_resume(false);
    // SAFETY: forwarded contract.
    unsafe { context::switch_window(from, to, vcpu) }
}

/// [`yield_to_next`] for every case but the common one: publishes unpublished children,
/// drains the shared queue when due, offers work to idle vCPUs, switches through the hop when
/// the next thread needs it, or leaves through the scheduler at shutdown.
///
/// # Safety
/// `t` is the calling thread, on `vcpu`, with LTN = 0.
#[inline(never)]
unsafe fn yield_slow(t: *mut Thmb, vcpu: &'static Vcpu) {
    let v = vcpu.id;
    IDLE.settle(&vcpu.attention, IDLE_SEEN);
    // SAFETY: on `v` with LTN = 0; `t` is the caller entering the scheduler (its own records
    // are published with the list: it stays runnable, and what it yields for may be one).
    unsafe {
        flush_records(t, vcpu);
        vcpu.publish_fresh();
    }
    if !SHUTDOWN.load(Ordering::Relaxed) {
        // Take the next thread off this vCPU's own queue and put `t` behind the others: no
        // lock (the queue is this vCPU's alone, and LTN = 0 until the next thread runs).
        // Directly (`switch_direct`): `t` is queued at once, marked in flight until its window
        // is saved (`offer_work` may hand it to a thief, which waits for that, see
        // MASK_IN_FLIGHT). Through the hop (the next thread resumes from a FULL frame, or the
        // full-save baseline): `after_switch_to` queues `t` on the next thread's stack.
        // SAFETY: on `v` with LTN = 0; `t` is the caller, `to` READY and ours once taken.
        unsafe {
            let to = take_next(v);
            if !to.is_null() {
                if prepare_direct(v, to) {
                    (*t).state.set(READY);
                    Thmb::set_mask(t, MASK_IN_FLIGHT);
                    vcpu.local.push(t);
                    switch_direct(v, t, to);
                    return;
                }
                let top = prepare(v, to);
                vcpu.handoff.store(to as usize, Ordering::Relaxed);
                context::switch_out(t, top, after_switch_to, v, t as usize | ACTION_YIELD);
                return;
            }
        }
        platform::set_ltn(t);
        return;
    }
    // SAFETY: as in `park_current`.
    unsafe { context::switch_out(t, vcpu.top(), after_switch, v, t as usize | ACTION_YIELD) };
}

/// Blocks the calling, `PARKING` thread `from` and switches to the READY thread `to` (taken off
/// vCPU `v`'s queue by the caller): directly when `to` resumes from a window ([`direct`]) —
/// `from` commits its park first, marked in flight, so a waker may queue it at once and a thief
/// waits for the window —, else through the hop (`after_switch_to` commits after the save).
/// Returns when `from` is resumed. Called with LTN = 0.
///
/// # Safety
/// `from` is the calling thread, running on `v`, `PARKING` and published to its waker; `to`
/// is READY, off every queue and ours.
#[inline(always)]
unsafe fn block_to(v: usize, from: *mut Thmb, to: *mut Thmb) {
    // SAFETY: forwarded contract.
    unsafe {
        if prepare_direct(v, to) {
            Thmb::set_mask(from, MASK_IN_FLIGHT);
            // The mask store above is ordered before the commit (a release CAS): a waker that
            // then queues `from` publishes it with the mask already in flight.
            if !(*from).state.commit_park() {
                // Woken before the switch: runnable again (behind what is queued).
                (*from).state.set(READY);
                vcpu_at(v).local.push(from);
            }
            switch_direct(v, from, to);
            return;
        }
        let top = prepare(v, to);
        vcpu_at(v).handoff.store(to as usize, Ordering::Relaxed);
        context::switch_out(from, top, after_switch_to, v, from as usize | ACTION_BLOCK);
    }
}

/// [`prepare`] for a direct switch (no hop), if `to` allows one: it resumes from a window, and
/// voluntary switches save windows (the full-save baseline goes through the hop, which its FULL
/// resume needs). Returns false, having done nothing, otherwise (then `prepare` it).
///
/// # Safety
/// As for `prepare`.
#[inline(always)]
unsafe fn prepare_direct(v: usize, to: *mut Thmb) -> bool {
    if Thmb::mask(to) & !mask::FP == mask::WINDOW && context::save_mode() == context::SaveMode::Window {
        crate::trace::user_switch(v, to as usize);
        // SAFETY: per the contract.
        unsafe {
            set_home(to, vcpu_at(v));
            (*to).state.set(RUNNING);
        }
        return true;
    }
    false
}

/// The direct switch from the calling thread `from`, already published (mask
/// [`MASK_IN_FLIGHT`], queued or parked), to the [`prepare`]d thread `to` on vCPU `v`: no
/// scheduler stack, no `after_switch_to`; the switch saves `from`'s window, publishes it and
/// resumes `to`. Returns when `from` is resumed. Called with LTN = 0.
///
/// # Safety
/// `from` is the calling thread on `v`, published as above and touched by nobody until its
/// mask says `WINDOW`; `to` is prepared on `v`, resumes from a window, and is ours.
#[inline(always)]
unsafe fn switch_direct(v: usize, from: *mut Thmb, to: *mut Thmb) {
    // SAFETY: on `v` with LTN = 0.
    unsafe { offer_work(v) };
    // SAFETY: forwarded contract.
    unsafe { resume_direct(v, from, to) }
}

/// Waits until the vCPU that published `t` in flight (a direct switch) has saved its window.
#[cold]
fn wait_published(t: *mut Thmb) {
    while Thmb::mask(t) == MASK_IN_FLIGHT {
        crate::prim::spin_hint();
    }
    // Pairs with the switch's release store of the mask: the window is complete.
    crate::prim::fence(Ordering::Acquire);
}

/// Makes the READY thread `t` (ours) the one vCPU `v` runs next: marks it RUNNING here and, if
/// it never ran, gives it a stack and a window that starts it (mask WINDOW). Returns a stack top
/// that code may run on until `t` is resumed: the dead part of `t`'s own stack when it resumes
/// from a window, else the top of `v`'s scheduler stack.
///
/// # Safety
/// `t` is READY and owned by the caller; LTN = 0.
#[inline(always)]
unsafe fn prepare(v: usize, t: *mut Thmb) -> usize {
    crate::trace::user_switch(v, t as usize);
    // The common case inline: a thread switched out at a voluntary switch (mask WINDOW, with
    // or without FP; an in-flight or never-run thread has neither bit pattern).
    if Thmb::mask(t) & !mask::FP == mask::WINDOW {
        // SAFETY: per the contract.
        unsafe {
            set_home(t, vcpu_at(v));
            (*t).state.set(RUNNING);
            return context::window_sp(&(*t).window);
        }
    }
    // SAFETY: forwarded contract.
    unsafe { prepare_slow(v, t) }
}

/// [`prepare`] for a thread in flight, never run, or stopped with a FULL frame.
///
/// # Safety
/// As for `prepare`.
#[inline(never)]
unsafe fn prepare_slow(v: usize, t: *mut Thmb) -> usize {
    // While user threads have counters open every resume comes here (full saves).
    platform::perf_resumed(t);
    if Thmb::mask(t) == MASK_IN_FLIGHT {
        wait_published(t);
    }
    // SAFETY: per the contract.
    unsafe {
        set_home(t, vcpu_at(v));
        (*t).state.set(RUNNING);
        // Never ran: nothing saved and no stack. (A child that `run_inline` started has no
        // stack of its own either, but once it has left a vCPU it always has a saved mask.)
        if Thmb::mask(t) == mask::NONE && (*t).stack.get().0 == 0 {
            let size = (*t).stack_size;
            let (base, len) = take_stack(v, size).unwrap_or_else(|| fatal("libuthread: no memory for a thread stack\n"));
            (*t).stack.set((base, len));
            // The FP area sits at the top of the stack allocation, the stack below it.
            let fp_area = (base + len - FP_AREA_SIZE) & !(FP_AREA_ALIGN as usize - 1);
            (*t).header.fp_area = fp_area as u64;
            context::init_window(&mut (*t).window, fp_area, t, thread_main);
            Thmb::set_mask(t, mask::WINDOW);
            // (Below what the window keeps on the stack: on x86_64 the start address.)
            return context::window_sp(&(*t).window);
        }
        if Thmb::mask(t) & !mask::FP == mask::WINDOW {
            context::window_sp(&(*t).window)
        } else {
            vcpu_at(v).top()
        }
    }
}

/// Resumes the thread [`prepare`]d on vCPU `v`, restoring what its mask says.
///
/// # Safety
/// `t` was prepared on `v` and nothing ran it since; LTN = 0.
unsafe fn resume_prepared(v: usize, t: *mut Thmb) -> ! {
    // SAFETY: per the contract.
    unsafe {
        let m = Thmb::mask(t);
        match m & !mask::FP {
            mask::WINDOW => {
                Thmb::set_mask(t, mask::NONE);
                vcpu_at(v).count_resume(false);
                context::resume_window(t, t)
            }
            mask::FULL => {
                Thmb::set_mask(t, mask::NONE);
                vcpu_at(v).count_resume(true);
                context::resume_full(t, m & mask::FP != 0)
            }
            _ => fatal("libuthread: a started thread with nothing saved\n"),
        }
    }
}

/// The far side of a switch through the hop, on the next thread's stack (or the
/// scheduler stack) with LTN = 0: finishes what the previous thread asked for, then resumes
/// the next one.
unsafe extern "C" fn after_switch_to(v: usize, word: usize) -> ! {
    let t = (word & !ACTION_MASK) as *mut Thmb;
    // SAFETY: `v` is a vCPU number (see `vcpu_at`).
    let vcpu = unsafe { vcpu_at(v) };
    let to = vcpu.handoff.load(Ordering::Relaxed) as *mut Thmb;
    // SAFETY: `t` just left this vCPU and is owned by the scheduler until queued or parked;
    // we are `v` with LTN = 0 (its own queue is ours).
    unsafe {
        match word & ACTION_MASK {
            ACTION_YIELD => {
                (*t).state.set(READY);
                vcpu.local.push(t);
            }
            ACTION_BLOCK => {
                if !(*t).state.commit_park() {
                    // Woken before the switch finished: runnable again (behind what is queued).
                    (*t).state.set(READY);
                    vcpu.local.push(t);
                }
            }
            _ => {
                let (base, len) = (*t).stack.replace((0, 0));
                give_stack(v, (*t).stack_size, base, len);
                Thmb::release_on(t, v);
            }
        }
        offer_work(v);
        resume_prepared(v, to)
    }
}
// ------------------------------------------------------------------------------------------
// Thread start and exit.

/// The Rust entry of every user thread (reached from `libuthread_thread_start`).
unsafe extern "C" fn thread_main(t: *mut Thmb) -> ! {
    // SAFETY: the scheduler started `t` on its own fresh stack; the closure is set at spawn,
    // and nobody reads the outcome before `join` says EXITED.
    unsafe { (*t).task.run() };
    // Every record a thread forks lives in its frames, so is taken back before they go.
    // SAFETY: `t` is the calling thread.
    debug_assert_eq!(unsafe { (*t).records.get() }, 0);
    crate::local::destroy_all(t);
    // SAFETY: `t` is live (this thread holds a reference until it leaves the vCPU).
    match unsafe { (*t).join.swap(JOIN_EXITED, Ordering::AcqRel) } {
        JOIN_RUNNING => {}
        // Nobody will join: drop the result here, in user context (it may run user code).
        // SAFETY: the handle is gone; only we can reach `outcome`.
        JOIN_DETACHED => unsafe { (*t).task.clear() },
        // SAFETY: the joiner published itself by CAS and waits for exactly this wake-up.
        joiner => unsafe { wake(joiner as *mut Thmb) },
    }
    platform::clear_ltn();
    // SAFETY: vCPU fixed now (LTN = 0).
    let v = unsafe { vcpu_of(t) };
    // Children it left unjoined go to the queue like any others.
    // SAFETY: on `v` with LTN = 0.
    unsafe { vcpu_at(v).publish_fresh() };
    // SAFETY: `t` is live until released.
    if !unsafe { (*t).is_main } && !SHUTDOWN.load(Ordering::Relaxed) {
        // SAFETY: on `v` with LTN = 0.
        let to = unsafe { take_next(v) };
        if !to.is_null() {
            // SAFETY: `to` is READY and ours; `t`'s stack is abandoned and reclaimed by
            // `after_switch_to` once off it.
            unsafe {
                let top = prepare(v, to);
                vcpu_at(v).handoff.store(to as usize, Ordering::Relaxed);
                context::call_on_stack(top, after_switch_to, v, t as usize | ACTION_EXIT)
            }
        }
    }
    // SAFETY: the thread's stack is abandoned; `after_switch` reclaims it.
    unsafe { context::call_on_stack(vcpu_at(v).top(), after_switch, v, t as usize | ACTION_EXIT) }
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
                vcpu_at(v).local.push(t);
            }
            ACTION_BLOCK => {
                if !(*t).state.commit_park() {
                    // Woken before the switch finished: runnable again (behind what is queued).
                    (*t).state.set(READY);
                    vcpu_at(v).local.push(t);
                }
            }
            _ => {
                let (base, len) = (*t).stack.replace((0, 0));
                give_stack(v, (*t).stack_size, base, len);
                let is_main = (*t).is_main;
                Thmb::release_on(t, v);
                if is_main {
                    SHUTDOWN.store(true, Ordering::SeqCst);
                    context::set_switch_flag(context::FLAG_SHUTDOWN, true);
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
        // What the thread that left this vCPU spawned and did not join (or an upcall
        // interrupted the thread before it entered the scheduler).
        // SAFETY: the loop runs on `v` with LTN = 0.
        unsafe { vcpu_at(v).publish_fresh() };
        // SAFETY: on `v` with LTN = 0.
        let t = unsafe { take_next(v) };
        if !t.is_null() {
            // SAFETY: as above; a popped thread is READY and ours.
            unsafe {
                offer_work(v);
                dispatch(v, t)
            }
        }
        let t = steal(v);
        if !t.is_null() {
            // SAFETY: as above.
            unsafe { dispatch(v, t) }
        }
        announce_idle(v);
        if work_anywhere() || SHUTDOWN.load(Ordering::SeqCst) {
            IDLE.retract(v);
            continue;
        }
        platform::perf_resumed(ptr::null_mut());
        platform::park_idle(v);
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
        prepare(v, t);
        resume_prepared(v, t)
    }
}

fn retire(v: usize) -> ! {
    if v == 0 {
        while LIVE.load(Ordering::SeqCst) & !1 != 0 {
            platform::park(0);
        }
        // SAFETY: `run` saved the root window before entering this loop and waits in it.
        unsafe { context::resume_window(ROOT.0.get(), ptr::null_mut()) }
    }
    LIVE.fetch_and(!(1 << v), Ordering::SeqCst);
    platform::unpark(0);
    platform::retire_vcpu(v)
}

// ------------------------------------------------------------------------------------------
// Space sharing (Tsumugi): vCPUs the kernel takes away and gives back.

/// The vCPU a thread meant for `home` goes to: `home`, unless the kernel revoked it — then the
/// first vCPU that is not revoked (vCPU 0 never is). One Relaxed load; a revocation this look
/// misses is caught after the push ([`rescue`]).
#[inline(always)]
fn route(home: usize) -> usize {
    let revoked = REVOKED.load(Ordering::Relaxed);
    if revoked & (1 << home) == 0 {
        home
    } else {
        (!revoked).trailing_zeros() as usize % MAX_VCPUS
    }
}

/// Moves what vCPU `v`'s shared queue holds to vCPUs that run (it was revoked).
#[cold]
fn rescue(v: usize) {
    let taken = {
        // SAFETY: `v` is a vCPU number (see `vcpu_at`).
        let mut queue = unsafe { vcpu_at(v) }.queue.lock();
        let all = queue.take_all();
        // SAFETY: `v` is a vCPU number (see `vcpu_at`).
        unsafe { vcpu_at(v) }.set_queued(false);
        all
    };
    for t in taken {
        make_ready(t, route(v));
    }
}

/// Takes in the kernel's revocation of vCPU `v` (`VCPU_REVOKED`, its `count`-th): its ready
/// threads — own queue, unpublished children, shared queue — and `stopped` (the thread it was
/// running, saved by the kernel; null if it was idle) go to vCPUs that run.
///
/// The kernel stops a vCPU only with LTN ≠ 0 or parked idle, never inside scheduler code, so
/// its owner-only structures (own queue, unpublished list) are consistent and nobody touches
/// them: they are read here as the owner would. Wakers that queue on `v` meanwhile are caught:
/// `REVOKED` is set (SeqCst) before the shared queue is emptied, and a waker looks at it after
/// its push and the SeqCst fence of its idle claim ([`make_ready`]).
///
/// # Safety
/// Call with LTN = 0, from the event drain (one drainer at a time); `stopped` is null or a live
/// ThMB of this runtime the kernel saved.
#[cfg_attr(not(target_os = "none"), allow(dead_code))] // Tsumugi's upcall handler
pub unsafe fn adopt_revoked(v: usize, stopped: *mut Thmb, count: u64) {
    if v == 0 || v >= vcpu_count() {
        return;
    }
    REVOKED.fetch_or(1 << v, Ordering::SeqCst);
    crate::prim::fence(Ordering::SeqCst);
    IDLE.retract(v);
    // SAFETY: `v` is a vCPU number (see `vcpu_at`).
    let vcpu = unsafe { vcpu_at(v) };
    let mut fresh = vcpu.fresh.swap(0, Ordering::Relaxed);
    vcpu.defer_owner.store(0, Ordering::Relaxed);
    let target = route(v);
    // SAFETY: `v` is stopped outside scheduler code (see above): its own queue and list are
    // consistent and ours now; every thread on them is READY and live, every record live.
    unsafe {
        // The unpublished list first: a joiner on the own queue, once made ready, may run at
        // once and wait for its records, which must be threads (promoted) by then.
        while fresh != 0 {
            let next = entry_next(fresh);
            make_ready(entry_thread(fresh, None), target);
            fresh = next;
        }
        loop {
            let t = vcpu.local.pop();
            if t.is_null() {
                break;
            }
            make_ready(t, target);
        }
        if !stopped.is_null() {
            requeue_full(stopped);
        }
    }
    rescue(v);
    if LIVE.fetch_and(!(1 << v), Ordering::SeqCst) & (1 << v) != 0 {
        // vCPU 0 may be waiting for the others to leave (shutdown).
        platform::unpark(0);
    }
    REVOCATIONS_SEEN[v].store(count, Ordering::Release);
}

/// Whether vCPU `v`'s revocations up to the `count`-th have been taken in.
#[cfg_attr(not(target_os = "none"), allow(dead_code))] // Tsumugi's upcall handler
pub fn revocations_seen(v: usize, count: u64) -> bool {
    REVOCATIONS_SEEN.get(v).is_some_and(|c| c.load(Ordering::Acquire) >= count)
}

/// vCPU `v` runs (its first grant, or again after a revocation the caller has seen taken in):
/// joins the runtime, unless it has shut down or has no vCPU `v` (then `false`: the vCPU
/// retires without running anything).
#[cfg_attr(not(target_os = "none"), allow(dead_code))] // Tsumugi's upcall handler
pub fn rejoin(v: usize) -> bool {
    if v >= vcpu_count() {
        return false;
    }
    REVOKED.fetch_and(!(1 << v), Ordering::SeqCst);
    LIVE.fetch_or(1 << v, Ordering::SeqCst);
    // Against `retire(0)`'s wait (SeqCst on both sides): either vCPU 0 sees this vCPU live and
    // waits for it, or this sees the shutdown.
    if SHUTDOWN.load(Ordering::SeqCst) {
        LIVE.fetch_and(!(1 << v), Ordering::SeqCst);
        platform::unpark(0);
        return false;
    }
    true
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
                // Stopped inside an edit of its own record list: back to the edit's start
                // (it runs again from scratch), so that the list is whole — see below.
                if let Some(start) = context::restart_point(pc) {
                    context::set_frame_pc(&raw mut (*t).resume, start);
                    RESTARTS.fetch_add(1, Ordering::Relaxed);
                }
                Thmb::set_mask(t, mask::FULL | fp);
            }
        }
        (*t).state.set(READY);
        // Its task records become threads now, queued before it: its `a` may be waiting —
        // spinning, with no library call — for something a `b` does (on one vCPU nothing else
        // would ever run `b`). A thread stopped in a resume sequence was in no fork or join.
        if (*t).records.get() != 0 {
            promote_own_records(t);
        }
        let home = vcpu_of(t);
        make_ready(t, home);
    }
}

/// `t` blocked in the kernel (`BLOCKED`): it is not runnable until [`requeue_full`].
///
/// # Safety
/// `t` is a live ThMB of this runtime. Call with LTN = 0.
pub unsafe fn note_blocked(t: *mut Thmb) {
    // SAFETY: per the contract.
    unsafe {
        (*t).state.set(KERNEL_BLOCKED);
        if (*t).records.get() != 0 {
            promote_own_records(t);
        }
    }
}

/// The task records of a thread the kernel stopped ([`note_blocked`], [`requeue_full`]) become
/// threads now — what it waits for may be one of them (a pipe its `b` writes, a flag its `b`
/// sets while its `a` spins). The thread is in a system call, or was moved back to the start
/// of any edit of its list it was in (`context::restart_point`), so the list is whole; it runs
/// again only once queued: its own list is the scheduler's until then. Its joins find the
/// records promoted and wait for their threads.
///
/// # Safety
/// `t` is a live ThMB of this runtime, stopped by the kernel outside any edit of its own list,
/// which is not empty. Call with LTN = 0.
#[cold]
#[inline(never)]
unsafe fn promote_own_records(t: *mut Thmb) {
    // SAFETY: per the contract the list is ours; its entries are live records.
    unsafe {
        let home = vcpu_of(t);
        // Oldest first, as a publication queues them.
        let mut oldest = reverse_entries((*t).records.get());
        (*t).records.set(0);
        while oldest != 0 {
            let next = entry_next(oldest);
            make_ready(entry_thread(oldest, None), home);
            oldest = next;
        }
    }
}

/// What the platform runs on each new vCPU.
fn vcpu_main(vcpu: usize) -> ! {
    enter_vcpu_loop(vcpu)
}

// ------------------------------------------------------------------------------------------
// Runtime entry.

/// Runs `main` as the first user thread on `vcpus` vCPUs (0: the platform's default) and
/// returns its result once it returns. See [`crate::run`].
pub(crate) fn run<F, T>(vcpus: usize, name: Option<Box<str>>, body: F) -> crate::task::Outcome<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    assert!(platform::ltn().is_null(), "libuthread::run called inside a user thread");
    let n = if vcpus == 0 { platform::default_vcpus() } else { vcpus }.clamp(1, MAX_VCPUS);
    while RUN_LOCK.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
        platform::sleep_current(1_000_000);
    }
    SHUTDOWN.store(false, Ordering::SeqCst);
    context::set_switch_flag(context::FLAG_SHUTDOWN, false);
    context::detect_fp();
    IDLE.clear();
    REVOKED.store(0, Ordering::SeqCst);
    for seen in &REVOCATIONS_SEEN {
        seen.store(0, Ordering::Relaxed);
    }
    // vCPUs the platform starts at once count as live from the start; the others join when
    // their processor is granted ([`rejoin`]).
    LIVE.store(if platform::VCPUS_JOIN_WHEN_GRANTED { 1 } else { u64::MAX >> (64 - n) }, Ordering::SeqCst);
    GENERATION.fetch_add(1, Ordering::AcqRel);
    VCPU_COUNT.store(n, Ordering::SeqCst);
    for vcpu in &VCPUS[..n] {
        vcpu.reset();
        vcpu.ensure_stack();
    }
    // SAFETY: no vCPU given: heap memory.
    let main = unsafe { Thmb::new_thread(None, body, name, DEFAULT_STACK_SIZE, crate::thmb::SPAWN_REFS) };
    // SAFETY: new and ours.
    unsafe { (*main).is_main = true };
    // SAFETY: new and ours.
    unsafe { (*main).state.set(READY) };
    VCPUS[0].push(main);
    platform::start_vcpus(n, vcpu_main);
    // vCPU 0: park the caller's registers in the root context and run the loop.
    // SAFETY: ROOT is only used here and by `retire(0)`; the scheduler stack is free.
    unsafe { context::switch_out_window(ROOT.0.get(), VCPUS[0].top(), loop_entry, 0, 0) };
    // Every vCPU has retired.
    // SAFETY: the main thread exited (so `outcome` is written) and we hold a reference.
    let outcome = unsafe { (*main).task.take::<T>() };
    // SAFETY: our reference.
    unsafe { Thmb::release(main) };
    VCPU_COUNT.store(0, Ordering::SeqCst);
    RUN_LOCK.store(false, Ordering::Release);
    outcome
}
