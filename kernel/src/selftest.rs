//! In-kernel self-tests: a plain list of functions run on the machine when the `selftest` boot
//! option is given. Each prints one line in the format of `tsumugi_abi::log`; a failing test
//! returns an error message instead of stopping the others (a panic still ends the run, and the
//! host harness reports it).

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use arch::addr::{VirtAddr, PAGE_SIZE};
use arch::mapping::MapFlags;
use tsumugi_abi::log::{SELFTEST, SELFTEST_FAILED, SELFTEST_OK, SELFTEST_SUMMARY};

use crate::initrd::Archive;
use crate::mm::kernel_space::{self, phys_to_virt, with_frames};
use crate::mm::kernel_stack::KernelStack;
use crate::mm::space;
use crate::thread::Thread;

/// A test: a name and a function returning `Err(message)` on failure.
type Test = (&'static str, fn(&Context) -> Result<(), String>);

/// What tests may look at.
pub struct Context<'a> {
    /// The boot archive.
    pub initrd: Option<Archive<'a>>,
}

const TESTS: &[Test] = &[
    ("frame_alloc_distinct_and_restored", frame_alloc_distinct_and_restored),
    ("frame_alloc_contiguous", frame_alloc_contiguous),
    ("heap_collections", heap_collections),
    ("kernel_image_is_wx", kernel_image_is_wx),
    ("direct_map_reaches_frames", direct_map_reaches_frames),
    ("kernel_stack_has_guard_page", kernel_stack_has_guard_page),
    ("kernel_stack_slot_reused_after_flush", kernel_stack_slot_reused_after_flush),
    ("timer_ticks", timer_ticks),
    ("clock_is_monotonic", clock_is_monotonic),
    ("initrd_holds_init", initrd_holds_init),
    ("loader_accepts_init", loader_accepts_init),
    ("address_space_checks_user_ranges", address_space_checks_user_ranges),
];

/// Tests that need a second CPU: run by the first kernel thread once the other CPUs are up
/// ([`run_smp`]), and only when one is.
const SMP_TESTS: &[Test] = &[("reload_wait_serves_fp_saves", reload_wait_serves_fp_saves)];

/// Runs the tests of `tests` whose names contain `filter`, adding to `counts` (passed, failed).
fn run_list(tests: &[Test], filter: &str, context: &Context, counts: &mut (usize, usize)) {
    for (name, test) in tests.iter().filter(|(n, _)| n.contains(filter)) {
        match test(context) {
            Ok(()) => {
                counts.0 += 1;
                println!("{SELFTEST}{name}{SELFTEST_OK}");
            }
            Err(msg) => {
                counts.1 += 1;
                println!("{SELFTEST}{name}{SELFTEST_FAILED}{msg}");
            }
        }
    }
}

/// Runs the tests whose names contain `filter` (at boot, one CPU up); returns (passed,
/// failed) for [`run_smp`], which prints the summary.
pub fn run(filter: &str, context: &Context) -> (usize, usize) {
    let mut counts = (0, 0);
    run_list(TESTS, filter, context, &mut counts);
    counts
}

/// Runs the tests that need a second CPU (if one is online) whose names contain `filter`, then
/// prints the summary of all; `counts` are [`run`]'s. Returns the totals.
pub fn run_smp(filter: &str, context: &Context, mut counts: (usize, usize)) -> (usize, usize) {
    if crate::sched::scheduler::online_cpus() > 1 {
        run_list(SMP_TESTS, filter, context, &mut counts);
    }
    println!("{SELFTEST_SUMMARY}{} passed, {} failed", counts.0, counts.1);
    counts
}

/// The helper of [`reload_wait_serves_fp_saves`]: the CPU it runs on, once running.
static HELPER_CPU: AtomicUsize = AtomicUsize::new(usize::MAX);
/// Set by the helper once its FP registers pull has returned.
static HELPER_PULLED: AtomicBool = AtomicBool::new(false);
/// The thread whose FP registers the helper pulls (a leaked `Arc`, taken back by the test).
static PULL_TARGET: AtomicPtr<Thread> = AtomicPtr::new(core::ptr::null_mut());

