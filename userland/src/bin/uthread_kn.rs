//! libuthread on Tsumugi, what only a kernel with upcalls can do, on one vCPU:
//! a thread sleeping in the kernel does not stop the other threads of its vCPU (the kernel hands
//! the vCPU back with BLOCKED), a thread that never yields is preempted (PREEMPTED) so the
//! others still run, and a `join` whose `a` blocks in the kernel until its `b` has run gets `b`
//! run (the task record becomes a thread at BLOCKED), and one whose `a` spins until its `b` has
//! run gets `b` run (the record becomes a thread when `a` is preempted); forks and joins that
//! the kernel preempts in the middle of their list edits run every `b` exactly once.
#![no_std]
#![no_main]

extern crate alloc;

// libuthread's M:N core is built only for the architectures its build script lists; elsewhere
// this program reports that (and fails, so a suite that runs it cannot pass by accident).
#[cfg(mn_core)]
mod program {
    use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
    use core::time::Duration;
    use libuthread::println;

    static PROGRESS: AtomicUsize = AtomicUsize::new(0);
    static SLEEPING: AtomicBool = AtomicBool::new(false);
    static SPIN: AtomicUsize = AtomicUsize::new(0);
    static STOP: AtomicBool = AtomicBool::new(false);
    /// Part 3: set by the join's `b`; the kernel thread its `a` joins waits for it.
    static B_RAN: AtomicBool = AtomicBool::new(false);
    /// What that kernel thread exits with once it saw `b` run.
    const B_SEEN: usize = 7;
    /// Part 4: set by the join's `b`; its `a` spins until it is set.
    static B_SET: AtomicBool = AtomicBool::new(false);
    /// Part 5: how many `b`s ran.
    static B_RUNS: AtomicU64 = AtomicU64::new(0);
    /// Part 5: kernel stops (full-frame resumes) the fork loop waits for.
    const PREEMPTIONS: u64 = 40;
    /// Part 5: the most forks it makes waiting for them.
    const MAX_FORKS: u64 = 200_000_000;

    /// Part 3's kernel thread: waits (yielding its CPU) until the join's `b` ran.
    fn waits_for_b(_: usize) -> usize {
        while !B_RAN.load(Ordering::SeqCst) {
            libuthread::sys::yield_now();
        }
        B_SEEN
    }

    pub fn main() -> i32 {
        let ok = libuthread::run(1, || {
            // 1. A sleeper and a worker on the same (only) vCPU.
            let sleeper = libuthread::spawn(|| {
                SLEEPING.store(true, Ordering::SeqCst);
                libuthread::sleep(Duration::from_millis(200));
                SLEEPING.store(false, Ordering::SeqCst);
            });
            let worker = libuthread::spawn(|| {
                let mut while_asleep = 0;
                for _ in 0..20_000 {
                    if SLEEPING.load(Ordering::SeqCst) {
                        while_asleep += 1;
                    }
                    PROGRESS.fetch_add(1, Ordering::Relaxed);
                    libuthread::yield_now();
                }
                while_asleep
            });
            let while_asleep = worker.join().unwrap_or(0);
            sleeper.join().ok();
            println!("uthread_kn: the worker made {while_asleep} steps while the other thread slept in the kernel");

            // 2. A thread that never yields, and one that must still finish.
            let spinner = libuthread::spawn(|| {
                while !STOP.load(Ordering::Relaxed) {
                    SPIN.fetch_add(1, Ordering::Relaxed);
                }
            });
            let finisher = libuthread::spawn(|| {
                for _ in 0..10 {
                    for _ in 0..100_000 {
                        core::hint::spin_loop();
                    }
                    libuthread::yield_now();
                }
                SPIN.load(Ordering::Relaxed)
            });
            let spins_seen = finisher.join().unwrap_or(0);
            STOP.store(true, Ordering::Relaxed);
            spinner.join().ok();
            println!("uthread_kn: a thread finished beside one that never yields (which had spun {spins_seen} times by then)");

            // 3. `join(a, b)` whose `a` waits in the kernel (joining a kernel thread of the
            // program) until `b` has run: `b` is a task record of the thread the kernel blocks,
            // which must become a thread at BLOCKED — one vCPU, so no idle vCPU takes it at the
            // fork, and nothing else would ever run it.
            let Ok(k) = libuthread::sys::spawn(waits_for_b, 0, 16 * 1024, false) else {
                println!("uthread_kn: FAILED: spawning a kernel thread");
                return false;
            };
            let (joined, ()) = libuthread::join(|| libuthread::sys::thread_join(k), || B_RAN.store(true, Ordering::SeqCst));
            println!("uthread_kn: a join's a waited in the kernel for its b: {joined:?}");

            // 4. `join(a, b)` whose `a` spins — no yield, no block, no library call — until `b`
            // has run: the record must become a thread when the kernel preempts `a` (one
            // vCPU, so no idle vCPU takes it at the fork).
            let (spins, ()) = libuthread::join(
                || {
                    let mut spins = 0u64;
                    while !B_SET.load(Ordering::SeqCst) {
                        spins += 1;
                        core::hint::spin_loop();
                    }
                    spins
                },
                || B_SET.store(true, Ordering::SeqCst),
            );
            println!("uthread_kn: a join's a spun until its b ran ({} spins)", if spins > 0 { "some" } else { "no" });

            // 5. Forks and joins back to back while the kernel preempts the thread: a stop that
            // lands inside a push or take of the own record list is moved back to its start
            // (and the records promoted), so every `b` runs once — inline, or as a thread —
            // whichever instruction the stops hit. (How many stops hit an edit depends on
            // timing, so it is printed, not checked.)
            let (_, full_before) = libuthread::sched::resume_counts();
            let restarts_before = libuthread::sched::restart_count();
            let mut forks = 0u64;
            while forks < MAX_FORKS {
                for _ in 0..1024 {
                    libuthread::join(|| (), || {
                        B_RUNS.fetch_add(1, Ordering::Relaxed);
                    });
                }
                forks += 1024;
                if libuthread::sched::resume_counts().1 - full_before >= PREEMPTIONS {
                    break;
                }
            }
            let runs = B_RUNS.load(Ordering::Relaxed);
            let stops = libuthread::sched::resume_counts().1 - full_before;
            let restarts = libuthread::sched::restart_count() - restarts_before;
            println!("uthread_kn: {forks} forks over {stops} kernel stops ({restarts} inside a list edit): {runs} b runs");
            println!("uthread_kn: forks preempted in their list edits ran every b once: {}", runs == forks && stops >= PREEMPTIONS);
            while_asleep > 0 && spins_seen > 0 && joined == Ok(B_SEEN) && spins > 0 && runs == forks && stops >= PREEMPTIONS
        });
        i32::from(!ok)
    }
}

#[cfg(mn_core)]
use program::main;

#[cfg(not(mn_core))]
fn main() -> i32 {
    libuthread::println!("uthread_kn: libuthread's M:N core is not built for this architecture");
    1
}

libuthread::entry!(main);
