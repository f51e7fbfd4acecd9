//! Scheduling: the run-queue policy (pure logic, host-tested) and, on the machine, the
//! per-CPU scheduler that switches threads.

pub mod runqueue;
#[cfg(target_os = "none")]
pub mod scheduler;
