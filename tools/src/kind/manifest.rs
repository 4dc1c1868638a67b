//! Everything the tool does with one manifest (`MANIFEST-*`): `dump` — every version edit
//! (tables added and deleted, counters); `verify`. (`inspect` is for tables only.)

use std::io::Write;
use std::path::Path;

use bloomkv::check;
use bloomkv::fs::{FileSystem, StdFs};
use bloomkv::key::parse_internal_key;
use bloomkv::log::LogReader;
use bloomkv::version::edit::VersionEdit;
use serde::Serialize;

use crate::dump::{DumpError, Sink};

/// One manifest record as `dump` shows it; field names are part of the tool's interface
/// (see docs/tool.md).
#[derive(Serialize, Debug)]
pub struct Edit {
    offset: u64,
    log_number: Option<u64>,
    next_file_number: Option<u64>,
    last_seq: Option<u64>,
    added: Vec<AddedTable>,
    deleted: Vec<DeletedTable>,
}

#[derive(Serialize, Debug)]
pub struct AddedTable {
    level: usize,
    number: u64,
    file_size: u64,
    smallest_key: String,
    largest_key: String,
    smallest_seq: u64,
    largest_seq: u64,
    entries: u64,
}

#[derive(Serialize, Debug)]
pub struct DeletedTable {
    level: usize,
    number: u64,
}

/// `dump`: every version edit in log order (`--from/--to/--prefix/--limit` do not apply).
pub fn dump(sink: &mut Sink, path: &Path) -> Result<(), DumpError> {
    let mut reader = LogReader::new(path.to_path_buf(), StdFs.read_all(path)?);
    let fmt = sink.fmt;
    let uk = |ik: &[u8]| fmt.show(parse_internal_key(ik).map_or(&[][..], |k| k.user_key));
    while let Some(record) = reader.next_record()? {
        let offset = reader.last_record_offset();
        let edit = VersionEdit::decode(&record).map_err(|e| e.in_file(path, offset))?;
        let e = Edit {
            offset,
            log_number: edit.log_number,
            next_file_number: edit.next_file_number,
            last_seq: edit.last_seq,
            added: edit
                .added
                .iter()
                .map(|(level, t)| AddedTable {
                    level: *level,
                    number: t.number,
                    file_size: t.file_size,
                    smallest_key: uk(&t.smallest),
                    largest_key: uk(&t.largest),
                    smallest_seq: t.smallest_seq,
                    largest_seq: t.largest_seq,
                    entries: t.num_entries,
                })
                .collect(),
            deleted: edit
                .deleted
                .iter()
                .map(|&(level, number)| DeletedTable { level, number })
                .collect(),
        };
        sink.report.count += 1;
        if sink.json {
            sink.report.edits.push(e);
            continue;
        }
        let opt = |o: Option<u64>| o.map_or("-".to_string(), |v| v.to_string());
        writeln!(
            sink.out,
            "edit @ {}: log number {}, next file {}, last seq {}",
            e.offset,
            opt(e.log_number),
            opt(e.next_file_number),
            opt(e.last_seq)
        )?;
        let q = |s: &str| if fmt.hex { s.to_string() } else { format!("\"{s}\"") };
        for t in &e.added {
            writeln!(
                sink.out,
                "  + L{} {:06}.sst {} bytes, keys {} .. {}, seq {} .. {}, {} entries",
                t.level,
                t.number,
                t.file_size,
                q(&t.smallest_key),
                q(&t.largest_key),
                t.smallest_seq,
                t.largest_seq,
                t.entries
            )?;
        }
        for t in &e.deleted {
            writeln!(sink.out, "  - L{} {:06}.sst", t.level, t.number)?;
        }
    }
    Ok(())
}

/// `verify`: the library's check of one manifest.
pub fn verify(path: &Path) -> check::Report {
    check::manifest_file(&StdFs, path)
}
