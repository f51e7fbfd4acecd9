//! S3 synchronisation across programs (seed 002; ARCHITECTURE.md "Shared locks and
//! barriers"): kernel lock holders with Auto Lock, barrier sleep with batch release, and the
//! futex-style wait/wake kept as the soft-sync baseline. Word layouts: `tsumugi_abi::s3`.
//!
//! The user-mode halves never enter the kernel when nobody waits. The kernel acts on a word
//! only with the [`TABLE`] lock held and through an atomic on the word's frame (reached
//! through the direct map, after checking the caller's view may write it), so its
//! read-modify-writes are atomic against the programs' own compare-exchanges on any CPU.
//!
//! A user thread of a vCPU whose library names it (the calls' last argument, its ThMB) waits
//! *queued* (`notify::park::queued`): the call answers [`QUEUED`] at once and the library
//! parks the thread itself; the kernel posts `UNBLOCKED(t)` with `kn::UNBLOCKED_QUEUED` and
//! the result from the syscall that acquired the lock for t or released the barrier (a batch
//! release posts for every waiter in one call). Without the ThMB it waits *parked*
//! (`notify::park`): saved into its ThMB, `BLOCKED(t)` at once, `UNBLOCKED(t)` with the result
//! in the ThMB. Any other caller blocks as a plain thread (`notify::blocking`).
//!
//! Lock order: [`TABLE`], then the view space, then (for the owner of a holder's region) the
//! list of live programs; wake-ups happen after [`TABLE`] is dropped.

pub mod table;

#[cfg(target_os = "none")]
pub use machine::*;

#[cfg(target_os = "none")]
mod machine {
    use alloc::sync::Arc;
    use alloc::vec::Vec;
    use arch::addr::{PhysAddr, VirtAddr, PAGE_SIZE};
    use arch::mapping::MapFlags;
    use arch::trap::TrapFrame;
    use core::sync::atomic::{AtomicU64, AtomicU8, Ordering};
    use arch::sync::Mutex;
    use tsumugi_abi::s3::{barrier, MAX_BARRIER_COUNT, OWNER_DIED, QUEUED, WAITERS};
    use tsumugi_abi::syscall::{decode_result, encode_result, Errno};

    use super::table::{Kind, Refusal, Table};
    use crate::mm::view_space::{RegionId, ViewId};
    use crate::notify::park::{self, Parked};
    use crate::mm::{kernel_space, space};
    use crate::sched::scheduler::{self, Then};
    use crate::thread::{self, Thread};

    /// Still waiting.
    const PENDING: u8 = 0;
    /// The kernel acquired the lock for the waiter, or a wake/batch release let it go.
    const DONE: u8 = 1;
    /// The kernel acquired the lock for the waiter after its holder's program ended.
    const INHERITED: u8 = 2;
    /// The barrier broke, or the word's memory went with its program.
    const BROKEN: u8 = 3;

    /// A thread waiting in the kernel on a word.
    pub struct Waiter {
        /// The waiting thread; for a parked user thread, the activation that parked it (its
        /// view is the program's). `None` only in a spare waiter ([`Table::put_spare`]).
        thread: Option<Arc<Thread>>,
        /// The parked user thread, if it waits without a kernel thread.
        parked: Option<Parked>,
        /// Its program.
        program: u64,
        /// The tag a lock is acquired under on its behalf.
        tag: u64,
        /// `PENDING`, `DONE`, `INHERITED` or `BROKEN`; written under [`TABLE`].
        state: AtomicU8,
    }

    /// The machine's holder table.
    static TABLE: Mutex<Table<Arc<Waiter>>> = Mutex::new(Table::new());

    type SysResult = Result<usize, Errno>;

    fn refused(r: Refusal) -> Errno {
        match r {
            Refusal::TableFull | Refusal::ProgramFull => Errno::Again,
            Refusal::OtherKind => Errno::Inval,
            Refusal::NoMemory => Errno::NoMem,
        }
    }

