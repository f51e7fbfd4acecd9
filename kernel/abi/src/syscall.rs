//! Syscall numbers and error codes.
//!
//! Calling convention (every architecture): the syscall number goes in the first syscall register
//! (x86_64 `rax`, riscv64 `a7`, aarch64 `x8`), up to six arguments in the argument registers
//! (x86_64 `rdi, rsi, rdx, r10, r8, r9`; riscv64 `a0..a5`; aarch64 `x0..x5`), and the result comes
//! back in the return register (`rax`/`a0`/`x0`) as an `isize`: non-negative on success, `-errno`
//! on failure (see [`encode_result`]/[`decode_result`]).

/// Syscall numbers.
#[repr(usize)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syscall {
    /// `exit(status: usize) -> !`: end the calling program with `status`.
    Exit = 0,
    /// `console_write(ptr: *const u8, len: usize) -> usize`: write bytes to the console; returns
    /// the number written, at most 4,096 per call (the kernel bounds the work of one call; write
    /// the rest with further calls). The whole buffer must lie in memory the caller may read.
    ConsoleWrite = 1,
    /// `clock(which: usize) -> u64`: read a clock (see [`Clock`]).
    Clock = 2,
    /// `yield() -> 0`: let other threads run.
    Yield = 3,
    /// `sleep(nanos: u64) -> 0`: block the calling thread for at least `nanos`.
    Sleep = 4,
    /// `thread_create(entry, stack_top, arg, flags) -> tid`: a new thread of the caller's program
    /// starting at `entry(arg)` with stack pointer `stack_top`, in the caller's view. `flags`:
    /// [`thread_flags`].
    ThreadCreate = 5,
    /// `thread_exit(value) -> !`: end the calling thread; the last thread's value is the
    /// program's exit status.
    ThreadExit = 6,
    /// `thread_join(tid) -> value`: wait for a thread of the same program to end.
    ThreadJoin = 7,
    /// `thread_self() -> tid`.
    ThreadSelf = 8,
    /// `region_create(len, rights, flags) -> addr`: a new region of the single address space,
    /// in the caller's view with `rights` ([`rights`]); `flags`: [`region_flags`]. `ENOMEM`
    /// (nothing made) if it would have to reach threads in more than 16 views (a
    /// Kernel-Notification program whose threads it split that far).
    RegionCreate = 9,
    /// `region_grant(addr, rights, tid) -> 0`: give thread `tid` `rights` on the region at
    /// `addr`; the caller must hold at least those rights. To a thread of another program only
    /// the region's owner may grant, and only while that program accepts grants from the
    /// caller's (`grant_allow`): else `EPERM`, with nothing changed. Such a grant reaches the
    /// target's view-mates too; `ENOMEM` (nothing changed) if they are in more than 16 views
    /// (one call makes at most that many: bounded work with interrupts off).
    RegionGrant = 10,
    /// `region_revoke(addr, tid) -> 0`: take the region at `addr` out of thread `tid`'s view;
    /// the caller must hold the region. From another program's thread it reaches the target's
    /// view-mates, with `ENOMEM` (nothing changed) as `region_grant` past 16 views.
    RegionRevoke = 11,
    /// `view_query(buf: *mut ViewEntry, max) -> count`: the caller's view, in address order.
    ViewQuery = 12,
    /// `publish(key, value) -> 0`: set a kernel-wide name (how programs find each other). A
    /// name belongs to the program that first published it: another program gets `EPERM`; a
    /// program holds at most 64 names (`ENOMEM` beyond); its names go when it ends.
    Publish = 13,
    /// `lookup(key) -> value`, or `EAGAIN` if nothing is published under `key` (yet, or any
    /// more: its publisher ended).
    Lookup = 14,
    /// `counters(scope, buf: *mut u64, len) -> cpus`: copy the event counters of `scope`
    /// (see `stats::scope`); returns the number of CPUs online.
    Counters = 15,
    /// `cpu_id() -> index` of the CPU running the caller.
    CpuId = 16,
    /// `sched_affinity(on) -> previous`: the global thread-view-affinity switch for
    /// experiments (`on` = 0 or 1; `usize::MAX` only reads it).
    SchedAffinity = 17,
    /// `kn_register(reg: *const kn::Registration) -> 0`: make the caller's program a
    /// Kernel-Notification program: upcalls go to `reg.handler`, events to `reg.ring`, and
    /// `reg.vcpus - 1` more vCPUs start (each with a `VcpuGranted` upcall).
    KnRegister = 18,
    /// `vcpu_park(flags) -> 0 | PARK_GIVE_UP`: the calling vCPU sleeps until `vcpu_unpark`
    /// names it or an event reaches the ring. `flags`: `kn::PARK_IDLE` when no user thread is
    /// live in it (then the kernel may revoke it meanwhile, and it returns into the handler with
    /// `VCPU_GRANTED` when it runs again); otherwise `kn::PARK_GIVE_UP` asks the library to give
    /// the vCPU up (space sharing).
    VcpuPark = 19,
    /// `vcpu_unpark(vcpu) -> 0`: wakes a parked vCPU of the caller's program.
    VcpuUnpark = 20,
    /// `set_ltn(thmb) -> 0`: sets the LTN register where user mode cannot (no FSGSBASE).
    SetLtn = 21,
    /// `console_read(buf, len) -> n`: reads at least one byte from the console, blocking
    /// until one arrives.
    ConsoleRead = 22,
    /// `perf_open(event) -> handle`: a per-thread counter for `perf::Event`, stopped at 0;
    /// `ENOTSUP` if the machine cannot count it.
    PerfOpen = 23,
    /// `perf_start(handle) -> 0`.
    PerfStart = 24,
    /// `perf_stop(handle) -> 0`.
    PerfStop = 25,
    /// `perf_read(handle) -> value`.
    PerfRead = 26,
    /// `perf_close(handle) -> 0`.
    PerfClose = 27,
    /// `thread_pin(cpu) -> 0`: from now on the calling thread runs only on CPU `cpu` (it moves
    /// there before the call returns); `usize::MAX` lets it run anywhere again. `EINVAL` if
    /// `cpu` is not online. A run queue holding a pinned thread is not stolen from.
    ThreadPin = 28,
    /// `kn_fetch(vcpu, thmb) -> 0`: the Scheduler-Activations baseline (`kn=sa` boot option):
    /// copies the context the kernel saved in its own area when it last stopped a thread of
    /// vCPU `vcpu` into the ThMB at `thmb` (full frame, FP area if it has one, then the mask).
    /// `EAGAIN` if nothing is saved; `EINVAL` without `kn=sa` (the kernel then saves into ThMBs
    /// itself, the zero-copy save this baseline is measured against).
    KnFetch = 29,
    /// `kn_sigreturn(frame) -> (the resumed context's result register)`: the signal-style
    /// preemption baseline (`preempt=signal` boot option): resumes the context a preemption
    /// pushed on the thread's stack as a signal frame (a `kn::FullFrame` at `frame`). `EINVAL`
    /// without `preempt=signal`.
    KnSigreturn = 30,
    /// `s3_lock(word, tag, thmb) -> 0 | 1`: the slow path of a lock shared between programs (S3's
    /// kernel lock holder, [`crate::s3`]). The caller's one user-mode attempt failed; the
    /// kernel queues it as a waiter and blocks it (a vCPU goes back to the library with
    /// `BLOCKED`) until a release hands the lock over: the kernel writes `tag` into the word on
    /// the waiter's behalf (Auto Lock) before it wakes it, so the caller returns owning the
    /// lock. 1 instead of 0: the previous holder's program ended while holding it. `EAGAIN`:
    /// the holder table is full (or the program's share of it): wait in software. A third
    /// argument `thmb` ≠ 0 (the calling user thread's ThMB, on a Kernel-Notification vCPU)
    /// makes a wait answer [`crate::s3::QUEUED`] at once instead: the library parks that thread
    /// itself until `UNBLOCKED(thmb)` ([`crate::kn::UNBLOCKED_QUEUED`]) brings the result.
    S3Lock = 31,
    /// `s3_unlock(word, tag) -> 0`: releases a shared lock whose word has the waiters bit: the
    /// kernel hands it to the first waiter. `EPERM` if the word does not name `tag` as holder.
    S3Unlock = 32,
    /// `s3_wait(word, expected, thmb) -> 0 | 1`: futex-style wait (the soft-sync baseline): blocks
    /// while the word holds `expected` until `s3_wake`; 1 if it did not hold it (no wait).
    /// A third argument `thmb` as for [`Syscall::S3Lock`].
    S3Wait = 33,
    /// `s3_wake(word, n) -> woken`: wakes up to `n` threads waiting on the word (`s3_wait` or
    /// `s3_barrier`): a barrier's batch release is one call with `n = usize::MAX`.
    S3Wake = 34,
    /// `s3_barrier(word, expected, count, thmb) -> 0 | 1`: waits at a barrier shared between
    /// programs ([`crate::s3::barrier`] word layout) whose arrival left the word at `expected`,
    /// until the last of `count` arrivals wakes the batch (`s3_wake`). 1: the round had already
    /// ended (no wait). `EINVAL`: `count` is 0 or above [`crate::s3::MAX_BARRIER_COUNT`], or
    /// `expected` counts `count` arrivals already; `EPIPE`-like `ESRCH`: the barrier is broken
    /// (a program ended while one of its threads waited at it). A fourth argument `thmb` as
    /// for [`Syscall::S3Lock`].
    S3Barrier = 35,
    /// `signal(target, number, scope) -> 0 | 1`: sends signal `number` (`1..=`
    /// [`crate::signal::MAX`]) to what `target` names under `scope` ([`crate::signal::scope`]:
    /// a kernel thread, the program of one, or a user thread of the caller's own
    /// Kernel-Notification program). Delivery: a Kernel-Notification program gets `SIGNAL`
    /// (its library runs the registered handler); any other program the number's default
    /// action ([`crate::signal::default_action`]); [`crate::signal::KILL`] ends any program. A
    /// thread waiting in the kernel keeps waiting. 1 instead of 0: the user thread was asleep
    /// in the kernel ([`crate::signal::TARGET_ASLEEP`]). `EINVAL`: a bad number or scope, a
    /// user thread named by a program without Kernel Notification or at an address that is
    /// not a ThMB's (unaligned, 0); `EFAULT`: a user thread outside the caller's writable
    /// memory; `ESRCH`: no such thread, an ended thread, a kernel thread, or a program that is
    /// ending; `EPERM`: another program that has not accepted signals from the caller's
    /// (`signal_allow`); `EAGAIN`: the target's event ring is full (nothing was sent).
    Signal = 36,
    /// `signal_allow(tid, allow) -> 0`: the caller's program accepts (`allow` = 1) or no longer
    /// accepts (0) signals from the program of thread `tid`. At most
    /// [`crate::signal::MAX_ALLOWED`] programs at once (`ENOMEM`); `ESRCH` for an unknown
    /// thread or a kernel thread, `EINVAL` for another `allow`.
    SignalAllow = 37,
    /// `grant_allow(tid, allow) -> 0`: the caller's program accepts (`allow` = 1) or no longer
    /// accepts (0) `region_grant`s into its threads' views from the program of thread `tid`
    /// (its own program's grants need no consent). Withdrawing it takes nothing back that was
    /// granted before (the program may revoke that itself). At most
    /// [`crate::signal::MAX_ALLOWED`] programs at once (`ENOMEM`); `ESRCH` for an unknown
    /// thread or a kernel thread, `EINVAL` for another `allow`.
    GrantAllow = 38,
    /// `perf_switch(ltn) -> 0`: libuthread tells the kernel that the calling activation now
    /// runs its user thread `ltn` (a ThMB address; 0: none), so that thread's counters
    /// (`perf_open` made with that LTN) count here from now on and its `ContextSwitches`
    /// counters count one. The library calls it only while its program has user-thread
    /// counters open; other programs need never call it.
    PerfSwitch = 39,
}

