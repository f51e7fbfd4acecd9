//! Words of S3 synchronisation shared between programs (seed 002; ARCHITECTURE.md "Shared
//! locks and barriers"): the layout both the kernel and the library read.
//!
//! # Lock word (`u64`, 8-byte aligned, in memory the caller may write)
//! `0` is free; otherwise the holder's tag (its libuthread thread id, a ThMB address, so
//! never odd) with [`WAITERS`] set once the kernel queued a waiter. Acquire: one user-mode
//! compare-exchange `0 -> tag`; on failure `s3_lock`, which queues the caller and returns only
//! once the kernel wrote the caller's tag into the word (Auto Lock). Release: compare-exchange
//! `tag -> 0`; only if that fails (the waiters bit is set) `s3_unlock`. A release with no
//! waiter never enters the kernel.

/// Set in a lock word while the kernel holds waiters for it.
pub const WAITERS: u64 = 1;

/// What `s3_lock` returns when the previous holder's program ended holding the lock (the
/// caller owns it now; what it guards may be half-updated).
pub const OWNER_DIED: usize = 1;

/// What `s3_lock`, `s3_wait` and `s3_barrier` answer when given the calling user thread's ThMB
/// (their last argument) on a Kernel-Notification vCPU and the caller must wait: the kernel
/// queued that thread and returned at once, with no `BLOCKED` and nothing saved; the library
/// parks the thread itself and makes it ready at `UNBLOCKED(thmb)` with
/// `kn::UNBLOCKED_QUEUED`, whose `arg0` is the wait's real result. Never a wait's result.
pub const QUEUED: usize = 2;

/// The most participants a shared barrier may have: more than the threads that can exist
/// (1,024 alive per program, 64 programs' worth); a larger `count` is `EINVAL`.
pub const MAX_BARRIER_COUNT: usize = 1 << 16;

/// Barrier word layout (`u64`): arrivals of this round in bits 0..32, [`barrier::SLEEPERS`],
/// [`barrier::BROKEN`], the round (generation) above.
pub mod barrier {
    /// Mask of the arrival count.
    pub const ARRIVED: u64 = 0xffff_ffff;
    /// Set by the kernel when it queued a sleeper: the last arrival must call `s3_wake`.
    pub const SLEEPERS: u64 = 1 << 32;
    /// Set by the kernel when a program ended while one of its threads waited here: every
    /// later wait fails with `ESRCH`.
    pub const BROKEN: u64 = 1 << 33;
    /// One round (generation) step.
    pub const ROUND: u64 = 1 << 34;
}
