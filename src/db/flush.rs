//! Flush: the oldest immutable memtable becomes an L0 table.
//!
//! 1. Build the table from the memtable (newest version of each key; tombstones are kept,
//!    older data may lie below). The builder fsyncs the file; the directory is fsynced too.
//! 2. Record it in the manifest together with the new log number — the WAL number of the oldest
//!    memtable still unflushed — and fsync the manifest. From here on the table, not the WAL,
//!    holds these writes.
//! 3. Swap in a state without the memtable and with the table, then delete the WAL segments
//!    below the new log number.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{lock_mutex as lock, DbInner, DbState, Mem};
use crate::filename::{table_path, wal_path};
use crate::fs::FileSystem;
use crate::iter::InternalIterator;
use crate::key::{self, ValueKind};
use crate::table::{BlockCache, Table, TableBuilder, TableOptions};
use crate::version::edit::{TableMeta, VersionEdit};
use crate::version::set::TableFile;
use crate::{Error, Result};

impl DbInner {
    pub(crate) fn table_options(&self) -> TableOptions {
        TableOptions {
            block_bytes: self.opts.block_bytes,
            compression: self.opts.compression,
            filter_policy: self.opts.filter_policy,
            ..TableOptions::default()
        }
    }

    pub(crate) fn open_table(&self, meta: TableMeta) -> Result<Arc<TableFile>> {
        open_table(&self.fs, &self.dir, &self.block_cache, meta)
    }

    pub(crate) fn write_table(
        &self,
        number: u64,
        iter: &mut dyn InternalIterator,
    ) -> Result<Option<TableMeta>> {
        write_table(self.fs.as_ref(), &self.dir, self.table_options(), number, iter)
    }
}

/// Opens a table this process just wrote or found in the manifest, checking that the file
/// has the size the manifest recorded.
pub(crate) fn open_table(
    fs: &Arc<dyn FileSystem>,
    dir: &Path,
    cache: &Arc<BlockCache>,
    meta: TableMeta,
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
    let table = Table::open(file, path.clone(), Some(cache.clone()))?;
    Ok(Arc::new(TableFile::new(meta, Arc::new(table), path, fs.clone())))
}

/// Writes the entries of `iter` (already filtered and in order) into table `number`;
/// `None` if there were no entries (no file is left behind).
pub(crate) fn write_table(
    fs: &dyn FileSystem,
    dir: &Path,
    table_options: TableOptions,
    number: u64,
    iter: &mut dyn InternalIterator,
) -> Result<Option<TableMeta>> {
    let path = table_path(dir, number);
    let written = build_table(fs, &path, table_options, number, iter);
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
    iter: &mut dyn InternalIterator,
) -> Result<Option<TableMeta>> {
    let mut builder = TableBuilder::new(fs.create(path)?, table_options);
    let mut smallest: Option<Vec<u8>> = None;
    let mut largest = Vec::new();
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
        largest.clear();
        largest.extend_from_slice(k);
        builder.add(k, iter.value())?;
        iter.next()?;
    }
    let Some(smallest) = smallest else {
        return Ok(None);
    };
    let props = builder.finish()?;
    let file_size = fs.open(path)?.size();
    Ok(Some(TableMeta {
        number,
        file_size,
        smallest,
        largest,
        smallest_seq,
        largest_seq,
        num_entries: props.num_entries,
    }))
}

/// Decides, per user key, whether a tombstone may be dropped (nothing older lies below).
pub(crate) type TombstoneFilter<'a> = Box<dyn FnMut(&[u8]) -> bool + Send + 'a>;

/// Yields the newest version of each user key from a sorted source (the oldest versions are
/// shadowed and no reader can need them: readers and snapshots keep their own state alive).
/// Tombstones are dropped only where `drop_tombstone` says nothing older can lie below.
pub(crate) struct NewestVersions<'a, I: InternalIterator> {
    inner: I,
    last_user_key: Vec<u8>,
    has_last: bool,
    drop_tombstone: TombstoneFilter<'a>,
    /// Bytes (keys + values) of the input seen, for compaction accounting.
    pub input_bytes: u64,
}

