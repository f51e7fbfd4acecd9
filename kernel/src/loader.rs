//! Reading a user program: a static position-independent ELF (static-pie).
//!
//! [`parse`] checks the file and returns an [`Image`]: the loadable segments with their W^X
//! rights and the relative relocations to apply. It allocates nothing in the machine and never
//! panics on bad input, so it is tested on the host with hand-built and random files; placing
//! the image in the single address space is the domain code's job.

use alloc::vec::Vec;
use arch::addr::PAGE_SIZE;
use arch::mapping::MapFlags;
use elf::abi::{PF_R, PF_W, PF_X, PT_DYNAMIC, PT_LOAD};
use elf::endian::LittleEndian;
use elf::ElfBytes;

/// ELF machine numbers of the architectures Tsumugi runs on.
pub mod machine {
    /// `EM_X86_64`.
    pub const X86_64: u16 = 62;
    /// `EM_AARCH64`.
    pub const AARCH64: u16 = 183;
    /// `EM_RISCV`.
    pub const RISCV: u16 = 243;
}

/// The "relative" relocation type of each machine: `*(base + offset) = base + addend`.
fn relative_relocation(machine: u16) -> Option<u32> {
    match machine {
        machine::X86_64 => Some(8),    // R_X86_64_RELATIVE
        machine::AARCH64 => Some(1027), // R_AARCH64_RELATIVE
        machine::RISCV => Some(3),     // R_RISCV_RELATIVE
        _ => None,
    }
}

/// Dynamic-section tags used here.
mod dt {
    pub const NULL: i64 = 0;
    pub const RELA: i64 = 7;
    pub const RELASZ: i64 = 8;
    pub const RELAENT: i64 = 9;
    pub const REL: i64 = 17;
    pub const RELR: i64 = 36;
}

/// `ET_DYN`: position-independent executables.
const ET_DYN: u16 = 3;
/// Size of one `Elf64_Rela`.
const RELA_SIZE: usize = 24;
/// Largest image span accepted (keeps a bad header from asking for terabytes).
pub const MAX_IMAGE_SPAN: u64 = 1 << 32;

/// A loadable segment, with addresses relative to the image's load base.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// First byte in memory (relative).
    pub vaddr: u64,
    /// Bytes in memory (the tail past `file_len` is zero).
    pub mem_len: u64,
    /// Where the bytes come from in the file.
    pub file_offset: u64,
    /// How many bytes come from the file.
    pub file_len: u64,
    /// Rights: R, W or X (never W and X together).
    pub flags: MapFlags,
}

/// A relative relocation: write `base + addend` at `base + offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Relocation {
    /// Where to write (relative).
    pub offset: u64,
    /// What to add to the load base.
    pub addend: u64,
}

/// A checked program image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    /// Entry point (relative).
    pub entry: u64,
    /// Lowest page-aligned relative address of any segment.
    pub start: u64,
    /// Highest page-aligned relative end of any segment.
    pub end: u64,
    /// The loadable segments, sorted by address, not overlapping at page granularity.
    pub segments: Vec<Segment>,
    /// Relocations to apply after copying the segments.
    pub relocations: Vec<Relocation>,
}

/// Why a program cannot be loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadError {
    /// Not an ELF file, or a malformed one (the parser's message).
    Malformed(&'static str),
    /// Built for another machine (carries `e_machine`).
    WrongMachine(u16),
    /// Not position-independent (carries `e_type`); every program must be static-pie.
    NotPositionIndependent(u16),
    /// A segment asks for write and execute rights at once (carries its address).
    WriteAndExecute(u64),
    /// Two segments share a page (carries the address of the second).
    Overlap(u64),
    /// A segment's numbers do not fit the file or the address space (carries its address).
    BadSegment(u64),
    /// No loadable segment.
    Empty,
    /// A relocation kind the loader does not apply (carries the type).
    UnsupportedRelocation(u32),
    /// A relocation points outside the writable image (carries the offset).
    BadRelocation(u64),
    /// The dynamic section asks for something the loader does not do (carries the tag).
    UnsupportedDynamic(i64),
    /// The entry point is not in an executable segment.
    BadEntry(u64),
}

