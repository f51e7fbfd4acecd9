//! Tsumugi user programs live in `src/bin/`; this library holds what they share.
#![no_std]

#[cfg(target_os = "none")]
extern crate alloc;

/// Start of the kernel image in the single address space: a kernel address user code must never
/// reach (the isolation tests aim at it).
pub const KERNEL_ADDRESS: usize = 0xffff_ffff_8000_0000;

/// The two programs of the space-sharing test (`share_long` + `share_short`).
pub mod space_share {
    /// Where `share_long` says its workers run (the short program then registers beside it).
    pub const LONG_READY: usize = 0x5353_0001;
    /// vCPUs each program asks for.
    pub const VCPUS: usize = 4;

    /// One round of a worker's work: a value that depends only on `(worker, round)`, so the
    /// sum of a worker's rounds can be checked afterwards however its rounds were scheduled.
    pub fn round(worker: usize, round: u64) -> u64 {
        let mut x = (worker as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ round;
        for i in 0..500u64 {
            x = core::hint::black_box(x.rotate_left(7).wrapping_mul(31).wrapping_add(i));
        }
        x
    }

    /// The processor allocation's figures (`counters(scope::SHARES)`, indexed by
    /// `tsumugi_abi::stats::shares`: machine-wide counts and the caller's program's share) and
    /// the CPUs it divides; zeros if the call fails.
    #[cfg(target_os = "none")]
    pub fn figures() -> ([u64; libuthread::Counter::COUNT], usize) {
        libuthread::sys::counters(libuthread::scope::SHARES).unwrap_or(([0; libuthread::Counter::COUNT], 0))
    }

    /// The sum of `rounds` rounds of `worker`, computed straight.
    pub fn expected(worker: usize, rounds: u64) -> u64 {
        (0..rounds).fold(0u64, |s, r| s.wrapping_add(round(worker, r)))
    }
}

/// The two halves of the pointer-sharing test.
pub mod share {
    /// Where the reader publishes its thread id (once it accepts the writer's grants).
    pub const READER_KEY: usize = 0x5348_0001;
    /// Where the writer publishes the buffer's address.
    pub const BUFFER_KEY: usize = 0x5348_0002;
    /// Where the reader says it has read the buffer (the writer waits for it before it ends,
    /// since its names go with it).
    pub const DONE_KEY: usize = 0x5348_0003;
    /// Where the writer publishes its thread id (the reader accepts grants from its program).
    pub const WRITER_KEY: usize = 0x5348_0004;
    /// Bytes shared.
    pub const BUFFER_LEN: usize = 3 * 4096;

    /// The byte the writer puts at offset `i`.
    pub fn pattern(i: usize) -> u8 {
        (i.wrapping_mul(31) ^ (i >> 8)) as u8
    }
}

#[cfg(target_os = "none")]
pub mod kn;
#[cfg(target_os = "none")]
pub mod s3_bench;
#[cfg(target_os = "none")]
pub mod share_bench;

/// The name-board authority test (`name_owner+name_thief`).
pub mod names {
    /// The name the owner publishes and the thief tries to take over.
    pub const OWNED_KEY: usize = 0x4e41_0001;
    /// The owner's value under it.
    pub const OWNED_VALUE: usize = 0x0123_4567;
    /// Where the thief says it is done (the owner ends then).
    pub const DONE_KEY: usize = 0x4e41_0002;
    /// First of the keys the thief fills its quota with.
    pub const FILL_BASE: usize = 0x4e41_1000;
}

/// The exhaustion test (`exhaust+exhaust_victim`, issue 15 item 3).
pub mod exhaust {
    /// Where the attacker says it holds every resource it could get (value: its live threads).
    pub const PEAK_KEY: usize = 0x4558_0001;
    /// Where the victim says it did its work meanwhile.
    pub const VICTIM_DONE_KEY: usize = 0x4558_0002;
    /// Where the attacker says it saw the victim's name (the victim's names go when it ends).
    pub const ACK_KEY: usize = 0x4558_0003;
}

/// The grant/revoke authority test (`grabber+grab_victim`, issue 15 items 1 and 8).
pub mod grab {
    /// The attacker's thread id (once it accepts the victim's grants).
    pub const ATTACKER_TID_KEY: usize = 0x4752_0001;
    /// The victim's main thread id (set once it granted the attacker read rights on its region).
    pub const VICTIM_TID_KEY: usize = 0x4752_0002;
    /// The victim's region the attacker may read.
    pub const VICTIM_REGION_KEY: usize = 0x4752_0003;
    /// The victim's other thread (a view-mate of its main thread).
    pub const VICTIM_MATE_KEY: usize = 0x4752_0004;
    /// The attacker is done.
    pub const ATTACKER_DONE_KEY: usize = 0x4752_0005;
    /// The victim's main thread id, published first (the attacker accepts grants from it).
    pub const VICTIM_FIRST_KEY: usize = 0x4752_0006;
    /// The word the victim's region starts with.
    pub const PATTERN: usize = 0x5eed_f00d;
}

/// The grant-consent test (`grant_victim+grant_pusher`, issue 15 items 1 and 8): another
/// program's grant needs the target program's consent (`grant_allow`).
pub mod grant_consent {
    /// The victim's main thread id.
    pub const VICTIM_TID_KEY: usize = 0x4743_0001;
    /// The victim's other thread (a view-mate of its main thread).
    pub const VICTIM_MATE_KEY: usize = 0x4743_0002;
    /// The pusher's thread id.
    pub const PUSHER_TID_KEY: usize = 0x4743_0003;
    /// The pusher tried without the victim's consent.
    pub const REFUSED_KEY: usize = 0x4743_0004;
    /// The victim accepts the pusher's grants now.
    pub const ALLOWED_KEY: usize = 0x4743_0005;
    /// The pusher's grant went through (value: the region's address).
    pub const GRANTED_KEY: usize = 0x4743_0006;
    /// The victim no longer accepts them.
    pub const WITHDRAWN_KEY: usize = 0x4743_0007;
    /// The pusher tried again after the withdrawal (value: the region it tried to push).
    pub const DONE_KEY: usize = 0x4743_0008;
    /// The victim has checked everything (the pusher, whose names the victim reads, ends then).
    pub const ACK_KEY: usize = 0x4743_0009;
    /// The word the pusher's regions start with.
    pub const PUSHED: usize = 0x9054_ed00;
    /// The word the victim's own region starts with.
    pub const OWN: usize = 0x0bad_cafe;
}

/// Revocation that holds when the call returns (`revoke_sync+revoke_sync_target`, issue 15
/// item 2).
pub mod revoke_sync {
    /// The target's thread id (it runs pinned to another CPU than the owner's), once it
    /// accepts the owner's grants.
    pub const TARGET_TID_KEY: usize = 0x5253_0001;
    /// The owner's thread id (the target accepts grants from its program).
    pub const OWNER_TID_KEY: usize = 0x5253_0003;
    /// The owner's region the target writes.
    pub const REGION_KEY: usize = 0x5253_0002;
}

/// The fuzzer and the victim beside it (`fuzz_victim+fuzz`).
pub mod fuzz {
    /// Published by the fuzzer before it starts; gone when it ends (names go with their program).
    pub const RUNNING_KEY: usize = 0x465a_0001;
}

/// What the two halves of the stress test (`stress+stress_kernel`) share.
pub mod stress {
    /// Seed of every choice (threads derive theirs from it and an index); printed for replay.
    pub const SEED: u64 = 0x7375_6d75_6769_2d31;

