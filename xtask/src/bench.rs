//! `cargo xtask bench`: run the benchmark programs in QEMU (and criterion on the host), gather the
//! `BENCH` lines they print into tables, and write each table as text, CSV and an SVG chart.
//!
//! The benchmarks are data ([`BENCHES`]), like the test suites in `tests/src/suites.rs`: a QEMU
//! boot (boot words, CPUs, which architectures) or a criterion run on the host. Every boot is a run
//! like `cargo xtask run` makes (same QEMU command line, a time limit), with the console captured
//! to `target/bench/logs/<arch>-<name>.log`, in deterministic mode unless asked otherwise: TCG with
//! `-icount shift=0`, so the cycle counter counts guest instructions and two runs agree.
//!
//! A benchmark program reports one table cell or more per line on the serial console:
//!
//! ```text
//! BENCH table=<table> row=<row> <column>=<value> [<column>=<value> ...]
//! ```
//!
//! Tokens are separated by single spaces. `<table>`, `<row>` and `<column>` are made of
//! `[A-Za-z0-9_.+-]`. A `<value>` is an integer (`-12`), a decimal number (`3.25`) or a word that
//! starts with a letter (`unsupported`); a number glued to a unit (`12ns`) is rejected — put the
//! unit in the column name (`time_ns=12`). Rows are merged by (architecture, table, row): several
//! lines and several boots may add columns to one row, and a benchmark's column suffix (e.g.
//! `_tagoff`) tells apart the same column measured under different boot options.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use plotters::prelude::*;
use tsumugi_abi::bootopt;
use tsumugi_tests::Outcome;

use crate::arch::Arch;
use crate::build::{self, Artifacts};
use crate::cmd::{host_cargo, workspace_root, Cmd};
use crate::qemu::{self, Accel, Console, Machine};
use crate::setup::{self, Tools};

/// First token of a benchmark result line.
pub const BENCH_PREFIX: &str = "BENCH";
/// Key of the table token (`table=<table>`), the second token.
pub const TABLE_KEY: &str = "table";
/// Key of the row token (`row=<row>`), the third token; also the first CSV column.
pub const ROW_KEY: &str = "row";
/// What the kernel prints before a program name it cannot start (kernel/src/boot.rs).
pub const CANNOT_RUN: &str = "cannot run ";
/// What follows the program name when the program is not in the boot archive.
pub const NOT_IN_ARCHIVE: &str = ": not in the boot archive";
/// Row label of the host benchmarks' tables (in place of an architecture).
pub const HOST: &str = "host";
/// Message when the host has no criterion bench target yet.
pub const NO_HOST_BENCH: &str = "no criterion bench yet";
/// Default time limit of one QEMU benchmark boot.
pub const BOOT_TIMEOUT: Duration = Duration::from_secs(300);
/// Lines of a failed boot's log printed to the terminal.
pub const LOG_TAIL_LINES: usize = 25;
/// Widest text table printed as is; a wider one with more columns than rows is transposed.
pub const MAX_TEXT_WIDTH: usize = 160;
/// Header of the first column of a transposed text table.
const COLUMN_HEADER: &str = "column";
/// Size of the SVG charts, in pixels.
pub const SVG_SIZE: (u32, u32) = (1000, 560);
/// Width of one row's slot on the integer axis of a bar chart.
const BAR_SLOT: i32 = 1000;
/// Share of a row's slot the bars of a grouped bar chart fill.
const BAR_GROUP_WIDTH: f64 = 0.8;
/// Least headroom above the highest value of a chart, as a share of the value range.
const CHART_HEADROOM: f64 = 0.12;
/// Height in pixels of the plotting area, roughly (the SVG less caption, axis labels, margins).
const PLOT_HEIGHT_PX: f64 = 440.0;
/// Height in pixels of one legend entry, and of the legend's frame.
const LEGEND_ENTRY_PX: f64 = 15.0;
/// Height in pixels of the legend's frame and its distance from the top.
const LEGEND_FRAME_PX: f64 = 30.0;

/// Which architectures a benchmark runs on.
#[derive(Clone, Copy, Debug)]
pub enum Arches {
    /// Every architecture asked for.
    All,
    /// Only these.
    Only(&'static [Arch]),
}

impl Arches {
    /// Whether `arch` is one of them.
    pub fn includes(self, arch: Arch) -> bool {
        match self {
            Arches::All => true,
            Arches::Only(list) => list.contains(&arch),
        }
    }

    /// How `--list` shows them.
    fn describe(self) -> String {
        match self {
            Arches::All => "all".to_string(),
            Arches::Only(list) => list.iter().map(|a| a.name()).collect::<Vec<_>>().join(","),
        }
    }
}

/// What a benchmark runs.
#[derive(Clone, Copy, Debug)]
pub enum Runner {
    /// Boot the kernel in QEMU and read the `BENCH` lines of the serial console.
    Qemu {
        /// Number of CPUs given to QEMU.
        smp: u8,
        /// Kernel boot words (`kernel/abi/src/bootopt.rs`); `run=` names the program(s).
        boot_words: &'static str,
    },
    /// `cargo bench -p <package> --bench <bench> -- --noplot` on the host, if that bench target
    /// exists; criterion's `time: [low mid high]` lines become rows of `table`.
    HostCriterion {
        /// Cargo package.
        package: &'static str,
        /// Bench target.
        bench: &'static str,
        /// Table the results go to (rows: benchmark ids; columns `low_ns`, `mid_ns`, `high_ns`).
        table: &'static str,
    },
}

/// What to say under a table's title and on its chart's axes.
#[derive(Clone, Copy, Debug)]
pub struct TableInfo {
    /// Table name, as in the `BENCH` lines.
    pub table: &'static str,
    /// One-line note printed under the title (the paper's figures to compare with); may be empty.
    pub note: &'static str,
    /// Label of the chart's horizontal axis (what the rows are).
    pub x_label: &'static str,
    /// Label of the chart's vertical axis (what the numbers are).
    pub y_label: &'static str,
    /// Columns the chart shows (each with any suffix: `cycles` also draws `cycles_eager`), so
    /// that numbers of one kind share an axis; empty, or none of them printed: every numeric
    /// column. The text table and the CSV always have every column.
    pub chart: &'static [&'static str],
}

/// One benchmark: a QEMU boot (or a host run) and how to read what it prints.
#[derive(Clone, Copy, Debug)]
pub struct Bench {
    /// Name, for `--filter`, the log file and the result lines.
    pub name: &'static str,
    /// What it measures (for `--list`).
    pub about: &'static str,
    /// Architectures it runs on.
    pub arches: Arches,
    /// What it runs.
    pub runner: Runner,
    /// Appended to every column name this benchmark prints, so two boots of one program under
    /// different options fill different columns of the same rows; usually empty.
    pub suffix: &'static str,
    /// Time limit of one boot (`--timeout` overrides it).
    pub timeout: Duration,
    /// Notes and axis labels of the tables it fills.
    pub tables: &'static [TableInfo],
}

/// The Cubix TLB table (tlbbench).
const CUBIX: TableInfo = TableInfo {
    table: "cubix",
    note: "Cubix (Pentium 90, DTLB / ITLB / cycles): without affinity 1st 42 / 21 / 45,506, \
           2nd 42 / 21 / 45,255; with affinity 1st 39 / 17 / 42,575, 2nd 0 / 0 / 8,470. \
           Under TCG on x86_64 and aarch64 the TLB columns are the kernel's software counters",
    x_label: "affinity and working set",
    y_label: "cycles per turn",
    chart: &["t1_cycles", "t2_cycles"],
};

/// The kernel thread-switch table (switchbench).
const KERNEL_SWITCH: TableInfo = TableInfo {
    table: "kernel_switch",
    note: "kernel yield between two threads on one CPU: same_view shares a page table (Cubix's \
           affinity case), two_views loads another root at every switch",
    x_label: "case",
    y_label: "cycles per switch",
    chart: &["cycles_per_switch"],
};

/// The lazy/eager FP switch table (fpbench).
const FP_SWITCH: TableInfo = TableInfo {
    table: "fp_switch",
    note: "plain columns: fpu=lazy (FP state saved when another thread first touches FP); \
           _eager columns: fpu=eager (saved and restored at every kernel switch, the baseline)",
    x_label: "case",
    y_label: "cycles per switch",
    chart: &["cycles_per_switch"],
};

/// MULiTh Table 2 (uthread_bench).
const MULITH: TableInfo = TableInfo {
    table: "multith",
    note: "MULiTh Table 2, cycles (instructions), proposed vs conventional: create 84 (74) vs \
           135 (102); exit 51 (42) vs 223 (126); sync 202 (95) vs 847 (515); mutex short 972 vs \
           spin 982, long 41,461 vs 46,656; preemption 523 (341) vs signal 878 (718); \
           notification 373 (256) vs SA/C-area 522 (418)",
    x_label: "operation",
    y_label: "cycles",
    chart: &[],
};

