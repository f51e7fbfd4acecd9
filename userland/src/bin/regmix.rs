//! Mixed FULL/WINDOW resumes with every register checked (DESIGN §7, issue "lazy save"):
//! threads on every vCPU fill all general-purpose registers, all FP/SIMD registers and memory
//! just below the stack pointer with per-thread, per-round patterns, spin there (so timer
//! preemptions stop them FULL — the kernel saves the frame and the live FP state into the ThMB,
//! and the library resumes them through the FULL path, in user mode), check everything, then
//! fill the callee-saved registers and yield (a WINDOW switch), and check those; each thread
//! also keeps its own FP environment (rounding mode) throughout. In all the threads are resumed
//! at least 1,000,000 times; the program prints how many resumes were WINDOW and FULL and fails
//! on any wrong register, on zero resumes of either kind, or on fewer switches.
//!
//! What "every register" is, per architecture (`arch` below; the rest is shared):
//! - x86_64: the 16 GPRs, xmm0–15, the 128-byte red zone; MXCSR;
//! - riscv64: `x1`..`x31` but `sp`, `gp` (the thread library's: a FULL resume jumps through it)
//!   and `tp` (LTN; checked unchanged), `f0`..`f31`, 128 bytes below `sp` (the psABI has no
//!   red zone, but neither the kernel nor the library may write there); `fcsr`;
//! - aarch64: `x0`..`x30` but `x18` (the thread library's: a FULL resume jumps through it;
//!   `TPIDR_EL0`, LTN, checked unchanged), NZCV, `q0`..`q31`, 128 bytes below `sp`; FPCR.
#![no_std]
#![no_main]

extern crate alloc;

// The filling and checking is assembly for each architecture (`arch`); on the others this
// program reports that it is not ported (and fails, so a suite that runs it cannot pass by
// accident).
#[cfg(any(target_arch = "x86_64", target_arch = "riscv64", target_arch = "aarch64"))]
mod program {
    use alloc::vec::Vec;
    use core::sync::atomic::{AtomicU64, Ordering};
    use libuthread::println;

    /// Voluntary switches to make, over all threads.
    const SWITCHES: u64 = 1_000_000;
    /// Threads per vCPU (more than one, so another thread runs between a thread's stop and its
    /// resume, with its own register and FP values).
    const THREADS_PER_VCPU: usize = 2;
    /// Iterations of the spin with every register live.
    const SPIN: u64 = 300;

    /// Expected values, laid out as `arch::WORDS` says.
    #[repr(C, align(16))]
    pub struct Pattern(pub [u64; arch::WORDS]);

    /// x86_64: the GPRs, xmm0–15 and the red zone; MXCSR is the FP environment.
    #[cfg(target_arch = "x86_64")]
    mod arch {
        use super::Pattern;

        /// Words of a pattern: `[0..15]` the GPRs (rax, rbx, rcx, rdx, rsi, rdi, rbp,
        /// r8..r15; r15 counts the spin down to 0), `[15]` scratch for the mismatch mask,
        /// `[16..48]` xmm0..15 (low, high), `[48..64]` the red zone below rsp.
        pub const WORDS: usize = 64;
        /// What the bits of a mismatch mask name.
        pub const MASK_BITS: &str = "GPR i, 16 + xmm i, 32 + red-zone qword";

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

        /// Fills everything from `p`, spins `spin` times, checks; the mask of wrong registers.
        pub fn spin(p: &mut Pattern, spin: u64) -> u64 {
            p.0[14] = 0; // r15 ends the spin at 0
            p.0[15] = 0;
            // SAFETY: `p` is ours; the routine preserves the callee-saved registers and uses
            // only the red zone below its stack pointer.
            unsafe { regmix_spin(p, spin) }
        }

        /// Fills the callee-saved registers from `p`, calls `f` (a switch), checks them; the
        /// mask of wrong ones.
        pub fn call_with_window(p: &mut Pattern, f: extern "C" fn()) -> u64 {
            p.0[14] = p.0[13] ^ 0xffff; // r15's value for the WINDOW check
            // SAFETY: as in `spin`; `f` is an ordinary extern "C" function.
            unsafe { regmix_yield(p, f) }
        }

        /// Thread `id`'s FP environment: MXCSR with its own rounding mode.
        pub fn fp_env_for(id: u64) -> u64 {
            0x1f80 | ((id % 4) << 13)
        }

        /// The FP environment now.
        pub fn fp_env() -> u64 {
            u64::from(mxcsr())
        }