    /// A 64-bit xorshift generator: cheap and reproducible.
    pub struct Rng(u64);

    impl Rng {
        /// The generator of `stream` under [`SEED`] (splitmix64 of both, never 0).
        pub fn new(stream: u64) -> Rng {
            let mut z = SEED ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            Rng((z ^ (z >> 31)) | 1)
        }

        /// The next value.
        pub fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        /// A value below `n` (`n` > 0).
        pub fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }
}

/// The cross-program S3 test (`s3_waiter+s3_holder`): the waiter makes a region, grants it to
/// the holder's thread and publishes it; the layout below lies at its start.
#[cfg(target_os = "none")]
pub mod s3 {
    use core::sync::atomic::AtomicUsize;
    use libuthread::sync::{SharedBarrier, SharedMutex};

    /// Where the holder publishes its thread id (once it accepts the waiter's grants).
    pub const HOLDER_TID_KEY: usize = 0x5333_0001;
    /// Where the waiter publishes its thread id (the holder accepts grants from its program).
    pub const WAITER_TID_KEY: usize = 0x5333_0005;
    /// Where the waiter publishes the shared region's address.
    pub const REGION_KEY: usize = 0x5333_0002;
    /// Where the holder says it holds both locks.
    pub const HOLDING_KEY: usize = 0x5333_0003;
    /// Where the waiter says the holder may end.
    pub const END_KEY: usize = 0x5333_0004;
    /// Threads of each program at the shared barrier.
    pub const BARRIER_THREADS: usize = 4;
    /// Rounds of the shared barrier.
    pub const BARRIER_ROUNDS: usize = 20;
    /// What the holder leaves in `handed` before it releases it.
    pub const HANDED_VALUE: u64 = 0x5151;

    /// The value of the S3 word (lock or barrier) at `at`.
    pub fn word(at: usize) -> u64 {
        // SAFETY: callers pass the `word()` of a live `SharedMutex`/`SharedBarrier`, an
        // `AtomicU64`.
        unsafe { (*(at as *const core::sync::atomic::AtomicU64)).load(core::sync::atomic::Ordering::Acquire) }
    }

    /// Yields until `cond` holds (what the other side does is bounded; the suite's timeout
    /// catches a hang).
    pub fn until(cond: impl Fn() -> bool) {
        while !cond() {
            libuthread::yield_now();
        }
    }

    /// The shared region's layout.
    #[repr(C)]
    pub struct Shared {
        /// Handed over by the holder while the waiter waits in the kernel.
        pub handed: SharedMutex<u64>,
        /// Held by the holder when its program ends.
        pub orphaned: SharedMutex<u64>,
        /// Both programs' threads, `BARRIER_ROUNDS` rounds.
        pub rounds: SharedBarrier,
        /// Arrivals per round.
        pub arrivals: [AtomicUsize; BARRIER_ROUNDS],
        /// A barrier for three: one holder thread waits at it when its program ends.
        pub broken: SharedBarrier,
    }
}

/// The cross-program signal test (`signal_victim+signal_sender`): who may signal whom.
pub mod signal_test {
    /// Where the victim publishes one of its kernel threads (its first).
    pub const VICTIM_TID_KEY: usize = 0x5347_0001;
    /// Where the sender publishes its thread id.
    pub const SENDER_TID_KEY: usize = 0x5347_0002;
    /// The sender has tried without the victim's consent.
    pub const REFUSED_KEY: usize = 0x5347_0003;
    /// The victim accepts signals from the sender now.
    pub const ALLOWED_KEY: usize = 0x5347_0004;
    /// The victim no longer accepts them.
    pub const DENIED_KEY: usize = 0x5347_0005;
    /// The sender has tried once more after the denial.
    pub const DONE_KEY: usize = 0x5347_0006;
    /// Signals the sender sends once allowed.
    pub const ALLOWED_SENDS: usize = 2;
}
