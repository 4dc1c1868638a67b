//! Names of the files in a database directory.
//!
//! ```text
//! LOCK              held (fs2 exclusive lock) while a handle has the database open
//! CURRENT           the name of the live manifest, followed by a newline
//! MANIFEST-000005   log of version edits
//! 000007.log        write-ahead log
//! 000009.sst        table
//! 000011.blob       blob file: large values a table references
//! CURRENT.tmp       the next CURRENT, renamed into place when complete
//! ```

use std::path::{Path, PathBuf};

use crate::fs::FileSystem;
use crate::Result;

/// What a file in the database directory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A write-ahead log segment.
    Wal(u64),
    /// A table.
    Table(u64),
    /// A blob file.
    Blob(u64),
    /// A manifest.
    Manifest(u64),
    /// The CURRENT pointer.
    Current,
    /// The LOCK file.
    Lock,
    /// A temporary file.
    Temp,
}

/// Path of WAL segment `n`.
pub fn wal_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.log"))
}

/// Path of table `n`.
pub fn table_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.sst"))
}

/// Path of blob file `n`.
pub fn blob_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.blob"))
}

/// Path of manifest `n`.
pub fn manifest_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("MANIFEST-{n:06}"))
}

/// Path of CURRENT.
pub fn current_path(dir: &Path) -> PathBuf {
    dir.join("CURRENT")
}

/// Path of LOCK.
pub fn lock_path(dir: &Path) -> PathBuf {
    dir.join("LOCK")
}

/// Classifies a file name; `None` for files bloomkv did not make.
pub fn parse(name: &str) -> Option<FileKind> {
    if name == "CURRENT" {
        return Some(FileKind::Current);
    }
    if name == "LOCK" {
        return Some(FileKind::Lock);
    }
    // Only the temporary file bloomkv makes: recovery deletes temporary files, so a user's
    // `notes.tmp` beside the database must not count as one.
    if name == "CURRENT.tmp" {
        return Some(FileKind::Temp);
    }
    if let Some(n) = name.strip_prefix("MANIFEST-") {
        return n.parse().ok().map(FileKind::Manifest);
    }
    if let Some(n) = name.strip_suffix(".log") {
        return n.parse().ok().map(FileKind::Wal);
    }
    if let Some(n) = name.strip_suffix(".sst") {
        return n.parse().ok().map(FileKind::Table);
    }
    if let Some(n) = name.strip_suffix(".blob") {
        return n.parse().ok().map(FileKind::Blob);
    }
    None
}

/// The files in `dir` that bloomkv made, with their kinds, sorted by name.
pub fn list(fs: &dyn FileSystem, dir: &Path) -> Result<Vec<(String, FileKind)>> {
    let mut names = fs.list(dir)?;
    names.sort();
    Ok(names.into_iter().filter_map(|n| parse(&n).map(|k| (n, k))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let d = Path::new("/db");
        for (p, k) in [
            (wal_path(d, 7), FileKind::Wal(7)),
            (table_path(d, 1234567), FileKind::Table(1234567)),
            (blob_path(d, 12), FileKind::Blob(12)),
            (manifest_path(d, 3), FileKind::Manifest(3)),
            (current_path(d), FileKind::Current),
            (lock_path(d), FileKind::Lock),
        ] {
            assert_eq!(parse(p.file_name().unwrap().to_str().unwrap()), Some(k));
        }
        assert_eq!(parse("notes.txt"), None);
        assert_eq!(parse("x.log"), None);
        assert_eq!(parse("CURRENT.tmp"), Some(FileKind::Temp));
        assert_eq!(parse("notes.tmp"), None);
    }
}