        /// Sets the FP environment.
        pub fn set_fp_env(v: u64) {
            set_mxcsr(v as u32);
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
    }

    /// riscv64: `x1`..`x31` but sp, gp and tp, `f0`..`f31`, and 16 doublewords below sp;
    /// `fcsr` is the FP environment.
    #[cfg(target_arch = "riscv64")]
    mod arch {
        use super::Pattern;

        /// Words of a pattern: `[0..32]` `x0`..`x31` by number (`x0`, `sp`, `gp`, `tp` unused;
        /// `x31` = `t6` counts the spin down to 0), `[32..64]` `f0`..`f31`, `[64..80]` the 16
        /// doublewords below sp.
        pub const WORDS: usize = 80;
        /// What the bits of a mismatch mask name.
        pub const MASK_BITS: &str = "x i (2: memory below sp, 4: tp changed, 31: the spin counter), 32 + f i";

        extern "C" {
            /// Fills everything from `p`, spins `spin` times, checks; returns the mask of wrong
            /// registers (bit i: `x`i, but 2: memory below sp, 4: tp not as it was, 31: the
            /// counter not 0; 32 + i: `f`i).
            fn regmix_spin(p: *mut Pattern, spin: u64) -> u64;
            /// Fills the callee-saved registers (`s0`..`s11`, `fs0`..`fs11`) from `p`, calls
            /// `f`, checks them; returns the mask of wrong ones (bit numbers as above).
            fn regmix_yield(p: *mut Pattern, f: extern "C" fn()) -> u64;
        }

