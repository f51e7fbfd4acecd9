//! The QEMU test suites, as data: what to boot, how long to wait, and what the log must show.
//!
//! `xtask test` boots each [`Suite`] of an architecture once and judges it with
//! [`crate::check::evaluate`]. Strings the kernel prints come from `tsumugi_abi` where the contract
//! names them; the few that are only conventions of this crate are named constants below.

use std::time::Duration;

use tsumugi_abi::bootopt::{self, Crash};
use tsumugi_abi::exit::{STATUS_KERNEL_PANIC, STATUS_PROGRAM_KILLED};
use tsumugi_abi::log::{self, fault};

/// The guest status of a clean run.
pub const STATUS_SUCCESS: u8 = 0;

/// User program that calls syscalls with bad numbers, arguments and pointers and checks the errors.
pub const PROGRAM_SYSCALL_ERRORS: &str = "syscall_errors";
/// User program that reads kernel memory.
pub const PROGRAM_FAULT_KERNEL_READ: &str = "fault_kernel_read";
/// User program that jumps into its own data.
pub const PROGRAM_FAULT_EXEC_DATA: &str = "fault_exec_data";
/// User program that writes to its own text.
pub const PROGRAM_FAULT_WRITE_TEXT: &str = "fault_write_text";

/// Line `init` prints once it runs in user mode.
pub const INIT_GREETING: &str = "init: hello from ring 3";
/// What each line of the harness's hang probe starts with: what every vCPU was doing when a
/// run passed its time limit, appended to the log (`xtask/src/hang.rs`).
pub const HANG_PROBE: &str = "hang probe: ";
/// The kernel function `crash=hang` spins in, which the hang probe must name.
pub const HANG_FUNCTION: &str = "kernel::boot::crash_on_purpose";

/// Word every kill reason for a page fault starts with (`killed: page fault: ...`).
pub const PAGE_FAULT: &str = "page fault: ";
/// Access word of a faulting read, as the kernel prints it.
pub const ACCESS_READ: &str = "read";
/// Access word of a faulting write.
pub const ACCESS_WRITE: &str = "write";
/// Access word of a faulting instruction fetch.
pub const ACCESS_EXECUTE: &str = "execute";
/// What follows the fault kind in a kill reason: the faulting address, in hex.
pub const FAULT_ADDRESS: &str = " at 0x";

/// What the kernel prints once it brought up the other CPUs, before their number.
pub const CPUS_ONLINE: &str = "cpus online: ";

/// Word the kernel's panic report prints before its frame-pointer backtrace.
pub const BACKTRACE: &str = "backtrace";
/// x86_64 exception vector of a page fault (#PF).
pub const X86_64_PAGE_FAULT_VECTOR: u8 = 14;
/// How the x86_64 exception report names the faulting address register.
pub const X86_64_CR2: &str = "cr2 0x";
/// How the x86_64 exception report names the instruction pointer.
pub const X86_64_RIP: &str = "rip 0x";

/// riscv64 exception code (`scause`) of a load page fault, which `crash=pagefault` causes.
pub const RISCV64_LOAD_PAGE_FAULT_CAUSE: u8 = 13;
/// Its name in the privileged specification, as the riscv64 report prints it.
pub const RISCV64_LOAD_PAGE_FAULT: &str = "load page fault";
/// How the riscv64 exception report names the faulting address register.
pub const RISCV64_STVAL: &str = "stval 0x";
/// How the riscv64 exception report names the instruction pointer.
pub const RISCV64_SEPC: &str = "sepc 0x";

/// aarch64 exception class (`ESR_EL1.EC`) of a data abort taken in the kernel (without a change
/// of exception level), which `crash=pagefault` causes.
pub const AARCH64_DATA_ABORT_CLASS: u8 = 0x25;
/// Its name, as the aarch64 report prints it.
pub const AARCH64_DATA_ABORT: &str = "data abort from EL1";
/// How the aarch64 exception report names the faulting address register (`FAR_EL1`).
pub const AARCH64_FAR: &str = "far 0x";
/// How the aarch64 exception report names the exception return address (`ELR_EL1`).
pub const AARCH64_ELR: &str = "elr 0x";

/// Time limit of the suites that run the self-tests and the test programs.
pub const KERNEL_SUITE_TIMEOUT: Duration = Duration::from_secs(120);
/// Time limit of the suites that crash the kernel on purpose.
pub const CRASH_SUITE_TIMEOUT: Duration = Duration::from_secs(60);
/// Time limit of the suite that hangs on purpose: short, since it always runs out.
pub const HANG_SUITE_TIMEOUT: Duration = Duration::from_secs(8);
/// Kernel-heap bytes a group of programs may leave behind in the kernel's caches (free
/// kernel-stack slots, 72 bytes each, grow with stack churn; run-queue slabs; measured up to
/// about 90 KiB in a second run of `exhaust`); a leaked thread record per thread of the
/// exhaustion test's 4,096 exceeds it.
pub const HEAP_CACHE_SLACK: u64 = 256 * 1024;
/// Number of CPUs of the SMP variant of the kernel suite.
pub const SMP_SUITE_CPUS: u8 = 4;

/// How a suite is expected to end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expected {
    /// The guest reports this status.
    Status(u8),
    /// The guest never ends; the harness stops it at the time limit.
    Timeout,
}

