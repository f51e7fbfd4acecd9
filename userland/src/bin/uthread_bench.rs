//! libuthread micro-benchmarks on one vCPU, for `cargo xtask bench` (filter `uthread`):
//! - MULiTh Table 2: create+exit (spawn + join of an empty thread), a yield round trip, an
//!   uncontended mutex lock+unlock, a mutex hand-off between two threads, a channel round trip,
//!   spawn + join of a child that never blocks (`spawn_join_inline`) and, beside it, a plain call
//!   of the same closure (`call_baseline`), and `libuthread::join` of that child beside an empty
//!   call (`join_inline`: the child a lazy task record taken back at the join);
//!   `BENCH table=multith row=<op> instructions=<n> [paper_instructions=<n>]`;
//! - the FCS sweep: a yield round trip with both threads at call depth d = 1..10;
//!   `BENCH table=fcs_sweep row=<d> instructions_per_switch=<n>` (a round trip is two switches);
//! - lazy save: the same yield ping-pong with WINDOW saves and with the full-save baseline
//!   (`SaveMode::Full`: every register and the FP/SIMD state at each switch, resumed through the
//!   FULL path); `BENCH table=lazy_save row=<mode> instructions_per_switch=<n> bytes_per_switch=<b>`.
//!
//! Counts are cycles per operation (guest instructions under `--icount`), the minimum over a
//! few repetitions so a timer tick does not skew a row. Run on one CPU: `-- cpus=1`.
#![no_std]
#![no_main]

extern crate alloc;

// libuthread's M:N core is built only for the architectures its build script lists; elsewhere
// this program reports that (and fails, so a suite that runs it cannot pass by accident).
#[cfg(mn_core)]
mod program {
    use alloc::sync::Arc;
    use core::hint::black_box;
    use core::sync::atomic::{AtomicUsize, Ordering};
    use libuthread::context::{bytes_saved, set_save_mode, SaveMode};
    use libuthread::{println, sys, Clock, Mutex};

    /// Operations per measurement.
    const N: u64 = 2000;
    /// Repetitions of each measurement; the minimum is reported.
    const REPS: usize = 3;

    fn cycles() -> u64 {
        sys::clock(Clock::Cycles).unwrap_or(0) as u64
    }

    /// The minimum over `REPS` runs of `f`, which returns (cycles, operations).
    fn best(mut f: impl FnMut() -> (u64, u64)) -> u64 {
        (0..REPS)
            .map(|_| {
                let (c, ops) = f();
                c / ops.max(1)
            })
            .min()
            .unwrap_or(0)
    }

    fn create_exit() -> (u64, u64) {
        let c0 = cycles();
        for _ in 0..N {
            libuthread::spawn(|| ()).join().ok();
        }
        (cycles() - c0, N)
    }

    /// The work a `spawn_join_inline` child does, as a plain call (`call_baseline`) measures it.
    #[inline(never)]
    fn child_work(x: u64) -> u64 {
        black_box(x).wrapping_mul(3).wrapping_add(1)
    }

    /// A plain call of the closure the `spawn_join_inline` row spawns: the baseline that row's
    /// extra cost is measured against.
    fn call_baseline() -> (u64, u64) {
        let c0 = cycles();
        for i in 0..N {
            let f = move || child_work(i);
            black_box(black_box(f)());
        }
        (cycles() - c0, N)
    }

    /// Spawn + join of a child that never blocks, joined at once (the work-first case of lazy
    /// thread creation: it should cost about a call more than `call_baseline`).
    fn spawn_join_inline() -> (u64, u64) {
        let c0 = cycles();
        for i in 0..N {
            black_box(libuthread::spawn(move || child_work(i)).join().ok());
        }
        (cycles() - c0, N)
    }

    /// `libuthread::join` of the same child beside a call that does nothing (the child forked
    /// as a lazy task record and taken back at the join: what a fork costs when nobody else
    /// wants the child).
    fn join_inline() -> (u64, u64) {
        let c0 = cycles();
        for i in 0..N {
            black_box(libuthread::join(|| black_box(0u64), move || child_work(i)));
        }
        (cycles() - c0, N)
    }

    fn yield_round_trip() -> (u64, u64) {
        let other = libuthread::spawn(|| {
            for _ in 0..N {
                libuthread::yield_now();
            }
        });
        libuthread::yield_now(); // let it start
        let c0 = cycles();
        for _ in 0..N {
            libuthread::yield_now();
        }
        let c = cycles() - c0;
        other.join().ok();
        (c, N)
    }

    fn mutex_uncontended() -> (u64, u64) {
        let m = Mutex::new(0u64);
        let c0 = cycles();
        for _ in 0..N {
            *black_box(&m).lock() += 1;
        }
        (cycles() - c0, N)
    }

