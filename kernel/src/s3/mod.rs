//! S3 synchronisation across programs (seed 002; ARCHITECTURE.md "Shared locks and
//! barriers"): kernel lock holders with Auto Lock, barrier sleep with batch release, and the
//! futex-style wait/wake kept as the soft-sync baseline. Word layouts: `tsumugi_abi::s3`.
//!
//! The user-mode halves never enter the kernel when nobody waits. The kernel acts on a word
//! only with the [`TABLE`] lock held and through an atomic on the word's frame (reached
//! through the direct map, after checking the caller's view may write it), so its
//! read-modify-writes are atomic against the programs' own compare-exchanges on any CPU.
//!
//! A waiter blocks through `notify::blocking`: on a vCPU the library gets `BLOCKED(t)` at once
//! and `UNBLOCKED(t)` once the kernel acquired the lock for t (or released the barrier).
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
    use spin::Mutex;
    use tsumugi_abi::s3::{barrier, MAX_BARRIER_COUNT, OWNER_DIED, WAITERS};
    use tsumugi_abi::syscall::{decode_result, encode_result, Errno};

    use super::table::{Kind, Refusal, Table};
    use crate::mm::view_space::{RegionId, ViewId};
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
        thread: Arc<Thread>,
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
            s.populate(m, view, addr, 8).map_err(|_| Errno::NoMem)?;
            let page = VirtAddr::new(addr / PAGE_SIZE * PAGE_SIZE);
            let (pa, _) = s.translate(m, view, page).ok_or(Errno::Fault)?;
            let at = kernel_space::phys_to_virt(PhysAddr::new(pa.as_u64() + addr % PAGE_SIZE));
            // SAFETY: the view may write these 8 aligned bytes of a live region's frame (just
            // checked and backed), reached through the direct map; the view space's lock keeps
            // the frame from being freed while `f` runs; user mode only touches it atomically
            // (or racily, which only harms the program that does it).
            let word = unsafe { AtomicU64::from_ptr(at.as_u64() as *mut u64) };
            Ok(f(word))
        })
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

    fn new_waiter(me: Arc<Thread>, program: u64, tag: u64) -> Arc<Waiter> {
        Arc::new(Waiter { thread: me, program, tag, state: AtomicU8::new(PENDING) })
    }

    impl Waiter {
        /// The waiter's view now (a grant or revoke may have moved it since it queued).
        fn view(&self) -> Option<ViewId> {
            self.thread.view()
        }
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
                if !w.thread.block_unless_killed() {
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
        let mut woken = Vec::new();
        if let Some(Kind::Barrier(_)) = kind {
            if let Some(view) = w.view() {
                let _ = with_word(view, word, |a| a.fetch_or(barrier::BROKEN, Ordering::AcqRel));
            }
            woken = table.take(word, usize::MAX).0;
            for o in &woken {
                o.state.store(BROKEN, Ordering::Release);
            }
        }
        drop(table);
        for o in woken {
            thread::wake(o.thread.clone());
        }
        outcome(BROKEN)
    }

    /// `s3_lock(word, tag)`.
    pub fn lock(frame: &mut TrapFrame, word: u64, tag: u64) -> SysResult {
        if tag == 0 || tag & WAITERS != 0 {
            return Err(Errno::Inval);
        }
        let (me, program, view) = caller()?;
        /// What the word said.
        enum Seen {
            Taken,
            Holder(u64),
            Mine,
        }
        let waiter = new_waiter(me, program, tag);
        {
            let mut table = TABLE.lock();
            loop {
                let more = table.find(word).is_some_and(|e| e.kind == Kind::Lock && !e.waiters.is_empty());
                let seen = with_word(view, word, |a| {
                    let cur = a.load(Ordering::Acquire);
                    if cur & !WAITERS == tag {
                        Seen::Mine
                    } else if cur & !WAITERS == 0 {
                        // Free (the holder released it after our user-mode attempt).
                        let want = tag | if more { WAITERS } else { 0 };
                        match a.compare_exchange(cur, want, Ordering::AcqRel, Ordering::Acquire) {
                            Ok(_) => Seen::Taken,
                            Err(now) => Seen::Holder(now),
                        }
                    } else {
                        Seen::Holder(cur)
                    }
                })?;
                let cur = match seen {
                    Seen::Taken => return Ok(0),
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
                    if with_word(view, word, |a| a.compare_exchange(cur, want, Ordering::AcqRel, Ordering::Acquire).is_ok())? {
                        return Ok(OWNER_DIED);
                    }
                    continue;
                }
                let entry = table.enqueue(word, Kind::Lock, program, waiter.clone()).map_err(refused)?;
                if entry.holder.is_none() {
                    entry.holder = holder;
                }
                // The waiters bit makes the holder's release come to the kernel.
                if with_word(view, word, |a| a.compare_exchange(cur, cur | WAITERS, Ordering::AcqRel, Ordering::Acquire).is_ok())? {
                    break;
                }
                // The word moved meanwhile: out of the queue and look again.
                table.remove(word, |x| Arc::ptr_eq(x, &waiter));
            }
        }
        wait(frame, word, waiter)
    }

    /// Hands the lock at `word` to its first waiter (writing its tag into the word through
    /// `view`), or frees it when nobody waits; the caller holds [`TABLE`]. Returns the waiter
    /// to wake.
    fn hand_on(table: &mut Table<Arc<Waiter>>, view: ViewId, word: u64, state: u8) -> Result<Option<Arc<Waiter>>, Errno> {
        let is_lock = table.find(word).is_some_and(|e| e.kind == Kind::Lock);
        if !is_lock {
            with_word(view, word, |a| a.store(0, Ordering::Release))?;
            return Ok(None);
        }
        let (mut next, more) = table.take(word, 1);
        let Some(next) = next.pop() else { return Ok(None) };
        let value = next.tag | if more { WAITERS } else { 0 };
        if let Err(e) = with_word(view, word, |a| a.store(value, Ordering::Release)) {
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
            let cur = with_word(view, word, |a| a.load(Ordering::Acquire))?;
            if tag == 0 || cur & !WAITERS != tag {
                return Err(Errno::Perm);
            }
            hand_on(&mut table, view, word, DONE)?
        };
        if let Some(n) = next {
            thread::wake(n.thread.clone());
        }
        Ok(0)
    }

    /// `s3_wait(word, expected)`.
    pub fn wait_on(frame: &mut TrapFrame, word: u64, expected: u64) -> SysResult {
        let (me, program, view) = caller()?;
        let waiter = new_waiter(me, program, 0);
        {
            let mut table = TABLE.lock();
            if with_word(view, word, |a| a.load(Ordering::Acquire))? != expected {
                return Ok(1);
            }
            table.enqueue(word, Kind::Wait, program, waiter.clone()).map_err(refused)?;
        }
        wait(frame, word, waiter)
    }

    /// `s3_wake(word, n)`: wakes up to `n` waiters (futex or barrier) in one operation.
    pub fn wake(word: u64, n: usize) -> SysResult {
        let (_, _, view) = caller()?;
        let woken = {
            let mut table = TABLE.lock();
            with_word(view, word, |_| ())?;
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
        for w in woken {
            thread::wake(w.thread.clone());
        }
        Ok(count)
    }

    /// `s3_barrier(word, expected, count)`.
    pub fn barrier_wait(frame: &mut TrapFrame, word: u64, expected: u64, count: usize) -> SysResult {
        if count == 0 || count > MAX_BARRIER_COUNT || (expected & barrier::ARRIVED) as usize >= count {
            return Err(Errno::Inval);
        }
        let (me, program, view) = caller()?;
        let waiter = new_waiter(me, program, 0);
        {
            let mut table = TABLE.lock();
            loop {
                let cur = with_word(view, word, |a| a.load(Ordering::Acquire))?;
                if cur & barrier::BROKEN != 0 {
                    return Err(Errno::Srch);
                }
                if cur & !barrier::SLEEPERS != expected & !barrier::SLEEPERS {
                    // The round ended (or more arrived): the caller looks again.
                    return Ok(1);
                }
                table.enqueue(word, Kind::Barrier(count), program, waiter.clone()).map_err(refused)?;
                if with_word(view, word, |a| a.compare_exchange(cur, cur | barrier::SLEEPERS, Ordering::AcqRel, Ordering::Acquire).is_ok())? {
                    break;
                }
                table.remove(word, |x| Arc::ptr_eq(x, &waiter));
            }
        }
        wait(frame, word, waiter)
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
                if entry.kind != Kind::Lock || entry.holder != Some(program) {
                    continue;
                }
                // Through the first waiter's view: it was checked there when it queued.
                let view = entry.waiters.front().and_then(|w| w.view());
                let handed = view.map(|v| hand_on(&mut table, v, word, INHERITED));
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
            thread::wake(w.thread.clone());
        }
    }
}
