//! Kernel Notification: vCPUs, zero-copy saves into ThMBs, upcalls and the event ring
//! (`tsumugi_abi::kn` is the contract; DESIGN §6).
//!
//! A program that registers (`kn_register`) gets vCPUs: kernel threads that embody its virtual
//! processors. When the kernel stops the user thread a vCPU runs — preemption, a blocking
//! syscall, an unhandled page fault — and the LTN register names a ThMB, the kernel writes the
//! full register frame straight into that ThMB and hands the vCPU back to the library through
//! an upcall. A blocking syscall keeps the thread's kernel side (its old activation) waiting,
//! and a new activation takes over the vCPU: the vCPU never blocks; a `sleep` needs no kernel
//! side at all (a timer entry), so its vCPU goes straight back. LTN = 0 means the library is in
//! its own critical section: the kernel then saves in its own area and resumes the vCPU in
//! place, without an upcall.
//!
//! # The room
//! - [`sleepers`]: the deadline-ordered queue of timed waits (pure logic, host-tested).
//! - `state`: a program's notification state — registration (immutable, read without a lock),
//!   ring tail and held events and parked vCPUs (one lock), upcall counts (atomics).
//! - `save`: the ThMB save, fast (plain stores through the loaded table, fault fix-up) and
//!   checked (through the view space; a bad LTN ends the program).
//! - `ring`: the event ring, fast and checked.
//! - `vcpu`: registration, activations, spare activations, park and unpark.
//! - [`shares`] (the policy, pure logic, host-tested) and `processors` (applying it): how
//!   many vCPUs each program runs at once — space sharing with `VCPU_GRANTED`/`VCPU_REVOKED`.
//! - [`park`]: waits that hold no activation (S3's waits): the thread saved, the vCPU back to
//!   its library at once, the waker posts `UNBLOCKED`.
//! - [`sa_copy`] and [`signal`]: the conventional baselines the benchmarks compare with
//!   (`kn=sa`: Scheduler-Activations-style save in kernel memory and copy-out;
//!   `preempt=signal`: preemption delivered as a signal frame on the thread's stack).
//! - this file: the stop paths (preemption, fault, blocking syscall, sleep) and the upcall.
//!
//! The hot paths (a `sleep` turned into a `BLOCKED` upcall, a preemption into `PREEMPTED`) take
//! one lock (the ring's) and write user memory only through the loaded table; everything they
//! read about the program is immutable after registration.
//!
//! Lock order: a program's notification state, then the view space (checked ring writes), then
//! run queues; the sleeper queue's lock is never held with another.

pub mod shares;
pub mod sleepers;

#[cfg(target_os = "none")]
pub mod park;
#[cfg(target_os = "none")]
pub mod processors;
#[cfg(target_os = "none")]
mod ring;
#[cfg(target_os = "none")]
pub mod sa_copy;
#[cfg(target_os = "none")]
mod save;
#[cfg(target_os = "none")]
pub mod signal;
#[cfg(target_os = "none")]
mod state;
#[cfg(target_os = "none")]
mod vcpu;

#[cfg(target_os = "none")]
pub use machine::*;

#[cfg(target_os = "none")]
mod machine {
    use alloc::format;
    use alloc::string::String;
    use alloc::sync::Arc;
    use arch::trap::TrapFrame;
    use core::sync::atomic::{AtomicU64, Ordering};
    use arch::sync::Mutex;
    use tsumugi_abi::kn::{Event, EventKind, RESULT_OFFSET};
    use tsumugi_abi::syscall::{encode_result, Errno};

    use super::save::{self, Refused};
    use super::sleepers;
    pub use super::state::DomainKn;
    use super::state::Config;
    pub use super::vcpu::{dump, note_fp_use, park, register, release, unpark};
    use crate::domain::{Domain, Outcome};
    use crate::mm::space;
    use crate::sched::scheduler;
    use crate::thread::{self, Thread, NOT_A_VCPU};

    /// Whether the running thread belongs to `domain` (then its loaded table is the program's).
    fn runs_in(domain: &Domain) -> bool {
        scheduler::with_current(|t| t.and_then(|t| t.domain.as_deref()).is_some_and(|d| core::ptr::eq(d, domain)))
    }

