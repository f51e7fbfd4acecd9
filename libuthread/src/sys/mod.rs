//! Raw syscalls with typed results. The calling convention is documented in
//! `tsumugi_abi::syscall`; the instruction that enters the kernel is per architecture.

use tsumugi_abi::stats::Counter;
use tsumugi_abi::syscall::{decode_result, Clock, Errno, Syscall, ViewEntry};

#[cfg(target_arch = "x86_64")]
#[path = "x86_64.rs"]
mod imp;
#[cfg(target_arch = "aarch64")]
#[path = "aarch64.rs"]
mod imp;
#[cfg(target_arch = "riscv64")]
#[path = "riscv64.rs"]
mod imp;

pub use imp::syscall6;
#[cfg(target_arch = "x86_64")]
pub use imp::{ltn_clear, ltn_read, ltn_write};
#[cfg(target_arch = "riscv64")]
pub use imp::{ltn_clear, ltn_read, ltn_write};
#[cfg(target_arch = "aarch64")]
pub use imp::{ltn_clear, ltn_read, ltn_write};

/// The result of a syscall: a value, or an error code (`None` when the kernel returned a code
/// this library does not know).
pub type SysResult = Result<usize, Option<Errno>>;

/// Calls syscall `number` with `args` and decodes the result.
pub fn call(number: usize, args: [usize; 6]) -> SysResult {
    // SAFETY: the kernel checks every argument; a bad one is an error code, not a fault.
    decode_result(unsafe { syscall6(number, args) })
}

/// Ends the program with `status`.
pub fn exit(status: usize) -> ! {
    let _ = call(Syscall::Exit as usize, [status, 0, 0, 0, 0, 0]);
    // The kernel never returns from exit; if it did, spinning is the only safe thing left.
    loop {
        core::hint::spin_loop();
    }
}

/// Writes bytes to the console; returns how many were written: at most 4 KiB per call (the
/// kernel bounds the work of one call), so a longer buffer needs [`console_write_all`].
pub fn console_write(bytes: &[u8]) -> SysResult {
    call(Syscall::ConsoleWrite as usize, [bytes.as_ptr() as usize, bytes.len(), 0, 0, 0, 0])
}

/// Writes all of `bytes` to the console, a call per 4 KiB; stops at the first error.
pub fn console_write_all(mut bytes: &[u8]) -> SysResult {
    let total = bytes.len();
    while !bytes.is_empty() {
        match console_write(bytes)? {
            0 => return Ok(total - bytes.len()),
            n => bytes = &bytes[n.min(bytes.len())..],
        }
    }
    Ok(total)
}

/// Reads a clock.
pub fn clock(which: Clock) -> SysResult {
    call(Syscall::Clock as usize, [which as usize, 0, 0, 0, 0, 0])
}

/// Lets other threads run.
pub fn yield_now() {
    let _ = call(Syscall::Yield as usize, [0; 6]);
}

/// Blocks the calling thread for at least `nanos` nanoseconds.
pub fn sleep_nanos(nanos: u64) -> SysResult {
    call(Syscall::Sleep as usize, [nanos as usize, 0, 0, 0, 0, 0])
}

/// The calling thread's id.
pub fn thread_self() -> usize {
    call(Syscall::ThreadSelf as usize, [0; 6]).unwrap_or(0)
}

/// The index of the CPU running the caller.
pub fn cpu_id() -> usize {
    call(Syscall::CpuId as usize, [0; 6]).unwrap_or(0)
}

/// Starts a kernel thread of this program at `entry(arg)` on the stack ending at `stack_top`.
/// Most programs want [`spawn`] instead.
pub fn thread_create(entry: usize, stack_top: usize, arg: usize, flags: usize) -> SysResult {
    call(Syscall::ThreadCreate as usize, [entry, stack_top, arg, flags, 0, 0])
}

/// Ends the calling thread with `value`.
pub fn thread_exit(value: usize) -> ! {
    let _ = call(Syscall::ThreadExit as usize, [value, 0, 0, 0, 0, 0]);
    loop {
        core::hint::spin_loop();
    }
}

/// Waits for thread `tid` of this program to end; returns its value.
pub fn thread_join(tid: usize) -> SysResult {
    call(Syscall::ThreadJoin as usize, [tid, 0, 0, 0, 0, 0])
}

