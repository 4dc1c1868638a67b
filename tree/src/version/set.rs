//! Versions and the manifest.
//!
//! A [`Version`] is an immutable picture of which tables live on which level. The engine holds
//! the current one inside its state snapshot; readers, iterators and snapshots keep the version
//! they started with alive through `Arc`s, and every table inside it stays open (its filter and
//! index in RAM; its file descriptor only while `max_open_files` allows, see
//! `table::file_cache`) for as long as any version refers to it. A table that compaction replaced is
//! marked obsolete and its file is deleted when the last `Arc` to it drops — so no reader ever
//! finds its file gone.
//!
//! The [`VersionSet`] owns the manifest: a log (same record format as the WAL) of
//! [`VersionEdit`]s. On open a fresh manifest is written holding one edit that describes the
//! whole current version, then `CURRENT` is switched to it atomically: write `CURRENT.tmp`,
//! fsync it, rename it over `CURRENT`, fsync the directory. Reading a manifest back, and
//! starting one, is `super::manifest`'s.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::blob::{BlobFile, BlobFiles};
use crate::filename::manifest_path;
use crate::filter::Filter;
use crate::fs::{Deleter, FileSystem};
use crate::key::{self, SeqNo};
use crate::key_head::SortedHeads;
use crate::log::LogWriter;
use crate::range_del::Fragments;
use crate::table::Table;
use crate::version::builder::{lookup_order, Counters, Keyspace, VersionBuilder};
use crate::version::edit::{KeyspaceDef, KeyspaceId, TableMeta, VersionEdit, DEFAULT_KEYSPACE};
use crate::version::lookup::Fence;
use crate::version::manifest::{create_manifest, replace_current};
use crate::{Error, Result};

/// Levels in the tree: L0 plus six sorted levels.
pub const NUM_LEVELS: usize = 7;

/// A live table: its manifest metadata and the open reader (filter and index in RAM).
#[derive(Debug)]
pub struct TableFile {
    /// What the manifest records about the table.
    pub meta: TableMeta,
    /// The open table.
    pub table: Arc<Table>,
    /// The blob files its references name (those `meta.blob_refs` lists): held, so that
    /// whoever can reach the table can read its values.
    pub blobs: Vec<Arc<BlobFile>>,
    path: PathBuf,
    deleter: Arc<Deleter>,
    obsolete: AtomicBool,
}

impl TableFile {
    pub fn new(meta: TableMeta, table: Arc<Table>, path: PathBuf, deleter: Arc<Deleter>) -> Self {
        let obsolete = AtomicBool::new(false);
        TableFile { meta, table, blobs: Vec::new(), path, deleter, obsolete }
    }

    /// The same table, holding `blobs`, the blob files its references name.
    pub fn with_blobs(mut self, blobs: Vec<Arc<BlobFile>>) -> Self {
        self.blobs = blobs;
        self
    }

    /// The table's expiring entries as its properties record them: (oldest expiry, newest
    /// expiry, bytes), or `None` if it has none.
    pub fn expiry(&self) -> Option<(u64, u64, u64)> {
        let p = self.table.properties();
        (p.num_expiring > 0).then_some((p.oldest_expiry, p.newest_expiry, p.expiring_bytes))
    }

    /// Bytes of the table's entries (keys and values as added).
    pub fn entry_bytes(&self) -> u64 {
        let p = self.table.properties();
        p.raw_key_bytes.saturating_add(p.raw_value_bytes)
    }

    /// Smallest user key in the table.
    pub fn smallest_user_key(&self) -> &[u8] {
        key::user_key(&self.meta.smallest)
    }

    /// Largest user key in the table.
    pub fn largest_user_key(&self) -> &[u8] {
        key::user_key(&self.meta.largest)
    }

    /// The table's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Marks the file for deletion once nothing refers to it any more.
    pub fn mark_obsolete(&self) {
        self.obsolete.store(true, Ordering::Release);
    }
}

impl Drop for TableFile {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Acquire) {
            // Usually on the deleter's thread: see `fs/deleter.rs`.
            self.deleter.remove(std::mem::take(&mut self.path));
        }
    }
}

