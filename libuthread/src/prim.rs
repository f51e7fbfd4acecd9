//! The atomic types and spin hint every lock-free part of the library uses, so that the same code
//! is model-checked by `loom` (`--cfg loom`) and runs for real otherwise.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize};

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize};

pub(crate) use core::sync::atomic::Ordering;

#[cfg(loom)]
pub(crate) use loom::sync::atomic::fence;
#[cfg(not(loom))]
pub(crate) use core::sync::atomic::fence;

/// What a busy-wait loop does between two looks: a CPU pause hint, or under loom a yield so the
/// model checker can run the thread being waited for.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}