/// Kernel Notification costs (kn_cost).
const KN_COST: TableInfo = TableInfo {
    table: "kn_cost",
    note: "MULiTh Table 2: notification via KN 256 instructions (373 cycles) vs Scheduler \
           Activations / C-area 418; preemption via KN 341 (523 cycles) vs a signal-style copy 718",
    x_label: "event",
    y_label: "instructions",
    chart: &[],
};

/// The FCS call-depth sweep (uthread_bench).
const FCS_SWEEP: TableInfo = TableInfo {
    table: "fcs_sweep",
    note: "FCS (SPARCstation 2): switch cost grows linearly with live register windows up to 6 \
           (~4 us net when shallow, lwp_yield ~35 us); a WINDOW save should stay flat",
    x_label: "call depth at the switch point (L = C)",
    y_label: "cycles per switch",
    chart: &[],
};

/// Lazy (WINDOW) vs full context save (uthread_bench).
const LAZY_SAVE: TableInfo = TableInfo {
    table: "lazy_save",
    note: "voluntary switch saving only the callee-saved window (WINDOW) vs a full save \
           (baseline); bytes saved per switch in each mode",
    x_label: "mode",
    y_label: "cycles / bytes",
    chart: &[],
};

/// Criterion on the host.
const HOST_SWITCH: TableInfo = TableInfo {
    table: "host_switch",
    note: "criterion on the host: time per iteration in ns, [low mid high] is the 95% \
           confidence interval",
    x_label: "benchmark",
    y_label: "ns per iteration",
    chart: &[],
};

/// Every benchmark, in the order they run (per architecture; the host ones last).
pub const BENCHES: &[Bench] = &[
    // Kernel thread switch: yield round trips in one view and across two views (a page-table
    // root load per switch); prints table=kernel_switch rows same_view and two_views.
    Bench {
        name: "switch",
        about: "kernel thread switch, same view vs two views (switchbench)",
        arches: Arches::All,
        runner: Runner::Qemu {
            smp: 1,
            boot_words: "quiet cpus=1 run=switchbench",
        },
        suffix: "",
        timeout: BOOT_TIMEOUT,
        tables: &[KERNEL_SWITCH],
    },
    // The Cubix experiment (issue 9) with the TLB tags (PCID/ASID) the kernel uses by default.
    Bench {
        name: "tlb",
        about: "Cubix TLB experiment, TLB tags on (tlbbench)",
        arches: Arches::All,
        runner: Runner::Qemu {
            smp: 1,
            boot_words: "quiet cpus=1 run=tlbbench",
        },
        suffix: "",
        timeout: BOOT_TIMEOUT,
        tables: &[CUBIX],
    },
    // The same with tags off (every view switch flushes, as on the Pentium): columns `*_tagoff`.
    Bench {
        name: "tlb-tagoff",
        about: "Cubix TLB experiment, TLB tags off (tlbbench with tlbtag=off)",
        arches: Arches::All,
        runner: Runner::Qemu {
            smp: 1,
            boot_words: "quiet cpus=1 tlbtag=off run=tlbbench",
        },
        suffix: "_tagoff",
        timeout: BOOT_TIMEOUT,
        tables: &[CUBIX],
    },
    // Lazy FP switching (issue 6), the kernel default. fpbench keeps SIMD registers live with
    // inline assembly (SSE on x86_64, NEON on aarch64); add an architecture here when its port
    // has lazy FP and fpbench.
    Bench {
        name: "fpu-lazy",
        about: "kernel FP/SIMD switch, lazy (fpbench with fpu=lazy)",
        arches: Arches::Only(&[Arch::X86_64, Arch::Aarch64]),
        runner: Runner::Qemu {
            smp: 1,
            boot_words: "quiet cpus=1 fpu=lazy run=fpbench",
        },
        suffix: "",
        timeout: BOOT_TIMEOUT,
        tables: &[FP_SWITCH],
    },
    // The eager baseline: columns `*_eager` beside the lazy ones.
    Bench {
        name: "fpu-eager",
        about: "kernel FP/SIMD switch, eager baseline (fpbench with fpu=eager)",
        arches: Arches::Only(&[Arch::X86_64, Arch::Aarch64]),
        runner: Runner::Qemu {
            smp: 1,
            boot_words: "quiet cpus=1 fpu=eager run=fpbench",
        },
        suffix: "_eager",
        timeout: BOOT_TIMEOUT,
        tables: &[FP_SWITCH],
    },
    // libuthread micro-benchmarks: MULiTh Table 2, the FCS depth sweep, WINDOW vs FULL saves.
    Bench {
        name: "uthread",
        about: "libuthread: MULiTh Table 2, FCS sweep, lazy save (uthread_bench)",
        arches: Arches::All,
        runner: Runner::Qemu {
            smp: 1,
            boot_words: "quiet cpus=1 run=uthread_bench",
        },
        suffix: "",
        timeout: BOOT_TIMEOUT,
        tables: &[MULITH, FCS_SWEEP, LAZY_SAVE],
    },
    // Kernel Notification: a blocking syscall or a preemption turned into an upcall.
    Bench {
        name: "kn",
        about: "Kernel Notification: blocking syscall and preemption to upcall (kn_cost)",
        arches: Arches::All,
        runner: Runner::Qemu {
            smp: 1,
            boot_words: "quiet cpus=1 run=kn_cost",
        },
        suffix: "",
        timeout: BOOT_TIMEOUT,
        tables: &[KN_COST],
    },
    // Host comparison (issue 9): libuthread's hosted switch vs other libraries and OS threads.
    // Runs when no --arch is given, or when --filter names it.
    Bench {
        name: "host",
        about: "criterion on the host: libuthread switch vs other libraries and OS threads",
        arches: Arches::All,
        runner: Runner::HostCriterion {
            package: "libuthread",
            bench: "switch",
            table: "host_switch",
        },
        suffix: "",
        timeout: Duration::from_secs(1800),
        tables: &[HOST_SWITCH],
    },
];

/// Extra help of `cargo xtask bench --help`.
pub const HELP: &str = "\
Each benchmark boots the kernel in QEMU (or runs criterion on the host) and reads the lines
its program prints on the serial console:

  BENCH table=<table> row=<row> <column>=<value> [<column>=<value> ...]

tokens separated by single spaces; names of [A-Za-z0-9_.+-]; a value is an integer, a decimal
number, or a word starting with a letter (e.g. `unsupported`); a number with a unit (`12ns`)
is rejected. Rows are merged by (arch, table, row); a benchmark's column suffix (e.g. `_tagoff`)
keeps the columns of differently configured boots apart.

Outputs: the tables on the terminal, target/bench/<arch>-<table>.csv and .svg (a grouped bar
chart, or a line chart when the rows are numbers), and the console logs in target/bench/logs/.
A program missing from an architecture's boot archive is reported as skipped. The exit status is
1 if a boot failed (guest status not 0, time limit, no or malformed BENCH line), else 0.

Deterministic mode (default): TCG with `-icount shift=0`, so cycle columns count guest
instructions and repeat run to run. `--list` shows the benchmarks.";

/// Arguments of `cargo xtask bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Architectures to run on; repeat the flag or separate with commas [default: every supported
    /// one, plus the host benchmarks].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub arch: Vec<Arch>,
    /// QEMU accelerator; `kvm` cannot count instructions, so it implies --no-icount.
    #[arg(long, value_enum, default_value_t = Accel::Tcg)]
    pub accel: Accel,
    /// Build with the release profile (the default for bench).
    #[arg(long, overrides_with = "debug")]
    pub release: bool,
    /// Build with the dev profile instead of release.
    #[arg(long, overrides_with = "release")]
    pub debug: bool,
    /// Leave deterministic mode: no `-icount shift=0`, cycles are the emulated clock's.
    #[arg(long)]
    pub no_icount: bool,
    /// Only the benchmarks whose name or `<arch>/<name>` contains this text (e.g. `switch`,
    /// `x86_64/tlb`, `host`).
    #[arg(long)]
    pub filter: Option<String>,
    /// Time limit of each boot, in seconds [default: each benchmark's own, see --list].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: Option<u64>,
    /// Print the benchmarks and exit.
    #[arg(long)]
    pub list: bool,
}

// ---------------------------------------------------------------------------------------------
// BENCH lines
// ---------------------------------------------------------------------------------------------

/// A cell value, with the text it was printed as (kept verbatim in the outputs).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// An integer, optionally negative.
    Int(String),
    /// A decimal number with a point (`3.25`, `-0.5`).
    Decimal(String),
    /// A word starting with a letter (`unsupported`, `n.a`).
    Word(String),
}

impl Value {
    /// Classifies a value token; a digit-led token that is not a plain number is an error.
    pub fn parse(text: &str) -> Result<Value, String> {
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        let unsigned = text.strip_prefix('-').unwrap_or(text);
        if digits(unsigned) {
            return Ok(Value::Int(text.to_string()));
        }
        if let Some((whole, fraction)) = unsigned.split_once('.') {
            if digits(whole) && digits(fraction) {
                return Ok(Value::Decimal(text.to_string()));
            }
        }
        if text.starts_with(|c: char| c.is_ascii_alphabetic()) && is_name(text) {
            return Ok(Value::Word(text.to_string()));
        }
        Err(format!(
            "value `{text}` is neither a number nor a word (a number with a unit? print the bare \
             number and put the unit in the column name)"
        ))
    }

