//! Mixed FULL/WINDOW resumes with every register checked (DESIGN §7, issue "lazy save"):
//! threads on every vCPU fill all general-purpose registers, all sixteen xmm registers and the
//! 128-byte red zone with per-thread, per-round patterns, spin there (so timer preemptions stop
//! them FULL — the kernel saves the frame and the live SSE state into the ThMB, and the library
//! resumes them through the FULL path, in user mode), check everything, then fill the
//! callee-saved registers and yield (a WINDOW switch), and check those. In all the threads
//! are resumed at least 1,000,000 times; the program prints how many resumes were WINDOW and FULL
//! and fails on any wrong register, on zero resumes of either kind, or on fewer switches.
#![no_std]
#![no_main]

extern crate alloc;

// This program uses x86_64 registers directly; on other architectures it reports that it is
// not ported (and fails, so a suite that runs it cannot pass by accident).
#[cfg(target_arch = "x86_64")]
mod x86_64 {
    use alloc::vec::Vec;
    use core::sync::atomic::{AtomicU64, Ordering};
    use libuthread::println;

    /// Voluntary switches to make, over all threads.
    const SWITCHES: u64 = 1_000_000;
    /// Threads per vCPU (more than one, so another thread runs between a thread's stop and its
    /// resume, with its own register and SSE values).
    const THREADS_PER_VCPU: usize = 2;
    /// Iterations of the spin with every register live.
    const SPIN: u64 = 300;

    /// Expected values: `[0..15]` the GPRs (rax, rbx, rcx, rdx, rsi, rdi, rbp, r8..r15; r15
    /// counts the spin down to 0), `[15]` scratch for the mismatch mask, `[16..48]` xmm0..15
    /// (low, high), `[48..64]` the red zone below rsp.
    #[repr(C, align(16))]
    struct Pattern([u64; 64]);

    extern "C" {
        /// Fills everything from `p`, spins `spin` times, checks; returns the mask of wrong
        /// registers (bit i: GPR i; 16 + i: xmm i; 32 + k: red-zone qword k).
        fn regmix_spin(p: *mut Pattern, spin: u64) -> u64;
        /// Fills the callee-saved registers from `p`, calls `f`, checks them; returns the mask
        /// of wrong ones (GPR bit numbers).
        fn regmix_yield(p: *mut Pattern, f: extern "C" fn()) -> u64;
    }

