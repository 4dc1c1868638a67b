//! Snapshots: a read-only view of the database at one sequence number.
//!
//! A snapshot holds the engine state (memtables and version) it was taken from, so the
//! memtables and table files it needs stay alive — compaction may replace them in the live
//! database, but their files are deleted only when the last snapshot or iterator using them
//! is dropped.

use std::sync::Arc;

use super::cursor::Cursor;
use super::read::ReadView;
use super::scan::DbIterator;
use super::{DbInner, Keyspace, Tree};
use crate::key::SeqNo;
use crate::key_range::prefix_bounds;
use crate::key_range::KeyRange;
use crate::version::edit::KeyspaceId;
use crate::{Error, Result, Value};

/// A consistent read-only view, from [`crate::Db::snapshot`]. Later writes are invisible to
/// it. Cheap to take, and to clone (a clone reads the same view); holds memtables and files
/// alive until the last clone is dropped. It does not keep the database open: after
/// [`crate::Db::close`] its reads fail with [`crate::Error::Closed`].
///
/// ```
/// # fn main() -> bloomkv::Result<()> {
/// let dir = tempfile::tempdir().unwrap();
/// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
/// db.put(b"k", b"old")?;
/// let snap = db.snapshot();
/// db.put(b"k", b"new")?;
/// assert_eq!(snap.get(b"k")?.as_deref(), Some(&b"old"[..]));
/// assert_eq!(db.get(b"k")?.as_deref(), Some(&b"new"[..]));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Snapshot {
    inner: Arc<DbInner>,
    view: ReadView,
    /// The keyspace its reads go to.
    keyspace: KeyspaceId,
    name: Arc<str>,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot").field("seq", &self.view.seq()).finish()
    }
}

impl Snapshot {
    pub(crate) fn new(inner: Arc<DbInner>, keyspace: KeyspaceId, name: Arc<str>) -> Self {
        let view = inner.stable_read_view();
        Snapshot { inner, view, keyspace, name }
    }

    /// The same view of the database — same moment, same sequence number — reading
    /// `keyspace` instead: consistent reads across keyspaces.
    ///
    /// ```
    /// # fn main() -> bloomkv::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
    /// let a = db.keyspace("a", bloomkv::KeyspaceOptions::default())?;
    /// let b = db.keyspace("b", bloomkv::KeyspaceOptions::default())?;
    /// a.put("k", "1")?;
    /// let snap = a.snapshot();
    /// b.put("k", "2")?;
    /// assert_eq!(snap.get("k")?.as_deref(), Some(&b"1"[..]));
    /// assert_eq!(snap.keyspace(&b)?.get("k")?, None); // written after the snapshot
    /// # Ok(()) }
    /// ```
    ///
    /// Fails with [`Error::ForeignKeyspace`] if `keyspace` is a handle of another database.
    pub fn keyspace(&self, keyspace: &Keyspace) -> Result<Snapshot> {
        if keyspace.instance() != self.inner.instance {
            return Err(Error::ForeignKeyspace { name: keyspace.name().to_string() });
        }
        Ok(Snapshot {
            inner: self.inner.clone(),
            view: self.view.clone(),
            keyspace: keyspace.id(),
            name: keyspace.name().into(),
        })
    }

    /// The tree the snapshot reads, unless its keyspace was dropped before it was taken.
    fn tree(&self) -> Result<&Arc<Tree>> {
        self.view
            .state()
            .tree(self.keyspace)
            .ok_or_else(|| Error::KeyspaceDropped { name: self.name.to_string() })
    }

    /// The sequence number the snapshot reads at.
    pub fn sequence(&self) -> SeqNo {
        self.view.seq()
    }

