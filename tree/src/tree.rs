//! [`Tree`]: one keyspace's memtables and tables at one moment, as every read and every
//! flush or compaction sees them.

use std::sync::Arc;

use crate::key::SeqNo;
use crate::memtable::MemTable;
use crate::options::KeyspaceOptions;
use crate::version::edit::KeyspaceId;
use crate::version::set::Version;

/// A memtable and the WAL segment that holds its writes.
#[derive(Debug, Clone)]
pub struct Mem {
    pub table: Arc<MemTable>,
    pub wal_number: u64,
    /// Once frozen: the last sequence number its WAL segment holds (0 while active). A flush
    /// records it as durable, not just the newest sequence number its tables hold: writes to
    /// a keyspace dropped meanwhile are in the segment but in no table, and the manifest must
    /// still reach the next segment's first sequence number without a gap.
    pub last_seq: SeqNo,
    /// Once frozen: its WAL segment was synced whole when it was switched out, so its bytes
    /// are durable and final, and a flush may keep it as a blob file. False for a segment
    /// whose writer failed (what reached the device is unknown) and while active.
    pub sealed: bool,
    /// Once frozen: where its WAL segment's records end (0 while active), the size of the
    /// blob file the segment becomes if a flush keeps it.
    pub wal_len: u64,
}

/// One keyspace's part of the engine state: its memtables and its tables. Never mutated:
/// replaced whole.
///
/// Every keyspace's memtables switch together (a write buffer shared by all keyspaces, one
/// WAL segment per switch), so `mem` and `imm` line up across the trees of a `DbState`:
/// the i-th immutable memtable of every tree holds the writes of the same WAL segment.
#[derive(Debug, Clone)]
pub struct Tree {
    pub id: KeyspaceId,
    pub name: Arc<str>,
    /// How this keyspace's tables are built.
    pub opts: KeyspaceOptions,
    /// The memtable receiving writes.
    pub mem: Mem,
    /// Memtables waiting to be flushed, newest first.
    pub imm: Vec<Mem>,
    /// Flushed memtables kept, newest first, only for transactions' commits to check what
    /// was written after their snapshots (`Options::memtable_history_bytes`), and only
    /// those a live transaction may need (`LiveTransactions`): never read.
    pub history: Vec<Mem>,
    /// The tables.
    pub version: Arc<Version>,
}

impl Tree {
    /// What combines this keyspace's merge operands.
    pub fn merger(&self) -> crate::merge::Merger {
        crate::merge::Merger::new(&self.opts.merge_operator, self.name.clone())
    }

    /// A tree with nothing in it, for readers that have no keyspace to read.
    pub fn empty() -> Tree {
        Tree {
            id: crate::version::edit::DEFAULT_KEYSPACE,
            name: "".into(),
            opts: KeyspaceOptions::default(),
            mem: Mem {
                table: Arc::new(MemTable::new()),
                wal_number: 0,
                last_seq: 0,
                sealed: false,
                wal_len: 0,
            },
            imm: Vec::new(),
            history: Vec::new(),
            version: Arc::new(Version::empty()),
        }
    }

    /// The blob files this tree's values may lie in: its version's, and those its memtables
    /// hold for values written straight to a file of their own, not yet in a version.
    pub fn blobs(&self) -> crate::blob::BlobFiles {
        let mut held = self.mems().flat_map(|m| m.table.held_blobs()).peekable();
        if held.peek().is_none() {
            return self.version.blobs.clone();
        }
        let mut all = (*self.version.blobs.0).clone();
        for b in held {
            all.entry(b.meta.number).or_insert(b);
        }
        crate::blob::BlobFiles(Arc::new(all))
    }

    /// The value `r` names, read as through [`Tree::blobs`] without gathering the files:
    /// from the version's blob files, else from those a memtable holds.
    pub fn read_blob(&self, r: &crate::blob::BlobRef) -> crate::Result<crate::Value> {
        if let Some(f) = self.version.blobs.get(r.file) {
            return f.read(r);
        }
        match self.mems().find_map(|m| m.table.held_blob(r.file)) {
            Some(f) => f.read(r),
            // Not live: the set's error names the reference.
            None => self.version.blobs.read(r),
        }
    }

    /// The memtables, newest first.
    // Inline: every point read in the engine walks these (`read::search`, inlined there), and
    // an out-of-line call across the crates shows in a missing-key lookup's instruction count.
    #[inline]
    pub fn mems(&self) -> impl Iterator<Item = &Mem> {
        std::iter::once(&self.mem).chain(&self.imm)
    }

    /// The memtables and then the flushed ones kept as history, newest first: every write
    /// of the WAL segments from the oldest one's on.
    pub fn mems_and_history(&self) -> impl Iterator<Item = &Mem> {
        self.mems().chain(&self.history)
    }

    /// True if a range tombstone visible at `read_seq` deletes the version of `key` written
    /// at `seq`: the check every read makes on a value it found (a few flag checks when no
    /// range tombstone exists).
    #[inline]
    pub fn range_deleted(&self, key: &[u8], seq: SeqNo, read_seq: SeqNo) -> bool {
        // Plain loops, not `mems().any(..)`: this runs on every found value.
        if self.mem.table.range_deleted(key, seq, read_seq) {
            return true;
        }
        for m in &self.imm {
            if m.table.range_deleted(key, seq, read_seq) {
                return true;
            }
        }
        !self.version.range_dels.is_empty() && self.version.range_dels.covers(key, seq, read_seq)
    }

    /// Every range-tombstone set a reader of this tree must apply (for scans, which check
    /// each key they yield against them).
    pub fn range_tombstones(&self) -> Vec<Arc<crate::range_del::Fragments>> {
        let mut sets: Vec<_> = self.mems().flat_map(|m| m.table.range_tombstone_sets()).collect();
        if !self.version.range_dels.is_empty() {
            sets.push(self.version.range_dels.clone());
        }
        sets
    }
}
