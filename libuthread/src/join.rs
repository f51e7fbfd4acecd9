//! Fork-join with a task record on the caller's stack ([`join`](crate::join)): lazy thread
//! creation as StackThreads and Cilk mean it — the forked closure costs a *record* (a few words
//! in the joiner's own frame, pushed on its thread's own record list), not a thread; it becomes a
//! thread only when someone else could run it.
//!
//! # The record's life
//! - `join(a, b)` builds a [`Job`] for `b` in its frame and pushes it on the calling thread's
//!   own record list (`Thmb::records`, the entry tagged as a record), with plain loads and
//!   stores and no critical section: only the thread touches that list while it runs (see
//!   `sched::push_job`, `context::own_push`). Then it calls `a`.
//! - When `a` returns, the joiner takes the record back off its own list (the head, if it is
//!   there: every record pushed by `a` has been taken back or handed on) and calls `b` right
//!   there, as a plain call: no ThMB, no stack, no identity switch, the result in a local. This
//!   is the whole cost of a fork that nobody else wanted: a load and a compare more than the
//!   record's stores and the list's two.
//! - If the record is not there, the thread's records went to its vCPU's unpublished list
//!   (`Vcpu::fresh`, the list lazy `spawn`s use) when it entered the scheduler (it blocked or
//!   yielded inside `a`) or ran a spawned child inline; the join looks there, in a library
//!   critical section. Not there either, it was **promoted**: whenever the vCPU enters the
//!   scheduler (a thread blocked, yielded or was preempted; a block while another thread is
//!   ready here leaves the list for a while, see "Deferred promotion" in `sched::scheduler`),
//!   every record on that list becomes an ordinary thread (a ThMB from
//!   the vCPU's pool, the record's closure moved into it, detached) on the ready queue, where it
//!   runs — or is stolen — like any spawned thread, and writes its outcome back into the
//!   record. The joiner then waits for it on the record's completion word
//!   (`sched::completion`, the join word protocol), so a join never misses a promoted child
//!   however the two race. A fork that sees an idle vCPU promotes only the *oldest* record of
//!   its thread's own list (`sched::promote_oldest_record`: the outermost fork, the largest
//!   piece of work, as a Cilk thief steals it) and hands it to that vCPU; the newer records
//!   stay records. A thread that blocks in the kernel, or that the kernel preempts, has its
//!   records promoted at once (a thread stopped inside a push or take of its list is first moved
//!   back to its start: both are restartable edits, see `context`).
//!
//! So `b` behaves as a thread whenever that matters: if `a` blocks (on anything, including on
//! what `b` will do) or spins until `b` did something (and is preempted), the vCPU's scheduler
//! promotes `b` and it runs — at once when nothing else
//! is ready, else after a bounded number of other threads' blocks (or sooner: the caller, woken,
//! usually takes `b` back itself); idle vCPUs get it to run
//! in parallel. What `b` does not get when it runs inline is an identity of its own: there it
//! is part of the calling thread (the same [`current`](crate::current), the same thread-locals),
//! and if it blocks, the caller — which was about to wait for it anyway — blocks with it.
//! That is the difference from [`spawn`](crate::spawn) + `join`, whose child is always its own
//! thread (and run inline *as itself*, which costs a ThMB and two LTN switches).
//!
//! Rust cannot move frames between stacks, so the record never moves: it stays in the joiner's
//! frame, which `join` does not leave before `b` has run (inline) or its thread has
//! completed the record (promoted) — also when `a` unwinds (hosted), through [`Listed`].

use alloc::string::String;
use core::cell::{Cell, UnsafeCell};
use core::mem::{ManuallyDrop, MaybeUninit};

use crate::prim::Ordering;
use crate::sched::completion::Completion;
use crate::task::Outcome;
use crate::thmb::{Thmb, JOIN_DETACHED};

/// The part of a record the scheduler sees: its link in the unpublished list, and how to turn it
/// into a thread.
#[repr(C)]
pub(crate) struct JobHeader {
    /// The next entry of the list the record is on (its thread's own, or a vCPU's unpublished
    /// list: a tagged entry word, see `scheduler::JOB_TAG`); set when the record is listed
    /// (left unset before: an initial value would be one more store per fork).
    next: Cell<MaybeUninit<usize>>,
    /// Makes the record a detached thread (a ThMB from the pool of vCPU `v` if given, with LTN =
    /// 0 on it), whose body runs the record's closure and completes the record; returns its
    /// ThMB, READY and in no list.
    pub(crate) promote: PromoteFn,
}

// The link is the first word: `context::own_push` and `own_take` address it as the entry word
// (the header's address + 1, `sched::JOB_TAG`) minus one.
const _: () = assert!(core::mem::offset_of!(JobHeader, next) == 0);

