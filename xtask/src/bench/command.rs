//! The `cargo xtask bench` command: its arguments, the plan of runs, and the outputs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::arch::Arch;
use crate::build;
use crate::cmd::workspace_root;
use crate::qemu::Accel;
use crate::setup::{self, Tools};

use super::catalog::{Bench, Runner, TableInfo, BENCHES, HOST};
use super::chart::to_svg;
use super::check;
use super::runner::{run_boot, run_host, Settings, Verdict};
use super::table::{render_text, to_csv, Table, Tables};
use super::{host_comparison, host_switch, kn_cost};

/// Extra help of `cargo xtask bench --help`.
pub const HELP: &str = "\
Each benchmark boots the kernel in QEMU (or runs criterion on the host) and reads the lines
its program prints on the serial console:

  BENCH table=<table> row=<row> <column>=<value> [<column>=<value> ...]

tokens separated by single spaces; names of [A-Za-z0-9_.+-]; a value is an integer, a decimal
number, or a word starting with a letter (e.g. `unsupported`); a number with a unit (`12ns`)
is rejected. Rows are merged by (arch, table, row); a benchmark's column suffix (e.g. `_tagoff`)
keeps the columns of differently configured boots apart.

Outputs: the tables on the terminal, target/bench/<arch>-<table>.csv and .svg (a grouped bar
chart, or a line chart when the rows are numbers), and the console logs in target/bench/logs/.
A program missing from an architecture's boot archive is reported as skipped. The exit status is
1 if a boot failed (guest status not 0, time limit, no or malformed BENCH line), else 0.

Deterministic mode (default): TCG with `-icount shift=0`, so cycle columns count guest
instructions and repeat run to run. `--list` shows the benchmarks.

`--check` compares every deterministic figure (each number of each QEMU table) with
bench/expected-<arch>.csv and fails (exit status 1) when one rose more than 3 %, a line per
regression; falls are reported as improvements. `--bless` (or `--update-expected`) rewrites
bench/expected-<arch>.csv from the run (tables the run did not measure keep their figures).
Host (criterion) timings are never checked.";

/// Arguments of `cargo xtask bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Architectures to run on; repeat the flag or separate with commas [default: every supported
    /// one, plus the host benchmarks].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub arch: Vec<Arch>,
    /// QEMU accelerator; `kvm` cannot count instructions, so it implies --no-icount.
    #[arg(long, value_enum, default_value_t = Accel::Tcg)]
    pub accel: Accel,
    /// Build with the release profile (the default for bench).
    #[arg(long, overrides_with = "debug")]
    pub release: bool,
    /// Build with the dev profile instead of release.
    #[arg(long, overrides_with = "release")]
    pub debug: bool,
    /// Leave deterministic mode: no `-icount shift=0`, cycles are the emulated clock's.
    #[arg(long)]
    pub no_icount: bool,
    /// Only the benchmarks whose name or `<arch>/<name>` contains this text (e.g. `switch`,
    /// `x86_64/tlb`, `host`).
    #[arg(long)]
    pub filter: Option<String>,
    /// Time limit of each boot, in seconds [default: each benchmark's own, see --list].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: Option<u64>,
    /// Print the benchmarks and exit.
    #[arg(long)]
    pub list: bool,
    /// Also build this program crate (its folder) or take this ELF file into the boot archive,
    /// for benchmarks that boot it; repeatable.
    #[arg(long = "program", value_name = "DIR|ELF")]
    pub programs: Vec<PathBuf>,
    /// Compare every deterministic figure with bench/expected-<arch>.csv; fail if one rose more
    /// than 3 %.
    #[arg(long, conflicts_with = "bless")]
    pub check: bool,
    /// Rewrite bench/expected-<arch>.csv from this run's deterministic figures.
    #[arg(long, alias = "update-expected")]
    pub bless: bool,
}

