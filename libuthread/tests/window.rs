//! The WINDOW switch keeps each thread's callee-saved FP control state (x86_64: MXCSR and the
//! x87 control word) as its own, across yields, blocks and moves between vCPUs.
#![cfg(all(target_arch = "x86_64", not(loom)))]

use std::sync::Arc;

fn mxcsr() -> u32 {
    let mut value = 0u32;
    // SAFETY: stmxcsr stores the 4-byte register to our local.
    unsafe { core::arch::asm!("stmxcsr [{}]", in(reg) &mut value, options(nostack)) };
    value
}

fn set_mxcsr(value: u32) {
    // SAFETY: loads a valid MXCSR (only rounding bits differ from the default).
    unsafe { core::arch::asm!("ldmxcsr [{}]", in(reg) &value, options(nostack)) };
}

fn fpucw() -> u16 {
    let mut value = 0u16;
    // SAFETY: fnstcw stores the 2-byte control word to our local.
    unsafe { core::arch::asm!("fnstcw [{}]", in(reg) &mut value, options(nostack)) };
    value
}

fn set_fpucw(value: u16) {
    // SAFETY: loads a valid control word (only rounding bits differ from the default).
    unsafe { core::arch::asm!("fldcw [{}]", in(reg) &value, options(nostack)) };
}

#[test]
fn fp_control_state_is_per_thread() {
    const ROUNDING_SHIFT_MXCSR: u32 = 13;
    const ROUNDING_SHIFT_FPUCW: u16 = 10;
    let bad = libuthread::run(3, || {
        let barrier = Arc::new(libuthread::Barrier::new(4));
        let threads: Vec<_> = (0..4u32)
            .map(|mode| {
                let barrier = barrier.clone();
                libuthread::spawn(move || {
                    // A new thread starts with the ABI's defaults.
                    let mut bad = usize::from(mxcsr() != 0x1F80) + usize::from(fpucw() != 0x037F);
                    let my_mxcsr = (0x1F80 & !(3 << ROUNDING_SHIFT_MXCSR)) | (mode << ROUNDING_SHIFT_MXCSR);
                    let my_fpucw = (0x037F & !(3 << ROUNDING_SHIFT_FPUCW)) | ((mode as u16) << ROUNDING_SHIFT_FPUCW);
                    set_mxcsr(my_mxcsr);
                    set_fpucw(my_fpucw);
                    for round in 0..200 {
                        match round % 3 {
                            0 => libuthread::yield_now(),
                            1 => {
                                barrier.wait();
                            }
                            _ => libuthread::sleep(std::time::Duration::from_micros(10)),
                        }
                        bad += usize::from(mxcsr() != my_mxcsr) + usize::from(fpucw() != my_fpucw);
                    }
                    bad
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).sum::<usize>()
    });
    assert_eq!(bad, 0);
}
