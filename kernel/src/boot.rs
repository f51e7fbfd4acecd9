//! The kernel's main line after the port's boot code: bring up memory, traps and the timer,
//! print the banner, run the self-tests and programs the command line asks for, and end the
//! machine with the last program's status.

use alloc::string::String;
use arch::addr::PhysAddr;
use arch::bootinfo::BootInfo;
use tsumugi_abi::bootopt::{self, Crash};
use tsumugi_abi::exit::{guest_status_for_program, STATUS_KERNEL_PANIC, STATUS_PROGRAM_KILLED};
use tsumugi_abi::log::{DOMAIN, EXITED, HALTING, KILLED};

use crate::domain::Domain;
use crate::initrd::Archive;
use crate::mm::kernel_space::{self, phys_to_virt};
use crate::thread::{self, Outcome};

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
    arch::cpu::enable_interrupts();
    println!("timer: {} Hz tick, cycle counter {} MHz, tick timer {} kHz", TICK_HZ, cal.cycles_hz / 1_000_000, cal.timer_hz / 1000);

    let initrd = info.initrd.map(|(start, end)| {
        let len = (end.as_u64() - start.as_u64()) as usize;
        // SAFETY: the boot archive's frames are reserved in the allocator and covered by the
        // direct map; nothing writes them.
        let bytes = unsafe { core::slice::from_raw_parts(phys_to_virt(PhysAddr::new(start.as_u64())).as_ptr::<u8>(), len) };
        Archive::new(bytes)
    });
    match &initrd {
        Some(_) => println!("boot archive: {} KiB", info.initrd.map(|(s, e)| (e.as_u64() - s.as_u64()) / 1024).unwrap_or(0)),
        None => println!("boot archive: none (QEMU -initrd not given)"),
    }

    if let Some(crash) = bootopt::get(cmdline, bootopt::CRASH) {
        crash_on_purpose(crash);
    }

    let mut failed_selftests = 0;
    if let Some(filter) = bootopt::get(cmdline, bootopt::SELFTEST) {
        let (_, failed) = crate::selftest::run(filter, &crate::selftest::Context { initrd: initrd.clone() });
        failed_selftests = failed;
    }

    let programs = bootopt::get(cmdline, bootopt::RUN).unwrap_or(bootopt::DEFAULT_PROGRAM);
    let mut status = 0;
    for name in programs.split(',').filter(|n| !n.is_empty()) {
        status = run_program(initrd.as_ref(), name);
    }
    if failed_selftests > 0 && status == 0 {
        status = 1;
    }
    println!("timer ticks on cpu 0: {}", crate::trap::ticks());
    println!("{HALTING}{status}");
    arch::cpu::shutdown(status)
}

/// Loads and runs one program from the boot archive; returns the guest status it stands for.
fn run_program(initrd: Option<&Archive>, name: &str) -> u8 {
    let Some(archive) = initrd else {
        println!("cannot run {name}: no boot archive");
        return STATUS_PROGRAM_KILLED;
    };
    let bytes = match archive.find(name) {
        Ok(Some(entry)) => entry.data,
        Ok(None) => {
            println!("cannot run {name}: not in the boot archive");
            return STATUS_PROGRAM_KILLED;
        }
        Err(e) => {
            println!("cannot run {name}: boot archive damaged: {e:?}");
            return STATUS_PROGRAM_KILLED;
        }
    };
    let domain = match Domain::load(name, bytes) {
        Ok(d) => d,
        Err(e) => {
            println!("cannot run {name}: {e}");
            return STATUS_PROGRAM_KILLED;
        }
    };
    println!("{DOMAIN}{} {}: started at {:#x}", domain.id, domain.name, domain.entry.as_u64());
    let outcome = match thread::run(&domain) {
        Ok(o) => o,
        Err(_) => Outcome::Killed(String::from("no memory for a kernel stack")),
    };
    match outcome {
        Outcome::Exited(code) => {
            println!("{DOMAIN}{} {}{EXITED}{code}", domain.id, domain.name);
            guest_status_for_program(code)
        }
        Outcome::Killed(why) => {
            println!("{DOMAIN}{} {}{KILLED}{why}", domain.id, domain.name);
            STATUS_PROGRAM_KILLED
        }
    }
}

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
