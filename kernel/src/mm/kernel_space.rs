//! The kernel's own address space: the frame allocator built from the boot memory map, the
//! kernel page table (direct map of physical memory, the image with W^X rights, the device
//! window, the kernel-stack area), and access to physical memory through the direct map.
//!
//! Invariants:
//! - the top-level entries of the kernel half are all created here, at boot, and never change;
//!   every user address space copies them, so later kernel mappings appear everywhere;
//! - kernel mappings are supervisor-only; the image and the direct map are global;
//! - no frame is in the allocator's free set while the kernel or a region uses it.

use arch::addr::{Frame, PhysAddr, VirtAddr, PAGE_SIZE};
use arch::bootinfo::{BootInfo, MemoryKind};
use arch::layout;
use arch::mapping::{MapFlags, PageTableFormat};
use arch::PageFormat;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use arch::sync::Mutex;

use super::frame_alloc::FrameAllocator;
use super::page_table::{MapError, PageTable, PhysMemory, RawTable, TableFrames};

/// Physical memory the allocator covers (the bitmap is a static array of this size).
pub const MAX_PHYS: u64 = 4 << 30;
const MAX_FRAMES: u64 = MAX_PHYS / PAGE_SIZE;
const BITMAP_WORDS: usize = FrameAllocator::storage_words(MAX_FRAMES);
/// Size of a level-1 leaf (2 MiB): the direct map's page size.
const LARGE_PAGE: u64 = 2 << 20;
/// Physical memory below this is left to firmware and the boot trampoline.
const LOW_MEMORY_END: u64 = 1 << 20;
/// Root-table slots of the kernel half.
pub const KERNEL_ROOT_ENTRIES: core::ops::Range<usize> = 256..512;
/// Root-table slots user page tables copy from the kernel table.
pub use arch::layout::SHARED_KERNEL_ROOT_ENTRIES;
/// Root-table slots a user page table owns.
pub use arch::layout::USER_ROOT_ENTRIES;

/// The frame bitmap, in .bss so it is reachable before and after the switch to our tables.
static mut BITMAP: [u64; BITMAP_WORDS] = [0; BITMAP_WORDS];

static FRAMES: Mutex<Option<FrameAllocator<'static>>> = Mutex::new(None);
static KERNEL_TABLE: Mutex<Option<PageTable<PageFormat>>> = Mutex::new(None);
/// Whether our tables are active (physical memory is reached through the direct map).
static DIRECT_MAP_ACTIVE: AtomicBool = AtomicBool::new(false);
/// Next free byte of the device window.
static NEXT_MMIO: AtomicU64 = AtomicU64::new(layout::MMIO);
/// Frames the allocator covered at boot, and how many were free then.
static BOOT_FRAMES: AtomicU64 = AtomicU64::new(0);

extern "C" {
    static __text_start: u8;
    static __text_end: u8;
    static __rodata_start: u8;
    static __rodata_end: u8;
    static __data_start: u8;
    static __data_end: u8;
}

/// Physical memory through the direct map (or the boot identity map before it exists).
#[derive(Clone, Copy, Default)]
pub struct DirectMap;

impl PhysMemory for DirectMap {
    fn table(&self, frame: Frame) -> *mut RawTable {
        phys_to_virt(frame.start()).as_mut_ptr()
    }
}

/// Physical memory through the direct map, for walks that run only once it exists: made by
/// [`LiveDirectMap::get`], which tests that once, so a walk does not test at every level
/// whether it still runs on the boot identity map (the map is never taken down).
#[derive(Clone, Copy)]
pub struct LiveDirectMap(());

impl LiveDirectMap {
    /// The direct map, if it is up (always, once the kernel runs threads).
    #[inline(always)]
    pub fn get() -> Option<Self> {
        DIRECT_MAP_ACTIVE.load(Ordering::Relaxed).then_some(LiveDirectMap(()))
    }
}

impl PhysMemory for LiveDirectMap {
    #[inline(always)]
    fn table(&self, frame: Frame) -> *mut RawTable {
        VirtAddr::new(layout::PHYS_MAP + frame.start().as_u64()).as_mut_ptr()
    }
}

/// The virtual address at which the kernel reaches physical address `pa`.
pub fn phys_to_virt(pa: PhysAddr) -> VirtAddr {
    if DIRECT_MAP_ACTIVE.load(Ordering::Relaxed) {
        VirtAddr::new(layout::PHYS_MAP + pa.as_u64())
    } else {
        VirtAddr::new(pa.as_u64())
    }
}