/// One benchmark to run, on an architecture or on the host.
#[derive(Clone, Copy, Debug)]
enum Planned {
    /// A QEMU boot.
    Boot(Arch, &'static Bench),
    /// A host run.
    Host(&'static Bench),
}

impl Planned {
    /// `<arch>/<name>` or `host/<name>`.
    fn label(self) -> String {
        match self {
            Planned::Boot(arch, bench) => format!("{arch}/{}", bench.name),
            Planned::Host(bench) => format!("{HOST}/{}", bench.name),
        }
    }
}

/// What to run: the benchmarks of `arches` (and the host ones when `with_host`) that `filter`
/// selects, by name or `<arch>/<name>`.
fn plan(arches: &[Arch], with_host: bool, filter: Option<&str>) -> Vec<Planned> {
    let selected =
        |name: &str, label: &str| filter.is_none_or(|f| name.contains(f) || label.contains(f));
    let mut planned = Vec::new();
    for &arch in arches {
        for bench in BENCHES {
            if let Runner::Qemu { .. } = bench.runner {
                let item = Planned::Boot(arch, bench);
                if bench.arches.includes(arch) && selected(bench.name, &item.label()) {
                    planned.push(item);
                }
            }
        }
    }
    for bench in BENCHES {
        if bench.runner.is_host() {
            let item = Planned::Host(bench);
            // The host benchmarks run with no --arch, or when the filter names them.
            let named = filter.is_some_and(|f| bench.name.contains(f) || item.label().contains(f));
            if (with_host && selected(bench.name, &item.label())) || named {
                planned.push(item);
            }
        }
    }
    planned
}

/// Prints the benchmark list.
fn print_list() {
    for bench in BENCHES {
        let what = match bench.runner {
            Runner::Qemu { smp, boot_words, parallel } => format!(
                "QEMU, {smp} CPU(s){}: {boot_words}",
                if parallel { " in parallel (no -icount)" } else { "" }
            ),
            Runner::HostCriterion { package, bench, .. } => {
                format!("host: cargo bench -p {package} --bench {bench} -- --noplot")
            }
            Runner::HostGo { dir, .. } => format!(
                "host: GOMAXPROCS=1 go test -run '^$' -bench . -count {} (in {dir})",
                host_comparison::GO_COUNT
            ),
        };
        let tables: Vec<&str> = bench.tables.iter().map(|t| t.table).collect();
        let arches = match bench.runner {
            Runner::Qemu { .. } => format!("arches {}; ", bench.arches.describe()),
            Runner::HostCriterion { .. } | Runner::HostGo { .. } => String::new(),
        };
        println!("{:<11} {}", bench.name, bench.about);
        println!("{:<11} {arches}{what}", "");
        println!(
            "{:<11} tables {}{}; time limit {} s",
            "",
            tables.join(", "),
            if bench.suffix.is_empty() {
                String::new()
            } else {
                format!(" (columns suffixed {})", bench.suffix)
            },
            bench.timeout.as_secs()
        );
    }
}

/// `cargo xtask bench`.
pub fn run(args: &BenchArgs) -> Result<u8> {
    if args.list {
        print_list();
        return Ok(0);
    }
    let mut arches: Vec<Arch> = Vec::new();
    for &arch in &args.arch {
        arch.require_supported()?;
        if !arches.contains(&arch) {
            arches.push(arch);
        }
    }
    let with_host = arches.is_empty();
    if arches.is_empty() {
        arches = Arch::supported();
    }
    let mut planned = plan(&arches, with_host, args.filter.as_deref());
    if args.check || args.bless {
        // Elapsed-time boots have nothing to record or compare: not run for --check/--bless.
        planned.retain(|p| match p {
            Planned::Boot(arch, bench) if matches!(bench.runner, Runner::Qemu { parallel: true, .. }) => {
                println!("note: {arch}/{} measures elapsed time, which --check and --bless do not compare: not run", bench.name);
                false
            }
            _ => true,
        });
    }
    if planned.is_empty() {
        let names: Vec<&str> = BENCHES.iter().map(|b| b.name).collect();
        bail!(
            "--filter {:?} selects no benchmark on {} (benchmarks: {})",
            args.filter.as_deref().unwrap_or_default(),
            arches
                .iter()
                .map(|a| a.name())
                .collect::<Vec<_>>()
                .join(", "),
            names.join(", ")
        );
    }
    let icount = !args.no_icount && args.accel == Accel::Tcg;
    if (args.check || args.bless) && !icount {
        bail!(
            "--check and --bless compare instruction counts: they need deterministic mode \
             (TCG with -icount; drop --no-icount and --accel kvm)"
        );
    }
    if args.accel == Accel::Kvm && !args.no_icount {
        println!("note: --accel kvm cannot count instructions: deterministic mode is off");
    }
    let settings = Settings {
        accel: args.accel,
        icount,
        release: !args.debug,
        timeout: args.timeout.map(Duration::from_secs),
        out_dir: workspace_root().join("target").join("bench"),
        programs: args.programs.clone(),
    };
    let mode = format!(
        "{}{}, {}",
        args.accel.name(),
        if icount {
            " -icount shift=0: cycles = instructions"
        } else {
            ""
        },
        if settings.release { "release" } else { "debug" }
    );
    println!("bench: {} benchmark run(s); {mode}", planned.len());

    let mut tables = Tables::default();
    let mut verdicts: Vec<(String, Verdict)> = Vec::new();
    let boot_arches: Vec<Arch> = arches
        .iter()
        .copied()
        .filter(|a| {
            planned
                .iter()
                .any(|p| matches!(p, Planned::Boot(b, _) if b == a))
        })
        .collect();
    let tools: Option<Tools> = if boot_arches.is_empty() {
        None
    } else {
        match setup::ensure(&boot_arches) {
            Ok(tools) => Some(tools),
            Err(error) => {
                verdicts.push((
                    "setup".to_string(),
                    Verdict::Failed(format!("cannot build or boot the kernel: {error:#}")),
                ));
                None
            }
        }
    };
    if let Some(tools) = &tools {
        for &arch in &boot_arches {
            run_arch(&settings, tools, arch, &planned, &mut tables, &mut verdicts);
        }
    }
    for item in &planned {
        if let Planned::Host(bench) = item {
            let verdict = run_host(&settings, bench, &mut tables);
            report(&item.label(), &verdict);
            verdicts.push((item.label(), verdict));
        }
    }
    kn_cost::derive_ratios(&mut tables);
    if let Some(comparison) = host_comparison::derive(&tables, host_switch::TABLE) {
        tables.tables.push(comparison);
    }

    let infos: Vec<TableInfo> = planned
        .iter()
        .flat_map(|p| match p {
            Planned::Boot(_, b) | Planned::Host(b) => b.tables.iter().copied(),
        })
        .collect();
    tables.annotate(&infos);
    let files = write_outputs(&tables, &settings.out_dir, &mode)?;

    let skipped: Vec<_> = verdicts
        .iter()
        .filter_map(|(l, v)| match v {
            Verdict::Skipped(why) => Some((l, why)),
            _ => None,
        })
        .collect();
    let failed: Vec<_> = verdicts
        .iter()
        .filter_map(|(l, v)| match v {
            Verdict::Failed(why) => Some((l, why)),
            _ => None,
        })
        .collect();
    if tables.tables.is_empty() {
        println!("no table: no benchmark printed a BENCH line");
    }
    for (label, why) in &skipped {
        println!("skipped {label}: {why}");
    }
    for (label, why) in &failed {
        println!("FAILED {label}: {why}");
    }
    println!("files written:");
    if files.is_empty() {
        println!("  (none)");
    }
    for file in &files {
        println!("  {}", file.display());
    }
    let logs = settings.out_dir.join("logs");
    println!("  (console logs in {})", logs.display());
    let mut regressed = false;
    if args.check || args.bless {
        for &arch in &boot_arches {
            let arch_failed = failed
                .iter()
                .any(|(label, _)| label.starts_with(&format!("{arch}/")));
            if args.bless {
                bless_arch(arch.name(), &tables, arch_failed)?;
            } else {
                regressed |= !check_arch(arch.name(), &tables, args.filter.as_deref())?;
            }
        }
    }
    Ok(u8::from(!failed.is_empty() || regressed))
}

/// The command that blesses what this run measured on `arch`.
fn bless_command(arch: &str, filter: Option<&str>) -> String {
    match filter {
        Some(filter) => format!("cargo xtask bench --arch {arch} --filter {filter} --bless"),
        None => format!("cargo xtask bench --arch {arch} --bless"),
    }
}

/// `--check` for `arch`: prints the comparison; whether it passed.
fn check_arch(arch: &str, tables: &Tables, filter: Option<&str>) -> Result<bool> {
    let file = check::expected_file(arch);
    let path = workspace_root().join(&file);
    let run = check::figures(tables, arch);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) => {
            println!(
                "CHECK FAILED {arch}: cannot read {file} ({error}); record one with {}",
                bless_command(arch, filter)
            );
            return Ok(false);
        }
    };
    let expected = check::parse_expected(&text).map_err(|why| anyhow::anyhow!("{file}: {why}"))?;
    let comparison = check::compare(&expected, &run, check::TOLERANCE);
    println!();
    print!(
        "{}",
        check::render_comparison(arch, &file, &comparison, &bless_command(arch, filter))
    );
    let mut noted: Vec<&str> = Vec::new();
    for info in BENCHES.iter().flat_map(|b| b.tables).filter(|i| !i.varies.is_empty()) {
        // A table two benchmarks fill (columns with suffixes) is named once.
        if noted.contains(&info.table) {
            continue;
        }
        noted.push(info.table);
        if tables.tables.iter().any(|t| t.arch == arch && t.name == info.table) {
            println!(
                "not checked: {} rows {}* (they follow the order QEMU interleaves CPUs in, which \
                 differs from host to host)",
                info.table,
                info.varies.join("*, ")
            );
        }
    }
    if run.is_empty() {
        println!("CHECK FAILED {arch}: the run printed no figure to check");
        return Ok(false);
    }
    Ok(comparison.passed())
}