        // Frame of regmix_spin: p, the entry tp, ra + s0..s11, fs0..fs11, then a dump of x0..x31
        // and f0..f31 after the spin (sp is the one register the check can address through:
        // every other one holds a value to check).
        core::arch::global_asm!(
            ".pushsection .text.regmix, \"ax\", @progbits",
            ".option push",
            ".option arch, +d",
            // regmix_spin(p = a0, spin = a1) -> a0
            ".globl regmix_spin",
            ".type regmix_spin, @function",
            ".p2align 2",
            "regmix_spin:",
            "    addi sp, sp, -{frame}",
            "    sd a0, {o_p}(sp)",
            "    sd tp, {o_tp}(sp)",
            "    sd ra, {o_save}(sp)",
            ".irp i, 0,1,2,3,4,5,6,7,8,9,10,11",
            "    sd s\\i, {o_save}+8+8*\\i(sp)",
            "    fsd fs\\i, {o_fsave}+8*\\i(sp)",
            ".endr",
            // Below sp: 16 doublewords (nothing below sp is written from here to the checks).
            ".irp k, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15",
            "    ld t0, 8*(64+\\k)(a0)",
            "    sd t0, -8*(\\k+1)(sp)",
            ".endr",
            ".irp i, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31",
            "    fld f\\i, 8*(32+\\i)(a0)",
            ".endr",
            "    mv t6, a1",                              // x31 counts the spin
            ".irp i, 1,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30",
            ".if \\i != 10",
            "    ld x\\i, 8*\\i(a0)",
            ".endif",
            ".endr",
            "    ld a0, 8*10(a0)",                        // the base last
            "2:",
            "    addi t6, t6, -1",                        // every register live: preempt me here
            "    bnez t6, 2b",
            ".irp i, 1,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31",
            "    sd x\\i, {o_x}+8*\\i(sp)",
            ".endr",
            "    sd tp, {o_x}+8*4(sp)",
            ".irp i, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31",
            "    fsd f\\i, {o_f}+8*\\i(sp)",
            ".endr",
            "    ld a0, {o_p}(sp)",
            "    li a1, 0",                               // the mask
            "    li t2, 1",
            ".irp i, 1,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30",
            "    ld t0, {o_x}+8*\\i(sp)",
            "    ld t1, 8*\\i(a0)",
            "    beq t0, t1, 1f",
            "    slli t1, t2, \\i",
            "    or a1, a1, t1",
            "1:",
            ".endr",
            "    ld t0, {o_x}+8*31(sp)",                  // the counter ended at 0
            "    beqz t0, 1f",
            "    slli t1, t2, 31",
            "    or a1, a1, t1",
            "1:",
            "    ld t0, {o_x}+8*4(sp)",                   // tp (LTN) is still this thread
            "    ld t1, {o_tp}(sp)",
            "    beq t0, t1, 1f",
            "    ori a1, a1, 1 << 4",
            "1:",
            ".irp i, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31",
            "    ld t0, {o_f}+8*\\i(sp)",
            "    ld t1, 8*(32+\\i)(a0)",
            "    beq t0, t1, 1f",
            "    slli t1, t2, 32+\\i",
            "    or a1, a1, t1",
            "1:",
            ".endr",
            ".irp k, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15",
            "    ld t0, -8*(\\k+1)(sp)",
            "    ld t1, 8*(64+\\k)(a0)",
            "    beq t0, t1, 1f",
            "    ori a1, a1, 1 << 2",
            "1:",
            ".endr",
            "    mv a0, a1",
            "    ld ra, {o_save}(sp)",
            ".irp i, 0,1,2,3,4,5,6,7,8,9,10,11",
            "    ld s\\i, {o_save}+8+8*\\i(sp)",
            "    fld fs\\i, {o_fsave}+8*\\i(sp)",
            ".endr",
            "    addi sp, sp, {frame}",
            "    ret",
            ".size regmix_spin, . - regmix_spin",
            // regmix_yield(p = a0, f = a1) -> a0
            ".globl regmix_yield",
            ".type regmix_yield, @function",
            ".p2align 2",
            "regmix_yield:",
            "    addi sp, sp, -{yframe}",
            "    sd a0, 0(sp)",
            "    sd ra, 8(sp)",
            ".irp i, 0,1,2,3,4,5,6,7,8,9,10,11",
            "    sd s\\i, 16+8*\\i(sp)",
            "    fsd fs\\i, 112+8*\\i(sp)",
            ".endr",
            ".irp i, 8,9,18,19,20,21,22,23,24,25,26,27",                             // s0..s11 and fs0..fs11 by number
            "    ld x\\i, 8*\\i(a0)",
            "    fld f\\i, 8*(32+\\i)(a0)",
            ".endr",
            "    jalr a1",                                // a WINDOW switch (or several)
            "    ld a0, 0(sp)",
            "    li a1, 0",
            "    li t2, 1",
            ".irp i, 8,9,18,19,20,21,22,23,24,25,26,27",
            "    ld t0, 8*\\i(a0)",
            "    beq x\\i, t0, 1f",
            "    slli t1, t2, \\i",
            "    or a1, a1, t1",
            "1:",
            "    fmv.x.d t0, f\\i",
            "    ld t1, 8*(32+\\i)(a0)",
            "    beq t0, t1, 1f",
            "    slli t1, t2, 32+\\i",
            "    or a1, a1, t1",
            "1:",
            ".endr",
            "    mv a0, a1",
            "    ld ra, 8(sp)",
            ".irp i, 0,1,2,3,4,5,6,7,8,9,10,11",
            "    ld s\\i, 16+8*\\i(sp)",
            "    fld fs\\i, 112+8*\\i(sp)",
            ".endr",
            "    addi sp, sp, {yframe}",
            "    ret",
            ".size regmix_yield, . - regmix_yield",
            ".option pop",
            ".popsection",
            frame = const 736,
            o_p = const 0,
            o_tp = const 8,
            o_save = const 16,
            o_fsave = const 120,
            o_x = const 216,
            o_f = const 472,
            yframe = const 208,
        );

        /// Fills everything from `p`, spins `spin` times, checks; the mask of wrong registers.
        pub fn spin(p: &mut Pattern, spin: u64) -> u64 {
            // SAFETY: `p` is ours; the routine preserves the callee-saved registers (integer
            // and FP) and writes below its stack pointer only memory it owns (nothing is live
            // there).
            unsafe { regmix_spin(p, spin) }
        }

        /// Fills the callee-saved registers from `p`, calls `f` (a switch), checks them; the
        /// mask of wrong ones.
        pub fn call_with_window(p: &mut Pattern, f: extern "C" fn()) -> u64 {
            // SAFETY: as in `spin`; `f` is an ordinary extern "C" function.
            unsafe { regmix_yield(p, f) }
        }

        /// Thread `id`'s FP environment: `fcsr` with its own rounding mode (`frm`, one of the
        /// five valid ones) and accrued flags (`fflags`; nothing here does FP arithmetic, so
        /// they only change if a switch loses them).
        pub fn fp_env_for(id: u64) -> u64 {
            ((id % 5) << 5) | (id.wrapping_mul(7) & 0x1f)
        }

        /// The FP environment now.
        pub fn fp_env() -> u64 {
            let v: u64;
            // SAFETY: reads fcsr (FP access is given on first use by the kernel).
            unsafe { core::arch::asm!("frcsr {}", out(reg) v, options(nomem, nostack)) };
            v
        }

