//! Checks of the two record logs, WAL segments and manifests: every record passes the log
//! reader's checks and decodes as what the engine would replay from it.

use std::path::Path;

use super::Report;
use crate::fs::FileSystem;
use crate::log::LogReader;
use crate::version::edit::VersionEdit;
use crate::{Error, WriteBatch};

/// Checks a WAL segment: every record intact, a valid write batch, and sequence numbers
/// increasing. A torn tail is a note when `newest` (what a crash mid-append leaves),
/// corruption otherwise (recovery refuses it). `in_db`: the segment was found by listing a
/// database directory, whose owner may retire it (after a flush) between the listing and
/// the read.
pub(super) fn check_wal(
    fs: &dyn FileSystem,
    r: &mut Report,
    path: &Path,
    newest: bool,
    in_db: bool,
) {
    r.checked.wal_files += 1;
    let data = match fs.read_all(path) {
        Ok(d) => d,
        Err(Error::Io { source, .. }) if in_db && source.kind() == std::io::ErrorKind::NotFound => {
            r.note(path, None, "WAL segment was retired by the database's owner while verifying");
            return;
        }
        Err(e) => return r.error(path, e),
    };
    // The length of what was read, not of the file now: a live writer may have appended.
    let len = data.len() as u64;
    let mut reader = LogReader::new(path.to_path_buf(), data);
    let mut prev_seq: Option<(u64, u64)> = None;
    loop {
        match reader.next_record() {
            Ok(Some(record)) => {
                r.checked.wal_records += 1;
                let offset = reader.last_record_offset();
                match WriteBatch::decode(record) {
                    Ok(b) => {
                        let first = b.sequence();
                        if let Some((prev_first, prev_len)) = prev_seq {
                            if first < prev_first.saturating_add(prev_len) {
                                r.problem(
                                    path,
                                    Some(offset),
                                    format!(
                                        "record's sequence number {first} does not follow the \
                                         previous record's {prev_first} (+{prev_len} ops)"
                                    ),
                                );
                            }
                        }
                        prev_seq = Some((first, b.len() as u64));
                    }
                    Err(e) => r.error(path, e.in_file(path, offset)),
                }
            }
            Ok(None) => break,
            Err(e) => {
                // The reader repeats its error from here on; the rest of the file is unread.
                r.error(path, e);
                return;
            }
        }
    }
    let dropped = reader.dropped_tail_bytes();
    if dropped > 0 {
        let at = Some(len.saturating_sub(dropped));
        if newest {
            r.note(
                path,
                at,
                format!(
                    "torn record at the end ({dropped} bytes), as a crash mid-append leaves; \
                     recovery ignores it"
                ),
            );
        } else {
            r.problem(
                path,
                at,
                format!("torn record ({dropped} bytes) in a WAL segment that is not the newest"),
            );
        }
    }
}

/// Checks a manifest file on its own: every record intact and a valid version edit.
pub(super) fn check_manifest(fs: &dyn FileSystem, r: &mut Report, path: &Path) {
    let data = match fs.read_all(path) {
        Ok(d) => d,
        Err(e) => return r.error(path, e),
    };
    let mut reader = LogReader::new(path.to_path_buf(), data);
    let mut edits = 0u64;
    loop {
        match reader.next_record() {
            Ok(Some(record)) => {
                edits += 1;
                if let Err(e) = VersionEdit::decode(&record) {
                    r.error(path, e.in_file(path, reader.last_record_offset()));
                }
            }
            Ok(None) => break,
            Err(e) => {
                r.checked.manifest_edits += edits;
                return r.error(path, e);
            }
        }
    }
    r.checked.manifest_edits += edits;
    if edits == 0 {
        r.problem(path, Some(0), "manifest holds no records");
    }
    let dropped = reader.dropped_tail_bytes();
    if dropped > 0 {
        r.note(
            path,
            None,
            format!("torn record at the end ({dropped} bytes); recovery ignores it"),
        );
    }
}
