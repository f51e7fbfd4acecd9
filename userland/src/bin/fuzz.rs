//! The in-guest syscall fuzzer (issue 15, item 6): several threads issue random syscalls with
//! edge-value arguments — 0, −1, both sides of every boundary of the user half, non-canonical
//! and kernel addresses, own and foreign thread ids and regions, huge lengths, Kernel
//! Notification registration records with every field wrong — from a deterministic PRNG whose
//! seed is printed for replay (`cargo xtask fuzz --arch A --calls N --seed S`). The kernel
//! passes when it neither panics nor hangs and gives every resource back (the suite checks the
//! group's frame and heap balance); the program itself only checks that every answer is a
//! value or a known error code.
//!
//! What would wreck the fuzzer itself is never fuzzed blindly: `exit` and `thread_exit` are
//! called deliberately at the end; calls that write user memory or change rights only get
//! pointers that are invalid or inside the fuzzer's own sacrificial regions (never its image,
//! stacks or stack pool); a new thread either has bad arguments or runs a function that exits at
//! once; joins never target a thread that might not end; a console read only gets arguments that
//! fail before it blocks; a signal that would end a program by default goes only to other
//! programs' threads (which never accepted the fuzzer's: `EPERM`) or to no thread. At the end, helper threads blocked in every way the kernel offers
//! (sleeping for ever, reading the console, joining, spinning, waiting on an S3 word) are killed by the program's
//! `exit`: teardown must finish.
//!
//! The call count and seed come from the build (`TSUMUGI_FUZZ_CALLS`, `TSUMUGI_FUZZ_SEED`,
//! set by `cargo xtask fuzz`); the suite uses the defaults below.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use libuthread::{println, sys};
use tsumugi_abi::kn::{Registration, MAX_VCPUS};
use tsumugi_abi::syscall::{region_flags, rights, Errno, Syscall, ViewEntry};

/// Calls when the build does not say (what `cargo xtask test` runs).
const DEFAULT_CALLS: u64 = 100_000;
/// Seed when the build does not say.
const DEFAULT_SEED: u64 = 0x7375_6d75_6769_0015;
/// Fuzzing threads.
const WORKERS: usize = 4;

/// Parses a decimal or `0x` hexadecimal number at compile time.
const fn parse(s: Option<&str>, default: u64) -> u64 {
    let Some(s) = s else { return default };
    let b = s.as_bytes();
    let (mut i, radix) = if b.len() > 2 && b[0] == b'0' && (b[1] == b'x' || b[1] == b'X') { (2, 16) } else { (0, 10) };
    if i == b.len() {
        return default;
    }
    let mut v: u64 = 0;
    while i < b.len() {
        let d = match b[i] {
            c @ b'0'..=b'9' => (c - b'0') as u64,
            c @ b'a'..=b'f' => (c - b'a' + 10) as u64,
            c @ b'A'..=b'F' => (c - b'A' + 10) as u64,
            b'_' => {
                i += 1;
                continue;
            }
            _ => return default,
        };
        if d >= radix {
            return default;
        }
        v = v.wrapping_mul(radix).wrapping_add(d);
        i += 1;
    }
    v
}

const CALLS: u64 = parse(option_env!("TSUMUGI_FUZZ_CALLS"), DEFAULT_CALLS);
/// A progress line (`fuzz: progress N/CALLS calls`) every this many calls: a tenth of the run,
/// at most a million (`cargo xtask fuzz` kills a run whose progress stops).
const PROGRESS_EVERY: u64 = {
    let tenth = CALLS / 10;
    if tenth == 0 {
        1
    } else if tenth > 1_000_000 {
        1_000_000
    } else {
        tenth
    }
};
const SEED: u64 = parse(option_env!("TSUMUGI_FUZZ_SEED"), DEFAULT_SEED);

// The layout of the single address space, the same on every port (`arch::*::layout`).
const USER_START: usize = 0x0000_0000_4000_0000;
const USER_END: usize = 0x0000_7fff_ffe0_0000;
const KERNEL_HALF: usize = 0xffff_8000_0000_0000;
#[cfg(target_arch = "riscv64")]
const KERNEL_BASE: usize = 0xffff_ffff_0000_0000;
#[cfg(not(target_arch = "riscv64"))]
const KERNEL_BASE: usize = 0xffff_ffff_8000_0000;
const MMIO: usize = 0xffff_8080_0000_0000;
const KERNEL_STACKS: usize = 0xffff_8100_0000_0000;
const PAGE: usize = 4096;

