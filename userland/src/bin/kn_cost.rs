//! Costs of Kernel Notification in instructions (run under `cargo xtask bench`, TCG
//! `-icount shift=0`, where the cycle counter counts instructions): a blocking syscall turned into a
//! `BLOCKED` upcall (MULiTh's "notification"), and a timer preemption turned into a `PREEMPTED`
//! upcall. Measured from user mode on both sides, so every kernel instruction between is in.
//!
//! Phases, one row each (best of their runs): `sleep` with a static ThMB (the kernel needs no
//! activation for it), the same with a ThMB in a region created at run time (as libuthread's heap
//! ThMBs are), a blocking call that needs a kernel side of its own (`console_read`: today a new
//! activation), preemption, and then `sleep` and preemption of a thread that uses FP (its FP state
//! goes into its ThMB's FP area too). The FP phases come last: once the vCPU has used FP, every
//! later stop saves it.
//!
//! Booted with a baseline (`kn=sa`, `preempt=signal`), it measures that instead, on the same
//! kernel paths otherwise: `notification_sa_copy` (a `sleep` to the point where the library has
//! fetched the context the kernel kept in its own memory into the ThMB: upcall plus
//! `kn_fetch`), `preemption_signal_style` (a preemption to the handler's entry on the thread's
//! stack, each run resumed with `kn_sigreturn`).
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU64, Ordering};
use libuthread::{println, sys};
use tsumugi_abi::syscall::Errno;
use tsumugi_abi::kn::EventKind;
use tsumugi_userland::kn::{self, Ring, Stack, Thmb};

static mut RING: Ring = Ring { header: tsumugi_abi::kn::RingHeader { head: 0, tail: 0, capacity: 0, held_back: 0 }, slots: [tsumugi_abi::kn::Event { kind: 0, thread: 0, arg0: 0, arg1: 0 }; kn::SLOTS] };
static mut STACK: Stack = Stack([0; 64 * 1024]);
static mut THMB: Thmb = Thmb { header: tsumugi_abi::kn::ThmbHeader::EMPTY, rest: [0; 32] };
static mut FP_THMB: Thmb = Thmb { header: tsumugi_abi::kn::ThmbHeader::EMPTY, rest: [0; 32] };

/// The FP area of `FP_THMB` (the ABI's size and alignment).
#[repr(C, align(64))]
struct FpArea([u8; tsumugi_abi::kn::FP_AREA_SIZE]);
static mut FP_AREA: FpArea = FpArea([0; tsumugi_abi::kn::FP_AREA_SIZE]);

/// What a phase does to be stopped.
#[derive(Clone, Copy)]
enum Stop {
    /// `sleep(1 ns)` with the LTN set.
    Sleep,
    /// `console_read` with the LTN set (blocks until input; its kernel side waits on).
    ConsoleRead,
    /// Spin with the LTN set until the timer preempts.
    Spin,
}

/// Which ThMB a phase runs with.
#[derive(Clone, Copy)]
enum Block {
    Static,
    Heap,
    Fp,
}

struct Phase {
    row: &'static str,
    stop: Stop,
    thmb: Block,
    runs: u64,
    paper: u64,
}

/// Phases of the default (zero-copy, upcall) kernel.
const ZERO_COPY: [Phase; 6] = [
    Phase { row: "blocking_syscall_to_upcall", stop: Stop::Sleep, thmb: Block::Static, runs: 200, paper: 256 },
    Phase { row: "blocking_heap_thmb_to_upcall", stop: Stop::Sleep, thmb: Block::Heap, runs: 50, paper: 256 },
    Phase { row: "blocking_general_to_upcall", stop: Stop::ConsoleRead, thmb: Block::Static, runs: 4, paper: 256 },
    Phase { row: "preemption_to_upcall", stop: Stop::Spin, thmb: Block::Static, runs: 8, paper: 341 },
    Phase { row: "blocking_fp_thread_to_upcall", stop: Stop::Sleep, thmb: Block::Fp, runs: 50, paper: 256 },
    Phase { row: "preemption_fp_thread_to_upcall", stop: Stop::Spin, thmb: Block::Fp, runs: 8, paper: 341 },
];

