//! Parses a Tsumugi serial log into the machine-read lines of `tsumugi_abi::log`.
//!
//! The parser is forgiving: it accepts `\r\n` line ends, strips ANSI escape sequences and other
//! control characters, ignores every line that is not one of the contract's lines, and records
//! lines that start like a contract line but do not parse as [`Malformed`] instead of failing.

use tsumugi_abi::log;

/// What follows `domain <id> <program>` when a program starts (not named by `tsumugi_abi::log`).
pub const STARTED: &str = ": started";

/// Self-test summary words between the two counts: `<n> passed, <m> failed`.
const SUMMARY_PASSED: &str = " passed, ";
/// Self-test summary word after the failure count.
const SUMMARY_FAILED: &str = " failed";

/// The escape character that starts an ANSI sequence.
const ESCAPE: char = '\u{1b}';
/// The character after [`ESCAPE`] that opens a control sequence (CSI).
const CSI_OPEN: char = '[';
/// Final characters of a control sequence lie in this range (ECMA-48).
const CSI_FINAL: std::ops::RangeInclusive<char> = '@'..='~';

/// Result of one self-test.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelfTest {
    /// Test name.
    pub name: String,
    /// `Ok` if it passed, else the failure message.
    pub result: Result<(), String>,
}

/// The `selftest summary:` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Number of passing self-tests.
    pub passed: u64,
    /// Number of failing self-tests.
    pub failed: u64,
}

/// What happened to a domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DomainEventKind {
    /// It was loaded and started.
    Started,
    /// It exited with this status.
    Exited(u64),
    /// The kernel ended it for this reason.
    Killed(String),
}

/// One `domain ...` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainEvent {
    /// Domain id.
    pub id: u64,
    /// Program name.
    pub program: String,
    /// What happened.
    pub kind: DomainEventKind,
}

/// A line that starts like a contract line but does not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Malformed {
    /// 1-based line number in the log.
    pub line_number: usize,
    /// The cleaned line.
    pub line: String,
    /// Why it did not parse.
    pub why: &'static str,
}

/// Everything machine-readable in a serial log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParsedLog {
    /// Every line, cleaned (no line end, no escape sequences or control characters).
    pub lines: Vec<String>,
    /// Self-test results, in log order.
    pub selftests: Vec<SelfTest>,
    /// The last `selftest summary:` line.
    pub summary: Option<Summary>,
    /// Domain life-cycle events, in log order.
    pub domains: Vec<DomainEvent>,
    /// The first `KERNEL PANIC` line.
    pub panic: Option<String>,
    /// Status of the last `tsumugi: halting with status` line.
    pub halting: Option<u64>,
    /// Contract-looking lines that did not parse.
    pub malformed: Vec<Malformed>,
}

impl ParsedLog {
    /// Events of the domains that ran `program`, in log order.
    pub fn domain_events<'a>(&'a self, program: &'a str) -> impl Iterator<Item = &'a DomainEvent> {
        self.domains
            .iter()
            .filter(move |event| event.program == program)
    }
}

/// Splits a log into cleaned lines: `\r` and escape sequences removed, other control characters
/// dropped, tabs kept.
pub fn clean_lines(log: &str) -> Vec<String> {
    log.lines().map(clean_line).collect()
}

/// Removes ANSI escape sequences and control characters (except tab) from one line.
fn clean_line(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == ESCAPE {
            if chars.peek() == Some(&CSI_OPEN) {
                chars.next();
                // Skip parameter and intermediate bytes up to and including the final byte.
                for inner in chars.by_ref() {
                    if CSI_FINAL.contains(&inner) {
                        break;
                    }
                }
            } else {
                // A two-character escape (ESC + one character).
                chars.next();
            }
        } else if c == '\t' || !c.is_control() {
            out.push(c);
        }
    }
    out
}

