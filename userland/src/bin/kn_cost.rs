//! Costs of Kernel Notification in instructions (run under `cargo xtask bench`, TCG
//! `-icount shift=0`, where the cycle counter counts instructions): a blocking syscall turned into a
//! `BLOCKED` upcall (MULiTh's "notification"), and a timer preemption turned into a `PREEMPTED`
//! upcall. Measured from user mode on both sides, so every kernel instruction between is in.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU64, Ordering};
use libuthread::{println, sys};
use tsumugi_abi::kn::EventKind;
use tsumugi_userland::kn::{self, Ring, Stack, Thmb};

static mut RING: Ring = Ring { header: tsumugi_abi::kn::RingHeader { head: 0, tail: 0, capacity: 0, held_back: 0 }, slots: [tsumugi_abi::kn::Event { kind: 0, thread: 0, arg0: 0, arg1: 0 }; kn::SLOTS] };
static mut STACK: Stack = Stack([0; 64 * 1024]);
static mut THMB: Thmb = Thmb { header: tsumugi_abi::kn::ThmbHeader::EMPTY, rest: [0; 32] };

const BLOCKS: u64 = 200;
const PREEMPTIONS: u64 = 8;

static T0: AtomicU64 = AtomicU64::new(0);
static N: AtomicU64 = AtomicU64::new(0);
static BEST_BLOCK: AtomicU64 = AtomicU64::new(u64::MAX);
static BEST_PREEMPT: AtomicU64 = AtomicU64::new(u64::MAX);
static PHASE: AtomicU64 = AtomicU64::new(0);

/// The CPU's cycle counter, read in user mode (a syscall to read it would be counted too):
/// x86_64's TSC, riscv64's `cycle` CSR, aarch64's `PMCCNTR_EL0` (the kernel lets user mode
/// read them). Under `-icount shift=0` they advance once per guest instruction.
#[cfg(target_arch = "x86_64")]
fn cycles() -> u64 {
    // SAFETY: rdtsc has no side effects.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(target_arch = "riscv64")]
fn cycles() -> u64 {
    let c: u64;
    // SAFETY: reads a counter CSR the kernel opens to user mode (`scounteren.CY`); no side
    // effects.
    unsafe { core::arch::asm!("rdcycle {}", out(reg) c, options(nomem, nostack, preserves_flags)) };
    c
}

#[cfg(target_arch = "aarch64")]
fn cycles() -> u64 {
    let c: u64;
    // SAFETY: reads the PMU cycle counter, which the kernel opens to user mode for reading
    // (`PMUSERENR_EL0.CR`; QEMU's `-cpu max` has PMUv3); no side effects.
    unsafe { core::arch::asm!("mrs {}, PMCCNTR_EL0", out(reg) c, options(nomem, nostack, preserves_flags)) };
    c
}
/// Ports without a user-mode cycle counter wired up here: the clock syscall (its own cost is
/// then part of every measurement).
#[cfg(not(any(target_arch = "x86_64", target_arch = "riscv64", target_arch = "aarch64")))]
fn cycles() -> u64 {
    sys::clock(libuthread::Clock::Cycles).unwrap_or(0) as u64
}

/// One blocking call with the LTN set: comes back as an upcall, never returns here.
fn block_once() {
    sys::ltn_write(core::ptr::addr_of_mut!(THMB) as usize);
    T0.store(cycles(), Ordering::SeqCst);
    let _ = sys::sleep_nanos(1);
}

/// Spins with the LTN set, stamping the time, until the timer preempts it.
fn spin_until_preempted() -> ! {
    sys::ltn_write(core::ptr::addr_of_mut!(THMB) as usize);
    loop {
        T0.store(cycles(), Ordering::SeqCst);
    }
}

/// Marks every posted event read, as a library does at each upcall: the kernel holds events back
/// while the ring is full, and the measurement is of the path with room in the ring.
fn drain_ring() {
    // SAFETY: the ring is this program's static; the kernel only writes `tail` and the slots,
    // the library (this handler, LTN = 0) only `head`.
    unsafe {
        let ring = core::ptr::addr_of_mut!(RING);
        let tail = core::ptr::read_volatile(core::ptr::addr_of!((*ring).header.tail));
        core::ptr::write_volatile(core::ptr::addr_of_mut!((*ring).header.head), tail);
    }
}

extern "C" fn handler(kind: u64, _: u64, _: u64, _: u64) -> ! {
    let t1 = cycles();
    let cost = t1.wrapping_sub(T0.load(Ordering::SeqCst));
    let n = N.fetch_add(1, Ordering::SeqCst) + 1;
    drain_ring();
    if PHASE.load(Ordering::SeqCst) == 0 {
        if kind == EventKind::Blocked as u64 {
            BEST_BLOCK.fetch_min(cost, Ordering::SeqCst);
        }
        if n < BLOCKS {
            block_once();
        }
        PHASE.store(1, Ordering::SeqCst);
        N.store(0, Ordering::SeqCst);
        spin_until_preempted();
    }
    if kind == EventKind::Preempted as u64 {
        BEST_PREEMPT.fetch_min(cost, Ordering::SeqCst);
    }
    if n < PREEMPTIONS {
        spin_until_preempted();
    }
    println!(
        "BENCH table=kn_cost row=blocking_syscall_to_upcall instructions={} paper_instructions=256",
        BEST_BLOCK.load(Ordering::SeqCst)
    );
    println!(
        "BENCH table=kn_cost row=preemption_to_upcall instructions={} paper_instructions=341",
        BEST_PREEMPT.load(Ordering::SeqCst)
    );
    sys::exit(0)
}

fn main() -> i32 {
    if kn::register(handler, core::ptr::addr_of_mut!(RING), core::ptr::addr_of_mut!(STACK)).is_err() {
        return 1;
    }
    block_once();
    println!("kn_cost: FAILED: the sleep returned");
    1
}

libuthread::entry!(main);