/// Which tables are live, level by level. L0 is ordered newest first (its tables may
/// overlap; see [`l0_newest_first`]); every other level is sorted by key and its tables do
/// not overlap.
#[derive(Debug, Clone, Default)]
pub struct Version {
    /// The tables of each level.
    pub levels: Vec<Vec<Arc<TableFile>>>,
    /// `fences[l][i]` is the key range of `levels[l][i]` in the compact form point lookups
    /// search (see [`crate::version::lookup`]).
    pub fences: Vec<Vec<Fence>>,
    /// `upper_bounds[l]` holds the heads of `levels[l]`'s largest keys, arranged for the
    /// search that picks a sorted level's one candidate (empty for L0, which is scanned).
    pub upper_bounds: Vec<SortedHeads>,
    /// `filters[l][i]` is the filter of `levels[l][i]`: a clone sharing the table's bit array,
    /// so a lookup reaches the bits without loading the table (only a "maybe" does that).
    pub filters: Vec<Vec<Filter>>,
    /// Every table's range tombstones as one set, for readers (see [`crate::range_del`]).
    /// Rebuilt with each version: O(n log n) in the tree's tombstones, which compaction
    /// keeps few; empty (and free) when there are none.
    pub range_dels: Arc<Fragments>,
    /// The sorted levels (≥ 1) that hold tables, in order: the levels a point lookup
    /// searches. A tree filled over time has its tables on the last level or two, and
    /// skipping the empty ones spares each lookup a fence search's set-up per level.
    pub sorted_in_use: Vec<usize>,
    /// The blob files the tables reference, for reads to resolve references with.
    pub blobs: BlobFiles,
    /// The runs beyond its style's shape (`compact::picker::excess_runs`), worked out once
    /// per version: every write group's stall check asks for it, and counting the runs
    /// each time built a list of them.
    pub excess_runs: ExcessRunsCache,
}

/// [`Version::excess_runs`]: the count, with the shape (K, Z, the flushed run's bytes, the
/// size ratio) it was counted for. A clone starts empty, so that a version built from
/// another's parts never carries a count of other tables.
#[derive(Debug, Default)]
pub struct ExcessRunsCache(std::sync::OnceLock<(ExcessRunsKey, usize)>);

/// What [`ExcessRunsCache`] counts by: K, Z, the flushed run's bytes and the size ratio.
pub type ExcessRunsKey = (usize, usize, u64, u64);

impl Clone for ExcessRunsCache {
    fn clone(&self) -> Self {
        ExcessRunsCache::default()
    }
}

impl ExcessRunsCache {
    /// The count for `key`: the one cached if it was counted for `key`, else `count()`'s,
    /// cached when nothing is yet (a version is counted for one shape in practice).
    pub fn get(&self, key: ExcessRunsKey, count: impl FnOnce() -> usize) -> usize {
        match self.0.get() {
            Some(&(k, n)) if k == key => n,
            Some(_) => count(),
            None => self.0.get_or_init(|| (key, count())).1,
        }
    }
}

impl Version {
    pub fn empty() -> Self {
        Version::new(vec![Vec::new(); NUM_LEVELS])
    }

    /// The version of `levels`' tables (one list per level, [`NUM_LEVELS`] of them), each
    /// level put in the order reads need ([`lookup_order`]).
    pub fn new(mut levels: Vec<Vec<Arc<TableFile>>>) -> Self {
        for (level, tables) in levels.iter_mut().enumerate() {
            lookup_order(level, tables);
        }
        let fences: Vec<Vec<Fence>> =
            levels.iter().map(|ts| ts.iter().map(|t| Fence::of(t)).collect()).collect();
        let upper_bounds = fences
            .iter()
            .enumerate()
            .map(|(l, fs)| match l {
                0 => SortedHeads::default(),
                _ => SortedHeads::new(fs.iter().map(Fence::hi).collect()),
            })
            .collect();
        let filters = levels
            .iter()
            .map(|ts| ts.iter().map(|t| t.table.filter().for_point_lookups()).collect())
            .collect();
        let range_dels = Arc::new(Fragments::new(
            levels.iter().flatten().flat_map(|t| t.table.range_tombstones()),
        ));
        let sorted_in_use = (1..levels.len()).filter(|&l| !levels[l].is_empty()).collect();
        let blobs = levels
            .iter()
            .flatten()
            .flat_map(|t| &t.blobs)
            .map(|b| (b.meta.number, b.clone()))
            .collect();
        let blobs = BlobFiles(Arc::new(blobs));
        let excess_runs = ExcessRunsCache::default();
        Version {
            levels,
            fences,
            upper_bounds,
            filters,
            range_dels,
            sorted_in_use,
            blobs,
            excess_runs,
        }
    }

    /// Total bytes of the tables on `level`.
    pub fn level_bytes(&self, level: usize) -> u64 {
        self.levels[level].iter().map(|t| t.meta.file_size).sum()
    }

