//! Kernel panic and unhandled-exception reports: cpu, thread, domain, registers, a
//! frame-pointer backtrace; then QEMU is ended with `STATUS_KERNEL_PANIC`.

use arch::addr::VirtAddr;
use arch::serial::PanicConsole;
use arch::trap::{Trap, TrapFrame};
use core::fmt::Write;
use core::sync::atomic::{AtomicBool, Ordering};
use tsumugi_abi::exit::STATUS_KERNEL_PANIC;
use tsumugi_abi::log::PANIC;

/// Most frames a backtrace prints.
const MAX_FRAMES: usize = 32;

static PANICKING: AtomicBool = AtomicBool::new(false);

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    arch::cpu::disable_interrupts();
    let mut out = PanicConsole;
    if PANICKING.swap(true, Ordering::SeqCst) {
        let _ = writeln!(out, "\n{PANIC} (again, while reporting): {}", info.message());
        arch::cpu::shutdown(STATUS_KERNEL_PANIC);
    }
    let _ = writeln!(out, "\n{PANIC} on cpu {}: {}", arch::cpu::cpu_index(), info.message());
    if let Some(loc) = info.location() {
        let _ = writeln!(out, "  panicked at {}:{}:{}", loc.file(), loc.line(), loc.column());
    }
    context(&mut out);
    backtrace(&mut out, arch::cpu::frame_pointer());
    arch::cpu::shutdown(STATUS_KERNEL_PANIC)
}

/// Reports an exception the kernel itself caused, then ends the machine.
pub fn exception(frame: &TrapFrame, trap: Trap) -> ! {
    arch::cpu::disable_interrupts();
    PANICKING.store(true, Ordering::SeqCst);
    let mut out = PanicConsole;
    let _ = match trap {
        Trap::PageFault { address, access, present } => writeln!(
            out,
            "\n{PANIC} on cpu {}: unhandled exception vector {} ({}) in the kernel: {:?} of {:#x}, {}",
            arch::cpu::cpu_index(),
            frame.vector(),
            arch::trap::exception_name(frame.vector()),
            access,
            address,
            if present { "protection violation" } else { "not mapped" }
        ),
        Trap::Exception { vector, name } => {
            writeln!(out, "\n{PANIC} on cpu {}: unhandled exception vector {vector} ({name}) in the kernel", arch::cpu::cpu_index())
        }
        other => writeln!(out, "\n{PANIC} on cpu {}: unexpected {other:?} in the kernel", arch::cpu::cpu_index()),
    };
    let _ = writeln!(
        out,
        "  error {:#x}, {} {:#x}, {} {:#x}",
        frame.fault_code(),
        arch::trap::IP_REGISTER,
        frame.ip(),
        arch::cpu::FAULT_ADDRESS_REGISTER,
        arch::cpu::fault_address()
    );
    let _ = frame.dump(&mut out);
    context(&mut out);
    backtrace(&mut out, frame.frame_pointer());
    arch::cpu::shutdown(STATUS_KERNEL_PANIC)
}

fn context(out: &mut PanicConsole) {
    match crate::thread::describe_current() {
        Some((tid, Some((id, name)))) => {
            let _ = writeln!(out, "  thread {tid} of domain {id} ({name})");
        }
        Some((tid, None)) => {
            let _ = writeln!(out, "  kernel thread {tid}");
        }
        None => {
            let _ = writeln!(out, "  in the boot/idle context (no thread)");
        }
    }
}

/// Walks the frame-pointer chain from `rbp`, printing return addresses. Each frame's record
/// (the caller's frame pointer, then the return address) lies where the port says
/// (`arch::cpu::frame_record`). Stops at a null, misaligned or unmapped record, so a corrupt
/// chain cannot fault here.
fn backtrace(out: &mut PanicConsole, mut rbp: u64) {
    let _ = writeln!(out, "  backtrace:");
    for depth in 0..MAX_FRAMES {
        let record = arch::cpu::frame_record(rbp);
        if rbp == 0 || record % 8 != 0 || record < arch::layout::KERNEL_HALF || !mapped(record) || !mapped(record + 8) {
            break;
        }
        // SAFETY: both words were checked to be mapped in the kernel half.
        let (next, ret) = unsafe { (*(record as *const u64), *((record + 8) as *const u64)) };
        if ret == 0 {
            break;
        }
        let _ = writeln!(out, "    #{depth} {ret:#018x}");
        rbp = next;
    }
}

fn mapped(va: u64) -> bool {
    crate::mm::kernel_space::translate(VirtAddr::new(va)).is_some()
}
