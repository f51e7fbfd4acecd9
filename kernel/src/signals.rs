//! User signals (issue 16 part 3; ARCHITECTURE.md "Signals"; numbers and default actions in
//! `tsumugi_abi::signal`). Not to be confused with `notify::signal`, the signal-frame
//! *preemption baseline* (`preempt=signal`).
//!
//! `signal(target, number, scope)` sends a number to a kernel thread, to the program of one, or
//! to a user thread (ThMB) of the caller's own Kernel-Notification program.
//! - **Authority**: a program may signal itself; another program only if that program accepts
//!   signals from the sender's (`signal_allow`, kept in [`Accepted`]), else `EPERM` — checked
//!   before anything is delivered, so a refused sender changes nothing.
//! - **Delivery**: `KILL` ends the target program, whatever it registered. A
//!   Kernel-Notification program gets a `SIGNAL(thread, number)` event in its ring (never held
//!   back: `EAGAIN` when the ring is full) and its library runs the handler; a program without
//!   Kernel Notification gets the number's default action: the end of the program, with a
//!   report naming the signal, its sender and its target, or nothing.
//! - **Threads waiting in the kernel** (sleep, console read, join, S3 waits) keep waiting: a
//!   handler runs on a thread of its own in the library, beside the waiting one; an ending
//!   program's waiters are woken to end as for any kill (`Domain::end`). No wait is cut short
//!   with an error, so no blocking call needs an "interrupted" path.
//!
//! The same [`Accepted`] list, kept apart, says whose `region_grant`s a program accepts
//! (`grant_allow`, checked by `syscall::region_grant`; ARCHITECTURE.md "Authority").
//!
//! [`Accepted`] is pure logic (host-tested); the syscalls are on the machine only.

use tsumugi_abi::signal::MAX_ALLOWED;

/// The programs (by id) one program accepts signals from: at most [`MAX_ALLOWED`]. Program ids
/// are never reused, so an entry for a program that ended can never admit another.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Accepted {
    ids: [u64; MAX_ALLOWED],
    len: usize,
}

/// The list is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Full;

impl Accepted {
    /// Accepts nobody.
    pub const fn new() -> Self {
        Accepted { ids: [0; MAX_ALLOWED], len: 0 }
    }

    /// Whether signals from program `id` are accepted.
    pub fn contains(&self, id: u64) -> bool {
        self.ids[..self.len].contains(&id)
    }

    /// Accepts program `id` (again: no change).
    pub fn add(&mut self, id: u64) -> Result<(), Full> {
        if self.contains(id) {
            return Ok(());
        }
        if self.len == MAX_ALLOWED {
            return Err(Full);
        }
        self.ids[self.len] = id;
        self.len += 1;
        Ok(())
    }

    /// No longer accepts program `id` (not listed: no change).
    pub fn remove(&mut self, id: u64) {
        if let Some(i) = self.ids[..self.len].iter().position(|&x| x == id) {
            self.ids[i] = self.ids[self.len - 1];
            self.len -= 1;
        }
    }

    /// Programs accepted.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it accepts nobody.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(target_os = "none")]
pub use machine::*;

#[cfg(target_os = "none")]
mod machine {
    use alloc::format;
    use alloc::string::String;
    use alloc::sync::Arc;
    use arch::mapping::MapFlags;
    use tsumugi_abi::kn::{Event, EventKind, HEADER_SIZE, THMB_ALIGN};
    use tsumugi_abi::signal::{self, scope, Action, KILL, TARGET_ASLEEP};
    use tsumugi_abi::syscall::Errno;

    use crate::domain::{Domain, Outcome};
    use crate::thread::{self, State, Thread};

    type SysResult = Result<usize, Errno>;

    /// What a signal is sent to.
    enum Target {
        /// A kernel thread (by id).
        Thread(u64),
        /// The whole program.
        Program,
        /// A user thread of a Kernel-Notification program (its ThMB).
        UserThread(u64),
    }

    /// `signal(target, number, scope)` from `me`.
    pub fn send(me: &Arc<Thread>, target: u64, number: usize, scope: usize) -> SysResult {
        if !matches!(scope, scope::THREAD | scope::PROGRAM | scope::UTHREAD) || !signal::valid(number) {
            return Err(Errno::Inval);
        }
        let mine = me.domain.clone().ok_or(Errno::Inval)?;
        if scope == scope::UTHREAD {
            // Only the caller's own program: a ThMB address means nothing elsewhere, and the
            // kernel can check only that it could be one of the caller's.
            if !mine.kn.registered() || target == 0 || target % THMB_ALIGN != 0 {
                return Err(Errno::Inval);
            }
            if !(arch::layout::USER_START..arch::layout::USER_END).contains(&target) {
                return Err(Errno::Fault);
            }
            let view = me.view().ok_or(Errno::Fault)?;
            crate::mm::space::with(|s, _| s.check(view, target, HEADER_SIZE as u64, MapFlags::WRITE)).map_err(|_| Errno::Fault)?;
            if mine.ending() {
                return Err(Errno::Srch);
            }
            return deliver(me, &mine, Target::UserThread(target), number);
        }
        let t = thread::find(target).ok_or(Errno::Srch)?;
        let domain = t.domain.clone().ok_or(Errno::Srch)?;
        if (scope == scope::THREAD && t.state() == State::Dead) || domain.ending() {
            return Err(Errno::Srch);
        }
        if !Arc::ptr_eq(&domain, &mine) && !domain.signal_senders.lock().contains(mine.id) {
            return Err(Errno::Perm);
        }
        let to = if scope == scope::THREAD { Target::Thread(t.id) } else { Target::Program };
        deliver(me, &domain, to, number)
    }