impl core::fmt::Display for LoadError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            LoadError::Malformed(m) => write!(f, "malformed ELF: {m}"),
            LoadError::WrongMachine(m) => write!(f, "ELF built for machine {m}, not this one"),
            LoadError::NotPositionIndependent(t) => write!(f, "ELF type {t} is not a static-pie executable"),
            LoadError::WriteAndExecute(a) => write!(f, "segment at {a:#x} is both writable and executable (W^X)"),
            LoadError::Overlap(a) => write!(f, "segment at {a:#x} shares a page with another segment"),
            LoadError::BadSegment(a) => write!(f, "segment at {a:#x} does not fit the file or address space"),
            LoadError::Empty => write!(f, "no loadable segment"),
            LoadError::UnsupportedRelocation(t) => write!(f, "unsupported relocation type {t}"),
            LoadError::BadRelocation(o) => write!(f, "relocation at {o:#x} points outside the writable image"),
            LoadError::UnsupportedDynamic(t) => write!(f, "unsupported dynamic tag {t}"),
            LoadError::BadEntry(e) => write!(f, "entry point {e:#x} is not in an executable segment"),
        }
    }
}

fn malformed(e: elf::ParseError) -> LoadError {
    LoadError::Malformed(match e {
        elf::ParseError::BadMagic(_) => "bad magic",
        elf::ParseError::UnsupportedElfClass(_) => "not a 64-bit ELF",
        elf::ParseError::UnsupportedElfEndianness(_) => "not little-endian",
        elf::ParseError::SliceReadError(_) | elf::ParseError::BadOffset(_) => "table outside the file",
        _ => "bad header",
    })
}

/// Checks `bytes` as a static-pie program for `machine` and describes how to load it.
pub fn parse(bytes: &[u8], machine: u16) -> Result<Image, LoadError> {
    let file = ElfBytes::<LittleEndian>::minimal_parse(bytes).map_err(malformed)?;
    if file.ehdr.e_machine != machine {
        return Err(LoadError::WrongMachine(file.ehdr.e_machine));
    }
    if file.ehdr.e_type != ET_DYN {
        return Err(LoadError::NotPositionIndependent(file.ehdr.e_type));
    }
    let phdrs = file.segments().ok_or(LoadError::Empty)?;
    let mut segments = Vec::new();
    let mut dynamic = None;
    for ph in phdrs.iter() {
        match ph.p_type {
            PT_LOAD if ph.p_memsz > 0 => {
                let end = ph.p_vaddr.checked_add(ph.p_memsz).ok_or(LoadError::BadSegment(ph.p_vaddr))?;
                let file_end = ph.p_offset.checked_add(ph.p_filesz).ok_or(LoadError::BadSegment(ph.p_vaddr))?;
                if ph.p_filesz > ph.p_memsz || file_end > bytes.len() as u64 || end > MAX_IMAGE_SPAN {
                    return Err(LoadError::BadSegment(ph.p_vaddr));
                }
                let (r, w, x) = (ph.p_flags & PF_R != 0, ph.p_flags & PF_W != 0, ph.p_flags & PF_X != 0);
                if w && x {
                    return Err(LoadError::WriteAndExecute(ph.p_vaddr));
                }
                let mut flags = MapFlags::USER;
                if r || w || x {
                    flags |= MapFlags::READ;
                }
                if w {
                    flags |= MapFlags::WRITE;
                }
                if x {
                    flags |= MapFlags::EXEC;
                }
                segments.push(Segment {
                    vaddr: ph.p_vaddr,
                    mem_len: ph.p_memsz,
                    file_offset: ph.p_offset,
                    file_len: ph.p_filesz,
                    flags,
                });
            }
            PT_DYNAMIC => dynamic = Some((ph.p_offset, ph.p_filesz)),
            _ => {}
        }
    }
    if segments.is_empty() {
        return Err(LoadError::Empty);
    }
    segments.sort_by_key(|s| s.vaddr);
    for pair in segments.windows(2) {
        let prev_end_page = (pair[0].vaddr + pair[0].mem_len).div_ceil(PAGE_SIZE);
        if pair[1].vaddr / PAGE_SIZE < prev_end_page {
            return Err(LoadError::Overlap(pair[1].vaddr));
        }
    }
    let start = segments[0].vaddr / PAGE_SIZE * PAGE_SIZE;
    let last = segments.last().expect("checked non-empty");
    let end = (last.vaddr + last.mem_len).div_ceil(PAGE_SIZE) * PAGE_SIZE;

    let entry = file.ehdr.e_entry;
    if !segments.iter().any(|s| s.flags.contains(MapFlags::EXEC) && (s.vaddr..s.vaddr + s.mem_len).contains(&entry)) {
        return Err(LoadError::BadEntry(entry));
    }

    let relocations = match dynamic {
        Some((offset, len)) => read_relocations(bytes, offset, len, &segments, machine)?,
        None => Vec::new(),
    };
    Ok(Image { entry, start, end, segments, relocations })
}

