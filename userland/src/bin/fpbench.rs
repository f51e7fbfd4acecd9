//! Cost of FP switching: N threads yield to each other; in one phase only one of them keeps FP
//! state live (a SIMD/FP counter across its yields: SSE, NEON or RISC-V D, checked at the end),
//! in the other all do. Run once with
//! `fpu=lazy` and once with `fpu=eager`: cycles per switch and the kernel's FP trap, save and
//! restore counts show what laziness saves. One CPU (`cpus=1`).
#![no_std]
#![no_main]

// This program uses each architecture's SIMD registers directly (a value must stay live in
// them across the yields); on other architectures it reports that it is not ported (and fails,
// so a suite that runs it cannot pass by accident).
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64"
))]
mod simd {
    use core::sync::atomic::{AtomicUsize, Ordering};
    use libuthread::{println, sys, Clock};
    use tsumugi_abi::stats::{scope, Counter};

    const THREADS: usize = 8;
    const ROUNDS: usize = 500;

    static GO: AtomicUsize = AtomicUsize::new(0);
    /// FP threads whose register did not hold what they put in it (lost or another thread's).
    static WRONG: AtomicUsize = AtomicUsize::new(0);

    /// Where FP thread `fp` (1-based) starts counting: far enough apart that a thread given
    /// another's registers ends with a different value (they run in lockstep, so equal
    /// starting values would hide it), small enough to stay exact in a double.
    fn base(fp: usize) -> u64 {
        (fp as u64) << 20
    }

    /// Yields `ROUNDS` times; with `fp` (its 1-based number among the FP threads, 0 for none),
    /// keeps a SIMD/FP counter live across every yield and checks it at the end.
    fn worker(fp: usize) -> usize {
        while GO.load(Ordering::Acquire) == 0 {
            sys::yield_now();
        }
        if fp != 0 {
            if live_fp_yields(base(fp)) != base(fp) + ROUNDS as u64 {
                WRONG.fetch_add(1, Ordering::Relaxed);
            }
        } else {
            plain_yields();
        }
        0
    }

    /// Yields `ROUNDS` times without touching FP (compiled code on this soft-float target
    /// never does).
    #[cfg(target_arch = "x86_64")]
    fn plain_yields() {
        let yield_nr = tsumugi_abi::syscall::Syscall::Yield as usize;
        for _ in 0..ROUNDS {
            let _ = sys::call(yield_nr, [0; 6]);
        }
    }

    /// Yields `ROUNDS` times without touching FP. Written out: compiled code on this target
    /// uses SIMD registers for ordinary work (zeroing the syscall's argument array takes a
    /// `movi`), which would make every thread an FP user.
    #[cfg(target_arch = "aarch64")]
    fn plain_yields() {
        // SAFETY: only the declared registers are touched; the syscall returns its result in x0.
        unsafe {
            core::arch::asm!(
                "2:",
                "mov x8, #{y}",
                "svc #0",
                "subs {n}, {n}, #1",
                "b.ne 2b",
                y = const tsumugi_abi::syscall::Syscall::Yield as usize,
                n = inout(reg) ROUNDS => _,
                out("x0") _, out("x8") _,
                options(nostack),
            );
        }
    }

    /// Yields `ROUNDS` times without touching FP. Written out as on aarch64, so the loop is the
    /// same instructions as [`live_fp_yields`] minus the FP one, whatever the compiler does with
    /// the argument array.
    #[cfg(target_arch = "riscv64")]
    fn plain_yields() {
        // SAFETY: only the declared registers are touched; the syscall returns its result in a0.
        unsafe {
            core::arch::asm!(
                "2:",
                "li a7, {y}",
                "ecall",
                "addi {n}, {n}, -1",
                "bnez {n}, 2b",
                y = const tsumugi_abi::syscall::Syscall::Yield as usize,
                n = inout(reg) ROUNDS => _,
                out("a0") _, out("a7") _,
                options(nostack),
            );
        }
    }

    /// Yields `ROUNDS` times with an SSE counter live in xmm0 (from `start`, plus xmm1 = 1 at
    /// every round); returns its final value.
    #[cfg(target_arch = "x86_64")]
    fn live_fp_yields(start: u64) -> u64 {
        let end: u64;
        // SAFETY: SSE2 exists on every x86_64 CPU; only xmm0 and xmm1 (unused by compiled code
        // on this soft-float target) and the declared registers are touched.
        unsafe {
            core::arch::asm!(
                "movq xmm0, {v}",
                "mov eax, 1",
                "movq xmm1, rax",
                "2:",
                "paddq xmm0, xmm1",
                "mov eax, {y}",
                "syscall",
                "dec {n}",
                "jnz 2b",
                "movq {v}, xmm0",
                y = const tsumugi_abi::syscall::Syscall::Yield as usize,
                n = inout(reg) ROUNDS => _,
                v = inout(reg) start => end,
                out("rax") _, out("rcx") _, out("r11") _,
                options(nostack),
            );
        }
        end
    }

