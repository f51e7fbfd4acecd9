//! Registration, vCPUs and their activations: `kn_register`, `vcpu_park`, `vcpu_unpark`, new
//! activations, the end of a program's notification state.

use alloc::sync::Arc;
use alloc::vec::Vec;
use arch::mapping::MapFlags;
use core::mem::size_of;
use core::sync::atomic::Ordering;
use tsumugi_abi::kn::{Event, EventKind, Registration, RingHeader, MAX_VCPUS, PARK_GIVE_UP, PARK_IDLE, RING_SLOTS_OFFSET};
use tsumugi_abi::syscall::Errno;

use super::state::Config;
use crate::domain::Domain;
use crate::mm::space;
use crate::sched::scheduler::{self, Then};
use crate::thread::{self, Body, Thread, NOT_A_VCPU};

/// Largest ring a program may register.
const MAX_RING_SLOTS: u64 = 1 << 16;

/// `kn_register(reg)`.
pub fn register(me: &Arc<Thread>, reg_addr: u64) -> Result<usize, Errno> {
    let domain = me.domain.clone().ok_or(Errno::Inval)?;
    let view = me.view().ok_or(Errno::Fault)?;
    let mut raw = [0u8; size_of::<Registration>()];
    space::read_as(view, reg_addr, &mut raw).map_err(|_| Errno::Fault)?;
    let word = |i: usize| u64::from_le_bytes(raw[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    let reg = Registration { handler: word(0), ring: word(1), upcall_stacks: word(2), vcpus: word(3), fp_live: word(4) };
    if reg.vcpus == 0 || reg.vcpus as usize > MAX_VCPUS {
        return Err(Errno::Inval);
    }
    let exec_ok = space::with(|s, _| s.check(view, reg.handler, 1, MapFlags::EXEC).is_ok());
    if !exec_ok {
        return Err(Errno::Fault);
    }
    if reg.ring % 8 != 0 {
        return Err(Errno::Inval);
    }
    let mut header = [0u8; size_of::<RingHeader>()];
    space::read_as(view, reg.ring, &mut header).map_err(|_| Errno::Fault)?;
    let header_word = |i: usize| u64::from_le_bytes(header[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    let (tail, capacity) = (header_word(1), header_word(2));
    if capacity == 0 || !capacity.is_power_of_two() || capacity > MAX_RING_SLOTS {
        return Err(Errno::Inval);
    }
    // The whole ring, once: the fast paths then write it through the loaded table, whose
    // rights the page table enforces; the checked path re-checks at every write.
    let ring_bytes = RING_SLOTS_OFFSET as u64 + capacity * size_of::<Event>() as u64;
    space::with(|s, _| s.check(view, reg.ring, ring_bytes, MapFlags::WRITE)).map_err(|_| Errno::Fault)?;
    if reg.fp_live != 0 {
        let fp_live_ok = reg.fp_live % 8 == 0 && space::with(|s, _| s.check(view, reg.fp_live, reg.vcpus * 8, MapFlags::WRITE).is_ok());
        if !fp_live_ok {
            return Err(Errno::Fault);
        }
    }
    let mut stacks = Vec::new();
    stacks.try_reserve_exact(reg.vcpus as usize).map_err(|_| Errno::NoMem)?;
    for v in 0..reg.vcpus {
        let mut top = [0u8; 8];
        space::read_as(view, reg.upcall_stacks + v * 8, &mut top).map_err(|_| Errno::Fault)?;
        let top = u64::from_le_bytes(top);
        space::with(|s, _| s.check(view, top.saturating_sub(64), 64, MapFlags::WRITE)).map_err(|_| Errno::Fault)?;
        stacks.push(top);
    }
    if domain.kn.registered() {
        return Err(Errno::Inval);
    }
    // The ring view stays attached while the program lives (released with the domain).
    let ring_view = space::with(|s, m| {
        let set = s.set(view).map(|x| x.to_vec()).unwrap_or_default();
        s.attach(m, &set)
    })
    .map_err(|_| Errno::NoMem)?;
    let config = Config { handler: reg.handler, ring: reg.ring, capacity, fp_live: reg.fp_live, ring_view, upcall_stacks: stacks };
    if domain.kn.install(config, reg.vcpus as usize, tail).is_err() {
        // Another thread of the program registered meanwhile.
        let _ = space::with(|s, m| s.detach(m, ring_view));
        return Err(Errno::Inval);
    }
    me.vcpu.store(0, Ordering::Relaxed);
    // The caller becomes vCPU 0. If it used FP before (its first FP trap then found no vCPU to
    // report), its FP state is live now: say so, or the library's WINDOW switches on vCPU 0
    // would leave the ABI's callee-saved FP registers unsaved.
    if crate::fpu::has_used_fp(me) {
        note_fp_use(me);
    }
    let cfg = domain.kn.config().expect("installed");
    // One spare activation per vCPU from the start, so a blocking call hands its vCPU over
    // without creating anything (activations that finish waiting become spares too).
    for _ in 0..reg.vcpus {
        let _ = new_spare(&domain, me);
    }
    let _ = cfg;
    // Every vCPU but the caller's gets an activation now, waiting for its grant: the
    // processor allocation (`processors`) decides which run at once, and a grant later — when
    // another program ends — needs no activation made from a thread of this program then.
    for v in 1..reg.vcpus as usize {
        new_waiting_activation(&domain, me, v)?;
    }
    super::processors::join(&domain, reg.vcpus as usize)?;
    // The caller is vCPU 0: it runs once its grant comes (at once unless every CPU is taken
    // by programs above their shares, which give theirs up within a tick).
    if super::processors::wait_for_grant(me, &domain, 0).is_none() {
        thread::exit_if_killed();
        return Err(Errno::Inval);
    }
    Ok(0)
}

/// Creates the activation of vCPU `v`, waiting in the kernel for its grant.
fn new_waiting_activation(domain: &Arc<Domain>, source: &Thread, v: usize) -> Result<Arc<Thread>, Errno> {
    new_activation(domain, source, Body::Kernel(waiting_main), Some(v), || {})
}

/// An activation made by [`new_waiting_activation`]: waits for its vCPU's grant, then enters
/// the handler with `VCPU_GRANTED`.
fn waiting_main() -> ! {
    let entry = {
        let me = scheduler::current().expect("an activation");
        let domain = me.domain.clone().expect("an activation has a program");
        let v = me.vcpu.load(Ordering::Relaxed);
        super::processors::wait_for_grant(&me, &domain, v).and_then(|args| {
            let cfg = domain.kn.config()?;
            super::count_upcall(&me, &domain, args[0]);
            Some((cfg.handler, cfg.upcall_stacks[v], args))
        })
    };
    let Some((handler, stack, args)) = entry else {
        thread::exit_current(Some(0));
    };
    arch::cpu::set_user_ltn(0);
    thread::enter_user(|frame| frame.set_upcall(handler, stack, args))
}

/// The running activation `me`, vCPU `v` of `domain`, was revoked: waits for the vCPU's next
/// grant and sets `frame` to enter the handler with it (`upcall`: the revoked thread was
/// saved in its ThMB) or to resume as it is. Ends the activation if the program is ending.
pub fn regrant(me: &Arc<Thread>, domain: &Domain, frame: &mut arch::trap::TrapFrame, v: usize, upcall: bool) -> usize {
    match super::processors::wait_for_grant(me, domain, v) {
        Some(args) if upcall => {
            super::upcall(me, frame, v, args);
            args[0] as usize
        }
        Some(_) => 0,
        None => {
            thread::exit_if_killed();
            0
        }
    }
}

/// Delivers the grant of vCPU `v` to `domain` (`processors`): `VCPU_GRANTED` in the ring (vCPU
/// 0 excepted), the upcall's arguments to its waiting activation, which is woken.
pub fn grant(domain: &Arc<Domain>, v: usize) {
    if v != 0 {
        super::post(domain, Event { kind: EventKind::VcpuGranted as u64, thread: 0, arg0: v as u64, arg1: 0 });
    }
    let waiting = {
        let mut st = domain.kn.state();
        if st.released {
            return;
        }
        let Some(slot) = st.vcpus.get_mut(v) else { return };
        slot.grant = Some([EventKind::VcpuGranted as u64, 0, v as u64, slot.revokes]);
        slot.waiting.take()
    };
    if let Some(t) = waiting {
        thread::wake(t);
    }
}

/// Counts a revocation of vCPU `v` of `domain`; returns its count so far.
pub fn count_revocation(domain: &Domain, v: usize) -> u64 {
    let mut st = domain.kn.state();
    st.vcpus.get_mut(v).map_or(0, |slot| {
        slot.revokes += 1;
        slot.revokes
    })
}

/// Wakes every parked vCPU of `domain` (it holds more than its share: they give themselves up).
pub fn wake_all_parked(domain: &Domain) {
    let parked: Vec<Arc<Thread>> = {
        let mut st = domain.kn.state();
        st.parked = 0;
        st.vcpus.iter_mut().filter_map(|v| v.parked.take()).collect()
    };
    for t in parked {
        thread::wake(t);
    }
}

/// Starts a new activation of vCPU `vcpu` entering the handler with `args`, with the rights
/// `source` (the registering or blocking thread) has now.
///
/// Under the program's `region_lock`, as `region_create` is: a region another vCPU creates
/// meanwhile is either in `source`'s view before the copy (`source` is one of its creator's
/// mates) or created after the new activation joined the program (which makes it a mate).
/// Without the lock, an activation copying a view read earlier misses such a region, and the
/// library's threads fault on their own stacks when that vCPU runs them.
pub fn start_activation(domain: &Arc<Domain>, source: &Thread, vcpu: usize, handler: u64, stack: u64, args: [u64; 4]) -> Result<Arc<Thread>, Errno> {
    new_activation(domain, source, Body::Upcall { ip: handler, sp: stack, args }, Some(vcpu), || super::count_upcall(source, domain, args[0]))
}

/// Spare activations a program keeps per vCPU at least (more finish instead, unless blocking
/// calls found none: `State::spares_wanted`).
const SPARES_PER_VCPU: usize = 2;

/// Spare activations a program keeps at most, however many of its calls blocked at once: each
/// holds a kernel stack (`kernel_stack::STACK_PAGES` frames), which the program's live-thread
/// quota (`domain::MAX_LIVE_THREADS`) already bounds; all are freed when the program ends.
pub const MAX_SPARES: usize = 128;

/// How many spares a program keeps: the floor per vCPU, or what its blocking calls asked for.
fn spares_kept(st: &super::state::State) -> usize {
    (SPARES_PER_VCPU * st.vcpus.len()).max(st.spares_wanted).min(MAX_SPARES)
}

/// Creates a spare activation with the rights `source` has now (under the program's
/// `region_lock`, as in [`start_activation`]).
fn new_spare(domain: &Arc<Domain>, source: &Thread) -> Result<Arc<Thread>, Errno> {
    new_activation(domain, source, Body::Kernel(spare_main), None, || {})
}

/// Creates an activation of `domain` running `body`, with the rights `source` has now (under
/// the program's `region_lock`, see [`start_activation`]), as vCPU `vcpu` if given; `before`
/// runs once its view is made, just before it is spawned.
fn new_activation(domain: &Arc<Domain>, source: &Thread, body: Body, vcpu: Option<usize>, before: impl FnOnce()) -> Result<Arc<Thread>, Errno> {
    let _creating = domain.region_lock.lock();
    let view = source.view().ok_or(Errno::Fault)?;
    let set = space::with(|s, _| s.set(view).map(|x| x.to_vec())).ok_or(Errno::Fault)?;
    let v = space::with(|s, m| s.attach(m, &set)).map_err(|_| Errno::NoMem)?;
    before();
    domain.spawn(v, body, true, vcpu).map_err(|_| Errno::NoMem)
}

fn spare_main() -> ! {
    serve_as_spare()
}

/// Takes a spare activation of the program whose view has the root table `root` (the blocking
/// thread's) for vCPU `vcpu`; with it, whether the library must be told that FP is live on
/// that vCPU now (the spare brings its own FP state, see [`tell_fp_live`]). `None` if there is
/// none (then a new activation must be started, and one more spare is kept from now on).
/// Under the state lock; [`hand_over`] then runs it.
#[inline(always)]
pub(super) fn take_spare(st: &mut super::state::State, root: u64, vcpu: usize) -> Option<(Arc<Thread>, bool)> {
    let Some(i) = st.spares.iter().position(|t| t.root.load(Ordering::Relaxed) == root) else {
        // A new activation will be made: keep one more spare from now on.
        st.spares_wanted = (st.spares_wanted.max(spares_kept(st)) + 1).min(MAX_SPARES);
        return None;
    };
    let t = st.spares.swap_remove(i);
    let tell_fp = crate::fpu::has_used_fp(&t) && st.vcpus.get_mut(vcpu).is_some_and(|v| !core::mem::replace(&mut v.fp_live_told, true));
    Some((t, tell_fp))
}

/// Hands the vCPU of `source` (the running thread, which blocks next) to `spare`, taken by
/// [`take_spare`], to enter the handler with `args` (`BLOCKED`): the spare's job goes into its
/// own record — its vCPU, and its user frame, built here in its frame slot — so it looks
/// nothing up when it runs, and it runs next on this CPU, restarted at [`spare_upcall`] when it
/// is off every CPU already (else it finds its job where it parked, in [`serve_as_spare`]).
/// The caller must give the CPU up soon (`scheduler::hand_next`). The upcall counts for
/// `source`'s counters, not the spare's.
pub(super) fn hand_over(source: &Thread, domain: &Domain, cfg: &Config, spare: Arc<Thread>, tell_fp: bool, args: [u64; 4]) {
    let vcpu = args[2] as usize;
    // The upcall is the blocking thread's event (as `start_activation` counts it): its
    // counters — the user thread's it carries — count it, not the spare's.
    source.perf.tally(tsumugi_abi::perf::Event::Upcalls);
    super::count_delivered(domain, args[0]);
    spare.vcpu.store(vcpu, Ordering::Relaxed);
    if tell_fp {
        tell_fp_live(&spare, vcpu);
    }
    let slot = spare.user_frame_slot();
    // SAFETY: the spare is blocked in `serve_as_spare` (it was in the spares, taken under the
    // state lock, so nobody else hands it anything): it is in the kernel, below its frame
    // slot, which holds its last user frame — the program's own registers — or zeros.
    unsafe { arch::trap::TrapFrame::upcall_in_place(slot, cfg.handler, cfg.upcall_stacks[vcpu], args) };
    spare.last_cpu.store(arch::cpu::cpu_index(), Ordering::Relaxed);
    // The caller gives this CPU up right after (it waits, or becomes a spare itself): the spare
    // runs next here without a run-queue round trip.
    // SAFETY: a spare parks in `serve_as_spare`, which owns nothing across its park.
    unsafe { thread::wake_next(spare, Some((spare_upcall, slot as usize))) };
}

/// Where a spare activation restarted by [`hand_over`] begins: it finishes the switch to it
/// and enters the handler with the frame `frame` (its user frame slot, built by `hand_over`).
extern "C" fn spare_upcall(frame: usize) -> ! {
    scheduler::finish_hand_over();
    thread::exit_if_killed();
    arch::cpu::set_user_ltn(0);
    // SAFETY: the thread's own frame slot, holding the upcall's frame; the stack below holds
    // nothing (this is its first frame).
    unsafe { arch::trap::enter(frame as *const arch::trap::TrapFrame) }
}

/// Makes the running activation a spare of its program: parks until a blocking call hands it a
/// vCPU ([`hand_over`]), then enters the handler with that call's upcall. Ends the activation
/// instead if the program keeps enough spares or is ending. Never returns; nothing of the
/// caller's may still own anything on the stack (it is abandoned when the activation enters
/// user mode, or restarted at [`spare_upcall`] by the hand-over).
pub fn serve_as_spare() -> ! {
    loop {
        let parked = {
            let me = scheduler::current().expect("an activation");
            let domain = me.domain.clone().expect("an activation has a program");
            let mut st = domain.kn.state();
            let room = st.spares.len() < spares_kept(&st) && st.spares.try_reserve(1).is_ok();
            if !st.released && room && me.block_unless_killed() {
                st.spares.push(me.clone());
                true
            } else {
                false
            }
        };
        if !parked {
            thread::exit_current(Some(0));
        }
        scheduler::schedule(Then::Block);
        // Still here: resumed where it parked (not restarted, see `hand_over`). Its job, if it
        // has one, is in its own record: its vCPU, and its frame slot built for the upcall.
        let job = scheduler::with_current(|me| {
            let me = me.expect("an activation");
            if me.killed.load(Ordering::Acquire) {
                return Err(());
            }
            Ok((me.vcpu.load(Ordering::Relaxed) != NOT_A_VCPU).then(|| me.user_frame_slot()))
        });
        match job {
            Err(()) => thread::exit_current(None),
            Ok(Some(frame)) => {
                arch::cpu::set_user_ltn(0);
                // SAFETY: this thread's own frame slot, built by `hand_over`; the stack below
                // is abandoned and holds nothing owned.
                unsafe { arch::trap::enter(frame) }
            }
            Ok(None) => {}
        }
        // Woken without work (a wake-up meant for another reason): park again.
    }
}

/// The running thread used FP for the first time (its FP-disabled trap): if it is a vCPU of a
/// program that asked (`Registration::fp_live`), tell the library that FP is live on it.
pub fn note_fp_use(me: &Thread) {
    let v = me.vcpu.load(Ordering::Relaxed);
    if v == NOT_A_VCPU {
        return;
    }
    let Some(domain) = &me.domain else { return };
    let first = domain.kn.state().vcpus.get_mut(v).is_some_and(|slot| !core::mem::replace(&mut slot.fp_live_told, true));
    if first {
        tell_fp_live(me, v);
    }
}

/// Sets the library's `fp_live` word of vCPU `v` for `me`, an activation with live FP state.
///
/// The word is per vCPU, but FP state is per kernel thread, and a spare activation serves
/// whichever vCPU a blocking call hands it: one that used FP serving vCPU `w` brings its state
/// (another user thread's xmm registers and MXCSR) to a vCPU `v` whose word may still be 0.
/// Then the library's window switches on `v` would neither save nor load the FP environment
/// while every user thread there shares the activation's registers — a thread resumed there
/// got another's MXCSR (regmix saw it under load). So the word is set for the vCPU a spare
/// takes too ([`take_spare`]), once per vCPU.
fn tell_fp_live(me: &Thread, v: usize) {
    let (Some(domain), Some(view)) = (&me.domain, me.view()) else { return };
    let word = domain.kn.config().map_or(0, |c| c.fp_live);
    if word != 0 {
        // Checked writable at registration; a refusal now (the program unmapped it) only
        // costs the program its own FP callee-saved registers, as it asked.
        let _ = space::write_as(view, word + 8 * v as u64, &1u64.to_le_bytes());
    }
}

/// `vcpu_park(flags)`.
pub fn park(me: &Arc<Thread>, frame: &mut arch::trap::TrapFrame, flags: usize) -> Result<usize, Errno> {
    let domain = me.domain.clone().ok_or(Errno::Inval)?;
    let cfg = domain.kn.config().ok_or(Errno::Inval)?;
    let vcpu = me.vcpu.load(Ordering::Relaxed);
    let idle = flags & PARK_IDLE != 0;
    if let Some(r) = give_up_parked(me, &domain, frame, vcpu, idle) {
        return Ok(r);
    }
    {
        let mut st = domain.kn.state();
        let slot = st.vcpus.get_mut(vcpu).ok_or(Errno::Inval)?;
        if core::mem::take(&mut slot.token) {
            return Ok(0);
        }
        super::ring::flush_held(cfg, &mut st, true);
        if super::ring::unread(cfg, &st) {
            return Ok(0);
        }
        // A vCPU of a program that is ending returns instead, and ends on its way out.
        if !me.block_unless_killed() {
            return Ok(0);
        }
        st.vcpus[vcpu].parked = Some(me.clone());
        st.parked += 1;
    }
    scheduler::schedule(Then::Block);
    Ok(give_up_parked(me, &domain, frame, vcpu, idle).unwrap_or(0))
}

/// A parking vCPU of a program above its share gives itself up: an idle one is revoked here
/// (`VCPU_REVOKED` with no thread) and returns into the handler once granted again (the
/// syscall's result is then the handler's first argument); one a user thread keeps is told to
/// give the vCPU up first (`PARK_GIVE_UP`). `None`: nothing to give up.
fn give_up_parked(me: &Arc<Thread>, domain: &Domain, frame: &mut arch::trap::TrapFrame, vcpu: usize, idle: bool) -> Option<usize> {
    if vcpu == 0 || !super::processors::revoking() {
        return None;
    }
    if !idle {
        return super::processors::over_share(domain, vcpu).then_some(PARK_GIVE_UP);
    }
    let count = super::processors::give_up(domain, vcpu)?;
    super::post(domain, super::processors::revoked_event(vcpu, 0, count));
    Some(regrant(me, domain, frame, vcpu, true))
}

/// `vcpu_unpark(v)`.
pub fn unpark(me: &Arc<Thread>, vcpu: usize) -> Result<usize, Errno> {
    let domain = me.domain.clone().ok_or(Errno::Inval)?;
    let woken = {
        let mut st = domain.kn.state();
        if !domain.kn.registered() {
            return Err(Errno::Inval);
        }
        let slot = st.vcpus.get_mut(vcpu).ok_or(Errno::Inval)?;
        match slot.parked.take() {
            Some(t) => {
                st.parked -= 1;
                Some(t)
            }
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

/// Wakes one parked vCPU (an event is waiting for the library). Under the state lock.
#[inline(always)]
pub fn wake_one(st: &mut super::state::State) {
    if st.parked != 0 {
        wake_parked(st);
    }
}

/// [`wake_one`] when some vCPU is parked.
#[inline(never)]
fn wake_parked(st: &mut super::state::State) {
    if let Some(t) = st.vcpus.iter_mut().find_map(|v| v.parked.take()) {
        st.parked -= 1;
        thread::wake(t);
    }
}

/// Releases a finished program's notification state (its ring view; nothing is posted after).
pub fn release(domain: &Domain) {
    let parked: Vec<Arc<Thread>> = {
        let mut st = domain.kn.state();
        if st.released {
            return;
        }
        st.released = true;
        st.held.clear();
        st.spares.clear();
        for v in st.vcpus.iter_mut() {
            v.waiting = None;
            v.grant = None;
        }
        st.parked = 0;
        st.vcpus.iter_mut().filter_map(|v| v.parked.take()).collect()
    };
    drop(parked);
    super::processors::leave(domain);
    super::forget_sleepers(domain);
    if let Some(cfg) = domain.kn.config() {
        let _ = space::with(|s, m| s.detach(m, cfg.ring_view));
    }
}

/// Prints every registered program's vCPU and ring state (watchdog diagnostics).
pub fn dump() {
    crate::domain::for_each_live(|d| {
        let Some(cfg) = d.kn.config() else { return };
        if let Some(st) = d.kn.try_state() {
            let mut raw = [0u8; 8];
            let head = space::read_as(cfg.ring_view, cfg.ring, &mut raw).map_or(u64::MAX, |_| u64::from_le_bytes(raw));
            let parked: Vec<(usize, u64, bool)> = st.vcpus.iter().enumerate().map(|(i, v)| (i, v.parked.as_ref().map_or(0, |t| t.id), v.token)).collect();
            crate::println!("watchdog: domain {}: ring head {head} tail {} held {}, vcpus (index, parked thread, token) {:?}", d.id, st.tail, st.held.len(), parked);
        }
    });
}
