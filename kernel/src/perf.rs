//! Per-thread performance counters (`tsumugi_abi::perf`). Hardware events are read from the
//! port's PMU and virtualised per thread: what ran between the thread's switch-in and
//! switch-out is added to its counters, so a thread sees only its own events. Software events
//! are tallied by the kernel at the places they happen.
//!
//! Counters opened with the LTN register non-zero (a user thread of an M:N program) belong to
//! that user thread, keyed by (program, LTN), not to the kernel thread (vCPU activation) that
//! runs it: the kernel *loads* a user thread's counters into the activation it runs on (at each
//! of its `perf_*` calls, and at `perf_switch(ltn)`, which libuthread makes when it resumes a
//! user thread while its program has user-thread counters open) and *parks* them in a table
//! when another user thread's are loaded there. While loaded they count as the activation's own
//! do (switch-out/switch-in). A user thread's counters loaded in an activation that is off its
//! CPU (it blocked in the kernel with them, or became a spare) are pulled to wherever the user
//! thread resumes; what that activation counted up to its switch-out is kept.

use alloc::sync::{Arc, Weak};
use alloc::vec::Vec;
use arch::pmu::HwEvent;
use core::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use arch::sync::Mutex;
use tsumugi_abi::perf::{Event, MAX_OPEN};
use tsumugi_abi::syscall::Errno;

use crate::domain::Domain;
use crate::thread::Thread;

/// Software events a thread tallies.
const SOFTWARE: [Event; 4] = [Event::ViewSwitches, Event::TlbFlushes, Event::Upcalls, Event::ContextSwitches];

/// User threads (over all programs) that may have counters at once; `perf_open` from one more
/// answers `ENOMEM`. Entries of programs that ended are reused.
pub const MAX_USER_THREADS: usize = 256;

#[derive(Clone, Copy, Debug)]
struct Open {
    event: Event,
    running: bool,
    /// Counted so far (while running, up to `base`).
    total: u64,
    /// Reading of the source when counting last resumed.
    base: u64,
}

type Slots = [Option<Open>; MAX_OPEN];

/// A user thread's counters loaded into a kernel thread.
struct Loaded {
    ltn: u64,
    slots: Slots,
    /// `hw_mask(&slots)`, kept by [`ThreadPerf::set_hw`].
    hw: u8,
}

/// A kernel thread's counters and the user thread's it carries.
struct Counters {
    own: Slots,
    /// `hw_mask(&own)`, kept by [`ThreadPerf::set_hw`].
    own_hw: u8,
    /// The counters of the user thread this kernel thread carries now.
    user: Option<Loaded>,
}

const _: () = assert!(MAX_OPEN <= 8, "slot masks are one byte");

/// A thread's counters.
pub struct ThreadPerf {
    open: Mutex<Counters>,
    /// Software tallies, in [`SOFTWARE`] order.
    tallies: [AtomicU64; 4],
    /// Whether any hardware counter runs (so switches need to save/restore): bit 0 the kernel
    /// thread's own, bit 1 the carried user thread's. One byte, as before user counters, so
    /// making and switching a thread costs what it did.
    hw_running: AtomicU8,
}

impl ThreadPerf {
    /// Nothing open.
    pub const fn new() -> Self {
        ThreadPerf {
            open: Mutex::new(Counters { own: [None; MAX_OPEN], own_hw: 0, user: None }),
            tallies: [const { AtomicU64::new(0) }; 4],
            hw_running: AtomicU8::new(0),
        }
    }

