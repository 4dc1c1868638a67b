//! The engine's table files: writing one from a sorted stream of entries (a flush, a
//! compaction, recovery, an ingest), or a run of them cut at a target size, and opening one
//! the manifest names. The table format itself is `crate::table`'s; this is where the
//! engine's options, file names and the manifest's record of a table (`TableMeta`) meet it.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::kept_wal::SegmentIndex;
use super::{DbInner, Tree};
use crate::blob::{BlobFile, BlobFileMeta, BlobFiles, BlobRef, BlobWriter};
use crate::filename::{blob_path, table_path};
use crate::fs::{Deleter, FileSystem};
use crate::iter::InternalIterator;
use crate::key::{self, ValueKind, KIND_FOR_SEEK, MAX_SEQNO};
use crate::options::KeyspaceOptions;
use crate::range_del::{last_key_before, successor, TombstoneSplit};
use crate::table::read_pool::ReadPool;
use crate::table::{BlockCache, FileCache, Table, TableBuilder, TableOptions};
use crate::version::edit::{KeyspaceId, TableMeta};
use crate::version::set::{TableFile, Version};
use crate::{Error, Result};
use bloomkv_tree::filter_budget::TableFilters;

impl DbInner {
    /// Opens a table the engine just wrote; `blobs` has the blob files its references may
    /// name (see [`open_table`]).
    pub(crate) fn open_table(&self, meta: TableMeta, blobs: &BlobLookup) -> Result<Arc<TableFile>> {
        open_table(&self.fs, &self.dir, &self.caches, meta, blobs)
    }

    /// The handles of blob files the engine just wrote.
    pub(crate) fn open_blob_files(&self, metas: &[BlobFileMeta]) -> Vec<Arc<BlobFile>> {
        metas.iter().map(|m| blob_file(&self.dir, &self.caches, *m)).collect()
    }

    /// A separator of `tree`'s large values into blob files (off without a threshold).
    pub(crate) fn separator(&self, tree: &Tree) -> Separator {
        Separator::new(
            self.fs.clone(),
            &self.dir,
            self.file_numbers.clone(),
            tree.opts.blob_threshold,
        )
    }

    /// Writes the entries of `iter` and the range tombstones of `range_dels` into table
    /// `number` of `tree`'s keyspace, with the keyspace's options and the filter `filter`
    /// (its policy and range filter as `filter_budget::table_filters` resolves them for the
    /// table's level).
    pub(crate) fn write_table(
        &self,
        tree: &Tree,
        number: u64,
        iter: &mut dyn EntryStream,
        range_dels: &mut TombstoneSplit,
        filter: TableFilters,
        blobs: &mut Separator,
    ) -> Result<Option<TableMeta>> {
        let opts = TableOptions {
            creation_time: Some(self.clock.now() / 1000),
            ..table_options(&tree.opts, filter)
        };
        write_table(self.fs.as_ref(), &self.dir, opts, tree.id, number, iter, range_dels, blobs)
    }

    /// Writes the entries of `iter` into tables of about `target_table_bytes` each (never
    /// splitting one user key's versions), in key order, each with the filter `filter`; the
    /// range tombstones of `range_dels` go to the tables whose key ranges they fall in, cut
    /// at the tables' boundaries. If any table fails, the tables already written are removed
    /// too: nothing refers to them yet, and an ingest that fails must leave no file behind
    /// (a compaction's would only be removed at the next open).
    pub(crate) fn write_tables(
        &self,
        tree: &Tree,
        iter: &mut dyn EntryStream,
        range_dels: &mut TombstoneSplit,
        filter: TableFilters,
        blobs: &mut Separator,
    ) -> Result<Vec<TableMeta>> {
        let mut outputs: Vec<TableMeta> = Vec::new();
        let result = (|| {
            while iter.valid() || !range_dels.is_empty() {
                let number = self.file_numbers.fetch_add(1, Ordering::SeqCst);
                let mut part = SizeLimited::new(iter, tree.opts.target_table_bytes);
                let written =
                    self.write_table(tree, number, &mut part, range_dels, filter, blobs)?;
                if let Some(meta) = written {
                    outputs.push(meta);
                }
            }
            Ok(())
        })();
        match result {
            Ok(()) => Ok(outputs),
            Err(e) => {
                self.remove_tables(&outputs);
                Err(e)
            }
        }
    }

