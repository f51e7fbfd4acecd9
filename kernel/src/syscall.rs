//! Syscall dispatch. Every pointer argument is checked against the caller's *view* (the
//! regions its thread may touch, with the rights needed) before the kernel reads or writes
//! through it; anything wrong is an error code, never a kernel fault.

use alloc::sync::Arc;
use arch::addr::PAGE_SIZE;
use arch::mapping::MapFlags;
use arch::trap::TrapFrame;
use core::sync::atomic::Ordering;
use tsumugi_abi::stats::{scope, Counter};
use tsumugi_abi::syscall::{encode_result, region_flags, rights, thread_flags, Clock, Errno, Syscall, ViewEntry};

use crate::domain::{Outcome, SpawnError};
use crate::mm::region::RegionKind;
use crate::mm::view_space::{views_within, Backing, ViewError, ViewId, MAX_VIEWS_PER_CHANGE};
use crate::mm::space;
use crate::names;
use crate::sched::scheduler::{self, CPUS};
use crate::thread::{self, Body, Thread};

/// Bytes copied between user and kernel memory per step.
const COPY_CHUNK: usize = 256;
/// Largest region a program may ask for in one call.
const MAX_REGION: u64 = 1 << 32;
/// Size of one view-query entry.
const VIEW_ENTRY_SIZE: u64 = core::mem::size_of::<ViewEntry>() as u64;


type SysResult = Result<usize, Errno>;

/// Handles the syscall in `frame` and stores its result there.
pub fn dispatch(frame: &mut TrapFrame) {
    let a = frame.syscall_args();
    let result = match Syscall::from_number(frame.syscall_number()) {
        None => Err(Errno::NoSys),
        Some(call) => match call {
            Syscall::Exit => exit(a[0]),
            Syscall::ConsoleWrite => console_write(a[0] as u64, a[1] as u64),
            Syscall::Clock => clock(a[0]),
            Syscall::Yield => {
                crate::trap::yield_now();
                Ok(0)
            }
            Syscall::Sleep => sleep(frame, a[0] as u64),
            Syscall::ThreadCreate => thread_create(a[0] as u64, a[1] as u64, a[2] as u64, a[3]),
            Syscall::ThreadExit => thread::exit_current(Some(a[0])),
            Syscall::ThreadJoin => thread_join(frame, a[0] as u64),
            Syscall::ThreadSelf => Ok(me().id as usize),
            Syscall::RegionCreate => region_create(a[0] as u64, a[1], a[2]),
            Syscall::RegionGrant => region_grant(a[0] as u64, a[1], a[2] as u64),
            Syscall::RegionRevoke => region_revoke(a[0] as u64, a[1] as u64),
            Syscall::ViewQuery => view_query(a[0] as u64, a[1] as u64),
            Syscall::Publish => publish(a[0] as u64, a[1] as u64),
            Syscall::Lookup => names::BOARD.lock().lookup(a[0] as u64).map(|v| v as usize).ok_or(Errno::Again),
            Syscall::Counters => counters(a[0], a[1] as u64, a[2] as u64),
            Syscall::CpuId => Ok(arch::cpu::cpu_index()),
            Syscall::SchedAffinity => sched_affinity(a[0]),
            Syscall::KnRegister => crate::notify::register(&me(), a[0] as u64),
            Syscall::VcpuPark => crate::notify::park(&me(), frame, a[0]),
            Syscall::VcpuUnpark => crate::notify::unpark(&me(), a[0]),
            Syscall::SetLtn => set_ltn(a[0] as u64),
            Syscall::ConsoleRead => console_read(frame, a[0] as u64, a[1] as u64),
            Syscall::PerfOpen => crate::perf::open(&me(), a[0]),
            Syscall::PerfStart => crate::perf::start(&me(), a[0]),
            Syscall::PerfStop => crate::perf::stop(&me(), a[0]),
            Syscall::PerfRead => crate::perf::read(&me(), a[0]),
            Syscall::PerfClose => crate::perf::close(&me(), a[0]),
            Syscall::ThreadPin => thread_pin(a[0]),
            Syscall::KnFetch => crate::notify::sa_copy::fetch(&me(), a[0], a[1] as u64),
            Syscall::KnSigreturn => crate::notify::signal::sigreturn(&me(), frame, a[0] as u64),
            Syscall::S3Lock => crate::s3::lock(frame, a[0] as u64, a[1] as u64, a[2] as u64),
            Syscall::S3Unlock => crate::s3::unlock(a[0] as u64, a[1] as u64),
            Syscall::S3Wait => crate::s3::wait_on(frame, a[0] as u64, a[1] as u64, a[2] as u64),
            Syscall::S3Wake => crate::s3::wake(a[0] as u64, a[1]),
            Syscall::S3Barrier => crate::s3::barrier_wait(frame, a[0] as u64, a[1] as u64, a[2], a[3] as u64),
            Syscall::Signal => crate::signals::send(&me(), a[0] as u64, a[1], a[2]),
            Syscall::SignalAllow => crate::signals::allow(&me(), a[0] as u64, a[1]),
            Syscall::GrantAllow => crate::signals::grant_allow(&me(), a[0] as u64, a[1]),
            Syscall::PerfSwitch => crate::perf::switch(&me(), a[0]),
        },
    };
    frame.set_syscall_result(encode_result(result));
}