    /// The text as printed.
    pub fn text(&self) -> &str {
        match self {
            Value::Int(s) | Value::Decimal(s) | Value::Word(s) => s,
        }
    }

    /// The number, for charts; `None` for a word.
    pub fn number(&self) -> Option<f64> {
        match self {
            Value::Int(s) | Value::Decimal(s) => s.parse().ok(),
            Value::Word(_) => None,
        }
    }
}

/// Whether `s` is a valid table, row or column name.
pub fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.+-".contains(&b))
}

/// One parsed `BENCH` line.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchLine {
    /// Table name.
    pub table: String,
    /// Row name.
    pub row: String,
    /// `(column, value)` in the order printed.
    pub cells: Vec<(String, Value)>,
}

/// Parses one console line: `None` if it is not a `BENCH` line at all, `Some(Err(why))` if it is
/// one but malformed. Trailing blanks (a serial `\r`) are ignored; nothing may precede `BENCH`.
pub fn parse_bench_line(line: &str) -> Option<Result<BenchLine, String>> {
    let line = line.trim_end();
    let rest = line.strip_prefix(BENCH_PREFIX)?;
    if !(rest.is_empty() || rest.starts_with(' ')) {
        return None;
    }
    Some(parse_bench_tokens(rest.strip_prefix(' ').unwrap_or(rest)))
}

/// The tokens after `BENCH `.
fn parse_bench_tokens(rest: &str) -> Result<BenchLine, String> {
    let tokens: Vec<&str> = if rest.is_empty() {
        Vec::new()
    } else {
        rest.split(' ').collect()
    };
    if tokens.iter().any(|t| t.is_empty()) {
        return Err("tokens must be separated by single spaces".to_string());
    }
    let named = |token: Option<&&str>, key: &str| -> Result<String, String> {
        let token = token.ok_or_else(|| format!("missing `{key}=<name>`"))?;
        match token.split_once('=') {
            Some((k, name)) if k == key && is_name(name) => Ok(name.to_string()),
            Some((k, name)) if k == key => Err(format!("bad {key} name `{name}`")),
            _ => Err(format!("expected `{key}=<name>`, found `{token}`")),
        }
    };
    let table = named(tokens.first(), TABLE_KEY)?;
    let row = named(tokens.get(1), ROW_KEY)?;
    if tokens.len() < 3 {
        return Err("no `<column>=<value>` after the row".to_string());
    }
    let mut cells: Vec<(String, Value)> = Vec::new();
    for token in &tokens[2..] {
        let (column, value) = token
            .split_once('=')
            .ok_or_else(|| format!("expected `<column>=<value>`, found `{token}`"))?;
        if !is_name(column) {
            return Err(format!("bad column name `{column}`"));
        }
        if column == TABLE_KEY || column == ROW_KEY {
            return Err(format!("`{column}` cannot be a column name"));
        }
        if cells.iter().any(|(c, _)| c == column) {
            return Err(format!("column `{column}` given twice"));
        }
        cells.push((column.to_string(), Value::parse(value)?));
    }
    Ok(BenchLine { table, row, cells })
}

/// The `BENCH` lines of a console log: the good ones, and the malformed ones with the reason.
pub fn scan_log(log: &str) -> (Vec<BenchLine>, Vec<(String, String)>) {
    let mut good = Vec::new();
    let mut bad = Vec::new();
    for line in log.lines() {
        match parse_bench_line(line) {
            Some(Ok(parsed)) => good.push(parsed),
            Some(Err(why)) => bad.push((line.trim_end().to_string(), why)),
            None => {}
        }
    }
    (good, bad)
}

// ---------------------------------------------------------------------------------------------
// Tables
// ---------------------------------------------------------------------------------------------

/// One row of a table.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Row {
    /// Row name.
    pub name: String,
    /// Cells by column name.
    pub cells: HashMap<String, Value>,
}

impl Row {
    /// The number in `column`, if that cell holds one.
    pub fn number(&self, column: &str) -> Option<f64> {
        self.cells.get(column).and_then(Value::number)
    }
}

/// One table of one architecture (or of the host).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    /// Architecture name, or [`HOST`].
    pub arch: String,
    /// Table name.
    pub name: String,
    /// Column names in first-seen order.
    pub columns: Vec<String>,
    /// Rows in first-seen order.
    pub rows: Vec<Row>,
    /// Notes printed under the title (from the benchmarks' [`TableInfo`]).
    pub notes: Vec<String>,
    /// Horizontal axis label of the chart.
    pub x_label: String,
    /// Vertical axis label of the chart.
    pub y_label: String,
    /// Columns the chart prefers (see [`TableInfo::chart`]).
    pub chart: Vec<String>,
}

/// Every table gathered so far, in first-seen order.
#[derive(Clone, Debug, Default)]
pub struct Tables {
    /// The tables.
    pub tables: Vec<Table>,
}

impl Tables {
    /// Adds the cells of `line`, printed by a boot on `arch` whose columns get `suffix`. Returns
    /// a warning for each cell that replaced an earlier value.
    pub fn add(&mut self, arch: &str, line: &BenchLine, suffix: &str) -> Vec<String> {
        let index = match self
            .tables
            .iter()
            .position(|t| t.arch == arch && t.name == line.table)
        {
            Some(index) => index,
            None => {
                self.tables.push(Table {
                    arch: arch.to_string(),
                    name: line.table.clone(),
                    ..Table::default()
                });
                self.tables.len() - 1
            }
        };
        let table = &mut self.tables[index];
        let row = match table.rows.iter().position(|r| r.name == line.row) {
            Some(row) => row,
            None => {
                table.rows.push(Row {
                    name: line.row.clone(),
                    cells: HashMap::new(),
                });
                table.rows.len() - 1
            }
        };
        let mut warnings = Vec::new();
        for (column, value) in &line.cells {
            let column = format!("{column}{suffix}");
            if !table.columns.contains(&column) {
                table.columns.push(column.clone());
            }
            if let Some(old) = table.rows[row].cells.insert(column.clone(), value.clone()) {
                warnings.push(format!(
                    "{arch} {}: row {} column {column}: {} replaced by {}",
                    table.name,
                    line.row,
                    old.text(),
                    value.text()
                ));
            }
        }
        warnings
    }

    /// Gives each table the notes and axis labels the benchmarks say for it.
    pub fn annotate(&mut self, infos: &[TableInfo]) {
        for table in &mut self.tables {
            for info in infos.iter().filter(|i| i.table == table.name) {
                if !info.note.is_empty() && !table.notes.iter().any(|n| n == info.note) {
                    table.notes.push(info.note.to_string());
                }
                if table.x_label.is_empty() {
                    table.x_label = info.x_label.to_string();
                }
                if table.y_label.is_empty() {
                    table.y_label = info.y_label.to_string();
                }
                for column in info.chart {
                    if !table.chart.iter().any(|c| c == column) {
                        table.chart.push((*column).to_string());
                    }
                }
            }
        }
    }
}

