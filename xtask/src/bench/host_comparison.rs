//! The host comparison with peers (issue 14): Go's goroutines (`bench/go`, `go test -bench`
//! with `GOMAXPROCS=1`) beside libuthread, corosensei and OS threads from the criterion bench,
//! in one table (`host-comparison.csv`) with the ratios the goals are stated in.

use std::time::Duration;

use super::catalog::{Arches, Bench, Runner, TableInfo, HOST};
use super::criterion::CriterionResult;
use super::line::Value;
use super::table::{Row, Table, Tables};

/// Table of Go's raw results (rows: Go benchmark names; columns `low_ns`, `mid_ns`, `high_ns`:
/// the least, median and greatest ns/op over the repetitions).
pub const GO_TABLE: &str = "host_go";
/// Table of the comparison, derived from the criterion and Go tables.
pub const COMPARISON_TABLE: &str = "comparison";
/// Folder of the Go benchmark, from the workspace root.
pub const GO_DIR: &str = "bench/go";
/// Repetitions of each Go benchmark (`-count`).
pub const GO_COUNT: usize = 5;
/// Time per Go repetition (`-benchtime`).
pub const GO_BENCHTIME: &str = "500ms";
/// Message when `go` is not on PATH.
pub const NO_GO: &str = "go is not on PATH: Go is left out of the host comparison";

/// Go's raw results.
pub const HOST_GO: TableInfo = TableInfo {
    table: GO_TABLE,
    note:
        "go test -bench with GOMAXPROCS=1: ns per op, least / median / greatest of the repetitions",
    x_label: "benchmark",
    y_label: "ns per op",
    chart: &["mid_ns"],
    varies: &[],
};

/// The comparison table.
pub const COMPARISON: TableInfo = TableInfo {
    table: COMPARISON_TABLE,
    note: "ns per operation (criterion's and Go's point estimates), one vCPU / GOMAXPROCS=1; \
           goals: go_over_libuthread >= 5 on every row (libuthread 5x faster than Go), \
           libuthread_over_corosensei <= 4 on the yield round trip",
    x_label: "operation",
    y_label: "ns per operation",
    chart: &["libuthread_ns", "go_ns", "corosensei_ns", "os_thread_ns"],
    varies: &[],
};

/// Go's side of the host comparison.
pub const GO: Bench = Bench {
    name: "golang",
    about: "host: Go goroutines (bench/go, GOMAXPROCS=1) beside libuthread; skipped without go",
    arches: Arches::All,
    runner: Runner::HostGo {
        dir: GO_DIR,
        table: GO_TABLE,
    },
    suffix: "",
    timeout: Duration::from_secs(600),
    boots: 1,
    tables: &[HOST_GO, COMPARISON],
};

/// One row of the comparison: the operation and the benchmark measuring it for each peer.
struct Operation {
    row: &'static str,
    libuthread: &'static str,
    go: &'static str,
    corosensei: Option<&'static str>,
    os_thread: &'static str,
}

/// The operations compared (criterion ids in group `switch`, Go benchmark names).
const OPERATIONS: [Operation; 3] = [
    Operation {
        row: "yield_round_trip",
        libuthread: "switch/libuthread_yield_round_trip",
        go: "GoschedRoundTrip",
        corosensei: Some("switch/corosensei_resume_yield"),
        os_thread: "switch/os_thread_condvar_ping_pong",
    },
    Operation {
        row: "channel_round_trip",
        libuthread: "switch/libuthread_channel_round_trip",
        go: "ChannelRoundTrip",
        corosensei: None,
        os_thread: "switch/os_thread_channel_round_trip",
    },
    Operation {
        row: "spawn_join",
        libuthread: "switch/libuthread_spawn_join",
        go: "SpawnWait",
        corosensei: Some("switch/corosensei_create_run"),
        os_thread: "switch/os_thread_spawn_join",
    },
];