/// One thing a suite's log must show. Each check counts as one (or, for [`Check::SelfTests`],
/// one per self-test) in the test totals.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check {
    /// Every `selftest <name> ...` line is one result, and the `selftest summary:` line must exist
    /// with 0 failed, at least 1 passed, and counts that agree with the lines.
    SelfTests,
    /// The program ran and every run of it exited with `status`.
    DomainExited {
        /// Program name, as in the boot archive.
        program: String,
        /// Expected exit status.
        status: u64,
    },
    /// The program ran and every run of it was killed with a reason containing `reason`.
    DomainKilled {
        /// Program name, as in the boot archive.
        program: String,
        /// Text the kill reason must contain.
        reason: String,
    },
    /// Some line of the log is exactly this text (surrounding blanks ignored).
    LogLine(String),
    /// The log contains this text somewhere.
    LogContains(String),
    /// The kernel's last line says it halts with this status.
    Halting(u64),
    /// The `group <group>: frames free before A, after B` line shows A == B: everything the
    /// programs of that group took was given back.
    GroupFramesBalanced(String),
    /// The `group <group>: heap bytes in use before A, after B` line shows B ≤ A + `slack`:
    /// the kernel heap the programs of that group took came back, up to what the kernel's
    /// caches keep (free kernel-stack slots, run-queue slabs, the live-program list).
    GroupHeapBalanced {
        /// The group, as in `run=`.
        group: String,
        /// Bytes the heap may have grown by.
        slack: u64,
    },
    /// Runs of `program` that were alive at the same time started at different addresses, and
    /// at least two did overlap.
    ConcurrentDistinct(String),
    /// The log has a line starting with `prefix` followed by two numbers `a` and `b` (the first two
    /// numbers after the prefix) with `a < b`; used to assert a measured direction.
    FirstBelowSecond {
        /// Text before the numbers.
        prefix: String,
    },
}

/// One QEMU boot and what it must show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Suite {
    /// Short name, unique within an architecture (also names the log file).
    pub name: &'static str,
    /// Number of CPUs (`-smp`).
    pub smp: u8,
    /// Kernel command line (see `tsumugi_abi::bootopt`).
    pub boot_words: String,
    /// Time limit after which the harness kills QEMU.
    pub timeout: Duration,
    /// How the run must end.
    pub expected: Expected,
    /// What the log must show.
    pub checks: Vec<Check>,
}

/// The suites of an architecture, by its `target_arch` name; `None` if it has none yet.
pub fn for_arch(arch: &str) -> Option<Vec<Suite>> {
    match arch {
        "x86_64" => Some(x86_64()),
        "riscv64" => Some(riscv64()),
        "aarch64" => Some(aarch64()),
        _ => None,
    }
}

/// x86_64 suites whose mechanisms the riscv64 port does not have yet.
pub const RISCV64_NOT_YET_PORTED: &[&str] = &[];

/// x86_64 suites whose mechanisms the aarch64 port does not have yet.
pub const AARCH64_NOT_YET_PORTED: &[&str] = &[];

/// libuthread on Tsumugi: the conformance suite (the one run hosted by `cargo test`) on every
/// CPU as a vCPU, and what needs upcalls: a sleep that keeps its vCPU's other threads running,
/// a never-yielding thread preempted through `PREEMPTED`, a join's `b` run while its `a` blocks
/// in the kernel, and while its `a` spins, and forks preempted inside their list edits.
pub fn uthread_suite(name: &'static str, smp: u8) -> Suite {
    Suite {
        name,
        smp,
        boot_words: format!("{}=uthread_kn,uthread_conformance", bootopt::RUN),
        timeout: KERNEL_SUITE_TIMEOUT,
        expected: Expected::Status(0),
        checks: vec![
            Check::DomainExited { program: "uthread_kn".to_string(), status: 0 },
            Check::LogContains("while the other thread slept in the kernel".to_string()),
            Check::LogContains("beside one that never yields".to_string()),
            Check::LogContains("uthread_kn: a join's a waited in the kernel for its b: Ok(7)".to_string()),
            Check::LogContains("uthread_kn: a join's a spun until its b ran (some spins)".to_string()),
            Check::LogContains("uthread_kn: forks preempted in their list edits ran every b once: true".to_string()),
            Check::DomainExited { program: "uthread_conformance".to_string(), status: 0 },
            Check::LogContains("vCPUs: 0 failed".to_string()),
            Check::Halting(0),
        ],
    }
}

/// FP/SIMD state and the red zone across preemption: SSE computations on many threads (half of
/// them never touching FP) must be bit-exact, with lazy (or `eager`) FP switching.
pub fn fpu_suite(name: &'static str, smp: u8, mode: &str) -> Suite {
    Suite {
        name,
        smp,
        boot_words: format!("{}={mode} {}=fp_threads,redzone", bootopt::FPU, bootopt::RUN),
        timeout: KERNEL_SUITE_TIMEOUT,
        expected: Expected::Status(0),
        checks: vec![
            Check::DomainExited { program: "fp_threads".to_string(), status: 0 },
            Check::LogContains(": 0 wrong results;".to_string()),
            Check::DomainExited { program: "redzone".to_string(), status: 0 },
            Check::Halting(0),
        ],
    }
}

/// Lazy context save under libuthread: threads resumed from FULL frames (timer preemption
/// with every GPR, xmm register and the red zone live; FP state through the ThMB's FP area)
/// and from WINDOW frames (yields) interleave for 1,000,000 switches on two vCPUs with every
/// register checked (`regmix`). A one-tick quantum makes FULL stops frequent.
pub fn lazy_save_suite() -> Suite {
    Suite {
        name: "lazysave",
        smp: 2,
        boot_words: format!("{}=1 {}=regmix", bootopt::QUANTUM, bootopt::RUN),
        timeout: KERNEL_SUITE_TIMEOUT,
        expected: Expected::Status(0),
        checks: vec![
            Check::DomainExited { program: "regmix".to_string(), status: 0 },
            Check::LogContains("0 rounds with wrong registers".to_string()),
            Check::Halting(0),
        ],
    }
}