    /// Runs `f` on the word at `addr` as view `view` may touch it: 8-byte aligned (`EINVAL`),
    /// in a region the view may write (`EFAULT`: unmapped, read-only, kernel memory). The view
    /// space stays locked during `f`, so the word's frame cannot go meanwhile.
    fn with_word<R>(view: ViewId, addr: u64, f: impl FnOnce(&AtomicU64) -> R) -> Result<R, Errno> {
        if addr % 8 != 0 {
            return Err(Errno::Inval);
        }
        if !(arch::layout::USER_START..arch::layout::USER_END).contains(&addr) {
            return Err(Errno::Fault);
        }
        space::with(|s, m| {
            s.check(view, addr, 8, MapFlags::WRITE).map_err(|_| Errno::Fault)?;
            let page = VirtAddr::new(addr / PAGE_SIZE * PAGE_SIZE);
            // A word in use is mapped already (one table walk); only a first touch fills it.
            let (pa, _) = match s.translate(m, view, page) {
                Some(mapped) => mapped,
                None => {
                    s.populate(m, view, addr, 8).map_err(|_| Errno::NoMem)?;
                    s.translate(m, view, page).ok_or(Errno::Fault)?
                }
            };
            let at = kernel_space::phys_to_virt(PhysAddr::new(pa.as_u64() + addr % PAGE_SIZE));
            // SAFETY: the view may write these 8 aligned bytes of a live region's frame (just
            // checked and backed), reached through the direct map; the view space's lock keeps
            // the frame from being freed while `f` runs; user mode only touches it atomically
            // (or racily, which only harms the program that does it).
            let word = unsafe { AtomicU64::from_ptr(at.as_u64() as *mut u64) };
            Ok(f(word))
        })
    }

    /// A word of user memory as a view may touch it. For the calling thread's own view
    /// (`own`: its table is the one loaded) every operation is one atomic instruction through
    /// that table, with fault fix-up (`arch::usercopy::cmpxchg_u64`: the page table enforces
    /// the view's write right); only when that faults — a page not filled yet, or no right —
    /// does it go the checked way ([`with_word`]), which fills the page or names the error.
    /// For another view (a waiter's, at the end of a program) it always goes the checked way.
    #[derive(Clone, Copy)]
    struct Word {
        view: ViewId,
        addr: u64,
        own: bool,
    }

    impl Word {
        /// The caller's word at `addr`.
        fn own(view: ViewId, addr: u64) -> Word {
            Word { view, addr, own: true }
        }

        /// The word at `addr` as `view` (not loaded here) may touch it.
        fn of(view: ViewId, addr: u64) -> Word {
            Word { view, addr, own: false }
        }

        /// Compare-exchange: `Ok(current)` when it swapped, `Err(seen)` otherwise.
        fn cas(self, current: u64, new: u64) -> Result<Result<u64, u64>, Errno> {
            if self.own {
                // SAFETY: a syscall runs with the caller's table loaded, whose user half holds
                // only its view's mappings.
                if let Ok(r) = unsafe { arch::usercopy::cmpxchg_u64(self.addr, current, new) } {
                    return Ok(r);
                }
            }
            with_word(self.view, self.addr, |a| a.compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire))
        }

        /// An atomic read (a compare-exchange of 0 by 0: the kernel acts only on words the
        /// view may write).
        fn load(self) -> Result<u64, Errno> {
            Ok(self.cas(0, 0)?.unwrap_or_else(|seen| seen))
        }

