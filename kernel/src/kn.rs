//! Kernel Notification: vCPUs, zero-copy saves into ThMBs, upcalls and the event ring
//! (`tsumugi_abi::kn` is the contract; DESIGN §6).
//!
//! A program that registers (`kn_register`) gets vCPUs: kernel threads that embody its virtual
//! processors. When the kernel stops the user thread a vCPU runs — preemption, a blocking
//! syscall, an unhandled page fault — and the LTN register names a ThMB, the kernel writes the
//! full register frame straight into that ThMB (after checking the thread's view may write it)
//! and hands the vCPU back to the library through an upcall. A blocking syscall keeps the
//! thread's kernel side (its old activation) waiting, and a new activation takes over the vCPU:
//! the vCPU never blocks. LTN = 0 means the library is in its own critical section: the kernel
//! then saves in its own area and resumes the vCPU in place, without an upcall.
//!
//! Every event is appended, in order, to the program's ring; events that find the ring full wait
//! in order in the kernel (`held`) until the library makes room, so none is lost and an
//! `UNBLOCKED(t)` can never overtake the `BLOCKED(t)` it answers.
//!
//! Lock order: a domain's `kn` lock, then the view space (ring writes), then run queues.

use alloc::collections::VecDeque;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use arch::mapping::MapFlags;
use arch::trap::TrapFrame;
use core::mem::size_of;
use core::sync::atomic::Ordering;
use tsumugi_abi::kn::{
    mask, Event, EventKind, Registration, RingHeader, FP_AREA_ALIGN, FP_AREA_PTR_OFFSET, FP_AREA_SIZE, FP_FORMAT_OFFSET, FULL_OFFSET,
    HEADER_SIZE, MASK_OFFSET, MAX_VCPUS, RESULT_OFFSET, RING_SLOTS_OFFSET, THMB_ALIGN,
};
use tsumugi_abi::syscall::Errno;

use crate::domain::{Domain, Outcome};
use crate::mm::view::ViewId;
use crate::mm::views;
use crate::sched::scheduler::{self, Then};
use crate::thread::{self, Body, Thread, NOT_A_VCPU};

/// Largest ring a program may register.
const MAX_RING_SLOTS: u64 = 1 << 16;
/// Bytes of a ThMB header the kernel writes.
const THMB_HEADER: u64 = HEADER_SIZE as u64;

/// One virtual processor of a program.
struct Vcpu {
    /// Its activation parked in `vcpu_park`, if any.
    parked: Option<Arc<Thread>>,
    /// An unpark came while it was not parked: the next park returns at once.
    token: bool,
}

/// A program's Kernel Notification state.
pub struct KnState {
    handler: u64,
    ring: u64,
    /// The library's per-vCPU "FP is live" words (`Registration::fp_live`), or 0.
    fp_live: u64,
    capacity: u64,
    /// The view the registering thread had: the ring and ThMB checks use each thread's own view,
    /// but ring writes go through this one (the library's ring is in every thread's view).
    ring_view: ViewId,
    upcall_stacks: Vec<u64>,
    vcpus: Vec<Vcpu>,
    /// Events waiting for room in the ring, in order.
    held: VecDeque<Event>,
    /// Upcalls delivered, by kind (index = kind value).
    pub upcalls: [u64; 8],
}

impl KnState {
    fn ring_words(&self) -> Result<(u64, u64), views::Refused> {
        let mut raw = [0u8; 16];
        views::read_as(self.ring_view, self.ring, &mut raw)?;
        let head = u64::from_le_bytes(raw[..8].try_into().expect("8 bytes"));
        let tail = u64::from_le_bytes(raw[8..].try_into().expect("8 bytes"));
        Ok((head, tail))
    }

