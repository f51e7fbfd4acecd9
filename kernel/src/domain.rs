//! Domains: loaded programs. A domain owns the regions its image and stacks live in, counts
//! its threads, and records how it ended; the last thread's end releases its regions (their
//! frames go once no view holds them).

use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use arch::addr::{VirtAddr, PAGE_SIZE};
use arch::mapping::MapFlags;
use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};
use arch::sync::Mutex;

use tsumugi_abi::log::{DOMAIN, EXITED, KILLED};

use crate::loader::{self, LoadError};
use crate::mm::kernel_space::phys_to_virt;
use crate::mm::region::RegionKind;
use crate::mm::view_space::{Backing, RegionId, ViewError, ViewId};
use crate::mm::space;
use crate::sched::scheduler::{self, Then};
use crate::stats::Counters;
use crate::thread::{self, Body, State, Thread};

/// Size of a program's first stack.
pub const USER_STACK_SIZE: u64 = 64 * 1024;
/// Alignment of program images in the single address space.
const IMAGE_ALIGN: u64 = 2 << 20;

static NEXT_DOMAIN_ID: AtomicU64 = AtomicU64::new(1);

// Per-program limits (issue 15, item 3): every kernel allocation a syscall can cause is either
// fallible or charged here, so a program that exhausts one gets `EAGAIN`/`ENOMEM` and nobody
// else notices. Kernel Notification activations are threads and count as such; the KN
// sleepers and held-back events are limited in `kn.rs`.

/// Threads a program may have made: ended ones are kept (their record, for `thread_join`)
/// until the program ends, so this bounds the heap a program's threads take.
pub const MAX_THREADS: usize = 4096;
/// Threads a program may have alive at once: each holds a kernel stack
/// (`kernel_stack::STACK_PAGES` frames).
pub const MAX_LIVE_THREADS: usize = 1024;
/// Regions a program may own (the image's and stack's included).
pub const MAX_REGIONS: usize = 4096;
/// Pages all of a program's regions may span (1 GiB): each page has a record on the kernel
/// heap whether or not it is backed (`view_space::Region::frames`).
pub const MAX_REGION_PAGES: u64 = 1 << 18;

/// Why a program may not have another thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpawnError {
    /// Memory (a kernel stack, frames) ran out.
    NoMemory,
    /// The program reached [`MAX_THREADS`] or [`MAX_LIVE_THREADS`].
    Quota,
}

impl From<SpawnError> for StartError {
    fn from(e: SpawnError) -> Self {
        match e {
            SpawnError::NoMemory | SpawnError::Quota => StartError::NoMemory,
        }
    }
}

/// Domains started and not yet finished (for diagnostics).
static LIVE: Mutex<Vec<alloc::sync::Weak<Domain>>> = Mutex::new(Vec::new());

/// Calls `f` for every live domain (diagnostics; skips if the list is busy).
pub fn for_each_live(mut f: impl FnMut(&Domain)) {
    if let Some(list) = LIVE.try_lock() {
        for d in list.iter().filter_map(|w| w.upgrade()) {
            f(&d);
        }
    }
}

/// Whether a program other than `me` is running (started and not finished): a machine-wide
/// setting may be changed only by a program that runs alone, so no program changes how
/// another is treated (issue 15's authority model).
pub fn others_running(me: &Domain) -> bool {
    let list = LIVE.lock();
    list.iter()
        .filter_map(|w| w.upgrade())
        .any(|d| !core::ptr::eq(&*d, me) && d.outcome().is_none())
}

/// The id of the live program that owns region `region` (S3: whose thread holds a lock).
pub fn owner_of(region: RegionId) -> Option<u64> {
    let list = LIVE.lock();
    list.iter().filter_map(|w| w.upgrade()).find(|d| d.owns(region)).map(|d| d.id)
}

/// Why a program could not be started.
#[derive(Debug)]
pub enum StartError {
    /// The ELF file was refused.
    Load(LoadError),
    /// Memory ran out (frames, tables, stacks or address space).
    NoMemory,
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Load(e) => write!(f, "{e}"),
            StartError::NoMemory => write!(f, "out of memory"),
        }
    }
}

impl From<ViewError> for StartError {
    fn from(_: ViewError) -> Self {
        StartError::NoMemory
    }
}

/// How a domain ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It exited with this status (`exit`, or the last thread's `thread_exit` value).
    Exited(usize),
    /// The kernel ended it for this reason.
    Killed(String),
}