/// The calling thread (a syscall always comes from one).
fn me() -> Arc<Thread> {
    scheduler::current().expect("a syscall without a current thread")
}

fn my_view() -> Result<ViewId, Errno> {
    scheduler::with_current(|t| t.and_then(|t| t.view())).ok_or(Errno::Fault)
}

/// Checks `[ptr, ptr+len)` against the caller's view for `need` and backs any zero-on-touch
/// pages: at once when the loaded table maps the range so already (`user_access::mapped_for`),
/// else through the view space. The copy that follows may still fault if the view changes meanwhile (a grant or
/// revoke by another thread); it goes through `user_access`, which turns that into `EFAULT`.
fn check_user(ptr: u64, len: u64, need: MapFlags) -> Result<(), Errno> {
    check_user_backing(ptr, len, len, need)
}

/// [`check_user`] that backs only the first `back` bytes (those the call copies): the check is
/// region by region, bounded whatever `len`, but backing is a page at a time, so a call that
/// copies a bounded prefix of a long buffer must not back all of it (`console_write` of 1 GiB
/// of zero-on-touch memory filled 1 GiB under the view-space lock, or ran the machine out).
fn check_user_backing(ptr: u64, len: u64, back: u64, need: MapFlags) -> Result<(), Errno> {
    if crate::user_access::mapped_for(ptr, len, need) {
        return Ok(());
    }
    let view = my_view()?;
    space::with(|s, m| {
        s.check(view, ptr, len, need).map_err(|_| Errno::Fault)?;
        s.populate(m, view, ptr, back.min(len)).map_err(|_| Errno::NoMem)
    })
}

fn copy_out(dst: u64, bytes: &[u8]) -> Result<(), Errno> {
    check_user(dst, bytes.len() as u64, MapFlags::WRITE)?;
    crate::user_access::copy_out(dst, bytes).map_err(|_| Errno::Fault)
}

fn exit(status: usize) -> SysResult {
    if let Some(d) = &me().domain {
        d.end(Outcome::Exited(status));
    }
    thread::exit_current(Some(status))
}

fn console_write(ptr: u64, len: u64) -> SysResult {
    // The whole buffer must be readable (a region-granular check, bounded whatever `len`), as
    // before the cap; then at most CONSOLE_WRITE_MAX bytes are backed and go out.
    let max = tsumugi_abi::syscall::CONSOLE_WRITE_MAX as u64;
    check_user_backing(ptr, len, max, MapFlags::READ)?;
    let len = len.min(max);
    let mut buf = [0u8; COPY_CHUNK];
    let mut done = 0u64;
    while done < len {
        let n = (len - done).min(COPY_CHUNK as u64) as usize;
        crate::user_access::copy_in(&mut buf[..n], ptr + done).map_err(|_| Errno::Fault)?;
        arch::serial::write_bytes(&buf[..n]);
        done += n as u64;
    }
    Ok(len as usize)
}

