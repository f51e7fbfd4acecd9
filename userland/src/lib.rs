//! Tsumugi user programs live in `src/bin/`; this library holds what they share.
#![no_std]

/// Start of the kernel image in the single address space: a kernel address user code must never
/// reach (the isolation tests aim at it).
pub const KERNEL_ADDRESS: usize = 0xffff_ffff_8000_0000;

/// The two halves of the pointer-sharing test.
pub mod share {
    /// Where the reader publishes its thread id.
    pub const READER_KEY: usize = 0x5348_0001;
    /// Where the writer publishes the buffer's address.
    pub const BUFFER_KEY: usize = 0x5348_0002;
    /// Bytes shared.
    pub const BUFFER_LEN: usize = 3 * 4096;

    /// The byte the writer puts at offset `i`.
    pub fn pattern(i: usize) -> u8 {
        (i.wrapping_mul(31) ^ (i >> 8)) as u8
    }
}

#[cfg(target_os = "none")]
pub mod kn;
