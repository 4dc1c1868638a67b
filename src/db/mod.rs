//! The engine: [`Db`], the handle users share between threads. `mod.rs` holds the handle's
//! API and the engine's fields (`DbInner`); each job has a file:
//!
//! - `state.rs`: the engine state (per keyspace a tree of memtables and tables, swapped
//!   whole) and `install`, the one place the tables change
//! - `write.rs`: the write path (group commit → WAL → memtable, making room, stalls)
//! - `wal.rs`: WAL segments: the one being appended to, starting a new one
//! - `read.rs`: the point-read path (memtables → L0 newest first → one table per level)
//! - `multi_get.rs`: many point reads at once
//! - `flush.rs`: immutable memtable → L0 table → manifest
//! - `compaction.rs`: leveled compaction, picked and run on the compaction thread
//! - `background.rs`: the flush and compaction threads, background errors, shutdown
//! - `resume.rs`: restarting after a failed write without reopening
//! - `filter_budget.rs`: each new table's share of a `FilterPolicy::Budgeted` budget
//! - `ingest.rs`: sorted entries → tables on the deepest free level → manifest
//! - `scan.rs`: range and prefix scans over a merged view at a sequence number, both ways
//! - `visible.rs`: the newest visible version of each key, forward and backward
//! - `compaction_filter_stage.rs`: where compaction asks a keyspace's compaction filter
//! - `merge_stage.rs`: where flushes and compactions combine merge operands
//! - `compaction_iter.rs`: the compaction iterator (newest version of each key a snapshot
//!   may still need, tombstones dropped where nothing lies below)
//! - `cursor.rs`: a seekable view that steps both ways
//! - `snapshot.rs`: consistent read-only views
//! - `keyspace.rs`: named keyspaces (column families): the handle, creating and dropping
//! - `checkpoint.rs`: an openable copy, built aside and renamed into place
//! - `recovery.rs`: open: CURRENT → manifest → tables → WAL replay
//! - `table_files.rs`: writing and opening table files, the block cache and open-file cache

mod background;
mod checkpoint;
mod compaction;
mod cursor;
mod flush;
mod in_flight;
mod ingest;
#[cfg(feature = "internals")]
mod inspect;
mod kept_wal;
mod keyspace;
mod large_value;
mod read;
pub(crate) mod readable;
mod recovery;
mod resume;
mod scan;
mod settings;
mod snapshot;
mod state;
mod stats;
mod successive_merges;
mod table_files;
mod transaction;
mod ttl;
use table_files::TableCaches;
mod wal;
mod write;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use arc_swap::ArcSwap;

pub(crate) use crate::key_range::{half_open, prefix_bounds, KeyRange};
pub use cursor::{Cursor, CursorEntries};
#[cfg(feature = "internals")]
pub use inspect::{
    FilterRun, PickedCompaction, Presence, ScanStep, ScanTrace, TableInfo, TraceSource, TraceStep,
};
pub use keyspace::Keyspace;
pub use scan::DbIterator;
pub use snapshot::Snapshot;
pub use transaction::{
    Transaction, TransactionCursor, TransactionCursorEntries, TransactionIter, TransactionKeyspace,
    TRANSACT_ATTEMPTS,
};

pub(crate) use background::{BgState, OpenDb};
pub(crate) use state::{DbState, Mem, Tree};
pub(crate) use wal::WalState;
pub(crate) use write::WriteQueue;

use crate::fs::{FileLock, FileSystem};
use crate::options::{Options, WriteOptions};
use crate::stats::{Counters, Stats};
use crate::version::edit::{KeyspaceId, DEFAULT_KEYSPACE};
use crate::version::set::VersionSet;
use crate::version::set::DEFAULT_KEYSPACE_NAME;
use crate::{Error, Result, WriteBatch};

pub(crate) struct DbInner {
    /// Unique to this opening in this process, so that handles and batches that name a
    /// keyspace can tell which database they belong to.
    pub instance: u64,
    pub dir: PathBuf,
    pub opts: Options,
    /// `opts.clock` held to its high-water mark: every judgement of expiry reads this.
    pub clock: Arc<crate::clock::MarkedClock>,
    pub fs: Arc<dyn FileSystem>,
    /// The directory's LOCK, held until `close` (or drop) releases it.
    pub file_lock: Mutex<Option<Box<dyn FileLock>>>,
    /// Opened with `Db::open_read_only`: no lock, no background threads, no writes.
    pub read_only: bool,
    pub state: ArcSwap<DbState>,
    /// Bumped before and after each store of `state` (odd while one is under way): what a
    /// reader checks to know the state did not change around its load of `visible_seq`
    /// (`DbInner::stable_tree`), for a plain load where a second load of `state` cost two
    /// atomic read-modify-writes.
    pub state_changes: AtomicU64,
    pub state_lock: Mutex<()>,
    /// Shared by the background compactions running (`compaction::maybe_compact`), whose
    /// inputs are then in `compacting`; held alone by a manual compaction, a compaction step,
    /// a keyspace's drop, `resume`, and an ingest from its first table to its install.
    pub compaction_slot: std::sync::RwLock<()>,
    /// The tables the background compactions running now read: what a second one must leave
    /// alone (`picker::pick_beside`).
    pub compacting: Mutex<std::collections::BTreeSet<u64>>,
    /// Held by an ingest from before it reserves its sequence number to its install, so
    /// ingests install in the order of their sequence numbers.
    pub ingest_order: Mutex<()>,
    pub versions: Mutex<VersionSet>,
    pub file_numbers: Arc<AtomicU64>,
    /// Blob files of values over `MAX_VALUE_BYTES`, each written and synced, whose put is
    /// being logged: the write applying the put moves the file into its memtable
    /// (`db/large_value.rs`).
    pub staged_blobs: Mutex<std::collections::HashMap<u64, Arc<crate::blob::BlobFile>>>,
    /// The tables and blob files a compaction wrote whose manifest edit failed: the edit may
    /// be on disk, so they stay until a resume's manifest, which never names them, is.
    pub unsettled_outputs: Mutex<Vec<std::path::PathBuf>>,
    pub wal: Mutex<WalState>,
    pub write_queue: Mutex<WriteQueue>,
    /// True while anyone is in the write queue: unsynced writes then queue too, instead of
    /// writing directly (`db/write.rs`).
    pub write_queue_busy: AtomicBool,
    /// Highest sequence number published: every write up to here is applied, except those
    /// in `in_flight`, which reads that need them wait for.
    pub visible_seq: AtomicU64,
    /// Single writes being applied outside the WAL's lock (`db/in_flight.rs`).
    pub in_flight: in_flight::InFlight,
    pub bg: Mutex<BgState>,
    /// Set once a background error is recorded, so the write path can check it without
    /// taking the `bg` lock.
    pub has_bg_error: AtomicBool,
    /// Wakes the background threads.
    pub bg_cv: Condvar,
    /// Signalled after every background step, for stalled writers and `flush` callers.
    pub bg_done_cv: Condvar,
    /// The block cache and the bounded set of open table files.
    pub caches: TableCaches,
    pub counters: Counters,
    /// The event listeners, and what they have been told.
    pub events: crate::events::Events,
    pub closed: AtomicBool,
    /// Ingests that have reserved their sequence number, and those that have since installed
    /// or failed: a transaction's snapshot may lack the ingests numbered above the count
    /// done when it began, whose key ranges its commit checks (`db/transaction/ingest_log.rs`).
    pub ingests_begun: AtomicU64,
    pub ingests_done: AtomicU64,
    /// The recent ingests' key ranges (a leaf lock).
    pub ingest_log: Mutex<transaction::IngestLog>,
    /// The WAL numbers the live transactions' commits check from: the flushed memtables
    /// `install` keeps in the history (`db/transaction/live.rs`).
    pub live_transactions: transaction::LiveTransactions,
}