fn clock(which: usize) -> SysResult {
    match Clock::from_number(which).ok_or(Errno::Inval)? {
        Clock::MonotonicNanos => Ok(arch::timer::nanos() as usize),
        Clock::Cycles => Ok(arch::pmu::read(arch::pmu::HwEvent::Cycles) as usize),
        Clock::Ticks => Ok(scheduler::ticks() as usize),
    }
}

fn sleep(frame: &mut TrapFrame, nanos: u64) -> SysResult {
    if let Some(r) = crate::notify::sleep(frame, nanos) {
        return r;
    }
    thread::sleep_nanos(nanos);
    Ok(0)
}

fn console_read(frame: &mut TrapFrame, buf: u64, len: u64) -> SysResult {
    if len == 0 {
        return Ok(0);
    }
    // Refuse a buffer the caller may not write before blocking; its pages are filled only
    // when the input is copied out (`copy_out` checks again then: the view may change while
    // the call waits). Asked of the loaded table by a probing store (cheaper than its walk).
    if !crate::user_access::writable_now(buf, len) {
        let view = my_view()?;
        space::with(|s, _| s.check(view, buf, len, MapFlags::WRITE)).map_err(|_| Errno::Fault)?;
    }
    let n = crate::notify::blocking(frame, || {
        // Nothing is initialised up front: only the bytes read are written (zeroing even the
        // bytes the caller asked for cost a one-byte read more than a tenth of its kernel side).
        let mut chunk = [core::mem::MaybeUninit::<u8>::uninit(); COPY_CHUNK];
        let want = (len as usize).min(COPY_CHUNK);
        let got = crate::console_input::read_blocking(&mut chunk[..want]);
        match copy_out(buf, got) {
            Ok(()) => got.len(),
            Err(e) => encode_result(Err(e)),
        }
    });
    tsumugi_abi::syscall::decode_result(n).map_err(|e| e.unwrap_or(Errno::Fault))
}

fn set_ltn(value: u64) -> SysResult {
    // 0 or a user-half address (a ThMB): anything else is refused rather than sign-extended
    // into some other address by the register write.
    if value >= arch::layout::USER_END {
        return Err(Errno::Inval);
    }
    arch::cpu::set_user_ltn(value);
    Ok(0)
}

fn thread_create(entry: u64, stack_top: u64, arg: u64, flags: usize) -> SysResult {
    // Both must lie in the user half: a non-canonical entry would fault only on the way back
    // to user mode (on x86_64 `sysret` would take that fault in the kernel).
    let user = arch::layout::USER_START..arch::layout::USER_END;
    if flags & !thread_flags::AFFINE != 0 || !user.contains(&entry) || !(user.start..=user.end).contains(&stack_top) {
        return Err(Errno::Inval);
    }
    // Frees other calls left for later are given back first (interrupts may come in here).
    space::free_pending();
    let me = me();
    let domain = me.domain.clone().ok_or(Errno::Inval)?;
    let set = space::with(|s, _| s.set(me.view().expect("user thread")).map(|x| x.to_vec())).ok_or(Errno::Fault)?;
    let view = space::with(|s, m| s.attach(m, &set)).map_err(view_errno)?;
    let body = Body::User { ip: entry, sp: stack_top, arg };
    let t = domain.spawn(view, body, flags & thread_flags::AFFINE != 0, None).map_err(|e| match e {
        SpawnError::Quota => Errno::Again,
        SpawnError::NoMemory => Errno::NoMem,
    })?;
    Ok(t.id as usize)
}

