//! Which vCPUs are idle (parked or about to park), as one bit each (`MAX_VCPUS` is 64). Work that
//! appears (a spawn, a wake-up) is published first (pushed on a queue), then claims an idle vCPU
//! by clearing its bit and unparks it; a vCPU that runs dry sets its bit, *then* looks for work
//! once more, then parks. Each side puts a `fence(SeqCst)` between its write and its read
//! (the store-buffer pattern), so at least one of them sees the other: no lost wake-up
//! (model-checked below; loom models SeqCst fences, not SeqCst loads and stores).
//!
//! Each running vCPU also keeps a *mirror* of "some vCPU is idle", one bit in a word of its own
//! that its switch fast path reads anyway (`Vcpu::attention`), so that the fast path needs no
//! load of the shared idle word. An announcing vCPU sets the bit in every other vCPU's word
//! after its fence ([`IdleSet::announce_to`]); only the owner clears its own, when it finds
//! nobody idle, and then looks at the idle bits once more behind a SeqCst fence and sets it
//! again if someone announced meanwhile ([`IdleSet::settle`]). Of the two fences one comes
//! first: either the owner's second look sees the announcement, or the announcer's look at the
//! word sees the owner's clear and sets the bit. So the mirror is never left clear while a
//! vCPU that announced stays idle (model-checked below), and it is exactly as much of a hint
//! as a Relaxed look at the idle bits was: a vCPU that goes idle unseen is seen at the next
//! switch.


// Under loom only the model checks use these (the scheduler is not built).
#![cfg_attr(loom, allow(dead_code))]

use crate::prim::{fence, AtomicU64, AtomicUsize, Ordering};

/// The idle bits.
pub(crate) struct IdleSet(AtomicU64);

