//! Event tracing for `cargo xtask trace` (the kernel's `trace` feature).
//!
//! The scheduler, the syscall dispatch and Kernel Notification call the functions here, one
//! line each, where they bump the counters the trace is checked against: kernel thread
//! switches, switches to the idle loop, view switches, upcalls by kind, preemptions and
//! syscalls. Built without the feature (every normal build, test and benchmark) each function
//! is an empty `#[inline(always)]` body: the hot paths compile to exactly what they were.
//!
//! Built with it, each CPU appends fixed-size records to its own buffer in `.bss` (only that
//! CPU writes it, with interrupts off, so no lock and no atomic read-modify-write); a full
//! buffer counts what it drops. At halt [`dump_at_halt`] prints every CPU's records over the
//! serial console in the encoding of `tsumugi_abi::trace`, each CPU's counters beside them,
//! and `trace-done`; `xtask` decodes them into a Perfetto trace.

#[cfg(feature = "trace")]
pub use on::*;

#[cfg(not(feature = "trace"))]
pub use off::*;

/// Without the feature: nothing at all.
#[cfg(not(feature = "trace"))]
mod off {
    use crate::thread::Thread;

    /// The CPU switches to `next` (a counted context switch).
    #[inline(always)]
    pub fn switch(_next: &Thread) {}
    /// The CPU switches to its idle loop.
    #[inline(always)]
    pub fn idle() {}
    /// The CPU loaded root frame `root`; `flushed` if the whole TLB went with it.
    #[inline(always)]
    pub fn view_switch(_root: u64, _flushed: bool) {}
    /// An upcall of `kind` goes to program `program` on the current kernel thread.
    #[inline(always)]
    pub fn upcall(_program: u64, _kind: u64) {}
    /// The current thread was preempted and runs again.
    #[inline(always)]
    pub fn preempted() {}
    /// Syscall `number` entered the kernel.
    #[inline(always)]
    pub fn syscall(_number: usize) {}
    /// Prints the trace at halt.
    #[inline(always)]
    pub fn dump_at_halt() {}
}

#[cfg(feature = "trace")]
mod on {
    use core::cell::UnsafeCell;
    use core::mem::MaybeUninit;
    use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    use tsumugi_abi::stats::Counter;
    use tsumugi_abi::trace::{self, Kind, Record};

    use crate::sched::scheduler::{self, MAX_CPUS};
    use crate::thread::{Thread, NOT_A_VCPU};

    /// Records each CPU keeps (24 bytes each: 384 KiB per CPU, 3 MiB of `.bss` for 8 CPUs).
    pub const RECORDS_PER_CPU: usize = 16 * 1024;

    struct CpuTrace {
        len: AtomicUsize,
        dropped: AtomicU64,
        records: UnsafeCell<[MaybeUninit<Record>; RECORDS_PER_CPU]>,
    }

    // SAFETY: `records` is written only by its own CPU with interrupts off (kernel code), below
    // `len`'s published value; others read it only at halt, after every CPU stopped recording
    // (they are idle: every program has ended).
    unsafe impl Sync for CpuTrace {}

    // Uninitialised, so the buffers take `.bss`, not 3 MiB of the image.
    const EMPTY: MaybeUninit<Record> = MaybeUninit::uninit();
    #[allow(clippy::declare_interior_mutable_const)]
    const CPU_TRACE: CpuTrace =
        CpuTrace { len: AtomicUsize::new(0), dropped: AtomicU64::new(0), records: UnsafeCell::new([EMPTY; RECORDS_PER_CPU]) };
    static TRACES: [CpuTrace; MAX_CPUS] = [CPU_TRACE; MAX_CPUS];

    #[inline]
    fn record(kind: Kind, a: u64, b: u64) {
        let t = &TRACES[arch::cpu::cpu_index()];
        let n = t.len.load(Ordering::Relaxed);
        if n >= RECORDS_PER_CPU {
            t.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let r = Record { time: arch::timer::cycles(), kind, a, b };
        // SAFETY: slot `n` is this CPU's and unpublished (see `CpuTrace`).
        unsafe { (*t.records.get())[n] = MaybeUninit::new(r) };
        t.len.store(n + 1, Ordering::Release);
    }

    fn vcpu_of(t: &Thread) -> Option<usize> {
        match t.vcpu.load(Ordering::Relaxed) {
            NOT_A_VCPU => None,
            v => Some(v),
        }
    }

    /// The CPU switches to `next` (a counted context switch).
    pub fn switch(next: &Thread) {
        let program = next.domain.as_ref().map_or(0, |d| d.id);
        record(Kind::Switch, next.id, trace::program_vcpu(program, vcpu_of(next)));
    }

    /// The CPU switches to its idle loop.
    pub fn idle() {
        record(Kind::Idle, 0, 0);
    }

    /// The CPU loaded root frame `root`; `flushed` if the whole TLB went with it.
    pub fn view_switch(root: u64, flushed: bool) {
        record(Kind::ViewSwitch, u64::from(flushed), root);
    }

    /// An upcall of `kind` goes to program `program` on the current kernel thread.
    pub fn upcall(program: u64, kind: u64) {
        let vcpu = scheduler::with_current(|t| t.and_then(vcpu_of));
        record(Kind::Upcall, kind, trace::program_vcpu(program, vcpu));
    }

    /// The current thread was preempted and runs again.
    pub fn preempted() {
        let id = scheduler::with_current(|t| t.map_or(0, |t| t.id));
        record(Kind::Preempt, id, arch::cpu::user_ltn());
    }

    /// Syscall `number` entered the kernel.
    pub fn syscall(number: usize) {
        record(Kind::Syscall, number as u64, arch::cpu::user_ltn());
    }

    /// Prints every CPU's records, counters and `trace-done` (see `tsumugi_abi::trace`). Call
    /// at halt, when every program has ended: the other CPUs idle and record nothing.
    pub fn dump_at_halt() {
        crate::println!("{}hz={}", trace::CLOCK, arch::timer::cycles_hz());
        for (i, t) in TRACES.iter().enumerate() {
            if !scheduler::CPUS[i].online.load(Ordering::Acquire) {
                continue;
            }
            // Counters first: the dump records nothing, so the records match them.
            let c = &scheduler::CPUS[i].counters;
            let (switches, views, preemptions) =
                (c.get(Counter::ContextSwitches), c.get(Counter::ViewSwitches), c.get(Counter::Preemptions));
            let n = t.len.load(Ordering::Acquire).min(RECORDS_PER_CPU);
            // SAFETY: records below the published length are written and complete; their CPU
            // idles.
            let records = unsafe { &(&*t.records.get())[..n] };
            // SAFETY: as above: initialised.
            let lines = trace::encode(records.iter().map(|r| unsafe { r.assume_init() }), |line, text| {
                crate::println!("{}cpu{i} {line} {text}", trace::LINE);
            });
            crate::println!("{}cpu{i} lines={lines} records={n} dropped={}", trace::END, t.dropped.load(Ordering::Relaxed));
            crate::println!(
                "{}cpu{i} switches={switches} view-switches={views} preemptions={preemptions}",
                trace::COUNTERS
            );
        }
        crate::println!("{}", trace::DONE);
    }
}
