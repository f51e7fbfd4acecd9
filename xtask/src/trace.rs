//! `cargo xtask trace`: boot a tracing build, decode the trace the kernel and libuthread print
//! at the end (`tsumugi_abi::trace`), check it against the kernel's counters, and write a
//! Chrome trace-event JSON file that ui.perfetto.dev opens: one track per CPU, per vCPU and per
//! user thread.
//!
//! The tracing build is a flavor of its own ([`Flavor::Trace`]: the kernel's and libuthread's
//! `trace` features, its outputs in `target/trace`), so plain builds, tests and benchmarks never contain
//! a recording instruction.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use serde_json::{json, Value};
use tsumugi_abi::kn::EventKind;
use tsumugi_abi::log::DOMAIN;
use tsumugi_abi::trace::{self as fmt, split_program_vcpu, Kind, Record};
use tsumugi_abi::Syscall;

use crate::arch::Arch;
use crate::build::{self, Artifacts, Flavor};
use crate::cmd::workspace_root;
use crate::qemu::{self, Accel, Console, Machine};
use crate::run::BootArgs;
use crate::setup::{self, Tools};

/// Default time limit of `trace`, in seconds.
pub const DEFAULT_TIMEOUT_SECS: u64 = 600;

/// Arguments of `cargo xtask trace`.
#[derive(Args, Debug)]
pub struct TraceArgs {
    /// How to build and boot (as `run`).
    #[command(flatten)]
    pub boot: BootArgs,
    /// Kill QEMU after this many seconds.
    #[arg(long, default_value_t = DEFAULT_TIMEOUT_SECS, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: u64,
    /// Where to write the trace (default `target/trace/<arch>.json`).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// `cargo xtask trace`.
pub fn run(args: &TraceArgs) -> Result<u8> {
    let boot = &args.boot;
    boot.arch.require_supported()?;
    if boot.accel == Accel::Kvm {
        eprintln!("note: with --accel kvm, a /dev/kvm that cannot run ring 3 resets the guest (see DESIGN §2)");
    }
    let tools = setup::ensure(&[boot.arch])?;
    for path in boot.programs.iter().filter(|p| p.is_file()) {
        eprintln!("note: {} is an ELF built elsewhere, without libuthread's `trace` feature: its user-thread switches are not recorded (give its crate folder instead)", path.display());
    }
    let artifacts = build::build_flavor(&tools, boot.arch, boot.release, &boot.programs, Flavor::Trace)?;
    let log = workspace_root().join("target").join("trace").join(format!("{}.log", boot.arch.name()));
    let cmdline = boot.boot_words.join(" ");
    let machine = Machine::from_boot(boot, &artifacts, &cmdline);
    let finished = qemu::run(&qemu::command(&machine), boot.arch, Duration::from_secs(args.timeout), &Console::Capture { log: log.clone() })?;
    // What the programs and the kernel printed, without the trace's own lines.
    for line in finished.log.lines().filter(|l| !is_trace_line(l)) {
        println!("{line}");
    }
    eprintln!("trace: {}", finished.outcome.describe());
    let trace = Trace::parse(&finished.log).with_context(|| format!("decoding the trace in {}", log.display()))?;
    let out = args.out.clone().unwrap_or_else(|| log.with_extension("json"));
    write_json(&trace, &out)?;
    let summary = trace.summary();
    for line in &summary {
        eprintln!("trace: {line}");
    }
    eprintln!("trace: wrote {} — open it at https://ui.perfetto.dev (Open trace file)", out.display());
    let problems = trace.verify();
    for p in &problems {
        eprintln!("trace: MISMATCH {p}");
    }
    if !problems.is_empty() {
        return Ok(1);
    }
    Ok(finished.outcome.exit_code())
}

/// Whether a log line belongs to the trace (left out of what `trace` echoes).
fn is_trace_line(line: &str) -> bool {
    [fmt::LINE, fmt::CLOCK, fmt::END, fmt::COUNTERS, fmt::DONE].iter().any(|p| line.contains(p.trim_end()))
}

/// One decoded stream.
#[derive(Debug, Default)]
pub struct Stream {
    /// Its records in order.
    pub records: Vec<Record>,
    /// Records its buffer had no room for.
    pub dropped: u64,
}

/// A CPU's counters as the kernel printed them at the dump.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuCounters {
    /// `Counter::ContextSwitches`.
    pub switches: u64,
    /// `Counter::ViewSwitches`.
    pub view_switches: u64,
    /// `Counter::Preemptions`.
    pub preemptions: u64,
}

/// What the kernel's report said about one program.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProgramReport {
    /// Its name.
    pub name: String,
    /// Context switches to its threads.
    pub switches: Option<u64>,
    /// View switches at those switches.
    pub view_switches: Option<u64>,
    /// Upcalls by kind (blocked, preempted, fault, vcpu granted), if the kernel printed them.
    pub upcalls: Option<[u64; 4]>,
}

