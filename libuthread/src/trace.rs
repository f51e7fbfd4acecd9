//! User-thread switch records for `cargo xtask trace` (libuthread's `trace` feature, on
//! Tsumugi only).
//!
//! The scheduler calls [`user_switch`] at one place, where a vCPU takes the user thread it runs
//! next (`sched::scheduler::prepare`, which every resume and start goes through). With the
//! feature (which only `cargo xtask trace` turns on, in a build of its own) the call appends
//! (time, thread) to the vCPU's buffer — plain stores, since only that vCPU writes it and it does
//! so with LTN = 0 —, reading the same counter the kernel stamps its records with (x86_64 the
//! TSC, riscv64 `cycle`, aarch64 `CNTVCT_EL0`, all readable in user mode). When [`crate::run`]
//! returns, [`dump`] prints the buffers on the console in `tsumugi_abi::trace`'s encoding.
//! Without the feature both are empty and inlined away.

#[cfg(all(feature = "trace", target_os = "none"))]
pub(crate) use on::*;

#[cfg(not(all(feature = "trace", target_os = "none")))]
pub(crate) use off::*;

#[cfg(not(all(feature = "trace", target_os = "none")))]
mod off {
    /// vCPU `v` is about to run the user thread `t` (its ThMB address).
    #[inline(always)]
    pub(crate) fn user_switch(_v: usize, _t: usize) {}
    /// Prints the records (when `run` returns).
    #[inline(always)]
    pub(crate) fn dump() {}
}

#[cfg(all(feature = "trace", target_os = "none"))]
mod on {
    use core::cell::UnsafeCell;
    use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    use tsumugi_abi::kn::MAX_VCPUS;
    use tsumugi_abi::trace::{self, Kind, Record};

    /// Records kept per vCPU (16 bytes each: 32 KiB per vCPU, zero-on-touch `.bss`).
    pub const RECORDS_PER_VCPU: usize = 2048;

    struct VcpuTrace {
        len: AtomicUsize,
        dropped: AtomicU64,
        /// (time, thread) pairs.
        records: UnsafeCell<[(u64, u64); RECORDS_PER_VCPU]>,
    }

    // SAFETY: a vCPU's records are written only by that vCPU (LTN = 0, so nothing else runs
    // on it meanwhile) and read by `dump` after every vCPU has retired.
    unsafe impl Sync for VcpuTrace {}

    #[allow(clippy::declare_interior_mutable_const)]
    const VCPU_TRACE: VcpuTrace =
        VcpuTrace { len: AtomicUsize::new(0), dropped: AtomicU64::new(0), records: UnsafeCell::new([(0, 0); RECORDS_PER_VCPU]) };
    static TRACES: [VcpuTrace; MAX_VCPUS] = [VCPU_TRACE; MAX_VCPUS];

    /// The counter the kernel stamps its records with.
    #[inline(always)]
    fn now() -> u64 {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: rdtsc has no side effects; the kernel leaves it to user mode.
        return unsafe { core::arch::x86_64::_rdtsc() };
        #[cfg(target_arch = "riscv64")]
        {
            let v: u64;
            // SAFETY: reads `cycle`, which the kernel lets user mode read (`scounteren.CY`).
            unsafe { core::arch::asm!("rdcycle {}", out(reg) v, options(nomem, nostack, preserves_flags)) };
            v
        }
        #[cfg(target_arch = "aarch64")]
        {
            let v: u64;
            // SAFETY: reads `CNTVCT_EL0`, which the kernel lets EL0 read (`CNTKCTL_EL1.EL0VCTEN`).
            unsafe { core::arch::asm!("isb", "mrs {}, cntvct_el0", out(reg) v, options(nomem, nostack, preserves_flags)) };
            v
        }
    }

    /// vCPU `v` is about to run the user thread `t` (its ThMB address).
    #[inline(always)]
    pub(crate) fn user_switch(v: usize, t: usize) {
        let Some(b) = TRACES.get(v) else { return };
        let n = b.len.load(Ordering::Relaxed);
        if n >= RECORDS_PER_VCPU {
            b.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // SAFETY: slot `n` is this vCPU's and unpublished (see `VcpuTrace`).
        unsafe { (*b.records.get())[n] = (now(), t as u64) };
        b.len.store(n + 1, Ordering::Release);
    }

    /// Prints every vCPU's records as streams `user<K>.v<V>` (K: the calling kernel thread,
    /// whose program the kernel's records name), then empties them.
    pub(crate) fn dump() {
        let me = crate::sys::thread_self();
        for (v, b) in TRACES.iter().enumerate() {
            let n = b.len.load(Ordering::Acquire).min(RECORDS_PER_VCPU);
            let dropped = b.dropped.load(Ordering::Relaxed);
            if n == 0 && dropped == 0 {
                continue;
            }
            // SAFETY: every vCPU has retired (`run` returned): nobody writes the buffer now.
            let records = unsafe { &(&*b.records.get())[..n] };
            let lines = trace::encode(
                records.iter().map(|&(time, thread)| Record { time, kind: Kind::UserSwitch, a: 0, b: thread }),
                |line, text| crate::println!("{}user{me}.v{v} {line} {text}", trace::LINE),
            );
            crate::println!("{}user{me}.v{v} lines={lines} records={n} dropped={dropped}", trace::END);
            b.len.store(0, Ordering::Relaxed);
            b.dropped.store(0, Ordering::Relaxed);
        }
    }
}
