//! Kernel console output: `print!`/`println!` onto the port's console. Text is formatted into a
//! line buffer first and written under one console lock, so lines from different CPUs (and user
//! programs) do not interleave mid-line.

use core::fmt;

/// Bytes gathered before a write.
const LINE: usize = 256;

/// A line buffer that writes to the console at newlines, when full, and when dropped.
pub struct LineWriter {
    buf: [u8; LINE],
    len: usize,
}

impl LineWriter {
    /// An empty buffer.
    pub const fn new() -> Self {
        LineWriter { buf: [0; LINE], len: 0 }
    }

    fn flush(&mut self) {
        if self.len > 0 {
            arch::serial::write_bytes(&self.buf[..self.len]);
            self.len = 0;
        }
    }
}

impl Default for LineWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Write for LineWriter {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for &b in s.as_bytes() {
            if self.len == LINE {
                self.flush();
            }
            self.buf[self.len] = b;
            self.len += 1;
            if b == b'\n' {
                self.flush();
            }
        }
        Ok(())
    }
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Prints to the console.
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => {{
        use core::fmt::Write as _;
        let mut w = $crate::console::LineWriter::new();
        let _ = write!(w, $($arg)*);
    }};
}

/// Prints a line to the console.
#[macro_export]
macro_rules! println {
    () => { $crate::print!("\n") };
    ($($arg:tt)*) => {{
        use core::fmt::Write as _;
        let mut w = $crate::console::LineWriter::new();
        let _ = writeln!(w, $($arg)*);
    }};
}
