//! The Tsumugi platform: vCPUs are kernel threads handed out through Kernel Notification
//! (`tsumugi_abi::kn`), the LTN register is x86_64's GS base, riscv64's `tp` or aarch64's
//! `TPIDR_EL0`, blocking calls hand the vCPU back through `BLOCKED`/`UNBLOCKED` upcalls, and
//! stacks are regions of the single address space (the heap is `crate::heap`).
//!
//! The upcall handler ([`knh`]) runs on the vCPU's upcall stack with LTN = 0: it drains the
//! event ring into the core (`requeue_full` for `PREEMPTED`/`UNBLOCKED`, `note_blocked` for
//! `BLOCKED`) and re-enters the vCPU's scheduler loop. The ring is drained again whenever a vCPU
//! comes back from parking, so completions reach the library even when no upcall brings them.

use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use tsumugi_abi::kn::{Event, EventKind, Registration, RingHeader, MAX_VCPUS, PARK_GIVE_UP, PARK_IDLE, RING_SLOTS_OFFSET, UNBLOCKED_QUEUED};
use tsumugi_abi::stats::scope;
use tsumugi_abi::syscall::{region_flags, rights};

use crate::sys;
use crate::thmb::Thmb;

/// Slots of the event ring (a power of two).
const RING_SLOTS: usize = 256;
/// Bytes of each vCPU's upcall stack.
const UPCALL_STACK: usize = 64 * 1024;

/// The ring's address (0 until `start_vcpus`).
static RING: AtomicUsize = AtomicUsize::new(0);
/// Serialises draining (several vCPUs may drain at once).
static DRAINING: AtomicBool = AtomicBool::new(false);
/// The core's vCPU entry, for vCPUs the kernel starts.
static VCPU_MAIN: AtomicUsize = AtomicUsize::new(0);
/// Upcall-stack tops, one per vCPU, read by the kernel at registration.
static mut STACK_TOPS: [u64; MAX_VCPUS] = [0; MAX_VCPUS];

/// Whether the calling thread serves as a vCPU (on Tsumugi every thread with a non-null LTN
/// does: the kernel gives a new thread LTN = 0).
#[inline(always)]
pub fn on_vcpu_thread() -> bool {
    true
}

/// The running user thread's ThMB (one register read).
#[inline(always)]
pub fn ltn() -> *mut Thmb {
    sys::ltn_read() as *mut Thmb
}

/// Sets the LTN register.
#[inline(always)]
pub fn set_ltn(t: *mut Thmb) {
    sys::ltn_write(t as usize);
}

/// Sets LTN = 0 (entering a critical section): [`set_ltn`]`(null)` from the zero register
/// where the port has one (riscv64, aarch64: one instruction fewer per entry).
#[inline(always)]
pub fn clear_ltn() {
    sys::ltn_clear();
}

/// The number of CPUs the kernel runs.
pub fn default_vcpus() -> usize {
    sys::counters(scope::ALL_CPUS).map(|(_, cpus)| cpus).unwrap_or(1).max(1)
}

/// Registers for Kernel Notification with `n` vCPUs; the kernel starts vCPUs 1..n, each
/// entering the upcall handler (`knh`) with `VcpuGranted`, which calls `vcpu_main(v)`. The caller is vCPU 0.
pub fn start_vcpus(n: usize, vcpu_main: fn(usize) -> !) {
    let n = n.clamp(1, MAX_VCPUS);
    VCPU_MAIN.store(vcpu_main as usize, Ordering::Release);
    let ring_bytes = RING_SLOTS_OFFSET + RING_SLOTS * core::mem::size_of::<Event>();
    let ring = sys::region_create(ring_bytes, rights::READ | rights::WRITE, 0).unwrap_or_else(|e| fatal("ring region", e));
    // SAFETY: the region was just created writable for this thread and is big enough for the
    // header; nobody else knows it yet.
    unsafe {
        let h = ring as *mut RingHeader;
        (*h).head = 0;
        (*h).tail = 0;
        (*h).capacity = RING_SLOTS as u64;
        (*h).held_back = 0;
    }
    RING.store(ring, Ordering::Release);
    let stacks = sys::region_create(n * UPCALL_STACK, rights::READ | rights::WRITE, region_flags::LAZY).unwrap_or_else(|e| fatal("upcall stacks", e));
    // SAFETY: written before registration, read by the kernel during it; not touched after.
    let tops = unsafe { &mut *core::ptr::addr_of_mut!(STACK_TOPS) };
    for (v, top) in tops.iter_mut().enumerate().take(n) {
        *top = (stacks + (v + 1) * UPCALL_STACK) as u64;
    }
    let reg = Registration {
        handler: knh as *const () as u64,
        ring: ring as u64,
        upcall_stacks: tops.as_ptr() as u64,
        vcpus: n as u64,
        fp_live: FP_LIVE.as_ptr() as u64,
    };
    if let Err(e) = sys::kn_register(&reg) {
        fatal("kn_register", e);
    }
}

