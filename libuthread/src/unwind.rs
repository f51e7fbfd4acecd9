//! Panics in user threads. Hosted (std), a panic is caught at the thread's entry and handed to
//! its joiner, as `std::thread` does; on Tsumugi (`panic = "abort"`, no unwinding) the panic
//! handler ends the program, so a thread's outcome is always its value.

use crate::task::Outcome;

/// Runs a thread body, catching a panic where unwinding exists.
pub(crate) fn catch<T>(body: impl FnOnce() -> T) -> Outcome<T> {
    #[cfg(not(target_os = "none"))]
    {
        std::panic::catch_unwind(core::panic::AssertUnwindSafe(body))
    }
    #[cfg(target_os = "none")]
    {
        Ok(body())
    }
}

/// Continues a caught panic in the caller.
pub(crate) fn resume(payload: alloc::boxed::Box<dyn core::any::Any + Send>) -> ! {
    #[cfg(not(target_os = "none"))]
    {
        std::panic::resume_unwind(payload)
    }
    #[cfg(target_os = "none")]
    {
        drop(payload);
        unreachable!("no unwinding without std")
    }
}
