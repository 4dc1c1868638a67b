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
//! fsync it, rename it over `CURRENT`, fsync the directory.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::filename::{self, current_path, manifest_path};
use crate::filter::Filter;
use crate::fs::FileSystem;
use crate::key_head::SortedHeads;
use crate::key::{self, SeqNo};
use crate::log::{LogReader, LogWriter};
use crate::range_del::Fragments;
use crate::table::Table;
use crate::version::edit::{KeyspaceDef, KeyspaceId, TableMeta, VersionEdit, DEFAULT_KEYSPACE};
use crate::version::lookup::Fence;
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
    path: PathBuf,
    fs: Arc<dyn FileSystem>,
    obsolete: AtomicBool,
}

impl TableFile {
    pub(crate) fn new(
        meta: TableMeta,
        table: Arc<Table>,
        path: PathBuf,
        fs: Arc<dyn FileSystem>,
    ) -> Self {
        TableFile { meta, table, path, fs, obsolete: AtomicBool::new(false) }
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
    #[cfg_attr(not(feature = "internals"), allow(dead_code))] // used by the tool and tests
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Marks the file for deletion once nothing refers to it any more.
    pub(crate) fn mark_obsolete(&self) {
        self.obsolete.store(true, Ordering::Release);
    }
}

impl Drop for TableFile {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Acquire) {
            // A failed delete leaves an orphan that the next open removes; nothing is lost.
            let _ = self.fs.remove(&self.path);
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
    pub(crate) fences: Vec<Vec<Fence>>,
    /// `upper_bounds[l]` holds the heads of `levels[l]`'s largest keys, arranged for the
    /// search that picks a sorted level's one candidate (empty for L0, which is scanned).
    pub(crate) upper_bounds: Vec<SortedHeads>,
    /// `filters[l][i]` is the filter of `levels[l][i]`: a clone sharing the table's bit array,
    /// so a lookup reaches the bits without loading the table (only a "maybe" does that).
    pub(crate) filters: Vec<Vec<Filter>>,
    /// Every table's range tombstones as one set, for readers (see [`crate::range_del`]).
    /// Rebuilt with each version: O(n log n) in the tree's tombstones, which compaction
    /// keeps few; empty (and free) when there are none.
    pub(crate) range_dels: Arc<Fragments>,
    /// The sorted levels (≥ 1) that hold tables, in order: the levels a point lookup
    /// searches. A tree filled over time has its tables on the last level or two, and
    /// skipping the empty ones spares each lookup a fence search's set-up per level.
    pub(crate) sorted_in_use: Vec<usize>,
}

impl Version {
    pub(crate) fn empty() -> Self {
        Version::new(vec![Vec::new(); NUM_LEVELS])
    }

    fn new(levels: Vec<Vec<Arc<TableFile>>>) -> Self {
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
        let filters =
            levels.iter().map(|ts| ts.iter().map(|t| t.table.filter().clone()).collect()).collect();
        let range_dels = Arc::new(Fragments::new(
            levels.iter().flatten().flat_map(|t| t.table.range_tombstones()),
        ));
        let sorted_in_use = (1..levels.len()).filter(|&l| !levels[l].is_empty()).collect();
        Version { levels, fences, upper_bounds, filters, range_dels, sorted_in_use }
    }

    /// True if `edit` changes the tables of keyspace `keyspace`, whose version this is.
    pub(crate) fn touched_by(&self, edit: &VersionEdit, keyspace: KeyspaceId) -> bool {
        edit.added.iter().any(|(_, m)| m.keyspace == keyspace)
            || edit.deleted.iter().any(|&(level, number)| {
                self.levels.get(level).is_some_and(|ts| ts.iter().any(|t| t.meta.number == number))
            })
    }