    /// Stores a blocking call's `result` in the result register of the ThMB `thmb` of `domain`
    /// (through the loaded table when a thread of the program runs here, else checked).
    pub(super) fn write_result(domain: &Domain, thmb: u64, result: u64) -> bool {
        let addr = thmb + RESULT_OFFSET as u64;
        // SAFETY: `runs_in`: the program's table is loaded.
        if runs_in(domain) && unsafe { arch::usercopy::put_u64(addr, result) }.is_ok() {
            return true;
        }
        space::write_owned(domain, addr, &result.to_le_bytes()).is_ok()
    }

    /// Appends `event` to `domain`'s ring (or holds it back, in order, when full) and wakes a
    /// parked vCPU to read it.
    pub fn post(domain: &Domain, event: Event) {
        post_as(domain, event, runs_in(domain))
    }

    /// Ends `domain`, whose ring stayed full with [`super::ring::MAX_HELD`] events held back.
    #[cold]
    #[inline(never)]
    fn end_ring_overflow(domain: &Domain) {
        domain.end(Outcome::Killed(format!(
            "its event ring stayed full with {} events held back: the library does not drain it",
            super::ring::MAX_HELD
        )));
    }

    /// [`post`] of several events of one program, in order, under one take of its state lock
    /// (a batch release's `UNBLOCKED`s); one parked vCPU is woken to read them all.
    pub fn post_many(domain: &Domain, events: impl Iterator<Item = Event>) {
        post_all(domain, events, runs_in(domain))
    }

    /// [`post_many`] and [`post_as`]: each event appended through the loaded table where `own`
    /// and nothing is held back, else held back and flushed; then one parked vCPU woken. A
    /// program whose held-back list is full is ended.
    #[inline(always)]
    fn post_all(domain: &Domain, events: impl Iterator<Item = Event>, own: bool) {
        let Some(cfg) = domain.kn.config() else { return };
        let overflow = {
            let mut st = domain.kn.state();
            if st.released {
                return;
            }
            let mut overflow = false;
            for event in events {
                if st.held.is_empty() && own && super::ring::append_fast(cfg, &mut st, &event).is_ok() {
                    continue;
                }
                if st.held.len() >= super::ring::MAX_HELD || st.held.try_reserve(1).is_err() {
                    overflow = true;
                    break;
                }
                st.held.push_back(event);
                super::ring::flush_held(cfg, &mut st, own);
            }
            if !overflow {
                super::vcpu::wake_one(&mut st);
            }
            overflow
        };
        if overflow {
            end_ring_overflow(domain);
        }
    }

    /// [`post`] from a stop path of the running thread of `domain` (its table is loaded). The
    /// common case — nothing held back, room in the ring — is inlined into the stop paths; the
    /// rest is [`post_as`]'s.
    #[inline(always)]
    pub(super) fn post_own(domain: &Domain, event: Event) {
        match domain.kn.config() {
            Some(cfg) => post_own_with(domain, cfg, event),
            None => post_as(domain, event, true),
        }
    }

    /// [`post_own`] for a stop path that has `domain`'s configuration already (it never changes
    /// after registration), so it is not looked up again.
    #[inline(always)]
    pub(super) fn post_own_with(domain: &Domain, cfg: &Config, event: Event) {
        stopped(event.thread);
        let mut st = domain.kn.state();
        if !st.released && st.held.is_empty() && super::ring::append_fast(cfg, &mut st, &event).is_ok() {
            super::vcpu::wake_one(&mut st);
            return;
        }
        drop(st);
        post_as(domain, event, true)
    }

