//! The StackThreads applications (seed 004) hosted: `fib`, `nqueens` and a CKY parser
//! (`bench/stackthreads/apps.rs`, shared with the userland `stackthreads` program), each
//! sequential, fork-everywhere (`fk`) and suspend-everywhere (`sw`), on one vCPU; and a larger
//! FK fib on 1 and 2 vCPUs for its speed-up (`cargo bench -p libuthread --bench stackthreads`;
//! `cargo xtask bench --filter host` runs it), beside the host's own ceiling for it: sequential
//! fib on 1 and 2 OS threads at once.
//!
//! Ids: `stackthreads/<app>_<sequential|fk|sw>`, `stackthreads/fib_fk_vcpus_<1|2>`,
//! `stackthreads/fib_sequential_os_threads_<1|2>`; one iteration is one whole run of the
//! application (on each thread, for the last two).

extern crate alloc;

#[path = "../../bench/stackthreads/apps.rs"]
mod apps;

use std::hint::black_box;
use std::time::{Duration, Instant};

use apps::{cky, fib, nqueens, ForkEverywhere, Sequential, Strategy, SuspendEverywhere};
use criterion::{criterion_group, criterion_main, Criterion};

/// `fib(FIB_N)`, as in the userland program.
const FIB_N: u32 = 20;
/// `fib(SPEEDUP_FIB_N)` for the speed-up rows (`fib_fk_vcpus_<1|2>`): about 1 ms on one vCPU,
/// large enough that waking a parked vCPU (a futex round trip, microseconds) is small beside
/// the work it takes over (at `FIB_N` a whole run is about 90 µs).
const SPEEDUP_FIB_N: u32 = 25;
/// `nqueens(QUEENS_N)`, as in the userland program.
const QUEENS_N: u32 = 8;

/// One run of application `app` under `strategy`.
fn app<S: Strategy>(app: &str, strategy: &S) -> u64 {
    match app {
        "fib" => fib(strategy, black_box(FIB_N)),
        "fib_speedup" => fib(strategy, black_box(SPEEDUP_FIB_N)),
        "nqueens" => nqueens(strategy, black_box(QUEENS_N)),
        _ => cky(strategy),
    }
}

/// The three versions of an application.
#[derive(Clone, Copy)]
enum Version {
    Sequential,
    Fk,
    Sw,
}

/// `iters` runs of `name` in `version` inside one libuthread runtime of `vcpus` vCPUs.
fn runs(name: &'static str, version: Version, vcpus: usize, iters: u64) -> Duration {
    libuthread::run(vcpus, move || {
        let start = Instant::now();
        for _ in 0..iters {
            black_box(match version {
                Version::Sequential => app(name, &Sequential),
                Version::Fk => app(name, &ForkEverywhere),
                Version::Sw => SuspendEverywhere::with(|s| app(name, s)),
            });
        }
        start.elapsed()
    })
}

/// `iters` runs of sequential `fib(SPEEDUP_FIB_N)` on each of `threads` OS threads at once, no
/// libuthread: what this host's CPUs give independent computations. `fib_sequential_os_threads_2`
/// over `..._1` is how much two of them slow each other (1.0 on two free cores), so 2 over that
/// is the ceiling of any 2-vCPU speed-up here (a virtual machine's two CPUs may share a core).
fn os_threads(threads: usize, iters: u64) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..iters {
                    black_box(fib(&Sequential, black_box(SPEEDUP_FIB_N)));
                }
            });
        }
    });
    start.elapsed()
}

fn stackthreads(c: &mut Criterion) {
    let mut group = c.benchmark_group("stackthreads");
    group
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
        .sample_size(10);
    for name in ["fib", "nqueens", "cky"] {
        for (suffix, version) in [("sequential", Version::Sequential), ("fk", Version::Fk), ("sw", Version::Sw)] {
            group.bench_function(format!("{name}_{suffix}"), |b| b.iter_custom(|iters| runs(name, version, 1, iters)));
        }
    }
    for vcpus in [1, 2] {
        group.bench_function(format!("fib_fk_vcpus_{vcpus}"), |b| b.iter_custom(|iters| runs("fib_speedup", Version::Fk, vcpus, iters)));
    }
    for threads in [1, 2] {
        group.bench_function(format!("fib_sequential_os_threads_{threads}"), |b| b.iter_custom(|iters| os_threads(threads, iters)));
    }
    group.finish();
}

criterion_group!(benches, stackthreads);
criterion_main!(benches);
