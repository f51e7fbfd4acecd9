//! `BENCH` lines: the one format every benchmark program prints its results in.

/// First token of a benchmark result line.
pub const BENCH_PREFIX: &str = "BENCH";
/// Key of the table token (`table=<table>`), the second token.
pub const TABLE_KEY: &str = "table";
/// Key of the row token (`row=<row>`), the third token; also the first CSV column.
pub const ROW_KEY: &str = "row";

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::test_support::{int, line};

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
}
