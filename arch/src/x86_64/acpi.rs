//! Just enough ACPI to find the CPUs: RSDP -> RSDT/XSDT -> MADT, listing enabled local APICs.
//! Tables are read through a caller-given physical-memory reader, and every length is checked
//! against what can be read, so a damaged table ends the walk instead of faulting.

/// `IA-PC` processor local APIC entry type in the MADT.
const MADT_LOCAL_APIC: u8 = 0;
/// Local APIC flags: enabled, or can be brought online.
const LAPIC_ENABLED: u32 = 1;
const LAPIC_ONLINE_CAPABLE: u32 = 2;
/// Size of the common table header.
const HEADER_LEN: usize = 36;
/// Offset of the first MADT entry.
const MADT_ENTRIES: usize = 44;
/// Largest table read.
const MAX_TABLE: usize = 64 * 1024;

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Calls `found(apic_id)` for every enabled CPU in the MADT reached from the RSDP at `rsdp`.
/// `read(phys, buf)` fills `buf` from physical memory. Returns how many were found.
pub fn for_each_cpu(rsdp: u64, read: &dyn Fn(u64, &mut [u8]), found: &mut dyn FnMut(u32)) -> usize {
    let mut r = [0u8; 36];
    read(rsdp, &mut r);
    if &r[..8] != b"RSD PTR " {
        return 0;
    }
    let (table, entry_size) = if r[15] >= 2 && u64_at(&r, 24) != 0 { (u64_at(&r, 24), 8) } else { (u64::from(u32_at(&r, 16)), 4) };
    let mut header = [0u8; HEADER_LEN];
    read(table, &mut header);
    let len = (u32_at(&header, 4) as usize).min(MAX_TABLE);
    if len < HEADER_LEN {
        return 0;
    }
    let mut count = 0;
    let mut entries = [0u8; 8];
    for i in 0..(len - HEADER_LEN) / entry_size {
        read(table + (HEADER_LEN + i * entry_size) as u64, &mut entries[..entry_size]);
        let addr = if entry_size == 8 { u64_at(&entries, 0) } else { u64::from(u32_at(&entries, 0)) };
        read(addr, &mut header);
        if &header[..4] != b"APIC" {
            continue;
        }
        let madt_len = (u32_at(&header, 4) as usize).min(MAX_TABLE);
        let mut at = MADT_ENTRIES;
        let mut entry = [0u8; 8];
        while at + 2 <= madt_len {
            read(addr + at as u64, &mut entry[..2]);
            let (kind, elen) = (entry[0], entry[1] as usize);
            if elen < 2 || at + elen > madt_len {
                break;
            }
            if kind == MADT_LOCAL_APIC && elen >= 8 {
                read(addr + at as u64, &mut entry);
                let flags = u32_at(&entry, 4);
                if flags & (LAPIC_ENABLED | LAPIC_ONLINE_CAPABLE) != 0 {
                    found(u32::from(entry[3]));
                    count += 1;
                }
            }
            at += elen;
        }
        break;
    }
    count
}