/// The `kn=sa` baseline: the context is copied out of kernel memory with `kn_fetch`.
const SA_COPY: [Phase; 1] = [Phase { row: "notification_sa_copy", stop: Stop::Sleep, thmb: Block::Static, runs: 200, paper: 418 }];

/// The `preempt=signal` baseline: a signal frame on the thread's stack, `kn_sigreturn`.
const SIGNAL: [Phase; 1] = [Phase { row: "preemption_signal_style", stop: Stop::Spin, thmb: Block::Static, runs: 8, paper: 718 }];

/// Which kernel configuration runs (detected at start): 0 default, 1 `kn=sa`, 2 `preempt=signal`.
static MODE: AtomicU64 = AtomicU64::new(0);

fn phases() -> &'static [Phase] {
    match MODE.load(Ordering::SeqCst) {
        1 => &SA_COPY,
        2 => &SIGNAL,
        _ => &ZERO_COPY,
    }
}

static T0: AtomicU64 = AtomicU64::new(0);
static N: AtomicU64 = AtomicU64::new(0);
static PHASE: AtomicU64 = AtomicU64::new(0);
static BEST: [AtomicU64; ZERO_COPY.len()] = [const { AtomicU64::new(u64::MAX) }; ZERO_COPY.len()];
/// The buffer of the `console_read` phase.
static mut READ_BUF: [u8; 1] = [0];
/// The ThMB in a region created at run time (phase `Block::Heap`).
static HEAP_THMB: AtomicU64 = AtomicU64::new(0);

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

fn thmb_of(b: Block) -> usize {
    match b {
        Block::Static => core::ptr::addr_of_mut!(THMB) as usize,
        Block::Heap => HEAP_THMB.load(Ordering::SeqCst) as usize,
        Block::Fp => core::ptr::addr_of_mut!(FP_THMB) as usize,
    }
}

/// Touches the FP/SIMD state (reads its control register): the first time, the kernel's
/// FP-disabled trap makes this vCPU an FP user. Assembly, because user programs may be built
/// soft-float (x86_64) and compiled code would then never touch FP.
fn use_fp() {
    #[cfg(target_arch = "x86_64")]
    {
        let mut v = 0u32;
        // SAFETY: stores MXCSR into a local; no other effect.
        unsafe { core::arch::asm!("stmxcsr [{}]", in(reg) &mut v, options(nostack)) };
        core::hint::black_box(v);
    }
    #[cfg(target_arch = "riscv64")]
    {
        let v: u64;
        // SAFETY: reads fcsr; no other effect.
        unsafe { core::arch::asm!("frcsr {}", out(reg) v, options(nomem, nostack)) };
        core::hint::black_box(v);
    }
    #[cfg(target_arch = "aarch64")]
    {
        let v: u64;
        // SAFETY: reads FPCR; no other effect.
        unsafe { core::arch::asm!("mrs {}, fpcr", out(reg) v, options(nomem, nostack, preserves_flags)) };
        core::hint::black_box(v);
    }
}

