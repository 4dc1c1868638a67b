//! [`Readable`]: the read API, written once for every type that reads one keyspace — the
//! database ([`Db`], its default keyspace), a [`Keyspace`], a [`Snapshot`], a [`Transaction`]
//! (its keyspace) and a [`TransactionKeyspace`] — and [`ReadCursor`], what their cursors share.
//!
//! The public methods are provided here; each type supplies only what genuinely differs
//! (`sealed::Sealed`): how to read keys, open an iterator or a cursor over bounds, and ask
//! whether prefixes hold keys. `Db`, `Keyspace` and `Snapshot` share one implementation of
//! those (`db::read::ReadSource`, a view taken per read or kept); a transaction's lays its
//! own writes over its snapshot and records what it read.

use std::ops::Bound;

use crate::key_range::{prefix_bounds, KeyRange};
use crate::{Cursor, Result, TransactionCursor, Value};

// Named only by the rustdoc.
#[cfg(doc)]
use crate::{Db, DbIterator, Error, Keyspace, Snapshot, Transaction, TransactionKeyspace};

/// A range's owned bounds, as [`KeyRange::into_bounds`] gives them.
pub(crate) type Bounds = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// A range's bounds borrowed, as [`KeyRange::as_bounds`] gives them: what an iterator is
/// opened with, so that one with nothing to read (an empty short range) copies no key.
pub(crate) type BoundsRef<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);

/// `bounds` borrowed.
pub(crate) fn borrowed(bounds: &Bounds) -> BoundsRef<'_> {
    (bounds.0.as_ref().map(Vec::as_slice), bounds.1.as_ref().map(Vec::as_slice))
}

/// The trait's hidden half: what each reader supplies. Outside the crate it can be neither
/// implemented (the module is private) nor called (no one else can make a [`sealed::Token`]),
/// so methods can be added to [`Readable`] without breaking anyone.
pub(crate) mod sealed {
    use super::{Bounds, BoundsRef};
    use crate::{Readable, Result, Value};
    use bloomkv_tree::read::search::Stored;

    /// Proof that a call to a primitive comes from inside the crate.
    #[derive(Clone, Copy)]
    pub struct Token(());

    pub(crate) const TOKEN: Token = Token(());

    pub trait Sealed {
        /// The newest visible value of `key`.
        fn read_one(&self, _: Token, key: &[u8]) -> Result<Option<Value>>;

        /// [`Sealed::read_one`], leaving a value in a blob file unread.
        fn read_stored(&self, _: Token, key: &[u8]) -> Result<Option<Stored>>;

        /// The newest visible value of each of `keys`, in order, at one sequence number.
        fn read_many<K: AsRef<[u8]>>(&self, _: Token, keys: &[K]) -> Result<Vec<Option<Value>>>;

        /// An iterator over `bounds`; a failure to begin is its first item.
        fn open_iter(&self, _: Token, bounds: BoundsRef<'_>) -> <Self as Readable>::Iter
        where
            Self: Readable;

        /// A cursor over `bounds`; a failure to begin fails every move.
        fn open_cursor(&self, _: Token, bounds: Bounds) -> <Self as Readable>::Cursor
        where
            Self: Readable;

        /// For each of `prefixes`, whether a visible key starts with it.
        fn probe_prefixes<P: AsRef<[u8]>>(&self, _: Token, prefixes: &[P]) -> Result<Vec<bool>>;
    }

