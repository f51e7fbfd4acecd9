//! Signals (Tsumugi only): handlers a program registers, and sending (ARCHITECTURE.md
//! "Signals"; numbers and default actions in [`tsumugi_abi::signal`]).
//!
//! The kernel tells a program that runs on libuthread of a signal with a `SIGNAL(t, n)` event
//! in its ring. The library runs the handler registered for `n` **on a new user thread of its
//! own** (detached), so a handler may lock, wait, spawn and sleep like any thread, and the
//! thread the signal was sent to — which may be running, or waiting in the kernel (a sleep, a
//! console read, a join, an S3 wait) — is not disturbed: its wait goes on. With no handler for
//! `n` the number's default action applies: the program ends with status
//! [`exit_status(n)`](tsumugi_abi::signal::exit_status) after a report line, or nothing
//! happens. [`KILL`] never reaches the library: the kernel ends the program.
//!
//! Who may send: the program itself, always; another program only after this one accepted it
//! with [`allow_from`] (naming any of its kernel threads); else `Err(Some(Errno::Perm))`.
//!
//! ```rust
//! // Built for the target (every port): count USER1 signals sent to a thread.
//! #![no_std]
//! #![no_main]
//! use core::sync::atomic::{AtomicUsize, Ordering};
//! use libuthread::signal::{self, Signal, USER1};
//! use libuthread::println;
//!
//! static SEEN: AtomicUsize = AtomicUsize::new(0);
//!
//! fn on_user1(s: Signal) {
//!     // Runs on a thread of its own; `s.thread` is the thread it was sent to.
//!     SEEN.fetch_add(1, Ordering::SeqCst);
//!     println!("signal {} for {:?} from kernel thread {}", s.number, s.thread, s.sender);
//! }
//!
//! fn main() -> i32 {
//!     libuthread::run(2, || {
//!         signal::set_handler(USER1, Some(on_user1)).unwrap();
//!         let worker = libuthread::spawn(|| libuthread::sleep(core::time::Duration::from_millis(50)));
//!         signal::send(worker.id(), USER1).unwrap();
//!         while SEEN.load(Ordering::SeqCst) == 0 {
//!             libuthread::yield_now();
//!         }
//!         worker.join().unwrap();
//!         0
//!     })
//! }
//! libuthread::entry!(main);
//! ```

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use tsumugi_abi::kn::Event;
use tsumugi_abi::signal::{scope, Action, TARGET_ASLEEP};
use tsumugi_abi::syscall::Errno;

pub use tsumugi_abi::signal::{
    default_action, exit_status, name, valid, CHILD, FIRST_FREE, HANGUP, INTERRUPT, KILL, MAX, TERMINATE, URGENT, USER1, USER2, WINCH,
};

use crate::sys;
use crate::thread::ThreadId;

/// A signal as its handler receives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signal {
    /// Its number (`1..=`[`MAX`]).
    pub number: usize,
    /// The user thread it was sent to ([`send`]), or `None` when it was sent to the program
    /// (or to one of its kernel threads, which serve no fixed user thread).
    pub thread: Option<ThreadId>,
    /// The kernel thread that sent it (an id [`allow_from`] and [`send_to_program`] take).
    pub sender: usize,
}

/// A signal handler: runs on a user thread of its own.
pub type Handler = fn(Signal);

/// Registered handlers by number, as `fn` addresses (0: none).
static HANDLERS: [AtomicUsize; MAX + 1] = [const { AtomicUsize::new(0) }; MAX + 1];
/// Handler threads started so far.
static STARTED: AtomicU64 = AtomicU64::new(0);

fn handler_at(raw: usize) -> Option<Handler> {
    // SAFETY: a non-zero entry was stored from a `Handler` by `set_handler`.
    (raw != 0).then(|| unsafe { core::mem::transmute::<usize, Handler>(raw) })
}

/// Registers `handler` for signal `number` (`None`: back to the default action) and returns
/// the previous one. `Err(Errno::Inval)` for a number out of range and for [`KILL`], which
/// cannot be handled.
pub fn set_handler(number: usize, handler: Option<Handler>) -> Result<Option<Handler>, Errno> {
    if !valid(number) || number == KILL {
        return Err(Errno::Inval);
    }
    let raw = handler.map_or(0, |h| h as usize);
    Ok(handler_at(HANDLERS[number].swap(raw, Ordering::AcqRel)))
}

/// Sends signal `number` to user thread `thread` of this program; `Ok(true)` if the thread was
/// asleep in the kernel (it stays asleep; the handler runs beside it). The kernel can check
/// only that `thread` could be a ThMB of this program: the id of a thread that has ended (and
/// may have been reused) still delivers, with that id.
pub fn send(thread: ThreadId, number: usize) -> Result<bool, Option<Errno>> {
    sys::signal(thread.as_usize(), number, scope::UTHREAD).map(|r| r == TARGET_ASLEEP)
}

/// Sends signal `number` to the program kernel thread `tid` belongs to (this one's or, if it
/// accepted this program with [`allow_from`], another's).
pub fn send_to_program(tid: usize, number: usize) -> Result<(), Option<Errno>> {
    sys::signal(tid, number, scope::PROGRAM).map(|_| ())
}

/// Sends signal `number` to kernel thread `tid` (a program without Kernel Notification applies
/// the number's default action; one on libuthread receives it as sent to the program).
pub fn send_to_thread(tid: usize, number: usize) -> Result<(), Option<Errno>> {
    sys::signal(tid, number, scope::THREAD).map(|_| ())
}

/// Accepts signals from the program of kernel thread `tid` from now on.
pub fn allow_from(tid: usize) -> Result<(), Option<Errno>> {
    sys::signal_allow(tid, true).map(|_| ())
}

/// No longer accepts signals from the program of kernel thread `tid`.
pub fn deny_from(tid: usize) -> Result<(), Option<Errno>> {
    sys::signal_allow(tid, false).map(|_| ())
}

/// Handler threads the library has started (one per signal delivered to a handler).
pub fn handlers_started() -> u64 {
    STARTED.load(Ordering::Relaxed)
}

/// A `SIGNAL` event from the ring (the upcall handler's drain, LTN = 0): start the handler's
/// thread, or apply the default action.
pub(crate) fn deliver(e: &Event) {
    let number = e.arg0 as usize;
    if !valid(number) {
        return;
    }
    let signal = Signal { number, thread: ThreadId::from_usize(e.thread as usize), sender: e.arg1 as usize };
    match handler_at(HANDLERS[number].load(Ordering::Acquire)) {
        // Spawning needs a running runtime (a vCPU drains after `run` has returned only to
        // retire): a signal then finds no thread to run on and is dropped.
        Some(handler) if crate::sched::vcpu_count() > 0 => {
            STARTED.fetch_add(1, Ordering::Relaxed);
            drop(crate::spawn(move || handler(signal)));
        }
        Some(_) => {}
        None => match default_action(number) {
            Some(Action::End) => {
                crate::println!(
                    "libuthread: signal {number} ({}) from kernel thread {} and no handler: ending the program with status {}",
                    name(number),
                    signal.sender,
                    exit_status(number)
                );
                sys::exit(exit_status(number))
            }
            Some(Action::Ignore) | None => {}
        },
    }
}