struct Inner {
    /// Threads ever made, by id (emptied when the domain finishes).
    threads: Vec<u64>,
    /// How many threads were ever made.
    made: usize,
    /// Threads not yet ended.
    live: usize,
    /// Regions the domain owns.
    regions: Vec<RegionId>,
    /// Pages those regions span, with the ones being made (charged before they exist).
    region_pages: u64,
    /// Regions being made (charged before they exist).
    regions_pending: usize,
    /// Set by the first `exit` or kill.
    outcome: Option<Outcome>,
    /// The last thread has ended and the regions were released.
    finished: bool,
    /// Kernel threads waiting for the end.
    waiters: Vec<Arc<Thread>>,
}

/// A loaded program.
pub struct Domain {
    /// Unique id, in load order.
    pub id: u64,
    /// Program name.
    pub name: String,
    /// Where its first thread starts.
    pub entry: VirtAddr,
    /// Initial stack pointer of its first thread.
    pub stack_top: VirtAddr,
    /// Per-domain counters (context and view switches).
    pub counters: Counters,
    /// The first thread's view: every region of the image and stack with its rights.
    initial_view: Vec<(RegionId, MapFlags)>,
    inner: Mutex<Inner>,
    /// Kernel Notification state (registered by `kn_register`; upcall counts kept after the end).
    pub kn: crate::notify::DomainKn,
    /// Serialises region creation (which changes several threads' views) and the start of
    /// Kernel Notification activations (which copy a thread's view): see `notify::vcpu::start_activation`.
    pub region_lock: Mutex<()>,
    /// The programs it accepts signals from (`signal_allow`; ARCHITECTURE.md "Signals").
    pub signal_senders: Mutex<crate::signals::Accepted>,
    /// The programs whose grants it accepts (`grant_allow`; ARCHITECTURE.md "Authority").
    pub grant_senders: Mutex<crate::signals::Accepted>,
}

impl Domain {
    /// Loads the static-pie ELF `bytes` as program `name` into a fresh range of the single
    /// address space. Nothing runs until [`Domain::start`].
    pub fn load(name: &str, bytes: &[u8]) -> Result<Arc<Domain>, StartError> {
        let image = loader::parse(bytes, arch::ELF_MACHINE).map_err(StartError::Load)?;
        let mut regions = Vec::new();
        let result = space::with_space(|space, m| -> Result<(u64, VirtAddr), StartError> {
            let span = image.end - image.start;
            let range = space.allocate_range(span, IMAGE_ALIGN).ok_or(StartError::NoMemory)?;
            let base = range.as_u64() - image.start;
            for seg in &image.segments {
                let first = (base + seg.vaddr) / PAGE_SIZE * PAGE_SIZE;
                let end = (base + seg.vaddr + seg.mem_len).div_ceil(PAGE_SIZE) * PAGE_SIZE;
                let kind = RegionKind::for_segment(seg.flags);
                let id = match space.views.create_region(m, VirtAddr::new(first), (end - first) / PAGE_SIZE, kind, Backing::Eager) {
                    Ok(id) => id,
                    Err(e) => {
                        if regions.is_empty() {
                            space.abandon_range(range);
                        }
                        return Err(e.into());
                    }
                };
                space.place(id, range);
                regions.push((id, seg.flags & (MapFlags::READ | MapFlags::WRITE | MapFlags::EXEC)));
                let data = &bytes[seg.file_offset as usize..(seg.file_offset + seg.file_len) as usize];
                space.views.write(m, id, base + seg.vaddr - first, data, |pa| phys_to_virt(pa).as_mut_ptr())?;
            }
            for r in &image.relocations {
                let at = base + r.offset;
                let id = space.views.region_at(at).ok_or(StartError::Load(LoadError::BadRelocation(r.offset)))?;
                let start = space.views.region_info(id).expect("live").start.as_u64();
                space.views.write(m, id, at - start, &base.wrapping_add(r.addend).to_le_bytes(), |pa| phys_to_virt(pa).as_mut_ptr())?;
            }
            let stack = space.allocate_range(USER_STACK_SIZE, PAGE_SIZE).ok_or(StartError::NoMemory)?;
            let id = space.views.create_region(m, stack, USER_STACK_SIZE / PAGE_SIZE, RegionKind::Stack, Backing::ZeroOnTouch);
            let id = match id {
                Ok(id) => id,
                Err(e) => {
                    space.abandon_range(stack);
                    return Err(e.into());
                }
            };
            space.place(id, stack);
            regions.push((id, MapFlags::READ | MapFlags::WRITE));
            Ok((base + image.entry, VirtAddr::new(stack.as_u64() + USER_STACK_SIZE)))
        });
        let (entry, stack_top) = match result {
            Ok(v) => v,
            Err(e) => {
                space::with(|s, m| {
                    for (id, _) in &regions {
                        let _ = s.release_region(m, *id);
                    }
                });
                return Err(e);
            }
        };
        let mut owned = String::new();
        owned.try_reserve_exact(name.len()).map_err(|_| StartError::NoMemory)?;
        owned.push_str(name);
        Ok(Arc::new(Domain {
            id: NEXT_DOMAIN_ID.fetch_add(1, Ordering::Relaxed),
            name: owned,
            entry: VirtAddr::new(entry),
            stack_top,
            counters: Counters::new(),
            inner: Mutex::new(Inner {
                threads: Vec::new(),
                made: 0,
                live: 0,
                regions: regions.iter().map(|(id, _)| *id).collect(),
                region_pages: 0,
                regions_pending: 0,
                outcome: None,
                finished: false,
                waiters: Vec::new(),
            }),
            initial_view: regions,
            kn: crate::notify::DomainKn::new(),
            region_lock: Mutex::new(()),
            signal_senders: Mutex::new(crate::signals::Accepted::new()),
            grant_senders: Mutex::new(crate::signals::Accepted::new()),
        }))
    }