    /// Removes blob files that no version names (outputs of a failed write).
    pub(crate) fn remove_blob_files(&self, metas: &[BlobFileMeta]) {
        for m in metas {
            let _ = self.fs.remove(&blob_path(&self.dir, m.number));
        }
    }

    /// Removes table files that no version names (outputs of a failed write).
    pub(crate) fn remove_tables(&self, metas: &[TableMeta]) {
        for m in metas {
            // A failed removal leaves an orphan, which the next open removes.
            let _ = self.fs.remove(&table_path(&self.dir, m.number));
        }
    }
}

/// What writing a table reads: sorted internal-key entries, forward only. Every
/// [`InternalIterator`] is one; an ingest's source is one without being an `InternalIterator`,
/// which would make it `Send` and seekable for nothing (the caller's iterator need be
/// neither: it is read on the caller's thread, once, front to back).
pub(crate) trait EntryStream {
    /// True while on an entry.
    fn valid(&self) -> bool;
    /// The current entry's internal key. Only called while `valid()`.
    fn key(&self) -> &[u8];
    /// The current entry's value. Only called while `valid()`.
    fn value(&self) -> &[u8];
    /// Advances to the next entry.
    fn next(&mut self) -> Result<()>;
    /// Once `valid()` is false: true if the stream was cut short (more entries follow for
    /// another table), false at its real end.
    fn cut(&self) -> bool {
        false
    }
}

impl<I: InternalIterator + ?Sized> EntryStream for I {
    fn valid(&self) -> bool {
        InternalIterator::valid(self)
    }
    fn key(&self) -> &[u8] {
        InternalIterator::key(self)
    }
    fn value(&self) -> &[u8] {
        InternalIterator::value(self)
    }
    fn next(&mut self) -> Result<()> {
        InternalIterator::next(self)
    }
}

/// Passes entries through until about `budget` bytes have gone by, then stops at the next
/// change of user key, so one key's versions never straddle two tables (a sorted level's
/// tables must not overlap).
struct SizeLimited<'a, I: EntryStream + ?Sized> {
    inner: &'a mut I,
    budget: u64,
    spent: u64,
    last_user_key: Vec<u8>,
}

impl<'a, I: EntryStream + ?Sized> SizeLimited<'a, I> {
    fn new(inner: &'a mut I, budget: u64) -> Self {
        SizeLimited { inner, budget, spent: 0, last_user_key: Vec::new() }
    }
}

impl<I: EntryStream + ?Sized> EntryStream for SizeLimited<'_, I> {
    fn valid(&self) -> bool {
        self.inner.valid()
            && (self.spent < self.budget
                || key::user_key(self.inner.key()) == self.last_user_key.as_slice())
    }
    fn key(&self) -> &[u8] {
        self.inner.key()
    }
    fn value(&self) -> &[u8] {
        self.inner.value()
    }
    fn next(&mut self) -> Result<()> {
        self.spent += (self.inner.key().len() + self.inner.value().len()) as u64;
        // The key is only consulted once the budget is spent: copying it for every entry
        // before that would cost a copy per entry of every flush and compaction.
        if self.spent >= self.budget {
            self.last_user_key.clear();
            self.last_user_key.extend_from_slice(key::user_key(self.inner.key()));
        }
        self.inner.next()
    }
    fn cut(&self) -> bool {
        self.inner.valid()
    }
}

/// What every table of one engine shares: the block cache, the bounded set of open files,
/// and the threads that read blocks for `multi_get`.
#[derive(Debug, Clone)]
pub(crate) struct TableCaches {
    pub blocks: Arc<BlockCache>,
    pub files: Arc<FileCache>,
    pub reads: Arc<ReadPool>,
    /// Map each table's file for its point lookups (`Options::mmap_reads`).
    pub map_reads: bool,
    /// Removes the files of tables no version needs any more.
    pub deleter: Arc<Deleter>,
}

impl Drop for TableCaches {
    fn drop(&mut self) {
        // Ends the deleter's thread (which holds the deleter) if the database never closed.
        self.deleter.close();
    }
}

/// Block reads one `multi_get` keeps in flight at most: about where the measured disk stops
/// gaining from more (see `table::read_pool`), and no more than a batch can need.
const READ_THREADS: usize = 16;

impl TableCaches {
    pub(crate) fn new(opts: &crate::Options) -> Self {
        TableCaches {
            blocks: Arc::new(BlockCache::new(opts.block_cache_bytes)),
            files: Arc::new(FileCache::new(
                opts.fs.clone(),
                open_files_within(opts.max_open_files, descriptor_limit()),
            )),
            reads: Arc::new(ReadPool::new(READ_THREADS)),
            map_reads: opts.mmap_reads,
            deleter: Deleter::new(opts.fs.clone()),
        }
    }
}