/// Kernel Notification mechanics without a thread library: LTN forgery (own code, kernel
/// memory), the LTN = 0 critical section, a fault in the handler, a blocking syscall that hands
/// the vCPU back with BLOCKED before UNBLOCKED, and no event lost when the ring is full.
pub fn kn_suite(name: &'static str, smp: u8) -> Suite {
    let killed = |p: &str, reason: &str| Check::DomainKilled { program: p.to_string(), reason: reason.to_string() };
    Suite {
        name,
        smp,
        boot_words: format!("{}=kn_forge,kn_forge_sleep,kn_forge_kernel,kn_ltn0,kn_knh_fault,kn_block,kn_ring,kn_join", bootopt::RUN),
        timeout: KERNEL_SUITE_TIMEOUT,
        expected: Expected::Status(0),
        checks: vec![
            killed("kn_forge", "bad LTN 0x"),
            killed("kn_forge", "may not write a ThMB there"),
            killed("kn_forge_sleep", "may not write a ThMB there"),
            killed("kn_forge_kernel", "not a 64-byte-aligned ThMB address in the user half"),
            Check::DomainExited { program: "kn_ltn0".to_string(), status: 0 },
            killed("kn_knh_fault", "(LTN = 0), so no upcall"),
            Check::DomainExited { program: "kn_block".to_string(), status: 0 },
            Check::LogContains("kn_block: ring for".to_string()),
            Check::DomainExited { program: "kn_ring".to_string(), status: 0 },
            Check::DomainExited { program: "kn_join".to_string(), status: 0 },
            Check::LogContains("kn_join: 16 joins, upcalls on".to_string()),
            Check::Halting(0),
        ],
    }
}

/// Calls the fuzzer makes in the suite (its build's default).
pub const FUZZ_SUITE_CALLS: u64 = 100_000;

/// The fuzzer and the program beside it whose threads and regions are its foreign targets
/// (loaded first: its thread ids are below the fuzzer's).
pub const FUZZ_GROUP: &str = "fuzz_victim+fuzz";

/// The in-guest syscall fuzzer on `smp` CPUs (issue 15, item 6): at least 100,000 random
/// syscalls with edge-value arguments from four threads, then an `exit` that must end helper
/// threads blocked in every way; no panic, no hang, every frame back; the victim beside it
/// unaffected.
pub fn fuzz_suite(name: &'static str, smp: u8) -> Suite {
    Suite {
        name,
        smp,
        // Twice: the second run must give back exactly what it took, once the first has grown
        // the kernel's caches (page tables of the kernel-stack area, slabs).
        boot_words: format!("{}={FUZZ_GROUP},{FUZZ_GROUP}", bootopt::RUN),
        timeout: KERNEL_SUITE_TIMEOUT,
        expected: Expected::Status(0),
        checks: vec![
            Check::DomainExited { program: "fuzz".to_string(), status: 0 },
            Check::DomainExited { program: "fuzz_victim".to_string(), status: 0 },
            Check::LogContains(format!("fuzz: {FUZZ_SUITE_CALLS} calls,")),
            Check::LogContains("fuzz: done;".to_string()),
            Check::LogContains(" words changed under it".to_string()),
            Check::GroupFramesBalanced(FUZZ_GROUP.to_string()),
            Check::GroupHeapBalanced { group: FUZZ_GROUP.to_string(), slack: HEAP_CACHE_SLACK },
            Check::Halting(0),
        ],
    }
}

/// Teardown (issue 15, item 4): `teardown` faults while its other threads enter every
/// blocking state and create threads; the kill must end them all (five runs, each must end
/// within the time limit) and give everything back.
pub fn teardown_suite(name: &'static str, smp: u8) -> Suite {
    Suite {
        name,
        smp,
        boot_words: format!("{}=teardown,teardown,teardown,teardown,teardown", bootopt::RUN),
        timeout: KERNEL_SUITE_TIMEOUT,
        expected: Expected::Status(STATUS_PROGRAM_KILLED),
        checks: vec![
            Check::DomainKilled { program: "teardown".to_string(), reason: fault_reason(ACCESS_WRITE, fault::UNMAPPED) },
            Check::GroupFramesBalanced("teardown".to_string()),
            Check::GroupHeapBalanced { group: "teardown".to_string(), slack: HEAP_CACHE_SLACK },
            Check::Halting(u64::from(STATUS_PROGRAM_KILLED)),
        ],
    }
}

/// Exhaustion (issue 15, item 3): `exhaust` takes every kernel resource its quotas allow and
/// must be refused at each quota with `EAGAIN`/`ENOMEM` (no kernel panic), while
/// `exhaust_victim` beside it makes threads and regions and checks its memory; afterwards
/// every frame and the kernel heap are back. The group runs twice: the first run grows the
/// kernel's caches once (page tables of the kernel-stack area for 1,024 stacks, run-queue
/// slabs, free stack slots), the second must give back exactly what it took.
pub fn exhaust_suite(name: &'static str, smp: u8) -> Suite {
    let group = "exhaust+exhaust_victim";
    Suite {
        name,
        smp,
        boot_words: format!("{}={group},{group}", bootopt::RUN),
        timeout: KERNEL_SUITE_TIMEOUT,
        expected: Expected::Status(0),
        checks: vec![
            Check::DomainExited { program: "exhaust".to_string(), status: 0 },
            Check::DomainExited { program: "exhaust_victim".to_string(), status: 0 },
            Check::LogContains("exhaust: every refusal at the quota, no kernel panic".to_string()),
            Check::LogContains("exhaust_victim: 8 threads with 1 MiB regions each worked beside the attacker".to_string()),
            Check::GroupFramesBalanced(group.to_string()),
            Check::GroupHeapBalanced { group: group.to_string(), slack: HEAP_CACHE_SLACK },
            Check::Halting(0),
        ],
    }
}