/// Parses a whole serial log.
pub fn parse(log: &str) -> ParsedLog {
    let mut parsed = ParsedLog {
        lines: clean_lines(log),
        ..ParsedLog::default()
    };
    for (index, line) in parsed.lines.clone().iter().enumerate() {
        if let Err(why) = parse_line(line.trim(), &mut parsed) {
            parsed.malformed.push(Malformed {
                line_number: index + 1,
                line: line.clone(),
                why,
            });
        }
    }
    parsed
}

/// Records one cleaned, trimmed line; `Err` says why a contract-looking line does not parse.
fn parse_line(line: &str, parsed: &mut ParsedLog) -> Result<(), &'static str> {
    if let Some(rest) = line.strip_prefix(log::SELFTEST_SUMMARY) {
        parsed.summary =
            Some(parse_summary(rest).ok_or("summary is not `<n> passed, <m> failed`")?);
    } else if let Some(rest) = line.strip_prefix(log::SELFTEST) {
        parsed.selftests.push(parse_selftest(rest)?);
    } else if let Some(rest) = line.strip_prefix(log::DOMAIN) {
        parsed.domains.push(parse_domain(rest)?);
    } else if let Some(rest) = line.strip_prefix(log::HALTING) {
        parsed.halting = Some(
            rest.trim()
                .parse()
                .map_err(|_| "halting status is not a number")?,
        );
    } else if line.starts_with(log::PANIC) {
        parsed.panic.get_or_insert_with(|| line.to_string());
    }
    Ok(())
}

/// Parses `<n> passed, <m> failed`.
fn parse_summary(rest: &str) -> Option<Summary> {
    let (passed, rest) = rest.split_once(SUMMARY_PASSED)?;
    let failed = rest.strip_suffix(SUMMARY_FAILED)?;
    Some(Summary {
        passed: passed.trim().parse().ok()?,
        failed: failed.trim().parse().ok()?,
    })
}

/// Parses `<name> ... ok` or `<name> ... FAILED: <message>`.
fn parse_selftest(rest: &str) -> Result<SelfTest, &'static str> {
    let (name, result) = if let Some((name, message)) = rest.split_once(log::SELFTEST_FAILED) {
        (name, Err(message.to_string()))
    } else if let Some(name) = rest.strip_suffix(log::SELFTEST_OK) {
        (name, Ok(()))
    } else {
        return Err("self-test line has neither `... ok` nor `... FAILED:` (cut short?)");
    };
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Err("self-test name is empty or has spaces");
    }
    Ok(SelfTest {
        name: name.to_string(),
        result,
    })
}

