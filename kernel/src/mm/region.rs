//! Regions: named ranges of the single address space with their rights and backing frames, and
//! the check every syscall makes before touching user memory.

use alloc::vec::Vec;
use arch::addr::{Frame, VirtAddr, PAGE_SIZE};
use arch::mapping::MapFlags;

/// What a region holds (for reports and, later, policy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegionKind {
    /// Program code.
    Text,
    /// Read-only program data.
    Rodata,
    /// Writable program data and bss.
    Data,
    /// A heap.
    Heap,
    /// A thread stack.
    Stack,
    /// Thread management blocks.
    Thmb,
    /// Memory shared between threads or domains.
    Shared,
}

impl RegionKind {
    /// The kind's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            RegionKind::Text => "text",
            RegionKind::Rodata => "rodata",
            RegionKind::Data => "data",
            RegionKind::Heap => "heap",
            RegionKind::Stack => "stack",
            RegionKind::Thmb => "thmb",
            RegionKind::Shared => "shared",
        }
    }

    /// The kind a loaded segment with these rights becomes.
    pub fn for_segment(flags: MapFlags) -> RegionKind {
        if flags.contains(MapFlags::EXEC) {
            RegionKind::Text
        } else if flags.contains(MapFlags::WRITE) {
            RegionKind::Data
        } else {
            RegionKind::Rodata
        }
    }
}

/// A region of user memory, eagerly backed by `frames` (one per page, in order).
#[derive(Debug)]
pub struct Region {
    /// First byte (page-aligned).
    pub start: VirtAddr,
    /// Rights of the owning view.
    pub flags: MapFlags,
    /// What it holds.
    pub kind: RegionKind,
    /// Backing frames, one per page.
    pub frames: Vec<Frame>,
}

impl Region {
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.frames.len() as u64 * PAGE_SIZE
    }

    /// Whether the region has no pages.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.start.as_u64() + self.len()
    }

    /// Whether `addr` lies inside.
    pub fn contains(&self, addr: u64) -> bool {
        (self.start.as_u64()..self.end()).contains(&addr)
    }
}

/// Why a user range was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeError {
    /// `addr + len` overflows.
    Overflow,
    /// A byte at this address is in no region.
    Unmapped(u64),
    /// A byte at this address is in a region without the needed rights.
    Denied(u64),
}

/// Checks that every byte of `[addr, addr + len)` lies in `regions` with at least `need` rights.
/// An empty range is always fine (it touches nothing).
pub fn check_range(regions: &[Region], addr: u64, len: u64, need: MapFlags) -> Result<(), RangeError> {
    if len == 0 {
        return Ok(());
    }
    let end = addr.checked_add(len).ok_or(RangeError::Overflow)?;
    let mut at = addr;
    while at < end {
        let region = regions.iter().find(|r| r.contains(at)).ok_or(RangeError::Unmapped(at))?;
        if !region.flags.contains(need) {
            return Err(RangeError::Denied(at));
        }
        at = region.end();
    }
    Ok(())
}

/// The region holding `addr`, if any.
pub fn find(regions: &[Region], addr: u64) -> Option<&Region> {
    regions.iter().find(|r| r.contains(addr))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn region(start: u64, pages: u64, flags: MapFlags) -> Region {
        Region {
            start: VirtAddr::new(start),
            flags,
            kind: RegionKind::Data,
            frames: (0..pages).map(Frame::from_number).collect(),
        }
    }

    #[test]
    fn checks_ranges() {
        let rw = MapFlags::READ | MapFlags::WRITE | MapFlags::USER;
        let r = MapFlags::READ | MapFlags::USER;
        let regions = [region(0x1000, 2, rw), region(0x3000, 1, r)];
        assert_eq!(check_range(&regions, 0x1000, 0x3000, MapFlags::READ), Ok(()));
        assert_eq!(check_range(&regions, 0x1000, 0x3000, MapFlags::WRITE), Err(RangeError::Denied(0x3000)));
        assert_eq!(check_range(&regions, 0x3fff, 2, MapFlags::READ), Err(RangeError::Unmapped(0x4000)));
        assert_eq!(check_range(&regions, u64::MAX, 2, MapFlags::READ), Err(RangeError::Overflow));
        assert_eq!(check_range(&regions, 0xdead_0000, 0, MapFlags::READ), Ok(()));
    }

    proptest! {
        /// The check agrees with a byte-by-byte model.
        #[test]
        fn agrees_with_bytewise_model(addr in 0u64..0x8000, len in 0u64..0x8000, write in any::<bool>()) {
            let rw = MapFlags::READ | MapFlags::WRITE | MapFlags::USER;
            let r = MapFlags::READ | MapFlags::USER;
            let regions = [region(0x1000, 2, rw), region(0x3000, 1, r), region(0x5000, 1, rw)];
            let need = if write { MapFlags::WRITE } else { MapFlags::READ };
            let model = (addr..addr + len).all(|a| regions.iter().any(|g| g.contains(a) && g.flags.contains(need)));
            prop_assert_eq!(check_range(&regions, addr, len, need).is_ok(), model);
        }
    }
}