/// Creates a region of `len` bytes with `rights` (`tsumugi_abi::syscall::rights`) in the
/// caller's view; `flags`: `tsumugi_abi::syscall::region_flags`. Returns its address.
pub fn region_create(len: usize, rights: usize, flags: usize) -> SysResult {
    call(Syscall::RegionCreate as usize, [len, rights, flags, 0, 0, 0])
}

/// Gives thread `tid` `rights` on the region at `addr`. A thread of another program only from
/// the region's owner, and only while that program accepts the caller's grants
/// ([`grant_allow`]); else `EPERM`.
pub fn region_grant(addr: usize, rights: usize, tid: usize) -> SysResult {
    call(Syscall::RegionGrant as usize, [addr, rights, tid, 0, 0, 0])
}

/// Takes the region at `addr` out of thread `tid`'s view.
pub fn region_revoke(addr: usize, tid: usize) -> SysResult {
    call(Syscall::RegionRevoke as usize, [addr, tid, 0, 0, 0, 0])
}

/// Fills `out` with the caller's view; returns how many regions it has (may exceed `out.len()`).
pub fn view_query(out: &mut [ViewEntry]) -> SysResult {
    call(Syscall::ViewQuery as usize, [out.as_mut_ptr() as usize, out.len(), 0, 0, 0, 0])
}

/// Publishes `value` under `key` for other programs.
pub fn publish(key: usize, value: usize) -> SysResult {
    call(Syscall::Publish as usize, [key, value, 0, 0, 0, 0])
}

/// Reads what is published under `key` (`Err(Some(Errno::Again))` if nothing yet).
pub fn lookup(key: usize) -> SysResult {
    call(Syscall::Lookup as usize, [key, 0, 0, 0, 0, 0])
}

/// Waits (yielding) until something is published under `key`.
pub fn lookup_wait(key: usize) -> usize {
    loop {
        if let Ok(v) = lookup(key) {
            return v;
        }
        yield_now();
    }
}

/// Reads the counters of `scope` (`tsumugi_abi::stats::scope`); returns them and the number of
/// CPUs online.
pub fn counters(scope: usize) -> Result<([u64; Counter::COUNT], usize), Option<Errno>> {
    let mut out = [0u64; Counter::COUNT];
    let cpus = call(Syscall::Counters as usize, [scope, out.as_mut_ptr() as usize, out.len(), 0, 0, 0])?;
    Ok((out, cpus))
}

/// Sets the kernel's thread-view-affinity switch (`Some(on)`), or only reads it (`None`);
/// returns the previous setting. The switch is machine-wide: setting it is refused with
/// `Perm` while another program runs.
pub fn sched_affinity(set: Option<bool>) -> Result<bool, Option<Errno>> {
    let arg = match set {
        Some(true) => 1,
        Some(false) => 0,
        None => usize::MAX,
    };
    call(Syscall::SchedAffinity as usize, [arg, 0, 0, 0, 0, 0]).map(|v| v != 0)
}

/// What a new thread starts with, placed at the top of its stack.
#[repr(C)]
struct StartBlock {
    f: fn(usize) -> usize,
    arg: usize,
}

/// The first Rust code of a thread made by [`spawn`].
extern "C" fn thread_entry(block: *const StartBlock) -> ! {
    // SAFETY: `spawn` wrote the block at the top of this thread's own stack before creating it.
    let StartBlock { f, arg } = unsafe { core::ptr::read(block) };
    thread_exit(f(arg))
}

/// The stack pointer a new thread must start with so its first function sees the ABI's entry
/// alignment: on x86_64 as if a return address had been pushed, elsewhere 16-byte aligned.
fn entry_stack_pointer(below: usize) -> usize {
    let aligned = below & !15;
    if cfg!(target_arch = "x86_64") {
        aligned - 8
    } else {
        aligned
    }
}

/// Bytes of each stack pool region.
const STACK_POOL_SIZE: usize = 8 << 20;

/// The stack pool: one zero-on-touch region carved into stacks, so that every thread of the
/// program holds the same regions (and threads with equal rights share one view and one page
/// table) instead of each having a region of its own.
static POOL: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);
static POOL_NEXT: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

