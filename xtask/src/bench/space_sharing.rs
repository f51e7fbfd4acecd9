//! The space-sharing table (Scheduler Activations, issue 16 part 2): two programs with a
//! lock-heavy workload on 4 CPUs, each asking for 4 vCPUs, booted with the kernel dividing the
//! CPUs between them (`share=space`, columns `_space`) and with every vCPU time-shared
//! (`share=time`, columns `_time`) (`share_bench_a` + `share_bench_b`).
//!
//! What these figures can show is limited on TCG: under `-icount` QEMU runs the four CPUs in
//! turn on one host thread, so a vCPU that holds the lock is also stopped by QEMU's own round
//! robin, in both configurations, and the table shows that interleaving as much as the
//! kernel's policy. Measured on x86_64 with 20,000 rounds per thread instead of 6,000:
//! time-shared 124 and 178 ms with 0 and 3,316 failed attempts; space-shared 155 and 186 ms
//! with 0 and 1,787,447. Without `-icount` (MTTCG, 4 vCPUs on this 2-core host) time-sharing
//! gave 36 to 112 ms and 0 to 107,075 failed attempts from boot to boot. The division of CPUs
//! itself is checked by the `share` suite from the kernel's counters, not by this table.

use std::time::Duration;

use super::catalog::{Arches, Bench, Runner, TableInfo};

/// The space-sharing table.
pub const SPACE_SHARING_TABLE: TableInfo = TableInfo {
    table: "space_sharing",
    note: "Scheduler Activations (Anderson et al.): with processors time-shared, a preempted \
           lock holder stalls every thread of its program; space sharing gives each program \
           whole processors. Two programs x 4 vCPUs x 8 threads on one spin-then-yield lock, \
           4 CPUs: elapsed guest microseconds (-icount: the clock follows guest instructions) \
           and failed lock attempts, space-shared (_space) vs time-shared (_time); median of 3 \
           boots",
    x_label: "program",
    y_label: "elapsed guest microseconds",
    chart: &["elapsed_us"],
    // Four CPUs under -icount run in turn in one host thread, in an order that follows host
    // events: spin counts and elapsed time vary from host to host (as the s3 multi-vCPU rows).
    varies: &["program_"],
};

/// Boots of each configuration: its figures vary with QEMU's interleaving of the four CPUs
/// (the x86_64 rows ranged 36 to 82 ms from one boot to the next), so the median of three is
/// recorded and the range printed.
pub const BOOTS: u8 = 3;

/// The pair under `boot_words`, its columns suffixed `suffix`.
const fn pair(
    name: &'static str,
    about: &'static str,
    boot_words: &'static str,
    suffix: &'static str,
) -> Bench {
    Bench {
        name,
        about,
        arches: Arches::All,
        runner: Runner::Qemu { smp: 4, boot_words, parallel: false },
        suffix,
        timeout: Duration::from_secs(600),
        boots: BOOTS,
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
