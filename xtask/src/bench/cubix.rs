//! The Cubix TLB table (`tlbbench`, seed 003): thread-view affinity, TLB tags on and off.

use super::catalog::{Arches, Bench, Runner, TableInfo, BOOT_TIMEOUT};

/// The Cubix TLB table (tlbbench).
pub const CUBIX: TableInfo = TableInfo {
    table: "cubix",
    note: "Cubix (Pentium 90, DTLB / ITLB / cycles): without affinity 1st 42 / 21 / 45,506, \
           2nd 42 / 21 / 45,255; with affinity 1st 39 / 17 / 42,575, 2nd 0 / 0 / 8,470. \
           Under TCG on x86_64 and aarch64 the TLB columns are the kernel's software counters",
    x_label: "affinity and working set",
    // What the experiment is about: the 2nd thread's TLB misses vanish with affinity (QEMU
    // counts them on riscv64; x86_64 and aarch64 have only the software counters), and the view
    // switches that cause them. Cycles stay in the table: TCG does not model TLB-miss cost.
    y_label: "per turn: TLB misses, view switches",
    chart: &["t1_dtlb-misses", "t2_dtlb-misses", "t1_itlb-misses", "t2_itlb-misses", "t1_view-switches", "t2_view-switches"],
    varies: &[],
};

/// The Cubix experiment (issue 9) with the TLB tags (PCID/ASID) the kernel uses by default.
pub const TLB: Bench = Bench {
    name: "tlb",
    about: "Cubix TLB experiment, TLB tags on (tlbbench)",
    arches: Arches::All,
    runner: Runner::Qemu {
        smp: 1,
        boot_words: "quiet cpus=1 run=tlbbench",
        parallel: false,
    },
    suffix: "",
    timeout: BOOT_TIMEOUT,
    boots: 1,
    tables: &[CUBIX],
};

/// The same with tags off (every view switch flushes, as on the Pentium): columns `*_tagoff`.
pub const TLB_TAGOFF: Bench = Bench {
    name: "tlb-tagoff",
    about: "Cubix TLB experiment, TLB tags off (tlbbench with tlbtag=off)",
    arches: Arches::All,
    runner: Runner::Qemu {
        smp: 1,
        boot_words: "quiet cpus=1 tlbtag=off run=tlbbench",
        parallel: false,
    },
    suffix: "_tagoff",
    timeout: BOOT_TIMEOUT,
    boots: 1,
    tables: &[CUBIX],
};