/// Reads the `DT_RELA` table named by the dynamic section at `offset..offset+len` of the file.
fn read_relocations(bytes: &[u8], offset: u64, len: u64, segments: &[Segment], machine: u16) -> Result<Vec<Relocation>, LoadError> {
    let dynamic = slice(bytes, offset, len).ok_or(LoadError::Malformed("dynamic section outside the file"))?;
    let (mut rela, mut rela_size, mut rela_ent) = (None, 0u64, RELA_SIZE as u64);
    for entry in dynamic.chunks_exact(16) {
        let tag = i64::from_le_bytes(entry[..8].try_into().expect("8 bytes"));
        let value = u64::from_le_bytes(entry[8..].try_into().expect("8 bytes"));
        match tag {
            dt::NULL => break,
            dt::RELA => rela = Some(value),
            dt::RELASZ => rela_size = value,
            dt::RELAENT => rela_ent = value,
            dt::REL | dt::RELR => return Err(LoadError::UnsupportedDynamic(tag)),
            _ => {}
        }
    }
    let Some(rela_vaddr) = rela else { return Ok(Vec::new()) };
    if rela_ent != RELA_SIZE as u64 {
        return Err(LoadError::Malformed("unexpected relocation entry size"));
    }
    // The table is named by its address; find it in the file through its segment.
    let seg = segments
        .iter()
        .find(|s| rela_vaddr >= s.vaddr && rela_vaddr.saturating_add(rela_size) <= s.vaddr + s.file_len)
        .ok_or(LoadError::Malformed("relocation table outside the loaded segments"))?;
    let table = slice(bytes, seg.file_offset + (rela_vaddr - seg.vaddr), rela_size)
        .ok_or(LoadError::Malformed("relocation table outside the file"))?;
    let relative = relative_relocation(machine).ok_or(LoadError::WrongMachine(machine))?;
    let mut out = Vec::with_capacity(table.len() / RELA_SIZE);
    for r in table.chunks_exact(RELA_SIZE) {
        let offset = u64::from_le_bytes(r[..8].try_into().expect("8 bytes"));
        let info = u64::from_le_bytes(r[8..16].try_into().expect("8 bytes"));
        let addend = u64::from_le_bytes(r[16..].try_into().expect("8 bytes"));
        let kind = info as u32;
        if kind != relative {
            return Err(LoadError::UnsupportedRelocation(kind));
        }
        let writable = segments.iter().any(|s| {
            s.flags.contains(MapFlags::WRITE) && offset >= s.vaddr && offset.checked_add(8).is_some_and(|e| e <= s.vaddr + s.mem_len)
        });
        if !writable {
            return Err(LoadError::BadRelocation(offset));
        }
        out.push(Relocation { offset, addend });
    }
    Ok(out)
}

