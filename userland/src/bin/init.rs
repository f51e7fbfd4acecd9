//! The default program: greets from ring 3, then a short tour of what Tsumugi is, each line
//! saying what it shows — one address space where views decide who may touch what (two
//! threads in different views share a buffer by its pointer), thread-view-affinity
//! scheduling (view switches saved), TLB misses where the port counts them, and M:N user
//! threads over vCPUs with the kernel handing a vCPU back (an upcall) when a thread blocks.
//! Exits 0 unless a step fails; a few seconds of TCG time.
//!
//! The kernel-thread steps run before `libuthread::run`, which registers the program for Kernel
//! Notification: from then on its kernel threads are vCPUs.
#![no_std]
#![no_main]

extern crate alloc;

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use core::time::Duration;

use alloc::vec::Vec;
use libuthread::{println, scope, sys, Clock, Counter, Errno, Event};
use tsumugi_abi::syscall::{rights, ViewEntry};

/// The text the main thread leaves in the shared buffer.
const MESSAGE: &[u8] = b"written by init's main thread";
/// Bytes of one page.
const PAGE: usize = 4096;
/// Stack of each kernel thread the tour starts.
const STACK: usize = 16 * 1024;

fn main() -> i32 {
    println!("init: hello from ring 3");
    let (_, cpus) = sys::counters(scope::ALL_CPUS).unwrap_or(([0; Counter::COUNT], 1));
    println!("init: a tour of Tsumugi on {cpus} CPU(s); each line says what it shows");
    let steps: [(&str, fn() -> Result<(), &'static str>); 4] = [
        ("views", views),
        ("affinity", affinity),
        ("tlb", tlb),
        ("threads", threads),
    ];
    let mut failed = 0;
    for (name, step) in steps {
        if let Err(why) = step() {
            println!("init: {name}: FAILED: {why}");
            failed += 1;
        }
    }
    let nanos = sys::clock(Clock::MonotonicNanos).unwrap_or(0);
    let ticks = sys::clock(Clock::Ticks).unwrap_or(0);
    println!("init: {} ms since boot, {} timer ticks on this CPU; the kernel's report follows", nanos / 1_000_000, ticks);
    if failed == 0 { 0 } else { 1 }
}

// ---- 1. One address space, per-thread views -------------------------------------------------

/// Where the reader is: 0 waiting, 1 asked to look at its view, 2 looked, 3 asked to read.
static STAGE: AtomicUsize = AtomicUsize::new(0);
/// The reader's findings: regions in its view, whether the buffer was among them, its rights.
static READER_REGIONS: AtomicUsize = AtomicUsize::new(0);
static READER_SAW_BUFFER: AtomicBool = AtomicBool::new(false);
static READER_RIGHTS: AtomicUsize = AtomicUsize::new(0);
/// Whether the reader found the message through the pointer.
static READER_READ_IT: AtomicBool = AtomicBool::new(false);

/// The caller's view: (regions, rights on `buffer` if it holds it).
fn my_view(buffer: usize) -> (usize, Option<usize>) {
    let mut entries = [ViewEntry { start: 0, len: 0, rights: 0, kind: 0 }; 32];
    let count = sys::view_query(&mut entries).unwrap_or(0);
    let rights = entries[..count.min(entries.len())]
        .iter()
        .find(|e| e.start as usize == buffer)
        .map(|e| e.rights as usize);
    (count, rights)
}

fn wait_for(stage: usize) {
    while STAGE.load(Ordering::Acquire) != stage {
        sys::yield_now();
    }
}

/// The second thread: looks at its view before and after the grant, then reads the buffer.
fn reader(buffer: usize) -> usize {
    wait_for(1);
    let (regions, rights) = my_view(buffer);
    READER_REGIONS.store(regions, Ordering::Relaxed);
    READER_SAW_BUFFER.store(rights.is_some(), Ordering::Relaxed);
    STAGE.store(2, Ordering::Release);
    wait_for(3);
    let (_, rights) = my_view(buffer);
    READER_RIGHTS.store(rights.unwrap_or(0), Ordering::Relaxed);
    if rights.is_some_and(|r| r & rights::READ != 0) {
        // SAFETY: the grant put the buffer into this thread's view, readable; the main thread
        // wrote MESSAGE there before granting and no longer writes.
        let seen = unsafe { core::slice::from_raw_parts(buffer as *const u8, MESSAGE.len()) };
        READER_READ_IT.store(seen == MESSAGE, Ordering::Relaxed);
    }
    0
}

/// Spelled as the kernel's reports spell rights.
fn rights_text(r: usize) -> &'static str {
    match (r & rights::READ != 0, r & rights::WRITE != 0) {
        (true, true) => "rw-",
        (true, false) => "r--",
        (false, true) => "-w-",
        (false, false) => "---",
    }
}

