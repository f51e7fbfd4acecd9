//! The hosted platform: the library on Linux, for `cargo test`, proptest, loom and benchmarks.
//! vCPUs are OS threads; there are no upcalls, so scheduling is cooperative. LTN is a
//! thread-local word of the OS thread (see [`ltn`]).

extern crate std;

use std::boxed::Box;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::vec::Vec;

use tsumugi_abi::kn::MAX_VCPUS;

use crate::thmb::Thmb;
use crate::sched::token::ParkToken;

// ------------------------------------------------------------------------------------------
// LTN.

// LTN hosted is a thread-local word of the OS thread serving as the vCPU (a register is
// per-CPU; an OS thread is the hosted CPU). It is defined here in assembly, not with
// `thread_local!`, so that every access is one inline-assembly read or write through FS,
// which the compiler can neither cache nor move across a context switch (a user thread that
// switches may come back on another OS thread: a thread-pointer address computed before the
// switch would name the old vCPU's word). GS base (`wrgsbase`) would also do, but costs about
// 80 cycles per write on AMD Zen, against one store here, and a hosted switch writes LTN
// every time. Initial-exec access: one GOT load the linker relaxes to a constant in an
// executable, then one FS-relative access. Starts at 0 in every OS thread, so a thread a user
// thread spawns does not inherit an LTN.
core::arch::global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 3",
    ".globl libuthread_hosted_ltn",
    ".hidden libuthread_hosted_ltn",
    ".type libuthread_hosted_ltn, @object",
    "libuthread_hosted_ltn:",
    ".zero 8",
    ".size libuthread_hosted_ltn, 8",
    ".popsection",
);

/// The LTN word: the running user thread's ThMB, or null.
#[inline(always)]
pub fn ltn() -> *mut Thmb {
    let value: usize;
    // SAFETY: reads this OS thread's LTN word (defined above, 8 bytes, 8-aligned); no `pure`
    // option, so the compiler keeps every read where it is written.
    unsafe {
        core::arch::asm!(
            "mov {v}, qword ptr [rip + libuthread_hosted_ltn@GOTTPOFF]",
            "mov {v}, qword ptr fs:[{v}]",
            v = out(reg) value,
            options(nostack, readonly, preserves_flags),
        )
    };
    value as *mut Thmb
}

/// Sets LTN = 0 (entering a critical section).
#[inline(always)]
pub fn clear_ltn() {
    set_ltn(core::ptr::null_mut())
}

/// Sets the LTN word.
#[inline(always)]
pub fn set_ltn(t: *mut Thmb) {
    // SAFETY: writes this OS thread's LTN word, which nothing else uses.
    unsafe {
        core::arch::asm!(
            "mov {a}, qword ptr [rip + libuthread_hosted_ltn@GOTTPOFF]",
            "mov qword ptr fs:[{a}], {t}",
            a = out(reg) _,
            t = in(reg) t as usize,
            options(nostack, preserves_flags),
        )
    };
}

/// 0: not probed yet; 1: `wrgsbase` usable; 2: not (use `arch_prctl`).
static FSGSBASE: AtomicU8 = AtomicU8::new(0);

/// `AT_HWCAP2` bit saying the kernel enabled FSGSBASE for user mode.
const HWCAP2_FSGSBASE: u64 = 1 << 1;
/// `arch_prctl` code (asm/prctl.h).
const ARCH_SET_GS: libc::c_int = 0x1001;

#[cold]
fn probe_fsgsbase() -> bool {
    // SAFETY: getauxval only reads the process's auxiliary vector.
    let hwcap2 = unsafe { libc::getauxval(libc::AT_HWCAP2) };
    let usable = hwcap2 & HWCAP2_FSGSBASE != 0;
    FSGSBASE.store(if usable { 1 } else { 2 }, Ordering::Relaxed);
    usable
}

/// Sets GS base to `t`: the addressing base through which `libuthread_resume_full` restores a
/// full frame without a free register (on Tsumugi GS base is LTN and the resume writes it;
/// hosted, only the full-save baseline resumes that way).
pub fn set_full_resume_base(t: *mut Thmb) {
    let usable = match FSGSBASE.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => probe_fsgsbase(),
    };
    if usable {
        // SAFETY: wrgsbase only changes GS base, which nothing else in a Linux process uses.
        unsafe { core::arch::asm!("wrgsbase {}", in(reg) t as usize, options(nomem, nostack, preserves_flags)) };
    } else {
        // SAFETY: ARCH_SET_GS only changes GS base.
        unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_SET_GS, t as usize) };
    }
}

// ------------------------------------------------------------------------------------------
// vCPUs.

/// Performance counters are Tsumugi's: nothing to tell hosted.
#[inline(always)]
pub fn perf_resumed(_t: *mut Thmb) {}

/// The number of CPUs this process may use.
pub fn default_vcpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// OS threads of the previous runtime, joined before new ones start (so a retiring vCPU has
/// left its scheduler stack before a new one takes it).
static THREADS: Mutex<Vec<std::thread::JoinHandle<()>>> = Mutex::new(Vec::new());

