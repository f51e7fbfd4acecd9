//! The host comparison (criterion): libuthread's hosted switch vs other libraries and OS threads.

use std::time::Duration;

use super::catalog::{Arches, Bench, Runner, TableInfo};

/// Table of the criterion results.
pub const TABLE: &str = "host_switch";

/// Criterion on the host.
pub const HOST_SWITCH: TableInfo = TableInfo {
    table: TABLE,
    note: "criterion on the host: time per iteration in ns, [low mid high] is the 95% \
           confidence interval",
    x_label: "benchmark",
    y_label: "ns per iteration",
    chart: &[],
    varies: &[],
};

/// Host comparison (issue 9): libuthread's hosted switch vs other libraries and OS threads.
/// Runs when no --arch is given, or when --filter names it.
pub const HOST_CRITERION: Bench = Bench {
    name: "host",
    about: "criterion on the host: libuthread switch vs other libraries and OS threads",
    arches: Arches::All,
    runner: Runner::HostCriterion {
        package: "libuthread",
        bench: "switch",
        table: TABLE,
    },
    suffix: "",
    timeout: Duration::from_secs(1800),
    boots: 1,
    tables: &[HOST_SWITCH],
};