fn publish(key: u64, value: u64) -> SysResult {
    let owner = me().domain.as_ref().ok_or(Errno::Inval)?.id;
    match names::BOARD.lock().publish(owner, key, value) {
        Ok(()) => Ok(0),
        Err(names::PublishError::NotOwner) => Err(Errno::Perm),
        Err(names::PublishError::Quota) => Err(Errno::NoMem),
    }
}

fn thread_pin(cpu: usize) -> SysResult {
    let me = me();
    if cpu == thread::NO_PIN {
        me.pin.store(thread::NO_PIN, Ordering::Relaxed);
        return Ok(0);
    }
    if cpu >= scheduler::MAX_CPUS || !CPUS[cpu].online.load(Ordering::Acquire) {
        return Err(Errno::Inval);
    }
    me.pin.store(cpu, Ordering::Relaxed);
    drop(me);
    if arch::cpu::cpu_index() != cpu {
        scheduler::schedule(scheduler::Then::Migrate);
    }
    Ok(0)
}

fn thread_join(frame: &mut TrapFrame, tid: u64) -> SysResult {
    let me = me();
    let target = thread::find(tid).ok_or(Errno::Srch)?;
    let same = match (&me.domain, &target.domain) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        _ => false,
    };
    if !same || target.id == me.id {
        return Err(Errno::Srch);
    }
    drop(me);
    // A vCPU running a user thread goes back to the library while its kernel side waits.
    let value = crate::notify::blocking(frame, || encode_result(thread::join(&target).ok_or(Errno::Srch)));
    thread::exit_if_killed();
    tsumugi_abi::syscall::decode_result(value).map_err(|e| e.unwrap_or(Errno::Srch))
}

fn rights_from(bits: usize) -> Result<MapFlags, Errno> {
    if bits & !(rights::READ | rights::WRITE | rights::EXEC) != 0 {
        return Err(Errno::Inval);
    }
    let mut r = MapFlags::empty();
    if bits & rights::READ != 0 {
        r |= MapFlags::READ;
    }
    if bits & rights::WRITE != 0 {
        r |= MapFlags::WRITE | MapFlags::READ;
    }
    if bits & rights::EXEC != 0 {
        r |= MapFlags::EXEC | MapFlags::READ;
    }
    if r.contains(MapFlags::WRITE | MapFlags::EXEC) {
        return Err(Errno::Inval);
    }
    Ok(r)
}

fn rights_bits(r: MapFlags) -> u64 {
    let mut b = 0;
    if r.contains(MapFlags::READ) {
        b |= rights::READ;
    }
    if r.contains(MapFlags::WRITE) {
        b |= rights::WRITE;
    }
    if r.contains(MapFlags::EXEC) {
        b |= rights::EXEC;
    }
    b as u64
}

fn view_errno(e: ViewError) -> Errno {
    match e {
        ViewError::NoMemory => Errno::NoMem,
        ViewError::NoRegion | ViewError::NoView => Errno::Fault,
        ViewError::BadRights(_) | ViewError::BadRange(_) => Errno::Inval,
    }
}

fn region_create(len: u64, rights_bits: usize, flags: usize) -> SysResult {
    if len == 0 || len > MAX_REGION || flags & !region_flags::LAZY != 0 {
        return Err(Errno::Inval);
    }
    let rights = rights_from(rights_bits)?;
    if rights.is_empty() {
        return Err(Errno::Inval);
    }
    let me = me();
    let domain = me.domain.clone().ok_or(Errno::Inval)?;
    let pages = len.div_ceil(PAGE_SIZE);
    // The program's region quota: out of it is out of memory for this program alone.
    if !domain.charge_region(pages) {
        return Err(Errno::NoMem);
    }
    let made = region_create_charged(&me, &domain, pages, rights, flags);
    if made.is_err() {
        domain.refund_region(pages);
    }
    made
}

