//! The kernel's main line after the port's boot code: bring up memory, traps and the timer,
//! print the banner, run the self-tests and programs the command line asks for, and end the
//! machine with the last program's status.

use alloc::sync::Arc;
use arch::addr::PhysAddr;
use core::sync::atomic::{AtomicUsize, Ordering};
use arch::bootinfo::BootInfo;
use tsumugi_abi::bootopt::{self, Crash};
use tsumugi_abi::exit::{guest_status_for_program, STATUS_KERNEL_PANIC, STATUS_PROGRAM_KILLED};
use tsumugi_abi::log::{DOMAIN, GROUP, HALTING, HEAP_IN_USE};
use tsumugi_abi::stats::Counter;

use crate::domain::{Domain, Outcome};
use crate::initrd::Archive;
use crate::mm::kernel_space::{self, phys_to_virt};
use crate::mm::kernel_stack;
use crate::sched::scheduler;
use crate::thread;

/// Timer interrupts per second.
pub const TICK_HZ: u64 = 100;

/// Runs the kernel. Never returns: ends the machine with a status.
pub fn kernel_main(info: &'static BootInfo) -> ! {
    arch::serial::init();
    let features = arch::cpu::init_boot_cpu();
    arch::trap::install(crate::trap::handle);
    let cmdline = info.cmdline();
    let quiet = bootopt::get(cmdline, bootopt::QUIET).is_some();

    let mut brand = [0u8; 48];
    println!("Tsumugi {} ({}) booting on {} via {}", env!("CARGO_PKG_VERSION"), arch::NAME, arch::cpu::brand(&mut brand), info.protocol);
    println!("command line: \"{}\"{}", cmdline, if info.cmdline_truncated { " (truncated)" } else { "" });
    if !quiet {
        println!("memory map:");
        for r in info.memory_map() {
            println!("  {:#014x}-{:#014x} {:?}", r.start.as_u64(), r.end.as_u64(), r.kind);
        }
    }
    println!("cpu features: {features:?}");

    let report = match kernel_space::init(info) {
        Ok(r) => r,
        Err(why) => panic!("memory set-up failed: {why}"),
    };
    let heap = crate::mm::heap::init().unwrap_or_else(|why| panic!("{why}"));
    crate::mm::space::init();
    let tags = match bootopt::get(cmdline, bootopt::TLBTAG).map(bootopt::on_off) {
        Some(Some(false)) => 0,
        Some(None) => {
            println!("ignoring tlbtag: valid values are on, off");
            arch::tlb::enable_tags(&features)
        }
        _ => arch::tlb::enable_tags(&features),
    };
    crate::mm::cpu_tags::init(tags);
    println!("tlb tags: {}", if tags > 1 { "on" } else { "off (every view switch flushes)" });
    configure_scheduler(cmdline);
    println!(
        "memory: {} MiB free of {} MiB covered, heap {} KiB{}",
        report.free_frames * 4 / 1024,
        report.covered_frames * 4 / 1024,
        heap / 1024,
        if report.ignored_bytes > 0 { " (memory above 4 GiB ignored)" } else { "" }
    );

    let mut map_mmio = |pa: PhysAddr, len: u64| kernel_space::map_mmio(pa, len).ok().map(|va| va.as_u64());
    if let Err(why) = arch::interrupts::init(&mut map_mmio) {
        panic!("interrupt set-up failed: {why}");
    }
    let cal = arch::timer::init(TICK_HZ);
    let (fp_kind, fp_size) = arch::fpu::init_this_cpu(&features);
    arch::pmu::init_this_cpu();
    match bootopt::get(cmdline, bootopt::FPU) {
        Some("eager") => crate::fpu::set_mode(crate::fpu::Mode::Eager),
        Some("lazy") => crate::fpu::set_mode(crate::fpu::Mode::Lazy),
        Some("adaptive") | None => crate::fpu::set_mode(crate::fpu::Mode::Adaptive),
        Some(other) => println!("ignoring fpu={other}: valid values are adaptive, lazy, eager"),
    }
    println!("fpu: {fp_kind:?}, {fp_size}-byte save area, {} switching", crate::fpu::mode().name());
    match bootopt::get(cmdline, bootopt::KN) {
        Some("sa") => {
            crate::notify::sa_copy::SWITCH.turn_on();
            println!("kn: Scheduler-Activations copy baseline (kn=sa): contexts saved in kernel memory, copied out by kn_fetch");
        }
        Some("zerocopy") | None => {}
        Some(other) => println!("ignoring kn={other}: valid values are zerocopy, sa"),
    }
    match bootopt::get(cmdline, bootopt::PREEMPT) {
        Some("signal") => {
            crate::notify::signal::SWITCH.turn_on();
            println!("kn: signal-style preemption baseline (preempt=signal): signal frames on the thread's stack, kn_sigreturn");
        }
        Some("upcall") | None => {}
        Some(other) => println!("ignoring preempt={other}: valid values are upcall, signal"),
    }
    match bootopt::get(cmdline, bootopt::SHARE) {
        Some("time") => {
            crate::notify::processors::TIME_SHARING.turn_on();
            println!("kn: time-sharing baseline (share=time): every program keeps every vCPU it asked for");
        }
        Some("space") | None => {}
        Some(other) => println!("ignoring share={other}: valid values are space, time"),
    }
    println!("timer: {} Hz tick, cycle counter {} MHz, tick timer {} kHz", TICK_HZ, cal.cycles_hz / 1_000_000, cal.timer_hz / 1000);

    let initrd = info.initrd.map(|(start, end)| {
        let len = (end.as_u64() - start.as_u64()) as usize;
        // SAFETY: the boot archive's frames are reserved in the allocator and covered by the
        // direct map; nothing writes them.
        let bytes: &'static [u8] = unsafe { core::slice::from_raw_parts(phys_to_virt(PhysAddr::new(start.as_u64())).as_ptr::<u8>(), len) };
        Archive::new(bytes)
    });
    match &initrd {
        Some(_) => println!("boot archive: {} KiB", info.initrd.map(|(s, e)| (e.as_u64() - s.as_u64()) / 1024).unwrap_or(0)),
        None => println!("boot archive: none (QEMU -initrd not given)"),
    }

    if let Some(crash) = bootopt::get(cmdline, bootopt::CRASH) {
        crash_on_purpose(crash);
    }

    // The tests that need a second CPU, and the summary, come in `kmain` (CPUs up by then).
    if let Some(filter) = bootopt::get(cmdline, bootopt::SELFTEST) {
        let (passed, failed) = crate::selftest::run(filter, &crate::selftest::Context { initrd: initrd.clone() });
        PASSED_SELFTESTS.store(passed, Ordering::Relaxed);
        FAILED_SELFTESTS.store(failed, Ordering::Relaxed);
    }
    BOOT.call_once(|| Boot { cmdline, initrd });

    scheduler::cpu_online(kernel_space::kernel_root());
    crate::smp::set_hw_id(0, arch::cpu::hw_id());
    crate::smp::start_other_cpus(info, bootopt::get(cmdline, bootopt::CPUS).and_then(|v| v.parse().ok()));
    println!("cpus online: {}", scheduler::online_cpus());
    if thread::spawn_kernel(kmain).is_err() {
        panic!("no memory for the first kernel thread");
    }
    scheduler::idle_loop()
}