    /// Tables on `level` whose user-key range intersects `[smallest, largest]`.
    pub fn overlapping(
        &self,
        level: usize,
        smallest: &[u8],
        largest: &[u8],
    ) -> Vec<Arc<TableFile>> {
        self.levels[level]
            .iter()
            .filter(|t| t.largest_user_key() >= smallest && t.smallest_user_key() <= largest)
            .cloned()
            .collect()
    }

    /// Live bytes per blob file: the values the tables reference, summed from their
    /// manifest records (`TableMeta::blob_refs`), so exact.
    pub fn blob_live_bytes(&self) -> std::collections::BTreeMap<u64, (u64, u64)> {
        let mut live = std::collections::BTreeMap::new();
        for (_, t) in self.all_tables() {
            for r in &t.meta.blob_refs {
                let e: &mut (u64, u64) = live.entry(r.file).or_default();
                e.0 += r.count;
                e.1 += r.bytes;
            }
        }
        live
    }

    /// Every live table.
    pub fn all_tables(&self) -> impl Iterator<Item = (usize, &Arc<TableFile>)> {
        self.levels.iter().enumerate().flat_map(|(l, ts)| ts.iter().map(move |t| (l, t)))
    }
}

/// The order of L0, in which lookups ask its tables: by newest entry, descending, then by
/// file number, descending. Flushes write L0 tables in the order of their writes, but an
/// ingest's tables (every entry at the one sequence number it reserved) are numbered as they
/// are written, while writes after the reservation may be flushed to L0 meanwhile: the file
/// numbers of the two interleave, their sequence numbers do not. Ties are between tables of
/// one ingest, which do not overlap.
pub fn l0_newest_first(a: &TableMeta, b: &TableMeta) -> std::cmp::Ordering {
    (b.largest_seq, b.number).cmp(&(a.largest_seq, a.number))
}

/// The default keyspace as a manifest that records nothing of it knows it. Its options come
/// from `Options`; the manifest records only the settings opens check (tag 13).
pub fn default_keyspace_def() -> KeyspaceDef {
    KeyspaceDef {
        id: DEFAULT_KEYSPACE,
        name: DEFAULT_KEYSPACE_NAME.to_string(),
        opts: Default::default(),
        callbacks: None,
    }
}

/// The default keyspace's name.
pub const DEFAULT_KEYSPACE_NAME: &str = "default";

/// The manifest writer and the counters it persists.
#[derive(Debug)]
pub struct VersionSet {
    dir: PathBuf,
    fs: Arc<dyn FileSystem>,
    manifest: Option<LogWriter>,
    manifest_number: u64,
    /// Manifests replaced by one whose CURRENT is not yet durable (the directory fsync after
    /// it failed): a power loss may bring back any of them, so they are removed only after
    /// a later fsync of the directory succeeds.
    retired_manifests: Vec<u64>,
    /// Next file number to hand out; shared with the write path, which allocates WAL
    /// numbers without taking the version-set lock.
    next_file_number: Arc<AtomicU64>,
    log_number: u64,
    last_seq: SeqNo,
    /// The keyspaces, by id, for manifest snapshots and the checks of opens.
    keyspaces: std::collections::BTreeMap<KeyspaceId, KeyspaceDef>,
    /// The names of the keyspaces dropped since the database was opened (the latest
    /// [`MAX_DROPPED_NAMES`]), for errors about writes that name them by id.
    dropped_names: std::collections::BTreeMap<KeyspaceId, String>,
    next_keyspace_id: KeyspaceId,
    /// The clock whose high-water mark every edit records, and the mark last recorded.
    clock: Option<(Arc<crate::clock::MarkedClock>, u64)>,
}

/// How many names of dropped keyspaces a [`VersionSet`] remembers.
const MAX_DROPPED_NAMES: usize = 1024;

impl VersionSet {
    /// A version set that will write its first manifest on [`VersionSet::write_snapshot`].
    pub fn new(
        dir: &Path,
        fs: Arc<dyn FileSystem>,
        next_file_number: u64,
        log_number: u64,
        last_seq: SeqNo,
    ) -> Self {
        VersionSet {
            dir: dir.to_path_buf(),
            fs,
            manifest: None,
            manifest_number: 0,
            retired_manifests: Vec::new(),
            next_file_number: Arc::new(AtomicU64::new(next_file_number)),
            log_number,
            last_seq,
            keyspaces: Default::default(),
            dropped_names: Default::default(),
            next_keyspace_id: 1,
            clock: None,
        }
    }