/// `region_create` once the region is charged to the program (the caller refunds on error).
fn region_create_charged(me: &Arc<Thread>, domain: &Arc<crate::domain::Domain>, pages: u64, rights: MapFlags, flags: usize) -> SysResult {
    // An eager region's frames are taken and zeroed first, without the view-space lock (a
    // region may have up to `MAX_REGION` bytes: zeroing them under it held every CPU's faults).
    // Frees other calls left for later are given back first (interrupts may come in here).
    space::free_pending();
    let mut eager = if flags & region_flags::LAZY != 0 { None } else { Some(space::eager_frames(pages).ok_or(Errno::NoMem)?) };
    let made = space::with_space(|space, m| {
        let Some(start) = space.allocate_range(pages * PAGE_SIZE, PAGE_SIZE) else { return Err(Errno::NoMem) };
        let made = match eager.take() {
            Some(frames) => space.views.create_region_from(start, RegionKind::Shared, frames).map_err(|(e, frames)| {
                eager = Some(frames);
                e
            }),
            None => space.views.create_region(m, start, pages, RegionKind::Shared, Backing::ZeroOnTouch),
        };
        match made {
            Ok(id) => {
                space.place(id, start);
                Ok((id, start))
            }
            Err(e) => {
                space.abandon_range(start);
                Err(view_errno(e))
            }
        }
    });
    if let Some(frames) = eager {
        space::free_frames(frames);
    }
    let (id, start) = made?;
    // The region joins the creator's view — and so the view of every thread that shares it
    // (its view-mates: threads with identical rights act as one protection domain). In a
    // Kernel-Notification program every kernel thread is a vCPU or an activation of one,
    // running the library's threads anywhere: all of them get it. One creation at a time per
    // program, so two creators cannot each miss the other's mates.
    let _creating = domain.region_lock.lock();
    let my_view = me.view().ok_or(Errno::Srch)?;
    let whole_program = domain.kn.registered();
    let mates: alloc::vec::Vec<Arc<Thread>> = domain
        .thread_ids()
        .into_iter()
        .filter_map(thread::find)
        .filter(|t| t.id != me.id && t.state() != crate::thread::State::Dead && (whole_program || t.view() == Some(my_view)))
        .collect();
    // Bounded work with interrupts off: a program whose threads it split into more views than
    // one change may make gets `ENOMEM` (its own doing; nobody else's call is refused).
    if !views_within(mates.iter().map(|t| t.view()).chain([Some(my_view)]), MAX_VIEWS_PER_CHANGE) {
        space::with(|s, m| s.release_region(m, id)).ok();
        return Err(Errno::NoMem);
    }
    // The lock is held already; the creator's own CPU reloads at once (nothing to wait for).
    if let Err(e) = RightsChange::new(id, rights).apply(me) {
        // Nobody holds it: drop it at once.
        space::with(|s, m| s.release_region(m, id)).ok();
        return Err(e);
    }
    domain.own_region(id);
    let mut change = RightsChange::new(id, rights);
    for t in mates {
        // A mate that raced into another view keeps its view; the creator's succeeded.
        let _ = change.apply(&t);
    }
    // Not waited for: a region only adds rights, and a mate that touches it before its CPU
    // reloads takes a fault that reloads its root (`trap::user_page_fault`).
    Ok(start.as_u64() as usize)
}

/// One rights change (region `id` to `rights`) applied to several threads: threads that were in
/// the same view move to the same new view, built once. Without this, a change reaching the
/// hundreds of threads of one view rebuilt and looked up the new view's set per thread, and a
/// program of 500 threads making regions spent most of its time there (the stress suite).
struct RightsChange {
    id: crate::mm::view_space::RegionId,
    rights: MapFlags,
    /// (old view, new view, new root) of the moves made so far.
    made: alloc::vec::Vec<(ViewId, ViewId, u64)>,
    /// Reloads asked of CPUs running moved threads, to wait for once no lock is held.
    reloads: alloc::vec::Vec<crate::smp::Ticket>,
}

impl RightsChange {
    fn new(id: crate::mm::view_space::RegionId, rights: MapFlags) -> Self {
        RightsChange { id, rights, made: alloc::vec::Vec::new(), reloads: alloc::vec::Vec::new() }
    }

