//! The FCS call-depth sweep (seed 000), printed by `uthread_bench`.

use super::catalog::TableInfo;

/// The FCS call-depth sweep (uthread_bench).
pub const FCS_SWEEP: TableInfo = TableInfo {
    table: "fcs_sweep",
    note: "FCS (SPARCstation 2): switch cost grows linearly with live register windows up to 6 \
           (~4 us net when shallow, lwp_yield ~35 us); a WINDOW save should stay flat",
    x_label: "call depth at the switch point (L = C)",
    y_label: "cycles per switch",
    chart: &[],
    varies: &[],
};