    /// Starts the first thread.
    pub fn start(self: &Arc<Self>) -> Result<Arc<Thread>, StartError> {
        {
            let mut live = LIVE.lock();
            live.retain(|w| w.strong_count() > 0);
            live.push(Arc::downgrade(self));
        }
        let view = space::with(|s, m| s.attach(m, &self.initial_view))?;
        let body = Body::User { ip: self.entry.as_u64(), sp: self.stack_top.as_u64(), arg: 0 };
        Ok(self.spawn(view, body, true, None)?)
    }

    /// Makes a thread of this domain attached to `view` (whose reference the caller passes in,
    /// and which is detached if this fails), as vCPU `vcpu` if given, and makes it runnable.
    /// A thread made while the program is ending is flagged killed, so it ends before it
    /// reaches user mode.
    pub fn spawn(self: &Arc<Self>, view: ViewId, body: Body, affine: bool, vcpu: Option<usize>) -> Result<Arc<Thread>, SpawnError> {
        // Charge the quota first (so racing creators cannot both pass it), refund on failure.
        let charged = {
            let mut inner = self.inner.lock();
            if inner.made >= MAX_THREADS || inner.live >= MAX_LIVE_THREADS {
                false
            } else {
                inner.made += 1;
                inner.live += 1;
                true
            }
        };
        let made = if charged {
            let root = space::with(|s, _| s.root(view)).expect("an attached view").number();
            Thread::new(Some(self.clone()), body, Some((view, root)), affine).map_err(|_| SpawnError::NoMemory)
        } else {
            Err(SpawnError::Quota)
        };
        let t = match made {
            Ok(t) => t,
            Err(e) => {
                if charged {
                    // A creator is a live thread of this program (or the loader before the
                    // first start), so this never ends the program.
                    let mut inner = self.inner.lock();
                    inner.made -= 1;
                    inner.live -= 1;
                }
                space::with(|s, m| s.detach(m, view)).expect("attached");
                return Err(e);
            }
        };
        if let Some(v) = vcpu {
            t.vcpu.store(v, Ordering::Relaxed);
        }
        {
            let mut inner = self.inner.lock();
            inner.threads.push(t.id);
            // `end` records the outcome before it copies the list of threads to flag, under
            // this lock: a thread added after that copy sees the outcome here.
            if inner.outcome.is_some() {
                t.killed.store(true, Ordering::Release);
            }
        }
        thread::start(t.clone());
        Ok(t)
    }

    /// Charges a region of `pages` pages about to be made to this program's quota
    /// ([`MAX_REGIONS`], [`MAX_REGION_PAGES`]); `false` if it would exceed it. Follow with
    /// [`Domain::own_region`] once made or [`Domain::refund_region`] if not.
    pub fn charge_region(&self, pages: u64) -> bool {
        let mut inner = self.inner.lock();
        let count = inner.regions.len() + inner.regions_pending;
        match inner.region_pages.checked_add(pages) {
            Some(total) if total <= MAX_REGION_PAGES && count < MAX_REGIONS => {
                inner.region_pages = total;
                inner.regions_pending += 1;
                true
            }
            _ => false,
        }
    }

    /// Gives back a charge for a region that was not made.
    pub fn refund_region(&self, pages: u64) {
        let mut inner = self.inner.lock();
        inner.region_pages -= pages;
        inner.regions_pending -= 1;
    }