/// What the kernel thread `kmain` needs from boot.
struct Boot {
    cmdline: &'static str,
    initrd: Option<Archive<'static>>,
}

static BOOT: spin::Once<Boot> = spin::Once::new();
static FAILED_SELFTESTS: AtomicUsize = AtomicUsize::new(0);
/// Self-tests passed at boot, for the summary `kmain` prints.
static PASSED_SELFTESTS: AtomicUsize = AtomicUsize::new(0);

/// Reads the scheduling options of the command line.
fn configure_scheduler(cmdline: &str) {
    let mut policy = scheduler::policy();
    if let Some(v) = bootopt::get(cmdline, bootopt::AFFINITY) {
        match bootopt::on_off(v) {
            Some(on) => policy.affinity = on,
            None => println!("ignoring affinity={v}: valid values are on, off"),
        }
    }
    if let Some(v) = bootopt::get(cmdline, bootopt::GROUP_BOUND) {
        match v.parse::<u32>() {
            Ok(n) if n >= 1 => policy.group_bound = n,
            _ => println!("ignoring groupbound={v}: a number of turns, at least 1"),
        }
    }
    let quantum = match bootopt::get(cmdline, bootopt::QUANTUM).map(|v| v.parse::<u64>()) {
        Some(Ok(n)) if n >= 1 => n,
        Some(_) => {
            println!("ignoring quantum: a number of ticks, at least 1");
            DEFAULT_QUANTUM
        }
        None => DEFAULT_QUANTUM,
    };
    scheduler::configure(policy, quantum);
    if let Some(w) = bootopt::get(cmdline, "watchdog").and_then(|v| v.parse::<u64>().ok()) {
        scheduler::WATCHDOG_SECS.store(w, core::sync::atomic::Ordering::Relaxed);
    }
    println!("scheduler: affinity {}, group bound {}, quantum {} ticks", if policy.affinity { "on" } else { "off" }, policy.group_bound, quantum);
}