/// Time limit of the stress suite.
pub const STRESS_SUITE_TIMEOUT: Duration = Duration::from_secs(300);

/// The two programs of the stress test, run side by side.
pub const STRESS_GROUP: &str = "stress+stress_kernel";

/// The stress test (issue 15, item 7): over 10,000 libuthread user threads on four vCPUs and
/// 500 kernel threads beside them doing random yields, sleeps, locks, condvar hand-shakes,
/// barriers, messages, spawns and joins, grants, checks and revokes; every sum exact, no
/// hang (the time limit), and everything given back.
pub fn stress_suite(name: &'static str, smp: u8) -> Suite {
    Suite {
        name,
        smp,
        boot_words: format!("{}={STRESS_GROUP}", bootopt::RUN),
        // A hang detector, not a speed check: ~75 s of TCG time with the host at load 17.
        timeout: STRESS_SUITE_TIMEOUT,
        expected: Expected::Status(0),
        checks: vec![
            Check::DomainExited { program: "stress".to_string(), status: 0 },
            Check::DomainExited { program: "stress_kernel".to_string(), status: 0 },
            Check::LogContains("exact; 0 wrong".to_string()),
            Check::LogContains("grant/check/revoke rounds; 0 wrong".to_string()),
            Check::GroupFramesBalanced(STRESS_GROUP.to_string()),
            Check::GroupHeapBalanced { group: STRESS_GROUP.to_string(), slack: HEAP_CACHE_SLACK },
            Check::Halting(0),
        ],
    }
}

/// The x86_64 suites.
pub fn x86_64() -> Vec<Suite> {
    vec![
        kernel_suite("kernel", 1),
        kernel_suite("kernel-smp4", SMP_SUITE_CPUS),
        views_suite("views", 1),
        views_suite("views-smp4", SMP_SUITE_CPUS),
        sched_suite("sched", 1),
        sched_suite("sched-smp4", SMP_SUITE_CPUS),
        kn_suite("kn", 1),
        kn_suite("kn-smp4", SMP_SUITE_CPUS),
        uthread_suite("uthread", 1),
        uthread_suite("uthread-smp4", SMP_SUITE_CPUS),
        fpu_suite("fpu", 1, "adaptive"),
        fpu_suite("fpu-smp4", SMP_SUITE_CPUS, "adaptive"),
        fpu_suite("fpu-lazy-smp4", SMP_SUITE_CPUS, "lazy"),
        fpu_suite("fpu-eager-smp4", SMP_SUITE_CPUS, "eager"),
        lazy_save_suite(),
        fuzz_suite("fuzz-smp4", SMP_SUITE_CPUS),
        exhaust_suite("exhaust-smp4", SMP_SUITE_CPUS),
        stress_suite("stress-smp4", SMP_SUITE_CPUS),
        teardown_suite("teardown", 1),
        teardown_suite("teardown-smp4", SMP_SUITE_CPUS),
        s3_suite("s3", 1),
        s3_suite("s3-smp4", SMP_SUITE_CPUS),
        share_suite("share", 1),
        share_suite("share-smp4", SMP_SUITE_CPUS),
        signal_suite("signal", 1),
        signal_suite("signal-smp4", SMP_SUITE_CPUS),
        Suite {
            name: "panic-report",
            smp: 1,
            boot_words: crash_words(Crash::Panic),
            timeout: CRASH_SUITE_TIMEOUT,
            expected: Expected::Status(STATUS_KERNEL_PANIC),
            checks: vec![
                Check::LogContains(log::PANIC.to_string()),
                Check::LogContains(BACKTRACE.to_string()),
            ],
        },
        Suite {
            name: "exception-report",
            smp: 1,
            boot_words: crash_words(Crash::PageFault),
            timeout: CRASH_SUITE_TIMEOUT,
            expected: Expected::Status(STATUS_KERNEL_PANIC),
            checks: vec![
                Check::LogContains(log::PANIC.to_string()),
                Check::LogContains(format!("vector {X86_64_PAGE_FAULT_VECTOR}")),
                Check::LogContains(X86_64_CR2.to_string()),
                Check::LogContains(X86_64_RIP.to_string()),
                Check::LogContains(BACKTRACE.to_string()),
            ],
        },
        Suite {
            name: "hang-timeout",
            smp: 1,
            boot_words: crash_words(Crash::Hang),
            timeout: HANG_SUITE_TIMEOUT,
            expected: Expected::Timeout,
            // The harness's hang probe found the spinning CPU and named its function (the
            // kernel's own log never names it).
            checks: vec![
                Check::LogContains(format!("{HANG_PROBE}cpu 0 ")),
                Check::LogContains(HANG_FUNCTION.to_string()),
            ],
        },
    ]
}

/// The riscv64 suites: the x86_64 ones (same programs, boot words and checks), except that the
/// exception report is checked in riscv64's words (cause number, `stval`, `sepc`), and that a
/// suite on several CPUs must see all of them online (harts started through SBI HSM).
pub fn riscv64() -> Vec<Suite> {
    x86_64()
        .into_iter()
        .filter(|suite| !RISCV64_NOT_YET_PORTED.contains(&suite.name))
        .map(|mut suite| {
            if suite.smp > 1 {
                suite.checks.push(Check::LogLine(format!("{CPUS_ONLINE}{}", suite.smp)));
            }
            if suite.name == "exception-report" {
                suite.checks = vec![
                    Check::LogContains(log::PANIC.to_string()),
                    Check::LogContains(format!(
                        "vector {RISCV64_LOAD_PAGE_FAULT_CAUSE} ({RISCV64_LOAD_PAGE_FAULT})"
                    )),
                    Check::LogContains(RISCV64_STVAL.to_string()),
                    Check::LogContains(RISCV64_SEPC.to_string()),
                    Check::LogContains(BACKTRACE.to_string()),
                ];
            }
            suite
        })
        .collect()
}

