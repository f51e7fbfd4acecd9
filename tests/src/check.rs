//! Judges one QEMU run: given a [`Suite`], how the run ended and its serial log, lists every check
//! with its verdict.

use tsumugi_abi::exit::describe_guest_status;
use tsumugi_abi::log;

use crate::logparse::{self, DomainEventKind, ParsedLog};
use crate::outcome::Outcome;
use crate::suites::{Check, Expected, Suite};

/// The verdict on one check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckResult {
    /// What was checked, e.g. `selftest frame_alloc_basic` or `domain init exited with status 0`.
    pub description: String,
    /// Whether it held.
    pub passed: bool,
    /// What was found: the evidence for a pass, the reason for a failure.
    pub detail: String,
}

impl CheckResult {
    fn new(description: String, passed: bool, detail: impl Into<String>) -> CheckResult {
        CheckResult {
            description,
            passed,
            detail: detail.into(),
        }
    }
}

/// Evaluates every check of `suite` against a run that ended with `outcome` and printed `log`.
///
/// The first result is always the outcome itself (guest status or timeout); the rest follow
/// `suite.checks` in order, [`Check::SelfTests`] expanding to one result per self-test plus the
/// summary.
pub fn evaluate(suite: &Suite, outcome: &Outcome, log: &str) -> Vec<CheckResult> {
    let parsed = logparse::parse(log);
    let mut results = vec![check_outcome(suite.expected, outcome)];
    for check in &suite.checks {
        match check {
            Check::SelfTests => check_selftests(&parsed, &mut results),
            Check::DomainExited { program, status } => {
                results.push(check_domain_exited(&parsed, program, *status));
            }
            Check::DomainKilled { program, reason } => {
                results.push(check_domain_killed(&parsed, program, reason));
            }
            Check::LogLine(text) => {
                let found = parsed.lines.iter().any(|line| line.trim() == text);
                results.push(CheckResult::new(
                    format!("log has the line `{text}`"),
                    found,
                    if found { "found" } else { "no such line" },
                ));
            }
            Check::LogContains(text) => {
                let found = parsed.lines.iter().any(|line| line.contains(text.as_str()));
                results.push(CheckResult::new(
                    format!("log contains `{text}`"),
                    found,
                    if found { "found" } else { "not found" },
                ));
            }
            Check::Halting(status) => results.push(check_halting(&parsed, *status)),
            Check::GroupFramesBalanced(group) => results.push(check_group_balanced(&parsed, group)),
            Check::GroupHeapBalanced { group, slack } => results.push(check_group_heap(&parsed, group, *slack)),
            Check::ConcurrentDistinct(program) => results.push(check_concurrent_distinct(&parsed, program)),
            Check::FirstBelowSecond { prefix } => results.push(check_first_below_second(&parsed, prefix)),
        }
    }
    results
}

/// Compares how the run ended with how it should have.
fn check_outcome(expected: Expected, outcome: &Outcome) -> CheckResult {
    match expected {
        Expected::Status(status) => CheckResult::new(
            format!("guest status {status} ({})", describe_guest_status(status)),
            *outcome == Outcome::Guest(status),
            outcome.describe(),
        ),
        Expected::Timeout => CheckResult::new(
            "runs until the harness stops it".to_string(),
            matches!(outcome, Outcome::TimedOut(_)),
            outcome.describe(),
        ),
    }
}

