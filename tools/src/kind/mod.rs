//! What the tool does with each kind of file, one module per kind: a table, a WAL segment, a
//! manifest, a database directory. Each module holds that kind's `inspect`, `dump` and
//! `verify`; the command files only parse their options, tell which kind a path is
//! ([`classify`]) and call the kind's function.
//!
//! The commands that work only on a database and take a key (`trace`, `get`, `scan`, `put`,
//! `delete`) stay in their own files: they never dispatch on a kind.

pub mod blob;
pub mod database;
pub mod manifest;
pub mod table;
pub mod wal;

use std::path::Path;

use bloomkv::fs::{FileSystem, StdFs};
use bloomkv::{Error, Result};
use bloomkv_tree::filename::{self, FileKind};
use bloomkv_tree::table::format::{FOOTER_LEN, TABLE_MAGIC};

/// What a path on the command line names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A database directory.
    Db,
    /// A table file.
    Table,
    /// A write-ahead-log segment.
    Wal,
    /// A manifest.
    Manifest,
    /// A blob file.
    Blob,
}

impl Target {
    /// The kind's name in reports (`verify`'s `target`, `dump`'s `source`).
    pub fn name(self) -> &'static str {
        match self {
            Target::Table => "table",
            Target::Wal => "wal",
            Target::Manifest => "manifest",
            Target::Blob => "blob",
            Target::Db => "db",
        }
    }
}

/// Decides what `path` is: a directory is a database; a file is classified by its name
/// (`*.sst`, `*.log`, `MANIFEST-*`), or else by the table magic at its end.
pub fn classify(path: &Path) -> Result<Target> {
    let meta =
        std::fs::metadata(path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    if meta.is_dir() {
        return Ok(Target::Db);
    }
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    match filename::parse(name) {
        Some(FileKind::Table(_)) => return Ok(Target::Table),
        Some(FileKind::Wal(_)) => return Ok(Target::Wal),
        Some(FileKind::Manifest(_)) => return Ok(Target::Manifest),
        Some(FileKind::Blob(_)) => return Ok(Target::Blob),
        _ => {}
    }
    if name.ends_with(".sst") {
        return Ok(Target::Table);
    }
    if name.ends_with(".log") {
        return Ok(Target::Wal);
    }
    if name.starts_with("MANIFEST") {
        return Ok(Target::Manifest);
    }
    if name.ends_with(".blob") {
        return Ok(Target::Blob);
    }
    if has_table_magic(path) {
        return Ok(Target::Table);
    }
    Err(Error::InvalidArgument(format!(
        "cannot tell what {} is: expected a database directory, a table (*.sst or ending in the \
         table magic), a WAL segment (*.log), a manifest (MANIFEST-*) or a blob file (*.blob)",
        path.display()
    )))
}

fn has_table_magic(path: &Path) -> bool {
    let Ok(file) = StdFs.open(path) else { return false };
    let Some(at) = file.size().checked_sub(8) else { return false };
    let mut buf = [0u8; 8];
    file.read_exact_at(&mut buf, at).is_ok()
        && u64::from_le_bytes(buf) == TABLE_MAGIC
        && file.size() >= FOOTER_LEN as u64
}
