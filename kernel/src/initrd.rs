//! Boot archive reader: the ustar (POSIX tar) archive of user programs that xtask hands the kernel.
//!
//! The reader borrows the archive and returns slices of it: it never copies, never allocates and
//! never panics, whatever the bytes are. Every header is checked (checksum, number fields, names)
//! and every length against the end of the archive; the first bad header ends the walk with an
//! error that names its offset.
//!
//! What it understands, beyond the plain POSIX.1-1988 ustar header:
//! - the ustar `prefix` field (names longer than 100 bytes split at a `/`), see [`Entry::prefix`];
//! - GNU long names (`L` entries before the real one), which the `tar` crate writes for names that
//!   cannot be split into `prefix` and `name`;
//! - the `path` record of PAX extended headers (`x` entries);
//! - GNU base-256 numbers in the size field;
//! - archives that end without the two zero blocks (the end of the bytes ends the archive).
//!
//! Only regular files are returned: directories, links, devices and other entry kinds are
//! skipped, as are PAX global headers and the other PAX records.

use core::fmt;
use core::iter::FusedIterator;
use core::ops::Range;
use core::str;

/// Size of a tar block: headers are one block, file data is padded to whole blocks.
pub const BLOCK_SIZE: usize = 512;

/// A header block.
type Header = [u8; BLOCK_SIZE];

// Header fields (POSIX.1-1988 ustar), as byte ranges of the header block.
/// File name, NUL-terminated unless it fills the field.
const NAME: Range<usize> = 0..100;
/// File size in octal (or GNU base-256).
const SIZE: Range<usize> = 124..136;
/// Header checksum in octal.
const CHECKSUM: Range<usize> = 148..156;
/// Entry kind.
const TYPEFLAG: usize = 156;
/// Format magic: [`USTAR_MAGIC`] for POSIX ustar.
const MAGIC: Range<usize> = 257..263;
/// Directory part of a long name (POSIX ustar only; GNU headers keep other fields here).
const PREFIX: Range<usize> = 345..500;

/// The magic of a POSIX ustar header. GNU headers say `"ustar "` and have no prefix field.
const USTAR_MAGIC: &[u8] = b"ustar\0";

// Type flags.
/// Regular file.
const TYPE_REGULAR: u8 = b'0';
/// Regular file, pre-POSIX spelling.
const TYPE_REGULAR_OLD: u8 = 0;
/// Contiguous file: a regular file as far as readers are concerned.
const TYPE_CONTIGUOUS: u8 = b'7';
/// GNU long name: the data is the next entry's name.
const TYPE_GNU_LONG_NAME: u8 = b'L';
/// PAX extended header: the data holds records for the next entry.
const TYPE_PAX_LOCAL: u8 = b'x';

/// The byte the checksum field counts as while the checksum is computed.
const CHECKSUM_FILL: u8 = b' ';
/// A number field whose first byte has this bit set holds a GNU base-256 number.
const BASE256_FLAG: u8 = 0x80;
/// In a base-256 number, this bit of the first byte marks a negative value.
const BASE256_NEGATIVE: u8 = 0x40;
/// The PAX record key that replaces the entry's name.
const PAX_PATH_KEY: &[u8] = b"path";

/// A header field that could not be read as a number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderField {
    /// The file size.
    Size,
    /// The header checksum.
    Checksum,
}

/// Why the archive could not be read past a header. Every variant carries the byte offset of
/// that header inside the archive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArchiveError {
    /// The header's checksum does not match its bytes.
    BadChecksum {
        /// Offset of the header.
        offset: usize,
        /// The checksum the header stores.
        stored: u64,
        /// The checksum of the header's bytes (unsigned sum).
        computed: u64,
    },
    /// A number field is neither octal nor a non-negative base-256 number, or overflows.
    BadField {
        /// Offset of the header.
        offset: usize,
        /// The field.
        field: HeaderField,
    },
    /// The archive ends inside this header.
    TruncatedHeader {
        /// Offset of the header.
        offset: usize,
    },
    /// The entry's data runs past the end of the archive.
    TruncatedData {
        /// Offset of the header.
        offset: usize,
        /// Data bytes the header claims.
        size: u64,
        /// Bytes left after the header.
        available: usize,
    },
    /// The entry's name (from the header, a GNU long name or a PAX record) is not UTF-8.
    NameNotUtf8 {
        /// Offset of the header holding the name.
        offset: usize,
    },
    /// A GNU long-name or PAX header is malformed, or is not followed by an entry.
    BadExtension {
        /// Offset of the extension header.
        offset: usize,
    },
}

