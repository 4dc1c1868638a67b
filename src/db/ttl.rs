//! Expiring values: where the write path stamps them with the clock, and where compaction
//! looks for tables whose data has expired.
//!
//! Reads treat an expired value as a tombstone in the one place each read path resolves a
//! version (`read::resolve`, `VisibleIter`); compaction drops it in its filter stage.

use std::time::Duration;

use super::{write, DbInner};
use crate::batch::{check_entry_size, WriteBatch};
use crate::clock::ttl_millis;
use crate::version::edit::KeyspaceId;
use crate::Result;

/// Turns the batch's puts with a time to live, and its plain puts into keyspaces with a
/// default time to live, into expiring puts at the clock's time now: what is logged and
/// applied carries absolute expiries, so a replay after a crash expires them when a live
/// database would have.
pub(crate) fn stamp(inner: &DbInner, batch: &mut WriteBatch) {
    let state = inner.state.load();
    let ttl_of = |id| state.tree(id).and_then(|t| t.opts.default_ttl).map(ttl_millis);
    let any_default_ttl = state.trees.iter().any(|t| t.opts.default_ttl.is_some());
    if batch.needs_stamp(any_default_ttl, |id| ttl_of(id).is_some()) {
        *batch = batch.stamped(inner.clock.now(), ttl_of);
    }
}

/// Writes `key → value` living `ttl` into `keyspace` with the database's default
/// durability, after the checks `write::write_one` makes for a put.
pub(crate) fn put_with_ttl(
    inner: &DbInner,
    keyspace: KeyspaceId,
    key: &[u8],
    value: &[u8],
    ttl: Duration,
    live: impl FnOnce() -> Result<()>,
) -> Result<()> {
    inner.check_writable()?;
    crate::clock::check_ttl("ttl", ttl)?;
    check_entry_size(key, value)?;
    live()?;
    write::check_batch_bytes(inner, key.len() + value.len() + crate::key::EXPIRY_LEN)?;
    let ttl = ttl_millis(ttl);
    write::write(inner, inner.opts.sync_writes, false, |b| b.put_ttl_to(keyspace, key, ttl, value))
}
