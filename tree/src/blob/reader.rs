//! Reading blob files: one value by its reference (a positional read), or every record of a
//! whole file (the tool's inspect, dump and verify).

use std::path::{Path, PathBuf};

use super::{
    advance, payload_position, physical_span, strip_headers, BlobRef, FORMAT_VERSION, HEADER_LEN,
    KIND_SEPARATED, MAGIC, RECORD_VALUE,
};
use crate::coding::{crc32, Decoder};
use crate::fs::RandomAccessFile;
use crate::log::{fragment_crc, LogReader, HEADER_SIZE, PAGE_SIZE};
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

/// Reads bytes `from..from + n` of the value `r` names (`from + n` at most its length) from
/// `file` (named `path` in errors), `file_size` bytes long, without reading the rest of it:
/// the value's own CRC covers all of it, so what is checked instead is each log fragment the
/// bytes lie in (its header holds the CRC of its payload: `docs/format/log.md`). So the read covers the
/// whole pages those bytes lie in (at most a page, 32 KiB, more than asked at each end), and
/// damage elsewhere in the value does not fail it. Each page is walked from its first header
/// to the fragment holding the wanted bytes; a fragment that fails its CRC, runs past its page
/// or the file, or does not continue the record where the reference says the value lies is
/// [`Error::Corruption`] naming the file and that fragment's offset.
pub fn read_value_part(
    file: &dyn RandomAccessFile,
    path: &Path,
    file_size: u64,
    r: &BlobRef,
    from: u64,
    n: u64,
) -> Result<Vec<u8>> {
    let (page, header) = (PAGE_SIZE as u64, HEADER_SIZE as u64);
    let n = n.min(r.len.saturating_sub(from));
    if n == 0 {
        return Ok(Vec::new());
    }
    let bad_ref = |reason: String| Error::corruption(path, r.offset, reason);
    if physical_span(r.offset, r.len).is_none() {
        return Err(bad_ref(format!("blob reference of {} bytes cannot start here", r.len)));
    }
    let (first, last) = advance(r.offset, from)
        .zip(advance(r.offset, from + n - 1))
        .ok_or_else(|| bad_ref("blob reference overflows".into()))?;
    if last >= file_size {
        return Err(bad_ref(format!(
            "blob reference of {} bytes runs past the end of the file ({file_size} bytes)",
            r.len
        )));
    }
    let start = first - first % page;
    let end = (last - last % page + page).min(file_size);
    let mut pages = vec![0; (end - start) as usize];
    file.read_exact_at(&mut pages, start)?;
    let mut out = Vec::with_capacity(n as usize);
    let mut page_start = start;
    while page_start < end {
        let page_end = (page_start + page).min(end);
        let mut pos = page_start;
        while pos + header <= page_end && pos <= last {
            let h = &pages[(pos - start) as usize..(pos - start + header) as usize];
            let crc = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
            let len = u64::from(u16::from_le_bytes([h[4], h[5]]));
            let kind = h[6];
            let bad = |reason: &str| {
                Error::corruption(
                    path,
                    pos,
                    format!("{reason} (reading the blob value at offset {})", r.offset),
                )
            };
            let data_end = pos + header + len;
            if !(1..=4).contains(&kind) || data_end > page_end {
                return Err(bad("not a log fragment where the blob value lies"));
            }
            let (lo, hi) = (first.max(pos + header), (last + 1).min(data_end));
            if lo < hi {
                // Past the value's first page its bytes are a MIDDLE or LAST fragment's.
                if pos == page_start && page_start > r.offset && !matches!(kind, 3 | 4) {
                    return Err(bad("a blob value's page does not continue its record"));
                }
                let data = &pages[(pos + header - start) as usize..(data_end - start) as usize];
                if fragment_crc(kind, data) != crc {
                    return Err(bad("log fragment fails its checksum"));
                }
                out.extend_from_slice(&pages[(lo - start) as usize..(hi - start) as usize]);
            }
            pos = data_end;
        }
        page_start = page_end;
    }
    if out.len() as u64 != n {
        return Err(bad_ref("blob reference does not cover one value's fragments".into()));
    }
    Ok(out)
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