std::thread_local! {
    /// Set on every OS thread that serves as a vCPU (see [`on_vcpu_thread`]).
    static VCPU_THREAD: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// Whether the calling OS thread serves as a vCPU, so that a non-null LTN really names the user
/// thread it runs (the LTN word starts at 0 in any other OS thread; this stays the check that
/// says so, whatever LTN is made of).
#[inline]
pub fn on_vcpu_thread() -> bool {
    VCPU_THREAD.with(core::cell::Cell::get)
}

std::thread_local! {
    /// The OS thread's own context while it serves as a vCPU, resumed by `retire_vcpu`.
    static ROOT: core::cell::Cell<*mut Thmb> = const { core::cell::Cell::new(core::ptr::null_mut()) };
}

/// Stack for the few instructions between an OS thread's start and its first scheduler entry.
const TRAMPOLINE_STACK: usize = 16 * 1024;

unsafe extern "C" fn vcpu_trampoline(main: usize, vcpu: usize) -> ! {
    // SAFETY: `start_vcpus` passes a `fn(usize) -> !`.
    let main: fn(usize) -> ! = unsafe { core::mem::transmute::<usize, fn(usize) -> !>(main) };
    main(vcpu)
}

/// Starts vCPUs `1..n` as OS threads, each running `vcpu_main(index)`; the caller is vCPU 0.
pub fn start_vcpus(n: usize, vcpu_main: fn(usize) -> !) {
    VCPU_THREAD.with(|v| v.set(true)); // the caller runs vCPU 0
    let mut threads = THREADS.lock().unwrap();
    for old in threads.drain(..) {
        let _ = old.join();
    }
    for vcpu in 1..n {
        let handle = std::thread::Builder::new()
            .name(std::format!("uthread-vcpu-{vcpu}"))
            .stack_size(64 * 1024)
            .spawn(move || {
                VCPU_THREAD.with(|v| v.set(true));
                let (base, len) = alloc_stack(TRAMPOLINE_STACK).expect("trampoline stack");
                let mut root = Box::new(Thmb::blank());
                ROOT.with(|r| r.set(&mut *root));
                // SAFETY: `root` outlives the switch (this frame waits in it until
                // `retire_vcpu` resumes it); the trampoline stack is ours.
                unsafe {
                    crate::context::switch_out_window(&mut *root, base + len, vcpu_trampoline, vcpu_main as usize, vcpu)
                };
                ROOT.with(|r| r.set(core::ptr::null_mut()));
                free_stack(base, len);
            })
            .expect("libuthread: cannot start a vCPU thread");
        threads.push(handle);
    }
}

/// Ends vCPU `vcpu` (≥ 1) for good: its OS thread returns.
pub fn retire_vcpu(vcpu: usize) -> ! {
    let _ = vcpu;
    let root = ROOT.with(|r| r.get());
    assert!(!root.is_null(), "retire_vcpu on a thread that is no vCPU");
    // SAFETY: the OS thread's body waits in `switch_out` with its window saved in `root`.
    unsafe { crate::context::resume_window(root, core::ptr::null_mut()) }
}

// ------------------------------------------------------------------------------------------
// Park / unpark.

static TOKENS: [ParkToken; MAX_VCPUS] = [const { ParkToken::new() }; MAX_VCPUS];

fn futex_wait(word: &AtomicU32, expected: u32) {
    // SAFETY: FUTEX_WAIT only reads `word` and sleeps; a null timeout waits indefinitely.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            core::ptr::null::<libc::timespec>(),
        )
    };
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE only wakes sleepers on `word`.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, 1) };
}

/// Every vCPU joins the runtime at once (OS threads; nothing takes them away).
pub const VCPUS_JOIN_WHEN_GRANTED: bool = false;

/// Blocks the calling vCPU until `unpark(vcpu)` (a token left earlier makes it return at once).
/// Never asks the caller to give the vCPU up (`false`): hosted vCPUs are not revoked.
pub fn park(vcpu: usize) -> bool {
    TOKENS[vcpu].park(futex_wait);
    false
}

/// [`park`] for an idle vCPU (the scheduler loop's).
pub fn park_idle(vcpu: usize) {
    TOKENS[vcpu].park(futex_wait);
}

/// Wakes vCPU `vcpu` (or makes its next `park` return at once).
pub fn unpark(vcpu: usize) {
    TOKENS[vcpu].unpark(futex_wake);
}

// ------------------------------------------------------------------------------------------
// Sleep: a timer thread plays the kernel's part (BLOCKED … UNBLOCKED), so a sleeping thread
// gives its vCPU to others, as on Tsumugi.

/// A sleeper: `(deadline, sequence, runtime generation, ThMB address)`, earliest first.
type Sleeper = core::cmp::Reverse<(u64, u64, u64, usize)>;

struct Timer {
    queue: Mutex<BinaryHeap<Sleeper>>,
    changed: Condvar,
    sequence: std::sync::atomic::AtomicU64,
}