/// The upcall kinds the kernel's report counts, in its order.
pub const REPORTED_UPCALLS: [EventKind; 4] = [EventKind::Blocked, EventKind::Preempted, EventKind::Fault, EventKind::VcpuGranted];

/// A decoded trace and what the log said beside it.
#[derive(Debug, Default)]
pub struct Trace {
    /// Trace-clock ticks per second.
    pub hz: u64,
    /// Kernel streams by CPU.
    pub cpus: BTreeMap<usize, Stream>,
    /// User streams by (kernel thread that printed them, vCPU).
    pub users: BTreeMap<(u64, usize), Stream>,
    /// Each CPU's counters at the dump.
    pub counters: BTreeMap<usize, CpuCounters>,
    /// Programs by id, from the kernel's `domain` lines.
    pub programs: BTreeMap<u64, ProgramReport>,
}

/// A stream being read: its lines so far.
#[derive(Default)]
struct Pending {
    next_line: usize,
    records: Vec<Record>,
    ended: bool,
    dropped: u64,
}

fn field<'a>(words: &[&'a str], key: &str) -> Result<&'a str> {
    words
        .iter()
        .find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
        .with_context(|| format!("no `{key}=` in `{}`", words.join(" ")))
}

fn number(words: &[&str], key: &str) -> Result<u64> {
    let v = field(words, key)?;
    v.parse().with_context(|| format!("`{key}={v}` is not a number"))
}

/// Decodes one line's base64 text into records.
pub fn decode_line(text: &str) -> Result<Vec<Record>> {
    let mut bytes = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes() {
        let v = fmt::base64_value(c).with_context(|| format!("`{}` is not base64", c as char))?;
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            bytes.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    let mut records = Vec::new();
    let (mut at, mut prev) = (0usize, 0u64);
    let varint = |at: &mut usize| -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *bytes.get(*at).context("a record is cut short")?;
            *at += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        bail!("a varint runs past 64 bits")
    };
    while at < bytes.len() {
        let kind = Kind::from_u8(bytes[at]).with_context(|| format!("unknown record kind {}", bytes[at]))?;
        at += 1;
        let time = prev.wrapping_add(varint(&mut at)?);
        let (a, b) = (varint(&mut at)?, varint(&mut at)?);
        records.push(Record { time, kind, a, b });
        prev = time;
    }
    Ok(records)
}

/// `cpu3` → Cpu(3), `user12.v1` → User(12, 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum StreamId {
    Cpu(usize),
    User(u64, usize),
}

fn stream_id(s: &str) -> Result<StreamId> {
    if let Some(n) = s.strip_prefix("cpu") {
        return Ok(StreamId::Cpu(n.parse().with_context(|| format!("bad stream `{s}`"))?));
    }
    let (k, v) = s.strip_prefix("user").and_then(|r| r.split_once(".v")).with_context(|| format!("bad stream `{s}`"))?;
    Ok(StreamId::User(k.parse().with_context(|| format!("bad stream `{s}`"))?, v.parse().with_context(|| format!("bad stream `{s}`"))?))
}

impl Trace {
    /// Decodes the trace lines of a serial log (anything else on a line before the prefix is
    /// ignored, so a line another CPU's output ran into is still read).
    pub fn parse(log: &str) -> Result<Trace> {
        let mut trace = Trace::default();
        let mut pending: BTreeMap<StreamId, Pending> = BTreeMap::new();
        let mut done = false;
        for (i, line) in log.lines().enumerate() {
            let at = |e: anyhow::Error| e.context(format!("log line {}", i + 1));
            if let Some(rest) = after(line, fmt::CLOCK) {
                trace.hz = number(&rest.split_whitespace().collect::<Vec<_>>(), "hz").map_err(at)?;
            } else if let Some(rest) = after(line, fmt::LINE) {
                let words: Vec<&str> = rest.split_whitespace().collect();
                let [stream, n, text] = words[..] else { return Err(at(anyhow::anyhow!("malformed trace line `{line}`"))) };
                let id = stream_id(stream).map_err(at)?;
                let p = pending.entry(id).or_default();
                let n: usize = n.parse().map_err(|_| at(anyhow::anyhow!("bad line number `{n}`")))?;
                ensure!(!p.ended, "log line {}: stream {stream} continues after its end", i + 1);
                ensure!(n == p.next_line, "log line {}: stream {stream} line {n} where line {} was due (lost lines)", i + 1, p.next_line);
                p.next_line += 1;
                p.records.extend(decode_line(text).map_err(at)?);
            } else if let Some(rest) = after(line, fmt::END) {
                let words: Vec<&str> = rest.split_whitespace().collect();
                let stream = *words.first().context("trace-end without a stream").map_err(at)?;
                let id = stream_id(stream).map_err(at)?;
                let p = pending.entry(id).or_default();
                let (lines, records) = (number(&words, "lines").map_err(at)?, number(&words, "records").map_err(at)?);
                ensure!(lines as usize == p.next_line, "stream {stream}: {} lines read, {lines} printed", p.next_line);
                ensure!(records as usize == p.records.len(), "stream {stream}: {} records decoded, {records} printed", p.records.len());
                p.dropped = number(&words, "dropped").map_err(at)?;
                p.ended = true;
            } else if let Some(rest) = after(line, fmt::COUNTERS) {
                let words: Vec<&str> = rest.split_whitespace().collect();
                let Some(StreamId::Cpu(cpu)) = words.first().and_then(|w| stream_id(w).ok()) else {
                    return Err(at(anyhow::anyhow!("malformed `{line}`")));
                };
                let c = CpuCounters {
                    switches: number(&words, "switches").map_err(at)?,
                    view_switches: number(&words, "view-switches").map_err(at)?,
                    preemptions: number(&words, "preemptions").map_err(at)?,
                };
                trace.counters.insert(cpu, c);
            } else if line.trim_end().ends_with(fmt::DONE) {
                done = true;
            } else {
                trace.program_line(line);
            }
        }
        ensure!(
            trace.hz > 0 && done,
            "the log holds no complete trace (no `{}` and `{}` lines): the kernel prints it when it halts, so a run that \
             does not halt (a hang, a kernel panic, --timeout too short) leaves none; see the log above",
            fmt::CLOCK.trim_end(),
            fmt::DONE
        );
        for (id, p) in pending {
            ensure!(p.ended, "stream {id:?} has no `{}` line (cut short)", fmt::END.trim_end());
            let stream = Stream { records: p.records, dropped: p.dropped };
            match id {
                StreamId::Cpu(c) => trace.cpus.insert(c, stream),
                StreamId::User(k, v) => trace.users.insert((k, v), stream),
            };
        }
        Ok(trace)
    }

