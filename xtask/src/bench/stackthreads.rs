//! The StackThreads table (seed 004, `stackthreads`): fork-everywhere (FK) and
//! suspend-everywhere (SW) overheads of `fib`, `nqueens` and a CKY parser over sequential
//! runs, beside the paper's figures and our goals.

use super::catalog::{Arches, Bench, Runner, TableInfo, BOOT_TIMEOUT};

/// The StackThreads table.
pub const STACKTHREADS: TableInfo = TableInfo {
    table: "stackthreads",
    note: "StackThreads (Taura & Yonezawa 2000, BH/RNA/CKY over sequential C++): FK <= 15 %, \
           SW <= 30 %; our goals FK <= 5 %, SW <= 15 %. FK: libuthread::spawn at every \
           recursive call, no cutoff; SW: FK and every leaf waits once on a channel a server \
           thread answers; sequential/fk/sw are cycles of a whole run",
    x_label: "application",
    y_label: "overhead over sequential, %",
    chart: &["fk_overhead_pct", "sw_overhead_pct"],
};

/// The applications sequential, FK and SW on one CPU.
pub const STACKTHREADS_BENCH: Bench = Bench {
    name: "stackthreads",
    about:
        "StackThreads apps (fib, nqueens, CKY): fork-/suspend-everywhere overhead (stackthreads)",
    arches: Arches::All,
    runner: Runner::Qemu {
        smp: 1,
        boot_words: "quiet cpus=1 run=stackthreads",
    },
    suffix: "",
    timeout: BOOT_TIMEOUT,
    tables: &[STACKTHREADS],
};
