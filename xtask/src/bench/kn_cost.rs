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
    varies: &[],
};

/// Kernel Notification: a blocking syscall or a preemption turned into an upcall.
pub const KN: Bench = Bench {
    name: "kn",
    about: "Kernel Notification: blocking syscall and preemption to upcall (kn_cost)",
    arches: Arches::All,
    runner: Runner::Qemu {
        smp: 1,
        boot_words: "quiet cpus=1 run=kn_cost",
        parallel: false,
    },
    suffix: "",
    timeout: BOOT_TIMEOUT,
    boots: 1,
    tables: &[KN_COST],
};

/// The `kn=sa` baseline: a `sleep` until the library holds the context (upcall + `kn_fetch`).
pub const KN_SA: Bench = Bench {
    name: "kn-sa",
    about: "baseline: Scheduler-Activations-style notification, context copied out of kernel memory (kn_cost with kn=sa)",
    arches: Arches::All,
    runner: Runner::Qemu {
        smp: 1,
        boot_words: "quiet cpus=1 kn=sa run=kn_cost",
        parallel: false,
    },
    suffix: "",
    timeout: BOOT_TIMEOUT,
    boots: 1,
    tables: &[KN_COST],
};

/// The `preempt=signal` baseline: a preemption delivered as a signal frame on the thread's stack.
pub const KN_SIGNAL: Bench = Bench {
    name: "kn-signal",
    about: "baseline: signal-style preemption, signal frame on the thread's stack (kn_cost with preempt=signal)",
    arches: Arches::All,
    runner: Runner::Qemu {
        smp: 1,
        boot_words: "quiet cpus=1 preempt=signal run=kn_cost",
        parallel: false,
    },
    suffix: "",
    timeout: BOOT_TIMEOUT,
    boots: 1,
    tables: &[KN_COST],
};

/// Each baseline row and the Kernel Notification row it is compared with.
const PAIRS: [(&str, &str); 2] = [
    ("notification_sa_copy", "blocking_syscall_to_upcall"),
    ("preemption_signal_style", "preemption_to_upcall"),
];

/// Column of a baseline row: how many times the KN path it is compared with is cheaper
/// (baseline instructions / KN instructions; MULiTh measured 1.63 and 2.11 with its own figures).
pub const RATIO_COLUMN: &str = "baseline_over_kn";

/// Adds [`RATIO_COLUMN`] to the baseline rows of every `kn_cost` table that has both rows of a
/// pair (both boots ran in this invocation).
pub fn derive_ratios(tables: &mut super::table::Tables) {
    for table in tables.tables.iter_mut().filter(|t| t.name == KN_COST.table) {
        let figure = |rows: &[super::table::Row], name: &str| rows.iter().find(|r| r.name == name).and_then(|r| r.number("instructions"));
        let ratios: Vec<(&str, f64)> = PAIRS
            .iter()
            .filter_map(|(baseline, kn)| {
                let (b, k) = (figure(&table.rows, baseline)?, figure(&table.rows, kn)?);
                (k > 0.0).then(|| (*baseline, b / k))
            })
            .collect();
        for (row, ratio) in ratios {
            if !table.columns.iter().any(|c| c == RATIO_COLUMN) {
                table.columns.push(RATIO_COLUMN.to_string());
            }
            if let Some(r) = table.rows.iter_mut().find(|r| r.name == row) {
                r.cells.insert(RATIO_COLUMN.to_string(), super::line::Value::Decimal(format!("{ratio:.2}")));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::line::Value;
    use crate::bench::table::{Row, Table, Tables};

    fn row(name: &str, instructions: u64) -> Row {
        let mut r = Row { name: name.to_string(), ..Row::default() };
        r.cells.insert("instructions".to_string(), Value::Int(instructions.to_string()));
        r
    }

    #[test]
    fn ratios_of_both_pairs() {
        let mut tables = Tables::default();
        tables.tables.push(Table {
            arch: "x86_64".to_string(),
            name: "kn_cost".to_string(),
            columns: vec!["instructions".to_string()],
            rows: vec![row("blocking_syscall_to_upcall", 400), row("notification_sa_copy", 700), row("preemption_to_upcall", 500), row("preemption_signal_style", 1250)],
            ..Table::default()
        });
        derive_ratios(&mut tables);
        let t = &tables.tables[0];
        assert!(t.columns.iter().any(|c| c == RATIO_COLUMN));
        assert_eq!(t.rows[1].cells.get(RATIO_COLUMN), Some(&Value::Decimal("1.75".to_string())));
        assert_eq!(t.rows[3].cells.get(RATIO_COLUMN), Some(&Value::Decimal("2.50".to_string())));
        assert_eq!(t.rows[0].cells.get(RATIO_COLUMN), None);
    }
}