/// Rights bits of region syscalls.
pub mod rights {
    /// Read.
    pub const READ: usize = 1;
    /// Write.
    pub const WRITE: usize = 2;
    /// Execute.
    pub const EXEC: usize = 4;
}

/// Flags of `region_create`.
pub mod region_flags {
    /// Frames are taken on first touch (zero-filled) instead of at creation.
    pub const LAZY: usize = 1;
}

/// Flags of `thread_create`.
pub mod thread_flags {
    /// Opt in to thread-view-affinity scheduling (run next to threads with the same view).
    pub const AFFINE: usize = 1;
}

/// One entry of `view_query`'s output.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ViewEntry {
    /// First byte of the region.
    pub start: u64,
    /// Length in bytes.
    pub len: u64,
    /// The caller's rights ([`rights`] bits).
    pub rights: u64,
    /// Region kind: 0 text, 1 rodata, 2 data, 3 heap, 4 stack, 5 thmb, 6 shared.
    pub kind: u64,
}

impl Syscall {
    /// Every syscall, in number order.
    pub const ALL: [Syscall; 40] = [
        Syscall::Exit,
        Syscall::ConsoleWrite,
        Syscall::Clock,
        Syscall::Yield,
        Syscall::Sleep,
        Syscall::ThreadCreate,
        Syscall::ThreadExit,
        Syscall::ThreadJoin,
        Syscall::ThreadSelf,
        Syscall::RegionCreate,
        Syscall::RegionGrant,
        Syscall::RegionRevoke,
        Syscall::ViewQuery,
        Syscall::Publish,
        Syscall::Lookup,
        Syscall::Counters,
        Syscall::CpuId,
        Syscall::SchedAffinity,
        Syscall::KnRegister,
        Syscall::VcpuPark,
        Syscall::VcpuUnpark,
        Syscall::SetLtn,
        Syscall::ConsoleRead,
        Syscall::PerfOpen,
        Syscall::PerfStart,
        Syscall::PerfStop,
        Syscall::PerfRead,
        Syscall::PerfClose,
        Syscall::ThreadPin,
        Syscall::KnFetch,
        Syscall::KnSigreturn,
        Syscall::S3Lock,
        Syscall::S3Unlock,
        Syscall::S3Wait,
        Syscall::S3Wake,
        Syscall::S3Barrier,
        Syscall::Signal,
        Syscall::SignalAllow,
        Syscall::GrantAllow,
        Syscall::PerfSwitch,
    ];