    /// A blocking call's stop: posts `BLOCKED` (`args`) for the running thread `me`, vCPU
    /// `vcpu` of `domain`, and hands the vCPU to a spare activation, under one take of the
    /// state lock (the ring append and the pick of the spare); `false`: no spare (the event is
    /// posted all the same), a new activation must take the vCPU. The event is in the ring (or
    /// held) before the spare can run.
    #[inline(always)]
    fn post_blocked_and_hand(me: &Thread, domain: &Domain, cfg: &Config, vcpu: usize, args: [u64; 4]) -> bool {
        let event = Event { kind: args[0], thread: args[1], arg0: vcpu as u64, arg1: 0 };
        stopped(event.thread);
        // The spare must have the blocking thread's view: compared by root table (one per
        // view), which needs no lock.
        let root = me.root.load(Ordering::Relaxed);
        let (posted, spare) = {
            let mut st = domain.kn.state();
            let posted = !st.released && st.held.is_empty() && super::ring::append_fast(cfg, &mut st, &event).is_ok();
            if posted {
                super::vcpu::wake_one(&mut st);
            }
            (posted, super::vcpu::take_spare(&mut st, root, vcpu))
        };
        if !posted {
            post_as(domain, event, true);
        }
        match spare {
            Some((spare, tell_fp)) => {
                super::vcpu::hand_over(me, domain, cfg, spare, tell_fp, args);
                true
            }
            None => false,
        }
    }

    /// A stop path of the running thread saved a user thread into the ThMB at `thmb` and is
    /// about to post its event: a place for a debugger's breakpoint with the program's table
    /// still loaded (`xtask/gdb/selftest.gdb` stops here). A call in debug builds only; in
    /// release builds it is nothing.
    #[cfg(debug_assertions)]
    #[inline(never)]
    fn stopped(thmb: u64) {
        core::hint::black_box(thmb);
    }

    /// See the debug build's `stopped`.
    #[cfg(not(debug_assertions))]
    #[inline(always)]
    fn stopped(_thmb: u64) {}

    /// [`post`]; `own`: a thread of `domain` runs here, so the fast path may write through the
    /// loaded table (only a thread of this program has it).
    #[inline(never)]
    fn post_as(domain: &Domain, event: Event, own: bool) {
        post_all(domain, core::iter::once(event), own)
    }

    /// Posts a user signal's `SIGNAL` event to `domain`'s ring only if it fits now: a signal is
    /// never held back, so no sender can grow the kernel's held events or make the program end
    /// for a full ring (`signals.rs`). `EAGAIN`: the ring is full (or events wait for room
    /// already); `ESRCH`: the program is not registered or has finished.
    pub fn post_signal(domain: &Domain, event: Event) -> Result<(), Errno> {
        let Some(cfg) = domain.kn.config() else { return Err(Errno::Srch) };
        let own = runs_in(domain);
        let mut st = domain.kn.state();
        if st.released {
            return Err(Errno::Srch);
        }
        // Events held back go first (they may fit now); the library is woken for any that moved.
        if !st.held.is_empty() && (!super::ring::flush_held(cfg, &mut st, own) || !st.held.is_empty()) {
            super::vcpu::wake_one(&mut st);
            return Err(Errno::Again);
        }
        st.held.try_reserve(1).map_err(|_| Errno::NoMem)?;
        st.held.push_back(event);
        super::ring::flush_held(cfg, &mut st, own);
        if !st.held.is_empty() {
            // It did not fit: take it back (the ring's `held_back` word is rewritten).
            st.held.pop_back();
            super::ring::flush_held(cfg, &mut st, own);
            super::vcpu::wake_one(&mut st);
            return Err(Errno::Again);
        }
        super::vcpu::wake_one(&mut st);
        Ok(())
    }

    /// Whether user thread `thmb` of `domain` is asleep in the kernel (a timed wait).
    pub fn asleep(domain: &Domain, thmb: u64) -> bool {
        SLEEPERS.lock().any(|s| core::ptr::eq(Arc::as_ptr(&s.domain), domain) && s.thmb == thmb)
    }

    /// Counts an upcall about to be delivered; `me` is the running thread (its perf counters
    /// count it).
    pub(super) fn count_upcall(me: &Thread, domain: &Domain, kind: u64) {
        me.perf.tally(tsumugi_abi::perf::Event::Upcalls);
        count_delivered(domain, kind);
    }

    /// [`count_upcall`] for an upcall whose thread's counters counted it already (a hand-off
    /// to a spare: the blocking thread counted it when it handed its vCPU on).
    pub(super) fn count_delivered(domain: &Domain, kind: u64) {
        domain.kn.count_upcall(kind);
        crate::trace::upcall(domain.id, kind);
    }