/// One result per self-test line, then the summary.
fn check_selftests(parsed: &ParsedLog, results: &mut Vec<CheckResult>) {
    for test in &parsed.selftests {
        let (passed, detail) = match &test.result {
            Ok(()) => (true, "ok".to_string()),
            Err(message) => (false, message.clone()),
        };
        results.push(CheckResult::new(
            format!("selftest {}", test.name),
            passed,
            detail,
        ));
    }
    let description = "selftest summary".to_string();
    let Some(summary) = parsed.summary else {
        let cut = parsed
            .malformed
            .iter()
            .find(|m| m.line.trim_start().starts_with(log::SELFTEST));
        let detail = match cut {
            Some(m) => format!(
                "no `{}` line; line {} unreadable: {}",
                log::SELFTEST_SUMMARY.trim_end(),
                m.line_number,
                m.line
            ),
            None => format!("no `{}` line in the log", log::SELFTEST_SUMMARY.trim_end()),
        };
        results.push(CheckResult::new(description, false, detail));
        return;
    };
    let seen_passed = parsed.selftests.iter().filter(|t| t.result.is_ok()).count() as u64;
    let seen_failed = parsed.selftests.len() as u64 - seen_passed;
    let detail = format!("{} passed, {} failed", summary.passed, summary.failed);
    let verdict = if summary.failed != 0 {
        Err(detail)
    } else if summary.passed == 0 {
        Err(format!("{detail}: no self-test ran"))
    } else if (summary.passed, summary.failed) != (seen_passed, seen_failed) {
        Err(format!(
            "{detail}, but the log shows {seen_passed} passed, {seen_failed} failed"
        ))
    } else {
        Ok(detail)
    };
    results.push(match verdict {
        Ok(detail) => CheckResult::new(description, true, detail),
        Err(detail) => CheckResult::new(description, false, detail),
    });
}

/// Every run of `program` exited with `status` (and there was at least one).
fn check_domain_exited(parsed: &ParsedLog, program: &str, status: u64) -> CheckResult {
    let description = format!("domain {program} exited with status {status}");
    check_domain_ends(parsed, program, description, |kind| {
        *kind == DomainEventKind::Exited(status)
    })
}

/// Every run of `program` was killed with a reason containing `reason` (and there was at least one).
fn check_domain_killed(parsed: &ParsedLog, program: &str, reason: &str) -> CheckResult {
    let description = format!("domain {program} killed");
    check_domain_ends(
        parsed,
        program,
        description,
        |kind| matches!(kind, DomainEventKind::Killed(why) if why.contains(reason)),
    )
    .with_expectation(format!("expected a reason containing `{reason}`"))
}

impl CheckResult {
    /// On a failure, says what was expected before what was found.
    fn with_expectation(mut self, expectation: String) -> CheckResult {
        if !self.passed {
            self.detail = format!("{expectation}; {}", self.detail);
        }
        self
    }
}

/// Shared part of the domain checks: finds how each run of `program` ended and applies `good`.
fn check_domain_ends(
    parsed: &ParsedLog,
    program: &str,
    description: String,
    good: impl Fn(&DomainEventKind) -> bool,
) -> CheckResult {
    let ends: Vec<_> = parsed
        .domain_events(program)
        .filter(|event| event.kind != DomainEventKind::Started)
        .collect();
    if ends.is_empty() {
        let started = parsed.domain_events(program).next().is_some();
        let detail = if started {
            format!("domain {program} started but its end is not in the log")
        } else {
            format!(
                "no `{}<id> {program}: ...` line: the program never started",
                log::DOMAIN
            )
        };
        return CheckResult::new(description, false, detail);
    }
    let describe = |kind: &DomainEventKind| match kind {
        DomainEventKind::Exited(status) => format!("exited with status {status}"),
        DomainEventKind::Killed(reason) => format!("killed: {reason}"),
        DomainEventKind::Started => "started".to_string(),
    };
    match ends.iter().find(|event| !good(&event.kind)) {
        Some(bad) => CheckResult::new(
            description,
            false,
            format!("domain {} {}", bad.id, describe(&bad.kind)),
        ),
        None => {
            let last = ends[ends.len() - 1];
            CheckResult::new(
                description,
                true,
                format!("domain {} {}", last.id, describe(&last.kind)),
            )
        }
    }
}

