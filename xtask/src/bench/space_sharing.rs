//! The space-sharing table (Scheduler Activations, issue 16 part 2): two programs with a
//! lock-heavy workload on 4 CPUs, each asking for 4 vCPUs, booted with the kernel dividing the
//! CPUs between them (`share=space`, columns `_space`) and with every vCPU time-shared
//! (`share=time`, columns `_time`) (`share_bench_a` + `share_bench_b`).

use std::time::Duration;

use super::catalog::{Arches, Bench, Runner, TableInfo};

/// The space-sharing table.
pub const SPACE_SHARING_TABLE: TableInfo = TableInfo {
    table: "space_sharing",
    note: "Scheduler Activations (Anderson et al.): with processors time-shared, a preempted \
           lock holder stalls every thread of its program; space sharing gives each program \
           whole processors. Two programs x 4 vCPUs x 8 threads on one spin-then-yield lock, \
           4 CPUs: elapsed guest microseconds (-icount: the clock follows guest instructions) \
           and failed lock attempts, space-shared (_space) vs time-shared (_time)",
    x_label: "program",
    y_label: "elapsed guest microseconds",
    chart: &["elapsed_us"],
    // Four CPUs under -icount run in turn in one host thread, in an order that follows host
    // events: spin counts and elapsed time vary from host to host (as the s3 multi-vCPU rows).
    varies: &["program_"],
};

/// One boot of the pair under `boot_words`, its columns suffixed `suffix`.
const fn pair(name: &'static str, about: &'static str, boot_words: &'static str, suffix: &'static str) -> Bench {
    Bench {
        name,
        about,
        arches: Arches::All,
        runner: Runner::Qemu { smp: 4, boot_words },
        suffix,
        timeout: Duration::from_secs(600),
        tables: &[SPACE_SHARING_TABLE],
    }
}

/// Space sharing (the kernel's default policy).
pub const SPACE: Bench = pair(
    "share_space",
    "two lock-heavy programs of 4 vCPUs on 4 CPUs, space-shared (share=space)",
    "quiet share=space run=share_bench_a+share_bench_b",
    "_space",
);

/// The time-sharing baseline.
pub const TIME: Bench = pair(
    "share_time",
    "the same two programs with every vCPU time-shared (share=time)",
    "quiet share=time run=share_bench_a+share_bench_b",
    "_time",
);
