//! The benchmark list: what each benchmark runs (a QEMU boot or criterion on the host), on which
//! architectures, and the tables it fills; the tables themselves live one module each.

use std::time::Duration;

use crate::arch::Arch;

use super::{
    cubix, fp_switch, grant_cost, host_comparison, host_switch, kernel_switch, kn_cost, multith,
    s3, space_sharing, stackthreads,
};

/// Row label of the host benchmarks' tables (in place of an architecture).
pub const HOST: &str = "host";
/// Message when the host has no criterion bench target yet.
pub const NO_HOST_BENCH: &str = "no criterion bench yet";
/// Default time limit of one QEMU benchmark boot.
pub const BOOT_TIMEOUT: Duration = Duration::from_secs(300);

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
    pub fn describe(self) -> String {
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
        /// Boot without `-icount` whatever the run's mode: QEMU runs the CPUs in parallel
        /// (multi-threaded TCG) and the guest's clock is real time, for figures that are
        /// elapsed time by definition. They differ from boot to boot and host to host, so every
        /// row of its tables must be in [`TableInfo::varies`] (never recorded or checked).
        parallel: bool,
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
    /// `go test -run '^$' -bench . -count N` in `dir` with `GOMAXPROCS=1`, if `go` is on PATH;
    /// each benchmark's ns/op (least, median, greatest of the repetitions) becomes a row of
    /// `table`.
    HostGo {
        /// Folder of the Go module, from the workspace root.
        dir: &'static str,
        /// Table the results go to (rows: benchmark names less `Benchmark`).
        table: &'static str,
    },
}

impl Runner {
    /// Whether it runs on the host (not in QEMU).
    pub fn is_host(self) -> bool {
        !matches!(self, Runner::Qemu { .. })
    }
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
    /// Prefixes of the rows whose figures depend on how QEMU interleaves several CPUs: even
    /// under `-icount` that order follows host events (the I/O thread's kicks end a CPU's
    /// slice early), so these figures differ from host to host. They are printed and charted
    /// but never recorded in, or checked against, `bench/expected-<arch>.csv`.
    pub varies: &'static [&'static str],
}

impl TableInfo {
    /// Whether `row`'s figures depend on the interleaving of CPUs ([`TableInfo::varies`]).
    pub fn row_varies(&self, row: &str) -> bool {
        self.varies.iter().any(|prefix| row.starts_with(prefix))
    }
}

/// Whether `row` of `table` has figures that vary from host to host (see [`TableInfo::varies`]).
pub fn row_varies(table: &str, row: &str) -> bool {
    BENCHES
        .iter()
        .flat_map(|bench| bench.tables)
        .any(|info| info.table == table && info.row_varies(row))
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
    /// QEMU boots whose per-cell median is recorded: 1 for the figures `-icount` makes
    /// identical run to run; more for rows whose figures follow how QEMU interleaves several
    /// CPUs ([`TableInfo::varies`]), where one boot is a sample, not a figure.
    pub boots: u8,
    /// Notes and axis labels of the tables it fills.
    pub tables: &'static [TableInfo],
}

/// Every benchmark, in the order they run (per architecture; the host ones last).
pub const BENCHES: &[Bench] = &[
    kernel_switch::SWITCH,
    cubix::TLB,
    cubix::TLB_TAGOFF,
    fp_switch::FPU_LAZY,
    fp_switch::FPU_EAGER,
    fp_switch::FPU_ADAPTIVE,
    multith::UTHREAD,
    kn_cost::KN,
    kn_cost::KN_SA,
    kn_cost::KN_SIGNAL,
    stackthreads::STACKTHREADS_BENCH,
    s3::S3,
    s3::S3_ELAPSED,
    space_sharing::SPACE,
    space_sharing::TIME,
    grant_cost::GRANT,
    host_switch::HOST_CRITERION,
    stackthreads::HOST_STACKTHREADS_BENCH,
    host_comparison::GO,
];

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::bench::line::is_name;
    use crate::bench::runner::{log_path, programs_of};

    #[test]
    fn benchmark_list_is_well_formed() {
        let mut names = Vec::new();
        for bench in BENCHES {
            assert!(is_name(bench.name), "{}", bench.name);
            assert!(!names.contains(&bench.name), "duplicate {}", bench.name);
            names.push(bench.name);
            assert!(bench.suffix.is_empty() || is_name(bench.suffix));
            assert!(!bench.tables.is_empty());
            assert!(bench.boots >= 1, "{}", bench.name);
            if bench.boots > 1 {
                // The table says its figures are medians, of the right count.
                let said = format!("median of {} boots", bench.boots);
                assert!(
                    bench.tables.iter().all(|t| t.note.contains(&said)),
                    "{}",
                    bench.name
                );
            }
            if let Runner::Qemu { smp, boot_words, parallel } = bench.runner {
                assert!((1..=crate::run::MAX_CPUS).contains(&smp));
                assert!(!programs_of(boot_words).is_empty());
                if parallel {
                    // Real time: a figure to look at, never one to check.
                    assert!(bench.tables.iter().all(|t| t.varies.contains(&"")), "{}", bench.name);
                }
            }
        }
        assert!(log_path(Path::new("target/bench"), "x86_64", "switch")
            .ends_with("target/bench/logs/x86_64-switch.log"));
    }
}