/// The kernel's last words name `status`.
fn check_halting(parsed: &ParsedLog, status: u64) -> CheckResult {
    let description = format!("log contains `{}{status}`", log::HALTING);
    match parsed.halting {
        Some(found) if found == status => CheckResult::new(description, true, "found"),
        Some(found) => CheckResult::new(
            description,
            false,
            format!("kernel halted with status {found}"),
        ),
        None => CheckResult::new(description, false, "the kernel never said it halts"),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::suites;

    const GOOD_KERNEL_LOG: &str = "\
tsumugi: booting\r
selftest frame_alloc_basic ... ok\r
selftest view_share ... ok\r
selftest summary: 2 passed, 0 failed\r
domain 1 syscall_errors: started\r
domain 1 syscall_errors: exited with status 0\r
domain 2 fault_kernel_read: started\r
domain 2 fault_kernel_read: killed: page fault: read of kernel memory at 0xffffffff80001000; rip 0x400123\r
domain 3 fault_exec_data: started\r
domain 3 fault_exec_data: killed: page fault: execute of non-executable memory at 0x402000; rip 0x402000\r
domain 4 fault_write_text: started\r
domain 4 fault_write_text: killed: page fault: write to read-only memory at 0x401000; rip 0x401010\r
domain 5 init: started\r
init: hello from ring 3\r
domain 5 init: exited with status 0\r
tsumugi: halting with status 0\r
";

    fn kernel_suite() -> Suite {
        suites::x86_64()
            .into_iter()
            .find(|s| s.name == "kernel")
            .unwrap()
    }

    fn failures(results: &[CheckResult]) -> Vec<&str> {
        results
            .iter()
            .filter(|r| !r.passed)
            .map(|r| r.description.as_str())
            .collect()
    }

    #[test]
    fn good_kernel_run_passes_every_check() {
        let results = evaluate(&kernel_suite(), &Outcome::Guest(0), GOOD_KERNEL_LOG);
        assert_eq!(failures(&results), Vec::<&str>::new(), "{results:#?}");
        // outcome + 2 self-tests + summary + 5 domains + greeting + halting
        assert_eq!(results.len(), 11);
        assert_eq!(results[1].description, "selftest frame_alloc_basic");
        assert!(results
            .iter()
            .any(|r| r.description == "domain fault_exec_data killed"));
    }

    #[test]
    fn wrong_fault_kind_fails_with_the_reason() {
        let log = GOOD_KERNEL_LOG.replace(
            "execute of non-executable memory at 0x402000",
            "read of unmapped memory at 0x402000",
        );
        let results = evaluate(&kernel_suite(), &Outcome::Guest(0), &log);
        assert_eq!(failures(&results), ["domain fault_exec_data killed"]);
        let bad = results.iter().find(|r| !r.passed).unwrap();
        assert!(
            bad.detail.contains("read of unmapped memory"),
            "{}",
            bad.detail
        );
        assert!(
            bad.detail.contains("expected a reason containing"),
            "{}",
            bad.detail
        );
    }

    #[test]
    fn failing_selftest_and_missing_lines_fail() {
        let log = GOOD_KERNEL_LOG
            .replace(
                "selftest view_share ... ok",
                "selftest view_share ... FAILED: views differ",
            )
            .replace(
                "selftest summary: 2 passed, 0 failed",
                "selftest summary: 1 passed, 1 failed",
            )
            .replace("init: hello from ring 3\r\n", "")
            .replace("domain 1 syscall_errors: exited with status 0\r\n", "")
            .replace(
                "tsumugi: halting with status 0",
                "tsumugi: halting with status 126",
            );
        let results = evaluate(&kernel_suite(), &Outcome::Guest(126), &log);
        assert_eq!(
            failures(&results),
            [
                "guest status 0 (success)",
                "selftest view_share",
                "selftest summary",
                "domain syscall_errors exited with status 0",
                "log has the line `init: hello from ring 3`",
                "log contains `tsumugi: halting with status 0`",
            ]
        );
        let syscall = results
            .iter()
            .find(|r| r.description.contains("syscall_errors"))
            .unwrap();
        assert!(syscall
            .detail
            .contains("started but its end is not in the log"));
    }

    #[test]
    fn summary_must_exist_agree_and_count_something() {
        let suite = kernel_suite();
        let no_summary = GOOD_KERNEL_LOG.replace("selftest summary: 2 passed, 0 failed\r\n", "");
        let summary = |log: &str| {
            evaluate(&suite, &Outcome::Guest(0), log)
                .into_iter()
                .find(|r| r.description == "selftest summary")
                .unwrap()
        };
        assert!(!summary(&no_summary).passed);
        let disagrees = GOOD_KERNEL_LOG.replace("2 passed", "3 passed");
        assert!(summary(&disagrees)
            .detail
            .contains("the log shows 2 passed"));
        assert!(!summary("selftest summary: 0 passed, 0 failed\n").passed);
    }

    #[test]
    fn program_that_never_ran_fails() {
        let results = evaluate(
            &kernel_suite(),
            &Outcome::Guest(0),
            "tsumugi: halting with status 0\n",
        );
        let init = results
            .iter()
            .find(|r| r.description == "domain init exited with status 0")
            .unwrap();
        assert!(!init.passed);
        assert!(init.detail.contains("never started"));
    }

    #[test]
    fn panic_suite_needs_status_127_and_a_report() {
        let suite = suites::x86_64()
            .into_iter()
            .find(|s| s.name == "panic-report")
            .unwrap();
        let log =
            "KERNEL PANIC on cpu 0: crash=panic requested\nbacktrace:\n  0xffffffff80001234\n";
        let results = evaluate(&suite, &Outcome::Guest(127), log);
        assert_eq!(failures(&results), Vec::<&str>::new());
        let results = evaluate(&suite, &Outcome::NoStatus, "booting\n");
        assert_eq!(failures(&results).len(), 3);
        assert!(results[0].detail.contains("triple fault"));
    }

    #[test]
    fn hang_suite_passes_only_on_timeout() {
        let suite = suites::x86_64()
            .into_iter()
            .find(|s| s.name == "hang-timeout")
            .unwrap();
        let timed_out = Outcome::TimedOut(Duration::from_secs(8));
        let probed = "hanging on purpose (crash=hang)\nhang probe: cpu 0 EL1h pc 0xffffffffc026a8f0 [kernel] kernel::boot::crash_on_purpose+0x20\n";
        let results = evaluate(&suite, &timed_out, probed);
        assert_eq!(results.len(), 3);
        assert!(results.iter().all(|r| r.passed), "{results:?}");
        assert_eq!(results[0].detail, "timed out after 8 s");
        assert!(!evaluate(&suite, &Outcome::Guest(0), probed)[0].passed);
        // Without the probe's report (or with one that does not name the function) it fails.
        assert_eq!(evaluate(&suite, &timed_out, "hanging on purpose (crash=hang)\n").iter().filter(|r| !r.passed).count(), 2);
    }

    #[test]
    fn unexpected_timeout_fails_the_outcome() {
        let results = evaluate(
            &kernel_suite(),
            &Outcome::TimedOut(Duration::from_secs(120)),
            GOOD_KERNEL_LOG,
        );
        assert_eq!(failures(&results), ["guest status 0 (success)"]);
        assert_eq!(results[0].detail, "timed out after 120 s");
    }
}

/// The numbers (decimal, or hex with 0x) in `text`, in order.
fn numbers(text: &str) -> Vec<u64> {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter_map(|w| match w.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => w.parse().ok(),
        })
        .collect()
}

