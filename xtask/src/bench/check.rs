//! `--check` and `--bless`: the deterministic figures of a run against the committed ones in
//! `bench/expected-<arch>.csv`, so that an instruction-count regression fails like a test.
//!
//! The expected file has one line per figure, `table,row,column,value`, under that header. Only
//! numbers measured under `-icount shift=0` go there (never host timings, never words such as
//! `unsupported`), and only those that repeat on any host: rows whose figures follow the order
//! QEMU interleaves several CPUs in are left out ([`super::catalog::TableInfo::varies`]). A figure is a cost (instructions, misses, bytes, an overhead), so a rise
//! beyond [`TOLERANCE`] is a regression — except a comparison of a baseline with our mechanism
//! (`ratio*`, `*_over_*`, `*speedup*` columns: how many times ours is faster), where a fall is
//! ([`higher_is_better`]). The other way is an improvement to record with `--bless`, which
//! rewrites the file from the run (keeping the tables the run did not measure).

use std::fmt::Write as _;

use super::catalog::row_varies;
use super::line::{is_name, Value};
use super::table::Tables;

/// Largest rise over the expected figure that still passes, as a share (3 %).
pub const TOLERANCE: f64 = 0.03;
/// Header line of an expected file.
pub const HEADER: &str = "table,row,column,value";
/// Folder of the expected files, from the workspace root.
pub const EXPECTED_DIR: &str = "bench";

/// The expected file of `arch`, from the workspace root.
pub fn expected_file(arch: &str) -> String {
    format!("{EXPECTED_DIR}/expected-{arch}.csv")
}

/// One deterministic figure: a numeric cell of a table.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    /// Table name.
    pub table: String,
    /// Row name.
    pub row: String,
    /// Column name.
    pub column: String,
    /// The value as printed (kept verbatim when blessed).
    pub text: String,
    /// The value.
    pub value: f64,
}

impl Figure {
    /// `table/row/column`, to match figures of two runs.
    fn key(&self) -> (&str, &str, &str) {
        (&self.table, &self.row, &self.column)
    }
}

/// The figures of `arch` in `tables`: every cell holding a number, in table, row, column order,
/// less the rows that vary from host to host ([`super::catalog::TableInfo::varies`]).
pub fn figures(tables: &Tables, arch: &str) -> Vec<Figure> {
    let mut out = Vec::new();
    for table in tables.tables.iter().filter(|t| t.arch == arch) {
        for row in table.rows.iter().filter(|r| !row_varies(&table.name, &r.name)) {
            for column in &table.columns {
                if let Some(value) = row.cells.get(column) {
                    if let Some(number) = value.number() {
                        out.push(Figure {
                            table: table.name.clone(),
                            row: row.name.clone(),
                            column: column.clone(),
                            text: value.text().to_string(),
                            value: number,
                        });
                    }
                }
            }
        }
    }
    out
}

/// Parses an expected file.
pub fn parse_expected(text: &str) -> Result<Vec<Figure>, String> {
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, header)) if header.trim_end() == HEADER => {}
        _ => return Err(format!("the first line must be `{HEADER}`")),
    }
    let mut out: Vec<Figure> = Vec::new();
    for (index, line) in lines {
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        let at = |why: String| format!("line {}: {why}", index + 1);
        let fields: Vec<&str> = line.split(',').collect();
        let [table, row, column, text] = fields[..] else {
            return Err(at(format!("expected 4 fields, found {}", fields.len())));
        };
        if let Some(bad) = [table, row, column].into_iter().find(|n| !is_name(n)) {
            return Err(at(format!("bad name `{bad}`")));
        }
        let value = Value::parse(text)
            .ok()
            .and_then(|v| v.number())
            .ok_or_else(|| at(format!("`{text}` is not a number")))?;
        let figure = Figure {
            table: table.to_string(),
            row: row.to_string(),
            column: column.to_string(),
            text: text.to_string(),
            value,
        };
        if out.iter().any(|f| f.key() == figure.key()) {
            return Err(at(format!("{table}/{row}/{column} given twice")));
        }
        out.push(figure);
    }
    Ok(out)
}

/// An expected file holding `figures`.
pub fn render_expected(figures: &[Figure]) -> String {
    let mut out = format!("{HEADER}\n");
    for f in figures {
        let _ = writeln!(out, "{},{},{},{}", f.table, f.row, f.column, f.text);
    }
    out
}

/// The expected figures after blessing a run: the run's figures replace those of every table
/// the run measured; the other tables' figures stay. Tables keep their place in the file, new
/// ones follow.
pub fn bless(expected: &[Figure], run: &[Figure]) -> Vec<Figure> {
    let mut tables: Vec<&str> = Vec::new();
    for f in expected.iter().chain(run) {
        if !tables.contains(&f.table.as_str()) {
            tables.push(&f.table);
        }
    }
    let measured = |table: &str| run.iter().any(|f| f.table == table);
    let mut out = Vec::new();
    for table in tables {
        let source = if measured(table) { run } else { expected };
        out.extend(source.iter().filter(|f| f.table == table).cloned());
    }
    out
}