/// The aarch64 suites: the x86_64 ones (same programs, boot words and checks), except that the
/// exception report is checked in aarch64's words (exception class, `far`, `elr`), and every
/// suite on several CPUs must see all of them online (CPUs started through PSCI `CPU_ON`).
pub fn aarch64() -> Vec<Suite> {
    x86_64()
        .into_iter()
        .filter(|suite| !AARCH64_NOT_YET_PORTED.contains(&suite.name))
        .map(|mut suite| {
            if suite.smp > 1 {
                suite.checks.push(Check::LogLine(format!("{CPUS_ONLINE}{}", suite.smp)));
            }
            if suite.name == "exception-report" {
                suite.checks = vec![
                    Check::LogContains(log::PANIC.to_string()),
                    Check::LogContains(format!(
                        "vector {AARCH64_DATA_ABORT_CLASS} ({AARCH64_DATA_ABORT})"
                    )),
                    Check::LogContains(AARCH64_FAR.to_string()),
                    Check::LogContains(AARCH64_ELR.to_string()),
                    Check::LogContains(BACKTRACE.to_string()),
                ];
            }
            suite
        })
        .collect()
}

/// One address space, many views: sharing by pointer after a grant, a read-only view, a revoke,
/// two instances of one program, memory exhaustion, on `smp` CPUs.
pub fn views_suite(name: &'static str, smp: u8) -> Suite {
    let exited = |p: &str| Check::DomainExited { program: p.to_string(), status: 0 };
    let killed = |p: &str, reason: &str| Check::DomainKilled { program: p.to_string(), reason: reason.to_string() };
    Suite {
        name,
        smp,
        boot_words: format!(
            "{}=share_writer+share_reader,readonly_view+twin,revoke_faults,twin+twin,oom_regions,name_owner+name_thief,schedstat,copy_race,revoke_sync+revoke_sync_target,grabber+grab_victim,grant_victim+grant_pusher",
            bootopt::RUN
        ),
        timeout: KERNEL_SUITE_TIMEOUT,
        expected: Expected::Status(0),
        checks: vec![
            exited("share_writer"),
            exited("share_reader"),
            killed("readonly_view", "page fault: write to read-only memory at 0x"),
            killed("readonly_view", "view rights r--"),
            killed("revoke_faults", "page fault: read of memory outside the view at 0x"),
            exited("twin"),
            Check::ConcurrentDistinct("twin".to_string()),
            exited("oom_regions"),
            Check::LogContains("then ENOMEM".to_string()),
            Check::GroupFramesBalanced("oom_regions".to_string()),
            Check::GroupFramesBalanced("share_writer+share_reader".to_string()),
            Check::GroupFramesBalanced("revoke_faults".to_string()),
            Check::LogContains("share_reader: the writer's name went with it".to_string()),
            exited("name_owner"),
            exited("name_thief"),
            Check::LogContains("name_thief: overwriting another program's name: Err(Some(Perm))".to_string()),
            exited("schedstat"),
            exited("copy_race"),
            Check::LogContains("no kernel fault".to_string()),
            exited("grabber"),
            exited("grab_victim"),
            Check::LogContains("grabber: revoking the owner's region from the owner: Err(Some(Perm))".to_string()),
            Check::LogContains("grabber: switching the scheduler's affinity off while another program runs: Err(Some(Perm)) (reading it: true)".to_string()),
            Check::LogContains("grab_victim: its region stayed its own and its threads stayed view-mates".to_string()),
            Check::GroupFramesBalanced("grabber+grab_victim".to_string()),
            exited("revoke_sync"),
            killed("revoke_sync_target", "page fault: write of "),
            Check::LogContains("wrote nothing after region_revoke returned".to_string()),
            Check::GroupFramesBalanced("revoke_sync+revoke_sync_target".to_string()),
            exited("grant_pusher"),
            exited("grant_victim"),
            Check::LogContains(
                "grant_pusher: without the victim's consent: [Err(Some(Perm)), Err(Some(Perm)), Err(Some(Perm)), Err(Some(Perm))]".to_string(),
            ),
            Check::LogContains("grant_pusher: with it: Ok(0)".to_string()),
            Check::LogContains("grant_pusher: after the victim withdrew it: [Err(Some(Perm)), Err(Some(Perm))]".to_string()),
            Check::LogContains(
                "grant_victim: the refused grants changed nothing and left its threads view-mates; the allowed one reached both; none after the withdrawal".to_string(),
            ),
            Check::GroupFramesBalanced("grant_victim+grant_pusher".to_string()),
            Check::GroupHeapBalanced { group: "grant_victim+grant_pusher".to_string(), slack: HEAP_CACHE_SLACK },
            Check::Halting(0),
        ],
    }
}