fn check_group_balanced(parsed: &ParsedLog, group: &str) -> CheckResult {
    let description = format!("group {group} gave back every frame");
    let prefix = format!("{}{group}:", log::GROUP);
    // The last run of the group: a group run twice is judged once the kernel's caches (kernel
    // page tables for stacks, slabs) are warm.
    let heap = format!("{prefix}{}", log::HEAP_IN_USE);
    let Some(line) = parsed.lines.iter().rev().find(|l| l.trim_start().starts_with(&prefix) && !l.trim_start().starts_with(&heap)) else {
        return CheckResult::new(description, false, format!("no `{prefix}` line"));
    };
    let n = numbers(&line.trim_start()[prefix.len()..]);
    let passed = n.len() >= 2 && n[0] == n[1];
    CheckResult::new(description, passed, line.trim().to_string())
}

fn check_group_heap(parsed: &ParsedLog, group: &str, slack: u64) -> CheckResult {
    let description = format!("group {group} gave back its kernel heap (within {slack} bytes of caches)");
    let prefix = format!("{}{group}:{}", log::GROUP, log::HEAP_IN_USE);
    let Some(line) = parsed.lines.iter().rev().find(|l| l.trim_start().starts_with(&prefix)) else {
        return CheckResult::new(description, false, format!("no `{prefix}` line"));
    };
    let n = numbers(&line.trim_start()[prefix.len()..]);
    let passed = n.len() >= 2 && n[1] <= n[0].saturating_add(slack);
    CheckResult::new(description, passed, line.trim().to_string())
}

