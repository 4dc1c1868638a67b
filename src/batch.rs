//! Write batches: a group of puts, deletes and range deletes applied atomically.
//!
//! # Encoding
//!
//! A batch's bytes are exactly the payload of its write-ahead-log record, so committing a
//! batch costs no re-encoding and replaying the log decodes records straight into batches:
//!
//! ```text
//! seq    u64 little-endian   sequence number of the first operation (the i-th gets seq + i)
//! count  u32 little-endian   number of operations
//! ops    count times:
//!          kind  u8          0 = delete, 1 = put (the values of `ValueKind`),
//!                            2 = range delete, 3 = reserved, 4 = expiring put,
//!                            6 = merge operand; plus 0x80
//!                            if a keyspace id follows
//!          keyspace varint   (only with 0x80) the keyspace the op writes to; without it,
//!                            the default keyspace (0)
//!          klen  varint, key bytes          (a range delete's start; not for reserved)
//!          vlen  varint, value bytes        (puts, operands; a range delete's end,
//!                                           exclusive)
//! ```
//!
//! An expiring put's value bytes are the entry's stored value: the expiry, `u64`
//! little-endian milliseconds since the Unix epoch, then the user's value (so `vlen` is at
//! least 8). Only builds that know expiring puts write kind 4, and only for a database that
//! was given one; older builds refuse such a record as corrupt rather than misread it.
//!
//! A merge operand's value bytes are the operand as given to `merge`. Only builds that know
//! merge operands write kind 6; older builds refuse such a record as corrupt. A merge into a
//! keyspace with a default time to live is logged as kind 7, whose value bytes are the
//! entry's stored value: the expiry and the time written (`u64` little-endian milliseconds
//! each), then the operand; older builds refuse it as corrupt.
//!
//! A batch being built may also hold kind 5, a put with a time to live (8 bytes of
//! milliseconds in place of the expiry). It never reaches a log: the write path turns each
//! into kind 4 with the clock's time added (and a plain put into a keyspace with a default
//! time to live likewise) before logging, and a log record holding kind 5 is corrupt.
//!
//! A reserved op takes a sequence number and changes nothing: an ingest logs one, alone in
//! its batch, to claim the number its tables' entries carry while writes after it go on
//! (see `db::ingest`).
//!
//! The count in the header lets a decoder check that the record holds exactly the
//! operations it claims, so a record cut short at an operation boundary is still caught.
//! Empty keys and empty values are allowed, as in LevelDB: nothing in the engine gives the
//! empty key a special meaning.

use std::sync::Arc;

use crate::coding::{put_bytes, put_varint, Decoder};
use crate::key::{SeqNo, ValueKind, MAX_KEY_BYTES, MAX_VALUE_BYTES};
use crate::key_range::{half_open, prefix_bounds};
use crate::version::edit::{KeyspaceId, DEFAULT_KEYSPACE};
use crate::{Error, KeyRange, Keyspace, Result};

/// The kind byte of a range deletion (after `ValueKind`'s 0 and 1).
const OP_DELETE_RANGE: u8 = 2;

/// The kind byte of a sequence number reserved for an ingest: no keyspace, key or value.
const OP_RESERVED: u8 = 3;

/// The kind byte of an expiring put: the value is the expiry (8 bytes) and the user's value.
const OP_PUT_EXPIRING: u8 = ValueKind::PutExpiring as u8 + 2;

/// The kind byte of a put with a time to live, in a batch not yet written (never logged):
/// the value is the time to live in milliseconds (8 bytes) and the user's value.
const OP_PUT_TTL: u8 = 5;

/// The kind byte of a merge operand.
const OP_MERGE: u8 = 6;

/// The kind byte of a merge operand stamped with an expiry and its write time.
const OP_MERGE_EXPIRING: u8 = 7;

/// Set in the kind byte of an op on a keyspace other than the default one: the keyspace id
/// follows as a varint. Ops on the default keyspace are encoded as before keyspaces existed.
const IN_KEYSPACE: u8 = 0x80;

