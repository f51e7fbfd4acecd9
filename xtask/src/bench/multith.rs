//! MULiTh Table 2 (seed 001) for libuthread (`uthread_bench`, which also fills the FCS sweep
//! and the lazy-save tables).

use super::catalog::{Arches, Bench, Runner, TableInfo, BOOT_TIMEOUT};
use super::fcs_sweep::FCS_SWEEP;
use super::lazy_save::LAZY_SAVE;

/// MULiTh Table 2 (uthread_bench).
pub const MULITH: TableInfo = TableInfo {
    table: "multith",
    note: "MULiTh Table 2, cycles (instructions), proposed vs conventional: create 84 (74) vs \
           135 (102); exit 51 (42) vs 223 (126); sync 202 (95) vs 847 (515); mutex short 972 vs \
           spin 982, long 41,461 vs 46,656; preemption 523 (341) vs signal 878 (718); \
           notification 373 (256) vs SA/C-area 522 (418)",
    x_label: "operation",
    y_label: "cycles",
    chart: &[],
    varies: &[],
};

/// libuthread micro-benchmarks: MULiTh Table 2, the FCS depth sweep, WINDOW vs FULL saves.
pub const UTHREAD: Bench = Bench {
    name: "uthread",
    about: "libuthread: MULiTh Table 2, FCS sweep, lazy save (uthread_bench)",
    arches: Arches::All,
    runner: Runner::Qemu {
        smp: 1,
        boot_words: "quiet cpus=1 run=uthread_bench",
        parallel: false,
    },
    suffix: "",
    timeout: BOOT_TIMEOUT,
    boots: 1,
    tables: &[MULITH, FCS_SWEEP, LAZY_SAVE],
};
