//! Open table and blob files, bounded in number: the engine's `max_open_files`.
//!
//! A table's filter and index stay in RAM for as long as it is live (that is what makes a
//! lookup's table choice and filter probe free of I/O), but its file descriptor need not: a
//! tree of thousands of tables would otherwise need thousands of descriptors, past the common
//! soft limit of 1,024. So a table reads its data blocks through this cache, which keeps at
//! most `capacity` files open and reopens an evicted one on its next block read (LevelDB's
//! table cache, minus the metadata, which here never leaves memory).
//!
//! An evicted file is closed when the last read holding it finishes (the cache hands out
//! `Arc`s). Entries are keyed by the file's process-wide id ([`next_file_id`]), as the block
//! cache keys its blocks.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use quick_cache::sync::Cache;

use crate::fs::{FileSystem, RandomAccessFile};
use crate::Result;

static NEXT_FILE_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh id for a table or blob file opened in this process: ids, not file numbers, key the
/// caches, so two databases sharing them never read each other's files or blocks.
pub fn next_file_id() -> u64 {
    NEXT_FILE_ID.fetch_add(1, Ordering::Relaxed)
}

/// Open table files, at most `capacity` of them.
pub struct FileCache {
    fs: Arc<dyn FileSystem>,
    files: Cache<u64, Arc<dyn RandomAccessFile>>,
    capacity: usize,
    reopened: AtomicU64,
}

impl std::fmt::Debug for FileCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileCache")
            .field("capacity", &self.capacity)
            .field("open", &self.files.len())
            .finish()
    }
}

impl FileCache {
    /// A cache keeping at most `capacity` (at least 1) files of `fs` open.
    pub fn new(fs: Arc<dyn FileSystem>, capacity: usize) -> Self {
        let capacity = capacity.max(1);
        FileCache { fs, files: Cache::new(capacity), capacity, reopened: AtomicU64::new(0) }
    }

    /// Hands the cache a file just opened for table `id` (its metadata read), so that the
    /// first block reads do not reopen it.
    pub fn insert(&self, id: u64, file: Arc<dyn RandomAccessFile>) {
        self.files.insert(id, file);
    }

    /// Table `id`'s file, reopened from `path` if it was evicted.
    pub fn get(&self, id: u64, path: &Path) -> Result<Arc<dyn RandomAccessFile>> {
        self.files.get_or_insert_with(&id, || {
            self.reopened.fetch_add(1, Ordering::Relaxed);
            self.fs.open(path)
        })
    }

    /// Forgets table `id` (it is no longer live): its file closes once no read holds it.
    pub fn remove(&self, id: u64) {
        self.files.remove(&id);
    }

    /// The most files it keeps open.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Files held open now.
    pub fn open_files(&self) -> usize {
        self.files.len()
    }

    /// Times a table file was reopened after being evicted.
    pub fn reopened(&self) -> u64 {
        self.reopened.load(Ordering::Relaxed)
    }
}