/// One operation of a batch, as [`WriteBatch::iter`] yields it. Not part of the stable API.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchOp<'a> {
    /// `key → value`.
    Put {
        /// The key.
        key: &'a [u8],
        /// The value.
        value: &'a [u8],
    },
    /// `key → value` expiring at `expiry` (milliseconds since the Unix epoch); `stored` is
    /// the entry's stored value (the expiry, then the value).
    PutExpiring {
        /// The key.
        key: &'a [u8],
        /// The expiry followed by the value.
        stored: &'a [u8],
    },
    /// `key → value` with a time to live, in a batch not yet written: `stored` holds the
    /// time to live in milliseconds (8 bytes), then the value.
    PutTtl {
        /// The key.
        key: &'a [u8],
        /// The time to live followed by the value.
        stored: &'a [u8],
    },
    /// A merge operand for `key` ([`crate::Db::merge`]).
    Merge {
        /// The key.
        key: &'a [u8],
        /// The operand.
        operand: &'a [u8],
    },
    /// A merge operand for `key` into a keyspace with a default time to live, stamped when
    /// written: `stored` is the expiry and the write time (8 bytes each), then the operand.
    MergeExpiring {
        /// The key.
        key: &'a [u8],
        /// The stamp followed by the operand.
        stored: &'a [u8],
    },
    /// A deletion of `key`.
    Delete {
        /// The key.
        key: &'a [u8],
    },
    /// A deletion of every key in `start..end`.
    DeleteRange {
        /// First key deleted.
        start: &'a [u8],
        /// First key kept after the range (exclusive).
        end: &'a [u8],
    },
    /// A sequence number taken by an ingest, whose tables hold the entries written at it;
    /// it changes nothing here. Always the only op of its batch, on no keyspace.
    Reserved,
}

/// Why [`WriteBatch::check`] refused a batch.
#[derive(Debug)]
pub(crate) enum BadOp {
    /// A key or value over the limits ([`Error::KeyTooLarge`] or [`Error::ValueTooLarge`]).
    Size(Error),
    /// An op on a keyspace the caller does not know.
    Keyspace(KeyspaceId),
}

/// Size of the `seq | count` header.
const HEADER_LEN: usize = 12;

/// Checks a range delete's bound, which may be one byte longer than a key (see
/// `key_range::MAX_RANGE_BOUND_BYTES`).
pub(crate) fn check_range_bound(bound: &[u8]) -> Result<()> {
    if bound.len() > crate::key_range::MAX_RANGE_BOUND_BYTES {
        return Err(Error::KeyTooLarge { len: bound.len() });
    }
    Ok(())
}

