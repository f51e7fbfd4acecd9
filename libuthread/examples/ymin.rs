use std::time::Instant;
fn best<F: FnMut(u64)>(mut f: F) -> f64 {
    let n = 10_000u64; let mut b = f64::MAX;
    for _ in 0..200 { let t = Instant::now(); f(n); b = b.min(t.elapsed().as_nanos() as f64 / n as f64); }
    b
}
fn main() {
    let y = libuthread::run(1, || {
        let other = libuthread::spawn(|| { for _ in 0..10_000u64 * 200 { libuthread::yield_now(); } });
        libuthread::yield_now();
        let b = best(|n| for _ in 0..n { libuthread::yield_now(); });
        other.join().unwrap(); b
    });
    let c = libuthread::run(1, || {
        let (tx, rx) = libuthread::mpsc::channel::<u64>();
        let (tx2, rx2) = libuthread::mpsc::channel::<u64>();
        let echo = libuthread::spawn(move || { for v in rx.iter() { tx2.send(v).unwrap(); } });
        tx.send(0).unwrap(); rx2.recv().unwrap();
        let b = best(|n| for i in 0..n { tx.send(i).unwrap(); std::hint::black_box(rx2.recv().unwrap()); });
        drop(tx); echo.join().unwrap(); b
    });
    let s = libuthread::run(1, || best(|n| for _ in 0..n { libuthread::spawn(|| std::hint::black_box(0u64)).join().unwrap(); }));
    let mut co = corosensei::Coroutine::new(|y: &corosensei::Yielder<u64, u64>, mut x: u64| loop { x = y.suspend(std::hint::black_box(x)); });
    let cb = best(|n| for _ in 0..n { let _ = std::hint::black_box(co.resume(1)); });
    println!("yield {y:.2} ns ({:.2}x corosensei {cb:.2}); channel {c:.2} ns; spawn_join {s:.2} ns", y / cb);
}