impl IdleSet {
    /// Nobody idle.
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        IdleSet(AtomicU64::new(0))
    }

    /// Nobody idle.
    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        IdleSet(AtomicU64::new(0))
    }

    /// vCPU `v` is going idle; after this, look for work once more before parking.
    pub(crate) fn announce(&self, v: usize) {
        self.0.fetch_or(1 << v, Ordering::AcqRel);
        fence(Ordering::SeqCst);
    }

    /// [`IdleSet::announce`], then sets `bit` in each word of `mirrors` (the other running vCPUs'
    /// mirrors, see the module docs) where it is clear.
    pub(crate) fn announce_to<'a>(&self, v: usize, mirrors: impl IntoIterator<Item = &'a AtomicUsize>, bit: usize) {
        self.announce(v);
        for mirror in mirrors {
            if mirror.load(Ordering::Relaxed) & bit == 0 {
                mirror.fetch_or(bit, Ordering::Relaxed);
            }
        }
    }

    /// Called by the owner of `mirror` when it found `bit` set there: clears it if nobody is
    /// idle, without ever leaving it clear while a vCPU that announced stays idle (see the module
    /// docs). A rare, slow-path call: the fence is paid only when the bit goes.
    pub(crate) fn settle(&self, mirror: &AtomicUsize, bit: usize) {
        if mirror.load(Ordering::Relaxed) & bit != 0 && !self.any() {
            mirror.fetch_and(!bit, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            if self.any() {
                mirror.fetch_or(bit, Ordering::Relaxed);
            }
        }
    }

    /// vCPU `v` is busy again (its bit may already have been claimed).
    pub(crate) fn retract(&self, v: usize) {
        self.0.fetch_and(!(1 << v), Ordering::AcqRel);
    }

    /// Whether some vCPU is idle (a hint: no ordering; `claim` is the decision).
    #[inline(always)]
    pub(crate) fn any(&self) -> bool {
        self.0.load(Ordering::Relaxed) != 0
    }

    /// After publishing work: claims `preferred` if it is idle, else any idle vCPU; the caller
    /// must then unpark it (and may give it the work directly).
    pub(crate) fn claim(&self, preferred: usize) -> Option<usize> {
        fence(Ordering::SeqCst);
        let mut bits = self.0.load(Ordering::Relaxed);
        while bits != 0 {
            let v = if bits & (1 << preferred) != 0 { preferred } else { bits.trailing_zeros() as usize };
            match self.0.compare_exchange_weak(bits, bits & !(1 << v), Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return Some(v),
                Err(now) => bits = now,
            }
        }
        None
    }

    /// Clears every bit (runtime reset).
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn clear(&self) {
        self.0.store(0, Ordering::Release);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::prim::AtomicUsize;
    use crate::sched::token::loom_tests::ModelFutex;
    use crate::sched::token::ParkToken;
    use loom::sync::Arc;

    /// A producer publishes work and wakes an idle consumer; the consumer announces itself
    /// idle, re-checks, and parks. The consumer always gets the work (loom reports a deadlock if
    /// a wake-up is lost).
    #[test]
    fn loom_idle_protocol_loses_no_wakeup() {
        loom::model(|| {
            let idle = Arc::new(IdleSet::new());
            let work = Arc::new(AtomicUsize::new(0));
            let token = Arc::new(ParkToken::new());
            let futex = Arc::new(ModelFutex::default());
            let producer = {
                let (idle, work, token, futex) = (idle.clone(), work.clone(), token.clone(), futex.clone());
                loom::thread::spawn(move || {
                    work.fetch_add(1, Ordering::Release); // the push
                    if idle.claim(0).is_some() {
                        token.unpark(|_| futex.wake());
                    }
                })
            };
            // The consumer (vCPU 0).
            loop {
                if work.load(Ordering::Acquire) > 0 {
                    break;
                }
                idle.announce(0);
                if work.load(Ordering::Acquire) > 0 {
                    idle.retract(0);
                    break;
                }
                token.park(|w, e| futex.wait(w, e));
                idle.retract(0);
            }
            producer.join().unwrap();
        });
    }

    /// The idle mirror (`announce_to` against `settle`): vCPU 1 announces itself idle and marks
    /// vCPU 0's mirror while vCPU 0, its owner, settles it, the bit set before from an earlier
    /// idle period (stale, about to be cleared) or clear. vCPU 1 is still idle at the end, so
    /// vCPU 0's mirror must be set: its fast path must not miss the idle vCPU for good.
    #[test]
    fn loom_idle_mirror_is_not_left_clear_while_a_vcpu_is_idle() {
        const BIT: usize = 8;
        for initial in [BIT, 0] {
            loom::model(move || {
                let idle = Arc::new(IdleSet::new());
                let mirror = Arc::new(AtomicUsize::new(initial));
                let announcer = {
                    let (idle, mirror) = (idle.clone(), mirror.clone());
                    loom::thread::spawn(move || idle.announce_to(1, [&*mirror], BIT))
                };
                // The owner's slow path, as often as it may run meanwhile.
                idle.settle(&mirror, BIT);
                idle.settle(&mirror, BIT);
                announcer.join().unwrap();
                assert!(idle.any());
                assert_ne!(mirror.load(Ordering::Relaxed) & BIT, 0, "the mirror stayed clear while vCPU 1 is idle");
            });
        }
    }

    /// The owner-only ready queue's hand-over (`scheduler::offer_work` / `take_next`): vCPU 0
    /// holds a ready thread in its own queue (plain, owner-only); seeing a vCPU idle it moves
    /// it to its shared queue under the lock, then claims and unparks an idle vCPU; later it
    /// drains the shared queue back if the thread is still there. vCPU 1 steals from the
    /// shared queue, else announces itself idle, re-checks and parks. Whatever the
    /// interleaving, the thread runs exactly once, and nobody sleeps through the end (loom
    /// reports a deadlock if a wake-up is lost).
    #[test]
    fn loom_offered_thread_runs_exactly_once() {
        use crate::spin::SpinLock;
        use core::sync::atomic::AtomicBool as StdBool;
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(3);
        builder.check(|| {
            let idle = Arc::new(IdleSet::new());
            // The shared queue (a count of the one thread) and its lock-free length hint.
            let shared = Arc::new(SpinLock::new(0usize));
            let len = Arc::new(AtomicUsize::new(0));
            let ran = Arc::new(AtomicUsize::new(0));
            let done = Arc::new(crate::prim::AtomicBool::new(false));
            let token = Arc::new(ParkToken::new());
            let futex = Arc::new(ModelFutex::default());
            let thief = {
                let (idle, shared, len, ran, done, token, futex) =
                    (idle.clone(), shared.clone(), len.clone(), ran.clone(), done.clone(), token.clone(), futex.clone());
                loom::thread::spawn(move || loop {
                    {
                        let mut q = shared.lock();
                        if *q > 0 {
                            *q -= 1;
                            len.store(*q, Ordering::Release);
                            drop(q);
                            ran.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                    }
                    if done.load(Ordering::Acquire) {
                        break;
                    }
                    idle.announce(1);
                    if len.load(Ordering::Acquire) > 0 || done.load(Ordering::Acquire) {
                        idle.retract(1);
                        loom::thread::yield_now();
                        continue;
                    }
                    token.park(|w, e| futex.wait(w, e));
                    idle.retract(1);
                })
            };
            // vCPU 0: one thread in its own queue (a plain local: nobody else can see it).
            let own = StdBool::new(true);
            if idle.any() && own.load(core::sync::atomic::Ordering::Relaxed) {
                // offer_work: move it to the shared queue, then claim.
                let mut q = shared.lock();
                *q += 1;
                len.store(*q, Ordering::Release);
                drop(q);
                own.store(false, core::sync::atomic::Ordering::Relaxed);
                if let Some(w) = idle.claim(0) {
                    assert_eq!(w, 1);
                    token.unpark(|_| futex.wake());
                }
            }
            // take_next: own queue empty and the shared one not: drain it back.
            if !own.load(core::sync::atomic::Ordering::Relaxed) && len.load(Ordering::Relaxed) != 0 {
                let mut q = shared.lock();
                if *q > 0 {
                    *q -= 1;
                    len.store(*q, Ordering::Release);
                    own.store(true, core::sync::atomic::Ordering::Relaxed);
                }
            }
            if own.load(core::sync::atomic::Ordering::Relaxed) {
                ran.fetch_add(1, Ordering::Relaxed);
            }
            // Shutdown: the thief must not sleep through it.
            done.store(true, Ordering::Release);
            if idle.claim(0).is_some() {
                token.unpark(|_| futex.wake());
            }
            thief.join().unwrap();
            // Run by vCPU 0 or stolen, once (the thief empties the shared queue before it stops).
            assert_eq!(ran.load(Ordering::Relaxed), 1);
            assert_eq!(*shared.lock(), 0);
        });
    }

    /// Space sharing (`scheduler::adopt_revoked` against `make_ready`): a waker queues a thread
    /// on vCPU 1 while another vCPU takes in vCPU 1's revocation. The waker routes around a
    /// vCPU it sees revoked, pushes under the queue's lock, passes the idle claim's SeqCst
    /// fence and looks at the revoked set again (`rescue` if set); the adopter sets the bit
    /// (SeqCst), fences, retracts the idle bit and empties vCPU 1's queue into vCPU 0's.
    /// Whatever the interleaving, the thread ends on vCPU 0's queue, once, and vCPU 1's is
    /// empty: nothing is stranded on a vCPU that no longer runs.
    #[test]
    fn loom_revoked_vcpu_strands_no_thread() {
        use crate::spin::SpinLock;
        use alloc::vec::Vec;
        loom::model(|| {
            let idle = Arc::new(IdleSet::new());
            let revoked = Arc::new(crate::prim::AtomicU64::new(0));
            let queues = Arc::new([SpinLock::new(Vec::<u8>::new()), SpinLock::new(Vec::new())]);
            let rescue = |queues: &[SpinLock<Vec<u8>>; 2], v: usize| {
                let taken: Vec<u8> = core::mem::take(&mut *queues[v].lock());
                queues[0].lock().extend(taken);
            };
            let waker = {
                let (idle, revoked, queues) = (idle.clone(), revoked.clone(), queues.clone());
                loom::thread::spawn(move || {
                    let home = if revoked.load(Ordering::Relaxed) & 2 != 0 { 0 } else { 1 };
                    queues[home].lock().push(7);
                    let _ = idle.claim(home);
                    if revoked.load(Ordering::Relaxed) & (1 << home) != 0 {
                        rescue(&queues, home);
                    }
                })
            };
            // The adopter (the vCPU draining `VCPU_REVOKED(1)`).
            revoked.fetch_or(2, Ordering::SeqCst);
            crate::prim::fence(Ordering::SeqCst);
            idle.retract(1);
            rescue(&queues, 1);
            waker.join().unwrap();
            assert!(queues[1].lock().is_empty(), "a thread was left on the revoked vCPU");
            assert_eq!(*queues[0].lock(), [7]);
        });
    }
}
