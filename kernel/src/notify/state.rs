//! A program's Kernel Notification state: what registration fixed (read without a lock by the
//! fast paths), what changes (ring tail, held events, parked vCPUs: one spin lock), and the
//! upcall counts (atomics, kept after the program ends).

use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use arch::sync::{Mutex, MutexGuard};
use spin::Once;
use tsumugi_abi::kn::Event;

use crate::mm::view_space::ViewId;
use crate::thread::Thread;

/// What registration fixed; immutable for the program's life, so the fast paths read it
/// without a lock.
pub struct Config {
    /// The upcall handler (checked executable at registration).
    pub handler: u64,
    /// The ring's header address (the ring was checked writable, whole, at registration).
    pub ring: u64,
    /// Slots in the ring (a power of two).
    pub capacity: u64,
    /// The library's per-vCPU "FP is live" words (`Registration::fp_live`), or 0.
    pub fp_live: u64,
    /// The view the registering thread had, attached for the program's life: the checked
    /// ring writes (from another program's context, or when the poster's own table cannot)
    /// go through it.
    pub ring_view: ViewId,
    /// Top of each vCPU's upcall stack.
    pub upcall_stacks: Vec<u64>,
}

/// One virtual processor of a program.
pub struct Vcpu {
    /// Its activation parked in `vcpu_park`, if any.
    pub parked: Option<Arc<Thread>>,
    /// An unpark came while it was not parked: the next park returns at once.
    pub token: bool,
    /// The library's `fp_live` word of this vCPU was set (it only ever goes 0 -> 1).
    pub fp_live_told: bool,
    /// Its activation waiting for a grant (`processors`: not granted, or revoked).
    pub waiting: Option<Arc<Thread>>,
    /// A grant not yet taken: the `VCPU_GRANTED` upcall's arguments.
    pub grant: Option<[u64; 4]>,
    /// Times this vCPU was revoked.
    pub revokes: u64,
}

/// What changes while the program runs.
pub struct State {
    /// The kernel's copy of the ring's `tail` (the kernel is its only writer; the copy in user
    /// memory is what the library reads, never what the kernel trusts).
    pub tail: u64,
    /// The ring's `head` as the fast append last read it (0 before): the library only moves
    /// `head` forward, so while `tail - head_seen` leaves room the append need not read it.
    /// A library that moves it back only overwrites its own unread events.
    pub head_seen: u64,
    /// Events waiting for room in the ring, in order.
    pub held: VecDeque<Event>,
    /// The program's vCPUs.
    pub vcpus: Vec<Vcpu>,
    /// vCPUs with a parked activation (`post` wakes one only if there is one).
    pub parked: usize,
    /// Spare activations, parked until a blocking call hands them a vCPU.
    pub spares: Vec<Arc<Thread>>,
    /// Spares the program keeps beyond the floor of `SPARES_PER_VCPU` per vCPU: one more each
    /// time a blocking call found none (so a program whose threads block many at once — a
    /// barrier — stops making and ending an activation per waiter), at most `MAX_SPARES`.
    pub spares_wanted: usize,
    /// Contexts saved in the kernel's own memory, by vCPU (the `kn=sa` baseline only).
    pub c_area: Vec<Option<super::sa_copy::Saved>>,
    /// The program has finished: nothing is posted any more.
    pub released: bool,
}

/// A program's Kernel Notification state (a field of its `Domain`).
pub struct DomainKn {
    config: Once<Config>,
    state: Mutex<State>,
    /// Upcalls delivered, by kind value.
    upcalls: [AtomicU64; 8],
    /// Timed waits pending in the sleeper queue.
    pub sleeping: AtomicUsize,
    /// A vCPU was revoked with a user thread in it: the next running vCPU of the program that a
    /// kick interrupts in a user thread takes an upcall, so the library adopts the revoked
    /// vCPU's threads at once (`notify::nudged`).
    pub nudge: AtomicBool,
}

impl DomainKn {
    /// Not registered.
    pub const fn new() -> Self {
        DomainKn {
            config: Once::new(),
            state: Mutex::new(State { tail: 0, head_seen: 0, held: VecDeque::new(), vcpus: Vec::new(), parked: 0, spares: Vec::new(), spares_wanted: 0, c_area: Vec::new(), released: false }),
            upcalls: [const { AtomicU64::new(0) }; 8],
            sleeping: AtomicUsize::new(0),
            nudge: AtomicBool::new(false),
        }
    }

    /// The registration, if the program registered.
    #[inline]
    pub fn config(&self) -> Option<&Config> {
        self.config.get()
    }

    /// Whether the program registered.
    pub fn registered(&self) -> bool {
        self.config.get().is_some()
    }

    /// The changing state (lock order: this lock, then the view space, then run queues).
    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// The changing state, if its lock is free (diagnostics).
    pub fn try_state(&self) -> Option<MutexGuard<'_, State>> {
        self.state.try_lock()
    }

    /// Registers `config` with `vcpus` vCPUs and the ring's current `tail`; fails if the
    /// program registered before.
    pub fn install(&self, config: Config, vcpus: usize, tail: u64) -> Result<(), ()> {
        let mut state = self.state.lock();
        if self.config.get().is_some() || state.released {
            return Err(());
        }
        self.config.call_once(|| config);
        state.tail = tail;
        state.vcpus = (0..vcpus).map(|_| Vcpu { parked: None, token: false, fp_live_told: false, waiting: None, grant: None, revokes: 0 }).collect();
        Ok(())
    }

    /// Counts an upcall of `kind`.
    #[inline]
    pub fn count_upcall(&self, kind: u64) {
        if let Some(c) = self.upcalls.get(kind as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Upcalls delivered, by kind value (also after the program ended).
    pub fn upcalls(&self) -> [u64; 8] {
        core::array::from_fn(|i| self.upcalls[i].load(Ordering::Relaxed))
    }
}

impl Default for DomainKn {
    fn default() -> Self {
        Self::new()
    }
}

/// A mechanism switch set once at boot (the baselines' `kn=sa`, `preempt=signal`).
pub struct BootSwitch(AtomicBool);

impl BootSwitch {
    /// Off until turned on.
    pub const fn off() -> Self {
        BootSwitch(AtomicBool::new(false))
    }

    /// Turns it on (boot).
    pub fn turn_on(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether it is on.
    #[inline]
    pub fn is_on(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}
