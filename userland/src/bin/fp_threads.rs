//! FP/SIMD correctness under lazy switching: threads on several CPUs each run a SIMD
//! computation (SSE2 on x86_64, NEON on aarch64) with yields and preemptions in between, and
//! must produce exactly (bit for bit) the results of the same computation run alone. Half the
//! threads never touch FP.
#![no_std]
#![no_main]

// This program uses each architecture's SIMD instructions and registers directly (the values
// must stay live in the registers across the yields); on other architectures it reports that
// it is not ported (and fails, so a suite that runs it cannot pass by accident).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
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
        let mut tids = [0usize; FP_THREADS + PLAIN_THREADS];
        for (i, t) in tids.iter_mut().enumerate() {
            let r = if i < FP_THREADS { sys::spawn(fp_worker, i, 32 * 1024, false) } else { sys::spawn(plain_worker, i, 32 * 1024, false) };
            let Ok(tid) = r else { return 1 };
            *t = tid;
        }
        for t in tids {
            if sys::thread_join(t).is_err() {
                return 1;
            }
        }
        let Ok((after, _)) = sys::counters(scope::ALL_CPUS) else { return 1 };
        let d = |c: Counter| after[c as usize] - before[c as usize];
        let wrong = (0..FP_THREADS).filter(|&i| RESULTS[i].load(Ordering::Relaxed) != expected[i]).count();
        println!(
            "fp_threads: {FP_THREADS} FP + {PLAIN_THREADS} plain threads on {cpus} cpus: {wrong} wrong results; {} switches, {} fp traps, {} fp saves, {} fp restores",
            d(Counter::ContextSwitches),
            d(Counter::FpTraps),
            d(Counter::FpSaves),
            d(Counter::FpRestores)
        );
        if wrong == 0 && d(Counter::FpTraps) > 0 {
            0
        } else {
            1
        }
    }
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use simd::main;

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn main() -> i32 {
    libuthread::println!("fp_threads: not ported to this architecture");
    1
}

libuthread::entry!(main);