    /// Reads the kernel's `domain N name: started`, `domain N: T threads, S switches, V view
    /// switches` and `domain N: upcalls ...` lines.
    fn program_line(&mut self, line: &str) {
        let Some(rest) = line.trim_start().strip_prefix(DOMAIN) else { return };
        let Some((id, rest)) = rest.split_once([' ', ':']) else { return };
        let Ok(id) = id.parse::<u64>() else { return };
        let nums = |s: &str| -> Vec<u64> { s.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect() };
        if let Some(name) = rest.split_once(": started at").map(|(n, _)| n.trim()) {
            self.programs.entry(id).or_default().name = name.to_string();
        } else if let Some(r) = rest.strip_prefix(' ').and_then(|r| r.strip_prefix("upcalls ")) {
            if let [b, p, f, g] = nums(r)[..] {
                self.programs.entry(id).or_default().upcalls = Some([b, p, f, g]);
            }
        } else if rest.contains(" switches, ") && rest.contains(" view switches") {
            if let [_, s, v] = nums(rest)[..] {
                let p = self.programs.entry(id).or_default();
                (p.switches, p.view_switches) = (Some(s), Some(v));
            }
        }
    }

    /// The program of each kernel thread, from the switch records.
    pub fn thread_programs(&self) -> BTreeMap<u64, u64> {
        let mut map = BTreeMap::new();
        for r in self.cpus.values().flat_map(|s| &s.records).filter(|r| r.kind == Kind::Switch) {
            map.insert(r.a, split_program_vcpu(r.b).0);
        }
        map
    }

    /// Records per kind, per program: switches, view switches (every root load while one of
    /// its threads is this CPU's current one: by the switch to it or a reload while it runs, as
    /// the kernel counts them), upcalls by kind, syscalls by number.
    pub fn per_program(&self) -> BTreeMap<u64, ProgramCounts> {
        let mut out: BTreeMap<u64, ProgramCounts> = BTreeMap::new();
        for s in self.cpus.values() {
            let mut running = 0u64;
            for r in &s.records {
                match r.kind {
                    Kind::Switch => {
                        running = split_program_vcpu(r.b).0;
                        out.entry(running).or_default().switches += 1;
                    }
                    Kind::Idle => running = 0,
                    Kind::ViewSwitch if running != 0 => out.entry(running).or_default().view_switches += 1,
                    Kind::Upcall => *out.entry(split_program_vcpu(r.b).0).or_default().upcalls.entry(r.a).or_default() += 1,
                    Kind::Syscall => *out.entry(running).or_default().syscalls.entry(r.a).or_default() += 1,
                    _ => {}
                }
            }
        }
        let programs = self.thread_programs();
        for ((thread, _), s) in &self.users {
            let p = programs.get(thread).copied().unwrap_or(0);
            out.entry(p).or_default().user_switches += s.records.len() as u64;
        }
        out
    }

