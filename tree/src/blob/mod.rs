//! Blob files: large values kept apart from the tables, which hold a small reference to each.
//!
//! The bytes are specified in `docs/format/blob.md`; in short, a blob file is a record log
//! ([`crate::log`]: 32 KiB pages, 7-byte fragment headers) whose first record is a versioned
//! header and whose every later record holds one value:
//!
//! ```text
//! header record: magic "bloomkvb" (8) | format version u32 LE | kind u8 | file number u64 LE
//! value record:  record kind u8 (1) | key length varint | user key | value
//! ```
//!
//! Why the log's framing rather than a format of its own: a write-ahead-log segment is a log
//! of the same framing, so a later step can keep a segment as the blob file its large values
//! already sit in (the value then reaches the disk once), and one reader serves both. A
//! value's bytes inside its record are contiguous in the file except where they cross a page
//! boundary, which is followed by a fragment header: a [`BlobRef`] names the physical offset
//! of the value's first byte and its length, and [`physical_span`] and [`strip_headers`] turn
//! that into one positional read. The reference carries the value's CRC, so a read checks
//! exactly the bytes it returns without reading the rest of the record.

mod file;
mod reader;
mod writer;

pub use file::{BlobFile, BlobFiles, ValueCache};
pub use reader::{read_header, read_value, read_value_part, BlobRecord, BlobRecords};
pub use writer::BlobWriter;

use crate::coding::{put_u32, put_varint, Decoder};
use crate::log::{HEADER_SIZE, PAGE_SIZE};
use crate::{Error, Result};

/// The first 8 bytes of a blob file's header record.
pub const MAGIC: [u8; 8] = *b"bloomkvb";

/// The blob format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// The header's kind of a blob file written by a flush or a compaction. (A write-ahead-log
/// segment kept as a blob file has no blob header: its first record is the segment's.)
pub const KIND_SEPARATED: u8 = 1;

/// The record kind of a value record (the byte before its key length).
pub const RECORD_VALUE: u8 = 1;

/// Length of the header record's payload.
pub const HEADER_LEN: usize = 8 + 4 + 1 + 8;

/// What a blob file is: which file it lives in, and what counts as its garbage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BlobFileKind {
    /// Values a flush, a compaction or an ingest copied into `<number>.blob`.
    #[default]
    Separated,
    /// A write-ahead-log segment, `<number>.log`, kept as the blob file its large values
    /// already sat in, so that they reached the disk once. Everything in it that no table
    /// references is garbage: framing, small values, overwritten values.
    WalSegment,
}

/// What the manifest records about one blob file: what it holds when written, from which
/// (with the tables' references) its live and garbage bytes are derived exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlobFileMeta {
    /// File number; the file is `<number>.blob`, or `<number>.log` for a kept segment.
    pub number: u64,
    /// Bytes the file holds for values: its garbage is this less its live bytes. The values
    /// alone (no keys, headers or framing) for a separated file; the whole file for a kept
    /// segment, where nothing but the live values is worth keeping.
    pub value_bytes: u64,
    /// Values it holds (a kept segment: the values tables referenced when it was kept).
    pub values: u64,
    /// The file's size in bytes (a kept segment: the end of its last record).
    pub file_size: u64,
    /// Separated values, or a kept write-ahead-log segment.
    pub kind: BlobFileKind,
}

impl BlobFileMeta {
    /// The file in database directory `dir`.
    pub fn path(&self, dir: &std::path::Path) -> std::path::PathBuf {
        match self.kind {
            BlobFileKind::Separated => crate::filename::blob_path(dir, self.number),
            BlobFileKind::WalSegment => crate::filename::wal_path(dir, self.number),
        }
    }
}

/// What one table references in one blob file: the manifest records these per table, and a
/// blob file's live bytes are their sum over the current version's tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlobRefs {
    /// The blob file's number.
    pub file: u64,
    /// References to it.
    pub count: u64,
    /// The referenced values' bytes.
    pub bytes: u64,
}

/// Adds one reference to `refs` (kept sorted by file).
pub fn count_ref(refs: &mut Vec<BlobRefs>, r: &BlobRef) {
    match refs.binary_search_by_key(&r.file, |x| x.file) {
        Ok(i) => {
            refs[i].count += 1;
            refs[i].bytes += r.len;
        }
        Err(i) => refs.insert(i, BlobRefs { file: r.file, count: 1, bytes: r.len }),
    }
}

/// Where a value lives in a blob file: what a table stores in place of a separated value.
///
/// Encoded as `file varint | offset varint | length varint | crc u32 LE` (the stored value of
/// a `ValueKind::BlobPut`; a `ValueKind::BlobPutExpiring` stores its expiry first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobRef {
    /// The blob file's number.
    pub file: u64,
    /// The physical offset of the value's first byte in the file.
    pub offset: u64,
    /// The value's length in bytes.
    pub len: u64,
    /// CRC32 of the value's bytes.
    pub crc: u32,
}

impl BlobRef {
    /// Longest encoding.
    pub const MAX_ENCODED_LEN: usize = 3 * 10 + 4;

    /// Appends the encoding to `buf`.
    pub fn encode_to(&self, buf: &mut Vec<u8>) {
        put_varint(buf, self.file);
        put_varint(buf, self.offset);
        put_varint(buf, self.len);
        put_u32(buf, self.crc);
    }

