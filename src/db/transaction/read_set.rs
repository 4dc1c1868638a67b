//! What a transaction read, and its validation at the commit (see `transaction/mod.rs`).

use std::sync::Arc;

use super::{hidden, PerKeyspace};
use crate::batch::BatchOp;
use crate::db::{DbInner, DbState};
use crate::key::SeqNo;
use crate::version::edit::KeyspaceId;
use crate::version::set::DEFAULT_KEYSPACE_NAME;
use crate::{Error, Result, WriteBatch};

/// What a transaction read, handed to the write path to be validated at commit.
#[derive(Default)]
pub(crate) struct ReadSet {
    /// The snapshot's sequence number.
    pub(super) seq: SeqNo,
    /// The WAL number of the memtable active at the snapshot: writes after the snapshot are
    /// in it or in newer ones.
    pub(super) wal: u64,
    /// `ingests_done` before the snapshot was taken: the ingests numbered above it may be
    /// missing from the snapshot.
    pub(super) ingests_done: u64,
    pub(super) keyspaces: PerKeyspace<Reads>,
    /// The keyspaces written, and their names (`None`: the default keyspace's), which must
    /// still exist at the commit.
    pub(super) written: Vec<(KeyspaceId, Option<Arc<str>>)>,
}

#[derive(Default)]
pub(super) struct Reads {
    pub(super) name: Option<Arc<str>>,
    /// The keys read, in the order read until [`Reads::seal`] sorts them (a `Vec` and one sort
    /// at the commit cost far less than a set's node per key).
    pub(super) keys: Vec<Vec<u8>>,
    /// Half-open ranges scanned.
    pub(super) ranges: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Reads {
    /// Sorts and deduplicates the keys, for [`Reads::touched_by`]; done before the commit
    /// reaches the write path, by the committing thread.
    pub(super) fn seal(&mut self) {
        self.keys.sort_unstable();
        self.keys.dedup();
    }

    fn holds_key(&self, key: &[u8]) -> bool {
        self.keys.binary_search_by(|k| k.as_slice().cmp(key)).is_ok()
    }

    /// True if `op` writes to something read (the keys sealed).
    fn touched_by(&self, op: BatchOp<'_>) -> bool {
        match op {
            BatchOp::Put { key, .. }
            | BatchOp::PutExpiring { key, .. }
            | BatchOp::PutTtl { key, .. }
            | BatchOp::Merge { key, .. }
            | BatchOp::MergeExpiring { key, .. }
            | BatchOp::BlobPut { key, .. }
            | BatchOp::Delete { key } => self.holds_key(key) || hidden(&self.ranges, key),
            BatchOp::DeleteRange { start, end } => {
                start < end
                    && (self
                        .keys
                        .get(self.keys.partition_point(|k| k.as_slice() < start))
                        .is_some_and(|k| k.as_slice() < end)
                        || self
                            .ranges
                            .iter()
                            .any(|(s, e)| s.as_slice() < end && start < e.as_slice()))
            }
            BatchOp::Reserved => false,
        }
    }

    fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.ranges.is_empty()
    }
}

impl ReadSet {
    /// `Ok` if nothing read was written after the snapshot, judged against `state` (whose
    /// memtables hold every write numbered before the group) and the batches `earlier` in
    /// the group; the error to refuse the commit with otherwise. Called by the write leader.
    pub(crate) fn validate<'b>(
        &self,
        inner: &DbInner,
        state: &DbState,
        earlier: impl Iterator<Item = &'b WriteBatch>,
    ) -> Result<()> {
        for (id, name) in &self.written {
            if state.tree(*id).is_none() {
                let name = name.as_deref().unwrap_or(DEFAULT_KEYSPACE_NAME);
                return Err(Error::KeyspaceDropped { name: name.to_string() });
            }
        }
        if self.keyspaces.iter().all(|(_, r)| r.is_empty()) {
            return Ok(());
        }
        inner.ingest_log_lock().check(self, self.ingests_done)?;
        for batch in earlier {
            for (id, op) in batch.iter() {
                if self.keyspaces.get(id).is_some_and(|r| r.touched_by(op)) {
                    return Err(Error::Conflict);
                }
            }
        }
        for (id, reads) in self.keyspaces.iter() {
            let Some(tree) = state.tree(id) else {
                let name = reads.name.as_deref().unwrap_or(DEFAULT_KEYSPACE_NAME);
                return Err(Error::KeyspaceDropped { name: name.to_string() });
            };
            // Memtables are flushed, and leave the history, oldest first: if the oldest left
            // is newer than the one active at the snapshot, that one is gone, and with it the
            // record of what was written after the snapshot.
            if tree.mems_and_history().last().map_or(true, |m| m.wal_number > self.wal) {
                return Err(Error::Conflict);
            }
            let mems = || {
                let after = tree.mems_and_history().take_while(|m| m.wal_number >= self.wal);
                after.map(|m| &*m.table)
            };
            let newer = |k: &[u8], hash| mems().any(|m| m.newest_write(k, hash) > Some(self.seq));
            if reads.keys.iter().any(|k| newer(k, crate::filter::hash_key(k))) {
                return Err(Error::Conflict);
            }
            let scanned =
                |(s, e): &(Vec<u8>, Vec<u8>)| mems().any(|m| m.written_after(s, e, self.seq));
            if reads.ranges.iter().any(scanned) {
                return Err(Error::Conflict);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads(keys: &[&str], ranges: &[(&str, &str)]) -> Reads {
        let mut r = Reads {
            name: None,
            keys: keys.iter().map(|k| k.as_bytes().to_vec()).collect(),
            ranges: ranges
                .iter()
                .map(|(s, e)| (s.as_bytes().to_vec(), e.as_bytes().to_vec()))
                .collect(),
        };
        r.seal();
        r
    }

    /// What the leader asks of each op of the batches ahead of a transaction in its group:
    /// every op that writes a key read, or into a range scanned, is found; no other is.
    #[test]
    fn ops_ahead_in_the_group_are_matched_against_what_was_read() {
        let r = reads(&["b", "m"], &[("d", "f")]);
        let put = |k: &'static str| BatchOp::Put { key: k.as_bytes(), value: b"v" };
        let delete = |k: &'static str| BatchOp::Delete { key: k.as_bytes() };
        let range = |s: &'static str, e: &'static str| BatchOp::DeleteRange {
            start: s.as_bytes(),
            end: e.as_bytes(),
        };
        for op in [put("b"), delete("m"), put("d"), delete("ez"), range("a", "c"), range("m", "n")]
        {
            assert!(r.touched_by(op), "{op:?}");
        }
        for op in [range("c", "d\0"), range("e", "g"), range("l", "m\0"), range("c", "e")] {
            assert!(r.touched_by(op), "{op:?}");
        }
        for op in
            [put("a"), delete("c"), put("f"), range("b\0", "d"), range("f", "m"), range("c", "d")]
        {
            assert!(!r.touched_by(op), "{op:?}");
        }
        assert!(!r.touched_by(range("z", "a")), "an empty range writes nothing");
        assert!(!r.touched_by(BatchOp::Reserved));
    }
}
