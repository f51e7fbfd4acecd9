//! Signals within a Kernel-Notification program (issue 16 part 3): bad numbers and targets are
//! refused; signals sent to a running user thread run the registered handler once each, with
//! that thread's id; a signal sent to a thread asleep in the kernel runs the handler while the
//! thread sleeps on (the kernel says it was asleep); a flood is taken or refused (`EAGAIN`)
//! signal by signal, the handler running once per taken one; signals to the program reach the handler
//! with no thread; an ignored number without a handler changes nothing; and a number whose
//! default action ends the program, sent with no handler registered, ends it with status
//! 128 + n (the suite checks 140 for USER2).
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use core::time::Duration;
use libuthread::signal::{self, Signal, CHILD, KILL, MAX, USER1, USER2};
use libuthread::{println, sys, Errno};
use tsumugi_abi::signal::scope;

/// Signals sent to the running thread.
const SENDS: usize = 10;
/// Signals of the flood.
const FLOOD: usize = 1000;

/// Handler runs.
static RAN: AtomicUsize = AtomicUsize::new(0);
/// Runs whose `thread` was the one expected (`EXPECTED`; 0: none, a program-wide signal).
static MATCHED: AtomicUsize = AtomicUsize::new(0);
static EXPECTED: AtomicUsize = AtomicUsize::new(0);
static STOP: AtomicBool = AtomicBool::new(false);
static WOKE: AtomicBool = AtomicBool::new(false);

fn on_user1(s: Signal) {
    let want = EXPECTED.load(Ordering::SeqCst);
    if s.number == USER1 && s.thread.map_or(0, |t| t.as_usize()) == want {
        MATCHED.fetch_add(1, Ordering::SeqCst);
    }
    RAN.fetch_add(1, Ordering::SeqCst);
}

/// Sends until the ring takes it; the kernel's answer (asleep or not).
fn send(t: libuthread::ThreadId) -> Result<bool, Option<Errno>> {
    loop {
        match signal::send(t, USER1) {
            Err(Some(Errno::Again)) => libuthread::yield_now(),
            r => return r,
        }
    }
}

/// Waits (yielding; the suite's time limit catches a hang) until `n` handlers ran.
fn until_ran(n: usize) {
    while RAN.load(Ordering::SeqCst) < n {
        libuthread::yield_now();
    }
}