/// S3 synchronisation across programs (issue 16 part 1): bad arguments, Auto Lock hand-off,
/// barriers, the holder table filled to the program's share, barrier waiters that sleep in the
/// kernel outside their program's gathering (every slot in use; callers with LTN 0), and a
/// program ending with a lock held and a thread at a barrier, on `smp` CPUs.
pub fn s3_suite(name: &'static str, smp: u8) -> Suite {
    let exited = |p: &str| Check::DomainExited { program: p.to_string(), status: 0 };
    Suite {
        name,
        smp,
        boot_words: format!("{}=s3_lock,s3_gather,s3_waiter+s3_holder", bootopt::RUN),
        timeout: KERNEL_SUITE_TIMEOUT,
        expected: Expected::Status(0),
        checks: vec![
            exited("s3_lock"),
            Check::LogContains("s3_lock: release by a non-holder: Err(Some(Perm))".to_string()),
            Check::LogContains("s3_lock: the waiter queued in the kernel resumed owning the lock: true, and read 42".to_string()),
            Check::LogContains("s3_lock: 48 waiters in the kernel's holder table (the program's share); the next waits in software".to_string()),
            Check::LogContains("s3_lock: 49 of 49 waiters got their lock with the holder's value".to_string()),
            Check::LogContains("s3_lock: all checks passed".to_string()),
            exited("s3_gather"),
            Check::LogContains("s3_gather: the main thread outside the runtime (LTN 0) waited in the kernel: Ok(false), after its releaser: true, 1 waits outside".to_string()),
            Check::LogContains("s3_gather: a user thread released the kernel thread asleep at a barrier: Ok(true), it was back before: 0".to_string()),
            Check::LogContains("s3_gather: round 3: 12 barriers gathered at once: 8 waits without a slot (0 before the slots filled), 0 back before release, 24 of 24 released right, 24 returns, 12 releasers Ok(true)".to_string()),
            Check::LogContains("s3_gather: the kernel thread (LTN 0): Ok(3) (3: released the main thread, and was released), 2 waits outside".to_string()),
            Check::LogContains("s3_gather: all checks passed".to_string()),
            exited("s3_waiter"),
            exited("s3_holder"),
            Check::LogContains("s3_waiter: the holder ended holding a lock: the waiter got it, inherited true; its barrier: Err(BarrierBroken)".to_string()),
            Check::LogContains("s3_waiter: both of this program's threads at that barrier got [Err(BarrierBroken), Err(BarrierBroken)]".to_string()),
            Check::LogContains("s3_waiter: all checks passed".to_string()),
            Check::GroupFramesBalanced("s3_lock".to_string()),
            Check::GroupFramesBalanced("s3_gather".to_string()),
            Check::GroupFramesBalanced("s3_waiter+s3_holder".to_string()),
            Check::GroupHeapBalanced { group: "s3_lock".to_string(), slack: HEAP_CACHE_SLACK },
            Check::GroupHeapBalanced { group: "s3_gather".to_string(), slack: HEAP_CACHE_SLACK },
            Check::GroupHeapBalanced { group: "s3_waiter+s3_holder".to_string(), slack: HEAP_CACHE_SLACK },
            Check::Halting(0),
        ],
    }
}

/// Space sharing (issue 16 part 2) on `smp` CPUs: two libuthread programs of 4 vCPUs each;
/// the kernel takes vCPUs from the first when the second registers and gives them back when
/// it ends, every thread's result exact, the vCPUs granted at once never above the CPUs; then
/// beside a program whose vCPUs never give themselves up.
pub fn share_suite(name: &'static str, smp: u8) -> Suite {
    let exited = |p: &str| Check::DomainExited { program: p.to_string(), status: 0 };
    let group = "share_long+share_short";
    let hog = "share_hog+share_short";
    Suite {
        name,
        smp,
        boot_words: format!("{}={group},{hog}", bootopt::RUN),
        timeout: KERNEL_SUITE_TIMEOUT,
        expected: Expected::Status(0),
        checks: vec![
            exited("share_long"),
            exited("share_short"),
            Check::LogContains("share_long: ok".to_string()),
            Check::LogContains("share_short: ok".to_string()),
            Check::GroupFramesBalanced(group.to_string()),
            Check::GroupHeapBalanced { group: group.to_string(), slack: HEAP_CACHE_SLACK },
            // A program whose vCPUs never give themselves up (LTN = 0 for ever) does not keep
            // the other from its share: the kernel takes them back by force.
            exited("share_hog"),
            Check::LogContains("share_hog: ok".to_string()),
            Check::GroupFramesBalanced(hog.to_string()),
            Check::GroupHeapBalanced { group: hog.to_string(), slack: HEAP_CACHE_SLACK },
            Check::Halting(0),
        ],
    }
}

/// User signals (issue 16 part 3), on `smp` CPUs: a program without Kernel Notification
/// refuses bad arguments, ignores what it ignores by default and is ended with a report by
/// TERMINATE sent to its thread asleep in the kernel; a libuthread program's handler runs for
/// signals to a running thread, to a thread asleep in the kernel (which sleeps on) and to the
/// program, and a number it has no handler for ends it with status 128 + n; another program is
/// refused (`EPERM`, the victim unaffected) until the victim accepts it, and again after.
pub fn signal_suite(name: &'static str, smp: u8) -> Suite {
    let exited = |p: &str, status: u64| Check::DomainExited { program: p.to_string(), status };
    let group = "signal_victim+signal_sender";
    Suite {
        name,
        smp,
        boot_words: format!("{}=signal_default,signal_self,{group}", bootopt::RUN),
        timeout: KERNEL_SUITE_TIMEOUT,
        expected: Expected::Status(0),
        checks: vec![
            Check::LogContains("signal_default: bad arguments refused, ignored signals changed nothing".to_string()),
            Check::DomainKilled {
                program: "signal_default".to_string(),
                reason: "signal 15 (TERMINATE) from thread ".to_string(),
            },
            Check::LogContains("(signal_default) to thread ".to_string()),
            Check::LogContains(": its default action ends the program (no Kernel Notification, so no handler)".to_string()),
            Check::GroupFramesBalanced("signal_default".to_string()),
            Check::GroupHeapBalanced { group: "signal_default".to_string(), slack: HEAP_CACHE_SLACK },
            Check::LogContains("signal_self: 10 of 10 signals to a running thread ran the handler with that thread's id".to_string()),
            Check::LogContains("refused with EAGAIN; each taken one ran the handler once: true".to_string()),
            Check::LogContains("signal_self: the handler ran for a thread asleep in the kernel (asleep: true,".to_string()),
            Check::LogContains("all with its id: true), which slept on: true".to_string()),
            Check::LogContains("signal_self: 2 of 2 program-wide signals ran the handler with no thread".to_string()),
            Check::LogContains("signal_self: all checks passed".to_string()),
            Check::LogContains("libuthread: signal 12 (USER2) from kernel thread ".to_string()),
            exited("signal_self", tsumugi_abi::signal::exit_status(tsumugi_abi::signal::USER2) as u64),
            Check::GroupFramesBalanced("signal_self".to_string()),
            Check::GroupHeapBalanced { group: "signal_self".to_string(), slack: HEAP_CACHE_SLACK },
            Check::LogContains(
                "signal_sender: without the victim's consent: [Err(Some(Perm)), Err(Some(Perm)), Err(Some(Perm)), Err(Some(Perm))]".to_string(),
            ),
            Check::LogContains("signal_sender: with it: [Ok(0), Ok(0)]".to_string()),
            Check::LogContains("signal_sender: after the victim withdrew it: Err(Some(Perm))".to_string()),
            Check::LogContains(
                "signal_victim: 0 handled before it accepted the sender; then 2 of 2 ran the handler from the sender's thread; 2 after it withdrew the right".to_string(),
            ),
            exited("signal_victim", 0),
            exited("signal_sender", 0),
            Check::GroupFramesBalanced(group.to_string()),
            Check::GroupHeapBalanced { group: group.to_string(), slack: HEAP_CACHE_SLACK },
            Check::Halting(0),
        ],
    }
}

