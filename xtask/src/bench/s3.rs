//! The S3 tables (seed 002, issue 16): a failed acquisition's cost with the kernel lock holder
//! against soft-sync, and the paper's barrier model at 1, 2, 4 and 8 vCPUs (`s3_bench`,
//! `s3_phases_{2,4,8}`) in instructions under `-icount`; and the same model's elapsed time with
//! the CPUs running in parallel (`s3_elapsed_{1,2,4,8}`, no `-icount`).

use std::time::Duration;

use super::catalog::{Arches, Bench, Runner, TableInfo};

/// The S3 table.
pub const S3_TABLE: TableInfo = TableInfo {
    table: "s3",
    note: "S3 (seed 002): a failed acquisition costs software 384 then 258 cycles per retry, S3 \
           254 then 0; barrier model (64 threads x ~500 instructions, one barrier per phase): \
           S3 4.5x to 7.7x faster than soft-sync at 16 PEs. Ours: first/later_failure in \
           instructions (later = what each of the holder's yields costs more with a waiter); \
           phase_v<vCPUs>_g<groups>: instructions per phase (all CPUs, -icount), useful = 64 x \
           the work, waste = the rest, s3_pct_of_soft = s3 / spin_then_yield (paper: 1 / 4.5 = 22 %)",
    x_label: "row",
    y_label: "instructions",
    chart: &["s3", "spin_then_yield"],
    // One vCPU runs alone, so its figures repeat on any host; with 2, 4 or 8 vCPUs the spin
    // and retry counts follow the order QEMU runs its CPUs in.
    varies: &["phase_v2_", "phase_v4_", "phase_v8_"],
};

/// The S3 benchmark: one boot on 8 CPUs running the four programs in turn.
pub const S3: Bench = Bench {
    name: "s3",
    about: "S3 kernel lock holders and barriers vs soft-sync (s3_bench, s3_phases_*)",
    arches: Arches::All,
    runner: Runner::Qemu {
        smp: 8,
        boot_words: "quiet run=s3_bench,s3_phases_2,s3_phases_4,s3_phases_8",
        parallel: false,
    },
    suffix: "",
    // Eight CPUs under -icount run round-robin in one host thread: the 2-, 4- and 8-vCPU phases
    // took 50 s to over 300 s on aarch64 from run to run (a spinning vCPU burns whole slices).
    timeout: Duration::from_secs(900),
    boots: 1,
    tables: &[S3_TABLE],
};

/// The barrier model in elapsed time.
pub const S3_ELAPSED_TABLE: TableInfo = TableInfo {
    table: "s3_elapsed",
    note: "S3 (seed 002): 64 threads x ~500 instructions, one barrier per phase: S3 4.5x to \
           7.7x faster than soft-sync at 16 PEs in elapsed time. Ours: the s3 table's barrier \
           model booted without -icount, the guest's CPUs running in parallel (QEMU's \
           multi-threaded TCG, one host thread per CPU), guest nanoseconds per phase, the \
           shortest of 3 runs of 32 phases; v<vCPUs>_g<groups>; more vCPUs than the host has cores share \
           them. Real time: differs from boot to boot and host to host (median of 3 boots, \
           never checked)",
    x_label: "vCPUs and groups",
    y_label: "guest nanoseconds per phase",
    chart: &["s3_ns", "spin_then_yield_ns"],
    varies: &[""],
};

/// The barrier model's elapsed time: one boot on 8 CPUs in parallel running the four programs in
/// turn, three boots.
pub const S3_ELAPSED: Bench = Bench {
    name: "s3_elapsed",
    about: "the S3 barrier model in elapsed time, CPUs in parallel without -icount (s3_elapsed_*)",
    arches: Arches::All,
    runner: Runner::Qemu {
        smp: 8,
        boot_words: "quiet run=s3_elapsed_1,s3_elapsed_2,s3_elapsed_4,s3_elapsed_8",
        parallel: true,
    },
    suffix: "",
    timeout: Duration::from_secs(300),
    boots: 3,
    tables: &[S3_ELAPSED_TABLE],
};