    /// Seals [`crate::ReadCursor`].
    pub trait SealedCursor {}
}

use sealed::{Sealed, TOKEN};

/// Reading one keyspace: point reads, scans both ways and cursors, written once for every
/// reader. [`Db`] reads its default keyspace, a [`Keyspace`] its own, a [`Snapshot`] its
/// keyspace as of the moment it was taken, a [`Transaction`] its keyspace (the default one,
/// or the handle's for [`Keyspace::transaction`]) and a [`TransactionKeyspace`]
/// ([`Transaction::keyspace`]) another keyspace of the transaction.
///
/// Bring it into scope to read: `use bloomkv::Readable;`. Code generic over `R: Readable`
/// reads any of them, cursors included ([`ReadCursor`]):
///
/// ```
/// use bloomkv::{Db, Options, ReadCursor, Readable};
///
/// /// The keys from `from` on, at most `n`.
/// fn page<R: Readable>(r: &R, from: &str, n: usize) -> bloomkv::Result<Vec<Vec<u8>>> {
///     let mut cursor = r.cursor(..);
///     cursor.seek(from)?;
///     let mut keys = Vec::new();
///     while let (Some(k), true) = (cursor.key(), keys.len() < n) {
///         keys.push(k.to_vec());
///         cursor.next()?;
///     }
///     Ok(keys)
/// }
///
/// # fn main() -> bloomkv::Result<()> {
/// let dir = tempfile::tempdir().unwrap();
/// let db = Db::open(dir.path(), Options::default())?;
/// for k in ["a", "b", "c"] {
///     db.put(k, "v")?;
/// }
/// let snap = db.snapshot();
/// let mut tx = db.transaction();
/// tx.delete("b")?;
/// assert_eq!(page(&db, "b", 5)?, [b"b", b"c"]);
/// assert_eq!(page(&snap, "a", 2)?, [b"a", b"b"]);
/// assert_eq!(page(&tx, "a", 5)?, [b"a", b"c"]); // the transaction's own delete
/// # Ok(()) }
/// ```
///
/// What differs between readers is when they read and what they report:
///
/// - `Db` and `Keyspace` read the database as it is at each call (an iterator or cursor: as
///   it was when it was made), and judge expiring values by the clock then.
/// - A `Snapshot` reads the moment it was taken, and judges expiry at that moment too.
/// - A `Transaction` reads its snapshot with its own writes over it, and records what it read
///   from the snapshot — each key of `get`, `multi_get` and `contains_key`, the whole range
///   of `range`, `prefix`, `cursor`, `prefixes_exist`, `first_key_value` and
///   `last_key_value`, however far the iterator or cursor went — for the commit to check.
///
/// Every read fails with [`Error::Closed`] once the database is closed, and with
/// [`Error::KeyspaceDropped`] in a keyspace the reader cannot see (dropped, or for a
/// snapshot or a transaction, not yet created when it was taken). Iterators yield such an
/// error as their first and only item; cursors return it from every move.
///
/// A transaction reads another keyspace through a view, `tx.keyspace(&ks)?.get(k)`, rather
/// than through a second set of read methods taking the keyspace: the view is a `Readable`
/// like any other, so generic code takes it as it takes a `Db`. Writes keep taking the
/// keyspace per call ([`Transaction::put_in`], [`crate::WriteBatch::put_in`], as fjall's
/// `batch.insert(&ks, k, v)`): one transaction or batch is one atomic set of writes across
/// keyspaces, which a view per keyspace would split up.
///
/// The trait is sealed: only this crate implements it, so methods can be added to it.
pub trait Readable: Sealed {
    /// The iterator of [`Readable::range`] and [`Readable::prefix`]: a [`DbIterator`] for
    /// `Db`, `Keyspace` and `Snapshot`, a [`crate::TransactionIter`] for a transaction.
    type Iter: DoubleEndedIterator<Item = Result<(Vec<u8>, Value)>>;

    /// The cursor of [`Readable::cursor`]: a [`Cursor`], or a [`TransactionCursor`].
    type Cursor: ReadCursor;

    /// The newest value of `key`, or `None` if it is absent, deleted or expired.
    ///
    /// ```
    /// use bloomkv::Readable;
    /// # fn main() -> bloomkv::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
    /// db.put(b"user:1", b"ada")?;
    /// assert_eq!(db.get(b"user:1")?.as_deref(), Some(&b"ada"[..]));
    /// assert_eq!(db.get("user:2")?, None);
    /// # Ok(()) }
    /// ```
    #[inline]
    fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        self.read_one(TOKEN, key.as_ref())
    }