    /// Upcalls delivered to `domain`, by kind value (kept after the program ends).
    pub fn upcalls_total(domain: &Domain) -> [u64; 8] {
        domain.kn.upcalls()
    }

    /// The running thread's vCPU index if it is a vCPU of a registered program.
    pub(super) fn current_vcpu(me: &Thread) -> Option<usize> {
        let v = me.vcpu.load(Ordering::Relaxed);
        (v != NOT_A_VCPU && me.domain.as_ref().is_some_and(|d| d.kn.registered())).then_some(v)
    }

    /// [`current_vcpu`] with the program and its KN configuration (immutable once registered),
    /// so a stop path looks them up once rather than at each step.
    #[inline(always)]
    pub(super) fn current_vcpu_with(me: &Thread) -> Option<(usize, &Arc<Domain>, &Config)> {
        let v = me.vcpu.load(Ordering::Relaxed);
        if v == NOT_A_VCPU {
            return None;
        }
        let domain = me.domain.as_ref()?;
        Some((v, domain, domain.kn.config()?))
    }

    pub(super) fn kill(me: &Thread, reason: String) -> ! {
        if let Some(d) = &me.domain {
            d.end(Outcome::Killed(reason));
        }
        thread::exit_current(None)
    }

    /// Turns the running vCPU's return to user mode into an upcall. Inlined: it ends every
    /// stop's hot path (sleep, preemption, fault).
    #[inline(always)]
    pub(super) fn upcall(me: &Thread, frame: &mut TrapFrame, vcpu: usize, args: [u64; 4]) {
        let Some(domain) = &me.domain else { return };
        let Some(cfg) = domain.kn.config() else { return };
        upcall_with(me, domain, cfg, frame, vcpu, args)
    }

    /// [`upcall`] for a stop path that has the running thread's program and configuration.
    #[inline(always)]
    pub(super) fn upcall_with(me: &Thread, domain: &Domain, cfg: &Config, frame: &mut TrapFrame, vcpu: usize, args: [u64; 4]) {
        count_upcall(me, domain, args[0]);
        frame.set_upcall(cfg.handler, cfg.upcall_stacks[vcpu], args);
        arch::cpu::set_user_ltn(0);
    }

    /// The timer ended the running thread's quantum. For a vCPU running a user thread (LTN ≠
    /// 0): save it into its ThMB, post `PREEMPTED`, let others run, then upcall. Otherwise
    /// (LTN = 0, or not a vCPU) plain preemption, resumed in place.
    pub fn preempt(frame: &mut TrapFrame) {
        // Borrowed, not counted, although `scheduler::preempt` may switch away inside the
        // borrow: a preemption only requeues the running thread, and the run queue keeps it
        // alive while others run, so the borrow stays valid until it runs here again (and
        // `kill` never returns).
        scheduler::with_current(|me| {
            let me = me.expect("preempting a thread");
            let Some((vcpu, domain, cfg)) = current_vcpu_with(me) else {
                scheduler::preempt();
                return;
            };
            if super::signal::enabled() {
                let ltn = arch::cpu::user_ltn();
                if ltn != 0 {
                    if let Err(report) = super::signal::deliver(me, frame, vcpu, ltn) {
                        kill(me, report);
                    }
                    scheduler::preempt();
                    return;
                }
            }
            match save::save(me, frame) {
                Err(Refused::NoThmb) => {
                    scheduler::preempt();
                }
                Ok(thmb) => {
                    post_own_with(domain, cfg, Event { kind: EventKind::Preempted as u64, thread: thmb, arg0: vcpu as u64, arg1: 0 });
                    scheduler::preempt();
                    upcall_with(me, domain, cfg, frame, vcpu, [EventKind::Preempted as u64, thmb, vcpu as u64, 0]);
                }
                Err(Refused::Bad(report)) => kill(me, report),
            }
        })
    }

    /// Whether some program holds more vCPUs than its share (the timer tick's one-load test
    /// before [`revoke_point`]).
    #[inline(always)]
    pub fn revoking() -> bool {
        super::processors::revoking()
    }