/// Takes `size` bytes of stack from the pool; returns the stack's top.
fn pool_stack(size: usize) -> SysResult {
    use core::sync::atomic::Ordering;
    use tsumugi_abi::syscall::{region_flags, rights};
    let size = (size + 4095) & !4095;
    loop {
        let base = POOL.load(Ordering::Acquire);
        if base != 0 {
            let offset = POOL_NEXT.fetch_add(size, Ordering::AcqRel);
            if offset + size <= STACK_POOL_SIZE {
                return Ok(base + offset + size);
            }
        }
        // First use, or the pool is used up: a new pool region (threads racing here may each
        // make one; the loser's region just stays unused).
        let region = region_create(STACK_POOL_SIZE.max(size), rights::READ | rights::WRITE, region_flags::LAZY)?;
        POOL_NEXT.store(0, Ordering::Release);
        POOL.store(region, Ordering::Release);
    }
}

/// Starts a thread running `f(arg)` on a stack of `stack_size` bytes taken from the program's
/// stack pool; its return value is its exit value. `affine` opts it in to thread-view-affinity
/// scheduling. Returns the thread id (join it with [`thread_join`]).
pub fn spawn(f: fn(usize) -> usize, arg: usize, stack_size: usize, affine: bool) -> SysResult {
    use tsumugi_abi::syscall::thread_flags;
    let top = pool_stack(stack_size)?;
    let block = (top - core::mem::size_of::<StartBlock>()) & !15;
    // SAFETY: the block lies inside this thread's slice of the pool region (writable, ours).
    unsafe { core::ptr::write(block as *mut StartBlock, StartBlock { f, arg }) };
    let flags = if affine { thread_flags::AFFINE } else { 0 };
    thread_create(thread_entry as *const () as usize, entry_stack_pointer(block), block, flags)
}

/// Registers the calling program for Kernel Notification (see `tsumugi_abi::kn`).
pub fn kn_register(reg: &tsumugi_abi::kn::Registration) -> SysResult {
    call(Syscall::KnRegister as usize, [reg as *const _ as usize, 0, 0, 0, 0, 0])
}

/// Scheduler-Activations baseline (`kn=sa`): copies the context the kernel saved at vCPU
/// `vcpu`'s last stop into the ThMB at `thmb`.
pub fn kn_fetch(vcpu: usize, thmb: usize) -> SysResult {
    call(Syscall::KnFetch as usize, [vcpu, thmb, 0, 0, 0, 0])
}

/// Signal-style preemption baseline (`preempt=signal`): resumes the context saved in the
/// signal frame at `frame`. Returns only on error.
pub fn kn_sigreturn(frame: usize) -> SysResult {
    call(Syscall::KnSigreturn as usize, [frame, 0, 0, 0, 0, 0])
}

/// Parks the calling vCPU until it is unparked or an event arrives. `flags`:
/// `kn::PARK_IDLE` when no user thread is live in the vCPU (the kernel may revoke it meanwhile:
/// it then comes back through the upcall handler with `VCPU_GRANTED`, not here); otherwise the
/// result `kn::PARK_GIVE_UP` asks the caller to give the vCPU up.
pub fn vcpu_park(flags: usize) -> SysResult {
    call(Syscall::VcpuPark as usize, [flags, 0, 0, 0, 0, 0])
}

/// Unparks vCPU `v`.
pub fn vcpu_unpark(v: usize) -> SysResult {
    call(Syscall::VcpuUnpark as usize, [v, 0, 0, 0, 0, 0])
}

/// Sets the LTN register through the kernel (for CPUs without user-mode GS-base writes).
pub fn set_ltn(v: usize) -> SysResult {
    call(Syscall::SetLtn as usize, [v, 0, 0, 0, 0, 0])
}

/// Reads console input, blocking until at least one byte arrives.
pub fn console_read(buf: &mut [u8]) -> SysResult {
    call(Syscall::ConsoleRead as usize, [buf.as_mut_ptr() as usize, buf.len(), 0, 0, 0, 0])
}

/// Counters open that belong to user threads (opened with LTN set); while any is open the
/// scheduler tells the kernel which user thread each vCPU resumes ([`perf_switch`]).
pub(crate) static USER_COUNTERS: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