    /// Decodes a syscall number.
    pub fn from_number(number: usize) -> Option<Syscall> {
        Self::ALL.iter().copied().find(|s| *s as usize == number)
    }
}

/// Clocks readable through [`Syscall::Clock`].
#[repr(usize)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// Nanoseconds since boot, monotonic.
    MonotonicNanos = 0,
    /// The raw cycle counter of the CPU the caller runs on (TSC, `cycle`, `CNTVCT`).
    /// Under QEMU with `-icount shift=0` it advances by exactly one per guest instruction.
    Cycles = 1,
    /// Timer interrupts taken by the CPU since boot.
    Ticks = 2,
}

impl Clock {
    /// Decodes a clock selector.
    pub fn from_number(number: usize) -> Option<Clock> {
        [Clock::MonotonicNanos, Clock::Cycles, Clock::Ticks]
            .into_iter()
            .find(|c| *c as usize == number)
    }
}

/// Most bytes one `console_write` writes. The kernel runs with interrupts off, so the work of a
/// call must be bounded (4 KiB through the UART is a few hundred thousand instructions); the
/// caller writes the rest with further calls, as with a POSIX `write` that returns short.
pub const CONSOLE_WRITE_MAX: usize = 4096;

/// Error codes returned (negated) by syscalls.
#[repr(isize)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Errno {
    /// No syscall has this number.
    NoSys = 1,
    /// A pointer argument does not name memory the caller may access in the needed way.
    Fault = 2,
    /// An argument is out of range.
    Inval = 3,
    /// The kernel ran out of memory (or another resource) for this request.
    NoMem = 4,
    /// Not available yet; try again.
    Again = 5,
    /// The caller lacks the rights the request needs.
    Perm = 6,
    /// No such thread.
    Srch = 7,
    /// The machine cannot do this (e.g. count that event).
    NotSup = 8,
}