    /// Delivers an authorised signal.
    fn deliver(me: &Thread, domain: &Domain, to: Target, number: usize) -> SysResult {
        let end = |action: &str| {
            let target = match to {
                Target::Thread(id) => format!("thread {id}"),
                Target::Program => String::from("the program"),
                Target::UserThread(t) => format!("user thread {t:#x}"),
            };
            let from = me.domain.as_ref().map_or(String::new(), |d| format!(" of program {} ({})", d.id, d.name));
            domain.end(Outcome::Killed(format!(
                "signal {number} ({}) from thread {}{from} to {target}: {action}",
                signal::name(number),
                me.id
            )));
            Ok(0)
        };
        if number == KILL {
            return end("it cannot be handled and ends the program");
        }
        if domain.kn.registered() {
            let thmb = match to {
                Target::UserThread(t) => t,
                Target::Thread(_) | Target::Program => 0,
            };
            crate::notify::post_signal(domain, Event { kind: EventKind::Signal as u64, thread: thmb, arg0: number as u64, arg1: me.id })?;
            let asleep = thmb != 0 && crate::notify::asleep(domain, thmb);
            return Ok(if asleep { TARGET_ASLEEP } else { 0 });
        }
        match signal::default_action(number) {
            Some(Action::End) => end("its default action ends the program (no Kernel Notification, so no handler)"),
            Some(Action::Ignore) | None => Ok(0),
        }
    }

    /// `signal_allow(tid, allow)` from `me`.
    pub fn allow(me: &Arc<Thread>, tid: u64, allow: usize) -> SysResult {
        set_accepted(me, tid, allow, |d| &d.signal_senders)
    }

    /// `grant_allow(tid, allow)` from `me`: the same list as [`allow`]'s, kept for grants
    /// (`syscall::region_grant` checks it; ARCHITECTURE.md "Authority").
    pub fn grant_allow(me: &Arc<Thread>, tid: u64, allow: usize) -> SysResult {
        set_accepted(me, tid, allow, |d| &d.grant_senders)
    }

    /// The caller's program accepts (`allow` = 1) or no longer accepts (0) the program of
    /// thread `tid` in the list `list` picks: `EINVAL` for another `allow`, `ESRCH` for no
    /// thread or a kernel thread, `ENOMEM` when the list is full.
    fn set_accepted(
        me: &Arc<Thread>,
        tid: u64,
        allow: usize,
        list: fn(&Domain) -> &arch::sync::Mutex<super::Accepted>,
    ) -> SysResult {
        if allow > 1 {
            return Err(Errno::Inval);
        }
        let mine = me.domain.clone().ok_or(Errno::Inval)?;
        let other = thread::find(tid).and_then(|t| t.domain.clone()).ok_or(Errno::Srch)?;
        let mut accepted = list(&mine).lock();
        if allow == 1 {
            accepted.add(other.id).map_err(|_| Errno::NoMem)?;
        } else {
            accepted.remove(other.id);
        }
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_only_what_was_added_up_to_the_bound() {
        let mut a = Accepted::new();
        assert!(!a.contains(0) && !a.contains(7));
        for id in 1..=MAX_ALLOWED as u64 {
            a.add(id).unwrap();
        }
        assert_eq!(a.add(1), Ok(()), "already there: no new entry needed");
        assert_eq!(a.add(1000), Err(Full));
        a.remove(3);
        assert!(!a.contains(3));
        a.add(1000).unwrap();
        assert!(a.contains(1000) && a.contains(MAX_ALLOWED as u64));
        a.remove(99);
        assert_eq!(a.len(), MAX_ALLOWED);
    }

    proptest! {
        /// Against a model set: membership always agrees, and the size never passes the bound.
        #[test]
        fn matches_a_set(ops in proptest::collection::vec((any::<bool>(), 0u64..24), 0..200)) {
            let mut a = Accepted::new();
            let mut model = std::collections::BTreeSet::new();
            for (add, id) in ops {
                if add {
                    let r = a.add(id);
                    if model.contains(&id) || model.len() < MAX_ALLOWED {
                        prop_assert_eq!(r, Ok(()));
                        model.insert(id);
                    } else {
                        prop_assert_eq!(r, Err(Full));
                    }
                } else {
                    a.remove(id);
                    model.remove(&id);
                }
                prop_assert_eq!(a.len(), model.len());
                for x in 0..24 {
                    prop_assert_eq!(a.contains(x), model.contains(&x));
                }
            }
        }
    }
}
