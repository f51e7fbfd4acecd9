//! Processor allocation between programs (space sharing, Scheduler Activations): the kernel
//! decides how many vCPUs each registered program runs at once (`shares`: the policy) and
//! tells the library when it gains one (`VCPU_GRANTED`) or loses one (`VCPU_REVOKED`).
//!
//! # Protocol
//! - A program's vCPUs are *granted* or not. A vCPU not granted has an activation waiting in
//!   the kernel (`Vcpu::waiting`); a grant hands it its upcall arguments (`Vcpu::grant`) and
//!   wakes it, and it enters the handler with `VCPU_GRANTED`.
//! - When a program holds more than its share (another registered), its vCPUs give
//!   themselves up at the next point where the library holds nothing half-edited: a timer
//!   tick that finds a user thread running (LTN ≠ 0: the thread is saved into its ThMB as for
//!   a preemption), or a park the library marked idle (`PARK_IDLE`). The vCPU's activation
//!   posts `VCPU_REVOKED(v, thread)`, gives the CPU to the program furthest below its share,
//!   and waits for a grant itself. vCPU 0 is never revoked. A vCPU parked *not* idle (a user
//!   thread keeps it while it waits) is woken with `PARK_GIVE_UP` so its library gives it up
//!   properly.
//! - A newcomer whose share has no free CPU yet waits in `kn_register` until one is freed, so
//!   the vCPUs granted never exceed the CPUs while at most that many programs share them
//!   ([`MAX_GRANTED`], read through `counters(scope::SHARES)`).
//! - A program that ends gives its CPUs back to the others at once.
//!
//! `share=time` at boot turns space sharing off (the baseline: every program keeps every vCPU
//! it asked for, time-shared by the kernel's scheduler).
//!
//! Lock order: [`PROGRAMS`], then a program's notification state.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use arch::sync::Mutex;
use tsumugi_abi::kn::{Event, EventKind};
use tsumugi_abi::stats::shares;

use super::state::BootSwitch;
use crate::domain::Domain;
use crate::sched::scheduler::{self, Then};
use crate::thread::Thread;

/// `share=time`: space sharing off (the time-sharing baseline).
pub static TIME_SHARING: BootSwitch = BootSwitch::off();

/// A registered program's allocation.
struct Program {
    domain: Arc<Domain>,
    /// vCPUs it asked for.
    wants: usize,
    /// Its share now (`shares::targets`).
    target: usize,
    /// vCPUs granted now (bits by index).
    active: u64,
    /// The tick since which it holds more than its share (`None`: it does not).
    over_since: Option<u64>,
}

impl Program {
    fn granted(&self) -> usize {
        self.active.count_ones() as usize
    }
}

/// Registered programs, in registration order.
static PROGRAMS: Mutex<Vec<Program>> = Mutex::new(Vec::new());
/// vCPUs programs hold beyond their shares, over all programs: the timer tick's one-load test.
static EXCESS: AtomicUsize = AtomicUsize::new(0);
static GRANTED: AtomicU64 = AtomicU64::new(0);
static MAX_GRANTED: AtomicU64 = AtomicU64::new(0);
static GRANTS: AtomicU64 = AtomicU64::new(0);
static REVOCATIONS: AtomicU64 = AtomicU64::new(0);

/// Whether some program holds more vCPUs than its share (a hint; the decision is taken under
/// the lock).
#[inline(always)]
pub fn revoking() -> bool {
    EXCESS.load(Ordering::Relaxed) != 0
}

/// A grant to deliver once the allocation lock is dropped.
type Grant = (Arc<Domain>, usize);