fn main() -> i32 {
    libuthread::run(2, || {
        let mut ok = true;
        let mut expect = |what: &str, got: Result<usize, Option<Errno>>, want: Result<usize, Option<Errno>>| {
            if got != want {
                println!("signal_self: FAILED: {what}: {got:?}, expected {want:?}");
                ok = false;
            }
        };
        let me = libuthread::current().id().as_usize();
        expect("number 0", sys::signal(me, 0, scope::UTHREAD), Err(Some(Errno::Inval)));
        expect("number MAX + 1", sys::signal(me, MAX + 1, scope::UTHREAD), Err(Some(Errno::Inval)));
        expect("number usize::MAX", sys::signal(me, usize::MAX, scope::PROGRAM), Err(Some(Errno::Inval)));
        expect("scope 3", sys::signal(me, USER1, 3), Err(Some(Errno::Inval)));
        expect("unaligned ThMB", sys::signal(me + 8, USER1, scope::UTHREAD), Err(Some(Errno::Inval)));
        expect("ThMB 0", sys::signal(0, USER1, scope::UTHREAD), Err(Some(Errno::Inval)));
        expect("ThMB in kernel memory", sys::signal(tsumugi_userland::KERNEL_ADDRESS, USER1, scope::UTHREAD), Err(Some(Errno::Fault)));
        expect("ThMB in unmapped memory", sys::signal(0x7fff_ffdf_ffc0, USER1, scope::UTHREAD), Err(Some(Errno::Fault)));
        expect("no such kernel thread", sys::signal(usize::MAX, USER1, scope::THREAD), Err(Some(Errno::Srch)));
        expect("kernel thread 0", sys::signal(0, USER1, scope::PROGRAM), Err(Some(Errno::Srch)));
        let refused = [signal::set_handler(0, Some(on_user1)), signal::set_handler(MAX + 1, Some(on_user1)), signal::set_handler(KILL, Some(on_user1))];
        if refused.iter().any(|r| *r != Err(Errno::Inval)) {
            println!("signal_self: FAILED: handlers for 0, MAX + 1, KILL: {refused:?}");
            ok = false;
        }
        if signal::set_handler(USER1, Some(on_user1)) != Ok(None) {
            ok = false;
        }

        // 1. A running (yielding) thread.
        let worker = libuthread::spawn(|| {
            while !STOP.load(Ordering::SeqCst) {
                libuthread::yield_now();
            }
        });
        EXPECTED.store(worker.id().as_usize(), Ordering::SeqCst);
        for _ in 0..SENDS {
            if send(worker.id()).is_err() {
                ok = false;
            }
        }
        until_ran(SENDS);
        STOP.store(true, Ordering::SeqCst);
        worker.join().ok();
        let matched = MATCHED.load(Ordering::SeqCst);
        println!("signal_self: {matched} of {SENDS} signals to a running thread ran the handler with that thread's id");
        ok &= matched == SENDS && RAN.load(Ordering::SeqCst) == SENDS;

        // 1b. A flood at the calling thread itself: each send is taken whole or refused whole
        // (EAGAIN: the ring is full; a signal is never held in the kernel), and the handler runs
        // exactly once per taken one.
        RAN.store(0, Ordering::SeqCst);
        MATCHED.store(0, Ordering::SeqCst);
        EXPECTED.store(me, Ordering::SeqCst);
        let me_id = libuthread::current().id();
        let (mut taken, mut full) = (0, 0);
        for _ in 0..FLOOD {
            match signal::send(me_id, USER1) {
                Ok(_) => taken += 1,
                Err(Some(Errno::Again)) => full += 1,
                Err(e) => {
                    println!("signal_self: FAILED: flood: {e:?}");
                    return 1;
                }
            }
        }
        until_ran(taken);
        for _ in 0..200 {
            libuthread::yield_now();
        }
        let once_each = RAN.load(Ordering::SeqCst) == taken && MATCHED.load(Ordering::SeqCst) == taken;
        println!("signal_self: a flood of {FLOOD}: {taken} taken, {full} refused with EAGAIN; each taken one ran the handler once: {once_each}");
        ok &= once_each && taken + full == FLOOD;

        // 2. A thread asleep in the kernel: every send runs the handler; send until the kernel
        // says the thread was asleep (it gets there after a few; bounded).
        RAN.store(0, Ordering::SeqCst);
        MATCHED.store(0, Ordering::SeqCst);
        let sleeper = libuthread::spawn(|| {
            libuthread::sleep(Duration::from_secs(3600));
            WOKE.store(true, Ordering::SeqCst);
        });
        EXPECTED.store(sleeper.id().as_usize(), Ordering::SeqCst);
        let (mut sent, mut asleep) = (0, false);
        while !asleep && sent < 100_000 {
            match send(sleeper.id()) {
                Ok(a) => {
                    sent += 1;
                    asleep = a;
                }
                Err(e) => {
                    println!("signal_self: FAILED: send to the sleeper: {e:?}");
                    return 1;
                }
            }
            libuthread::yield_now();
        }
        until_ran(sent);
        let all = MATCHED.load(Ordering::SeqCst) == sent;
        let slept_on = !WOKE.load(Ordering::SeqCst);
        println!("signal_self: the handler ran for a thread asleep in the kernel (asleep: {asleep}, {sent} sent, all with its id: {all}), which slept on: {slept_on}");
        ok &= asleep && all && slept_on;
        drop(sleeper);

        // 3. The program: through its own kernel thread, either scope.
        RAN.store(0, Ordering::SeqCst);
        MATCHED.store(0, Ordering::SeqCst);
        EXPECTED.store(0, Ordering::SeqCst);
        let tid = sys::thread_self();
        let r = [signal::send_to_program(tid, USER1), signal::send_to_thread(tid, USER1)];
        ok &= r == [Ok(()), Ok(())];
        until_ran(2);
        // An ignored number with no handler: nothing happens (the program goes on).
        ok &= signal::send_to_program(tid, CHILD) == Ok(());
        let program_wide = MATCHED.load(Ordering::SeqCst);
        println!("signal_self: {program_wide} of 2 program-wide signals ran the handler with no thread");
        ok &= program_wide == 2;

        if !ok {
            println!("signal_self: FAILED");
            sys::exit(1);
        }
        // 4. USER2 has no handler and ends by default: the library ends the program (140).
        println!("signal_self: all checks passed; now USER2 with no handler");
        if signal::send_to_program(tid, USER2).is_err() {
            sys::exit(2);
        }
        for _ in 0..1_000_000 {
            libuthread::yield_now();
            sys::yield_now();
        }
        println!("signal_self: FAILED: USER2 did not end the program");
        sys::exit(3)
    })
}

libuthread::entry!(main);