/// The fewest table files kept open however low the descriptor limit: below this a scan or
/// `multi_get` across the levels would evict its own files as it goes.
pub(crate) const MIN_OPEN_TABLE_FILES: usize = 16;

/// The table files to keep open: `max_open_files`, but no more than the process's soft
/// descriptor limit `soft_limit` (`None`: unlimited or unknown) leaves once 16 descriptors
/// plus an eighth of the limit are set aside — for the WAL, the manifest, the LOCK,
/// directory fsyncs, tables being written, and the application's own files and sockets —
/// and never fewer than [`MIN_OPEN_TABLE_FILES`] (nor more than asked for). Without the
/// clip, a database with more tables than the limit fails to open with `EMFILE` at the
/// default `max_open_files`, as soon as the limit is below it.
pub(crate) fn open_files_within(max_open_files: usize, soft_limit: Option<u64>) -> usize {
    let Some(limit) = soft_limit else { return max_open_files };
    let room = limit.saturating_sub(16 + limit / 8);
    let room = usize::try_from(room).unwrap_or(usize::MAX);
    max_open_files.min(room.max(MIN_OPEN_TABLE_FILES))
}

/// The process's soft limit on open file descriptors, if it has one.
#[cfg(unix)]
fn descriptor_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// The process's soft limit on open file descriptors: none known off Unix.
#[cfg(not(unix))]
fn descriptor_limit() -> Option<u64> {
    None
}

/// How a keyspace's options build a table (flushes, compactions and recovery alike), with
/// the filter chosen for it: a [`FilterPolicy::Budgeted`] table's depends on where it goes,
/// which the options alone do not know.
pub(crate) fn table_options(opts: &KeyspaceOptions, filter: TableFilters) -> TableOptions {
    TableOptions {
        block_bytes: opts.block_bytes,
        compression: opts.compression,
        filter_policy: filter.point,
        prefix_extractor: opts.prefix_extractor,
        whole_key_filtering: opts.filters_whole_keys(),
        range_filter_bits_per_key: filter.range_bits_per_key,
        ..TableOptions::default()
    }
}

/// Finds the live blob file of a number, for a table being opened.
pub(crate) type BlobLookup<'a> = dyn Fn(u64) -> Option<Arc<BlobFile>> + 'a;

/// A lookup that finds blob files in `version` and then in `new`.
pub(crate) fn blobs_in<'a>(
    versions: impl IntoIterator<Item = &'a Version> + Clone + 'a,
    new: &'a [Arc<BlobFile>],
) -> impl Fn(u64) -> Option<Arc<BlobFile>> + 'a {
    move |n| {
        let found = new.iter().find(|b| b.meta.number == n).cloned();
        found.or_else(|| versions.clone().into_iter().find_map(|v| v.blobs.get(n).cloned()))
    }
}

/// The handle of a live blob file (opened on its first read, through the engine's bounded
/// set of open files).
pub(crate) fn blob_file(dir: &Path, caches: &TableCaches, meta: BlobFileMeta) -> Arc<BlobFile> {
    let path = meta.path(dir);
    Arc::new(BlobFile::new(
        meta,
        path,
        caches.files.clone(),
        Some(caches.blocks.clone() as Arc<dyn bloomkv_tree::blob::ValueCache>),
        caches.deleter.clone(),
    ))
}

/// Opens a table this process just wrote or found in the manifest, checking that the file
/// has the size, key range, sequence numbers and entry count the manifest recorded. Its file
/// joins the engine's bounded set of open files. It holds the blob files its references
/// name, found through `blobs`: one that is not there is corruption.
pub(crate) fn open_table(
    fs: &Arc<dyn FileSystem>,
    dir: &Path,
    caches: &TableCaches,
    meta: TableMeta,
    blobs: &BlobLookup,
) -> Result<Arc<TableFile>> {
    let path = table_path(dir, meta.number);
    let file = fs.open(&path)?;
    if file.size() != meta.file_size {
        return Err(Error::corruption(
            &path,
            file.size(),
            format!("table is {} bytes but the manifest recorded {}", file.size(), meta.file_size),
        ));
    }
    let table = Table::open(file, path.clone(), Some(caches.blocks.clone()))?;
    if let Some(d) = meta.disagreements(table.properties()).first() {
        return Err(Error::corruption(&path, 0, d.clone()));
    }
    let mut table = table.share_file(caches.files.clone());
    if caches.map_reads {
        // A mapping only speeds lookups up: where it cannot be had (a file system without
        // mappings, an exhausted address space or map count), they read as without it.
        if let Ok(Some(mapped)) = fs.map(&path) {
            table = table.map_for_lookups(mapped)?;
        }
    }
    let mut held = Vec::with_capacity(meta.blob_refs.len());
    for r in &meta.blob_refs {
        held.push(blobs(r.file).ok_or_else(|| {
            Error::corruption(
                &path,
                0,
                format!("references blob file {}, which is not live", r.file),
            )
        })?);
    }
    let t = TableFile::new(meta, Arc::new(table), path, caches.deleter.clone());
    Ok(Arc::new(t.with_blobs(held)))
}

