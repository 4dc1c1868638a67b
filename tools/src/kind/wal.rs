//! Everything the tool does with one write-ahead-log segment (`*.log`): `dump` — every
//! operation of every record in log order, with its sequence number, its keyspace id and the
//! record's file offset; `verify`. (`inspect` is for tables only.)

use std::path::Path;

use bloomkv::batch::BatchOp;
use bloomkv::check;
use bloomkv::fs::{FileSystem, StdFs};
use bloomkv::WriteBatch;
use bloomkv_tree::key::ValueKind;
use bloomkv_tree::log::LogReader;

use super::sink::{DumpError, Sink};

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
