//! Which vCPUs are idle (parked or about to park), as one bit each (`MAX_VCPUS` is 64). Work that
//! appears (a spawn, a wake-up) is published first (pushed on a queue), then claims an idle vCPU
//! by clearing its bit and unparks it; a vCPU that runs dry sets its bit, *then* looks for work
//! once more, then parks. Each side puts a `fence(SeqCst)` between its write and its read
//! (the store-buffer pattern), so at least one of them sees the other: no lost wake-up
//! (model-checked below; loom models SeqCst fences, not SeqCst loads and stores).


// Under loom only the model checks use these (the scheduler is not built).
#![cfg_attr(loom, allow(dead_code))]

use crate::prim::{fence, AtomicU64, Ordering};

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
}
