//! User signals (`Syscall::Signal`, `Syscall::SignalAllow`; ARCHITECTURE.md "Signals").
//!
//! A signal is a number in `1..=`[`MAX`] sent to a thread or a program. A program that uses
//! Kernel Notification gets it as a `SIGNAL` event (`kn::EventKind::Signal`: `thread` = the
//! user thread it was sent to or 0 for the whole program, `arg0` = the number, `arg1` = the
//! sending kernel thread's id) and its library runs the handler the program registered; a
//! program without Kernel Notification gets the number's [`default_action`]. [`KILL`] is never
//! handled: it ends any program.
//!
//! Authority: a program may signal itself; another program only once the target accepted
//! signals from the sender's program (`signal_allow`), else `EPERM`.

/// Largest signal number; numbers are `1..=MAX`.
pub const MAX: usize = 63;

/// Hang-up (ends by default).
pub const HANGUP: usize = 1;
/// Interrupt (ends by default).
pub const INTERRUPT: usize = 2;
/// Ends the target program whatever it registered: never handled, never ignored.
pub const KILL: usize = 9;
/// For the program's own use (ends by default).
pub const USER1: usize = 10;
/// For the program's own use (ends by default).
pub const USER2: usize = 12;
/// Asks the program to end (ends by default).
pub const TERMINATE: usize = 15;
/// Something the program started changed state (ignored by default).
pub const CHILD: usize = 17;
/// Urgent data (ignored by default).
pub const URGENT: usize = 23;
/// The console's size changed (ignored by default).
pub const WINCH: usize = 28;
/// First of the numbers with no fixed meaning (`FIRST_FREE..=MAX`, ignored by default).
pub const FIRST_FREE: usize = 32;

/// Most programs one program may accept signals from at once (`signal_allow` beyond it:
/// `ENOMEM`).
pub const MAX_ALLOWED: usize = 16;

/// What `signal`'s third argument says its first one names.
pub mod scope {
    /// A kernel thread (the id `thread_create`/`thread_self` give). In a program without
    /// Kernel Notification that thread is the target; a Kernel-Notification program's kernel
    /// threads are its vCPUs and their activations, which serve no fixed user thread, so there
    /// the signal reaches the program (`SIGNAL` with thread 0).
    pub const THREAD: usize = 0;
    /// The program that kernel thread belongs to.
    pub const PROGRAM: usize = 1;
    /// A user thread of the caller's own Kernel-Notification program: its ThMB address (a
    /// libuthread `ThreadId`). Other programs cannot name one.
    pub const UTHREAD: usize = 2;
}

/// `signal`'s result when the target user thread was asleep in the kernel (`sleep`): the
/// signal is delivered, the sleep goes on (0 otherwise).
pub const TARGET_ASLEEP: usize = 1;

/// What a program without a handler for a number gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// The program ends, with a report naming the signal and its sender.
    End,
    /// Nothing happens.
    Ignore,
}

/// Whether `n` is a signal number.
pub const fn valid(n: usize) -> bool {
    n >= 1 && n <= MAX
}

/// The default action of signal `n` (`None` if `n` is not a signal number): [`CHILD`],
/// [`URGENT`], [`WINCH`] and the free numbers from [`FIRST_FREE`] are ignored, every other
/// number ends the program.
pub const fn default_action(n: usize) -> Option<Action> {
    if !valid(n) {
        return None;
    }
    Some(match n {
        CHILD | URGENT | WINCH => Action::Ignore,
        n if n >= FIRST_FREE => Action::Ignore,
        _ => Action::End,
    })
}

/// The short name of signal `n` for reports (`"?"` for numbers without one).
pub const fn name(n: usize) -> &'static str {
    match n {
        HANGUP => "HANGUP",
        INTERRUPT => "INTERRUPT",
        KILL => "KILL",
        USER1 => "USER1",
        USER2 => "USER2",
        TERMINATE => "TERMINATE",
        CHILD => "CHILD",
        URGENT => "URGENT",
        WINCH => "WINCH",
        _ => "?",
    }
}

/// The exit status a Kernel-Notification program's library ends it with for a signal `n` it
/// has no handler for and whose default action is [`Action::End`] (as a shell reports one).
pub const fn exit_status(n: usize) -> usize {
    128 + n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_actions() {
        assert_eq!(default_action(0), None);
        assert_eq!(default_action(MAX + 1), None);
        assert_eq!(default_action(usize::MAX), None);
        for n in 1..=MAX {
            let ignored = [CHILD, URGENT, WINCH].contains(&n) || n >= FIRST_FREE;
            assert_eq!(default_action(n), Some(if ignored { Action::Ignore } else { Action::End }), "signal {n}");
        }
        assert_eq!(default_action(KILL), Some(Action::End));
        assert_eq!(name(TERMINATE), "TERMINATE");
        assert_eq!(name(40), "?");
        assert_eq!(exit_status(USER2), 140);
    }
}
