//! The console: an Arm PrimeCell PL011 UART (QEMU virt: 0x0900_0000, found in the device tree).
//!
//! Until `interrupts::init` maps it into the kernel's device window (see [`remap`]), the UART
//! is reached at its physical address through the boot device window in `TTBR0_EL1`.

use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};
use crate::sync::Mutex;

/// PL011 register offsets (PL011 TRM, table 3-1).
mod reg {
    /// Data.
    pub const DR: usize = 0x00;
    /// Flags.
    pub const FR: usize = 0x18;
    /// Integer baud-rate divisor.
    pub const IBRD: usize = 0x24;
    /// Fractional baud-rate divisor.
    pub const FBRD: usize = 0x28;
    /// Line control.
    pub const LCR_H: usize = 0x2c;
    /// Control.
    pub const CR: usize = 0x30;
    /// Interrupt mask set/clear.
    pub const IMSC: usize = 0x38;
    /// Interrupt clear.
    pub const ICR: usize = 0x44;
}

/// `FR.RXFE`: receive FIFO empty.
const FR_RXFE: u32 = 1 << 4;
/// `FR.TXFF`: transmit FIFO full.
const FR_TXFF: u32 = 1 << 5;
/// `FR.BUSY`: still transmitting.
const FR_BUSY: u32 = 1 << 3;
/// `LCR_H`: 8 data bits (`WLEN` = 0b11), FIFOs enabled.
const LCR_H_8N1_FIFO: u32 = (0b11 << 5) | (1 << 4);
/// `CR`: UART enable, transmit enable, receive enable.
const CR_ENABLE: u32 = (1 << 0) | (1 << 8) | (1 << 9);
/// `ICR`: every interrupt.
const ICR_ALL: u32 = 0x7ff;
/// Divisors for 115200 baud from QEMU virt's 24 MHz UART clock: 24e6 / (16 * 115200) = 13.02,
/// fraction 0.02 * 64 ≈ 1.
const IBRD_115200: u32 = 13;
const FBRD_115200: u32 = 1;

/// Where the registers are reached now (physical until [`remap`]).
static BASE: AtomicU64 = AtomicU64::new(0);
/// Serialises writers (interrupts are held off while it is taken).
static LOCK: Mutex<()> = Mutex::new(());

fn base() -> u64 {
    match BASE.load(Ordering::Relaxed) {
        0 => super::boot::platform().uart,
        b => b,
    }
}

fn read(offset: usize) -> u32 {
    // SAFETY: `base()` maps the PL011's register page as device memory (the boot device window
    // before `remap`, the kernel's device window after).
    unsafe { core::ptr::read_volatile((base() as usize + offset) as *const u32) }
}

fn write(offset: usize, value: u32) {
    // SAFETY: as in `read`.
    unsafe { core::ptr::write_volatile((base() as usize + offset) as *mut u32, value) }
}

/// Programs the UART (115200 8N1, FIFOs, no interrupts). Called once at boot.
pub fn init() {
    let _guard = LOCK.lock();
    write(reg::CR, 0);
    while read(reg::FR) & FR_BUSY != 0 {
        core::hint::spin_loop();
    }
    write(reg::IMSC, 0);
    write(reg::ICR, ICR_ALL);
    write(reg::IBRD, IBRD_115200);
    write(reg::FBRD, FBRD_115200);
    write(reg::LCR_H, LCR_H_8N1_FIFO);
    write(reg::CR, CR_ENABLE);
}

/// Moves the console to `virt`, where the kernel mapped the UART's register page.
///
/// # Safety
/// `virt` must map the UART's registers as device memory for the rest of the run.
pub(crate) unsafe fn remap(virt: u64) {
    let _guard = LOCK.lock();
    BASE.store(virt, Ordering::Relaxed);
}

fn send(b: u8) {
    while read(reg::FR) & FR_TXFF != 0 {
        core::hint::spin_loop();
    }
    write(reg::DR, u32::from(b));
}

fn send_text(s: &str) {
    for b in s.bytes() {
        send(b);
    }
}

/// Writes text to the console. Interrupts are held off while the lock is taken so an
/// interrupt handler that prints cannot deadlock against the code it interrupted.
pub fn write_str(s: &str) {
    super::cpu::without_interrupts(|| {
        let _guard = LOCK.lock();
        send_text(s);
    });
}

/// Writes bytes to the console (user output: not necessarily UTF-8, sent as is).
pub fn write_bytes(bytes: &[u8]) {
    super::cpu::without_interrupts(|| {
        let _guard = LOCK.lock();
        for &b in bytes {
            send(b);
        }
    });
}

/// Whether the UART holds a received byte: one read of its flag register, without the lock
/// (the read has no side effect), so that the timer tick's poll costs one read when nothing was
/// typed.
#[inline]
pub fn byte_waiting() -> bool {
    read(reg::FR) & FR_RXFE == 0
}

/// A byte the UART received, if any (never blocks).
pub fn try_read_byte() -> Option<u8> {
    super::cpu::without_interrupts(|| {
        let _guard = LOCK.lock();
        if read(reg::FR) & FR_RXFE != 0 {
            None
        } else {
            // DR bits 11:8 are error flags; the data is the low byte.
            Some((read(reg::DR) & 0xff) as u8)
        }
    })
}

/// Writes text even if the lock is held (by this CPU, in the code a panic interrupted).
/// Only for panic reports: output may interleave with a half-written line.
pub fn write_str_panic(s: &str) {
    match LOCK.try_lock() {
        Some(_guard) => send_text(s),
        // The holder is stopped (we are panicking with interrupts off); sharing the registers
        // only risks mixing bytes of two messages.
        None => send_text(s),
    }
}

/// A `fmt::Write` sink for the console.
pub struct Console;

impl fmt::Write for Console {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        write_str(s);
        Ok(())
    }
}

/// A `fmt::Write` sink for panic reports (see [`write_str_panic`]).
pub struct PanicConsole;

impl fmt::Write for PanicConsole {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        write_str_panic(s);
        Ok(())
    }
}
