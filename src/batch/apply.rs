//! Applying a written batch to the memtables.

use std::sync::Arc;

use super::{BatchOp, WriteBatch};
use crate::blob::{BlobFile, BlobRef};
use crate::key::{SeqNo, ValueKind};
use crate::version::edit::KeyspaceId;

impl WriteBatch {
    /// Applies every operation at its sequence number (the i-th at `sequence() + i`) to the
    /// memtable `mem_of` gives for its keyspace; an op whose keyspace has none (dropped
    /// meanwhile) is skipped, as the drop would have removed it. Returns the bytes of keys
    /// and values written.
    ///
    /// A put of a value in a blob file of its own holds the file `blob_of` gives for its
    /// number in the memtable before its entry goes in; one it gives none for is skipped
    /// (the write path stages every file it references, and recovery checks each is there).
    pub(crate) fn insert_into<'m>(
        &self,
        mem_of: impl Fn(KeyspaceId) -> Option<&'m crate::memtable::MemTable>,
        blob_of: impl Fn(u64) -> Option<Arc<BlobFile>>,
    ) -> u64 {
        self.insert_collapsing(mem_of, blob_of, |_, _, _, _, _| None, |_, _, _, _, _| false)
    }

    /// [`WriteBatch::insert_into`], asking `collapse` of each merge operand (keyspace,
    /// memtable, key, sequence number, operand) for a value to insert as a put in its place
    /// (`Options::max_successive_merges`), and offering each plain put (keyspace, memtable,
    /// key, sequence number, value, which lies in [`WriteBatch::data`]) to `by_ref`, which
    /// returns true if it inserted the put itself (as a reference to where it was logged).
    pub(crate) fn insert_collapsing<'m>(
        &self,
        mem_of: impl Fn(KeyspaceId) -> Option<&'m crate::memtable::MemTable>,
        blob_of: impl Fn(u64) -> Option<Arc<BlobFile>>,
        mut collapse: impl FnMut(
            KeyspaceId,
            &crate::memtable::MemTable,
            &[u8],
            SeqNo,
            &[u8],
        ) -> Option<Vec<u8>>,
        mut by_ref: impl FnMut(KeyspaceId, &crate::memtable::MemTable, &[u8], SeqNo, &[u8]) -> bool,
    ) -> u64 {
        let mut bytes = 0;
        let mut last: Option<(KeyspaceId, Option<&crate::memtable::MemTable>)> = None;
        for (seq, (keyspace, op)) in (self.sequence()..).zip(self.iter()) {
            let mem = match last {
                Some((k, m)) if k == keyspace => m,
                _ => {
                    let m = mem_of(keyspace);
                    last = Some((keyspace, m));
                    m
                }
            };
            let Some(mem) = mem else { continue };
            let (a, b) = match op {
                BatchOp::Put { key, value } => {
                    if !by_ref(keyspace, mem, key, seq, value) {
                        mem.insert(key, seq, ValueKind::Put, value);
                    }
                    (key, value)
                }
                BatchOp::PutExpiring { key, stored } => {
                    mem.insert(key, seq, ValueKind::PutExpiring, stored);
                    (key, stored)
                }
                BatchOp::Merge { key, operand } => {
                    match collapse(keyspace, mem, key, seq, operand) {
                        Some(value) => mem.insert(key, seq, ValueKind::Put, &value),
                        None => mem.insert(key, seq, ValueKind::Merge, operand),
                    }
                    (key, operand)
                }
                BatchOp::MergeExpiring { key, stored } => {
                    mem.insert(key, seq, ValueKind::MergeExpiring, stored);
                    (key, stored)
                }
                // Turned into expiring puts before any batch is applied (`stamp_expiry`).
                BatchOp::PutTtl { .. } => continue,
                BatchOp::Delete { key } => {
                    mem.insert(key, seq, ValueKind::Delete, &[]);
                    (key, &[][..])
                }
                BatchOp::DeleteRange { start, end } => {
                    mem.delete_range(start, end, seq);
                    (start, end)
                }
                BatchOp::BlobPut { key, reference } => {
                    let file = BlobRef::decode(reference).ok().and_then(|r| blob_of(r.file));
                    let Some(file) = file else { continue };
                    mem.hold_blob(file);
                    mem.insert(key, seq, ValueKind::BlobPut, reference);
                    (key, reference)
                }
                // The ingest's tables hold what was written at `seq`.
                BatchOp::Reserved => continue,
            };
            bytes += (a.len() + b.len()) as u64;
        }
        bytes
    }
}
