//! The `s3` benchmark table (issue 16): what a failed acquisition costs with S3's kernel lock
//! holder against the soft-sync baselines, and the paper's barrier model (seed 002): 64 threads
//! of ~500 instructions of work, one barrier per phase, in one group or four, at 1, 2, 4 and 8
//! vCPUs. Under `-icount` the cycle counter counts guest instructions (of every CPU, since
//! QEMU runs them in turn), so a phase's cycles are the instructions the machine spent on it.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use libuthread::sync::{SharedBarrier, SharedMutex, SoftMutex, SoftStrategy};
use libuthread::{println, sys, Clock};

/// Yields with a waiter, to measure what each later failure costs.
const YIELDS: u64 = 64;
/// Threads of the barrier model.
pub const THREADS: usize = 64;
/// Phases measured per configuration (instructions, under `-icount`).
const PHASES: usize = 8;
/// Phases per run of the elapsed-time measurement: more, for a real clock's noise.
const ELAPSED_PHASES: usize = 32;
/// Runs of each configuration in the elapsed-time measurement (the shortest is kept).
const ELAPSED_RUNS: usize = 3;
/// Spin checks before a soft barrier waiter yields.
const SPINS: usize = 64;

fn cycles() -> u64 {
    sys::clock(Clock::Cycles).unwrap_or(0) as u64
}

fn nanos() -> u64 {
    sys::clock(Clock::MonotonicNanos).unwrap_or(0) as u64
}

/// About 500 instructions of work.
#[inline(never)]
pub fn work() -> u64 {
    let mut x = 1u64;
    for i in 0..45u64 {
        x = core::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
    }
    x
}

static S3_LOCK: SharedMutex<()> = SharedMutex::new(());
static SPIN_YIELD: SoftMutex = SoftMutex::new(SoftStrategy::SpinThenYield);
static FUTEX: SoftMutex = SoftMutex::new(SoftStrategy::FutexWait);
static T0: AtomicU64 = AtomicU64::new(0);

/// A lock the cost measurement can take and release by kind.
#[derive(Clone, Copy)]
enum Kind {
    S3,
    SpinYield,
    Futex,
}

fn hold(kind: Kind) -> Option<libuthread::sync::SharedMutexGuard<'static, ()>> {
    match kind {
        Kind::S3 => Some(S3_LOCK.lock()),
        Kind::SpinYield => {
            SPIN_YIELD.lock();
            None
        }
        Kind::Futex => {
            FUTEX.lock();
            None
        }
    }
}

fn release(kind: Kind, guard: Option<libuthread::sync::SharedMutexGuard<'static, ()>>) {
    match kind {
        Kind::S3 => drop(guard),
        Kind::SpinYield => SPIN_YIELD.unlock(),
        Kind::Futex => FUTEX.unlock(),
    }
}

/// (first, later): instructions from a waiter's failed attempt until the holder runs again,
/// and what each of the holder's later yields costs more with the waiter than without (the
/// waiter's retries). One vCPU.
fn failure_costs(kind: Kind) -> (u64, u64) {
    T0.store(0, Ordering::SeqCst);
    let held = hold(kind);
    let waiter = libuthread::spawn(move || {
        T0.store(cycles(), Ordering::SeqCst);
        let g = hold(kind);
        release(kind, g);
    });
    if T0.load(Ordering::SeqCst) == 0 {
        libuthread::yield_now();
    }
    let first = cycles().saturating_sub(T0.load(Ordering::SeqCst));
    let start = cycles();
    for _ in 0..YIELDS {
        libuthread::yield_now();
    }
    let with = cycles() - start;
    release(kind, held);
    waiter.join().unwrap();
    let start = cycles();
    for _ in 0..YIELDS {
        libuthread::yield_now();
    }
    let alone = cycles() - start;
    (first, with.saturating_sub(alone) / YIELDS)
}

/// [`failure_costs`] once the path is warm (the first blocking call of a vCPU makes the kernel
/// activation later ones reuse).
fn warm_failure_costs(kind: Kind) -> (u64, u64) {
    failure_costs(kind);
    failure_costs(kind)
}

/// The acquisition-cost rows (run on one vCPU).
pub fn costs() {
    let (s3_first, s3_later) = warm_failure_costs(Kind::S3);
    let (spin_first, spin_later) = warm_failure_costs(Kind::SpinYield);
    let (futex_first, futex_later) = warm_failure_costs(Kind::Futex);
    println!("BENCH table=s3 row=first_failure s3={s3_first} spin_then_yield={spin_first} futex={futex_first} paper_s3=254 paper_software=384");
    println!("BENCH table=s3 row=later_failure s3={s3_later} spin_then_yield={spin_later} futex={futex_later} paper_s3=0 paper_software=258");
}

/// A barrier that waits in software: a counter and a round, spin then yield.
struct SoftBarrier {
    arrived: AtomicUsize,
    round: AtomicUsize,
    count: usize,
}