    /// A timer tick interrupted user code while some program holds more vCPUs than its share:
    /// if the running thread is a vCPU of such a program running a user thread (LTN ≠ 0; never
    /// vCPU 0), it gives itself up — the thread saved into its ThMB, `VCPU_REVOKED` posted, the
    /// CPU to the neediest program — and waits for a grant; it then returns into the handler
    /// with `VCPU_GRANTED` (`true`). `false`: nothing was revoked.
    #[inline(never)]
    pub fn revoke_point(frame: &mut TrapFrame) -> bool {
        let Some(me) = scheduler::current() else { return false };
        let Some(vcpu) = current_vcpu(&me) else { return false };
        let domain = me.domain.clone().expect("a vCPU has a domain");
        if arch::cpu::user_ltn() == 0 || super::sa_copy::enabled() || super::signal::enabled() {
            // The library cannot be told here; past the bound the vCPU is taken back in place.
            if !super::processors::force(&domain, vcpu) {
                return false;
            }
            super::vcpu::regrant(&me, &domain, frame, vcpu, false);
            return true;
        }
        let Some(count) = super::processors::give_up(&domain, vcpu) else { return false };
        let thmb = match save::save(&me, frame) {
            Ok(t) => t,
            // LTN was checked non-zero: not reached. The thread is still in the frame, which
            // would be lost under an upcall: resume it in place instead, after the grant.
            Err(Refused::NoThmb) => 0,
            Err(Refused::Bad(report)) => {
                drop(domain);
                kill(&me, report)
            }
        };
        post_own(&domain, super::processors::revoked_event(vcpu, thmb, count));
        if thmb != 0 {
            // The stopped thread may hold a lock the program's other threads spin on (the
            // Scheduler-Activations case): interrupt a running vCPU of the program so that it
            // takes the thread in now, not at its next upcall.
            domain.kn.nudge.store(true, Ordering::Release);
            for cpu in 0..scheduler::online_cpus() {
                crate::smp::kick(cpu);
            }
        }
        super::vcpu::regrant(&me, &domain, frame, vcpu, thmb != 0);
        true
    }

    /// A kick interrupted user code: if it is a vCPU of a program with a nudge pending (a vCPU
    /// of it was revoked with a thread in it) running a user thread, it takes a `PREEMPTED`
    /// upcall, whose drain takes the revoked vCPU's threads in. With LTN = 0 the nudge stays
    /// for the next kick (the library is in its scheduler and drains soon anyway).
    pub fn nudged(frame: &mut TrapFrame) {
        // Borrowed, not counted, as in `preempt` (`kill` never returns).
        scheduler::with_current(|me| {
            let Some(me) = me else { return };
            let Some(vcpu) = current_vcpu(me) else { return };
            let domain = me.domain.as_ref().expect("a vCPU has a domain");
            if !domain.kn.nudge.load(Ordering::Relaxed) || super::signal::enabled() || arch::cpu::user_ltn() == 0 || !domain.kn.nudge.swap(false, Ordering::AcqRel) {
                return;
            }
            match save::save(me, frame) {
                Ok(thmb) => {
                    post_own(domain, Event { kind: EventKind::Preempted as u64, thread: thmb, arg0: vcpu as u64, arg1: 0 });
                    upcall(me, frame, vcpu, [EventKind::Preempted as u64, thmb, vcpu as u64, 0]);
                }
                Err(Refused::NoThmb) => domain.kn.nudge.store(true, Ordering::Release),
                Err(Refused::Bad(report)) => kill(me, report),
            }
        })
    }

    /// A page fault the view does not allow, in a vCPU: with LTN ≠ 0 the thread is saved and
    /// the library gets `FAULT`; with LTN = 0 (its critical section or handler) the program
    /// ends. Returns `false` when the thread is not a vCPU (the caller reports as usual).
    pub fn fault(frame: &mut TrapFrame, address: u64, access: u64, report: impl FnOnce() -> String) -> bool {
        let me = scheduler::current().expect("a faulting thread");
        let Some(vcpu) = current_vcpu(&me) else { return false };
        match save::save(&me, frame) {
            Err(Refused::NoThmb) => kill(&me, format!("{} — in the library's critical section or notification handler (LTN = 0), so no upcall", report())),
            Ok(thmb) => {
                let domain = me.domain.as_ref().expect("a vCPU has a domain");
                post_own(domain, Event { kind: EventKind::Fault as u64, thread: thmb, arg0: address, arg1: access });
                upcall(&me, frame, vcpu, [EventKind::Fault as u64, thmb, vcpu as u64, address]);
                true
            }
            Err(Refused::Bad(bad)) => kill(&me, bad),
        }
    }

