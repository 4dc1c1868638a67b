//! Applying one manifest edit to the state it changes (LevelDB's `VersionSet::Builder`): the
//! keyspaces, each one's tables per level, and the counters. Recovery folds every edit of the
//! manifest over [`TableMeta`]s with it ([`super::manifest::read_manifest`]); at runtime
//! [`super::set::VersionSet::apply`] applies each new edit to the live tables, as
//! `Arc<TableFile>`s, *before* the edit is written. So the rules live in one place, and an
//! edit the next open would refuse is refused when the engine makes it, never written.
//!
//! The checks here are those of one edit against the state before it. What only the whole
//! manifest can show (a field never recorded, file numbers at or above the next one, tables
//! that overlap) is `read_manifest`'s to check once every edit is applied.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::blob::BlobFileMeta;
use crate::key::{self, SeqNo};
use crate::version::edit::{KeyspaceDef, KeyspaceId, TableMeta, VersionEdit, DEFAULT_KEYSPACE};
use crate::version::set::{default_keyspace_def, l0_newest_first, TableFile, NUM_LEVELS};
use crate::{Error, Result};

/// What the builder needs of a table: its manifest record. Recovery applies edits to the
/// records themselves; the engine to its open tables.
pub trait TableHandle: Clone {
    /// The table's manifest record.
    fn meta(&self) -> &TableMeta;
}

impl TableHandle for TableMeta {
    fn meta(&self) -> &TableMeta {
        self
    }
}

impl TableHandle for Arc<TableFile> {
    fn meta(&self) -> &TableMeta {
        &self.meta
    }
}

/// One keyspace: its definition and its tables, per level.
#[derive(Debug, Clone)]
pub struct Keyspace<T> {
    /// Its id, name and options (the default keyspace's are placeholders until an edit
    /// records its settings: it takes its options from `Options` at each open).
    pub def: KeyspaceDef,
    /// Its tables, per level ([`NUM_LEVELS`] of them), in the order the edits added them
    /// ([`lookup_order`] is the order reads need).
    pub levels: Vec<Vec<T>>,
}

impl<T> Keyspace<T> {
    /// Keyspace `def` with no tables.
    pub fn new(def: KeyspaceDef) -> Self {
        Keyspace { def, levels: (0..NUM_LEVELS).map(|_| Vec::new()).collect() }
    }
}

/// The manifest's counters, as the edits so far left them (`None`: never recorded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counters {
    /// WALs numbered at or above this hold data not yet in tables.
    pub log_number: Option<u64>,
    /// The next unused file number.
    pub next_file_number: Option<u64>,
    /// The last sequence number recorded.
    pub last_seq: Option<SeqNo>,
    /// The id the next keyspace created gets.
    pub next_keyspace_id: KeyspaceId,
    /// The highest clock high-water mark recorded (0 if none was).
    pub clock_mark: u64,
}

impl Default for Counters {
    /// A manifest that recorded nothing: keyspace ids start at 1, after the default one.
    fn default() -> Self {
        Counters {
            log_number: None,
            next_file_number: None,
            last_seq: None,
            next_keyspace_id: 1,
            clock_mark: 0,
        }
    }
}

/// The state edits apply to, and the one place that applies them.
///
/// # Example
///
/// ```
/// use bloomkv_tree::key::{internal_key, ValueKind};
/// use bloomkv_tree::version::builder::VersionBuilder;
/// use bloomkv_tree::version::edit::{TableMeta, VersionEdit};
///
/// let meta = TableMeta {
///     keyspace: 0,
///     number: 7,
///     file_size: 100,
///     smallest: internal_key(b"a", 1, ValueKind::Put),
///     largest: internal_key(b"z", 1, ValueKind::Put),
///     smallest_seq: 1,
///     largest_seq: 1,
///     num_entries: 2,
///     blob_refs: Vec::new(),
/// };
/// let mut b = VersionBuilder::<TableMeta>::new();
/// let add = VersionEdit { added: vec![(0, meta)], last_seq: Some(1), ..VersionEdit::default() };
/// b.apply(&add, |m| Some(m.clone())).unwrap();
/// assert!(b.is_live(7));
/// // Adding the same table again is refused, as the next open would refuse it.
/// assert!(b.apply(&add, |m| Some(m.clone())).unwrap_err().is_corruption());
/// ```
#[derive(Debug, Clone)]
pub struct VersionBuilder<T> {
    keyspaces: BTreeMap<KeyspaceId, Keyspace<T>>,
    /// The keyspace of each live table. File numbers are unique across keyspaces: deletions
    /// name a table by level and number only.
    owner: HashMap<u64, KeyspaceId>,
    counters: Counters,
    /// Keyspaces whose tables the last edit applied changed.
    changed: BTreeSet<KeyspaceId>,
    /// Tables the last edit applied deleted and did not add back (a move deletes and adds).
    retired: Vec<T>,
    /// The live blob files, by number: added by an edit and not dropped by a later one.
    blob_files: BTreeMap<u64, BlobFileMeta>,
}