/// Another CPU: pulls the test thread's FP registers, held by the test's CPU, spinning with
/// interrupts off (as an FP trap does), so the test's CPU must serve the save while it waits.
fn pull_helper() -> ! {
    HELPER_CPU.store(arch::cpu::cpu_index(), Ordering::Release);
    let target = PULL_TARGET.load(Ordering::Acquire);
    // SAFETY: the test leaked this count for the helper and takes it back only after
    // HELPER_PULLED; the thread (the test's) outlives the helper's use.
    if let Some(target) = unsafe { target.as_ref() } {
        crate::fpu::pull_registers(target);
    }
    HELPER_PULLED.store(true, Ordering::Release);
    crate::thread::exit_current(Some(0))
}

/// The deadlock `fuzz-smp4` hit on aarch64, made deterministic: this CPU holds this thread's
/// FP registers and waits in `smp::wait_reloaded` for a reload by another CPU, which meanwhile
/// spins (interrupts off, so it takes no reload IPI) in `fpu::pull` until this CPU saves those
/// registers. Neither CPU takes the other's IPI, so the test ends only if `wait_reloaded`
/// serves the FP save (a regression hangs the suite; the harness's hang probe then shows
/// both CPUs' backtraces).
fn reload_wait_serves_fp_saves(_: &Context) -> Result<(), String> {
    check(!arch::cpu::interrupts_enabled(), || "a kernel thread runs with interrupts on".into())?;
    let me = crate::sched::scheduler::current().ok_or("no current thread")?;
    crate::fpu::own_registers_here();
    HELPER_CPU.store(usize::MAX, Ordering::Relaxed);
    HELPER_PULLED.store(false, Ordering::Relaxed);
    PULL_TARGET.store(Arc::into_raw(me.clone()) as *mut Thread, Ordering::Release);
    let helper = crate::thread::spawn_kernel(pull_helper).map_err(|_| "no kernel stack for the helper")?;
    // The helper can only run on another CPU: this one does not switch until the test ends.
    let other = loop {
        match HELPER_CPU.load(Ordering::Acquire) {
            usize::MAX => core::hint::spin_loop(),
            cpu => break cpu,
        }
    };
    let here = arch::cpu::cpu_index();
    check(other != here, || format!("the helper ran on this CPU ({here})"))?;
    // The helper is pulling (or about to): its CPU has interrupts off until it is done.
    let tickets: Vec<crate::smp::Ticket> = crate::smp::request_reload(other).into_iter().collect();
    crate::smp::wait_reloaded(&tickets);
    let pulled = HELPER_PULLED.load(Ordering::Acquire);
    // SAFETY: the count leaked above; the helper has finished with it (its reload was served
    // after its pull returned: it takes interrupts only once it has ended).
    drop(unsafe { Arc::from_raw(PULL_TARGET.swap(core::ptr::null_mut(), Ordering::AcqRel)) });
    drop(helper);
    check(pulled, || format!("cpu {other} reloaded before its FP pull returned"))?;
    check(crate::fpu::registers_saved(&me), || "the test thread's FP registers were not saved".into())
}

fn check(cond: bool, msg: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(msg())
    }
}

fn frame_alloc_distinct_and_restored(_: &Context) -> Result<(), String> {
    let before = with_frames(|f| f.free_frames());
    let mut frames = Vec::new();
    for _ in 0..256 {
        frames.push(with_frames(|f| f.allocate()).map_err(|e| format!("allocate: {e:?}"))?);
    }
    let mut sorted = frames.clone();
    sorted.sort();
    sorted.dedup();
    check(sorted.len() == frames.len(), || "a frame was handed out twice".into())?;
    check(with_frames(|f| f.free_frames()) == before - 256, || "free count did not drop by 256".into())?;
    for f in &frames {
        with_frames(|a| a.free(*f)).map_err(|e| format!("free: {e:?}"))?;
    }
    check(with_frames(|a| a.free(frames[0])).is_err(), || "double free accepted".into())?;
    check(with_frames(|f| f.free_frames()) == before, || "frames lost".into())
}

fn frame_alloc_contiguous(_: &Context) -> Result<(), String> {
    let first = with_frames(|f| f.allocate_contiguous(16, 16)).map_err(|e| format!("{e:?}"))?;
    check(first.number() % 16 == 0, || format!("{first:?} not aligned to 16 frames"))?;
    with_frames(|f| f.free_contiguous(first, 16)).map_err(|e| format!("{e:?}"))
}

