//! Memory management: physical frames, page tables, regions, ranges of the single address
//! space, and (on the machine) the kernel's own address space and heap.

pub mod frame_alloc;
pub mod machine;
pub mod page_table;
pub mod region;
pub mod tag_alloc;
pub mod view_space;
pub mod user_range;

#[cfg(target_os = "none")]
pub mod heap;
#[cfg(target_os = "none")]
pub mod kernel_space;
#[cfg(target_os = "none")]
pub mod kernel_stack;
#[cfg(target_os = "none")]
pub mod cpu_tags;
#[cfg(target_os = "none")]
pub mod space;