/// Starts one run of `phase`: never returns (the kernel answers with an upcall).
fn start(phase: &Phase) -> ! {
    if matches!(phase.thmb, Block::Fp) {
        use_fp();
    }
    sys::ltn_write(thmb_of(phase.thmb));
    match phase.stop {
        Stop::Sleep => {
            T0.store(cycles(), Ordering::SeqCst);
            let _ = sys::sleep_nanos(1);
        }
        Stop::ConsoleRead => {
            // SAFETY: a static buffer only the kernel side of this call writes; touched first
            // so that the first run does not also pay for backing its page.
            let buf = unsafe { &mut *core::ptr::addr_of_mut!(READ_BUF) };
            // SAFETY: a plain store into the buffer.
            unsafe { core::ptr::write_volatile(&mut buf[0], 0) };
            T0.store(cycles(), Ordering::SeqCst);
            let _ = sys::console_read(buf);
        }
        Stop::Spin => loop {
            T0.store(cycles(), Ordering::SeqCst);
        },
    }
    println!("kn_cost: FAILED: the {} call returned instead of an upcall", phase.row);
    sys::exit(1)
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

extern "C" fn handler(kind: u64, thread: u64, vcpu: u64, _: u64) -> ! {
    let mut t1 = cycles();
    let mode = MODE.load(Ordering::SeqCst);
    if mode == 1 {
        // The SA baseline: the library has the context only once it fetched it.
        if sys::kn_fetch(vcpu as usize, thread as usize).is_err() {
            println!("kn_cost: FAILED: kn_fetch of vCPU {vcpu} into {thread:#x}");
            sys::exit(1);
        }
        t1 = cycles();
        // SAFETY: the kernel wrote the header in kn_fetch; read it once.
        let saved = unsafe { core::ptr::read_volatile(core::ptr::addr_of!(THMB.header.mask)) };
        if saved & tsumugi_abi::kn::mask::FULL == 0 {
            println!("kn_cost: FAILED: kn_fetch left no full frame (mask {saved:#x})");
            sys::exit(1);
        }
        // SAFETY: as above; marks it consumed for the next run's check.
        unsafe { core::ptr::write_volatile(core::ptr::addr_of_mut!(THMB.header.mask), 0) };
    }
    let cost = t1.wrapping_sub(T0.load(Ordering::SeqCst));
    drain_ring();
    let phases = phases();
    let p = PHASE.load(Ordering::SeqCst) as usize;
    let phase = &phases[p];
    let expected = match phase.stop {
        Stop::Sleep | Stop::ConsoleRead => EventKind::Blocked,
        Stop::Spin => EventKind::Preempted,
    };
    if kind == expected as u64 {
        BEST[p].fetch_min(cost, Ordering::SeqCst);
    }
    if matches!(phase.thmb, Block::Fp) {
        // SAFETY: the kernel wrote the header before the upcall; read it once.
        let saved = unsafe { core::ptr::read_volatile(core::ptr::addr_of!(FP_THMB.header.mask)) };
        if saved & tsumugi_abi::kn::mask::FP == 0 {
            println!("kn_cost: FAILED: {}: the FP state was not saved with the frame (mask {saved:#x})", phase.row);
            sys::exit(1);
        }
    }
    let n = N.fetch_add(1, Ordering::SeqCst) + 1;
    if n < phase.runs {
        if mode == 2 {
            // The signal baseline resumes the interrupted spin from its signal frame.
            let _ = sys::kn_sigreturn(thread as usize);
            println!("kn_cost: FAILED: kn_sigreturn({thread:#x}) returned");
            sys::exit(1);
        }
        start(phase);
    }
    N.store(0, Ordering::SeqCst);
    if p + 1 < phases.len() {
        PHASE.store(p as u64 + 1, Ordering::SeqCst);
        start(&phases[p + 1]);
    }
    for (phase, best) in phases.iter().zip(BEST.iter()) {
        println!("BENCH table=kn_cost row={} instructions={} paper_instructions={}", phase.row, best.load(Ordering::SeqCst), phase.paper);
    }
    sys::exit(0)
}

fn main() -> i32 {
    let Ok(region) = sys::region_create(1 << 20, tsumugi_abi::syscall::rights::READ | tsumugi_abi::syscall::rights::WRITE, 0) else {
        println!("kn_cost: FAILED: region_create");
        return 1;
    };
    HEAP_THMB.store(region as u64 + (1 << 19), Ordering::SeqCst);
    // SAFETY: set before any stop can save into it; only the kernel writes the rest.
    unsafe { FP_THMB.header.fp_area = core::ptr::addr_of_mut!(FP_AREA) as u64 };
    if kn::register(handler, core::ptr::addr_of_mut!(RING), core::ptr::addr_of_mut!(STACK)).is_err() {
        return 1;
    }
    // Which kernel: `kn_fetch` with nothing saved says "try again" only under `kn=sa`;
    // `kn_sigreturn` of address 0 faults only under `preempt=signal` (else: "invalid").
    if sys::kn_fetch(0, core::ptr::addr_of_mut!(THMB) as usize) == Err(Some(Errno::Again)) {
        MODE.store(1, Ordering::SeqCst);
    } else if sys::kn_sigreturn(0) == Err(Some(Errno::Fault)) {
        MODE.store(2, Ordering::SeqCst);
    }
    start(&phases()[0])
}

libuthread::entry!(main);
