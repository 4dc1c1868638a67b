//! The engine's state: per keyspace a [`Tree`] of active memtable, immutable memtables and
//! current version, all of it one immutable [`DbState`] behind an `ArcSwap`. Readers load it
//! without a lock; every change builds a new value and swaps it in while holding
//! `state_lock`, and every change to the tables goes through [`DbInner::install`], which
//! writes the manifest first.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{lock_mutex as lock, DbInner};
use crate::version::edit::{KeyspaceId, VersionEdit};
use crate::version::set::{TableFile, Version};
use crate::Result;
use bloomkv_tree::compact::picker::{stall_tables, Policy};
pub(crate) use bloomkv_tree::tree::{Mem, Tree};

/// The engine's state at one moment: one [`Tree`] per live keyspace, the default keyspace
/// first, the rest by id. Never mutated: replaced whole.
#[derive(Debug)]
pub(crate) struct DbState {
    pub trees: Vec<Arc<Tree>>,
}

impl DbState {
    /// The default keyspace's tree (always there: it cannot be dropped).
    #[inline]
    pub(crate) fn default_tree(&self) -> &Arc<Tree> {
        &self.trees[0]
    }

    /// Keyspace `id`'s tree, unless it was dropped.
    #[inline]
    pub(crate) fn tree(&self, id: KeyspaceId) -> Option<&Arc<Tree>> {
        self.trees.iter().find(|t| t.id == id)
    }

    /// Immutable memtables per keyspace (the same for every keyspace).
    pub(crate) fn imm_len(&self) -> usize {
        self.default_tree().imm.len()
    }

    /// The most L0 tables any keyspace has: what write stalls go by (see
    /// `picker::stall_tables`).
    pub(crate) fn max_l0_tables(&self, policy: &Policy) -> usize {
        self.trees.iter().map(|t| stall_tables(t, policy)).max().unwrap_or(0)
    }

    /// This state with `f` applied to every tree.
    pub(crate) fn map_trees(&self, mut f: impl FnMut(&Tree) -> Tree) -> DbState {
        DbState { trees: self.trees.iter().map(|t| Arc::new(f(t))).collect() }
    }
}

/// The blob files that tables of `cur` reference and that none will once `edit` applies:
/// the edit drops them from the manifest (tables carry their references in their records,
/// so this needs no file read).
fn unreferenced_blobs(cur: &DbState, edit: &VersionEdit) -> Vec<u64> {
    let before: std::collections::BTreeSet<u64> =
        cur.trees.iter().flat_map(|t| t.version.blobs.0.keys().copied()).collect();
    if before.is_empty() {
        return Vec::new();
    }
    let deleted = |level: usize, number: u64| edit.deleted.contains(&(level, number));
    let mut after: std::collections::BTreeSet<u64> = std::collections::BTreeSet::new();
    for tree in cur.trees.iter().filter(|t| !edit.dropped_keyspaces.contains(&t.id)) {
        for (level, t) in tree.version.all_tables() {
            if !deleted(level, t.meta.number) {
                after.extend(t.meta.blob_refs.iter().map(|r| r.file));
            }
        }
    }
    for (_, m) in &edit.added {
        after.extend(m.blob_refs.iter().map(|r| r.file));
    }
    before.difference(&after).copied().collect()
}

impl DbInner {
    pub(crate) fn load_state(&self) -> Arc<DbState> {
        self.state.load_full()
    }