    core::arch::global_asm!(
        ".pushsection .text.regmix, \"ax\", @progbits",
        // regmix_spin(p = rdi, spin = rsi) -> rax
        ".globl regmix_spin",
        ".type regmix_spin, @function",
        ".p2align 4",
        "regmix_spin:",
        "    push rbx", "    push rbp", "    push r12", "    push r13", "    push r14", "    push r15",
        "    push rdi",                               // [rsp] = p
        "    mov r15, rsi",
        // The red zone: 16 qwords below rsp (this is a leaf from here to the checks).
        ".irp k, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15",
        "    mov rax, [rdi + 8 * (48 + \\k)]",
        "    mov [rsp - 8 * (\\k + 1)], rax",
        ".endr",
        ".irp i, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15",
        "    movdqu xmm\\i, [rdi + 8 * (16 + 2 * \\i)]",
        ".endr",
        "    mov rax, [rdi + 0]", "    mov rbx, [rdi + 8]", "    mov rcx, [rdi + 16]", "    mov rdx, [rdi + 24]",
        "    mov rsi, [rdi + 32]", "    mov rbp, [rdi + 48]", "    mov r8, [rdi + 56]", "    mov r9, [rdi + 64]",
        "    mov r10, [rdi + 72]", "    mov r11, [rdi + 80]", "    mov r12, [rdi + 88]", "    mov r13, [rdi + 96]",
        "    mov r14, [rdi + 104]", "    mov rdi, [rdi + 40]",
        "2:",
        "    dec r15",                                // every register live: preempt me here
        "    jnz 2b",
        "    xchg rdi, [rsp]",                        // rdi = p; the pattern rdi goes to our slot
        // GPR i wrong -> bit i of p[15].
        ".macro regmix_check reg, i",
        "    cmp \\reg, [rdi + 8 * \\i]",
        "    je 1f",
        "    or qword ptr [rdi + 120], 1 << \\i",
        "1:",
        ".endm",
        "    regmix_check rax, 0", "    regmix_check rbx, 1", "    regmix_check rcx, 2", "    regmix_check rdx, 3",
        "    regmix_check rsi, 4", "    regmix_check rbp, 6", "    regmix_check r8, 7", "    regmix_check r9, 8",
        "    regmix_check r10, 9", "    regmix_check r11, 10", "    regmix_check r12, 11", "    regmix_check r13, 12",
        "    regmix_check r14, 13",
        "    test r15, r15",
        "    jz 1f",
        "    or qword ptr [rdi + 120], 1 << 14",
        "1:",
        "    mov rax, [rsp]",
        "    regmix_check rax, 5",                    // the pattern rdi (compares with p[5])
        // Red-zone qword k wrong -> bit 32 + k; xmm i wrong -> bit 16 + i (rax, rcx are free).
        ".irp k, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15",
        "    mov rax, [rsp - 8 * (\\k + 1)]",
        "    cmp rax, [rdi + 8 * (48 + \\k)]",
        "    je 1f",
        "    mov rcx, 1",
        "    shl rcx, 32 + \\k",
        "    or [rdi + 120], rcx",
        "1:",
        ".endr",
        ".irp i, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15",
        "    movq rax, xmm\\i",
        "    cmp rax, [rdi + 8 * (16 + 2 * \\i)]",
        "    jne 3f",
        "    pshufd xmm\\i, xmm\\i, 0x4e",             // high half down (SSE2 only)
        "    movq rax, xmm\\i",
        "    cmp rax, [rdi + 8 * (17 + 2 * \\i)]",
        "    je 1f",
        "3:",
        "    mov rcx, 1",
        "    shl rcx, 16 + \\i",
        "    or [rdi + 120], rcx",
        "1:",
        ".endr",
        "    mov rax, [rdi + 120]",
        "    mov qword ptr [rdi + 120], 0",
        "    pop rdi",
        "    pop r15", "    pop r14", "    pop r13", "    pop r12", "    pop rbp", "    pop rbx",
        "    ret",
        ".size regmix_spin, . - regmix_spin",
        // regmix_yield(p = rdi, f = rsi) -> rax
        ".globl regmix_yield",
        ".type regmix_yield, @function",
        ".p2align 4",
        "regmix_yield:",
        "    push rbx", "    push rbp", "    push r12", "    push r13", "    push r14", "    push r15",
        "    push rdi",                               // 7 pushes: rsp is 16-aligned for the call
        "    mov rbx, [rdi + 8]", "    mov rbp, [rdi + 48]", "    mov r12, [rdi + 88]",
        "    mov r13, [rdi + 96]", "    mov r14, [rdi + 104]", "    mov r15, [rdi + 112]",
        "    call rsi",                               // a WINDOW switch (or several)
        "    mov rdi, [rsp]",
        "    mov qword ptr [rdi + 120], 0",
        "    regmix_check rbx, 1", "    regmix_check rbp, 6", "    regmix_check r12, 11",
        "    regmix_check r13, 12", "    regmix_check r14, 13", "    regmix_check r15, 14",
        "    mov rax, [rdi + 120]",
        "    mov qword ptr [rdi + 120], 0",
        "    pop rdi",
        "    pop r15", "    pop r14", "    pop r13", "    pop r12", "    pop rbp", "    pop rbx",
        "    ret",
        ".size regmix_yield, . - regmix_yield",
        ".purgem regmix_check",
        ".popsection",
    );

    extern "C" fn do_yield() {
        libuthread::yield_now();
    }

    fn mxcsr() -> u32 {
        let mut v = 0u32;
        // SAFETY: stores the 4-byte MXCSR into our local.
        unsafe { core::arch::asm!("stmxcsr [{}]", in(reg) &mut v, options(nostack)) };
        v
    }

    fn set_mxcsr(v: u32) {
        // SAFETY: a valid MXCSR (exceptions masked; only the rounding field differs).
        unsafe { core::arch::asm!("ldmxcsr [{}]", in(reg) &v, options(nostack)) };
    }

