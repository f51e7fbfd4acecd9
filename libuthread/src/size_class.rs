//! Size classes of the program heap's per-vCPU caches (`heap.rs`, Tsumugi only): which small
//! layouts a cache serves and the layout their blocks have in the locked heap. Pure, so
//! host-tested here.

use core::alloc::Layout;

/// Largest size the per-vCPU caches keep.
pub(crate) const SMALL_MAX: usize = 256;
/// Size step of the classes, and the largest alignment the caches serve (every block of a
/// class is allocated from the locked heap with this alignment).
pub(crate) const CLASS_STEP: usize = 16;
/// Number of size classes: `CLASS_STEP`, `2 * CLASS_STEP`, …, `SMALL_MAX`.
pub(crate) const CLASSES: usize = SMALL_MAX / CLASS_STEP;

/// The size class of a layout the caches serve, or `None` (too large, or aligned more
/// strictly than [`CLASS_STEP`]).
#[inline(always)]
pub(crate) fn class_of(layout: Layout) -> Option<usize> {
    if layout.size() <= SMALL_MAX && layout.align() <= CLASS_STEP {
        // A zero size (never asked of a global allocator) would still map to class 0.
        Some(layout.size().saturating_sub(1) / CLASS_STEP)
    } else {
        None
    }
}

/// The layout every block of class `c` (< [`CLASSES`]) has in the locked heap.
#[inline(always)]
pub(crate) fn class_layout(c: usize) -> Layout {
    debug_assert!(c < CLASSES);
    // SAFETY: a non-zero multiple of 16 (at most `SMALL_MAX`) with a power-of-two alignment.
    unsafe { Layout::from_size_align_unchecked((c + 1) * CLASS_STEP, CLASS_STEP) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A served layout fits its class's block, wastes less than a step, and the class is
        /// a function of the layout alone (the free finds the allocation's block layout).
        #[test]
        fn a_class_block_holds_its_layouts(size in 1usize..=SMALL_MAX, align_log in 0u32..=4) {
            let layout = Layout::from_size_align(size, 1 << align_log).unwrap();
            let c = class_of(layout).expect("small layouts are served");
            prop_assert!(c < CLASSES);
            let block = class_layout(c);
            prop_assert!(block.size() >= size && block.size() - size < CLASS_STEP);
            prop_assert!(block.align() >= layout.align());
            prop_assert!(block.size() >= core::mem::size_of::<usize>());
            prop_assert_eq!(class_of(block), Some(c));
        }

        /// Larger or more strictly aligned layouts go to the locked heap.
        #[test]
        fn large_or_overaligned_layouts_are_not_served(size in 1usize..=4096, align_log in 0u32..=12) {
            let layout = Layout::from_size_align(size, 1 << align_log).unwrap();
            prop_assert_eq!(class_of(layout).is_some(), size <= SMALL_MAX && layout.align() <= CLASS_STEP);
        }
    }
}
