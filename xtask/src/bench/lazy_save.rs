//! Lazy (WINDOW) vs full context save, printed by `uthread_bench`.

use super::catalog::TableInfo;

/// Lazy (WINDOW) vs full context save (uthread_bench).
pub const LAZY_SAVE: TableInfo = TableInfo {
    table: "lazy_save",
    note: "voluntary switch saving only the callee-saved window (WINDOW) vs a full save \
           (baseline); bytes saved per switch in each mode",
    x_label: "mode",
    y_label: "cycles / bytes",
    chart: &[],
    varies: &[],
};
