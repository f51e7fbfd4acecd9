//! Physical frame allocator: one bit per 4 KiB frame, built from the boot memory map.
//!
//! Boot code sizes the bitmap with [`FrameAllocator::storage_words`], makes an allocator whose
//! frames are all reserved, frees the usable ranges of the memory map with
//! [`FrameAllocator::add_free_range`] and takes the kernel image, the boot modules and the bitmap
//! itself back out with [`FrameAllocator::reserve_range`]. After that, [`FrameAllocator::allocate`]
//! and [`FrameAllocator::free`] hand frames out and take them back.
//!
//! Invariants (checked by the property tests at the bottom):
//! - bit `i` of the bitmap is 1 exactly when frame `base + i` is free;
//! - the bits past `frames` in the last word are always 0, so a zero word has nothing free and
//!   the scans can skip it whole;
//! - `free` equals the number of 1 bits.
//!
//! The bitmap alone cannot tell an allocated frame from a reserved one, so [`FrameAllocator::free`]
//! rejects only frames that are already free or not covered; freeing a reserved frame is the
//! caller's bug, the same as freeing memory twice through two different owners.

use arch::addr::{Frame, PhysAddr, PAGE_SHIFT, PAGE_SIZE, PHYS_ADDR_BITS};
use core::fmt;

/// Bits in one bitmap word.
const WORD_BITS: u64 = u64::BITS as u64;

/// One more than the largest frame number [`Frame::from_number`] accepts: frames lie below the
/// 52-bit physical address limit.
const FRAME_NUMBER_LIMIT: u64 = 1 << (PHYS_ADDR_BITS - PAGE_SHIFT);

/// Why [`FrameAllocator::new`] refused to build an allocator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NewError {
    /// The storage has fewer words than [`FrameAllocator::storage_words`] asks for.
    StorageTooSmall {
        /// Words needed to cover the span.
        needed: usize,
        /// Words the caller gave.
        given: usize,
    },
    /// The span `[base, base + frames)` reaches the 52-bit physical address limit (the frame
    /// one past its end must still be nameable).
    SpanTooLarge {
        /// First frame of the requested span.
        base: Frame,
        /// Number of frames requested.
        frames: u64,
    },
}

/// Why [`FrameAllocator::allocate`] or [`FrameAllocator::allocate_contiguous`] failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocError {
    /// No free frame (or no free run of the requested length and alignment) is left.
    OutOfMemory,
    /// The request itself is malformed: `count` is zero or `align` is not a power of two.
    BadRequest {
        /// Number of frames asked for.
        count: u64,
        /// Alignment asked for, in frames.
        align: u64,
    },
}

/// Why [`FrameAllocator::free`] or [`FrameAllocator::free_contiguous`] refused a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeError {
    /// The frame lies outside the span this allocator covers.
    NotCovered(Frame),
    /// The frame is already free.
    DoubleFree(Frame),
}

impl fmt::Display for NewError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NewError::StorageTooSmall { needed, given } => {
                write!(f, "frame bitmap needs {needed} words, got {given}")
            }
            NewError::SpanTooLarge { base, frames } => {
                write!(
                    f,
                    "{frames} frames from {base:?} reach past the physical address limit"
                )
            }
        }
    }
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocError::OutOfMemory => f.write_str("out of physical memory"),
            AllocError::BadRequest { count, align } => {
                write!(f, "bad frame request: {count} frames aligned to {align}")
            }
        }
    }
}

impl fmt::Display for FreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FreeError::NotCovered(frame) => write!(f, "{frame:?} is not managed by this allocator"),
            FreeError::DoubleFree(frame) => write!(f, "{frame:?} is already free"),
        }
    }
}

/// A bitmap allocator over the frames `[base, base + frames)`.
///
/// It does not lock: the kernel wraps it in its own lock.
pub struct FrameAllocator<'a> {
    /// One bit per frame, 1 = free; exactly [`Self::storage_words`]`(frames)` words long.
    bitmap: &'a mut [u64],
    /// The frame bit 0 stands for.
    base: Frame,
    /// How many frames the bitmap covers.
    frames: u64,
    /// How many bits are 1.
    free: u64,
    /// Word where the next single-frame search starts (next fit): the word the last allocation
    /// came from, so a run of allocations does not rescan the full words before it.
    hint: usize,
}

impl<'a> FrameAllocator<'a> {
    /// Words (`u64`) of bitmap storage needed to cover `frames` frames: one bit per frame,
    /// rounded up to whole words.
    pub const fn storage_words(frames: u64) -> usize {
        // Tsumugi runs on 64-bit machines only, so a word count always fits in `usize`;
        // `new` still checks the conversion.
        frames.div_ceil(WORD_BITS) as usize
    }