/// `--bless` for `arch`: rewrites its expected file with this run's figures, unless a boot of
/// `arch` failed (its tables may be incomplete).
fn bless_arch(arch: &str, tables: &Tables, arch_failed: bool) -> Result<()> {
    let file = check::expected_file(arch);
    if arch_failed {
        println!("not blessing {file}: a benchmark failed on {arch}");
        return Ok(());
    }
    let run = check::figures(tables, arch);
    if run.is_empty() {
        println!("not blessing {file}: no figure measured on {arch}");
        return Ok(());
    }
    let path = workspace_root().join(&file);
    let expected = match std::fs::read_to_string(&path) {
        Ok(text) => check::parse_expected(&text).map_err(|why| anyhow::anyhow!("{file}: {why}"))?,
        Err(_) => Vec::new(),
    };
    let blessed = check::bless(&expected, &run);
    let comparison = check::compare(&expected, &run, check::TOLERANCE);
    print!("{}", check::render_comparison(arch, &file, &comparison, ""));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&path, check::render_expected(&blessed))
        .with_context(|| format!("writing {}", path.display()))?;
    println!(
        "blessed {file}: {} figure(s) from this run, {} in all",
        run.len(),
        blessed.len()
    );
    Ok(())
}

/// Prints one result line.
fn report(label: &str, verdict: &Verdict) {
    match verdict {
        Verdict::Ok(lines) => println!("ok   {label}: {lines} BENCH line(s)"),
        Verdict::Skipped(why) => println!("skip {label}: {why}"),
        Verdict::Failed(why) => println!("FAIL {label}: {why}"),
    }
}

