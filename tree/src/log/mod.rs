//! The record log shared by the write-ahead log and the manifest, in LevelDB's format.
//!
//! # Format
//!
//! A log file is a sequence of 32 KiB pages ([`PAGE_SIZE`]); only the last page may be
//! shorter. (LevelDB calls them blocks; in bloomkv "block" means only a table's block, and a
//! filter's 64-byte unit is a "line".) A page holds fragments back to back, each a 7-byte header ([`HEADER_SIZE`])
//! followed by its payload:
//!
//! ```text
//! offset 0..4   crc     u32 little-endian: CRC32 (IEEE) of the type byte followed by the payload
//! offset 4..6   length  u16 little-endian: payload length in bytes
//! offset 6      type    u8: 1 FULL, 2 FIRST, 3 MIDDLE, 4 LAST
//! offset 7..    payload `length` bytes
//! ```
//!
//! A fragment never crosses a page boundary. When fewer than 7 bytes remain in a page the
//! writer fills them with zeros and starts the next fragment at the next page; a reader
//! skips such a tail. A record that fits in what is left of the page is one FULL fragment
//! (an empty record is a FULL fragment with length 0); a longer one is a FIRST fragment,
//! zero or more MIDDLE fragments and a LAST fragment, each filling the rest of its page
//! except the LAST.
//!
//! The CRC covers the type byte so that a fragment whose payload is intact but whose type
//! byte was damaged (turning, say, a LAST into a FULL) is caught; it does not cover the
//! length, which is checked by the payload CRC indirectly: a damaged length selects
//! different payload bytes and the CRC fails. Type 0 is never written: it is what a
//! zero-filled (preallocated or half-written) region decodes as.
//!
//! Why pages: a reader that meets damage can resynchronise at the next page boundary,
//! because every page starts with a fragment header. The reader uses that to tell a torn
//! tail from damage in the middle of a file; see [`LogReader`] for the exact rule.

mod reader;
mod writer;

pub use reader::LogReader;
pub use writer::LogWriter;

/// Size of a log page; fragments never cross a multiple of this offset.
pub const PAGE_SIZE: usize = 32 * 1024;

/// Size of a fragment header: crc (4) + length (2) + type (1).
pub const HEADER_SIZE: usize = 7;

/// Fragment types as stored in the header's type byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FragmentType {
    Full = 1,
    First = 2,
    Middle = 3,
    Last = 4,
}

impl FragmentType {
    fn from_u8(b: u8) -> Option<FragmentType> {
        match b {
            1 => Some(FragmentType::Full),
            2 => Some(FragmentType::First),
            3 => Some(FragmentType::Middle),
            4 => Some(FragmentType::Last),
            _ => None,
        }
    }
}

/// The CRC stored in a fragment header.
pub(crate) fn fragment_crc(kind: u8, payload: &[u8]) -> u32 {
    crate::coding::crc32(&[&[kind], payload])
}

#[cfg(test)]
mod tests;
