//! Trace records and their console encoding (`cargo xtask trace`).
//!
//! A kernel built with its `trace` feature records events into per-CPU buffers and, at halt,
//! prints them on the serial console; `libuthread` built with its `trace` feature records its
//! user-thread switches into per-vCPU buffers and prints them when `run` returns. Both print
//! through [`encode`], so one decoder (`xtask/src/trace.rs`) reads both:
//!
//! ```text
//! trace-clock: hz=<counter ticks per second>             (kernel, once, first)
//! trace: <stream> <line number> <base64 of records>      (any number, line numbers from 0)
//! trace-end: <stream> lines=<L> records=<R> dropped=<D>  (once per stream, after its lines)
//! trace-counters: cpu<N> switches=<S> view-switches=<V> preemptions=<P>
//! trace-done                                             (kernel, last)
//! ```
//!
//! A stream is `cpu<N>` (the kernel's buffer of CPU N) or `user<K>.v<V>` (vCPU V of the
//! program whose main kernel thread is K). Each line is self-contained: its records are
//! encoded as a kind byte, then LEB128 varints of the time since the line's previous record
//! (the first: since 0), `a` and `b`, and the bytes are base64 (standard alphabet, no
//! padding). A lost or garbled line is therefore detected (a gap in the line numbers, a count
//! that differs from `trace-end`) and costs only its own records.

/// Prefix of a data line.
pub const LINE: &str = "trace: ";
/// Prefix of the clock line (the time base of every stream).
pub const CLOCK: &str = "trace-clock: ";
/// Prefix of a stream's closing line.
pub const END: &str = "trace-end: ";
/// Prefix of a CPU's counters as the kernel kept them, read when its stream was printed.
pub const COUNTERS: &str = "trace-counters: ";
/// The kernel's last trace line.
pub const DONE: &str = "trace-done";

/// Largest number of record bytes on one line (76 base64 characters).
pub const LINE_BYTES: usize = 57;
/// Largest encoded record: kind, three varints of at most 10 bytes.
pub const MAX_RECORD_BYTES: usize = 1 + 3 * 10;
/// Longest base64 text of one line.
pub const LINE_TEXT: usize = LINE_BYTES.div_ceil(3) * 4;

/// What a record says; `a` and `b` by kind.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// The CPU switched to a kernel thread (counted as `Counter::ContextSwitches`): `a` the
    /// thread id, `b` its program id (0: a kernel thread) | (vCPU index + 1) << 32 (0: none).
    Switch = 1,
    /// The CPU switched from a thread to its idle loop (not a counted switch); `a`, `b` 0.
    Idle = 2,
    /// The CPU loaded another page-table root (`Counter::ViewSwitches`): `a` 1 if the load
    /// flushed the whole TLB, `b` the root's frame number.
    ViewSwitch = 3,
    /// An upcall was delivered: `a` its `kn::EventKind` value, `b` the program id | (vCPU
    /// index + 1) << 32 of the kernel thread that takes it.
    Upcall = 4,
    /// The running thread's quantum ended and another ran (`Counter::Preemptions`, recorded
    /// when it runs again): `a` the thread id, `b` its user LTN.
    Preempt = 5,
    /// A syscall entered the kernel: `a` its number, `b` the caller's user LTN.
    Syscall = 6,
    /// (User stream) the vCPU is about to run the user thread `b` (a ThMB address); `a` 0.
    UserSwitch = 7,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 7] =
        [Kind::Switch, Kind::Idle, Kind::ViewSwitch, Kind::Upcall, Kind::Preempt, Kind::Syscall, Kind::UserSwitch];

    /// The kind with byte value `v`.
    pub fn from_u8(v: u8) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| *k as u8 == v)
    }

    /// Its name in summaries.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Switch => "switch",
            Kind::Idle => "idle",
            Kind::ViewSwitch => "view-switch",
            Kind::Upcall => "upcall",
            Kind::Preempt => "preemption",
            Kind::Syscall => "syscall",
            Kind::UserSwitch => "user-switch",
        }
    }
}

/// One event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// The trace clock (`trace-clock` ticks per second).
    pub time: u64,
    /// What happened.
    pub kind: Kind,
    /// First argument (see [`Kind`]).
    pub a: u64,
    /// Second argument (see [`Kind`]).
    pub b: u64,
}

/// Packs a program id and an optional vCPU index the way `Switch` and `Upcall` carry them.
pub const fn program_vcpu(program: u64, vcpu: Option<usize>) -> u64 {
    let v = match vcpu {
        Some(v) => v as u64 + 1,
        None => 0,
    };
    (program & 0xffff_ffff) | (v << 32)
}

/// The inverse of [`program_vcpu`].
pub const fn split_program_vcpu(b: u64) -> (u64, Option<usize>) {
    let v = b >> 32;
    (b & 0xffff_ffff, if v == 0 { None } else { Some(v as usize - 1) })
}

fn put_varint(out: &mut [u8], mut at: usize, mut v: u64) -> usize {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out[at] = byte;
            return at + 1;
        }
        out[at] = byte | 0x80;
        at += 1;
    }
}

/// Appends `r` to `out[at..]` (at least [`MAX_RECORD_BYTES`] long) after a record at
/// `prev_time`; returns the new end.
pub fn encode_record(out: &mut [u8], at: usize, r: &Record, prev_time: u64) -> usize {
    out[at] = r.kind as u8;
    let at = put_varint(out, at + 1, r.time.wrapping_sub(prev_time));
    let at = put_varint(out, at, r.a);
    put_varint(out, at, r.b)
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Base64 of `bytes` (standard alphabet, no padding) into `out`; returns its length.
pub fn base64(bytes: &[u8], out: &mut [u8]) -> usize {
    let mut n = 0;
    for chunk in bytes.chunks(3) {
        let v = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for i in 0..chunk.len() + 1 {
            out[n] = ALPHABET[(v >> (18 - 6 * i) & 63) as usize];
            n += 1;
        }
    }
    n
}

/// The value of a base64 character, if it is one.
pub fn base64_value(c: u8) -> Option<u8> {
    ALPHABET.iter().position(|&x| x == c).map(|p| p as u8)
}

/// Encodes `records` into lines: calls `emit(line number, base64 text)` for each; returns the
/// number of lines. The caller prints `trace: <stream> <number> <text>`.
pub fn encode(records: impl Iterator<Item = Record>, mut emit: impl FnMut(usize, &str)) -> usize {
    let mut raw = [0u8; LINE_BYTES + MAX_RECORD_BYTES];
    let mut text = [0u8; LINE_TEXT + 4];
    let (mut len, mut prev, mut lines) = (0usize, 0u64, 0usize);
    let mut flush = |raw: &[u8], lines: &mut usize| {
        let n = base64(raw, &mut text);
        // Base64 is ASCII by construction.
        emit(*lines, core::str::from_utf8(&text[..n]).unwrap_or(""));
        *lines += 1;
    };
    let mut scratch = [0u8; MAX_RECORD_BYTES];
    for r in records {
        let probe = encode_record(&mut scratch, 0, &r, prev);
        if len > 0 && len + probe > LINE_BYTES {
            flush(&raw[..len], &mut lines);
            len = 0;
            prev = 0;
        }
        len = encode_record(&mut raw, len, &r, prev);
        prev = r.time;
    }
    if len > 0 {
        flush(&raw[..len], &mut lines);
    }
    lines
}
