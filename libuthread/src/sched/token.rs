//! The park/unpark token of a vCPU (MULiTh's PBLK/PUBLK): `unpark` leaves a token that makes the
//! next (or current) `park` return, so a wake-up that lands between "decide to park" and the
//! park itself is never lost. The sleeping is supplied by the platform as a futex-like pair:
//! `wait(word, 0)` sleeps only while `word == 0`; `wake(word)` wakes a sleeper.

// The Tsumugi platform may park through its own syscalls instead; under loom only the model
// checks use it.
#![cfg_attr(any(target_os = "none", loom), allow(dead_code))]

use crate::prim::{AtomicU32, Ordering};

/// No token.
const EMPTY: u32 = 0;
/// A wake-up is pending.
const NOTIFIED: u32 = 1;

/// One vCPU's token.
pub(crate) struct ParkToken(AtomicU32);

impl ParkToken {
    /// No token.
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        ParkToken(AtomicU32::new(EMPTY))
    }

    /// No token.
    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        ParkToken(AtomicU32::new(EMPTY))
    }

    /// Returns at once if a token is pending (consuming it), else sleeps through `wait` until
    /// unparked. May return spuriously.
    pub(crate) fn park(&self, wait: impl FnOnce(&AtomicU32, u32)) {
        if self.0.swap(EMPTY, Ordering::Acquire) == NOTIFIED {
            return;
        }
        wait(&self.0, EMPTY);
        self.0.swap(EMPTY, Ordering::Acquire);
    }

    /// Leaves a token and wakes the sleeper if there may be one.
    pub(crate) fn unpark(&self, wake: impl FnOnce(&AtomicU32)) {
        if self.0.swap(NOTIFIED, Ordering::Release) == EMPTY {
            wake(&self.0);
        }
    }
}

#[cfg(all(test, loom))]
pub(crate) mod loom_tests {
    use super::*;
    use loom::sync::{Arc, Condvar, Mutex};

    /// A futex modelled with a mutex and condition variable: the check of the word and the sleep
    /// are atomic with respect to `wake`, as the real futex guarantees.
    #[derive(Default)]
    pub(crate) struct ModelFutex {
        lock: Mutex<()>,
        cv: Condvar,
    }

    impl ModelFutex {
        pub(crate) fn wait(&self, word: &AtomicU32, expected: u32) {
            let guard = self.lock.lock().unwrap();
            if word.load(Ordering::Acquire) == expected {
                drop(self.cv.wait(guard).unwrap());
            }
        }
        pub(crate) fn wake(&self) {
            let _guard = self.lock.lock().unwrap();
            self.cv.notify_all();
        }
    }

    /// An unpark racing with a park is never lost: the parker always gets past its park
    /// (loom reports a deadlock otherwise).
    #[test]
    fn loom_unpark_is_never_lost() {
        loom::model(|| {
            let token = Arc::new(ParkToken::new());
            let futex = Arc::new(ModelFutex::default());
            let flag = Arc::new(loom::sync::atomic::AtomicBool::new(false));
            let waker = {
                let (token, futex, flag) = (token.clone(), futex.clone(), flag.clone());
                loom::thread::spawn(move || {
                    flag.store(true, Ordering::Release);
                    token.unpark(|_| futex.wake());
                })
            };
            while !flag.load(Ordering::Acquire) {
                token.park(|w, e| futex.wait(w, e));
            }
            waker.join().unwrap();
        });
    }
}