    /// An allocator covering frames `[base, base + frames)`, all initially *reserved* (not
    /// free). Only the first [`Self::storage_words`]`(frames)` words of `storage` are used; they
    /// are cleared here.
    pub fn new(storage: &'a mut [u64], base: Frame, frames: u64) -> Result<Self, NewError> {
        let end_fits = base
            .number()
            .checked_add(frames)
            .is_some_and(|end| end < FRAME_NUMBER_LIMIT);
        let words = usize::try_from(frames.div_ceil(WORD_BITS));
        let (true, Ok(needed)) = (end_fits, words) else {
            return Err(NewError::SpanTooLarge { base, frames });
        };
        let given = storage.len();
        let Some(bitmap) = storage.get_mut(..needed) else {
            return Err(NewError::StorageTooSmall { needed, given });
        };
        bitmap.fill(0);
        Ok(FrameAllocator {
            bitmap,
            base,
            frames,
            free: 0,
            hint: 0,
        })
    }

    /// Marks free the frames of `[start, end)` that lie inside the covered span: the usable
    /// ranges of the boot memory map. Partial frames at the edges are not freed (`start` rounds
    /// up, `end` rounds down). Returns how many frames became free; frames that already were
    /// free (overlapping map entries) are not counted and are not an error.
    pub fn add_free_range(&mut self, start: PhysAddr, end: PhysAddr) -> u64 {
        let first = start.align_up(PAGE_SIZE).as_u64() >> PAGE_SHIFT;
        let last = end.as_u64() >> PAGE_SHIFT;
        let (lo, hi) = self.clamp(first, last);
        let freed = self.set_bits(lo, hi, true);
        self.free += freed;
        freed
    }

    /// Marks `[start, end)` reserved again: the kernel image, boot modules, the bitmap itself.
    /// Unlike [`Self::add_free_range`], partial frames at the edges *are* reserved (`start`
    /// rounds down, `end` rounds up), because a frame holding any byte of such data must not be
    /// handed out. Returns how many free frames were taken out.
    pub fn reserve_range(&mut self, start: PhysAddr, end: PhysAddr) -> u64 {
        let first = start.as_u64() >> PAGE_SHIFT;
        let last = end.as_u64().div_ceil(PAGE_SIZE);
        let (lo, hi) = self.clamp(first, last);
        let taken = self.set_bits(lo, hi, false);
        self.free -= taken;
        taken
    }

    /// Takes one free frame.
    pub fn allocate(&mut self) -> Result<Frame, AllocError> {
        if self.free == 0 {
            return Err(AllocError::OutOfMemory);
        }
        // Next fit: search from the hint to the end, then wrap around. Full words are zero
        // and cost one comparison each.
        let (below, from_hint) = self.bitmap.split_at(self.hint.min(self.bitmap.len()));
        let found = from_hint
            .iter()
            .position(|&word| word != 0)
            .map(|i| i + below.len())
            .or_else(|| below.iter().position(|&word| word != 0));
        let Some(word) = found else {
            // `free > 0` promised a 1 bit; reaching here means the counter and the bitmap
            // disagree. Report exhaustion rather than hand out a wrong frame.
            debug_assert!(false, "free count {} but bitmap is empty", self.free);
            return Err(AllocError::OutOfMemory);
        };
        let bits = self.bitmap[word];
        let index = word as u64 * WORD_BITS + u64::from(bits.trailing_zeros());
        self.bitmap[word] = bits & (bits - 1);
        self.free -= 1;
        self.hint = word;
        Ok(self.frame_at(index))
    }

    /// Takes `count` physically contiguous free frames whose first frame number is a multiple
    /// of `align_frames` (a power of two, at least 1). First fit from the bottom of the span:
    /// contiguous runs are rare (DMA buffers, large page-table roots), so a scan that skips
    /// full words is enough, and it leaves the single-frame hint alone.
    pub fn allocate_contiguous(
        &mut self,
        count: u64,
        align_frames: u64,
    ) -> Result<Frame, AllocError> {
        if count == 0 || !align_frames.is_power_of_two() {
            return Err(AllocError::BadRequest {
                count,
                align: align_frames,
            });
        }
        if count > self.free {
            return Err(AllocError::OutOfMemory);
        }
        let mut from = 0;
        loop {
            let Some(free_at) = self.next_set(from, self.frames) else {
                return Err(AllocError::OutOfMemory);
            };
            // The lowest index at or after `free_at` whose absolute frame number is aligned.
            // Frame numbers are below 2^40 and `align_frames` at most 2^63, so this cannot
            // overflow; checked arithmetic keeps that a non-question.
            let absolute = self.base.number() + free_at;
            let start = absolute
                .checked_next_multiple_of(align_frames)
                .map(|aligned| aligned - self.base.number());
            let Some((start, end)) =
                start.and_then(|start| Some((start, start.checked_add(count)?)))
            else {
                return Err(AllocError::OutOfMemory);
            };
            if end > self.frames {
                return Err(AllocError::OutOfMemory);
            }
            match self.next_clear(start, end) {
                None => {
                    self.set_bits(start, end, false);
                    self.free -= count;
                    return Ok(self.frame_at(start));
                }
                // Every candidate starting at or before `used` overlaps it.
                Some(used) => from = used + 1,
            }
        }
    }

