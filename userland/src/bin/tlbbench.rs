//! The Cubix experiment (Teramoto & Okamoto): two threads read 4 bytes at the start of one
//! shared 4 MiB region and yield to each other. Per thread: DTLB misses, ITLB misses and cycles
//! per turn, with affinity off (each thread its own page table) and on (one shared table), and
//! again for a working set touching every page of the region. Events the machine cannot count
//! print `unsupported`; the kernel's software counters (view switches, TLB flushes) stand in.
//! Run on one CPU (`cpus=1`) so the threads alternate; `tlbtag=off` for the untagged setting.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicUsize, Ordering};
use libuthread::{print, println, sys};
use tsumugi_abi::perf::Event;
use tsumugi_abi::syscall::rights;

const REGION: usize = 4 << 20;
const PAGE: usize = 4096;
const WARMUP: usize = 20;
const TURNS: usize = 200;
const EVENTS: [Event; 5] = [Event::DtlbMiss, Event::ItlbMiss, Event::Cycles, Event::ViewSwitches, Event::TlbFlushes];

static SHARED: AtomicUsize = AtomicUsize::new(0);
static ALL_PAGES: AtomicUsize = AtomicUsize::new(0);
static GO: AtomicUsize = AtomicUsize::new(0);
/// Per-thread results: EVENTS values per turn (u64::MAX = unsupported).
static RESULT: [[AtomicUsize; 5]; 2] = [const { [const { AtomicUsize::new(0) }; 5] }; 2];

fn touch() -> usize {
    let base = SHARED.load(Ordering::Relaxed);
    if ALL_PAGES.load(Ordering::Relaxed) == 0 {
        // SAFETY: the region is in this thread's view, readable.
        unsafe { (base as *const u32).read_volatile() as usize }
    } else {
        let mut sum = 0usize;
        for p in (0..REGION).step_by(PAGE) {
            // SAFETY: as above.
            sum = sum.wrapping_add(unsafe { ((base + p) as *const u32).read_volatile() } as usize);
        }
        sum
    }
}

fn worker(index: usize) -> usize {
    while GO.load(Ordering::Acquire) == 0 {
        sys::yield_now();
    }
    for _ in 0..WARMUP {
        touch();
        sys::yield_now();
    }
    let handles: [Option<usize>; 5] = EVENTS.map(|e| sys::perf_open(e).ok());
    for h in handles.iter().flatten() {
        let _ = sys::perf_start(*h);
    }
    for _ in 0..TURNS {
        touch();
        sys::yield_now();
    }
    for (i, h) in handles.iter().enumerate() {
        let v = match h {
            Some(h) => sys::perf_read(*h).map(|v| v / TURNS).unwrap_or(usize::MAX),
            None => usize::MAX,
        };
        RESULT[index][i].store(v, Ordering::Relaxed);
        if let Some(h) = h {
            let _ = sys::perf_close(*h);
        }
    }
    0
}

fn run(shared_table: bool, all_pages: bool, private: [usize; 2]) -> Option<()> {
    ALL_PAGES.store(usize::from(all_pages), Ordering::Relaxed);
    GO.store(0, Ordering::Release);
    let mut tids = [0usize; 2];
    for (i, t) in tids.iter_mut().enumerate() {
        *t = sys::spawn(worker, i, 32 * 1024, true).ok()?;
    }
    // Affinity off: each thread keeps a private region the other lacks (two page tables).
    // Affinity on: both lose both private regions (one view, one shared table).
    for (i, t) in tids.iter().enumerate() {
        for (j, p) in private.iter().enumerate() {
            if shared_table || i != j {
                sys::region_revoke(*p, *t).ok()?;
            }
        }
    }
    GO.store(1, Ordering::Release);
    for t in tids {
        sys::thread_join(t).ok()?;
    }
    let row = match (shared_table, all_pages) {
        (false, false) => "affinity_off_4B",
        (true, false) => "affinity_on_4B",
        (false, true) => "affinity_off_all_pages",
        (true, true) => "affinity_on_all_pages",
    };
    print!("BENCH table=cubix row={row}");
    for (t, thread) in ["t1", "t2"].iter().enumerate() {
        for (i, e) in EVENTS.iter().enumerate() {
            let v = RESULT[t][i].load(Ordering::Relaxed);
            if v == usize::MAX {
                print!(" {thread}_{}=unsupported", e.name());
            } else {
                print!(" {thread}_{}={v}", e.name());
            }
        }
    }
    println!();
    Some(())
}

fn main() -> i32 {
    let Ok(shared) = sys::region_create(REGION, rights::READ | rights::WRITE, 0) else { return 1 };
    SHARED.store(shared, Ordering::Relaxed);
    let mut private = [0usize; 2];
    for p in private.iter_mut() {
        let Ok(r) = sys::region_create(PAGE, rights::READ | rights::WRITE, 0) else { return 1 };
        *p = r;
    }
    // Main yields while it waits; keep it out of the measured alternation: it only joins.
    for (shared_table, all_pages) in [(false, false), (true, false), (false, true), (true, true)] {
        if run(shared_table, all_pages, private).is_none() {
            println!("tlbbench: FAILED");
            return 1;
        }
    }
    println!("tlbbench: done (paper, Pentium 90: 2nd thread w/o affinity 42 DTLB, 21 ITLB, 45,506 cycles; with affinity 0, 0, 8,470)");
    0
}
libuthread::entry!(main);
