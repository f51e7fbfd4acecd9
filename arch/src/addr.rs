//! Typed addresses: physical and virtual addresses, 4 KiB frames and pages.
//!
//! Every architecture Tsumugi runs on uses 4 KiB base pages and at most 48 (x86_64, aarch64) or
//! 39/48 (riscv64 Sv39/Sv48) bits of virtual address, so these types are shared. Constructors
//! follow the `x86_64` crate: `new` panics on a bad value (documented), `try_new` returns the bad
//! value in its error.

use core::fmt;
use core::ops::{Add, Sub};

/// Size of a base page / frame in bytes.
pub const PAGE_SIZE: u64 = 4096;
/// log2 of [`PAGE_SIZE`].
pub const PAGE_SHIFT: u32 = 12;

/// A physical address.
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PhysAddr(u64);

/// A virtual address (of the single address space).
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct VirtAddr(u64);

/// A 4 KiB physical frame, named by its first byte.
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Frame(PhysAddr);

/// A 4 KiB virtual page, named by its first byte.
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Page(VirtAddr);

/// An address was not aligned to a page; carries the address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotAligned(pub u64);

/// Physical addresses are limited to 52 bits on every supported architecture.
pub const PHYS_ADDR_BITS: u32 = 52;

/// A physical address above [`PHYS_ADDR_BITS`]; carries the address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PhysAddrTooLarge(pub u64);

impl PhysAddr {
    /// Makes a physical address.
    ///
    /// # Panics
    /// If `addr` has bits set above bit 51.
    #[inline]
    pub const fn new(addr: u64) -> Self {
        match Self::try_new(addr) {
            Ok(a) => a,
            Err(_) => panic!("physical address above 52 bits"),
        }
    }

    /// Makes a physical address, or returns the address if it has bits above bit 51.
    #[inline]
    pub const fn try_new(addr: u64) -> Result<Self, PhysAddrTooLarge> {
        if addr >> PHYS_ADDR_BITS == 0 {
            Ok(PhysAddr(addr))
        } else {
            Err(PhysAddrTooLarge(addr))
        }
    }

    /// The address as an integer.
    #[inline]
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// Whether the address is a multiple of `align` (a power of two).
    #[inline]
    pub const fn is_aligned(self, align: u64) -> bool {
        self.0 & (align - 1) == 0
    }

    /// Rounds down to a multiple of `align` (a power of two).
    #[inline]
    pub const fn align_down(self, align: u64) -> Self {
        PhysAddr(self.0 & !(align - 1))
    }

    /// Rounds up to a multiple of `align` (a power of two); saturates at the top.
    #[inline]
    pub const fn align_up(self, align: u64) -> Self {
        match self.0.checked_add(align - 1) {
            Some(v) => PhysAddr(v & !(align - 1)),
            None => PhysAddr(u64::MAX & !(align - 1)),
        }
    }
}

impl VirtAddr {
    /// Makes a virtual address from any 64-bit value. Whether it is canonical for the running
    /// architecture is checked where it is used (`arch::paging`), not here.
    #[inline]
    pub const fn new(addr: u64) -> Self {
        VirtAddr(addr)
    }

    /// The address of a pointer.
    #[inline]
    pub fn from_ptr<T: ?Sized>(ptr: *const T) -> Self {
        VirtAddr(ptr as *const u8 as usize as u64)
    }

    /// The address as an integer.
    #[inline]
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// The address as a pointer.
    #[inline]
    pub const fn as_ptr<T>(self) -> *const T {
        self.0 as usize as *const T
    }

    /// The address as a mutable pointer.
    #[inline]
    pub const fn as_mut_ptr<T>(self) -> *mut T {
        self.0 as usize as *mut T
    }

    /// Whether the address is a multiple of `align` (a power of two).
    #[inline]
    pub const fn is_aligned(self, align: u64) -> bool {
        self.0 & (align - 1) == 0
    }

    /// Rounds down to a multiple of `align` (a power of two).
    #[inline]
    pub const fn align_down(self, align: u64) -> Self {
        VirtAddr(self.0 & !(align - 1))
    }

    /// Rounds up to a multiple of `align` (a power of two), or `None` on overflow.
    #[inline]
    pub const fn checked_align_up(self, align: u64) -> Option<Self> {
        match self.0.checked_add(align - 1) {
            Some(v) => Some(VirtAddr(v & !(align - 1))),
            None => None,
        }
    }

