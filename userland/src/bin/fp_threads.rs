//! FP/SIMD correctness under lazy switching: threads on several CPUs each run a SIMD
//! computation (SSE2 on x86_64, NEON on aarch64, two scalar D chains on riscv64) with yields and
//! preemptions in between, and must produce exactly (bit for bit) the results of the same
//! computation run alone. Half the threads never touch FP. On riscv64, threads that only read
//! their FP registers after loading them also check that the values survive, and the kernel
//! must have skipped saving registers that were unchanged (`sstatus.FS` Clean).
#![no_std]
#![no_main]

// This program uses each architecture's FP instructions and registers directly (the values
// must stay live in the registers across the yields); on other architectures it reports that
// it is not ported (and fails, so a suite that runs it cannot pass by accident).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "riscv64"))]
mod simd {
    use core::sync::atomic::{AtomicU64, Ordering};
    use libuthread::{println, sys};
    use tsumugi_abi::stats::{scope, Counter};

    const FP_THREADS: usize = 8;
    const PLAIN_THREADS: usize = 8;
    const STEPS: usize = 200_000;
    const YIELD_EVERY: usize = 5_000;

    static RESULTS: [AtomicU64; FP_THREADS] = [const { AtomicU64::new(0) }; FP_THREADS];

    /// Multiplier and addend of the chain (two f64 lanes each).
    static A: [u64; 2] = [0x3fef_ffff_ffff_f000, 0x3ff0_0000_0000_1000];
    static B: [u64; 2] = [0x3f60_0000_0000_0000, 0x3f50_0000_0000_0000];

    /// A chain of SSE2 multiply-adds and square roots seeded by `seed`, entirely in xmm0–xmm4
    /// (this target compiles Rust floating point to soft-float calls, so the SIMD work is written
    /// out); with `yields`, the thread yields every `YIELD_EVERY` steps *with the values live in
    /// the registers*. Returns the bits of the result.
    #[cfg(target_arch = "x86_64")]
    fn compute(seed: u64, yields: bool) -> u64 {
        let (lo, hi): (u64, u64);
        // SAFETY: SSE2 exists on every x86_64 CPU and the kernel enables it for user mode; the asm
        // touches only the declared registers, the xmm registers (which compiled code on this
        // soft-float target never uses) and the two constant arrays; the syscall clobbers rax,
        // rcx and r11 as declared.
        unsafe {
            core::arch::asm!(
                "cvtsi2sd xmm0, {seed}",
                "unpcklpd xmm0, xmm0",
                "movupd xmm1, [{a}]",
                "movupd xmm2, [{b}]",
                "sqrtpd xmm3, xmm0",
                "mov {cnt}, {every}",
                "2:",
                "mulpd xmm0, xmm1",
                "addpd xmm0, xmm2",
                "sqrtpd xmm4, xmm0",
                "addpd xmm3, xmm4",
                "dec {cnt}",
                "jnz 3f",
                "mov {cnt}, {every}",
                "test {y}, {y}",
                "jz 3f",
                "mov eax, {yield_nr}",
                "syscall",
                "3:",
                "dec {n}",
                "jnz 2b",
                "addpd xmm0, xmm3",
                "movq {lo}, xmm0",
                "unpckhpd xmm0, xmm0",
                "movq {hi}, xmm0",
                seed = in(reg) (seed % 1000 + 1),
                a = in(reg) A.as_ptr(),
                b = in(reg) B.as_ptr(),
                y = in(reg) u64::from(yields),
                every = const YIELD_EVERY,
                yield_nr = const tsumugi_abi::syscall::Syscall::Yield as usize,
                cnt = out(reg) _,
                n = inout(reg) STEPS => _,
                lo = out(reg) lo,
                hi = out(reg) hi,
                out("rax") _,
                out("rcx") _,
                out("r11") _,
                options(nostack),
            );
        }
        lo ^ hi.rotate_left(1)
    }