/// Default quantum in ticks.
const DEFAULT_QUANTUM: u64 = 2;

/// The first kernel thread: runs the programs of `run=` group by group, then ends the machine
/// with the last program's status.
fn kmain() -> ! {
    let boot = BOOT.get().expect("set before kmain starts");
    if let Some(filter) = bootopt::get(boot.cmdline, bootopt::SELFTEST) {
        let boot_counts = (PASSED_SELFTESTS.load(Ordering::Relaxed), FAILED_SELFTESTS.load(Ordering::Relaxed));
        let context = crate::selftest::Context { initrd: boot.initrd.clone() };
        let (_, failed) = crate::selftest::run_smp(filter, &context, boot_counts);
        FAILED_SELFTESTS.store(failed, Ordering::Relaxed);
    }
    let programs = bootopt::get(boot.cmdline, bootopt::RUN).unwrap_or(bootopt::DEFAULT_PROGRAM);
    let mut status = 0;
    for group in programs.split(',').filter(|g| !g.is_empty()) {
        // Frames free, counting those of the kernel-stack area's page tables as free: that
        // area grows with stack churn and is never given back (`kernel_stack::table_frames`).
        let stack_tables_before = kernel_stack::table_frames(kernel_stack::slots_made());
        let before = kernel_space::with_frames(|f| f.free_frames()) + stack_tables_before;
        let heap_before = crate::mm::heap::usage().0;
        // Every program of a `+` group is loaded before any starts, so they are all alive at
        // the same time by construction (not by how fast the first one happens to run).
        let mut loaded = alloc::vec::Vec::new();
        for name in group.split('+').filter(|n| !n.is_empty()) {
            match load_program(boot.initrd.as_ref(), name) {
                Ok(d) => loaded.push(d),
                Err(s) => status = s,
            }
        }
        let mut running = alloc::vec::Vec::new();
        for d in loaded {
            match start_program(d) {
                Ok(d) => running.push(d),
                Err(s) => status = s,
            }
        }
        for d in running {
            status = report(&d, d.wait());
        }
        crate::mm::space::settle_pending();
        let stack_tables_after = kernel_stack::table_frames(kernel_stack::slots_made());
        let after = kernel_space::with_frames(|f| f.free_frames()) + stack_tables_after;
        println!(
            "{GROUP}{group}: frames free before {before}, after {after} (with the kernel-stack area's table frames, {stack_tables_before} then {stack_tables_after})"
        );
        let heap_after = crate::mm::heap::usage().0;
        println!("{GROUP}{group}:{HEAP_IN_USE}{heap_before}, after {heap_after}");
    }
    if FAILED_SELFTESTS.load(Ordering::Relaxed) > 0 && status == 0 {
        status = 1;
    }
    crate::trace::dump_at_halt();
    let c = |counter| scheduler::CPUS.iter().map(|cpu| cpu.counters.get(counter)).sum::<u64>();
    println!(
        "counters: switches {}, view switches {}, tlb flushes {}, preemptions {}, steals {}, ipis {}",
        c(Counter::ContextSwitches),
        c(Counter::ViewSwitches),
        c(Counter::TlbFlushes),
        c(Counter::Preemptions),
        c(Counter::Steals),
        c(Counter::IpisSent)
    );
    println!("timer ticks on cpu 0: {}", crate::trap::ticks());
    println!("{HALTING}{status}");
    arch::cpu::shutdown(status)
}

