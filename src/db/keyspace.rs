//! Keyspaces (RocksDB's column families, fjall's partitions): named trees in one database,
//! each with its own memtables, tables and table options, sharing the WAL, the write path,
//! the block cache and the background threads.
//!
//! - A write batch may touch any number of keyspaces; it is one WAL record, so it is atomic
//!   across them, and sequence numbers are shared, so one snapshot sees every keyspace at
//!   the same moment.
//! - The memtables of all keyspaces switch together, when their total reaches
//!   `memtable_bytes`, and a flush writes one L0 table per keyspace that has data, all in one
//!   manifest edit. One WAL segment thus always belongs to one generation of memtables, and
//!   the manifest's single log number stays exact (RocksDB's "atomic flush"; the price is
//!   small L0 tables for keyspaces that receive few writes, which compaction merges).
//! - Compaction runs per tree: each keyspace has its own levels, and the compaction thread
//!   takes whichever tree's level is most over its target.
//! - Creating and dropping a keyspace are manifest edits. A drop removes the keyspace's tables
//!   in the same edit; its writes still in WAL segments are skipped by recovery, which knows
//!   from the manifest that the id was dropped (ids are never reused).

use std::sync::Arc;

use super::write::SingleWrite;
use super::{
    flush, ingest, lock_mutex as lock, write, DbInner, KeyRange, OpenDb, Snapshot, Transaction,
    Tree,
};
use crate::key_range::{half_open, prefix_bounds};
use crate::options::KeyspaceOptions;
use crate::version::edit::{
    keyspace_name, CallbackNames, KeyspaceDef, KeyspaceId, VersionEdit, DEFAULT_KEYSPACE,
};
use crate::version::set::DEFAULT_KEYSPACE_NAME;
use crate::{Error, Result, WriteBatch};

/// A handle on one keyspace of a database, from [`crate::Db::keyspace`]: the same reads,
/// writes and scans as [`crate::Db`] (which works on the default keyspace), confined to this
/// keyspace. Cheap to clone and `Send + Sync`; share it between threads like the `Db`.
///
/// After [`crate::Db::drop_keyspace`], every operation on the handle fails with
/// [`Error::KeyspaceDropped`] (snapshots taken before the drop still read it).
///
/// A handle keeps its database open, as fjall's do: the database closes when the `Db` and
/// every `Keyspace` taken from it are dropped, so a handle can be stored and used after the
/// `Db` that made it is gone. [`crate::Db::close`] still closes the database at once, and
/// every handle's operations then fail with [`Error::Closed`].
///
/// ```
/// use bloomkv::Readable;
/// # fn main() -> bloomkv::Result<()> {
/// struct App {
///     users: bloomkv::Keyspace,
/// }
/// fn setup(dir: &std::path::Path) -> bloomkv::Result<App> {
///     let db = bloomkv::Db::open(dir, bloomkv::Options::default())?;
///     Ok(App { users: db.keyspace("users", bloomkv::KeyspaceOptions::default())? })
/// }
/// let dir = tempfile::tempdir().unwrap();
/// let app = setup(dir.path())?;
/// app.users.put("u1", "ada")?; // the database is still open
/// assert_eq!(app.users.get("u1")?.as_deref(), Some(&b"ada"[..]));
/// drop(app); // the last handle: the database closes
/// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
/// # Ok(()) }
/// ```
///
/// A handle from one database given to another — in a [`crate::WriteBatch`] or to
/// [`Snapshot::keyspace`] — is refused with [`Error::ForeignKeyspace`].
///
/// ```
/// # fn main() -> bloomkv::Result<()> {
/// use bloomkv::{Db, FilterPolicy, KeyspaceOptions, Options, Readable};
/// let dir = tempfile::tempdir().unwrap();
/// let db = Db::open(dir.path(), Options::default())?;
/// let sessions = db.keyspace("sessions", KeyspaceOptions::default())?;
/// let audit = db.keyspace("audit", KeyspaceOptions::new().filter_policy(FilterPolicy::None))?;
/// sessions.put("s1", "alice")?;
/// audit.put("0001", "s1 logged in")?;
/// assert_eq!(sessions.get("s1")?.as_deref(), Some(&b"alice"[..]));
/// assert_eq!(audit.get("s1")?, None); // keyspaces do not share keys
/// assert_eq!(db.get("s1")?, None); // nor does the default keyspace
/// assert_eq!(db.keyspace_names(), ["default", "sessions", "audit"]);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Keyspace {
    pub(super) inner: Arc<DbInner>,
    pub(super) id: KeyspaceId,
    name: Arc<str>,
    /// Keeps the database open while the handle lives.
    _open: Arc<OpenDb>,
}