    /// Records a region the program created (released with the program), charged before
    /// with [`Domain::charge_region`].
    pub fn own_region(&self, id: RegionId) {
        let mut inner = self.inner.lock();
        inner.regions_pending -= 1;
        inner.regions.push(id);
    }

    /// Whether the domain owns region `id`.
    pub fn owns(&self, id: RegionId) -> bool {
        self.inner.lock().regions.contains(&id)
    }

    /// A thread of this domain ended with `value` (`None`: killed). The last one finishes the
    /// domain: its regions are released and waiters woken.
    pub fn thread_ended(&self, value: Option<usize>) {
        let (regions, ids, outcome) = {
            let mut inner = self.inner.lock();
            inner.live -= 1;
            if inner.live > 0 {
                return;
            }
            if inner.outcome.is_none() {
                inner.outcome = Some(match value {
                    Some(v) => Outcome::Exited(v),
                    None => Outcome::Killed(String::from("killed")),
                });
            }
            (core::mem::take(&mut inner.regions), core::mem::take(&mut inner.threads), inner.outcome.clone())
        };
        // Say so now, before its addresses can be handed out again (the log's order is the
        // order of events: tests check that programs alive at once never share addresses).
        match outcome {
            Some(Outcome::Exited(code)) => crate::println!("{DOMAIN}{} {}{EXITED}{code}", self.id, self.name),
            Some(Outcome::Killed(why)) => crate::println!("{DOMAIN}{} {}{KILLED}{why}", self.id, self.name),
            None => {}
        }
        crate::notify::release(self);
        crate::names::BOARD.lock().forget(self.id);
        crate::s3::program_ended(self.id, &regions);
        space::with(|s, m| {
            for id in regions {
                s.release_region(m, id).expect("a domain's own region");
            }
        });
        thread::forget(&ids);
        // Only now is the domain finished: whoever waits sees everything given back.
        let waiters = {
            let mut inner = self.inner.lock();
            inner.finished = true;
            core::mem::take(&mut inner.waiters)
        };
        for w in waiters {
            thread::wake(w);
        }
    }

    /// Ends the whole program: records `outcome` (unless one is recorded) and asks every
    /// thread to end (blocked ones are woken to do so).
    pub fn end(&self, outcome: Outcome) {
        let ids = {
            let mut inner = self.inner.lock();
            if inner.outcome.is_none() {
                inner.outcome = Some(outcome);
            }
            inner.threads.clone()
        };
        let me = scheduler::with_current(|t| t.map(|t| t.id));
        for id in ids {
            let Some(t) = thread::find(id) else { continue };
            t.killed.store(true, Ordering::Release);
            if Some(id) == me {
                continue;
            }
            match t.state() {
                State::Blocked => {
                    thread::interrupt_sleep(&t);
                    thread::wake(t);
                }
                State::Running => crate::smp::kick(t.last_cpu.load(Ordering::Relaxed)),
                State::Ready | State::Dead => {}
            }
        }
    }

    /// Blocks the calling kernel thread until the domain has finished; returns how it ended.
    pub fn wait(&self) -> Outcome {
        loop {
            {
                let mut inner = self.inner.lock();
                if inner.finished {
                    return inner.outcome.clone().expect("set when finished");
                }
                let me = scheduler::current().expect("wait from a thread");
                me.set_state(State::Blocked);
                inner.waiters.push(me);
            }
            scheduler::schedule(Then::Block);
        }
    }

    /// Releases the regions of a domain that never started (self-tests, failed starts).
    pub fn discard(&self) {
        let regions = core::mem::take(&mut self.inner.lock().regions);
        space::with(|s, m| {
            for id in regions {
                let _ = s.release_region(m, id);
            }
        });
    }

    /// Whether the program is ending or has ended (an outcome is recorded: `exit`, a kill).
    pub fn ending(&self) -> bool {
        self.inner.lock().outcome.is_some()
    }

    /// How the domain ended (`None` while it runs).
    pub fn outcome(&self) -> Option<Outcome> {
        let inner = self.inner.lock();
        if inner.finished {
            inner.outcome.clone()
        } else {
            None
        }
    }

    /// Ids of the threads not yet forgotten (alive, or ended in a domain still running).
    pub fn thread_ids(&self) -> Vec<u64> {
        self.inner.lock().threads.clone()
    }

    /// Threads made so far.
    pub fn thread_count(&self) -> usize {
        self.inner.lock().made
    }
}
