//! Lines the kernel prints on its console that host tools (`xtask test`) parse.
//!
//! Each machine-read line starts with one of these prefixes at the beginning of a line:
//!
//! ```text
//! selftest <name> ... ok
//! selftest <name> ... FAILED: <message>
//! selftest summary: <n> passed, <m> failed
//! domain <id> <program>: started
//! domain <id> <program>: exited with status <n>
//! domain <id> <program>: killed: <reason>
//! KERNEL PANIC on cpu <n>: <message>
//! tsumugi: halting with status <n>
//! ```
//!
//! Reasons for `killed:` begin with the kind of event, e.g.
//! `page fault: write to read-only memory at 0x1000; rip 0x...`.

/// Prefix of a self-test result line.
pub const SELFTEST: &str = "selftest ";
/// Marker of a passing self-test, at the end of its line.
pub const SELFTEST_OK: &str = " ... ok";
/// Marker of a failing self-test, followed by the message.
pub const SELFTEST_FAILED: &str = " ... FAILED: ";
/// Prefix of the self-test summary line.
pub const SELFTEST_SUMMARY: &str = "selftest summary: ";
/// Prefix of a domain (program) life-cycle line.
pub const DOMAIN: &str = "domain ";
/// Marker of a normal exit, followed by the status.
pub const EXITED: &str = ": exited with status ";
/// Marker of a kill, followed by the reason.
pub const KILLED: &str = ": killed: ";
/// Prefix of the line that ends a group of programs started together:
/// `group <names>: frames free before <n>, after <m>`.
pub const GROUP: &str = "group ";
/// What follows `group <names>:` on the group's second line:
/// `group <names>: heap bytes in use before <n>, after <m>`.
pub const HEAP_IN_USE: &str = " heap bytes in use before ";
/// Prefix of a kernel panic report.
pub const PANIC: &str = "KERNEL PANIC";
/// Prefix of the last line the kernel prints.
pub const HALTING: &str = "tsumugi: halting with status ";

/// Page-fault reasons, as they appear after `killed: page fault: `.
pub mod fault {
    /// A user access to the kernel half of the address space.
    pub const KERNEL_MEMORY: &str = "of kernel memory";
    /// A write to memory the view maps without write rights.
    pub const READ_ONLY: &str = "to read-only memory";
    /// An instruction fetch from memory the view maps without execute rights.
    pub const NOT_EXECUTABLE: &str = "of non-executable memory";
    /// An access to an address no region of the view covers.
    pub const UNMAPPED: &str = "of unmapped memory";
}