/// The table as aligned text: a title line, its notes, a header and the rows; `mode` says how
/// it was measured (shown in the title). Missing cells are `-`. A table wider than
/// [`MAX_TEXT_WIDTH`] with more columns than rows is printed transposed (a line per column).
pub fn render_text(table: &Table, mode: &str) -> String {
    let mut grid: Vec<Vec<String>> = vec![std::iter::once(ROW_KEY.to_string())
        .chain(table.columns.iter().cloned())
        .collect()];
    for row in &table.rows {
        grid.push(
            std::iter::once(row.name.clone())
                .chain(table.columns.iter().map(|c| {
                    row.cells
                        .get(c)
                        .map_or_else(|| "-".to_string(), |v| v.text().to_string())
                }))
                .collect(),
        );
    }
    let widths = |grid: &[Vec<String>]| -> Vec<usize> {
        (0..grid[0].len())
            .map(|i| grid.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
            .collect()
    };
    let mut column_widths = widths(&grid);
    let total: usize = column_widths.iter().map(|w| w + 2).sum();
    let transposed = total > MAX_TEXT_WIDTH && table.columns.len() > table.rows.len();
    if transposed {
        grid = (0..grid[0].len())
            .map(|i| grid.iter().map(|line| line[i].clone()).collect())
            .collect();
        grid[0][0] = format!("{COLUMN_HEADER} \\ {ROW_KEY}");
        column_widths = widths(&grid);
    }
    let mut out = format!("{} ({}, {mode})\n", table.name, table.arch);
    for note in &table.notes {
        let _ = writeln!(out, "  note: {note}");
    }
    for line in &grid {
        let mut text = String::from(" ");
        for (i, cell) in line.iter().enumerate() {
            // Names left-aligned, values right-aligned.
            if i == 0 {
                let _ = write!(text, " {cell:<w$}", w = column_widths[i]);
            } else {
                let _ = write!(text, "  {cell:>w$}", w = column_widths[i]);
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    }
    out
}

/// Quotes a CSV field when it holds a comma, a quote or a line break (RFC 4180).
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// The table as CSV: a header (`row` and the columns), then one line per row; missing cells empty.
pub fn to_csv(table: &Table) -> String {
    let mut out = String::new();
    let header: Vec<String> = std::iter::once(ROW_KEY)
        .chain(table.columns.iter().map(String::as_str))
        .map(csv_field)
        .collect();
    out.push_str(&header.join(","));
    out.push('\n');
    for row in &table.rows {
        let fields: Vec<String> = std::iter::once(csv_field(&row.name))
            .chain(table.columns.iter().map(|c| {
                row.cells
                    .get(c)
                    .map_or(String::new(), |v| csv_field(v.text()))
            }))
            .collect();
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Charts
// ---------------------------------------------------------------------------------------------

/// The columns a chart draws: those with at least one number, limited to the table's preferred
/// ones (each also with a `_suffix`) when any of those exists.
fn chart_columns(table: &Table) -> Vec<&str> {
    let numeric: Vec<&str> = table
        .columns
        .iter()
        .filter(|c| table.rows.iter().any(|r| r.number(c).is_some()))
        .map(String::as_str)
        .collect();
    let preferred = |column: &str| {
        table.chart.iter().any(|c| {
            column
                .strip_prefix(c.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('_'))
        })
    };
    let chosen: Vec<&str> = numeric.iter().copied().filter(|c| preferred(c)).collect();
    if chosen.is_empty() {
        numeric
    } else {
        chosen
    }
}

/// The rows' names as numbers, if every row is named by a number and there are at least two
/// (e.g. call depths): such a table is drawn as a line chart.
fn numeric_rows(table: &Table) -> Option<Vec<f64>> {
    if table.rows.len() < 2 {
        return None;
    }
    table
        .rows
        .iter()
        .map(|r| r.name.parse::<f64>().ok().filter(|x| x.is_finite()))
        .collect()
}

/// The vertical range of a chart of `values`: from 0 (or below, for negative values) to above
/// the highest, leaving room at the top for a legend of `legend_entries` lines.
fn value_range(values: impl Iterator<Item = f64>, legend_entries: usize) -> (f64, f64) {
    let (mut low, mut high) = (0.0f64, 0.0f64);
    for v in values {
        low = low.min(v);
        high = high.max(v);
    }
    if high - low <= f64::EPSILON {
        high = low + 1.0;
    }
    // The legend takes this share of the plot's height at the top; the bars stay below it.
    let legend =
        ((legend_entries as f64 * LEGEND_ENTRY_PX + LEGEND_FRAME_PX) / PLOT_HEIGHT_PX).min(0.6);
    let headroom = (legend / (1.0 - legend)).max(CHART_HEADROOM);
    let pad = (high - low) * headroom;
    let low = if low < 0.0 {
        low - (high - low) * CHART_HEADROOM
    } else {
        low
    };
    (low, high + pad)
}

/// Turns a plotting error into ours.
fn plot_error(error: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("drawing the chart: {error}")
}

/// Short form of an axis number: no trailing zeros.
fn axis_number(x: f64) -> String {
    let text = format!("{x:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".to_string()
    } else {
        text.to_string()
    }
}

/// The table as an SVG chart: a line chart when the rows are numbers, else bars grouped by row,
/// one bar per numeric column. `None` when the table has no number to draw.
pub fn to_svg(table: &Table, mode: &str) -> Result<Option<String>> {
    let columns = chart_columns(table);
    if columns.is_empty() {
        return Ok(None);
    }
    let (low, high) = value_range(
        table
            .rows
            .iter()
            .flat_map(|r| columns.iter().filter_map(|c| r.number(c))),
        columns.len(),
    );
    let title = format!("{} ({}, {mode})", table.name, table.arch);
    let x_label = if table.x_label.is_empty() {
        ROW_KEY
    } else {
        &table.x_label
    };
    let y_label = match (table.y_label.as_str(), columns.as_slice()) {
        ("", [only]) => only,
        ("", _) => "value",
        (label, _) => label,
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SVG_SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let mut builder = ChartBuilder::on(&root);
        builder
            .caption(&title, ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(56)
            .y_label_area_size(90);
        if let Some(xs) = numeric_rows(table) {
            let (mut x_low, mut x_high) = xs
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
                    (lo.min(x), hi.max(x))
                });
            if x_high - x_low <= f64::EPSILON {
                x_low -= 1.0;
                x_high += 1.0;
            }
            let mut chart = builder
                .build_cartesian_2d(x_low..x_high, low..high)
                .map_err(plot_error)?;
            chart
                .configure_mesh()
                .x_labels(xs.len().min(20))
                .x_desc(x_label)
                .y_desc(y_label)
                .x_label_formatter(&|x| axis_number(*x))
                .y_label_formatter(&|y| axis_number(*y))
                .draw()
                .map_err(plot_error)?;
            for (j, column) in columns.iter().enumerate() {
                let color = Palette99::pick(j).to_rgba();
                let mut points: Vec<(f64, f64)> = xs
                    .iter()
                    .zip(&table.rows)
                    .filter_map(|(&x, row)| Some((x, row.number(column)?)))
                    .collect();
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                chart
                    .draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))
                    .map_err(plot_error)?;
                chart
                    .draw_series(LineSeries::new(points, color.stroke_width(2)))
                    .map_err(plot_error)?
                    .label(*column)
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                    });
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperLeft)
                .draw()
                .map_err(plot_error)?;
        } else {
            // Row i occupies [i * SLOT, (i + 1) * SLOT) of an integer axis (an integer axis
            // can carry labels at chosen points: the slot centres, named by the rows).
            let n = i32::try_from(table.rows.len()).context("too many rows for a chart")?;
            let names: Vec<&str> = table.rows.iter().map(|r| r.name.as_str()).collect();
            let centres: Vec<i32> = (0..n).map(|i| i * BAR_SLOT + BAR_SLOT / 2).collect();
            let mut chart = builder
                .build_cartesian_2d((0..n * BAR_SLOT).with_key_points(centres), low..high)
                .map_err(plot_error)?;
            let row_name = |x: &i32| {
                usize::try_from(x.div_euclid(BAR_SLOT))
                    .ok()
                    .and_then(|slot| names.get(slot))
                    .map_or(String::new(), |s| s.to_string())
            };
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_desc(x_label)
                .y_desc(y_label)
                .x_label_formatter(&row_name)
                .y_label_formatter(&|y| axis_number(*y))
                .draw()
                .map_err(plot_error)?;
            let k = i32::try_from(columns.len()).context("too many columns for a chart")?;
            let group = (f64::from(BAR_SLOT) * BAR_GROUP_WIDTH) as i32;
            let width = (group / k).max(1);
            let start = (BAR_SLOT - width * k) / 2;
            for (j, column) in (0..k).zip(&columns) {
                let color = Palette99::pick(j as usize).to_rgba();
                chart
                    .draw_series((0..n).zip(&table.rows).filter_map(|(i, row)| {
                        let v = row.number(column)?;
                        let x0 = i * BAR_SLOT + start + j * width;
                        Some(Rectangle::new([(x0, 0.0), (x0 + width, v)], color.filled()))
                    }))
                    .map_err(plot_error)?
                    .label(*column)
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                    });
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperRight)
                .draw()
                .map_err(plot_error)?;
        }
        root.present().map_err(plot_error)?;
    }
    Ok(Some(svg))
}

// ---------------------------------------------------------------------------------------------
// criterion
// ---------------------------------------------------------------------------------------------

/// One criterion result: the benchmark id and its `time: [low mid high]`, in nanoseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct CriterionResult {
    /// Benchmark id (`group/function/parameter`).
    pub id: String,
    /// Lower bound of the confidence interval.
    pub low_ns: f64,
    /// Point estimate.
    pub mid_ns: f64,
    /// Upper bound of the confidence interval.
    pub high_ns: f64,
}

/// Nanoseconds per criterion time unit.
fn unit_ns(unit: &str) -> Option<f64> {
    Some(match unit {
        "ps" => 1e-3,
        "ns" => 1.0,
        "µs" | "us" | "μs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => return None,
    })
}

/// Removes ANSI colour sequences (`ESC [ ... m`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The three times of `[1.2 ns 1.3 ns 1.4 ns]`, in ns; `None` for anything else (such as the
/// percentages of a `change:` line).
fn parse_time_triple(bracket: &str) -> Option<[f64; 3]> {
    let inner = bracket.trim().strip_prefix('[')?;
    let inner = &inner[..inner.find(']')?];
    let words: Vec<&str> = inner.split_whitespace().collect();
    if words.len() != 6 {
        return None;
    }
    let mut out = [0.0; 3];
    for (i, pair) in words.chunks(2).enumerate() {
        out[i] = pair[0].parse::<f64>().ok()? * unit_ns(pair[1])?;
    }
    Some(out)
}

