//! `Options::max_successive_merges`: a merge written for a key whose newest entries in the
//! active memtable are already that many operands is combined, as the write is applied,
//! with everything beneath it, and inserted as a put of the result.
//!
//! Applied under the WAL's lock (by the group's leader, or a direct write holding it), after
//! every earlier write is in its memtable (a batch with a merge waits for the single writes
//! inserted beside the lock), so the read below sees exactly the history before the operand.
//! The put takes the operand's sequence number and the operands stay beneath it, so older
//! snapshots read what they read before. The WAL keeps the operand: a replay inserts it as an
//! operand, which reads the same.

use std::ops::Bound;

use super::Tree;
use crate::clock::{expired, Clock};
use crate::iter::InternalIterator;
use crate::key::{self, SeqNo, ValueKind, KIND_FOR_SEEK};
use crate::memtable::MemTable;

/// The value to insert as a put in place of `operand`, the merge of `key` at `seq` into
/// `tree`'s active memtable `mem`, if `limit` operands of the key lie on top of that
/// memtable; `None` to insert the operand.
///
/// Also `None`, the operand then written as it is, where a put would read differently or
/// cannot be made: over a live expiring value (the combination changes when it expires), when
/// the operator fails or the result is over the value size limit (every read of the key shows
/// that as it would have), or on a read error.
pub(crate) fn collapse(
    tree: &Tree,
    mem: &MemTable,
    key: &[u8],
    seq: SeqNo,
    operand: &[u8],
    limit: usize,
    clock: &dyn Clock,
) -> Option<Vec<u8>> {
    if limit == 0 || mem.successive_merges(key, limit) < limit {
        return None;
    }
    let before = seq.checked_sub(1)?;
    let mut it = bloomkv_tree::read::sources::merged_sources(
        tree,
        Bound::Included(key),
        Bound::Included(key),
        None,
        bloomkv_tree::read::sources::Judge::Off,
    );
    it.seek(&key::internal_key(key, before, KIND_FOR_SEEK)).ok()?;
    // Newest first.
    let mut operands = vec![operand.to_vec()];
    let mut base = None;
    while it.valid() {
        let p = key::parse_internal_key(it.key())?;
        if p.user_key != key || tree.range_deleted(key, p.seq, before) {
            break;
        }
        match p.kind {
            ValueKind::Merge => operands.push(it.value().to_vec()),
            ValueKind::Put => {
                base = Some(it.value().to_vec());
                break;
            }
            ValueKind::BlobPut => {
                let r = crate::blob::BlobRef::decode(it.value()).ok()?;
                // No result over a base this large fits the limit: leave the operand be.
                if r.len > crate::MAX_VALUE_BYTES as u64 {
                    return None;
                }
                base = Some(tree.blobs().read(&r).ok()?.to_vec());
                break;
            }
            ValueKind::PutExpiring | ValueKind::BlobPutExpiring => {
                match key::split_expiring(it.value()) {
                    Some((expiry, _)) if !expired(expiry, clock.now_millis()) => return None,
                    _ => break,
                }
            }
            ValueKind::Delete => break,
            // Operands that expire with the key: a put of their combination would have to
            // carry their expiry rule too, so they stay operands.
            ValueKind::MergeExpiring => return None,
        }
        it.next().ok()?;
    }
    let oldest_first: Vec<&[u8]> = operands.iter().rev().map(Vec::as_slice).collect();
    let merged = tree.merger().full(key, base.as_deref(), &oldest_first).ok()?;
    (merged.len() <= crate::MAX_VALUE_BYTES).then_some(merged)
}
