//! Hosted-only behaviour: panics travel like `std::thread`'s, and misuse is reported.
#![cfg(not(loom))]

use std::sync::atomic::{AtomicUsize, Ordering};

#[test]
fn a_panicking_thread_is_reported_to_its_joiner() {
    let message = libuthread::run(2, || {
        let h = libuthread::spawn(|| -> u32 { panic!("boom") });
        let payload = h.join().unwrap_err();
        payload.downcast_ref::<&str>().map(|s| s.to_string())
    });
    assert_eq!(message.as_deref(), Some("boom"));
}

/// On one vCPU a child joined at once runs inline, on the joiner's stack: its panic comes back
/// through its task (`Task::run_claimed`), and the ThMB, pooled after, serves the next spawn.
#[test]
fn a_child_run_inline_reports_its_panic_and_its_thmb_is_reused() {
    let (message, next) = libuthread::run(1, || {
        let h = libuthread::spawn(|| -> u64 { panic!("inline boom") });
        let payload = h.join().unwrap_err();
        let message = payload.downcast_ref::<&str>().map(|s| s.to_string());
        let next = libuthread::spawn(|| 41u64 + 1).join().unwrap();
        (message, next)
    });
    assert_eq!(message.as_deref(), Some("inline boom"));
    assert_eq!(next, 42);
}

#[test]
fn a_panic_in_main_continues_in_the_caller() {
    let caught = std::panic::catch_unwind(|| libuthread::run(1, || panic!("main failed")));
    assert!(caught.is_err());
    // The runtime is usable again afterwards.
    assert_eq!(libuthread::run(1, || 5), 5);
}

#[test]
fn run_inside_a_user_thread_is_refused() {
    let refused = libuthread::run(1, || {
        libuthread::spawn(|| std::panic::catch_unwind(|| libuthread::run(1, || ())).is_err()).join().unwrap()
    });
    assert!(refused);
}

static DROPPED: AtomicUsize = AtomicUsize::new(0);

struct Noisy;
impl Drop for Noisy {
    fn drop(&mut self) {
        DROPPED.fetch_add(1, Ordering::SeqCst);
    }
}

libuthread::thread_local!(static LOCAL: Noisy = Noisy);

#[test]
fn thread_locals_are_dropped_at_exit_and_detached_results_too() {
    libuthread::run(2, || {
        let hs: Vec<_> = (0..5).map(|_| libuthread::spawn(|| LOCAL.with(|_| ()))).collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
        // Detached threads drop their own results.
        for _ in 0..3 {
            drop(libuthread::spawn(|| Noisy));
        }
        while DROPPED.load(Ordering::SeqCst) < 8 {
            libuthread::sleep(std::time::Duration::from_millis(1));
        }
    });
    assert_eq!(DROPPED.load(Ordering::SeqCst), 8);
}

#[test]
fn current_outside_a_runtime() {
    assert!(libuthread::try_current().is_none());
    assert!(std::panic::catch_unwind(libuthread::current).is_err());
}

#[test]
fn run_returns_while_detached_threads_still_yield() {
    let value = libuthread::run(2, || {
        for _ in 0..3 {
            drop(libuthread::spawn(|| loop {
                libuthread::yield_now();
            }));
        }
        libuthread::yield_now();
        7
    });
    assert_eq!(value, 7);
}

/// `join`'s panics: one in `a` (with `b` still a record, then with `b` promoted because `a`
/// blocked first) reaches the caller after `b` was taken back or finished; one in `b` reaches
/// the caller, run inline or as a promoted thread.
#[test]
fn join_propagates_panics_from_either_side() {
    let result = libuthread::run(2, || {
        let a_first = std::panic::catch_unwind(|| libuthread::join(|| -> u32 { panic!("in a") }, || 1u32));
        let (tx, rx) = libuthread::mpsc::channel::<u32>();
        let b_ran = std::sync::Arc::new(AtomicUsize::new(0));
        let seen = b_ran.clone();
        let a_after_block = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            libuthread::join(
                move || -> u32 {
                    let _ = rx.recv();
                    panic!("in a, after blocking")
                },
                move || {
                    seen.fetch_add(1, Ordering::SeqCst);
                    tx.send(1).is_ok()
                },
            )
        }));
        let b_panics = std::panic::catch_unwind(|| libuthread::join(|| 1u32, || -> u32 { panic!("in b") }));
        let (tx, rx) = libuthread::mpsc::channel::<u32>();
        let b_promoted_panics = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            libuthread::join(move || rx.recv().unwrap_or(0), move || -> u32 {
                tx.send(1).ok();
                panic!("in a promoted b")
            })
        }));
        (a_first.is_err(), a_after_block.is_err(), b_ran.load(Ordering::SeqCst), b_panics.is_err(), b_promoted_panics.is_err())
    });
    assert_eq!(result, (true, true, 1, true, true));
}

/// Outside a runtime, `join` is two plain calls.
#[test]
fn join_outside_a_runtime_calls_both() {
    let (a, b) = libuthread::join(|| 1, || 2);
    assert_eq!((a, b), (1, 2));
}

/// On one vCPU (hosted: nothing preempts), a fork-join recursion whose every leaf waits once for
/// a server thread keeps every fork a record: the leaf's block leaves its joiner's records
/// unpublished while the server runs ("Deferred promotion"), and the woken joiner takes them
/// back — so every `b` runs inline, as the joiner itself (a promoted `b` would be a thread of
/// its own, with another id).
#[test]
fn suspended_leaves_leave_every_fork_a_record() {
    fn sum(server: &libuthread::mpsc::Sender<libuthread::mpsc::Sender<()>>, lo: u64, hi: u64, promoted: &AtomicUsize) -> u64 {
        if hi - lo == 1 {
            let (reply, answer) = libuthread::mpsc::channel();
            server.send(reply).unwrap();
            answer.recv().unwrap();
            return lo;
        }
        let mid = lo + (hi - lo) / 2;
        let me = libuthread::current().id();
        let (a, b) = libuthread::join(
            || sum(server, mid, hi, promoted),
            || {
                if libuthread::current().id() != me {
                    promoted.fetch_add(1, Ordering::Relaxed);
                }
                sum(server, lo, mid, promoted)
            },
        );
        a + b
    }
    let (total, promoted) = libuthread::run(1, || {
        let (server, requests) = libuthread::mpsc::channel::<libuthread::mpsc::Sender<()>>();
        let served = libuthread::spawn(move || {
            for reply in requests.iter() {
                reply.send(()).unwrap();
            }
        });
        let promoted = AtomicUsize::new(0);
        let total = sum(&server, 0, 256, &promoted);
        drop(server);
        served.join().unwrap();
        (total, promoted.load(Ordering::Relaxed))
    });
    assert_eq!(total, 255 * 256 / 2);
    assert_eq!(promoted, 0, "forks promoted to threads although every joiner came back to them");
}