impl SoftBarrier {
    fn wait(&self, retries: &AtomicU64) {
        let round = self.round.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.count {
            self.arrived.store(0, Ordering::Release);
            self.round.fetch_add(1, Ordering::AcqRel);
            return;
        }
        loop {
            for _ in 0..SPINS {
                if self.round.load(Ordering::Acquire) != round {
                    return;
                }
                retries.fetch_add(1, Ordering::Relaxed);
                core::hint::spin_loop();
            }
            libuthread::yield_now();
        }
    }
}

/// One run of the barrier model, per phase.
struct Phase {
    /// Cycles (instructions under `-icount`, all CPUs).
    cycles: u64,
    /// Failed checks of the soft barrier.
    retries: u64,
    /// Elapsed nanoseconds (the guest's clock: real time without `-icount`).
    nanos: u64,
}

/// Runs `phases` phases of the model with `groups` groups, with S3 barriers (`s3`) or soft ones.
fn model(groups: usize, s3: bool, phases: usize) -> Phase {
    let per = THREADS / groups;
    let shared: &'static [SharedBarrier] = Box::leak((0..groups).map(|_| SharedBarrier::new(per)).collect::<Vec<_>>().into_boxed_slice());
    let soft: &'static [SoftBarrier] = Box::leak((0..groups).map(|_| SoftBarrier { arrived: AtomicUsize::new(0), round: AtomicUsize::new(0), count: per }).collect::<Vec<_>>().into_boxed_slice());
    let retries: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
    let start_ns = nanos();
    let start = cycles();
    let threads: Vec<_> = (0..THREADS)
        .map(|i| {
            libuthread::spawn(move || {
                let g = i % groups;
                for _ in 0..phases {
                    core::hint::black_box(work());
                    if s3 {
                        let _ = shared[g].wait();
                    } else {
                        soft[g].wait(retries);
                    }
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let per = |total: u64| total / phases as u64;
    let cycles = per(cycles() - start);
    let nanos = per(nanos() - start_ns);
    Phase { cycles, retries: per(retries.load(Ordering::Relaxed)), nanos }
}

/// Prints, in words, how many times S3's cost `s3` is below soft-sync's `soft` (per phase).
fn say_speedup(program: &str, vcpus: usize, groups: usize, s3: u64, soft: u64, measure: &str) {
    let x100 = soft * 100 / s3.max(1);
    println!("{program}: {vcpus} vCPUs, {groups} group(s): S3 {}.{:02}x soft-sync{measure} per phase (paper at 16 PEs: 4.5x to 7.7x)", x100 / 100, x100 % 100);
}

/// The barrier-model rows at `vcpus` vCPUs (the caller runs on a runtime of that many).
pub fn phases(vcpus: usize) {
    let start = cycles();
    core::hint::black_box(work());
    let useful = (cycles() - start) * THREADS as u64;
    // Once unmeasured first: the first model to run paid for the 64 threads' stacks (regions
    // made and faulted in, about 30 K instructions per phase), and that was always S3's.
    model(1, false, PHASES);
    for groups in [1, 4] {
        let s3 = model(groups, true, PHASES).cycles;
        let Phase { cycles: soft, retries, .. } = model(groups, false, PHASES);
        // Every BENCH figure is a cost (`--check` flags a rise): the speed-up goes in as S3's
        // instructions per phase in percent of soft-sync's, and in words on its own line.
        println!(
            "BENCH table=s3 row=phase_v{vcpus}_g{groups} useful={useful} s3={s3} spin_then_yield={soft} s3_waste={} soft_waste={} soft_retries={retries} s3_pct_of_soft={} paper_s3_pct_of_soft_16pe=22",
            s3.saturating_sub(useful),
            soft.saturating_sub(useful),
            s3 * 100 / soft.max(1)
        );
        say_speedup("s3_bench", vcpus, groups, s3, soft, "");
    }
}

/// The barrier model's elapsed time at `vcpus` vCPUs (the caller runs on a runtime of that
/// many), for the `s3_elapsed` table: booted without `-icount`, the guest's CPUs run in
/// parallel (QEMU's multi-threaded TCG) and its clock is real time, so a vCPU that spins or
/// retries costs the others nothing unless the host is short of cores — what the paper's
/// speed-ups measure, on its 16 PEs. Each configuration runs [`ELAPSED_RUNS`] times and the
/// shortest is kept (the first also pays for QEMU translating code it reaches first; the host
/// interrupts any of them).
pub fn phases_elapsed(vcpus: usize) {
    let shortest = |groups, s3| (0..ELAPSED_RUNS).map(|_| model(groups, s3, ELAPSED_PHASES).nanos).min().unwrap_or(0);
    model(1, false, PHASES);
    for groups in [1, 4] {
        let s3 = shortest(groups, true);
        let soft = shortest(groups, false);
        println!(
            "BENCH table=s3_elapsed row=v{vcpus}_g{groups} s3_ns={s3} spin_then_yield_ns={soft} s3_pct_of_soft={} paper_s3_pct_of_soft_16pe=22",
            s3 * 100 / soft.max(1)
        );
        say_speedup("s3_elapsed", vcpus, groups, s3, soft, " in elapsed time");
    }
}