    /// Gives back one frame taken with [`Self::allocate`] (or as part of a contiguous run).
    pub fn free(&mut self, frame: Frame) -> Result<(), FreeError> {
        let index = self.index_of(frame).ok_or(FreeError::NotCovered(frame))?;
        if self.bit(index) {
            return Err(FreeError::DoubleFree(frame));
        }
        self.set_bits(index, index + 1, true);
        self.free += 1;
        Ok(())
    }

    /// Gives back `count` frames starting at `first`. All or nothing: every frame is checked
    /// before any changes, so on error the allocator is as it was. Freeing zero frames does
    /// nothing and succeeds.
    pub fn free_contiguous(&mut self, first: Frame, count: u64) -> Result<(), FreeError> {
        if count == 0 {
            return Ok(());
        }
        let start = self.index_of(first).ok_or(FreeError::NotCovered(first))?;
        let end = match start.checked_add(count) {
            Some(end) if end <= self.frames => end,
            // The first frame past the span; `new` made sure it is nameable.
            _ => return Err(FreeError::NotCovered(self.frame_at(self.frames))),
        };
        if let Some(already) = self.next_set(start, end) {
            return Err(FreeError::DoubleFree(self.frame_at(already)));
        }
        self.set_bits(start, end, true);
        self.free += count;
        Ok(())
    }

    /// Whether `frame` is covered and free.
    pub fn is_free(&self, frame: Frame) -> bool {
        self.index_of(frame).is_some_and(|index| self.bit(index))
    }

    /// How many frames are free.
    pub fn free_frames(&self) -> u64 {
        self.free
    }

    /// How many frames the allocator covers (free, allocated or reserved).
    pub fn covered_frames(&self) -> u64 {
        self.frames
    }

    /// The bitmap index of `frame`, if covered.
    fn index_of(&self, frame: Frame) -> Option<u64> {
        let index = frame.number().checked_sub(self.base.number())?;
        (index < self.frames).then_some(index)
    }

    /// The frame at bitmap index `index` (at most `frames`).
    fn frame_at(&self, index: u64) -> Frame {
        Frame::from_number(self.base.number() + index)
    }

    /// Absolute frame numbers `[first, last)` clipped to bitmap indices inside the span;
    /// an empty result has `lo >= hi`.
    fn clamp(&self, first: u64, last: u64) -> (u64, u64) {
        let base = self.base.number();
        let lo = first.saturating_sub(base).min(self.frames);
        let hi = last.saturating_sub(base).min(self.frames);
        (lo, hi)
    }

    /// Bit `index` (below `frames`).
    fn bit(&self, index: u64) -> bool {
        self.bitmap[word_of(index)] >> (index % WORD_BITS) & 1 == 1
    }

    /// Sets bits `[lo, hi)` (inside the span) to `value` and returns how many changed.
    fn set_bits(&mut self, lo: u64, hi: u64, value: bool) -> u64 {
        let mut changed = 0;
        let mut index = lo;
        while index < hi {
            let word = word_of(index);
            let mask = bit_mask(
                index % WORD_BITS,
                (hi - index).min(WORD_BITS - index % WORD_BITS),
            );
            let old = self.bitmap[word];
            let new = if value { old | mask } else { old & !mask };
            changed += u64::from((old ^ new).count_ones());
            self.bitmap[word] = new;
            index += u64::from(mask.count_ones());
        }
        changed
    }

    /// The first index in `[lo, hi)` whose bit is 1 (free).
    fn next_set(&self, lo: u64, hi: u64) -> Option<u64> {
        self.next_matching(lo, hi, |word| word)
    }

    /// The first index in `[lo, hi)` whose bit is 0 (allocated or reserved).
    fn next_clear(&self, lo: u64, hi: u64) -> Option<u64> {
        self.next_matching(lo, hi, |word| !word)
    }

    /// The first index in `[lo, hi)` whose bit is 1 in `view(word)`; whole words at a time.
    fn next_matching(&self, lo: u64, hi: u64, view: impl Fn(u64) -> u64) -> Option<u64> {
        let mut index = lo;
        while index < hi {
            let offset = index % WORD_BITS;
            let bits = view(self.bitmap[word_of(index)]) >> offset;
            if bits != 0 {
                let found = index + u64::from(bits.trailing_zeros());
                return (found < hi).then_some(found);
            }
            index += WORD_BITS - offset;
        }
        None
    }
}

