//! What the boot code of every architecture hands the kernel: memory map, command line, boot
//! archive location. Filled by `boot.rs` of the running port from PVH start info or a device
//! tree, before the kernel runs.

use crate::addr::PhysAddr;

/// How many memory-map ranges are kept (QEMU gives fewer than ten).
pub const MAX_MEMORY_RANGES: usize = 64;
/// Longest kernel command line kept, in bytes; longer lines are cut (and `cmdline_truncated` set).
pub const MAX_CMDLINE: usize = 1024;

/// The kind of a physical memory range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryKind {
    /// RAM the kernel may use.
    Usable,
    /// Firmware or device memory the kernel must not use.
    Reserved,
    /// ACPI tables, usable once read.
    AcpiReclaimable,
    /// ACPI non-volatile storage.
    AcpiNvs,
    /// Defective RAM.
    Unusable,
}

/// A range of physical memory `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryRange {
    /// First byte.
    pub start: PhysAddr,
    /// One past the last byte.
    pub end: PhysAddr,
    /// What the range is.
    pub kind: MemoryKind,
}

/// Everything the boot code learned, in one place.
pub struct BootInfo {
    /// The memory map (first `memory_len` entries are valid).
    pub memory: [MemoryRange; MAX_MEMORY_RANGES],
    /// Number of valid entries in `memory`.
    pub memory_len: usize,
    /// The kernel command line (first `cmdline_len` bytes).
    pub cmdline: [u8; MAX_CMDLINE],
    /// Length of the command line.
    pub cmdline_len: usize,
    /// Whether the command line was longer than [`MAX_CMDLINE`].
    pub cmdline_truncated: bool,
    /// Where the boot archive (QEMU `-initrd`) lies, if one was given.
    pub initrd: Option<(PhysAddr, PhysAddr)>,
    /// Physical range occupied by the kernel image (text, data, bss, boot stack).
    pub kernel_image: (PhysAddr, PhysAddr),
    /// Name of the boot protocol that delivered this information, for the banner.
    pub protocol: &'static str,
    /// Physical address of the ACPI RSDP, where the firmware gave one (x86_64 PVH).
    pub acpi_rsdp: Option<PhysAddr>,
}

impl BootInfo {
    /// An empty boot record.
    pub const fn empty() -> Self {
        BootInfo {
            memory: [MemoryRange {
                start: PhysAddr::new(0),
                end: PhysAddr::new(0),
                kind: MemoryKind::Reserved,
            }; MAX_MEMORY_RANGES],
            memory_len: 0,
            cmdline: [0; MAX_CMDLINE],
            cmdline_len: 0,
            cmdline_truncated: false,
            initrd: None,
            kernel_image: (PhysAddr::new(0), PhysAddr::new(0)),
            protocol: "",
            acpi_rsdp: None,
        }
    }

    /// The valid memory ranges.
    pub fn memory_map(&self) -> &[MemoryRange] {
        &self.memory[..self.memory_len]
    }

    /// The command line as text (invalid UTF-8 is cut at the first bad byte).
    pub fn cmdline(&self) -> &str {
        let bytes = &self.cmdline[..self.cmdline_len];
        match core::str::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => core::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or(""),
        }
    }

    /// Appends a memory range, dropping it (and returning `false`) when the table is full.
    pub fn push_memory(&mut self, range: MemoryRange) -> bool {
        if self.memory_len == MAX_MEMORY_RANGES {
            return false;
        }
        self.memory[self.memory_len] = range;
        self.memory_len += 1;
        true
    }

    /// Sets the command line, cutting it at [`MAX_CMDLINE`] bytes.
    pub fn set_cmdline(&mut self, bytes: &[u8]) {
        let len = bytes.len().min(MAX_CMDLINE);
        self.cmdline[..len].copy_from_slice(&bytes[..len]);
        self.cmdline_len = len;
        self.cmdline_truncated = bytes.len() > MAX_CMDLINE;
    }
}
