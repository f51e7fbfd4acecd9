//! Flat kernel images: the bytes of an ELF's loadable segments laid out by physical address,
//! for boot protocols that take a raw image instead of an ELF (see
//! [`Arch::flat_kernel_image`](crate::arch::Arch::flat_kernel_image)).
//!
//! Only what the ELF header and program headers say is read (64-bit little-endian ELF); the
//! image starts at the lowest physical load address, which must be the entry point, and holds
//! the file bytes of every `PT_LOAD` segment. Memory-only parts at the end (`.bss`) are not
//! written: the image's own header says how much memory it needs, and its boot code zeroes it.

use std::path::Path;

use anyhow::{bail, ensure, Context, Result};

/// `PT_LOAD`.
const PT_LOAD: u32 = 1;
/// `ELFCLASS64`.
const ELFCLASS64: u8 = 2;
/// `ELFDATA2LSB`.
const ELFDATA2LSB: u8 = 1;
/// Largest image accepted (a kernel, not a disk).
const MAX_IMAGE: u64 = 256 << 20;

fn u16_at(bytes: &[u8], at: usize) -> Result<u16> {
    let b = bytes.get(at..at + 2).context("ELF file cut short")?;
    Ok(u16::from_le_bytes([b[0], b[1]]))
}

fn u32_at(bytes: &[u8], at: usize) -> Result<u32> {
    let b = bytes.get(at..at + 4).context("ELF file cut short")?;
    Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")))
}

fn u64_at(bytes: &[u8], at: usize) -> Result<u64> {
    let b = bytes.get(at..at + 8).context("ELF file cut short")?;
    Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
}

/// The flat image of the ELF file `elf`.
pub fn flatten(elf: &[u8]) -> Result<Vec<u8>> {
    ensure!(elf.get(..4) == Some(b"\x7fELF".as_slice()), "not an ELF file");
    ensure!(elf.get(4) == Some(&ELFCLASS64) && elf.get(5) == Some(&ELFDATA2LSB), "not a 64-bit little-endian ELF file");
    let entry = u64_at(elf, 0x18)?;
    let phoff = u64_at(elf, 0x20)? as usize;
    let phentsize = usize::from(u16_at(elf, 0x36)?);
    let phnum = usize::from(u16_at(elf, 0x38)?);
    let mut segments = Vec::new();
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        if u32_at(elf, ph)? != PT_LOAD {
            continue;
        }
        let offset = u64_at(elf, ph + 8)?;
        let paddr = u64_at(elf, ph + 24)?;
        let filesz = u64_at(elf, ph + 32)?;
        if filesz > 0 {
            segments.push((paddr, offset, filesz));
        }
    }
    let Some(base) = segments.iter().map(|s| s.0).min() else {
        bail!("the ELF file has nothing to load");
    };
    ensure!(entry == base, "the entry point {entry:#x} is not the start of the image {base:#x}");
    let end = segments.iter().map(|s| s.0 + s.2).max().expect("at least one segment");
    ensure!(end - base <= MAX_IMAGE, "the image would be {} bytes", end - base);
    let mut image = vec![0u8; (end - base) as usize];
    for (paddr, offset, filesz) in segments {
        let from = elf
            .get(offset as usize..(offset + filesz) as usize)
            .context("a segment lies outside the ELF file")?;
        let at = (paddr - base) as usize;
        image[at..at + filesz as usize].copy_from_slice(from);
    }
    Ok(image)
}

/// Writes the flat image of the ELF file at `elf` to `out`.
pub fn write_flat(elf: &Path, out: &Path) -> Result<()> {
    let bytes = std::fs::read(elf).with_context(|| format!("reading {}", elf.display()))?;
    let image = flatten(&bytes).with_context(|| format!("making a flat image of {}", elf.display()))?;
    std::fs::write(out, image).with_context(|| format!("writing {}", out.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 with the given (paddr, bytes) load segments and entry point.
    fn elf(entry: u64, segments: &[(u64, &[u8])]) -> Vec<u8> {
        let phoff = 64u64;
        let data_at = phoff + 56 * segments.len() as u64;
        let mut f = vec![0u8; data_at as usize];
        f[..4].copy_from_slice(b"\x7fELF");
        f[4] = ELFCLASS64;
        f[5] = ELFDATA2LSB;
        f[0x18..0x20].copy_from_slice(&entry.to_le_bytes());
        f[0x20..0x28].copy_from_slice(&phoff.to_le_bytes());
        f[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        f[0x38..0x3a].copy_from_slice(&(segments.len() as u16).to_le_bytes());
        for (i, (paddr, bytes)) in segments.iter().enumerate() {
            let ph = (phoff + 56 * i as u64) as usize;
            let offset = f.len() as u64;
            f[ph..ph + 4].copy_from_slice(&PT_LOAD.to_le_bytes());
            f[ph + 8..ph + 16].copy_from_slice(&offset.to_le_bytes());
            f[ph + 16..ph + 24].copy_from_slice(&(paddr | 0xffff_0000_0000_0000).to_le_bytes());
            f[ph + 24..ph + 32].copy_from_slice(&paddr.to_le_bytes());
            f[ph + 32..ph + 40].copy_from_slice(&(bytes.len() as u64).to_le_bytes());
            f[ph + 40..ph + 48].copy_from_slice(&(bytes.len() as u64 + 64).to_le_bytes());
            f.extend_from_slice(bytes);
        }
        f
    }

    #[test]
    fn lays_segments_out_by_physical_address() {
        let file = elf(0x4020_0000, &[(0x4020_1000, b"data"), (0x4020_0000, b"code")]);
        let image = flatten(&file).unwrap();
        assert_eq!(image.len(), 0x1004);
        assert_eq!(&image[..4], b"code");
        assert!(image[4..0x1000].iter().all(|&b| b == 0));
        assert_eq!(&image[0x1000..], b"data");
    }

    #[test]
    fn refuses_what_cannot_boot() {
        assert!(flatten(b"not an elf").is_err());
        assert!(flatten(&elf(0x4020_0004, &[(0x4020_0000, b"code")])).is_err(), "entry must be the first byte");
        assert!(flatten(&elf(0x4020_0000, &[])).is_err());
        let mut cut = elf(0x4020_0000, &[(0x4020_0000, b"code")]);
        cut.truncate(cut.len() - 2);
        assert!(flatten(&cut).is_err());
    }
}