    /// Adds a byte offset, or `None` on overflow.
    #[inline]
    pub const fn checked_add(self, bytes: u64) -> Option<Self> {
        match self.0.checked_add(bytes) {
            Some(v) => Some(VirtAddr(v)),
            None => None,
        }
    }
}

impl Frame {
    /// The frame starting at `addr`, or the address if it is not page-aligned.
    #[inline]
    pub const fn try_from_start(addr: PhysAddr) -> Result<Self, NotAligned> {
        if addr.is_aligned(PAGE_SIZE) {
            Ok(Frame(addr))
        } else {
            Err(NotAligned(addr.as_u64()))
        }
    }

    /// The frame containing `addr`.
    #[inline]
    pub const fn containing(addr: PhysAddr) -> Self {
        Frame(addr.align_down(PAGE_SIZE))
    }

    /// The frame with number `number` (its address divided by [`PAGE_SIZE`]).
    ///
    /// # Panics
    /// If the frame would lie above the 52-bit physical address limit.
    #[inline]
    pub const fn from_number(number: u64) -> Self {
        Frame(PhysAddr::new(number << PAGE_SHIFT))
    }

    /// The frame's first byte.
    #[inline]
    pub const fn start(self) -> PhysAddr {
        self.0
    }

    /// The frame's number (its address divided by [`PAGE_SIZE`]).
    #[inline]
    pub const fn number(self) -> u64 {
        self.0.as_u64() >> PAGE_SHIFT
    }
}

impl Page {
    /// The page starting at `addr`, or the address if it is not page-aligned.
    #[inline]
    pub const fn try_from_start(addr: VirtAddr) -> Result<Self, NotAligned> {
        if addr.is_aligned(PAGE_SIZE) {
            Ok(Page(addr))
        } else {
            Err(NotAligned(addr.as_u64()))
        }
    }

    /// The page containing `addr`.
    #[inline]
    pub const fn containing(addr: VirtAddr) -> Self {
        Page(addr.align_down(PAGE_SIZE))
    }

    /// The page's first byte.
    #[inline]
    pub const fn start(self) -> VirtAddr {
        self.0
    }

    /// The page's number (its address divided by [`PAGE_SIZE`]).
    #[inline]
    pub const fn number(self) -> u64 {
        self.0.as_u64() >> PAGE_SHIFT
    }
}

impl Add<u64> for Frame {
    type Output = Frame;
    /// The frame `n` frames further on.
    #[inline]
    fn add(self, n: u64) -> Frame {
        Frame::from_number(self.number() + n)
    }
}

impl Sub<Frame> for Frame {
    type Output = u64;
    /// How many frames lie between `other` and `self`.
    #[inline]
    fn sub(self, other: Frame) -> u64 {
        self.number() - other.number()
    }
}

impl Add<u64> for Page {
    type Output = Page;
    /// The page `n` pages further on.
    #[inline]
    fn add(self, n: u64) -> Page {
        Page(VirtAddr((self.number() + n) << PAGE_SHIFT))
    }
}

impl fmt::Debug for PhysAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PhysAddr({:#x})", self.0)
    }
}

impl fmt::Debug for VirtAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VirtAddr({:#x})", self.0)
    }
}

impl fmt::Debug for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Frame({:#x})", self.0 .0)
    }
}

impl fmt::Debug for Page {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Page({:#x})", self.0 .0)
    }
}

impl fmt::LowerHex for PhysAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::LowerHex::fmt(&self.0, f)
    }
}

impl fmt::LowerHex for VirtAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::LowerHex::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alignment() {
        assert_eq!(PhysAddr::new(0x1234).align_down(PAGE_SIZE), PhysAddr::new(0x1000));
        assert_eq!(PhysAddr::new(0x1234).align_up(PAGE_SIZE), PhysAddr::new(0x2000));
        assert_eq!(PhysAddr::new(0x2000).align_up(PAGE_SIZE), PhysAddr::new(0x2000));
        assert!(Frame::try_from_start(PhysAddr::new(0x1001)).is_err());
        assert_eq!(Frame::containing(PhysAddr::new(0x1fff)).number(), 1);
        assert_eq!(VirtAddr::new(u64::MAX).checked_align_up(PAGE_SIZE), None);
        assert!(PhysAddr::try_new(1 << 52).is_err());
    }
}
