//! The x86_64 red zone survives preemption: a leaf routine keeps 16 values in the 128 bytes
//! below its stack pointer (never moving rsp) while it is preempted many times, and checks them.
//! aarch64's procedure call standard has no red zone, but the same check there shows that the
//! kernel never writes below a preempted thread's stack pointer (trap frames go on the kernel
//! stack, `SP_EL1`); so does riscv64's psABI, whose trap entry switches to the kernel stack
//! through `sscratch` before it stores anything.
#![no_std]
#![no_main]

// This program uses each architecture's instructions and registers directly; on other
// architectures it reports that it is not ported (and fails, so a suite that runs it cannot
// pass by accident).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "riscv64"))]
mod below_sp {
    use libuthread::{println, sys, Clock};

    /// Loops of one check.
    const ROUNDS: u64 = 20_000_000;
    /// Preemptions (switches away and back) the check must live through.
    const MIN_SWITCHES: usize = 5;
    /// Give up after this many checks (then the test fails: it never got preempted).
    const MAX_CHUNKS: usize = 200;

    /// Writes a pattern below rsp, re-reads it `rounds` times, returns how many reads differed.
    #[cfg(target_arch = "x86_64")]
    fn red_zone_check(rounds: u64) -> u64 {
        let bad: u64;
        // SAFETY: touches only the red zone (the 128 bytes below rsp), which the x86_64 ABI gives a
        // leaf function; nothing in this asm calls or pushes.
        unsafe {
            core::arch::asm!(
                // Fill 16 qwords below rsp with pattern i * 0x0101010101010101 ^ rsp.
                "xor {i}, {i}",
                "2:",
                "mov {t}, {i}",
                "imul {t}, {t}, 0x01010101",
                "xor {t}, rsp",
                "neg {i}",
                "mov [rsp + {i} * 8 - 8], {t}",
                "neg {i}",
                "inc {i}",
                "cmp {i}, 16",
                "jb 2b",
                "xor {bad}, {bad}",
                // Re-read them again and again (preemptions land anywhere in here).
                "3:",
                "xor {i}, {i}",
                "4:",
                "mov {t}, {i}",
                "imul {t}, {t}, 0x01010101",
                "xor {t}, rsp",
                "mov {o}, {i}",
                "neg {o}",
                "cmp [rsp + {o} * 8 - 8], {t}",
                "je 5f",
                "inc {bad}",
                "5:",
                "inc {i}",
                "cmp {i}, 16",
                "jb 4b",
                "dec {n}",
                "jnz 3b",
                i = out(reg) _,
                o = out(reg) _,
                t = out(reg) _,
                bad = out(reg) bad,
                n = inout(reg) rounds / 16 => _,
                options(nostack),
            );
        }
        bad
    }

    /// Writes a pattern in the 128 bytes below sp, re-reads it `rounds` times, returns how many
    /// reads differed.
    #[cfg(target_arch = "aarch64")]
    fn red_zone_check(rounds: u64) -> u64 {
        let bad: u64;
        // SAFETY: touches only the 128 bytes below sp, which no compiled code on this target uses
        // (it keeps no red zone, so nothing live is there) and which nothing in this asm moves sp
        // over: it calls and pushes nothing.
        unsafe {
            core::arch::asm!(
                // Fill 16 qwords below sp with pattern i * 0x01010101 ^ sp.
                "mov {s}, sp",
                "mov {i}, #0",
                "2:",
                "mul {t}, {i}, {k}",
                "eor {t}, {t}, {s}",
                "sub {p}, {s}, {i}, lsl #3",
                "stur {t}, [{p}, #-8]",
                "add {i}, {i}, #1",
                "cmp {i}, #16",
                "b.lo 2b",
                "mov {bad}, #0",
                // Re-read them again and again (preemptions land anywhere in here).
                "3:",
                "mov {i}, #0",
                "4:",
                "mul {t}, {i}, {k}",
                "eor {t}, {t}, {s}",
                "sub {p}, {s}, {i}, lsl #3",
                "ldur {o}, [{p}, #-8]",
                "cmp {o}, {t}",
                "cinc {bad}, {bad}, ne",
                "add {i}, {i}, #1",
                "cmp {i}, #16",
                "b.lo 4b",
                "subs {n}, {n}, #1",
                "b.ne 3b",
                s = out(reg) _,
                i = out(reg) _,
                t = out(reg) _,
                p = out(reg) _,
                o = out(reg) _,
                k = in(reg) 0x0101_0101u64,
                bad = out(reg) bad,
                n = inout(reg) (rounds / 16).max(1) => _,
                options(nostack),
            );
        }
        bad
    }