impl<'a, I: InternalIterator> NewestVersions<'a, I> {
    pub(crate) fn new(inner: I, drop_tombstone: TombstoneFilter<'a>) -> Self {
        NewestVersions {
            inner,
            last_user_key: Vec::new(),
            has_last: false,
            drop_tombstone,
            input_bytes: 0,
        }
    }

    /// Skips forward to the next entry to keep.
    fn settle(&mut self) -> Result<()> {
        while self.inner.valid() {
            let k = self.inner.key();
            self.input_bytes += (k.len() + self.inner.value().len()) as u64;
            let uk = key::user_key(k);
            if self.has_last && uk == self.last_user_key.as_slice() {
                self.inner.next()?;
                continue;
            }
            self.last_user_key.clear();
            self.last_user_key.extend_from_slice(uk);
            self.has_last = true;
            let is_tombstone =
                key::parse_internal_key(k).is_some_and(|p| p.kind == ValueKind::Delete);
            if is_tombstone && (self.drop_tombstone)(uk) {
                self.inner.next()?;
                continue;
            }
            return Ok(());
        }
        Ok(())
    }
}

impl<I: InternalIterator> InternalIterator for NewestVersions<'_, I> {
    fn valid(&self) -> bool {
        self.inner.valid()
    }
    fn key(&self) -> &[u8] {
        self.inner.key()
    }
    fn value(&self) -> &[u8] {
        self.inner.value()
    }
    fn next(&mut self) -> Result<()> {
        self.inner.next()?;
        self.settle()
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.has_last = false;
        self.inner.seek(target)?;
        self.settle()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.has_last = false;
        self.inner.seek_to_first()?;
        self.settle()
    }
}

/// Flushes the oldest immutable memtable. Runs on the background thread.
pub(crate) fn flush_oldest(inner: &DbInner) -> Result<()> {
    let state = inner.load_state();
    let Some(oldest) = state.imm.last().cloned() else { return Ok(()) };
    // The oldest memtable still unflushed after this one: its WAL is the new log number.
    let next_wal = state.imm.iter().rev().nth(1).unwrap_or(&state.mem).wal_number;
    drop(state);

    let number = inner.file_numbers.fetch_add(1, Ordering::SeqCst);
    let mut it = NewestVersions::new(oldest.table.iter(), Box::new(|_| false));
    it.seek_to_first()?;
    let meta = inner.write_table(number, &mut it)?;
    inner.fs.sync_dir(&inner.dir)?;
    let opened = match &meta {
        Some(m) => vec![inner.open_table(m.clone())?],
        None => vec![],
    };

    let mut edit = VersionEdit { log_number: Some(next_wal), ..VersionEdit::default() };
    if let Some(m) = &meta {
        edit.added.push((0, m.clone()));
        edit.last_seq = Some(m.largest_seq);
    }
    {
        let _g = lock(&inner.state_lock);
        lock(&inner.versions).log_and_apply(&mut edit)?;
        let cur = inner.state.load();
        let version = Arc::new(cur.version.apply(&edit, &opened));
        let imm: Vec<Mem> =
            cur.imm.iter().filter(|m| !Arc::ptr_eq(&m.table, &oldest.table)).cloned().collect();
        inner.state.store(Arc::new(DbState { mem: cur.mem.clone(), imm, version }));
    }
    if let Some(m) = &meta {
        inner.counters.flushes.incr();
        inner.counters.flush_bytes_written.add(m.file_size);
    }
    // Segments below the new log number hold nothing the tables do not.
    for n in (oldest.wal_number..next_wal).rev() {
        let p = wal_path(&inner.dir, n);
        if inner.fs.exists(&p) {
            let _ = inner.fs.remove(&p);
        }
    }
    Ok(())
}

/// Waits until every memtable frozen so far has been flushed (or background work failed).
pub(crate) fn wait_for_flushes(inner: &DbInner) -> Result<()> {
    let mut bg = lock(&inner.bg);
    loop {
        inner.check_bg_error_locked(&bg)?;
        if inner.load_state().imm.is_empty() {
            return Ok(());
        }
        if bg.shutdown {
            return Err(crate::Error::Closed);
        }
        inner.bg_cv.notify_all();
        bg = inner.bg_done_cv.wait(bg).unwrap_or_else(|p| p.into_inner());
    }
}