fn heap_collections(_: &Context) -> Result<(), String> {
    let (used_before, _) = crate::mm::heap::usage();
    {
        let big: Vec<u64> = (0..(256 * 1024 / 8)).collect();
        check(big.iter().sum::<u64>() == (0..(256 * 1024 / 8)).sum::<u64>(), || "vector contents".into())?;
        let mut map = BTreeMap::new();
        for i in 0..1000u32 {
            map.insert(i, Box::new(i * 2));
        }
        check(map.get(&999).map(|b| **b) == Some(1998), || "map lookup".into())?;
    }
    let (used_after, _) = crate::mm::heap::usage();
    check(used_after == used_before, || format!("heap leaked {} bytes", used_after as i64 - used_before as i64))
}

fn kernel_image_is_wx(_: &Context) -> Result<(), String> {
    let code = VirtAddr::new(kernel_image_is_wx as *const () as usize as u64);
    let (_, flags) = kernel_space::translate(code).ok_or("own code not mapped")?;
    check(flags.contains(MapFlags::EXEC) && !flags.contains(MapFlags::WRITE), || format!("text mapped {flags:?}"))?;
    check(!flags.contains(MapFlags::USER) && flags.contains(MapFlags::GLOBAL), || format!("text mapped {flags:?}"))?;
    static DATA: u64 = 0;
    let (_, flags) = kernel_space::translate(VirtAddr::from_ptr(&DATA)).ok_or("rodata not mapped")?;
    check(!flags.contains(MapFlags::EXEC) && !flags.contains(MapFlags::WRITE), || format!("rodata mapped {flags:?}"))?;
    let stack_var = 0u64;
    let (_, flags) = kernel_space::translate(VirtAddr::from_ptr(&stack_var)).ok_or("stack not mapped")?;
    check(!flags.contains(MapFlags::EXEC) && flags.contains(MapFlags::WRITE), || format!("stack mapped {flags:?}"))
}

fn direct_map_reaches_frames(_: &Context) -> Result<(), String> {
    let frame = kernel_space::allocate_zeroed_frame().ok_or("no frame")?;
    let va = phys_to_virt(frame.start());
    // SAFETY: the frame is ours until freed below; the direct map covers it.
    unsafe {
        let p = va.as_mut_ptr::<u64>();
        p.write_volatile(0x5453_554d_5547_4921);
        let back = p.read_volatile();
        with_frames(|f| f.free(frame)).map_err(|e| format!("{e:?}"))?;
        check(back == 0x5453_554d_5547_4921, || "direct-map write did not read back".into())
    }
}

fn kernel_stack_has_guard_page(_: &Context) -> Result<(), String> {
    let stack = KernelStack::new().map_err(|_| "no stack")?;
    check(kernel_space::translate(stack.bottom()).is_some(), || "stack bottom not mapped".into())?;
    let guard = VirtAddr::new(stack.bottom().as_u64() - PAGE_SIZE);
    check(kernel_space::translate(guard).is_none(), || "guard page is mapped".into())?;
    let top = stack.top();
    drop(stack);
    check(kernel_space::translate(VirtAddr::new(top.as_u64() - 8)).is_none(), || "stack still mapped after drop".into())
}

/// A freed stack's slot is not reused while a CPU may still cache its translations, and is
/// reused once every CPU flushed — which the tick guarantees even when TLB tags mean root
/// loads flush nothing (before the other CPUs start, this CPU is the only one).
fn kernel_stack_slot_reused_after_flush(_: &Context) -> Result<(), String> {
    // Count this CPU as online (it has flushed since boot: the boot tables were replaced), so
    // its epoch takes part in the quarantine as every online CPU's does.
    crate::mm::kernel_stack::note_full_flush(arch::cpu::cpu_index());
    let first = KernelStack::new().map_err(|_| "no stack")?;
    let slot = first.bottom();
    drop(first);
    let second = KernelStack::new().map_err(|_| "no stack")?;
    check(second.bottom() != slot, || "a freed slot was reused before any flush".into())?;
    crate::mm::kernel_stack::tick(arch::cpu::cpu_index());
    // Other reusable slots may come first; the freed one must come within a few.
    let mut taken = Vec::new();
    for _ in 0..16 {
        let s = KernelStack::new().map_err(|_| "no stack")?;
        let hit = s.bottom() == slot;
        taken.push(s);
        if hit {
            return Ok(());
        }
    }
    Err(format!("slot {slot:?} not reused after the tick's flush"))
}

fn timer_ticks(_: &Context) -> Result<(), String> {
    let start = crate::trap::ticks();
    let deadline = arch::timer::cycles() + arch::timer::cycles_hz(); // one second
    while crate::trap::ticks() < start + 3 {
        if arch::timer::cycles() > deadline {
            arch::cpu::disable_interrupts();
            return Err(format!("only {} ticks in a second", crate::trap::ticks() - start));
        }
        // Kernel code runs with interrupts off; open them only while halted here.
        arch::cpu::wait_for_interrupt();
        arch::cpu::disable_interrupts();
    }
    Ok(())
}