/// The results of `go test -bench` output: `BenchmarkName[-P]  <n>  <x> ns/op` lines, the
/// repetitions of one name folded into least / median / greatest.
pub fn parse_go_bench(output: &str) -> Vec<CriterionResult> {
    let mut samples: Vec<(String, Vec<f64>)> = Vec::new();
    for line in output.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let [name, _iterations, ns, "ns/op", ..] = words[..] else {
            continue;
        };
        let Some(name) = name.strip_prefix("Benchmark") else {
            continue;
        };
        // `-P` is GOMAXPROCS, printed when it is not 1.
        let name = match name.rsplit_once('-') {
            Some((base, procs)) if procs.bytes().all(|b| b.is_ascii_digit()) => base,
            _ => name,
        };
        let Ok(ns) = ns.parse::<f64>() else { continue };
        match samples.iter_mut().find(|(n, _)| n == name) {
            Some((_, list)) => list.push(ns),
            None => samples.push((name.to_string(), vec![ns])),
        }
    }
    samples
        .into_iter()
        .map(|(id, mut list)| {
            list.sort_by(f64::total_cmp);
            CriterionResult {
                id,
                low_ns: list[0],
                mid_ns: list[list.len() / 2],
                high_ns: list[list.len() - 1],
            }
        })
        .collect()
}

/// A ratio as a cell: two decimals, or three significant digits below 0.1 (libuthread's
/// spawn + join against corosensei's create + run is about 0.001, which two decimals showed
/// as a bare 0.00).
fn ratio(x: f64) -> Value {
    if x == 0.0 || x.abs() >= 0.1 {
        return Value::Decimal(format!("{x:.2}"));
    }
    let decimals = (2.0 - x.abs().log10().floor()) as usize;
    Value::Decimal(format!("{x:.decimals$}"))
}

