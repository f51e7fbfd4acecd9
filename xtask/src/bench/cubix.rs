//! The Cubix TLB table (`tlbbench`, seed 003): thread-view affinity, TLB tags on and off.

use super::catalog::{Arches, Bench, Runner, TableInfo, BOOT_TIMEOUT};

/// The Cubix TLB table (tlbbench).
pub const CUBIX: TableInfo = TableInfo {
    table: "cubix",
    note: "Cubix (Pentium 90, DTLB / ITLB / cycles): without affinity 1st 42 / 21 / 45,506, \
           2nd 42 / 21 / 45,255; with affinity 1st 39 / 17 / 42,575, 2nd 0 / 0 / 8,470. \
           Under TCG on x86_64 and aarch64 the TLB columns are the kernel's software counters",
    x_label: "affinity and working set",
    y_label: "cycles per turn",
    chart: &["t1_cycles", "t2_cycles"],
};

/// The Cubix experiment (issue 9) with the TLB tags (PCID/ASID) the kernel uses by default.
pub const TLB: Bench = Bench {
    name: "tlb",
    about: "Cubix TLB experiment, TLB tags on (tlbbench)",
    arches: Arches::All,
    runner: Runner::Qemu {
        smp: 1,
        boot_words: "quiet cpus=1 run=tlbbench",
    },
    suffix: "",
    timeout: BOOT_TIMEOUT,
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
    },
    suffix: "_tagoff",
    timeout: BOOT_TIMEOUT,
    tables: &[CUBIX],
};
