//! Helpers shared by the bench modules' unit tests.

use super::line::{parse_bench_line, BenchLine, Value};
use super::table::Tables;

/// Parses a `BENCH` line that must be good.
pub fn line(text: &str) -> BenchLine {
    parse_bench_line(text).unwrap().unwrap()
}

/// An integer cell value.
pub fn int(s: &str) -> Value {
    Value::Int(s.to_string())
}

/// A Cubix table of x86_64 with suffixed columns and rows filled by several lines.
pub fn cubix_tables() -> Tables {
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