/// Recomputes the shares, hands free CPUs to whoever is below its share and publishes the
/// figures; returns the grants to deliver. Under the lock.
fn settle(programs: &mut [Program]) -> Vec<Grant> {
    let cpus = scheduler::online_cpus().max(1);
    let wants: Vec<usize> = programs.iter().map(|p| p.wants).collect();
    let shares = if TIME_SHARING.is_on() { wants.clone() } else { super::shares::targets(cpus, &wants) };
    for (p, s) in programs.iter_mut().zip(&shares) {
        p.target = *s;
    }
    let capacity = shares.iter().sum::<usize>();
    let mut grants = Vec::new();
    loop {
        let granted: Vec<usize> = programs.iter().map(Program::granted).collect();
        if granted.iter().sum::<usize>() >= capacity {
            break;
        }
        let Some(i) = super::shares::neediest(&shares, &granted) else { break };
        let p = &mut programs[i];
        let v = (!p.active).trailing_zeros() as usize;
        if v >= p.wants || grants.try_reserve(1).is_err() {
            break;
        }
        p.active |= 1 << v;
        grants.push((p.domain.clone(), v));
    }
    let now = scheduler::ticks();
    for p in programs.iter_mut() {
        p.over_since = (p.granted() > p.target).then(|| p.over_since.unwrap_or(now));
    }
    let excess: usize = programs.iter().map(|p| p.granted().saturating_sub(p.target)).sum();
    EXCESS.store(excess, Ordering::Relaxed);
    let granted: usize = programs.iter().map(Program::granted).sum();
    GRANTED.store(granted as u64, Ordering::Relaxed);
    MAX_GRANTED.fetch_max(granted as u64, Ordering::Relaxed);
    // Programs over their share: wake their parked vCPUs to give themselves up.
    for p in programs.iter().filter(|p| p.granted() > p.target) {
        super::vcpu::wake_all_parked(&p.domain);
    }
    grants
}

/// Delivers grants decided under the lock.
fn deliver(grants: Vec<Grant>) {
    for (domain, v) in grants {
        GRANTS.fetch_add(1, Ordering::Relaxed);
        super::vcpu::grant(&domain, v);
    }
}

/// A program registered with `wants` vCPUs (its notification state installed). Returns
/// whether its vCPU 0 — the caller — may run now; if not, the caller waits for its grant
/// ([`wait_for_grant`]). Grants of its other vCPUs are delivered to their waiting activations.
pub fn join(domain: &Arc<Domain>, wants: usize) -> Result<(), tsumugi_abi::syscall::Errno> {
    let grants = {
        let mut programs = PROGRAMS.lock();
        programs.try_reserve(1).map_err(|_| tsumugi_abi::syscall::Errno::NoMem)?;
        programs.push(Program { domain: domain.clone(), wants, target: 0, active: 0, over_since: None });
        settle(&mut programs)
    };
    deliver(grants);
    Ok(())
}

/// A program finished: its CPUs go to the others.
pub fn leave(domain: &Domain) {
    let grants = {
        let mut programs = PROGRAMS.lock();
        let before = programs.len();
        programs.retain(|p| !core::ptr::eq(Arc::as_ptr(&p.domain), domain));
        if programs.len() == before {
            return;
        }
        settle(&mut programs)
    };
    deliver(grants);
}

/// vCPU `v` of `domain` offers itself back: if the program holds more than its share (and `v`
/// is not 0), `v` is revoked — its CPU goes to the neediest program — and this returns the
/// vCPU's revocation count (this one included). The caller then posts `VCPU_REVOKED` and waits
/// for a grant.
pub fn give_up(domain: &Domain, v: usize) -> Option<u64> {
    take_back(domain, v, false)
}

/// Ticks a program may hold more vCPUs than its share before the kernel takes them back
/// wherever they are ([`force`]).
pub const FORCE_AFTER_TICKS: u64 = 10;

