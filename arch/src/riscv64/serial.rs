//! The console: the 16550 UART the device tree names (0x1000_0000 on QEMU virt), through the
//! `uart_16550` crate's memory-mapped driver, reached through the direct map. Without a UART
//! (or before [`init`]) the SBI legacy console carries the text, one `ecall` per byte.

use core::fmt;
use core::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::Mutex;
use uart_16550::MmioSerialPort;

use super::layout::PHYS_MAP;

/// The UART, once [`init`] found and programmed it.
static PORT: Mutex<Option<MmioSerialPort>> = Mutex::new(None);
/// The UART's register base once [`init`] programmed it (0: none), for [`byte_waiting`].
static LSR_BASE: AtomicUsize = AtomicUsize::new(0);

/// Where the UART's registers are: the boot map lists their page as reserved, so the direct
/// map covers it in the boot tables and in the kernel's tables alike.
fn uart_base() -> Option<usize> {
    super::boot::platform().uart.map(|pa| (PHYS_MAP + pa.as_u64()) as usize)
}

/// Programs the UART (baud rate, 8N1, FIFOs). Called once at boot.
pub fn init() {
    let Some(base) = uart_base() else { return };
    // SAFETY: `base` maps the registers of the 16550 the device tree names (see uart_base);
    // only this module drives it.
    let mut port = unsafe { MmioSerialPort::new(base) };
    port.init();
    *PORT.lock() = Some(port);
    LSR_BASE.store(base, Ordering::Relaxed);
}

/// Sends bytes through `port`, or the SBI console when there is no UART.
fn send(port: Option<&mut MmioSerialPort>, bytes: impl Iterator<Item = u8>, raw: bool) {
    match port {
        Some(port) => {
            for b in bytes {
                if raw {
                    port.send_raw(b);
                } else {
                    port.send(b);
                }
            }
        }
        None => {
            for b in bytes {
                // The legacy call, because OpenSBI 1.1 (QEMU 7.2's) predates the Debug Console
                // extension of SBI 2.0 that replaces it.
                #[allow(deprecated)]
                sbi_rt::legacy::console_putchar(usize::from(b));
            }
        }
    }
}

/// Writes text to the console. Interrupts are held off while the port lock is taken so an
/// interrupt handler that prints cannot deadlock against the code it interrupted.
pub fn write_str(s: &str) {
    super::cpu::without_interrupts(|| send(PORT.lock().as_mut(), s.bytes(), false));
}

/// Writes bytes to the console (user output: not necessarily UTF-8).
pub fn write_bytes(bytes: &[u8]) {
    super::cpu::without_interrupts(|| send(PORT.lock().as_mut(), bytes.iter().copied(), true));
}

/// Whether the UART holds a received byte: one read of its line status register, without the
/// port lock (the read has no effect on data or transmission), so that the timer tick's poll
/// costs one read when nothing was typed. `false` without a UART.
#[inline]
pub fn byte_waiting() -> bool {
    /// Line status register offset and its "data ready" bit.
    const LSR: usize = 5;
    const DATA_READY: u8 = 1;
    let base = LSR_BASE.load(Ordering::Relaxed);
    // SAFETY: `base` (set by `init`) maps the 16550's registers through the direct map; reading
    // the line status register has no effect on the data or transmit paths the locked driver uses.
    base != 0 && unsafe { core::ptr::read_volatile((base + LSR) as *const u8) } & DATA_READY != 0
}

/// A byte the UART received, if any (never blocks; nothing without a UART).
pub fn try_read_byte() -> Option<u8> {
    super::cpu::without_interrupts(|| PORT.lock().as_mut().and_then(|port| port.try_receive().ok()))
}

/// Writes text even if the port lock is held (by this hart, in the code a panic interrupted).
/// Only for panic reports: output may interleave with a half-written line.
pub fn write_str_panic(s: &str) {
    if let Some(mut guard) = PORT.try_lock() {
        send(guard.as_mut(), s.bytes(), false);
        return;
    }
    match uart_base() {
        Some(base) => {
            // SAFETY: the lock holder is stopped (we are panicking with interrupts off); a second
            // handle to the same registers only risks mixing bytes of two messages.
            let mut port = unsafe { MmioSerialPort::new(base) };
            send(Some(&mut port), s.bytes(), false);
        }
        None => send(None, s.bytes(), false),
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