    /// The same chain in NEON, entirely in v0–v4 (two f64 lanes each): `fmul`/`fadd` for the
    /// multiply-add, `fsqrt`, and with `yields` a yield syscall every `YIELD_EVERY` steps *with
    /// the values live in the registers* (the kernel switches them lazily, never saving them
    /// in its frames). FPCR stays at its reset value (round to nearest), as for the run alone.
    #[cfg(target_arch = "aarch64")]
    fn compute(seed: u64, yields: bool) -> u64 {
        let (lo, hi): (u64, u64);
        // SAFETY: NEON exists on every aarch64 CPU and the kernel gives it to user mode; the asm
        // touches only the declared registers and reads the two constant arrays; the syscall
        // returns its result in x0 and changes nothing else.
        unsafe {
            core::arch::asm!(
                "scvtf d0, {seed}",
                "dup v0.2d, v0.d[0]",
                "ldr q1, [{a}]",
                "ldr q2, [{b}]",
                "fsqrt v3.2d, v0.2d",
                "mov {cnt}, #{every}",
                "2:",
                "fmul v0.2d, v0.2d, v1.2d",
                "fadd v0.2d, v0.2d, v2.2d",
                "fsqrt v4.2d, v0.2d",
                "fadd v3.2d, v3.2d, v4.2d",
                "subs {cnt}, {cnt}, #1",
                "b.ne 3f",
                "mov {cnt}, #{every}",
                "cbz {y}, 3f",
                "mov x8, #{yield_nr}",
                "svc #0",
                "3:",
                "subs {n}, {n}, #1",
                "b.ne 2b",
                "fadd v0.2d, v0.2d, v3.2d",
                "mov {lo}, v0.d[0]",
                "mov {hi}, v0.d[1]",
                seed = in(reg) (seed % 1000 + 1),
                a = in(reg) A.as_ptr(),
                b = in(reg) B.as_ptr(),
                y = in(reg) u64::from(yields),
                every = const YIELD_EVERY,
                yield_nr = const tsumugi_abi::syscall::Syscall::Yield as usize,
                cnt = out(reg) _,
                n = inout(reg) STEPS => _,
                lo = out(reg) lo,
                hi = out(reg) hi,
                out("x0") _,
                out("x8") _,
                out("v0") _,
                out("v1") _,
                out("v2") _,
                out("v3") _,
                out("v4") _,
                options(nostack),
            );
        }
        lo ^ hi.rotate_left(1)
    }