/// Builds the comparison table from the host tables `tables` holds (criterion's `host_switch`
/// and Go's [`GO_TABLE`]); `None` when neither has a figure of it. A peer that did not run
/// leaves its cells empty.
pub fn derive(tables: &Tables, criterion_table: &str) -> Option<Table> {
    let find = |name: &str| {
        tables
            .tables
            .iter()
            .find(|t| t.arch == HOST && t.name == name)
    };
    let (criterion, go) = (find(criterion_table), find(GO_TABLE));
    let mid = |table: Option<&Table>, row: &str| -> Option<f64> {
        table?
            .rows
            .iter()
            .find(|r| r.name == row)
            .and_then(|r| r.number("mid_ns"))
    };
    let columns = [
        "libuthread_ns",
        "go_ns",
        "corosensei_ns",
        "os_thread_ns",
        "go_over_libuthread",
        "libuthread_over_corosensei",
    ];
    let mut table = Table {
        arch: HOST.to_string(),
        name: COMPARISON_TABLE.to_string(),
        columns: columns.iter().map(|c| (*c).to_string()).collect(),
        ..Table::default()
    };
    for op in &OPERATIONS {
        let libuthread = mid(criterion, op.libuthread);
        let go = mid(go, op.go);
        let corosensei = op.corosensei.and_then(|id| mid(criterion, id));
        let os_thread = mid(criterion, op.os_thread);
        let mut row = Row {
            name: op.row.to_string(),
            ..Row::default()
        };
        let mut put = |column: &str, value: Option<Value>| {
            if let Some(value) = value {
                row.cells.insert(column.to_string(), value);
            }
        };
        let ns = |x: Option<f64>| x.map(super::criterion::ns_value);
        put("libuthread_ns", ns(libuthread));
        put("go_ns", ns(go));
        put("corosensei_ns", ns(corosensei));
        put("os_thread_ns", ns(os_thread));
        put(
            "go_over_libuthread",
            libuthread.zip(go).map(|(l, g)| ratio(g / l)),
        );
        put(
            "libuthread_over_corosensei",
            libuthread.zip(corosensei).map(|(l, c)| ratio(l / c)),
        );
        table.rows.push(row);
    }
    table
        .rows
        .iter()
        .any(|r| !r.cells.is_empty())
        .then_some(table)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::criterion::criterion_lines;

    const GO_OUTPUT: &str = "\
goos: linux
goarch: amd64
pkg: tsumugi.invalid/bench/go
BenchmarkGoschedRoundTrip 	  495614	      1063 ns/op
BenchmarkGoschedRoundTrip 	  736330	       956.7 ns/op
BenchmarkGoschedRoundTrip 	  736330	       990 ns/op
BenchmarkChannelRoundTrip-4 	  134313	      2083 ns/op	       0 B/op
BenchmarkSpawnWait        	  100984	      3078 ns/op
PASS
ok  	tsumugi.invalid/bench/go	2.432s
";

    #[test]
    fn small_ratios_keep_three_significant_digits() {
        let text = |x: f64| match ratio(x) {
            Value::Decimal(s) => s,
            _ => unreachable!(),
        };
        assert_eq!(text(22.004), "22.00");
        assert_eq!(text(0.5), "0.50");
        assert_eq!(text(0.0013099), "0.00131");
        assert_eq!(text(0.04567), "0.0457");
        assert_eq!(text(0.0), "0.00");
    }

    #[test]
    fn parses_go_bench_output() {
        let results = parse_go_bench(GO_OUTPUT);
        let summary: Vec<(&str, f64, f64, f64)> = results
            .iter()
            .map(|r| (r.id.as_str(), r.low_ns, r.mid_ns, r.high_ns))
            .collect();
        assert_eq!(
            summary,
            [
                ("GoschedRoundTrip", 956.7, 990.0, 1063.0),
                ("ChannelRoundTrip", 2083.0, 2083.0, 2083.0),
                ("SpawnWait", 3078.0, 3078.0, 3078.0),
            ]
        );
    }

    #[test]
    fn derives_the_comparison_with_ratios() {
        let mut tables = Tables::default();
        for line in criterion_lines(&parse_go_bench(GO_OUTPUT), GO_TABLE) {
            tables.add(HOST, &line, "");
        }
        let criterion = [
            ("switch/libuthread_yield_round_trip", 99.0),
            ("switch/corosensei_resume_yield", 20.0),
            ("switch/os_thread_condvar_ping_pong", 5000.0),
            ("switch/libuthread_spawn_join", 600.0),
        ];
        let results: Vec<CriterionResult> = criterion
            .iter()
            .map(|&(id, ns)| CriterionResult {
                id: id.to_string(),
                low_ns: ns,
                mid_ns: ns,
                high_ns: ns,
            })
            .collect();
        for line in criterion_lines(&results, "host_switch") {
            tables.add(HOST, &line, "");
        }
        let table = derive(&tables, "host_switch").unwrap();
        assert_eq!(table.arch, "host");
        assert_eq!(table.name, "comparison");
        let cell = |row: usize, column: &str| {
            table.rows[row]
                .cells
                .get(column)
                .map(|v| v.text().to_string())
        };
        assert_eq!(table.rows[0].name, "yield_round_trip");
        assert_eq!(cell(0, "libuthread_ns").as_deref(), Some("99"));
        assert_eq!(cell(0, "go_ns").as_deref(), Some("990"));
        assert_eq!(cell(0, "go_over_libuthread").as_deref(), Some("10.00"));
        assert_eq!(
            cell(0, "libuthread_over_corosensei").as_deref(),
            Some("4.95")
        );
        // No libuthread channel figure: Go's alone, no ratio.
        assert_eq!(cell(1, "go_ns").as_deref(), Some("2083"));
        assert_eq!(cell(1, "go_over_libuthread"), None);
        assert_eq!(cell(2, "go_over_libuthread").as_deref(), Some("5.13"));
        assert!(derive(&Tables::default(), "host_switch").is_none());
    }
}