impl fmt::Debug for FrameAllocator<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrameAllocator")
            .field("base", &self.base)
            .field("frames", &self.frames)
            .field("free", &self.free)
            .finish_non_exhaustive()
    }
}

/// The bitmap word holding bit `index`. `new` checked that the word count fits `usize`.
fn word_of(index: u64) -> usize {
    (index / WORD_BITS) as usize
}

/// `len` (1..=64) one bits starting at bit `shift`, with `shift + len <= 64`.
fn bit_mask(shift: u64, len: u64) -> u64 {
    let ones = if len == WORD_BITS {
        u64::MAX
    } else {
        (1 << len) - 1
    };
    ones << shift
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeSet;
    use alloc::vec;
    use alloc::vec::Vec;
    use proptest::prelude::*;

    fn addr(frame_number: u64) -> PhysAddr {
        PhysAddr::new(frame_number * PAGE_SIZE)
    }

    /// An allocator over `frames` frames from frame `base`, with all of them free.
    fn all_free(storage: &mut Vec<u64>, base: u64, frames: u64) -> FrameAllocator<'_> {
        storage.resize(FrameAllocator::storage_words(frames), u64::MAX);
        let mut alloc = FrameAllocator::new(storage, Frame::from_number(base), frames).unwrap();
        assert_eq!(
            alloc.add_free_range(addr(base), addr(base + frames)),
            frames
        );
        alloc
    }

    #[test]
    fn storage_words_rounds_up() {
        assert_eq!(FrameAllocator::storage_words(0), 0);
        assert_eq!(FrameAllocator::storage_words(1), 1);
        assert_eq!(FrameAllocator::storage_words(64), 1);
        assert_eq!(FrameAllocator::storage_words(65), 2);
    }

    #[test]
    fn new_checks_storage_and_span() {
        let mut storage = [0u64; 1];
        assert_eq!(
            FrameAllocator::new(&mut storage, Frame::from_number(0), 65).unwrap_err(),
            NewError::StorageTooSmall {
                needed: 2,
                given: 1
            }
        );
        let base = Frame::from_number(FRAME_NUMBER_LIMIT - 1);
        assert_eq!(
            FrameAllocator::new(&mut storage, base, 1).unwrap_err(),
            NewError::SpanTooLarge { base, frames: 1 }
        );
        assert_eq!(
            FrameAllocator::new(&mut storage, base, u64::MAX).unwrap_err(),
            NewError::SpanTooLarge {
                base,
                frames: u64::MAX
            }
        );
    }

    #[test]
    fn starts_reserved_and_clears_storage() {
        let mut storage = vec![u64::MAX; 4];
        let mut alloc = FrameAllocator::new(&mut storage, Frame::from_number(10), 100).unwrap();
        assert_eq!(alloc.free_frames(), 0);
        assert_eq!(alloc.covered_frames(), 100);
        assert!(!alloc.is_free(Frame::from_number(10)));
        assert_eq!(alloc.allocate(), Err(AllocError::OutOfMemory));
    }

    #[test]
    fn free_range_rounds_inward_and_clips() {
        let mut storage = vec![0; 2];
        let mut alloc = FrameAllocator::new(&mut storage, Frame::from_number(4), 100).unwrap();
        // [frame 2 + 1 byte, frame 8 + 1 byte): frames 3..8, clipped to 4..8.
        let freed = alloc.add_free_range(
            PhysAddr::new(2 * PAGE_SIZE + 1),
            PhysAddr::new(8 * PAGE_SIZE + 1),
        );
        assert_eq!(freed, 4);
        assert!(!alloc.is_free(Frame::from_number(3)));
        assert!(alloc.is_free(Frame::from_number(4)));
        assert!(alloc.is_free(Frame::from_number(7)));
        assert!(!alloc.is_free(Frame::from_number(8)));
        // Overlapping entries count only newly freed frames.
        assert_eq!(alloc.add_free_range(addr(6), addr(10)), 2);
        assert_eq!(alloc.free_frames(), 6);
        // A range inside one frame frees nothing; an inverted one neither.
        assert_eq!(
            alloc.add_free_range(
                PhysAddr::new(20 * PAGE_SIZE + 1),
                PhysAddr::new(21 * PAGE_SIZE - 1)
            ),
            0
        );
        assert_eq!(alloc.add_free_range(addr(50), addr(40)), 0);
        // Past the end of the span.
        assert_eq!(alloc.add_free_range(addr(100), addr(1000)), 4);
        assert_eq!(alloc.free_frames(), 10);
        assert!(!alloc.is_free(Frame::from_number(104)));
    }

    #[test]
    fn reserve_rounds_outward() {
        let mut storage = Vec::new();
        let mut alloc = all_free(&mut storage, 0, 64);
        // One byte into frame 3 up to one byte into frame 5 reserves frames 3, 4, 5.
        let taken = alloc.reserve_range(
            PhysAddr::new(3 * PAGE_SIZE + 1),
            PhysAddr::new(5 * PAGE_SIZE + 1),
        );
        assert_eq!(taken, 3);
        assert!(alloc.is_free(Frame::from_number(2)));
        assert!(!alloc.is_free(Frame::from_number(3)));
        assert!(!alloc.is_free(Frame::from_number(5)));
        assert!(alloc.is_free(Frame::from_number(6)));
        assert_eq!(alloc.reserve_range(addr(3), addr(4)), 0);
        assert_eq!(alloc.free_frames(), 61);
    }

    #[test]
    fn allocate_everything_then_free() {
        let mut storage = Vec::new();
        let mut alloc = all_free(&mut storage, 7, 130);
        let mut seen = BTreeSet::new();
        while let Ok(frame) = alloc.allocate() {
            assert!(seen.insert(frame.number()), "{frame:?} handed out twice");
        }
        assert_eq!(seen.len(), 130);
        assert_eq!(seen.first(), Some(&7));
        assert_eq!(seen.last(), Some(&136));
        assert_eq!(alloc.free_frames(), 0);
        for &n in &seen {
            alloc.free(Frame::from_number(n)).unwrap();
        }
        assert_eq!(alloc.free_frames(), 130);
    }

    #[test]
    fn allocate_is_next_fit() {
        let mut storage = Vec::new();
        let mut alloc = all_free(&mut storage, 0, 256);
        let a = alloc.allocate().unwrap();
        let b = alloc.allocate().unwrap();
        assert_eq!((a.number(), b.number()), (0, 1));
        alloc.free(a).unwrap();
        // The hint stays at the word of the last allocation; frame 0 is in it, so it comes back.
        assert_eq!(alloc.allocate().unwrap(), a);
        // Fill the first two words; the hint moves on and later searches start there.
        for _ in 0..126 {
            alloc.allocate().unwrap();
        }
        assert_eq!(alloc.allocate().unwrap().number(), 128);
        alloc.free(Frame::from_number(5)).unwrap();
        assert_eq!(alloc.allocate().unwrap().number(), 129);
        // Wraps around once the top is full.
        for _ in 130..256 {
            alloc.allocate().unwrap();
        }
        assert_eq!(alloc.allocate().unwrap().number(), 5);
        assert_eq!(alloc.allocate(), Err(AllocError::OutOfMemory));
    }

    #[test]
    fn free_errors() {
        let mut storage = Vec::new();
        let mut alloc = all_free(&mut storage, 10, 10);
        let frame = alloc.allocate().unwrap();
        alloc.free(frame).unwrap();
        assert_eq!(alloc.free(frame), Err(FreeError::DoubleFree(frame)));
        let outside = Frame::from_number(9);
        assert_eq!(alloc.free(outside), Err(FreeError::NotCovered(outside)));
        let outside = Frame::from_number(20);
        assert_eq!(alloc.free(outside), Err(FreeError::NotCovered(outside)));
        assert_eq!(alloc.free_frames(), 10);
    }

    #[test]
    fn contiguous_respects_alignment_and_holes() {
        let mut storage = Vec::new();
        let mut alloc = all_free(&mut storage, 3, 200);
        // The first 8-aligned frame number at or after 3 is 8.
        let run = alloc.allocate_contiguous(4, 8).unwrap();
        assert_eq!(run.number(), 8);
        for n in 8..12 {
            assert!(!alloc.is_free(Frame::from_number(n)));
        }
        // A hole at 20 makes the 16-aligned run of 8 start at 32.
        alloc.reserve_range(addr(20), addr(21));
        assert_eq!(alloc.allocate_contiguous(8, 16).unwrap().number(), 32);
        // Unaligned runs fill the gap below.
        assert_eq!(alloc.allocate_contiguous(5, 1).unwrap().number(), 3);
        assert_eq!(alloc.free_frames(), 200 - 4 - 1 - 8 - 5);
        // Crossing word boundaries.
        assert_eq!(alloc.allocate_contiguous(100, 1).unwrap().number(), 40);
        assert_eq!(
            alloc.allocate_contiguous(100, 1),
            Err(AllocError::OutOfMemory)
        );
    }

    #[test]
    fn contiguous_bad_requests() {
        let mut storage = Vec::new();
        let mut alloc = all_free(&mut storage, 0, 64);
        assert_eq!(
            alloc.allocate_contiguous(0, 1),
            Err(AllocError::BadRequest { count: 0, align: 1 })
        );
        assert_eq!(
            alloc.allocate_contiguous(1, 0),
            Err(AllocError::BadRequest { count: 1, align: 0 })
        );
        assert_eq!(
            alloc.allocate_contiguous(1, 3),
            Err(AllocError::BadRequest { count: 1, align: 3 })
        );
        assert_eq!(
            alloc.allocate_contiguous(65, 1),
            Err(AllocError::OutOfMemory)
        );
        assert_eq!(
            alloc.allocate_contiguous(1, 1 << 63),
            Ok(Frame::from_number(0))
        );
        assert_eq!(
            alloc.allocate_contiguous(1, 1 << 63),
            Err(AllocError::OutOfMemory)
        );
        assert_eq!(
            alloc.allocate_contiguous(u64::MAX, 1),
            Err(AllocError::OutOfMemory)
        );
        assert_eq!(alloc.free_frames(), 63);
    }

    #[test]
    fn free_contiguous_is_all_or_nothing() {
        let mut storage = Vec::new();
        let mut alloc = all_free(&mut storage, 100, 64);
        let run = alloc.allocate_contiguous(10, 1).unwrap();
        assert_eq!(run.number(), 100);
        alloc.free(Frame::from_number(105)).unwrap();
        assert_eq!(
            alloc.free_contiguous(run, 10),
            Err(FreeError::DoubleFree(Frame::from_number(105)))
        );
        assert_eq!(alloc.free_frames(), 55);
        assert!(!alloc.is_free(run));
        assert_eq!(
            alloc.free_contiguous(Frame::from_number(99), 2),
            Err(FreeError::NotCovered(Frame::from_number(99)))
        );
        assert_eq!(
            alloc.free_contiguous(Frame::from_number(160), 10),
            Err(FreeError::NotCovered(Frame::from_number(164)))
        );
        assert_eq!(
            alloc.free_contiguous(run, u64::MAX),
            Err(FreeError::NotCovered(Frame::from_number(164)))
        );
        assert_eq!(alloc.free_contiguous(run, 0), Ok(()));
        alloc.free_contiguous(run, 5).unwrap();
        alloc.free_contiguous(Frame::from_number(106), 4).unwrap();
        assert_eq!(alloc.free_frames(), 64);
    }

    #[test]
    fn empty_allocator() {
        let mut storage: [u64; 0] = [];
        let mut alloc = FrameAllocator::new(&mut storage, Frame::from_number(0), 0).unwrap();
        assert_eq!(alloc.add_free_range(addr(0), addr(100)), 0);
        assert_eq!(alloc.allocate(), Err(AllocError::OutOfMemory));
        assert_eq!(
            alloc.allocate_contiguous(1, 1),
            Err(AllocError::OutOfMemory)
        );
        assert_eq!(
            alloc.free(Frame::from_number(0)),
            Err(FreeError::NotCovered(Frame::from_number(0)))
        );
    }

    #[test]
    fn top_of_physical_memory() {
        let frames = 70;
        let base = FRAME_NUMBER_LIMIT - frames - 1;
        let mut storage = Vec::new();
        let mut alloc = all_free(&mut storage, base, frames);
        // A range ending at the very top of the address space rounds without overflow.
        assert_eq!(
            alloc.reserve_range(addr(base), PhysAddr::new((1 << PHYS_ADDR_BITS) - 1)),
            frames
        );
        assert_eq!(
            alloc.add_free_range(PhysAddr::new(0), PhysAddr::new((1 << PHYS_ADDR_BITS) - 1)),
            frames
        );
        let run = alloc.allocate_contiguous(frames, 1).unwrap();
        assert_eq!(run.number(), base);
        assert_eq!(
            alloc.free_contiguous(run, frames + 1),
            Err(FreeError::NotCovered(Frame::from_number(base + frames)))
        );
    }

    // ---- Model-based property test ----

    /// Smallest and largest span the property test builds.
    const MAX_FRAMES: u64 = 300;
    /// Largest base frame number the property test picks.
    const MAX_BASE: u64 = 1000;
    /// How far outside the span ranges and bad frees may reach, in frames.
    const SLACK: u64 = 70;

    #[derive(Clone, Debug)]
    enum Op {
        /// Byte addresses relative to the span's first byte, may lie outside it.
        AddFree(i64, i64),
        Reserve(i64, i64),
        Allocate,
        AllocateContiguous {
            count: u64,
            align_log2: u32,
        },
        /// Frees the `n % len`-th allocated frame (if any).
        Free(usize),
        /// Frees the `n % len`-th allocated contiguous run (if any).
        FreeContiguous(usize),
        /// Frees a frame by number relative to base: a double free when it is free, an
        /// uncovered frame when outside; otherwise a real free if allocated, skipped if reserved.
        FreeAny(i64),
        /// Frees a run relative to base that may overlap free frames or leave the span;
        /// performed only if it must fail (it may include reserved frames otherwise).
        FreeContiguousAny(i64, u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        let byte = || -(SLACK as i64 * PAGE_SIZE as i64)..((MAX_FRAMES + SLACK) * PAGE_SIZE) as i64;
        let frame = || -(SLACK as i64)..(MAX_FRAMES + SLACK) as i64;
        prop_oneof![
            2 => (byte(), byte()).prop_map(|(a, b)| Op::AddFree(a, b)),
            1 => (byte(), byte()).prop_map(|(a, b)| Op::Reserve(a, b)),
            6 => Just(Op::Allocate),
            2 => (1u64..40, 0u32..7).prop_map(|(count, align_log2)| Op::AllocateContiguous { count, align_log2 }),
            4 => any::<usize>().prop_map(Op::Free),
            2 => any::<usize>().prop_map(Op::FreeContiguous),
            2 => frame().prop_map(Op::FreeAny),
            1 => (frame(), 1u64..20).prop_map(|(f, n)| Op::FreeContiguousAny(f, n)),
        ]
    }

    /// What the allocator should look like: the free set, plus what the test holds.
    struct Model {
        base: u64,
        frames: u64,
        free: BTreeSet<u64>,
        /// Frames the test owns from single allocations.
        singles: Vec<u64>,
        /// Runs (first, count) the test owns from contiguous allocations.
        runs: Vec<(u64, u64)>,
    }

    impl Model {
        fn owned(&self) -> BTreeSet<u64> {
            let mut owned: BTreeSet<u64> = self.singles.iter().copied().collect();
            for &(first, count) in &self.runs {
                owned.extend(first..first + count);
            }
            owned
        }

        /// Forget ownership of frames that a free range made free again behind our back.
        fn disown(&mut self, lo: u64, hi: u64) {
            self.singles.retain(|n| !(lo..hi).contains(n));
            // Split runs around the freed range, keeping the parts still owned as singles.
            let mut kept = Vec::new();
            for &(first, count) in &self.runs {
                if first + count <= lo || first >= hi {
                    kept.push((first, count));
                } else {
                    self.singles
                        .extend((first..first + count).filter(|n| !(lo..hi).contains(n)));
                }
            }
            self.runs = kept;
        }

        fn byte(&self, relative: i64) -> PhysAddr {
            PhysAddr::new((self.base as i64 * PAGE_SIZE as i64 + relative).max(0) as u64)
        }

        fn frame(&self, relative: i64) -> Option<u64> {
            u64::try_from(self.base as i64 + relative).ok()
        }
    }

    fn check(alloc: &FrameAllocator<'_>, model: &Model) {
        assert_eq!(alloc.free_frames(), model.free.len() as u64);
        let lo = model.base.saturating_sub(SLACK);
        for n in lo..model.base + model.frames + SLACK {
            assert_eq!(
                alloc.is_free(Frame::from_number(n)),
                model.free.contains(&n),
                "frame {n}"
            );
        }
        assert!(model.owned().is_disjoint(&model.free));
    }

    fn run(base: u64, frames: u64, ops: Vec<Op>) {
        let mut storage = vec![u64::MAX; FrameAllocator::storage_words(frames)];
        let mut alloc =
            FrameAllocator::new(&mut storage, Frame::from_number(base), frames).unwrap();
        let mut model = Model {
            base,
            frames,
            free: BTreeSet::new(),
            singles: Vec::new(),
            runs: Vec::new(),
        };
        let span = base..base + frames;
        for op in ops {
            match op {
                Op::AddFree(a, b) => {
                    let (start, end) = (model.byte(a), model.byte(b));
                    let lo = start.as_u64().div_ceil(PAGE_SIZE).max(base);
                    let hi = (end.as_u64() / PAGE_SIZE).min(base + frames);
                    let before = model.free.len();
                    model.free.extend(lo..hi);
                    model.disown(lo, hi);
                    assert_eq!(
                        alloc.add_free_range(start, end),
                        (model.free.len() - before) as u64
                    );
                }
                Op::Reserve(a, b) => {
                    let (start, end) = (model.byte(a), model.byte(b));
                    let lo = start.as_u64() / PAGE_SIZE;
                    let hi = end.as_u64().div_ceil(PAGE_SIZE);
                    let before = model.free.len();
                    model.free.retain(|n| !(lo..hi).contains(n));
                    assert_eq!(
                        alloc.reserve_range(start, end),
                        (before - model.free.len()) as u64
                    );
                }
                Op::Allocate => match alloc.allocate() {
                    Ok(frame) => {
                        assert!(model.free.remove(&frame.number()), "{frame:?} was not free");
                        model.singles.push(frame.number());
                    }
                    Err(error) => {
                        assert_eq!(error, AllocError::OutOfMemory);
                        assert!(model.free.is_empty());
                    }
                },
                Op::AllocateContiguous { count, align_log2 } => {
                    let align = 1 << align_log2;
                    // Lowest fitting run in the model (the allocator is first fit too, but any
                    // fitting run would be correct; only existence is compared).
                    let fits = |first: u64| (first..first + count).all(|n| model.free.contains(&n));
                    let exists = span.clone().filter(|n| n % align == 0).any(fits);
                    match alloc.allocate_contiguous(count, align) {
                        Ok(first) => {
                            let first = first.number();
                            assert_eq!(first % align, 0);
                            assert!(fits(first), "run {first}+{count} was not free");
                            for n in first..first + count {
                                model.free.remove(&n);
                            }
                            model.runs.push((first, count));
                        }
                        Err(error) => {
                            assert_eq!(error, AllocError::OutOfMemory);
                            assert!(!exists, "a free run of {count} aligned to {align} existed");
                        }
                    }
                }
                Op::Free(i) => {
                    if !model.singles.is_empty() {
                        let n = model.singles.swap_remove(i % model.singles.len());
                        alloc.free(Frame::from_number(n)).unwrap();
                        model.free.insert(n);
                    }
                }
                Op::FreeContiguous(i) => {
                    if !model.runs.is_empty() {
                        let (first, count) = model.runs.swap_remove(i % model.runs.len());
                        alloc
                            .free_contiguous(Frame::from_number(first), count)
                            .unwrap();
                        model.free.extend(first..first + count);
                    }
                }
                Op::FreeAny(relative) => {
                    let Some(n) = model.frame(relative) else {
                        continue;
                    };
                    let frame = Frame::from_number(n);
                    if !span.contains(&n) {
                        assert_eq!(alloc.free(frame), Err(FreeError::NotCovered(frame)));
                    } else if model.free.contains(&n) {
                        assert_eq!(alloc.free(frame), Err(FreeError::DoubleFree(frame)));
                    } else if let Some(i) = model.singles.iter().position(|&s| s == n) {
                        model.singles.swap_remove(i);
                        alloc.free(frame).unwrap();
                        model.free.insert(n);
                    }
                }
                Op::FreeContiguousAny(relative, count) => {
                    let Some(first) = model.frame(relative) else {
                        continue;
                    };
                    let frame = Frame::from_number(first);
                    let uncovered = (first..first + count).find(|n| !span.contains(n));
                    let double = (first..first + count).find(|n| model.free.contains(n));
                    let expected = if !span.contains(&first) {
                        FreeError::NotCovered(frame)
                    } else if let Some(n) = uncovered {
                        FreeError::NotCovered(Frame::from_number(n))
                    } else if let Some(n) = double {
                        FreeError::DoubleFree(Frame::from_number(n))
                    } else {
                        continue;
                    };
                    assert_eq!(alloc.free_contiguous(frame, count), Err(expected));
                }
            }
            check(&alloc, &model);
        }
        // Never lose a frame: giving everything back restores exactly free ∪ owned.
        let expected: BTreeSet<u64> = model.free.union(&model.owned()).copied().collect();
        for &n in &model.singles {
            alloc.free(Frame::from_number(n)).unwrap();
        }
        for &(first, count) in &model.runs {
            alloc
                .free_contiguous(Frame::from_number(first), count)
                .unwrap();
        }
        let actual: BTreeSet<u64> = span
            .filter(|&n| alloc.is_free(Frame::from_number(n)))
            .collect();
        assert_eq!(actual, expected);
        assert_eq!(alloc.free_frames(), expected.len() as u64);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn matches_model(
            base in 0..MAX_BASE,
            frames in 0..MAX_FRAMES,
            ops in proptest::collection::vec(op(), 0..400),
        ) {
            run(base, frames, ops);
        }

        #[test]
        fn boot_then_churn(
            base in 0..MAX_BASE,
            frames in 1..MAX_FRAMES,
            boot in proptest::collection::vec(
                prop_oneof![
                    3 => (0..MAX_FRAMES as i64 * PAGE_SIZE as i64, 0..MAX_FRAMES as i64 * PAGE_SIZE as i64)
                        .prop_map(|(a, b)| Op::AddFree(a.min(b), a.max(b))),
                    1 => (0..MAX_FRAMES as i64 * PAGE_SIZE as i64, 0..8 * PAGE_SIZE as i64)
                        .prop_map(|(a, len)| Op::Reserve(a, a + len)),
                ],
                1..8,
            ),
            churn in proptest::collection::vec(
                op().prop_filter("boot is over", |op| !matches!(op, Op::AddFree(..) | Op::Reserve(..))),
                0..300,
            ),
        ) {
            run(base, frames, boot.into_iter().chain(churn).collect());
        }
    }
}
