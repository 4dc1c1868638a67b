//! Everything the tool does with one blob file (`*.blob`): `inspect` — its header and what its
//! values add up to; `dump` — every value record in file order, with its key, its value and
//! the physical offset a reference names it by; `verify`.

use std::io::Write;
use std::path::Path;

use bloomkv::check;
use bloomkv::fs::{FileSystem, StdFs};
use bloomkv_tree::blob::{BlobRecords, FORMAT_VERSION, KIND_SEPARATED};
use bloomkv_tree::filename::{self, FileKind};
use bloomkv_tree::key::ValueKind;
use serde::Serialize;

use super::sink::{DumpError, Sink};
use crate::common;

/// What `inspect` prints for a blob file; field names are part of the tool's interface (see
/// docs/tool.md).
#[derive(Serialize)]
pub struct InspectReport {
    file: String,
    file_size: u64,
    /// The header's format version and kind: reading the file accepts only the ones this
    /// build knows, so these are those.
    format_version: u32,
    kind: u8,
    kind_name: &'static str,
    /// The file number the header records (the one in the file's name).
    number: u64,
    values: u64,
    /// The values' bytes alone.
    value_bytes: u64,
    /// The keys' bytes, kept beside the values for `dump`.
    key_bytes: u64,
    largest_value_bytes: u64,
    /// What is neither value nor key: the header record, record kinds, key lengths and the
    /// log framing (fragment headers, page padding).
    overhead_bytes: u64,
}

/// `inspect`: reads the whole file, checking its header and every record on the way.
pub fn inspect(path: &Path) -> bloomkv::Result<InspectReport> {
    let number = match filename::parse(path.file_name().and_then(|n| n.to_str()).unwrap_or("")) {
        Some(FileKind::Blob(n)) => Some(n),
        _ => None,
    };
    let data = StdFs.read_all(path)?;
    let file_size = data.len() as u64;
    let mut records = BlobRecords::new(path, data, number)?;
    let (mut values, mut value_bytes, mut key_bytes, mut largest) = (0u64, 0u64, 0u64, 0u64);
    while let Some(rec) = records.next_record()? {
        values += 1;
        value_bytes += rec.value.len() as u64;
        key_bytes += rec.key.len() as u64;
        largest = largest.max(rec.value.len() as u64);
    }
    if records.dropped_tail_bytes() > 0 {
        let what = format!("{} bytes at the end are a torn record", records.dropped_tail_bytes());
        return Err(bloomkv::Error::corruption(
            path,
            file_size - records.dropped_tail_bytes(),
            what,
        ));
    }
    Ok(InspectReport {
        file: common::display(path),
        file_size,
        format_version: FORMAT_VERSION,
        kind: KIND_SEPARATED,
        kind_name: "separated",
        number: records.number(),
        values,
        value_bytes,
        key_bytes,
        largest_value_bytes: largest,
        overhead_bytes: file_size.saturating_sub(value_bytes + key_bytes),
    })
}

/// `inspect`'s text form.
pub fn print_inspect(out: &mut common::Out, r: &InspectReport) -> std::io::Result<()> {
    writeln!(out, "blob file {}: {} bytes", r.file, r.file_size)?;
    writeln!(
        out,
        "header   format version {}, kind {} ({}: values a flush, compaction or ingest \
         separated), number {}",
        r.format_version, r.kind, r.kind_name, r.number
    )?;
    writeln!(
        out,
        "values   {} ({} bytes, largest {} bytes); keys {} bytes; header and framing {} bytes",
        r.values, r.value_bytes, r.largest_value_bytes, r.key_bytes, r.overhead_bytes
    )
}

/// `dump`: the file's selected values in file order. Returns false if the limit stopped it.
pub fn dump(sink: &mut Sink, path: &Path) -> Result<bool, DumpError> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let number = match filename::parse(name) {
        Some(FileKind::Blob(n)) => Some(n),
        _ => None,
    };
    let mut records = BlobRecords::new(path, StdFs.read_all(path)?, number)?;
    while let Some(rec) = records.next_record()? {
        if !sink.range.contains(&rec.key) {
            continue;
        }
        let mut e = sink.entry(&rec.key, None, Some(ValueKind::Put), &rec.value);
        e.offset = Some(rec.reference.offset);
        if !sink.push(e)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// `verify`: the library's check of one blob file.
pub fn verify(path: &Path) -> check::Report {
    check::blob_file(&StdFs, path)
}