fn user_counters_changed(opened: bool) {
    use core::sync::atomic::Ordering;
    let before = if opened {
        USER_COUNTERS.fetch_add(1, Ordering::SeqCst)
    } else {
        USER_COUNTERS.fetch_sub(1, Ordering::SeqCst)
    };
    // The first one opened / the last one closed: voluntary switches of the whole program take
    // the full-save path (whose resume reports the thread) / go back to windows.
    #[cfg(mn_core)]
    if (opened && before == 0) || (!opened && before == 1) {
        crate::context::set_counting(opened);
    }
    let _ = before;
}

/// Opens a counter for `event`, counting only the caller's events, and returns its handle
/// (0..[`MAX_OPEN`](tsumugi_abi::perf::MAX_OPEN)).
///
/// Whose events: called from a user thread of an M:N program (LTN set — inside
/// [`run`](crate::run)), the counter belongs to that *user* thread and follows it to whichever
/// vCPU runs it, across yields, blocking calls, preemptions and migrations; its handles mean
/// nothing to other user threads (`Err(Some(Errno::Inval))` there, so no thread can read or
/// close another's). Called from a kernel thread outside the M:N runtime, it belongs to that
/// kernel thread.
///
/// Errors: `Err(Some(Errno::NotSup))` if the machine cannot count `event` (never a silent
/// zero); `Err(Some(Errno::NoMem))` if the caller already has `MAX_OPEN` (8) counters open, or
/// if 256 user threads of all programs have counters already.
///
/// Limits in an M:N program: while any user thread has a counter open, the program's
/// voluntary switches save and resume full frames (no direct switch, about a syscall more per
/// resume); a child that `join` runs inline on its joiner counts as itself only from its
/// first `perf_*` call or resume, and the joiner counts again, after it, from its own next
/// one; a thread switched out before the program's first counter was opened resumes once
/// more by the window path, which reports nothing, so that run counts for the user thread
/// whose counters the vCPU carries (open counters before spawning the threads you measure).
/// Close counters before the thread ends: counters are keyed by the thread's ThMB address, so
/// counters left open pass to the next thread given the same ThMB (its handles come after
/// them), and they keep the program in the counting mode.
pub fn perf_open(event: tsumugi_abi::perf::Event) -> SysResult {
    let r = call(Syscall::PerfOpen as usize, [event as usize, 0, 0, 0, 0, 0]);
    if r.is_ok() && ltn_read() != 0 {
        user_counters_changed(true);
    }
    r
}

/// Starts counter `h`.
pub fn perf_start(h: usize) -> SysResult {
    call(Syscall::PerfStart as usize, [h, 0, 0, 0, 0, 0])
}

/// Stops counter `h`.
pub fn perf_stop(h: usize) -> SysResult {
    call(Syscall::PerfStop as usize, [h, 0, 0, 0, 0, 0])
}

/// Reads counter `h` (what it counted while started).
pub fn perf_read(h: usize) -> SysResult {
    call(Syscall::PerfRead as usize, [h, 0, 0, 0, 0, 0])
}

/// Closes counter `h`; `Err(Some(Errno::Inval))` if the caller has no counter `h`.
pub fn perf_close(h: usize) -> SysResult {
    let r = call(Syscall::PerfClose as usize, [h, 0, 0, 0, 0, 0]);
    if r.is_ok() && ltn_read() != 0 {
        user_counters_changed(false);
    }
    r
}

/// Tells the kernel that the calling activation now runs user thread `ltn` (a ThMB address, 0
/// for none), so that thread's counters count here. libuthread's scheduler calls it while user
/// threads have counters open; programs need not.
pub fn perf_switch(ltn: usize) -> SysResult {
    call(Syscall::PerfSwitch as usize, [ltn, 0, 0, 0, 0, 0])
}

/// Pins the calling kernel thread to CPU `cpu` (it moves there before this returns), or lets
/// it run anywhere again with `None`. `Inval` if that CPU is not online. Tests that need two
/// threads on one CPU (to count the switches between them, say) pin both.
pub fn thread_pin(cpu: Option<usize>) -> SysResult {
    call(Syscall::ThreadPin as usize, [cpu.unwrap_or(usize::MAX), 0, 0, 0, 0, 0])
}