    /// Makes `edit` durable in the manifest and installs the versions it produces: the one
    /// place a flush, a compaction, an ingest or a keyspace's creation or drop changes the
    /// tree. `opened` holds the readers of the tables the edit adds (to any keyspace);
    /// `flushed` is the WAL number of the immutable memtables the edit makes redundant,
    /// dropped from every keyspace in the same state swap, so a reader sees their writes in
    /// exactly one of the two. An edit the next open would refuse is refused, with nothing
    /// written or changed. Tables the edit deletes are marked obsolete: their files go
    /// when the last version, snapshot or iterator using them does. (Recovery builds its first
    /// versions before the engine exists and records them in a new manifest's snapshot
    /// instead.)
    pub(crate) fn install(
        &self,
        edit: &mut VersionEdit,
        opened: &[Arc<TableFile>],
        flushed: Option<u64>,
    ) -> Result<()> {
        // The manifest is written under the state lock, so the manifest and the in-memory
        // state change in the same order.
        let _g = lock(&self.state_lock);
        let cur = self.state.load();
        edit.dropped_blobs = unreferenced_blobs(&cur, edit);
        let mut versions = lock(&self.versions);
        let tables = cur.trees.iter().map(|t| (t.id, &*t.version));
        // Refused (an edit the next open would refuse): nothing was written, and the state
        // stays as it was.
        let applied = versions.apply(edit, tables, opened)?;
        if let Err(e) = versions.log(edit, &applied) {
            // Whether the edit reached the disk is unknown, and the manifest refuses further
            // edits: whatever asked for this one (a flush, a compaction, an ingest, a
            // keyspace's creation or drop) fails, and so does every write after it, until
            // `Db::resume` writes a new manifest or the database is reopened. Going on would
            // acknowledge writes the manifest may not be able to keep.
            self.set_bg_error(e.clone());
            return Err(e);
        }
        drop(versions);
        // A reader loads the state before the sequence number and relies on every table in
        // it holding nothing newer (DESIGN.md, "Reading at a sequence number"), so the edit's
        // last sequence is visible before its tables are. Flushes and compactions only hold
        // writes that were already published; an ingest's tables carry the sequence number it
        // reserved, which no write has: the flush of the memtable ending at it publishes it
        // here, before the ingest installs.
        if let Some(seq) = edit.last_seq {
            self.visible_seq.fetch_max(seq, Ordering::AcqRel);
        }
        // Held until the new state is stored: see `LiveTransactions::begin`.
        let (oldest_live, _live) = self.live_transactions.oldest();
        let history_from = match flushed {
            Some(wal) => self.history_from(&cur, wal).max(oldest_live),
            None => oldest_live,
        };
        for t in applied.retired() {
            t.mark_obsolete();
        }
        // They go when the last table holding them does, in whatever version or view.
        for number in &edit.dropped_blobs {
            if let Some(b) = cur.trees.iter().find_map(|t| t.version.blobs.get(*number)) {
                b.mark_obsolete();
            }
        }
        let version_of = |id| {
            let levels = applied.keyspace(id).map(|k| k.levels.clone());
            Arc::new(levels.map_or_else(Version::empty, Version::new))
        };
        let mut trees = Vec::with_capacity(cur.trees.len() + edit.keyspaces.len());
        for tree in &cur.trees {
            if applied.keyspace(tree.id).is_none() {
                continue;
            }
            let touched = applied.changed(tree.id);
            let redefined = edit.keyspaces.iter().find(|d| d.id == tree.id);
            // The last transaction that needed the oldest flushed memtables may have ended.
            let released = tree.history.last().is_some_and(|m| m.wal_number < history_from);
            if !touched && flushed.is_none() && !released && redefined.is_none() {
                trees.push(tree.clone());
                continue;
            }
            let mut t = Tree::clone(tree);
            if touched {
                t.version = version_of(t.id);
            }
            let gone = flushed.and_then(|wal| {
                let at = t.imm.iter().position(|m| m.wal_number == wal)?;
                Some(t.imm.remove(at))
            });
            t.history.retain(|m| m.wal_number >= history_from);
            if let Some(m) = gone.filter(|m| m.wal_number >= history_from) {
                t.history.insert(0, m);
            }
            if let Some(def) = redefined {
                t.opts = def.opts.clone();
            }
            trees.push(Arc::new(t));
        }
        for def in &edit.keyspaces {
            if cur.tree(def.id).is_none() {
                // A new keyspace starts with empty memtables in step with the others'.
                let extractor = def.opts.prefix_extractor;
                let empty =
                    |m: &Mem| Mem { table: Arc::new(m.table.successor(extractor)), ..m.clone() };
                trees.push(Arc::new(Tree {
                    id: def.id,
                    name: def.name.as_str().into(),
                    opts: def.opts.clone(),
                    mem: empty(&cur.default_tree().mem),
                    imm: cur.default_tree().imm.iter().map(empty).collect(),
                    history: Vec::new(),
                    version: version_of(def.id),
                }));
            }
        }
        self.store_state(DbState { trees });
        Ok(())
    }

    /// The oldest WAL number whose memtables the byte bound lets stay in the history once the
    /// memtables of segment `flushed` join it: the newest are kept while the ones newer than
    /// them (every keyspace's together) hold less than `memtable_history_bytes`.
    fn history_from(&self, cur: &DbState, flushed: u64) -> u64 {
        let limit = self.opts.memtable_history_bytes;
        // Every keyspace's history holds the same segments (a new keyspace's, only the
        // newest of them), so the default keyspace's lists them all.
        let flushed = std::iter::once(flushed);
        let segments = flushed.chain(cur.default_tree().history.iter().map(|m| m.wal_number));
        let bytes_of = |wal: u64| -> usize {
            let of_tree = |t: &Arc<Tree>| {
                let m = t.imm.iter().chain(&t.history).find(|m| m.wal_number == wal);
                m.map_or(0, |m| m.table.approximate_bytes())
            };
            cur.trees.iter().map(of_tree).sum()
        };
        let (mut newer, mut from) = (0, u64::MAX);
        for wal in segments {
            if newer >= limit {
                break;
            }
            newer += bytes_of(wal);
            from = wal;
        }
        from
    }

    /// Replaces the state with `f(current)`, serialised with every other state change.
    pub(crate) fn swap_state(&self, f: impl FnOnce(&DbState) -> DbState) {
        let _g = lock(&self.state_lock);
        let cur = self.state.load();
        self.store_state(f(&cur));
    }

    /// Replaces the state (under `state_lock`), `state_changes` odd meanwhile.
    fn store_state(&self, next: DbState) {
        self.state_changes.fetch_add(1, Ordering::SeqCst);
        self.state.store(Arc::new(next));
        self.state_changes.fetch_add(1, Ordering::SeqCst);
    }
}