/// vCPU `v` of `domain` is at a tick where its library cannot be told (LTN = 0: it is inside
/// its own scheduler code; or a baseline's stop): if its program has held more than its share
/// for [`FORCE_AFTER_TICKS`] — a library that never reaches a point where it gives a vCPU up,
/// or a hostile one — the vCPU is taken back anyway, in place: no event, the caller keeps its
/// context and resumes it where it was once granted again. Its threads wait until then; the
/// other programs get their share within the bound.
pub fn force(domain: &Domain, v: usize) -> bool {
    take_back(domain, v, true).is_some()
}

/// [`give_up`] (counted: the library is told) or [`force`].
fn take_back(domain: &Domain, v: usize, forced: bool) -> Option<u64> {
    if v == 0 || !revoking() {
        return None;
    }
    let (count, grants) = {
        let mut programs = PROGRAMS.lock();
        let p = programs.iter_mut().find(|p| core::ptr::eq(Arc::as_ptr(&p.domain), domain))?;
        if p.granted() <= p.target || p.active & (1 << v) == 0 {
            return None;
        }
        if forced && p.over_since.is_none_or(|t| scheduler::ticks().wrapping_sub(t) < FORCE_AFTER_TICKS) {
            return None;
        }
        p.active &= !(1 << v);
        // A forced revocation is not counted for the library: it never sees a `VCPU_REVOKED`
        // for it, and a later grant's count must not wait for one.
        let count = if forced { 0 } else { super::vcpu::count_revocation(domain, v) };
        REVOCATIONS.fetch_add(1, Ordering::Relaxed);
        (count, settle(&mut programs))
    };
    deliver(grants);
    Some(count)
}

/// Whether vCPU `v` of `domain` should give itself up (a hint for parked vCPUs).
pub fn over_share(domain: &Domain, v: usize) -> bool {
    v != 0
        && revoking()
        && PROGRAMS.lock().iter().any(|p| core::ptr::eq(Arc::as_ptr(&p.domain), domain) && p.granted() > p.target && p.active & (1 << v) != 0)
}

/// The words of `counters(scope::SHARES)` for the calling program `domain`.
pub fn figures(domain: Option<&Domain>) -> [u64; shares::COUNT] {
    let programs = PROGRAMS.lock();
    let mine = domain.and_then(|d| programs.iter().find(|p| core::ptr::eq(Arc::as_ptr(&p.domain), d)));
    let mut w = [0u64; shares::COUNT];
    w[shares::GRANTED] = GRANTED.load(Ordering::Relaxed);
    w[shares::MAX_GRANTED] = MAX_GRANTED.load(Ordering::Relaxed);
    w[shares::GRANTS] = GRANTS.load(Ordering::Relaxed);
    w[shares::REVOCATIONS] = REVOCATIONS.load(Ordering::Relaxed);
    w[shares::PROGRAMS] = programs.len() as u64;
    w[shares::MINE] = mine.map_or(0, |p| p.granted() as u64);
    w[shares::MY_TARGET] = mine.map_or(0, |p| p.target as u64);
    w
}

/// Blocks the running activation `me`, vCPU `v` of `domain`, until a grant names it; returns
/// the upcall arguments, or `None` if the program is ending (the caller then ends).
pub fn wait_for_grant(me: &Arc<Thread>, domain: &Domain, v: usize) -> Option<[u64; 4]> {
    loop {
        {
            let mut st = domain.kn.state();
            let slot = st.vcpus.get_mut(v)?;
            if let Some(args) = slot.grant.take() {
                slot.waiting = None;
                return Some(args);
            }
            if st.released || !me.block_unless_killed() {
                st.vcpus[v].waiting = None;
                return None;
            }
            st.vcpus[v].waiting = Some(me.clone());
        }
        scheduler::schedule(Then::Block);
    }
}

/// The `VCPU_REVOKED` event of vCPU `v` (its `count`-th revocation), for the stopped user
/// thread `thmb` (0: it was idle).
pub fn revoked_event(v: usize, thmb: u64, count: u64) -> Event {
    Event { kind: EventKind::VcpuRevoked as u64, thread: thmb, arg0: v as u64, arg1: count }
}
