//! Console output for user programs: text is gathered into a line buffer and written with one
//! syscall per line (or per full buffer), so lines from different threads and CPUs do not
//! interleave mid-line.

use core::fmt;

/// Bytes gathered before a write.
const LINE: usize = 256;

/// A `fmt::Write` sink for the console that writes when dropped, at newlines, or when full.
pub struct Console {
    buf: [u8; LINE],
    len: usize,
}

impl Console {
    /// An empty line buffer.
    pub const fn new() -> Self {
        Console { buf: [0; LINE], len: 0 }
    }

    /// Writes what is gathered.
    pub fn flush(&mut self) {
        if self.len > 0 {
            let _ = crate::sys::console_write_all(&self.buf[..self.len]);
            self.len = 0;
        }
    }
}

impl Default for Console {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Write for Console {
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

impl Drop for Console {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Prints to the console.
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => {{
        use core::fmt::Write as _;
        let mut console = $crate::io::Console::new();
        let _ = write!(console, $($arg)*);
    }};
}

/// Prints a line to the console.
#[macro_export]
macro_rules! println {
    () => { $crate::print!("\n") };
    ($($arg:tt)*) => {{
        use core::fmt::Write as _;
        let mut console = $crate::io::Console::new();
        let _ = writeln!(console, $($arg)*);
    }};
}