impl JobHeader {
    /// The next entry.
    ///
    /// # Safety
    /// The record was listed (its link set by [`JobHeader::set_next`]).
    #[inline(always)]
    pub(crate) unsafe fn next(&self) -> usize {
        // SAFETY: per the contract.
        unsafe { self.next.get().assume_init() }
    }

    /// Sets the link.
    #[inline(always)]
    pub(crate) fn set_next(&self, next: usize) {
        self.next.set(MaybeUninit::new(next));
    }
}

/// A promoted record's thread settings when it has a name: in the joiner's frame, found
/// through [`Job::settings`].
struct Named {
    name: Option<String>,
    stack_size: usize,
}

/// A forked closure `B` returning `R`, in its joiner's frame.
#[repr(C)]
struct Job<B, R> {
    header: JobHeader,
    /// Completed by the promoted thread once the outcome is written; the joiner waits on it.
    /// Initialised at the fork, not at the promotion: a joiner that does not find its record
    /// where it runs waits on this word at once, and the record may still be listed on
    /// another vCPU then (its thread blocked there with the record left unpublished, then ran
    /// on here) — a word first set by the promotion would be read before it is written, and
    /// overwritten after the joiner registered on it (a lost wake-up: the
    /// `suspended_forks_come_back` check hung at 4 vCPUs).
    done: Completion,
    /// The closure, until run inline or moved into the promoted thread.
    body: UnsafeCell<ManuallyDrop<B>>,
    /// The promoted thread's outcome, written before `done` completes.
    outcome: UnsafeCell<MaybeUninit<Outcome<R>>>,
    /// The settings the promoted thread gets, in one word, when `header.promote` is [`promote`]:
    /// the stack size shifted left by one when it has no name, else the address of the joiner's
    /// [`Named`] with the low bit set. Left unwritten when `promote` is a [`promote_sized`],
    /// which knows its size: an unnamed record whose stack is a power of two from 16 KiB to
    /// 2 MiB (every plain `join`, and a `Builder::join` with such a constant size) costs no
    /// store here.
    settings: MaybeUninit<usize>,
}

/// The `JobHeader::promote` of an unnamed `Job<B, R>` whose thread gets a `stack_size`-byte
/// stack, if [`promote_sized`] has that size in its type: the powers of two from libuthread's
/// smallest stack (16 KiB) to 2 MiB, the default (256 KiB) among them; `None` for any other
/// size. A match on constants: where `join_with` is inlined with a constant size (every plain
/// `join`), it folds to one function pointer, and the fork stores no settings word.
#[inline(always)]
fn promote_for_size<B, R>(stack_size: usize) -> Option<PromoteFn>
where
    B: FnOnce() -> R + Send,
    R: Send,
{
    Some(match stack_size {
        0x4000 => promote_sized::<B, R, 0x4000>,
        0x8000 => promote_sized::<B, R, 0x8000>,
        0x1_0000 => promote_sized::<B, R, 0x1_0000>,
        0x2_0000 => promote_sized::<B, R, 0x2_0000>,
        0x4_0000 => promote_sized::<B, R, 0x4_0000>,
        0x8_0000 => promote_sized::<B, R, 0x8_0000>,
        0x10_0000 => promote_sized::<B, R, 0x10_0000>,
        0x20_0000 => promote_sized::<B, R, 0x20_0000>,
        _ => return None,
    })
}