impl Errno {
    /// Every error code.
    pub const ALL: [Errno; 8] = [Errno::NoSys, Errno::Fault, Errno::Inval, Errno::NoMem, Errno::Again, Errno::Perm, Errno::Srch, Errno::NotSup];

    /// The code's short name, as a C programmer would spell it.
    pub fn name(self) -> &'static str {
        match self {
            Errno::NoSys => "ENOSYS",
            Errno::Fault => "EFAULT",
            Errno::Inval => "EINVAL",
            Errno::NoMem => "ENOMEM",
            Errno::Again => "EAGAIN",
            Errno::Perm => "EPERM",
            Errno::Srch => "ESRCH",
            Errno::NotSup => "ENOTSUP",
        }
    }
}

/// Encodes a syscall result into the return register.
pub fn encode_result(result: Result<usize, Errno>) -> usize {
    match result {
        Ok(value) => value,
        Err(errno) => (-(errno as isize)) as usize,
    }
}

/// Decodes the return register of a syscall. Values in `-4095..0` are errors (as on Linux), so
/// every result below that, including large addresses, is a success.
pub fn decode_result(raw: usize) -> Result<usize, Option<Errno>> {
    let signed = raw as isize;
    if (-4095..0).contains(&signed) {
        Err(Errno::ALL.iter().copied().find(|e| *e as isize == -signed))
    } else {
        Ok(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_round_trip() {
        for errno in Errno::ALL {
            assert_eq!(decode_result(encode_result(Err(errno))), Err(Some(errno)));
        }
        for value in [0usize, 1, 4096, usize::MAX / 2, 0xffff_8000_0000_0000] {
            assert_eq!(decode_result(encode_result(Ok(value))), Ok(value));
        }
    }

    #[test]
    fn syscall_numbers_decode() {
        for s in Syscall::ALL {
            assert_eq!(Syscall::from_number(s as usize), Some(s));
        }
        assert_eq!(Syscall::from_number(9999), None);
    }
}
