//! The `space_sharing` benchmark table (issue 16 part 2): two programs, each 4 vCPUs and 8
//! threads taking one spin-then-yield lock in turn (a short critical section, a little work
//! outside), on 4 CPUs — booted once with space sharing (`share=space`: each program gets 2
//! CPUs' worth of vCPUs, the kernel never preempts a vCPU for the other program's) and once
//! with plain time-sharing of all 8 vCPUs (`share=time`: a vCPU whose thread holds the lock can
//! be descheduled by the kernel, and every other thread of its program spins or yields until
//! it runs again — the Scheduler-Activations argument). Each program prints its elapsed time
//! (guest nanoseconds: under `-icount` the clock advances with guest instructions) and the lock
//! attempts that failed.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicUsize, Ordering};
use libuthread::sync::{SoftMutex, SoftStrategy};
use libuthread::{println, sys, Clock};

/// vCPUs each program asks for.
pub const VCPUS: usize = 4;
const THREADS: usize = 8;
const ITERATIONS: usize = 6_000;

static LOCK: SoftMutex = SoftMutex::new(SoftStrategy::SpinThenYield);
static SHARED: AtomicUsize = AtomicUsize::new(0);

#[inline(never)]
fn work(n: u64) -> u64 {
    let mut x = n;
    for i in 0..n {
        x = core::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
    }
    x
}

fn thread_body() -> (usize, u64) {
    let (mut failed, mut acc) = (0, 0u64);
    for _ in 0..ITERATIONS {
        failed += LOCK.lock();
        // The critical section: ~450 instructions, then the shared count.
        acc = acc.wrapping_add(work(60));
        SHARED.store(SHARED.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        LOCK.unlock();
        acc = acc.wrapping_add(work(15));
    }
    (failed, acc)
}

/// Runs the workload as program `name` and prints its `BENCH` row; the exit status says
/// whether every critical section ran exactly once.
pub fn run(name: &'static str) -> i32 {
    libuthread::run(VCPUS, move || {
        let t0 = sys::clock(Clock::MonotonicNanos).unwrap_or(0);
        let handles: Vec<_> = (0..THREADS).map(|_| libuthread::spawn(thread_body)).collect();
        let mut failed = 0;
        for h in handles {
            failed += h.join().map_or(0, |(f, _)| f);
        }
        let t1 = sys::clock(Clock::MonotonicNanos).unwrap_or(0);
        let sections = SHARED.load(Ordering::Relaxed);
        println!("BENCH table=space_sharing row={name} elapsed_us={} lock_retries={failed}", (t1 - t0) / 1000);
        if sections == THREADS * ITERATIONS {
            0
        } else {
            println!("{name}: FAILED: {sections} critical sections, not {}", THREADS * ITERATIONS);
            1
        }
    })
}
