//! [`BlobFile`]: a live blob file, shared by the tables that reference it.
//!
//! Tables hold `Arc`s to the blob files they reference, as versions hold their tables, so a
//! snapshot, an iterator or an old version that can reach a table can reach its values. A
//! blob file the manifest dropped (no table of the current version references it) is marked
//! obsolete and removed when the last `Arc` goes, like a table (`fs/deleter.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::{read_value, read_value_part, BlobFileMeta, BlobRef};
use crate::fs::Deleter;
use crate::fs::{next_file_id, FileCache};
use crate::{Error, Result, Value};

/// Where checked values are kept for their next read: the tables' block cache
/// (`table::BlockCache`), handed in so that blob files need not know tables.
pub trait ValueCache: Send + Sync {
    /// The value cached at `offset` of the blob file whose process-wide id is `file_id`: its
    /// bytes were checked against the reference's CRC when they were read from the file.
    fn get_value(&self, file_id: u64, offset: u64) -> Option<bytes::Bytes>;

    /// Keeps a checked value for the next read of it (the cache may decline one too large).
    fn insert_value(&self, file_id: u64, offset: u64, value: bytes::Bytes);
}

/// A live blob file: what the manifest records of it, and reads through the engine's bounded
/// set of open files and its block cache.
///
/// A value read from the file is checked against its reference's CRC before it is returned
/// or cached; a value served from the cache is the one checked then. So damage to the file
/// after a value was cached is found on the first read that misses the cache, as for a
/// table's blocks, and a read never returns bytes that failed their check.
pub struct BlobFile {
    /// What the manifest records about it.
    pub meta: BlobFileMeta,
    path: PathBuf,
    /// Its key in `files` and in `cache` (process-wide: `fs::next_file_id`).
    id: u64,
    files: Arc<FileCache>,
    cache: Option<Arc<dyn ValueCache>>,
    deleter: Arc<Deleter>,
    obsolete: AtomicBool,
    /// The handle whose file this one reads under another record ([`BlobFile::alias`]):
    /// that one removes the file, once it too is obsolete and unreachable.
    origin: Option<Arc<BlobFile>>,
}

impl std::fmt::Debug for BlobFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobFile").field("meta", &self.meta).field("path", &self.path).finish()
    }
}

impl BlobFile {
    /// The blob file `meta` describes at `path`, read through `files` and, if given, `cache`
    /// (which caches its values beside the tables' blocks); removed by `deleter` once
    /// obsolete and unreachable. Opens nothing yet.
    pub fn new(
        meta: BlobFileMeta,
        path: PathBuf,
        files: Arc<FileCache>,
        cache: Option<Arc<dyn ValueCache>>,
        deleter: Arc<Deleter>,
    ) -> Self {
        let id = next_file_id();
        let obsolete = AtomicBool::new(false);
        BlobFile { meta, path, id, files, cache, deleter, obsolete, origin: None }
    }

    /// The file `origin` reads, recorded as `meta` (same number): how a WAL segment that
    /// memtables read their values from while it was written becomes the blob file a
    /// version holds. The file goes once both are obsolete and unreachable: marking this
    /// one marks `origin`, which removes it.
    pub fn alias(meta: BlobFileMeta, origin: Arc<BlobFile>) -> Self {
        debug_assert_eq!(meta.number, origin.meta.number);
        BlobFile {
            meta,
            path: origin.path.clone(),
            id: next_file_id(),
            files: origin.files.clone(),
            cache: origin.cache.clone(),
            deleter: origin.deleter.clone(),
            obsolete: AtomicBool::new(false),
            origin: Some(origin),
        }
    }

    /// The value `r` names (which must name this file): from the cache, or read from the file,
    /// checked, and cached.
    pub fn read(&self, r: &BlobRef) -> Result<Value> {
        self.read_with(r, true)
    }

    /// Like [`BlobFile::read`]; with `fill_cache = false` a value read from the file is not
    /// cached (compactions and garbage collection read each value once, and would otherwise
    /// evict what reads need).
    pub fn read_with(&self, r: &BlobRef, fill_cache: bool) -> Result<Value> {
        if let Some(v) = self.cache.as_ref().and_then(|c| c.get_value(self.id, r.offset)) {
            // The offset alone keys it: a file's references to one offset are one value.
            if v.len() as u64 == r.len {
                return Ok(Value::from_bytes(v));
            }
        }
        let file = self.files.get(self.id, &self.path)?;
        let value =
            bytes::Bytes::from(read_value(file.as_ref(), &self.path, self.meta.file_size, r)?);
        if let (Some(cache), true) = (&self.cache, fill_cache) {
            cache.insert_value(self.id, r.offset, value.clone());
        }
        Ok(Value::from_bytes(value))
    }

