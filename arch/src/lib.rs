//! Everything in Tsumugi that differs by architecture, behind one interface.
//!
//! The kernel never contains `asm!`; it calls the typed operations of this crate. Each
//! architecture folder (`x86_64/`, `riscv64/`, `aarch64/`, named exactly as `target_arch`) has the
//! same module names — `boot`, `cpu`, `serial`, `trap`, `context`, `paging`, `interrupts`,
//! `timer`, `usercopy` — and this file is the one place that picks the folder for the build target.
//! `hosted/` stands in for the hardware when the kernel's logic is tested on the host.
//!
//! Architecture-independent vocabulary (typed addresses, the neutral page-table flags, the trap
//! events the kernel sees) lives at this level so every port speaks it.
#![cfg_attr(not(test), no_std)]

pub mod addr;
pub mod bootinfo;
pub mod clock;
pub mod event;
pub mod mapping;
pub mod sync;

/// Zeroes `*slot` a word at a time with volatile stores, which the compiler unrolls into
/// straight-line stores (a `memset` call costs a loop of several instructions a word on some
/// ports). For the trap frames a new user entry builds (`TrapFrame::new_user_in_place`).
///
/// # Safety
/// `slot` is valid for writes of a `T` and aligned for a `u64`; `T` is a size that is a
/// multiple of 8 (checked at compile time) and valid when all zero.
#[inline(always)]
pub unsafe fn zero_words<T>(slot: *mut T) {
    const { assert!(core::mem::size_of::<T>() % 8 == 0) };
    let words = slot as *mut u64;
    for i in 0..core::mem::size_of::<T>() / 8 {
        // SAFETY: the caller's contract: in bounds of `*slot`, aligned.
        unsafe { words.add(i).write_volatile(0) };
    }
}

#[cfg(all(target_arch = "x86_64", target_os = "none"))]
#[path = "x86_64/mod.rs"]
mod imp;

#[cfg(all(target_arch = "riscv64", target_os = "none"))]
#[path = "riscv64/mod.rs"]
mod imp;

#[cfg(all(target_arch = "aarch64", target_os = "none"))]
#[path = "aarch64/mod.rs"]
mod imp;

#[cfg(not(target_os = "none"))]
#[path = "hosted/mod.rs"]
mod imp;

pub use imp::*;

#[cfg(target_os = "none")]
pub mod usercopy;
