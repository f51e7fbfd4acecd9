//! The kernel FP/SIMD switch table (`fpbench`): lazy vs the eager baseline.

use crate::arch::Arch;

use super::catalog::{Arches, Bench, Runner, TableInfo, BOOT_TIMEOUT};

/// The lazy/eager FP switch table (fpbench).
pub const FP_SWITCH: TableInfo = TableInfo {
    table: "fp_switch",
    note: "plain columns: fpu=lazy (FP state saved when another thread first touches FP); \
           _eager columns: fpu=eager (saved and restored at every kernel switch, the baseline); \
           _adaptive columns: fpu=adaptive, the default (lazy, eager for threads that used FP in \
           their last slice)",
    x_label: "case",
    y_label: "cycles per switch",
    chart: &["cycles_per_switch"],
    varies: &[],
};

/// Always-lazy FP switching (issue 6; the kernel default until adaptive switching). fpbench keeps SIMD registers live with
/// inline assembly (SSE on x86_64, NEON on aarch64, the D extension on riscv64); add an
/// architecture here when its port has lazy FP and fpbench.
pub const FPU_LAZY: Bench = Bench {
    name: "fpu-lazy",
    about: "kernel FP/SIMD switch, lazy (fpbench with fpu=lazy)",
    arches: Arches::Only(&[Arch::X86_64, Arch::Aarch64, Arch::Riscv64]),
    runner: Runner::Qemu {
        smp: 1,
        boot_words: "quiet cpus=1 fpu=lazy run=fpbench",
        parallel: false,
    },
    suffix: "",
    timeout: BOOT_TIMEOUT,
    boots: 1,
    tables: &[FP_SWITCH],
};

/// The kernel default: lazy, eager for steady FP users; columns `*_adaptive`.
pub const FPU_ADAPTIVE: Bench = Bench {
    name: "fpu-adaptive",
    about: "kernel FP/SIMD switch, adaptive (fpbench with fpu=adaptive, the default)",
    arches: Arches::Only(&[Arch::X86_64, Arch::Aarch64, Arch::Riscv64]),
    runner: Runner::Qemu {
        smp: 1,
        boot_words: "quiet cpus=1 fpu=adaptive run=fpbench",
        parallel: false,
    },
    suffix: "_adaptive",
    timeout: BOOT_TIMEOUT,
    boots: 1,
    tables: &[FP_SWITCH],
};

/// The eager baseline: columns `*_eager` beside the lazy ones.
pub const FPU_EAGER: Bench = Bench {
    name: "fpu-eager",
    about: "kernel FP/SIMD switch, eager baseline (fpbench with fpu=eager)",
    arches: Arches::Only(&[Arch::X86_64, Arch::Aarch64, Arch::Riscv64]),
    runner: Runner::Qemu {
        smp: 1,
        boot_words: "quiet cpus=1 fpu=eager run=fpbench",
        parallel: false,
    },
    suffix: "_eager",
    timeout: BOOT_TIMEOUT,
    boots: 1,
    tables: &[FP_SWITCH],
};
