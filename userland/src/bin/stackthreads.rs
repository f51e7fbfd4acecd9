//! The StackThreads applications (seed 004) on libuthread, for `cargo xtask bench` (filter
//! `stackthreads`): `fib`, `nqueens` and a CKY parser (`bench/stackthreads/apps.rs`), each run
//! sequentially, forking everywhere (FK: every recursive call a fork, `libuthread::Builder::join`, no cutoff)
//! and suspending everywhere (SW: FK, and every leaf waits once on a one-shot channel a server
//! thread answers). One line per application:
//!
//! ```text
//! BENCH table=stackthreads row=<fib|nqueens|cky> sequential=<n> fk=<n> sw=<n> fk_overhead_pct=<x> sw_overhead_pct=<y>
//! ```
//!
//! Counts are cycles of the whole run (guest instructions under `--icount`), the minimum over
//! two repetitions; overheads are over the sequential run, in percent. One CPU (`cpus=1`).
#![no_std]
#![no_main]

extern crate alloc;

// libuthread's M:N core is built only for the architectures its build script lists; elsewhere
// this program reports that (and fails, so a suite that runs it cannot pass by accident).
#[cfg(mn_core)]
#[path = "../../../bench/stackthreads/apps.rs"]
mod apps;

#[cfg(mn_core)]
mod program {
    use core::hint::black_box;

    use super::apps::{cky, fib, nqueens, ForkEverywhere, Sequential, Strategy, SuspendEverywhere};
    use libuthread::{println, sys, Clock};

    /// `fib(FIB_N)`: 21,891 calls, 10,945 of them spawns under FK.
    const FIB_N: u32 = 20;
    /// `nqueens(QUEENS_N)`: 92 solutions, 2,056 recursive calls.
    const QUEENS_N: u32 = 8;
    /// Repetitions of each run; the minimum is reported.
    const REPS: usize = 2;

    fn cycles() -> u64 {
        sys::clock(Clock::Cycles).unwrap_or(0) as u64
    }

    /// The minimum over `REPS` runs of `f`, in cycles, and its result (the same every time).
    fn best(mut f: impl FnMut() -> u64) -> (u64, u64) {
        let mut least = u64::MAX;
        let mut result = 0;
        for _ in 0..REPS {
            let c0 = cycles();
            result = black_box(f());
            least = least.min(cycles() - c0);
        }
        (least, result)
    }

    /// One application under a strategy.
    fn app<S: Strategy>(row: &str, strategy: &S) -> u64 {
        match row {
            "fib" => fib(strategy, black_box(FIB_N)),
            "nqueens" => nqueens(strategy, black_box(QUEENS_N)),
            _ => cky(strategy),
        }
    }

    /// `(over - base) / base` in percent with one decimal, as text (integer arithmetic: the
    /// userland targets are soft-float).
    fn overhead_pct(over: u64, base: u64) -> alloc::string::String {
        let tenths = (i128::from(over) - i128::from(base)) * 1000 / i128::from(base.max(1));
        let sign = if tenths < 0 { "-" } else { "" };
        let tenths = tenths.unsigned_abs();
        alloc::format!("{sign}{}.{}", tenths / 10, tenths % 10)
    }

    /// Bytes of heap touched before measuring.
    const WARM_HEAP: usize = 1 << 20;

    /// Touches the first [`WARM_HEAP`] bytes of the heap once, so that no run measures the
    /// kernel filling fresh heap pages on first touch (4,880 instructions each on x86_64). Which
    /// run met a fresh page used to depend on where the allocator placed the `cky` chart, so
    /// the figure moved by a page fault with unrelated changes to the program.
    #[inline(never)]
    fn warm_heap() {
        black_box(alloc::vec![1u8; WARM_HEAP]);
    }

    pub fn main() -> i32 {
        let ok = libuthread::run(1, || {
            warm_heap();
            let mut ok = true;
            for row in ["fib", "nqueens", "cky"] {
                let (sequential, expected) = best(|| app(row, &Sequential));
                println!("stackthreads: {row}: sequential {sequential}");
                let (fk, fk_result) = best(|| app(row, &ForkEverywhere));
                println!("stackthreads: {row}: fk {fk}");
                let (sw, sw_result) = best(|| SuspendEverywhere::with(|s| app(row, s)));
                if fk_result != expected || sw_result != expected {
                    println!("stackthreads: {row}: sequential {expected}, fk {fk_result}, sw {sw_result}");
                    ok = false;
                }
                ok &= sequential > 0;
                println!(
                    "BENCH table=stackthreads row={row} sequential={sequential} fk={fk} sw={sw} fk_overhead_pct={} sw_overhead_pct={}",
                    overhead_pct(fk, sequential),
                    overhead_pct(sw, sequential)
                );
            }
            ok
        });
        i32::from(!ok)
    }
}

#[cfg(mn_core)]
use program::main;

#[cfg(not(mn_core))]
fn main() -> i32 {
    libuthread::println!("stackthreads: libuthread's M:N core is not built for this architecture");
    1
}

libuthread::entry!(main);