/// Addresses at every boundary the kernel must check (each is also tried ±1 and ±a word).
const EDGE_ADDRESSES: [usize; 22] = [
    0,
    PAGE,
    USER_START - PAGE,
    USER_START,
    USER_START + PAGE,
    USER_END - PAGE,
    USER_END,
    USER_END + PAGE,
    0x0000_7fff_ffff_f000, // last page below the canonical hole
    0x0000_8000_0000_0000, // first non-canonical address (48-bit)
    0x0001_0000_0000_0000,
    0x0000_ffff_ffff_f000,
    0x8000_0000_0000_0000,
    0xffff_7fff_ffff_f000, // last non-canonical page
    KERNEL_HALF,
    MMIO,
    KERNEL_STACKS,
    KERNEL_BASE,
    KERNEL_BASE + 0x10_0000,
    0xffff_ffff_ffff_f000,
    usize::MAX - 7,
    usize::MAX,
];

/// Lengths at every boundary (pages, the largest region, the user half, wrap-around).
const EDGE_LENGTHS: [usize; 18] = [
    0,
    1,
    7,
    8,
    PAGE - 1,
    PAGE,
    PAGE + 1,
    2 * PAGE,
    1 << 20,
    (1 << 32) - 1,
    1 << 32,
    (1 << 32) + 1,
    1 << 40,
    1 << 47,
    usize::MAX / 2,
    usize::MAX - PAGE + 1,
    usize::MAX - 1,
    usize::MAX,
];

/// Numbers no syscall has (or will soon have).
const BOGUS_NUMBERS: [usize; 7] = [29, 30, 64, 255, 0x7777, 1 << 32, usize::MAX];

/// What a registration's ring may point to: ring headers in read-only memory, with a
/// capacity that is wrong (0, not a power of two, too large) or right (then the ring is not
/// writable). Never a ring the kernel would accept, so `kn_register` never succeeds.
static BAD_RINGS: [[u64; 4]; 4] = [[0, 0, 0, 0], [0, 0, 3, 0], [0, 0, 1 << 40, 0], [0, 0, 64, 0]];

/// A line a well-formed console write prints.
static LINE: &[u8] = b"fuzz: a well-formed console write\n";

/// Sacrificial regions: made by the fuzzer for the fuzzer, granted, revoked and written into
/// by syscalls at will (nothing of the program lives in them).
const SACRIFICIAL: usize = 4;
static REGIONS: [AtomicUsize; SACRIFICIAL] = [const { AtomicUsize::new(0) }; SACRIFICIAL];
static REGION_LENS: [usize; SACRIFICIAL] = [2 * PAGE, 64 * 1024, PAGE, PAGE];

/// The regions present before the sacrificial ones (image, stack, stack pool): never handed
/// to a syscall that writes or changes rights.
const MAX_PRECIOUS: usize = 32;
static PRECIOUS: [(AtomicUsize, AtomicUsize); MAX_PRECIOUS] = [const { (AtomicUsize::new(0), AtomicUsize::new(0)) }; MAX_PRECIOUS];

/// Thread ids: the program's own long-lived threads (workers, helpers) and short ones that end
/// at once (the only ones a join may wait for).
const MAX_OWN: usize = 16;
static OWN: [AtomicUsize; MAX_OWN] = [const { AtomicUsize::new(0) }; MAX_OWN];
static OWN_COUNT: AtomicUsize = AtomicUsize::new(0);
const MAX_SHORT: usize = 64;
static SHORT: [AtomicUsize; MAX_SHORT] = [const { AtomicUsize::new(0) }; MAX_SHORT];
/// Short threads the fuzzer may still make (their stacks come from one pool region; see
/// `sys::spawn`).
static SHORT_BUDGET: AtomicUsize = AtomicUsize::new(600);
/// The first thread id of this program (ids below are other programs' or the kernel's).
static FIRST_TID: AtomicUsize = AtomicUsize::new(0);

/// Calls made, results by kind.
static CALLS_MADE: AtomicU64 = AtomicU64::new(0);
static OK: AtomicU64 = AtomicU64::new(0);
/// Errors by `Errno` value (index 0: a code the library does not know — a failure).
static ERRORS: [AtomicU64; 10] = [const { AtomicU64::new(0) }; 10];
/// Calls by syscall number (the last slot: unknown numbers).
static BY_CALL: [AtomicU64; 41] = [const { AtomicU64::new(0) }; 41];