fn slice(bytes: &[u8], offset: u64, len: u64) -> Option<&[u8]> {
    let start = usize::try_from(offset).ok()?;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    bytes.get(start..end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Builds a small static-pie ELF: text (R+X) at 0, data (R+W) at 0x2000 holding a pointer
    /// slot, a dynamic section in data naming one RELATIVE relocation.
    fn build(machine: u16, text_flags: u32, reloc_type: u32) -> Vec<u8> {
        let mut f = vec![0u8; 0x3000];
        // ELF header
        f[..4].copy_from_slice(b"\x7fELF");
        f[4] = 2; // 64-bit
        f[5] = 1; // little-endian
        f[6] = 1; // version
        f[16..18].copy_from_slice(&ET_DYN.to_le_bytes());
        f[18..20].copy_from_slice(&machine.to_le_bytes());
        f[20..24].copy_from_slice(&1u32.to_le_bytes());
        f[24..32].copy_from_slice(&0x100u64.to_le_bytes()); // entry
        f[32..40].copy_from_slice(&64u64.to_le_bytes()); // phoff
        f[52..54].copy_from_slice(&64u16.to_le_bytes()); // ehsize
        f[54..56].copy_from_slice(&56u16.to_le_bytes()); // phentsize
        f[56..58].copy_from_slice(&3u16.to_le_bytes()); // phnum
        let ph = |f: &mut Vec<u8>, i: usize, ty: u32, flags: u32, off: u64, va: u64, filesz: u64, memsz: u64| {
            let b = 64 + i * 56;
            f[b..b + 4].copy_from_slice(&ty.to_le_bytes());
            f[b + 4..b + 8].copy_from_slice(&flags.to_le_bytes());
            f[b + 8..b + 16].copy_from_slice(&off.to_le_bytes());
            f[b + 16..b + 24].copy_from_slice(&va.to_le_bytes());
            f[b + 24..b + 32].copy_from_slice(&va.to_le_bytes());
            f[b + 32..b + 40].copy_from_slice(&filesz.to_le_bytes());
            f[b + 40..b + 48].copy_from_slice(&memsz.to_le_bytes());
            f[b + 48..b + 56].copy_from_slice(&0x1000u64.to_le_bytes());
        };
        ph(&mut f, 0, PT_LOAD, text_flags, 0, 0, 0x1000, 0x1000);
        ph(&mut f, 1, PT_LOAD, PF_R | PF_W, 0x2000, 0x2000, 0x1000, 0x3000);
        ph(&mut f, 2, PT_DYNAMIC, PF_R | PF_W, 0x2100, 0x2100, 0x40, 0x40);
        // dynamic: RELA=0x2200, RELASZ=24, RELAENT=24, NULL
        let d = |f: &mut Vec<u8>, i: usize, tag: i64, val: u64| {
            let b = 0x2100 + i * 16;
            f[b..b + 8].copy_from_slice(&tag.to_le_bytes());
            f[b + 8..b + 16].copy_from_slice(&val.to_le_bytes());
        };
        d(&mut f, 0, dt::RELA, 0x2200);
        d(&mut f, 1, dt::RELASZ, 24);
        d(&mut f, 2, dt::RELAENT, 24);
        d(&mut f, 3, dt::NULL, 0);
        f[0x2200..0x2208].copy_from_slice(&0x2008u64.to_le_bytes());
        f[0x2208..0x2210].copy_from_slice(&u64::from(reloc_type).to_le_bytes());
        f[0x2210..0x2218].copy_from_slice(&0x100u64.to_le_bytes());
        f
    }

    #[test]
    fn parses_a_static_pie() {
        let image = parse(&build(machine::X86_64, PF_R | PF_X, 8), machine::X86_64).unwrap();
        assert_eq!(image.entry, 0x100);
        assert_eq!((image.start, image.end), (0, 0x5000));
        assert_eq!(image.segments.len(), 2);
        assert_eq!(image.segments[0].flags, MapFlags::USER | MapFlags::READ | MapFlags::EXEC);
        assert_eq!(image.segments[1].flags, MapFlags::USER | MapFlags::READ | MapFlags::WRITE);
        assert_eq!(image.relocations, vec![Relocation { offset: 0x2008, addend: 0x100 }]);
    }

    #[test]
    fn rejects_bad_programs() {
        assert_eq!(parse(&build(machine::X86_64, PF_R | PF_X, 8), machine::RISCV), Err(LoadError::WrongMachine(machine::X86_64)));
        assert_eq!(parse(&build(machine::X86_64, PF_R | PF_W | PF_X, 8), machine::X86_64), Err(LoadError::WriteAndExecute(0)));
        assert_eq!(parse(&build(machine::X86_64, PF_R | PF_X, 1), machine::X86_64), Err(LoadError::UnsupportedRelocation(1)));
        assert_eq!(parse(&build(machine::X86_64, PF_R, 8), machine::X86_64), Err(LoadError::BadEntry(0x100)));
        assert!(matches!(parse(b"not an elf", machine::X86_64), Err(LoadError::Malformed(_))));
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse(&bytes, machine::X86_64);
        }

        #[test]
        fn corrupted_programs_never_panic(flips in proptest::collection::vec((0usize..0x3000, any::<u8>()), 1..16)) {
            let mut f = build(machine::X86_64, PF_R | PF_X, 8);
            for (at, v) in flips { f[at] = v; }
            if let Ok(image) = parse(&f, machine::X86_64) {
                for s in &image.segments {
                    prop_assert!(!(s.flags.contains(MapFlags::WRITE) && s.flags.contains(MapFlags::EXEC)));
                    prop_assert!(s.file_offset + s.file_len <= f.len() as u64);
                }
            }
        }
    }
}
