//! Emulated kernel preemption on the host: a signal plays the Tsumugi kernel's involuntary stop
//! (DESIGN §6). The handler writes the interrupted registers into the ThMB that LTN (the hosted
//! LTN word) names — the kernel's zero-copy FULL save — sets LTN = 0, calls `sched::requeue_full` as the
//! upcall handler would for `PREEMPTED(t)`, and "returns" into `sched::enter_vcpu_loop` on an
//! upcall stack. The scheduler later resumes the thread with the FULL restore, in user mode.
//!
//! Checked: every general-purpose register, rflags and the 128-byte red zone below rsp of a
//! leaf routine survive thousands of such preemptions (interleaved with WINDOW switches), and
//! stops that land inside the FULL resume sequence are restarted correctly: some FULL resumes
//! run with the trap flag set, and the SIGTRAP handler stops them at each instruction in turn.
//!
//! Only the test's own leaf routine and the resume sequences are preempted (other code may hold
//! live SSE registers, which a FULL frame does not carry; see the crate's report on FP state).

#![cfg(all(target_arch = "x86_64", not(loom)))]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use libuthread::context::interrupted_resume;
use libuthread::Thmb;

core::arch::global_asm!(
    // redzone_spin(iterations = rdi, seed = rsi) -> errors (rax)
    // A leaf routine that keeps 11 registers and 16 red-zone slots at known values and checks
    // them over and over, plus two flag-holding windows; counts mismatches in rcx.
    ".globl redzone_spin",
    ".type redzone_spin, @function",
    "redzone_spin:",
    "    push rbx",
    "    push rbp",
    "    push r12",
    "    push r13",
    "    push r14",
    "    push r15",
    "    mov r8, rsi",               // seed
    "    xor ecx, ecx",              // errors
    "    mov rbx, r8", "    xor rbx, 0x11111",
    "    mov rbp, r8", "    xor rbp, 0x22222",
    "    mov rdx, r8", "    xor rdx, 0x33333",
    "    mov rsi, r8", "    xor rsi, 0x44444",
    "    mov r9, r8",  "    xor r9, 0x55555",
    "    mov r10, r8", "    xor r10, 0x66666",
    "    mov r11, r8", "    xor r11, 0x77777",
    "    mov r12, r8", "    xor r12, 0x88888",
    "    mov r13, r8", "    xor r13, 0x99999",
    "    mov r14, r8", "    xor r14, 0xaaaaa",
    "    mov r15, r8", "    xor r15, 0xbbbbb",
    ".irp i, 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16",
    "    lea rax, [r8 + \\i]",
    "    mov [rsp - 8*\\i], rax",    // the red zone: below rsp, no push/call may touch it
    ".endr",
    ".globl redzone_spin_loop",
    "redzone_spin_loop:",
    "2:",
        "    mov rax, r8", "    xor rax, 0x11111", "    cmp rbx, rax", "    jne 8f",
    "    mov rax, r8", "    xor rax, 0x22222", "    cmp rbp, rax", "    jne 8f",
    "    mov rax, r8", "    xor rax, 0x33333", "    cmp rdx, rax", "    jne 8f",
    "    mov rax, r8", "    xor rax, 0x44444", "    cmp rsi, rax", "    jne 8f",
    "    mov rax, r8", "    xor rax, 0x55555", "    cmp r9, rax", "    jne 8f",
    "    mov rax, r8", "    xor rax, 0x66666", "    cmp r10, rax", "    jne 8f",
    "    mov rax, r8", "    xor rax, 0x77777", "    cmp r11, rax", "    jne 8f",
    "    mov rax, r8", "    xor rax, 0x88888", "    cmp r12, rax", "    jne 8f",
    "    mov rax, r8", "    xor rax, 0x99999", "    cmp r13, rax", "    jne 8f",
    "    mov rax, r8", "    xor rax, 0xaaaaa", "    cmp r14, rax", "    jne 8f",
    "    mov rax, r8", "    xor rax, 0xbbbbb", "    cmp r15, rax", "    jne 8f",
    ".irp i, 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16",
    "    lea rax, [r8 + \\i]",
    "    cmp [rsp - 8*\\i], rax",
    "    jne 8f",
    ".endr",
    "    xor eax, eax",              // ZF = 1 must survive a preemption in the nops
    ".rept 16",
    "    nop",
    ".endr",
    "    jnz 8f",
    "    stc",                       // CF = 1 likewise
    ".rept 16",
    "    nop",
    ".endr",
    "    jnc 8f",
    "    jmp 9f",
    "8:",
    "    inc rcx",
    "9:",
    "    dec rdi",
    "    jnz 2b",
    ".globl redzone_spin_end",
    "redzone_spin_end:",
    "    mov rax, rcx",
    "    pop r15",
    "    pop r14",
    "    pop r13",
    "    pop r12",
    "    pop rbp",
    "    pop rbx",
    "    ret",
    ".size redzone_spin, . - redzone_spin",
);

extern "sysv64" {
    fn redzone_spin(iterations: u64, seed: u64) -> u64;
    fn redzone_spin_loop();
    fn redzone_spin_end();
}

