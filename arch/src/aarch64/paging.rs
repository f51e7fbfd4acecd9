//! aarch64 stage-1 translation-table descriptors, VMSAv8-64 with a 4 KiB granule and 48-bit
//! addresses (pure logic: also compiled on the host for tests).
//!
//! Our level numbers count from the leaves: level 0 is the Arm level-3 table (4 KiB pages),
//! level 1 the Arm level-2 table (2 MiB blocks), level 2 the Arm level-1 table (1 GiB blocks),
//! level 3 the Arm level-0 table (tables only). The memory attributes index `MAIR_EL1`, which
//! `boot.rs` programs with [`MAIR`].
//!
//! Rights: user pages are always privileged-execute-never (the kernel never runs user code) and
//! user-execute-never unless `EXEC`; kernel pages are always user-execute-never and
//! privileged-execute-never unless `EXEC`. Every descriptor has its access flag set, since the
//! kernel does not use access-flag faults.

use crate::addr::{Frame, PhysAddr};
use crate::mapping::{Entry, MapFlags, PageTableFormat};

/// Descriptor bits (Arm ARM D8.3, "Translation table descriptor formats").
pub mod bits {
    /// The descriptor is valid.
    pub const VALID: u64 = 1 << 0;
    /// With `VALID`: a table (levels 3..1 in our numbering) or a page (level 0); clear: a block.
    pub const TABLE_OR_PAGE: u64 = 1 << 1;
    /// `AttrIndx[2:0]`, the `MAIR_EL1` slot of the memory type.
    pub const ATTR_INDEX_SHIFT: u32 = 2;
    /// The `AttrIndx` field.
    pub const ATTR_INDEX: u64 = 0b111 << ATTR_INDEX_SHIFT;
    /// `AP[1]`: EL0 may access the page.
    pub const AP_EL0: u64 = 1 << 6;
    /// `AP[2]`: read-only (at every level that may access it).
    pub const AP_READ_ONLY: u64 = 1 << 7;
    /// `SH[1:0]` = inner shareable.
    pub const INNER_SHAREABLE: u64 = 0b11 << 8;
    /// Access flag: without it the first access faults.
    pub const ACCESSED: u64 = 1 << 10;
    /// Not global: the translation belongs to one ASID.
    pub const NOT_GLOBAL: u64 = 1 << 11;
    /// Privileged execute-never.
    pub const PXN: u64 = 1 << 53;
    /// Unprivileged execute-never.
    pub const UXN: u64 = 1 << 54;
    /// Table descriptors: privileged execute-never for everything below.
    pub const PXN_TABLE: u64 = 1 << 59;
    /// Table descriptors: unprivileged execute-never for everything below.
    pub const UXN_TABLE: u64 = 1 << 60;
    /// Table descriptors: `APTable[0]`, no EL0 access to anything below.
    pub const NO_EL0_TABLE: u64 = 1 << 61;
    /// The output-address field (48-bit physical addresses).
    pub const ADDRESS: u64 = 0x0000_ffff_ffff_f000;
}

/// `MAIR_EL1` slot of normal memory, write-back cacheable.
pub const ATTR_NORMAL: u64 = 0;
/// `MAIR_EL1` slot of device memory (Device-nGnRE).
pub const ATTR_DEVICE: u64 = 1;
/// `MAIR_EL1`: slot 0 normal write-back read/write-allocate (0xff), slot 1 Device-nGnRE (0x04).
pub const MAIR: u64 = 0xff | (0x04 << 8);

/// The aarch64 4-level, 4 KiB-granule format.
pub struct Aarch64;

impl PageTableFormat for Aarch64 {
    const LEVELS: usize = 4;
    const KERNEL_HALF_START: u64 = 0xffff_8000_0000_0000;
    const USER_HALF_END: u64 = 0x0000_8000_0000_0000;

    fn table_entry(table: Frame, user: bool) -> u64 {
        // Hierarchical attributes only take rights away, so they fence whole subtrees: the
        // kernel's tables are closed to EL0 and to EL0 execution, user tables to execution by
        // the kernel. The leaves decide the rest.
        let fence = if user { bits::PXN_TABLE } else { bits::NO_EL0_TABLE | bits::UXN_TABLE };
        table.start().as_u64() | bits::VALID | bits::TABLE_OR_PAGE | fence
    }

    fn leaf_entry(frame: Frame, flags: MapFlags, level: usize) -> u64 {
        debug_assert!(level < Self::LEVELS - 1, "the 4 KiB granule has no blocks at Arm level 0");
        let mut e = frame.start().as_u64() | bits::VALID | bits::ACCESSED | bits::INNER_SHAREABLE;
        if level == 0 {
            e |= bits::TABLE_OR_PAGE;
        }
        if !flags.contains(MapFlags::WRITE) {
            e |= bits::AP_READ_ONLY;
        }
        let exec = flags.contains(MapFlags::EXEC);
        if flags.contains(MapFlags::USER) {
            e |= bits::AP_EL0 | bits::PXN;
            if !exec {
                e |= bits::UXN;
            }
        } else {
            e |= bits::UXN;
            if !exec {
                e |= bits::PXN;
            }
        }
        if !flags.contains(MapFlags::GLOBAL) {
            e |= bits::NOT_GLOBAL;
        }
        let attr = if flags.contains(MapFlags::NO_CACHE) { ATTR_DEVICE } else { ATTR_NORMAL };
        e | (attr << bits::ATTR_INDEX_SHIFT)
    }