/// splitmix64: small, deterministic, good enough to pick arguments.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len())]
    }

    /// A boundary address, nudged by nothing, ±1 or ±8.
    fn edge_address(&mut self) -> usize {
        let a = self.pick(&EDGE_ADDRESSES);
        match self.below(5) {
            0 => a.wrapping_sub(1),
            1 => a.wrapping_add(1),
            2 => a.wrapping_sub(8),
            3 => a.wrapping_add(8),
            _ => a,
        }
    }

    /// An address in or at the edges of a sacrificial region.
    fn sacrificial_address(&mut self) -> usize {
        let i = self.below(SACRIFICIAL);
        let (start, len) = (REGIONS[i].load(Ordering::Relaxed), REGION_LENS[i]);
        let offsets = [0, 8, len / 2, len - 8, len - 1, len, len + PAGE];
        start.wrapping_add(self.pick(&offsets)).wrapping_sub(if self.chance(8) { 1 } else { 0 })
    }

    /// A pointer a syscall may write through or change rights on: a sacrificial-region
    /// address, a boundary one (unless it falls in the program's own memory), or random bits.
    fn target_address(&mut self) -> usize {
        let a = match self.below(3) {
            0 => self.sacrificial_address(),
            1 => self.edge_address(),
            _ => self.next() as usize,
        };
        if precious(a) {
            KERNEL_BASE
        } else {
            a
        }
    }

    fn length(&mut self) -> usize {
        if self.chance(4) {
            self.next() as usize >> self.below(64)
        } else {
            self.pick(&EDGE_LENGTHS)
        }
    }

    /// A number for a selector or small argument: small values, edges, random bits.
    fn small(&mut self) -> usize {
        match self.below(4) {
            0 => self.below(70),
            1 => self.pick(&[usize::MAX, usize::MAX - 1, 1 << 31, 1 << 32, 1 << 63]),
            2 => self.next() as usize,
            _ => self.below(8),
        }
    }

    /// A thread id: own (self, siblings, helpers, short ones), other programs' and the kernel's
    /// (below this program's first id), unused, or nonsense.
    fn thread_id(&mut self) -> usize {
        let first = FIRST_TID.load(Ordering::Relaxed);
        match self.below(6) {
            0 => sys::thread_self(),
            1 => OWN[self.below(OWN_COUNT.load(Ordering::Relaxed).max(1))].load(Ordering::Relaxed),
            2 => SHORT[self.below(MAX_SHORT)].load(Ordering::Relaxed),
            3 => self.below(first.max(1)),
            4 => first + 100_000 + self.below(1000),
            _ => self.pick(&[0, usize::MAX, 1 << 32, (1 << 63) + 1]),
        }
    }

    /// A thread id a join may wait on: never one that might not end.
    fn joinable_id(&mut self) -> usize {
        let first = FIRST_TID.load(Ordering::Relaxed);
        match self.below(5) {
            0 => sys::thread_self(),
            1 | 2 => SHORT[self.below(MAX_SHORT)].load(Ordering::Relaxed),
            3 => self.below(first.max(1)),
            _ => self.pick(&[0, usize::MAX, 1 << 32, first + 100_000]),
        }
    }

    fn rights(&mut self) -> usize {
        match self.below(3) {
            0 => self.below(8),
            1 => self.pick(&[rights::READ, rights::READ | rights::WRITE]),
            _ => self.small(),
        }
    }
}

/// Whether `a` lies in one of the program's own regions other than the sacrificial ones.
fn precious(a: usize) -> bool {
    PRECIOUS.iter().any(|(s, l)| {
        let (s, l) = (s.load(Ordering::Relaxed), l.load(Ordering::Relaxed));
        l != 0 && a >= s && a - s < l
    })
}

/// Whether `[a, a+len)` could be a valid user buffer of the program (a console read there
/// would block; a console write would print it).
fn maybe_valid(a: usize, len: usize) -> bool {
    len != 0 && len < (1 << 33) && (USER_START..USER_END).contains(&a)
}

/// A function a short thread runs: it ends at once.
fn short_thread(arg: usize) -> usize {
    arg
}

/// Counts a call made, printing a progress line at every [`PROGRESS_EVERY`]th.
fn count_call() {
    let n = CALLS_MADE.fetch_add(1, Ordering::Relaxed) + 1;
    if n % PROGRESS_EVERY == 0 {
        println!("fuzz: progress {n}/{CALLS} calls");
    }
}

