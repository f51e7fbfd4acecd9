//! Reading criterion's output on the host into table rows.

use anyhow::{Context, Result};

use super::chart::axis_number;
use super::line::{BenchLine, Value};

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
pub fn ns_value(ns: f64) -> Value {
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn finds_bench_targets_in_metadata() {
        let json = r#"{"packages":[{"name":"libuthread","targets":[
            {"name":"libuthread","kind":["lib"]},
            {"name":"switch","kind":["bench"]}]}]}"#;
        assert!(has_target(json, "libuthread", "bench", "switch").unwrap());
        assert!(!has_target(json, "libuthread", "bench", "spawn").unwrap());
        assert!(!has_target(json, "other", "bench", "switch").unwrap());
        assert!(has_target("nope", "libuthread", "bench", "switch").is_err());
    }
}