/// Loads one program from the boot archive (not started yet); on failure returns the guest
/// status it stands for.
fn load_program(initrd: Option<&Archive>, name: &str) -> Result<Arc<Domain>, u8> {
    let Some(archive) = initrd else {
        println!("cannot run {name}: no boot archive");
        return Err(STATUS_PROGRAM_KILLED);
    };
    let bytes = match archive.find(name) {
        Ok(Some(entry)) => entry.data,
        Ok(None) => {
            println!("cannot run {name}: not in the boot archive");
            return Err(STATUS_PROGRAM_KILLED);
        }
        Err(e) => {
            println!("cannot run {name}: boot archive damaged: {e:?}");
            return Err(STATUS_PROGRAM_KILLED);
        }
    };
    let domain = Domain::load(name, bytes).map_err(|e| {
        println!("cannot run {name}: {e}");
        STATUS_PROGRAM_KILLED
    })?;
    println!("{DOMAIN}{} {}: started at {:#x}", domain.id, domain.name, domain.entry.as_u64());
    Ok(domain)
}

/// Starts a loaded program's first thread; on failure returns the guest status it stands for.
fn start_program(domain: Arc<Domain>) -> Result<Arc<Domain>, u8> {
    if let Err(e) = domain.start() {
        println!("cannot run {}: {e}", domain.name);
        domain.discard();
        return Err(STATUS_PROGRAM_KILLED);
    }
    Ok(domain)
}

/// Prints how a program ended; returns the guest status it stands for.
fn report(domain: &Domain, outcome: Outcome) -> u8 {
    let (switches, views) = (domain.counters.get(Counter::ContextSwitches), domain.counters.get(Counter::ViewSwitches));
    // The exit or kill line itself was printed by the domain when it finished.
    println!("  domain {}: {} threads, {switches} switches, {views} view switches", domain.id, domain.thread_count());
    let up = crate::notify::upcalls_total(domain);
    if up.iter().any(|&n| n > 0) {
        use tsumugi_abi::kn::EventKind as K;
        println!(
            "  domain {}: upcalls blocked {}, preempted {}, fault {}, vcpu granted {}",
            domain.id,
            up[K::Blocked as usize],
            up[K::Preempted as usize],
            up[K::Fault as usize],
            up[K::VcpuGranted as usize]
        );
    }
    match outcome {
        Outcome::Exited(code) => guest_status_for_program(code),
        Outcome::Killed(_) => STATUS_PROGRAM_KILLED,
    }
}

/// Out of line: the harness's hang probe must find `crash=hang`'s loop in this function by name.
#[inline(never)]
fn crash_on_purpose(how: &str) -> ! {
    match Crash::parse(how) {
        Some(Crash::Panic) => panic!("crash=panic asked for on the command line"),
        Some(Crash::PageFault) => {
            let bad = 0xffff_8fff_dead_0000u64 as *const u64;
            // SAFETY: not safe at all, on purpose: this address is unmapped in the kernel half
            // and the resulting page fault is what the boot option asks to see reported.
            let v = unsafe { core::ptr::read_volatile(bad) };
            panic!("read of an unmapped kernel address returned {v}");
        }
        Some(Crash::Hang) => {
            println!("hanging on purpose (crash=hang)");
            arch::cpu::disable_interrupts();
            loop {
                arch::cpu::spin_hint();
            }
        }
        None => {
            println!("unknown crash={how}; valid: panic, pagefault, hang");
            arch::cpu::shutdown(STATUS_KERNEL_PANIC)
        }
    }
}