fn timer() -> &'static Timer {
    static TIMER: OnceLock<&'static Timer> = OnceLock::new();
    TIMER.get_or_init(|| {
        let timer: &'static Timer = Box::leak(Box::new(Timer {
            queue: Mutex::new(BinaryHeap::new()),
            changed: Condvar::new(),
            sequence: std::sync::atomic::AtomicU64::new(0),
        }));
        std::thread::Builder::new()
            .name("uthread-timer".into())
            .spawn(move || timer_main(timer))
            .expect("libuthread: cannot start the timer thread");
        timer
    })
}

fn timer_main(timer: &'static Timer) {
    // No LTN here (the word starts at 0 in a new OS thread; said, not assumed).
    set_ltn(core::ptr::null_mut());
    let mut queue = timer.queue.lock().unwrap();
    loop {
        let now = now_nanos();
        match queue.peek().copied() {
            Some(core::cmp::Reverse((deadline, _, generation, t))) if deadline <= now => {
                queue.pop();
                if generation == crate::sched::generation() {
                    // SAFETY: the sleeper published this entry and waits for exactly this
                    // wake-up; its runtime is still the running one.
                    unsafe { crate::sched::blocking::wake(t as *mut Thmb) };
                }
            }
            Some(core::cmp::Reverse((deadline, ..))) => {
                let wait = std::time::Duration::from_nanos(deadline - now);
                queue = timer.changed.wait_timeout(queue, wait).unwrap().0;
            }
            None => queue = timer.changed.wait(queue).unwrap(),
        }
    }
}

/// Blocks the calling user thread for at least `nanos`; its vCPU runs other threads meanwhile.
/// Outside a user thread, the OS thread sleeps.
pub fn sleep_current(nanos: u64) {
    if ltn().is_null() {
        std::thread::sleep(std::time::Duration::from_nanos(nanos));
        return;
    }
    sleep_current_until(now_nanos().saturating_add(nanos));
}

/// Blocks the calling user thread until [`now_nanos`] reaches `deadline` (at once if it has):
/// the deadline itself goes to the timer, with no second clock reading in between.
pub fn sleep_current_until(deadline: u64) {
    if ltn().is_null() {
        std::thread::sleep(std::time::Duration::from_nanos(deadline.saturating_sub(now_nanos())));
        return;
    }
    let timer = timer();
    let generation = crate::sched::generation();
    crate::sched::blocking::block(|me| {
        let sequence = timer.sequence.fetch_add(1, Ordering::Relaxed);
        timer.queue.lock().unwrap().push(core::cmp::Reverse((deadline, sequence, generation, me as usize)));
        timer.changed.notify_one();
        true
    });
}

/// Nanoseconds on a monotonic clock.
pub fn now_nanos() -> u64 {
    static START: OnceLock<std::time::Instant> = OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
}

// ------------------------------------------------------------------------------------------
// Memory, console, exit.

const PAGE: usize = 4096;

/// Bytes of each chunk thread stacks are carved from (`sched::pool`); 0: none, each stack is
/// its own mapping with a guard page (an mmap is cheap here).
pub const STACK_CHUNK: usize = 0;

/// Maps a stack of at least `size` bytes with an inaccessible guard page below it; returns
/// `(base, len)` of the whole mapping (its top, `base + len`, is the stack's top).
pub fn alloc_stack(size: usize) -> Option<(usize, usize)> {
    let len = size.div_ceil(PAGE) * PAGE + PAGE;
    // SAFETY: a fresh anonymous private mapping; nothing else refers to it.
    let base = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: the lowest page of the mapping we just made becomes the guard.
    if unsafe { libc::mprotect(base, PAGE, libc::PROT_NONE) } != 0 {
        // SAFETY: unmapping what we mapped.
        unsafe { libc::munmap(base, len) };
        return None;
    }
    Some((base as usize, len))
}

/// Whether [`free_stack`] gives memory back: yes, `munmap`.
pub const FREES_STACKS: bool = true;

/// Unmaps a stack from [`alloc_stack`].
pub fn free_stack(base: usize, len: usize) {
    // SAFETY: the caller gives back a mapping of `alloc_stack` that nothing uses any more.
    unsafe { libc::munmap(base as *mut libc::c_void, len) };
}

/// Ends the process.
pub fn exit_process(code: i32) -> ! {
    std::process::exit(code)
}

/// Writes to standard error.
pub fn console_write(bytes: &[u8]) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(bytes);
}

/// Per-vCPU "FP is live" words, read by the context switches (the Tsumugi kernel sets its
/// platform's words at a vCPU's first FP trap): hosted, the OS does not say, so all set.
pub(crate) static FP_LIVE: [core::sync::atomic::AtomicU64; tsumugi_abi::kn::MAX_VCPUS] =
    [const { core::sync::atomic::AtomicU64::new(1) }; tsumugi_abi::kn::MAX_VCPUS];

/// Whether FP/SIMD state may be live on vCPU `v`: hosted, the OS does not say, so always
/// (WINDOW switches keep the ABI's callee-saved FP registers where the ABI has some).
#[inline(always)]
#[allow(dead_code)] // used by the context switches of ports with callee-saved FP registers
pub fn fp_live(_v: usize) -> bool {
    true
}