/// Threads and the scheduler: affinity halves view switches, preemption on every CPU, the
/// group bound prevents starvation, a revoke shoots down a running thread's view.
pub fn sched_suite(name: &'static str, smp: u8) -> Suite {
    let exited = |p: &str| Check::DomainExited { program: p.to_string(), status: 0 };
    Suite {
        name,
        smp,
        boot_words: format!("{}=affinity,preempt,starvation,shootdown,perf_test,perf_mn,schedstat", bootopt::RUN),
        timeout: KERNEL_SUITE_TIMEOUT,
        expected: Expected::Status(0),
        checks: vec![
            exited("affinity"),
            Check::LogContains("affinity: off:".to_string()),
            exited("preempt"),
            exited("starvation"),
            Check::DomainKilled { program: "shootdown".to_string(), reason: "page fault: read of memory outside the view at 0x".to_string() },
            exited("perf_test"),
            // Counters follow user threads across vCPUs (M:N at 4 vCPUs, threads that move).
            exited("perf_mn"),
            Check::LogContains("perf_mn: ok".to_string()),
            exited("schedstat"),
            Check::Halting(0),
        ],
    }
}

/// The self-tests plus the isolation test programs and `init`, on `smp` CPUs.
fn kernel_suite(name: &'static str, smp: u8) -> Suite {
    let programs = [
        PROGRAM_SYSCALL_ERRORS,
        PROGRAM_FAULT_KERNEL_READ,
        PROGRAM_FAULT_EXEC_DATA,
        PROGRAM_FAULT_WRITE_TEXT,
        bootopt::DEFAULT_PROGRAM,
    ];
    Suite {
        name,
        smp,
        boot_words: format!(
            "{} {}={}",
            bootopt::SELFTEST,
            bootopt::RUN,
            programs.join(",")
        ),
        timeout: KERNEL_SUITE_TIMEOUT,
        expected: Expected::Status(STATUS_SUCCESS),
        checks: vec![
            Check::SelfTests,
            Check::DomainExited {
                program: PROGRAM_SYSCALL_ERRORS.to_string(),
                status: u64::from(STATUS_SUCCESS),
            },
            Check::DomainKilled {
                program: PROGRAM_FAULT_KERNEL_READ.to_string(),
                reason: fault_reason(ACCESS_READ, fault::KERNEL_MEMORY),
            },
            Check::DomainKilled {
                program: PROGRAM_FAULT_EXEC_DATA.to_string(),
                reason: fault_reason(ACCESS_EXECUTE, fault::NOT_EXECUTABLE),
            },
            Check::DomainKilled {
                program: PROGRAM_FAULT_WRITE_TEXT.to_string(),
                reason: fault_reason(ACCESS_WRITE, fault::READ_ONLY),
            },
            Check::DomainExited {
                program: bootopt::DEFAULT_PROGRAM.to_string(),
                status: u64::from(STATUS_SUCCESS),
            },
            Check::LogLine(INIT_GREETING.to_string()),
            Check::Halting(u64::from(STATUS_SUCCESS)),
        ],
    }
}

/// The start of a page-fault kill reason, e.g. `page fault: write to read-only memory at 0x`.
pub fn fault_reason(access: &str, kind: &str) -> String {
    format!("{PAGE_FAULT}{access} {kind}{FAULT_ADDRESS}")
}