        /// Atomic read-modify-write by `f`; returns the old value.
        fn update(self, f: impl Fn(u64) -> u64) -> Result<u64, Errno> {
            let mut cur = self.load()?;
            loop {
                match self.cas(cur, f(cur))? {
                    Ok(old) => return Ok(old),
                    Err(seen) => cur = seen,
                }
            }
        }
    }

    /// The calling thread, its program and view (`EINVAL` for a kernel thread).
    fn caller() -> Result<(Arc<Thread>, u64, ViewId), Errno> {
        let me = scheduler::current().ok_or(Errno::Inval)?;
        let program = me.domain.as_ref().ok_or(Errno::Inval)?.id;
        let view = me.view().ok_or(Errno::Inval)?;
        Ok((me, program, view))
    }

    /// The live program owning the region at `addr` (where a holder's tag, its ThMB, lies).
    fn owner_at(addr: u64) -> Option<u64> {
        let region: RegionId = space::with(|s, _| s.region_at(addr))?;
        crate::domain::owner_of(region)
    }

    fn new_waiter(me: Arc<Thread>, program: u64, tag: u64, parked: Option<Parked>) -> Arc<Waiter> {
        Arc::new(Waiter { thread: Some(me), parked, program, tag, state: AtomicU8::new(PENDING) })
    }

    /// [`new_waiter`] made from a spare of `table` when it has one (a wait's allocation and
    /// free cost about 350 instructions with the kernel's first-fit heap).
    fn waiter_in(table: &mut Table<Arc<Waiter>>, me: Arc<Thread>, program: u64, tag: u64, parked: Option<Parked>) -> Arc<Waiter> {
        if let Some(mut w) = table.take_spare() {
            if let Some(x) = Arc::get_mut(&mut w) {
                *x = Waiter { thread: Some(me), parked, program, tag, state: AtomicU8::new(PENDING) };
                return w;
            }
        }
        new_waiter(me, program, tag, parked)
    }

    /// Drops what a woken waiter refers to (its thread and program) and, if nobody else holds
    /// it, keeps it for [`waiter_in`]. Call without [`TABLE`] (a thread or program dropped
    /// here may be the last reference); `keep` runs later, under it.
    fn emptied(mut w: Arc<Waiter>) -> Option<Arc<Waiter>> {
        let x = Arc::get_mut(&mut w)?;
        x.thread = None;
        x.parked = None;
        Some(w)
    }

    impl Waiter {
        /// The waiter's view now (a grant or revoke may have moved it since it queued).
        fn view(&self) -> Option<ViewId> {
            self.thread.as_ref()?.view()
        }

        /// The waiting thread (a waiter in use has one).
        fn thread(&self) -> &Arc<Thread> {
            self.thread.as_ref().expect("a waiter in use names its thread")
        }

        /// Ends the wait, whose state has left `PENDING`: a parked thread gets its result and
        /// `UNBLOCKED`, a blocked one is woken (and reads its state). Called without [`TABLE`].
        fn wake(&self) {
            match &self.parked {
                Some(p) => p.finish(outcome(self.state.load(Ordering::Acquire))),
                None => thread::wake(self.thread().clone()),
            }
        }
    }

    /// What `enqueue` (under [`TABLE`]) decided: queued, or done without waiting.
    type Queued = Result<Option<usize>, Errno>;

    /// Queues the caller on `word` through `enqueue`, which runs under [`TABLE`] with the table,
    /// the caller's view and its waiter, and returns `Ok(None)` once the waiter is queued,
    /// `Ok(Some(r))` when there is nothing to wait for (result `r`) or an error; then waits.
    /// A vCPU's user thread is parked first (so its `BLOCKED` precedes any waker's
    /// `UNBLOCKED`), and an immediate result reaches it as a wait's result does.
    ///
    /// `thmb` ≠ 0 on a Kernel-Notification vCPU: the library parks user thread `thmb` itself
    /// (`park::queued`); once queued the call answers [`QUEUED`] at once, and the wake posts
    /// `UNBLOCKED(thmb)` with the result.
    fn queue_and_wait(frame: &mut TrapFrame, word: u64, tag: u64, thmb: u64, enqueue: impl FnOnce(&mut Table<Arc<Waiter>>, ViewId, &Arc<Waiter>) -> Queued) -> SysResult {
        let (me, program, view) = caller()?;
        if thmb != 0 {
            if let Some(p) = park::queued(&me, thmb) {
                let mut table = TABLE.lock();
                let w = waiter_in(&mut table, me, program, tag, Some(p));
                let queued = enqueue(&mut table, view, &w);
                drop(table);
                if !matches!(queued, Ok(None)) {
                    // Not queued: give the waiter back.
                    if let Some(w) = emptied(w) {
                        TABLE.lock().put_spare(w);
                    }
                }
                return match queued? {
                    None => Ok(QUEUED),
                    Some(r) => Ok(r),
                };
            }
        }
        let mut enqueue = Some(enqueue);
        let parked = park::park(frame, |p| {
            let w = new_waiter(me.clone(), program, tag, Some(p));
            let queued = (enqueue.take().expect("called once"))(&mut TABLE.lock(), view, &w);
            match queued {
                Ok(None) => {}
                Ok(Some(r)) => w.parked.as_ref().expect("parked").finish(encode_result(Ok(r))),
                Err(e) => w.parked.as_ref().expect("parked").finish(encode_result(Err(e))),
            }
        });
        if let Some(r) = parked {
            return r;
        }
        let w = new_waiter(me, program, tag, None);
        if let Some(r) = (enqueue.take().expect("not called"))(&mut TABLE.lock(), view, &w)? {
            return Ok(r);
        }
        wait(frame, word, w)
    }

    /// What a waiter's wait ended with, as a syscall result.
    fn outcome(state: u8) -> usize {
        encode_result(match state {
            DONE => Ok(0),
            INHERITED => Ok(OWNER_DIED),
            _ => Err(Errno::Srch),
        })
    }

    /// Blocks the caller (queued as `w`) until its state leaves `PENDING`; through
    /// `notify::blocking`, so a vCPU goes back to its library meanwhile.
    fn wait(frame: &mut TrapFrame, word: u64, w: Arc<Waiter>) -> SysResult {
        // `move`: the closure owns the waiter and drops it when it returns. On a vCPU,
        // `blocking` never comes back here (the activation that waited becomes a spare on this
        // stack), so nothing this frame held would ever be dropped: the waiter, and through it
        // the thread, would leak once per wait.
        let result = crate::notify::blocking(frame, move || loop {
            {
                let _table = TABLE.lock();
                let state = w.state.load(Ordering::Acquire);
                if state != PENDING {
                    break outcome(state);
                }
                // `Blocked` under the table lock: a release that sets the state takes that
                // lock first, so its wake finds the thread blocked (or still running, and the
                // scheduler keeps a wake that comes before the switch).
                if !w.thread().block_unless_killed() {
                    drop(_table);
                    break give_up(word, &w);
                }
            }
            scheduler::schedule(Then::Block);
        });
        decode_result(result).map_err(|e| e.unwrap_or(Errno::Srch))
    }

    /// A waiter whose program is ending leaves its queue. At a barrier that breaks the barrier:
    /// the others would wait for an arrival that may never come.
    fn give_up(word: u64, w: &Arc<Waiter>) -> usize {
        let mut table = TABLE.lock();
        let state = w.state.load(Ordering::Acquire);
        if state != PENDING {
            // Granted meanwhile: a lock it now holds goes on when its program ends.
            return outcome(state);
        }
        let kind = table.find(word).map(|e| e.kind);
        table.remove(word, |x| Arc::ptr_eq(x, w));
        w.state.store(BROKEN, Ordering::Release);
        let mut woken = alloc::collections::VecDeque::new();
        if let Some(Kind::Barrier(_)) = kind {
            if let Some(view) = w.view() {
                let _ = Word::of(view, word).update(|v| v | barrier::BROKEN);
            }
            woken = table.take(word, usize::MAX).0;
            for o in &woken {
                o.state.store(BROKEN, Ordering::Release);
            }
        }
        drop(table);
        for o in woken {
            o.wake();
        }
        outcome(BROKEN)
    }

    /// `s3_lock(word, tag, thmb)`.
    pub fn lock(frame: &mut TrapFrame, word: u64, tag: u64, thmb: u64) -> SysResult {
        if tag == 0 || tag & WAITERS != 0 {
            return Err(Errno::Inval);
        }
        /// What the word said.
        enum Seen {
            Taken,
            Holder(u64),
            Mine,
        }
        queue_and_wait(frame, word, tag, thmb, |table, view, waiter| loop {
            let more = table.find(word).is_some_and(|e| e.kind == Kind::Lock && !e.waiters.is_empty());
            let w = Word::own(view, word);
            let cur = w.load()?;
            let seen = if cur & !WAITERS == tag {
                Seen::Mine
            } else if cur & !WAITERS == 0 {
                // Free (the holder released it after our user-mode attempt).
                let want = tag | if more { WAITERS } else { 0 };
                match w.cas(cur, want)? {
                    Ok(_) => Seen::Taken,
                    Err(now) => Seen::Holder(now),
                }
            } else {
                Seen::Holder(cur)
            };
            let cur = match seen {
                Seen::Taken => return Ok(Some(0)),
                // Not recursive: waiting for oneself would never end.
                Seen::Mine => return Err(Errno::Inval),
                Seen::Holder(cur) => cur,
            };
            if cur & !WAITERS == 0 {
                continue;
            }
            let holder = owner_at(cur & !WAITERS);
            if holder.is_none() {
                // The holder's program is gone (its ThMB's region with it): take the lock.
                let want = tag | if more { WAITERS } else { 0 };
                if w.cas(cur, want)?.is_ok() {
                    return Ok(Some(OWNER_DIED));
                }
                continue;
            }
            let entry = table.enqueue(word, Kind::Lock, waiter.program, waiter.clone()).map_err(refused)?;
            if entry.holder.is_none() {
                entry.holder = holder;
            }
            // The waiters bit makes the holder's release come to the kernel.
            if w.cas(cur, cur | WAITERS)?.is_ok() {
                return Ok(None);
            }
            // The word moved meanwhile: out of the queue and look again.
            table.remove(word, |x| Arc::ptr_eq(x, waiter));
        })
    }

    /// Hands the lock at `w` to its first waiter (writing its tag into the word), or frees it
    /// when nobody waits; the caller holds [`TABLE`]. Returns the waiter to wake.
    fn hand_on(table: &mut Table<Arc<Waiter>>, w: Word, state: u8) -> Result<Option<Arc<Waiter>>, Errno> {
        let word = w.addr;
        let is_lock = table.find(word).is_some_and(|e| e.kind == Kind::Lock);
        if !is_lock {
            w.update(|_| 0)?;
            return Ok(None);
        }
        let Some((next, more)) = table.take_first(word) else { return Ok(None) };
        let value = next.tag | if more { WAITERS } else { 0 };
        if let Err(e) = w.update(|_| value) {
            // Leave the waiter where it was.
            let _ = table.enqueue(word, Kind::Lock, next.program, next);
            return Err(e);
        }
        if let Some(e) = table.find(word) {
            e.holder = Some(next.program);
        }
        next.state.store(state, Ordering::Release);
        Ok(Some(next))
    }

    /// `s3_unlock(word, tag)`.
    pub fn unlock(word: u64, tag: u64) -> SysResult {
        let (_, _, view) = caller()?;
        let next = {
            let mut table = TABLE.lock();
            let w = Word::own(view, word);
            let cur = w.load()?;
            if tag == 0 || cur & !WAITERS != tag {
                return Err(Errno::Perm);
            }
            hand_on(&mut table, w, DONE)?
        };
        if let Some(n) = next {
            n.wake();
            if let Some(n) = emptied(n) {
                TABLE.lock().put_spare(n);
            }
        }
        Ok(0)
    }

    /// `s3_wait(word, expected, thmb)`.
    pub fn wait_on(frame: &mut TrapFrame, word: u64, expected: u64, thmb: u64) -> SysResult {
        queue_and_wait(frame, word, 0, thmb, |table, view, waiter| {
            if Word::own(view, word).load()? != expected {
                return Ok(Some(1));
            }
            table.enqueue(word, Kind::Wait, waiter.program, waiter.clone()).map_err(refused)?;
            Ok(None)
        })
    }

    /// `s3_wake(word, n)`: wakes up to `n` waiters (futex or barrier) in one operation.
    pub fn wake(word: u64, n: usize) -> SysResult {
        let (_, _, view) = caller()?;
        let woken = {
            let mut table = TABLE.lock();
            // The caller must be able to touch the word (one atomic read through its table).
            Word::own(view, word).load()?;
            match table.find(word).map(|e| e.kind) {
                Some(Kind::Wait | Kind::Barrier(_)) => {}
                Some(Kind::Lock) => return Err(Errno::Inval),
                None => return Ok(0),
            }
            let (woken, _) = table.take(word, n);
            for w in &woken {
                w.state.store(DONE, Ordering::Release);
            }
            woken
        };
        let count = woken.len();
        let mut woken = woken;
        // Every waiter's state is DONE: the parked ones of each program get their UNBLOCKED in
        // one post (runs of one program: a barrier's sleepers are mostly the releaser's).
        let mut at = 0;
        while at < woken.len() {
            let Some(domain) = woken[at].parked.as_ref().map(|p| p.domain().clone()) else {
                woken[at].wake();
                at += 1;
                continue;
            };
            let same = |w: &Arc<Waiter>| w.parked.as_ref().is_some_and(|p| Arc::ptr_eq(p.domain(), &domain));
            let run = woken.iter().skip(at).take_while(|w| same(w)).count();
            let parked = woken.range(at..at + run).filter_map(|w| w.parked.as_ref());
            park::Parked::finish_all(&domain, parked, outcome(DONE));
            at += run;
        }
        // Keep the waiters and the queue for the next waits (no allocation there). A waiter
        // someone else still holds (a blocked thread's) is dropped here, without the lock.
        woken.retain_mut(|w| match Arc::get_mut(w) {
            Some(x) => {
                x.thread = None;
                x.parked = None;
                true
            }
            None => false,
        });
        let mut table = TABLE.lock();
        for w in woken.drain(..) {
            table.put_spare(w);
        }
        table.put_queue(woken);
        Ok(count)
    }

    /// `s3_barrier(word, expected, count, thmb)`.
    pub fn barrier_wait(frame: &mut TrapFrame, word: u64, expected: u64, count: usize, thmb: u64) -> SysResult {
        if count == 0 || count > MAX_BARRIER_COUNT || (expected & barrier::ARRIVED) as usize >= count {
            return Err(Errno::Inval);
        }
        queue_and_wait(frame, word, 0, thmb, |table, view, waiter| loop {
            let w = Word::own(view, word);
            let cur = w.load()?;
            if cur & barrier::BROKEN != 0 {
                return Err(Errno::Srch);
            }
            if cur & !barrier::SLEEPERS != expected & !barrier::SLEEPERS {
                // The round ended (or more arrived): the caller looks again.
                return Ok(Some(1));
            }
            table.enqueue(word, Kind::Barrier(count), waiter.program, waiter.clone()).map_err(refused)?;
            if w.cas(cur, cur | barrier::SLEEPERS)?.is_ok() {
                return Ok(None);
            }
            table.remove(word, |x| Arc::ptr_eq(x, waiter));
        })
    }

    /// Program `program` has ended (its threads are gone; `regions` are about to be freed).
    /// Locks its threads held with waiters queued go to the first waiter, who learns it
    /// (`OWNER_DIED`); waiters on words in its memory are released with `ESRCH` (the word
    /// goes with the memory).
    pub fn program_ended(program: u64, regions: &[RegionId]) {
        let mut wake = Vec::new();
        {
            let mut table = TABLE.lock();
            let words = table.words(|_| true);
            for word in words {
                let Some(entry) = table.find(word) else { continue };
                let in_memory_that_goes = space::with(|s, _| s.region_at(word)).is_some_and(|r| regions.contains(&r));
                if in_memory_that_goes {
                    for w in table.take(word, usize::MAX).0 {
                        w.state.store(BROKEN, Ordering::Release);
                        wake.push(w);
                    }
                    continue;
                }
                // Its parked threads leave their queues (a blocked thread leaves by itself,
                // `give_up`, before its program ends); at a barrier that breaks the barrier
                // for those still waiting, as `give_up` does.
                let kind = entry.kind;
                let view = entry.waiters.iter().find(|w| w.program != program).and_then(|w| w.view());
                if table.remove(word, |w| w.parked.is_some() && w.program == program) > 0 {
                    if let (Kind::Barrier(_), Some(view)) = (kind, view) {
                        let _ = Word::of(view, word).update(|v| v | barrier::BROKEN);
                        for w in table.take(word, usize::MAX).0 {
                            w.state.store(BROKEN, Ordering::Release);
                            wake.push(w);
                        }
                        continue;
                    }
                }
                let Some(entry) = table.find(word) else { continue };
                if entry.kind != Kind::Lock || entry.holder != Some(program) {
                    continue;
                }
                // Through a waiter's view: each was checked there when it queued. (A parked
                // waiter's is its activation's, which may have ended since: take a live one.)
                let view = entry.waiters.iter().find_map(|w| w.view());
                let handed = view.map(|v| hand_on(&mut table, Word::of(v, word), INHERITED));
                match handed {
                    Some(Ok(Some(w))) => wake.push(w),
                    // Its view lost the word meanwhile: nobody can be given it.
                    _ => {
                        for w in table.take(word, usize::MAX).0 {
                            w.state.store(BROKEN, Ordering::Release);
                            wake.push(w);
                        }
                    }
                }
            }
        }
        for w in wake {
            w.wake();
        }
    }
}