    /// Every difference between the trace and the kernel's counters (empty: they agree).
    pub fn verify(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for (who, s) in self.cpus.iter().map(|(c, s)| (format!("cpu{c}"), s)).chain(self.users.iter().map(|((k, v), s)| (format!("user{k}.v{v}"), s))) {
            if s.dropped > 0 {
                problems.push(format!("{who}: {} records dropped (its buffer was full): the counts cannot match", s.dropped));
            }
        }
        for (cpu, c) in &self.counters {
            let Some(s) = self.cpus.get(cpu) else {
                problems.push(format!("cpu{cpu}: counters but no records"));
                continue;
            };
            let count = |k: Kind| s.records.iter().filter(|r| r.kind == k).count() as u64;
            for (what, k, want) in [("switches", Kind::Switch, c.switches), ("view switches", Kind::ViewSwitch, c.view_switches), ("preemptions", Kind::Preempt, c.preemptions)] {
                if count(k) != want {
                    problems.push(format!("cpu{cpu}: {} {what} recorded, the kernel counted {want}", count(k)));
                }
            }
        }
        let counts = self.per_program();
        for (id, report) in &self.programs {
            let got = counts.get(id).cloned().unwrap_or_default();
            let name = &report.name;
            if let Some(want) = report.switches.filter(|&w| w != got.switches) {
                problems.push(format!("program {id} {name}: {} switches recorded, the kernel counted {want}", got.switches));
            }
            if let Some(want) = report.view_switches.filter(|&w| w != got.view_switches) {
                problems.push(format!("program {id} {name}: {} view switches recorded, the kernel counted {want}", got.view_switches));
            }
            let upcalls = report.upcalls.unwrap_or_default();
            for (kind, want) in REPORTED_UPCALLS.iter().zip(upcalls) {
                let n = got.upcalls.get(&(*kind as u64)).copied().unwrap_or(0);
                if n != want {
                    problems.push(format!("program {id} {name}: {n} {kind:?} upcalls recorded, the kernel counted {want}"));
                }
            }
        }
        problems
    }

    /// Lines saying what the trace holds.
    pub fn summary(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for (cpu, s) in &self.cpus {
            let mut by_kind: BTreeMap<Kind, usize> = BTreeMap::new();
            for r in &s.records {
                *by_kind.entry(r.kind).or_default() += 1;
            }
            let parts: Vec<String> = by_kind.iter().map(|(k, n)| format!("{n} {}", k.name())).collect();
            lines.push(format!("cpu{cpu}: {} records: {}", s.records.len(), parts.join(", ")));
        }
        for (id, c) in self.per_program() {
            if id == 0 {
                continue;
            }
            let name = self.programs.get(&id).map_or("?", |p| p.name.as_str());
            let up: Vec<String> = c.upcalls.iter().map(|(k, n)| format!("{n} {}", upcall_name(*k))).collect();
            lines.push(format!(
                "program {id} {name}: {} switches, {} view switches, {} syscalls, upcalls [{}], {} user-thread switches",
                c.switches,
                c.view_switches,
                c.syscalls.values().sum::<u64>(),
                up.join(", "),
                c.user_switches
            ));
        }
        lines
    }
}

/// What the trace holds for one program.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProgramCounts {
    /// Switches to its threads.
    pub switches: u64,
    /// View switches made by those switches.
    pub view_switches: u64,
    /// Upcalls by `EventKind` value.
    pub upcalls: BTreeMap<u64, u64>,
    /// Syscalls by number.
    pub syscalls: BTreeMap<u64, u64>,
    /// User-thread switches its vCPUs recorded.
    pub user_switches: u64,
}

fn after<'a>(line: &'a str, prefix: &str) -> Option<&'a str> {
    line.find(prefix).map(|i| &line[i + prefix.len()..])
}

fn upcall_name(kind: u64) -> String {
    EventKind::from_u64(kind).map_or_else(|| format!("kind {kind}"), |k| format!("{k:?}"))
}

fn syscall_name(number: u64) -> String {
    Syscall::from_number(number as usize).map_or_else(|| format!("syscall {number}"), |s| format!("{s:?}"))
}

/// Process id of the CPUs' tracks.
const CPU_PID: u64 = 0;
/// Process id of program `p`'s vCPU and user-thread tracks: `PROGRAM_PID + p`.
const PROGRAM_PID: u64 = 100;
/// Thread id of vCPU `v` in its program's process: `VCPU_TID + v`.
const VCPU_TID: u64 = 1;
/// Thread id of a program's `n`-th user thread: `USER_TID + n`.
const USER_TID: u64 = 1000;