/// The results in criterion's output. A result is `<id>  time:   [a u b u c u]` on one line, or
/// an id too long for that on a line of its own followed by an indented `time:` line.
pub fn parse_criterion(output: &str) -> Vec<CriterionResult> {
    let mut results = Vec::new();
    let mut previous = String::new();
    for raw in output.lines() {
        let line = strip_ansi(raw);
        // A terminal-style `\r` overwrite keeps only the last part.
        let line = line
            .rsplit('\r')
            .next()
            .unwrap_or("")
            .trim_end()
            .to_string();
        if let Some(at) = line.find("time:") {
            let id_part = line[..at].trim();
            let id = if id_part.is_empty() {
                // Only an unindented line right above names the benchmark.
                (!previous.is_empty() && !previous.starts_with(char::is_whitespace))
                    .then(|| previous.trim().to_string())
            } else {
                Some(id_part.to_string())
            };
            if let (Some(id), Some([low_ns, mid_ns, high_ns])) =
                (id, parse_time_triple(&line[at + "time:".len()..]))
            {
                results.push(CriterionResult {
                    id,
                    low_ns,
                    mid_ns,
                    high_ns,
                });
            }
        }
        if !line.trim().is_empty() {
            previous = line;
        }
    }
    results
}

/// A number of nanoseconds as a cell value: three decimals at most, no trailing zeros.
fn ns_value(ns: f64) -> Value {
    let text = axis_number(ns);
    Value::parse(&text).unwrap_or(Value::Word("nan".to_string()))
}

/// The `BENCH`-equivalent lines of criterion results, for table `table`.
pub fn criterion_lines(results: &[CriterionResult], table: &str) -> Vec<BenchLine> {
    results
        .iter()
        .map(|r| BenchLine {
            table: table.to_string(),
            row: r.id.clone(),
            cells: vec![
                ("low_ns".to_string(), ns_value(r.low_ns)),
                ("mid_ns".to_string(), ns_value(r.mid_ns)),
                ("high_ns".to_string(), ns_value(r.high_ns)),
            ],
        })
        .collect()
}

/// Whether `package` in `cargo metadata` output has a target of `kind` named `name`.
pub fn has_target(metadata_json: &str, package: &str, kind: &str, name: &str) -> Result<bool> {
    let metadata: serde_json::Value =
        serde_json::from_str(metadata_json).context("cargo metadata is not JSON")?;
    let packages = metadata["packages"]
        .as_array()
        .context("cargo metadata has no package list")?;
    let Some(found) = packages.iter().find(|p| p["name"] == package) else {
        return Ok(false);
    };
    Ok(found["targets"].as_array().is_some_and(|targets| {
        targets.iter().any(|t| {
            t["name"] == name
                && t["kind"]
                    .as_array()
                    .is_some_and(|k| k.iter().any(|k| k == kind))
        })
    }))
}

// ---------------------------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------------------------

/// How one benchmark run ended.
#[derive(Clone, Debug, PartialEq)]
enum Verdict {
    /// Ran and printed this many good `BENCH` lines.
    Ok(usize),
    /// Did not run, not a failure (why).
    Skipped(String),
    /// Failed (why).
    Failed(String),
}

/// The programs a boot runs (`run=a+b,c` gives `a`, `b`, `c`).
pub fn programs_of(boot_words: &str) -> Vec<&str> {
    bootopt::get(boot_words, bootopt::RUN)
        .unwrap_or(bootopt::DEFAULT_PROGRAM)
        .split([',', '+'])
        .filter(|p| !p.is_empty())
        .collect()
}

/// The program the kernel said it could not find in the boot archive, if any.
pub fn missing_program<'a>(log: &'a str, programs: &[&str]) -> Option<&'a str> {
    log.lines().find_map(|line| {
        let name = line
            .trim()
            .strip_prefix(CANNOT_RUN)?
            .strip_suffix(NOT_IN_ARCHIVE)?;
        programs.contains(&name).then_some(name)
    })
}

/// Judges one finished boot and merges its rows; prints warnings for malformed lines.
fn judge_boot(
    arch: Arch,
    bench: &Bench,
    programs: &[&str],
    outcome: &Outcome,
    log: &str,
    tables: &mut Tables,
) -> Verdict {
    if let Some(name) = missing_program(log, programs) {
        return Verdict::Skipped(format!("{name} is not in the {arch} boot archive"));
    }
    let (good, bad) = scan_log(log);
    for line in &good {
        for warning in tables.add(arch.name(), line, bench.suffix) {
            println!("warning: {warning}");
        }
    }
    for (line, why) in &bad {
        println!(
            "warning: {arch}/{}: malformed BENCH line ({why}): {line}",
            bench.name
        );
    }
    if *outcome != Outcome::Guest(0) {
        Verdict::Failed(outcome.describe())
    } else if good.is_empty() {
        Verdict::Failed("no BENCH line in the log".to_string())
    } else if !bad.is_empty() {
        Verdict::Failed(format!("{} malformed BENCH line(s)", bad.len()))
    } else {
        Verdict::Ok(good.len())
    }
}

/// Where a boot's console log goes.
pub fn log_path(out_dir: &Path, arch: &str, bench: &str) -> PathBuf {
    out_dir.join("logs").join(format!("{arch}-{bench}.log"))
}

/// Prints the end of a failed run's log.
fn print_tail(text: &str, path: &Path) {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(LOG_TAIL_LINES);
    println!(
        "---- last {} lines of {} ----",
        lines.len() - start,
        path.display()
    );
    for line in &lines[start..] {
        println!("{line}");
    }
    println!("---- end of log ----");
}

/// How a benchmark is run this time.
struct Settings {
    accel: Accel,
    icount: bool,
    release: bool,
    timeout: Option<Duration>,
    out_dir: PathBuf,
}

/// Boots one QEMU benchmark on `arch`.
fn run_boot(
    settings: &Settings,
    arch: Arch,
    bench: &Bench,
    artifacts: &Artifacts,
    tables: &mut Tables,
) -> Verdict {
    let Runner::Qemu { smp, boot_words } = bench.runner else {
        return Verdict::Failed("not a QEMU benchmark".to_string());
    };
    let programs = programs_of(boot_words);
    if let Some(missing) = programs
        .iter()
        .find(|p| !artifacts.programs.iter().any(|(name, _)| name == *p))
    {
        return Verdict::Skipped(format!("{missing} is not built for {arch}"));
    }
    let timeout = settings.timeout.unwrap_or(bench.timeout);
    let log = log_path(&settings.out_dir, arch.name(), bench.name);
    println!(
        "bench {arch}/{}: {smp} CPU(s), boot words `{boot_words}`, time limit {} s",
        bench.name,
        timeout.as_secs()
    );
    let machine = Machine {
        arch,
        accel: settings.accel,
        smp,
        icount: settings.icount,
        gdb: false,
        kernel: &artifacts.kernel,
        initrd: &artifacts.initrd,
        cmdline: boot_words,
    };
    let console = Console::Capture { log: log.clone() };
    let finished = match qemu::run(&qemu::command(&machine), arch, timeout, &console) {
        Ok(finished) => finished,
        Err(error) => return Verdict::Failed(format!("{error:#}")),
    };
    let verdict = judge_boot(
        arch,
        bench,
        &programs,
        &finished.outcome,
        &finished.log,
        tables,
    );
    if matches!(verdict, Verdict::Failed(_)) {
        print_tail(&finished.log, &log);
    }
    verdict
}

/// Runs a criterion bench target on the host.
fn run_host(settings: &Settings, bench: &Bench, tables: &mut Tables) -> Verdict {
    let Runner::HostCriterion {
        package,
        bench: target,
        table,
    } = bench.runner
    else {
        return Verdict::Failed("not a host benchmark".to_string());
    };
    let metadata = Cmd::new(host_cargo())
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--manifest-path",
        ])
        .arg(workspace_root().join("Cargo.toml"))
        .read_quietly()
        .and_then(|json| has_target(&json, package, "bench", target));
    match metadata {
        Ok(true) => {}
        Ok(false) => {
            println!("{HOST}: {NO_HOST_BENCH}");
            return Verdict::Skipped(format!(
                "{NO_HOST_BENCH} (no bench target `{target}` in {package})"
            ));
        }
        Err(error) => return Verdict::Failed(format!("{error:#}")),
    }
    let log = log_path(&settings.out_dir, HOST, bench.name);
    let cmd = Cmd::new(host_cargo())
        .args(["bench", "-p", package, "--bench", target, "--", "--noplot"])
        .current_dir(workspace_root());
    let timeout = settings.timeout.unwrap_or(bench.timeout);
    let output = match stream_to_log(&cmd, &log, timeout) {
        Ok((output, Some(status))) if status.success() => output,
        Ok((output, Some(status))) => {
            print_tail(&output, &log);
            return Verdict::Failed(format!("`{}` exited with {status}", cmd.display()));
        }
        Ok((_, None)) => {
            return Verdict::Failed(format!("timed out after {} s", timeout.as_secs()));
        }
        Err(error) => return Verdict::Failed(format!("{error:#}")),
    };
    let results = parse_criterion(&output);
    if results.is_empty() {
        return Verdict::Failed("no criterion `time:` line in the output".to_string());
    }
    let lines = criterion_lines(&results, table);
    for line in &lines {
        for warning in tables.add(HOST, line, bench.suffix) {
            println!("warning: {warning}");
        }
    }
    Verdict::Ok(lines.len())
}