impl fmt::Display for ArchiveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ArchiveError::BadChecksum { offset, stored, computed } => write!(
                f,
                "boot archive header at {offset:#x}: checksum {stored:#o}, bytes sum to {computed:#o}"
            ),
            ArchiveError::BadField { offset, field } => {
                write!(f, "boot archive header at {offset:#x}: bad {field:?} field")
            }
            ArchiveError::TruncatedHeader { offset } => {
                write!(f, "boot archive ends inside the header at {offset:#x}")
            }
            ArchiveError::TruncatedData { offset, size, available } => write!(
                f,
                "boot archive entry at {offset:#x} claims {size} bytes, {available} remain"
            ),
            ArchiveError::NameNotUtf8 { offset } => {
                write!(f, "boot archive entry at {offset:#x}: name is not UTF-8")
            }
            ArchiveError::BadExtension { offset } => {
                write!(f, "boot archive extension header at {offset:#x} is malformed or dangling")
            }
        }
    }
}

/// A tar archive in memory.
#[derive(Clone, Copy)]
pub struct Archive<'a> {
    /// The whole archive.
    bytes: &'a [u8],
}

/// A regular file in the archive.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Entry<'a> {
    /// The file's name: the whole path, except for a ustar header that split a long path, where
    /// this is the part after [`Entry::prefix`]. [`Entry::path`] and [`Entry::path_is`] see the
    /// whole path in every case.
    pub name: &'a str,
    /// The directory part of a ustar name split across the `prefix` and `name` fields, without
    /// the joining `/`; empty when the name was not split (every name of 100 bytes or less).
    pub prefix: &'a str,
    /// The file's contents.
    pub data: &'a [u8],
}

/// The full path of an entry, `prefix/name`, for printing and comparing without allocating.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct EntryPath<'a> {
    /// See [`Entry::prefix`].
    prefix: &'a str,
    /// See [`Entry::name`].
    name: &'a str,
}

/// Iterator over the regular files of an [`Archive`]; see [`Archive::entries`].
#[derive(Clone)]
pub struct Entries<'a> {
    /// The whole archive.
    bytes: &'a [u8],
    /// Offset of the next header; never beyond `bytes.len()`.
    offset: usize,
    /// Set at the end of the archive or after an error.
    done: bool,
}

impl<'a> Archive<'a> {
    /// Wraps the archive's bytes. Nothing is checked until the entries are read.
    pub fn new(bytes: &'a [u8]) -> Self {
        Archive { bytes }
    }

    /// Iterates over regular-file entries, in archive order. A malformed header yields
    /// `Err(ArchiveError::...)` once and then the iterator ends.
    pub fn entries(&self) -> Entries<'a> {
        Entries {
            bytes: self.bytes,
            offset: 0,
            done: false,
        }
    }

    /// The first regular file whose full path is `name`. Headers after it are not read, so an
    /// error is returned only if one comes before the file (or the file is absent).
    pub fn find(&self, name: &str) -> Result<Option<Entry<'a>>, ArchiveError> {
        for entry in self.entries() {
            let entry = entry?;
            if entry.path_is(name) {
                return Ok(Some(entry));
            }
        }
        Ok(None)
    }
}

impl<'a> Entry<'a> {
    /// The entry's full path, printable with `{}`.
    pub fn path(&self) -> EntryPath<'a> {
        EntryPath {
            prefix: self.prefix,
            name: self.name,
        }
    }

    /// Whether the entry's full path is `path`.
    pub fn path_is(&self, path: &str) -> bool {
        if self.prefix.is_empty() {
            return self.name == path;
        }
        path.strip_prefix(self.prefix)
            .and_then(|rest| rest.strip_prefix('/'))
            == Some(self.name)
    }
}

impl fmt::Display for EntryPath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.prefix.is_empty() {
            f.write_str(self.prefix)?;
            f.write_str("/")?;
        }
        f.write_str(self.name)
    }
}

impl fmt::Debug for EntryPath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{self}\"")
    }
}

impl fmt::Debug for Entry<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entry")
            .field("path", &self.path())
            .field("len", &self.data.len())
            .finish()
    }
}

impl fmt::Debug for Archive<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Archive")
            .field("len", &self.bytes.len())
            .finish()
    }
}

impl fmt::Debug for Entries<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entries")
            .field("offset", &self.offset)
            .field("done", &self.done)
            .finish()
    }
}

impl<'a> Iterator for Entries<'a> {
    type Item = Result<Entry<'a>, ArchiveError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.advance() {
            Ok(Some(entry)) => Some(Ok(entry)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(error) => {
                self.done = true;
                Some(Err(error))
            }
        }
    }
}

impl FusedIterator for Entries<'_> {}