    /// Waits until every CPU that ran a moved thread has loaded its new view (call with no
    /// lock held): when the syscall returns, no CPU reaches memory through an old view.
    fn finish(self) {
        crate::smp::wait_reloaded(&self.reloads);
    }

    /// Moves `t` to its view changed by this change, making the CPU running it switch.
    fn apply(&mut self, t: &Arc<Thread>) -> Result<(), Errno> {
        let old = t.view().ok_or(Errno::Srch)?;
        let (id, rights) = (self.id, self.rights);
        let known = self.made.iter().find(|(o, ..)| *o == old).map(|&(_, new, root)| (new, root));
        let (new, root) = space::with(|s, m| {
            // Attach the new view for `t`; the old one stays attached (as stale) until the CPU
            // that runs `t` has loaded the new root. A view made for an earlier thread of the
            // same old view is reused (if it still lives: its threads may have left it).
            if let Some((new, root)) = known {
                if s.attach_again(new).is_ok() {
                    return Ok((new, root));
                }
            }
            // Bounded work whatever the regions' sizes (`ViewSpace::attach_changed`): the old
            // view's table copied without the region, then at most `view_space::MAP_BUDGET` of its
            // pages mapped; the rest is mapped on first touch.
            let new = s.attach_changed(m, old, id, rights)?;
            Ok::<_, ViewError>((new, s.root(new).expect("attached").number()))
        })
        .map_err(view_errno)?;
        if known.is_none() && self.made.try_reserve(1).is_ok() {
            self.made.push((old, new, root));
        }
        // Room for the ticket first: a move whose reload could not be waited for would make
        // the syscall return before the change holds everywhere.
        self.reloads.try_reserve(1).map_err(|_| Errno::NoMem)?;
        if let Some(ticket) = move_to_view(t, new, root)? {
            self.reloads.push(ticket);
        }
        Ok(())
    }
}

/// Moves `t` (a thread of the caller's own program) to the view with `rights` on region `id`,
/// and returns once the CPU running it uses that view. One change of the program's views at a
/// time (its `region_lock`, as `region_create` and foreign grants take it), so two concurrent
/// changes of one thread's rights both hold: each builds its view from the other's result.
fn change_rights(t: &Arc<Thread>, id: crate::mm::view_space::RegionId, rights: MapFlags) -> Result<(), Errno> {
    let mut change = RightsChange::new(id, rights);
    {
        let domain = t.domain.clone().ok_or(Errno::Srch)?;
        let _changing = domain.region_lock.lock();
        change.apply(t)?;
    }
    change.finish();
    Ok(())
}

/// Puts `t` in view `new` (already attached for it), whose table's root is `root`. Returns the
/// reload to wait for if `t` runs on another CPU (the running thread reloads at once).
fn move_to_view(t: &Arc<Thread>, new: ViewId, root: u64) -> Result<Option<crate::smp::Ticket>, Errno> {
    if !t.set_view(new, root) {
        // `t` ended meanwhile: nobody else will detach the view made for it.
        space::with(|s, m| s.detach(m, new)).map_err(view_errno)?;
        return Err(Errno::Srch);
    }
    let me_id = scheduler::with_current(|c| c.map(|c| c.id));
    if Some(t.id) == me_id {
        scheduler::reload_current_root();
        return Ok(None);
    }
    // The new root is stored (set_view); a switch that puts `t` on a CPU stores `last_cpu` and
    // its state, then loads the root. A SeqCst fence on each side between the store and the
    // load: either this sees `t` running (and where), or that switch loads the new root.
    core::sync::atomic::fence(Ordering::SeqCst);
    if t.state() != crate::thread::State::Running {
        return Ok(None);
    }
    let cpu = t.last_cpu.load(Ordering::Acquire);
    scheduler::this_cpu().counters.bump(Counter::ShootdownsSent);
    Ok(crate::smp::request_reload(cpu))
}