/// What turns a record into a thread ([`JobHeader::promote`]).
type PromoteFn = unsafe fn(*const JobHeader, Option<&'static crate::sched::Vcpu>) -> *mut Thmb;

/// `JobHeader::promote` for an unnamed `Job<B, R>` whose thread gets a `STACK`-byte stack (the
/// record's settings word unwritten).
///
/// # Safety
/// As for [`promote`].
unsafe fn promote_sized<B, R, const STACK: usize>(h: *const JobHeader, v: Option<&'static crate::sched::Vcpu>) -> *mut Thmb
where
    B: FnOnce() -> R + Send,
    R: Send,
{
    // SAFETY: forwarded contract.
    unsafe { spawn_promoted(v, h, run_promoted::<B, R>, None, STACK) }
}

/// `JobHeader::promote` for a `Job<B, R>` with its settings in the record.
///
/// `B` and `R` need not be `'static`: the record's joiner does not leave `join` (returning or
/// unwinding) before the promoted thread has completed the record, and the thread touches
/// neither `B` nor `R` after that — what `std::thread::scope` and `rayon::join` rely on too.
/// The thread's closure is built by [`spawn_promoted`], which names neither type.
///
/// # Safety
/// `h` is the header of a live `Job<B, R>` just taken off an unpublished list (its closure
/// still in it); if `v` is given, the caller runs on vCPU `v` with LTN = 0.
unsafe fn promote<B, R>(h: *const JobHeader, v: Option<&'static crate::sched::Vcpu>) -> *mut Thmb
where
    B: FnOnce() -> R + Send,
    R: Send,
{
    let job = h as *const Job<B, R>;
    // SAFETY: a live record off the list: ours until its thread runs; `promote` is its
    // `JobHeader::promote` only when `join_with` wrote the settings.
    unsafe {
        let settings = (*job).settings.assume_init();
        let (name, stack_size) = if settings & 1 == 0 {
            (None, settings >> 1)
        } else {
            let named = (settings & !1) as *mut Named;
            ((*named).name.take().map(String::into_boxed_str), (*named).stack_size)
        };
        spawn_promoted(v, h, run_promoted::<B, R>, name, stack_size)
    }
}

/// A promoted record and the function that runs it, moved into its thread: no type of the
/// record's in it, so the thread's closure is `'static` whatever the record borrows.
struct Promoted(*const JobHeader, unsafe fn(*const JobHeader));

// SAFETY: the record is only touched by its promoted thread until that completes it, then
// only by its joiner; its closure and result are `Send` (`promote`'s bounds).
unsafe impl Send for Promoted {}

/// Makes the detached thread of a promoted record (see [`promote`]). Not generic, so the one
/// closure type it spawns is `'static`.
///
/// # Safety
/// As for `promote`; `run` is `run_promoted` for the record's types.
#[inline(never)]
unsafe fn spawn_promoted(v: Option<&'static crate::sched::Vcpu>, h: *const JobHeader, run: unsafe fn(*const JobHeader), name: Option<alloc::boxed::Box<str>>, stack_size: usize) -> *mut Thmb {
    let job = Promoted(h, run);
    let body = move || {
        let job = job;
        // SAFETY: `run` matches the record (contract), which stays until completed.
        unsafe { (job.1)(job.0) }
    };
    // SAFETY: forwarded contract.
    unsafe {
        let t = Thmb::new_thread(v, body, name, stack_size, 1);
        // Nobody joins the thread itself: the record is the join.
        (*t).join.store(JOIN_DETACHED, Ordering::Relaxed);
        t
    }
}

/// The body of a promoted record's thread: runs the closure, stores its outcome in the record,
/// completes it (waking its joiner if it waits). The record may be gone once it is completed.
///
/// # Safety
/// `h` is the header of a promoted `Job<B, R>`: its closure is still in it and only this
/// thread touches the record until it completes it; the joiner does not leave `join` before
/// that.
unsafe fn run_promoted<B, R>(h: *const JobHeader)
where
    B: FnOnce() -> R + Send,
    R: Send,
{
    let job = h as *const Job<B, R>;
    // SAFETY: per the contract.
    unsafe {
        let body = ManuallyDrop::take(&mut *(*job).body.get());
        let outcome = crate::unwind::catch(body);
        (*(*job).outcome.get()).write(outcome);
        (*job).done.complete();
    }
}

/// Forks `b` as a record, calls `a`, then joins `b`: calls it inline if nobody took the record,
/// else waits for its thread. See the module documentation.
#[inline(always)]
pub(crate) fn join_with<A, B, RA, RB>(name: Option<String>, stack_size: usize, a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA,
    B: FnOnce() -> RB + Send,
    RB: Send,
{
    let mut named = Named { name, stack_size };
    let (promote, settings) = if named.name.is_some() {
        (promote::<B, RB> as PromoteFn, MaybeUninit::new(&raw mut named as usize | 1))
    } else if let Some(sized) = promote_for_size::<B, RB>(stack_size) {
        (sized, MaybeUninit::uninit())
    } else {
        (promote::<B, RB> as PromoteFn, MaybeUninit::new(stack_size << 1))
    };
    let job = Job {
        header: JobHeader { next: Cell::new(MaybeUninit::uninit()), promote },
        done: Completion::new(),
        body: UnsafeCell::new(ManuallyDrop::new(b)),
        outcome: UnsafeCell::new(MaybeUninit::uninit()),
        settings,
    };
    // SAFETY: the record stays here, unmoved, until it is taken back or completed (below, or
    // in `Listed::drop` when `a` unwinds).
    let me = unsafe { crate::sched::push_job(&job.header) };
    let listed = Listed(&job);
    let ra = a();
    core::mem::forget(listed);
    // The thread that pushed the record — a thread stays itself through `a`, whatever vCPU it
    // ends on — or null, as at the push, outside a user thread: read again rather than kept,
    // so that nothing is held in a register across `a` for it.
    let again = crate::platform::ltn();
    debug_assert_eq!(again, me);
    let rb = if again.is_null() {
        // Outside a user thread (or inside a library critical section): never listed, a plain
        // call.
        // SAFETY: never listed, so the closure is still here and ours.
        unsafe { run_taken(&job) }
    } else {
        // SAFETY: listed above, by this thread, and not taken back since.
        unsafe { finish(&job, again) }
    };
    drop(named);
    (ra, rb)
}

/// Takes the listed record `job` back and runs its closure, or waits for its promoted thread.
///
/// # Safety
/// `job` was pushed by `sched::push_job`, which returned `me`, and not taken back or waited for
/// since.
#[inline(always)]
unsafe fn finish<B, R>(job: &Job<B, R>, me: *mut Thmb) -> R
where
    B: FnOnce() -> R + Send,
    R: Send,
{
    // SAFETY: per the contract; taken back, the record was never promoted.
    if unsafe { crate::sched::take_own_job(&job.header, me) } {
        return unsafe { run_taken(job) };
    }
    // SAFETY: forwarded contract; not taken back.
    unsafe { finish_missed(job, me) }
}

/// [`finish`] of a record that was not its thread's newest own entry: takes it off its vCPU's
/// unpublished list and runs it, or waits for its promoted thread. Not inlined: its code in every
/// joiner kept one more register live across `a` (FK fib on x86_64: four instructions a fork).
///
/// # Safety
/// As for [`finish`], and the record is not on the own list.
#[inline(never)]
unsafe fn finish_missed<B, R>(job: &Job<B, R>, me: *mut Thmb) -> R
where
    B: FnOnce() -> R + Send,
    R: Send,
{
    // SAFETY: per the contract; taken back, the record was never promoted.
    if unsafe { crate::sched::take_job_elsewhere(&job.header, me) } {
        return unsafe { run_taken(job) };
    }
    // SAFETY: not on any list: promoted (per the contract, nothing else takes it off).
    match crate::unwind::settled(unsafe { wait_promoted(job) }) {
        Ok(value) => value,
        Err(payload) => crate::unwind::resume(payload),
    }
}

/// Runs the closure of the record `job`, taken back (never promoted): here, as a plain call.
///
/// # Safety
/// `job` was taken back off its list and its closure not run since.
#[inline(always)]
unsafe fn run_taken<B, R>(job: &Job<B, R>) -> R
where
    B: FnOnce() -> R + Send,
    R: Send,
{
    // SAFETY: never promoted (contract), so the closure is here and ours.
    let b = unsafe { ManuallyDrop::take(&mut *job.body.get()) };
    b()
}

/// Waits for the record `job`'s thread to complete it, then takes its outcome.
///
/// # Safety
/// `job` was promoted, or is listed on a vCPU the caller has left (which promotes it when it
/// next enters the scheduler); only the caller waits for it, once.
#[inline(never)]
unsafe fn wait_promoted<B, R>(job: &Job<B, R>) -> Outcome<R> {
    job.done.wait();
    // SAFETY: complete: the outcome is written and only we read it.
    unsafe { (*job.outcome.get()).assume_init_read() }
}

/// A listed record whose `a` is running: if `a` unwinds, takes the record back (dropping its
/// closure) or waits for its promoted thread (dropping its outcome), so the frame never goes
/// while the scheduler or a thread can still reach the record.
struct Listed<'a, B, R>(&'a Job<B, R>)
where
    B: FnOnce() -> R + Send,
    R: Send;

impl<B, R> Drop for Listed<'_, B, R>
where
    B: FnOnce() -> R + Send,
    R: Send,
{
    fn drop(&mut self) {
        let job = self.0;
        // The thread that listed the record, unwinding out of its `a`; null if the record was
        // never listed (see `join_with`).
        let me = crate::platform::ltn();
        // SAFETY: if listed, by `join_with` from `me` and not taken back (the normal path
        // forgets `self`); if not, the closure is still here.
        unsafe {
            if me.is_null() || crate::sched::take_job(&job.header, me) {
                ManuallyDrop::drop(&mut *job.body.get());
            } else {
                drop(wait_promoted(job));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Closure = fn() -> u32;

    #[test]
    fn every_power_of_two_from_16_kib_to_2_mib_has_a_sized_promote() {
        for shift in 14..=21 {
            assert!(promote_for_size::<Closure, u32>(1 << shift).is_some(), "{} bytes", 1usize << shift);
        }
        assert!(promote_for_size::<Closure, u32>(crate::sched::DEFAULT_STACK_SIZE).is_some());
        for other in [3 << 14, (1 << 14) + 1, 1 << 22, 1 << 13] {
            assert!(promote_for_size::<Closure, u32>(other).is_none(), "{other} bytes");
        }
    }
}
