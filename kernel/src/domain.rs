//! Domains: loaded programs, each with its own range of the single address space, its regions
//! and (for now) one page table. The views of a later step replace the single table.

use alloc::string::String;
use alloc::vec::Vec;
use arch::addr::{Frame, VirtAddr, PAGE_SIZE};
use arch::mapping::MapFlags;
use arch::PageFormat;
use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};
use spin::Mutex;

use crate::loader::{self, Image, LoadError};
use crate::mm::kernel_space::{allocate_zeroed_frame, phys_to_virt, with_frames, AllocatorFrames, DirectMap, SHARED_KERNEL_ROOT_ENTRIES, USER_ROOT_ENTRIES};
use crate::mm::page_table::{MapError, PageTable};
use crate::mm::region::{self, RangeError, Region, RegionKind};
use crate::mm::user_range::UserRangeAllocator;

/// Size of a program's initial stack.
pub const USER_STACK_SIZE: u64 = 64 * 1024;
/// Alignment of program images in the single address space.
const IMAGE_ALIGN: u64 = 2 << 20;

/// The user half of the single address space.
static USER_RANGES: Mutex<UserRangeAllocator> = Mutex::new(UserRangeAllocator::new(arch::layout::USER_START, arch::layout::USER_END));
static NEXT_DOMAIN_ID: AtomicU64 = AtomicU64::new(1);

/// Why a program could not be started.
#[derive(Debug)]
pub enum StartError {
    /// The ELF file was refused.
    Load(LoadError),
    /// Memory ran out (frames, tables or address space).
    NoMemory,
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Load(e) => write!(f, "{e}"),
            StartError::NoMemory => write!(f, "out of memory"),
        }
    }
}

impl From<MapError> for StartError {
    fn from(_: MapError) -> Self {
        StartError::NoMemory
    }
}

/// A page table with the kernel half shared and the regions it maps.
pub struct AddressSpace {
    table: PageTable<PageFormat>,
    regions: Vec<Region>,
}

impl AddressSpace {
    /// An empty user half over the shared kernel half.
    pub fn new() -> Result<Self, StartError> {
        crate::mm::kernel_space::with_kernel_table(|kernel, frames| {
            let mut table = PageTable::new(&DirectMap, &mut AllocatorFrames(frames))?;
            table.share_root_entries(&DirectMap, kernel, SHARED_KERNEL_ROOT_ENTRIES);
            Ok(AddressSpace { table, regions: Vec::new() })
        })
    }

    /// The root table.
    pub fn root(&self) -> Frame {
        self.table.root()
    }

    /// The regions mapped.
    pub fn regions(&self) -> &[Region] {
        &self.regions
    }

    /// Backs `[start, start + pages * PAGE_SIZE)` with zeroed frames and maps it with `flags`.
    pub fn add_region(&mut self, start: VirtAddr, pages: u64, flags: MapFlags, kind: RegionKind) -> Result<&Region, StartError> {
        let mut region = Region { start, flags: flags | MapFlags::USER, kind, frames: Vec::new() };
        region.frames.try_reserve_exact(pages as usize).map_err(|_| StartError::NoMemory)?;
        // Push the region first so that on failure Drop frees what was taken.
        for i in 0..pages {
            let frame = match allocate_zeroed_frame() {
                Some(f) => f,
                None => {
                    self.release_region(region);
                    return Err(StartError::NoMemory);
                }
            };
            region.frames.push(frame);
            let va = VirtAddr::new(start.as_u64() + i * PAGE_SIZE);
            let mapped = with_frames(|frames| self.table.map(&DirectMap, &mut AllocatorFrames(frames), va, frame, region.flags, 0));
            match mapped {
                // Not active on any CPU while being built.
                Ok(flush) => flush.ignore(),
                Err(e) => {
                    self.release_region(region);
                    return Err(e.into());
                }
            }
        }
        self.regions.push(region);
        Ok(self.regions.last().expect("just pushed"))
    }

    fn release_region(&mut self, region: Region) {
        for (i, frame) in region.frames.iter().enumerate() {
            let va = VirtAddr::new(region.start.as_u64() + i as u64 * PAGE_SIZE);
            if let Ok((_, flush)) = self.table.unmap(&DirectMap, va) {
                flush.ignore(); // never active: only called while building
            }
            with_frames(|f| f.free(*frame)).expect("region frame owned");
        }
    }