/// The Chrome trace-event JSON of `trace` (see the module docs).
pub fn chrome_json(trace: &Trace) -> Value {
    let t0 = trace.cpus.values().chain(trace.users.values()).filter_map(|s| s.records.first()).map(|r| r.time).min().unwrap_or(0);
    let hz = trace.hz.max(1) as f64;
    let us = |t: u64| (t.saturating_sub(t0) as f64) * 1e6 / hz;
    let mut events = Vec::new();
    let name_of = |p: u64| trace.programs.get(&p).map_or_else(String::new, |r| r.name.clone());
    events.push(json!({"ph": "M", "name": "process_name", "pid": CPU_PID, "args": {"name": "CPUs"}}));
    // Per (program, vCPU): when its kernel thread stopped running (a switch away on its CPU) or
    // took an upcall — the user thread it ran stopped then too.
    let mut stops: BTreeMap<(u64, usize), Vec<u64>> = BTreeMap::new();
    let mut programs_seen: BTreeMap<u64, ()> = BTreeMap::new();
    for (cpu, s) in &trace.cpus {
        events.push(json!({"ph": "M", "name": "thread_name", "pid": CPU_PID, "tid": cpu, "args": {"name": format!("CPU {cpu}")}}));
        let end = s.records.last().map_or(0, |r| r.time);
        let mut open: Option<(u64, u64, u64, Option<usize>)> = None; // (start, thread, program, vcpu)
        let close = |open: &mut Option<(u64, u64, u64, Option<usize>)>, at: u64, events: &mut Vec<Value>, stops: &mut BTreeMap<(u64, usize), Vec<u64>>| {
            if let Some((start, thread, program, vcpu)) = open.take() {
                let label = match (program, vcpu) {
                    (0, _) => format!("kernel thread {thread}"),
                    (p, None) => format!("thread {thread} (program {p} {})", name_of(p)),
                    (p, Some(v)) => format!("thread {thread} (program {p} {}, vCPU {v})", name_of(p)),
                };
                events.push(json!({"ph": "X", "name": label, "pid": CPU_PID, "tid": cpu, "ts": us(start), "dur": us(at) - us(start)}));
                if let Some(v) = vcpu {
                    events.push(json!({"ph": "X", "name": format!("on CPU {cpu} (thread {thread})"), "pid": PROGRAM_PID + program, "tid": VCPU_TID + v as u64, "ts": us(start), "dur": us(at) - us(start)}));
                    stops.entry((program, v)).or_default().push(at);
                }
            }
        };
        for r in &s.records {
            match r.kind {
                Kind::Switch => {
                    close(&mut open, r.time, &mut events, &mut stops);
                    let (program, vcpu) = split_program_vcpu(r.b);
                    if program != 0 {
                        programs_seen.insert(program, ());
                    }
                    open = Some((r.time, r.a, program, vcpu));
                }
                Kind::Idle => close(&mut open, r.time, &mut events, &mut stops),
                Kind::ViewSwitch => events.push(json!({"ph": "i", "s": "t", "name": if r.a == 1 { "view switch (TLB flushed)" } else { "view switch" }, "pid": CPU_PID, "tid": cpu, "ts": us(r.time), "args": {"root frame": format!("{:#x}", r.b)}})),
                Kind::Preempt => events.push(json!({"ph": "i", "s": "t", "name": "preemption", "pid": CPU_PID, "tid": cpu, "ts": us(r.time), "args": {"thread": r.a, "ltn": format!("{:#x}", r.b)}})),
                Kind::Syscall => events.push(json!({"ph": "i", "s": "t", "name": syscall_name(r.a), "pid": CPU_PID, "tid": cpu, "ts": us(r.time), "args": {"ltn": format!("{:#x}", r.b)}})),
                Kind::Upcall => {
                    let (program, vcpu) = split_program_vcpu(r.b);
                    let name = format!("upcall {}", upcall_name(r.a));
                    events.push(json!({"ph": "i", "s": "t", "name": name, "pid": CPU_PID, "tid": cpu, "ts": us(r.time)}));
                    if let Some(v) = vcpu {
                        events.push(json!({"ph": "i", "s": "t", "name": name, "pid": PROGRAM_PID + program, "tid": VCPU_TID + v as u64, "ts": us(r.time)}));
                        stops.entry((program, v)).or_default().push(r.time);
                    }
                }
                Kind::UserSwitch => {}
            }
        }
        close(&mut open, end, &mut events, &mut stops);
    }
    for v in stops.values_mut() {
        v.sort_unstable();
    }
    // User threads: from a vCPU's switch to it until the vCPU's next switch or stop.
    let programs = trace.thread_programs();
    let mut user_tids: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    for ((thread, v), s) in &trace.users {
        let program = programs.get(thread).copied().unwrap_or(0);
        programs_seen.insert(program, ());
        let stop_times = stops.get(&(program, *v)).map_or(&[][..], Vec::as_slice);
        for (i, r) in s.records.iter().enumerate() {
            let next = s.records.get(i + 1).map_or(u64::MAX, |n| n.time);
            let stop = stop_times.iter().copied().find(|&t| t > r.time).unwrap_or(u64::MAX);
            let end = next.min(stop);
            let end = if end == u64::MAX { r.time } else { end };
            let count = user_tids.len() as u64;
            let tid = *user_tids.entry((program, r.b)).or_insert(USER_TID + count);
            events.push(json!({"ph": "X", "name": format!("on vCPU {v}"), "pid": PROGRAM_PID + program, "tid": tid, "ts": us(r.time), "dur": us(end) - us(r.time)}));
        }
    }
    clip_overlaps(&mut events);
    for p in programs_seen.keys() {
        events.push(json!({"ph": "M", "name": "process_name", "pid": PROGRAM_PID + p, "args": {"name": format!("program {p} {}", name_of(*p))}}));
    }
    for (program, v) in stops.keys() {
        events.push(json!({"ph": "M", "name": "thread_name", "pid": PROGRAM_PID + program, "tid": VCPU_TID + *v as u64, "args": {"name": format!("vCPU {v}")}}));
    }
    for ((program, thmb), tid) in &user_tids {
        events.push(json!({"ph": "M", "name": "thread_name", "pid": PROGRAM_PID + program, "tid": tid, "args": {"name": format!("user thread {thmb:#x}")}}));
    }
    json!({"traceEvents": events, "displayTimeUnit": "ns", "otherData": {"clock hz": trace.hz}})
}

