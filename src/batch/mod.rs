//! Write batches: a group of puts, deletes and range deletes applied atomically.
//!
//! - `mod.rs`: [`WriteBatch`] and the API that builds it;
//! - `wire.rs`: its encoding, which is also the payload of its write-ahead-log record;
//! - `check.rs`: the checks a batch passes before it is written;
//! - `stamp.rs`: times to live turned into expiries when it is written;
//! - `apply.rs`: inserting a written batch into the memtables.

mod apply;
mod check;
mod stamp;
#[cfg(test)]
mod tests;
mod wire;

use std::sync::Arc;

use crate::coding::Decoder;
use crate::key::SeqNo;
use crate::key_range::{half_open, prefix_bounds};
use crate::version::edit::{KeyspaceId, DEFAULT_KEYSPACE};
use crate::{KeyRange, Result};

// Named only by the rustdoc.
#[cfg(doc)]
use crate::{Error, MAX_KEY_BYTES, MAX_VALUE_BYTES};

pub(crate) use check::{check_entry_size, check_range_bound, BadOp};
pub(crate) use wire::PutValue;
use wire::HEADER_LEN;
pub use wire::{BatchOp, WriteBatchIter};

/// An ordered group of puts, deletes and range deletes that is written to the log as one
/// record and applied atomically: after a crash either all of it is visible or none of it.
///
/// Later operations on the same key win over earlier ones: a put after a range delete that
/// covers its key stands, a put before it is deleted.
///
/// ```
/// use bloomkv::WriteBatch;
///
/// let mut batch = WriteBatch::new();
/// batch.put("apple", "red");
/// batch.put(b"banana", [1u8, 2, 3]);
/// batch.delete("cherry");
/// assert_eq!(batch.len(), 3);
/// assert!(!batch.is_empty());
///
/// batch.clear();
/// assert!(batch.is_empty());
/// ```
pub struct WriteBatch {
    /// Always a valid encoding: built by `put`/`delete`, or checked by `from_record`.
    data: Vec<u8>,
    /// Where the keyspace handles given to `*_in` came from. The encoding names keyspaces by
    /// id only, and ids mean something only in the database that assigned them.
    handles: Handles,
    /// The batch holds a put with a time to live relative to the write (only built here:
    /// a decoded record never does), so writing it needs the clock.
    relative_ttls: bool,
}

/// The databases a batch's keyspace handles belong to.
#[derive(Clone, Default)]
struct Handles {
    /// The opening of the database of the first handle (0: none given).
    instance: u64,
    /// The first handle's keyspace.
    first: Option<Arc<str>>,
    /// The first handle from another database than the first handle's.
    mixed: Option<Arc<str>>,
    /// The keyspaces of the handles given, by id: an error about one (dropped before the
    /// write) names it, which the id in the encoding cannot.
    names: Vec<(KeyspaceId, Arc<str>)>,
}

/// Batches are equal when they hold the same operations (and sequence number).
impl PartialEq for WriteBatch {
    fn eq(&self, other: &Self) -> bool {
        self.data == other.data
    }
}

impl Eq for WriteBatch {}

