//! Reading blob files: one value by its reference (a positional read), or every record of a
//! whole file (the tool's inspect, dump and verify).

use std::path::{Path, PathBuf};

use super::{
    payload_position, physical_span, strip_headers, BlobRef, FORMAT_VERSION, HEADER_LEN,
    KIND_SEPARATED, MAGIC, RECORD_VALUE,
};
use crate::coding::{crc32, Decoder};
use crate::fs::RandomAccessFile;
use crate::log::LogReader;
use crate::{Error, Result};

/// Reads the value `r` names from `file` (named `path` in errors), `file_size` bytes long:
/// one positional read of its span, the page boundaries' fragment headers stripped in place,
/// the CRC checked. A reference that does not fit in the file, or whose bytes do not match its CRC,
/// is [`Error::Corruption`] naming the file and the reference's offset; nothing is allocated
/// before the span is known to lie inside the file.
pub fn read_value(
    file: &dyn RandomAccessFile,
    path: &Path,
    file_size: u64,
    r: &BlobRef,
) -> Result<Vec<u8>> {
    let bad = |reason: String| Error::corruption(path, r.offset, reason);
    let (start, len) = physical_span(r.offset, r.len)
        .ok_or_else(|| bad(format!("blob reference of {} bytes cannot start here", r.len)))?;
    if start.checked_add(len).map_or(true, |end| end > file_size) {
        return Err(bad(format!(
            "blob reference of {} bytes runs past the end of the file ({file_size} bytes)",
            r.len
        )));
    }
    // One buffer throughout: the value is read into it and its page headers stripped in
    // place, so a large value costs one allocation and no copy beyond the read's.
    let mut value = vec![0; len as usize];
    file.read_exact_at(&mut value, start)?;
    strip_headers(start, &mut value)
        .ok_or_else(|| bad("blob reference does not cover one value's fragments".into()))?;
    if crc32(&[&value]) != r.crc {
        return Err(bad(format!("blob value of {} bytes fails its checksum", r.len)));
    }
    Ok(value)
}

/// Checks a header record's payload: magic, format version, kind and the file number
/// `number` the file's name gives (`None`: not known). Returns the number it records.
pub fn read_header(payload: &[u8], number: Option<u64>) -> std::result::Result<u64, String> {
    if payload.len() != HEADER_LEN || payload[..8] != MAGIC {
        return Err("not a blob file (bad header record)".into());
    }
    let mut d = Decoder::new(&payload[8..]);
    let version = d.bytes(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    if version != Some(FORMAT_VERSION) {
        return Err(format!("unsupported blob format version {}", version.unwrap_or(0)));
    }
    let kind = d.u8().unwrap_or(0);
    if kind != KIND_SEPARATED {
        return Err(format!("unknown blob file kind {kind}"));
    }
    let recorded = d.u64().unwrap_or(0);
    if number.is_some_and(|n| n != recorded) {
        return Err(format!("header records file number {recorded}"));
    }
    Ok(recorded)
}

/// One value record of a blob file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobRecord {
    /// The reference that reads this value.
    pub reference: BlobRef,
    /// The user key it was written under.
    pub key: Vec<u8>,
    /// The value.
    pub value: Vec<u8>,
}

/// Every value record of a whole blob file held in memory, in order, after its header was
/// checked. Damage is [`Error::Corruption`]; a torn tail ends the records early and is
/// reported by [`BlobRecords::dropped_tail_bytes`] (a finished blob file has none: the
/// manifest names it only after it was synced whole).
#[derive(Debug)]
pub struct BlobRecords {
    log: LogReader,
    path: PathBuf,
    number: u64,
}

impl BlobRecords {
    /// Reads the file `path` whose whole contents are `data`; `number` is the number its
    /// name gives, if known.
    pub fn new(path: &Path, data: Vec<u8>, number: Option<u64>) -> Result<BlobRecords> {
        let mut log = LogReader::new(path.to_path_buf(), data);
        let header = log
            .next_record()?
            .ok_or_else(|| Error::corruption(path, 0, "blob file without a header record"))?;
        let number = read_header(&header, number).map_err(|e| Error::corruption(path, 0, e))?;
        Ok(BlobRecords { log, path: path.to_path_buf(), number })
    }

    /// The file number its header records.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// The next value record, or `None` at the end.
    pub fn next_record(&mut self) -> Result<Option<BlobRecord>> {
        let Some(payload) = self.log.next_record()? else { return Ok(None) };
        let start = self.log.last_record_offset();
        let bad = |reason: &str| Error::corruption(&self.path, start, reason);
        let mut d = Decoder::new(&payload);
        if d.u8() != Some(RECORD_VALUE) {
            return Err(bad("unknown blob record kind"));
        }
        let key = d.length_prefixed().ok_or_else(|| bad("truncated blob record key"))?.to_vec();
        let at = payload.len() - d.remaining();
        let value = payload[at..].to_vec();
        let reference = BlobRef {
            file: self.number,
            offset: payload_position(start, at as u64),
            len: value.len() as u64,
            crc: crc32(&[&value]),
        };
        Ok(Some(BlobRecord { reference, key, value }))
    }

    /// Bytes at the end ignored as a torn tail (see [`LogReader::dropped_tail_bytes`]).
    pub fn dropped_tail_bytes(&self) -> u64 {
        self.log.dropped_tail_bytes()
    }
}
