//! Host-side test definitions for Tsumugi: what `cargo xtask test` boots in QEMU and how it judges the result.
//!
//! This crate never starts QEMU itself; `xtask` does, then hands the outcome and the serial log to
//! [`check::evaluate`]. Keeping the suites, the log parser and the evaluator here, as plain data and pure
//! functions, lets `cargo test` check the harness logic on the host without a guest.
#![forbid(unsafe_code)]

pub mod check;
pub mod logparse;
pub mod outcome;
pub mod suites;

pub use check::{evaluate, CheckResult};
pub use outcome::Outcome;
pub use suites::{Check, Expected, Suite};