fn clock_is_monotonic(_: &Context) -> Result<(), String> {
    let mut last = arch::timer::nanos();
    for _ in 0..1000 {
        let now = arch::timer::nanos();
        check(now >= last, || format!("clock went back from {last} to {now}"))?;
        last = now;
    }
    check(last > 0, || "clock never started".into())
}

fn initrd_holds_init(ctx: &Context) -> Result<(), String> {
    let archive = ctx.initrd.as_ref().ok_or("no boot archive")?;
    let init = archive.find(tsumugi_abi::bootopt::DEFAULT_PROGRAM).map_err(|e| format!("{e:?}"))?;
    check(init.is_some_and(|e| e.data.starts_with(b"\x7fELF")), || "init missing or not an ELF".into())
}

fn loader_accepts_init(ctx: &Context) -> Result<(), String> {
    let archive = ctx.initrd.as_ref().ok_or("no boot archive")?;
    let init = archive.find(tsumugi_abi::bootopt::DEFAULT_PROGRAM).ok().flatten().ok_or("no init")?;
    let image = crate::loader::parse(init.data, arch::ELF_MACHINE).map_err(|e| format!("{e}"))?;
    check(image.segments.iter().any(|s| s.flags.contains(MapFlags::EXEC)), || "no text segment".into())?;
    check(image.segments.iter().all(|s| !(s.flags.contains(MapFlags::EXEC) && s.flags.contains(MapFlags::WRITE))), || "W+X segment".into())
}

fn address_space_checks_user_ranges(ctx: &Context) -> Result<(), String> {
    let archive = ctx.initrd.as_ref().ok_or("no boot archive")?;
    let init = archive.find(tsumugi_abi::bootopt::DEFAULT_PROGRAM).ok().flatten().ok_or("no init")?;
    let free_before = with_frames(|f| f.free_frames());
    {
        let a = crate::domain::Domain::load("selftest-a", init.data).map_err(|e| format!("{e}"))?;
        let b = crate::domain::Domain::load("selftest-b", init.data).map_err(|e| format!("{e}"))?;
        check(a.entry != b.entry, || "two instances share an address".into())?;
        let (va, vb) = space::with(|s, m| -> Result<_, String> {
            let sa = s.region_at(a.entry.as_u64()).ok_or("no text region")?;
            let sb = s.region_at(b.entry.as_u64()).ok_or("no text region")?;
            let va = s.attach(m, &[(sa, MapFlags::READ | MapFlags::EXEC)]).map_err(|e| format!("{e:?}"))?;
            let vb = s.attach(m, &[(sb, MapFlags::READ | MapFlags::EXEC)]).map_err(|e| format!("{e:?}"))?;
            let va2 = s.attach(m, &[(sa, MapFlags::READ | MapFlags::EXEC)]).map_err(|e| format!("{e:?}"))?;
            check(va == va2, || "identical views do not share".into())?;
            s.detach(m, va2).map_err(|e| format!("{e:?}"))?;
            Ok((va, vb))
        })?;
        space::with(|s, m| -> Result<(), String> {
            let text = a.entry.as_u64();
            check(s.check(va, text, 16, MapFlags::READ).is_ok(), || "text not readable".into())?;
            check(s.check(va, text, 16, MapFlags::WRITE).is_err(), || "text writable".into())?;
            check(s.check(va, arch::layout::KERNEL_HALF, 8, MapFlags::READ).is_err(), || "kernel address accepted".into())?;
            check(s.check(va, u64::MAX - 4, 16, MapFlags::READ).is_err(), || "overflowing range accepted".into())?;
            check(s.check(vb, text, 16, MapFlags::READ).is_err(), || "another view's region accepted".into())?;
            s.detach(m, va).map_err(|e| format!("{e:?}"))?;
            s.detach(m, vb).map_err(|e| format!("{e:?}"))
        })?;
        a.discard();
        b.discard();
    }
    // The view tables detached above wait for a lock-free point to be freed: this is one.
    crate::mm::space::settle_pending();
    let free_after = with_frames(|f| f.free_frames());
    check(free_after == free_before, || format!("{} frames leaked by two domains", free_before as i64 - free_after as i64))
}