impl<'a> Entries<'a> {
    /// Reads headers until the next regular file, the end, or an error.
    fn advance(&mut self) -> Result<Option<Entry<'a>>, ArchiveError> {
        // A name from an extension header, for the next real entry; PAX wins over GNU.
        let mut long_name: Option<&'a str> = None;
        let mut pax_path: Option<&'a str> = None;
        // Offset of the last extension header, while one is waiting for its entry.
        let mut pending_extension: Option<usize> = None;
        loop {
            let offset = self.offset;
            let rest = self.bytes.get(offset..).unwrap_or_default();
            let header: Option<&'a Header> = rest.get(..BLOCK_SIZE).and_then(|h| h.try_into().ok());
            let header = match header {
                // A zero block is the terminator (POSIX asks for two; one is enough to know).
                // Running out of bytes exactly at a block boundary ends the archive too.
                Some(header) if header.iter().all(|&byte| byte == 0) => None,
                None if rest.is_empty() => None,
                None => return Err(ArchiveError::TruncatedHeader { offset }),
                Some(header) => Some(header),
            };
            let Some(header) = header else {
                return match pending_extension {
                    Some(offset) => Err(ArchiveError::BadExtension { offset }),
                    None => Ok(None),
                };
            };
            verify_checksum(header, offset)?;
            let size = parse_number(&header[SIZE]).ok_or(ArchiveError::BadField {
                offset,
                field: HeaderField::Size,
            })?;
            let data = data_of(self.bytes, offset, size)?;
            // The next header follows the data padded to a whole block; if the padding is cut
            // off, the archive ends there. (The header lies inside `bytes`, so `data_start` does
            // not overflow.)
            let data_start = offset + BLOCK_SIZE;
            let padded = data.len().div_ceil(BLOCK_SIZE).saturating_mul(BLOCK_SIZE);
            self.offset = data_start.saturating_add(padded).min(self.bytes.len());

            match header[TYPEFLAG] {
                TYPE_REGULAR | TYPE_REGULAR_OLD | TYPE_CONTIGUOUS => {
                    let (prefix, name) = match pax_path.or(long_name) {
                        Some(name) => ("", name),
                        None => header_name(header, offset)?,
                    };
                    // Pre-POSIX archives mark directories with a trailing slash only.
                    if name.ends_with('/') {
                        (long_name, pax_path, pending_extension) = (None, None, None);
                        continue;
                    }
                    return Ok(Some(Entry { name, prefix, data }));
                }
                TYPE_GNU_LONG_NAME => {
                    let name = until_nul(data);
                    let name =
                        str::from_utf8(name).map_err(|_| ArchiveError::NameNotUtf8 { offset })?;
                    long_name = Some(name);
                    pending_extension = Some(offset);
                }
                TYPE_PAX_LOCAL => {
                    if let Some(path) = pax_path_record(data, offset)? {
                        pax_path = Some(path);
                    }
                    pending_extension = Some(offset);
                }
                // Directories, links, devices, FIFOs, PAX global headers, vendor extensions:
                // not files; any pending extension belonged to them.
                _ => (long_name, pax_path, pending_extension) = (None, None, None),
            }
        }
    }
}

/// The data of the entry whose header is at `offset`, checked against the end of the archive.
fn data_of(bytes: &[u8], offset: usize, size: u64) -> Result<&[u8], ArchiveError> {
    let data_start = offset.saturating_add(BLOCK_SIZE);
    let available = bytes.len().saturating_sub(data_start);
    usize::try_from(size)
        .ok()
        .and_then(|len| bytes.get(data_start..data_start.checked_add(len)?))
        .ok_or(ArchiveError::TruncatedData {
            offset,
            size,
            available,
        })
}

/// Checks the header checksum: the sum of the header's bytes with the checksum field counted
/// as spaces. Historic writers summed signed bytes; either sum is accepted, as GNU tar does.
fn verify_checksum(header: &Header, offset: usize) -> Result<(), ArchiveError> {
    let stored = parse_octal(&header[CHECKSUM]).ok_or(ArchiveError::BadField {
        offset,
        field: HeaderField::Checksum,
    })?;
    let fill_sum = CHECKSUM.len() as u64 * u64::from(CHECKSUM_FILL);
    let (mut unsigned, mut signed) = (fill_sum, fill_sum as i64);
    for (index, &byte) in header.iter().enumerate() {
        if !CHECKSUM.contains(&index) {
            unsigned += u64::from(byte);
            signed += i64::from(byte as i8);
        }
    }
    if stored == unsigned || i64::try_from(stored) == Ok(signed) {
        Ok(())
    } else {
        Err(ArchiveError::BadChecksum {
            offset,
            stored,
            computed: unsigned,
        })
    }
}

/// The `(prefix, name)` of a header: the `name` field, and the `prefix` field if this is a
/// POSIX ustar header and it is not empty.
fn header_name(header: &Header, offset: usize) -> Result<(&str, &str), ArchiveError> {
    let utf8 =
        |field| str::from_utf8(until_nul(field)).map_err(|_| ArchiveError::NameNotUtf8 { offset });
    let name = utf8(&header[NAME])?;
    let prefix = if &header[MAGIC] == USTAR_MAGIC {
        utf8(&header[PREFIX])?
    } else {
        ""
    };
    Ok((prefix, name))
}