/// Shortens any slice that would overlap the next slice of its track (a user thread whose stop
/// the records do not show, seen running elsewhere first): Perfetto expects the slices of a
/// track to nest.
fn clip_overlaps(events: &mut [Value]) {
    let mut by_track: BTreeMap<(u64, u64), Vec<usize>> = BTreeMap::new();
    for (i, e) in events.iter().enumerate().filter(|(_, e)| e["ph"] == "X") {
        by_track.entry((e["pid"].as_u64().unwrap_or(0), e["tid"].as_u64().unwrap_or(0))).or_default().push(i);
    }
    for slices in by_track.values_mut() {
        slices.sort_by(|&a, &b| events[a]["ts"].as_f64().partial_cmp(&events[b]["ts"].as_f64()).unwrap_or(std::cmp::Ordering::Equal));
        for pair in slices.windows(2) {
            let (ts, dur, next) = (events[pair[0]]["ts"].as_f64().unwrap_or(0.0), events[pair[0]]["dur"].as_f64().unwrap_or(0.0), events[pair[1]]["ts"].as_f64().unwrap_or(0.0));
            if ts + dur > next {
                events[pair[0]]["dur"] = json!((next - ts).max(0.0));
            }
        }
    }
}

/// Writes [`chrome_json`] to `out`.
pub fn write_json(trace: &Trace, out: &Path) -> Result<()> {
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let text = serde_json::to_string(&chrome_json(trace))?;
    std::fs::write(out, text).with_context(|| format!("writing {}", out.display()))
}

/// The program the trace suite runs.
pub const SUITE_PROGRAM: &str = "trace_demo";
/// How many `counters` syscalls it makes on purpose (its output says so too).
pub const SUITE_COUNTER_CALLS: u64 = 25;

/// Boots [`SUITE_PROGRAM`] in the tracing build on `arch` with `smp` CPUs and returns, per
/// check, its description and the problem found (None: passed).
pub fn selftest(tools: &Tools, arch: Arch, smp: u8, release: bool) -> Result<Vec<(String, Option<String>)>> {
    let artifacts: Artifacts = build::build_flavor_of(tools, arch, release, &[], Flavor::Trace, Some(&[SUITE_PROGRAM]))?;
    let log = workspace_root().join("target").join("test-logs").join(format!("{arch}-trace-smp{smp}.log"));
    let cmdline = format!("{}={SUITE_PROGRAM}", tsumugi_abi::bootopt::RUN);
    let machine = Machine { arch, accel: Accel::Tcg, smp, icount: false, gdb: false, kernel: &artifacts.kernel, initrd: &artifacts.initrd, cmdline: &cmdline };
    let finished = qemu::run(&qemu::command(&machine), arch, Duration::from_secs(tsumugi_tests::suites::KERNEL_SUITE_TIMEOUT.as_secs()), &Console::Capture { log: log.clone() })?;
    let mut results = Vec::new();
    let status = finished.outcome.exit_code();
    results.push((format!("{SUITE_PROGRAM} runs to status 0 in the tracing build"), (status != 0).then(|| finished.outcome.describe())));
    let trace = match Trace::parse(&finished.log) {
        Ok(t) => {
            results.push(("the trace decodes (every stream complete, no line lost)".to_string(), None));
            t
        }
        Err(e) => {
            results.push(("the trace decodes (every stream complete, no line lost)".to_string(), Some(format!("{e:#}"))));
            return Ok(results);
        }
    };
    let json_path = log.with_extension("json");
    let parsed = write_json(&trace, &json_path)
        .and_then(|()| std::fs::read_to_string(&json_path).map_err(Into::into))
        .and_then(|text| serde_json::from_str::<Value>(&text).map_err(Into::into));
    let json_problem = match parsed {
        Err(e) => Some(format!("{e:#}")),
        Ok(v) => check_tracks(&v, smp),
    };
    results.push(("the Chrome JSON parses and has a track per CPU, vCPU and user thread".to_string(), json_problem));
    let problems = trace.verify();
    results.push(("the trace's counts equal the kernel's counters (per CPU and per program)".to_string(), (!problems.is_empty()).then(|| problems.join("; "))));
    let id = trace.programs.iter().find(|(_, p)| p.name == SUITE_PROGRAM).map(|(id, _)| *id);
    let counts = id.and_then(|id| trace.per_program().remove(&id)).unwrap_or_default();
    let calls = counts.syscalls.get(&(Syscall::Counters as u64)).copied().unwrap_or(0);
    results.push((
        format!("{SUITE_PROGRAM}'s {SUITE_COUNTER_CALLS} `counters` syscalls are all in the trace"),
        (calls != SUITE_COUNTER_CALLS).then(|| format!("{calls} recorded")),
    ));
    let resumes = finished.log.lines().find_map(|l| l.split_once(&format!("{SUITE_PROGRAM}: user-thread resumes ")).and_then(|(_, r)| r.split_whitespace().next()?.parse::<u64>().ok()));
    results.push((
        "the user-thread switches recorded equal libuthread's resume count".to_string(),
        match resumes {
            Some(n) if n == counts.user_switches && n > 0 => None,
            Some(n) => Some(format!("{} recorded, libuthread counted {n}", counts.user_switches)),
            None => Some("the program printed no resume count".to_string()),
        },
    ));
    Ok(results)
}