/// Issues one call and counts its result.
fn call(number: usize, args: [usize; 6]) -> sys::SysResult {
    let r = sys::call(number, args);
    count_call();
    BY_CALL[number.min(BY_CALL.len() - 1)].fetch_add(1, Ordering::Relaxed);
    match r {
        Ok(_) => OK.fetch_add(1, Ordering::Relaxed),
        Err(None) => ERRORS[0].fetch_add(1, Ordering::Relaxed),
        Err(Some(e)) => ERRORS[(e as usize).min(ERRORS.len() - 1)].fetch_add(1, Ordering::Relaxed),
    };
    r
}

/// One random syscall.
fn one(rng: &mut Rng) {
    use Syscall as S;
    let n = |s: Syscall| s as usize;
    match rng.below(29) {
        0 => {
            // Console write: pointers that must fail, any length; an empty write anywhere; a
            // well-formed line now and then. Never a valid buffer of unknown contents.
            let (mut a, mut len) = (rng.edge_address(), rng.length());
            if rng.chance(3) {
                a = rng.sacrificial_address();
            }
            if rng.chance(500) {
                let _ = call(n(S::ConsoleWrite), [LINE.as_ptr() as usize, LINE.len(), 0, 0, 0, 0]);
                return;
            }
            if maybe_valid(a, len) {
                len = if rng.chance(2) { 0 } else { (1 << 33) + rng.below(1 << 20) };
            }
            let _ = call(n(S::ConsoleWrite), [a, len, 0, 0, 0, 0]);
        }
        1 => {
            let _ = call(n(S::Clock), [rng.small(), rng.next() as usize, 0, 0, 0, 0]);
        }
        2 => {
            let _ = call(n(S::Yield), [rng.next() as usize; 6]);
        }
        3 => {
            let nanos = rng.pick(&[0, 1, 1000, 50_000]);
            let _ = call(n(S::Sleep), [nanos, 0, 0, 0, 0, 0]);
        }
        4 => thread_create(rng),
        5 => {
            let _ = call(n(S::ThreadJoin), [rng.joinable_id(), 0, 0, 0, 0, 0]);
        }
        6 => {
            let _ = call(n(S::ThreadSelf), [rng.next() as usize; 6]);
        }
        7 => {
            // Region creation: every length and flag; eager regions stay small so the
            // program's own lazily filled stacks never meet an empty machine.
            let (len, r, mut flags) = (rng.length(), rng.rights(), rng.small());
            if len > 16 * 1024 && len <= 1 << 32 && flags & region_flags::LAZY == 0 && flags & !region_flags::LAZY == 0 {
                flags |= region_flags::LAZY;
            }
            let _ = call(n(S::RegionCreate), [len, r, flags, 0, 0, 0]);
        }
        8 | 9 => {
            if rng.chance(8) {
                // Consent to grants from any program (nobody else grants into the fuzzer).
                let allow = rng.pick(&[0, 1, 2, usize::MAX]);
                let _ = call(n(S::GrantAllow), [rng.thread_id(), allow, 0, 0, 0, 0]);
                return;
            }
            let _ = call(n(S::RegionGrant), [rng.target_address(), rng.rights(), rng.thread_id(), 0, 0, 0]);
        }
        10 | 11 => {
            let _ = call(n(S::RegionRevoke), [rng.target_address(), rng.thread_id(), 0, 0, 0, 0]);
        }
        12 => {
            let max = if rng.chance(2) { rng.below(40) } else { rng.length() };
            let _ = call(n(S::ViewQuery), [rng.target_address(), max, 0, 0, 0, 0]);
        }
        13 => {
            let key = if rng.chance(2) { rng.below(200) } else { rng.next() as usize };
            let _ = call(n(S::Publish), [key, rng.next() as usize, 0, 0, 0, 0]);
        }
        14 => {
            let key = if rng.chance(2) { rng.below(200) } else { rng.next() as usize };
            let _ = call(n(S::Lookup), [key, 0, 0, 0, 0, 0]);
        }
        15 => {
            let random = rng.next() as usize;
            let which = rng.pick(&[0, 1, 2, 3, 4, 7, 8, 64, usize::MAX, usize::MAX - 1, usize::MAX - 2, random]);
            let _ = call(n(S::Counters), [which, rng.target_address(), rng.length(), 0, 0, 0]);
        }
        16 => {
            let _ = call(n(S::CpuId), [rng.next() as usize; 6]);
        }
        17 => {
            // The global affinity switch: set (restored at the end), read, nonsense.
            let random = rng.next() as usize;
            let _ = call(n(S::SchedAffinity), [rng.pick(&[0, 1, usize::MAX, 2, usize::MAX - 1, random]), 0, 0, 0, 0, 0]);
        }
        18 => kn_register(rng),
        19 => {
            // Not a Kernel-Notification program: no vCPU to park.
            let _ = call(n(S::VcpuPark), [rng.next() as usize; 6]);
        }
        20 => {
            let _ = call(n(S::VcpuUnpark), [rng.small(), 0, 0, 0, 0, 0]);
        }
        21 => {
            // LTN: any value, then back to 0 (the value this program runs with).
            let v = if rng.chance(2) { rng.edge_address() } else { rng.next() as usize };
            let _ = call(n(S::SetLtn), [v, 0, 0, 0, 0, 0]);
            // Not counted: restoring is not fuzzing.
            let _ = sys::call(n(S::SetLtn), [0, 0, 0, 0, 0, 0]);
        }
        22 => {
            // Console read only with arguments that fail before it blocks.
            let (a, mut len) = (rng.target_address(), rng.length());
            if maybe_valid(a, len) {
                len = if rng.chance(2) { 0 } else { (1 << 33) + rng.below(1 << 20) };
            }
            let _ = call(n(S::ConsoleRead), [a, len, 0, 0, 0, 0]);
        }
        23 => {
            let number = [S::PerfOpen, S::PerfStart, S::PerfStop, S::PerfRead, S::PerfClose, S::PerfSwitch][rng.below(6)];
            let _ = call(n(number), [rng.small(), rng.next() as usize, 0, 0, 0, 0]);
        }
        24 => {
            let cpu = rng.pick(&[0, 1, 2, 3, 4, 7, 8, 64, usize::MAX, usize::MAX - 1]);
            let _ = call(n(S::ThreadPin), [cpu, 0, 0, 0, 0, 0]);
        }
        25 => {
            let _ = call(rng.pick(&BOGUS_NUMBERS), [rng.next() as usize; 6]);
        }
        26 => s3(rng),
        27 => signal(rng),
        _ => {
            // Random bits everywhere, on the calls that only read their arguments.
            let number = rng.pick(&[S::Clock, S::ThreadSelf, S::CpuId, S::Lookup, S::VcpuUnpark, S::PerfRead, S::PerfClose]);
            let _ = call(n(number), [rng.next() as usize; 6]);
        }
    }
}