/// The bytes before the first NUL (all of them if there is none).
fn until_nul(field: &[u8]) -> &[u8] {
    let end = field
        .iter()
        .position(|&byte| byte == 0)
        .unwrap_or(field.len());
    field.get(..end).unwrap_or_default()
}

/// A number field: octal, or GNU base-256 when the first byte has its top bit set. Negative
/// base-256 values and overflow give `None`.
fn parse_number(field: &[u8]) -> Option<u64> {
    match field.split_first() {
        Some((&first, rest)) if first & BASE256_FLAG != 0 => {
            if first & BASE256_NEGATIVE != 0 {
                return None;
            }
            let top = u64::from(first & !BASE256_FLAG);
            rest.iter().try_fold(top, |value, &byte| {
                value
                    .checked_mul(1 << u8::BITS)?
                    .checked_add(u64::from(byte))
            })
        }
        _ => parse_octal(field),
    }
}

/// An octal field: optional leading spaces, octal digits, then only NULs and spaces. An empty
/// field is 0, as tar has always read it.
fn parse_octal(field: &[u8]) -> Option<u64> {
    /// Radix of tar's number fields.
    const OCTAL: u64 = 8;
    let start = field
        .iter()
        .position(|&byte| byte != b' ')
        .unwrap_or(field.len());
    let digits = field.get(start..).unwrap_or_default();
    let end = digits
        .iter()
        .position(|&byte| byte == 0 || byte == b' ')
        .unwrap_or(digits.len());
    let (number, tail) = digits.split_at(end);
    if !tail.iter().all(|&byte| byte == 0 || byte == b' ') {
        return None;
    }
    number.iter().try_fold(0u64, |value, &byte| {
        let digit = match byte {
            b'0'..=b'7' => u64::from(byte - b'0'),
            _ => return None,
        };
        value.checked_mul(OCTAL)?.checked_add(digit)
    })
}