/// Runs `cmd` in a process group of its own with a time limit, echoing its stdout (criterion's
/// summaries) and copying it to `log`; stderr (cargo's and criterion's progress) stays on the
/// terminal. Returns the output and the exit status, `None` if the time limit ended it (then the
/// whole group, benchmark binary included, is killed).
fn stream_to_log(
    cmd: &Cmd,
    log: &Path,
    timeout: Duration,
) -> Result<(String, Option<std::process::ExitStatus>)> {
    use std::os::unix::process::CommandExt;
    use wait_timeout::ChildExt;
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut file =
        std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    cmd.echo();
    let mut child = cmd
        .to_command()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .process_group(0)
        .spawn()
        .with_context(|| format!("could not start `{}`", cmd.display()))?;
    let reader = child.stdout.take().map(|stdout| {
        std::thread::spawn(move || {
            let mut output = String::new();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                println!("{line}");
                // Losing a log line must not stop the run; the returned text still has it.
                let _ = writeln!(file, "{line}");
                output.push_str(&line);
                output.push('\n');
            }
            output
        })
    });
    let status = match child
        .wait_timeout(timeout)
        .context("waiting for cargo bench")?
    {
        Some(status) => Some(status),
        None => {
            // The group's id is the child's pid (process_group(0)); `kill -KILL -<pgid>` ends
            // cargo and the benchmark binary it started.
            let group = format!("-{}", child.id());
            let _ = Cmd::new("kill")
                .args(["-KILL", "--", &group])
                .read_quietly();
            let _ = child.kill();
            let _ = child.wait();
            None
        }
    };
    let output = reader
        .map(|r| r.join().unwrap_or_default())
        .unwrap_or_default();
    Ok((output, status))
}

/// One benchmark to run, on an architecture or on the host.
#[derive(Clone, Copy, Debug)]
enum Planned {
    /// A QEMU boot.
    Boot(Arch, &'static Bench),
    /// A host run.
    Host(&'static Bench),
}

impl Planned {
    /// `<arch>/<name>` or `host/<name>`.
    fn label(self) -> String {
        match self {
            Planned::Boot(arch, bench) => format!("{arch}/{}", bench.name),
            Planned::Host(bench) => format!("{HOST}/{}", bench.name),
        }
    }
}

/// What to run: the benchmarks of `arches` (and the host ones when `with_host`) that `filter`
/// selects, by name or `<arch>/<name>`.
fn plan(arches: &[Arch], with_host: bool, filter: Option<&str>) -> Vec<Planned> {
    let selected =
        |name: &str, label: &str| filter.is_none_or(|f| name.contains(f) || label.contains(f));
    let mut planned = Vec::new();
    for &arch in arches {
        for bench in BENCHES {
            if let Runner::Qemu { .. } = bench.runner {
                let item = Planned::Boot(arch, bench);
                if bench.arches.includes(arch) && selected(bench.name, &item.label()) {
                    planned.push(item);
                }
            }
        }
    }
    for bench in BENCHES {
        if let Runner::HostCriterion { .. } = bench.runner {
            let item = Planned::Host(bench);
            // The host benchmarks run with no --arch, or when the filter names them.
            let named = filter.is_some_and(|f| bench.name.contains(f) || item.label().contains(f));
            if (with_host && selected(bench.name, &item.label())) || named {
                planned.push(item);
            }
        }
    }
    planned
}

/// Prints the benchmark list.
fn print_list() {
    for bench in BENCHES {
        let what = match bench.runner {
            Runner::Qemu { smp, boot_words } => format!("QEMU, {smp} CPU(s): {boot_words}"),
            Runner::HostCriterion { package, bench, .. } => {
                format!("host: cargo bench -p {package} --bench {bench} -- --noplot")
            }
        };
        let tables: Vec<&str> = bench.tables.iter().map(|t| t.table).collect();
        let arches = match bench.runner {
            Runner::Qemu { .. } => format!("arches {}; ", bench.arches.describe()),
            Runner::HostCriterion { .. } => String::new(),
        };
        println!("{:<11} {}", bench.name, bench.about);
        println!("{:<11} {arches}{what}", "");
        println!(
            "{:<11} tables {}{}; time limit {} s",
            "",
            tables.join(", "),
            if bench.suffix.is_empty() {
                String::new()
            } else {
                format!(" (columns suffixed {})", bench.suffix)
            },
            bench.timeout.as_secs()
        );
    }
}

/// `cargo xtask bench`.
pub fn run(args: &BenchArgs) -> Result<u8> {
    if args.list {
        print_list();
        return Ok(0);
    }
    let mut arches: Vec<Arch> = Vec::new();
    for &arch in &args.arch {
        arch.require_supported()?;
        if !arches.contains(&arch) {
            arches.push(arch);
        }
    }
    let with_host = arches.is_empty();
    if arches.is_empty() {
        arches = Arch::supported();
    }
    let planned = plan(&arches, with_host, args.filter.as_deref());
    if planned.is_empty() {
        let names: Vec<&str> = BENCHES.iter().map(|b| b.name).collect();
        bail!(
            "--filter {:?} selects no benchmark on {} (benchmarks: {})",
            args.filter.as_deref().unwrap_or_default(),
            arches
                .iter()
                .map(|a| a.name())
                .collect::<Vec<_>>()
                .join(", "),
            names.join(", ")
        );
    }
    let icount = !args.no_icount && args.accel == Accel::Tcg;
    if args.accel == Accel::Kvm && !args.no_icount {
        println!("note: --accel kvm cannot count instructions: deterministic mode is off");
    }
    let settings = Settings {
        accel: args.accel,
        icount,
        release: !args.debug,
        timeout: args.timeout.map(Duration::from_secs),
        out_dir: workspace_root().join("target").join("bench"),
    };
    let mode = format!(
        "{}{}, {}",
        args.accel.name(),
        if icount {
            " -icount shift=0: cycles = instructions"
        } else {
            ""
        },
        if settings.release { "release" } else { "debug" }
    );
    println!("bench: {} benchmark run(s); {mode}", planned.len());

    let mut tables = Tables::default();
    let mut verdicts: Vec<(String, Verdict)> = Vec::new();
    let boot_arches: Vec<Arch> = arches
        .iter()
        .copied()
        .filter(|a| {
            planned
                .iter()
                .any(|p| matches!(p, Planned::Boot(b, _) if b == a))
        })
        .collect();
    let tools: Option<Tools> = if boot_arches.is_empty() {
        None
    } else {
        match setup::ensure(&boot_arches) {
            Ok(tools) => Some(tools),
            Err(error) => {
                verdicts.push((
                    "setup".to_string(),
                    Verdict::Failed(format!("cannot build or boot the kernel: {error:#}")),
                ));
                None
            }
        }
    };
    if let Some(tools) = &tools {
        for &arch in &boot_arches {
            run_arch(&settings, tools, arch, &planned, &mut tables, &mut verdicts);
        }
    }
    for item in &planned {
        if let Planned::Host(bench) = item {
            let verdict = run_host(&settings, bench, &mut tables);
            report(&item.label(), &verdict);
            verdicts.push((item.label(), verdict));
        }
    }

    let infos: Vec<TableInfo> = planned
        .iter()
        .flat_map(|p| match p {
            Planned::Boot(_, b) | Planned::Host(b) => b.tables.iter().copied(),
        })
        .collect();
    tables.annotate(&infos);
    let files = write_outputs(&tables, &settings.out_dir, &mode)?;

    let skipped: Vec<_> = verdicts
        .iter()
        .filter_map(|(l, v)| match v {
            Verdict::Skipped(why) => Some((l, why)),
            _ => None,
        })
        .collect();
    let failed: Vec<_> = verdicts
        .iter()
        .filter_map(|(l, v)| match v {
            Verdict::Failed(why) => Some((l, why)),
            _ => None,
        })
        .collect();
    if tables.tables.is_empty() {
        println!("no table: no benchmark printed a BENCH line");
    }
    for (label, why) in &skipped {
        println!("skipped {label}: {why}");
    }
    for (label, why) in &failed {
        println!("FAILED {label}: {why}");
    }
    println!("files written:");
    if files.is_empty() {
        println!("  (none)");
    }
    for file in &files {
        println!("  {}", file.display());
    }
    let logs = settings.out_dir.join("logs");
    println!("  (console logs in {})", logs.display());
    Ok(u8::from(!failed.is_empty()))
}

/// Prints one result line.
fn report(label: &str, verdict: &Verdict) {
    match verdict {
        Verdict::Ok(lines) => println!("ok   {label}: {lines} BENCH line(s)"),
        Verdict::Skipped(why) => println!("skip {label}: {why}"),
        Verdict::Failed(why) => println!("FAIL {label}: {why}"),
    }
}

/// Builds for `arch` and runs its planned boots.
fn run_arch(
    settings: &Settings,
    tools: &Tools,
    arch: Arch,
    planned: &[Planned],
    tables: &mut Tables,
    verdicts: &mut Vec<(String, Verdict)>,
) {
    let boots: Vec<(String, &Bench)> = planned
        .iter()
        .filter_map(|p| match p {
            Planned::Boot(a, bench) if *a == arch => Some((p.label(), *bench)),
            _ => None,
        })
        .collect();
    let artifacts = match build::build(tools, arch, settings.release) {
        Ok(artifacts) => artifacts,
        Err(error) => {
            // The error (the failed command) once; the boots just point at it.
            println!("FAIL {arch}: build: {error:#}");
            for (label, _) in boots {
                let verdict = Verdict::Failed(format!("the {arch} build failed (see above)"));
                report(&label, &verdict);
                verdicts.push((label, verdict));
            }
            return;
        }
    };
    for (label, bench) in boots {
        let verdict = run_boot(settings, arch, bench, &artifacts, tables);
        report(&label, &verdict);
        verdicts.push((label, verdict));
    }
}

/// Prints every table and writes its CSV and SVG; returns the files written.
fn write_outputs(tables: &Tables, out_dir: &Path, mode: &str) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    if tables.tables.is_empty() {
        return Ok(files);
    }
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    for table in &tables.tables {
        let table_mode = if table.arch == HOST { "host" } else { mode };
        println!();
        print!("{}", render_text(table, table_mode));
        let stem = format!("{}-{}", table.arch, table.name);
        let csv = out_dir.join(format!("{stem}.csv"));
        std::fs::write(&csv, to_csv(table))
            .with_context(|| format!("writing {}", csv.display()))?;
        files.push(csv);
        match to_svg(table, table_mode) {
            Ok(Some(svg)) => {
                let path = out_dir.join(format!("{stem}.svg"));
                std::fs::write(&path, svg)
                    .with_context(|| format!("writing {}", path.display()))?;
                files.push(path);
            }
            Ok(None) => println!("  (no numeric column: no chart)"),
            Err(error) => println!("  (no chart: {error:#})"),
        }
    }
    println!();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str) -> BenchLine {
        parse_bench_line(text).unwrap().unwrap()
    }