/// The signal calls. Any thread id, scope and number, except what would end the fuzzer: a
/// number that ends a program by default (or KILL) goes only to ids that are not the fuzzer's
/// own (other programs refuse it: nobody accepted the fuzzer; kernel threads and unused ids are
/// `ESRCH`). The fuzzer has no Kernel Notification, so a user-thread scope is always `EINVAL`.
fn signal(rng: &mut Rng) {
    use tsumugi_abi::signal::{default_action, scope, Action, FIRST_FREE, KILL, MAX};
    use Syscall as S;
    let n = |s: Syscall| s as usize;
    if rng.chance(4) {
        let allow = rng.pick(&[0, 1, 2, usize::MAX]);
        let _ = call(n(S::SignalAllow), [rng.thread_id(), allow, 0, 0, 0, 0]);
        return;
    }
    let random = rng.next() as usize;
    let target = if rng.chance(3) { rng.edge_address() } else { rng.thread_id() };
    let number = rng.pick(&[0, 1, 2, KILL, 15, 17, FIRST_FREE, MAX, MAX + 1, usize::MAX, random]);
    let scope = rng.pick(&[scope::THREAD, scope::PROGRAM, scope::UTHREAD, 3, random]);
    let first = FIRST_TID.load(Ordering::Relaxed);
    // Ids from this program's first one up (its own threads, and unused ones above) could be
    // its own: only numbers it ignores go there, or numbers out of range.
    let own = target >= first;
    let ends = default_action(number) == Some(Action::End);
    let number = if own && ends && (scope == scope::THREAD || scope == scope::PROGRAM) { FIRST_FREE + rng.below(MAX - FIRST_FREE + 1) } else { number };
    let _ = call(n(S::Signal), [target, number, scope, 0, 0, 0]);
}