/// Adapter giving page-table code frames from the allocator.
pub struct AllocatorFrames<'a, 'b>(pub &'a mut FrameAllocator<'b>);

impl TableFrames for AllocatorFrames<'_, '_> {
    fn allocate_table(&mut self) -> Option<Frame> {
        self.0.allocate().ok()
    }

    fn free_table(&mut self, frame: Frame) {
        // A double free here is a kernel bug worth stopping for.
        self.0.free(frame).expect("page-table frame freed twice");
    }
}

/// Runs `f` with the frame allocator.
pub fn with_frames<R>(f: impl FnOnce(&mut FrameAllocator<'static>) -> R) -> R {
    let mut guard = FRAMES.lock();
    f(guard.as_mut().expect("frame allocator used before mm::kernel_space::init"))
}

/// Runs `f` with the kernel page table and the frame allocator.
pub fn with_kernel_table<R>(f: impl FnOnce(&mut PageTable<PageFormat>, &mut FrameAllocator<'static>) -> R) -> R {
    let mut table = KERNEL_TABLE.lock();
    let table = table.as_mut().expect("kernel table used before init");
    with_frames(|frames| f(table, frames))
}

/// The kernel's root table (active whenever no user program runs).
pub fn kernel_root() -> Frame {
    KERNEL_TABLE.lock().as_ref().expect("kernel table used before init").root()
}

/// Frames covered and free right after boot.
pub fn boot_frames() -> u64 {
    BOOT_FRAMES.load(Ordering::Relaxed)
}

/// A zeroed frame, or `None` when memory is exhausted.
pub fn allocate_zeroed_frame() -> Option<Frame> {
    let frame = with_frames(|f| f.allocate().ok())?;
    // SAFETY: the frame was just allocated to us and is reachable through the direct map.
    unsafe { core::ptr::write_bytes(phys_to_virt(frame.start()).as_mut_ptr::<u8>(), 0, PAGE_SIZE as usize) };
    Some(frame)
}

/// What boot-time memory setup reports for the banner.
pub struct MemoryReport {
    /// Frames the allocator covers.
    pub covered_frames: u64,
    /// Frames free after the kernel took what it needs.
    pub free_frames: u64,
    /// Usable bytes the boot map listed above [`MAX_PHYS`], which this build ignores.
    pub ignored_bytes: u64,
}

/// Builds the frame allocator and the kernel page table from the boot memory map and switches
/// to that table.
pub fn init(info: &BootInfo) -> Result<MemoryReport, &'static str> {
    // SAFETY: init runs once, on the boot CPU, before anything else uses BITMAP.
    let bitmap: &'static mut [u64] = unsafe { &mut *core::ptr::addr_of_mut!(BITMAP) };
    let mut frames = FrameAllocator::new(bitmap, Frame::from_number(0), MAX_FRAMES).map_err(|_| "frame bitmap too small")?;
    let mut ignored = 0;
    for range in info.memory_map().iter().filter(|r| r.kind == MemoryKind::Usable) {
        frames.add_free_range(range.start, range.end);
        ignored += range.end.as_u64().saturating_sub(range.start.as_u64().max(MAX_PHYS));
    }
    frames.reserve_range(PhysAddr::new(0), PhysAddr::new(LOW_MEMORY_END));
    frames.reserve_range(info.kernel_image.0, info.kernel_image.1);
    if let Some((start, end)) = info.initrd {
        frames.reserve_range(start, end);
    }
    if frames.free_frames() == 0 {
        return Err("the boot memory map lists no usable memory");
    }

    let mem = DirectMap;
    let mut table_frames = AllocatorFrames(&mut frames);
    let mut table = PageTable::<PageFormat>::new(&mem, &mut table_frames).map_err(|_| "no memory for the kernel page table")?;
    for index in KERNEL_ROOT_ENTRIES {
        // Only the slots the layout uses get tables; the rest stay empty for good.
        let va = root_slot_address(index);
        if [layout::PHYS_MAP, layout::MMIO, layout::KERNEL_STACKS, layout::KERNEL_BASE]
            .iter()
            .any(|&base| PageFormat::index(VirtAddr::new(base), PageFormat::LEVELS - 1) == PageFormat::index(va, PageFormat::LEVELS - 1))
        {
            table.ensure_root_entry(&mem, &mut table_frames, index, false).map_err(|_| "no memory for kernel tables")?;
        }
    }

    // Direct map: every range of the memory map, in 2 MiB pages.
    let rw_global = MapFlags::READ | MapFlags::WRITE | MapFlags::GLOBAL;
    for range in info.memory_map() {
        let start = range.start.as_u64() / LARGE_PAGE * LARGE_PAGE;
        let end = range.end.as_u64().min(MAX_PHYS).div_ceil(LARGE_PAGE) * LARGE_PAGE;
        let mut pa = start;
        while pa < end {
            let va = VirtAddr::new(layout::PHYS_MAP + pa);
            match table.map(&mem, &mut table_frames, va, Frame::containing(PhysAddr::new(pa)), rw_global, 1) {
                Ok(flush) => flush.ignore(), // the table is not active yet
                Err(MapError::AlreadyMapped(_)) => {}
                Err(_) => return Err("no memory for the direct map"),
            }
            pa += LARGE_PAGE;
        }
    }

    // The image, W^X: text RX, rodata R, data+bss RW.
    // SAFETY: linker-script symbols; only their addresses are used.
    let sections = unsafe {
        [
            (&__text_start as *const u8 as u64, &__text_end as *const u8 as u64, MapFlags::READ | MapFlags::EXEC),
            (&__rodata_start as *const u8 as u64, &__rodata_end as *const u8 as u64, MapFlags::READ),
            (&__data_start as *const u8 as u64, &__data_end as *const u8 as u64, MapFlags::READ | MapFlags::WRITE),
        ]
    };
    for (start, end, flags) in sections {
        let mut va = start;
        while va < end {
            let pa = PhysAddr::new(va - layout::KERNEL_BASE);
            table
                .map(&mem, &mut table_frames, VirtAddr::new(va), Frame::containing(pa), flags | MapFlags::GLOBAL, 0)
                .map_err(|_| "no memory for the kernel image map")?
                .ignore();
            va += PAGE_SIZE;
        }
    }

    // SAFETY: the new table maps the running code (image), its stack (.bss), and the direct
    // map; the boot identity map is no longer needed once DIRECT_MAP_ACTIVE is set below.
    unsafe { arch::tlb::load_kernel_root(table.root()) };
    DIRECT_MAP_ACTIVE.store(true, Ordering::Relaxed);

    let report = MemoryReport { covered_frames: frames.covered_frames(), free_frames: frames.free_frames(), ignored_bytes: ignored };
    BOOT_FRAMES.store(frames.free_frames(), Ordering::Relaxed);
    *FRAMES.lock() = Some(frames);
    *KERNEL_TABLE.lock() = Some(table);
    Ok(report)
}

/// First address mapped by root slot `index`, sign-extended.
fn root_slot_address(index: usize) -> VirtAddr {
    let raw = (index as u64) << 39;
    VirtAddr::new(if index >= 256 { raw | 0xffff_0000_0000_0000 } else { raw })
}

/// Maps `len` bytes of device registers at `pa` uncached into the device window.
pub fn map_mmio(pa: PhysAddr, len: u64) -> Result<VirtAddr, MapError> {
    let pages = len.div_ceil(PAGE_SIZE).max(1);
    let va = NEXT_MMIO.fetch_add(pages * PAGE_SIZE, Ordering::Relaxed);
    if va + pages * PAGE_SIZE > layout::MMIO + layout::MMIO_SIZE {
        return Err(MapError::OutOfMemory);
    }
    let flags = MapFlags::READ | MapFlags::WRITE | MapFlags::NO_CACHE | MapFlags::GLOBAL;
    with_kernel_table(|table, frames| {
        for i in 0..pages {
            let page = VirtAddr::new(va + i * PAGE_SIZE);
            let frame = Frame::containing(PhysAddr::new(pa.as_u64() + i * PAGE_SIZE));
            table.map(&DirectMap, &mut AllocatorFrames(frames), page, frame, flags, 0)?.flush(arch::tlb::flush_page);
        }
        Ok(VirtAddr::new(va + (pa.as_u64() & (PAGE_SIZE - 1))))
    })
}

/// The translation of `va` in the kernel table, if any (used by the self-tests and to keep
/// backtraces from touching unmapped memory).
pub fn translate(va: VirtAddr) -> Option<(PhysAddr, MapFlags)> {
    let table = KERNEL_TABLE.try_lock()?;
    table.as_ref()?.translate(&DirectMap, va)
}
