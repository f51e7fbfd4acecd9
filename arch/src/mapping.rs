//! The architecture-neutral vocabulary of page tables: mapping rights and the entry format each
//! port implements.
//!
//! The kernel's page-table code (`kernel::mm::page_table`) walks and edits tables only through
//! [`PageTableFormat`], so the same code builds x86_64, riscv64 and aarch64 tables, and runs on the
//! host in tests with any of these formats.

use crate::addr::{Frame, VirtAddr};

bitflags::bitflags! {
    /// Rights and attributes of a mapping.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub struct MapFlags: u32 {
        /// The page may be read (every present mapping can be read on x86_64).
        const READ = 1 << 0;
        /// The page may be written.
        const WRITE = 1 << 1;
        /// Instructions may be fetched from the page.
        const EXEC = 1 << 2;
        /// User mode may access the page (with the rights above).
        const USER = 1 << 3;
        /// The translation is the same in every address space (kernel pages): not flushed on a
        /// page-table switch.
        const GLOBAL = 1 << 4;
        /// Device memory: not cached.
        const NO_CACHE = 1 << 5;
    }
}

/// What a page-table entry holds, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// Nothing is mapped here.
    Empty,
    /// The entry points to the next-level table in `Frame`.
    Table(Frame),
    /// The entry maps a page (of the size of its level) at `Frame` with these flags.
    Leaf(Frame, MapFlags),
}

/// An architecture's page-table entry format. Levels count from 0 (the table whose entries map
/// 4 KiB pages) up to `LEVELS - 1` (the root).
pub trait PageTableFormat {
    /// Number of levels of the tree.
    const LEVELS: usize;
    /// Entries per table (each table is one 4 KiB frame).
    const ENTRIES: usize = 512;
    /// First address of the kernel half; user mappings must lie below it.
    const KERNEL_HALF_START: u64;
    /// End (exclusive) of the user half.
    const USER_HALF_END: u64;

    /// Index into the level-`level` table for `va`.
    fn index(va: VirtAddr, level: usize) -> usize {
        ((va.as_u64() >> (crate::addr::PAGE_SHIFT + 9 * level as u32)) & 0x1ff) as usize
    }

    /// Bytes mapped by one leaf entry at `level` (4 KiB at level 0, 2 MiB at level 1...).
    fn leaf_size(level: usize) -> u64 {
        crate::addr::PAGE_SIZE << (9 * level)
    }

    /// An entry pointing to a next-level table; `user` says whether user mappings lie below it.
    fn table_entry(table: Frame, user: bool) -> u64;

    /// A leaf entry mapping `frame` at `level` with `flags`.
    fn leaf_entry(frame: Frame, flags: MapFlags, level: usize) -> u64;

    /// Decodes an entry found at `level`.
    fn decode(entry: u64, level: usize) -> Entry;
}