        /// Sets the FP environment.
        pub fn set_fp_env(v: u64) {
            // SAFETY: writes fcsr with a valid rounding mode and flags; no memory touched.
            unsafe { core::arch::asm!("fscsr {}", in(reg) v, options(nomem, nostack)) };
        }
    }

    /// aarch64: `x0`..`x30` but `x18` (the thread library's: a FULL resume jumps through it;
    /// TPIDR_EL0, the LTN register, is checked unchanged in its place), NZCV, `q0`..`q31`, and
    /// 16 doublewords below sp; FPCR is the FP environment.
    #[cfg(target_arch = "aarch64")]
    mod arch {
        use super::Pattern;

        /// Words of a pattern: `[0..31]` `x0`..`x30` by number (`x17` counts the spin down to
        /// 0; `x18` unused), `[31]` NZCV (bits 31..28), `[32..96]` `q0`..`q31` (low, high),
        /// `[96..112]` the 16 doublewords below sp.
        pub const WORDS: usize = 112;
        /// What the bits of a mismatch mask name.
        pub const MASK_BITS: &str = "x i (17: the spin counter, 18: TPIDR_EL0 or NZCV), 31: memory below sp, 32 + q i";

        /// Index of NZCV, of the first q word and of the first word below sp.
        const NZCV: usize = 31;
        const Q: usize = 32;
        const BELOW: usize = 96;
        const NZCV_BITS: u64 = 0xf000_0000;

        extern "C" {
            /// Fills every register and the 16 doublewords below sp from `p`, spins `spin` times
            /// (with `sub`/`cbnz`, which leave NZCV alone), then stores what they hold into
            /// `out` (same layout; `out[18]` = TPIDR_EL0).
            fn regmix_spin(p: *const Pattern, out: *mut Pattern, spin: u64);
            /// Fills the callee-saved registers (`x19`..`x29`, `d8`..`d15`) from `p`, calls `f`,
            /// checks them; returns the mask of wrong ones (bit numbers as in [`MASK_BITS`]).
            fn regmix_yield(p: *const Pattern, f: extern "C" fn()) -> u64;
        }