static PREEMPTED: AtomicUsize = AtomicUsize::new(0);
static RESTARTED: AtomicUsize = AtomicUsize::new(0);
const UPCALL_STACK: usize = 64 * 1024;
static UPCALL_STACKS: [AtomicUsize; 64] = [const { AtomicUsize::new(0) }; 64];


/// The upcall: what Tsumugi's KNH does for `PREEMPTED(t)`, on the vCPU's upcall stack with
/// LTN = 0. (Requeueing `t` inside the signal handler would be wrong: the handler's frame sits
/// on `t`'s stack, which another vCPU could then resume while the handler still runs there.)
extern "sysv64" fn upcall(vcpu: usize, t: *mut Thmb) -> ! {
    // SAFETY: `t` was stopped by the emulated kernel, which saved its full frame.
    unsafe { libuthread::sched::requeue_full(t) };
    libuthread::sched::enter_vcpu_loop(vcpu)
}

/// x86 trap flag: single-step.
const TF: u64 = 0x100;
/// Per vCPU: single steps taken in the current resume sequence, and at which step to stop it.
static STEPS: [AtomicUsize; 64] = [const { AtomicUsize::new(0) }; 64];
static STOP_AT: [AtomicUsize; 64] = [const { AtomicUsize::new(1) }; 64];
static SINGLE_STEPPED: AtomicUsize = AtomicUsize::new(0);

/// The kernel's side of an involuntary stop of `t` at `uc`: zero-copy FULL save into the ThMB,
/// LTN = 0, and entry into the upcall on the vCPU's upcall stack.
///
/// # Safety
/// `t` is the running thread (LTN), `uc` its interrupted context.
unsafe fn stop_thread(t: *mut Thmb, uc: &mut libc::ucontext_t, trace_next_resume: bool) {
    let vcpu = libuthread::current_vcpu().expect("LTN set");
    let g = &mut uc.uc_mcontext.gregs;
    // SAFETY: LTN names the running thread's live ThMB.
    unsafe {
        let f = &mut (*t).header.full;
        f.rax = g[libc::REG_RAX as usize] as u64;
        f.rbx = g[libc::REG_RBX as usize] as u64;
        f.rcx = g[libc::REG_RCX as usize] as u64;
        f.rdx = g[libc::REG_RDX as usize] as u64;
        f.rsi = g[libc::REG_RSI as usize] as u64;
        f.rdi = g[libc::REG_RDI as usize] as u64;
        f.rbp = g[libc::REG_RBP as usize] as u64;
        f.r8 = g[libc::REG_R8 as usize] as u64;
        f.r9 = g[libc::REG_R9 as usize] as u64;
        f.r10 = g[libc::REG_R10 as usize] as u64;
        f.r11 = g[libc::REG_R11 as usize] as u64;
        f.r12 = g[libc::REG_R12 as usize] as u64;
        f.r13 = g[libc::REG_R13 as usize] as u64;
        f.r14 = g[libc::REG_R14 as usize] as u64;
        f.r15 = g[libc::REG_R15 as usize] as u64;
        f.rip = g[libc::REG_RIP as usize] as u64;
        f.rsp = g[libc::REG_RSP as usize] as u64;
        f.rflags = g[libc::REG_EFL as usize] as u64;
        if trace_next_resume {
            // The FULL resume will then single-step: every instruction after its popfq traps.
            f.rflags |= TF;
        }
        (*t).header.mask = tsumugi_abi::kn::mask::FULL;
        // Enter the "KNH" with LTN = 0.
        libuthread::platform::set_ltn(core::ptr::null_mut());
    }
    PREEMPTED.fetch_add(1, Ordering::Relaxed);
    // Return into the upcall on this vCPU's upcall stack.
    let top = UPCALL_STACKS[vcpu].load(Ordering::Relaxed);
    g[libc::REG_RSP as usize] = (top - 8) as i64; // as if called: rsp ≡ 8 (mod 16)
    g[libc::REG_RIP as usize] = upcall as *const () as i64;
    g[libc::REG_RDI as usize] = vcpu as i64;
    g[libc::REG_RSI as usize] = t as i64;
    g[libc::REG_EFL as usize] = 0x202;
}

/// SIGUSR1: a timer interrupt.
extern "C" fn on_timer(_: libc::c_int, _: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let t = libuthread::platform::ltn();
    if t.is_null() {
        return; // LTN = 0: the library's critical section (or not a vCPU): resume in place
    }
    // SAFETY: the kernel hands the handler the interrupted context.
    let uc = unsafe { &mut *(context as *mut libc::ucontext_t) };
    let rip = uc.uc_mcontext.gregs[libc::REG_RIP as usize] as u64;
    let in_spin = (redzone_spin_loop as *const () as u64..redzone_spin_end as *const () as u64).contains(&rip);
    let in_resume = interrupted_resume(rip).is_some();
    if !in_spin && !in_resume {
        return; // code that may hold live SSE state: not preemptible in this emulation
    }
    if in_resume {
        RESTARTED.fetch_add(1, Ordering::Relaxed);
    }
    let trace = in_spin && PREEMPTED.load(Ordering::Relaxed).is_multiple_of(4);
    // SAFETY: `t` is the running thread and `uc` its context.
    unsafe { stop_thread(t, uc, trace) };
}