/// Checks one operation against [`MAX_KEY_BYTES`] and [`MAX_VALUE_BYTES`].
pub(crate) fn check_entry_size(key: &[u8], value: &[u8]) -> Result<()> {
    if key.len() > MAX_KEY_BYTES {
        return Err(Error::KeyTooLarge { len: key.len() });
    }
    if value.len() > MAX_VALUE_BYTES {
        return Err(Error::ValueTooLarge { len: value.len() });
    }
    Ok(())
}

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

    /// Adds `key → value` in `keyspace`. A batch may write to any number of keyspaces of one
    /// database, atomically; written to another database than the handles' own, it fails
    /// with [`Error::ForeignKeyspace`] and writes nothing.
    ///
    /// ```
    /// # fn main() -> bloomkv::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
    /// let users = db.keyspace("users", bloomkv::KeyspaceOptions::default())?;
    /// let by_email = db.keyspace("by_email", bloomkv::KeyspaceOptions::default())?;
    /// let mut batch = bloomkv::WriteBatch::new();
    /// batch.put_in(&users, "u1", "ada@example.com");
    /// batch.put_in(&by_email, "ada@example.com", "u1");
    /// db.write(&batch, &bloomkv::WriteOptions::default())?; // both or neither
    /// assert_eq!(by_email.get("ada@example.com")?.as_deref(), Some(&b"u1"[..]));
    /// # Ok(()) }
    /// ```
    ///
    /// # Panics
    ///
    /// If the batch already holds `u32::MAX` operations.
    pub fn put_in(&mut self, keyspace: &Keyspace, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
        self.note_handle(keyspace);
        self.put_to(keyspace.id(), key.as_ref(), value.as_ref());
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
    /// use bloomkv::{Db, ManualClock, Options, WriteBatch, WriteOptions};
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

    /// Adds `key → value` in `keyspace` that expires `ttl` after the batch is written, as
    /// [`WriteBatch::put_with_ttl`].
    ///
    /// # Panics
    ///
    /// If the batch already holds `u32::MAX` operations.
    pub fn put_with_ttl_in(
        &mut self,
        keyspace: &Keyspace,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        ttl: std::time::Duration,
    ) {
        self.note_handle(keyspace);
        let ttl = crate::clock::ttl_millis(ttl);
        self.put_ttl_to(keyspace.id(), key.as_ref(), ttl, value.as_ref());
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
    /// use bloomkv::{Db, Options, U64Add, WriteBatch, WriteOptions};
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

    /// Adds a merge operand for `key` in `keyspace`, as [`WriteBatch::merge`].
    ///
    /// # Panics
    ///
    /// If the batch already holds `u32::MAX` operations.
    pub fn merge_in(
        &mut self,
        keyspace: &Keyspace,
        key: impl AsRef<[u8]>,
        operand: impl AsRef<[u8]>,
    ) {
        self.note_handle(keyspace);
        self.merge_to(keyspace.id(), key.as_ref(), operand.as_ref());
    }

    /// Adds a deletion of `key` in `keyspace`, as [`WriteBatch::delete`].
    ///
    /// # Panics
    ///
    /// If the batch already holds `u32::MAX` operations.
    pub fn delete_in(&mut self, keyspace: &Keyspace, key: impl AsRef<[u8]>) {
        self.note_handle(keyspace);
        self.delete_to(keyspace.id(), key.as_ref());
    }

    /// Adds a deletion of every key in `range` in `keyspace`, as [`WriteBatch::delete_range`].
    ///
    /// # Panics
    ///
    /// If the batch already holds `u32::MAX` operations.
    pub fn delete_range_in(&mut self, keyspace: &Keyspace, range: impl KeyRange) {
        self.note_handle(keyspace);
        let (start, end) = half_open(range);
        self.delete_range_to(keyspace.id(), &start, &end);
    }

    /// Adds a deletion of every key that starts with `prefix` in `keyspace`, as
    /// [`WriteBatch::delete_prefix`].
    ///
    /// # Panics
    ///
    /// If the batch already holds `u32::MAX` operations.
    pub fn delete_prefix_in(&mut self, keyspace: &Keyspace, prefix: impl AsRef<[u8]>) {
        self.delete_range_in(keyspace, prefix_bounds(prefix.as_ref()));
    }

    fn note_handle(&mut self, keyspace: &Keyspace) {
        let h = &mut self.handles;
        // Batches touch few keyspaces, mostly the one of the op before.
        if h.names.last().map_or(true, |(id, _)| *id != keyspace.id())
            && !h.names.iter().any(|(id, _)| *id == keyspace.id())
        {
            h.names.push((keyspace.id(), keyspace.name().into()));
        }
        if h.instance == 0 {
            h.instance = keyspace.instance();
            h.first = Some(keyspace.name().into());
        } else if h.instance != keyspace.instance() && h.mixed.is_none() {
            h.mixed = Some(keyspace.name().into());
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

    pub(crate) fn merge_to(&mut self, keyspace: KeyspaceId, key: &[u8], operand: &[u8]) {
        self.op_header(OP_MERGE, keyspace);
        put_bytes(&mut self.data, key);
        put_bytes(&mut self.data, operand);
    }

    pub(crate) fn put_to(&mut self, keyspace: KeyspaceId, key: &[u8], value: &[u8]) {
        self.op_header(ValueKind::Put as u8, keyspace);
        put_bytes(&mut self.data, key);
        put_bytes(&mut self.data, value);
    }

    /// Adds `key → value` expiring at `expiry` (milliseconds since the Unix epoch).
    pub(crate) fn put_expiring_to(
        &mut self,
        keyspace: KeyspaceId,
        key: &[u8],
        expiry: u64,
        value: &[u8],
    ) {
        self.op_header(OP_PUT_EXPIRING, keyspace);
        self.put_prefixed_value(key, expiry, value);
    }

    /// Adds `key → value` living `ttl_ms` milliseconds from when the batch is written.
    pub(crate) fn put_ttl_to(
        &mut self,
        keyspace: KeyspaceId,
        key: &[u8],
        ttl_ms: u64,
        value: &[u8],
    ) {
        self.op_header(OP_PUT_TTL, keyspace);
        self.put_prefixed_value(key, ttl_ms, value);
        self.relative_ttls = true;
    }

    fn put_prefixed_value(&mut self, key: &[u8], head: u64, value: &[u8]) {
        put_bytes(&mut self.data, key);
        put_varint(&mut self.data, (value.len() + crate::key::EXPIRY_LEN) as u64);
        self.data.extend_from_slice(&head.to_le_bytes());
        self.data.extend_from_slice(value);
    }

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

    pub(crate) fn delete_to(&mut self, keyspace: KeyspaceId, key: &[u8]) {
        self.op_header(ValueKind::Delete as u8, keyspace);
        put_bytes(&mut self.data, key);
    }

    pub(crate) fn delete_range_to(&mut self, keyspace: KeyspaceId, start: &[u8], end: &[u8]) {
        if start >= end {
            return;
        }
        self.op_header(OP_DELETE_RANGE, keyspace);
        put_bytes(&mut self.data, start);
        put_bytes(&mut self.data, end);
    }

    fn op_header(&mut self, kind: u8, keyspace: KeyspaceId) {
        self.bump_count();
        if keyspace == DEFAULT_KEYSPACE {
            self.data.push(kind);
        } else {
            self.data.push(kind | IN_KEYSPACE);
            put_varint(&mut self.data, keyspace.into());
        }
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

    /// A batch that only takes one sequence number, for an ingest to claim it in the log.
    pub(crate) fn reserved() -> WriteBatch {
        let mut b = WriteBatch::new();
        b.data.push(OP_RESERVED);
        b.bump_count();
        b
    }

    /// Number of operations.
    pub fn len(&self) -> usize {
        self.count() as usize
    }

    /// True when the batch holds no operation.
    pub fn is_empty(&self) -> bool {
        self.count() == 0
    }

    /// Whether the batch is one put or delete (plain or expiring): an entry that reads
    /// never combine with the versions beneath it, so it may be applied beside other writes
    /// (`db/in_flight.rs`).
    pub(crate) fn is_single_overwrite(&self) -> bool {
        // The first op's kind byte, read without decoding the op.
        let kind = |k: u8| k & !IN_KEYSPACE;
        self.count() == 1
            && self.data.get(HEADER_LEN).is_some_and(|&k| {
                [ValueKind::Put as u8, ValueKind::Delete as u8, OP_PUT_EXPIRING].contains(&kind(k))
            })
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

impl WriteBatch {
    /// Checks every operation, in one pass, against [`MAX_KEY_BYTES`] and
    /// [`MAX_VALUE_BYTES`] and for a keyspace other than the default one that `known`
    /// accepts, reporting the first that fails.
    pub(crate) fn check(&self, known: impl Fn(KeyspaceId) -> bool) -> Result<(), BadOp> {
        for (keyspace, op) in self.iter() {
            match op {
                BatchOp::Put { key, value } => check_entry_size(key, value),
                BatchOp::Merge { key, operand } => check_entry_size(key, operand),
                BatchOp::MergeExpiring { key, stored } => {
                    check_entry_size(key, stored.get(crate::key::MERGE_STAMP_LEN..).unwrap_or(&[]))
                }
                BatchOp::PutTtl { stored, .. }
                    if crate::key::split_expiring(stored).is_some_and(|(ttl, _)| ttl == 0) =>
                {
                    Err(crate::Error::InvalidArgument("ttl must not be zero".into()))
                }
                BatchOp::PutExpiring { key, stored } | BatchOp::PutTtl { key, stored } => {
                    check_entry_size(key, stored.get(crate::key::EXPIRY_LEN..).unwrap_or(&[]))
                }
                BatchOp::Delete { key } => check_entry_size(key, &[]),
                BatchOp::DeleteRange { start, end } => {
                    check_range_bound(start).and_then(|()| check_range_bound(end))
                }
                BatchOp::Reserved => Ok(()),
            }
            .map_err(BadOp::Size)?;
            if keyspace != DEFAULT_KEYSPACE && !known(keyspace) {
                return Err(BadOp::Keyspace(keyspace));
            }
        }
        Ok(())
    }

    /// Applies every operation at its sequence number (the i-th at `sequence() + i`) to the
    /// memtable `mem_of` gives for its keyspace; an op whose keyspace has none (dropped
    /// meanwhile) is skipped, as the drop would have removed it. Returns the bytes of keys
    /// and values written.
    pub(crate) fn insert_into<'m>(
        &self,
        mem_of: impl Fn(KeyspaceId) -> Option<&'m crate::memtable::MemTable>,
    ) -> u64 {
        self.insert_collapsing(mem_of, |_, _, _, _, _| None)
    }

    /// [`WriteBatch::insert_into`], asking `collapse` of each merge operand (keyspace,
    /// memtable, key, sequence number, operand) for a value to insert as a put in its place
    /// (`Options::max_successive_merges`).
    pub(crate) fn insert_collapsing<'m>(
        &self,
        mem_of: impl Fn(KeyspaceId) -> Option<&'m crate::memtable::MemTable>,
        mut collapse: impl FnMut(
            KeyspaceId,
            &crate::memtable::MemTable,
            &[u8],
            SeqNo,
            &[u8],
        ) -> Option<Vec<u8>>,
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
                    mem.insert(key, seq, ValueKind::Put, value);
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
                // The ingest's tables hold what was written at `seq`.
                BatchOp::Reserved => continue,
            };
            bytes += (a.len() + b.len()) as u64;
        }
        bytes
    }

    /// Sets the sequence number of the first operation.
    pub(crate) fn set_sequence(&mut self, seq: SeqNo) {
        self.data[..8].copy_from_slice(&seq.to_le_bytes());
    }

    /// Bytes allocated for the encoding.
    pub(crate) fn capacity(&self) -> usize {
        self.data.capacity()
    }

    /// The encoded batch: the log record payload.
    pub(crate) fn data(&self) -> &[u8] {
        &self.data
    }

    /// Decodes a log record, checking the whole of it: the header, every operation's kind
    /// and lengths, that exactly `count` operations are present and nothing follows them.
    /// Errors are [`Error::Corruption`] with offsets inside the record and no file; the
    /// caller adds the file with [`Error::in_file`].
    pub(crate) fn from_record(data: Vec<u8>) -> Result<WriteBatch> {
        if data.len() < HEADER_LEN {
            return Err(Error::bad_bytes(0, "write batch shorter than its header"));
        }
        let count = crate::coding::get_u32(&data, 8).unwrap_or(0);
        let mut d = Decoder::new(&data[HEADER_LEN..]);
        for i in 0..count {
            let at = (HEADER_LEN + d.position()) as u64;
            let bad = |what: &str| Error::bad_bytes(at, format!("write batch op {i}: {what}"));
            let kind = d.u8().ok_or_else(|| bad("missing (batch has fewer ops than counted)"))?;
            if kind & IN_KEYSPACE != 0 {
                let id = d.varint().ok_or_else(|| bad("bad keyspace id"))?;
                if id == 0 || id > u64::from(KeyspaceId::MAX) {
                    return Err(bad("keyspace id out of range"));
                }
            }
            if kind == OP_RESERVED {
                // Only an ingest writes one, alone in a batch and on no keyspace.
                if count != 1 {
                    return Err(bad("reserved op in a batch of more than one op"));
                }
                continue;
            }
            let kind = kind & !IN_KEYSPACE;
            let has_value = match kind {
                k if k == ValueKind::Put as u8 => true,
                k if k == ValueKind::Delete as u8 => false,
                OP_DELETE_RANGE | OP_PUT_EXPIRING | OP_MERGE | OP_MERGE_EXPIRING => true,
                OP_PUT_TTL => return Err(bad("put with a time to live (never logged)")),
                _ => return Err(bad("unknown kind")),
            };
            let key = d.length_prefixed().ok_or_else(|| bad("bad key length"))?;
            if has_value {
                let value = d.length_prefixed().ok_or_else(|| bad("bad value length"))?;
                // `delete_range` never writes an empty range, and a replay must not meet one.
                if kind == OP_DELETE_RANGE && key >= value {
                    return Err(bad("range delete with start not below end"));
                }
                if kind == OP_PUT_EXPIRING && value.len() < crate::key::EXPIRY_LEN {
                    return Err(bad("expiring put without its 8-byte expiry"));
                }
                if kind == OP_MERGE_EXPIRING && value.len() < crate::key::MERGE_STAMP_LEN {
                    return Err(bad("expiring merge operand without its 16-byte stamp"));
                }
            }
        }
        if !d.is_empty() {
            let at = (HEADER_LEN + d.position()) as u64;
            return Err(Error::bad_bytes(at, "bytes after the last counted op of a write batch"));
        }
        Ok(WriteBatch { data, handles: Handles::default(), relative_ttls: false })
    }
}

impl WriteBatch {
    fn count(&self) -> u32 {
        crate::coding::get_u32(&self.data, 8).unwrap_or(0)
    }

    fn set_count(&mut self, count: u32) {
        self.data[8..HEADER_LEN].copy_from_slice(&count.to_le_bytes());
    }

    fn bump_count(&mut self) {
        let count = self.count().checked_add(1).expect("write batch op count overflow");
        self.set_count(count);
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

/// Iterator over a batch's operations, from [`WriteBatch::iter`].
#[derive(Debug)]
pub struct WriteBatchIter<'a> {
    d: Decoder<'a>,
    left: u32,
}

impl<'a> Iterator for WriteBatchIter<'a> {
    type Item = (KeyspaceId, BatchOp<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        // The batch was validated, so the decoder cannot run short; ending the iteration
        // is the panic-free answer if it somehow did.
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let kind = self.d.u8()?;
        if kind == OP_RESERVED {
            return Some((DEFAULT_KEYSPACE, BatchOp::Reserved));
        }
        let keyspace = match kind & IN_KEYSPACE {
            0 => DEFAULT_KEYSPACE,
            _ => KeyspaceId::try_from(self.d.varint()?).ok()?,
        };
        let kind = kind & !IN_KEYSPACE;
        let key = self.d.length_prefixed()?;
        let op = match kind {
            k if k == ValueKind::Put as u8 => {
                BatchOp::Put { key, value: self.d.length_prefixed()? }
            }
            k if k == ValueKind::Delete as u8 => BatchOp::Delete { key },
            OP_PUT_EXPIRING => BatchOp::PutExpiring { key, stored: self.d.length_prefixed()? },
            OP_PUT_TTL => BatchOp::PutTtl { key, stored: self.d.length_prefixed()? },
            OP_MERGE => BatchOp::Merge { key, operand: self.d.length_prefixed()? },
            OP_MERGE_EXPIRING => BatchOp::MergeExpiring { key, stored: self.d.length_prefixed()? },
            OP_DELETE_RANGE => BatchOp::DeleteRange { start: key, end: self.d.length_prefixed()? },
            _ => return None,
        };
        Some((keyspace, op))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.left as usize))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// An operation as (keyspace, kind byte, key or start, value or end).
    type Op = (KeyspaceId, u8, Vec<u8>, Vec<u8>);
    const PUT: u8 = ValueKind::Put as u8;
    const DELETE: u8 = ValueKind::Delete as u8;

    fn build(ops: &[Op]) -> WriteBatch {
        let mut b = WriteBatch::new();
        for &(keyspace, kind, ref k, ref v) in ops {
            match kind {
                PUT => b.put_to(keyspace, k, v),
                DELETE => b.delete_to(keyspace, k),
                OP_MERGE => b.merge_to(keyspace, k, v),
                OP_RESERVED => b = WriteBatch::reserved(),
                OP_PUT_EXPIRING => {
                    b.op_header(OP_PUT_EXPIRING, keyspace);
                    put_bytes(&mut b.data, k);
                    put_bytes(&mut b.data, v);
                }
                _ => b.delete_range_to(keyspace, k, v),
            }
        }
        b
    }

    fn ops_of(b: &WriteBatch) -> Vec<Op> {
        b.iter()
            .map(|(ks, op)| match op {
                BatchOp::Put { key, value } => (ks, PUT, key.to_vec(), value.to_vec()),
                BatchOp::Delete { key } => (ks, DELETE, key.to_vec(), Vec::new()),
                BatchOp::Merge { key, operand } => (ks, OP_MERGE, key.to_vec(), operand.to_vec()),
                BatchOp::MergeExpiring { key, stored } => {
                    (ks, OP_MERGE_EXPIRING, key.to_vec(), stored.to_vec())
                }
                BatchOp::DeleteRange { start, end } => {
                    (ks, OP_DELETE_RANGE, start.to_vec(), end.to_vec())
                }
                BatchOp::Reserved => (ks, OP_RESERVED, Vec::new(), Vec::new()),
                BatchOp::PutExpiring { key, stored } => {
                    (ks, OP_PUT_EXPIRING, key.to_vec(), stored.to_vec())
                }
                BatchOp::PutTtl { key, stored } => (ks, OP_PUT_TTL, key.to_vec(), stored.to_vec()),
            })
            .collect()
    }

    fn op_strategy() -> impl Strategy<Value = Op> {
        let bytes = || proptest::collection::vec(any::<u8>(), 0..40);
        let keyspace = || prop_oneof![Just(DEFAULT_KEYSPACE), 1..3u32, Just(KeyspaceId::MAX)];
        prop_oneof![
            (keyspace(), bytes(), bytes()).prop_map(|(ks, k, v)| (ks, PUT, k, v)),
            (keyspace(), bytes()).prop_map(|(ks, k)| (ks, DELETE, k, Vec::new())),
            (keyspace(), bytes(), bytes()).prop_map(|(ks, k, v)| (ks, OP_MERGE, k, v)),
            (keyspace(), bytes(), any::<u64>(), bytes()).prop_map(|(ks, k, e, v)| {
                (ks, OP_PUT_EXPIRING, k, crate::key::expiring_value(e, &v))
            }),
            (keyspace(), bytes(), bytes()).prop_filter_map("empty range", |(ks, a, b)| {
                (a != b).then(|| (ks, OP_DELETE_RANGE, a.clone().min(b.clone()), a.max(b)))
            }),
        ]
    }

    /// Which batches may be applied beside other writes: one put or delete, plain or
    /// expiring, in any keyspace; nothing that reads combine or that covers a range, and no
    /// batch of more than one op.
    #[test]
    fn single_overwrites_are_told_from_other_batches() {
        let one = |f: &dyn Fn(&mut WriteBatch)| {
            let mut b = WriteBatch::new();
            f(&mut b);
            (b.is_single_overwrite(), b.has_merge())
        };
        assert_eq!(one(&|b| b.put("k", "v")), (true, false));
        assert_eq!(one(&|b| b.put_to(7, b"k", b"v")), (true, false));
        assert_eq!(one(&|b| b.delete("k")), (true, false));
        assert_eq!(one(&|b| b.delete_to(7, b"k")), (true, false));
        assert_eq!(one(&|b| b.put_expiring_to(7, b"k", 9, b"v")), (true, false));
        assert_eq!(one(&|b| b.put_expiring_to(0, b"k", 9, b"v")), (true, false));
        // Not yet stamped: the write path turns it into an expiring put first.
        assert_eq!(one(&|b| b.put_ttl_to(0, b"k", 9, b"v")), (false, false));
        assert_eq!(one(&|b| b.merge("k", "1")), (false, true));
        assert_eq!(one(&|b| b.merge_to(7, b"k", b"1")), (false, true));
        assert_eq!(one(&|b| b.delete_range("a".."b")), (false, false));
        assert_eq!(one(&|_| ()), (false, false));
        let two_puts = |b: &mut WriteBatch| {
            b.put("k", "v");
            b.put("l", "v");
        };
        assert_eq!(one(&two_puts), (false, false));
        let put_and_merge = |b: &mut WriteBatch| {
            b.put("k", "v");
            b.merge("l", "1");
        };
        assert_eq!(one(&put_and_merge), (false, true));
        assert!(!WriteBatch::reserved().is_single_overwrite());
    }

    #[test]
    fn expiring_puts_are_stamped_and_logged_as_documented() {
        let mut b = WriteBatch::new();
        b.put_with_ttl(b"t", b"v", std::time::Duration::from_millis(5));
        b.put_to(7, b"p", b"w");
        b.put(b"q", b"x");
        assert!(b.needs_stamp(false, |_| false), "a put with a time to live");
        // Keyspace 7 has a default time to live of 100 ms.
        let ttl_of = |ks| (ks == 7).then_some(100);
        let stamped = b.stamped(1000, ttl_of);
        assert!(!stamped.needs_stamp(true, |ks| ttl_of(ks).is_some()));
        let want: Vec<u8> = [
            &[0u8; 8][..],
            &[3, 0, 0, 0],
            &[OP_PUT_EXPIRING, 1, b't', 9],
            &1005u64.to_le_bytes(),
            b"v",
            &[OP_PUT_EXPIRING | IN_KEYSPACE, 7, 1, b'p', 9],
            &1100u64.to_le_bytes(),
            b"w",
            &[ValueKind::Put as u8, 1, b'q', 1, b'x'],
        ]
        .concat();
        assert_eq!(stamped.data(), &want[..]);
        assert_eq!(WriteBatch::from_record(want).unwrap(), stamped);
        // Unstamped, or with a value shorter than its expiry, a log record is corrupt.
        let e = WriteBatch::from_record(b.data().to_vec()).unwrap_err();
        assert!(e.to_string().contains("never logged"), "{e}");
        let short =
            [&[0u8; 8][..], &[1, 0, 0, 0], &[OP_PUT_EXPIRING, 1, b'k', 7], &[0; 7]].concat();
        let e = WriteBatch::from_record(short).unwrap_err();
        assert!(e.to_string().contains("8-byte expiry"), "{e}");
    }

    #[test]
    fn layout_is_the_documented_one() {
        let mut b = WriteBatch::new();
        b.set_sequence(0x0102);
        b.put(b"k", b"vv");
        b.delete(b"");
        b.delete_range("a".."c");
        b.put_to(300, b"x", b"");
        let want: Vec<u8> = [
            &[0x02, 0x01, 0, 0, 0, 0, 0, 0][..],
            &[4, 0, 0, 0],
            &[1, 1, b'k', 2, b'v', b'v'],
            &[0, 0],
            &[2, 1, b'a', 1, b'c'],
            &[0x81, 0xac, 0x02, 1, b'x', 0],
        ]
        .concat();
        assert_eq!(b.data(), &want[..]);
        assert_eq!(b.sequence(), 0x0102);
        assert_eq!(b.approximate_bytes(), want.len());
        assert_eq!(
            ops_of(&b),
            vec![
                (0, PUT, b"k".to_vec(), b"vv".to_vec()),
                (0, DELETE, vec![], vec![]),
                (0, OP_DELETE_RANGE, b"a".to_vec(), b"c".to_vec()),
                (300, PUT, b"x".to_vec(), vec![]),
            ]
        );
    }

    #[test]
    fn clear_resets_everything() {
        let mut b = WriteBatch::new();
        b.set_sequence(9);
        b.put("a", "b");
        b.clear();
        assert!(b.is_empty());
        assert_eq!(b.len(), 0);
        assert_eq!(b, WriteBatch::new());
        assert_eq!(b.iter().count(), 0);
    }

    #[test]
    fn from_record_rejects_specific_damage() {
        let mut b = build(&[(0, PUT, b"key".to_vec(), b"value".to_vec())]);
        b.set_sequence(5);
        let good = b.data().to_vec();

        let mut bad_kind = good.clone();
        bad_kind[HEADER_LEN] = 8;
        let e = WriteBatch::from_record(bad_kind).unwrap_err();
        assert!(matches!(e, Error::Corruption { offset: 12, .. }), "{e}");

        let mut more_counted = good.clone();
        more_counted[8] = 2;
        assert!(WriteBatch::from_record(more_counted).unwrap_err().is_corruption());

        let mut fewer_counted = good.clone();
        fewer_counted[8] = 0;
        assert!(WriteBatch::from_record(fewer_counted).unwrap_err().is_corruption());

        let mut huge_len = good[..HEADER_LEN + 1].to_vec();
        huge_len.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(WriteBatch::from_record(huge_len).unwrap_err().is_corruption());

        let ok = WriteBatch::from_record(good.clone()).unwrap();
        assert_eq!(ok.sequence(), 5);

        // A range delete whose start is not below its end is never written, so it is damage.
        let mut r = WriteBatch::new();
        r.delete_range("a".."b");
        let mut empty_range = r.data().to_vec();
        *empty_range.last_mut().unwrap() = b'a';
        let e = WriteBatch::from_record(empty_range).unwrap_err();
        assert!(e.to_string().contains("start not below end"), "{e}");

        // The default keyspace is never written with an id, and ids are 32-bit.
        for id in [&[0u8][..], &[0x80, 0x80, 0x80, 0x80, 0x10]] {
            let mut forged = good[..HEADER_LEN].to_vec();
            forged.push(0x80 | PUT);
            forged.extend_from_slice(id);
            forged.extend_from_slice(&good[HEADER_LEN + 1..]);
            let e = WriteBatch::from_record(forged).unwrap_err();
            assert!(e.to_string().contains("keyspace id out of range"), "{e}");
        }
    }

    #[test]
    fn reserved_op_takes_a_sequence_number_and_changes_nothing() {
        let mut b = WriteBatch::reserved();
        b.set_sequence(9);
        let want: Vec<u8> = [&[9, 0, 0, 0, 0, 0, 0, 0][..], &[1, 0, 0, 0], &[OP_RESERVED]].concat();
        assert_eq!(b.data(), &want[..]);
        assert_eq!(b.len(), 1);
        let decoded = WriteBatch::from_record(want.clone()).unwrap();
        assert_eq!(decoded.sequence(), 9);
        assert_eq!(decoded.iter().collect::<Vec<_>>(), vec![(0, BatchOp::Reserved)]);
        assert!(decoded.check(|_| false).is_ok());
        let mem = crate::memtable::MemTable::new();
        assert_eq!(decoded.insert_into(|_| Some(&mem)), 0);
        assert!(mem.is_empty());

        let mut trailing = want.clone();
        trailing.push(0);
        let e = WriteBatch::from_record(trailing).unwrap_err();
        assert!(e.to_string().contains("bytes after the last counted op"), "{e}");

        // Never on a keyspace, and never beside another op.
        let mut in_keyspace = want[..HEADER_LEN].to_vec();
        in_keyspace.extend_from_slice(&[OP_RESERVED | IN_KEYSPACE, 1]);
        let e = WriteBatch::from_record(in_keyspace).unwrap_err();
        assert!(e.to_string().contains("unknown kind"), "{e}");
        let mut with_put = build(&[(0, PUT, b"k".to_vec(), b"v".to_vec())]);
        with_put.data.push(OP_RESERVED);
        with_put.bump_count();
        let e = WriteBatch::from_record(with_put.data().to_vec()).unwrap_err();
        assert!(e.to_string().contains("more than one op"), "{e}");
    }

    #[test]
    fn in_file_names_the_log() {
        let e = WriteBatch::from_record(vec![1, 2, 3]).unwrap_err();
        let e = e.in_file(std::path::Path::new("000003.log"), 4096);
        match e {
            Error::Corruption { file, offset, .. } => {
                assert_eq!(file, std::path::Path::new("000003.log"));
                assert_eq!(offset, 4096);
            }
            other => panic!("{other:?}"),
        }
    }

    proptest! {
        #[test]
        fn prop_round_trip(ops in proptest::collection::vec(op_strategy(), 0..30), seq in 0..crate::key::MAX_SEQNO) {
            let mut b = build(&ops);
            b.set_sequence(seq);
            prop_assert_eq!(b.len(), ops.len());
            let decoded = WriteBatch::from_record(b.data().to_vec()).unwrap();
            prop_assert_eq!(decoded.sequence(), seq);
            prop_assert_eq!(ops_of(&decoded), ops);
            prop_assert_eq!(&decoded, &b);
        }

        #[test]
        fn prop_every_truncation_is_corruption(ops in proptest::collection::vec(op_strategy(), 0..10)) {
            let b = build(&ops);
            let data = b.data();
            for cut in 0..data.len() {
                let r = WriteBatch::from_record(data[..cut].to_vec());
                prop_assert!(r.unwrap_err().is_corruption(), "cut at {}", cut);
            }
        }

        #[test]
        fn prop_random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            match WriteBatch::from_record(data.clone()) {
                // Accepted input must be a faithful encoding: re-encoding reproduces it.
                Ok(b) => {
                    let rebuilt = build(&ops_of(&b));
                    prop_assert_eq!(&rebuilt.data()[HEADER_LEN..], &data[HEADER_LEN..]);
                    prop_assert_eq!(rebuilt.len(), b.len());
                }
                Err(e) => prop_assert!(e.is_corruption()),
            }
        }

        #[test]
        fn prop_random_tail_after_valid_header_never_panics(
            count in any::<u32>(),
            tail in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let mut data = vec![0u8; 8];
            data.extend_from_slice(&count.to_le_bytes());
            data.extend_from_slice(&tail);
            if let Err(e) = WriteBatch::from_record(data) {
                prop_assert!(e.is_corruption());
            }
        }
    }
}
