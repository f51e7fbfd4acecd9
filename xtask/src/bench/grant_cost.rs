//! What one rights change costs with a large region in play (`grantbench`, issue 15 item 5):
//! the work a grant or revoke does with interrupts off is bounded, whatever the regions' sizes.

use super::catalog::{Arches, Bench, Runner, TableInfo, BOOT_TIMEOUT};

/// The rights-change table (grantbench).
pub const GRANT_COST: TableInfo = TableInfo {
    table: "grant_cost",
    note: "instructions of one grant or revoke to a thread that holds (or gets) a 32 MiB eager \
           region, and of that thread's first read of each of its pages after the grant (pages \
           a bounded change leaves out are mapped on first touch, 64 at a time)",
    x_label: "step",
    y_label: "instructions",
    chart: &["instructions"],
    varies: &[],
};

/// Grants and revokes beside and of a large region (grantbench).
pub const GRANT: Bench = Bench {
    name: "grant",
    about: "rights changes beside and of a 32 MiB region (grantbench)",
    arches: Arches::All,
    runner: Runner::Qemu {
        smp: 1,
        boot_words: "quiet cpus=1 run=grantbench",
        parallel: false,
    },
    suffix: "",
    timeout: BOOT_TIMEOUT,
    boots: 1,
    tables: &[GRANT_COST],
};