    /// The encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::MAX_ENCODED_LEN);
        self.encode_to(&mut v);
        v
    }

    /// Decodes a reference that must fill `bytes` exactly; [`Error::Corruption`] (offset 0,
    /// no file: the caller knows where the bytes came from) otherwise.
    pub fn decode(bytes: &[u8]) -> Result<BlobRef> {
        let bad = || Error::bad_bytes(0, "malformed blob reference");
        let mut d = Decoder::new(bytes);
        let file = d.varint().ok_or_else(bad)?;
        let offset = d.varint().ok_or_else(bad)?;
        let len = d.varint().ok_or_else(bad)?;
        let crc = d.bytes(4).ok_or_else(bad)?;
        let crc = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
        if !d.is_empty() {
            return Err(bad());
        }
        Ok(BlobRef { file, offset, len, crc })
    }
}

/// The physical position of byte `logical` of the payload of a log record whose first
/// fragment starts at `record_start` (past any page padding: a fragment header fits there).
/// A byte never sits at a page's first position, which holds a fragment header: a payload
/// that fills its page to the end continues after the next page's header.
pub fn payload_position(record_start: u64, logical: u64) -> u64 {
    let (page, header) = (PAGE_SIZE as u64, HEADER_SIZE as u64);
    let mut pos = record_start + header;
    let mut left = logical;
    loop {
        if pos % page == 0 {
            pos += header;
        }
        let room = page - pos % page;
        if left < room {
            return pos + left;
        }
        left -= room;
        pos += room;
    }
}

/// The inverse of [`payload_position`]: which byte of the payload of the record starting at
/// `record_start` sits at physical offset `physical`. `None` for a position that holds no
/// payload byte of a record starting there: before its payload, or in a page's fragment
/// header. (Whether the record reaches that far is the caller's to know.)
pub fn payload_offset(record_start: u64, physical: u64) -> Option<u64> {
    let (page, header) = (PAGE_SIZE as u64, HEADER_SIZE as u64);
    let mut first = record_start.checked_add(header)?;
    // A first fragment with no room for payload: the payload starts after the next header.
    if first % page == 0 {
        first += header;
    }
    if physical < first || physical % page < header {
        return None;
    }
    // Payload bytes before the page `physical` lies in, then those before it in its page.
    let (start_page, at_page) = (first / page, physical / page);
    if at_page == start_page {
        return Some(physical - first);
    }
    let in_first = page - first % page;
    let whole = (at_page - start_page - 1) * (page - header);
    Some(in_first + whole + (physical % page - header))
}

/// The physical position of the payload byte `n` bytes after the one at `physical` (which
/// must hold a payload byte) in the same record: every fragment but a record's last fills its
/// page, so the payload runs on after each page's fragment header. `None` on overflow.
pub fn advance(physical: u64, n: u64) -> Option<u64> {
    let (page, header) = (PAGE_SIZE as u64, HEADER_SIZE as u64);
    let room = page - physical % page;
    if n < room {
        return physical.checked_add(n);
    }
    let rest = n - room;
    let pages = rest / (page - header);
    let at = rest % (page - header);
    (physical - physical % page).checked_add(page.checked_mul(pages + 1)?)?.checked_add(header + at)
}

/// Where a record appended to a log now `len` bytes long starts: at `len`, or at the next
/// page when too little of this one is left for a fragment header (the writer pads it).
pub fn next_record_start(len: u64) -> u64 {
    let (page, header) = (PAGE_SIZE as u64, HEADER_SIZE as u64);
    let left = page - len % page;
    if left < header {
        len + left
    } else {
        len
    }
}

/// The bytes a value of `len` bytes starting at physical `offset` spans in its file, page
/// boundaries' fragment headers included: `(offset, physical length)`. `None` when no value
/// can start there (inside a page's first `HEADER_SIZE` bytes) or the span overflows.
pub fn physical_span(offset: u64, len: u64) -> Option<(u64, u64)> {
    let (page, header) = (PAGE_SIZE as u64, HEADER_SIZE as u64);
    let in_page = offset % page;
    if in_page < header {
        return None;
    }
    let first = len.min(page - in_page);
    let rest = len - first;
    let headers = rest.div_ceil(page - header);
    let physical = len.checked_add(headers.checked_mul(header)?)?;
    offset.checked_add(physical)?;
    Some((offset, physical))
}

/// Turns `span`, the bytes [`physical_span`] gave for a value starting at `offset`, into the
/// value: the fragment headers at page boundaries removed in place, each page's bytes moved
/// down over them (a value inside one page is left as it is), and `span` truncated. `None`
/// if `span` is not such a span or a header in it is not a continuation fragment's (a
/// reference into the wrong place); `span` is then unspecified.
pub fn strip_headers(offset: u64, span: &mut Vec<u8>) -> Option<()> {
    let (page, header) = (PAGE_SIZE, HEADER_SIZE);
    let in_page = (offset % page as u64) as usize;
    if in_page < header {
        return None;
    }
    // `out` bytes of value are in place; the unread rest starts at `read`.
    let mut out = span.len().min(page - in_page);
    let mut read = out;
    while read < span.len() {
        let h = span.get(read..read + header)?;
        // Only MIDDLE (3) and LAST (4) fragments continue a record.
        if !matches!(h[6], 3 | 4) {
            return None;
        }
        read += header;
        let n = (span.len() - read).min(page - header);
        if n == 0 {
            return None;
        }
        span.copy_within(read..read + n, out);
        out += n;
        read += n;
    }
    span.truncate(out);
    Some(())
}

#[cfg(test)]
mod tests;