    /// The same chain on riscv64 as two scalar D chains (the "lanes"), entirely in ft0–ft9:
    /// `fmul.d`/`fadd.d` for the multiply-add, `fsqrt.d`, and with `yields` a yield syscall every
    /// `YIELD_EVERY` steps *with the values live in the registers*. The rounding mode is the
    /// dynamic one, round to nearest (`fcsr` is 0 for a new thread), as for the run alone.
    #[cfg(target_arch = "riscv64")]
    fn compute(seed: u64, yields: bool) -> u64 {
        let (lo, hi): (u64, u64);
        // SAFETY: the D extension is part of this target and the kernel gives it to user mode;
        // the asm touches only the declared registers and reads the two constant arrays; the
        // syscall returns its result in a0 and changes nothing else.
        unsafe {
            core::arch::asm!(
                "fcvt.d.l ft0, {seed}",
                "fmv.d ft1, ft0",
                "fld ft2, 0({a})",
                "fld ft3, 8({a})",
                "fld ft4, 0({b})",
                "fld ft5, 8({b})",
                "fsqrt.d ft6, ft0",
                "fsqrt.d ft7, ft1",
                "li {cnt}, {every}",
                "2:",
                "fmul.d ft0, ft0, ft2",
                "fmul.d ft1, ft1, ft3",
                "fadd.d ft0, ft0, ft4",
                "fadd.d ft1, ft1, ft5",
                "fsqrt.d ft8, ft0",
                "fsqrt.d ft9, ft1",
                "fadd.d ft6, ft6, ft8",
                "fadd.d ft7, ft7, ft9",
                "addi {cnt}, {cnt}, -1",
                "bnez {cnt}, 3f",
                "li {cnt}, {every}",
                "beqz {y}, 3f",
                "li a7, {yield_nr}",
                "ecall",
                "3:",
                "addi {n}, {n}, -1",
                "bnez {n}, 2b",
                "fadd.d ft0, ft0, ft6",
                "fadd.d ft1, ft1, ft7",
                "fmv.x.d {lo}, ft0",
                "fmv.x.d {hi}, ft1",
                seed = in(reg) (seed % 1000 + 1),
                a = in(reg) A.as_ptr(),
                b = in(reg) B.as_ptr(),
                y = in(reg) u64::from(yields),
                every = const YIELD_EVERY,
                yield_nr = const tsumugi_abi::syscall::Syscall::Yield as usize,
                cnt = out(reg) _,
                n = inout(reg) STEPS => _,
                lo = out(reg) lo,
                hi = out(reg) hi,
                out("a0") _,
                out("a7") _,
                out("ft0") _,
                out("ft1") _,
                out("ft2") _,
                out("ft3") _,
                out("ft4") _,
                out("ft5") _,
                out("ft6") _,
                out("ft7") _,
                out("ft8") _,
                out("ft9") _,
                options(nostack),
            );
        }
        lo ^ hi.rotate_left(1)
    }

    /// Threads that load four values into fs0–fs3 once and then only read them back after each
    /// of `READ_ROUNDS` yields (riscv64). Reads leave `sstatus.FS` Clean, so when another
    /// thread's FP use needs this CPU's registers, the kernel need not save them again: the
    /// thread's area already holds them.
    #[cfg(target_arch = "riscv64")]
    const READ_ONLY_THREADS: usize = 4;
    #[cfg(not(target_arch = "riscv64"))]
    const READ_ONLY_THREADS: usize = 0;
    /// Yields of each read-only thread.
    #[cfg(target_arch = "riscv64")]
    const READ_ROUNDS: usize = 100;

    /// Whether the port skips saving registers that did not change since they were loaded, so
    /// the run must count some skipped saves (riscv64 `sstatus.FS`).
    const SKIPS_UNCHANGED_SAVES: bool = cfg!(target_arch = "riscv64");

    /// A read-only thread (see [`READ_ONLY_THREADS`]); returns how many reads were wrong.
    #[cfg(target_arch = "riscv64")]
    fn read_only_worker(i: usize) -> usize {
        let values = [0x4009_21fb_5444_2d18u64, 0x4005_bf0a_8b14_5769, 0x3ff6_a09e_667f_3bcd, 0xc000_0000_0000_0000].map(|v| v ^ i as u64);
        let bad: u64;
        // SAFETY: the asm touches only the declared registers (fs0–fs3 are saved and restored
        // around it by the compiler); the syscall returns its result in a0 and changes nothing
        // else.
        unsafe {
            core::arch::asm!(
                "fmv.d.x fs0, {v0}",
                "fmv.d.x fs1, {v1}",
                "fmv.d.x fs2, {v2}",
                "fmv.d.x fs3, {v3}",
                "li {bad}, 0",
                "2:",
                "li a7, {yield_nr}",
                "ecall",
                // Only moves out of the FP registers from here on: nothing writes them.
                "fmv.x.d {t}, fs0",
                "xor {t}, {t}, {v0}",
                "snez {t}, {t}",
                "add {bad}, {bad}, {t}",
                "fmv.x.d {t}, fs1",
                "xor {t}, {t}, {v1}",
                "snez {t}, {t}",
                "add {bad}, {bad}, {t}",
                "fmv.x.d {t}, fs2",
                "xor {t}, {t}, {v2}",
                "snez {t}, {t}",
                "add {bad}, {bad}, {t}",
                "fmv.x.d {t}, fs3",
                "xor {t}, {t}, {v3}",
                "snez {t}, {t}",
                "add {bad}, {bad}, {t}",
                "addi {n}, {n}, -1",
                "bnez {n}, 2b",
                v0 = in(reg) values[0],
                v1 = in(reg) values[1],
                v2 = in(reg) values[2],
                v3 = in(reg) values[3],
                yield_nr = const tsumugi_abi::syscall::Syscall::Yield as usize,
                t = out(reg) _,
                bad = out(reg) bad,
                n = inout(reg) READ_ROUNDS => _,
                out("a0") _,
                out("a7") _,
                out("fs0") _,
                out("fs1") _,
                out("fs2") _,
                out("fs3") _,
                options(nostack),
            );
        }
        bad as usize
    }