impl std::fmt::Debug for DbInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").field("dir", &self.dir).finish_non_exhaustive()
    }
}

impl DbInner {
    /// How an error names keyspace `id`, which no live keyspace has: by the name it had if
    /// it was dropped since the database was opened, else by its id.
    fn dropped_keyspace_name(&self, id: KeyspaceId) -> String {
        match lock_mutex(&self.versions).dropped_name(id) {
            Some(name) => name.to_string(),
            None => format!("with id {id}"),
        }
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    fn check_writable(&self) -> Result<()> {
        self.check_open()?;
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        Ok(())
    }
}

/// An open database. Share one handle between threads (`Db` is `Send + Sync`), or clone it:
/// a clone is the same database (two reference counts, as an `Arc`). The database closes when
/// its last handle — clones and [`Keyspace`]s — is dropped, or for all of them at
/// [`Db::close`]. Its reads ([`crate::Readable`]: `get`, `range`, `cursor`, ...) read the
/// default keyspace.
///
/// ```
/// use bloomkv::Readable;
/// # fn main() -> bloomkv::Result<()> {
/// let dir = tempfile::tempdir().unwrap();
/// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
/// db.put(b"user:1", b"ada")?;
/// db.put(b"user:2", b"grace")?;
/// assert_eq!(db.get(b"user:1")?.as_deref(), Some(&b"ada"[..]));
/// let names: Vec<_> = db.prefix(b"user:").map(|kv| kv.map(|(_, v)| v.to_vec())).collect::<Result<_, _>>()?;
/// assert_eq!(names, vec![b"ada".to_vec(), b"grace".to_vec()]);
/// db.close()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Db {
    inner: Arc<DbInner>,
    open: Arc<OpenDb>,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl Db {
    /// Opens the database in `path`, creating it if it does not exist (unless
    /// `create_if_missing(false)`), and recovering whatever a previous process left: tables
    /// named by the manifest and writes still in WAL segments.
    ///
    /// Fails with [`Error::Locked`] if another handle has it open.
    pub fn open(path: impl AsRef<Path>, opts: Options) -> Result<Db> {
        opts.validate()?;
        let inner = recovery::open(path.as_ref(), opts)?;
        let db = Db::around(Arc::new(inner));
        db.open.start_background()?;
        Ok(db)
    }

    /// Opens the database in `path` for reading only, without taking its LOCK and without
    /// changing any file — so it works while another process has the database open (the
    /// `bloomkv` tool uses this). The view is what the manifest and WAL segments held when it
    /// was opened; later writes by the owner are not seen. Writes, `flush` and `compact`
    /// return [`Error::ReadOnly`].
    pub fn open_read_only(path: impl AsRef<Path>, opts: Options) -> Result<Db> {
        opts.validate()?;
        let inner = Arc::new(recovery::open_read_only(path.as_ref(), opts)?);
        Ok(Db::around(inner))
    }

    fn around(inner: Arc<DbInner>) -> Db {
        let open = Arc::new(OpenDb::new(inner.clone()));
        Db { inner, open }
    }

    fn keyspace_handle(&self, id: KeyspaceId, name: Arc<str>) -> Keyspace {
        Keyspace::new(self.open.clone(), self.inner.clone(), id, name)
    }

    /// What its reads ([`crate::Readable`]) read: the default keyspace, as it is now.
    #[inline]
    fn source(&self) -> read::ReadSource<'_> {
        let (keyspace, name) = (DEFAULT_KEYSPACE, DEFAULT_KEYSPACE_NAME);
        read::ReadSource { inner: &self.inner, keyspace, name, kept: None }
    }

    /// The directory the database lives in.
    pub fn path(&self) -> &Path {
        &self.inner.dir
    }