    fn int(s: &str) -> Value {
        Value::Int(s.to_string())
    }

    #[test]
    fn parses_good_bench_lines() {
        let parsed = line("BENCH table=kernel_switch row=same_view switches=10000 cycles=312.5 dtlb=unsupported\r");
        assert_eq!(parsed.table, "kernel_switch");
        assert_eq!(parsed.row, "same_view");
        assert_eq!(
            parsed.cells,
            vec![
                ("switches".to_string(), int("10000")),
                ("cycles".to_string(), Value::Decimal("312.5".to_string())),
                ("dtlb".to_string(), Value::Word("unsupported".to_string())),
            ]
        );
        let parsed = line("BENCH table=fcs_sweep row=10 delta=-3 a.b+c-d_e=0");
        assert_eq!(parsed.row, "10");
        assert_eq!(parsed.cells[0].1, int("-3"));
        assert_eq!(parsed.cells[1].0, "a.b+c-d_e");
    }

    #[test]
    fn ignores_lines_that_are_not_bench_lines() {
        for text in [
            "switchbench: same view: 10000 switches",
            "BENCHMARK table=x row=y a=1",
            " BENCH table=x row=y a=1",
            "domain 1 switchbench: exited with status 0",
            "",
        ] {
            assert_eq!(parse_bench_line(text), None, "{text}");
        }
    }

    #[test]
    fn rejects_malformed_bench_lines() {
        for (text, why) in [
            ("BENCH", "missing `table=<name>`"),
            ("BENCH row=x table=t a=1", "expected `table=<name>`"),
            ("BENCH table=t", "missing `row=<name>`"),
            ("BENCH table=t row=r", "no `<column>=<value>`"),
            ("BENCH table=t row=r  a=1", "single spaces"),
            ("BENCH table=t\trow=r a=1", "bad table name"),
            ("BENCH table=t/u row=r a=1", "bad table name"),
            ("BENCH table=t row= a=1", "bad row name"),
            ("BENCH table=t row=r a", "expected `<column>=<value>`"),
            ("BENCH table=t row=r a=1 a=2", "given twice"),
            ("BENCH table=t row=r row=2", "cannot be a column name"),
            ("BENCH table=t row=r a b=1", "expected `<column>=<value>`"),
            ("BENCH table=t row=r c/d=1", "bad column name"),
            ("BENCH table=t row=r a=", "neither a number nor a word"),
        ] {
            match parse_bench_line(text) {
                Some(Err(error)) => assert!(error.contains(why), "{text}: {error}"),
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn values_with_units_are_rejected_words_are_kept() {
        for bad in [
            "12ns", "1,234", "1e5", "1.5.3", "+5", "-", ".5", "5.", "4µs", "n/a",
        ] {
            assert!(Value::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Value::parse("ns12"), Ok(Value::Word("ns12".to_string())));
        assert_eq!(Value::parse("unsupported").unwrap().number(), None);
        assert_eq!(Value::parse("-0.25").unwrap().number(), Some(-0.25));
        assert_eq!(
            Value::parse("18446744073709551615").unwrap().text(),
            "18446744073709551615"
        );
    }

    fn cubix_tables() -> Tables {
        let mut tables = Tables::default();
        for (text, suffix) in [
            ("BENCH table=cubix row=2nd_noaff dtlb=42 cycles=45255", ""),
            ("BENCH table=cubix row=2nd_aff dtlb=0 cycles=8470", ""),
            (
                "BENCH table=cubix row=2nd_noaff dtlb=40 cycles=40000",
                "_tagoff",
            ),
            ("BENCH table=cubix row=1st_noaff dtlb=1", "_tagoff"),
            ("BENCH table=cubix row=2nd_noaff itlb=21", ""),
        ] {
            assert!(tables.add("x86_64", &line(text), suffix).is_empty());
        }
        tables
    }

    #[test]
    fn merges_rows_and_suffixes_columns() {
        let mut tables = cubix_tables();
        tables.add("riscv64", &line("BENCH table=cubix row=2nd_aff dtlb=0"), "");
        assert_eq!(tables.tables.len(), 2);
        let t = &tables.tables[0];
        assert_eq!((t.arch.as_str(), t.name.as_str()), ("x86_64", "cubix"));
        assert_eq!(
            t.columns,
            ["dtlb", "cycles", "dtlb_tagoff", "cycles_tagoff", "itlb"]
        );
        let rows: Vec<&str> = t.rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(rows, ["2nd_noaff", "2nd_aff", "1st_noaff"]);
        assert_eq!(t.rows[0].cells["dtlb_tagoff"], int("40"));
        assert_eq!(t.rows[0].cells["itlb"], int("21"));
        assert_eq!(t.rows[2].cells.len(), 1);
        // The same cell again replaces the value, with a warning.
        let warnings = tables.add("x86_64", &line("BENCH table=cubix row=2nd_aff dtlb=1"), "");
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].contains("dtlb: 0 replaced by 1"),
            "{}",
            warnings[0]
        );
        assert_eq!(tables.tables[0].rows[1].cells["dtlb"], int("1"));
    }

    #[test]
    fn annotates_tables_once() {
        let mut tables = cubix_tables();
        tables.annotate(&[CUBIX, CUBIX, KERNEL_SWITCH]);
        let t = &tables.tables[0];
        assert_eq!(t.notes, [CUBIX.note]);
        assert_eq!(t.x_label, CUBIX.x_label);
    }

    #[test]
    fn renders_aligned_text() {
        let mut tables = cubix_tables();
        tables.annotate(&[TableInfo {
            table: "cubix",
            note: "paper: 42",
            x_label: "",
            y_label: "",
            chart: &[],
        }]);
        let text = render_text(&tables.tables[0], "tcg");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "cubix (x86_64, tcg)");
        assert_eq!(lines[1], "  note: paper: 42");
        assert_eq!(
            lines[2],
            "  row        dtlb  cycles  dtlb_tagoff  cycles_tagoff  itlb"
        );
        assert_eq!(
            lines[3],
            "  2nd_noaff    42   45255           40          40000    21"
        );
        assert_eq!(
            lines[5],
            "  1st_noaff     -       -            1              -     -"
        );
    }

    #[test]
    fn transposes_wide_text_tables() {
        let mut tables = Tables::default();
        let cells: Vec<String> = (0..30).map(|i| format!("column_{i}={i}")).collect();
        tables.add(
            "riscv64",
            &line(&format!("BENCH table=wide row=only {}", cells.join(" "))),
            "",
        );
        let text = render_text(&tables.tables[0], "tcg");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1 + 1 + 30);
        assert_eq!(lines[1], "  column \\ row  only");
        assert_eq!(lines[2], "  column_0         0");
        assert_eq!(lines[31], "  column_29       29");
    }

    #[test]
    fn writes_csv() {
        let tables = cubix_tables();
        assert_eq!(
            to_csv(&tables.tables[0]),
            "row,dtlb,cycles,dtlb_tagoff,cycles_tagoff,itlb\n\
             2nd_noaff,42,45255,40,40000,21\n\
             2nd_aff,0,8470,,,\n\
             1st_noaff,,,1,,\n"
        );
        let mut host = Tables::default();
        host.add(
            HOST,
            &BenchLine {
                table: "host_switch".to_string(),
                row: "switch/yield, \"fast\"".to_string(),
                cells: vec![("mid_ns".to_string(), int("5"))],
            },
            "",
        );
        assert_eq!(
            to_csv(&host.tables[0]),
            "row,mid_ns\n\"switch/yield, \"\"fast\"\"\",5\n"
        );
    }

