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

mod catalog;
mod chart;
mod check;
mod command;
mod criterion;
mod line;
mod runner;
mod table;
#[cfg(test)]
mod test_support;

// One module per table: its paper figures and the benchmarks that fill it.
mod cubix;
mod fcs_sweep;
mod fp_switch;
mod grant_cost;
mod host_comparison;
mod host_switch;
mod kernel_switch;
mod kn_cost;
mod lazy_save;
mod multith;
mod s3;
mod space_sharing;
mod stackthreads;

pub use command::{run, BenchArgs, HELP};