impl std::fmt::Debug for Keyspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyspace").field("name", &self.name).finish_non_exhaustive()
    }
}

impl Keyspace {
    pub(crate) fn new(
        open: Arc<OpenDb>,
        inner: Arc<DbInner>,
        id: KeyspaceId,
        name: Arc<str>,
    ) -> Self {
        Keyspace { inner, id, name, _open: open }
    }

    pub(crate) fn id(&self) -> KeyspaceId {
        self.id
    }

    /// The opening of the database the handle belongs to (`DbInner::instance`).
    pub(crate) fn instance(&self) -> u64 {
        self.inner.instance
    }

    /// The keyspace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(super) fn dropped(&self) -> Error {
        Error::KeyspaceDropped { name: self.name.to_string() }
    }

    /// Fails with [`Error::KeyspaceDropped`] once the keyspace is gone. A write that passes
    /// this and races with the drop is applied and then dropped with the keyspace.
    fn check_live(&self) -> Result<()> {
        match self.inner.state.load().tree(self.id) {
            Some(_) => Ok(()),
            None => Err(self.dropped()),
        }
    }

    /// Sets `key` to `value` in this keyspace, as [`crate::Db::put`].
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let op = SingleWrite::Put(key.as_ref(), value.as_ref());
        write::write_one(&self.inner, self.id, op, || self.check_live())
    }

    /// Sets `key` to `value` in this keyspace until `ttl` from now, as
    /// [`crate::Db::put_with_ttl`] (whatever the keyspace's
    /// [`crate::KeyspaceOptions::default_ttl`]).
    pub fn put_with_ttl(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        ttl: std::time::Duration,
    ) -> Result<()> {
        let (key, value) = (key.as_ref(), value.as_ref());
        super::ttl::put_with_ttl(&self.inner, self.id, key, value, ttl, || self.check_live())
    }

    /// Deletes `key` from this keyspace, as [`crate::Db::delete`].
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        let op = SingleWrite::Delete(key.as_ref());
        write::write_one(&self.inner, self.id, op, || self.check_live())
    }

    /// Writes a merge operand for `key` in this keyspace, as [`crate::Db::merge`], combined
    /// by the keyspace's [`crate::KeyspaceOptions::merge_operator`].
    pub fn merge(&self, key: impl AsRef<[u8]>, operand: impl AsRef<[u8]>) -> Result<()> {
        let op = SingleWrite::Merge(key.as_ref(), operand.as_ref());
        write::write_one(&self.inner, self.id, op, || self.check_live())
    }

    /// Deletes every key in `range` from this keyspace, as [`crate::Db::delete_range`].
    pub fn delete_range(&self, range: impl KeyRange) -> Result<()> {
        let (start, end) = super::half_open(range);
        let op = SingleWrite::DeleteRange(&start, &end);
        write::write_one(&self.inner, self.id, op, || self.check_live())
    }

    /// Deletes every key that starts with `prefix` from this keyspace, as
    /// [`crate::Db::delete_prefix`].
    pub fn delete_prefix(&self, prefix: impl AsRef<[u8]>) -> Result<()> {
        self.delete_range(prefix_bounds(prefix.as_ref()))
    }

    /// What its reads ([`crate::Readable`]) read: this keyspace, as it is now.
    #[inline]
    pub(super) fn source(&self) -> super::read::ReadSource<'_> {
        let (inner, keyspace, name) = (&self.inner, self.id, &*self.name);
        super::read::ReadSource { inner, keyspace, name, kept: None }
    }

    /// Begins a [`Transaction`] like [`crate::Db::transaction`] whose reads and whose writes
    /// without `_in` (`get`, `put`, `range`, ...) work on this keyspace; it still reaches
    /// every keyspace ([`Transaction::keyspace`] to read, the `_in` methods to write), all in
    /// one atomic commit.
    ///
    /// ```
    /// # use bloomkv::Readable;
    /// # fn main() -> bloomkv::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
    /// let users = db.keyspace("users", bloomkv::KeyspaceOptions::default())?;
    /// let mut tx = users.transaction();
    /// tx.put("u1", "ada")?;
    /// assert_eq!(tx.get("u1")?.as_deref(), Some(&b"ada"[..]));
    /// tx.commit()?;
    /// assert_eq!(users.get("u1")?.as_deref(), Some(&b"ada"[..]));
    /// assert_eq!(db.get("u1")?, None); // not the default keyspace
    /// # Ok(()) }
    /// ```
    pub fn transaction(&self) -> Transaction {
        Transaction::in_keyspace(self)
    }

    /// [`crate::Db::transact`] with the transactions of [`Keyspace::transaction`].
    ///
    /// ```
    /// # use bloomkv::Readable;
    /// # fn main() -> bloomkv::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
    /// let counters = db.keyspace("counters", bloomkv::KeyspaceOptions::default())?;
    /// let n = counters.transact(|tx| {
    ///     let n = tx.get("n")?.map_or(0, |v| v.len()) + 1;
    ///     tx.put("n", vec![0; n])?;
    ///     Ok::<_, bloomkv::Error>(n)
    /// })?;
    /// assert_eq!(n, 1);
    /// assert_eq!(counters.get("n")?.as_deref(), Some(&[0][..]));
    /// # Ok(()) }
    /// ```
    pub fn transact<T, E: From<Error>>(
        &self,
        f: impl FnMut(&mut Transaction) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        self.check_live()?;
        super::transaction::transact(|| Transaction::in_keyspace(self), f)
    }

    /// [`crate::Db::compare_and_swap`] in this keyspace (see there for the types `expected`
    /// and `new` take).
    ///
    /// ```
    /// # use bloomkv::Readable;
    /// # fn main() -> bloomkv::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
    /// let counters = db.keyspace("counters", bloomkv::KeyspaceOptions::default())?;
    /// counters.put("n", "1")?;
    /// assert!(counters.compare_and_swap("n", Some(b"1"), Some(b"2"))?);
    /// assert!(!counters.compare_and_swap("n", Some(b"1"), Some(b"3"))?);
    /// assert_eq!(counters.get("n")?.as_deref(), Some(&b"2"[..]));
    /// # Ok(()) }
    /// ```
    pub fn compare_and_swap<V: AsRef<[u8]>>(
        &self,
        key: impl AsRef<[u8]>,
        expected: Option<V>,
        new: Option<V>,
    ) -> Result<bool> {
        self.check_live()?;
        let (expected, new) = (expected.as_ref().map(V::as_ref), new.as_ref().map(V::as_ref));
        super::transaction::compare_and_swap(&self.inner, Some(self), key.as_ref(), expected, new)
    }

    /// A consistent read-only view of this keyspace as it is now. [`Snapshot::keyspace`]
    /// turns it into a view of another keyspace at the same moment.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot::new(self.inner.clone(), self.id, self.name.clone())
    }

    /// Bulk-loads sorted entries into this keyspace, as [`crate::Db::ingest`].
    pub fn ingest<I, K, V>(&self, entries: I) -> Result<u64>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        self.inner.check_writable()?;
        self.check_live()?;
        ingest::ingest(&self.inner, self.id, &self.name, entries.into_iter().map(Ok))
    }

    /// [`Keyspace::ingest`] from a source that can fail, as [`crate::Db::try_ingest`].
    pub fn try_ingest<I, K, V>(&self, entries: I) -> Result<u64>
    where
        I: IntoIterator<Item = Result<(K, V)>>,
        K: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        self.inner.check_writable()?;
        self.check_live()?;
        ingest::ingest(&self.inner, self.id, &self.name, entries.into_iter())
    }
}