/// The in-tree programs the boots run, which are all a benchmark build needs (a release build
/// links each program as one LTO unit with libuthread, `core` and `alloc`: building the other
/// sixty-odd programs cost about a minute of a CI run); `None` (all) when `--program` adds
/// programs of the user's, which a boot may run beside them.
fn programs_to_build<'a>(boots: &[(String, &'a Bench)], extra: &[PathBuf]) -> Option<Vec<&'a str>> {
    if !extra.is_empty() {
        return None;
    }
    let mut names: Vec<&str> = boots
        .iter()
        .filter_map(|(_, bench)| match bench.runner {
            Runner::Qemu { boot_words, .. } => Some(super::runner::programs_of(boot_words)),
            _ => None,
        })
        .flatten()
        .collect();
    names.sort_unstable();
    names.dedup();
    Some(names)
}

/// Builds for `arch` and runs its planned boots.
fn run_arch(
    settings: &Settings,
    tools: &Tools,
    arch: Arch,
    planned: &[Planned],
    tables: &mut Tables,
    verdicts: &mut Vec<(String, Verdict)>,
) {
    let boots: Vec<(String, &Bench)> = planned
        .iter()
        .filter_map(|p| match p {
            Planned::Boot(a, bench) if *a == arch => Some((p.label(), *bench)),
            _ => None,
        })
        .collect();
    let only = programs_to_build(&boots, &settings.programs);
    let artifacts = match build::build_flavor_of(tools, arch, settings.release, &settings.programs, build::Flavor::Plain, only.as_deref()) {
        Ok(artifacts) => artifacts,
        Err(error) => {
            // The error (the failed command) once; the boots just point at it.
            println!("FAIL {arch}: build: {error:#}");
            for (label, _) in boots {
                let verdict = Verdict::Failed(format!("the {arch} build failed (see above)"));
                report(&label, &verdict);
                verdicts.push((label, verdict));
            }
            return;
        }
    };
    for (label, bench) in boots {
        let verdict = run_boot(settings, arch, bench, &artifacts, tables);
        report(&label, &verdict);
        verdicts.push((label, verdict));
    }
}