    /// Runs the blocking part of a syscall. For a vCPU running a user thread (LTN ≠ 0) the vCPU
    /// is handed back at once: the thread is saved into its ThMB, `BLOCKED` posted, a new
    /// activation takes over the vCPU with an upcall, and this activation alone waits; when
    /// `wait` returns its result is stored in the ThMB (the frame's result register),
    /// `UNBLOCKED` posted, and this activation ends. Otherwise `wait` simply blocks the calling
    /// thread and its result is returned.
    pub fn blocking(frame: &mut TrapFrame, wait: impl FnOnce() -> usize) -> usize {
        // Borrowed, not counted, as in `preempt` (`kill` never returns; nothing here switches).
        let stopped = scheduler::with_current(|me| {
            let me = me.expect("a syscall thread");
            let (vcpu, domain, cfg) = current_vcpu_with(me)?;
            let thmb = match save::save(me, frame) {
                Err(Refused::NoThmb) => return None,
                Ok(t) => t,
                Err(Refused::Bad(bad)) => kill(me, bad),
            };
            me.vcpu.store(NOT_A_VCPU, Ordering::Relaxed);
            let args = [EventKind::Blocked as u64, thmb, vcpu as u64, 0];
            if !post_blocked_and_hand(me, domain, cfg, vcpu, args) {
                if let Err(e) = super::vcpu::start_activation(domain, me, vcpu, cfg.handler, cfg.upcall_stacks[vcpu], args) {
                    kill(me, format!("no memory for a new activation of vCPU {vcpu} ({e:?})"));
                }
            }
            Some((domain.clone(), thmb))
        });
        let Some((domain, thmb)) = stopped else { return wait() };
        let result = wait();
        write_result(&domain, thmb, result as u64);
        post(&domain, Event { kind: EventKind::Unblocked as u64, thread: thmb, arg0: result as u64, arg1: 0 });
        drop(domain);
        thread::exit_if_killed();
        // This activation's work is done; the vCPU lives on in the one that took over. It
        // waits as a spare for the next blocking call of its program.
        super::vcpu::serve_as_spare()
    }

    /// A user thread sleeping in the kernel on behalf of a vCPU that has gone back to the
    /// library.
    struct Sleeper {
        domain: Arc<Domain>,
        thmb: u64,
    }

    /// Timed waits of vCPU threads, by deadline in nanoseconds.
    static SLEEPERS: Mutex<sleepers::Queue<Sleeper>> = Mutex::new(sleepers::Queue::new());
    /// The earliest deadline in [`SLEEPERS`] (`u64::MAX`: none), read without its lock by the
    /// tick. Written under the lock.
    static EARLIEST: AtomicU64 = AtomicU64::new(u64::MAX);