impl DbInner {
    /// The handle on keyspace `name`, creating it with `opts` if it does not exist, and
    /// recording `opts` if they differ from what the manifest holds — failing instead if they
    /// change a checked setting without `change_settings` (see `settings::check`).
    pub(crate) fn open_keyspace(
        &self,
        name: &str,
        mut opts: KeyspaceOptions,
    ) -> Result<(KeyspaceId, Arc<str>)> {
        self.check_open()?;
        opts.validate()?;
        let change = std::mem::take(&mut opts.change_settings);
        keyspace_name(name.as_bytes()).map_err(Error::InvalidArgument)?;
        let found = |inner: &DbInner| -> Option<Arc<Tree>> {
            inner.state.load().trees.iter().find(|t| &*t.name == name).cloned()
        };
        if name == DEFAULT_KEYSPACE_NAME {
            let tree = found(self).expect("the default keyspace always exists");
            if tree.opts != opts {
                return Err(Error::InvalidArgument(
                    "the default keyspace takes its options from Options when the database \
                     is opened"
                        .into(),
                ));
            }
            return Ok((DEFAULT_KEYSPACE, tree.name.clone()));
        }
        // Whether the manifest must record `opts` for the existing keyspace `tree`: not if it
        // holds them already (callback names included: a manifest from before they were
        // recorded learns them at the first open that gives them).
        let must_record = |tree: &Tree| -> Result<bool> {
            let versions = lock(&self.versions);
            let recorded = versions.keyspace_def(tree.id);
            if let (Some(def), false) = (recorded, change) {
                super::settings::check(name, def, &opts, self.read_only)?;
            }
            let names = Some(CallbackNames::of(&opts));
            Ok(tree.opts != opts || recorded.map_or(true, |d| d.callbacks != names))
        };
        if let Some(tree) = found(self) {
            // A read-only open checks too (a wrong merge operator would misread).
            let record = must_record(&tree)?;
            if self.read_only {
                self.adopt_merge_operator(tree.id, &opts);
                return Ok((tree.id, tree.name.clone()));
            }
            if !record {
                return Ok((tree.id, tree.name.clone()));
            }
        }
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        // Serialised with every write and with other keyspace changes, so two callers
        // cannot both create the name.
        write::exclusive(self, |_| {
            let existing = found(self);
            // Checked again: another open may have recorded other settings meanwhile.
            if let Some(tree) = &existing {
                if !must_record(tree)? {
                    return Ok((tree.id, tree.name.clone()));
                }
            }
            let id = match &existing {
                Some(t) => t.id,
                None => lock(&self.versions).next_keyspace_id(),
            };
            if existing.is_none() && id == KeyspaceId::MAX {
                return Err(Error::InvalidArgument("no keyspace ids are left".into()));
            }
            let mut edit = VersionEdit {
                keyspaces: vec![KeyspaceDef::new(id, name, opts.clone())],
                next_keyspace_id: existing.is_none().then_some(id + 1),
                ..VersionEdit::default()
            };
            self.install(&mut edit, &[], None)?;
            let name = found(self).map_or_else(|| name.into(), |t| t.name.clone());
            Ok((id, name))
        })
    }

