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

/// `outcome` as it is, where a run may end in a panic (hosted); on Tsumugi, where no run can
/// (`catch` makes every outcome), the outcome with its `Err` case ruled out, so the
/// compiler drops the joiner's test of it: a join's caller then tests nothing (x86_64 -icount,
/// a spawn + inline join and its `.ok()`: the load and test of the niche word and the drop of
/// a payload that cannot be there).
#[inline(always)]
pub(crate) fn settled<T>(outcome: Outcome<T>) -> Outcome<T> {
    #[cfg(not(target_os = "none"))]
    {
        outcome
    }
    #[cfg(target_os = "none")]
    match outcome {
        Ok(value) => Ok(value),
        // SAFETY: on this target only `catch` makes outcomes, and its are all `Ok`.
        Err(_) => unsafe { core::hint::unreachable_unchecked() },
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