/// A figure of the run beside its expected value.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// The run's figure.
    pub figure: Figure,
    /// The expected value as committed.
    pub expected_text: String,
    /// The expected value.
    pub expected: f64,
}

impl Change {
    /// The change in percent of the expected value; infinite for a rise from 0.
    pub fn percent(&self) -> f64 {
        let delta = self.figure.value - self.expected;
        if self.expected == 0.0 {
            if delta == 0.0 {
                0.0
            } else {
                f64::INFINITY.copysign(delta)
            }
        } else {
            delta / self.expected.abs() * 100.0
        }
    }

    /// One report line: `<arch> <table> row <row> column <column>: expected <e>, got <g> (+x %)`.
    pub fn describe(&self, arch: &str) -> String {
        let percent = self.percent();
        let percent = if percent.is_infinite() {
            format!("{}inf %", if percent > 0.0 { "+" } else { "-" })
        } else {
            format!("{percent:+.1} %")
        };
        format!(
            "{arch} {} row {} column {}: expected {}, got {} ({percent})",
            self.figure.table,
            self.figure.row,
            self.figure.column,
            self.expected_text,
            self.figure.text
        )
    }
}

/// The outcome of comparing a run's figures with the expected ones.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Comparison {
    /// Rose more than the tolerance: the check fails.
    pub regressions: Vec<Change>,
    /// Fell: worth recording with `--bless`.
    pub improvements: Vec<Change>,
    /// Rose, but within the tolerance.
    pub within: Vec<Change>,
    /// Figures equal to the expected ones.
    pub unchanged: usize,
    /// Expected figures of a table the run measured that the run did not print.
    pub missing: Vec<Figure>,
    /// Figures of the run that the expected file does not have.
    pub new: Vec<Figure>,
    /// Tables in the expected file the run did not measure (skipped or filtered out).
    pub unmeasured_tables: Vec<String>,
}

impl Comparison {
    /// Whether the check passes: no figure rose beyond the tolerance.
    pub fn passed(&self) -> bool {
        self.regressions.is_empty()
    }
}

/// Whether a column is a comparison in our favour (a baseline's cost over ours), so that a fall
/// is the regression: `ratio_to_window`, `baseline_over_kn`, speed-ups.
pub fn higher_is_better(column: &str) -> bool {
    column.starts_with("ratio") || column.contains("_over_") || column.contains("speedup")
}

/// Compares the run's figures with the expected ones; a change for the worse of more than
/// `tolerance` (a share of the expected value, or any rise of a cost from 0) is a regression —
/// a rise of a cost, a fall of a [`higher_is_better`] comparison.
pub fn compare(expected: &[Figure], run: &[Figure], tolerance: f64) -> Comparison {
    let mut out = Comparison::default();
    for figure in run {
        let Some(old) = expected.iter().find(|e| e.key() == figure.key()) else {
            out.new.push(figure.clone());
            continue;
        };
        let change = Change {
            figure: figure.clone(),
            expected_text: old.text.clone(),
            expected: old.value,
        };
        // `delta` > 0: worse.
        let delta = if higher_is_better(&figure.column) { old.value - figure.value } else { figure.value - old.value };
        if delta > tolerance * old.value.abs() {
            out.regressions.push(change);
        } else if delta > 0.0 {
            out.within.push(change);
        } else if delta < 0.0 {
            out.improvements.push(change);
        } else {
            out.unchanged += 1;
        }
    }
    for old in expected {
        if run.iter().any(|f| f.key() == old.key()) {
            continue;
        }
        if run.iter().any(|f| f.table == old.table) {
            out.missing.push(old.clone());
        } else if !out.unmeasured_tables.contains(&old.table) {
            out.unmeasured_tables.push(old.table.clone());
        }
    }
    out
}

