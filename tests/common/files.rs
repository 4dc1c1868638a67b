//! The files of a database directory, by kind: listings of a real directory, and path
//! predicates for `Fault::matching` on `FaultFs`.

use std::path::{Path, PathBuf};

/// The files of `dir` with extension `ext`, sorted (by number, for the engine's files).
pub fn files_ending(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    v.sort();
    v
}

/// The tables in `dir`, oldest first.
pub fn table_files(dir: &Path) -> Vec<PathBuf> {
    files_ending(dir, "sst")
}

/// The WAL segments in `dir`, oldest first.
pub fn wal_files(dir: &Path) -> Vec<PathBuf> {
    files_ending(dir, "log")
}

/// Every record of the log (WAL or manifest) at `path` whose bytes are `data`, in order.
pub fn log_records(path: &Path, data: Vec<u8>) -> Vec<Vec<u8>> {
    let mut reader = bloomkv_tree::log::LogReader::new(path.to_path_buf(), data);
    let mut records = Vec::new();
    while let Some(r) = reader.next_record().unwrap() {
        records.push(r);
    }
    records
}

pub fn is_table(p: &Path) -> bool {
    p.to_string_lossy().ends_with(".sst")
}

pub fn is_wal(p: &Path) -> bool {
    p.to_string_lossy().ends_with(".log")
}

pub fn is_manifest(p: &Path) -> bool {
    p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("MANIFEST"))
}