/// Parses `<id> <program>: started|exited with status <n>|killed: <reason>`.
fn parse_domain(rest: &str) -> Result<DomainEvent, &'static str> {
    let colon = rest.find(':').ok_or("domain line has no `:`")?;
    let (head, event) = rest.split_at(colon);
    let mut words = head.split_whitespace();
    let (Some(id), Some(program), None) = (words.next(), words.next(), words.next()) else {
        return Err("domain line does not start with `<id> <program>`");
    };
    let id = id.parse().map_err(|_| "domain id is not a number")?;
    let kind = if event == STARTED {
        DomainEventKind::Started
    } else if let Some(status) = event.strip_prefix(log::EXITED) {
        DomainEventKind::Exited(
            status
                .trim()
                .parse()
                .map_err(|_| "exit status is not a number")?,
        )
    } else if let Some(reason) = event.strip_prefix(log::KILLED) {
        DomainEventKind::Killed(reason.to_string())
    } else {
        return Err("domain event is not `started`, `exited with status` or `killed:`");
    };
    Ok(DomainEvent {
        id,
        program: program.to_string(),
        kind,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
tsumugi 0.1.0 booting on x86_64\r
memory: 255 MiB usable\r
selftest frame_alloc_basic ... ok\r
selftest region_alloc ... FAILED: expected 3 regions, got 2\r
selftest summary: 1 passed, 1 failed\r
domain 1 syscall_errors: started\r
domain 1 syscall_errors: exited with status 0\r
domain 2 fault_exec_data: started\r
domain 2 fault_exec_data: killed: page fault: execute of non-executable memory at 0x4000; rip 0x4000\r
init: hello from ring 3\r
tsumugi: halting with status 0\r
";

    #[test]
    fn parses_a_whole_log() {
        let parsed = parse(SAMPLE);
        assert_eq!(parsed.selftests.len(), 2);
        assert_eq!(
            parsed.selftests[0],
            SelfTest {
                name: "frame_alloc_basic".into(),
                result: Ok(())
            }
        );
        assert_eq!(
            parsed.selftests[1].result,
            Err("expected 3 regions, got 2".to_string())
        );
        assert_eq!(
            parsed.summary,
            Some(Summary {
                passed: 1,
                failed: 1
            })
        );
        assert_eq!(parsed.domains.len(), 4);
        assert_eq!(parsed.domains[1].kind, DomainEventKind::Exited(0));
        assert_eq!(parsed.domains[3].id, 2);
        assert!(matches!(&parsed.domains[3].kind,
            DomainEventKind::Killed(r) if r.starts_with("page fault: execute of non-executable memory at 0x")));
        assert_eq!(parsed.halting, Some(0));
        assert_eq!(parsed.panic, None);
        assert!(parsed.malformed.is_empty());
        assert!(parsed.lines.iter().all(|l| !l.ends_with('\r')));
        assert_eq!(parsed.domain_events("fault_exec_data").count(), 2);
    }

    #[test]
    fn reports_malformed_lines_and_keeps_going() {
        let log = "selftest cut_short ...\n\
                   selftest summary: many passed\n\
                   domain x init: started\n\
                   domain 3 init: exploded\n\
                   domain 4: started\n\
                   tsumugi: halting with status soon\n\
                   selftest fine ... ok\n";
        let parsed = parse(log);
        assert_eq!(parsed.malformed.len(), 6);
        assert_eq!(parsed.malformed[0].line_number, 1);
        assert_eq!(
            parsed.selftests,
            vec![SelfTest {
                name: "fine".into(),
                result: Ok(())
            }]
        );
        assert_eq!(parsed.summary, None);
        assert!(parsed.domains.is_empty());
        assert_eq!(parsed.halting, None);
    }

    #[test]
    fn strips_escape_sequences_and_noise() {
        let log = "\u{1b}[2J\u{1b}[1;1Hselftest a ... ok\n\u{0}\u{7}tsumugi: halting with status 3\n\
                   random noise line: with a colon\nKERNEL PANIC on cpu 0: oops\nKERNEL PANIC again";
        let parsed = parse(log);
        assert_eq!(parsed.selftests.len(), 1);
        assert_eq!(parsed.halting, Some(3));
        assert_eq!(parsed.panic.as_deref(), Some("KERNEL PANIC on cpu 0: oops"));
        assert!(parsed.malformed.is_empty());
    }

    #[test]
    fn failure_message_may_contain_the_ok_marker() {
        let parsed = parse("selftest t ... FAILED: wanted `... ok`\n");
        assert_eq!(
            parsed.selftests[0].result,
            Err("wanted `... ok`".to_string())
        );
    }

    #[test]
    fn empty_log_parses_to_nothing() {
        assert_eq!(parse(""), ParsedLog::default());
    }

    proptest::proptest! {
        #[test]
        fn never_panics(log in "\\PC*") {
            let parsed = parse(&log);
            proptest::prop_assert!(parsed.lines.len() <= log.lines().count());
        }

        #[test]
        fn finds_every_selftest_among_noise(
            names in proptest::collection::vec("[a-z_]{1,12}", 0..8),
            noise in "[ -~]{0,40}",
        ) {
            let mut log = String::new();
            for name in &names {
                log.push_str(&format!("{noise}\r\nselftest {name} ... ok\r\n"));
            }
            let parsed = parse(&log);
            let found: Vec<_> = parsed.selftests.iter().map(|t| t.name.clone()).collect();
            // Noise that happens to look like a self-test line may add entries, never remove ours.
            for name in &names {
                proptest::prop_assert!(found.contains(name));
            }
        }
    }
}