    /// The newest value of each of `keys`, in the order given (repeats allowed), all read at
    /// one sequence number: the same answers as calling [`Readable::get`] for each key with
    /// no write in between, but faster for many keys. The keys are looked up in batches
    /// whose filter probes overlap their cache misses, and a data block several keys need is
    /// read once. Blocks that are in neither the block cache nor the operating system's page
    /// cache are read several at a time, on up to 16 threads of the database's own
    /// (`bloomkv-read-N`, started the first time a call needs them, ended by
    /// [`Db::close`]), so their waits for the disk overlap; the calling thread waits for them.
    /// A transaction answers the keys it wrote itself and reads the others together.
    ///
    /// Takes any iterator of keys: a slice or array of them, a `Vec`, or a `map` over
    /// something else. Fails (for the whole call) if any table read fails.
    ///
    /// ```
    /// use bloomkv::Readable;
    /// # fn main() -> bloomkv::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
    /// db.put("apple", "red")?;
    /// db.put("cherry", "dark red")?;
    /// let got = db.multi_get(&["cherry", "banana", "apple"])?;
    /// let got: Vec<_> = got.iter().map(|v| v.as_ref().map(|v| v.as_ref())).collect();
    /// assert_eq!(got, [Some(&b"dark red"[..]), None, Some(&b"red"[..])]);
    /// let ids = [7u32, 8, 9];
    /// let got = db.multi_get(ids.iter().map(|id| format!("user:{id}")))?;
    /// assert_eq!(got, [None, None, None]);
    ///
    /// let snap = db.snapshot();
    /// db.put("apple", "green")?;
    /// let got = snap.multi_get(["apple", "apple"])?; // as of the snapshot
    /// assert!(got.iter().all(|v| v.as_deref() == Some(&b"red"[..])));
    /// # Ok(()) }
    /// ```
    #[inline]
    fn multi_get<K: AsRef<[u8]>>(
        &self,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<Vec<Option<Value>>> {
        let keys: Vec<K> = keys.into_iter().collect();
        self.read_many(TOKEN, &keys)
    }

    /// Whether `key` has a value: `get(key)` is `Some`.
    ///
    /// ```
    /// use bloomkv::Readable;
    /// # fn main() -> bloomkv::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
    /// db.put("k", "")?; // an empty value is a value
    /// assert!(db.contains_key("k")?);
    /// db.delete("k")?;
    /// assert!(!db.contains_key("k")?);
    /// # Ok(()) }
    /// ```
    #[inline]
    fn contains_key(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        Ok(self.read_one(TOKEN, key.as_ref())?.is_some())
    }

    /// Bytes `offset..offset + len` of the newest value of `key`, or `None` if it is absent,
    /// deleted or expired: a part of a large value without reading the rest of it.
    ///
    /// The range is clamped to the value as a file read is: from `offset` on, at most `len`
    /// bytes, fewer where the value ends first, and an empty value (not `None`, not an error)
    /// when `offset` is at or past its end or `len` is 0. So reading a value in pieces stops at
    /// the first piece shorter than asked.
    ///
    /// What it reads: a value held in a memtable or a table is read whole and sliced (it is at
    /// most [`crate::MAX_VALUE_BYTES`]); a value in a blob file (a keyspace's
    /// [`crate::KeyspaceOptions::blob_threshold`]) is sliced from the block cache when cached,
    /// and otherwise only the 32 KiB pages of the file holding the part are read, each
    /// checked by its own CRC, so damage elsewhere in the value does not fail the read, and
    /// damage in them is [`Error::Corruption`] naming the file and offset. In a transaction
    /// the key counts as read, as for [`Readable::get`].
    ///
    /// ```
    /// use bloomkv::Readable;
    /// # fn main() -> bloomkv::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
    /// db.put("greeting", "hello, world")?;
    /// assert_eq!(db.get_range("greeting", 7, 5)?.as_deref(), Some(&b"world"[..]));
    /// assert_eq!(db.get_range("greeting", 7, 100)?.as_deref(), Some(&b"world"[..])); // clamped
    /// assert_eq!(db.get_range("greeting", 50, 5)?.as_deref(), Some(&b""[..])); // past the end
    /// assert_eq!(db.get_range("nobody", 0, 5)?, None);
    /// # Ok(()) }
    /// ```
    #[inline]
    fn get_range(&self, key: impl AsRef<[u8]>, offset: u64, len: u64) -> Result<Option<Value>> {
        match self.read_stored(TOKEN, key.as_ref())? {
            Some(stored) => stored.read_part(offset, len).map(Some),
            None => Ok(None),
        }
    }

    /// The length in bytes of the newest value of `key`, or `None` if it is absent, deleted
    /// or expired. A value in a blob file is not read: its length is in its reference. In a
    /// transaction the key counts as read.
    ///
    /// ```
    /// use bloomkv::Readable;
    /// # fn main() -> bloomkv::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
    /// db.put("k", "four")?;
    /// assert_eq!(db.value_len("k")?, Some(4));
    /// assert_eq!(db.value_len("other")?, None);
    /// # Ok(()) }
    /// ```
    #[inline]
    fn value_len(&self, key: impl AsRef<[u8]>) -> Result<Option<u64>> {
        Ok(self.read_stored(TOKEN, key.as_ref())?.map(|s| s.len()))
    }

    /// Iterates over the keys in `range` (`..`, `a..b`, `a..=b`, `a..`, ... over bytes or
    /// strings: see [`KeyRange`]) in ascending order, seeing the data as it was when the
    /// iterator was created. The iterator is double-ended: `.rev()` gives descending order.
    /// In a transaction, the whole range counts as read: a write into it after the snapshot,
    /// even of a key the iterator never reached, makes the commit fail.
    ///
    /// ```
    /// use bloomkv::Readable;
    /// # fn main() -> bloomkv::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::new())?;
    /// for k in ["a", "b", "c"] {
    ///     db.put(k, "v")?;
    /// }
    /// let keys: Vec<_> = db.range("a"..="b").map(|r| r.map(|(k, _)| k)).collect::<bloomkv::Result<_>>()?;
    /// assert_eq!(keys, [b"a", b"b"]);
    /// let newest: Vec<_> = db.range(..).rev().map(|r| r.map(|(k, _)| k)).collect::<bloomkv::Result<_>>()?;
    /// assert_eq!(newest, [b"c", b"b", b"a"]);
    ///
    /// // A transaction's iterator: the snapshot with its writes over it.
    /// let mut tx = db.transaction();
    /// tx.delete_range("b".."c")?;
    /// tx.put("bb", "tx")?;
    /// let keys: Vec<_> = tx.range(..).map(|kv| kv.map(|(k, _)| k)).collect::<bloomkv::Result<_>>()?;
    /// assert_eq!(keys, [&b"a"[..], b"bb", b"c"]);
    /// # Ok(()) }
    /// ```
    #[inline]
    fn range(&self, range: impl KeyRange) -> Self::Iter {
        self.open_iter(TOKEN, range.as_bounds())
    }

    /// Iterates over the keys that start with `prefix`, in ascending order (double-ended,
    /// like [`Readable::range`]). With a [`crate::PrefixExtractor`] under which every key
    /// starting with `prefix` has one prefix (`prefix` is at least as long as the
    /// extractor's), the scan skips the tables whose filter says they hold none.
    ///
    /// ```
    /// use bloomkv::Readable;
    /// # fn main() -> bloomkv::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
    /// db.put(b"user:1", b"ada")?;
    /// db.put(b"user:2", b"grace")?;
    /// db.put(b"vendor:1", b"acme")?;
    /// let names: Vec<_> = db.prefix(b"user:").map(|kv| kv.map(|(_, v)| v.to_vec())).collect::<Result<_, _>>()?;
    /// assert_eq!(names, vec![b"ada".to_vec(), b"grace".to_vec()]);
    /// # Ok(()) }
    /// ```
    #[inline]
    fn prefix(&self, prefix: impl AsRef<[u8]>) -> Self::Iter {
        self.open_iter(TOKEN, borrowed(&prefix_bounds(prefix.as_ref())))
    }

    /// For each of `prefixes`, whether a live key starts with it, as one consistent read:
    /// the answers of `r.prefix(p).next().is_some()` for each, found together. A prefix
    /// that some table's filter rules out costs nothing in that table; one it lets through
    /// costs the scan's first step (a deleted or range-deleted key does not count). The
    /// filters are probed as a batch, table by table, so their memory misses overlap (a
    /// transaction with writes of its own in the keyspace scans prefix by prefix instead).
    ///
    /// ```
    /// use bloomkv::{Options, PrefixExtractor, Readable};
    /// # fn main() -> bloomkv::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let opts = Options::new().prefix_extractor(Some(PrefixExtractor::UpToDelimiter(b'/')));
    /// let db = bloomkv::Db::open(dir.path(), opts)?;
    /// db.put("user:1/order:9", "shoes")?;
    /// db.put("user:2/order:4", "hat")?;
    /// db.delete("user:2/order:4")?;
    /// db.flush()?;
    /// // Which of these users have any orders?
    /// let users = ["user:1/", "user:2/", "user:3/"];
    /// assert_eq!(db.prefixes_exist(&users)?, [true, false, false]);
    /// # Ok(()) }
    /// ```
    #[inline]
    fn prefixes_exist<P: AsRef<[u8]>>(&self, prefixes: &[P]) -> Result<Vec<bool>> {
        self.probe_prefixes(TOKEN, prefixes)
    }

    /// A cursor over the keys in `range` (`..` for all of them), seeing the data as it was
    /// when the cursor was made: seek to a key, then step forward or backward (see
    /// [`Cursor`]). In a transaction, the whole range counts as read.
    ///
    /// ```
    /// use bloomkv::Readable;
    /// # fn main() -> bloomkv::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::new())?;
    /// for k in ["a", "b", "c"] {
    ///     db.put(k, "v")?;
    /// }
    /// let mut cursor = db.cursor("a".."c");
    /// cursor.seek_to_last()?;
    /// assert_eq!(cursor.key(), Some(&b"b"[..]));
    /// cursor.next()?; // "c" is outside the range
    /// assert!(!cursor.valid());
    /// # Ok(()) }
    /// ```
    #[inline]
    fn cursor(&self, range: impl KeyRange) -> Self::Cursor {
        self.open_cursor(TOKEN, range.into_bounds())
    }

    /// The first key and its value, or `None` if there is no key: one step of
    /// `range(..)`. In a transaction, every key counts as read, as for `range(..)`.
    ///
    /// ```
    /// use bloomkv::Readable;
    /// # fn main() -> bloomkv::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::new())?;
    /// assert_eq!(db.first_key_value()?, None);
    /// db.put("b", "2")?;
    /// db.put("a", "1")?;
    /// let (key, value) = db.first_key_value()?.unwrap();
    /// assert_eq!((&key[..], &value[..]), (&b"a"[..], &b"1"[..]));
    /// # Ok(()) }
    /// ```
    #[inline]
    fn first_key_value(&self) -> Result<Option<(Vec<u8>, Value)>> {
        self.open_iter(TOKEN, (Bound::Unbounded, Bound::Unbounded)).next().transpose()
    }

    /// The last key and its value, or `None` if there is no key: one step of
    /// `range(..).rev()`. In a transaction, every key counts as read.
    ///
    /// ```
    /// use bloomkv::Readable;
    /// # fn main() -> bloomkv::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::new())?;
    /// db.put("a", "1")?;
    /// db.put("b", "2")?;
    /// assert_eq!(db.last_key_value()?.map(|(k, _)| k), Some(b"b".to_vec()));
    /// # Ok(()) }
    /// ```
    #[inline]
    fn last_key_value(&self) -> Result<Option<(Vec<u8>, Value)>> {
        self.open_iter(TOKEN, (Bound::Unbounded, Bound::Unbounded)).next_back().transpose()
    }
}

/// What every cursor of a [`Readable`] does — a [`Cursor`] or a [`TransactionCursor`] — so
/// generic code can position and step `R::Cursor` (see [`Readable`] for an example). The
/// methods are those of the cursors themselves: seek, step, and read where it stands. A
/// move that fails leaves the cursor invalid; `next` and `prev` on an invalid cursor do
/// nothing. Sealed, as [`Readable`] is.
pub trait ReadCursor: sealed::SealedCursor {
    /// Positions at the first key of the range.
    fn seek_to_first(&mut self) -> Result<()>;

