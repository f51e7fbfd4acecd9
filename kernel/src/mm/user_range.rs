//! The allocator of ranges of the user half of the single address space.
//!
//! A range handed out is never handed out again until it is given back (when its region dies),
//! so while a region lives its addresses mean it and nothing else, in every view. Each range is
//! followed by an unmapped guard gap that belongs to it, so an overrun faults instead of
//! landing in the next region. First fit over a map of free ranges, coalesced on release.

use alloc::collections::BTreeMap;
use arch::addr::{VirtAddr, PAGE_SIZE};

/// Unmapped bytes kept after every range.
pub const GUARD: u64 = 64 * 1024;

/// Hands out page-aligned ranges of `[start, end)`.
#[derive(Debug)]
pub struct UserRangeAllocator {
    /// Free ranges: start -> end.
    free: BTreeMap<u64, u64>,
    bounds: (u64, u64),
}

/// Why a range could not be handed out or given back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeAllocError {
    /// No free range is large enough (carries the size asked for).
    Exhausted(u64),
    /// The range given back was not handed out (carries its start).
    NotAllocated(u64),
}

impl UserRangeAllocator {
    /// An allocator over `[start, end)` (both page-aligned). `const` so it can sit in a static;
    /// the free map is filled on first use.
    pub const fn new(start: u64, end: u64) -> Self {
        UserRangeAllocator { free: BTreeMap::new(), bounds: (start, end) }
    }

    fn ensure_init(&mut self) {
        if self.bounds.0 < self.bounds.1 {
            self.free.insert(self.bounds.0, self.bounds.1);
            self.bounds = (0, 0);
        }
    }

    /// Bytes a request of `len` really takes (page-rounded, plus the guard gap).
    fn footprint(len: u64) -> Option<u64> {
        VirtAddr::new(len.max(1)).checked_align_up(PAGE_SIZE)?.as_u64().checked_add(GUARD)
    }

    /// A fresh range of at least `len` bytes aligned to `align` (a power of two, at least a page).
    pub fn allocate(&mut self, len: u64, align: u64) -> Result<VirtAddr, RangeAllocError> {
        self.ensure_init();
        let align = align.max(PAGE_SIZE);
        let need = Self::footprint(len).ok_or(RangeAllocError::Exhausted(len))?;
        let found = self.free.iter().find_map(|(&start, &end)| {
            let at = VirtAddr::new(start).checked_align_up(align)?.as_u64();
            let stop = at.checked_add(need)?;
            (stop <= end).then_some((start, end, at, stop))
        });
        let (start, end, at, stop) = found.ok_or(RangeAllocError::Exhausted(len))?;
        self.free.remove(&start);
        if at > start {
            self.free.insert(start, at);
        }
        if stop < end {
            self.free.insert(stop, end);
        }
        Ok(VirtAddr::new(at))
    }

    /// Gives back the range of `len` bytes at `start` (as handed out), coalescing neighbours.
    pub fn release(&mut self, start: VirtAddr, len: u64) -> Result<(), RangeAllocError> {
        self.ensure_init();
        let start = start.as_u64();
        let end = start.checked_add(Self::footprint(len).ok_or(RangeAllocError::NotAllocated(start))?).ok_or(RangeAllocError::NotAllocated(start))?;
        // Refuse anything overlapping a free range (a double release or a made-up range).
        if let Some((_, &e)) = self.free.range(..end).next_back() {
            if e > start {
                return Err(RangeAllocError::NotAllocated(start));
            }
        }
        let mut new_start = start;
        let mut new_end = end;
        if let Some((&s, &e)) = self.free.range(..start).next_back() {
            if e == start {
                self.free.remove(&s);
                new_start = s;
            }
        }
        if let Some(&e) = self.free.get(&end) {
            self.free.remove(&end);
            new_end = e;
        }
        self.free.insert(new_start, new_end);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const START: u64 = 0x4000_0000;
    const END: u64 = 0x4800_0000;

    proptest! {
        /// Live ranges (with their guards) never overlap; releasing everything restores the
        /// whole space as one free range.
        #[test]
        fn live_ranges_never_overlap(ops in proptest::collection::vec((any::<bool>(), 1u64..1 << 22, 0u32..22, any::<usize>()), 1..100)) {
            let mut a = UserRangeAllocator::new(START, END);
            let mut live: Vec<(u64, u64)> = Vec::new();
            for (alloc, len, align_shift, pick) in ops {
                if alloc || live.is_empty() {
                    let align = 1u64 << align_shift;
                    if let Ok(at) = a.allocate(len, align) {
                        let at = at.as_u64();
                        prop_assert_eq!(at % align.max(PAGE_SIZE), 0);
                        let end = at + UserRangeAllocator::footprint(len).unwrap();
                        prop_assert!(at >= START && end <= END);
                        for &(s, l) in &live {
                            let e = s + UserRangeAllocator::footprint(l).unwrap();
                            prop_assert!(end <= s || at >= e, "overlap");
                        }
                        live.push((at, len));
                    }
                } else {
                    let (s, l) = live.swap_remove(pick % live.len());
                    prop_assert!(a.release(VirtAddr::new(s), l).is_ok());
                    prop_assert!(a.release(VirtAddr::new(s), l).is_err(), "double release accepted");
                }
            }
            for (s, l) in live.drain(..) {
                a.release(VirtAddr::new(s), l).unwrap();
            }
            prop_assert_eq!(a.free.len(), 1);
            prop_assert_eq!(a.free.get(&START).copied(), Some(END));
        }
    }

    #[test]
    fn exhaustion_is_an_error() {
        let mut a = UserRangeAllocator::new(0x1000, 0x1000 + 0x8000 + GUARD);
        assert!(a.allocate(0x8000, PAGE_SIZE).is_ok());
        assert_eq!(a.allocate(0x1000, PAGE_SIZE), Err(RangeAllocError::Exhausted(0x1000)));
    }
}
