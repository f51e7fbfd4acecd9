//! Memory management: physical frames, page tables, regions, ranges of the single address
//! space, and (on the machine) the kernel's own address space and heap.

pub mod frame_alloc;
pub mod machine;
pub mod page_table;
pub mod region;
pub mod tlb_tag;
pub mod view;
pub mod user_range;

#[cfg(target_os = "none")]
pub mod heap;
#[cfg(target_os = "none")]
pub mod kernel_space;
#[cfg(target_os = "none")]
pub mod kernel_stack;
#[cfg(target_os = "none")]
pub mod tags;
#[cfg(target_os = "none")]
pub mod views;
