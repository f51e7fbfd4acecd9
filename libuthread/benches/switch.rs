//! Host comparison of switch costs (`cargo bench -p libuthread --bench switch -- --noplot`;
//! `cargo xtask bench --filter host` runs it and reads criterion's `time:` lines):
//! - `libuthread_yield_round_trip`: two user threads on one vCPU ping via `yield_now`; one
//!   iteration is a round trip (two switches);
//! - `libuthread_yield_round_trip_full_save`: the same with the full-save baseline
//!   (`SaveMode::Full`: every register and the FP/SIMD state at each switch, FULL resume);
//! - `os_thread_condvar_ping_pong`: two OS threads ping-pong through a `Mutex` + `Condvar`; one
//!   iteration is a round trip;
//! - `corosensei_resume_yield`: a corosensei coroutine resumed and yielding back; one iteration
//!   is a round trip;
//! - `libuthread_channel_round_trip`: a value sent to an echo thread and received back through
//!   two channels, on one vCPU; one iteration is a round trip;
//! - `libuthread_spawn_join`, `os_thread_spawn_join`, `corosensei_create_run`: make a thread (or
//!   coroutine) that does nothing, run it to its end and wait for it;
//! - `libuthread_channel_round_trip`, `os_thread_channel_round_trip`: a value sent through a
//!   channel (`libuthread::mpsc`, `std::sync::mpsc`) to an echo thread and back; one iteration is
//!   a round trip.
//!
//! `cargo xtask bench` sets these beside Go's goroutines (`bench/go`) in one table.

use std::hint::black_box;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use corosensei::{Coroutine, CoroutineResult};
use criterion::{criterion_group, criterion_main, Criterion};

/// `iters` yield round trips between two user threads on one vCPU.
fn libuthread_round_trips(iters: u64) -> Duration {
    libuthread::run(1, move || {
        let other = libuthread::spawn(move || {
            for _ in 0..iters {
                libuthread::yield_now();
            }
        });
        libuthread::yield_now(); // let it start
        let start = Instant::now();
        for _ in 0..iters {
            libuthread::yield_now();
        }
        let elapsed = start.elapsed();
        other.join().unwrap();
        elapsed
    })
}

/// `iters` channel round trips to an echo thread on one vCPU.
fn libuthread_channel_round_trips(iters: u64) -> Duration {
    libuthread::run(1, move || {
        let (tx, rx) = libuthread::mpsc::channel::<u64>();
        let (tx2, rx2) = libuthread::mpsc::channel::<u64>();
        let echo = libuthread::spawn(move || {
            for v in rx.iter() {
                tx2.send(v).unwrap();
            }
        });
        tx.send(0).unwrap();
        rx2.recv().unwrap(); // the echo thread is running
        let start = Instant::now();
        for i in 0..iters {
            tx.send(i).unwrap();
            black_box(rx2.recv().unwrap());
        }
        let elapsed = start.elapsed();
        drop(tx);
        echo.join().unwrap();
        elapsed
    })
}

/// As [`libuthread_round_trips`], every switch saving everything (the baseline).
fn libuthread_full_save_round_trips(iters: u64) -> Duration {
    use libuthread::context::{set_save_mode, SaveMode};
    set_save_mode(SaveMode::Full);
    let d = libuthread_round_trips(iters);
    set_save_mode(SaveMode::Window);
    d
}

/// `iters` round trips between two OS threads through a Mutex + Condvar (a turn flag).
fn os_thread_round_trips(iters: u64) -> Duration {
    let shared = Arc::new((Mutex::new(false), Condvar::new()));
    let peer = {
        let shared = shared.clone();
        std::thread::spawn(move || {
            let (turn, cv) = &*shared;
            for _ in 0..iters {
                let mut g = cv.wait_while(turn.lock().unwrap(), |peer_turn| !*peer_turn).unwrap();
                *g = false;
                cv.notify_one();
            }
        })
    };
    let (turn, cv) = &*shared;
    let start = Instant::now();
    for _ in 0..iters {
        let mut g = turn.lock().unwrap();
        *g = true;
        cv.notify_one();
        drop(cv.wait_while(g, |peer_turn| *peer_turn).unwrap());
    }
    let elapsed = start.elapsed();
    peer.join().unwrap();
    elapsed
}

/// `iters` spawns of an empty user thread, each joined, on one vCPU.
fn libuthread_spawn_joins(iters: u64) -> Duration {
    libuthread::run(1, move || {
        let start = Instant::now();
        for _ in 0..iters {
            libuthread::spawn(|| black_box(0u64)).join().unwrap();
        }
        start.elapsed()
    })
}

/// `iters` round trips through two `std::sync::mpsc` channels to an echo OS thread.
fn os_thread_channel_round_trips(iters: u64) -> Duration {
    let (tx, rx) = std::sync::mpsc::channel::<u64>();
    let (back, from_echo) = std::sync::mpsc::channel::<u64>();
    let echo = std::thread::spawn(move || {
        for v in rx.iter() {
            back.send(v).unwrap();
        }
    });
    tx.send(0).unwrap();
    from_echo.recv().unwrap();
    let start = Instant::now();
    for i in 0..iters {
        tx.send(i).unwrap();
        black_box(from_echo.recv().unwrap());
    }
    let elapsed = start.elapsed();
    drop(tx);
    echo.join().unwrap();
    elapsed
}

fn switch(c: &mut Criterion) {
    let mut group = c.benchmark_group("switch");
    group
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(20);

    group.bench_function("libuthread_yield_round_trip", |b| b.iter_custom(libuthread_round_trips));
    group.bench_function("libuthread_yield_round_trip_full_save", |b| b.iter_custom(libuthread_full_save_round_trips));
    group.bench_function("os_thread_condvar_ping_pong", |b| b.iter_custom(os_thread_round_trips));
    group.bench_function("corosensei_resume_yield", |b| {
        let mut co = Coroutine::new(|yielder, mut x: u64| loop {
            x = yielder.suspend(black_box(x));
        });
        b.iter(|| match co.resume(black_box(1)) {
            CoroutineResult::Yield(v) => v,
            CoroutineResult::Return(()) => unreachable!(),
        });
    });
    group.bench_function("libuthread_channel_round_trip", |b| b.iter_custom(libuthread_channel_round_trips));
    group.bench_function("libuthread_spawn_join", |b| b.iter_custom(libuthread_spawn_joins));
    group.bench_function("os_thread_spawn_join", |b| b.iter(|| std::thread::spawn(|| black_box(0u64)).join().unwrap()));
    group.bench_function("corosensei_create_run", |b| {
        b.iter(|| {
            let mut co = Coroutine::new(|_, x: u64| black_box(x));
            match co.resume(1) {
                CoroutineResult::Return(v) => v,
                CoroutineResult::Yield(()) => unreachable!(),
            }
        })
    });
    group.bench_function("os_thread_channel_round_trip", |b| b.iter_custom(os_thread_channel_round_trips));
    group.finish();
}

criterion_group!(benches, switch);
criterion_main!(benches);