    /// Sets `key` to `value`, with the database's default durability (`sync_writes`).
    ///
    /// Fails with [`Error::KeyTooLarge`] or [`Error::ValueTooLarge`], writing nothing, if the
    /// key is longer than [`crate::MAX_KEY_BYTES`] or the value larger than
    /// [`crate::MAX_VALUE_BYTES`] — unless the keyspace separates values
    /// ([`crate::KeyspaceOptions::blob_threshold`], with no default time to live): there a
    /// value up to [`crate::MAX_LARGE_VALUE_BYTES`] is written straight from `value` to a blob
    /// file of its own, synced, and only its reference is logged, so the database never holds
    /// a copy of it. Read such a value in parts with [`crate::Readable::get_range`].
    ///
    /// ```
    /// use bloomkv::{Db, Options, Readable, MAX_VALUE_BYTES};
    /// # fn main() -> bloomkv::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = Db::open(dir.path(), Options::new().blob_threshold(Some(64 << 10)))?;
    /// let video = vec![7u8; MAX_VALUE_BYTES + 1];
    /// db.put("video", &video)?;
    /// assert_eq!(db.value_len("video")?, Some(video.len() as u64));
    /// assert_eq!(db.get_range("video", 1 << 20, 4)?.as_deref(), Some(&[7u8; 4][..]));
    /// # Ok(()) }
    /// ```
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let op = write::SingleWrite::Put(key.as_ref(), value.as_ref());
        write::write_one(&self.inner, DEFAULT_KEYSPACE, op, || Ok(()))
    }

    /// Sets `key` to `value` until `ttl` from now by the database's clock
    /// ([`Options::clock`]); then it expires: reads no longer return it (nor an older
    /// version of the key), and compaction drops it, freeing its space. Otherwise as
    /// [`Db::put`].
    ///
    /// The clock counts whole milliseconds, so `ttl` is rounded *up* to whole milliseconds:
    /// a value given any non-zero `ttl` is readable until the clock has passed at least one
    /// more millisecond. A zero `ttl` is refused with [`Error::InvalidArgument`], writing
    /// nothing.
    ///
    /// A [`Snapshot`] (and a [`Transaction`]) judges expiry at the time it was taken: it
    /// still reads a value that expired after that, while it lives.
    ///
    /// ```
    /// # fn main() -> bloomkv::Result<()> {
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use bloomkv::{Db, ManualClock, Options, Readable};
    ///
    /// let clock = Arc::new(ManualClock::new(0));
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = Db::open(dir.path(), Options::new().clock(clock.clone()))?;
    /// db.put("session", "old")?;
    /// db.put_with_ttl("session", "new", Duration::from_secs(30))?;
    /// assert_eq!(db.get("session")?.as_deref(), Some(&b"new"[..]));
    /// clock.advance(Duration::from_secs(30));
    /// assert_eq!(db.get("session")?, None); // and "old" does not come back
    /// # Ok(()) }
    /// ```
    pub fn put_with_ttl(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        ttl: std::time::Duration,
    ) -> Result<()> {
        let (key, value) = (key.as_ref(), value.as_ref());
        ttl::put_with_ttl(&self.inner, DEFAULT_KEYSPACE, key, value, ttl, || Ok(()))
    }

    /// Deletes `key` (a no-op if it is absent), with the default durability. Fails with
    /// [`Error::KeyTooLarge`] if the key is longer than [`crate::MAX_KEY_BYTES`].
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        let op = write::SingleWrite::Delete(key.as_ref());
        write::write_one(&self.inner, DEFAULT_KEYSPACE, op, || Ok(()))
    }

    /// Writes a merge operand for `key`, with the default durability: the key's value
    /// becomes what the default keyspace's [`crate::MergeOperator`]
    /// ([`Options::merge_operator`]) makes of the value beneath and every operand written
    /// since, oldest first — one blind write instead of a read, a change and a write (a
    /// counter, an append). Reads combine the operands ([`Error::Merge`] if the operator
    /// fails); compaction combines them ahead of reads.
    ///
    /// Operands never expire: a keyspace's default time to live applies to puts only. Over
    /// an expiring value, the result is the operands combined with it until it expires, and
    /// with nothing after.
    ///
    /// Fails with [`Error::MergeOperatorMissing`] if the keyspace has no operator, with
    /// [`Error::Merge`] if the operator refuses the operand
    /// ([`crate::MergeOperator::check_operand`]: a [`crate::U64Add`] operand that is not 8
    /// bytes, say), and as [`Db::put`] for a key or operand over the limits; nothing is
    /// written then.
    ///
    /// Whether the key's operands combine — with each other and the value beneath, into at
    /// most [`crate::MAX_VALUE_BYTES`] — cannot be known here without a read, which a merge
    /// does not make: it is known when a read or a compaction combines them. An operand that
    /// makes them fail (an [`crate::Append`] past the limit, say) is acknowledged like any
    /// other; from then on every read of the key fails with [`Error::Merge`], and compaction
    /// keeps the operands as they are (it never fails or stops the database for them). A
    /// [`Db::put`], [`Db::delete`] or [`Db::delete_range`] of the key replaces them: the key
    /// reads as that write left it, through flushes, compactions and reopens.
    ///
    /// ```
    /// # fn main() -> bloomkv::Result<()> {
    /// use std::sync::Arc;
    /// use bloomkv::{Append, Db, Options, Readable};
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = Db::open(dir.path(), Options::new().merge_operator(Arc::new(Append::new("\n"))))?;
    /// db.put("log", "started")?;
    /// db.merge("log", "step 1")?;
    /// db.flush()?;
    /// db.merge("log", "step 2")?;
    /// assert_eq!(db.get("log")?.as_deref(), Some(&b"started\nstep 1\nstep 2"[..]));
    /// assert_eq!(db.range(..).next().unwrap()?.1.as_ref(), b"started\nstep 1\nstep 2");
    /// # Ok(()) }
    /// ```
    pub fn merge(&self, key: impl AsRef<[u8]>, operand: impl AsRef<[u8]>) -> Result<()> {
        let op = write::SingleWrite::Merge(key.as_ref(), operand.as_ref());
        write::write_one(&self.inner, DEFAULT_KEYSPACE, op, || Ok(()))
    }

    /// Deletes every key in `range` in one write, with the default durability: any range
    /// expression (`a..b`, `a..=b`, `a..`, `..b`, `..`; see [`KeyRange`]). See
    /// [`WriteBatch::delete_range`] to combine it atomically with other writes. An empty
    /// range writes nothing. Fails with [`Error::KeyTooLarge`] if a bound is more than one byte
    /// longer than [`crate::MAX_KEY_BYTES`] (one byte more is the bound just past the
    /// longest key).
    ///
    /// Its cost does not depend on how many keys it covers: it writes one range tombstone,
    /// which reads apply to the values they find, and compaction drops the keys it covers
    /// (and, once nothing older lies below, the tombstone itself). Snapshots taken before it
    /// still see the keys.
    ///
    /// ```
    /// # use bloomkv::Readable;
    /// # fn main() -> bloomkv::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::new())?;
    /// for i in 0..100 {
    ///     db.put(format!("log:{i:03}"), "entry")?;
    /// }
    /// let before = db.snapshot();
    /// db.delete_range("log:000".."log:090")?;
    /// assert_eq!(db.get("log:042")?, None);
    /// assert_eq!(db.range(..).count(), 10);
    /// assert!(before.get("log:042")?.is_some());
    /// db.delete_range("log:095"..)?; // to the end
    /// db.delete_range(..="log:090")?; // from the start, "log:090" included
    /// assert_eq!(db.range(..).count(), 4);
    /// # Ok(()) }
    /// ```
    pub fn delete_range(&self, range: impl KeyRange) -> Result<()> {
        let (start, end) = half_open(range);
        let op = write::SingleWrite::DeleteRange(&start, &end);
        write::write_one(&self.inner, DEFAULT_KEYSPACE, op, || Ok(()))
    }

    /// Deletes every key that starts with `prefix` (every key, for an empty prefix) in one
    /// write: a range delete, as cheap whatever it covers.
    ///
    /// ```
    /// # use bloomkv::Readable;
    /// # fn main() -> bloomkv::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::new())?;
    /// db.put("session:1/a", "x")?;
    /// db.put("session:1/b", "y")?;
    /// db.put("session:2/a", "z")?;
    /// db.delete_prefix("session:1/")?;
    /// assert_eq!(db.prefix("session:").count(), 1);
    /// # Ok(()) }
    /// ```
    pub fn delete_prefix(&self, prefix: impl AsRef<[u8]>) -> Result<()> {
        self.delete_range(prefix_bounds(prefix.as_ref()))
    }

    /// Applies every operation of `batch` atomically: after a crash either all of it is there
    /// or none. It is on stable storage when this returns if `opts` ask for `sync`, or leave
    /// it unset and the database was opened with [`Options::sync_writes`]`(true)`.
    ///
    /// Fails with [`Error::KeyTooLarge`] or [`Error::ValueTooLarge`], applying none of the
    /// batch, if any key is longer than [`crate::MAX_KEY_BYTES`] or any value larger than
    /// [`crate::MAX_VALUE_BYTES`]; with [`Error::BatchTooLarge`] if the batch is larger
    /// than [`Options::max_batch_bytes`]; and as [`Db::merge`] for a merge operand its
    /// keyspace's operator refuses or cannot take.
    ///
    /// The batch is borrowed, so it can be written again or cleared and refilled.
    pub fn write(&self, batch: &WriteBatch, opts: &WriteOptions) -> Result<()> {
        self.inner.check_writable()?;
        if let Some(name) = batch.foreign_keyspace(self.inner.instance) {
            return Err(Error::ForeignKeyspace { name: name.to_string() });
        }
        write::check_batch_bytes(&self.inner, batch.approximate_bytes())?;
        let state = self.inner.state.load();
        batch.check(|id| state.tree(id).is_some()).map_err(|bad| match bad {
            crate::batch::BadOp::Size(e) => e,
            crate::batch::BadOp::Keyspace(id) => Error::KeyspaceDropped {
                // A batch decoded from a record was given no handles: the manifest still
                // names a keyspace dropped since, unless it was dropped before this opening.
                name: batch
                    .keyspace_name(id)
                    .map_or_else(|| self.inner.dropped_keyspace_name(id), str::to_string),
            },
        })?;
        for (id, op) in batch.iter() {
            if let crate::batch::BatchOp::Merge { key, operand } = op {
                write::check_merge(&state, id, key, operand)?;
            }
        }
        drop(state);
        let sync = opts.resolve_sync(&self.inner.opts);
        write::write(&self.inner, sync, false, |b| b.clone_from(batch))
    }

    /// Bulk-loads `entries` — keys strictly ascending, each key and value within
    /// [`crate::MAX_KEY_BYTES`] and [`crate::MAX_VALUE_BYTES`] — by writing them straight into
    /// tables and adding those to the tree in one manifest edit, instead of putting them one
    /// by one through the WAL, the memtable and compaction. Returns the number of entries.
    ///
    /// The ingest is atomic, like one [`WriteBatch`] holding every entry: all entries take
    /// one sequence number, reserved once the first entry is read. It is newer than every
    /// write that returned before the call, and older than every write made while the ingest
    /// runs — every write that begins after `entries` was asked for its second entry, on any
    /// thread, `entries` itself included — and after it. So an ingested value replaces older
    /// ones, and a `put` or `delete` of an ingested key made while the ingest runs or later
    /// wins over it. (A write racing with the call's first steps may fall on either side.)
    /// The entries become visible together when the ingest returns; a snapshot or iterator
    /// taken before then never sees them. After a crash the database holds all of the entries
    /// or none of them; when this returns they are durable (in fsynced tables named by an
    /// fsynced manifest).
    ///
    /// How: the sequence number is reserved in the WAL and the memtable switched, which holds
    /// writers for a moment only; the tables are then written while writes go on, and placed,
    /// once the memtable holding the writes before the ingest is flushed, on the deepest level
    /// whose tables, and those of every level above it, leave the ingested key range free (L0
    /// if L0 overlaps it), so data loaded into an empty key range is not compacted again.
    /// Reads, writes and flushes go on while an ingest runs; compactions wait until its tables
    /// are added, so writes slow down or stop if L0 fills up meanwhile, as when compaction
    /// falls behind. Ingests run one at a time. [`Db::close`] on another thread makes a
    /// running ingest stop with [`Error::Closed`].
    ///
    /// Refused, with no table file left behind and the database usable: with
    /// [`Error::InvalidArgument`] if a key does not sort after the one before it (descending
    /// or repeated), with [`Error::KeyTooLarge`] or [`Error::ValueTooLarge`] for an entry over
    /// the limits; on a read-only handle with [`Error::ReadOnly`]. A refusal at the first entry
    /// changes nothing; a later one leaves the data unchanged, but the memtable was switched
    /// and flushed and the reserved sequence number stays taken, holding nothing. An I/O error
    /// while the ingest's tables are written is returned the same way (one in the memtable's
    /// flush stops the database, as a failed flush always does). An I/O error once they are
    /// being added to the tree stops the database like a failed WAL write (it and later writes
    /// return errors, later ones [`Error::Background`]); reopening finds all of the ingest or
    /// none of it. An empty `entries` changes nothing.
    ///
    /// ```
    /// # use bloomkv::Readable;
    /// # fn main() -> bloomkv::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
    /// db.put(b"user:0002", b"old")?;
    /// let rows = (0..1000u32).map(|i| (format!("user:{i:04}"), i.to_le_bytes()));
    /// assert_eq!(db.ingest(rows)?, 1000);
    /// assert_eq!(db.get(b"user:0002")?.as_deref(), Some(&2u32.to_le_bytes()[..]));
    /// db.put(b"user:0002", b"newer")?; // later writes win
    /// assert_eq!(db.get(b"user:0002")?.as_deref(), Some(&b"newer"[..]));
    ///
    /// let descending = [(b"b", b"1"), (b"a", b"2")];
    /// assert!(matches!(db.ingest(descending), Err(bloomkv::Error::InvalidArgument(_))));
    /// assert_eq!(db.get(b"a")?, None); // nothing of a refused ingest is applied
    /// # Ok(()) }
    /// ```
    pub fn ingest<I, K, V>(&self, entries: I) -> Result<u64>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        self.inner.check_writable()?;
        ingest::ingest(
            &self.inner,
            DEFAULT_KEYSPACE,
            DEFAULT_KEYSPACE_NAME,
            entries.into_iter().map(Ok),
        )
    }

    /// [`Db::ingest`] from a source that can fail, such as a file being read: the first
    /// `Err` stops the ingest, which then changes nothing and returns that error.
    ///
    /// ```
    /// # use bloomkv::Readable;
    /// # fn main() -> bloomkv::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
    /// let lines = "apple=red\nbanana=yellow\ncherry";
    /// let rows = lines.lines().map(|l| {
    ///     l.split_once('=')
    ///         .ok_or_else(|| bloomkv::Error::InvalidArgument(format!("no '=' in {l:?}")))
    /// });
    /// assert!(db.try_ingest(rows).is_err());
    /// assert_eq!(db.get("apple")?, None);
    /// # Ok(()) }
    /// ```
    pub fn try_ingest<I, K, V>(&self, entries: I) -> Result<u64>
    where
        I: IntoIterator<Item = Result<(K, V)>>,
        K: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        self.inner.check_writable()?;
        ingest::ingest(&self.inner, DEFAULT_KEYSPACE, DEFAULT_KEYSPACE_NAME, entries.into_iter())
    }

    /// Writes an openable copy of the database as it is now into `dir` (which must not exist,
    /// or be an empty directory), while reads and writes go on; returns the sequence number
    /// the copy holds every write up to. Table files are hard-linked where the file system
    /// allows (no space is used until the original moves on), copied otherwise; the
    /// memtables' contents become one more table, so the copy needs no WAL. See
    /// [`Snapshot::checkpoint`] to copy a given snapshot.
    ///
    /// The copy is atomic: it is built in a temporary directory next to `dir`
    /// (`.<name>.checkpoint-tmp-…`), synced, and renamed to `dir`, so `dir` appears complete
    /// or not at all, even across a crash or a power loss. Were it filled in place, a copy
    /// cut short would open as an empty database, silently. When this returns an error
    /// `dir` is as it was (missing, or empty; parent directories made on the way to it may
    /// stay) and the temporary directory is removed, as far as the file system lets it be;
    /// a process killed part-way leaves the temporary directory, which no one opens by
    /// mistake, for the caller to remove.
    ///
    /// Fails with [`Error::InvalidArgument`] if `dir` has entries, or if it is the database
    /// directory, lies inside it (a directory there could take a name the database needs,
    /// and it would no longer open) or holds it. Symbolic links and `..` are resolved
    /// before comparing.
    ///
    /// ```
    /// # use bloomkv::Readable;
    /// # fn main() -> bloomkv::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path().join("live"), bloomkv::Options::default())?;
    /// db.put("k", "v1")?;
    /// db.checkpoint(dir.path().join("backup"))?;
    /// db.put("k", "v2")?;
    /// let copy = bloomkv::Db::open(dir.path().join("backup"), bloomkv::Options::default())?;
    /// assert_eq!(copy.get("k")?.as_deref(), Some(&b"v1"[..]));
    /// # Ok(()) }
    /// ```
    pub fn checkpoint(&self, dir: impl AsRef<Path>) -> Result<u64> {
        let snapshot = self.snapshot();
        snapshot.checkpoint(dir)?;
        Ok(snapshot.sequence())
    }

    /// Begins an optimistic [`Transaction`] reading the database as it is now, in every
    /// keyspace; see [`Transaction`] for what its commit checks.
    pub fn transaction(&self) -> Transaction {
        Transaction::new(self.inner.clone())
    }

    /// Runs `f` in a new transaction and commits it; on [`Error::Conflict`] runs it again
    /// from a new snapshot, up to [`TRANSACT_ATTEMPTS`] times in all, and then returns the
    /// conflict. An error from `f` is returned at once, without a commit. `f` may run more
    /// than once, so its effects outside the transaction should be repeatable.
    ///
    /// `f` may fail with the application's own error type `E`, any type a [`Error`]
    /// converts into, so `?` works on both the transaction's calls and the application's;
    /// engine errors (the final conflict included) come back converted. Only a conflict of
    /// the commit is retried, never an error `f` returns. When `f` uses `?` and ends in
    /// `Ok(..)`, Rust cannot tell `E` by itself: name it, as with `Ok::<_, MyError>(..)` or
    /// the type of the result.
    ///
    /// ```
    /// # use bloomkv::Readable;
    /// # fn main() -> bloomkv::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
    /// let add = |n: u64| {
    ///     db.transact(|tx| {
    ///         let old = tx.get("hits")?.map_or(0, |v| u64::from_le_bytes(v[..].try_into().unwrap()));
    ///         tx.put("hits", (old + n).to_le_bytes())?;
    ///         Ok::<_, bloomkv::Error>(old + n)
    ///     })
    /// };
    /// std::thread::scope(|s| {
    ///     for _ in 0..4 {
    ///         s.spawn(|| (0..25).try_for_each(|_| add(1).map(drop)));
    ///     }
    /// });
    /// assert_eq!(add(0)?, 100);
    /// # Ok(()) }
    /// ```
    ///
    /// With an application error:
    ///
    /// ```
    /// # use bloomkv::Readable;
    /// #[derive(Debug)]
    /// enum AppError {
    ///     Db(bloomkv::Error),
    ///     Overdrawn,
    /// }
    /// impl From<bloomkv::Error> for AppError {
    ///     fn from(e: bloomkv::Error) -> Self {
    ///         AppError::Db(e)
    ///     }
    /// }
    /// # fn main() -> Result<(), AppError> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
    /// db.put("balance", 10u64.to_le_bytes())?;
    /// let withdraw = |n: u64| -> Result<u64, AppError> {
    ///     db.transact(|tx| {
    ///         let v = tx.get("balance")?.ok_or(AppError::Overdrawn)?;
    ///         let balance = u64::from_le_bytes(v[..].try_into().unwrap());
    ///         let left = balance.checked_sub(n).ok_or(AppError::Overdrawn)?;
    ///         tx.put("balance", left.to_le_bytes())?;
    ///         Ok(left)
    ///     })
    /// };
    /// assert_eq!(withdraw(4)?, 6);
    /// assert!(matches!(withdraw(7), Err(AppError::Overdrawn))); // nothing written
    /// assert_eq!(db.get("balance")?.as_deref(), Some(&6u64.to_le_bytes()[..]));
    /// # Ok(()) }
    /// ```
    pub fn transact<T, E: From<Error>>(
        &self,
        f: impl FnMut(&mut Transaction) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        transaction::transact(|| Transaction::new(self.inner.clone()), f)
    }

    /// Sets `key` to `new` (`None` deletes it) if and only if its value is `expected`
    /// (`None`: absent), atomically with respect to every other write: returns whether it
    /// did. A write to the key between the read and the write makes it read the key again,
    /// so `Ok(false)` means the key really held something else; it never fails with
    /// [`Error::Conflict`]. The write has the database's default durability.
    ///
    /// ```
    /// # use bloomkv::Readable;
    /// # fn main() -> bloomkv::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
    /// assert!(db.compare_and_swap("lease", None, Some(b"worker-1"))?); // taken
    /// assert!(!db.compare_and_swap("lease", None, Some(b"worker-2"))?); // already held
    /// assert!(db.compare_and_swap("lease", Some(b"worker-1"), None)?); // released
    /// assert_eq!(db.get("lease")?, None);
    /// assert!(db.compare_and_swap("name", None, Some("ada"))?); // any bytes: `&str`, `Vec<u8>`, ...
    /// assert!(db.compare_and_swap("name", Some("ada"), None)?);
    /// let old = db.get("n")?; // `Option<Value>`
    /// assert!(db.compare_and_swap("n", old.as_deref(), Some(&1u64.to_le_bytes()[..]))?);
    /// # Ok(()) }
    /// ```
    ///
    /// `expected` and `new` are one type `V`, so a bare `None` takes the other argument's
    /// type: with two separate types a `None` would have none Rust could infer. The price:
    /// both `None`, or two different types (byte strings of different lengths are different
    /// array types), need spelling out, as `None::<&[u8]>` or `&b"..."[..]`.
    pub fn compare_and_swap<V: AsRef<[u8]>>(
        &self,
        key: impl AsRef<[u8]>,
        expected: Option<V>,
        new: Option<V>,
    ) -> Result<bool> {
        let (expected, new) = (expected.as_ref().map(V::as_ref), new.as_ref().map(V::as_ref));
        transaction::compare_and_swap(&self.inner, None, key.as_ref(), expected, new)
    }

    /// A consistent read-only view of the database as it is now. It keeps the memtables and
    /// table files it needs alive until dropped.
    ///
    /// Its reads are repeatable: it judges expiring values ([`Db::put_with_ttl`]) at the
    /// time it was taken, not when it reads, so a value live then stays readable through it
    /// after the clock passes its expiry (while the database no longer returns it), and a
    /// compaction meanwhile does not take it away (the snapshot keeps its files). A
    /// [`Transaction`] reads at a snapshot taken when it begins, and judges expiry likewise.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot::new(self.inner.clone(), DEFAULT_KEYSPACE, DEFAULT_KEYSPACE_NAME.into())
    }

    /// The keyspace `name` — a separate set of keys with its own tables and table options,
    /// sharing this database's WAL, memory and background work — created with `opts` if it
    /// does not exist yet. Opening an existing keyspace with table options other than those
    /// it has records the new ones (they apply to tables written from then on); a default
    /// time to live, prefix extractor, merge operator or compaction filter other than the
    /// recorded one fails with [`Error::SettingMismatch`] unless
    /// [`KeyspaceOptions::change_settings`](crate::KeyspaceOptions::change_settings) is set
    /// ([`Db::keyspace_options`] gives the recorded options back). Names are
    /// UTF-8, 1 to 255 bytes; `"default"` is the keyspace `Db`'s own methods use, whose
    /// options come from [`Options`].
    ///
    /// Creating a keyspace is durable when this returns. A [`WriteBatch`] can write to
    /// several keyspaces atomically ([`WriteBatch::put_in`]); a [`Snapshot`] sees them all
    /// at one moment ([`Snapshot::keyspace`]). See [`Keyspace`] for an example.
    ///
    /// Fails with [`Error::ReadOnly`] on a read-only handle if the keyspace does not exist.
    /// There, `opts` change nothing recorded, but a merge operator they give (under the
    /// recorded name) is the keyspace's from then on, for every handle on it: a read-only
    /// database has no other way to learn it.
    ///
    /// The name may be a `&str`, a `String` or anything else that is `AsRef<str>`:
    ///
    /// ```
    /// # fn main() -> bloomkv::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
    /// let tenant = 7;
    /// let ks = db.keyspace(format!("tenant-{tenant}"), bloomkv::KeyspaceOptions::default())?;
    /// assert_eq!(ks.name(), "tenant-7");
    /// assert!(db.existing_keyspace(String::from("tenant-7")).is_some());
    /// db.drop_keyspace(ks.name().to_string())?;
    /// # Ok(()) }
    /// ```
    pub fn keyspace(
        &self,
        name: impl AsRef<str>,
        opts: crate::KeyspaceOptions,
    ) -> Result<Keyspace> {
        let (id, name) = self.inner.open_keyspace(name.as_ref(), opts)?;
        Ok(self.keyspace_handle(id, name))
    }

    /// The keyspace `name` if it exists (`"default"` always does), with the options it has:
    /// for callers that must not create one, such as tools on a read-only handle. It opens
    /// nothing and records nothing: after a reopen, a keyspace whose merge operator was not
    /// given again to [`Db::keyspace`] has none, and reads that meet its merge operands fail
    /// with [`Error::MergeOperatorMissing`] (see [`Db::keyspace_options`]).
    ///
    /// ```
    /// # use bloomkv::Readable;
    /// # fn main() -> bloomkv::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
    /// assert!(db.existing_keyspace("users").is_none());
    /// db.keyspace("users", bloomkv::KeyspaceOptions::default())?.put("u1", "ada")?;
    /// let users = db.existing_keyspace("users").unwrap();
    /// assert_eq!(users.get("u1")?.as_deref(), Some(&b"ada"[..]));
    /// # Ok(()) }
    /// ```
    pub fn existing_keyspace(&self, name: impl AsRef<str>) -> Option<Keyspace> {
        let name = name.as_ref();
        let state = self.inner.load_state();
        let tree = state.trees.iter().find(|t| &*t.name == name)?;
        Some(self.keyspace_handle(tree.id, tree.name.clone()))
    }

    /// The options keyspace `name` has now (`None` if it does not exist): those recorded in
    /// the database, with the merge operator and compaction filter given since it was
    /// opened, if any. The manifest cannot hold callbacks, only their names: after a
    /// reopen, add them to open the keyspace again without restating the other settings.
    ///
    /// ```
    /// # fn main() -> bloomkv::Result<()> {
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use bloomkv::{Compression, Db, Error, KeyspaceOptions, Options, U64Add};
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = Db::open(dir.path(), Options::new())?;
    /// let opts = KeyspaceOptions::new()
    ///     .compression(Compression::Zstd { level: 3 })
    ///     .default_ttl(Some(Duration::from_secs(86400)))
    ///     .merge_operator(Arc::new(U64Add));
    /// db.keyspace("hits", opts)?;
    /// db.close()?;
    ///
    /// let db = Db::open(dir.path(), Options::new())?;
    /// let recorded = db.keyspace_options("hits").unwrap();
    /// // The operator's name is recorded, not the operator: it must be given again.
    /// let r = db.keyspace("hits", recorded.clone());
    /// assert!(matches!(r, Err(Error::SettingMismatch { setting: "merge_operator", .. })));
    /// let hits = db.keyspace("hits", recorded.merge_operator(Arc::new(U64Add)))?;
    /// hits.merge("/", U64Add::operand(1))?;
    /// # Ok(()) }
    /// ```
    pub fn keyspace_options(&self, name: impl AsRef<str>) -> Option<crate::KeyspaceOptions> {
        let name = name.as_ref();
        let state = self.inner.load_state();
        Some(state.trees.iter().find(|t| &*t.name == name)?.opts.clone())
    }

    /// The names of the keyspaces, the default one first, then in creation order.
    pub fn keyspace_names(&self) -> Vec<String> {
        self.inner.load_state().trees.iter().map(|t| t.name.to_string()).collect()
    }

    /// Drops keyspace `name`: its keys and tables are gone (table files are deleted once no
    /// snapshot or iterator reads them) and its handles fail with
    /// [`Error::KeyspaceDropped`]. Durable when this returns. The default keyspace cannot be
    /// dropped; a name that does not exist gives [`Error::KeyspaceDropped`].
    ///
    /// ```
    /// # use bloomkv::Readable;
    /// # fn main() -> bloomkv::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
    /// let scratch = db.keyspace("scratch", bloomkv::KeyspaceOptions::default())?;
    /// scratch.put("k", "v")?;
    /// db.drop_keyspace("scratch")?;
    /// assert!(matches!(scratch.get("k"), Err(bloomkv::Error::KeyspaceDropped { .. })));
    /// assert_eq!(db.keyspace_names(), ["default"]);
    /// // Created again, it starts empty.
    /// let scratch = db.keyspace("scratch", bloomkv::KeyspaceOptions::default())?;
    /// assert_eq!(scratch.get("k")?, None);
    /// # Ok(()) }
    /// ```
    pub fn drop_keyspace(&self, name: impl AsRef<str>) -> Result<()> {
        self.inner.drop_keyspace(name.as_ref())
    }

    /// Writes the memtable to an L0 table and returns when that table is recorded in the
    /// manifest (its writes no longer depend on the WAL). The memtables of every keyspace
    /// are flushed together.
    ///
    /// **It blocks the calling thread**, commonly for tens of milliseconds: it writes and
    /// fsyncs a table per keyspace with data and the manifest, after any flush already
    /// running; longer with a large memtable or a slow disk. An async caller should run it
    /// off the executor's threads, e.g. with tokio's `spawn_blocking` (as it should
    /// [`Db::compact`], [`Db::sync`] and synced writes).
    ///
    /// ```
    /// # use bloomkv::Readable;
    /// # fn main() -> bloomkv::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
    /// db.put("k", "v")?;
    /// // Off the caller's thread; on tokio, `spawn_blocking` with an `Arc<Db>`.
    /// std::thread::scope(|s| s.spawn(|| db.flush()).join().unwrap())?;
    /// assert_eq!(db.get("k")?.as_deref(), Some(&b"v"[..]));
    /// # Ok(()) }
    /// ```
    pub fn flush(&self) -> Result<()> {
        self.inner.check_writable()?;
        write::write(&self.inner, false, true, |_| {})?;
        flush::wait_for_flushes(&self.inner)
    }

    /// Compacts the whole database into one level: the deepest in use, or a deeper one if the
    /// data is over that level's target size (the first whose target it is under), so the
    /// background finds nothing left to compact. Every overwritten version and every
    /// tombstone that no snapshot needs is dropped, and every expired value
    /// ([`Db::put_with_ttl`]). In a keyspace with a [`crate::CompactionFilter`], or whose last
    /// level holds expired values, the last level's other tables are rewritten too, so the
    /// filter is asked about every value and no expired value is left. Returns when done,
    /// with the replaced tables' files removed (one a snapshot or iterator still reads goes
    /// when that lets go of it).
    ///
    /// Expired values are also dropped without it: the background compaction thread rewrites
    /// a table once enough of its values have expired, looking after every flush and at
    /// least once a minute.
    pub fn compact(&self) -> Result<()> {
        self.inner.check_writable()?;
        self.flush()?;
        compaction::compact_all(&self.inner)?;
        // The replaced tables' files are gone when this returns (unless a reader holds one).
        self.inner.caches.deleter.wait_idle();
        Ok(())
    }

    /// Makes every write acknowledged so far durable (fsyncs the WAL).
    pub fn sync(&self) -> Result<()> {
        self.inner.check_writable()?;
        write::write(&self.inner, true, false, |_| {})
    }

    /// Restarts a database that an I/O error stopped — a full disk, most often — without
    /// reopening it. After a failed write to the WAL, the manifest or a table, that call and
    /// every later write fail ([`Error::Background`] names the first error) until the
    /// database is resumed or reopened. Free the space, then call `resume`:
    ///
    /// - nothing acknowledged is lost: the engine's state in memory holds every write that
    ///   returned `Ok`, and a new manifest and WAL segment are written from it;
    /// - nothing refused appears: a failed manifest edit (a flush, a compaction, an ingest,
    ///   a keyspace's creation or drop) is not in the new manifest, and a refused write's
    ///   record was cut off the WAL when it failed;
    /// - it returns `Ok` only once the memtables that the failed WAL segment backs have been
    ///   flushed, so the disk has taken writes again before any new write is accepted.
    ///
    /// If the disk is still full it fails with the new error and the database stays stopped;
    /// call it again later. A no-op on a running database.
    ///
    /// ```
    /// # use bloomkv::Readable;
    /// # fn main() -> bloomkv::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
    /// if let Err(bloomkv::Error::Background(cause)) = db.put("k", "v") {
    ///     eprintln!("stopped by {cause}; retrying once space is freed");
    ///     db.resume()?;
    ///     db.put("k", "v")?;
    /// }
    /// # assert_eq!(db.get("k")?.as_deref(), Some(&b"v"[..]));
    /// # Ok(()) }
    /// ```
    pub fn resume(&self) -> Result<()> {
        self.inner.resume()
    }

    /// Counters and the shape of the tree: totals, and per keyspace
    /// ([`Stats::keyspaces`]).
    pub fn stats(&self) -> Stats {
        stats::collect(&self.inner)
    }

    /// Closes the database: stops background work (a flush or compaction step in progress
    /// completes), fsyncs the WAL and releases the LOCK, so the directory can be opened again
    /// at once — by this process or another.
    ///
    /// Takes `&self`, so a `Db` shared through an `Arc` can be closed by any holder. After
    /// `close`, every operation on the handle, and every read through a [`Snapshot`] or
    /// [`DbIterator`] taken from it, returns [`Error::Closed`] (outstanding views do not keep
    /// the database open: RocksDB and LevelDB make releasing them the caller's duty, and a
    /// view that silently held the LOCK would make the next open fail). Returns the error
    /// that stopped background work, if one did. Closing twice is a no-op. Dropping the `Db`
    /// and every [`Keyspace`] handle taken from it closes it too, ignoring errors.
    ///
    /// ```
    /// # use bloomkv::Readable;
    /// # fn main() -> bloomkv::Result<()> {
    /// use std::sync::Arc;
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = Arc::new(bloomkv::Db::open(dir.path(), bloomkv::Options::default())?);
    /// db.put(b"k", b"v")?;
    /// let snap = db.snapshot();
    /// db.close()?;
    /// assert!(matches!(snap.get(b"k"), Err(bloomkv::Error::Closed)));
    /// let again = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?; // not Locked
    /// assert_eq!(again.get(b"k")?.as_deref(), Some(&b"v"[..]));
    /// # Ok(()) }
    /// ```
    pub fn close(&self) -> Result<()> {
        // Closing joins the background threads, one of which may be running the callback.
        crate::events::refuse_in_callback()?;
        self.open.shutdown()
    }
}

pub(crate) use crate::sync::lock as lock_mutex;