impl<T: TableHandle> Default for VersionBuilder<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: TableHandle> VersionBuilder<T> {
    /// The state before a manifest's first edit: the default keyspace, without tables.
    pub fn new() -> Self {
        Self::from_parts([Keyspace::new(default_keyspace_def())], Counters::default(), [])
    }

    /// A builder holding `keyspaces`, `counters` and the live `blob_files`, taken as they are:
    /// the live state, which edits built. The default keyspace is added if missing.
    pub fn from_parts(
        keyspaces: impl IntoIterator<Item = Keyspace<T>>,
        counters: Counters,
        blob_files: impl IntoIterator<Item = BlobFileMeta>,
    ) -> Self {
        let mut map: BTreeMap<KeyspaceId, Keyspace<T>> =
            keyspaces.into_iter().map(|k| (k.def.id, k)).collect();
        map.entry(DEFAULT_KEYSPACE).or_insert_with(|| Keyspace::new(default_keyspace_def()));
        let owner = map
            .values()
            .flat_map(|k| k.levels.iter().flatten().map(|t| (t.meta().number, k.def.id)))
            .collect();
        VersionBuilder {
            keyspaces: map,
            owner,
            counters,
            changed: BTreeSet::new(),
            retired: Vec::new(),
            blob_files: blob_files.into_iter().map(|b| (b.number, b)).collect(),
        }
    }

    /// Applies `edit`: keyspaces defined, tables deleted, tables added (each opened by
    /// `open`), keyspaces dropped, counters — in that order, as recovery always has. Refuses,
    /// with [`Error::Corruption`] at offset 0 of no file (the caller places it with
    /// [`Error::in_file`]), an edit that names a level beyond [`NUM_LEVELS`], moves the next
    /// keyspace id or the last sequence back, defines a keyspace at or above the next id or
    /// under another's name, deletes a table not on the level it names, adds a table that is
    /// live or to a keyspace that does not exist (or one `open` gives nothing for), drops
    /// the default keyspace, a missing one or one that still has tables, adds a blob file that
    /// is live or drops one that is not. After an error the
    /// builder is part-way through the edit: drop it.
    pub fn apply(
        &mut self,
        edit: &VersionEdit,
        mut open: impl FnMut(&TableMeta) -> Option<T>,
    ) -> Result<()> {
        let bad = |what: String| Error::bad_bytes(0, what);
        self.changed.clear();
        self.retired.clear();
        // The edit format allows more levels than the engine has.
        if let Some(&level) = edit
            .deleted
            .iter()
            .map(|(l, _)| l)
            .chain(edit.added.iter().map(|(l, _)| l))
            .find(|&&l| l >= NUM_LEVELS)
        {
            return Err(bad(format!("edit names level {level}; this engine has {NUM_LEVELS}")));
        }
        if let Some(next) = edit.next_keyspace_id {
            // Ids are never reused: a counter that went back would hand out the id of a
            // keyspace that exists, or of a dropped one whose writes a WAL may still hold.
            let now = self.counters.next_keyspace_id;
            if next < now {
                return Err(bad(format!("next keyspace id goes back from {now} to {next}")));
            }
            self.counters.next_keyspace_id = next;
        }
        for def in &edit.keyspaces {
            if def.id == DEFAULT_KEYSPACE {
                // Its recorded settings; the decoder gives it its name.
                if let Some(k) = self.keyspaces.get_mut(&DEFAULT_KEYSPACE) {
                    k.def = def.clone();
                }
                continue;
            }
            if def.id >= self.counters.next_keyspace_id {
                return Err(bad(format!("edit defines keyspace {} out of range", def.id)));
            }
            if self.keyspaces.values().any(|k| k.def.name == def.name && k.def.id != def.id) {
                return Err(bad(format!("two keyspaces are named {:?}", def.name)));
            }
            self.keyspaces
                .entry(def.id)
                .and_modify(|k| k.def = def.clone())
                .or_insert_with(|| Keyspace::new(def.clone()));
        }
        let mut deleted = Vec::new();
        for &(level, number) in &edit.deleted {
            let found = self.owner.get(&number).and_then(|id| {
                let tables = &mut self.keyspaces.get_mut(id)?.levels[level];
                let at = tables.iter().position(|t| t.meta().number == number)?;
                Some((*id, tables.remove(at)))
            });
            let Some((id, table)) = found else {
                return Err(bad(format!(
                    "edit deletes table {number} which is not on level {level}"
                )));
            };
            self.owner.remove(&number);
            self.changed.insert(id);
            deleted.push(table);
        }
        for (level, meta) in &edit.added {
            let Some(k) = self.keyspaces.get_mut(&meta.keyspace) else {
                return Err(bad(format!(
                    "edit adds table {} to keyspace {}, which does not exist",
                    meta.number, meta.keyspace
                )));
            };
            // The engine never names one file twice. Deletions name a table by level and
            // number only, so a later edit deleting one of two entries could not say which:
            // a dropped keyspace's deletions, replayed, would strip the other keyspace.
            if self.owner.contains_key(&meta.number) {
                return Err(bad(format!("edit adds table {}, which is already live", meta.number)));
            }
            let Some(table) = open(meta) else {
                return Err(bad(format!("edit adds table {}, which is not open", meta.number)));
            };
            k.levels[*level].push(table);
            self.owner.insert(meta.number, meta.keyspace);
            self.changed.insert(meta.keyspace);
        }
        let owner = &self.owner;
        self.retired.extend(deleted.into_iter().filter(|t| !owner.contains_key(&t.meta().number)));
        for id in &edit.dropped_keyspaces {
            match self.keyspaces.get(id) {
                Some(k) if *id != DEFAULT_KEYSPACE && k.levels.iter().all(Vec::is_empty) => {
                    self.keyspaces.remove(id);
                }
                _ => {
                    return Err(bad(format!(
                        "edit drops keyspace {id}, which is the default, does not exist, or \
                         still has tables"
                    )))
                }
            }
        }
        for b in &edit.added_blobs {
            if self.blob_files.insert(b.number, *b).is_some() {
                return Err(bad(format!(
                    "edit adds blob file {}, which is already live",
                    b.number
                )));
            }
        }
        for number in &edit.dropped_blobs {
            if self.blob_files.remove(number).is_none() {
                return Err(bad(format!("edit drops blob file {number}, which is not live")));
            }
        }
        let c = &mut self.counters;
        if let (Some(new), Some(old)) = (edit.last_seq, c.last_seq) {
            // The engine never records a lower last sequence than before (`VersionSet` keeps
            // the maximum): writes after a lower one would be numbered below data already in
            // the tables, and hidden by it.
            if new < old {
                return Err(bad(format!("last sequence goes back from {old} to {new}")));
            }
        }
        c.log_number = edit.log_number.or(c.log_number);
        c.next_file_number = edit.next_file_number.or(c.next_file_number);
        c.last_seq = edit.last_seq.or(c.last_seq);
        c.clock_mark = c.clock_mark.max(edit.clock_mark.unwrap_or(0));
        Ok(())
    }

