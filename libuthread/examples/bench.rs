//! Quick hosted micro-benchmarks of the library's basic operations:
//! `cargo run --release -p libuthread --example bench`.
//!
//! - yield round trip: two threads on one vCPU yield to each other; one round trip is two
//!   switches (A → B → A), each a WINDOW save, the scheduler, and a WINDOW restore;
//! - spawn + join of a thread that returns at once (lazy creation, stack from the pool);
//! - mutex hand-off between two threads on one vCPU;
//! - channel ping-pong between two threads on one vCPU.

use std::sync::Arc;
use std::time::Instant;

fn per_op(label: &str, ops: u64, f: impl FnOnce()) {
    let start = Instant::now();
    f();
    let ns = start.elapsed().as_nanos() as f64 / ops as f64;
    println!("{label:<40} {ns:>10.1} ns");
}

fn main() {
    const N: u64 = 1_000_000;
    libuthread::run(1, || {
        per_op("yield round trip (2 threads, 1 vCPU)", N, || {
            let other = libuthread::spawn(|| {
                for _ in 0..N {
                    libuthread::yield_now();
                }
            });
            libuthread::yield_now(); // let it start
            for _ in 0..N {
                libuthread::yield_now();
            }
            other.join().unwrap();
        });
        per_op("yield with nobody else ready", N, || {
            for _ in 0..N {
                libuthread::yield_now();
            }
        });
        per_op("spawn + join (1 vCPU)", N / 10, || {
            for i in 0..N / 10 {
                assert_eq!(libuthread::spawn(move || i).join().unwrap(), i);
            }
        });
        per_op("current()", N, || {
            let mut x = 0;
            for _ in 0..N {
                x ^= libuthread::current().id().as_usize();
            }
            std::hint::black_box(x);
        });
        per_op("uncontended lock + unlock", N, || {
            let m = libuthread::Mutex::new(0u64);
            for _ in 0..N {
                *m.lock() += 1;
            }
        });
        per_op("mutex hand-off (2 threads, 1 vCPU)", N / 10, || {
            let m = Arc::new(libuthread::Mutex::new(0u64));
            let m2 = m.clone();
            let other = libuthread::spawn(move || {
                for _ in 0..N / 20 {
                    let mut g = m2.lock();
                    *g += 1;
                    libuthread::yield_now();
                }
            });
            for _ in 0..N / 20 {
                let mut g = m.lock();
                *g += 1;
                libuthread::yield_now();
            }
            other.join().unwrap();
        });
        per_op("channel round trip (2 threads, 1 vCPU)", N / 10, || {
            let (tx, rx) = libuthread::mpsc::channel::<u64>();
            let (tx2, rx2) = libuthread::mpsc::channel::<u64>();
            let echo = libuthread::spawn(move || {
                for v in rx.iter() {
                    tx2.send(v).unwrap();
                }
            });
            for i in 0..N / 10 {
                tx.send(i).unwrap();
                rx2.recv().unwrap();
            }
            drop(tx);
            echo.join().unwrap();
        });
    });
    libuthread::run(2, || {
        per_op("channel round trip (2 threads, 2 vCPUs)", N / 100, || {
            let (tx, rx) = libuthread::mpsc::channel::<u64>();
            let (tx2, rx2) = libuthread::mpsc::channel::<u64>();
            let echo = libuthread::spawn(move || {
                for v in rx.iter() {
                    tx2.send(v).unwrap();
                }
            });
            for i in 0..N / 100 {
                tx.send(i).unwrap();
                rx2.recv().unwrap();
            }
            drop(tx);
            echo.join().unwrap();
        });
    });
}