/// Where a table writer puts large values: into blob files of its own, numbered from the
/// engine's counter, once a value reaches the keyspace's threshold. Values already
/// separated (references a compaction carries) pass through unchanged, unless they are in a
/// file being collected ([`Separator::relocating`]).
///
/// A flush that keeps its WAL segment as a blob file ([`Separator::in_segment`]) references
/// each value where the segment holds it instead, and copies only those it does not.
pub(crate) struct Separator {
    fs: Arc<dyn FileSystem>,
    dir: std::path::PathBuf,
    numbers: Arc<std::sync::atomic::AtomicU64>,
    threshold: Option<usize>,
    /// The WAL segment kept as a blob file, and the keyspace whose entries these are.
    segment: Option<(Arc<SegmentIndex>, KeyspaceId)>,
    writer: Option<BlobWriter>,
    finished: Vec<BlobFileMeta>,
    /// Garbage collection: references into these files (sorted) are relocated, their values
    /// read through the version's files.
    gc: Option<(Vec<u64>, BlobFiles)>,
    /// The entry written in place of a separated one: internal key, stored value.
    key: Vec<u8>,
    stored: Vec<u8>,
}

/// A blob file is finished and the next one started past this size, so that garbage is
/// collected in pieces of about this much (RocksDB's `blob_file_size` default).
const BLOB_FILE_BYTES: u64 = 256 << 20;

impl Separator {
    pub(crate) fn new(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        numbers: Arc<std::sync::atomic::AtomicU64>,
        threshold: Option<usize>,
    ) -> Separator {
        Separator {
            fs,
            dir: dir.to_path_buf(),
            numbers,
            threshold,
            segment: None,
            writer: None,
            finished: Vec::new(),
            gc: None,
            key: Vec::new(),
            stored: Vec::new(),
        }
    }

    /// This separator, referencing the values WAL segment `segment` holds for `keyspace`
    /// where they lie in it.
    pub(crate) fn in_segment(mut self, segment: Arc<SegmentIndex>, keyspace: KeyspaceId) -> Self {
        self.segment = Some((segment, keyspace));
        self
    }

    /// A separator that keeps every value inline.
    pub(crate) fn off(fs: Arc<dyn FileSystem>) -> Separator {
        let numbers = Arc::new(std::sync::atomic::AtomicU64::new(0));
        Separator::new(fs, Path::new(""), numbers, None)
    }

    /// Relocates, as the entries pass, the values that references name in blob files
    /// `files` (sorted), read through `live` (the version the entries come from): garbage
    /// collection, in a compaction (`KeyspaceOptions::blob_gc_age_cutoff`).
    pub(crate) fn relocating(mut self, files: Vec<u64>, live: BlobFiles) -> Separator {
        self.gc = (!files.is_empty()).then_some((files, live));
        self
    }