/// The value of the last `path` record in a PAX extended header's data.
///
/// Records are `"<length> <key>=<value>\n"`, where `<length>` is the decimal length of the whole
/// record including itself and the newline.
fn pax_path_record(mut data: &[u8], offset: usize) -> Result<Option<&str>, ArchiveError> {
    /// Radix of PAX record lengths.
    const DECIMAL: usize = 10;
    let malformed = ArchiveError::BadExtension { offset };
    let mut path = None;
    // Writers pad the last block with NULs; stop there.
    while data.first().is_some_and(|&byte| byte != 0) {
        let space = data
            .iter()
            .position(|&byte| byte == b' ')
            .ok_or(malformed)?;
        let (digits, _) = data.split_at(space);
        let length = digits.iter().try_fold(0usize, |value, &byte| match byte {
            b'0'..=b'9' => value
                .checked_mul(DECIMAL)?
                .checked_add(usize::from(byte - b'0')),
            _ => None,
        });
        let record = length
            .filter(|&len| len > space)
            .and_then(|len| data.get(..len))
            .ok_or(malformed)?;
        // Between the space and the newline.
        let body = match record.get(space + 1..) {
            Some([body @ .., b'\n']) => body,
            _ => return Err(malformed),
        };
        let equals = body
            .iter()
            .position(|&byte| byte == b'=')
            .ok_or(malformed)?;
        let (key, value) = body.split_at(equals);
        if key == PAX_PATH_KEY {
            let value = value.get(1..).unwrap_or_default();
            path = Some(str::from_utf8(value).map_err(|_| ArchiveError::NameNotUtf8 { offset })?);
        }
        data = data.get(record.len()..).unwrap_or_default();
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeMap;
    use alloc::string::String;
    use alloc::vec;
    use alloc::vec::Vec;
    use proptest::prelude::*;

    /// Which header flavour the `tar` crate writes.
    #[derive(Clone, Copy, Debug)]
    enum Flavour {
        Gnu,
        Ustar,
        Old,
    }

    fn new_header(flavour: Flavour) -> tar::Header {
        match flavour {
            Flavour::Gnu => tar::Header::new_gnu(),
            Flavour::Ustar => tar::Header::new_ustar(),
            Flavour::Old => tar::Header::new_old(),
        }
    }

    /// Appends a regular file the way xtask does.
    fn append(builder: &mut tar::Builder<Vec<u8>>, flavour: Flavour, name: &str, data: &[u8]) {
        let mut header = new_header(flavour);
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(data.len() as u64);
        header.set_mode(0o755);
        header.set_mtime(0);
        builder.append_data(&mut header, name, data).unwrap();
    }

    fn archive(flavour: Flavour, files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (name, data) in files {
            append(&mut builder, flavour, name, data);
        }
        builder.into_inner().unwrap()
    }

    fn collect(bytes: &[u8]) -> Result<Vec<(String, Vec<u8>)>, ArchiveError> {
        Archive::new(bytes)
            .entries()
            .map(|entry| entry.map(|e| (alloc::format!("{}", e.path()), e.data.to_vec())))
            .collect()
    }

    /// Rewrites the checksum of the header at `offset` after a test edited it.
    fn fix_checksum(bytes: &mut [u8], offset: usize) {
        let header = &mut bytes[offset..offset + BLOCK_SIZE];
        header[CHECKSUM].fill(CHECKSUM_FILL);
        let sum: u64 = header.iter().map(|&b| u64::from(b)).sum();
        let text = alloc::format!("{sum:06o}\0 ");
        header[CHECKSUM].copy_from_slice(text.as_bytes());
    }

    /// A hand-made header block for cases the `tar` crate does not write.
    fn raw_header(name: &[u8], size_field: &[u8], typeflag: u8) -> Vec<u8> {
        let mut block = vec![0u8; BLOCK_SIZE];
        block[..name.len()].copy_from_slice(name);
        block[SIZE][..size_field.len()].copy_from_slice(size_field);
        block[TYPEFLAG] = typeflag;
        block[MAGIC].copy_from_slice(USTAR_MAGIC);
        fix_checksum(&mut block, 0);
        block
    }

    const FILES: &[(&str, &[u8])] = &[
        ("init", b"\x7fELF init"),
        ("empty", b""),
        ("block", &[7; BLOCK_SIZE]),
        ("odd", &[9; BLOCK_SIZE + 1]),
        ("bench-switch", b"bench"),
    ];

    #[test]
    fn round_trips_every_flavour() {
        for flavour in [Flavour::Gnu, Flavour::Ustar, Flavour::Old] {
            let bytes = archive(flavour, FILES);
            let read = collect(&bytes).unwrap();
            let expected: Vec<_> = FILES
                .iter()
                .map(|(n, d)| (String::from(*n), d.to_vec()))
                .collect();
            assert_eq!(read, expected, "{flavour:?}");
            let archive = Archive::new(&bytes);
            let odd = archive.find("odd").unwrap().unwrap();
            assert_eq!(
                (odd.name, odd.prefix, odd.data),
                ("odd", "", &[9; BLOCK_SIZE + 1][..])
            );
            // Zero copy: the data points into the archive.
            assert!(bytes.as_ptr_range().contains(&odd.data.as_ptr()));
            assert_eq!(archive.find("missing"), Ok(None));
            assert_eq!(archive.find("ini"), Ok(None));
        }
    }

    #[test]
    fn empty_and_unterminated_archives() {
        assert_eq!(collect(&[]), Ok(vec![]));
        assert_eq!(collect(&[0; BLOCK_SIZE]), Ok(vec![]));
        assert_eq!(collect(&archive(Flavour::Gnu, &[])), Ok(vec![]));
        // Without the terminator, and even without the last entry's padding.
        let bytes = archive(Flavour::Ustar, &[("a", b"abc"), ("b", b"xyz")]);
        let end_of_b_data = 3 * BLOCK_SIZE + 3;
        let expected = Ok(vec![
            (String::from("a"), b"abc".to_vec()),
            (String::from("b"), b"xyz".to_vec()),
        ]);
        assert_eq!(collect(&bytes[..4 * BLOCK_SIZE]), expected);
        assert_eq!(collect(&bytes[..end_of_b_data]), expected);
        // Anything after the first zero block is not read.
        let mut bytes = bytes;
        bytes.extend_from_slice(&[0xee; BLOCK_SIZE]);
        assert_eq!(collect(&bytes), expected);
    }

    #[test]
    fn long_names() {
        let deep = "programs/with/a/rather/long/directory/path/that/goes/on/and/on/and/on/until/it/is/well/past/one/hundred/bytes";
        assert!(deep.len() > NAME.len());
        let split = alloc::format!("{deep}/init");
        let unsplittable = "x".repeat(150);
        for flavour in [Flavour::Gnu, Flavour::Ustar, Flavour::Old] {
            let bytes = archive(flavour, &[(&split, b"one"), (&unsplittable, b"two")]);
            let archive = Archive::new(&bytes);
            let first = archive.find(&split).unwrap().unwrap();
            assert_eq!(first.data, b"one");
            assert_eq!(alloc::format!("{}", first.path()), split);
            if let Flavour::Ustar = flavour {
                // The `tar` crate split it into prefix and name.
                assert_eq!((first.prefix, first.name), (deep, "init"));
            } else {
                assert_eq!((first.prefix, first.name), ("", split.as_str()));
            }
            assert_eq!(archive.find(&unsplittable).unwrap().unwrap().data, b"two");
            assert_eq!(archive.entries().count(), 2);
            assert_eq!(archive.find("init"), Ok(None));
            assert_eq!(archive.find(deep), Ok(None));
        }
    }

    #[test]
    fn skips_directories_links_and_pax_globals() {
        let mut builder = tar::Builder::new(Vec::new());
        let mut dir = tar::Header::new_ustar();
        dir.set_entry_type(tar::EntryType::Directory);
        dir.set_size(0);
        builder.append_data(&mut dir, "bin", &[][..]).unwrap();
        let mut link = tar::Header::new_gnu();
        link.set_entry_type(tar::EntryType::Symlink);
        link.set_size(0);
        builder.append_link(&mut link, "link", "init").unwrap();
        // A long link target goes in a GNU `K` entry, which must be skipped too.
        let mut long_link = tar::Header::new_gnu();
        long_link.set_entry_type(tar::EntryType::Symlink);
        long_link.set_size(0);
        builder
            .append_link(&mut long_link, "link2", "t".repeat(200))
            .unwrap();
        let mut global = tar::Header::new_ustar();
        global.set_entry_type(tar::EntryType::XGlobalHeader);
        let records = b"18 comment=hello\n";
        global.set_size(records.len() as u64);
        builder
            .append_data(&mut global, "pax_global_header", &records[..])
            .unwrap();
        append(&mut builder, Flavour::Gnu, "init", b"code");
        let bytes = builder.into_inner().unwrap();
        assert_eq!(
            collect(&bytes),
            Ok(vec![(String::from("init"), b"code".to_vec())])
        );

        // An old-style directory: regular type flag, trailing slash.
        let mut bytes = raw_header(b"dir/", b"0", TYPE_REGULAR_OLD);
        bytes.extend(archive(Flavour::Ustar, &[("f", b"f")]));
        assert_eq!(
            collect(&bytes),
            Ok(vec![(String::from("f"), b"f".to_vec())])
        );
    }

    #[test]
    fn pax_path_overrides_the_header_name() {
        let mut builder = tar::Builder::new(Vec::new());
        builder
            .append_pax_extensions([("mtime", &b"0"[..]), ("path", &b"real/name"[..])])
            .unwrap();
        append(&mut builder, Flavour::Ustar, "short", b"data");
        append(&mut builder, Flavour::Ustar, "next", b"more");
        let bytes = builder.into_inner().unwrap();
        let read = collect(&bytes).unwrap();
        assert_eq!(read[0], (String::from("real/name"), b"data".to_vec()));
        // The override applies to one entry only.
        assert_eq!(read[1], (String::from("next"), b"more".to_vec()));

        // Malformed records.
        for records in [
            &b"5 path=x\n"[..],
            b"x path=x\n",
            b"10 pathx\n",
            b"99 path=x\n",
            b"9 path=x!",
        ] {
            let mut bytes = raw_header(
                b"pax",
                alloc::format!("{:o}", records.len()).as_bytes(),
                TYPE_PAX_LOCAL,
            );
            bytes.extend_from_slice(records);
            bytes.resize(2 * BLOCK_SIZE, 0);
            bytes.extend(archive(Flavour::Ustar, &[("f", b"f")]));
            assert_eq!(
                collect(&bytes),
                Err(ArchiveError::BadExtension { offset: 0 }),
                "{records:?}"
            );
        }
    }

    #[test]
    fn bad_checksum_reports_offset_and_ends() {
        let mut bytes = archive(Flavour::Gnu, &[("a", b"abc"), ("b", b"def"), ("c", b"ghi")]);
        let offset = 2 * BLOCK_SIZE;
        bytes[offset] = b'z';
        let mut entries = Archive::new(&bytes).entries();
        assert_eq!(entries.next().unwrap().unwrap().name, "a");
        match entries.next() {
            Some(Err(ArchiveError::BadChecksum {
                offset: at,
                stored,
                computed,
            })) => {
                assert_eq!(at, offset);
                assert_eq!(computed, stored + u64::from(b'z' - b'b'));
            }
            other => panic!("expected a checksum error, got {other:?}"),
        }
        assert!(entries.next().is_none());
        assert!(entries.next().is_none());
        assert_eq!(
            Archive::new(&bytes).find("a").unwrap().unwrap().data,
            b"abc"
        );
        assert!(matches!(
            Archive::new(&bytes).find("c"),
            Err(ArchiveError::BadChecksum { .. })
        ));
    }

    #[test]
    fn signed_checksums_are_accepted() {
        let mut block = raw_header("ü".as_bytes(), b"0", TYPE_REGULAR);
        block[CHECKSUM].fill(CHECKSUM_FILL);
        let sum: i64 = block.iter().map(|&b| i64::from(b as i8)).sum();
        block[CHECKSUM].copy_from_slice(alloc::format!("{sum:06o}\0 ").as_bytes());
        assert_eq!(collect(&block), Ok(vec![(String::from("ü"), vec![])]));
    }

    #[test]
    fn truncation_is_an_error() {
        let bytes = archive(Flavour::Gnu, &[("a", &[1; 1000])]);
        assert_eq!(
            collect(&bytes[..BLOCK_SIZE + 999]),
            Err(ArchiveError::TruncatedData {
                offset: 0,
                size: 1000,
                available: 999
            })
        );
        assert_eq!(
            collect(&bytes[..100]),
            Err(ArchiveError::TruncatedHeader { offset: 0 })
        );
        let second = archive(Flavour::Gnu, &[("a", b"a"), ("b", b"b")]);
        assert_eq!(
            collect(&second[..2 * BLOCK_SIZE + 511]),
            Err(ArchiveError::TruncatedHeader {
                offset: 2 * BLOCK_SIZE
            })
        );
    }

    #[test]
    fn number_fields() {
        // NUL- and space-terminated octal, leading spaces.
        for field in [&b"00000000003\0"[..], b"3 ", b"   3\0\0", b"00000000003 "] {
            let mut bytes = raw_header(b"f", field, TYPE_REGULAR);
            bytes.extend_from_slice(b"xyz");
            assert_eq!(
                collect(&bytes),
                Ok(vec![(String::from("f"), b"xyz".to_vec())]),
                "{field:?}"
            );
        }
        // An empty size field is zero.
        assert_eq!(
            collect(&raw_header(b"f", b"", TYPE_REGULAR)),
            Ok(vec![(String::from("f"), vec![])])
        );
        // Not octal.
        for field in [&b"8"[..], b"1 2", b"x", b"-1", b"1234567 x"] {
            assert_eq!(
                collect(&raw_header(b"f", field, TYPE_REGULAR)),
                Err(ArchiveError::BadField {
                    offset: 0,
                    field: HeaderField::Size
                }),
                "{field:?}"
            );
        }
        // GNU base-256: small values read, huge ones are truncated data, negative ones are bad.
        let mut small = [0u8; 12];
        small[0] = BASE256_FLAG;
        small[11] = 2;
        let mut bytes = raw_header(b"f", &small, TYPE_REGULAR);
        bytes.extend_from_slice(b"hi");
        assert_eq!(
            collect(&bytes),
            Ok(vec![(String::from("f"), b"hi".to_vec())])
        );
        let mut huge = [0u8; 12];
        huge[0] = BASE256_FLAG;
        huge[4] = 1;
        assert_eq!(
            collect(&raw_header(b"f", &huge, TYPE_REGULAR)),
            Err(ArchiveError::TruncatedData {
                offset: 0,
                size: 1 << 56,
                available: 0
            })
        );
        let mut overflow = [0u8; 12];
        overflow[0] = BASE256_FLAG;
        overflow[3] = 1;
        assert_eq!(
            collect(&raw_header(b"f", &overflow, TYPE_REGULAR)),
            Err(ArchiveError::BadField {
                offset: 0,
                field: HeaderField::Size
            })
        );
        assert_eq!(
            collect(&raw_header(b"f", &[0xff; 12], TYPE_REGULAR)),
            Err(ArchiveError::BadField {
                offset: 0,
                field: HeaderField::Size
            })
        );
        // A checksum field that is not octal.
        let mut bytes = raw_header(b"f", b"0", TYPE_REGULAR);
        bytes[CHECKSUM.start] = b'9';
        assert_eq!(
            collect(&bytes),
            Err(ArchiveError::BadField {
                offset: 0,
                field: HeaderField::Checksum
            })
        );
    }

    #[test]
    fn bad_names() {
        assert_eq!(
            collect(&raw_header(b"\xff\xfe", b"0", TYPE_REGULAR)),
            Err(ArchiveError::NameNotUtf8 { offset: 0 })
        );
        // A dangling GNU long name.
        let mut bytes = raw_header(b"././@LongLink", b"3", TYPE_GNU_LONG_NAME);
        bytes.extend_from_slice(b"abc");
        bytes.resize(2 * BLOCK_SIZE, 0);
        assert_eq!(
            collect(&bytes),
            Err(ArchiveError::BadExtension { offset: 0 })
        );
        // A long name that is not UTF-8.
        let mut bytes = raw_header(b"././@LongLink", b"2", TYPE_GNU_LONG_NAME);
        bytes.extend_from_slice(b"\xc3\x28");
        bytes.resize(2 * BLOCK_SIZE, 0);
        bytes.extend(archive(Flavour::Gnu, &[("f", b"f")]));
        assert_eq!(
            collect(&bytes),
            Err(ArchiveError::NameNotUtf8 { offset: 0 })
        );
        // A long name that belongs to a skipped entry does not leak to the next file.
        let mut bytes = raw_header(b"././@LongLink", b"3", TYPE_GNU_LONG_NAME);
        bytes.extend_from_slice(b"dir");
        bytes.resize(2 * BLOCK_SIZE, 0);
        bytes.extend(raw_header(b"d", b"0", b'5'));
        bytes.extend(archive(Flavour::Gnu, &[("f", b"f")]));
        assert_eq!(
            collect(&bytes),
            Ok(vec![(String::from("f"), b"f".to_vec())])
        );
    }

    #[test]
    fn error_display() {
        let error = ArchiveError::BadChecksum {
            offset: 0x400,
            stored: 0o123,
            computed: 0o124,
        };
        assert_eq!(
            alloc::format!("{error}"),
            "boot archive header at 0x400: checksum 0o123, bytes sum to 0o124"
        );
    }

    // ---- Property tests ----

    /// A path of one to several components that the `tar` crate accepts as is (no `.` or `..`
    /// components, no empty ones), sometimes longer than 100 or 155 bytes.
    fn path() -> impl Strategy<Value = String> {
        proptest::collection::vec("[a-zA-Z0-9_é月][a-zA-Z0-9_.é月-]{0,40}", 1..8)
            .prop_map(|parts| parts.join("/"))
    }

    fn files() -> impl Strategy<Value = BTreeMap<String, Vec<u8>>> {
        proptest::collection::btree_map(
            path(),
            proptest::collection::vec(any::<u8>(), 0..1500),
            0..8,
        )
    }

    fn flavour() -> impl Strategy<Value = Flavour> {
        prop_oneof![Just(Flavour::Gnu), Just(Flavour::Ustar), Just(Flavour::Old)]
    }

    /// Reads everything and looks a few names up; the property is that this returns at all.
    fn read_all(bytes: &[u8]) {
        let archive = Archive::new(bytes);
        let mut count = 0;
        for entry in archive.entries() {
            count += 1;
            // Every step consumes at least one block, so the walk is bounded.
            assert!(count <= bytes.len() / BLOCK_SIZE + 1);
            if let Ok(entry) = entry {
                assert!(
                    bytes.as_ptr_range().contains(&entry.data.as_ptr()) || entry.data.is_empty()
                );
                let _ = alloc::format!("{} {:?}", entry.path(), entry);
            }
        }
        let _ = archive.find("init");
        let _ = archive.find("");
    }

    proptest! {
        #[test]
        fn round_trips_tar_crate_archives(files in files(), flavour in flavour()) {
            let mut builder = tar::Builder::new(Vec::new());
            for (name, data) in &files {
                append(&mut builder, flavour, name, data);
            }
            let bytes = builder.into_inner().unwrap();
            let read = collect(&bytes).unwrap();
            let expected: Vec<(String, Vec<u8>)> = files.clone().into_iter().collect();
            prop_assert_eq!(read, expected);
            let archive = Archive::new(&bytes);
            for (name, data) in &files {
                let entry = archive.find(name).unwrap().unwrap();
                prop_assert_eq!(entry.data, &data[..]);
            }
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4 * BLOCK_SIZE)) {
            read_all(&bytes);
        }

        #[test]
        fn random_headers_never_panic(
            blocks in proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), BLOCK_SIZE), any::<bool>()),
                1..6,
            ),
        ) {
            // Random blocks, some with a valid checksum so the parser gets past it.
            let mut bytes = Vec::new();
            for (block, valid) in blocks {
                let offset = bytes.len();
                bytes.extend(block);
                if valid {
                    fix_checksum(&mut bytes, offset);
                }
            }
            read_all(&bytes);
        }

        #[test]
        fn corrupted_archives_never_panic(
            files in files(),
            flavour in flavour(),
            edits in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 1..8),
            cut in proptest::option::of(any::<proptest::sample::Index>()),
            fix_checksums in any::<bool>(),
        ) {
            let mut builder = tar::Builder::new(Vec::new());
            for (name, data) in &files {
                append(&mut builder, flavour, name, data);
            }
            let mut bytes = builder.into_inner().unwrap();
            // Header offsets, found before the damage.
            let mut headers = Vec::new();
            let mut offset = 0;
            while let Some(header) = bytes.get(offset..offset + BLOCK_SIZE) {
                if header.iter().all(|&b| b == 0) {
                    break;
                }
                headers.push(offset);
                let size = parse_number(&header[SIZE]).unwrap() as usize;
                offset += BLOCK_SIZE + size.div_ceil(BLOCK_SIZE) * BLOCK_SIZE;
            }
            for (index, value) in edits {
                let at = index.index(bytes.len());
                bytes[at] = value;
            }
            if fix_checksums {
                for &offset in &headers {
                    fix_checksum(&mut bytes, offset);
                }
            }
            if let Some(cut) = cut {
                let len = cut.index(bytes.len() + 1);
                bytes.truncate(len);
            }
            read_all(&bytes);
        }
    }
}