/// Each worker's own S3 word: only it touches it, so it knows the value and never waits.
static S3_WORDS: [AtomicU64; WORKERS] = [const { AtomicU64::new(0) }; WORKERS];
/// The workers' thread ids, by index (whose S3 word a worker uses).
static WORKER_TIDS: [AtomicUsize; WORKERS] = [const { AtomicUsize::new(0) }; WORKERS];

/// The S3 calls. Addresses that must fail (edges, kernel, read-only, unaligned, sacrificial
/// words, random bits) get any argument; a valid word is only the worker's own one, with
/// arguments that cannot wait (a lock under its own tag, a wait or barrier for a value the word
/// does not hold, counts of 0 or too large) — a waiter there would never be woken.
fn s3(rng: &mut Rng) {
    use Syscall as S;
    let n = |s: Syscall| s as usize;
    let me = sys::thread_self();
    let index = WORKER_TIDS.iter().position(|t| t.load(Ordering::Relaxed) == me).unwrap_or(0);
    let own = S3_WORDS[index].as_ptr() as usize;
    let mine = (me + 1) * 64;
    let bad = loop {
        let a = match rng.below(4) {
            0 => rng.edge_address(),
            1 => rng.target_address(),
            2 => own + 1 + rng.below(7),
            _ => rng.next() as usize,
        };
        // Only addresses the kernel must refuse (a sacrificial word could hold anything and
        // make a waiter wait for ever): outside the user half, unaligned, or read-only.
        let read_only = REGIONS[2].load(Ordering::Relaxed);
        if a % 8 != 0 || !(USER_START..USER_END).contains(&a) || a.wrapping_sub(read_only) < REGION_LENS[2] {
            break a;
        }
    };
    let word = if rng.chance(2) { bad } else { own };
    // SAFETY: `own` is this program's static word.
    let value = unsafe { (*(own as *const AtomicU64)).load(Ordering::Acquire) } as usize;
    match rng.below(5) {
        0 => {
            let random = rng.next() as usize;
            let tag = if word == own { mine } else { rng.pick(&[0, 1, mine, usize::MAX, random]) };
            // Any ThMB (the third argument): the call cannot wait, so nothing is ever posted.
            let _ = call(n(S::S3Lock), [word, tag, rng.pick(&[0, random]), 0, 0, 0]);
        }
        1 => {
            let random = rng.next() as usize;
            let tag = rng.pick(&[0, 1, mine, mine + 64, usize::MAX, random]);
            let _ = call(n(S::S3Unlock), [word, tag, 0, 0, 0, 0]);
        }
        2 => {
            let expected = if word == own { value ^ (1 + rng.below(1 << 20)) } else { rng.next() as usize };
            let thmb = rng.next() as usize;
            let _ = call(n(S::S3Wait), [word, expected, rng.pick(&[0, thmb]), 0, 0, 0]);
        }
        3 => {
            let _ = call(n(S::S3Wake), [word, rng.small(), 0, 0, 0, 0]);
        }
        _ => {
            let count = rng.pick(&[0, tsumugi_abi::s3::MAX_BARRIER_COUNT + 1, usize::MAX, 1, 2, 3]);
            let expected = if word == own && (1..=tsumugi_abi::s3::MAX_BARRIER_COUNT).contains(&count) { value ^ (1 + rng.below(1 << 20)) } else { rng.next() as usize };
            let thmb = rng.next() as usize;
            let _ = call(n(S::S3Barrier), [word, expected, count, rng.pick(&[0, thmb]), 0, 0]);
        }
    }
}

/// `thread_create`: bad entries, stacks and flags (refused), or a real thread that ends at once.
fn thread_create(rng: &mut Rng) {
    let number = Syscall::ThreadCreate as usize;
    if rng.chance(4) && SHORT_BUDGET.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1)).is_ok() {
        count_call();
        BY_CALL[number].fetch_add(1, Ordering::Relaxed);
        match sys::spawn(short_thread, rng.next() as usize, PAGE, rng.chance(2)) {
            Ok(t) => {
                OK.fetch_add(1, Ordering::Relaxed);
                SHORT[rng.below(MAX_SHORT)].store(t, Ordering::Relaxed);
            }
            Err(Some(e)) => {
                ERRORS[(e as usize).min(ERRORS.len() - 1)].fetch_add(1, Ordering::Relaxed);
            }
            Err(None) => {
                ERRORS[0].fetch_add(1, Ordering::Relaxed);
            }
        }
        return;
    }
    // Something is always wrong: the entry, the stack or the flags.
    let good_entry = short_thread as *const () as usize;
    let (mut entry, mut stack, mut flags) = (good_entry, rng.sacrificial_address(), rng.below(2));
    match rng.below(3) {
        0 => {
            let kernel = KERNEL_HALF + rng.below(1 << 30);
            entry = rng.pick(&[KERNEL_HALF, KERNEL_BASE, usize::MAX, 0x8000_0000_0000_0000, kernel]);
        }
        1 => stack = rng.pick(&[KERNEL_HALF, KERNEL_BASE, usize::MAX, 0xffff_ffff_ffff_f000]),
        _ => flags = rng.pick(&[2, 3, 4, 0x100, usize::MAX, 1 << 63]),
    }
    let _ = call(number, [entry, stack, rng.next() as usize, flags, 0, 0]);
}

