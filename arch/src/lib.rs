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