fn views() -> Result<(), &'static str> {
    let buffer = sys::region_create(PAGE, rights::READ | rights::WRITE, 0).map_err(|_| "region_create")?;
    // SAFETY: the new region is in this thread's view, read-write, and nobody else's yet.
    unsafe { core::ptr::copy_nonoverlapping(MESSAGE.as_ptr(), buffer as *mut u8, MESSAGE.len()) };
    let tid = sys::spawn(reader, buffer, STACK, false).map_err(|_| "spawn")?;
    // A new thread starts in its creator's view; take the buffer out of the reader's.
    sys::region_revoke(buffer, tid).map_err(|_| "region_revoke")?;
    STAGE.store(1, Ordering::Release);
    wait_for(2);
    let (mine, my_rights) = my_view(buffer);
    println!(
        "init: views: every program and thread shares one address space, but each thread runs in a view \
         (its own page table) holding only the regions it was given"
    );
    println!(
        "init: views: main thread: {mine} regions, buffer 0x{buffer:x} {}; second thread: {} regions, {}",
        rights_text(my_rights.unwrap_or(0)),
        READER_REGIONS.load(Ordering::Relaxed),
        if READER_SAW_BUFFER.load(Ordering::Relaxed) { "buffer still there (revoke failed?)" } else { "no buffer" }
    );
    sys::region_grant(buffer, rights::READ, tid).map_err(|_| "region_grant")?;
    STAGE.store(3, Ordering::Release);
    sys::thread_join(tid).map_err(|_| "thread_join")?;
    STAGE.store(0, Ordering::Relaxed);
    let read_it = READER_READ_IT.load(Ordering::Relaxed);
    println!(
        "init: views: after region_grant(read) the second thread holds it {} and read \"{}\" at the same \
         pointer 0x{buffer:x}: sharing is passing a pointer, no copy and no mapping to agree on \
         (between programs: run=share_writer+share_reader)",
        rights_text(READER_RIGHTS.load(Ordering::Relaxed)),
        if read_it { core::str::from_utf8(MESSAGE).unwrap_or("") } else { "something else" }
    );
    if READER_SAW_BUFFER.load(Ordering::Relaxed) || !read_it {
        return Err("the second thread's view did not follow the revoke and grant");
    }
    Ok(())
}

// ---- 2. Thread-view affinity ------------------------------------------------------------------

/// Kernel threads per affinity phase, spread over [`AFFINITY_VIEWS`] views.
const AFFINITY_THREADS: usize = 8;
const AFFINITY_VIEWS: usize = 2;
/// Yields of each thread per phase.
const AFFINITY_YIELDS: usize = 20;
static AFFINITY_REGIONS: [AtomicUsize; AFFINITY_VIEWS] = [const { AtomicUsize::new(0) }; AFFINITY_VIEWS];
static AFFINITY_GO: AtomicBool = AtomicBool::new(false);
static AFFINITY_CPU: AtomicUsize = AtomicUsize::new(0);

/// A worker: on the tour's CPU, touches its view's region and yields.
fn affinity_worker(i: usize) -> usize {
    // All on one CPU: grouping is a property of one run queue.
    if sys::thread_pin(Some(AFFINITY_CPU.load(Ordering::Relaxed))).is_err() {
        return 1;
    }
    while !AFFINITY_GO.load(Ordering::Acquire) {
        sys::yield_now();
    }
    let region = AFFINITY_REGIONS[i % AFFINITY_VIEWS].load(Ordering::Relaxed);
    for round in 0..AFFINITY_YIELDS {
        // SAFETY: this thread's view holds its region read-write; each thread its own word.
        unsafe { (region as *mut u64).add(i).write_volatile(round as u64) };
        sys::yield_now();
    }
    0
}

/// One phase: (context switches, view switches) of this program while the workers yield.
fn affinity_phase(on: bool) -> Result<(u64, u64), &'static str> {
    sys::sched_affinity(Some(on)).map_err(|_| "sched_affinity")?;
    AFFINITY_GO.store(false, Ordering::Release);
    let mut tids = [0usize; AFFINITY_THREADS];
    for (i, tid) in tids.iter_mut().enumerate() {
        *tid = sys::spawn(affinity_worker, i, STACK, true).map_err(|_| "spawn")?;
        for (v, region) in AFFINITY_REGIONS.iter().enumerate() {
            if v != i % AFFINITY_VIEWS {
                sys::region_revoke(region.load(Ordering::Relaxed), *tid).map_err(|_| "region_revoke")?;
            }
        }
    }
    let (before, _) = sys::counters(scope::DOMAIN).map_err(|_| "counters")?;
    AFFINITY_GO.store(true, Ordering::Release);
    for tid in tids {
        if sys::thread_join(tid).map_err(|_| "thread_join")? != 0 {
            return Err("a worker could not pin itself");
        }
    }
    let (after, _) = sys::counters(scope::DOMAIN).map_err(|_| "counters")?;
    let delta = |c: Counter| after[c as usize] - before[c as usize];
    Ok((delta(Counter::ContextSwitches), delta(Counter::ViewSwitches)))
}