    /// Writes `bytes` at user address `va` through the direct map (used while loading).
    fn poke(&self, va: u64, bytes: &[u8]) -> Result<(), RangeError> {
        region::check_range(&self.regions, va, bytes.len() as u64, MapFlags::USER)?;
        for (i, b) in bytes.iter().enumerate() {
            let at = va + i as u64;
            let r = region::find(&self.regions, at).ok_or(RangeError::Unmapped(at))?;
            let page = (at - r.start.as_u64()) / PAGE_SIZE;
            let pa = r.frames[page as usize].start().as_u64() + at % PAGE_SIZE;
            // SAFETY: the frame belongs to this region, reachable through the direct map.
            unsafe { *phys_to_virt(arch::addr::PhysAddr::new(pa)).as_mut_ptr::<u8>() = *b };
        }
        Ok(())
    }

    /// Checks a user range for `need` rights (see [`region::check_range`]).
    pub fn check(&self, addr: u64, len: u64, need: MapFlags) -> Result<(), RangeError> {
        region::check_range(&self.regions, addr, len, need | MapFlags::USER)
    }
}

impl Drop for AddressSpace {
    fn drop(&mut self) {
        for region in core::mem::take(&mut self.regions) {
            with_frames(|f| {
                for frame in &region.frames {
                    f.free(*frame).expect("region frame owned");
                }
            });
        }
        // The table is not active on any CPU any more (the domain's threads are gone).
        // SAFETY: same root, this address space's own table.
        let table = unsafe { PageTable::<PageFormat>::from_root(self.table.root()) };
        with_frames(|f| table.free_tables(&DirectMap, &mut AllocatorFrames(f), USER_ROOT_ENTRIES));
    }
}

/// A loaded program.
pub struct Domain {
    /// Unique id, in start order.
    pub id: u64,
    /// Program name.
    pub name: String,
    /// Its memory.
    pub space: AddressSpace,
    /// Where its first thread starts.
    pub entry: VirtAddr,
    /// Initial stack pointer of its first thread.
    pub stack_top: VirtAddr,
}

impl Domain {
    /// Loads the static-pie ELF `bytes` as program `name` into a fresh range of the single
    /// address space.
    pub fn load(name: &str, bytes: &[u8]) -> Result<Domain, StartError> {
        let image: Image = loader::parse(bytes, arch::ELF_MACHINE).map_err(StartError::Load)?;
        let span = image.end - image.start;
        let range = USER_RANGES.lock().allocate(span, IMAGE_ALIGN).map_err(|_| StartError::NoMemory)?;
        let base = range.as_u64() - image.start;
        let mut space = AddressSpace::new()?;
        for seg in &image.segments {
            let first = (base + seg.vaddr) / PAGE_SIZE * PAGE_SIZE;
            let end = (base + seg.vaddr + seg.mem_len).div_ceil(PAGE_SIZE) * PAGE_SIZE;
            space.add_region(VirtAddr::new(first), (end - first) / PAGE_SIZE, seg.flags, RegionKind::for_segment(seg.flags))?;
            let data = &bytes[seg.file_offset as usize..(seg.file_offset + seg.file_len) as usize];
            space.poke(base + seg.vaddr, data).map_err(|_| StartError::NoMemory)?;
        }
        for r in &image.relocations {
            space
                .poke(base + r.offset, &(base.wrapping_add(r.addend)).to_le_bytes())
                .map_err(|_| StartError::Load(LoadError::BadRelocation(r.offset)))?;
        }
        let stack = USER_RANGES.lock().allocate(USER_STACK_SIZE, PAGE_SIZE).map_err(|_| StartError::NoMemory)?;
        space.add_region(stack, USER_STACK_SIZE / PAGE_SIZE, MapFlags::READ | MapFlags::WRITE, RegionKind::Stack)?;
        let mut owned = String::new();
        owned.try_reserve_exact(name.len()).map_err(|_| StartError::NoMemory)?;
        owned.push_str(name);
        Ok(Domain {
            id: NEXT_DOMAIN_ID.fetch_add(1, Ordering::Relaxed),
            name: owned,
            space,
            entry: VirtAddr::new(base + image.entry),
            stack_top: VirtAddr::new(stack.as_u64() + USER_STACK_SIZE),
        })
    }
}