/// The report of a comparison, a line each; `bless_command` is what to run to record the run
/// (empty: no such advice, as when blessing).
pub fn render_comparison(
    arch: &str,
    file: &str,
    comparison: &Comparison,
    bless_command: &str,
) -> String {
    let mut out = String::new();
    let c = comparison;
    let _ = writeln!(
        out,
        "check {arch} against {file}: {} regression(s) over {:.0} %, {} improvement(s), {} \
         rise(s) within {:.0} %, {} unchanged, {} new, {} missing",
        c.regressions.len(),
        TOLERANCE * 100.0,
        c.improvements.len(),
        c.within.len(),
        TOLERANCE * 100.0,
        c.unchanged,
        c.new.len(),
        c.missing.len()
    );
    for change in &c.regressions {
        let _ = writeln!(out, "REGRESSION {}", change.describe(arch));
    }
    for change in &c.improvements {
        let _ = writeln!(out, "improved   {}", change.describe(arch));
    }
    for change in &c.within {
        let _ = writeln!(out, "within     {}", change.describe(arch));
    }
    for f in &c.new {
        let _ = writeln!(
            out,
            "new        {arch} {} row {} column {}: {} (not in {file})",
            f.table, f.row, f.column, f.text
        );
    }
    for f in &c.missing {
        let _ = writeln!(
            out,
            "missing    {arch} {} row {} column {}: expected {}, not printed by this run",
            f.table, f.row, f.column, f.text
        );
    }
    if !c.unmeasured_tables.is_empty() {
        let _ = writeln!(
            out,
            "note: not measured in this run, not checked: {}",
            c.unmeasured_tables.join(", ")
        );
    }
    let stale = !c.improvements.is_empty() || !c.new.is_empty() || !c.missing.is_empty();
    if stale && !bless_command.is_empty() {
        let _ = writeln!(
            out,
            "note: to record this run's figures as the expected ones: {bless_command}"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::test_support::line;

    fn figure(table: &str, row: &str, column: &str, text: &str) -> Figure {
        Figure {
            table: table.to_string(),
            row: row.to_string(),
            column: column.to_string(),
            text: text.to_string(),
            value: text.parse().unwrap(),
        }
    }

    #[test]
    fn takes_the_numbers_of_one_arch() {
        let mut tables = Tables::default();
        for text in [
            "BENCH table=cubix row=on t1_cycles=1023 t1_dtlb=unsupported",
            "BENCH table=lazy_save row=window ratio=1.00 n=214",
        ] {
            tables.add("x86_64", &line(text), "");
        }
        tables.add(
            "x86_64",
            &line("BENCH table=cubix row=on t1_cycles=9"),
            "_tagoff",
        );
        tables.add("riscv64", &line("BENCH table=cubix row=on t1_cycles=5"), "");
        tables.add("host", &line("BENCH table=host_switch row=a mid_ns=5"), "");
        assert_eq!(
            figures(&tables, "x86_64"),
            [
                figure("cubix", "on", "t1_cycles", "1023"),
                figure("cubix", "on", "t1_cycles_tagoff", "9"),
                figure("lazy_save", "window", "ratio", "1.00"),
                figure("lazy_save", "window", "n", "214"),
            ]
        );
    }

    #[test]
    fn leaves_out_rows_that_follow_cpu_interleaving() {
        let mut tables = Tables::default();
        for text in [
            "BENCH table=s3 row=phase_v1_g4 s3=10",
            "BENCH table=s3 row=phase_v4_g4 s3=20",
            "BENCH table=s3 row=phase_v8_g1 s3=30",
        ] {
            tables.add("x86_64", &line(text), "");
        }
        assert_eq!(figures(&tables, "x86_64"), [figure("s3", "phase_v1_g4", "s3", "10")]);
    }

    #[test]
    fn expected_files_round_trip() {
        let figures = vec![
            figure("multith", "create_exit", "instructions", "1221"),
            figure("lazy_save", "full_save", "ratio_to_window", "1.21"),
            figure("kn_cost", "x", "delta", "-3"),
        ];
        let text = render_expected(&figures);
        assert_eq!(
            text,
            "table,row,column,value\nmultith,create_exit,instructions,1221\n\
             lazy_save,full_save,ratio_to_window,1.21\nkn_cost,x,delta,-3\n"
        );
        assert_eq!(parse_expected(&text).unwrap(), figures);
        assert_eq!(parse_expected("table,row,column,value\n\n").unwrap(), []);
    }

    #[test]
    fn rejects_bad_expected_files() {
        for (text, why) in [
            ("", "first line"),
            ("row,value\n", "first line"),
            (
                "table,row,column,value\na,b,c\n",
                "line 2: expected 4 fields",
            ),
            (
                "table,row,column,value\na,b,c,unsupported\n",
                "not a number",
            ),
            ("table,row,column,value\na,b,c,12ns\n", "not a number"),
            ("table,row,column,value\na,b/x,c,1\n", "bad name"),
            (
                "table,row,column,value\na,b,c,1\na,b,c,2\n",
                "line 3: a/b/c given twice",
            ),
        ] {
            match parse_expected(text) {
                Err(error) => assert!(error.contains(why), "{text:?}: {error}"),
                Ok(f) => panic!("{text:?}: {f:?}"),
            }
        }
    }

    #[test]
    fn sorts_changes_by_the_tolerance() {
        let expected = [
            figure("t", "same", "n", "100"),
            figure("t", "up_3pct", "n", "100"),
            figure("t", "up_3.1pct", "n", "1000"),
            figure("t", "down", "n", "100"),
            figure("t", "from_zero", "n", "0"),
            figure("t", "negative", "n", "-100"),
            figure("t", "gone", "n", "7"),
            figure("u", "other_table", "n", "1"),
        ];
        let run = [
            figure("t", "same", "n", "100"),
            figure("t", "up_3pct", "n", "103"),
            figure("t", "up_3.1pct", "n", "1031"),
            figure("t", "down", "n", "60"),
            figure("t", "from_zero", "n", "1"),
            figure("t", "negative", "n", "-90"),
            figure("t", "fresh", "n", "5"),
        ];
        let c = compare(&expected, &run, TOLERANCE);
        let rows = |changes: &[Change]| -> Vec<String> {
            changes.iter().map(|c| c.figure.row.clone()).collect()
        };
        assert_eq!(rows(&c.regressions), ["up_3.1pct", "from_zero", "negative"]);
        assert_eq!(rows(&c.within), ["up_3pct"]);
        assert_eq!(rows(&c.improvements), ["down"]);
        assert_eq!(c.unchanged, 1);
        assert_eq!(c.new, [figure("t", "fresh", "n", "5")]);
        assert_eq!(c.missing, [figure("t", "gone", "n", "7")]);
        assert_eq!(c.unmeasured_tables, ["u"]);
        assert!(!c.passed());
        assert!(compare(&expected[..1], &run[..1], TOLERANCE).passed());
    }

    #[test]
    fn a_comparison_in_our_favour_regresses_when_it_falls() {
        assert!(higher_is_better("baseline_over_kn") && higher_is_better("ratio_to_window") && higher_is_better("speedup_v8"));
        assert!(!higher_is_better("instructions") && !higher_is_better("fk_overhead_pct"));
        let expected = [figure("k", "sa", "baseline_over_kn", "2.00"), figure("k", "sig", "baseline_over_kn", "2.00")];
        let run = [figure("k", "sa", "baseline_over_kn", "1.90"), figure("k", "sig", "baseline_over_kn", "2.50")];
        let c = compare(&expected, &run, TOLERANCE);
        assert_eq!(c.regressions.len(), 1);
        assert_eq!(c.regressions[0].figure.row, "sa");
        assert_eq!(c.improvements.len(), 1);
        assert_eq!(c.improvements[0].figure.row, "sig");
    }

    #[test]
    fn reports_each_regression_on_a_line() {
        let c = compare(
            &[
                figure("multith", "create_exit", "instructions", "1000"),
                figure("t", "z", "n", "0"),
            ],
            &[
                figure("multith", "create_exit", "instructions", "1065"),
                figure("t", "z", "n", "2"),
            ],
            TOLERANCE,
        );
        let text = render_comparison(
            "x86_64",
            "bench/expected-x86_64.csv",
            &c,
            "cargo xtask bench --arch x86_64 --bless",
        );
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("check x86_64 against bench/expected-x86_64.csv: 2 regression(s)"),
            "{}",
            lines[0]
        );
        assert_eq!(
            lines[1],
            "REGRESSION x86_64 multith row create_exit column instructions: expected 1000, got 1065 (+6.5 %)"
        );
        assert_eq!(
            lines[2],
            "REGRESSION x86_64 t row z column n: expected 0, got 2 (+inf %)"
        );
        assert_eq!(lines.len(), 3);

        let c = compare(
            &[figure("multith", "yield", "instructions", "428")],
            &[figure("multith", "yield", "instructions", "214")],
            TOLERANCE,
        );
        assert!(c.passed());
        let text = render_comparison("x86_64", "f.csv", &c, "cargo xtask bench --bless");
        assert!(text.contains("improved   x86_64 multith row yield column instructions: expected 428, got 214 (-50.0 %)"), "{text}");
        assert!(text.contains(
            "note: to record this run's figures as the expected ones: cargo xtask bench --bless"
        ));
    }

    #[test]
    fn blessing_replaces_the_measured_tables_only() {
        let expected = [
            figure("a", "r", "n", "1"),
            figure("b", "r", "n", "2"),
            figure("b", "old_row", "n", "3"),
            figure("c", "r", "n", "4"),
        ];
        let run = [figure("d", "r", "n", "9"), figure("b", "r", "n", "5")];
        assert_eq!(
            bless(&expected, &run),
            [
                figure("a", "r", "n", "1"),
                figure("b", "r", "n", "5"),
                figure("c", "r", "n", "4"),
                figure("d", "r", "n", "9"),
            ]
        );
        assert_eq!(bless(&[], &run), run);
        assert_eq!(expected_file("riscv64"), "bench/expected-riscv64.csv");
    }
}