        // Frame of both routines: x29/x30, x19..x28, d8..d15, then p, out and a slot for x0.
        core::arch::global_asm!(
            ".pushsection .text.regmix, \"ax\", %progbits",
            // regmix_spin(p = x0, out = x1, spin = x2)
            ".globl regmix_spin",
            ".type regmix_spin, %function",
            ".p2align 4",
            "regmix_spin:",
            "    sub sp, sp, #{frame}",
            "    stp x29, x30, [sp, #0]",
            "    stp x19, x20, [sp, #16]",
            "    stp x21, x22, [sp, #32]",
            "    stp x23, x24, [sp, #48]",
            "    stp x25, x26, [sp, #64]",
            "    stp x27, x28, [sp, #80]",
            "    stp d8, d9, [sp, #96]",
            "    stp d10, d11, [sp, #112]",
            "    stp d12, d13, [sp, #128]",
            "    stp d14, d15, [sp, #144]",
            "    stp x0, x1, [sp, #160]",                 // p, out
            // Below sp: 16 doublewords (nothing below sp is written from here to the dump).
            ".irp k, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15",
            "    ldr x9, [x0, #8*({below}+\\k)]",
            "    stur x9, [sp, #-8*(\\k+1)]",
            ".endr",
            ".irp i, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31",
            "    ldr q\\i, [x0, #8*({q}+2*\\i)]",
            ".endr",
            "    ldr x9, [x0, #8*{nzcv}]",
            "    and x9, x9, #{nzcv_bits}",
            "    msr nzcv, x9",
            "    mov x17, x2",                            // the counter
            ".irp i, 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,19,20,21,22,23,24,25,26,27,28,29,30",
            "    ldr x\\i, [x0, #8*\\i]",
            ".endr",
            "    ldr x0, [x0]",                           // the base last
            "2:",
            "    sub x17, x17, #1",                       // every register live: preempt me here
            "    cbnz x17, 2b",
            "    str x0, [sp, #176]",                     // sp is the one base left
            "    ldr x0, [sp, #168]",                     // out
            ".irp i, 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,19,20,21,22,23,24,25,26,27,28,29,30",
            "    str x\\i, [x0, #8*\\i]",
            ".endr",
            "    ldr x1, [sp, #176]",
            "    str x1, [x0]",
            "    mrs x1, nzcv",
            "    str x1, [x0, #8*{nzcv}]",
            "    mrs x1, tpidr_el0",
            "    str x1, [x0, #8*18]",
            ".irp i, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31",
            "    str q\\i, [x0, #8*({q}+2*\\i)]",
            ".endr",
            ".irp k, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15",
            "    ldur x1, [sp, #-8*(\\k+1)]",
            "    str x1, [x0, #8*({below}+\\k)]",
            ".endr",
            "    ldp x19, x20, [sp, #16]",
            "    ldp x21, x22, [sp, #32]",
            "    ldp x23, x24, [sp, #48]",
            "    ldp x25, x26, [sp, #64]",
            "    ldp x27, x28, [sp, #80]",
            "    ldp d8, d9, [sp, #96]",
            "    ldp d10, d11, [sp, #112]",
            "    ldp d12, d13, [sp, #128]",
            "    ldp d14, d15, [sp, #144]",
            "    ldp x29, x30, [sp, #0]",
            "    add sp, sp, #{frame}",
            "    ret",
            ".size regmix_spin, . - regmix_spin",
            // regmix_yield(p = x0, f = x1) -> x0
            ".globl regmix_yield",
            ".type regmix_yield, %function",
            ".p2align 4",
            "regmix_yield:",
            "    sub sp, sp, #{frame}",
            "    stp x29, x30, [sp, #0]",
            "    stp x19, x20, [sp, #16]",
            "    stp x21, x22, [sp, #32]",
            "    stp x23, x24, [sp, #48]",
            "    stp x25, x26, [sp, #64]",
            "    stp x27, x28, [sp, #80]",
            "    stp d8, d9, [sp, #96]",
            "    stp d10, d11, [sp, #112]",
            "    stp d12, d13, [sp, #128]",
            "    stp d14, d15, [sp, #144]",
            "    str x0, [sp, #160]",
            ".irp i, 19,20,21,22,23,24,25,26,27,28,29",
            "    ldr x\\i, [x0, #8*\\i]",
            ".endr",
            ".irp i, 8,9,10,11,12,13,14,15",
            "    ldr d\\i, [x0, #8*({q}+2*\\i)]",
            ".endr",
            "    blr x1",                                 // a WINDOW switch (or several)
            "    ldr x0, [sp, #160]",
            "    mov x1, #0",                             // the mask
            ".irp i, 19,20,21,22,23,24,25,26,27,28,29",
            "    ldr x9, [x0, #8*\\i]",
            "    cmp x9, x\\i",
            "    b.eq 1f",
            "    orr x1, x1, #(1 << \\i)",
            "1:",
            ".endr",
            ".irp i, 8,9,10,11,12,13,14,15",
            "    fmov x9, d\\i",
            "    ldr x10, [x0, #8*({q}+2*\\i)]",
            "    cmp x9, x10",
            "    b.eq 1f",
            "    orr x1, x1, #(1 << (32+\\i))",
            "1:",
            ".endr",
            "    mov x0, x1",
            "    ldp x19, x20, [sp, #16]",
            "    ldp x21, x22, [sp, #32]",
            "    ldp x23, x24, [sp, #48]",
            "    ldp x25, x26, [sp, #64]",
            "    ldp x27, x28, [sp, #80]",
            "    ldp d8, d9, [sp, #96]",
            "    ldp d10, d11, [sp, #112]",
            "    ldp d12, d13, [sp, #128]",
            "    ldp d14, d15, [sp, #144]",
            "    ldp x29, x30, [sp, #0]",
            "    add sp, sp, #{frame}",
            "    ret",
            ".size regmix_yield, . - regmix_yield",
            ".popsection",
            frame = const 192,
            below = const BELOW,
            q = const Q,
            nzcv = const NZCV,
            nzcv_bits = const NZCV_BITS,
        );

