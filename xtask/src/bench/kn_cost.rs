//! Kernel Notification costs (`kn_cost`) beside MULiTh Table 2's notification and preemption.

use super::catalog::{Arches, Bench, Runner, TableInfo, BOOT_TIMEOUT};

/// Kernel Notification costs (kn_cost).
pub const KN_COST: TableInfo = TableInfo {
    table: "kn_cost",
    note: "MULiTh Table 2: notification via KN 256 instructions (373 cycles) vs Scheduler \
           Activations / C-area 418; preemption via KN 341 (523 cycles) vs a signal-style copy 718",
    x_label: "event",
    y_label: "instructions",
    chart: &[],
};

/// Kernel Notification: a blocking syscall or a preemption turned into an upcall.
pub const KN: Bench = Bench {
    name: "kn",
    about: "Kernel Notification: blocking syscall and preemption to upcall (kn_cost)",
    arches: Arches::All,
    runner: Runner::Qemu {
        smp: 1,
        boot_words: "quiet cpus=1 run=kn_cost",
    },
    suffix: "",
    timeout: BOOT_TIMEOUT,
    tables: &[KN_COST],
};