/// SIGTRAP: a single step of a traced FULL resume. Stops the resume at its `STOP_AT`-th step
/// (moving `STOP_AT` on, so every instruction of the sequence gets its turn); once the thread's
/// own code runs, tracing ends.
extern "C" fn on_step(_: libc::c_int, _: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the kernel hands the handler the interrupted context.
    let uc = unsafe { &mut *(context as *mut libc::ucontext_t) };
    let t = libuthread::platform::ltn();
    let rip = uc.uc_mcontext.gregs[libc::REG_RIP as usize] as u64;
    let vcpu = libuthread::current_vcpu().unwrap_or(0);
    if t.is_null() || interrupted_resume(rip).is_none() {
        STEPS[vcpu].store(0, Ordering::Relaxed);
        uc.uc_mcontext.gregs[libc::REG_EFL as usize] &= !(TF as i64);
        return;
    }
    SINGLE_STEPPED.fetch_add(1, Ordering::Relaxed);
    let step = STEPS[vcpu].fetch_add(1, Ordering::Relaxed) + 1;
    let stop_at = STOP_AT[vcpu].load(Ordering::Relaxed);
    if step < stop_at {
        return; // keep stepping
    }
    STEPS[vcpu].store(0, Ordering::Relaxed);
    STOP_AT[vcpu].store(stop_at % 24 + 1, Ordering::Relaxed);
    RESTARTED.fetch_add(1, Ordering::Relaxed);
    // SAFETY: `t` is the running thread (LTN) and `uc` its context.
    unsafe { stop_thread(t, uc, false) };
}

fn install_handler() {
    for slot in &UPCALL_STACKS {
        let (base, len) = libuthread::platform::alloc_stack(UPCALL_STACK).unwrap();
        slot.store(base + len, Ordering::Relaxed);
    }
    for (signal, handler) in [(libc::SIGUSR1, on_timer as *const ()), (libc::SIGTRAP, on_step as *const ())] {
        // SAFETY: installs handlers for SIGUSR1 and SIGTRAP, which nothing else in this test
        // uses; each blocks the other while it runs.
        unsafe {
            let mut action: libc::sigaction = core::mem::zeroed();
            action.sa_sigaction = handler as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaddset(&mut action.sa_mask, libc::SIGUSR1);
            libc::sigaddset(&mut action.sa_mask, libc::SIGTRAP);
            assert_eq!(libc::sigaction(signal, &action, core::ptr::null_mut()), 0);
        }
    }
}

/// Signals every thread of the process every ~50 µs until `stop`.
fn preempter(stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        while !stop.load(Ordering::Relaxed) {
            for entry in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
                let tid: libc::c_int = entry.file_name().to_str().unwrap().parse().unwrap();
                // SAFETY: tgkill only sends a signal to a thread of this process.
                unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, libc::SIGUSR1) };
            }
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    })
}

#[test]
fn full_frames_and_red_zone_survive_emulated_preemption() {
    // SAFETY: getauxval only reads the auxiliary vector.
    if unsafe { libc::getauxval(libc::AT_HWCAP2) } & 2 == 0 {
        eprintln!("skipped: FSGSBASE not enabled by the host kernel");
        return;
    }
    install_handler();
    let stop = Arc::new(AtomicBool::new(false));
    let signals = preempter(stop.clone());
    let errors = libuthread::run(2, || {
        let workers: Vec<_> = (0..4u64)
            .map(|i| {
                libuthread::spawn(move || {
                    let mut errors = 0;
                    for round in 0..40 {
                        // SAFETY: a leaf routine with no memory arguments.
                        errors += unsafe { redzone_spin(200_000, (i << 32) | round) };
                        libuthread::yield_now(); // a WINDOW switch between FULL ones
                    }
                    errors
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum::<u64>()
    });
    stop.store(true, Ordering::Relaxed);
    signals.join().unwrap();
    let preempted = PREEMPTED.load(Ordering::Relaxed);
    let restarted = RESTARTED.load(Ordering::Relaxed);
    eprintln!(
        "{preempted} emulated preemptions, {restarted} of them inside a resume sequence ({} single steps traced)",
        SINGLE_STEPPED.load(Ordering::Relaxed)
    );
    assert_eq!(errors, 0, "registers, flags or red zone corrupted");
    assert!(preempted > 0, "no preemption happened");
    assert!(restarted > 0, "no resume sequence was interrupted");
}

#[test]
fn redzone_spin_checks_what_it_should() {
    let start = std::time::Instant::now();
    // SAFETY: a leaf routine with no memory arguments.
    let errors = unsafe { redzone_spin(200_000, 42) };
    eprintln!("200k iterations in {:?}", start.elapsed());
    assert_eq!(errors, 0);
}