    /// Writes a pattern in the 128 bytes below sp, re-reads it `rounds` times, returns how many
    /// reads differed.
    #[cfg(target_arch = "riscv64")]
    fn red_zone_check(rounds: u64) -> u64 {
        let bad: u64;
        // SAFETY: touches only the 128 bytes below sp, which no compiled code on this target uses
        // (the psABI keeps no red zone, so nothing live is there) and which nothing in this asm
        // moves sp over: it calls and pushes nothing.
        unsafe {
            core::arch::asm!(
                // Fill 16 doublewords below sp with pattern i * 0x01010101 ^ sp.
                "mv {s}, sp",
                "li {i}, 0",
                "2:",
                "mul {t}, {i}, {k}",
                "xor {t}, {t}, {s}",
                "slli {p}, {i}, 3",
                "sub {p}, {s}, {p}",
                "sd {t}, -8({p})",
                "addi {i}, {i}, 1",
                "li {o}, 16",
                "bltu {i}, {o}, 2b",
                "li {bad}, 0",
                // Re-read them again and again (preemptions land anywhere in here).
                "3:",
                "li {i}, 0",
                "4:",
                "mul {t}, {i}, {k}",
                "xor {t}, {t}, {s}",
                "slli {p}, {i}, 3",
                "sub {p}, {s}, {p}",
                "ld {o}, -8({p})",
                "xor {o}, {o}, {t}",
                "snez {o}, {o}",
                "add {bad}, {bad}, {o}",
                "addi {i}, {i}, 1",
                "li {o}, 16",
                "bltu {i}, {o}, 4b",
                "addi {n}, {n}, -1",
                "bnez {n}, 3b",
                s = out(reg) _,
                i = out(reg) _,
                t = out(reg) _,
                p = out(reg) _,
                o = out(reg) _,
                k = in(reg) 0x0101_0101u64,
                bad = out(reg) bad,
                n = inout(reg) (rounds / 16).max(1) => _,
                options(nostack),
            );
        }
        bad
    }

    fn spinner(_: usize) -> usize {
        loop {
            core::hint::spin_loop();
        }
    }

    pub fn main() -> i32 {
        // Spinners on every CPU make the timer really switch this thread away and back.
        let Ok((_, cpus)) = sys::counters(tsumugi_abi::stats::scope::ALL_CPUS) else { return 1 };
        for _ in 0..cpus {
            if sys::spawn(spinner, 0, 16 * 1024, false).is_err() {
                return 1;
            }
        }
        let Ok(switches) = sys::perf_open(tsumugi_abi::perf::Event::ContextSwitches) else { return 1 };
        let _ = sys::perf_start(switches);
        let t0 = sys::clock(Clock::Ticks).unwrap_or(0);
        let mut bad = 0;
        let mut chunks = 0;
        // Keep checking until this thread was switched away (preempted) several times mid-check.
        while sys::perf_read(switches).unwrap_or(0) < MIN_SWITCHES && chunks < MAX_CHUNKS {
            bad += red_zone_check(ROUNDS);
            chunks += 1;
        }
        let switched = sys::perf_read(switches).unwrap_or(0);
        let ticks = sys::clock(Clock::Ticks).unwrap_or(0) - t0;
        println!("redzone: {bad} corrupted reads over {chunks} checks, {ticks} timer ticks, switched away {switched} times");
        sys::exit(if bad == 0 && switched >= MIN_SWITCHES { 0 } else { 1 })
    }
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "riscv64"))]
use below_sp::main;

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "riscv64")))]
fn main() -> i32 {
    libuthread::println!("redzone: not ported to this architecture");
    1
}

libuthread::entry!(main);