    fn fp_worker(i: usize) -> usize {
        let r = compute(i as u64 * 7919, true);
        RESULTS[i].store(r, Ordering::Relaxed);
        0
    }

    fn plain_worker(_: usize) -> usize {
        let mut n = 0u64;
        for i in 0..STEPS as u64 {
            n = n.wrapping_mul(6364136223846793005).wrapping_add(i);
            if i % YIELD_EVERY as u64 == 0 {
                sys::yield_now();
            }
        }
        (n & 1) as usize
    }

    pub fn main() -> i32 {
        let mut expected = [0u64; FP_THREADS];
        for (i, e) in expected.iter_mut().enumerate() {
            *e = compute(i as u64 * 7919, false);
        }
        let Ok((before, cpus)) = sys::counters(scope::ALL_CPUS) else { return 1 };
        let mut tids = [0usize; FP_THREADS + PLAIN_THREADS + READ_ONLY_THREADS];
        for (i, t) in tids.iter_mut().enumerate() {
            let r = match i {
                _ if i < FP_THREADS => sys::spawn(fp_worker, i, 32 * 1024, false),
                _ if i < FP_THREADS + PLAIN_THREADS => sys::spawn(plain_worker, i, 32 * 1024, false),
                #[cfg(target_arch = "riscv64")]
                _ => sys::spawn(read_only_worker, i, 32 * 1024, false),
                #[cfg(not(target_arch = "riscv64"))]
                _ => return 1,
            };
            let Ok(tid) = r else { return 1 };
            *t = tid;
        }
        let mut wrong_reads = 0;
        for (i, t) in tids.into_iter().enumerate() {
            match sys::thread_join(t) {
                Ok(bad) if i >= FP_THREADS + PLAIN_THREADS => wrong_reads += bad,
                Ok(_) => {}
                Err(_) => return 1,
            }
        }
        let Ok((after, _)) = sys::counters(scope::ALL_CPUS) else { return 1 };
        let d = |c: Counter| after[c as usize] - before[c as usize];
        let wrong = (0..FP_THREADS).filter(|&i| RESULTS[i].load(Ordering::Relaxed) != expected[i]).count() + wrong_reads;
        println!(
            "fp_threads: {FP_THREADS} FP + {PLAIN_THREADS} plain + {READ_ONLY_THREADS} read-only threads on {cpus} cpus: {wrong} wrong results; {} switches, {} fp traps, {} fp saves, {} fp restores, {} fp saves skipped",
            d(Counter::ContextSwitches),
            d(Counter::FpTraps),
            d(Counter::FpSaves),
            d(Counter::FpRestores),
            d(Counter::FpSavesSkipped)
        );
        if wrong == 0 && d(Counter::FpTraps) > 0 && (!SKIPS_UNCHANGED_SAVES || d(Counter::FpSavesSkipped) > 0) {
            0
        } else {
            1
        }
    }
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "riscv64"))]
use simd::main;

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "riscv64")))]
fn main() -> i32 {
    libuthread::println!("fp_threads: not ported to this architecture");
    1
}

libuthread::entry!(main);