/// `s3_lock`: the slow path of a lock word shared between programs (see
/// `tsumugi_abi::s3`); returns once the kernel acquired it for `tag` (`Ok(1)`: its previous
/// holder's program ended). Most programs want [`crate::sync::SharedMutex`].
pub fn s3_lock(word: usize, tag: usize) -> SysResult {
    call(Syscall::S3Lock as usize, [word, tag, 0, 0, 0, 0])
}

/// [`s3_lock`] for user thread `thmb` (its ThMB), which the caller parks itself: a wait
/// answers `Ok(tsumugi_abi::s3::QUEUED)` at once and the result comes with
/// `UNBLOCKED(thmb)` (`tsumugi_abi::kn::UNBLOCKED_QUEUED`). [`crate::sync::SharedMutex`] uses it.
pub fn s3_lock_queued(word: usize, tag: usize, thmb: usize) -> SysResult {
    call(Syscall::S3Lock as usize, [word, tag, thmb, 0, 0, 0])
}

/// `s3_unlock`: releases a shared lock word whose waiters bit is set.
pub fn s3_unlock(word: usize, tag: usize) -> SysResult {
    call(Syscall::S3Unlock as usize, [word, tag, 0, 0, 0, 0])
}

/// `s3_wait`: futex-style wait while the word holds `expected` (`Ok(1)`: it did not).
pub fn s3_wait(word: usize, expected: u64) -> SysResult {
    call(Syscall::S3Wait as usize, [word, expected as usize, 0, 0, 0, 0])
}

/// `s3_wake`: wakes up to `n` waiters of the word; returns how many.
pub fn s3_wake(word: usize, n: usize) -> SysResult {
    call(Syscall::S3Wake as usize, [word, n, 0, 0, 0, 0])
}

/// `s3_barrier`: sleeps at a shared barrier word left at `expected` by the caller's arrival.
/// Most programs want [`crate::sync::SharedBarrier`].
pub fn s3_barrier(word: usize, expected: u64, count: usize) -> SysResult {
    call(Syscall::S3Barrier as usize, [word, expected as usize, count, 0, 0, 0])
}

/// [`s3_barrier`] for user thread `thmb`, which the caller parks itself (as
/// [`s3_lock_queued`]). [`crate::sync::SharedBarrier`] uses it.
pub fn s3_barrier_queued(word: usize, expected: u64, count: usize, thmb: usize) -> SysResult {
    call(Syscall::S3Barrier as usize, [word, expected as usize, count, thmb, 0, 0])
}

/// `signal`: sends signal `number` to what `target` names under `scope`
/// (`tsumugi_abi::signal::scope`); `Ok(1)` if the user thread was asleep in the kernel. Most
/// programs want [`crate::signal`].
pub fn signal(target: usize, number: usize, scope: usize) -> SysResult {
    call(Syscall::Signal as usize, [target, number, scope, 0, 0, 0])
}

/// `signal_allow`: the caller's program accepts (`true`) or no longer accepts signals from the
/// program of kernel thread `tid`.
pub fn signal_allow(tid: usize, allow: bool) -> SysResult {
    call(Syscall::SignalAllow as usize, [tid, usize::from(allow), 0, 0, 0, 0])
}

/// `signal_allow` with a raw `allow` word (tests of the kernel's checks).
pub fn signal_allow_raw(tid: usize, allow: usize) -> SysResult {
    call(Syscall::SignalAllow as usize, [tid, allow, 0, 0, 0, 0])
}

/// `grant_allow`: the caller's program accepts (`true`) or no longer accepts `region_grant`s
/// into its threads' views from the program of kernel thread `tid`. Without it another
/// program's grant gets `EPERM`; withdrawing it takes back nothing granted before.
pub fn grant_allow(tid: usize, allow: bool) -> SysResult {
    call(Syscall::GrantAllow as usize, [tid, usize::from(allow), 0, 0, 0, 0])
}

/// `grant_allow` with a raw `allow` word (tests of the kernel's checks).
pub fn grant_allow_raw(tid: usize, allow: usize) -> SysResult {
    call(Syscall::GrantAllow as usize, [tid, allow, 0, 0, 0, 0])
}
