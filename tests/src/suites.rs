//! The QEMU test suites, as data: what to boot, how long to wait, and what the log must show.
//!
//! `xtask test` boots each [`Suite`] of an architecture once and judges it with
//! [`crate::check::evaluate`]. Strings the kernel prints come from `tsumugi_abi` where the contract
//! names them; the few that are only conventions of this crate are named constants below.

use std::time::Duration;

use tsumugi_abi::bootopt::{self, Crash};
use tsumugi_abi::exit::STATUS_KERNEL_PANIC;
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

/// Word the kernel's panic report prints before its frame-pointer backtrace.
pub const BACKTRACE: &str = "backtrace";
/// x86_64 exception vector of a page fault (#PF).
pub const X86_64_PAGE_FAULT_VECTOR: u8 = 14;
/// How the x86_64 exception report names the faulting address register.
pub const X86_64_CR2: &str = "cr2 0x";
/// How the x86_64 exception report names the instruction pointer.
pub const X86_64_RIP: &str = "rip 0x";

/// Time limit of the suites that run the self-tests and the test programs.
pub const KERNEL_SUITE_TIMEOUT: Duration = Duration::from_secs(120);
/// Time limit of the suites that crash the kernel on purpose.
pub const CRASH_SUITE_TIMEOUT: Duration = Duration::from_secs(60);
/// Time limit of the suite that hangs on purpose: short, since it always runs out.
pub const HANG_SUITE_TIMEOUT: Duration = Duration::from_secs(8);
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
        _ => None,
    }
}

/// The x86_64 suites.
pub fn x86_64() -> Vec<Suite> {
    vec![
        kernel_suite("kernel", 1),
        kernel_suite("kernel-smp4", SMP_SUITE_CPUS),
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
            checks: Vec::new(),
        },
    ]
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
        assert_eq!(suites[2].boot_words, "crash=panic");
        assert_eq!(suites[3].boot_words, "crash=pagefault");
        assert_eq!(suites[4].boot_words, "crash=hang");
        assert_eq!(suites[4].expected, Expected::Timeout);
        assert_eq!(suites[4].timeout, Duration::from_secs(8));
        assert!(suites[3]
            .checks
            .contains(&Check::LogContains("vector 14".into())));
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
        assert!(for_arch("riscv64").is_none());
        assert!(for_arch("x86_64").is_some());
    }
}