/// The region at `addr` and the caller's rights on it.
fn my_region(addr: u64) -> Result<(crate::mm::view_space::RegionId, MapFlags), Errno> {
    let view = my_view()?;
    space::with(|s, _| {
        let r = s.region_at(addr).ok_or(Errno::Fault)?;
        let rights = s.rights(view, r);
        if rights.is_empty() {
            return Err(Errno::Fault);
        }
        Ok((r, rights))
    })
}

/// The thread `tid` a grant or revoke acts on, with whether it belongs to another program
/// than the caller's.
fn rights_target(me: &Thread, tid: u64) -> Result<(Arc<Thread>, bool), Errno> {
    let target = thread::find(tid).ok_or(Errno::Srch)?;
    if target.domain.is_none() || target.state() == crate::thread::State::Dead {
        return Err(Errno::Srch);
    }
    let foreign = match (&me.domain, &target.domain) {
        (Some(a), Some(b)) => !Arc::ptr_eq(a, b),
        _ => true,
    };
    Ok((target, foreign))
}

/// Whether the caller's program owns region `region` (made it, or it is of its image).
fn caller_owns(me: &Thread, region: crate::mm::view_space::RegionId) -> bool {
    me.domain.as_ref().is_some_and(|d| d.owns(region))
}

/// The threads a rights change on `target` from another program applies to: `target` and its
/// view-mates (every thread of a Kernel-Notification program), so a program is never split
/// from its view-mates by someone else — its later `region_create` reaches them all.
fn mates_of(target: &Arc<Thread>) -> alloc::vec::Vec<Arc<Thread>> {
    let Some(domain) = target.domain.clone() else { return alloc::vec![target.clone()] };
    let view = target.view();
    let whole_program = domain.kn.registered();
    let mut all: alloc::vec::Vec<Arc<Thread>> = domain
        .thread_ids()
        .into_iter()
        .filter_map(thread::find)
        .filter(|t| t.id != target.id && t.state() != crate::thread::State::Dead && (whole_program || t.view() == view))
        .collect();
    all.push(target.clone());
    all
}

/// [`mates_of`], if one change may reach them all: `ENOMEM` if they are in more than
/// `MAX_VIEWS_PER_CHANGE` views (each new view is bounded work with interrupts off; a thousand
/// are not).
#[inline(never)]
fn bounded_mates_of(target: &Arc<Thread>) -> Result<alloc::vec::Vec<Arc<Thread>>, Errno> {
    let mates = mates_of(target);
    if !views_within(mates.iter().map(|t| t.view()), MAX_VIEWS_PER_CHANGE) {
        return Err(Errno::NoMem);
    }
    Ok(mates)
}

/// `region_grant`. Within a program any holder may pass on at most its own rights. To a thread
/// of another program only the region's owner may grant, only while that program accepts
/// grants from the caller's (`grant_allow`), and the grant reaches the target's view-mates with
/// it (authority rules, ARCHITECTURE.md). Every refusal comes before anything changes.
fn region_grant(addr: u64, rights_bits: usize, tid: u64) -> SysResult {
    let rights = rights_from(rights_bits)?;
    let (region, mine) = my_region(addr)?;
    if !mine.contains(rights) {
        return Err(Errno::Perm);
    }
    let me = me();
    let (target, foreign) = rights_target(&me, tid)?;
    if !foreign {
        change_rights(&target, region, rights)?;
        return Ok(0);
    }
    if !caller_owns(&me, region) {
        return Err(Errno::Perm);
    }
    let domain = target.domain.clone().expect("a user thread");
    // A grant racing a withdrawal of consent is ordered before it (a withdrawal takes nothing
    // back: ARCHITECTURE.md "Authority").
    if !me.domain.as_ref().is_some_and(|d| domain.grant_senders.lock().contains(d.id)) {
        return Err(Errno::Perm);
    }
    let mut change = RightsChange::new(region, rights);
    {
        // One change of the target program's views at a time, as its own `region_create` does.
        let _changing = domain.region_lock.lock();
        for t in bounded_mates_of(&target)? {
            change.apply(&t)?;
        }
    }
    change.finish();
    Ok(0)
}