/// `kn_register` with a record where something is always wrong (so the program never becomes
/// a Kernel-Notification program), or a pointer that is.
fn kn_register(rng: &mut Rng) {
    let number = Syscall::KnRegister as usize;
    if rng.chance(4) {
        let _ = call(number, [rng.target_address(), 0, 0, 0, 0, 0]);
        return;
    }
    let any = |rng: &mut Rng| match rng.below(4) {
        0 => rng.edge_address(),
        1 => rng.sacrificial_address(),
        2 => short_thread as *const () as usize,
        _ => rng.next() as usize,
    };
    let mut reg = Registration { handler: any(rng) as u64, ring: any(rng) as u64, upcall_stacks: any(rng) as u64, vcpus: rng.below(MAX_VCPUS + 2) as u64, fp_live: any(rng) as u64 };
    match rng.below(3) {
        // The vCPU count.
        0 => reg.vcpus = rng.pick(&[0, MAX_VCPUS + 1, 1 << 32, usize::MAX]) as u64,
        // A handler that is not executable.
        1 => {
            let a = rng.target_address();
            reg.handler = a as u64;
        }
        // A good handler and vCPU count, and a ring that is read-only or malformed.
        _ => {
            reg.handler = short_thread as *const () as usize as u64;
            reg.vcpus = 1 + rng.below(MAX_VCPUS) as u64;
            reg.ring = if rng.chance(2) { BAD_RINGS.as_ptr().wrapping_add(rng.below(BAD_RINGS.len())) as u64 } else { rng.edge_address() as u64 };
        }
    }
    let _ = call(number, [&reg as *const Registration as usize, 0, 0, 0, 0, 0]);
}

/// A fuzzing thread: `arg` is its index.
fn worker(index: usize) -> usize {
    let mut rng = Rng(SEED ^ (index as u64).wrapping_mul(0xa076_1d64_78bd_642f));
    WORKER_TIDS[index].store(sys::thread_self(), Ordering::Relaxed);
    let share = CALLS / WORKERS as u64 + u64::from((index as u64) < CALLS % WORKERS as u64);
    for _ in 0..share {
        one(&mut rng);
    }
    // Unpin, so the end does not depend on where the last pin left it.
    let _ = sys::thread_pin(None);
    0
}

/// Helpers that block for ever in every way the kernel offers; the program's `exit` must end
/// them.
fn sleep_forever(_: usize) -> usize {
    let _ = sys::sleep_nanos(u64::MAX);
    1
}
fn read_forever(_: usize) -> usize {
    let mut buf = [0u8; 16];
    let _ = sys::console_read(&mut buf);
    // Input may arrive (an interactive run); then read on.
    loop {
        let _ = sys::console_read(&mut buf);
    }
}
static FOREVER: AtomicUsize = AtomicUsize::new(0);
fn join_forever(_: usize) -> usize {
    let _ = sys::thread_join(FOREVER.load(Ordering::Acquire));
    1
}
/// Never woken: only this helper knows the word.
static S3_FOREVER: AtomicU64 = AtomicU64::new(0);
fn s3_wait_forever(_: usize) -> usize {
    let _ = sys::s3_wait(S3_FOREVER.as_ptr() as usize, 0);
    1
}
fn spin_forever(_: usize) -> usize {
    loop {
        core::hint::spin_loop();
    }
}

fn remember_own(t: usize) {
    let i = OWN_COUNT.fetch_add(1, Ordering::Relaxed);
    if i < MAX_OWN {
        OWN[i].store(t, Ordering::Relaxed);
    } else {
        OWN_COUNT.store(MAX_OWN, Ordering::Relaxed);
    }
}