    /// Moves held events into the ring while there is room; returns whether any moved.
    fn flush_held(&mut self) -> bool {
        let Ok((head, mut tail)) = self.ring_words() else { return false };
        // The library read the slots below `head` before it advanced `head`: reuse them only
        // after that read (weakly ordered CPUs: aarch64, riscv64).
        core::sync::atomic::fence(Ordering::Acquire);
        let mut moved = false;
        while let Some(e) = self.held.front().copied() {
            if tail.wrapping_sub(head) >= self.capacity {
                break;
            }
            let slot = self.ring + RING_SLOTS_OFFSET as u64 + (tail % self.capacity) * size_of::<Event>() as u64;
            let words = [e.kind, e.thread, e.arg0, e.arg1];
            let mut raw = [0u8; 32];
            for (i, w) in words.iter().enumerate() {
                raw[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
            }
            if views::write_as(self.ring_view, slot, &raw).is_err() {
                break;
            }
            // The slot, and the ThMB written before the event was posted, must be visible
            // before the new `tail` is: the library reads them once it sees it.
            core::sync::atomic::fence(Ordering::Release);
            tail += 1;
            let _ = views::write_as(self.ring_view, self.ring + 8, &tail.to_le_bytes());
            self.held.pop_front();
            moved = true;
        }
        let held = self.held.len() as u64;
        let _ = views::write_as(self.ring_view, self.ring + 24, &held.to_le_bytes());
        moved
    }

    fn unread(&self) -> bool {
        matches!(self.ring_words(), Ok((head, tail)) if tail != head)
    }

    /// Wakes one parked vCPU (an event is waiting for the library).
    fn wake_one(&mut self) {
        if let Some(t) = self.vcpus.iter_mut().find_map(|v| v.parked.take()) {
            thread::wake(t);
        }
    }
}

/// Appends `event` to `domain`'s ring (or holds it back, in order, when full) and wakes a parked
/// vCPU to read it.
pub fn post(domain: &Domain, event: Event) {
    let mut kn = domain.kn.lock();
    let Some(kn) = kn.as_mut() else { return };
    kn.held.push_back(event);
    kn.flush_held();
    kn.wake_one();
}

/// The running thread used FP for the first time (its FP-disabled trap): if it is a vCPU of a
/// program that asked (`Registration::fp_live`), tell the library that FP is live on it.
pub fn note_fp_use(me: &Thread) {
    let v = me.vcpu.load(Ordering::Acquire);
    if v == NOT_A_VCPU {
        return;
    }
    let (Some(domain), Some(view)) = (&me.domain, me.view()) else { return };
    let word = domain.kn.lock().as_ref().map_or(0, |kn| kn.fp_live);
    if word != 0 {
        // Checked writable at registration; a refusal now (the program unmapped it) only
        // costs the program its own FP callee-saved registers, as it asked.
        let _ = views::write_as(view, word + 8 * v as u64, &1u64.to_le_bytes());
    }
}

/// `kn_register(reg)`.
pub fn register(me: &Arc<Thread>, reg_addr: u64) -> Result<usize, Errno> {
    let domain = me.domain.clone().ok_or(Errno::Inval)?;
    let view = me.view().ok_or(Errno::Fault)?;
    let mut raw = [0u8; size_of::<Registration>()];
    views::read_as(view, reg_addr, &mut raw).map_err(|_| Errno::Fault)?;
    let word = |i: usize| u64::from_le_bytes(raw[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    let reg = Registration { handler: word(0), ring: word(1), upcall_stacks: word(2), vcpus: word(3), fp_live: word(4) };
    if reg.vcpus == 0 || reg.vcpus as usize > MAX_VCPUS {
        return Err(Errno::Inval);
    }
    let exec_ok = views::with(|s, _| s.check(view, reg.handler, 1, MapFlags::EXEC).is_ok());
    if !exec_ok {
        return Err(Errno::Fault);
    }
    let mut header = [0u8; size_of::<RingHeader>()];
    views::read_as(view, reg.ring, &mut header).map_err(|_| Errno::Fault)?;
    let capacity = u64::from_le_bytes(header[16..24].try_into().expect("8 bytes"));
    if capacity == 0 || !capacity.is_power_of_two() || capacity > MAX_RING_SLOTS {
        return Err(Errno::Inval);
    }
    let ring_bytes = RING_SLOTS_OFFSET as u64 + capacity * size_of::<Event>() as u64;
    views::with(|s, _| s.check(view, reg.ring, ring_bytes, MapFlags::WRITE)).map_err(|_| Errno::Fault)?;
    if reg.fp_live != 0 {
        let fp_live_ok = reg.fp_live % 8 == 0 && views::with(|s, _| s.check(view, reg.fp_live, reg.vcpus * 8, MapFlags::WRITE).is_ok());
        if !fp_live_ok {
            return Err(Errno::Fault);
        }
    }
    let mut stacks = Vec::new();
    stacks.try_reserve_exact(reg.vcpus as usize).map_err(|_| Errno::NoMem)?;
    for v in 0..reg.vcpus {
        let mut top = [0u8; 8];
        views::read_as(view, reg.upcall_stacks + v * 8, &mut top).map_err(|_| Errno::Fault)?;
        let top = u64::from_le_bytes(top);
        views::with(|s, _| s.check(view, top.saturating_sub(64), 64, MapFlags::WRITE)).map_err(|_| Errno::Fault)?;
        stacks.push(top);
    }
    {
        let mut kn = domain.kn.lock();
        if kn.is_some() {
            return Err(Errno::Inval);
        }
        // The ring view stays attached while the program lives (released with the domain).
        let ring_view = views::with(|s, m| {
            let set = s.set(view).map(|x| x.to_vec()).unwrap_or_default();
            s.attach(m, &set)
        })
        .map_err(|_| Errno::NoMem)?;
        *kn = Some(KnState {
            handler: reg.handler,
            ring: reg.ring,
            fp_live: reg.fp_live,
            capacity,
            ring_view,
            upcall_stacks: stacks.clone(),
            vcpus: (0..reg.vcpus).map(|_| Vcpu { parked: None, token: false }).collect(),
            held: VecDeque::new(),
            upcalls: [0; 8],
        });
    }
    me.vcpu.store(0, Ordering::Release);
    // The caller becomes vCPU 0. If it used FP before (its first FP trap then found no vCPU to
    // report), its FP state is live now: say so, or the library's WINDOW switches on vCPU 0
    // would leave the ABI's callee-saved FP registers unsaved.
    if crate::fpu::has_used_fp(me) {
        note_fp_use(me);
    }
    for v in 1..reg.vcpus {
        post(&domain, Event { kind: EventKind::VcpuGranted as u64, thread: 0, arg0: v, arg1: 0 });
        let args = [EventKind::VcpuGranted as u64, 0, v, v];
        start_activation(&domain, me, v as usize, reg.handler, stacks[v as usize], args)?;
    }
    Ok(0)
}

/// Starts a new activation of vCPU `vcpu` entering the handler with `args`, with the rights
/// `source` (the registering or blocking thread) has now.
///
/// Under the program's `region_lock`, as `region_create` is: a region another vCPU creates
/// meanwhile is either in `source`'s view before the copy (`source` is one of its creator's
/// mates) or created after the new activation joined the program (which makes it a mate).
/// Without the lock, an activation copying a view read earlier misses such a region, and the
/// library's threads fault on their own stacks when that vCPU runs them.
fn start_activation(domain: &Arc<Domain>, source: &Thread, vcpu: usize, handler: u64, stack: u64, args: [u64; 4]) -> Result<Arc<Thread>, Errno> {
    let _creating = domain.region_lock.lock();
    let view = source.view().ok_or(Errno::Fault)?;
    let set = views::with(|s, _| s.set(view).map(|x| x.to_vec())).ok_or(Errno::Fault)?;
    let v = views::with(|s, m| s.attach(m, &set)).map_err(|_| Errno::NoMem)?;
    count_upcall(domain, args[0]);
    domain.spawn(v, Body::Upcall { ip: handler, sp: stack, args }, true, Some(vcpu)).map_err(|_| Errno::NoMem)
}

fn count_upcall(domain: &Domain, kind: u64) {
    crate::sched::scheduler::with_current(|t| {
        if let Some(t) = t {
            t.perf.tally(tsumugi_abi::perf::Event::Upcalls);
        }
    });
    if let Some(kn) = domain.kn.lock().as_mut() {
        if let Some(c) = kn.upcalls.get_mut(kind as usize) {
            *c += 1;
        }
    }
}

/// Upcalls delivered to `domain`, by kind value (kept after the program ends).
pub fn upcalls_total(domain: &Domain) -> [u64; 8] {
    let live = domain.kn.lock().as_ref().map(|k| k.upcalls);
    live.unwrap_or_else(|| *domain.final_upcalls.lock())
}

/// Whether the running thread is a vCPU of a registered program, and its vCPU index.
fn current_vcpu(me: &Thread) -> Option<usize> {
    let v = me.vcpu.load(Ordering::Acquire);
    (v != NOT_A_VCPU && me.domain.as_ref().is_some_and(|d| d.kn.lock().is_some())).then_some(v)
}

/// Saves `frame` into the ThMB the LTN register names, checked against `view`. Returns the
/// ThMB address, 0 when LTN is 0 (nothing saved), or the report if LTN names memory the thread
/// may not write.
fn save_to_thmb(view: ViewId, frame: &TrapFrame) -> Result<u64, String> {
    let ltn = arch::cpu::user_ltn();
    if ltn == 0 {
        return Ok(0);
    }
    if ltn % THMB_ALIGN != 0 || ltn >= arch::layout::KERNEL_HALF {
        return Err(format!("bad LTN {ltn:#x}: not a {THMB_ALIGN}-byte-aligned ThMB address in the user half"));
    }
    // Check the whole header before writing any of it.
    let writable = views::with(|s, _| s.check(view, ltn, THMB_HEADER, MapFlags::WRITE).is_ok());
    if !writable {
        return Err(format!("bad LTN {ltn:#x}: the thread's view may not write a ThMB there"));
    }
    let full = frame.to_full_frame();
    // SAFETY: FullFrame is #[repr(C)] plain u64 fields; viewing it as bytes reads initialised
    // memory of exactly its size.
    let bytes = unsafe { core::slice::from_raw_parts(&full as *const _ as *const u8, size_of::<tsumugi_abi::kn::FullFrame>()) };
    views::write_as(view, ltn + FULL_OFFSET as u64, bytes).map_err(|_| format!("bad LTN {ltn:#x}: write refused"))?;
    let saved = mask::FULL | save_fp_to_thmb(view, ltn)?;
    views::write_as(view, ltn + MASK_OFFSET as u64, &saved.to_le_bytes()).map_err(|_| format!("bad LTN {ltn:#x}: write refused"))?;
    Ok(ltn)
}

/// With a FULL save: puts the running thread's FP/SIMD state (if it has any) into the FP area
/// its ThMB names, so that the library can switch the vCPU to another thread without losing
/// it. Returns [`mask::FP`] if saved, 0 if the thread has no FP state or no FP area.
fn save_fp_to_thmb(view: ViewId, ltn: u64) -> Result<u64, String> {
    // Most stops are of threads that never touched FP: skip the read of the header then.
    if !scheduler::current().is_some_and(|me| crate::fpu::has_used_fp(&me)) {
        return Ok(0);
    }
    let mut word = [0u8; 8];
    views::read_as(view, ltn + FP_AREA_PTR_OFFSET as u64, &mut word).map_err(|_| format!("bad LTN {ltn:#x}: read refused"))?;
    let area = u64::from_le_bytes(word);
    if area == 0 {
        return Ok(0);
    }
    if area % FP_AREA_ALIGN != 0 || area >= arch::layout::KERNEL_HALF {
        return Err(format!("bad FP area {area:#x} in ThMB {ltn:#x}: not a {FP_AREA_ALIGN}-byte-aligned user address"));
    }
    let wrote = crate::fpu::with_current_state(|state| {
        if state.len() > FP_AREA_SIZE {
            return Err(format!("FP state of {} bytes does not fit the ABI's {FP_AREA_SIZE}-byte area", state.len()));
        }
        views::write_as(view, area, state).map_err(|_| format!("bad FP area {area:#x} in ThMB {ltn:#x}: the thread's view may not write it"))
    });
    match wrote {
        None => Ok(0),
        Some(r) => {
            r?;
            let format = arch::fpu::thmb_format().to_le_bytes();
            views::write_as(view, ltn + FP_FORMAT_OFFSET as u64, &format).map_err(|_| format!("bad LTN {ltn:#x}: write refused"))?;
            Ok(mask::FP)
        }
    }
}

fn kill(me: &Thread, reason: String) -> ! {
    if let Some(d) = &me.domain {
        d.end(Outcome::Killed(reason));
    }
    thread::exit_current(None)
}

/// Turns the running vCPU's return to user mode into an upcall.
fn upcall(me: &Thread, frame: &mut TrapFrame, vcpu: usize, args: [u64; 4]) {
    let Some(domain) = &me.domain else { return };
    let (handler, stack) = {
        let kn = domain.kn.lock();
        let Some(kn) = kn.as_ref() else { return };
        (kn.handler, kn.upcall_stacks[vcpu])
    };
    count_upcall(domain, args[0]);
    frame.set_upcall(handler, stack, args);
    arch::cpu::set_user_ltn(0);
}

/// The timer ended the running thread's quantum. For a vCPU running a user thread (LTN ≠ 0):
/// save it into its ThMB, post `PREEMPTED`, let others run, then upcall. Otherwise (LTN = 0,
/// or not a vCPU) plain preemption, resumed in place.
pub fn preempt(frame: &mut TrapFrame) {
    let me = scheduler::current().expect("preempting a thread");
    let (Some(vcpu), Some(view)) = (current_vcpu(&me), me.view()) else {
        drop(me);
        scheduler::preempt();
        return;
    };
    match save_to_thmb(view, frame) {
        Ok(0) => {
            drop(me);
            scheduler::preempt();
        }
        Ok(thmb) => {
            let domain = me.domain.clone().expect("a vCPU has a domain");
            post(&domain, Event { kind: EventKind::Preempted as u64, thread: thmb, arg0: vcpu as u64, arg1: 0 });
            drop(domain);
            let me2 = me.clone();
            drop(me);
            scheduler::preempt();
            upcall(&me2, frame, vcpu, [EventKind::Preempted as u64, thmb, vcpu as u64, 0]);
        }
        Err(report) => kill(&me, report),
    }
}

/// A page fault the view does not allow, in a vCPU: with LTN ≠ 0 the thread is saved and the
/// library gets `FAULT`; with LTN = 0 (its critical section or handler) the program ends.
/// Returns `false` when the thread is not a vCPU (the caller reports as usual).
pub fn fault(frame: &mut TrapFrame, address: u64, access: u64, report: impl FnOnce() -> String) -> bool {
    let me = scheduler::current().expect("a faulting thread");
    let (Some(vcpu), Some(view)) = (current_vcpu(&me), me.view()) else { return false };
    match save_to_thmb(view, frame) {
        Ok(0) => kill(&me, format!("{} — in the library's critical section or notification handler (LTN = 0), so no upcall", report())),
        Ok(thmb) => {
            let domain = me.domain.clone().expect("a vCPU has a domain");
            post(&domain, Event { kind: EventKind::Fault as u64, thread: thmb, arg0: address, arg1: access });
            upcall(&me, frame, vcpu, [EventKind::Fault as u64, thmb, vcpu as u64, address]);
            true
        }
        Err(bad) => kill(&me, bad),
    }
}

/// Runs the blocking part of a syscall. For a vCPU running a user thread (LTN ≠ 0) the vCPU is
/// handed back at once: the thread is saved into its ThMB, `BLOCKED` posted, a new activation
/// takes over the vCPU with an upcall, and this activation alone waits; when `wait` returns its
/// result is stored in the ThMB (the frame's result register), `UNBLOCKED` posted, and this activation ends.
/// Otherwise `wait` simply blocks the calling thread and its result is returned.
pub fn blocking(frame: &mut TrapFrame, wait: impl FnOnce() -> usize) -> usize {
    let me = scheduler::current().expect("a syscall thread");
    let (Some(vcpu), Some(view)) = (current_vcpu(&me), me.view()) else {
        drop(me);
        return wait();
    };
    let thmb = match save_to_thmb(view, frame) {
        Ok(0) => {
            drop(me);
            return wait();
        }
        Ok(t) => t,
        Err(bad) => kill(&me, bad),
    };
    let domain = me.domain.clone().expect("a vCPU has a domain");
    post(&domain, Event { kind: EventKind::Blocked as u64, thread: thmb, arg0: vcpu as u64, arg1: 0 });
    let (handler, stack) = {
        let kn = domain.kn.lock();
        let kn = kn.as_ref().expect("checked registered");
        (kn.handler, kn.upcall_stacks[vcpu])
    };
    me.vcpu.store(NOT_A_VCPU, Ordering::Release);
    if let Err(e) = start_activation(&domain, &me, vcpu, handler, stack, [EventKind::Blocked as u64, thmb, vcpu as u64, 0]) {
        kill(&me, format!("no memory for a new activation of vCPU {vcpu} ({e:?})"));
    }
    drop(me);
    let result = wait();
    let me = scheduler::current().expect("the waiting activation");
    let _ = views::write_as(view, thmb + RESULT_OFFSET as u64, &(result as u64).to_le_bytes());
    post(&domain, Event { kind: EventKind::Unblocked as u64, thread: thmb, arg0: result as u64, arg1: 0 });
    drop(domain);
    drop(me);
    thread::exit_if_killed();
    // This activation's work is done; the vCPU lives on in the one that took over.
    thread::exit_current(Some(0))
}

/// A user thread sleeping in the kernel on behalf of a vCPU that has gone back to the library.
struct KnSleeper {
    domain: Arc<Domain>,
    thmb: u64,
}

/// Timed waits of vCPU threads, by (deadline in nanoseconds, sequence).
static KN_SLEEPERS: spin::Mutex<alloc::collections::BTreeMap<(u64, u64), KnSleeper>> = spin::Mutex::new(alloc::collections::BTreeMap::new());
static KN_SLEEP_SEQ: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// `sleep` of a vCPU running a user thread: the thread's kernel side is just a timer entry,
/// so the calling activation itself goes straight back to the library with `BLOCKED` (no new
/// activation is needed), and the timer posts `UNBLOCKED` at the deadline — in deadline order.
/// Returns `None` when the caller is not such a vCPU (then it sleeps as a plain thread), else
/// the value the syscall must store as its result in the frame, which now enters the handler:
/// the handler's first argument, since on some ports the result register is also the first
/// argument register (aarch64 `x0`, riscv64 `a0`).
pub fn sleep(frame: &mut TrapFrame, nanos: u64) -> Option<usize> {
    let me = scheduler::current().expect("a syscall thread");
    let (Some(vcpu), Some(view)) = (current_vcpu(&me), me.view()) else { return None };
    let thmb = match save_to_thmb(view, frame) {
        Ok(0) => return None,
        Ok(t) => t,
        Err(bad) => kill(&me, bad),
    };
    let domain = me.domain.clone().expect("a vCPU has a domain");
    post(&domain, Event { kind: EventKind::Blocked as u64, thread: thmb, arg0: vcpu as u64, arg1: 0 });
    let deadline = arch::timer::nanos().saturating_add(nanos.max(1));
    let seq = KN_SLEEP_SEQ.fetch_add(1, Ordering::Relaxed);
    KN_SLEEPERS.lock().insert((deadline, seq), KnSleeper { domain, thmb });
    let args = [EventKind::Blocked as u64, thmb, vcpu as u64, 0];
    upcall(&me, frame, vcpu, args);
    Some(args[0] as usize)
}

/// Ends the timed waits whose deadline has passed (timer tick): the result (0) goes into the
/// thread's ThMB and `UNBLOCKED` into its program's ring, in deadline order.
pub fn wake_sleepers() {
    let now = arch::timer::nanos();
    loop {
        let next = {
            let mut s = KN_SLEEPERS.lock();
            match s.first_key_value() {
                Some((&key, _)) if key.0 <= now => s.remove(&key),
                _ => None,
            }
        };
        let Some(sleeper) = next else { break };
        if sleeper.domain.outcome().is_some() {
            continue;
        }
        // The ThMB was checked writable for the thread's view when it was saved; it lies in a
        // region of the program (their regions live as long as the program).
        if crate::mm::views::write_owned(&sleeper.domain, sleeper.thmb + RESULT_OFFSET as u64, &0u64.to_le_bytes()).is_ok() {
            post(&sleeper.domain, Event { kind: EventKind::Unblocked as u64, thread: sleeper.thmb, arg0: 0, arg1: 0 });
        }
    }
}

/// `vcpu_park()`.
pub fn park(me: &Arc<Thread>) -> Result<usize, Errno> {
    let domain = me.domain.clone().ok_or(Errno::Inval)?;
    let vcpu = me.vcpu.load(Ordering::Acquire);
    {
        let mut kn = domain.kn.lock();
        let kn = kn.as_mut().ok_or(Errno::Inval)?;
        let slot = kn.vcpus.get_mut(vcpu).ok_or(Errno::Inval)?;
        if core::mem::take(&mut slot.token) {
            return Ok(0);
        }
        kn.flush_held();
        if kn.unread() {
            return Ok(0);
        }
        // A vCPU of a program that is ending returns instead, and ends on its way out.
        if !me.block_unless_killed() {
            return Ok(0);
        }
        kn.vcpus[vcpu].parked = Some(me.clone());
    }
    scheduler::schedule(Then::Block);
    Ok(0)
}

/// `vcpu_unpark(v)`.
pub fn unpark(me: &Arc<Thread>, vcpu: usize) -> Result<usize, Errno> {
    let domain = me.domain.clone().ok_or(Errno::Inval)?;
    let woken = {
        let mut kn = domain.kn.lock();
        let kn = kn.as_mut().ok_or(Errno::Inval)?;
        let slot = kn.vcpus.get_mut(vcpu).ok_or(Errno::Inval)?;
        match slot.parked.take() {
            Some(t) => Some(t),
            None => {
                slot.token = true;
                None
            }
        }
    };
    if let Some(t) = woken {
        thread::wake(t);
    }
    Ok(0)
}

/// Releases a finished program's KN state (its ring view).
pub fn release(domain: &Domain) {
    let state = domain.kn.lock().take();
    if let Some(kn) = state {
        *domain.final_upcalls.lock() = kn.upcalls;
        let _ = views::with(|s, m| s.detach(m, kn.ring_view));
    }
}

/// Marks every parked vCPU of a dying program runnable so it can end.
pub fn wake_all(domain: &Domain) {
    let parked: Vec<Arc<Thread>> = match domain.kn.lock().as_mut() {
        Some(kn) => kn.vcpus.iter_mut().filter_map(|v| v.parked.take()).collect(),
        None => Vec::new(),
    };
    for t in parked {
        thread::wake(t);
    }
}

/// Prints every registered program's vCPU and ring state (watchdog diagnostics).
pub fn dump() {
    crate::domain::for_each_live(|d| {
        if let Some(kn) = d.kn.try_lock() {
            if let Some(kn) = kn.as_ref() {
                let (head, tail) = kn.ring_words().unwrap_or((u64::MAX, u64::MAX));
                let parked: Vec<(usize, u64, bool)> = kn.vcpus.iter().enumerate().map(|(i, v)| (i, v.parked.as_ref().map_or(0, |t| t.id), v.token)).collect();
                crate::println!("watchdog: domain {}: ring head {head} tail {tail} held {}, vcpus (index, parked thread, token) {:?}", d.id, kn.held.len(), parked);
            }
        }
    });
}
