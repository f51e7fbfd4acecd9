//! The kernel thread-switch table (`switchbench`): a yield in one view and across two.

use super::catalog::{Arches, Bench, Runner, TableInfo, BOOT_TIMEOUT};

/// The kernel thread-switch table (switchbench).
pub const KERNEL_SWITCH: TableInfo = TableInfo {
    table: "kernel_switch",
    note: "kernel yield between two threads on one CPU: same_view shares a page table (Cubix's \
           affinity case), two_views loads another root at every switch",
    x_label: "case",
    y_label: "cycles per switch",
    chart: &["cycles_per_switch"],
    varies: &[],
};

/// Kernel thread switch: yield round trips in one view and across two views (a page-table
/// root load per switch); prints table=kernel_switch rows same_view and two_views.
pub const SWITCH: Bench = Bench {
    name: "switch",
    about: "kernel thread switch, same view vs two views (switchbench)",
    arches: Arches::All,
    runner: Runner::Qemu {
        smp: 1,
        boot_words: "quiet cpus=1 run=switchbench",
        parallel: false,
    },
    suffix: "",
    timeout: BOOT_TIMEOUT,
    boots: 1,
    tables: &[KERNEL_SWITCH],
};
