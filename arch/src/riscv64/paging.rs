//! The riscv64 Sv48 page-table entry format (pure logic: also compiled on the host for tests).
//!
//! The `sfence.vma` instructions that go with it live in `tlb.rs`.

use crate::addr::{Frame, PhysAddr};
use crate::mapping::{Entry, MapFlags, PageTableFormat};

/// Entry bits from the RISC-V privileged specification (version 1.12), §4.3.1 and §4.5.
pub mod bits {
    /// The entry is valid.
    pub const VALID: u64 = 1 << 0;
    /// Reads allowed. An entry with none of R, W, X points to the next-level table.
    pub const READ: u64 = 1 << 1;
    /// Writes allowed (never without READ: W without R is a reserved encoding).
    pub const WRITE: u64 = 1 << 2;
    /// Instruction fetches allowed.
    pub const EXECUTE: u64 = 1 << 3;
    /// User-mode accesses allowed; supervisor accesses then need `sstatus.SUM` (data) and are
    /// never allowed for fetches.
    pub const USER: u64 = 1 << 4;
    /// Global translation: exists in every address space, kept by ASID-specific fences.
    pub const GLOBAL: u64 = 1 << 5;
    /// Accessed. Set in every leaf from the start, so no hart ever needs to update it (the
    /// specification lets a hart fault instead of setting it).
    pub const ACCESSED: u64 = 1 << 6;
    /// Dirty; preset like [`ACCESSED`].
    pub const DIRTY: u64 = 1 << 7;
    /// First of the two bits reserved for supervisor software (RSW). Tsumugi records
    /// `MapFlags::NO_CACHE` here: without the Svpbmt extension the memory type comes from the
    /// platform's physical memory attributes, so device pages are uncached anyway.
    pub const SOFTWARE_NO_CACHE: u64 = 1 << 8;
    /// Shift of the physical page number in an entry.
    pub const PPN_SHIFT: u32 = 10;
    /// The physical-page-number field (44 bits, bits 10..=53).
    pub const PPN: u64 = ((1 << 44) - 1) << PPN_SHIFT;
}

/// The Sv48 4-level format.
pub struct Sv48;

/// The physical address an entry points to.
fn address(entry: u64) -> PhysAddr {
    PhysAddr::new(((entry & bits::PPN) >> bits::PPN_SHIFT) << crate::addr::PAGE_SHIFT)
}

/// The PPN field for `frame`.
fn ppn(frame: Frame) -> u64 {
    (frame.number() << bits::PPN_SHIFT) & bits::PPN
}

impl PageTableFormat for Sv48 {
    const LEVELS: usize = 4;
    const KERNEL_HALF_START: u64 = 0xffff_8000_0000_0000;
    const USER_HALF_END: u64 = 0x0000_8000_0000_0000;

    fn table_entry(table: Frame, _user: bool) -> u64 {
        // Non-leaf entries carry no rights: U, A, D and G are reserved there and must be zero.
        // Whether user mappings lie below is decided by each leaf's U bit alone.
        ppn(table) | bits::VALID
    }

    fn leaf_entry(frame: Frame, flags: MapFlags, _level: usize) -> u64 {
        // A leaf at any level has the same format: its level is where it is found, and the
        // frame must be aligned to the leaf size (the page-table code checks that).
        let mut e = ppn(frame) | bits::VALID | bits::ACCESSED | bits::DIRTY;
        // At least one of R/W/X must be set or the entry would read as a table pointer, and W
        // without R is reserved: every mapping is readable, as on x86_64.
        if flags.intersects(MapFlags::READ | MapFlags::WRITE) || !flags.contains(MapFlags::EXEC) {
            e |= bits::READ;
        }
        if flags.contains(MapFlags::WRITE) {
            e |= bits::WRITE;
        }
        if flags.contains(MapFlags::EXEC) {
            e |= bits::EXECUTE;
        }
        if flags.contains(MapFlags::USER) {
            e |= bits::USER;
        }
        if flags.contains(MapFlags::GLOBAL) {
            e |= bits::GLOBAL;
        }
        if flags.contains(MapFlags::NO_CACHE) {
            e |= bits::SOFTWARE_NO_CACHE;
        }
        e
    }