/// Per-vCPU "FP is live" words the kernel sets (`Registration::fp_live`). Context switches
/// written in assembly read them directly (aarch64).
pub(crate) static FP_LIVE: [AtomicU64; MAX_VCPUS] = [const { AtomicU64::new(0) }; MAX_VCPUS];

/// Whether FP/SIMD state may be live on vCPU `v` (an activation of it has used FP): WINDOW
/// switches there must keep the ABI's callee-saved FP registers.
#[inline(always)]
#[allow(dead_code)] // used by the context switches of ports with callee-saved FP registers
pub fn fp_live(v: usize) -> bool {
    FP_LIVE[v].load(Ordering::Relaxed) != 0
}

fn fatal(what: &str, e: Option<tsumugi_abi::syscall::Errno>) -> ! {
    crate::println!("libuthread: {what} failed: {e:?}");
    sys::exit(tsumugi_abi::exit::STATUS_USER_PANIC as usize)
}

/// The Kernel Notification Handler: entered by the kernel on a vCPU's upcall stack with
/// LTN = 0. Never returns.
extern "C" fn knh(kind: u64, _thread: u64, vcpu: u64, arg: u64) -> ! {
    drain_events();
    let vcpu = vcpu as usize;
    if kind == EventKind::VcpuGranted as u64 {
        // Granted again after `arg` revocations: another vCPU may still be taking the last one
        // in (moving this vCPU's queues); run nothing here until it has.
        while !crate::sched::revocations_seen(vcpu, arg) {
            if DRAINING.load(Ordering::Acquire) {
                core::hint::spin_loop();
            } else {
                // Not read yet (or held back in the kernel, ring full): the park returns at
                // once while events wait, after moving held ones into the ring.
                let _ = sys::vcpu_park(0);
            }
            drain_events();
        }
        if !crate::sched::rejoin(vcpu) {
            retire_vcpu(vcpu)
        }
        let main = VCPU_MAIN.load(Ordering::Acquire);
        // SAFETY: stored from a `fn(usize) -> !` in start_vcpus before any vCPU was granted.
        let main: fn(usize) -> ! = unsafe { core::mem::transmute::<usize, fn(usize) -> !>(main) };
        main(vcpu)
    }
    crate::sched::enter_vcpu_loop(vcpu)
}

/// Feeds the ring's events to the core, in order.
pub fn drain_events() {
    drain_events_for(core::ptr::null_mut())
}

/// [`drain_events`] from inside a critical section the user thread `me` entered (null: none):
/// the threads a queued wait's `UNBLOCKED` makes ready go on `me`'s vCPU's own queue.
fn drain_events_for(me: *mut Thmb) {
    let ring = RING.load(Ordering::Acquire);
    if ring == 0 || DRAINING.swap(true, Ordering::SeqCst) {
        return;
    }
    let h = ring as *mut RingHeader;
    drain_ring(ring, h, me);
    DRAINING.store(false, Ordering::SeqCst);
    // A vCPU that found DRAINING set left its events to us; if they came after our last look
    // they would wait for the next upcall or park (a woken thread stranded until a timer
    // tick: aarch64 s3 phase_v8_g1 cost 10 M instructions a phase). Look again.
    loop {
        core::sync::atomic::fence(Ordering::SeqCst);
        // SAFETY: the ring's header, as in `drain_ring`.
        let (head, tail) = unsafe { (core::ptr::read_volatile(&(*h).head), core::ptr::read_volatile(&(*h).tail)) };
        if head == tail || DRAINING.swap(true, Ordering::SeqCst) {
            return;
        }
        drain_ring(ring, h, me);
        DRAINING.store(false, Ordering::SeqCst);
    }
}