    /// Each thread takes the lock and yields while holding it, so the other blocks on it and
    /// every unlock hands the lock to a waiter. Per acquisition (both threads counted).
    fn mutex_handoff() -> (u64, u64) {
        let m = Arc::new(Mutex::new(0u64));
        let m2 = m.clone();
        let other = libuthread::spawn(move || {
            for _ in 0..N / 2 {
                let mut g = m2.lock();
                *g += 1;
                libuthread::yield_now();
            }
        });
        libuthread::yield_now(); // let it start
        let c0 = cycles();
        for _ in 0..N / 2 {
            let mut g = m.lock();
            *g += 1;
            libuthread::yield_now();
        }
        other.join().ok();
        let c = cycles() - c0;
        (c, N)
    }

    fn channel_round_trip() -> (u64, u64) {
        let (tx, rx) = libuthread::mpsc::channel::<u64>();
        let (tx2, rx2) = libuthread::mpsc::channel::<u64>();
        let echo = libuthread::spawn(move || {
            for v in rx.iter() {
                tx2.send(v).ok();
            }
        });
        tx.send(0).ok();
        rx2.recv().ok(); // warm: the echo thread is running
        let c0 = cycles();
        for i in 0..N {
            tx.send(i).ok();
            rx2.recv().ok();
        }
        let c = cycles() - c0;
        drop(tx);
        echo.join().ok();
        (c, N)
    }

    /// Descends `depth` non-inlined frames, then runs `leaf` there.
    #[inline(never)]
    fn at_depth(depth: usize, leaf: &mut dyn FnMut() -> (u64, u64)) -> (u64, u64) {
        if depth <= 1 {
            return black_box(leaf());
        }
        let pad = black_box([depth; 4]);
        let r = at_depth(black_box(depth - 1), leaf);
        black_box(pad);
        black_box(r)
    }

    static DEPTH: AtomicUsize = AtomicUsize::new(1);

    /// A yield round trip with both threads at call depth `d`; per switch.
    fn fcs(d: usize) -> (u64, u64) {
        DEPTH.store(d, Ordering::SeqCst);
        let other = libuthread::spawn(|| {
            at_depth(DEPTH.load(Ordering::SeqCst), &mut || {
                for _ in 0..N {
                    libuthread::yield_now();
                }
                (0, 0)
            });
        });
        libuthread::yield_now(); // let it reach its loop
        let (c, _) = at_depth(d, &mut || {
            let c0 = cycles();
            for _ in 0..N {
                libuthread::yield_now();
            }
            (cycles() - c0, N)
        });
        other.join().ok();
        (c, 2 * N)
    }

    /// Per switch: a yield ping-pong between two threads, switches saving as `mode` says.
    fn switch_saving(mode: SaveMode) -> (u64, u64) {
        set_save_mode(mode);
        let (c, round_trips) = yield_round_trip();
        set_save_mode(SaveMode::Window);
        (c, 2 * round_trips)
    }

    /// Prints a lazy_save row. Its floating point stays out of `main`: there it would make the
    /// closure's prologue save FP registers, so FP would be live on the vCPU before the first
    /// measurement, and the riscv64/aarch64 WINDOW switches measured would all save their FP
    /// callee-saved registers too (`Registration::fp_live`), unlike the window the row reports.
    #[inline(never)]
    fn lazy_save_row(row: &str, n: u64, bytes: usize, window: u64) {
        let ratio = n as f64 / window.max(1) as f64;
        println!("BENCH table=lazy_save row={row} instructions_per_switch={n} bytes_per_switch={bytes} ratio_to_window={ratio:.2}");
    }

    pub fn main() -> i32 {
        let ok = libuthread::run(1, || {
            let rows: [(&str, fn() -> (u64, u64), Option<u64>); 8] = [
                ("create_exit", create_exit, Some(74 + 42)),
                ("yield", yield_round_trip, None),
                ("mutex_uncontended", mutex_uncontended, None),
                ("mutex_handoff", mutex_handoff, Some(95)),
                ("channel_round_trip", channel_round_trip, None),
                ("spawn_join_inline", spawn_join_inline, None),
                ("call_baseline", call_baseline, None),
                ("join_inline", join_inline, None),
            ];
            let mut ok = true;
            for (name, f, paper) in rows {
                let n = best(f);
                ok &= n > 0;
                match paper {
                    Some(p) => println!("BENCH table=multith row={name} instructions={n} paper_instructions={p}"),
                    None => println!("BENCH table=multith row={name} instructions={n}"),
                }
            }
            for d in 1..=10 {
                let n = best(|| fcs(d));
                ok &= n > 0;
                println!("BENCH table=fcs_sweep row={d} instructions_per_switch={n}");
            }
            let window = best(|| switch_saving(SaveMode::Window));
            let full = best(|| switch_saving(SaveMode::Full));
            ok &= window > 0 && full > 0;
            for (row, n, mode) in [("window", window, SaveMode::Window), ("full_save", full, SaveMode::Full)] {
                lazy_save_row(row, n, bytes_saved(mode), window);
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
    libuthread::println!("uthread_bench: libuthread's M:N core is not built for this architecture");
    1
}

libuthread::entry!(main);