    /// `sleep` of a vCPU running a user thread: the thread's kernel side is just a timer entry,
    /// so the calling activation itself goes straight back to the library with `BLOCKED` (no
    /// new activation is needed), and the timer posts `UNBLOCKED` at the deadline — in
    /// deadline order. Returns `None` when the caller is not such a vCPU (then it sleeps as a
    /// plain thread), else the value the syscall must store as its result in the frame, which
    /// now enters the handler: the handler's first argument, since on some ports the result
    /// register is also the first argument register (aarch64 `x0`, riscv64 `a0`).
    pub fn sleep(frame: &mut TrapFrame, nanos: u64) -> Option<Result<usize, Errno>> {
        // Borrowed, not counted: a bad LTN ends the program inside the borrow, as in `preempt`
        // (`kill` never returns). The answer is small (two registers), not a decision to
        // match on afterwards.
        scheduler::with_current(|me| {
            let me = me?;
            let (vcpu, domain, cfg) = current_vcpu_with(me)?;
            // Charged before anything is saved or posted: a refusal leaves the thread as it was.
            if domain.kn.sleeping.fetch_add(1, Ordering::Relaxed) >= sleepers::MAX_PER_PROGRAM {
                domain.kn.sleeping.fetch_sub(1, Ordering::Relaxed);
                return Some(Err(Errno::Again));
            }
            let thmb = match save::save(me, frame) {
                Ok(t) => t,
                Err(Refused::NoThmb) => {
                    domain.kn.sleeping.fetch_sub(1, Ordering::Relaxed);
                    return None;
                }
                Err(Refused::Bad(bad)) => kill(me, bad),
            };
            // BLOCKED first: once the entry is queued, a tick on another CPU may post UNBLOCKED.
            post_own_with(domain, cfg, Event { kind: EventKind::Blocked as u64, thread: thmb, arg0: vcpu as u64, arg1: 0 });
            let deadline = arch::timer::nanos().saturating_add(nanos.max(1));
            let queued = {
                let mut q = SLEEPERS.lock();
                let r = q.push(deadline, Sleeper { domain: domain.clone(), thmb });
                // EARLIEST mirrors `q.earliest()` under the lock; a push can only lower it, to
                // this deadline (cheaper than reading the heap's top again).
                if r.is_ok() && deadline < EARLIEST.load(Ordering::Relaxed) {
                    EARLIEST.store(deadline, Ordering::Release);
                }
                r.is_ok()
            };
            if !queued {
                // No kernel memory for the entry: the wait ends at once with the error, as any
                // blocking call's result reaches the library (ThMB result register, UNBLOCKED).
                domain.kn.sleeping.fetch_sub(1, Ordering::Relaxed);
                let err = encode_result(Err(Errno::NoMem)) as u64;
                write_result(domain, thmb, err);
                post(domain, Event { kind: EventKind::Unblocked as u64, thread: thmb, arg0: err, arg1: 0 });
            }
            let args = [EventKind::Blocked as u64, thmb, vcpu as u64, 0];
            upcall_with(me, domain, cfg, frame, vcpu, args);
            Some(Ok(args[0] as usize))
        })
    }

    /// Drops the timed waits of `domain`, which has finished (its entries would otherwise keep
    /// it allocated until their deadlines).
    pub(super) fn forget_sleepers(domain: &Domain) {
        let mut q = SLEEPERS.lock();
        q.retain(|s| !core::ptr::eq(Arc::as_ptr(&s.domain), domain));
        EARLIEST.store(q.earliest(), Ordering::Release);
        domain.kn.sleeping.store(0, Ordering::Relaxed);
    }

    /// The earliest deadline of a timed wait (nanoseconds; `u64::MAX`: none), without the lock.
    #[inline(always)]
    pub fn earliest_sleeper() -> u64 {
        EARLIEST.load(Ordering::Acquire)
    }

    /// Ends the timed waits whose deadline has passed at `now` (timer tick; nanoseconds): the
    /// result (0) goes into the thread's ThMB and `UNBLOCKED` into its program's ring, in
    /// deadline order.
    #[inline(always)]
    pub fn wake_sleepers(now: u64) {
        if now >= EARLIEST.load(Ordering::Acquire) {
            wake_due(now);
        }
    }

    /// [`wake_sleepers`] when some wait may be due.
    #[inline(never)]
    fn wake_due(now: u64) {
        loop {
            let next = {
                let mut q = SLEEPERS.lock();
                let s = q.pop_due(now);
                EARLIEST.store(q.earliest(), Ordering::Release);
                s
            };
            let Some(sleeper) = next else { break };
            sleeper.domain.kn.sleeping.fetch_sub(1, Ordering::Relaxed);
            if sleeper.domain.outcome().is_some() {
                continue;
            }
            // The ThMB was written by the thread's save; it lies in a region of the program
            // (their regions live as long as the program).
            if write_result(&sleeper.domain, sleeper.thmb, 0) {
                post(&sleeper.domain, Event { kind: EventKind::Unblocked as u64, thread: sleeper.thmb, arg0: 0, arg1: 0 });
            }
        }
    }
}