/// [`drain_events_for`]'s loop, with DRAINING held.
fn drain_ring(ring: usize, h: *mut RingHeader, me: *mut Thmb) {
    loop {
        // SAFETY: the ring is this program's; the kernel only writes slots at and past `tail`
        // and then advances `tail`, the library only advances `head` (under DRAINING).
        let (head, tail) = unsafe { (core::ptr::read_volatile(&(*h).head), core::ptr::read_volatile(&(*h).tail)) };
        if head == tail {
            break;
        }
        // Pairs with the kernel's release before it advanced `tail`: the slot, and the ThMB it
        // names, are complete (weakly ordered CPUs: aarch64, riscv64).
        core::sync::atomic::fence(Ordering::Acquire);
        let slot = ring + RING_SLOTS_OFFSET + (head as usize % RING_SLOTS) * core::mem::size_of::<Event>();
        // SAFETY: a slot the kernel filled (head < tail).
        let e = unsafe { core::ptr::read_volatile(slot as *const Event) };
        // The slot is read before the kernel can see it free and fill it again.
        core::sync::atomic::fence(Ordering::Release);
        // SAFETY: as above.
        unsafe { core::ptr::write_volatile(&mut (*h).head, head + 1) };
        let t = e.thread as *mut Thmb;
        match EventKind::from_u64(e.kind) {
            // SAFETY: the kernel names ThMBs this program's threads ran with (their LTN).
            Some(EventKind::Blocked) => unsafe { crate::sched::note_blocked(t) },
            // SAFETY: the kernel names a thread this program parked itself after the kernel
            // queued it (`queued_wait`), and posts this once per such wait: the wake-up is ours.
            Some(EventKind::Unblocked) if e.arg1 == UNBLOCKED_QUEUED => unsafe {
                (*t).wait_result.store(e.arg0 as usize, Ordering::Relaxed);
                if me.is_null() {
                    crate::sched::wake(t)
                } else {
                    // `me` entered the critical section we run in (LTN = 0).
                    crate::sched::wake_from(me, t)
                }
            },
            // SAFETY: as above; the kernel wrote the thread's full frame before posting.
            Some(EventKind::Unblocked) | Some(EventKind::Preempted) => unsafe { crate::sched::requeue_full(t) },
            Some(EventKind::Fault) => {
                crate::println!("libuthread: thread {:#x} faulted at {:#x} (access {}); ending the program", e.thread, e.arg0, e.arg1);
                sys::exit(tsumugi_abi::exit::STATUS_USER_PANIC as usize);
            }
            Some(EventKind::Signal) => crate::signal::deliver(&e),
            // SAFETY: the kernel names a ThMB it saved (or 0 for an idle vCPU); LTN = 0 here.
            Some(EventKind::VcpuRevoked) => unsafe { crate::sched::adopt_revoked(e.arg0 as usize, t, e.arg1) },
            Some(EventKind::VcpuGranted) | None => {}
        }
    }
}

/// A wait in the kernel that keeps the vCPU (S3's lock and barrier waits): `call(t)` asks the
/// kernel to queue the calling user thread `t`; when it answers `QUEUED` the thread parks here
/// at user level (the ordinary block: another thread runs, or the vCPU parks when none is
/// ready) until `UNBLOCKED(t)` with `UNBLOCKED_QUEUED` brings the wait's result (see
/// [`drain_events`]). Any other answer is returned at once. Outside a user thread (LTN = 0)
/// `plain` waits the kernel's way instead.
///
/// The kernel may post the wake-up before `call` has even returned (a release on another CPU,
/// drained by another vCPU): the thread is `PARKING` from before the call, so that wake-up
/// turns it `NOTIFIED` and the park's commit keeps it (`sched::runstate`); none is lost. There
/// is no `BLOCKED(t)` before such an `UNBLOCKED(t)`.
pub fn queued_wait(call: impl FnOnce(usize) -> sys::SysResult, plain: impl FnOnce() -> sys::SysResult) -> sys::SysResult {
    if ltn().is_null() {
        return plain();
    }
    let mut answer = None;
    crate::sched::block_current(|t| match call(t as usize) {
        Ok(tsumugi_abi::s3::QUEUED) => true,
        other => {
            answer = Some(other);
            false
        }
    });
    if let Some(r) = answer {
        return r;
    }
    // SAFETY: the calling thread's ThMB (LTN is set again); the wake-up that made it ready
    // was ordered after the store of its result (the wake's compare-exchange, then the queue).
    let r = unsafe { (*ltn()).wait_result.load(Ordering::Relaxed) };
    tsumugi_abi::syscall::decode_result(r)
}