    /// Returns a new version of keyspace `keyspace` with `edit` applied (the tables it adds
    /// to other keyspaces are left out); `opened` supplies the reader of every added table.
    pub(crate) fn apply(
        &self,
        edit: &VersionEdit,
        keyspace: KeyspaceId,
        opened: &[Arc<TableFile>],
    ) -> Version {
        let mut levels = self.levels.clone();
        for (level, number) in &edit.deleted {
            levels[*level].retain(|t| t.meta.number != *number);
        }
        for (level, meta) in edit.added.iter().filter(|(_, m)| m.keyspace == keyspace) {
            if let Some(t) = opened.iter().find(|t| t.meta.number == meta.number) {
                levels[*level].push(t.clone());
            }
        }
        levels[0].sort_by(|a, b| l0_newest_first(&a.meta, &b.meta));
        for level in levels.iter_mut().skip(1) {
            level.sort_by(|a, b| key::compare_internal(&a.meta.smallest, &b.meta.smallest));
        }
        Version::new(levels)
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

    /// Every live table.
    pub fn all_tables(&self) -> impl Iterator<Item = (usize, &Arc<TableFile>)> {
        self.levels.iter().enumerate().flat_map(|(l, ts)| ts.iter().map(move |t| (l, t)))
    }
}

/// One keyspace as recovery found it in the manifest.
#[derive(Debug)]
pub struct RecoveredKeyspace {
    /// Its id, name and options (the default keyspace's are placeholders: it takes its
    /// options from `Options` at each open).
    pub def: KeyspaceDef,
    /// Its tables, per level.
    pub levels: Vec<Vec<TableMeta>>,
}

/// The order of L0, in which lookups ask its tables: by newest entry, descending, then by
/// file number, descending. Flushes write L0 tables in the order of their writes, but an
/// ingest's tables (every entry at the one sequence number it reserved) are numbered as they
/// are written, while writes after the reservation may be flushed to L0 meanwhile: the file
/// numbers of the two interleave, their sequence numbers do not. Ties are between tables of
/// one ingest, which do not overlap.
pub(crate) fn l0_newest_first(a: &TableMeta, b: &TableMeta) -> std::cmp::Ordering {
    (b.largest_seq, b.number).cmp(&(a.largest_seq, a.number))
}

/// Two L0 tables, in L0's order ([`l0_newest_first`]), that overlap by user key while the
/// first does not hold only entries newer than the other's. Lookups ask L0 tables in that
/// order and stop at the first version found, so such a pair would answer with an older
/// version. The engine writes L0 tables only by flushing memtables oldest first, each
/// holding writes newer than every table before, and by ingesting, at one sequence number
/// no flushed table straddles (see `db::ingest`). Quadratic in L0's tables, which are few.
fn l0_out_of_order(tables: &[TableMeta]) -> Option<(&TableMeta, &TableMeta)> {
    let mut ordered: Vec<&TableMeta> = tables.iter().collect();
    ordered.sort_by(|a, b| l0_newest_first(a, b));
    fn range(t: &TableMeta) -> (&[u8], &[u8]) {
        (key::user_key(&t.smallest), key::user_key(&t.largest))
    }
    ordered.iter().enumerate().find_map(|(i, &newer)| {
        let (lo, hi) = range(newer);
        ordered[i + 1..].iter().find_map(|&older| {
            let (olo, ohi) = range(older);
            (lo <= ohi && olo <= hi && newer.smallest_seq <= older.largest_seq)
                .then_some((newer, older))
        })
    })
}

/// Two tables of one sorted level (≥ 1) whose user-key ranges meet, if any. A point lookup
/// asks one table per sorted level: the first whose largest key is at or above the key. If a
/// neighbour began at that largest key, its entry for that key would never be asked for —
/// and the engine never writes such a level: a table's range (its range tombstones
/// included) ends before the next table's begins, and every compaction and ingest takes in
/// the tables whose ranges merely touch its own. So sharing a bounding key is an overlap too.
pub(crate) fn sorted_level_overlap(tables: &[TableMeta]) -> Option<(&TableMeta, &TableMeta)> {
    let mut sorted: Vec<&TableMeta> = tables.iter().collect();
    sorted.sort_by(|a, b| key::compare_internal(&a.smallest, &b.smallest));
    sorted
        .windows(2)
        .find(|w| key::user_key(&w[0].largest) >= key::user_key(&w[1].smallest))
        .map(|w| (w[0], w[1]))
}

/// What recovery found in the manifest.
#[derive(Debug)]
pub struct RecoveredManifest {
    /// The live keyspaces, by id; the default keyspace first.
    pub keyspaces: Vec<RecoveredKeyspace>,
    /// The id the next keyspace created gets: every id below it that is not live was
    /// dropped.
    pub next_keyspace_id: KeyspaceId,
    /// WALs numbered at or above this hold data not yet in tables.
    pub log_number: u64,
    /// The next unused file number.
    pub next_file_number: u64,
    /// The last sequence number recorded.
    pub last_seq: SeqNo,
    /// Number of the manifest that was read.
    pub manifest_number: u64,
    /// Bytes of intact records: the file length, less any torn tail.
    pub valid_len: u64,
    /// True if the last record was damaged or cut short and so ignored as a torn append.
    /// Recovery must then confirm, from what the edit would have retired, that nothing it
    /// recorded is lost (see `db/recovery.rs`).
    pub torn_tail: bool,
    /// For each live table, the offset of the edit that added it (for errors).
    pub added_at: std::collections::HashMap<u64, u64>,
}

/// The number of the manifest `CURRENT` names.
pub(crate) fn read_current(fs: &dyn FileSystem, dir: &Path) -> Result<u64> {
    let current = current_path(dir);
    let text = fs.read_all(&current)?;
    let name = std::str::from_utf8(&text)
        .ok()
        .and_then(|s| s.strip_suffix('\n'))
        .filter(|s| !s.is_empty() && !s.contains('/') && !s.contains('\n'))
        .ok_or_else(|| Error::corruption(&current, 0, "CURRENT does not name a manifest"))?;
    match filename::parse(name) {
        Some(filename::FileKind::Manifest(n)) => Ok(n),
        _ => Err(Error::corruption(&current, 0, format!("CURRENT names {name:?}"))),
    }
}

/// Reads the manifest named by `CURRENT` and folds its edits into the live set of tables.
pub fn read_manifest(fs: &dyn FileSystem, dir: &Path) -> Result<RecoveredManifest> {
    let manifest_number = read_current(fs, dir)?;
    let path = manifest_path(dir, manifest_number);
    let data = fs.read_all(&path)?;
    let len = data.len() as u64;
    let mut reader = LogReader::new(path.clone(), data);
    let mut keyspaces: std::collections::BTreeMap<KeyspaceId, RecoveredKeyspace> =
        std::collections::BTreeMap::new();
    keyspaces.insert(DEFAULT_KEYSPACE, RecoveredKeyspace::new(default_keyspace_def()));
    let mut next_keyspace_id: KeyspaceId = 1;
    let (mut log_number, mut next_file, mut last_seq) = (None, None, None);
    let mut records = 0;
    let mut added_at = std::collections::HashMap::new();
    // Numbers of the tables live after the edits so far, across keyspaces and levels.
    let mut live = std::collections::HashSet::new();
    while let Some(record) = reader.next_record()? {
        let offset = reader.last_record_offset();
        let edit = VersionEdit::decode(&record).map_err(|e| e.in_file(&path, offset))?;
        records += 1;
        // The edit format allows more levels than the engine has.
        if let Some(&level) = edit
            .deleted
            .iter()
            .map(|(l, _)| l)
            .chain(edit.added.iter().map(|(l, _)| l))
            .find(|&&l| l >= NUM_LEVELS)
        {
            return Err(Error::corruption(
                &path,
                offset,
                format!("edit names level {level}; this engine has {NUM_LEVELS}"),
            ));
        }
        let bad = |what: String| Error::corruption(&path, offset, what);
        if let Some(next) = edit.next_keyspace_id {
            // Ids are never reused: a counter that went back would hand out the id of a
            // keyspace that exists, or of a dropped one whose writes a WAL may still hold.
            if next < next_keyspace_id {
                return Err(bad(format!(
                    "next keyspace id goes back from {next_keyspace_id} to {next}"
                )));
            }
            next_keyspace_id = next;
        }
        for def in &edit.keyspaces {
            if def.id == DEFAULT_KEYSPACE || def.id >= next_keyspace_id {
                return Err(bad(format!("edit defines keyspace {} out of range", def.id)));
            }
            if keyspaces.values().any(|k| k.def.name == def.name && k.def.id != def.id) {
                return Err(bad(format!("two keyspaces are named {:?}", def.name)));
            }
            keyspaces
                .entry(def.id)
                .and_modify(|k| k.def = def.clone())
                .or_insert_with(|| RecoveredKeyspace::new(def.clone()));
        }
        for (level, number) in &edit.deleted {
            let found = keyspaces.values_mut().any(|k| {
                let before = k.levels[*level].len();
                k.levels[*level].retain(|t| t.number != *number);
                k.levels[*level].len() != before
            });
            if !found {
                return Err(bad(format!(
                    "edit deletes table {number} which is not on level {level}"
                )));
            }
            live.remove(number);
        }
        for (level, meta) in &edit.added {
            let Some(k) = keyspaces.get_mut(&meta.keyspace) else {
                return Err(bad(format!(
                    "edit adds table {} to keyspace {}, which does not exist",
                    meta.number, meta.keyspace
                )));
            };
            // The engine never names one file twice. Deletions name a table by level and
            // number only, so a later edit deleting one of two entries could not say which:
            // a dropped keyspace's deletions, replayed, would strip the other keyspace.
            if !live.insert(meta.number) {
                return Err(bad(format!("edit adds table {}, which is already live", meta.number)));
            }
            k.levels[*level].push(meta.clone());
            added_at.insert(meta.number, offset);
        }
        for id in &edit.dropped_keyspaces {
            match keyspaces.get(id) {
                Some(k) if *id != DEFAULT_KEYSPACE && k.levels.iter().all(Vec::is_empty) => {
                    keyspaces.remove(id);
                }
                _ => {
                    return Err(bad(format!(
                        "edit drops keyspace {id}, which is the default, does not exist, or \
                         still has tables"
                    )))
                }
            }
        }
        log_number = edit.log_number.or(log_number);
        next_file = edit.next_file_number.or(next_file);
        if let (Some(new), Some(old)) = (edit.last_seq, last_seq) {
            // The engine never records a lower last sequence than before (`log_and_apply`
            // keeps the maximum): writes after a lower one would be numbered below data
            // already in the tables, and hidden by it.
            if new < old {
                return Err(bad(format!("last sequence goes back from {old} to {new}")));
            }
        }
        last_seq = edit.last_seq.or(last_seq);
    }
    let missing = |what| Error::corruption(&path, 0, format!("manifest has no {what}"));
    if records == 0 {
        return Err(missing("records"));
    }
    let next_file_number = next_file.ok_or_else(|| missing("next file number"))?;
    let max_used =
        keyspaces.values().flat_map(|k| k.levels.iter().flatten()).map(|t| t.number).max();
    let max_used = max_used.unwrap_or(0);
    if max_used >= next_file_number || manifest_number >= next_file_number {
        return Err(Error::corruption(&path, 0, "a file number is not below the next file number"));
    }
    for k in keyspaces.values() {
        for (level, tables) in k.levels.iter().enumerate() {
            let at = |ts: &[&TableMeta]| {
                ts.iter().map(|t| added_at.get(&t.number).copied().unwrap_or(0)).max().unwrap_or(0)
            };
            if let Some(t) =
                tables.iter().find(|t| key::user_key(&t.smallest) > key::user_key(&t.largest))
            {
                return Err(Error::corruption(
                    &path,
                    at(&[t]),
                    format!(
                        "table {} on level {level} of keyspace {}: smallest key above largest key",
                        t.number, k.def.id
                    ),
                ));
            }
            if level == 0 {
                if let Some((newer, older)) = l0_out_of_order(tables) {
                    return Err(Error::corruption(
                        &path,
                        at(&[newer, older]),
                        format!(
                            "L0 tables {} and {} of keyspace {} overlap, and the first, which \
                             lookups ask first, does not hold only newer entries",
                            newer.number, older.number, k.def.id
                        ),
                    ));
                }
                continue;
            }
            if let Some((a, b)) = sorted_level_overlap(tables) {
                return Err(Error::corruption(
                    &path,
                    at(&[a, b]),
                    format!(
                        "tables {} and {} overlap on level {level} of keyspace {}",
                        a.number, b.number, k.def.id
                    ),
                ));
            }
        }
    }
    let last_seq = last_seq.ok_or_else(|| missing("last sequence"))?;
    // Every edit that adds a table records a last sequence at least the table's newest, so a
    // table beyond it means a damaged manifest; opened, its newer entries would be invisible.
    if let Some(t) = keyspaces
        .values()
        .flat_map(|k| k.levels.iter().flatten())
        .find(|t| t.largest_seq > last_seq)
    {
        return Err(Error::corruption(
            &path,
            added_at.get(&t.number).copied().unwrap_or(0),
            format!(
                "table {} holds sequence {} beyond the manifest's last sequence {last_seq}",
                t.number, t.largest_seq
            ),
        ));
    }
    Ok(RecoveredManifest {
        keyspaces: keyspaces.into_values().collect(),
        next_keyspace_id,
        log_number: log_number.ok_or_else(|| missing("log number"))?,
        next_file_number,
        last_seq,
        manifest_number,
        valid_len: len - reader.dropped_tail_bytes(),
        torn_tail: reader.dropped_tail_bytes() > 0,
        added_at,
    })
}

impl RecoveredKeyspace {
    fn new(def: KeyspaceDef) -> Self {
        RecoveredKeyspace { def, levels: vec![Vec::new(); NUM_LEVELS] }
    }
}

/// The default keyspace as the manifest knows it: it is never recorded (its options come
/// from `Options`), only its tables are.
pub(crate) fn default_keyspace_def() -> KeyspaceDef {
    KeyspaceDef {
        id: DEFAULT_KEYSPACE,
        name: DEFAULT_KEYSPACE_NAME.to_string(),
        opts: Default::default(),
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
    /// Next file number to hand out; shared with the write path, which allocates WAL
    /// numbers without taking the version-set lock.
    next_file_number: Arc<AtomicU64>,
    log_number: u64,
    last_seq: SeqNo,
    /// The keyspaces besides the default one, by id, for manifest snapshots.
    keyspaces: std::collections::BTreeMap<KeyspaceId, KeyspaceDef>,
    next_keyspace_id: KeyspaceId,
}

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
            next_file_number: Arc::new(AtomicU64::new(next_file_number)),
            log_number,
            last_seq,
            keyspaces: Default::default(),
            next_keyspace_id: 1,
        }
    }

