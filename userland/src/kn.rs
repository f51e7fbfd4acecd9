//! Raw Kernel Notification plumbing for the kernel-side KN tests (no thread library): a
//! registration with one vCPU, a ring, and an upcall stack, all in statics.

use core::sync::atomic::{AtomicU64, Ordering};
use libuthread::sys;
use tsumugi_abi::kn::{Event, Registration, RingHeader, THMB_ALIGN};

/// Ring slots: room for every event the tests post between two upcalls (`kn_cost` posts 250
/// `UNBLOCKED`s from one tick after its sleep phases; with 64 slots most were held back, and
/// the next phase's first stops paid for flushing them, so only one `console_read` run in
/// four measured the path itself).
pub const SLOTS: usize = 512;

/// The ring as the kernel sees it: header, then slots.
#[repr(C, align(64))]
pub struct Ring {
    /// Header.
    pub header: RingHeader,
    /// Slots.
    pub slots: [Event; SLOTS],
}

/// A ThMB: the kernel-known header plus room.
#[repr(C, align(64))]
pub struct Thmb {
    /// The kernel writes here.
    pub header: tsumugi_abi::kn::ThmbHeader,
    /// Library space.
    pub rest: [u64; 32],
}

const _: () = assert!(core::mem::align_of::<Thmb>() as u64 == THMB_ALIGN);

/// A 64 KiB upcall stack.
#[repr(C, align(16))]
pub struct Stack(pub [u8; 64 * 1024]);

/// Registers `handler` with one vCPU, the given ring and upcall stack.
pub fn register(handler: extern "C" fn(u64, u64, u64, u64) -> !, ring: *mut Ring, stack: *mut Stack) -> sys::SysResult {
    // SAFETY: the caller passes statics that outlive the program; the header is initialised
    // before the kernel reads it.
    unsafe {
        (*ring).header.capacity = SLOTS as u64;
        (*ring).header.head = 0;
        (*ring).header.tail = 0;
    }
    static STACK_TOPS: [AtomicU64; 1] = [AtomicU64::new(0)];
    STACK_TOPS[0].store(stack as u64 + core::mem::size_of::<Stack>() as u64, Ordering::Relaxed);
    let reg = Registration {
        handler: handler as usize as u64,
        ring: ring as u64,
        upcall_stacks: STACK_TOPS.as_ptr() as u64,
        vcpus: 1,
        fp_live: 0,
    };
    sys::kn_register(&reg)
}

/// Registers `handler` with one vCPU per entry of `tops`, the ring at `ring` (its header set up
/// by the caller) and upcall stacks of `stack` bytes each, side by side from `stacks`.
pub fn register_vcpus(handler: extern "C" fn(u64, u64, u64, u64) -> !, ring: u64, stacks: u64, stack: usize, tops: &'static [AtomicU64]) -> sys::SysResult {
    for (v, top) in tops.iter().enumerate() {
        top.store(stacks + ((v + 1) * stack) as u64, Ordering::Relaxed);
    }
    let reg = Registration { handler: handler as usize as u64, ring, upcall_stacks: tops.as_ptr() as u64, vcpus: tops.len() as u64, fp_live: 0 };
    sys::kn_register(&reg)
}

/// Spins until at least `ticks` timer ticks have passed (long enough to be preempted).
pub fn spin_ticks(ticks: usize) {
    let start = sys::clock(libuthread::Clock::Ticks).unwrap_or(0);
    while sys::clock(libuthread::Clock::Ticks).unwrap_or(0) < start + ticks {
        core::hint::spin_loop();
    }
}

static mut FORGE_RING: Ring = Ring { header: RingHeader { head: 0, tail: 0, capacity: 0, held_back: 0 }, slots: [Event { kind: 0, thread: 0, arg0: 0, arg1: 0 }; SLOTS] };
static mut FORGE_STACK: Stack = Stack([0; 64 * 1024]);

extern "C" fn forge_handler(kind: u64, _: u64, _: u64, _: u64) -> ! {
    libuthread::println!("forge: FAILED: upcall {kind} with a forged LTN");
    sys::exit(1)
}

/// LTN forgery: registers for Kernel Notification, points the LTN register at `ltn` (`what`
/// names it in the output) and spins until preempted. The kernel must refuse to write a ThMB
/// there and end the program; returning at all is a failure (status 1).
pub fn forge_ltn(program: &str, ltn: usize, what: &str) -> i32 {
    if let Err(e) = register(forge_handler, core::ptr::addr_of_mut!(FORGE_RING), core::ptr::addr_of_mut!(FORGE_STACK)) {
        libuthread::println!("{program}: FAILED: register: {e:?}");
        return 1;
    }
    libuthread::println!("{program}: LTN := {ltn:#x} ({what})");
    sys::ltn_write(ltn);
    spin_ticks(20);
    sys::ltn_write(0);
    libuthread::println!("{program}: FAILED: survived a forged LTN");
    1
}

/// [`forge_ltn`] on the blocking path: with the LTN at `ltn` the program calls `sleep`, which
/// the kernel turns into a save of the thread into that ThMB (then `BLOCKED` and an upcall). The
/// kernel must refuse to write there and end the program; returning at all is a failure.
pub fn forge_ltn_sleep(program: &str, ltn: usize, what: &str) -> i32 {
    if let Err(e) = register(forge_handler, core::ptr::addr_of_mut!(FORGE_RING), core::ptr::addr_of_mut!(FORGE_STACK)) {
        libuthread::println!("{program}: FAILED: register: {e:?}");
        return 1;
    }
    libuthread::println!("{program}: LTN := {ltn:#x} ({what}), then sleep");
    sys::ltn_write(ltn);
    let _ = sys::sleep_nanos(1_000);
    sys::ltn_write(0);
    libuthread::println!("{program}: FAILED: survived a forged LTN in sleep");
    1
}
