//! The event ring: every event appended in order; events that find it full wait, in order, in
//! the kernel (`State::held`) until the library makes room, so none is lost and an
//! `UNBLOCKED(t)` can never overtake the `BLOCKED(t)` it answers.
//!
//! **Fast path**: when nothing is held back and the poster is a thread of the program itself,
//! its loaded table maps the ring, and the slot and `tail` are written with plain stores
//! through it (fault fix-up: a fault falls back). **Checked path**: through the view the
//! registering thread had (`Config::ring_view`), for posts from other contexts (a timer tick
//! on a CPU running another program) and whenever the fast one cannot.
//!
//! The kernel's own copy of `tail` (`State::tail`) is the truth; the library only ever moves
//! `head`, which the kernel reads (a garbage `head` makes the ring look full: events are held,
//! nothing is overwritten). The fast append reads `head` only when the value it read last
//! (`State::head_seen`) leaves no room — an old `head` under-states the room, never more — so
//! a garbage `head` is seen once the room the last sane one left is used up.

use core::mem::size_of;
use core::sync::atomic::{fence, Ordering};
use tsumugi_abi::kn::{Event, RING_SLOTS_OFFSET};

use super::state::{Config, State};
use crate::mm::space;

/// Most events a program may have held back (its ring full) before it is ended: a library
/// that never drains its ring must not grow the kernel without bound.
pub const MAX_HELD: usize = 1 << 16;

const HEAD: u64 = 0;
const TAIL: u64 = 8;
const HELD_BACK: u64 = 24;

fn slot_addr(cfg: &Config, index: u64) -> u64 {
    cfg.ring + RING_SLOTS_OFFSET as u64 + (index & (cfg.capacity - 1)) * size_of::<Event>() as u64
}

/// The event as the four words of its slot (the fast path stores them in one straight run).
fn event_words(e: &Event) -> &[u64; 4] {
    const _: () = assert!(size_of::<Event>() == size_of::<[u64; 4]>() && core::mem::align_of::<Event>() == core::mem::align_of::<u64>());
    // SAFETY: Event is #[repr(C)] with exactly four u64 fields: the layout of [u64; 4].
    unsafe { &*(e as *const Event as *const [u64; 4]) }
}

fn event_bytes(e: &Event) -> &[u8] {
    // SAFETY: Event is #[repr(C)] with four u64 fields: its bytes are initialised.
    unsafe { core::slice::from_raw_parts(e as *const Event as *const u8, size_of::<Event>()) }
}

/// Appends `event` through the loaded table if the ring has room. Only with nothing held, and
/// only from a thread of the program (running on its own table).
#[inline(always)]
pub fn append_fast(cfg: &Config, st: &mut State, event: &Event) -> Result<(), ()> {
    // SAFETY: the caller runs a thread of the program on its own table.
    let user = unsafe { arch::usercopy::Access::open() };
    // SAFETY (the three accesses): `kn_register` checked the whole ring — 8-byte aligned, every
    // slot inside a region of the registering view, so in the user half — and the
    // configuration never changes after; head, tail and slots are aligned words inside it.
    // `head` is read only when the last one read leaves no room: the library only moves it
    // forward, so an old value is a safe bound (it can only under-state the room).
    if st.tail.wrapping_sub(st.head_seen) >= cfg.capacity {
        let head = unsafe { user.get_u64_prechecked(cfg.ring + HEAD) }.map_err(|_| ())?;
        if st.tail.wrapping_sub(head) >= cfg.capacity {
            return Err(());
        }
        st.head_seen = head;
        // The library read the slots below `head` before it advanced `head`: reuse them only
        // after that read (weakly ordered CPUs). A slot below an older `head` was ordered so
        // when that one was read.
        fence(Ordering::Acquire);
    }
    // SAFETY: as above (a slot is four aligned words: the ring is 8-byte aligned, and so are
    // its slots' offsets).
    unsafe { user.put_4u64_prechecked(slot_addr(cfg, st.tail), event_words(event)) }.map_err(|_| ())?;
    // The slot, and the ThMB written before the event was posted, must be visible before the
    // new `tail` is: the library reads them once it sees it.
    fence(Ordering::Release);
    // SAFETY: as above.
    unsafe { user.put_u64_prechecked(cfg.ring + TAIL, st.tail + 1) }.map_err(|_| ())?;
    st.tail += 1;
    Ok(())
}

/// Moves held events into the ring while there is room — through the loaded table when `own`
/// (the caller runs a thread of the program), else, or if that faults, through the checked
/// path; returns whether any moved. Rewrites the ring's `held_back` count.
pub fn flush_held(cfg: &Config, st: &mut State, own: bool) -> bool {
    if own {
        // SAFETY: `own`: the program's table is loaded.
        let user = unsafe { arch::usercopy::Access::open() };
        if let Ok(moved) = flush_with(cfg, st, |addr| user.get_u64(addr).map_err(|_| ()), |addr, bytes| user.copy_to(addr, bytes).map_err(|_| ())) {
            return moved;
        }
    }
    let read = |addr| {
        let mut raw = [0u8; 8];
        space::read_as(cfg.ring_view, addr, &mut raw).map(|_| u64::from_le_bytes(raw)).map_err(|_| ())
    };
    flush_with(cfg, st, read, |addr, bytes| space::write_as(cfg.ring_view, addr, bytes).map_err(|_| ())).unwrap_or(false)
}

/// The flush over one kind of access. `Err` if an access failed (the events not yet moved stay
/// held, in order).
fn flush_with(cfg: &Config, st: &mut State, read: impl Fn(u64) -> Result<u64, ()>, write: impl Fn(u64, &[u8]) -> Result<(), ()>) -> Result<bool, ()> {
    let head = read(cfg.ring + HEAD)?;
    fence(Ordering::Acquire);
    let mut moved = false;
    while let Some(e) = st.held.front().copied() {
        if st.tail.wrapping_sub(head) >= cfg.capacity {
            break;
        }
        write(slot_addr(cfg, st.tail), event_bytes(&e))?;
        fence(Ordering::Release);
        write(cfg.ring + TAIL, &(st.tail + 1).to_le_bytes())?;
        st.tail += 1;
        st.held.pop_front();
        moved = true;
    }
    write(cfg.ring + HELD_BACK, &(st.held.len() as u64).to_le_bytes())?;
    Ok(moved)
}

/// Whether the ring holds events the library has not read (checked read of `head`).
pub fn unread(cfg: &Config, st: &State) -> bool {
    let mut raw = [0u8; 8];
    space::read_as(cfg.ring_view, cfg.ring + HEAD, &mut raw).is_ok_and(|_| u64::from_le_bytes(raw) != st.tail)
}