    /// Sets the keyspaces the next snapshot records (recovery's, before the first one).
    pub fn set_keyspaces(&mut self, defs: Vec<KeyspaceDef>, next_id: KeyspaceId) {
        self.keyspaces =
            defs.into_iter().filter(|d| d.id != DEFAULT_KEYSPACE).map(|d| (d.id, d)).collect();
        self.next_keyspace_id = next_id;
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
        for version in versions {
            for (level, t) in version.all_tables() {
                edit.added.push((level, t.meta.clone()));
            }
        }
        self.fill(&mut edit);
        let writer = create_manifest(self.fs.as_ref(), &self.dir, number, &edit)?;
        set_current(self.fs.as_ref(), &self.dir, number)?;
        let old = self.manifest_number;
        self.manifest = Some(writer);
        self.manifest_number = number;
        if old != 0 {
            let _ = self.fs.remove(&manifest_path(&self.dir, old));
        }
        Ok(())
    }

    fn fill(&self, edit: &mut VersionEdit) {
        edit.log_number = Some(edit.log_number.unwrap_or(self.log_number));
        edit.next_file_number = Some(self.next_file_number.load(Ordering::SeqCst));
        edit.last_seq = Some(edit.last_seq.unwrap_or(self.last_seq).max(self.last_seq));
    }