    /// The entry to write for `(ikey, value)`: itself, or a reference to the value, once
    /// written to a blob file, when it is a put of at least the threshold. A reference into
    /// a file being collected is a value read from there: written out again as a value is
    /// (into this writer's file, or back inline if now under the threshold).
    fn separate<'a>(&'a mut self, ikey: &'a [u8], value: &'a [u8]) -> Result<(&'a [u8], &'a [u8])> {
        let threshold = match (self.threshold, &self.gc) {
            (Some(t), _) => t,
            // Only relocating: a value read back goes inline.
            (None, Some(_)) => usize::MAX,
            (None, None) => return Ok((ikey, value)),
        };
        let Some(p) = key::parse_internal_key(ikey) else { return Ok((ikey, value)) };
        let relocated: Option<crate::Value>;
        let (expiring, expiry, user_value) = match p.kind {
            ValueKind::Put => (false, 0, value),
            ValueKind::PutExpiring => match key::split_expiring(value) {
                Some((e, v)) => (true, e, v),
                None => return Ok((ikey, value)),
            },
            ValueKind::BlobPut | ValueKind::BlobPutExpiring => {
                let expiring = p.kind == ValueKind::BlobPutExpiring;
                let (expiry, stored) = match expiring {
                    true => key::split_expiring(value).ok_or_else(|| {
                        Error::bad_bytes(0, "expiring blob reference without its expiry")
                    })?,
                    false => (0, value),
                };
                let Some((files, live)) = &self.gc else { return Ok((ikey, value)) };
                let r = BlobRef::decode(stored)?;
                // A value over `MAX_VALUE_BYTES` has a file of its own: nothing to collect.
                if files.binary_search(&r.file).is_err() || r.len > crate::MAX_VALUE_BYTES as u64 {
                    return Ok((ikey, value));
                }
                relocated = Some(live.read_with(&r, false)?);
                (expiring, expiry, relocated.as_deref().unwrap_or_default())
            }
            _ => return Ok((ikey, value)),
        };
        let inline = user_value.len() < threshold;
        if inline && !matches!(p.kind, ValueKind::BlobPut | ValueKind::BlobPutExpiring) {
            return Ok((ikey, value));
        }
        self.stored.clear();
        if expiring {
            self.stored.extend_from_slice(&expiry.to_le_bytes());
        }
        let kind = if inline {
            self.stored.extend_from_slice(user_value);
            if expiring {
                ValueKind::PutExpiring
            } else {
                ValueKind::Put
            }
        } else {
            if self.writer.as_ref().is_some_and(|w| w.len() >= BLOB_FILE_BYTES) {
                self.finish_file()?;
            }
            // A flush keeping its WAL segment references the value where it was logged.
            let found = self.segment.as_ref().and_then(|(s, k)| s.find(*k, p.seq, user_value));
            let r = match found {
                Some(r) => r,
                None => {
                    let writer = match &mut self.writer {
                        Some(w) => w,
                        None => {
                            let number = self.numbers.fetch_add(1, Ordering::SeqCst);
                            let path = blob_path(&self.dir, number);
                            let file = self.fs.create(&path)?;
                            match BlobWriter::new(file, number) {
                                Ok(w) => self.writer.insert(w),
                                Err(e) => {
                                    // Not yet the writer `abandon` removes: a disk too
                                    // full for its header would keep it until the next open.
                                    let _ = self.fs.remove(&path);
                                    return Err(e);
                                }
                            }
                        }
                    };
                    writer.add(p.user_key, user_value)?
                }
            };
            r.encode_to(&mut self.stored);
            if expiring {
                ValueKind::BlobPutExpiring
            } else {
                ValueKind::BlobPut
            }
        };
        self.key.clear();
        key::append_internal_key(&mut self.key, p.user_key, p.seq, kind);
        Ok((&self.key, &self.stored))
    }

    fn finish_file(&mut self) -> Result<()> {
        if let Some(w) = self.writer.take() {
            let number = w.number();
            match w.finish() {
                Ok(meta) => self.finished.push(meta),
                Err(e) => {
                    let _ = self.fs.remove(&blob_path(&self.dir, number));
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Syncs the blob file being written and returns every blob file written, for the
    /// manifest edit that adds the tables referencing them.
    pub(crate) fn finish(mut self) -> Result<Vec<BlobFileMeta>> {
        self.finish_file()?;
        Ok(std::mem::take(&mut self.finished))
    }

    /// Removes every blob file written (the tables referencing them failed).
    pub(crate) fn abandon(mut self) {
        if let Some(w) = self.writer.take() {
            let _ = self.fs.remove(&blob_path(&self.dir, w.number()));
        }
        for m in std::mem::take(&mut self.finished) {
            let _ = self.fs.remove(&blob_path(&self.dir, m.number));
        }
    }
}

/// Writes the entries of `iter` (already filtered and in order) into table `number`, with
/// the range tombstones of `range_dels` below the table's upper bound (all that are left,
/// unless `iter` is cut short: then those below the key after its last entry); `None` if
/// there were neither (no file is left behind).
// Each argument is one thing a table write needs; bundling them would only rename them.
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_table(
    fs: &dyn FileSystem,
    dir: &Path,
    table_options: TableOptions,
    keyspace: KeyspaceId,
    number: u64,
    iter: &mut dyn EntryStream,
    range_dels: &mut TombstoneSplit,
    blobs: &mut Separator,
) -> Result<Option<TableMeta>> {
    let path = table_path(dir, number);
    let written = build_table(fs, &path, table_options, number, iter, range_dels, blobs)
        .map(|m| m.map(|m| TableMeta { keyspace, ..m }));
    if !matches!(written, Ok(Some(_))) {
        // Nothing refers to a table that failed (or had no entries); leave no file behind.
        let _ = fs.remove(&path);
    }
    written
}

fn build_table(
    fs: &dyn FileSystem,
    path: &Path,
    table_options: TableOptions,
    number: u64,
    iter: &mut dyn EntryStream,
    range_dels: &mut TombstoneSplit,
    blobs: &mut Separator,
) -> Result<Option<TableMeta>> {
    let mut builder = TableBuilder::new(fs.create(path)?, table_options);
    let mut smallest: Option<Vec<u8>> = None;
    let (mut smallest_seq, mut largest_seq) = (u64::MAX, 0);
    while iter.valid() {
        let k = iter.key();
        if let Some(p) = key::parse_internal_key(k) {
            smallest_seq = smallest_seq.min(p.seq);
            largest_seq = largest_seq.max(p.seq);
        }
        if smallest.is_none() {
            smallest = Some(k.to_vec());
        }
        let (k, v) = blobs.separate(k, iter.value())?;
        builder.add(k, v)?;
        iter.next()?;
    }
    // The builder keeps the last key it took: no copy of each key here.
    let mut largest = builder.last_key().to_vec();
    // The next table starts at the key after this one's last: tombstones crossing it are
    // cut there, so neighbouring tables' ranges stay disjoint.
    let upper = (iter.cut() && smallest.is_some()).then(|| successor(key::user_key(&largest)));
    let pieces = range_dels.take_below(upper.as_deref());
    if let (Some(first), Some(last)) = (pieces.first(), pieces.last()) {
        let lo = key::internal_key(&first.start, MAX_SEQNO, KIND_FOR_SEEK);
        if smallest.as_ref().map_or(true, |s| key::compare_internal(&lo, s).is_lt()) {
            smallest = Some(lo);
        }
        let hi = key::internal_key(last_key_before(&last.end), 0, ValueKind::Delete);
        if largest.is_empty() || key::compare_internal(&hi, &largest).is_gt() {
            largest = hi;
        }
        for t in &pieces {
            smallest_seq = smallest_seq.min(t.seq);
            largest_seq = largest_seq.max(t.seq);
        }
    }
    for t in pieces {
        builder.add_range_tombstone(t)?;
    }
    let Some(smallest) = smallest else {
        return Ok(None);
    };
    let blob_refs = builder.blob_refs().to_vec();
    let props = builder.finish()?;
    let file_size = fs.open(path)?.size();
    Ok(Some(TableMeta {
        keyspace: crate::version::edit::DEFAULT_KEYSPACE,
        number,
        file_size,
        smallest,
        largest,
        smallest_seq,
        largest_seq,
        num_entries: props.num_entries,
        blob_refs,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_open_files_is_clipped_to_the_descriptor_limit() {
        // No limit (RLIM_INFINITY) or a roomy one: the option stands.
        assert_eq!(open_files_within(512, None), 512);
        assert_eq!(open_files_within(100_000, None), 100_000);
        assert_eq!(open_files_within(512, Some(1 << 20)), 512);
        assert_eq!(open_files_within(512, Some(1024)), 512);
        assert_eq!(open_files_within(4096, Some(1024)), 1024 - 16 - 128);
        // Below it: the limit less 16 and an eighth.
        assert_eq!(open_files_within(512, Some(256)), 256 - 16 - 32);
        assert_eq!(open_files_within(512, Some(64)), 64 - 16 - 8);
        assert_eq!(open_files_within(100_000, Some(4096)), 4096 - 16 - 512);
        // Never below the floor, however low the limit...
        assert_eq!(open_files_within(512, Some(20)), MIN_OPEN_TABLE_FILES);
        assert_eq!(open_files_within(512, Some(0)), MIN_OPEN_TABLE_FILES);
        // ...nor above what was asked for.
        assert_eq!(open_files_within(4, Some(20)), 4);
        assert_eq!(open_files_within(1, Some(64)), 1);
        assert_eq!(open_files_within(1000, Some(u64::MAX)), 1000);
    }
}
