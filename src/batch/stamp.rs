//! Puts with a time to live (and plain puts into keyspaces with a default one) turned into
//! expiring puts at the time of the write, before the batch is logged.

use super::wire::{OP_MERGE_EXPIRING, OP_PUT_EXPIRING, OP_RESERVED};
use super::{BatchOp, WriteBatch};
use crate::coding::put_bytes;
use crate::version::edit::KeyspaceId;

impl WriteBatch {
    /// Whether writing the batch needs the clock: it holds a put with a time to live, or a
    /// plain put into a keyspace `has_ttl` says has a default one. The ops are looked at only
    /// when `any_default_ttl` (some keyspace has one): the common write pays a flag check.
    pub(crate) fn needs_stamp(
        &self,
        any_default_ttl: bool,
        has_ttl: impl Fn(KeyspaceId) -> bool,
    ) -> bool {
        self.relative_ttls
            || any_default_ttl
                && self.iter().any(|(ks, op)| {
                    matches!(op, BatchOp::Put { .. } | BatchOp::Merge { .. }) && has_ttl(ks)
                })
    }

    /// The batch with every put with a time to live, and every plain put into a keyspace
    /// whose default time to live `ttl_of` gives, turned into an expiring put at `now` plus
    /// its time to live (saturating); merges into such a keyspace are stamped likewise.
    pub(crate) fn stamped(
        &self,
        now: u64,
        ttl_of: impl Fn(KeyspaceId) -> Option<u64>,
    ) -> WriteBatch {
        let mut out = WriteBatch::with_capacity(self.data.len() + 8 * self.count() as usize);
        out.data[..8].copy_from_slice(&self.data[..8]);
        for (ks, op) in self.iter() {
            match op {
                BatchOp::Put { key, value } => match ttl_of(ks) {
                    Some(ttl) => out.put_expiring_to(ks, key, now.saturating_add(ttl), value),
                    None => out.put_to(ks, key, value),
                },
                BatchOp::PutTtl { key, stored } => {
                    let (ttl, value) = crate::key::split_expiring(stored).unwrap_or((0, &[]));
                    out.put_expiring_to(ks, key, now.saturating_add(ttl), value);
                }
                // Never in a keyspace with a default time to live (refused when written).
                BatchOp::BlobPut { key, reference } => out.put_blob_ref_to(ks, key, reference),
                BatchOp::PutExpiring { key, stored } => {
                    out.op_header(OP_PUT_EXPIRING, ks);
                    put_bytes(&mut out.data, key);
                    put_bytes(&mut out.data, stored);
                }
                // A merge lives as long past its write as a put would.
                BatchOp::Merge { key, operand } => match ttl_of(ks) {
                    Some(ttl) => {
                        out.op_header(OP_MERGE_EXPIRING, ks);
                        put_bytes(&mut out.data, key);
                        let stored =
                            crate::key::merge_expiring_value(now.saturating_add(ttl), now, operand);
                        put_bytes(&mut out.data, &stored);
                    }
                    None => out.merge_to(ks, key, operand),
                },
                BatchOp::MergeExpiring { key, stored } => {
                    out.op_header(OP_MERGE_EXPIRING, ks);
                    put_bytes(&mut out.data, key);
                    put_bytes(&mut out.data, stored);
                }
                BatchOp::Delete { key } => out.delete_to(ks, key),
                BatchOp::DeleteRange { start, end } => out.delete_range_to(ks, start, end),
                BatchOp::Reserved => {
                    out.data.push(OP_RESERVED);
                    out.bump_count();
                }
            }
        }
        out.handles = self.handles.clone();
        out
    }
}