/// Prints every table and writes its CSV and SVG; returns the files written.
fn write_outputs(tables: &Tables, out_dir: &Path, mode: &str) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    if tables.tables.is_empty() {
        return Ok(files);
    }
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let mut report = format!("# cargo xtask bench\n\nMode: {mode}.\n");
    for table in &tables.tables {
        let table_mode = if table.arch == HOST { "host" } else { mode };
        println!();
        let text = render_text(table, table_mode);
        print!("{text}");
        let stem = format!("{}-{}", table.arch, table.name);
        let csv = out_dir.join(format!("{stem}.csv"));
        std::fs::write(&csv, to_csv(table))
            .with_context(|| format!("writing {}", csv.display()))?;
        files.push(csv);
        let charted = match to_svg(table, table_mode) {
            Ok(Some(svg)) => {
                let path = out_dir.join(format!("{stem}.svg"));
                std::fs::write(&path, svg)
                    .with_context(|| format!("writing {}", path.display()))?;
                files.push(path);
                true
            }
            Ok(None) => {
                println!("  (no numeric column: no chart)");
                false
            }
            Err(error) => {
                println!("  (no chart: {error:#})");
                false
            }
        };
        report.push_str(&report_section(table, &text, charted));
    }
    println!();
    let path = out_dir.join(REPORT);
    std::fs::write(&path, report).with_context(|| format!("writing {}", path.display()))?;
    files.push(path);
    Ok(files)
}

/// Every table of a run in one Markdown file, under `target/bench`.
pub const REPORT: &str = "report.md";

/// One table's section of [`REPORT`]: a heading, the text table as printed, its chart (the SVG
/// beside the report, shown inline by Markdown viewers) when one was drawn, and its files.
fn report_section(table: &Table, text: &str, charted: bool) -> String {
    let stem = format!("{}-{}", table.arch, table.name);
    let (chart, files) = if charted {
        (format!("\n![{} ({})]({stem}.svg)\n", table.name, table.arch), format!("`{stem}.csv`, `{stem}.svg`"))
    } else {
        (String::new(), format!("`{stem}.csv`"))
    };
    format!("\n## {} ({})\n\n```text\n{text}```\n{chart}\nFiles: {files}.\n", table.name, table.arch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_benchmark_build_holds_exactly_the_programs_its_boots_run() {
        let boots: Vec<(String, &Bench)> = BENCHES.iter().map(|b| (b.name.to_string(), b)).collect();
        let only = programs_to_build(&boots, &[]).expect("no --program: a chosen list");
        for name in ["uthread_bench", "stackthreads", "kn_cost", "s3_phases_8", "share_bench_b"] {
            assert!(only.contains(&name), "{name} missing from {only:?}");
        }
        // Each is a program of the tree, and the list has no repeats.
        let bins = workspace_root().join("userland/src/bin");
        for name in &only {
            assert!(bins.join(format!("{name}.rs")).is_file(), "{name} is no userland program");
        }
        assert!(only.windows(2).all(|w| w[0] < w[1]), "{only:?}");
        assert!(!only.contains(&"fuzz"), "{only:?}");
        // A user's programs: everything is built.
        assert!(programs_to_build(&boots, &[PathBuf::from("my_program")]).is_none());
    }

    #[test]
    fn report_sections_hold_the_printed_table() {
        let tables = crate::bench::test_support::cubix_tables();
        let text = render_text(&tables.tables[0], "tcg");
        let section = report_section(&tables.tables[0], &text, true);
        assert!(section.starts_with("\n## cubix (x86_64)\n\n```text\ncubix (x86_64, tcg)\n"));
        assert!(
            section.ends_with("```\n\n![cubix (x86_64)](x86_64-cubix.svg)\n\nFiles: `x86_64-cubix.csv`, `x86_64-cubix.svg`.\n"),
            "{section}"
        );
        let without = report_section(&tables.tables[0], &text, false);
        assert!(without.ends_with("```\n\nFiles: `x86_64-cubix.csv`.\n"), "{without}");
    }

    #[test]
    fn plans_by_filter_and_arch() {
        let labels = |p: Vec<Planned>| p.into_iter().map(Planned::label).collect::<Vec<_>>();
        assert_eq!(
            labels(plan(&[Arch::X86_64], false, Some("switch"))),
            ["x86_64/switch"]
        );
        assert_eq!(
            labels(plan(&[Arch::X86_64, Arch::Riscv64], false, Some("tlb"))),
            [
                "x86_64/tlb",
                "x86_64/tlb-tagoff",
                "riscv64/tlb",
                "riscv64/tlb-tagoff"
            ]
        );
        assert_eq!(
            labels(plan(&[Arch::X86_64], false, Some("host"))),
            ["host/host", "host/host-stackthreads", "host/golang"]
        );
        let all = labels(plan(&[Arch::X86_64], true, None));
        assert_eq!(all.len(), BENCHES.len());
        assert_eq!(all.last().map(String::as_str), Some("host/golang"));
        assert!(!labels(plan(&[Arch::X86_64], false, None)).contains(&"host/host".to_string()));
        assert!(plan(&[Arch::X86_64], true, Some("nothing")).is_empty());
    }
}