    /// Bytes `from..from + n` of the value `r` names, clamped to its end: sliced from the
    /// cached value if it is cached, else read whole (and cached) when all of it is asked
    /// for, else only the pages holding those bytes, checked by their fragments' CRCs
    /// ([`read_value_part`]) and not cached.
    pub fn read_part(&self, r: &BlobRef, from: u64, n: u64) -> Result<Value> {
        let from = from.min(r.len);
        let n = n.min(r.len - from);
        if n == r.len {
            return self.read(r);
        }
        if let Some(v) = self.cache.as_ref().and_then(|c| c.get_value(self.id, r.offset)) {
            if v.len() as u64 == r.len {
                let part = v.slice(from as usize..(from + n) as usize);
                // As every read: a small part is a copy, so it keeps no large value alive.
                return Ok(match n as usize * crate::value::MAX_PIN_RATIO >= v.len() {
                    true => Value::from_bytes(part),
                    false => Value::copy_from_slice(&part),
                });
            }
        }
        if n == 0 {
            return Ok(Value::default());
        }
        let file = self.files.get(self.id, &self.path)?;
        let part = read_value_part(file.as_ref(), &self.path, self.meta.file_size, r, from, n)?;
        Ok(Value::from(part))
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Marks the file for removal once nothing refers to it any more.
    pub fn mark_obsolete(&self) {
        match &self.origin {
            Some(origin) => origin.mark_obsolete(),
            None => self.obsolete.store(true, Ordering::Release),
        }
    }
}

impl Drop for BlobFile {
    fn drop(&mut self) {
        self.files.remove(self.id);
        if self.obsolete.load(Ordering::Acquire) {
            self.deleter.remove(std::mem::take(&mut self.path));
        }
    }
}

/// The blob files a version's tables reference, by number: how a read turns a reference
/// into its value.
#[derive(Debug, Clone, Default)]
pub struct BlobFiles(pub Arc<BTreeMap<u64, Arc<BlobFile>>>);

impl BlobFiles {
    /// The value `r` names. A reference to a file the version does not hold is corruption
    /// (a table's manifest record lists every file it references).
    pub fn read(&self, r: &BlobRef) -> Result<Value> {
        self.read_with(r, true)
    }

    /// Like [`BlobFiles::read`]; see [`BlobFile::read_with`] for `fill_cache`.
    pub fn read_with(&self, r: &BlobRef, fill_cache: bool) -> Result<Value> {
        match self.0.get(&r.file) {
            Some(f) => f.read_with(r, fill_cache),
            None => Err(Error::corruption(
                crate::filename::blob_path(Path::new(""), r.file),
                r.offset,
                "reference to a blob file that is not live",
            )),
        }
    }

    /// Bytes `from..from + n` of the value `r` names: see [`BlobFile::read_part`].
    pub fn read_part(&self, r: &BlobRef, from: u64, n: u64) -> Result<Value> {
        match self.0.get(&r.file) {
            Some(f) => f.read_part(r, from, n),
            None => Err(Error::corruption(
                crate::filename::blob_path(Path::new(""), r.file),
                r.offset,
                "reference to a blob file that is not live",
            )),
        }
    }

    /// The value a stored reference (a `BlobPut`'s stored value) names.
    pub fn read_stored(&self, stored: &[u8]) -> Result<Value> {
        self.read(&BlobRef::decode(stored)?)
    }

    /// Like [`BlobFiles::read_stored`]; see [`BlobFile::read_with`] for `fill_cache`.
    pub fn read_stored_with(&self, stored: &[u8], fill_cache: bool) -> Result<Value> {
        self.read_with(&BlobRef::decode(stored)?, fill_cache)
    }

    /// The live file numbered `number`.
    pub fn get(&self, number: u64) -> Option<&Arc<BlobFile>> {
        self.0.get(&number)
    }

    /// True when the version references no blob file.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