fn main() -> i32 {
    println!("fuzz: seed {SEED:#x}, {CALLS} calls on {WORKERS} threads (replay: cargo xtask fuzz --arch <arch> --calls {CALLS} --seed {SEED:#x})");
    let me = sys::thread_self();
    FIRST_TID.store(me, Ordering::Relaxed);
    remember_own(me);
    let affinity = sys::sched_affinity(None).unwrap_or(true);
    // The victim beside (if any) works while this name exists; it goes when this program ends.
    let _ = sys::publish(tsumugi_userland::fuzz::RUNNING_KEY, 1);
    // The helpers first (their stacks come from the pool region, which then exists before the
    // regions are recorded as precious).
    let helpers: [fn(usize) -> usize; 5] = [sleep_forever, read_forever, spin_forever, join_forever, s3_wait_forever];
    for (i, h) in helpers.iter().enumerate() {
        match sys::spawn(*h, 0, 16 * 1024, false) {
            Ok(t) => {
                if i == 0 {
                    FOREVER.store(t, Ordering::Release);
                }
                remember_own(t);
            }
            Err(e) => {
                println!("fuzz: FAILED: could not start helper {i}: {e:?}");
                return 1;
            }
        }
    }
    let mut view = [ViewEntry { start: 0, len: 0, rights: 0, kind: 0 }; MAX_PRECIOUS];
    let Ok(count) = sys::view_query(&mut view) else {
        println!("fuzz: FAILED: view query");
        return 1;
    };
    if count > MAX_PRECIOUS {
        println!("fuzz: FAILED: {count} regions at the start");
        return 1;
    }
    for (slot, e) in PRECIOUS.iter().zip(&view[..count]) {
        slot.0.store(e.start as usize, Ordering::Relaxed);
        slot.1.store(e.len as usize, Ordering::Relaxed);
    }
    for (i, r) in REGIONS.iter().enumerate() {
        let (rights, flags) = match i {
            1 => (rights::READ | rights::WRITE, region_flags::LAZY),
            2 => (rights::READ, 0),
            _ => (rights::READ | rights::WRITE, 0),
        };
        match sys::region_create(REGION_LENS[i], rights, flags) {
            Ok(a) => r.store(a, Ordering::Relaxed),
            Err(e) => {
                println!("fuzz: FAILED: could not create sacrificial region {i}: {e:?}");
                return 1;
            }
        }
    }
    let mut workers = [0usize; WORKERS];
    for (i, w) in workers.iter_mut().enumerate() {
        match sys::spawn(worker, i, 64 * 1024, i % 2 == 0) {
            Ok(t) => {
                *w = t;
                remember_own(t);
            }
            Err(e) => {
                println!("fuzz: FAILED: could not start worker {i}: {e:?}");
                return 1;
            }
        }
    }
    for (i, w) in workers.iter().enumerate() {
        if sys::thread_join(*w) != Ok(0) {
            println!("fuzz: FAILED: worker {i} did not end well");
            return 1;
        }
    }
    let _ = sys::sched_affinity(Some(affinity));
    let e = |i: usize| ERRORS[i].load(Ordering::Relaxed);
    println!(
        "fuzz: {} calls, {} ok, errors: EFAULT {}, EINVAL {}, ENOMEM {}, EAGAIN {}, EPERM {}, ESRCH {}, ENOSYS {}, ENOTSUP {}, unknown {}",
        CALLS_MADE.load(Ordering::Relaxed),
        OK.load(Ordering::Relaxed),
        e(Errno::Fault as usize),
        e(Errno::Inval as usize),
        e(Errno::NoMem as usize),
        e(Errno::Again as usize),
        e(Errno::Perm as usize),
        e(Errno::Srch as usize),
        e(Errno::NoSys as usize),
        e(Errno::NotSup as usize),
        e(0)
    );
    let mut per_call = [0u64; 41];
    for (p, c) in per_call.iter_mut().zip(BY_CALL.iter()) {
        *p = c.load(Ordering::Relaxed);
    }
    println!("fuzz: calls by number: {per_call:?}");
    if e(0) != 0 {
        println!("fuzz: FAILED: the kernel returned error codes nobody defined");
        return 1;
    }
    println!("fuzz: done; ending with helpers asleep, reading, joining, spinning and waiting on an S3 word");
    0
}
libuthread::entry!(main);