    /// The counters as the applied edits left them.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The live keyspaces, by id (the default keyspace first).
    pub fn keyspaces(&self) -> impl Iterator<Item = &Keyspace<T>> {
        self.keyspaces.values()
    }

    /// Keyspace `id`, unless it does not exist (or was dropped).
    pub fn keyspace(&self, id: KeyspaceId) -> Option<&Keyspace<T>> {
        self.keyspaces.get(&id)
    }

    /// True if table `number` is live, in any keyspace.
    pub fn is_live(&self, number: u64) -> bool {
        self.owner.contains_key(&number)
    }

    /// True if the last edit applied deleted or added a table of keyspace `id`.
    pub fn changed(&self, id: KeyspaceId) -> bool {
        self.changed.contains(&id)
    }

    /// The tables the last edit applied deleted for good (not those it moved between
    /// levels): the engine marks their files obsolete.
    pub fn retired(&self) -> &[T] {
        &self.retired
    }

    /// The live blob files, by number.
    pub fn blob_files(&self) -> &BTreeMap<u64, BlobFileMeta> {
        &self.blob_files
    }

    /// The keyspaces, by id, the counters and the live blob files, by number.
    #[allow(clippy::type_complexity)]
    pub fn into_parts(
        self,
    ) -> (BTreeMap<KeyspaceId, Keyspace<T>>, Counters, BTreeMap<u64, BlobFileMeta>) {
        (self.keyspaces, self.counters, self.blob_files)
    }
}

/// Puts a level's tables in the order reads need: L0 newest first ([`l0_newest_first`]: its
/// tables may overlap, and lookups stop at the first version found), every other level by
/// smallest key (its tables do not overlap, and lookups search it).
pub fn lookup_order<T: TableHandle>(level: usize, tables: &mut [T]) {
    if level == 0 {
        tables.sort_by(|a, b| l0_newest_first(a.meta(), b.meta()));
    } else {
        tables.sort_by(|a, b| key::compare_internal(&a.meta().smallest, &b.meta().smallest));
    }
}