/// Whether the JSON has a named track per CPU, at least one vCPU track and one user-thread
/// track, and only well-formed events.
fn check_tracks(v: &Value, smp: u8) -> Option<String> {
    let events = v.get("traceEvents").and_then(Value::as_array)?;
    let names: Vec<&str> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .filter_map(|e| e["args"]["name"].as_str())
        .collect();
    let cpus = names.iter().filter(|n| n.starts_with("CPU ")).count();
    let vcpus = names.iter().filter(|n| n.starts_with("vCPU ")).count();
    let users = names.iter().filter(|n| n.starts_with("user thread ")).count();
    if cpus != usize::from(smp) || vcpus == 0 || users == 0 {
        return Some(format!("{cpus} CPU tracks (want {smp}), {vcpus} vCPU tracks, {users} user-thread tracks"));
    }
    let bad = events.iter().find(|e| e["ph"] != "M" && !(e["ts"].as_f64().is_some_and(|t| t >= 0.0) && e["pid"].is_u64() && e["tid"].is_u64()));
    bad.map(|e| format!("malformed event {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Record> {
        let mut t = 1_000_000_000_000u64;
        let mut out = Vec::new();
        for i in 0..200u64 {
            t += i * 37 + 1;
            let kind = Kind::ALL[(i % 7) as usize];
            out.push(Record { time: t, kind, a: i * 3, b: if i % 5 == 0 { u64::MAX - i } else { i << 20 } });
        }
        out
    }

    #[test]
    fn lines_round_trip_and_stay_short() {
        let records = sample();
        let mut decoded = Vec::new();
        let mut lines = Vec::new();
        let n = fmt::encode(records.iter().copied(), |i, text| {
            assert_eq!(i, lines.len());
            assert!(text.len() <= fmt::LINE_TEXT, "{} chars", text.len());
            lines.push(text.to_string());
            decoded.extend(decode_line(text).unwrap());
        });
        assert_eq!(n, lines.len());
        assert_eq!(decoded, records);
        assert_eq!(fmt::encode(std::iter::empty(), |_, _| panic!("no line")), 0);
    }

    #[test]
    fn base64_matches_the_standard_alphabet() {
        let mut out = [0u8; 16];
        let n = fmt::base64(b"Man", &mut out);
        assert_eq!(&out[..n], b"TWFu");
        let n = fmt::base64(b"Ma", &mut out);
        assert_eq!(&out[..n], b"TWE");
        assert_eq!(decode_line("").unwrap(), []);
        assert!(decode_line("!!").is_err());
    }

    /// A log as the kernel and libuthread print it, with `extra` lines of output mixed in.
    fn log_of(cpus: &[(usize, Vec<Record>)], user: &[((u64, usize), Vec<Record>)], counters: &str, report: &str) -> String {
        let mut log = String::from("Tsumugi booting\ndomain 1 demo: started at 0x40000000\n");
        let stream = |name: String, records: &[Record], log: &mut String| {
            let n = fmt::encode(records.iter().copied(), |i, text| log.push_str(&format!("{}{name} {i} {text}\n", fmt::LINE)));
            log.push_str(&format!("{}{name} lines={n} records={} dropped=0\n", fmt::END, records.len()));
        };
        for ((k, v), records) in user {
            stream(format!("user{k}.v{v}"), records, &mut log);
        }
        log.push_str(report);
        log.push_str(&format!("{}hz=1000000000\n", fmt::CLOCK));
        for (cpu, records) in cpus {
            stream(format!("cpu{cpu}"), records, &mut log);
        }
        log.push_str(counters);
        log.push_str(&format!("{}\n", fmt::DONE));
        log
    }

    fn r(time: u64, kind: Kind, a: u64, b: u64) -> Record {
        Record { time, kind, a, b }
    }

    /// Kernel streams by CPU and user streams by (kernel thread, vCPU).
    type Streams = (Vec<(usize, Vec<Record>)>, Vec<((u64, usize), Vec<Record>)>);

    fn demo() -> Streams {
        let pv = |v| fmt::program_vcpu(1, Some(v));
        let cpu0 = vec![
            r(10, Kind::Switch, 5, pv(0)),
            r(11, Kind::ViewSwitch, 0, 0x800),
            r(20, Kind::Syscall, Syscall::Counters as u64, 0x4000),
            r(25, Kind::Upcall, EventKind::Blocked as u64, pv(0)),
            r(30, Kind::Idle, 0, 0),
            r(31, Kind::ViewSwitch, 0, 0x100),
            r(40, Kind::Switch, 6, pv(1)),
            r(41, Kind::ViewSwitch, 1, 0x800),
            r(50, Kind::Preempt, 6, 0x5000),
        ];
        let user = vec![((5, 0), vec![r(12, Kind::UserSwitch, 0, 0x4000), r(26, Kind::UserSwitch, 0, 0x5000)])];
        (vec![(0, cpu0)], user)
    }

    #[test]
    fn a_log_decodes_and_agrees_with_its_counters() {
        let (cpus, user) = demo();
        let report = "domain 1 demo: exited with status 0\n  domain 1: 3 threads, 2 switches, 2 view switches\n  domain 1: upcalls blocked 1, preempted 0, fault 0, vcpu granted 0\n";
        let counters = format!("{}cpu0 switches=2 view-switches=3 preemptions=1\n", fmt::COUNTERS);
        let trace = Trace::parse(&log_of(&cpus, &user, &counters, report)).unwrap();
        assert_eq!(trace.cpus[&0].records, cpus[0].1);
        assert_eq!(trace.programs[&1].name, "demo");
        assert_eq!(trace.verify(), Vec::<String>::new());
        let c = &trace.per_program()[&1];
        assert_eq!((c.switches, c.view_switches, c.user_switches), (2, 2, 2));
        assert_eq!(c.syscalls[&(Syscall::Counters as u64)], 1);
        let json = chrome_json(&trace);
        assert_eq!(check_tracks(&json, 1), None);
        // The first user thread's slice ends at the Blocked upcall, not at the next switch.
        let slices: Vec<&Value> = json["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "X" && e["tid"].as_u64() >= Some(USER_TID)).collect();
        assert_eq!(slices.len(), 2);
        assert!((slices[0]["dur"].as_f64().unwrap() - 0.013).abs() < 1e-9, "{}", slices[0]);
    }

    #[test]
    fn slices_of_a_track_never_overlap() {
        let mut events = vec![
            json!({"ph": "X", "pid": 1, "tid": 2, "ts": 5.0, "dur": 10.0}),
            json!({"ph": "X", "pid": 1, "tid": 2, "ts": 1.0, "dur": 2.0}),
            json!({"ph": "X", "pid": 1, "tid": 3, "ts": 6.0, "dur": 1.0}),
            json!({"ph": "X", "pid": 1, "tid": 2, "ts": 8.0, "dur": 1.0}),
        ];
        clip_overlaps(&mut events);
        assert_eq!(events[0]["dur"].as_f64(), Some(3.0));
        assert_eq!(events[1]["dur"].as_f64(), Some(2.0));
        assert_eq!(events[2]["dur"].as_f64(), Some(1.0));
    }

    #[test]
    fn mismatches_and_damage_are_reported() {
        let (cpus, user) = demo();
        let report = "  domain 1: 3 threads, 3 switches, 2 view switches\n  domain 1: upcalls blocked 0, preempted 0, fault 0, vcpu granted 0\n";
        let counters = format!("{}cpu0 switches=2 view-switches=3 preemptions=2\n", fmt::COUNTERS);
        let trace = Trace::parse(&log_of(&cpus, &user, &counters, report)).unwrap();
        let problems = trace.verify().join("\n");
        assert!(problems.contains("cpu0: 1 preemptions recorded, the kernel counted 2"), "{problems}");
        assert!(problems.contains("2 switches recorded, the kernel counted 3"), "{problems}");
        assert!(problems.contains("1 Blocked upcalls recorded, the kernel counted 0"), "{problems}");
        // A lost line, a cut-short dump, a missing clock.
        let good = log_of(&cpus, &user, &counters, report);
        let lost: String = good.lines().filter(|l| !l.contains(&format!("{}cpu0 0 ", fmt::LINE))).map(|l| format!("{l}\n")).collect();
        assert!(format!("{:#}", Trace::parse(&lost).unwrap_err()).contains("lines"));
        let cut: String = good.lines().take_while(|l| !l.contains(fmt::END) || l.contains("user")).map(|l| format!("{l}\n")).collect();
        assert!(Trace::parse(&cut).is_err());
        assert!(format!("{:#}", Trace::parse("no trace here\n").unwrap_err()).contains("no complete trace"));
    }
}