    #[test]
    fn draws_bar_and_line_charts() {
        let tables = cubix_tables();
        let svg = to_svg(&tables.tables[0], "tcg").unwrap().unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("cubix (x86_64, tcg)"));
        assert!(svg.contains("2nd_noaff") && svg.contains("cycles_tagoff"));
        assert!(svg.contains("<rect"));

        let mut sweep = Tables::default();
        for depth in 1..=10 {
            let text = format!(
                "BENCH table=fcs_sweep row={depth} window=40 full={}",
                100 + depth * 8
            );
            sweep.add("x86_64", &line(&text), "");
        }
        assert!(numeric_rows(&sweep.tables[0]).is_some());
        let svg = to_svg(&sweep.tables[0], "tcg").unwrap().unwrap();
        assert!(svg.contains("<polyline") && svg.contains("window"));

        let mut words = Tables::default();
        words.add("x86_64", &line("BENCH table=t row=r a=unsupported"), "");
        assert_eq!(to_svg(&words.tables[0], "tcg").unwrap(), None);
    }

    #[test]
    fn parses_criterion_output() {
        let output = "\
Gnuplot not found, using plotters backend
switch/libuthread_yield time:   [45.123 ns 45.456 ns 45.789 ns]
                        change: [-1.2345% +0.5000% +2.1000%] (p = 0.45 > 0.05)
                        No change in performance detected.
Found 3 outliers among 100 measurements (3.00%)
  2 (2.00%) high mild
switch/os_threads_condvar_ping_pong
                        time:   [4.1000 µs 4.2000 µs 4.3000 µs]
spawn/long name with spaces and more
                        time:   [1.5 ms 1.6 ms 1.7 ms]
                        thrpt:  [1.0 Kelem/s 1.1 Kelem/s 1.2 Kelem/s]
                 change:
                        time:   [-1.0% +0.5% +2.0%] (p = 0.45 > 0.05)
\u{1b}[32mcolour/id\u{1b}[39m               time:   [\u{1b}[2m900.00 ps\u{1b}[0m \u{1b}[1m1.0000 ns\u{1b}[0m 1.1000 ns]
bad/units               time:   [1 parsecs 2 parsecs 3 parsecs]
";
        let results = parse_criterion(output);
        let summary: Vec<(&str, f64)> = results.iter().map(|r| (r.id.as_str(), r.mid_ns)).collect();
        assert_eq!(
            summary,
            [
                ("switch/libuthread_yield", 45.456),
                ("switch/os_threads_condvar_ping_pong", 4200.0),
                ("spawn/long name with spaces and more", 1.6e6),
                ("colour/id", 1.0),
            ]
        );
        assert!((results[0].low_ns - 45.123).abs() < 1e-9);
        assert!((results[3].low_ns - 0.9).abs() < 1e-9);
        let lines = criterion_lines(&results, "host_switch");
        assert_eq!(
            lines[1].cells[0],
            ("low_ns".to_string(), Value::Int("4100".to_string()))
        );
        assert_eq!(lines[0].cells[1].1, Value::Decimal("45.456".to_string()));
    }

    #[test]
    fn host_runs_are_logged_and_time_limited() {
        let dir = std::env::temp_dir().join(format!("xtask-bench-test-{}", std::process::id()));
        let log = dir.join("logs").join("host-host.log");
        let cmd = Cmd::new("sh").args(["-c", "echo 'a/b  time:   [1 ns 2 ns 3 ns]'; echo err >&2"]);
        let (output, status) = stream_to_log(&cmd, &log, Duration::from_secs(30)).unwrap();
        assert!(status.is_some_and(|s| s.success()));
        assert_eq!(parse_criterion(&output)[0].mid_ns, 2.0);
        assert_eq!(std::fs::read_to_string(&log).unwrap(), output);
        // The limit ends the whole group: the backgrounded sleep holds stdout open otherwise.
        let cmd = Cmd::new("sh").args(["-c", "echo started; sleep 30 & wait"]);
        let started = std::time::Instant::now();
        let (output, status) = stream_to_log(&cmd, &log, Duration::from_millis(300)).unwrap();
        assert!(status.is_none());
        assert_eq!(output, "started\n");
        assert!(started.elapsed() < Duration::from_secs(10));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn finds_bench_targets_in_metadata() {
        let json = r#"{"packages":[{"name":"libuthread","targets":[
            {"name":"libuthread","kind":["lib"]},
            {"name":"switch","kind":["bench"]}]}]}"#;
        assert!(has_target(json, "libuthread", "bench", "switch").unwrap());
        assert!(!has_target(json, "libuthread", "bench", "spawn").unwrap());
        assert!(!has_target(json, "other", "bench", "switch").unwrap());
        assert!(has_target("nope", "libuthread", "bench", "switch").is_err());
    }

    #[test]
    fn finds_programs_and_missing_ones() {
        assert_eq!(programs_of("quiet cpus=1 run=tlbbench"), ["tlbbench"]);
        assert_eq!(programs_of("run=a+b,c"), ["a", "b", "c"]);
        assert_eq!(programs_of("quiet"), ["init"]);
        let log = "Tsumugi booting\ncannot run fpbench: not in the boot archive\r\n";
        assert_eq!(missing_program(log, &["fpbench"]), Some("fpbench"));
        assert_eq!(missing_program(log, &["tlbbench"]), None);
    }

    #[test]
    fn judges_boots() {
        let bench = &BENCHES[2];
        assert_eq!(bench.suffix, "_tagoff");
        let mut tables = Tables::default();
        let ok = "BENCH table=cubix row=2nd dtlb=0\ndomain 1 tlbbench: exited with status 0\n";
        let judge = |outcome: Outcome, log: &str, tables: &mut Tables| {
            judge_boot(Arch::X86_64, bench, &["tlbbench"], &outcome, log, tables)
        };
        assert_eq!(judge(Outcome::Guest(0), ok, &mut tables), Verdict::Ok(1));
        assert_eq!(tables.tables[0].columns, ["dtlb_tagoff"]);
        let missing = "cannot run tlbbench: not in the boot archive\n";
        assert!(matches!(
            judge(Outcome::Guest(3), missing, &mut tables),
            Verdict::Skipped(_)
        ));
        assert!(
            matches!(judge(Outcome::Guest(0), "hello\n", &mut tables), Verdict::Failed(w) if w.contains("no BENCH"))
        );
        assert!(matches!(
            judge(Outcome::Guest(1), ok, &mut tables),
            Verdict::Failed(_)
        ));
        assert!(matches!(
            judge(Outcome::TimedOut(Duration::from_secs(3)), ok, &mut tables),
            Verdict::Failed(w) if w.contains("timed out")
        ));
        let bad = "BENCH table=cubix row=2nd dtlb=0\nBENCH table=cubix row=2nd cycles=12ns\n";
        assert!(
            matches!(judge(Outcome::Guest(0), bad, &mut tables), Verdict::Failed(w) if w.contains("malformed"))
        );
    }

    #[test]
    fn plans_by_filter_and_arch() {
        let labels = |p: Vec<Planned>| p.into_iter().map(Planned::label).collect::<Vec<_>>();
        assert_eq!(
            labels(plan(&[Arch::X86_64], false, Some("switch"))),
            ["x86_64/switch"]
        );
        assert_eq!(
            labels(plan(&[Arch::X86_64, Arch::Riscv64], false, Some("tlb"))),
            [
                "x86_64/tlb",
                "x86_64/tlb-tagoff",
                "riscv64/tlb",
                "riscv64/tlb-tagoff"
            ]
        );
        assert_eq!(
            labels(plan(&[Arch::X86_64], false, Some("host"))),
            ["host/host"]
        );
        let all = labels(plan(&[Arch::X86_64], true, None));
        assert_eq!(all.len(), BENCHES.len());
        assert_eq!(all.last().map(String::as_str), Some("host/host"));
        assert!(!labels(plan(&[Arch::X86_64], false, None)).contains(&"host/host".to_string()));
        assert!(plan(&[Arch::X86_64], true, Some("nothing")).is_empty());
    }

    #[test]
    fn benchmark_list_is_well_formed() {
        let mut names = Vec::new();
        for bench in BENCHES {
            assert!(is_name(bench.name), "{}", bench.name);
            assert!(!names.contains(&bench.name), "duplicate {}", bench.name);
            names.push(bench.name);
            assert!(bench.suffix.is_empty() || is_name(bench.suffix));
            assert!(!bench.tables.is_empty());
            if let Runner::Qemu { smp, boot_words } = bench.runner {
                assert!((1..=crate::run::MAX_CPUS).contains(&smp));
                assert!(!programs_of(boot_words).is_empty());
            }
        }
        assert!(log_path(Path::new("target/bench"), "x86_64", "switch")
            .ends_with("target/bench/logs/x86_64-switch.log"));
    }
}