    /// Yields `ROUNDS` times with a NEON counter live in v0 (from `start`, plus v1 = 1 at
    /// every round); returns its final value.
    #[cfg(target_arch = "aarch64")]
    fn live_fp_yields(start: u64) -> u64 {
        let end: u64;
        // SAFETY: NEON exists on every aarch64 CPU and the kernel gives it to user mode; only
        // v0, v1 and the declared registers are touched; the syscall returns its result in x0.
        unsafe {
            core::arch::asm!(
                "fmov d0, {v}",
                "mov x8, #1",
                "dup v1.2d, x8",
                "2:",
                "add v0.2d, v0.2d, v1.2d",
                "mov x8, #{y}",
                "svc #0",
                "subs {n}, {n}, #1",
                "b.ne 2b",
                "fmov {v}, d0",
                y = const tsumugi_abi::syscall::Syscall::Yield as usize,
                n = inout(reg) ROUNDS => _,
                v = inout(reg) start => end,
                out("x0") _, out("x8") _, out("v0") _, out("v1") _,
                options(nostack),
            );
        }
        end
    }

    /// Yields `ROUNDS` times with a double-precision counter live in f0 (from `start`, plus
    /// f1 = 1.0 at every round; exact: far below 2^53); returns its final value. `sstatus.FS`
    /// goes Dirty at every `fadd.d`, so each slice of this thread changes its FP state.
    #[cfg(target_arch = "riscv64")]
    fn live_fp_yields(start: u64) -> u64 {
        let end: u64;
        // SAFETY: the D extension is part of riscv64gc and the kernel gives FP to user mode (at
        // the FP-disabled trap); only f0, f1 and the declared registers are touched; the
        // syscall returns its result in a0.
        unsafe {
            core::arch::asm!(
                "fcvt.d.lu f0, {v}",
                "li a7, 1",
                "fcvt.d.l f1, a7",
                "2:",
                "fadd.d f0, f0, f1",
                "li a7, {y}",
                "ecall",
                "addi {n}, {n}, -1",
                "bnez {n}, 2b",
                "fcvt.lu.d {v}, f0, rtz",
                y = const tsumugi_abi::syscall::Syscall::Yield as usize,
                n = inout(reg) ROUNDS => _,
                v = inout(reg) start => end,
                out("a0") _, out("a7") _, out("f0") _, out("f1") _,
                options(nostack),
            );
        }
        end
    }

    fn phase(fp_threads: usize) -> Option<(u64, u64, u64, u64, u64)> {
        GO.store(0, Ordering::Release);
        WRONG.store(0, Ordering::Relaxed);
        let mut tids = [0usize; THREADS];
        for (i, t) in tids.iter_mut().enumerate() {
            let fp = if i < fp_threads { i + 1 } else { 0 };
            *t = sys::spawn(worker, fp, 16 * 1024, true).ok()?;
        }
        sys::yield_now();
        let (before, _) = sys::counters(scope::ALL_CPUS).ok()?;
        let c0 = sys::clock(Clock::Cycles).ok()? as u64;
        GO.store(1, Ordering::Release);
        for t in tids {
            sys::thread_join(t).ok()?;
        }
        let c1 = sys::clock(Clock::Cycles).ok()? as u64;
        let (after, _) = sys::counters(scope::ALL_CPUS).ok()?;
        let wrong = WRONG.load(Ordering::Relaxed);
        if wrong != 0 {
            println!("fpbench: {wrong} of {fp_threads} FP threads ended with a wrong FP/SIMD register");
            return None;
        }
        let d = |c: Counter| after[c as usize] - before[c as usize];
        Some((c1 - c0, d(Counter::ContextSwitches), d(Counter::FpTraps), d(Counter::FpSaves), d(Counter::FpRestores)))
    }

    pub fn main() -> i32 {
        for (row, fp) in [("1_of_8_fp", 1), ("8_of_8_fp", THREADS)] {
            let Some((cycles, switches, traps, saves, restores)) = phase(fp) else {
                println!("fpbench: FAILED");
                return 1;
            };
            println!(
                "BENCH table=fp_switch row={row} cycles_per_switch={} switches={switches} fp_traps={traps} fp_saves={saves} fp_restores={restores} bytes_saved_per_switch={}",
                cycles / switches.max(1),
                saves * FP_AREA_BYTES / switches.max(1)
            );
        }
        0
    }

    /// Bytes one FP save writes (the XSAVE area the kernel reports at boot for x87+SSE+AVX under
    /// QEMU `-cpu max`).
    #[cfg(target_arch = "x86_64")]
    const FP_AREA_BYTES: u64 = 832;
    /// Bytes one FP save writes (q0–q31, FPCR, FPSR).
    #[cfg(target_arch = "aarch64")]
    const FP_AREA_BYTES: u64 = 528;
    /// Bytes one FP save writes (f0–f31, fcsr).
    #[cfg(target_arch = "riscv64")]
    const FP_AREA_BYTES: u64 = 264;
}

#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64"
))]
use simd::main;

#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64"
)))]
fn main() -> i32 {
    libuthread::println!("fpbench: not ported to this architecture");
    1
}

libuthread::entry!(main);