    #[inline]
    fn decode(entry: u64, level: usize) -> Entry {
        if entry & bits::VALID == 0 {
            return Entry::Empty;
        }
        let frame = Frame::containing(PhysAddr::new(entry & bits::ADDRESS));
        let table_or_page = entry & bits::TABLE_OR_PAGE != 0;
        match level {
            0 if !table_or_page => return Entry::Empty, // reserved encoding: faults like invalid
            0 => {}
            _ if table_or_page => return Entry::Table(frame),
            l if l == Self::LEVELS - 1 => return Entry::Empty, // no blocks at Arm level 0
            _ => {}
        }
        let mut flags = MapFlags::READ;
        if entry & bits::AP_READ_ONLY == 0 {
            flags |= MapFlags::WRITE;
        }
        let user = entry & bits::AP_EL0 != 0;
        if user {
            flags |= MapFlags::USER;
        }
        let execute_never = if user { bits::UXN } else { bits::PXN };
        if entry & execute_never == 0 {
            flags |= MapFlags::EXEC;
        }
        if entry & bits::NOT_GLOBAL == 0 {
            flags |= MapFlags::GLOBAL;
        }
        if (entry & bits::ATTR_INDEX) >> bits::ATTR_INDEX_SHIFT == ATTR_DEVICE {
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
        let frame = Frame::from_number(0x40000);
        for level in 0..3 {
            for bits in 0..64u32 {
                let flags = MapFlags::from_bits_truncate(bits) | MapFlags::READ;
                let e = Aarch64::leaf_entry(frame, flags, level);
                assert_eq!(Aarch64::decode(e, level), Entry::Leaf(frame, flags), "level {level} flags {flags:?}");
            }
        }
        for level in 1..4 {
            for user in [false, true] {
                assert_eq!(Aarch64::decode(Aarch64::table_entry(frame, user), level), Entry::Table(frame));
            }
        }
        assert_eq!(Aarch64::decode(0, 0), Entry::Empty);
        assert_eq!(Aarch64::decode(0, 3), Entry::Empty);
    }

    #[test]
    fn pages_blocks_and_tables_are_told_apart() {
        let frame = Frame::from_number(0x200);
        let page = Aarch64::leaf_entry(frame, MapFlags::READ, 0);
        let block = Aarch64::leaf_entry(frame, MapFlags::READ, 1);
        assert_eq!(page & 0b11, 0b11, "a page descriptor has bits 1:0 = 0b11");
        assert_eq!(block & 0b11, 0b01, "a block descriptor has bits 1:0 = 0b01");
        // A block-shaped descriptor at level 0 is the reserved encoding, not a mapping.
        assert_eq!(Aarch64::decode(block, 0), Entry::Empty);
        // A valid level-3 (Arm level 0) descriptor without the table bit maps nothing.
        assert_eq!(Aarch64::decode(block, 3), Entry::Empty);
    }

    #[test]
    fn rights_follow_the_isolation_rules() {
        let frame = Frame::from_number(1);
        let user_data = Aarch64::leaf_entry(frame, MapFlags::READ | MapFlags::WRITE | MapFlags::USER, 0);
        assert_ne!(user_data & bits::UXN, 0, "user data is not executable by EL0");
        assert_ne!(user_data & bits::PXN, 0, "user data is not executable by EL1");
        assert_ne!(user_data & bits::NOT_GLOBAL, 0, "user pages belong to one address space");
        let user_text = Aarch64::leaf_entry(frame, MapFlags::READ | MapFlags::EXEC | MapFlags::USER, 0);
        assert_eq!(user_text & bits::UXN, 0);
        assert_ne!(user_text & bits::PXN, 0, "the kernel never executes user text");
        assert_ne!(user_text & bits::AP_READ_ONLY, 0, "text is read-only");
        let kernel_text = Aarch64::leaf_entry(frame, MapFlags::READ | MapFlags::EXEC | MapFlags::GLOBAL, 0);
        assert_eq!(kernel_text & (bits::AP_EL0 | bits::PXN | bits::NOT_GLOBAL), 0);
        assert_ne!(kernel_text & bits::UXN, 0, "EL0 never executes kernel text");
        let device = Aarch64::leaf_entry(frame, MapFlags::READ | MapFlags::WRITE | MapFlags::NO_CACHE, 0);
        assert_eq!((device & bits::ATTR_INDEX) >> bits::ATTR_INDEX_SHIFT, ATTR_DEVICE);
        let kernel_table = Aarch64::table_entry(frame, false);
        assert_ne!(kernel_table & bits::NO_EL0_TABLE, 0, "EL0 cannot reach below a kernel table");
        let user_table = Aarch64::table_entry(frame, true);
        assert_ne!(user_table & bits::PXN_TABLE, 0);
        assert_eq!(user_table & bits::NO_EL0_TABLE, 0);
    }
}
