//! The console: the 16550 UART at COM1 (I/O port 0x3f8), through the `uart_16550` crate.

use core::fmt;
use crate::sync::Mutex;
use uart_16550::SerialPort;

/// I/O base of COM1.
const COM1: u16 = 0x3f8;

// SAFETY: COM1 is the standard PC serial port; only this module drives it.
static PORT: Mutex<SerialPort> = Mutex::new(unsafe { SerialPort::new(COM1) });

/// Programs the UART (baud rate, 8N1, FIFOs). Called once at boot.
pub fn init() {
    PORT.lock().init();
}

/// Writes text to the console. Interrupts are held off while the port lock is taken so an
/// interrupt handler that prints cannot deadlock against the code it interrupted.
pub fn write_str(s: &str) {
    super::cpu::without_interrupts(|| {
        let mut port = PORT.lock();
        for b in s.bytes() {
            port.send(b);
        }
    });
}

/// Writes bytes to the console (user output: not necessarily UTF-8).
pub fn write_bytes(bytes: &[u8]) {
    super::cpu::without_interrupts(|| {
        let mut port = PORT.lock();
        for &b in bytes {
            port.send_raw(b);
        }
    });
}

/// Whether the UART holds a received byte: one read of its line status register, without the
/// port lock (the read has no effect on data or transmission), so that the timer tick's poll
/// costs one port read when nothing was typed.
#[inline]
pub fn byte_waiting() -> bool {
    /// Line status register and its "data ready" bit.
    const LSR: u16 = COM1 + 5;
    const DATA_READY: u8 = 1;
    let lsr: u8;
    // SAFETY: reads COM1's line status register, which has no side effect on the data or
    // transmit paths the locked driver uses.
    unsafe { core::arch::asm!("in al, dx", out("al") lsr, in("dx") LSR, options(nomem, nostack, preserves_flags)) };
    lsr & DATA_READY != 0
}

/// A byte the UART received, if any (never blocks).
pub fn try_read_byte() -> Option<u8> {
    super::cpu::without_interrupts(|| PORT.lock().try_receive().ok())
}

/// Writes text even if the port lock is held (by this CPU, in the code a panic interrupted).
/// Only for panic reports: output may interleave with a half-written line.
pub fn write_str_panic(s: &str) {
    match PORT.try_lock() {
        Some(mut port) => {
            for b in s.bytes() {
                port.send(b);
            }
        }
        None => {
            // SAFETY: the lock holder is stopped (we are panicking with interrupts off);
            // a second handle to the same port only risks mixing bytes of two messages.
            let mut port = unsafe { SerialPort::new(COM1) };
            for b in s.bytes() {
                port.send(b);
            }
        }
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
