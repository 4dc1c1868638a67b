//! Snapshots: a read-only view of the database at one sequence number.
//!
//! A snapshot holds the engine state (memtables and version) it was taken from, so the
//! memtables and table files it needs stay alive — compaction may replace them in the live
//! database, but their files are deleted only when the last snapshot or iterator using them
//! is dropped.

use std::sync::Arc;

use super::read::ReadView;
use super::{DbInner, Keyspace};
use crate::key::SeqNo;
use crate::version::edit::KeyspaceId;
use crate::{Error, Result};

/// A consistent read-only view, from [`crate::Db::snapshot`]. Later writes are invisible to
/// it. Cheap to take, and to clone (a clone reads the same view); holds memtables and files
/// alive until the last clone is dropped. It does not keep the database open: after
/// [`crate::Db::close`] its reads fail with [`crate::Error::Closed`].
///
/// ```
/// use bloomkv::Readable;
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
    /// # use bloomkv::Readable;
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

    /// What its reads ([`crate::Readable`]) read: its keyspace, as of its view.
    #[inline]
    pub(super) fn source(&self) -> super::read::ReadSource<'_> {
        let (inner, keyspace, name) = (&self.inner, self.keyspace, &*self.name);
        super::read::ReadSource { inner, keyspace, name, kept: Some(&self.view) }
    }

    /// The sequence number the snapshot reads at.
    pub fn sequence(&self) -> SeqNo {
        self.view.seq()
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
}