/// The `crash=<kind>` boot word, spelled as `tsumugi_abi::bootopt::Crash::ALL` spells it.
pub fn crash_words(crash: Crash) -> String {
    let spelling = Crash::ALL
        .iter()
        .find(|(kind, _)| *kind == crash)
        .map_or("", |(_, name)| *name);
    format!("{}={spelling}", bootopt::CRASH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x86_64_suites_match_the_brief() {
        let suites = x86_64();
        let names: Vec<_> = suites.iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            [
                "kernel",
                "kernel-smp4",
                "views",
                "views-smp4",
                "sched",
                "sched-smp4",
                "kn",
                "kn-smp4",
                "uthread",
                "uthread-smp4",
                "fpu",
                "fpu-smp4",
                "fpu-lazy-smp4",
                "fpu-eager-smp4",
                "lazysave",
                "fuzz-smp4",
                "exhaust-smp4",
                "stress-smp4",
                "teardown",
                "teardown-smp4",
                "s3",
                "s3-smp4",
                "share",
                "share-smp4",
                "signal",
                "signal-smp4",
                "panic-report",
                "exception-report",
                "hang-timeout"
            ]
        );
        assert_eq!(
            suites[0].boot_words,
            "selftest run=syscall_errors,fault_kernel_read,fault_exec_data,fault_write_text,init"
        );
        assert_eq!(suites[0].smp, 1);
        assert_eq!(suites[1].smp, 4);
        assert_eq!(suites[1].checks, suites[0].checks);
        let by_name = |n: &str| suites.iter().find(|s| s.name == n).expect("suite exists");
        assert_eq!(by_name("panic-report").boot_words, "crash=panic");
        assert_eq!(by_name("exception-report").boot_words, "crash=pagefault");
        assert_eq!(by_name("hang-timeout").boot_words, "crash=hang");
        assert_eq!(by_name("hang-timeout").expected, Expected::Timeout);
        assert_eq!(by_name("hang-timeout").timeout, Duration::from_secs(8));
        assert!(by_name("exception-report")
            .checks
            .contains(&Check::LogContains("vector 14".into())));
        assert_eq!(by_name("views-smp4").smp, 4);
        assert_eq!(by_name("sched-smp4").checks, by_name("sched").checks);
    }

    #[test]
    fn riscv64_suites_mirror_x86_64() {
        let x86: Vec<_> = x86_64().into_iter().filter(|s| !RISCV64_NOT_YET_PORTED.contains(&s.name)).collect();
        let riscv = riscv64();
        assert_eq!(x86.len(), riscv.len());
        for (x, r) in x86.iter().zip(&riscv) {
            assert_eq!(
                (x.name, &x.boot_words, x.smp, x.expected),
                (r.name, &r.boot_words, r.smp, r.expected)
            );
            let every_cpu_online = Check::LogLine(format!("cpus online: {}", r.smp));
            match (r.name, r.smp) {
                ("exception-report", _) => {}
                (_, 1) => assert_eq!(x.checks, r.checks),
                _ => assert_eq!([&x.checks[..], &[every_cpu_online]].concat(), r.checks),
            }
        }
        assert!(riscv.iter().any(|s| s.smp > 1));
        // Kernel Notification, libuthread's M:N core and its lazy save run on riscv64 (issue #7).
        for ported in ["kn", "kn-smp4", "uthread", "uthread-smp4", "lazysave"] {
            assert!(riscv.iter().any(|s| s.name == ported), "riscv64 runs {ported}");
        }
        let report = riscv.iter().find(|s| s.name == "exception-report").unwrap();
        assert!(report
            .checks
            .contains(&Check::LogContains("vector 13 (load page fault)".into())));
        assert!(report
            .checks
            .contains(&Check::LogContains("stval 0x".into())));
        assert!(report
            .checks
            .contains(&Check::LogContains("sepc 0x".into())));
    }

    #[test]
    fn aarch64_suites_mirror_x86_64() {
        let x86: Vec<_> = x86_64().into_iter().filter(|s| !AARCH64_NOT_YET_PORTED.contains(&s.name)).collect();
        let arm = aarch64();
        assert_eq!(x86.len(), arm.len());
        for (x, a) in x86.iter().zip(&arm) {
            assert_eq!(
                (x.name, &x.boot_words, x.smp, x.expected),
                (a.name, &a.boot_words, a.smp, a.expected)
            );
            let every_cpu_online = Check::LogLine(format!("cpus online: {}", a.smp));
            match (a.name, a.smp) {
                ("exception-report", _) => {}
                (_, 1) => assert_eq!(x.checks, a.checks),
                _ => assert_eq!([&x.checks[..], &[every_cpu_online]].concat(), a.checks),
            }
        }
        assert!(arm.iter().any(|s| s.smp > 1));
        // Kernel Notification, libuthread's M:N core and its lazy save run on aarch64 (issue #8).
        for ported in ["kn", "kn-smp4", "uthread", "uthread-smp4", "lazysave"] {
            assert!(arm.iter().any(|s| s.name == ported), "aarch64 runs {ported}");
        }
        let report = arm.iter().find(|s| s.name == "exception-report").unwrap();
        assert!(report
            .checks
            .contains(&Check::LogContains("vector 37 (data abort from EL1)".into())));
        assert!(report.checks.contains(&Check::LogContains("far 0x".into())));
        assert!(report.checks.contains(&Check::LogContains("elr 0x".into())));
        assert!(for_arch("aarch64").is_some());
    }

    #[test]
    fn fault_reasons_read_as_the_kernel_prints_them() {
        assert_eq!(
            fault_reason(ACCESS_READ, fault::KERNEL_MEMORY),
            "page fault: read of kernel memory at 0x"
        );
        assert_eq!(
            fault_reason(ACCESS_EXECUTE, fault::NOT_EXECUTABLE),
            "page fault: execute of non-executable memory at 0x"
        );
        assert_eq!(
            fault_reason(ACCESS_WRITE, fault::READ_ONLY),
            "page fault: write to read-only memory at 0x"
        );
    }

    #[test]
    fn suite_names_are_unique_and_boot_words_parse() {
        let suites = x86_64();
        for (i, suite) in suites.iter().enumerate() {
            assert!(suites[i + 1..].iter().all(|other| other.name != suite.name));
            assert!(bootopt::words(&suite.boot_words).count() > 0);
        }
        assert!(for_arch("x86_64").is_some());
        assert!(for_arch("riscv64").is_some());
    }
}