/// `region_revoke`. A program may take any region out of its own threads' views; out of another
/// program's threads only the region's owner may, and then out of the target's view-mates too.
fn region_revoke(addr: u64, tid: u64) -> SysResult {
    let (region, _) = my_region(addr)?;
    let me = me();
    let (target, foreign) = rights_target(&me, tid)?;
    if !foreign {
        change_rights(&target, region, MapFlags::empty())?;
        return Ok(0);
    }
    if !caller_owns(&me, region) {
        return Err(Errno::Perm);
    }
    let domain = target.domain.clone().expect("a user thread");
    let mut change = RightsChange::new(region, MapFlags::empty());
    {
        let _changing = domain.region_lock.lock();
        for t in bounded_mates_of(&target)? {
            change.apply(&t)?;
        }
    }
    // When the call returns, no CPU reaches the region through the revoked threads.
    change.finish();
    Ok(0)
}

fn view_query(buf: u64, max: u64) -> SysResult {
    let view = my_view()?;
    let entries = space::with(|s, _| s.view_regions(view));
    let n = entries.len().min(max as usize);
    let bytes = (n as u64).checked_mul(VIEW_ENTRY_SIZE).ok_or(Errno::Inval)?;
    check_user(buf, bytes, MapFlags::WRITE)?;
    for (i, (info, r)) in entries.iter().take(n).enumerate() {
        let e = ViewEntry { start: info.start.as_u64(), len: info.len, rights: rights_bits(*r), kind: info.kind as u64 };
        let words = [e.start, e.len, e.rights, e.kind];
        let mut raw = [0u8; VIEW_ENTRY_SIZE as usize];
        for (j, w) in words.iter().enumerate() {
            raw[j * 8..j * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        copy_out(buf + i as u64 * VIEW_ENTRY_SIZE, &raw)?;
    }
    Ok(entries.len())
}

fn counters(which: usize, buf: u64, len: u64) -> SysResult {
    let values: [u64; Counter::COUNT] = match which {
        scope::SHARES => {
            let mut w = [0u64; Counter::COUNT];
            let shares = scheduler::with_current(|t| crate::notify::processors::figures(t.and_then(|t| t.domain.as_deref())));
            w[..shares.len()].copy_from_slice(&shares);
            w
        }
        scope::ALL_CPUS => {
            let mut sum = [0u64; Counter::COUNT];
            for cpu in CPUS.iter() {
                for (s, v) in sum.iter_mut().zip(cpu.counters.snapshot()) {
                    *s += v;
                }
            }
            sum
        }
        scope::DOMAIN => me().domain.as_ref().ok_or(Errno::Inval)?.counters.snapshot(),
        cpu if cpu < CPUS.len() => CPUS[cpu].counters.snapshot(),
        _ => return Err(Errno::Inval),
    };
    let n = (len as usize).min(Counter::COUNT);
    let mut raw = [0u8; Counter::COUNT * 8];
    for (i, v) in values.iter().take(n).enumerate() {
        raw[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }
    copy_out(buf, &raw[..n * 8])?;
    Ok(scheduler::online_cpus())
}

/// `sched_affinity`: reads the scheduler's thread-view affinity switch (`usize::MAX`) or sets
/// it. The switch is machine-wide, so only a program running alone may set it (`EPERM` while
/// another program runs: it would change how that program is scheduled); anyone may read it.
fn sched_affinity(arg: usize) -> SysResult {
    let mut policy = scheduler::policy();
    let previous = policy.affinity;
    match arg {
        0 | 1 => {
            let me = me();
            let domain = me.domain.as_ref().ok_or(Errno::Perm)?;
            if crate::domain::others_running(domain) {
                return Err(Errno::Perm);
            }
            policy.affinity = arg == 1;
            scheduler::set_policy(policy);
        }
        usize::MAX => {}
        _ => return Err(Errno::Inval),
    }
    Ok(usize::from(previous))
}
