//! Per-thread performance counters (`tsumugi_abi::perf`). Hardware events are read from the
//! port's PMU and virtualised per thread: what ran between the thread's switch-in and
//! switch-out is added to its counters, so a thread sees only its own events. Software events
//! are tallied by the kernel at the places they happen.

use arch::pmu::HwEvent;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use spin::Mutex;
use tsumugi_abi::perf::{Event, MAX_OPEN};
use tsumugi_abi::syscall::Errno;

use crate::thread::Thread;

/// Software events a thread tallies.
const SOFTWARE: [Event; 4] = [Event::ViewSwitches, Event::TlbFlushes, Event::Upcalls, Event::ContextSwitches];

#[derive(Clone, Copy, Debug)]
struct Open {
    event: Event,
    running: bool,
    /// Counted so far (while running, up to `base`).
    total: u64,
    /// Reading of the source when counting last resumed.
    base: u64,
}

/// A thread's counters.
pub struct ThreadPerf {
    open: Mutex<[Option<Open>; MAX_OPEN]>,
    /// Software tallies, in [`SOFTWARE`] order.
    tallies: [AtomicU64; 4],
    /// Whether any hardware counter runs (so switches need to save/restore).
    hw_running: AtomicBool,
}

impl ThreadPerf {
    /// Nothing open.
    pub const fn new() -> Self {
        ThreadPerf {
            open: Mutex::new([None; MAX_OPEN]),
            tallies: [const { AtomicU64::new(0) }; 4],
            hw_running: AtomicBool::new(false),
        }
    }

    /// Counts one software event for this thread.
    #[inline]
    pub fn tally(&self, event: Event) {
        if let Some(i) = SOFTWARE.iter().position(|e| *e == event) {
            self.tallies[i].fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Default for ThreadPerf {
    fn default() -> Self {
        Self::new()
    }
}

fn hw(event: Event) -> Option<HwEvent> {
    match event {
        Event::Cycles => Some(HwEvent::Cycles),
        Event::Instructions => Some(HwEvent::Instructions),
        Event::DtlbMiss => Some(HwEvent::DtlbMiss),
        Event::ItlbMiss => Some(HwEvent::ItlbMiss),
        _ => None,
    }
}

/// The current reading of an event's source for thread `t` on this CPU.
fn source(t: &Thread, event: Event) -> u64 {
    match hw(event) {
        Some(h) => arch::pmu::read(h),
        None => SOFTWARE.iter().position(|e| *e == event).map_or(0, |i| t.perf.tallies[i].load(Ordering::Relaxed)),
    }
}

fn refresh_hw_flag(t: &Thread, open: &[Option<Open>; MAX_OPEN]) {
    let any = open.iter().flatten().any(|o| o.running && hw(o.event).is_some());
    t.perf.hw_running.store(any, Ordering::Relaxed);
}

/// `perf_open(event)`.
pub fn open(t: &Thread, event: usize) -> Result<usize, Errno> {
    let event = Event::from_number(event).ok_or(Errno::Inval)?;
    if let Some(h) = hw(event) {
        if !arch::pmu::supported(h) {
            return Err(Errno::NotSup);
        }
    }
    let mut open = t.perf.open.lock();
    let slot = open.iter().position(|o| o.is_none()).ok_or(Errno::NoMem)?;
    open[slot] = Some(Open { event, running: false, total: 0, base: 0 });
    Ok(slot)
}

fn with_slot<R>(t: &Thread, handle: usize, f: impl FnOnce(&mut Open) -> R) -> Result<R, Errno> {
    let mut open = t.perf.open.lock();
    let r = open.get_mut(handle).and_then(|o| o.as_mut()).map(f).ok_or(Errno::Inval);
    refresh_hw_flag(t, &open);
    r
}

/// `perf_start(h)`.
pub fn start(t: &Thread, handle: usize) -> Result<usize, Errno> {
    with_slot(t, handle, |o| {
        if !o.running {
            o.base = source(t, o.event);
            o.running = true;
        }
        0
    })
}

/// `perf_stop(h)`.
pub fn stop(t: &Thread, handle: usize) -> Result<usize, Errno> {
    with_slot(t, handle, |o| {
        if o.running {
            o.total += source(t, o.event).wrapping_sub(o.base);
            o.running = false;
        }
        0
    })
}

/// `perf_read(h)`.
pub fn read(t: &Thread, handle: usize) -> Result<usize, Errno> {
    with_slot(t, handle, |o| {
        let live = if o.running { source(t, o.event).wrapping_sub(o.base) } else { 0 };
        (o.total + live) as usize
    })
}

/// `perf_close(h)`.
pub fn close(t: &Thread, handle: usize) -> Result<usize, Errno> {
    let mut open = t.perf.open.lock();
    let slot = open.get_mut(handle).ok_or(Errno::Inval)?;
    slot.take().ok_or(Errno::Inval)?;
    refresh_hw_flag(t, &open);
    Ok(0)
}

/// The thread leaves its CPU: what its hardware counters counted since it came is its own.
pub fn switch_out(t: &Thread) {
    if !t.perf.hw_running.load(Ordering::Relaxed) {
        return;
    }
    for o in t.perf.open.lock().iter_mut().flatten() {
        if o.running {
            if let Some(h) = hw(o.event) {
                o.total += arch::pmu::read(h).wrapping_sub(o.base);
            }
        }
    }
}

/// The thread comes onto a CPU: its hardware counters resume from here.
pub fn switch_in(t: &Thread) {
    if !t.perf.hw_running.load(Ordering::Relaxed) {
        return;
    }
    for o in t.perf.open.lock().iter_mut().flatten() {
        if o.running {
            if let Some(h) = hw(o.event) {
                o.base = arch::pmu::read(h);
            }
        }
    }
}
