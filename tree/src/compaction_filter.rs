//! Compaction filters: a keyspace's callback that decides, as compaction rewrites each value,
//! whether to keep it, remove it or replace it.

use std::sync::Arc;

/// What a [`CompactionFilter`] decides for one value.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decision {
    /// Keep the value as it is.
    Keep,
    /// Remove the key: reads no longer find it. Where an older version of the key may lie
    /// in a deeper level, a tombstone takes the value's place so that the older version
    /// does not reappear; otherwise the entry is simply dropped.
    Remove,
    /// Replace the value with this one (at most [`crate::MAX_VALUE_BYTES`]). The key keeps
    /// its sequence number: to every later reader it is as if this had been written then.
    ChangeValue(Vec<u8>),
}

/// A keyspace's compaction filter: asked about each value compaction writes, as RocksDB's
/// `CompactionFilter` and fjall's are. Typical uses: dropping data whose value says it has
/// expired, purging a tenant's keys, rewriting values into a newer encoding — all without
/// reading and deleting through the write path.
///
/// Set with [`crate::options::KeyspaceOptions::compaction_filter`] (or
/// `Options::compaction_filter` for the default keyspace). The manifest records its
/// [`name`](CompactionFilter::name) only, as a callback cannot be recorded: give it again at
/// every open (and, for a named keyspace, to `Db::keyspace`); an open without it
/// fails. Compactions that run while it is not set — before a named keyspace is opened
/// again after a reopen, say — keep everything, which is always safe.
///
/// # When it is asked, and what it never sees
///
/// - Only when compaction rewrites tables: never at flush (a flush's entries reach it once
///   compaction first rewrites their table: merged with other L0 tables, or into L1), nor
///   for a table that compaction moves down a level whole; `Db::compact` rewrites
///   every table. It is asked about each key's newest version in the compaction, once per
///   compaction (so again in a later one, as the key moves down).
/// - Never about tombstones, nor about a value that a range deletion (of any level or
///   memtable, written before the compaction began) covers: such a value is already gone
///   for every reader, and is left to compaction's own rules.
/// - What it decides never changes what an existing `Snapshot`, iterator or cursor
///   reads: they hold the tables they were taken from (the way compaction already drops
///   overwritten versions without disturbing them). Reads that start after the compaction
///   see its decisions.
/// - A removal never brings back an older version of the key: see [`Decision::Remove`].
/// - Never about an expired value (`Db::put_with_ttl`): compaction drops it first,
///   as if the filter had removed it. A value that has not expired is shown without its
///   expiry, and a replacement keeps the expiry.
/// - Never about a merge operand (`Db::merge`): it sees the value compaction makes
///   of a key's operands once it can combine them with what lies beneath (see
///   [`crate::merge::MergeOperator`]), and the value beneath operands it cannot combine yet. Removing
///   that value makes the operands combine with nothing, as a delete would.
///
/// `level` is the level the compaction writes into (0 when L0 tables are merged with each
/// other, see `events::CompactionReason::L0Merge`). Compactions run on background
/// threads, and one compaction may call it from several threads at once (see
/// `Options::max_subcompactions`); hence `Send + Sync`. It should be quick and must
/// not call back into the database.
///
/// # Failures
///
/// The filter fails on a value when `filter` panics (the panic is caught) or gives a
/// replacement larger than [`crate::MAX_VALUE_BYTES`]. The value is then kept as it was, as
/// if the filter had said [`Decision::Keep`], and the compaction goes on: the failure is
/// counted (`Stats::compaction_filter_failed`, per keyspace too) and reported once
/// the compaction is installed, with the first such key and the reason
/// (`events::EventListener::on_compaction_filter_error`, and a `warn` log). The
/// filter is asked again about the value in a later compaction. A filter that fails on some
/// value every time so never stops the database, nor holds its compactions back.
///
/// With [`crate::options::KeyspaceOptions::stop_on_compaction_filter_error`] (or
/// `Options::stop_on_compaction_filter_error` for the default keyspace) set, a
/// failure abandons the compaction instead (its partial output deleted, its input tables
/// untouched, so no data is lost or changed) and fails it with
/// [`crate::Error::CompactionFilter`], which stops the database as any failed background
/// work does: writes fail with [`crate::Error::Background`] until `Db::resume` or
/// a reopen (reads go on) — and again at the next compaction that meets the value, for as
/// long as the filter fails on it.
///
/// ```
/// # fn main() -> bloomkv::Result<()> {
/// use std::sync::Arc;
/// use bloomkv::{CompactionFilter, Db, Decision, Options, Readable};
///
/// /// Drops the keys of purged tenants, whose keys start with "purged/".
/// struct Purge;
/// impl CompactionFilter for Purge {
///     fn filter(&self, _level: usize, key: &[u8], _value: &[u8]) -> Decision {
///         if key.starts_with(b"purged/") {
///             Decision::Remove
///         } else {
///             Decision::Keep
///         }
///     }
/// }
///
/// let dir = tempfile::tempdir().unwrap();
/// let db = Db::open(dir.path(), Options::new().compaction_filter(Arc::new(Purge)))?;
/// db.put("purged/a", "1")?;
/// db.put("kept/b", "2")?;
/// db.compact()?;
/// assert_eq!(db.get("purged/a")?, None);
/// assert_eq!(db.get("kept/b")?.as_deref(), Some(&b"2"[..]));
/// assert_eq!(db.stats().compaction_filter_removed, 1);
/// # Ok(()) }
/// ```
pub trait CompactionFilter: Send + Sync {
    /// A name the manifest records for the keyspace, as RocksDB's `Name()`: an open that
    /// gives a filter of another name, or none, fails with [`crate::Error::SettingMismatch`]
    /// unless it sets `change_settings` (see [`crate::options::KeyspaceOptions::change_settings`]).
    /// Name a filter by what it decides, and rename it when that changes.
    ///
    /// The default is empty, an unnamed filter: the manifest then records only that the
    /// keyspace has one, and opens check only that one is given. (A type's name would not
    /// do as a default: it changes when the type moves, and between compiler versions.)
    fn name(&self) -> &str {
        ""
    }

    /// Decides what becomes of the value `value` of `key` as compaction writes it into
    /// `level`.
    fn filter(&self, level: usize, key: &[u8], value: &[u8]) -> Decision;
}

/// A keyspace's filter as its options hold it: options compare equal when they hold the
/// same filter object (a callback has no other identity).
#[derive(Clone, Default)]
pub struct FilterSlot(pub Option<Arc<dyn CompactionFilter>>);

impl PartialEq for FilterSlot {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }
}

impl std::fmt::Debug for FilterSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Some(CompactionFilter)" } else { "None" })
    }
}
