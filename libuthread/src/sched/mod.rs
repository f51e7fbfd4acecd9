//! The M:N scheduler and its parts: the per-vCPU ready queues, the idle set, the run-state
//! handshake between a thread that blocks and its waker, the park tokens, the wait lists the
//! blocking primitives share, and the scheduler proper (`scheduler.rs`: dispatch, switch,
//! spawn, exit, yield, block, wake). This file only wires them; the parts that need no
//! scheduler (everything but `scheduler.rs`) are also built under loom for the model checks.

pub(crate) mod blocking;
pub(crate) mod completion;
pub(crate) mod idle;
#[cfg(not(loom))]
pub(crate) mod pool;
pub(crate) mod queue;
pub(crate) mod runstate;
pub(crate) mod token;

#[cfg(not(loom))]
mod scheduler;

#[cfg(not(loom))]
pub use scheduler::{enter_vcpu_loop, note_blocked, requeue_full, restart_count, resume_counts, vcpu_count};
#[cfg(not(loom))]
pub(crate) use scheduler::*;