fn affinity() -> Result<(), &'static str> {
    AFFINITY_CPU.store(sys::cpu_id(), Ordering::Relaxed);
    for region in &AFFINITY_REGIONS {
        let r = sys::region_create(PAGE, rights::READ | rights::WRITE, 0).map_err(|_| "region_create")?;
        region.store(r, Ordering::Relaxed);
    }
    let was_on = sys::sched_affinity(None).map_err(|_| "sched_affinity")?;
    let off = affinity_phase(false);
    let on = affinity_phase(true);
    sys::sched_affinity(Some(was_on)).map_err(|_| "sched_affinity")?;
    let (off, on) = (off?, on?);
    println!(
        "init: affinity: {AFFINITY_THREADS} threads in {AFFINITY_VIEWS} views yield {AFFINITY_YIELDS} times each on one CPU; \
         a switch between views loads another page table (a view switch)"
    );
    println!(
        "init: affinity: scheduler without thread-view affinity: {} switches, {} view switches; with it \
         (a view's threads run back to back): {} switches, {} view switches",
        off.0, off.1, on.0, on.1
    );
    Ok(())
}

// ---- 3. TLB misses ----------------------------------------------------------------------------

/// Pages the TLB step reads.
const TLB_PAGES: usize = 64;

fn tlb() -> Result<(), &'static str> {
    let handle = match sys::perf_open(Event::DtlbMiss) {
        Ok(handle) => handle,
        Err(Some(Errno::NotSup)) => {
            println!(
                "init: tlb: this port counts no TLB misses under QEMU (perf_open(DtlbMiss) answers ENOTSUP, \
                 never a silent 0); riscv64 counts them through the SBI PMU"
            );
            return Ok(());
        }
        Err(_) => return Err("perf_open"),
    };
    let region = sys::region_create(TLB_PAGES * PAGE, rights::READ | rights::WRITE, 0).map_err(|_| "region_create")?;
    let pass = || {
        let start = sys::perf_read(handle).unwrap_or(0);
        for page in 0..TLB_PAGES {
            // SAFETY: the region is in this thread's view, readable, TLB_PAGES pages long.
            unsafe { ((region + page * PAGE) as *const u8).read_volatile() };
        }
        sys::perf_read(handle).unwrap_or(0) - start
    };
    sys::perf_start(handle).map_err(|_| "perf_start")?;
    let first = pass();
    let second = pass();
    let _ = sys::perf_close(handle);
    println!(
        "init: tlb: reading one byte of each of {TLB_PAGES} new pages: {first} data-TLB misses; again at once: {second} \
         (the translations are cached now; counted by the CPU's PMU for this thread)"
    );
    Ok(())
}

// ---- 4. M:N threads ---------------------------------------------------------------------------

/// User threads and vCPUs of the M:N step.
const USER_THREADS: usize = 16;
const VCPUS: usize = 2;
/// How long each user thread sleeps in the kernel.
const NAP: Duration = Duration::from_millis(2);

fn threads() -> Result<(), &'static str> {
    // Per thread: (the vCPU it started on, the vCPU it woke up on).
    let results: Vec<(usize, usize)> = libuthread::run(VCPUS, || {
        let threads: Vec<_> = (0..USER_THREADS)
            .map(|_| {
                libuthread::spawn(|| {
                    let start = libuthread::current_vcpu().unwrap_or(usize::MAX);
                    libuthread::sleep(NAP);
                    (start, libuthread::current_vcpu().unwrap_or(usize::MAX))
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap_or((usize::MAX, usize::MAX))).collect()
    });
    let (mut started, mut woke) = ([0usize; VCPUS], [0usize; VCPUS]);
    for &(start, end) in &results {
        if start >= VCPUS || end >= VCPUS {
            return Err("a user thread ran outside the runtime's vCPUs");
        }
        started[start] += 1;
        woke[end] += 1;
    }
    println!(
        "init: threads: {USER_THREADS} user threads (libuthread) over {VCPUS} vCPUs, kernel threads on which the \
         program schedules its threads itself; each thread napped {} ms in the kernel",
        NAP.as_millis()
    );
    println!(
        "init: threads: started per vCPU {started:?}, woke up per vCPU {woke:?}: a nap blocks only its thread \
         (the kernel hands the vCPU back at once with a BLOCKED upcall, so the others run on it), and a \
         woken thread goes on wherever a vCPU is free; the kernel's report below counts the upcalls"
    );
    Ok(())
}

libuthread::entry!(main);
