//! The StackThreads table (seed 004, `stackthreads`): fork-everywhere (FK) and
//! suspend-everywhere (SW) overheads of `fib`, `nqueens` and a CKY parser over sequential
//! runs, beside the paper's figures and our goals.

use std::time::Duration;

use super::catalog::{Arches, Bench, Runner, TableInfo, BOOT_TIMEOUT};

/// The StackThreads table.
pub const STACKTHREADS: TableInfo = TableInfo {
    table: "stackthreads",
    note: "StackThreads (Taura & Yonezawa 2000, BH/RNA/CKY over sequential C++): FK <= 15 %, \
           SW <= 30 %; our goals FK <= 5 %, SW <= 15 %. FK: a fork (libuthread::Builder::join, lazy task record) at every \
           recursive call, no cutoff; SW: FK and every leaf waits once on a one-shot channel a server \
           thread answers; sequential/fk/sw are cycles of a whole run",
    x_label: "application",
    y_label: "overhead over sequential, %",
    chart: &["fk_overhead_pct", "sw_overhead_pct"],
    varies: &[],
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
        parallel: false,
    },
    suffix: "",
    timeout: BOOT_TIMEOUT,
    boots: 1,
    tables: &[STACKTHREADS],
};

/// The hosted StackThreads table (criterion; rows `stackthreads/<app>_<version>`,
/// `stackthreads/fib_fk_vcpus_<1|2>` and `stackthreads/fib_sequential_os_threads_<1|2>`).
pub const HOST_STACKTHREADS: TableInfo = TableInfo {
    table: "host_stackthreads",
    note: "criterion on the host, ns per whole run: the StackThreads apps sequential, fk and sw \
           on one vCPU (fib(20)); fib_fk_vcpus_1 / fib_fk_vcpus_2 is FK fib(25)'s speed-up on 2 vCPUs; \
           2 x fib_sequential_os_threads_1 / fib_sequential_os_threads_2 is the host's ceiling for it \
           (sequential fib(25) on 1 and on 2 OS threads at once: 2.0 on two free cores)",
    x_label: "benchmark",
    y_label: "ns per run",
    chart: &["mid_ns"],
    varies: &[],
};

/// The same applications hosted (criterion), with FK fib on 1 and 2 vCPUs.
pub const HOST_STACKTHREADS_BENCH: Bench = Bench {
    name: "host-stackthreads",
    about: "criterion on the host: StackThreads apps, and FK fib on 1 and 2 vCPUs",
    arches: Arches::All,
    runner: Runner::HostCriterion {
        package: "libuthread",
        bench: "stackthreads",
        table: "host_stackthreads",
    },
    suffix: "",
    timeout: Duration::from_secs(1800),
    boots: 1,
    tables: &[HOST_STACKTHREADS],
};