    /// Gives keyspace `id`'s in-memory tree the merge operator of `opts`, if it has one, for a
    /// read-only database: the manifest records only the operator's name, so its operands
    /// are readable only once a handle supplies it, and a read-only open may write nothing.
    /// A compaction filter is not taken: nothing compacts.
    fn adopt_merge_operator(&self, id: KeyspaceId, opts: &KeyspaceOptions) {
        if opts.merge_operator.0.is_none() {
            return;
        }
        self.swap_state(|cur| {
            let with_operator = |t: &Arc<Tree>| {
                if t.id != id || t.opts.merge_operator == opts.merge_operator {
                    return t.clone();
                }
                let mut t = Tree::clone(t);
                t.opts.merge_operator = opts.merge_operator.clone();
                Arc::new(t)
            };
            super::DbState { trees: cur.trees.iter().map(with_operator).collect() }
        });
    }

    /// Drops keyspace `name`: its tables and its memtables' contents are gone once this
    /// returns; the handles on it fail from then on.
    pub(crate) fn drop_keyspace(&self, name: &str) -> Result<()> {
        self.check_writable()?;
        if name == DEFAULT_KEYSPACE_NAME {
            return Err(Error::InvalidArgument("the default keyspace cannot be dropped".into()));
        }
        write::exclusive(self, |_| {
            let Some(tree) = self.state.load().trees.iter().find(|t| &*t.name == name).cloned()
            else {
                return Err(Error::KeyspaceDropped { name: name.to_string() });
            };
            // A flush in progress may be writing a table of this keyspace, and a compaction
            // may be rewriting its tables: both must install before the drop does, or their
            // edits would name a keyspace the manifest no longer has. No memtable switches
            // while this task leads the write queue, so once the immutable memtables are
            // flushed no flush runs; the compaction slot holds off compactions.
            flush::wait_for_flushes(self)?;
            let _slot = self.slot_alone();
            let tree = self.state.load().tree(tree.id).cloned().unwrap_or(tree);
            let mut edit = VersionEdit {
                dropped_keyspaces: vec![tree.id],
                deleted: tree.version.all_tables().map(|(l, t)| (l, t.meta.number)).collect(),
                ..VersionEdit::default()
            };
            self.install(&mut edit, &[], None)
        })
    }
}

