//! The conformance suite: one set of checks written against the public API only, run hosted
//! (`tests/conformance.rs`, with 1 and 4 vCPUs) and on Tsumugi (a user program) alike. Every
//! check works with any number of vCPUs.
//!
//! ```
//! libuthread::run(2, || {
//!     let mut failures = Vec::new();
//!     libuthread::conformance::run_all(&mut |name, result| {
//!         if let Err(why) = result {
//!             failures.push(format!("{name}: {why}"));
//!         }
//!     });
//!     assert!(failures.is_empty(), "{failures:?}");
//! });
//! ```

use alloc::collections::VecDeque;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::cell::Cell;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use core::time::Duration;

use crate::{mpmc, mpsc, oneshot, Barrier, Condvar, Instant, Mutex, MutexGuard, Once, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError};

/// One check's verdict.
pub type Outcome = Result<(), String>;

/// A check: its name and its function.
pub type Check = (&'static str, fn() -> Outcome);

/// The checks, by name.
pub const CHECKS: &[Check] = &[
    ("spawn_join_10000", spawn_join_10000),
    ("channel_ping_pong", channel_ping_pong),
    ("mpmc_fan_in_fan_out", mpmc_fan_in_fan_out),
    ("mutex_counter_64_threads", mutex_counter_64_threads),
    ("handoff_pairs", handoff_pairs),
    ("oneshot_replies", oneshot_replies),
    ("condvar_producer_consumer", condvar_producer_consumer),
    ("barrier_rounds", barrier_rounds),
    ("rwlock_readers_writers", rwlock_readers_writers),
    ("once_runs_once", once_runs_once),
    ("thread_locals_survive_migration", thread_locals_survive_migration),
    ("fp_values_survive_switches", fp_values_survive_switches),
    ("sleep_ordering", sleep_ordering),
    ("yield_storm_keeps_identity", yield_storm_keeps_identity),
    ("inline_child_blocks_like_a_thread", inline_child_blocks_like_a_thread),
    ("unjoined_children_still_run", unjoined_children_still_run),
    ("join_forks_lazily", join_forks_lazily),
    ("join_borrows_the_callers_frame", join_borrows_the_callers_frame),
    ("join_promoted_thread_gets_its_settings", join_promoted_thread_gets_its_settings),
    ("suspended_forks_come_back", suspended_forks_come_back),
    ("condvar_wait_timeout", condvar_wait_timeout),
    ("channel_timeouts", channel_timeouts),
    ("channel_iterators_and_names", channel_iterators_and_names),
    ("scoped_threads_borrow", scoped_threads_borrow),
    ("lock_accessors_and_guards", lock_accessors_and_guards),
    ("rwlock_downgrade_and_map", rwlock_downgrade_and_map),
    ("once_force_and_wait", once_force_and_wait),
    ("local_key_accessors", local_key_accessors),
    ("reused_threads_start_clean", reused_threads_start_clean),
    ("sleep_until_and_parallelism", sleep_until_and_parallelism),
    ("freed_stacks_are_used_again", freed_stacks_are_used_again),
];

/// Runs every check in order, calling `report(name, outcome)` after each. Call it from a user
/// thread (inside [`run`](crate::run)).
pub fn run_all(report: &mut dyn FnMut(&str, Outcome)) {
    for (name, check) in CHECKS {
        report(name, check());
    }
}

macro_rules! ensure {
    ($cond:expr, $($why:tt)*) => {
        if !$cond {
            return Err(format!($($why)*));
        }
    };
}

/// Spawns 10,000 threads (in waves of 1,000, every one joined) and checks their results.
fn spawn_join_10000() -> Outcome {
    let mut sum = 0u64;
    for wave in 0..10u64 {
        let handles: Vec<_> = (0..1000u64).map(|i| crate::spawn(move || wave * 1000 + i)).collect();
        for h in handles {
            sum += h.join().map_err(|_| String::from("a thread panicked"))?;
        }
    }
    ensure!(sum == 9_999 * 10_000 / 2, "sum of results {sum}");
    Ok(())
}

/// Two threads bounce a counter 10,000 times over a pair of channels (one of them a
/// rendezvous channel).
fn channel_ping_pong() -> Outcome {
    const ROUNDS: u32 = 10_000;
    let (ping_tx, ping_rx) = mpsc::channel::<u32>();
    let (pong_tx, pong_rx) = mpsc::sync_channel::<u32>(0);
    let echo = crate::spawn(move || {
        let mut seen = 0;
        for value in ping_rx.iter() {
            seen += 1;
            if pong_tx.send(value + 1).is_err() {
                break;
            }
        }
        seen
    });
    let mut value = 0;
    for _ in 0..ROUNDS {
        ping_tx.send(value).map_err(|_| String::from("echo hung up"))?;
        value = pong_rx.recv().map_err(|_| String::from("echo hung up"))?;
    }
    drop(ping_tx);
    let seen = echo.join().map_err(|_| String::from("echo panicked"))?;
    ensure!(value == ROUNDS && seen == ROUNDS, "value {value}, echo saw {seen}");
    Ok(())
}

/// Four producers and three consumers share a bounded mpmc channel; every value arrives once.
fn mpmc_fan_in_fan_out() -> Outcome {
    let (tx, rx) = mpmc::bounded::<u64>(8);
    let producers: Vec<_> = (0..4u64)
        .map(|p| {
            let tx = tx.clone();
            crate::spawn(move || {
                for i in 0..500 {
                    tx.send(p * 1000 + i).unwrap();
                }
            })
        })
        .collect();
    drop(tx);
    let consumers: Vec<_> = (0..3)
        .map(|_| {
            let rx = rx.clone();
            crate::spawn(move || rx.iter().fold((0u64, 0u64), |(n, s), v| (n + 1, s + v)))
        })
        .collect();
    drop(rx);
    for p in producers {
        p.join().map_err(|_| String::from("producer panicked"))?;
    }
    let (mut n, mut s) = (0, 0);
    for c in consumers {
        let (cn, cs) = c.join().map_err(|_| String::from("consumer panicked"))?;
        n += cn;
        s += cs;
    }
    let expect: u64 = (0..4u64).map(|p| (0..500).map(|i| p * 1000 + i).sum::<u64>()).sum();
    ensure!(n == 2000 && s == expect, "received {n} values summing to {s}");
    Ok(())
}

/// Eight pairs of threads ping-pong through unbounded channels (every send finds its receiver
/// waiting or about to wait: the message is handed to it inside the send's critical section,
/// `blocking::wake_from`) and, every round, take a mutex shared by all pairs, yielding while
/// they hold it (every unlock with a waiter hands the lock over the same way). On several
/// vCPUs waker and waiter sit on different vCPUs and race the waiter's switch out; a wake-up
/// lost there leaves a pair blocked for good and the check never ends.
fn handoff_pairs() -> Outcome {
    const PAIRS: u64 = 8;
    const ROUNDS: u64 = 1_000;
    let lock = Arc::new(Mutex::new(0u64));
    let pairs: Vec<_> = (0..PAIRS)
        .map(|p| {
            let (to_echo, echo_rx) = mpsc::channel::<u64>();
            let (to_main, main_rx) = mpsc::channel::<u64>();
            let echo_lock = lock.clone();
            let echo = crate::spawn(move || {
                let mut n = 0u64;
                for v in echo_rx.iter() {
                    *echo_lock.lock() += 1;
                    n += 1;
                    if to_main.send(v + 1).is_err() {
                        break;
                    }
                }
                n
            });
            let main_lock = lock.clone();
            crate::spawn(move || {
                let mut v = p * 1_000_000;
                for _ in 0..ROUNDS {
                    to_echo.send(v).map_err(|_| String::from("echo hung up"))?;
                    v = main_rx.recv().map_err(|_| String::from("echo hung up"))?;
                    let mut g = main_lock.lock();
                    crate::yield_now(); // holding the lock: the others queue on it
                    *g += 1;
                }
                drop(to_echo);
                let n = echo.join().map_err(|_| String::from("echo panicked"))?;
                ensure!(v == p * 1_000_000 + ROUNDS && n == ROUNDS, "pair {p}: value {v}, echo saw {n}");
                Ok(())
            })
        })
        .collect();
    for pair in pairs {
        pair.join().map_err(|_| String::from("a pair panicked"))??;
    }
    let total = *lock.lock();
    ensure!(total == 2 * PAIRS * ROUNDS, "mutex counted {total}");
    Ok(())
}

/// One-shot replies across vCPUs (`oneshot`): 16 clients make 250 requests each to 4 servers,
/// each with a one-shot reply channel. A server answers most requests; it drops every 7th
/// reply channel unsent (the client must get `RecvError`), and every 11th client drops its
/// receiver before the reply (the server's send must fail and give the value back); every 5th
/// waits with `recv_timeout` (a time-out that does not fire), and one times out first; every
/// 3rd asks instead (`oneshot::ask`, the reply's slot in the client's frame). Each
/// reply races its receiver's wait; on several vCPUs sender and receiver sit on different
/// vCPUs, and a lost wake-up leaves a client blocked for good (the check never ends).
fn oneshot_replies() -> Outcome {
    const CLIENTS: u64 = 16;
    const REQUESTS: u64 = 250;
    let (requests, inbox) = mpmc::channel::<(u64, oneshot::Sender<u64>)>();
    let refused = Arc::new(AtomicUsize::new(0));
    let servers: Vec<_> = (0..4)
        .map(|_| {
            let inbox = inbox.clone();
            let refused = refused.clone();
            crate::spawn(move || {
                for (n, reply) in inbox.iter() {
                    if n % 7 == 0 {
                        drop(reply);
                    } else if let Err(oneshot::SendError(back)) = reply.send(n + 1) {
                        if back != n + 1 {
                            return Err(format!("request {n}: the refused reply came back as {back}"));
                        }
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok(())
            })
        })
        .collect();
    drop(inbox);
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let requests = requests.clone();
            crate::spawn(move || {
                let (mut answered, mut unsent, mut dropped) = (0u64, 0u64, 0u64);
                for i in 0..REQUESTS {
                    let n = c * REQUESTS + i;
                    let got = if n % 3 == 2 && n % 11 != 0 {
                        // Every 3rd asks: the reply's slot is in this frame (`oneshot::ask`).
                        oneshot::ask(|reply| requests.send((n, reply)))
                    } else {
                        let (reply, answer) = oneshot::channel();
                        requests.send((n, reply)).map_err(|_| String::from("the servers hung up"))?;
                        if n % 11 == 0 && n % 7 != 0 {
                            drop(answer);
                            dropped += 1;
                            continue;
                        }
                        // Every 5th waits with a time-out that does not fire (its watchdog
                        // thread must leave the reply to the sender).
                        if n % 5 == 1 {
                            match answer.recv_timeout(Duration::from_secs(60)) {
                                Ok(v) => Ok(v),
                                Err(oneshot::RecvTimeoutError::Disconnected) => Err(oneshot::RecvError),
                                Err(oneshot::RecvTimeoutError::Timeout(_)) => return Err(format!("request {n}: timed out")),
                            }
                        } else {
                            answer.recv()
                        }
                    };
                    match got {
                        Ok(v) if v == n + 1 => answered += 1,
                        Ok(v) => return Err(format!("request {n} answered {v}")),
                        Err(oneshot::RecvError) if n % 7 == 0 => unsent += 1,
                        Err(oneshot::RecvError) => return Err(format!("request {n}: reply dropped unsent")),
                    }
                }
                Ok((answered, unsent, dropped))
            })
        })
        .collect();
    // A time-out with nothing sent gives the receiver back, which then gets the value.
    let (tx, rx) = oneshot::channel::<u64>();
    let rx = match rx.recv_timeout(Duration::from_millis(1)) {
        Err(oneshot::RecvTimeoutError::Timeout(rx)) => rx,
        Ok(v) => return Err(format!("a receive with nothing sent got {v}")),
        Err(oneshot::RecvTimeoutError::Disconnected) => return Err(String::from("a receive with the sender alive: disconnected")),
    };
    tx.send(5).map_err(|_| String::from("the receiver given back was dropped"))?;
    ensure!(rx.recv() == Ok(5), "the receiver given back by a time-out lost the value");
    drop(requests);
    let (mut answered, mut unsent, mut dropped) = (0, 0, 0);
    for c in clients {
        let (a, u, d) = c.join().map_err(|_| String::from("a client panicked"))??;
        answered += a;
        unsent += u;
        dropped += d;
    }
    for s in servers {
        s.join().map_err(|_| String::from("a server panicked"))??;
    }
    let total = CLIENTS * REQUESTS;
    let expect_unsent = (0..total).filter(|n| n % 7 == 0).count() as u64;
    let expect_dropped = (0..total).filter(|n| n % 11 == 0 && n % 7 != 0).count() as u64;
    ensure!(unsent == expect_unsent, "{unsent} replies dropped unsent, expected {expect_unsent}");
    ensure!(dropped == expect_dropped, "{dropped} receivers dropped, expected {expect_dropped}");
    ensure!(answered == total - unsent - dropped, "{answered} answers of {total} requests");
    // A dropped receiver makes the send fail only if the drop came first; either way the value
    // is accounted for (given back, or dropped with the receiver's channel).
    let refused = refused.load(Ordering::Relaxed) as u64;
    ensure!(refused <= dropped, "{refused} sends refused, but only {dropped} receivers dropped");
    Ok(())
}

/// 64 threads add 1,000 each to a mutex-protected counter, yielding inside the critical
/// section now and then so the lock is contended and handed off.
fn mutex_counter_64_threads() -> Outcome {
    let counter = Arc::new(Mutex::new(0u64));
    let handles: Vec<_> = (0..64)
        .map(|_| {
            let counter = counter.clone();
            crate::spawn(move || {
                for i in 0..1000 {
                    let mut guard = counter.lock();
                    let seen = *guard;
                    if i % 64 == 0 {
                        crate::yield_now(); // holding the lock: others must queue
                    }
                    *guard = seen + 1;
                }
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| String::from("a thread panicked"))?;
    }
    let total = *counter.lock();
    ensure!(total == 64_000, "counter {total}");
    Ok(())
}

/// A bounded queue built from a mutex and two condition variables: four producers, four
/// consumers, every item consumed once.
fn condvar_producer_consumer() -> Outcome {
    struct Queue {
        items: Mutex<(VecDeque<u64>, usize)>, // (items, producers still running)
        not_empty: Condvar,
        not_full: Condvar,
    }
    const CAPACITY: usize = 4;
    let q = Arc::new(Queue { items: Mutex::new((VecDeque::new(), 4)), not_empty: Condvar::new(), not_full: Condvar::new() });
    let producers: Vec<_> = (0..4u64)
        .map(|p| {
            let q = q.clone();
            crate::spawn(move || {
                for i in 0..1000 {
                    let mut g = q.not_full.wait_while(q.items.lock(), |(items, _)| items.len() >= CAPACITY);
                    g.0.push_back(p * 10_000 + i);
                    drop(g);
                    q.not_empty.notify_one();
                }
                q.items.lock().1 -= 1;
                q.not_empty.notify_all();
            })
        })
        .collect();
    let consumers: Vec<_> = (0..4)
        .map(|_| {
            let q = q.clone();
            crate::spawn(move || {
                let (mut n, mut sum) = (0u64, 0u64);
                loop {
                    let mut g = q.not_empty.wait_while(q.items.lock(), |(items, running)| items.is_empty() && *running > 0);
                    match g.0.pop_front() {
                        Some(v) => {
                            drop(g);
                            q.not_full.notify_one();
                            n += 1;
                            sum += v;
                        }
                        None => return (n, sum),
                    }
                }
            })
        })
        .collect();
    for p in producers {
        p.join().map_err(|_| String::from("producer panicked"))?;
    }
    let (mut n, mut sum) = (0, 0);
    for c in consumers {
        let (cn, cs) = c.join().map_err(|_| String::from("consumer panicked"))?;
        n += cn;
        sum += cs;
    }
    let expect: u64 = (0..4u64).map(|p| (0..1000).map(|i| p * 10_000 + i).sum::<u64>()).sum();
    ensure!(n == 4000 && sum == expect, "consumed {n} items summing to {sum}");
    Ok(())
}

/// Eight threads pass a barrier 50 times; nobody gets ahead of a round, and each round has
/// exactly one leader.
fn barrier_rounds() -> Outcome {
    const THREADS: usize = 8;
    const ROUNDS: usize = 50;
    let barrier = Arc::new(Barrier::new(THREADS));
    let arrived = Arc::new(AtomicUsize::new(0));
    let leaders = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (barrier, arrived, leaders) = (barrier.clone(), arrived.clone(), leaders.clone());
            crate::spawn(move || -> Result<(), String> {
                for round in 0..ROUNDS {
                    arrived.fetch_add(1, Ordering::SeqCst);
                    if barrier.wait().is_leader() {
                        leaders.fetch_add(1, Ordering::SeqCst);
                    }
                    let seen = arrived.load(Ordering::SeqCst);
                    if seen < (round + 1) * THREADS {
                        return Err(format!("round {round}: passed with only {seen} arrivals"));
                    }
                    // Keep the next round's arrivals out until everyone has looked.
                    barrier.wait();
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| String::from("a thread panicked"))??;
    }
    let leaders = leaders.load(Ordering::SeqCst);
    ensure!(leaders == ROUNDS, "{leaders} leaders in {ROUNDS} rounds");
    Ok(())
}

/// Readers check an invariant that writers keep (`a == b`), with writers and readers
/// interleaving; the final value counts every write.
fn rwlock_readers_writers() -> Outcome {
    let lock = Arc::new(RwLock::new((0u64, 0u64)));
    let broken = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = (0..4)
        .map(|_| {
            let lock = lock.clone();
            crate::spawn(move || {
                for _ in 0..500 {
                    let mut g = lock.write();
                    g.0 += 1;
                    crate::yield_now();
                    g.1 += 1;
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..8)
        .map(|_| {
            let (lock, broken) = (lock.clone(), broken.clone());
            crate::spawn(move || {
                for _ in 0..500 {
                    let g = lock.read();
                    if g.0 != g.1 {
                        broken.fetch_add(1, Ordering::SeqCst);
                    }
                    drop(g);
                    crate::yield_now();
                }
            })
        })
        .collect();
    for h in writers.into_iter().chain(readers) {
        h.join().map_err(|_| String::from("a thread panicked"))?;
    }
    let (a, b) = *lock.read();
    let broken = broken.load(Ordering::SeqCst);
    ensure!(broken == 0, "{broken} reads saw a half-done write");
    ensure!(a == 2000 && b == 2000, "final value ({a}, {b})");
    Ok(())
}

/// Sixteen threads race into one `Once`; its closure runs exactly once and everyone returns
/// after it finished.
fn once_runs_once() -> Outcome {
    let once = Arc::new(Once::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..16)
        .map(|_| {
            let (once, runs) = (once.clone(), runs.clone());
            crate::spawn(move || {
                once.call_once(|| {
                    crate::yield_now();
                    runs.fetch_add(1, Ordering::SeqCst);
                });
                runs.load(Ordering::SeqCst)
            })
        })
        .collect();
    for h in handles {
        let seen = h.join().map_err(|_| String::from("a thread panicked"))?;
        ensure!(seen == 1, "a caller returned before the closure finished ({seen})");
    }
    ensure!(runs.load(Ordering::SeqCst) == 1, "closure ran {} times", runs.load(Ordering::SeqCst));
    Ok(())
}

crate::thread_local! {
    static TAG: Cell<usize> = Cell::new(usize::MAX);
}

/// Each thread stores its own tag in a thread-local and checks it after every switch (yields,
/// barrier waits, sleeps: chances to move to another vCPU); with more than one vCPU, threads
/// must actually have moved.
fn thread_locals_survive_migration() -> Outcome {
    const THREADS: usize = 8;
    /// Most extra rounds a thread runs while waiting for some thread to migrate.
    const MIGRATION_ROUNDS: usize = 1_000_000;
    static MOVED: AtomicBool = AtomicBool::new(false);
    MOVED.store(false, Ordering::Release);
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|tag| {
            let barrier = barrier.clone();
            crate::spawn(move || -> Result<usize, String> {
                if TAG.with(Cell::get) != usize::MAX {
                    return Err(String::from("a new thread saw another thread's value"));
                }
                TAG.with(|t| t.set(tag));
                let mut vcpus = 0u64;
                for round in 0..100 {
                    vcpus |= 1 << crate::current_vcpu().unwrap_or(0);
                    match round % 3 {
                        0 => crate::yield_now(),
                        1 => {
                            barrier.wait();
                        }
                        _ => crate::sleep(Duration::from_micros(50)),
                    }
                    let seen = TAG.with(Cell::get);
                    if seen != tag {
                        return Err(format!("thread {tag} found {seen} after a switch"));
                    }
                }
                // Where the threads ran is up to the host's speed for each vCPU: go on
                // (without the barrier) until one of them has run on a second vCPU, so the
                // check below never depends on luck — bounded, so a library that never
                // migrates fails instead of hanging.
                let mut round = 0;
                while crate::vcpu_count() > 1 && !MOVED.load(Ordering::Acquire) && round < MIGRATION_ROUNDS {
                    if vcpus.count_ones() > 1 {
                        MOVED.store(true, Ordering::Release);
                        break;
                    }
                    if round % 2 == 0 {
                        crate::yield_now();
                    } else {
                        crate::sleep(Duration::from_micros(50));
                    }
                    vcpus |= 1 << crate::current_vcpu().unwrap_or(0);
                    let seen = TAG.with(Cell::get);
                    if seen != tag {
                        return Err(format!("thread {tag} found {seen} after a switch"));
                    }
                    round += 1;
                }
                Ok(vcpus.count_ones() as usize)
            })
        })
        .collect();
    let mut moved = 0;
    for h in handles {
        if h.join().map_err(|_| String::from("a thread panicked"))?? > 1 {
            moved += 1;
        }
    }
    ensure!(TAG.with(Cell::get) == usize::MAX, "the checking thread's own value changed");
    ensure!(crate::vcpu_count() == 1 || moved > 0, "no thread ever ran on a second vCPU");
    Ok(())
}

/// 16 threads yield 2,000 times each (direct switches between them, and steals with more than
/// one vCPU), blocking on a mutex now and then; every thread checks after each switch that it is
/// still itself (`current()` and its thread-local) and that its callee-saved state survived,
/// and the shared count is exact.
fn yield_storm_keeps_identity() -> Outcome {
    const THREADS: usize = 16;
    const ROUNDS: usize = 2_000;
    let count = Arc::new(crate::Mutex::new(0usize));
    let handles: Vec<_> = (0..THREADS)
        .map(|tag| {
            let count = count.clone();
            crate::spawn(move || -> Result<(), String> {
                let me = crate::current().id();
                TAG.with(|t| t.set(tag));
                let mut acc = core::hint::black_box(tag as u64);
                for round in 0..ROUNDS {
                    acc = acc.wrapping_mul(6364136223846793005).wrapping_add(round as u64);
                    if round % 7 == 0 {
                        let mut g = count.lock();
                        *g += 1;
                        crate::yield_now(); // switch while holding it: others block on it
                    } else {
                        *count.lock() += 1;
                        crate::yield_now();
                    }
                    if crate::current().id() != me || TAG.with(Cell::get) != tag {
                        return Err(format!("thread {tag} is someone else after round {round}"));
                    }
                }
                let mut expect = tag as u64;
                for round in 0..ROUNDS {
                    expect = expect.wrapping_mul(6364136223846793005).wrapping_add(round as u64);
                }
                if acc != expect {
                    return Err(format!("thread {tag} lost its registers"));
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| String::from("a thread panicked"))??;
    }
    let total = *count.lock();
    ensure!(total == THREADS * ROUNDS, "count {total}");
    Ok(())
}

crate::thread_local! {
    static INLINE_TAG: Cell<u32> = Cell::new(0);
}

/// A child joined before it starts runs inline, on the joiner's stack (on one vCPU it always
/// is unless the joiner was stopped between the spawn and the join, which the vCPU's resume
/// counts show: checked by where its locals live). This one then blocks on a channel that another
/// thread fills only after the child has run, and must behave exactly as a thread: its own
/// `current()` and thread-locals before and after blocking, other threads run meanwhile (no
/// deadlock), and the joiner continues as itself afterwards. Then 200 nested spawn/joins.
fn inline_child_blocks_like_a_thread() -> Outcome {
    let joiner = crate::current().id();
    let marker = 0u8;
    let joiner_sp = core::hint::black_box(&marker) as *const u8 as usize;
    INLINE_TAG.with(|t| t.set(1));
    let (tx, rx) = mpsc::channel::<u64>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    // Resumes before the spawns and before the join: if any thread was resumed in between (on
    // Tsumugi a preemption, or a block in the kernel, can stop the joiner there), the child may
    // have started on its own and is not required to run inline.
    let resumes_before = crate::sched::resume_counts();
    let child = crate::spawn(move || -> Result<(u64, bool), String> {
        let me = crate::current().id();
        let here = 0u8;
        let sp = core::hint::black_box(&here) as *const u8 as usize;
        let on_joiner_stack = sp < joiner_sp && joiner_sp - sp < 64 * 1024;
        if me == joiner {
            return Err(String::from("the child runs as its joiner"));
        }
        if INLINE_TAG.with(Cell::get) != 0 {
            return Err(String::from("the child sees its joiner's thread-local"));
        }
        INLINE_TAG.with(|t| t.set(2));
        go_tx.send(()).map_err(|_| String::from("go"))?;
        let v = rx.recv().map_err(|_| String::from("the filler hung up"))?;
        if crate::current().id() != me || INLINE_TAG.with(Cell::get) != 2 {
            return Err(String::from("the child is someone else after blocking"));
        }
        Ok((v, on_joiner_stack))
    });
    let filler = crate::spawn(move || {
        go_rx.recv().ok();
        for _ in 0..10 {
            crate::yield_now();
        }
        tx.send(42).ok();
    });
    let undisturbed = crate::sched::resume_counts() == resumes_before;
    let (v, inline) = child.join().map_err(|_| String::from("the child panicked"))??;
    filler.join().map_err(|_| String::from("the filler panicked"))?;
    ensure!(v == 42, "the child received {v}");
    ensure!(
        crate::vcpu_count() > 1 || inline || !undisturbed,
        "on one vCPU, with no thread resumed between its spawn and its join, the child did not run inline at its join"
    );
    ensure!(crate::current().id() == joiner, "the joiner came back as someone else");
    ensure!(INLINE_TAG.with(Cell::get) == 1, "the joiner's thread-local changed");
    fn depth(n: u32) -> u32 {
        if n == 0 {
            return 0;
        }
        let me = crate::current().id();
        let r = crate::spawn(move || depth(n - 1)).join().unwrap_or(u32::MAX);
        if crate::current().id() != me {
            return u32::MAX;
        }
        r.saturating_add(1)
    }
    let d = depth(200);
    ensure!(d == 200, "nested spawn/join depth {d}");
    Ok(())
}

/// Children that their spawner does not join at once still run (a spawn only lists the child on
/// its vCPU; it becomes visible to the scheduler when the spawner gives up its vCPU): children
/// waited for through a channel (each exactly once; in any order, since a preemption can
/// requeue a child before it sends); a child joined by another thread
/// than its spawner; a detached child left behind by a thread that exits.
fn unjoined_children_still_run() -> Outcome {
    let (tx, rx) = mpsc::channel::<usize>();
    let handles: Vec<_> = (0..3)
        .map(|i| {
            let tx = tx.clone();
            crate::spawn(move || tx.send(i).ok())
        })
        .collect();
    let got: Vec<usize> = (0..3).map(|_| rx.recv().unwrap_or(usize::MAX)).collect();
    for h in handles {
        h.join().map_err(|_| String::from("a sender panicked"))?;
    }
    let mut sorted = got.clone();
    sorted.sort_unstable();
    ensure!(sorted == [0, 1, 2], "the children sent {got:?}");

    let first = crate::spawn(|| 7u32);
    let joiner = crate::spawn(move || first.join().unwrap_or(0) * 2);
    let v = joiner.join().map_err(|_| String::from("the other joiner panicked"))?;
    ensure!(v == 14, "a child joined by another thread gave {v}");

    let worker = crate::spawn(move || {
        drop(crate::spawn(move || tx.send(99).ok()));
    });
    worker.join().map_err(|_| String::from("the worker panicked"))?;
    let v = rx.recv().map_err(|_| String::from("the detached child never ran"))?;
    ensure!(v == 99, "the detached child sent {v}");
    Ok(())
}

/// `join(a, b)` (fork-join with lazy task records): results in place; nested joins 200 deep; a
/// parallel `fib` over every vCPU; `a` blocking on what `b` does (so `b` must become a thread
/// when `a` blocks: no deadlock, on one vCPU too), also while other threads keep the vCPU busy
/// (`b` must not wait for them to finish); `b` blocking while run inline, on a thread
/// that another thread fills; joins mixed with spawned children that are joined later.
fn join_forks_lazily() -> Outcome {
    let (x, y) = crate::join(|| 1u32, || 2u64);
    ensure!((x, y) == (1, 2), "join gave {x}, {y}");
    fn depth(n: u32) -> u32 {
        if n == 0 {
            return 0;
        }
        let (a, b) = crate::join(|| 1u32, move || depth(n - 1));
        a + b
    }
    let d = depth(200);
    ensure!(d == 200, "nested join depth {d}");
    fn fib(n: u64) -> u64 {
        if n < 2 {
            return n;
        }
        let (a, b) = crate::Builder::new().stack_size(16 * 1024).join(|| fib(n - 2), move || fib(n - 1));
        a + b
    }
    let f = fib(18);
    ensure!(f == 2584, "fib(18) by join gave {f}");

    // `a` waits for `b`.
    let (tx, rx) = mpsc::channel::<u32>();
    let (got, sent) = crate::join(move || rx.recv().unwrap_or(0), move || tx.send(7).is_ok());
    ensure!(got == 7 && sent, "a waiting for b got {got} (sent: {sent})");
    // Both wait for each other's messages, `a` first.
    let (to_b, from_a) = mpsc::channel::<u32>();
    let (to_a, from_b) = mpsc::channel::<u32>();
    let (ra, rb) = crate::join(
        move || {
            to_b.send(1).ok();
            from_b.recv().unwrap_or(0)
        },
        move || {
            let v = from_a.recv().unwrap_or(0);
            to_a.send(v + 1).ok();
            v
        },
    );
    ensure!((ra, rb) == (2, 1), "a and b exchanging messages gave {ra}, {rb}");

    // `a` waits for `b` while two other threads keep the vCPU busy blocking on each other: a
    // block leaves the joiner's records unpublished while another thread is ready, but only for
    // a bounded number of other threads' blocks (then `b` becomes a thread and runs), not until
    // the vCPU runs dry. On one vCPU the two stop after `ROUNDS` rounds, so a `b` that waited
    // for them shows as `seen == ROUNDS`; on several they run until `b` has run (how many rounds
    // they make meanwhile depends on where and when each vCPU runs), and a `b` that never ran
    // would hang the check.
    let rounds_max = if crate::vcpu_count() == 1 { 2_000 } else { usize::MAX };
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicUsize::new(0));
    let (ping_tx, ping_rx) = mpsc::channel::<()>();
    let (pong_tx, pong_rx) = mpsc::channel::<()>();
    let (stop_p, rounds_p) = (stop.clone(), rounds.clone());
    let pinger = crate::spawn(move || {
        while !stop_p.load(Ordering::Relaxed) && rounds_p.load(Ordering::Relaxed) < rounds_max {
            if ping_tx.send(()).is_err() || pong_rx.recv().is_err() {
                break;
            }
            rounds_p.fetch_add(1, Ordering::Relaxed);
        }
    });
    let ponger = crate::spawn(move || {
        for () in ping_rx.iter() {
            if pong_tx.send(()).is_err() {
                break;
            }
        }
    });
    let (tx, rx) = mpsc::channel::<usize>();
    let rounds_b = rounds.clone();
    let (seen, sent) = crate::join(
        move || rx.recv().unwrap_or(usize::MAX),
        move || tx.send(rounds_b.load(Ordering::Relaxed)).is_ok(),
    );
    stop.store(true, Ordering::Relaxed);
    pinger.join().map_err(|_| String::from("the pinger panicked"))?;
    ponger.join().map_err(|_| String::from("the ponger panicked"))?;
    ensure!(sent && seen < rounds_max, "b ran only after {seen} of {rounds_max} rounds of two busy threads (sent: {sent})");

    // `b` blocks (inline or not) on a channel another thread fills.
    let (fill_tx, fill_rx) = mpsc::channel::<u32>();
    let filler = crate::spawn(move || {
        for _ in 0..5 {
            crate::yield_now();
        }
        fill_tx.send(11).ok();
    });
    let me = crate::current().id();
    let (a, b) = crate::join(|| crate::current().id(), move || fill_rx.recv().unwrap_or(0));
    filler.join().map_err(|_| String::from("the filler panicked"))?;
    ensure!(b == 11, "b blocking on the filler got {b}");
    ensure!(a == me && crate::current().id() == me, "the joiner is someone else after join");

    // `a` spawns a child and joins it at once (run inline, on the joiner's stack, as itself),
    // and the child waits for `b`: `b` is the joiner's record, not the blocking child's, and
    // must still become a thread (the joiner's records go to its vCPU's list before the child
    // runs inline), also on one vCPU.
    let (b_tx, b_rx) = mpsc::channel::<u32>();
    let (got, sent) = crate::join(
        move || crate::spawn(move || b_rx.recv().unwrap_or(0)).join().unwrap_or(0),
        move || b_tx.send(13).is_ok(),
    );
    ensure!(got == 13 && sent, "a child joined inline waiting for its joiner's b got {got} (sent: {sent})");

    // Spawned children left unjoined inside `a`, joined after the join.
    let mut handles = Vec::new();
    let (n, m) = crate::join(
        || {
            for i in 0..4u64 {
                handles.push(crate::spawn(move || i * 10));
            }
            3u64
        },
        || 4u64,
    );
    let sum: u64 = handles.into_iter().map(|h| h.join().unwrap_or(1000)).sum();
    ensure!(n + m == 7 && sum == 60, "join beside spawned children gave {n}, {m}, {sum}");
    Ok(())
}

/// Six floating-point values evolved in a loop, kept live across a switch at every step
/// (`switch(step)`): across calls a compiler keeps them in the ABI's callee-saved FP registers
/// where it has some (aarch64 `d8`..`d15`, riscv64 `fs0`..`fs11`), so a switch that does not
/// give each thread its own (a WINDOW switch that skips them, a FULL resume that loses the FP
/// state) changes the results.
#[inline(never)]
fn fp_walk(seed: f64, steps: usize, switch: &mut dyn FnMut(usize)) -> [f64; 6] {
    let (mut a, mut b, mut c) = (seed, seed * 1.5, seed + 0.25);
    let (mut d, mut e, mut f) = (seed * seed, 1.0 / seed, seed - 3.0);
    let k = core::hint::black_box(1.000_1f64);
    for step in 0..steps {
        switch(step);
        a = a * k + f * 0.5;
        b = b / k - a * 0.25;
        c = c * 0.999 + b * 0.125;
        d = d * k - c;
        e = e + d * 0.001;
        f = f * 0.5 + e;
    }
    [a, b, c, d, e, f]
}

/// Threads compute with floating-point values held across yields, barrier waits and sleeps
/// (switches through the window, and through the kernel's full save), interleaved with each
/// other, and must get exactly the bits they get without switching.
fn fp_values_survive_switches() -> Outcome {
    const THREADS: usize = 8;
    const STEPS: usize = 120;
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let barrier = barrier.clone();
            crate::spawn(move || -> Result<(), String> {
                let seed = core::hint::black_box(1.0 + i as f64 * 0.37);
                let quiet = fp_walk(seed, STEPS, &mut |_| {});
                let switched = fp_walk(seed, STEPS, &mut |step| match step % 8 {
                    3 => {
                        barrier.wait();
                    }
                    7 => crate::sleep(Duration::from_micros(30)),
                    _ => crate::yield_now(),
                });
                let same = quiet.iter().zip(&switched).all(|(q, s)| q.to_bits() == s.to_bits());
                if !same {
                    return Err(format!("thread {i}: {switched:?} with switches, {quiet:?} without"));
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| String::from("a thread panicked"))??;
    }
    Ok(())
}

/// Threads started together with different sleep lengths wake in order of their lengths, each
/// after at least its length.
fn sleep_ordering() -> Outcome {
    // What the library promises: no sleep ends before its deadline, and sleepers are released
    // in deadline order. With one vCPU the released threads run in that order too (the vCPU's
    // queue is FIFO), so the order in which they record themselves is checked there; with
    // several vCPUs two released threads may run on different vCPUs, and which one records
    // first is up to how fast the host runs each vCPU, so only the deadlines are checked.
    // The deadlines are fixed before any thread starts (one base, not a clock reading per
    // thread): a host that stalls a thread between its reading and its sleep must not reorder
    // the deadlines themselves (a per-thread base did, under load: [80, 40, ...]). A thread
    // whose deadline passed before it ran returns at once — ahead of every later deadline,
    // since it was queued before their sleepers were released.
    const MILLIS: [u64; 5] = [200, 40, 160, 80, 120];
    let order = Arc::new(Mutex::new(Vec::new()));
    let base = crate::platform::now_nanos();
    let handles: Vec<_> = MILLIS
        .iter()
        .map(|&ms| {
            let order = order.clone();
            crate::spawn(move || {
                crate::platform::sleep_current_until(base + ms * 1_000_000);
                let woke = crate::platform::now_nanos();
                order.lock().push(ms);
                woke
            })
        })
        .collect();
    for (h, ms) in handles.into_iter().zip(MILLIS) {
        let woke = h.join().map_err(|_| String::from("a thread panicked"))?;
        ensure!(woke >= base + ms * 1_000_000, "a sleep until {ms} ms woke at {} ns", woke - base);
    }
    if crate::vcpu_count() > 1 {
        ensure!(order.lock().len() == MILLIS.len(), "not every sleeper recorded itself");
        return Ok(());
    }
    let order = order.lock().clone();
    let mut sorted = order.clone();
    sorted.sort_unstable();
    ensure!(order == sorted, "woke in order {order:?}");
    Ok(())
}

/// A long time-out: a wait that a notification ends must never reach it, however slowly the
/// host runs (no check here depends on timing).
const NEVER: Duration = Duration::from_secs(600);

/// `now_nanos` readings, for "no time-out before its time".
fn nanos_since(begin: u64) -> u64 {
    crate::platform::now_nanos() - begin
}

/// `Condvar::wait_timeout` times out without a notification (not before its time, the mutex
/// re-taken), returns without time-out when notified, and `wait_timeout_while` stops on the
/// condition; a zero time-out still releases and re-takes the mutex.
fn condvar_wait_timeout() -> Outcome {
    let pair = Arc::new((Mutex::new(0u32), Condvar::new()));
    let (lock, cv) = &*pair;
    let begin = crate::platform::now_nanos();
    let (guard, result) = cv.wait_timeout(lock.lock(), Duration::from_millis(20));
    ensure!(result.timed_out(), "an unnotified wait did not time out");
    ensure!(nanos_since(begin) >= 20_000_000, "timed out after {} ns of 20 ms", nanos_since(begin));
    ensure!(lock.is_locked(), "the mutex was not re-taken");
    drop(guard);
    let (guard, result) = cv.wait_timeout(lock.lock(), Duration::ZERO);
    ensure!(result.timed_out() && lock.is_locked(), "zero time-out");
    drop(guard);
    // Notified: many times over, so a lost or late cancel would show.
    for round in 1..=50u32 {
        let p = pair.clone();
        let notifier = crate::spawn(move || {
            *p.0.lock() = round;
            p.1.notify_one();
        });
        let (guard, result) = cv.wait_timeout_while(lock.lock(), NEVER, |value| *value != round);
        ensure!(!result.timed_out() && *guard == round, "round {round}: timed out {}, value {}", result.timed_out(), *guard);
        drop(guard);
        notifier.join().map_err(|_| String::from("notifier panicked"))?;
    }
    // Timed and untimed waiters together: notify_all wakes every one, the cancelled ones are
    // off the list (a later notify_one does not pick a stale node).
    let (guard, result) = cv.wait_timeout_while(lock.lock(), Duration::from_millis(5), |value| *value != 0);
    ensure!(result.timed_out() && *guard == 50, "wait_timeout_while: timed out {}, value {}", result.timed_out(), *guard);
    drop(guard);
    cv.notify_one();
    let waiters: Vec<_> = (0..4)
        .map(|i| {
            let p = pair.clone();
            crate::spawn(move || {
                let guard = p.0.lock();
                if i % 2 == 0 {
                    p.1.wait_timeout_while(guard, NEVER, |value| *value != 99).1.timed_out()
                } else {
                    drop(p.1.wait_while(guard, |value| *value != 99));
                    false
                }
            })
        })
        .collect();
    crate::yield_now();
    *lock.lock() = 99;
    cv.notify_all();
    for w in waiters {
        ensure!(!w.join().map_err(|_| String::from("waiter panicked"))?, "a notified timed waiter timed out");
    }
    Ok(())
}

/// `recv_timeout` and `send_timeout`: time-out (not early, the value given back), success,
/// disconnection, and a rendezvous between a timed sender and a timed receiver.
fn channel_timeouts() -> Outcome {
    use mpsc::{RecvTimeoutError, SendTimeoutError};
    let (tx, rx) = mpsc::sync_channel::<u32>(1);
    let begin = crate::platform::now_nanos();
    ensure!(rx.recv_timeout(Duration::from_millis(10)) == Err(RecvTimeoutError::Timeout), "empty recv_timeout");
    ensure!(nanos_since(begin) >= 10_000_000, "recv timed out early");
    ensure!(tx.send_timeout(1, Duration::from_millis(10)).is_ok(), "send_timeout with room");
    let begin = crate::platform::now_nanos();
    ensure!(matches!(tx.send_timeout(2, Duration::from_millis(10)), Err(SendTimeoutError::Timeout(2))), "full send_timeout");
    ensure!(nanos_since(begin) >= 10_000_000, "send timed out early");
    ensure!(rx.recv_timeout(NEVER) == Ok(1), "buffered value");
    // A waiting timed receiver gets a value sent later.
    let (tx2, rx2) = mpsc::channel::<u32>();
    let receiver = crate::spawn(move || rx2.recv_timeout(NEVER));
    crate::yield_now();
    tx2.send(7).map_err(|_| String::from("receiver gone"))?;
    ensure!(receiver.join().map_err(|_| String::from("receiver panicked"))? == Ok(7), "late value");
    // Rendezvous: a timed sender meets a timed receiver, many times.
    let (tx0, rx0) = mpmc::sync_channel::<u32>(0);
    let receiver = crate::spawn(move || (0..100).map(|_| rx0.recv_timeout(NEVER)).filter(Result::is_ok).count());
    for i in 0..100 {
        ensure!(tx0.send_timeout(i, NEVER).is_ok(), "rendezvous send {i}");
    }
    ensure!(receiver.join().map_err(|_| String::from("receiver panicked"))? == 100, "rendezvous receives");
    ensure!(matches!(tx0.send_timeout(5, NEVER), Err(SendTimeoutError::Disconnected(5))), "send to a gone receiver");
    // A timed receiver waiting when the last sender goes.
    let (tx3, rx3) = mpsc::channel::<u32>();
    let receiver = crate::spawn(move || rx3.recv_timeout(NEVER));
    crate::yield_now();
    drop(tx3);
    ensure!(
        receiver.join().map_err(|_| String::from("receiver panicked"))? == Err(RecvTimeoutError::Disconnected),
        "disconnection while waiting"
    );
    drop(tx);
    ensure!(rx.recv_timeout(NEVER) == Err(RecvTimeoutError::Disconnected), "recv_timeout after the senders");
    Ok(())
}

/// `try_iter`, `IntoIterator` (owning and by reference) for both receivers, and mpmc's std names.
fn channel_iterators_and_names() -> Outcome {
    let (tx, rx) = mpsc::channel();
    for i in 0..3 {
        tx.send(i).map_err(|_| String::from("send"))?;
    }
    ensure!(rx.try_iter().collect::<Vec<_>>() == [0, 1, 2], "try_iter");
    ensure!(rx.try_iter().next().is_none(), "try_iter of an empty channel waited or invented a value");
    tx.send(3).map_err(|_| String::from("send"))?;
    drop(tx);
    let mut by_ref = Vec::new();
    for v in &rx {
        by_ref.push(v);
    }
    ensure!(by_ref == [3], "for v in &rx: {by_ref:?}");
    let (tx, rx) = mpmc::channel();
    let (stx, srx) = mpmc::sync_channel(2);
    tx.send(1).map_err(|_| String::from("send"))?;
    stx.send(2).map_err(|_| String::from("send"))?;
    drop((tx, stx));
    let owned: Vec<i32> = rx.into_iter().chain(&srx).collect();
    ensure!(owned == [1, 2], "mpmc iterators: {owned:?}");
    Ok(())
}

/// `join`'s `b` borrows the caller's frame (it need not be `'static`): mutably, while `a`
/// blocks until `b` has run (so `b` is a promoted thread, running on its own stack, maybe on
/// another vCPU, and writing into the joiner's frame); returning a reference into it; and a
/// recursive sum over a borrowed slice whose leaves yield, so records are promoted and run
/// anywhere while their joiners wait.
/// A forked `b` that becomes a thread (its `a` waits for it, so it cannot run inline) gets the
/// settings of its join: the default stack for a plain `join`, a `Builder`'s stack size — one
/// the record's promote function knows by its type (a power of two) or one the record carries
/// (any other) — and a `Builder`'s name with its size.
fn join_promoted_thread_gets_its_settings() -> Outcome {
    // `$call` joins `$a`, which waits for `$b`, and `$b`, which reports the stack size and name
    // of the thread it runs on.
    macro_rules! promoted {
        ($a:ident, $b:ident => $call:expr) => {{
            let (tx, rx) = mpsc::channel::<()>();
            let $a = move || rx.recv().is_ok();
            let $b = move || {
                // SAFETY: a user thread's own ThMB, live while it runs.
                let size = unsafe { (*crate::platform::ltn()).stack_size };
                let name = crate::current().name().map(String::from);
                let sent = tx.send(()).is_ok();
                (sent, size, name)
            };
            $call
        }};
    }
    let builder = |size: usize, name: Option<&str>| {
        let builder = crate::Builder::new().stack_size(size);
        match name {
            Some(name) => builder.name(String::from(name)),
            None => builder,
        }
    };
    let results = [
        ("join", crate::sched::DEFAULT_STACK_SIZE, None, promoted!(a, b => crate::join(a, b))),
        ("Builder::join, 16 KiB", 16 * 1024, None, promoted!(a, b => builder(16 * 1024, None).join(a, b))),
        ("Builder::join, 48 KiB", 48 * 1024, None, promoted!(a, b => builder(48 * 1024, None).join(a, b))),
        ("Builder::join, named, 32 KiB", 32 * 1024, Some("forked"), promoted!(a, b => builder(32 * 1024, Some("forked")).join(a, b))),
    ];
    for (what, size, name, (waited, (sent, got_size, got_name))) in results {
        ensure!(waited && sent, "{what}: a's wait for b failed");
        ensure!(
            got_size == size && got_name.as_deref() == name,
            "{what}: b ran with a {got_size}-byte stack named {got_name:?}, not {size} and {name:?}"
        );
    }
    Ok(())
}

fn join_borrows_the_callers_frame() -> Outcome {
    let mut filled = [0u64; 32];
    let (tx, rx) = mpsc::channel::<()>();
    let (got, ()) = crate::join(
        || rx.recv().is_ok(),
        || {
            for (i, x) in filled.iter_mut().enumerate() {
                *x = 3 * i as u64;
            }
            tx.send(()).ok();
        },
    );
    let total: u64 = filled.iter().sum();
    ensure!(got && total == 3 * 31 * 32 / 2, "b writing the caller's array as a thread: sum {total} (a got the signal: {got})");

    let table = [5u64, 7, 11, 13];
    let (first, third) = crate::join(|| &table[0], || &table[2]);
    ensure!((*first, *third) == (5, 11), "references into the caller's frame gave {first}, {third}");

    fn sum(v: &[u64]) -> u64 {
        if v.len() <= 8 {
            crate::yield_now();
            return v.iter().sum();
        }
        let (left, right) = v.split_at(v.len() / 2);
        let (a, b) = crate::join(|| sum(left), || sum(right));
        a + b
    }
    let v: Vec<u64> = (1..=1_000).collect();
    let s = sum(&v);
    ensure!(s == 500_500, "sum over a borrowed slice by join gave {s}");
    Ok(())
}

/// Forks whose leaves each wait once for another thread (StackThreads' suspend-everywhere): a
/// leaf's block leaves its joiner's task records unpublished, and the woken joiner takes them
/// back (the whole list at its first join). Then the case where that must not happen: a
/// spawned child joined inline runs on its joiner's stack while the joiner has a fork pending,
/// and blocks — the unpublished list then holds the joiner's record under the child's, and the
/// child must leave it there for the joiner (taken by the child, it would be lost with it and
/// the joiner's join would never end).
fn suspended_forks_come_back() -> Outcome {
    fn wait_once(server: &mpsc::Sender<mpsc::Sender<()>>) -> bool {
        let (reply, answer) = mpsc::channel();
        server.send(reply).is_ok() && answer.recv().is_ok()
    }
    fn sum(server: &mpsc::Sender<mpsc::Sender<()>>, lo: u64, hi: u64) -> u64 {
        if hi - lo == 1 {
            return if wait_once(server) { lo } else { 0 };
        }
        let mid = lo + (hi - lo) / 2;
        let (a, b) = crate::join(|| sum(server, mid, hi), || sum(server, lo, mid));
        a + b
    }
    let (server, requests) = mpsc::channel::<mpsc::Sender<()>>();
    let served = crate::spawn(move || {
        let mut n = 0u64;
        for reply in requests.iter() {
            reply.send(()).ok();
            n += 1;
        }
        n
    });
    let total = sum(&server, 0, 300);
    ensure!(total == 299 * 300 / 2, "suspend-everywhere sum gave {total}");

    let child_server = server.clone();
    let (inline, pending) = crate::join(
        || {
            let child = crate::spawn(move || {
                let woke = wait_once(&child_server);
                let (x, y) = crate::join(|| sum(&child_server, 0, 4), || sum(&child_server, 4, 8));
                if woke { x + y } else { 0 }
            });
            child.join().unwrap_or(0)
        },
        || {
            let woke = wait_once(&server);
            if woke { 40 } else { 0 }
        },
    );
    ensure!((inline, pending) == (28, 40), "inline child with a pending fork: {inline}, {pending}");
    drop(server);
    let n = served.join().map_err(|_| String::from("server panicked"))?;
    ensure!(n == 300 + 1 + 8 + 1, "the server answered {n} waits");
    Ok(())
}

/// `scope`: threads borrow the caller's data (one of them mutably), results come back through
/// their handles, and the scope waits for the ones not joined.
fn scoped_threads_borrow() -> Outcome {
    let words = ["a", "bb", "ccc"];
    let mut tally = 0usize;
    let finished = AtomicUsize::new(0);
    let lengths = crate::scope(|s| {
        let handles: Vec<_> = words.iter().map(|w| s.spawn(|| w.len())).collect();
        s.spawn(|| {
            crate::yield_now();
            finished.fetch_add(1, Ordering::SeqCst);
        });
        s.spawn(|| tally += 10);
        handles.into_iter().map(|h| h.join().unwrap_or(0)).collect::<Vec<_>>()
    });
    ensure!(lengths == [1, 2, 3], "lengths {lengths:?}");
    ensure!(finished.load(Ordering::SeqCst) == 1 && tally == 10, "the scope returned before its threads");
    Ok(())
}

/// Accessors and guard maps of `Mutex`, `try_lock`'s error, and the std traits.
fn lock_accessors_and_guards() -> Outcome {
    fn unwind_safe<T: core::panic::UnwindSafe + core::panic::RefUnwindSafe>() {}
    unwind_safe::<Mutex<Cell<u8>>>();
    unwind_safe::<RwLock<Cell<u8>>>();
    unwind_safe::<Condvar>();
    unwind_safe::<Once>();
    unwind_safe::<Barrier>();
    let m = Mutex::new((1u32, String::from("x")));
    ensure!(m.get_cloned() == (1, String::from("x")), "get_cloned");
    m.set((2, String::from("y")));
    ensure!(m.replace((3, String::new())) == (2, String::from("y")), "replace");
    ensure!(m.with_mut(|v| core::mem::replace(&mut v.0, 4)) == 3, "with_mut");
    {
        let mut part = MutexGuard::map(m.lock(), |v| &mut v.1);
        part.push('z');
        ensure!(matches!(m.try_lock(), Err(TryLockError::WouldBlock)), "a mapped guard does not hold the lock");
    }
    ensure!(m.try_lock().is_ok(), "the mapped guard did not release");
    ensure!(MutexGuard::filter_map(m.lock(), |_| None::<&mut u8>).is_err(), "filter_map None");
    ensure!(m.get_cloned() == (4, String::from("z")), "after the maps");
    // A contended lock released through a mapped guard hands off to the waiter.
    let shared = Arc::new(Mutex::new(0u32));
    let guard = MutexGuard::map(shared.lock(), |v| v);
    let s = shared.clone();
    let waiter = crate::spawn(move || s.with_mut(|v| *v += 1));
    crate::yield_now();
    drop(guard);
    waiter.join().map_err(|_| String::from("waiter panicked"))?;
    ensure!(shared.get_cloned() == 1, "hand-off through a mapped guard");
    Ok(())
}

/// `RwLock` accessors, downgrade (readers get in, writers do not), guard maps, and a read
/// guard that is covariant in `T`.
fn rwlock_downgrade_and_map() -> Outcome {
    fn covariant<'a>(guard: RwLockReadGuard<'static, &'static str>) -> RwLockReadGuard<'a, &'a str> {
        guard
    }
    static NAME: RwLock<&str> = RwLock::new("name");
    ensure!(*covariant(NAME.read()) == "name", "covariant guard");
    let lock = Arc::new(RwLock::new(vec![1u32]));
    ensure!(lock.get_cloned() == [1], "get_cloned");
    lock.set(vec![2]);
    ensure!(lock.replace(vec![3, 4]) == [2], "replace");
    ensure!(lock.with(|v| v.len()) == 2 && lock.with_mut(|v| v.pop()) == Some(4), "with / with_mut");
    let mut w = lock.write();
    w.push(5);
    // A reader queues (or has not run yet) while we write: the downgrade lets it in. Only a
    // reader: a writer queued ahead of it would keep it out until the downgraded guard goes
    // (waiting writers come first, as with std's), and joining the reader before dropping the
    // guard would then never return — at 4 vCPUs the two used to queue in either order.
    let l1 = lock.clone();
    let reader = crate::spawn(move || l1.read().clone());
    crate::yield_now();
    let r = RwLockWriteGuard::downgrade(w);
    ensure!(*r == [3, 5], "downgraded value {:?}", *r);
    ensure!(lock.try_write().is_err(), "a writer got in beside a downgraded guard");
    let seen = reader.join().map_err(|_| String::from("reader panicked"))?;
    ensure!(seen == [3, 5], "the reader saw {seen:?}");
    // A writer waits for the downgraded guard and gets in once it is dropped.
    let l2 = lock.clone();
    let writer = crate::spawn(move || l2.write().push(6));
    crate::yield_now();
    ensure!(*r == [3, 5], "a writer got in beside a downgraded guard");
    drop(r);
    writer.join().map_err(|_| String::from("writer panicked"))?;
    ensure!(lock.get_cloned() == [3, 5, 6], "after the writer");
    ensure!(*RwLockReadGuard::map(lock.read(), |v| &v[2]) == 6, "read map");
    *RwLockWriteGuard::map(lock.write(), |v| &mut v[0]) = 0;
    ensure!(RwLockReadGuard::filter_map(lock.read(), |v| v.get(9)).is_err(), "read filter_map None");
    ensure!(lock.try_write().is_ok() && lock.get_cloned() == [0, 5, 6], "after the maps");
    Ok(())
}

/// `call_once_force` sees an unpoisoned state, and `wait` returns once a call completed.
fn once_force_and_wait() -> Outcome {
    let once = Arc::new(Once::new());
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let o = once.clone();
            crate::spawn(move || {
                o.wait();
                o.is_completed()
            })
        })
        .collect();
    crate::yield_now();
    let mut ran = 0;
    once.call_once_force(|state| {
        ran += usize::from(!state.is_poisoned());
    });
    once.call_once_force(|_| ran += 10);
    ensure!(ran == 1, "ran {ran}");
    for w in waiters {
        ensure!(w.join().map_err(|_| String::from("waiter panicked"))?, "wait returned before completion");
    }
    once.wait();
    Ok(())
}

crate::thread_local! {
    static CELL: Cell<u32> = const { Cell::new(5) };
    static LIST: core::cell::RefCell<Vec<u32>> = core::cell::RefCell::new(Vec::new());
}

/// `LocalKey`'s `Cell`/`RefCell` accessors, per user thread, and the `const { }` initialiser.
fn local_key_accessors() -> Outcome {
    let child = crate::spawn(|| {
        CELL.set(1);
        LIST.with_borrow_mut(|l| l.push(1));
        (CELL.get(), LIST.take())
    });
    ensure!(CELL.get() == 5, "const initialiser");
    CELL.set(6);
    ensure!(CELL.replace(7) == 6 && CELL.take() == 7 && CELL.get() == 0, "Cell accessors");
    LIST.set(vec![2]);
    ensure!(LIST.with_borrow(|l| l.clone()) == [2] && LIST.replace(vec![]) == [2], "RefCell accessors");
    ensure!(CELL.try_with(|c| c.get()) == Ok(0), "try_with");
    let (cell, list) = child.join().map_err(|_| String::from("child panicked"))?;
    ensure!(cell == 1 && list == [1], "the child's values: {cell}, {list:?}");
    Ok(())
}

/// Drops counted by [`reused_threads_start_clean`].
static DROPS: AtomicUsize = AtomicUsize::new(0);

/// A thread-local value that counts its drop.
struct CountsDrop(u32);

impl Drop for CountsDrop {
    fn drop(&mut self) {
        DROPS.fetch_add(1, Ordering::SeqCst);
    }
}

crate::thread_local! {
    static COUNTED: core::cell::RefCell<CountsDrop> = core::cell::RefCell::new(CountsDrop(0));
}

/// A named child with a thread-local, joined (inline when it has not started: its ThMB goes
/// straight back to the vCPU's pool), then plain children, which get that ThMB again: the
/// value's destructor ran once, and the new threads see no name and a fresh value.
fn reused_threads_start_clean() -> Outcome {
    let before = DROPS.load(Ordering::SeqCst);
    for round in 0..3u32 {
        let named = crate::Builder::new().name(format!("named-{round}")).spawn(move || {
            COUNTED.with_borrow_mut(|c| c.0 = round + 1);
            (crate::current().name().map(String::from), COUNTED.with_borrow(|c| c.0))
        });
        let (name, value) = named.join().map_err(|_| String::from("named child panicked"))?;
        ensure!(name.as_deref() == Some(format!("named-{round}").as_str()) && value == round + 1, "named child saw {name:?}, {value}");
        // This round's named child and the earlier rounds' two children each dropped one.
        let expected = before + 2 * round as usize + 1;
        ensure!(DROPS.load(Ordering::SeqCst) == expected, "the joined child's thread-local was not dropped exactly once");
        let plain = crate::spawn(|| (crate::current().name().map(String::from), COUNTED.with_borrow(|c| c.0)));
        let (name, value) = plain.join().map_err(|_| String::from("plain child panicked"))?;
        ensure!(name.is_none() && value == 0, "a reused thread saw the old name or value: {name:?}, {value}");
    }
    // Each plain child made a fresh value too, dropped at its end.
    ensure!(DROPS.load(Ordering::SeqCst) == before + 6, "thread-local drops: {}", DROPS.load(Ordering::SeqCst) - before);
    Ok(())
}

/// `sleep_until` does not return before its deadline (and at once for a past one);
/// `available_parallelism` is the runtime's vCPU count.
fn sleep_until_and_parallelism() -> Outcome {
    let deadline = Instant::now() + Duration::from_millis(15);
    crate::sleep_until(deadline);
    ensure!(Instant::now() >= deadline, "woke before the deadline");
    crate::sleep_until(deadline); // past: returns at once
    let n = crate::available_parallelism().map_err(|e| format!("{e:?}"))?.get();
    ensure!(n == crate::vcpu_count(), "available_parallelism {n} with {} vCPUs", crate::vcpu_count());
    Ok(())
}

/// Two rounds of 1,400 threads alive at once (more than a vCPU's pool keeps, 1,024, and the
/// shared list's hosted bound, 256), each round joined. Where the platform cannot take a stack
/// back (Tsumugi), every stack freed in the first round must serve the second: on one vCPU the
/// second round makes no stack at all. (On several vCPUs a stack may sit in another vCPU's
/// pool; hosted, stacks beyond the bound are unmapped and made again: both only run.)
fn freed_stacks_are_used_again() -> Outcome {
    use crate::sched::STACKS_MADE;
    const N: usize = 1400;
    let round = || -> Result<usize, String> {
        let barrier = Arc::new(crate::Barrier::new(N + 1));
        let threads: Vec<_> = (0..N)
            .map(|i| {
                let barrier = barrier.clone();
                crate::spawn(move || {
                    barrier.wait();
                    i
                })
            })
            .collect();
        barrier.wait(); // all N alive, each on its own stack
        let mut sum = 0;
        for t in threads {
            sum += t.join().map_err(|_| String::from("a thread panicked"))?;
        }
        ensure!(sum == N * (N - 1) / 2, "results sum to {sum}");
        Ok(STACKS_MADE.load(Ordering::Relaxed))
    };
    let after_first = round()?;
    let after_second = round()?;
    if !crate::platform::FREES_STACKS && crate::vcpu_count() == 1 {
        ensure!(
            after_second == after_first,
            "the second round made {} new stacks: stacks freed in the first were lost",
            after_second - after_first
        );
    }
    Ok(())
}