        /// Fills everything from `p`, spins `spin` times, checks; the mask of wrong registers.
        pub fn spin(p: &mut Pattern, spin: u64) -> u64 {
            let mut out = Pattern([0; WORDS]);
            let ltn = libuthread::sys::ltn_read() as u64;
            // SAFETY: `p` and `out` are ours; the routine preserves the callee-saved registers
            // (integer and FP) and writes below its stack pointer only memory it owns (nothing
            // is live there).
            unsafe { regmix_spin(p, &mut out, spin) };
            let (p, out) = (&p.0, &out.0);
            let mut mask = 0u64;
            for i in (0..31).filter(|&i| i != 17 && i != 18) {
                if out[i] != p[i] {
                    mask |= 1 << i;
                }
            }
            if out[17] != 0 {
                mask |= 1 << 17;
            }
            if out[18] != ltn || out[NZCV] & NZCV_BITS != p[NZCV] & NZCV_BITS {
                mask |= 1 << 18;
            }
            if out[BELOW..BELOW + 16] != p[BELOW..BELOW + 16] {
                mask |= 1 << 31;
            }
            for i in 0..32 {
                if out[Q + 2 * i..Q + 2 * i + 2] != p[Q + 2 * i..Q + 2 * i + 2] {
                    mask |= 1 << (32 + i);
                }
            }
            mask
        }

        /// Fills the callee-saved registers from `p`, calls `f` (a switch), checks them; the
        /// mask of wrong ones.
        pub fn call_with_window(p: &mut Pattern, f: extern "C" fn()) -> u64 {
            // SAFETY: as in `spin`; `f` is an ordinary extern "C" function.
            unsafe { regmix_yield(p, f) }
        }

        /// Thread `id`'s FP environment: FPCR with its own rounding mode (`RMode`, bits 23..22)
        /// and, for every other pair of threads, default-NaN mode (`DN`, bit 25); no trap enabled.
        pub fn fp_env_for(id: u64) -> u64 {
            ((id % 4) << 22) | (((id / 4) % 2) << 25)
        }

        /// The FP environment now.
        pub fn fp_env() -> u64 {
            let v: u64;
            // SAFETY: reads FPCR (FP access is given on first use by the kernel).
            unsafe { core::arch::asm!("mrs {}, fpcr", out(reg) v, options(nomem, nostack, preserves_flags)) };
            v
        }

        /// Sets the FP environment.
        pub fn set_fp_env(v: u64) {
            // SAFETY: writes FPCR with a valid rounding mode and no trap enabled; no memory
            // touched.
            unsafe { core::arch::asm!("msr fpcr, {}", in(reg) v, options(nomem, nostack, preserves_flags)) };
        }
    }

    extern "C" fn do_yield() {
        libuthread::yield_now();
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
        // Each thread has its own FP environment, which must survive every switch.
        let my_env = arch::fp_env_for(id);
        arch::set_fp_env(my_env);
        let mut p = Pattern([0; arch::WORDS]);
        for (i, v) in p.0.iter_mut().enumerate() {
            *v = (id + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ ((i as u64) << 56) ^ 0x00a5_5a00_0000_1234;
        }
        let mut round = 0u64;
        while round % 64 != 0 || resumes() - BASE.load(Ordering::Relaxed) < SWITCHES {
            round += 1;
            for v in p.0.iter_mut() {
                *v = v.wrapping_add(0x1_0000_0001);
            }
            let bad = arch::spin(&mut p, SPIN);
            let bad_window = arch::call_with_window(&mut p, do_yield);
            let bad_env = arch::fp_env() != my_env;
            if bad != 0 || bad_window != 0 || bad_env {
                SEEN.fetch_or(bad, Ordering::Relaxed);
                if WRONG.fetch_add(1, Ordering::Relaxed) < 5 {
                    println!(
                        "regmix: thread {id} round {round}: wrong after FULL/WINDOW: {bad:#x}, after yield: {bad_window:#x}, FP environment {:#x} (want {my_env:#x})",
                        arch::fp_env()
                    );
                }
            }
        }
        ROUNDS.fetch_add(round, Ordering::Relaxed);
    }

    pub fn main() -> i32 {
        libuthread::run(0, || {
            // The fork's call that keeps every register (`context::promote_oldest_preserving`):
            // its trampoline, around a callee that clobbers every register it may.
            let lost = libuthread::context::preserving_call_check();
            if !lost.is_empty() {
                println!("regmix: the preserving call lost {lost:?}");
                println!("regmix: FAILED");
                return 1;
            }
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
                println!("regmix: registers wrong after a spin (bits: {}): {:#x}", arch::MASK_BITS, SEEN.load(Ordering::Relaxed));
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

#[cfg(any(target_arch = "x86_64", target_arch = "riscv64", target_arch = "aarch64"))]
use program::main;

#[cfg(not(any(target_arch = "x86_64", target_arch = "riscv64", target_arch = "aarch64")))]
fn main() -> i32 {
    libuthread::println!("regmix: not ported to this architecture");
    1
}

libuthread::entry!(main);
