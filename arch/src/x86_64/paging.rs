//! x86_64 4-level page-table entry format (pure logic: also compiled on the host for tests).
//!
//! The TLB instructions that go with it live in `tlb.rs`.

use crate::addr::{Frame, PhysAddr};
use crate::mapping::{Entry, MapFlags, PageTableFormat};

/// Entry bits from the Intel SDM vol. 3A §4.5, table 4-19.
pub mod bits {
    /// The entry is valid.
    pub const PRESENT: u64 = 1 << 0;
    /// Writes allowed.
    pub const WRITABLE: u64 = 1 << 1;
    /// User-mode accesses allowed.
    pub const USER: u64 = 1 << 2;
    /// Page-level write-through.
    pub const WRITE_THROUGH: u64 = 1 << 3;
    /// Page-level cache disable.
    pub const NO_CACHE: u64 = 1 << 4;
    /// Set by the CPU on access.
    pub const ACCESSED: u64 = 1 << 5;
    /// Set by the CPU on write.
    pub const DIRTY: u64 = 1 << 6;
    /// In a level-1/2 entry: maps a 2 MiB / 1 GiB page instead of pointing to a table.
    pub const HUGE: u64 = 1 << 7;
    /// Global translation (survives CR3 loads when CR4.PGE is set).
    pub const GLOBAL: u64 = 1 << 8;
    /// Instruction fetches not allowed (needs EFER.NXE).
    pub const NO_EXECUTE: u64 = 1 << 63;
    /// The physical-address field.
    pub const ADDRESS: u64 = 0x000f_ffff_ffff_f000;
}

/// The x86_64 4-level format.
pub struct X86_64;

impl PageTableFormat for X86_64 {
    const LEVELS: usize = 4;
    const KERNEL_HALF_START: u64 = 0xffff_8000_0000_0000;
    const USER_HALF_END: u64 = 0x0000_8000_0000_0000;

    fn table_entry(table: Frame, user: bool) -> u64 {
        // Rights are the AND over all levels, so a table entry grants everything and the leaf
        // decides; only the user bit must be set for user leaves to be reachable.
        let user_bit = if user { bits::USER } else { 0 };
        table.start().as_u64() | bits::PRESENT | bits::WRITABLE | user_bit
    }

    fn leaf_entry(frame: Frame, flags: MapFlags, level: usize) -> u64 {
        let mut e = frame.start().as_u64() | bits::PRESENT;
        if flags.contains(MapFlags::WRITE) {
            e |= bits::WRITABLE;
        }
        if flags.contains(MapFlags::USER) {
            e |= bits::USER;
        }
        if !flags.contains(MapFlags::EXEC) {
            e |= bits::NO_EXECUTE;
        }
        if flags.contains(MapFlags::GLOBAL) {
            e |= bits::GLOBAL;
        }
        if flags.contains(MapFlags::NO_CACHE) {
            e |= bits::NO_CACHE | bits::WRITE_THROUGH;
        }
        if level > 0 {
            e |= bits::HUGE;
        }
        e
    }

    #[inline]
    fn decode(entry: u64, level: usize) -> Entry {
        if entry & bits::PRESENT == 0 {
            return Entry::Empty;
        }
        let frame = Frame::containing(PhysAddr::new(entry & bits::ADDRESS));
        if level > 0 && entry & bits::HUGE == 0 {
            return Entry::Table(frame);
        }
        let mut flags = MapFlags::READ;
        if entry & bits::WRITABLE != 0 {
            flags |= MapFlags::WRITE;
        }
        if entry & bits::USER != 0 {
            flags |= MapFlags::USER;
        }
        if entry & bits::NO_EXECUTE == 0 {
            flags |= MapFlags::EXEC;
        }
        if entry & bits::GLOBAL != 0 {
            flags |= MapFlags::GLOBAL;
        }
        if entry & bits::NO_CACHE != 0 {
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
        let frame = Frame::from_number(0x1234);
        for level in 0..2 {
            for bits in 0..64u32 {
                let flags = MapFlags::from_bits_truncate(bits) | MapFlags::READ;
                let e = X86_64::leaf_entry(frame, flags, level);
                assert_eq!(X86_64::decode(e, level), Entry::Leaf(frame, flags));
            }
        }
        let t = X86_64::table_entry(frame, true);
        assert_eq!(X86_64::decode(t, 2), Entry::Table(frame));
        assert_eq!(X86_64::decode(0, 0), Entry::Empty);
    }
}