fn check_concurrent_distinct(parsed: &ParsedLog, program: &str) -> CheckResult {
    let description = format!("concurrent runs of {program} live at distinct addresses");
    let started = format!("{program}: started at ");
    let mut live: Vec<(u64, u64)> = Vec::new();
    let mut overlaps = 0;
    for line in &parsed.lines {
        let l = line.trim_start();
        let Some(rest) = l.strip_prefix(log::DOMAIN) else { continue };
        let Some((id, tail)) = rest.split_once(' ') else { continue };
        let Ok(id) = id.parse::<u64>() else { continue };
        if let Some(addr) = tail.strip_prefix(&started) {
            let addr = numbers(addr).first().copied().unwrap_or(0);
            if let Some((other, _)) = live.iter().find(|(_, a)| *a == addr) {
                return CheckResult::new(description, false, format!("domains {other} and {id} both at {addr:#x}"));
            }
            overlaps += usize::from(!live.is_empty());
            live.push((id, addr));
        } else if tail.starts_with(program) && (tail.contains(log::EXITED) || tail.contains(log::KILLED)) {
            live.retain(|(d, _)| *d != id);
        }
    }
    CheckResult::new(description, overlaps > 0, format!("{overlaps} overlapping starts"))
}

fn check_first_below_second(parsed: &ParsedLog, prefix: &str) -> CheckResult {
    let description = format!("`{prefix}` first number below second");
    let Some(line) = parsed.lines.iter().find(|l| l.trim_start().starts_with(prefix)) else {
        return CheckResult::new(description, false, "no such line");
    };
    let n = numbers(&line.trim_start()[prefix.len()..]);
    let passed = n.len() >= 2 && n[0] < n[1];
    CheckResult::new(description, passed, line.trim().to_string())
}

#[cfg(test)]
mod more_tests {
    use super::*;

    #[test]
    fn numbers_are_found() {
        assert_eq!(numbers("before 12, after 0x1f"), vec![12, 31]);
    }

    #[test]
    fn concurrent_distinct_catches_a_shared_address() {
        let good = "domain 1 twin: started at 0x4000\ndomain 2 twin: started at 0x5000\ndomain 1 twin: exited with status 0\ndomain 2 twin: exited with status 0\n";
        assert!(check_concurrent_distinct(&logparse::parse(good), "twin").passed);
        let bad = "domain 1 twin: started at 0x4000\ndomain 2 twin: started at 0x4000\n";
        assert!(!check_concurrent_distinct(&logparse::parse(bad), "twin").passed);
        let sequential = "domain 1 twin: started at 0x4000\ndomain 1 twin: exited with status 0\ndomain 2 twin: started at 0x4000\n";
        assert!(!check_concurrent_distinct(&logparse::parse(sequential), "twin").passed, "no overlap: vacuous");
    }

    #[test]
    fn group_balance_is_read() {
        let ok = logparse::parse("group a+b: frames free before 10, after 10\n");
        assert!(check_group_balanced(&ok, "a+b").passed);
        let leak = logparse::parse("group a+b: frames free before 10, after 9\n");
        assert!(!check_group_balanced(&leak, "a+b").passed);
    }

    #[test]
    fn group_heap_balance_allows_only_the_slack() {
        let log = "group f: frames free before 10, after 10\ngroup f: heap bytes in use before 1000, after 1500\n";
        let parsed = logparse::parse(log);
        assert!(check_group_heap(&parsed, "f", 500).passed);
        assert!(!check_group_heap(&parsed, "f", 499).passed);
        assert!(check_group_balanced(&parsed, "f").passed, "the frame line is still the one read");
        assert!(!check_group_heap(&logparse::parse("group f: frames free before 1, after 1\n"), "f", 1 << 20).passed);
        // A group run twice is judged by its last run.
        let twice = "group f: frames free before 10, after 8\ngroup f: heap bytes in use before 0, after 900\ngroup f: frames free before 8, after 8\ngroup f: heap bytes in use before 900, after 900\n";
        assert!(check_group_balanced(&logparse::parse(twice), "f").passed);
        assert!(check_group_heap(&logparse::parse(twice), "f", 0).passed);
    }
}