    /// Sets the keyspaces the next snapshot records (recovery's, before the first one).
    pub fn set_keyspaces(&mut self, defs: Vec<KeyspaceDef>, next_id: KeyspaceId) {
        self.keyspaces = defs.into_iter().map(|d| (d.id, d)).collect();
        self.next_keyspace_id = next_id;
    }

    /// The name keyspace `id` had, if it was dropped since the database was opened.
    pub fn dropped_name(&self, id: KeyspaceId) -> Option<&str> {
        self.dropped_names.get(&id).map(String::as_str)
    }

    /// Keyspace `id` as the manifest records it.
    pub fn keyspace_def(&self, id: KeyspaceId) -> Option<&KeyspaceDef> {
        self.keyspaces.get(&id)
    }

    /// Records `clock`'s high-water mark in every edit from now on: edits the engine writes
    /// anyway (flushes, compactions, the snapshot an open starts with) carry it, so no
    /// write of its own is needed to keep it.
    pub fn record_clock_mark(&mut self, clock: Arc<crate::clock::MarkedClock>) {
        self.clock = Some((clock, 0));
    }

    /// Whether the clock's mark moved past what the manifest holds.
    pub fn clock_mark_moved(&self) -> bool {
        self.clock.as_ref().is_some_and(|(c, recorded)| c.mark() > *recorded)
    }

    /// The id the next keyspace created gets.
    pub fn next_keyspace_id(&self) -> KeyspaceId {
        self.next_keyspace_id
    }

    /// The shared file-number allocator.
    pub fn file_numbers(&self) -> Arc<AtomicU64> {
        self.next_file_number.clone()
    }

    /// Allocates a file number.
    pub fn new_file_number(&self) -> u64 {
        self.next_file_number.fetch_add(1, Ordering::SeqCst)
    }

    /// Sets the log number recorded by the next edit or snapshot.
    pub fn set_log_number(&mut self, n: u64) {
        self.log_number = n;
    }

    /// The live manifest's number.
    pub fn manifest_number(&self) -> u64 {
        self.manifest_number
    }

