//! Kernel console output: `print!`/`println!` onto the port's console.

/// Prints to the console.
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => {{
        use core::fmt::Write as _;
        let _ = write!(arch::serial::Console, $($arg)*);
    }};
}

/// Prints a line to the console.
#[macro_export]
macro_rules! println {
    () => { $crate::print!("\n") };
    ($($arg:tt)*) => {{
        use core::fmt::Write as _;
        let _ = writeln!(arch::serial::Console, $($arg)*);
    }};
}
