//! Boot options: the kernel command line (`-append` in QEMU), shared by the kernel that parses it
//! and by `xtask` that writes it.
//!
//! The command line is a space-separated list of `key` or `key=value` words:
//!
//! | word | meaning |
//! |---|---|
//! | `run=a,b,c` | run the programs `a`, `b`, `c` from the boot archive one after another (default `init`) |
//! | `selftest` / `selftest=filter` | run the in-kernel self-tests (those whose name contains `filter`) first |
//! | `crash=panic` / `crash=pagefault` / `crash=hang` | misbehave on purpose after boot, to test the report and timeout paths |
//! | `quiet` | do not print the memory map banner |
//! | `affinity=on\|off` | thread-view-affinity scheduling for threads that opt in (default on) |
//! | `quantum=N` | timer ticks a thread runs before it is preempted (default 2; a tick is 10 ms) |
//! | `groupbound=N` | most consecutive turns one view group gets while others wait (default 8) |
//! | `cpus=N` | bring up at most N CPUs (default: all the firmware lists) |
//! | `kn=zerocopy\|sa` | Kernel Notification saves into ThMBs (default) or the Scheduler-Activations copy baseline |
//! | `preempt=upcall\|signal` | KN preemption as a `PREEMPTED` upcall (default) or the signal-style baseline |
//! | `share=space\|time` | CPUs divided between KN programs (default) or every vCPU time-shared (the baseline) |
//! | `fpu=adaptive\|lazy\|eager` | FP/SIMD state switched lazily on first use, eagerly for threads that keep using it (default); always lazily; or at every switch (baseline) |
//! | `tlbtag=off` | do not use PCIDs/ASIDs: every view switch flushes the TLB (the original Cubix setting) |
//!
//! In `run=`, programs joined with `+` start together: `run=a+b,c` runs `a` and `b` at the same
//! time, waits for both, then runs `c`.

/// Name of the option listing programs to run.
pub const RUN: &str = "run";
/// Name of the option enabling self-tests.
pub const SELFTEST: &str = "selftest";
/// Name of the deliberate-crash option.
pub const CRASH: &str = "crash";
/// Name of the option that shortens the banner.
pub const QUIET: &str = "quiet";

/// Name of the affinity switch.
pub const AFFINITY: &str = "affinity";
/// Name of the quantum option.
pub const QUANTUM: &str = "quantum";
/// Name of the group-bound option.
pub const GROUP_BOUND: &str = "groupbound";
/// Name of the option limiting how many CPUs the kernel brings up (`cpus=N`).
pub const CPUS: &str = "cpus";
/// Name of the FP switching option: `fpu=adaptive` (default: lazy, eager for steady FP users),
/// `fpu=lazy` or `fpu=eager` (the baselines: always lazy; save and restore at every switch).
pub const FPU: &str = "fpu";
/// Name of the notification-baseline option: `kn=sa` makes Kernel Notification save stopped
/// contexts in a kernel-owned area that the library copies out with `kn_fetch` (Scheduler
/// Activations / C-area style), for comparison with the zero-copy default (`kn=zerocopy`).
pub const KN: &str = "kn";
/// Name of the preemption-baseline option: `preempt=signal` delivers a KN program's
/// preemptions signal-style (the context pushed on the thread's stack, the handler run there,
/// `kn_sigreturn` resumes), for comparison with the `PREEMPTED` upcall (`preempt=upcall`).
pub const PREEMPT: &str = "preempt";
/// Name of the processor-allocation option: `share=space` (default) divides the CPUs between
/// programs using Kernel Notification (`VCPU_GRANTED`/`VCPU_REVOKED`); `share=time` gives every
/// program every vCPU it asked for, time-shared by the kernel (the baseline).
pub const SHARE: &str = "share";
/// Name of the TLB-tag switch.
pub const TLBTAG: &str = "tlbtag";

/// Parses an `on`/`off` value.
pub fn on_off(value: &str) -> Option<bool> {
    match value {
        "on" | "" => Some(true),
        "off" => Some(false),
        _ => None,
    }
}

/// Program run when `run=` is not given.
pub const DEFAULT_PROGRAM: &str = "init";

/// Ways to crash the kernel on purpose (`crash=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Crash {
    /// Call `panic!`.
    Panic,
    /// Touch an unmapped kernel address (a kernel page fault).
    PageFault,
    /// Spin forever with interrupts disabled.
    Hang,
}

impl Crash {
    /// Every crash kind with its command-line spelling.
    pub const ALL: [(Crash, &'static str); 3] =
        [(Crash::Panic, "panic"), (Crash::PageFault, "pagefault"), (Crash::Hang, "hang")];

    /// Parses the value of `crash=`.
    pub fn parse(value: &str) -> Option<Crash> {
        Self::ALL.iter().find(|(_, name)| *name == value).map(|(c, _)| *c)
    }
}

/// Iterates over the `(key, value)` words of a command line; `value` is `""` for a bare key.
pub fn words(cmdline: &str) -> impl Iterator<Item = (&str, &str)> {
    cmdline.split_ascii_whitespace().map(|word| match word.split_once('=') {
        Some((k, v)) => (k, v),
        None => (word, ""),
    })
}

/// Returns the value of the last occurrence of `key`, if present.
pub fn get<'a>(cmdline: &'a str, key: &str) -> Option<&'a str> {
    words(cmdline).filter(|(k, _)| *k == key).map(|(_, v)| v).last()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_words() {
        let line = "run=init,fault selftest quiet crash=panic";
        assert_eq!(get(line, RUN), Some("init,fault"));
        assert_eq!(get(line, SELFTEST), Some(""));
        assert_eq!(get(line, "missing"), None);
        assert_eq!(get(line, CRASH).and_then(Crash::parse), Some(Crash::Panic));
    }
}