    /// Appends `edit` to the manifest and fsyncs it: when this returns, the edit is durable.
    pub fn log_and_apply(&mut self, edit: &mut VersionEdit) -> Result<()> {
        self.fill(edit);
        let writer = self.manifest.as_mut().ok_or(Error::Closed)?;
        let start = writer.len();
        if let Err(e) = writer.add_record(&edit.encode()).and_then(|()| writer.sync()) {
            // The edit failed, so the engine goes on without it (or stops): it must not be
            // found by the next open. The writer refuses everything from here on; only a
            // new manifest (`write_snapshot`) can continue.
            let _ = writer.cut_back_to(start);
            return Err(e);
        }
        self.log_number = edit.log_number.unwrap_or(self.log_number);
        self.last_seq = edit.last_seq.unwrap_or(self.last_seq);
        for def in &edit.keyspaces {
            self.keyspaces.insert(def.id, def.clone());
        }
        for id in &edit.dropped_keyspaces {
            self.keyspaces.remove(id);
        }
        self.next_keyspace_id = edit.next_keyspace_id.unwrap_or(self.next_keyspace_id);
        Ok(())
    }
}

/// Writes manifest `number` in `dir` with `edit` (which must describe the whole tree: every
/// table, the log number, next file number and last sequence number) as its first record,
/// fsynced. CURRENT is left alone: pointing it at the new manifest is the caller's commit.
pub fn create_manifest(
    fs: &dyn FileSystem,
    dir: &Path,
    number: u64,
    edit: &VersionEdit,
) -> Result<LogWriter> {
    let mut writer = LogWriter::new(fs.create(&manifest_path(dir, number))?);
    writer.add_record(&edit.encode())?;
    writer.sync()?;
    Ok(writer)
}

/// Points CURRENT at manifest `number`, atomically.
pub fn set_current(fs: &dyn FileSystem, dir: &Path, number: u64) -> Result<()> {
    let tmp = dir.join("CURRENT.tmp");
    let mut f = fs.create(&tmp)?;
    f.append(format!("MANIFEST-{number:06}\n").as_bytes())?;
    f.sync()?;
    drop(f);
    fs.rename(&tmp, &current_path(dir))?;
    fs.sync_dir(dir)
}