    static WRONG: AtomicU64 = AtomicU64::new(0);
    /// Every mismatch mask seen after a spin (OR of all).
    static SEEN: AtomicU64 = AtomicU64::new(0);
    /// Resumes (WINDOW + FULL) counted before the threads started.
    static BASE: AtomicU64 = AtomicU64::new(0);
    /// Rounds done, over all threads.
    static ROUNDS: AtomicU64 = AtomicU64::new(0);

    fn resumes() -> u64 {
        let (w, f) = libuthread::sched::resume_counts();
        w + f
    }

    /// One thread: rounds of (spin with everything live, yield with the window live) until the
    /// threads were resumed [`SWITCHES`] times in all.
    fn worker(id: u64) {
        // Each thread has its own rounding mode, which must survive every switch.
        let my_mxcsr = 0x1f80 | (((id % 4) as u32) << 13);
        set_mxcsr(my_mxcsr);
        let mut p = Pattern([0; 64]);
        for (i, v) in p.0.iter_mut().enumerate() {
            *v = (id + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ ((i as u64) << 56) ^ 0x00a5_5a00_0000_1234;
        }
        let mut round = 0u64;
        while round % 64 != 0 || resumes() - BASE.load(Ordering::Relaxed) < SWITCHES {
            round += 1;
            for v in p.0.iter_mut() {
                *v = v.wrapping_add(0x1_0000_0001);
            }
            p.0[14] = 0; // r15 ends the spin at 0
            p.0[15] = 0;
            // SAFETY: `p` is ours; the routine preserves the callee-saved registers and uses
            // only the red zone below its stack pointer.
            let bad = unsafe { regmix_spin(&mut p, SPIN) };
            p.0[14] = p.0[13] ^ 0xffff; // r15's value for the WINDOW check
            // SAFETY: as above; `do_yield` is an ordinary extern "C" function.
            let bad_window = unsafe { regmix_yield(&mut p, do_yield) };
            let bad_mxcsr = mxcsr() != my_mxcsr;
            if bad != 0 || bad_window != 0 || bad_mxcsr {
                SEEN.fetch_or(bad, Ordering::Relaxed);
                if WRONG.fetch_add(1, Ordering::Relaxed) < 5 {
                    println!(
                        "regmix: thread {id} round {round}: wrong after FULL/WINDOW: {bad:#x}, after yield: {bad_window:#x}, mxcsr {:#x} (want {my_mxcsr:#x})",
                        mxcsr()
                    );
                }
            }
        }
        ROUNDS.fetch_add(round, Ordering::Relaxed);
    }

    pub fn main() -> i32 {
        libuthread::run(0, || {
            let vcpus = libuthread::vcpu_count();
            let threads = vcpus * THREADS_PER_VCPU;
            let (w0, f0) = libuthread::sched::resume_counts();
            BASE.store(w0 + f0, Ordering::Relaxed);
            let handles: Vec<_> = (0..threads as u64).map(|id| libuthread::spawn(move || worker(id))).collect();
            for h in handles {
                h.join().ok();
            }
            let (w1, f1) = libuthread::sched::resume_counts();
            let (window, full) = (w1 - w0, f1 - f0);
            let switches = window + full;
            let rounds = ROUNDS.load(Ordering::Relaxed);
            let wrong = WRONG.load(Ordering::Relaxed);
            if wrong != 0 {
                println!("regmix: registers wrong after a spin (bits: GPR i, 16 + xmm i, 32 + red-zone qword): {:#x}", SEEN.load(Ordering::Relaxed));
            }
            println!(
                "regmix: {threads} threads on {vcpus} vCPUs, {rounds} rounds, {switches} switches: resumed {window} times from WINDOW, {full} from FULL; {wrong} rounds with wrong registers"
            );
            if wrong != 0 || window == 0 || full == 0 || switches < SWITCHES {
                println!("regmix: FAILED");
                1
            } else {
                0
            }
        })
    }
}

#[cfg(target_arch = "x86_64")]
use x86_64::main;

#[cfg(not(target_arch = "x86_64"))]
fn main() -> i32 {
    libuthread::println!("regmix: not ported to this architecture");
    1
}

libuthread::entry!(main);