    /// Positions at the last key of the range.
    fn seek_to_last(&mut self) -> Result<()>;

    /// Positions at the first key `>= key`; invalid if there is none in the range.
    fn seek(&mut self, key: impl AsRef<[u8]>) -> Result<()>;

    /// Positions at the last key `<= key`; invalid if there is none in the range.
    fn seek_for_prev(&mut self, key: impl AsRef<[u8]>) -> Result<()>;

    /// Moves to the next key; invalid after the range's last key.
    fn next(&mut self) -> Result<()>;

    /// Moves to the previous key; invalid before the range's first key.
    fn prev(&mut self) -> Result<()>;

    /// True while the cursor stands on a key.
    fn valid(&self) -> bool;

    /// The key the cursor stands on, or `None` when it is invalid.
    fn key(&self) -> Option<&[u8]>;

    /// The value of the key the cursor stands on, or `None` when it is invalid.
    fn value(&self) -> Option<&[u8]>;
}

/// [`ReadCursor`] for a cursor type whose inherent methods have the trait's names.
macro_rules! read_cursor {
    ($($ty:ty),*) => {$(
        impl sealed::SealedCursor for $ty {}

        impl ReadCursor for $ty {
            #[inline]
            fn seek_to_first(&mut self) -> Result<()> {
                <$ty>::seek_to_first(self)
            }
            #[inline]
            fn seek_to_last(&mut self) -> Result<()> {
                <$ty>::seek_to_last(self)
            }
            #[inline]
            fn seek(&mut self, key: impl AsRef<[u8]>) -> Result<()> {
                <$ty>::seek(self, key)
            }
            #[inline]
            fn seek_for_prev(&mut self, key: impl AsRef<[u8]>) -> Result<()> {
                <$ty>::seek_for_prev(self, key)
            }
            #[inline]
            fn next(&mut self) -> Result<()> {
                <$ty>::next(self)
            }
            #[inline]
            fn prev(&mut self) -> Result<()> {
                <$ty>::prev(self)
            }
            #[inline]
            fn valid(&self) -> bool {
                <$ty>::valid(self)
            }
            #[inline]
            fn key(&self) -> Option<&[u8]> {
                <$ty>::key(self)
            }
            #[inline]
            fn value(&self) -> Option<&[u8]> {
                <$ty>::value(self)
            }
        }
    )*};
}

read_cursor!(Cursor, TransactionCursor);