    /// Starts a new manifest holding the whole of `versions` (every keyspace's tables; the
    /// keyspaces themselves come from the set), and points CURRENT at it.
    pub fn write_snapshot<'a>(
        &mut self,
        versions: impl IntoIterator<Item = &'a Version>,
    ) -> Result<()> {
        let number = self.new_file_number();
        let mut edit = VersionEdit {
            keyspaces: self.keyspaces.values().cloned().collect(),
            next_keyspace_id: Some(self.next_keyspace_id),
            ..VersionEdit::default()
        };
        // A kept WAL segment can hold several keyspaces' values: each file is added once.
        let mut blobs = std::collections::BTreeMap::new();
        for version in versions {
            for (level, t) in version.all_tables() {
                edit.added.push((level, t.meta.clone()));
            }
            blobs.extend(version.blobs.0.values().map(|b| (b.meta.number, b.meta)));
        }
        edit.added_blobs.extend(blobs.into_values());
        self.fill(&mut edit);
        let fs = self.fs.as_ref();
        let started = create_manifest(fs, &self.dir, number, &edit)
            .and_then(|writer| replace_current(fs, &self.dir, number).map(|()| writer));
        let writer = match started {
            Ok(writer) => writer,
            Err(e) => {
                // Nothing names the new manifest: remove it, or a resume retried while the
                // disk is full would leave one behind per call.
                let _ = fs.remove(&manifest_path(&self.dir, number));
                return Err(e);
            }
        };
        // CURRENT names the new manifest now, so it is the one to append to; but until the
        // directory is fsynced a power loss may bring back the CURRENT naming the previous
        // one, which stays until then (and so does any left by an earlier failed fsync).
        if self.manifest_number != 0 {
            self.retired_manifests.push(self.manifest_number);
        }
        self.manifest = Some(writer);
        if let (Some((_, recorded)), Some(mark)) = (&mut self.clock, edit.clock_mark) {
            *recorded = mark;
        }
        self.manifest_number = number;
        self.fs.sync_dir(&self.dir)?;
        for old in self.retired_manifests.drain(..) {
            let _ = self.fs.remove(&manifest_path(&self.dir, old));
        }
        Ok(())
    }

    fn fill(&self, edit: &mut VersionEdit) {
        edit.log_number = Some(edit.log_number.unwrap_or(self.log_number));
        edit.next_file_number = Some(self.next_file_number.load(Ordering::SeqCst));
        edit.last_seq = Some(edit.last_seq.unwrap_or(self.last_seq).max(self.last_seq));
        if let Some((clock, _)) = &self.clock {
            // A database that never judged expiry keeps its manifest free of the field.
            edit.clock_mark = Some(clock.mark()).filter(|&m| m > 0);
        }
    }

    /// Fills in `edit`'s counters and applies it to the live state: the set's keyspaces and
    /// counters, with `versions`' tables (each keyspace's, by id), `opened` holding the
    /// readers of the tables it adds. Writes nothing: [`VersionSet::log`] makes the result
    /// durable and current. An edit the next open would refuse (see
    /// [`VersionBuilder::apply`]) is refused here, as [`Error::Corruption`] at the offset
    /// the record would have taken in the live manifest, so the engine never writes a
    /// manifest it cannot open.
    pub fn apply<'a>(
        &self,
        edit: &mut VersionEdit,
        versions: impl IntoIterator<Item = (KeyspaceId, &'a Version)>,
        opened: &[Arc<TableFile>],
    ) -> Result<VersionBuilder<Arc<TableFile>>> {
        self.fill(edit);
        let mut versions: std::collections::HashMap<KeyspaceId, &Version> =
            versions.into_iter().collect();
        let versions_blobs: std::collections::BTreeMap<u64, crate::blob::BlobFileMeta> = versions
            .values()
            .flat_map(|v| v.blobs.0.values().map(|b| (b.meta.number, b.meta)))
            .collect();
        let versions_blobs = versions_blobs.into_values();
        let keyspaces = self.keyspaces.values().map(|def| {
            let mut k = Keyspace::new(def.clone());
            if let Some(v) = versions.remove(&def.id) {
                k.levels.clone_from(&v.levels);
            }
            k
        });
        let counters = Counters {
            log_number: Some(self.log_number),
            next_file_number: Some(self.next_file_number.load(Ordering::SeqCst)),
            last_seq: Some(self.last_seq),
            next_keyspace_id: self.next_keyspace_id,
            clock_mark: self.clock.as_ref().map_or(0, |(_, recorded)| *recorded),
        };
        // Every live blob file is referenced by a table of the live versions (the edit that
        // removes a file's last reference drops it).
        let blobs: Vec<_> = versions_blobs.into_iter().collect();
        let mut builder = VersionBuilder::from_parts(keyspaces, counters, blobs);
        let open = |m: &TableMeta| opened.iter().find(|t| t.meta.number == m.number).cloned();
        builder.apply(edit, open).map_err(|e| match e {
            Error::Corruption { reason, .. } => Error::corruption(
                manifest_path(&self.dir, self.manifest_number),
                self.manifest.as_ref().map_or(0, LogWriter::len),
                format!("{reason} (the edit was refused, not written)"),
            ),
            other => other,
        })?;
        Ok(builder)
    }

    /// Appends `edit` to the manifest and fsyncs it, then takes the keyspaces and counters
    /// of `applied`, what [`VersionSet::apply`] made of it: when this returns, the edit is
    /// durable.
    pub fn log(
        &mut self,
        edit: &VersionEdit,
        applied: &VersionBuilder<Arc<TableFile>>,
    ) -> Result<()> {
        let writer = self.manifest.as_mut().ok_or(Error::Closed)?;
        let start = writer.len();
        if let Err(e) = writer.add_record(&edit.encode()).and_then(|()| writer.sync()) {
            // The edit failed, so the engine goes on without it (or stops): it must not be
            // found by the next open. The writer refuses everything from here on; only a
            // new manifest (`write_snapshot`) can continue.
            let _ = writer.cut_back_to(start);
            return Err(e);
        }
        let c = applied.counters();
        self.log_number = c.log_number.unwrap_or(self.log_number);
        self.last_seq = c.last_seq.unwrap_or(self.last_seq);
        self.next_keyspace_id = c.next_keyspace_id;
        for id in &edit.dropped_keyspaces {
            if let Some(def) = self.keyspaces.remove(id) {
                self.dropped_names.insert(*id, def.name);
                if self.dropped_names.len() > MAX_DROPPED_NAMES {
                    // Ids only grow: the first is the oldest drop.
                    self.dropped_names.pop_first();
                }
            }
        }
        self.keyspaces = applied.keyspaces().map(|k| (k.def.id, k.def.clone())).collect();
        if let (Some((_, recorded)), Some(mark)) = (&mut self.clock, edit.clock_mark) {
            *recorded = mark;
        }
        Ok(())
    }
}
