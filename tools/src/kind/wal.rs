//! Everything the tool does with one write-ahead-log segment (`*.log`): `dump` — every
//! operation of every record in log order, with its sequence number, its keyspace id and the
//! record's file offset; `inspect` — what its records hold and, for a segment the database
//! kept as a blob file, what the manifest records of it; `verify`.

use std::io::Write;
use std::path::Path;

use bloomkv::batch::BatchOp;
use bloomkv::check;
use bloomkv::fs::{FileSystem, StdFs};
use bloomkv::WriteBatch;
use bloomkv_tree::blob::BlobFileKind;
use bloomkv_tree::filename::{self, FileKind};
use bloomkv_tree::key::ValueKind;
use bloomkv_tree::log::LogReader;
use bloomkv_tree::version::manifest::read_manifest;
use serde::Serialize;

use super::sink::{DumpError, Sink};
use crate::common;

/// What `inspect` prints for a WAL segment; field names are part of the tool's interface
/// (see docs/tool.md).
#[derive(Serialize)]
pub struct InspectReport {
    file: String,
    file_size: u64,
    /// Where its records end: a segment may be followed by zeros it reserved.
    records_end: u64,
    records: u64,
    ops: u64,
    puts: u64,
    /// The puts' values' bytes, and the largest.
    put_value_bytes: u64,
    largest_value_bytes: u64,
    /// The database in the segment's directory keeps it as a blob file (its tables reference
    /// values where they lie in it): what its manifest records of it. `None` otherwise.
    kept: Option<Kept>,
}

/// A WAL segment kept as a blob file, as the manifest records it.
#[derive(Serialize)]
struct Kept {
    /// The values tables referenced when it was kept.
    values: u64,
    /// Its size as recorded: the end of its records.
    file_size: u64,
}

/// `inspect`: reads the whole segment, checking every record on the way.
pub fn inspect(path: &Path) -> bloomkv::Result<InspectReport> {
    let data = StdFs.read_all(path)?;
    let file_size = data.len() as u64;
    let mut reader = LogReader::new(path.to_path_buf(), data);
    let (mut records, mut ops, mut puts, mut bytes, mut largest) = (0u64, 0u64, 0u64, 0u64, 0u64);
    while let Some(record) = reader.next_record()? {
        let offset = reader.last_record_offset();
        let batch = WriteBatch::decode(record).map_err(|e| e.in_file(path, offset))?;
        records += 1;
        for (_, op) in batch.iter() {
            ops += 1;
            if let BatchOp::Put { value, .. }
            | BatchOp::PutExpiring { stored: value, .. }
            | BatchOp::PutTtl { stored: value, .. } = op
            {
                puts += 1;
                bytes += value.len() as u64;
                largest = largest.max(value.len() as u64);
            }
        }
    }
    if reader.dropped_tail_bytes() > 0 {
        let at = reader.last_record_end();
        return Err(bloomkv::Error::corruption(path, at, "the segment ends in a torn record"));
    }
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let kept = match (filename::parse(name), path.parent()) {
        (Some(FileKind::Wal(n)), Some(dir)) => read_manifest(&StdFs, dir)
            .ok()
            .and_then(|m| m.blob_files.get(&n).copied())
            .filter(|b| b.kind == BlobFileKind::WalSegment)
            .map(|b| Kept { values: b.values, file_size: b.file_size }),
        _ => None,
    };
    Ok(InspectReport {
        file: common::display(path),
        file_size,
        records_end: reader.last_record_end(),
        records,
        ops,
        puts,
        put_value_bytes: bytes,
        largest_value_bytes: largest,
        kept,
    })
}

/// `inspect`'s text form.
pub fn print_inspect(out: &mut common::Out, r: &InspectReport) -> std::io::Result<()> {
    writeln!(
        out,
        "WAL segment {}: {} bytes, records end at {}",
        r.file, r.file_size, r.records_end
    )?;
    writeln!(
        out,
        "records  {} ({} ops); puts {} ({} bytes of values, largest {} bytes)",
        r.records, r.ops, r.puts, r.put_value_bytes, r.largest_value_bytes
    )?;
    match &r.kept {
        Some(k) => writeln!(
            out,
            "kept as a blob file: tables referenced {} of its values when it was kept; recorded \
             size {} bytes",
            k.values, k.file_size
        ),
        None => writeln!(out, "not kept as a blob file"),
    }
}

/// `dump`: the segment's selected operations in log order; `file` labels them (database
/// dumps). Returns false if the limit stopped it.
pub fn dump(sink: &mut Sink, path: &Path, file: Option<&str>) -> Result<bool, DumpError> {
    let mut reader = LogReader::new(path.to_path_buf(), StdFs.read_all(path)?);
    while let Some(record) = reader.next_record()? {
        let offset = reader.last_record_offset();
        let batch = WriteBatch::decode(record).map_err(|e| e.in_file(path, offset))?;
        for (seq, (keyspace, op)) in (batch.sequence()..).zip(batch.iter()) {
            if op == BatchOp::Reserved {
                // Keyless: listed unless a range selects keys.
                if sink.range.contains(b"") && !sink.push(sink.reserved_entry(seq, offset, file))? {
                    return Ok(false);
                }
                continue;
            }
            let (key, kind, value) = match op {
                BatchOp::Put { key, value } => (key, Some(ValueKind::Put), value),
                // A put with a time to live is stamped into an expiring put before it is
                // logged; decoding refuses one in a log.
                BatchOp::PutExpiring { key, stored } | BatchOp::PutTtl { key, stored } => {
                    (key, Some(ValueKind::PutExpiring), stored)
                }
                BatchOp::Merge { key, operand } => (key, Some(ValueKind::Merge), operand),
                BatchOp::MergeExpiring { key, stored } => {
                    (key, Some(ValueKind::MergeExpiring), stored)
                }
                BatchOp::Delete { key } => (key, Some(ValueKind::Delete), &[][..]),
                // Listed as a table lists a separated value: its reference.
                BatchOp::BlobPut { key, reference } => (key, Some(ValueKind::BlobPut), reference),
                BatchOp::DeleteRange { start, end } => (start, None, end),
                BatchOp::Reserved => continue,
            };
            // A range delete is listed if it covers a selected key, as in a table dump.
            let selected = match kind {
                Some(_) => sink.range.contains(key),
                None => sink.range.overlaps(key, value),
            };
            if !selected {
                continue;
            }
            let mut e = match kind {
                Some(kind) => sink.entry(key, Some(seq), Some(kind), value),
                None => sink.range_delete_entry(key, value, seq),
            };
            e.keyspace = Some(keyspace);
            e.file = file.map(str::to_string);
            e.offset = Some(offset);
            if !sink.push(e)? {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// `verify`: the library's check of one WAL segment.
pub fn verify(path: &Path) -> check::Report {
    check::wal_file(&StdFs, path)
}