/// A batch's writes to a keyspace other than the default, through its handle (the handle is
/// the engine's; the batch's format knows keyspaces by id only).
impl WriteBatch {
    /// Adds `key → value` in `keyspace`. A batch may write to any number of keyspaces of one
    /// database, atomically; written to another database than the handles' own, it fails
    /// with [`Error::ForeignKeyspace`] and writes nothing.
    ///
    /// ```
    /// # use bloomkv::Readable;
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
        self.note_handle(keyspace.id(), keyspace.name(), keyspace.instance());
        self.put_to(keyspace.id(), key.as_ref(), value.as_ref());
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
        self.note_handle(keyspace.id(), keyspace.name(), keyspace.instance());
        let ttl = crate::clock::ttl_millis(ttl);
        self.put_ttl_to(keyspace.id(), key.as_ref(), ttl, value.as_ref());
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
        self.note_handle(keyspace.id(), keyspace.name(), keyspace.instance());
        self.merge_to(keyspace.id(), key.as_ref(), operand.as_ref());
    }

    /// Adds a deletion of `key` in `keyspace`, as [`WriteBatch::delete`].
    ///
    /// # Panics
    ///
    /// If the batch already holds `u32::MAX` operations.
    pub fn delete_in(&mut self, keyspace: &Keyspace, key: impl AsRef<[u8]>) {
        self.note_handle(keyspace.id(), keyspace.name(), keyspace.instance());
        self.delete_to(keyspace.id(), key.as_ref());
    }

    /// Adds a deletion of every key in `range` in `keyspace`, as [`WriteBatch::delete_range`].
    ///
    /// # Panics
    ///
    /// If the batch already holds `u32::MAX` operations.
    pub fn delete_range_in(&mut self, keyspace: &Keyspace, range: impl KeyRange) {
        self.note_handle(keyspace.id(), keyspace.name(), keyspace.instance());
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
}
