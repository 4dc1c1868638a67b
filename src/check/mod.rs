//! Offline checks of a database's files, in the spirit of LevelDB's dumpfile and Pebble's
//! level checker: every byte the engine relies on is read through the engine's own readers
//! and decoders, and each problem is reported with its file, offset and what is wrong,
//! rather than the first one being returned as an error.
//!
//! A table is checked part by part (`table.rs`) so that one damaged part does not hide the
//! others, and then opened with [`crate::table::Table::open`] as well, so a check is never
//! laxer than the engine. Logs (`log.rs`) are checked record by record, and a database
//! (`db.rs`) adds the manifest as recovery reads it (which refuses, among much else, sorted
//! levels whose tables overlap), every live table's presence, size and manifest metadata,
//! and the WALs.
//!
//! No input makes a check panic: every decoder it calls returns errors and its own
//! arithmetic is checked. As a last line of defence each file is checked under
//! [`catch_unwind`], so a bug surfaces as an error in the report naming the file, and the
//! other files still get checked.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use crate::fs::FileSystem;
use crate::Error;

mod db;
mod log;
mod table;

/// One finding: where and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The file concerned.
    pub file: PathBuf,
    /// Byte offset in the file where the damaged structure (block, record, footer) starts,
    /// when meaningful.
    pub offset: Option<u64>,
    /// What is wrong (or, for notes, what was seen).
    pub what: String,
}

/// How much was checked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Checked {
    /// Table files.
    pub tables: u64,
    /// Data blocks of those tables.
    pub data_blocks: u64,
    /// Entries of those data blocks.
    pub entries: u64,
    /// Range tombstones of those tables' range-deletion blocks.
    pub range_tombstones: u64,
    /// Range filters of those tables, each asked for every key and tombstone start.
    pub range_filters: u64,
    /// WAL segments.
    pub wal_files: u64,
    /// Records of those segments.
    pub wal_records: u64,
    /// Records of the manifest.
    pub manifest_edits: u64,
    /// Blob files.
    pub blob_files: u64,
    /// Blob references resolved: each read from its blob file and its checksum checked.
    pub blob_refs: u64,
}

impl Checked {
    fn add(&mut self, o: &Checked) {
        self.tables += o.tables;
        self.data_blocks += o.data_blocks;
        self.entries += o.entries;
        self.range_tombstones += o.range_tombstones;
        self.range_filters += o.range_filters;
        self.wal_files += o.wal_files;
        self.wal_records += o.wal_records;
        self.manifest_edits += o.manifest_edits;
        self.blob_files += o.blob_files;
        self.blob_refs += o.blob_refs;
    }
}

/// The outcome of a check, from worst to best.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// At least one problem: bytes that are not what the engine wrote.
    Corrupt,
    /// No problem found, but something could not be checked (an I/O error).
    Error,
    /// Everything was checked and nothing is wrong.
    Ok,
}

/// What a check found.
#[derive(Debug, Default)]
pub struct Report {
    /// Corruption: bytes that are not what the engine wrote.
    pub problems: Vec<Finding>,
    /// I/O and internal errors that prevented a check.
    pub errors: Vec<Finding>,
    /// Facts worth knowing that are not damage (a torn WAL tail, orphan files).
    pub notes: Vec<Finding>,
    /// How much was checked.
    pub checked: Checked,
}

impl Report {
    /// Corrupt if there is any problem, else Error if there is any error, else Ok.
    pub fn status(&self) -> Status {
        if !self.problems.is_empty() {
            Status::Corrupt
        } else if !self.errors.is_empty() {
            Status::Error
        } else {
            Status::Ok
        }
    }

    fn problem(&mut self, file: &Path, offset: Option<u64>, what: impl Into<String>) {
        self.problems.push(Finding { file: file.to_path_buf(), offset, what: what.into() });
    }

    fn note(&mut self, file: &Path, offset: Option<u64>, what: impl Into<String>) {
        self.notes.push(Finding { file: file.to_path_buf(), offset, what: what.into() });
    }

    fn failed(&mut self, file: &Path, what: impl Into<String>) {
        self.errors.push(Finding { file: file.to_path_buf(), offset: None, what: what.into() });
    }