/// After a call that may have posted `UNBLOCKED` to this program's own ring (a release that
/// woke waiters, who are mostly this program's threads): hands those events to the core now,
/// so the woken threads are queued before the caller goes on, not at the next upcall.
pub fn drain_from_thread() {
    let mut critical = crate::spin::Critical::enter();
    drain_events_for(critical.thread());
    critical.leave();
}

/// vCPUs 1.. join the runtime when the kernel grants them a processor (`VCPU_GRANTED`), which
/// with space sharing may come late, or never before the program ends.
pub const VCPUS_JOIN_WHEN_GRANTED: bool = true;

/// Ends a vCPU for good: it parks (idle: the kernel may take it) and only reads events.
pub fn retire_vcpu(_vcpu: usize) -> ! {
    loop {
        let _ = sys::vcpu_park(PARK_IDLE);
        drain_events();
    }
}

/// Parks the calling vCPU, which a user thread keeps (its registers live in it), until
/// unparked or an event arrives, then hands new events to the core. Returns whether the kernel
/// wants the vCPU back (space sharing): the caller should give it up properly.
pub fn park(_vcpu: usize) -> bool {
    let r = sys::vcpu_park(0);
    drain_events();
    r == Ok(PARK_GIVE_UP)
}

/// Parks the calling vCPU, idle (nothing live in it: the scheduler loop), until unparked or an
/// event arrives, then hands new events to the core. The kernel may revoke it meanwhile: then
/// this does not return, and the vCPU comes back through the handler (`VCPU_GRANTED`).
pub fn park_idle(_vcpu: usize) {
    let _ = sys::vcpu_park(PARK_IDLE);
    drain_events();
}

/// The calling vCPU resumes user thread `t` (null: runs none): while user threads have
/// performance counters open, the kernel is told, so `t`'s counters count here.
#[inline(always)]
pub fn perf_resumed(t: *mut Thmb) {
    if sys::USER_COUNTERS.load(Ordering::Relaxed) != 0 {
        tell_resumed(t);
    }
}

/// [`perf_resumed`]'s call, out of line so the test is all the resume path carries.
#[cold]
#[inline(never)]
fn tell_resumed(t: *mut Thmb) {
    let _ = sys::perf_switch(t as usize);
}

/// Wakes vCPU `vcpu`.
pub fn unpark(vcpu: usize) {
    let _ = sys::vcpu_unpark(vcpu);
}

/// Blocks the running user thread for `nanos`: with LTN set, the kernel saves the thread into
/// its ThMB and hands this vCPU back (`BLOCKED`); the thread resumes here after `UNBLOCKED`,
/// restored in user mode by the core.
pub fn sleep_current(nanos: u64) {
    let _ = sys::sleep_nanos(nanos);
}

/// Blocks the calling thread until [`now_nanos`] reaches `deadline` (at once if it has; the
/// kernel's sleep is relative, so the wait is computed from one clock reading).
pub fn sleep_current_until(deadline: u64) {
    let now = now_nanos();
    if deadline > now {
        sleep_current(deadline - now);
    }
}

/// Monotonic nanoseconds.
pub fn now_nanos() -> u64 {
    sys::clock(crate::Clock::MonotonicNanos).unwrap_or(0) as u64
}

/// Bytes of each chunk thread stacks are carved from (`sched::pool`): one zero-on-touch region
/// per chunk rather than per stack, since every region is a kernel object in every view of the
/// program.
pub const STACK_CHUNK: usize = 4 << 20;

/// A stack of `size` bytes (zero-on-touch region).
pub fn alloc_stack(size: usize) -> Option<(usize, usize)> {
    let size = (size + 4095) & !4095;
    sys::region_create(size, rights::READ | rights::WRITE, region_flags::LAZY).ok().map(|base| (base, size))
}

/// Whether [`free_stack`] gives memory back: no, regions live as long as the program, so the
/// core keeps every freed stack for reuse.
pub const FREES_STACKS: bool = false;

/// Gives a stack back. Regions live as long as the program (the core keeps every freed stack
/// for reuse, see [`FREES_STACKS`]); nothing to do.
pub fn free_stack(_base: usize, _len: usize) {}

/// Ends the program.
pub fn exit_process(code: i32) -> ! {
    sys::exit(code as usize)
}

/// Writes to the console.
pub fn console_write(bytes: &[u8]) {
    let _ = sys::console_write_all(bytes);
}