impl Clone for WriteBatch {
    fn clone(&self) -> Self {
        let (data, handles) = (self.data.clone(), self.handles.clone());
        WriteBatch { data, handles, relative_ttls: self.relative_ttls }
    }
    /// Reuses the allocation: the write path copies every batch into a buffer it keeps.
    fn clone_from(&mut self, source: &Self) {
        self.data.clone_from(&source.data);
        self.handles.clone_from(&source.handles);
        self.relative_ttls = source.relative_ttls;
    }
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        WriteBatch { data: vec![0; HEADER_LEN], handles: Handles::default(), relative_ttls: false }
    }

    /// An empty batch with room for about `bytes` of keys and values, so building it does
    /// not reallocate.
    pub fn with_capacity(bytes: usize) -> Self {
        let mut data = Vec::with_capacity(HEADER_LEN + bytes + 24);
        data.resize(HEADER_LEN, 0);
        WriteBatch { data, handles: Handles::default(), relative_ttls: false }
    }

    /// Adds `key → value`.
    ///
    /// A key longer than [`MAX_KEY_BYTES`] or a value larger than [`MAX_VALUE_BYTES`] is
    /// refused when the batch is written: [`crate::Db::write`] then fails with
    /// [`Error::KeyTooLarge`] or [`Error::ValueTooLarge`] and applies none of the batch.
    ///
    /// # Panics
    ///
    /// If the batch already holds `u32::MAX` operations.
    pub fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
        self.put_to(DEFAULT_KEYSPACE, key.as_ref(), value.as_ref());
    }

    /// Adds `key → value` that expires `ttl` after the batch is written (by the clock of
    /// the database it is written to, [`crate::Options::clock`]): from then on reads do
    /// not find it, and compaction drops it. See [`crate::Db::put_with_ttl`], whose rounding
    /// applies: a zero `ttl` makes [`crate::Db::write`] refuse the batch with
    /// [`Error::InvalidArgument`].
    ///
    /// ```
    /// # fn main() -> bloomkv::Result<()> {
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use bloomkv::{Db, ManualClock, Options, Readable, WriteBatch, WriteOptions};
    ///
    /// let clock = Arc::new(ManualClock::new(0));
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = Db::open(dir.path(), Options::new().clock(clock.clone()))?;
    /// let mut batch = WriteBatch::new();
    /// batch.put_with_ttl("token", "t1", Duration::from_secs(10));
    /// batch.put("user", "ada");
    /// db.write(&batch, &WriteOptions::default())?;
    /// clock.advance(Duration::from_secs(10));
    /// assert_eq!(db.get("token")?, None);
    /// assert!(db.get("user")?.is_some());
    /// # Ok(()) }
    /// ```
    ///
    /// # Panics
    ///
    /// If the batch already holds `u32::MAX` operations.
    pub fn put_with_ttl(
        &mut self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        ttl: std::time::Duration,
    ) {
        let ttl = crate::clock::ttl_millis(ttl);
        self.put_ttl_to(DEFAULT_KEYSPACE, key.as_ref(), ttl, value.as_ref());
    }

    /// Adds a merge operand for `key` (see [`crate::Db::merge`]): the key's value becomes
    /// what the keyspace's [`crate::MergeOperator`] makes of the value beneath and the
    /// operands. Refused when the batch is written if the key or operand is over the
    /// limits, as for [`WriteBatch::put`], if the keyspace has no merge operator
    /// ([`Error::MergeOperatorMissing`]), or if the operator refuses the operand
    /// ([`Error::Merge`], see [`crate::MergeOperator::check_operand`]).
    ///
    /// ```
    /// # fn main() -> bloomkv::Result<()> {
    /// use std::sync::Arc;
    /// use bloomkv::{Db, Options, Readable, U64Add, WriteBatch, WriteOptions};
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = Db::open(dir.path(), Options::new().merge_operator(Arc::new(U64Add)))?;
    /// let mut batch = WriteBatch::new();
    /// batch.merge("visits", U64Add::operand(1));
    /// batch.merge("visits", U64Add::operand(41));
    /// db.write(&batch, &WriteOptions::default())?;
    /// assert_eq!(U64Add::decode(&db.get("visits")?.unwrap()), Some(42));
    /// # Ok(()) }
    /// ```
    ///
    /// # Panics
    ///
    /// If the batch already holds `u32::MAX` operations.
    pub fn merge(&mut self, key: impl AsRef<[u8]>, operand: impl AsRef<[u8]>) {
        self.merge_to(DEFAULT_KEYSPACE, key.as_ref(), operand.as_ref());
    }

    /// Notes that a handle of keyspace `id` named `name`, of the opening `instance` of its
    /// database, wrote to the batch: for errors naming it, and to refuse the batch in
    /// another database (see `Keyspace`'s methods on `WriteBatch`).
    pub(crate) fn note_handle(&mut self, id: KeyspaceId, name: &str, instance: u64) {
        let h = &mut self.handles;
        // Batches touch few keyspaces, mostly the one of the op before.
        if h.names.last().map_or(true, |(i, _)| *i != id) && !h.names.iter().any(|(i, _)| *i == id)
        {
            h.names.push((id, name.into()));
        }
        if h.instance == 0 {
            h.instance = instance;
            h.first = Some(name.into());
        } else if h.instance != instance && h.mixed.is_none() {
            h.mixed = Some(name.into());
        }
    }

    /// The name of keyspace `id`, if the batch was given a handle of it.
    pub(crate) fn keyspace_name(&self, id: KeyspaceId) -> Option<&str> {
        self.handles.names.iter().find(|(i, _)| *i == id).map(|(_, n)| &**n)
    }

    /// The name of a keyspace whose handle does not belong to the opening `instance` of a
    /// database, if the batch was given one.
    pub(crate) fn foreign_keyspace(&self, instance: u64) -> Option<&str> {
        let h = &self.handles;
        if let Some(name) = &h.mixed {
            return Some(name);
        }
        (h.instance != 0 && h.instance != instance).then_some(h.first.as_deref()).flatten()
    }

    /// Adds a deletion of `key`. A key longer than [`MAX_KEY_BYTES`] is refused when the
    /// batch is written, as for [`WriteBatch::put`].
    ///
    /// # Panics
    ///
    /// If the batch already holds `u32::MAX` operations.
    pub fn delete(&mut self, key: impl AsRef<[u8]>) {
        self.delete_to(DEFAULT_KEYSPACE, key.as_ref());
    }

    /// Adds a deletion of every key in `range` — any range expression (`a..b`, `a..=b`,
    /// `a..`, `..b`, `..`, see [`KeyRange`]) — as RocksDB's `DeleteRange`. Keys written
    /// after it in the batch, or later, are not affected. An empty range adds nothing. A
    /// bound more than one byte longer than [`MAX_KEY_BYTES`] is refused when the batch is
    /// written, as for [`WriteBatch::put`].
    ///
    /// A range delete costs one write whatever it covers; readers pay for it only when they
    /// find a value (see `DESIGN.md`, "Range deletes"), and compaction reclaims the space of
    /// the keys it covers.
    ///
    /// ```
    /// let mut batch = bloomkv::WriteBatch::new();
    /// batch.delete_range("user:100".."user:200");
    /// batch.put("user:150", "kept: written after the range delete");
    /// batch.delete_range("b".."a"); // empty: adds nothing
    /// batch.delete_range("log:"..); // every key from "log:" on
    /// batch.delete_range(..="a"); // every key up to and including "a"
    /// assert_eq!(batch.len(), 4);
    /// ```
    ///
    /// # Panics
    ///
    /// If the batch already holds `u32::MAX` operations.
    pub fn delete_range(&mut self, range: impl KeyRange) {
        let (start, end) = half_open(range);
        self.delete_range_to(DEFAULT_KEYSPACE, &start, &end);
    }

    /// Adds a deletion of every key that starts with `prefix` (all keys, for an empty one):
    /// one range delete.
    ///
    /// ```
    /// let mut batch = bloomkv::WriteBatch::new();
    /// batch.delete_prefix("session:42/");
    /// assert_eq!(batch.len(), 1);
    /// ```
    ///
    /// # Panics
    ///
    /// If the batch already holds `u32::MAX` operations.
    pub fn delete_prefix(&mut self, prefix: impl AsRef<[u8]>) {
        self.delete_range(prefix_bounds(prefix.as_ref()));
    }

    /// Number of operations.
    pub fn len(&self) -> usize {
        self.count() as usize
    }

    /// True when the batch holds no operation.
    pub fn is_empty(&self) -> bool {
        self.count() == 0
    }

    /// Whether the batch holds a merge operand.
    pub(crate) fn has_merge(&self) -> bool {
        self.iter().any(|(_, op)| matches!(op, BatchOp::Merge { .. }))
    }

    /// Removes every operation, keeping the allocation for reuse.
    pub fn clear(&mut self) {
        self.data.truncate(HEADER_LEN);
        self.data.fill(0);
        self.handles = Handles::default();
        self.relative_ttls = false;
    }

    /// Size of the encoded batch in bytes, which is what it adds to the log.
    pub fn approximate_bytes(&self) -> usize {
        self.data.len()
    }

    /// Decodes a write-ahead-log record payload (as returned by `LogReader::next_record`)
    /// into a batch, checking all of it (see the module's encoding). For the tool, which
    /// reads WAL segments; the engine's replay uses the same check. Errors are
    /// [`Error::Corruption`] with offsets inside `record` and no file; add the file with
    /// [`Error::in_file`]. Not part of the stable API (the WAL format is internal).
    ///
    /// ```
    /// use bloomkv::batch::BatchOp;
    /// use bloomkv::WriteBatch;
    ///
    /// // seq 7, one op: put "k" -> "v"
    /// let mut record = 7u64.to_le_bytes().to_vec();
    /// record.extend_from_slice(&1u32.to_le_bytes());
    /// record.extend_from_slice(&[1, 1, b'k', 1, b'v']);
    /// let batch = WriteBatch::decode(record).unwrap();
    /// assert_eq!(batch.sequence(), 7);
    /// let ops: Vec<_> = batch.iter().collect();
    /// assert_eq!(ops, vec![(0, BatchOp::Put { key: b"k", value: b"v" })]);
    /// assert!(WriteBatch::decode(vec![0; 5]).unwrap_err().is_corruption());
    /// ```
    #[doc(hidden)]
    pub fn decode(record: Vec<u8>) -> Result<WriteBatch> {
        WriteBatch::from_record(record)
    }

    /// The sequence number of the first operation (the i-th operation has `sequence() + i`).
    /// Zero until the engine assigns one on commit. Not part of the stable API.
    #[doc(hidden)]
    pub fn sequence(&self) -> SeqNo {
        crate::coding::get_u64(&self.data, 0).unwrap_or(0)
    }

    /// The operations in order, each with the keyspace it writes to. Not part of the stable
    /// API.
    #[doc(hidden)]
    pub fn iter(&self) -> WriteBatchIter<'_> {
        WriteBatchIter { d: Decoder::new(&self.data[HEADER_LEN..]), left: self.count() }
    }
}

impl Default for WriteBatch {
    fn default() -> Self {
        WriteBatch::new()
    }
}

impl std::fmt::Debug for WriteBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteBatch")
            .field("sequence", &self.sequence())
            .field("ops", &self.count())
            .field("bytes", &self.data.len())
            .finish()
    }
}
