//! Tables gathered from `BENCH` lines: merging rows, and writing them as aligned text and CSV.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::catalog::TableInfo;
use super::line::{BenchLine, Value, ROW_KEY};

/// Widest text table printed as is; a wider one with more columns than rows is transposed.
pub const MAX_TEXT_WIDTH: usize = 160;
/// Header of the first column of a transposed text table.
const COLUMN_HEADER: &str = "column";

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

    /// Merges several boots of one benchmark (each gathered into its own [`Tables`]) into
    /// `self`, one cell at a time: the median of the boots' numbers (for an even count the
    /// lower middle, so the figure is always one a boot printed), or the first boot's value
    /// where a cell is a word or some boot lacks it. Returns, per numeric cell that differed,
    /// `table row column: low..high` for the report, and the warnings of [`Tables::add`].
    pub fn add_median(&mut self, boots: &[Tables]) -> (Vec<String>, Vec<String>) {
        let (mut spreads, mut warnings) = (Vec::new(), Vec::new());
        let Some(first) = boots.first() else {
            return (spreads, warnings);
        };
        for table in &first.tables {
            for row in &table.rows {
                let mut cells = Vec::new();
                for column in &table.columns {
                    let Some(value) = row.cells.get(column) else {
                        continue;
                    };
                    let numbers: Option<Vec<(f64, &Value)>> = boots
                        .iter()
                        .map(|boot| {
                            let value = boot
                                .tables
                                .iter()
                                .find(|t| t.arch == table.arch && t.name == table.name)?
                                .rows
                                .iter()
                                .find(|r| r.name == row.name)?
                                .cells
                                .get(column)?;
                            Some((value.number()?, value))
                        })
                        .collect();
                    let chosen = match numbers {
                        Some(mut numbers) => {
                            numbers.sort_by(|a, b| a.0.total_cmp(&b.0));
                            let (low, high) = (numbers[0].0, numbers[numbers.len() - 1].0);
                            if low != high {
                                spreads.push(format!(
                                    "{} row {} {column}: {low}..{high}",
                                    table.name, row.name
                                ));
                            }
                            numbers[(numbers.len() - 1) / 2].1.clone()
                        }
                        None => value.clone(),
                    };
                    cells.push((column.clone(), chosen));
                }
                let line = BenchLine {
                    table: table.name.clone(),
                    row: row.name.clone(),
                    cells,
                };
                warnings.extend(self.add(&table.arch, &line, ""));
            }
        }
        (spreads, warnings)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::catalog::{TableInfo, HOST};
    use crate::bench::cubix::CUBIX;
    use crate::bench::kernel_switch::KERNEL_SWITCH;
    use crate::bench::line::{parse_bench_line, BenchLine};
    use crate::bench::test_support::{cubix_tables, int, line};

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
    fn merges_boots_by_median() {
        let boot = |elapsed: &str, word: &str| {
            let mut tables = Tables::default();
            let line = parse_bench_line(&format!(
                "BENCH table=share row=program_a elapsed_us={elapsed} mode={word}"
            ))
            .unwrap()
            .unwrap();
            assert!(tables.add("x86_64", &line, "_time").is_empty());
            tables
        };
        let boots = [
            boot("82", "b"),
            boot("36", "a"),
            boot("50.5", "c"),
            boot("40", "d"),
        ];
        let mut tables = Tables::default();
        let (spreads, warnings) = tables.add_median(&boots);
        assert!(warnings.is_empty());
        assert_eq!(spreads, ["share row program_a elapsed_us_time: 36..82"]);
        let row = &tables.tables[0].rows[0];
        // Lower middle of 36, 40, 50.5, 82; words come from the first boot.
        assert_eq!(row.cells["elapsed_us_time"].text(), "40");
        assert_eq!(row.cells["mode_time"].text(), "b");
        assert_eq!(tables.tables[0].columns, ["elapsed_us_time", "mode_time"]);
        // One boot: its figures as they are, no spread.
        let mut one = Tables::default();
        assert_eq!(one.add_median(&boots[..1]), (vec![], vec![]));
        assert_eq!(one.tables, boots[0].tables);
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
            varies: &[],
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
}