    /// Files a library error: corruption as a problem (at the file and offset it names),
    /// anything else as an error with its chain of causes.
    fn error(&mut self, file: &Path, e: Error) {
        match e {
            Error::Corruption { file: f, offset, reason } => {
                let f = if f.as_os_str().is_empty() { file.to_path_buf() } else { f };
                self.problem(&f, Some(offset), reason);
            }
            other => self.failed(file, chain(&other)),
        }
    }

    fn absorb(&mut self, mut other: Report) {
        self.problems.append(&mut other.problems);
        self.errors.append(&mut other.errors);
        self.notes.append(&mut other.notes);
        self.checked.add(&other.checked);
    }
}

/// Checks one table file.
pub fn table_file(fs: &dyn FileSystem, path: &Path) -> Report {
    let mut r = Report::default();
    guarded(&mut r, path, |r| {
        table::check_path(fs, r, path);
    });
    r
}

/// Checks one WAL segment, as the newest of its database (so a torn tail is a note).
pub fn wal_file(fs: &dyn FileSystem, path: &Path) -> Report {
    let mut r = Report::default();
    guarded(&mut r, path, |r| log::check_wal(fs, r, path, true, false));
    r
}

/// Checks one blob file: its header, and every value record's framing and checksums. A
/// blob file is written whole and synced before a manifest names it, so a torn tail is
/// damage too.
pub fn blob_file(fs: &dyn FileSystem, path: &Path) -> Report {
    let mut r = Report::default();
    guarded(&mut r, path, |r| match fs.read_all(path) {
        Ok(data) => check_blob_data(r, path, data),
        Err(e) => r.error(path, e),
    });
    r
}

/// Checks a blob file whose whole contents are `data`: header and every record.
pub(super) fn check_blob_data(r: &mut Report, path: &Path, data: Vec<u8>) {
    r.checked.blob_files += 1;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let number = match crate::filename::parse(name) {
        Some(crate::filename::FileKind::Blob(n)) => Some(n),
        _ => None,
    };
    let mut records = match crate::blob::BlobRecords::new(path, data, number) {
        Ok(records) => records,
        Err(e) => return r.error(path, e),
    };
    loop {
        match records.next_record() {
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(e) => return r.error(path, e),
        }
    }
    if records.dropped_tail_bytes() > 0 {
        let what = format!("{} bytes at the end are a torn record", records.dropped_tail_bytes());
        r.problem(path, None, what);
    }
}

/// Checks one manifest file.
pub fn manifest_file(fs: &dyn FileSystem, path: &Path) -> Report {
    let mut r = Report::default();
    guarded(&mut r, path, |r| log::check_manifest(fs, r, path));
    r
}

/// Checks the database in `dir`. Only reads: safe beside a process that has it open, whose
/// retiring of tables and WALs meanwhile is noted rather than reported as damage.
///
/// When every file checks out on its own, the engine's recovery gets the last word (as
/// `Table::open` does for a table): it cross-checks what no single file shows, such as a
/// manifest that lost an edit whose WAL segment is gone, and a database it refuses to open
/// is not clean.
pub fn database(fs: std::sync::Arc<dyn FileSystem>, dir: &Path) -> Report {
    let mut r = Report::default();
    db::check(fs.as_ref(), &mut r, dir);
    if r.status() == Status::Ok {
        let opts = crate::Options::new().file_system(fs);
        guarded(&mut r, dir, |r| {
            if let Err(e) = crate::Db::open_read_only(dir, opts) {
                r.error(dir, e);
            }
        });
    }
    r
}

/// Runs one file's checks, turning a panic (a bug in the checker or the library) into an
/// internal error instead of a crash, so the other files still get checked.
fn guarded(r: &mut Report, file: &Path, check: impl FnOnce(&mut Report)) {
    let mut local = Report::default();
    let outcome = catch_unwind(AssertUnwindSafe(|| check(&mut local)));
    r.absorb(local);
    if outcome.is_err() {
        r.failed(
            file,
            "internal error: the checker panicked on this file (a bug; please report it)",
        );
    }
}

pub use crate::key::escape;

/// [`escape`]d and quoted.
pub(super) fn quoted(bytes: &[u8]) -> String {
    format!("\"{}\"", escape(bytes))
}

/// An error and its causes, `outer: inner: ...`: bloomkv's errors leave their cause to
/// `source()` rather than repeating it in the message. (The tool prints errors with it too.)
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

#[cfg(test)]
mod tests;