    /// Counts one software event for this thread.
    #[inline]
    pub fn tally(&self, event: Event) {
        if let Some(i) = SOFTWARE.iter().position(|e| *e == event) {
            self.tallies[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Recomputes the slot masks of `c` and `hw_running` (under the `open` lock, after every
    /// change of the slots: `with_slots`, `bind`, `close`).
    fn set_hw(&self, c: &mut Counters) {
        c.own_hw = hw_mask(&c.own);
        let user = match c.user.as_mut() {
            Some(l) => {
                l.hw = hw_mask(&l.slots);
                l.hw != 0
            }
            None => false,
        };
        self.hw_running.store(u8::from(c.own_hw != 0) | (u8::from(user) << 1), Ordering::Relaxed);
    }
}

impl Default for ThreadPerf {
    fn default() -> Self {
        Self::new()
    }
}

/// A user thread's counters, parked (or, with `holder` alive, loaded in that kernel thread).
struct Parked {
    domain: Weak<Domain>,
    ltn: u64,
    slots: Slots,
    holder: Weak<Thread>,
}

/// Every user thread's counters (locked before any thread's `user`).
static USERS: Mutex<Vec<Parked>> = Mutex::new(Vec::new());

fn hw(event: Event) -> Option<HwEvent> {
    match event {
        Event::Cycles => Some(HwEvent::Cycles),
        Event::Instructions => Some(HwEvent::Instructions),
        Event::DtlbMiss => Some(HwEvent::DtlbMiss),
        Event::ItlbMiss => Some(HwEvent::ItlbMiss),
        _ => None,
    }
}

/// The software tally of `t` that counts `event` (`None` for hardware events).
fn tally_of(t: &Thread, event: Event) -> Option<u64> {
    SOFTWARE.iter().position(|e| *e == event).map(|i| t.perf.tallies[i].load(Ordering::Relaxed))
}

/// The current reading of an event's source for thread `t` on this CPU.
fn source(t: &Thread, event: Event) -> u64 {
    match hw(event) {
        Some(h) => arch::pmu::read(h),
        None => tally_of(t, event).unwrap_or(0),
    }
}

/// The source of a user thread's counter loaded in `t`: as [`source`], except context switches,
/// which are the user thread's resumes (`perf_switch`), not the kernel thread's.
fn user_source(t: &Thread, event: Event) -> u64 {
    if event == Event::ContextSwitches {
        0
    } else {
        source(t, event)
    }
}

/// The slots of `slots` whose hardware counter runs, one bit each: what a switch visits (a
/// loop over all `MAX_OPEN` slots cost each switch of a thread with counters about six
/// instructions per slot, twice).
fn hw_mask(slots: &Slots) -> u8 {
    slots.iter().enumerate().fold(0, |m, (i, o)| match o {
        Some(o) if o.running && hw(o.event).is_some() => m | 1 << i,
        _ => m,
    })
}

/// The user thread whose counters the caller's calls use: its LTN when non-zero (a user thread
/// of an M:N program), else `None` (the kernel thread's own counters).
fn user_key(t: &Thread) -> Option<(Arc<Domain>, u64)> {
    let ltn = arch::cpu::user_ltn();
    if ltn == 0 {
        return None;
    }
    t.domain.clone().map(|d| (d, ltn))
}

fn find(users: &[Parked], domain: &Arc<Domain>, ltn: u64) -> Option<usize> {
    users.iter().position(|p| p.ltn == ltn && core::ptr::eq(p.domain.as_ptr(), Arc::as_ptr(domain)))
}

/// Parks the user counters loaded in `t` (running on this CPU) into `users`.
fn park_loaded(users: &mut [Parked], t: &Thread, loaded: Loaded, here: bool) {
    let mut slots = loaded.slots;
    for o in slots.iter_mut().flatten() {
        if o.running {
            if here {
                o.total += user_source(t, o.event).wrapping_sub(o.base);
            } else if hw(o.event).is_none() {
                // Off its CPU: its hardware counts were added at its switch-out.
                o.total += user_source(t, o.event).wrapping_sub(o.base);
            }
        }
    }
    if let Some(p) = users.iter_mut().find(|p| p.ltn == loaded.ltn && p.holder.as_ptr() == t as *const Thread) {
        p.slots = slots;
        p.holder = Weak::new();
    }
}

/// Makes the counters of user thread `key` (or none) the ones loaded in `me`, the caller on
/// this CPU. `create`: make an entry if the user thread has none. `Err(NoMem)`: the table is
/// full; `Ok(false)`: no entry.
fn bind(me: &Arc<Thread>, key: Option<(Arc<Domain>, u64)>, create: bool) -> Result<bool, Errno> {
    let mut users = USERS.lock();
    let mut c = me.perf.open.lock();
    let want = key.as_ref().map(|(_, l)| *l);
    if want.is_some() && c.user.as_ref().map(|l| l.ltn) == want {
        // Same program: the kernel thread belongs to one.
        return Ok(true);
    }
    if let Some(loaded) = c.user.take() {
        park_loaded(&mut users, me, loaded, true);
    }
    me.perf.set_hw(&mut c);
    let Some((domain, ltn)) = key else {
        return Ok(false);
    };
    let i = match find(&users, &domain, ltn) {
        Some(i) => i,
        None if create => {
            users.retain(|p| p.domain.upgrade().is_some_and(|d| d.outcome().is_none()));
            if users.len() >= MAX_USER_THREADS || users.try_reserve(1).is_err() {
                return Err(Errno::NoMem);
            }
            users.push(Parked { domain: Arc::downgrade(&domain), ltn, slots: [None; MAX_OPEN], holder: Weak::new() });
            users.len() - 1
        }
        None => return Ok(false),
    };
    // Carried by another kernel thread (off its CPU, or one that never went back to it): pull.
    if let Some(other) = users[i].holder.upgrade() {
        if !Arc::ptr_eq(&other, me) {
            let mut theirs = other.perf.open.lock();
            if theirs.user.as_ref().is_some_and(|l| l.ltn == ltn) {
                let loaded = theirs.user.take().expect("checked");
                other.perf.set_hw(&mut theirs);
                drop(theirs);
                park_loaded(&mut users, &other, loaded, false);
            }
        }
    }
    let mut slots = users[i].slots;
    for o in slots.iter_mut().flatten() {
        if o.running {
            o.base = user_source(me, o.event);
        }
    }
    users[i].holder = Arc::downgrade(me);
    c.user = Some(Loaded { ltn, slots, hw: 0 });
    me.perf.set_hw(&mut c);
    Ok(true)
}

/// Runs `f` on the slots the caller's calls use (its user thread's, loaded first, or its own).
fn with_slots<R>(me: &Arc<Thread>, create: bool, f: impl FnOnce(&Thread, &mut Slots, bool) -> Result<R, Errno>) -> Result<R, Errno> {
    let user = match user_key(me) {
        None => false,
        Some(key) => {
            if !bind(me, Some(key), create)? {
                return Err(Errno::Inval);
            }
            true
        }
    };
    let mut c = me.perf.open.lock();
    let r = match (user, c.user.as_mut()) {
        (false, _) => f(me, &mut c.own, false),
        (true, Some(loaded)) => f(me, &mut loaded.slots, true),
        (true, None) => Err(Errno::Inval),
    };
    me.perf.set_hw(&mut c);
    r
}

/// `perf_open(event)`.
pub fn open(me: &Arc<Thread>, event: usize) -> Result<usize, Errno> {
    let event = Event::from_number(event).ok_or(Errno::Inval)?;
    if let Some(h) = hw(event) {
        if !arch::pmu::supported(h) {
            return Err(Errno::NotSup);
        }
    }
    with_slots(me, true, |_, open, _| {
        let slot = open.iter().position(|o| o.is_none()).ok_or(Errno::NoMem)?;
        open[slot] = Some(Open { event, running: false, total: 0, base: 0 });
        Ok(slot)
    })
}

fn with_slot<R>(me: &Arc<Thread>, handle: usize, f: impl FnOnce(&Thread, &mut Open, bool) -> R) -> Result<R, Errno> {
    with_slots(me, false, |t, open, user| open.get_mut(handle).and_then(|o| o.as_mut()).map(|o| f(t, o, user)).ok_or(Errno::Inval))
}

fn read_source(t: &Thread, event: Event, user: bool) -> u64 {
    if user {
        user_source(t, event)
    } else {
        source(t, event)
    }
}

/// `perf_start(h)`.
pub fn start(me: &Arc<Thread>, handle: usize) -> Result<usize, Errno> {
    with_slot(me, handle, |t, o, user| {
        if !o.running {
            o.base = read_source(t, o.event, user);
            o.running = true;
        }
        0
    })
}

/// `perf_stop(h)`.
pub fn stop(me: &Arc<Thread>, handle: usize) -> Result<usize, Errno> {
    with_slot(me, handle, |t, o, user| {
        if o.running {
            o.total += read_source(t, o.event, user).wrapping_sub(o.base);
            o.running = false;
        }
        0
    })
}

/// `perf_read(h)`.
pub fn read(me: &Arc<Thread>, handle: usize) -> Result<usize, Errno> {
    with_slot(me, handle, |t, o, user| {
        let live = if o.running { read_source(t, o.event, user).wrapping_sub(o.base) } else { 0 };
        (o.total + live) as usize
    })
}

/// `perf_close(h)`. A user thread's last close gives its table entry back.
pub fn close(me: &Arc<Thread>, handle: usize) -> Result<usize, Errno> {
    let r = with_slots(me, false, |_, open, _| {
        let slot = open.get_mut(handle).ok_or(Errno::Inval)?;
        slot.take().ok_or(Errno::Inval)?;
        Ok(0)
    })?;
    let mut users = USERS.lock();
    let mut c = me.perf.open.lock();
    if let Some(loaded) = c.user.as_ref().filter(|l| l.slots.iter().all(|o| o.is_none())) {
        let ltn = loaded.ltn;
        users.retain(|p| !(p.ltn == ltn && p.holder.as_ptr() == Arc::as_ptr(me)));
        c.user = None;
        me.perf.set_hw(&mut c);
        if users.is_empty() {
            *users = Vec::new();
        }
    }
    Ok(r)
}

/// `perf_switch(ltn)`: the calling activation now runs user thread `ltn` of its program (0:
/// none): its counters, if it has any, are loaded here and its `ContextSwitches` counters
/// count one.
pub fn switch(me: &Arc<Thread>, ltn: usize) -> Result<usize, Errno> {
    let key = if ltn == 0 { None } else { me.domain.clone().map(|d| (d, ltn as u64)) };
    if bind(me, key, false)? {
        if let Some(loaded) = me.perf.open.lock().user.as_mut() {
            for o in loaded.slots.iter_mut().flatten() {
                if o.running && o.event == Event::ContextSwitches {
                    o.total += 1;
                }
            }
        }
    }
    Ok(0)
}

/// Calls `f` with each slot of `slots` named in `mask` (see [`hw_mask`]: running, with a
/// hardware counter) and its counter, lowest slot first.
#[inline(always)]
fn each_hw(slots: &mut Slots, mut mask: u8, mut f: impl FnMut(&mut Open, HwEvent)) {
    while mask != 0 {
        let i = mask.trailing_zeros() as usize;
        mask &= mask - 1;
        if let Some(o) = slots[i].as_mut() {
            if let Some(h) = hw(o.event) {
                f(o, h);
            }
        }
    }
}

/// Adds what the running hardware counters of `slots` (those in `mask`) counted since they
/// resumed.
fn pause_hw(slots: &mut Slots, mask: u8) {
    each_hw(slots, mask, |o, h| o.total += arch::pmu::read(h).wrapping_sub(o.base));
}

/// Resumes the running hardware counters of `slots` (those in `mask`) from here.
fn resume_hw(slots: &mut Slots, mask: u8) {
    each_hw(slots, mask, |o, h| o.base = arch::pmu::read(h));
}

/// The thread leaves its CPU: what its hardware counters counted since it came is its own.
/// On every kernel switch: the test is inlined, the work (only with a hardware counter
/// running) is not, so the switch pays one load and a branch.
#[inline(always)]
pub fn switch_out(t: &Thread) {
    if t.perf.hw_running.load(Ordering::Relaxed) != 0 {
        switch_out_counting(t);
    }
}

/// [`switch_out`] with a hardware counter running.
#[inline(never)]
fn switch_out_counting(t: &Thread) {
    let mut c = t.perf.open.lock();
    let own = c.own_hw;
    pause_hw(&mut c.own, own);
    if let Some(l) = c.user.as_mut() {
        pause_hw(&mut l.slots, l.hw);
    }
}

/// The thread comes onto a CPU: its hardware counters resume from here (inlined test, as
/// [`switch_out`]).
#[inline(always)]
pub fn switch_in(t: &Thread) {
    if t.perf.hw_running.load(Ordering::Relaxed) != 0 {
        switch_in_counting(t);
    }
}

/// [`switch_in`] with a hardware counter running.
#[inline(never)]
fn switch_in_counting(t: &Thread) {
    let mut c = t.perf.open.lock();
    let own = c.own_hw;
    resume_hw(&mut c.own, own);
    if let Some(l) = c.user.as_mut() {
        resume_hw(&mut l.slots, l.hw);
    }
}