    /// The value of `key` as of the snapshot.
    ///
    /// Fails with [`crate::Error::Closed`] once the database is closed.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        self.inner.check_open()?;
        self.view.get(&self.inner, self.tree()?, key.as_ref())
    }

    /// The value of each of `keys` as of the snapshot, in the order given: see
    /// [`crate::Db::multi_get`].
    ///
    /// ```
    /// # fn main() -> bloomkv::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
    /// db.put("k", "old")?;
    /// let snap = db.snapshot();
    /// db.put("k", "new")?;
    /// let got = snap.multi_get(&["k", "k"])?;
    /// assert!(got.iter().all(|v| v.as_ref().is_some_and(|v| v.as_ref() == b"old")));
    /// # Ok(()) }
    /// ```
    pub fn multi_get<K: AsRef<[u8]>>(
        &self,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<Vec<Option<Value>>> {
        self.inner.check_open()?;
        let keys: Vec<K> = keys.into_iter().collect();
        self.view.multi_get(&self.inner, self.tree()?, &keys)
    }

    /// Writes an openable copy of the database exactly as this snapshot sees it to `dir`
    /// (which must not exist, or be an empty directory): see [`crate::Db::checkpoint`],
    /// whose guarantees hold here too. Writes made after the snapshot are not in the copy,
    /// even those already in the memtable.
    ///
    /// The copy appears at `dir` whole or not at all: it is built in a temporary directory
    /// next to `dir` and renamed into place once durable. Fails with
    /// [`crate::Error::InvalidArgument`] if `dir` has entries, or is, holds or lies inside
    /// the database directory (symbolic links and `..` resolved).
    pub fn checkpoint(&self, dir: impl AsRef<std::path::Path>) -> Result<()> {
        self.inner.check_open()?;
        self.inner.checkpoint(self.view.state(), self.view.seq(), dir.as_ref())
    }

    /// Iterates over the keys in `range` as of the snapshot (see [`KeyRange`]), both ways
    /// (see [`DbIterator`]).
    pub fn range(&self, range: impl KeyRange) -> DbIterator {
        let (start, end) = range.into_bounds();
        DbIterator::new(self.inner.clone(), self.tree().cloned(), self.view.seq(), start, end)
            .judged_at(self.view.time())
    }

    /// A [`Cursor`] over the keys in `range` as of the snapshot.
    ///
    /// ```
    /// # fn main() -> bloomkv::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
    /// db.put("a", "1")?;
    /// let snap = db.snapshot();
    /// db.put("b", "2")?;
    /// let mut cursor = snap.cursor(..);
    /// cursor.seek_to_last()?;
    /// assert_eq!(cursor.key(), Some(&b"a"[..])); // "b" came after the snapshot
    /// # Ok(()) }
    /// ```
    pub fn cursor(&self, range: impl KeyRange) -> Cursor {
        let (start, end) = range.into_bounds();
        Cursor::new(self.inner.clone(), self.tree().cloned(), self.view.seq(), start, end)
            .judged_at(self.view.time())
    }

    /// Iterates over the keys starting with `prefix` as of the snapshot.
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> DbIterator {
        let (start, end) = prefix_bounds(prefix.as_ref());
        DbIterator::new(self.inner.clone(), self.tree().cloned(), self.view.seq(), start, end)
            .judged_at(self.view.time())
    }

    /// For each of `prefixes`, whether a key starting with it is live as of the snapshot:
    /// see [`crate::Db::prefixes_exist`].
    pub fn prefixes_exist<P: AsRef<[u8]>>(&self, prefixes: &[P]) -> Result<Vec<bool>> {
        self.inner.check_open()?;
        let now = self.view.time().unwrap_or_else(|| self.inner.clock.now());
        super::scan::prefixes_exist(
            self.tree()?,
            self.view.seq(),
            prefixes,
            &self.inner.counters,
            now,
        )
    }
}

/// What an iterator or cursor of `keyspace` (named `name`) reads if made now: the tree and
/// the sequence number a [`Snapshot`] taken now would read, without making one (the
/// iterator keeps the tree alive itself).
fn read_now(inner: &DbInner, keyspace: KeyspaceId, name: &str) -> (Result<Arc<Tree>>, SeqNo) {
    let (tree, seq) = inner.stable_tree(keyspace);
    (tree.ok_or_else(|| Error::KeyspaceDropped { name: name.to_string() }), seq)
}

/// [`Snapshot::range`] of a snapshot of `keyspace` taken now.
pub(crate) fn iter_now(
    inner: &Arc<DbInner>,
    keyspace: KeyspaceId,
    name: &str,
    (start, end): (std::ops::Bound<Vec<u8>>, std::ops::Bound<Vec<u8>>),
) -> DbIterator {
    let (tree, seq) = read_now(inner, keyspace, name);
    DbIterator::new(inner.clone(), tree, seq, start, end)
}

/// [`Snapshot::cursor`] of a snapshot of `keyspace` taken now.
pub(crate) fn cursor_now(
    inner: &Arc<DbInner>,
    keyspace: KeyspaceId,
    name: &str,
    (start, end): (std::ops::Bound<Vec<u8>>, std::ops::Bound<Vec<u8>>),
) -> Cursor {
    let (tree, seq) = read_now(inner, keyspace, name);
    Cursor::new(inner.clone(), tree, seq, start, end)
}