    #[inline]
    fn decode(entry: u64, level: usize) -> Entry {
        if entry & bits::VALID == 0 {
            return Entry::Empty;
        }
        let frame = Frame::containing(address(entry));
        if entry & (bits::READ | bits::WRITE | bits::EXECUTE) == 0 {
            // A pointer to a table; at level 0 that is malformed (the hardware faults on it),
            // and nothing is mapped through it.
            return if level == 0 { Entry::Empty } else { Entry::Table(frame) };
        }
        let mut flags = MapFlags::empty();
        if entry & bits::READ != 0 {
            flags |= MapFlags::READ;
        }
        if entry & bits::WRITE != 0 {
            flags |= MapFlags::WRITE;
        }
        if entry & bits::EXECUTE != 0 {
            flags |= MapFlags::EXEC;
        }
        if entry & bits::USER != 0 {
            flags |= MapFlags::USER;
        }
        if entry & bits::GLOBAL != 0 {
            flags |= MapFlags::GLOBAL;
        }
        if entry & bits::SOFTWARE_NO_CACHE != 0 {
            flags |= MapFlags::NO_CACHE;
        }
        Entry::Leaf(frame, flags)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaf_round_trips() {
        let frame = Frame::from_number(0x8_1234);
        for level in 0..3 {
            for bits in 0..64u32 {
                let flags = MapFlags::from_bits_truncate(bits) | MapFlags::READ;
                let e = Sv48::leaf_entry(frame, flags, level);
                assert_eq!(Sv48::decode(e, level), Entry::Leaf(frame, flags));
            }
        }
        let t = Sv48::table_entry(frame, true);
        assert_eq!(Sv48::decode(t, 2), Entry::Table(frame));
        assert_eq!(Sv48::decode(0, 0), Entry::Empty);
    }

    #[test]
    fn encodings_follow_the_specification() {
        let frame = Frame::from_number(0x8_0200);
        // A table pointer is V plus the PPN and nothing else (U/A/D/G are reserved there).
        assert_eq!(Sv48::table_entry(frame, true), (0x8_0200 << 10) | 1);
        assert_eq!(Sv48::table_entry(frame, false), Sv48::table_entry(frame, true));
        // User text: V R X U A D.
        let text = Sv48::leaf_entry(frame, MapFlags::READ | MapFlags::EXEC | MapFlags::USER, 0);
        assert_eq!(text & 0xff, 0b1101_1011);
        // Kernel data: V R W G A D, no U, no X.
        let data = Sv48::leaf_entry(frame, MapFlags::READ | MapFlags::WRITE | MapFlags::GLOBAL, 1);
        assert_eq!(data & 0xff, 0b1110_0111);
        // Write-only and execute-only requests: W always comes with R; X alone stays X alone.
        let w = Sv48::leaf_entry(frame, MapFlags::WRITE, 0);
        assert_eq!(w & (bits::READ | bits::WRITE), bits::READ | bits::WRITE);
        let x = Sv48::leaf_entry(frame, MapFlags::EXEC, 0);
        assert_eq!(x & (bits::READ | bits::WRITE | bits::EXECUTE), bits::EXECUTE);
        // No rights at all still makes a leaf, never a table pointer.
        assert!(matches!(Sv48::decode(Sv48::leaf_entry(frame, MapFlags::empty(), 0), 0), Entry::Leaf(..)));
        // A table pointer at level 0 is malformed and maps nothing.
        assert_eq!(Sv48::decode(Sv48::table_entry(frame, false), 0), Entry::Empty);
    }

    #[test]
    fn sv48_indexes_like_x86_64() {
        use crate::addr::VirtAddr;
        let va = VirtAddr::new(0xffff_ffff_8020_1000);
        assert_eq!(Sv48::index(va, 3), 511);
        assert_eq!(Sv48::index(va, 2), 510);
        assert_eq!(Sv48::index(va, 1), 1);
        assert_eq!(Sv48::index(va, 0), 1);
        assert_eq!(Sv48::index(VirtAddr::new(0xffff_8000_0000_0000), 3), 256);
    }
}
