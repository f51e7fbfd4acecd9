//! The allocator of ranges of the user half of the single address space.
//!
//! A range is never handed out twice: this first version only moves forward (the user half is
//! 128 TiB, enough for a very long run). Each range is followed by an unmapped guard gap so an
//! overrun of one region faults instead of landing in the next.

use arch::addr::{VirtAddr, PAGE_SIZE};

/// Unmapped bytes left after every range.
pub const GUARD: u64 = 64 * 1024;

/// Hands out page-aligned, never-reused ranges of `[start, end)`.
#[derive(Debug)]
pub struct UserRangeAllocator {
    next: u64,
    end: u64,
}

/// The user half is exhausted (carries the size asked for).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exhausted(pub u64);

impl UserRangeAllocator {
    /// An allocator over `[start, end)` (both page-aligned).
    pub const fn new(start: u64, end: u64) -> Self {
        UserRangeAllocator { next: start, end }
    }

    /// A fresh range of at least `len` bytes aligned to `align` (a power of two, at least a page).
    pub fn allocate(&mut self, len: u64, align: u64) -> Result<VirtAddr, Exhausted> {
        let align = align.max(PAGE_SIZE);
        let start = VirtAddr::new(self.next).checked_align_up(align).ok_or(Exhausted(len))?;
        let len = VirtAddr::new(len.max(1)).checked_align_up(PAGE_SIZE).ok_or(Exhausted(len))?.as_u64();
        let end = start.as_u64().checked_add(len).ok_or(Exhausted(len))?;
        let next = end.checked_add(GUARD).ok_or(Exhausted(len))?;
        if end > self.end {
            return Err(Exhausted(len));
        }
        self.next = next;
        Ok(start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn ranges_never_overlap(reqs in proptest::collection::vec((1u64..1 << 24, 0u32..24), 1..64)) {
            let mut a = UserRangeAllocator::new(0x4000_0000, 0x7fff_ffe0_0000);
            let mut got: Vec<(u64, u64)> = Vec::new();
            for (len, align_shift) in reqs {
                let align = 1u64 << align_shift;
                let start = a.allocate(len, align).unwrap().as_u64();
                prop_assert_eq!(start % align.max(PAGE_SIZE), 0);
                let end = start + len;
                for &(s, e) in &got {
                    prop_assert!(end + GUARD <= s || start >= e + GUARD);
                }
                got.push((start, end));
            }
        }
    }

    #[test]
    fn exhaustion_is_an_error() {
        let mut a = UserRangeAllocator::new(0x1000, 0x10000);
        assert!(a.allocate(0x8000, PAGE_SIZE).is_ok());
        assert_eq!(a.allocate(0x8000, PAGE_SIZE), Err(Exhausted(0x8000)));
    }
}
