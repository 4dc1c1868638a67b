//! Optimistic transactions: reads at a snapshot, writes buffered in the transaction, and a
//! commit that writes the buffer as one batch only if nothing the transaction read has been
//! written since its snapshot.
//!
//! The check runs in the write path (`write::write_checked`): the group leader validates the
//! transaction's reads after it holds the write path and before the group takes its sequence
//! numbers, so no write can land between the check and the batch. Every write numbered before
//! the group is then in a memtable of the current state, or in a batch earlier in the same
//! group, and the leader looks in both:
//!
//! - each key read: its newest entry, and the newest range tombstone over it, in each memtable
//!   at least as new as the one active at the snapshot (`MemTable::newest_write`), flushed
//!   ones kept as history included (`Tree::history`, `Options::memtable_history_bytes`,
//!   kept only while an open transaction may need them: `LiveTransactions`);
//! - each range scanned: every entry in it and every range tombstone overlapping it in those
//!   memtables (`MemTable::written_after`);
//! - the batches ahead in the group, op by op;
//! - the key ranges of the ingests the snapshot may lack (`IngestLog`).
//!
//! A write to a key or range read, numbered after the snapshot, is in the memtable that was
//! active at the snapshot or a newer one, and memtables keep every version. Flushed ones
//! stay in the history, oldest leaving first, up to a byte bound; once the one active at the
//! snapshot has left it, the commit is refused — a false conflict, the price of never missing
//! a true one. Tables cannot stand in for it: compaction keeps only the newest version of a
//! key whatever the snapshots, and drops a delete with the put beneath it, so a key deleted
//! after the snapshot may leave no trace at all (and reading tables would put I/O in the
//! write leader). An ingest's tables carry a sequence number but pass no memtable: the
//! ingests numbered after those done at the snapshot conflict where their key range (from
//! the first key on, until their last is known) meets a key or range read, and every one does
//! once the bounded log no longer reaches back to the snapshot.
//!
//! The snapshot is taken only from a state still current after its sequence number was
//! loaded (`DbInner::stable_read_view`): a memtable switch between the two loads would leave
//! writes at or below that number in a memtable the snapshot lacks, unseen by its reads and,
//! being at or below the snapshot, by the check.
//!
//! Files: `mod.rs` ([`Transaction`] and its API), `read_set.rs` (what it read, and the
//! commit's check), `ingest_log.rs` (the recent ingests), `live.rs` (the live transactions,
//! which the memtables' history is kept for), `iter.rs`, `cursor.rs`, and `transact.rs`
//! (running a transaction again on a conflict).

mod cursor;
mod ingest_log;
mod iter;
mod live;
mod read_set;
mod transact;
mod view;

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::read::ReadView;
use super::{
    half_open, lock_mutex as lock, write, Cursor, DbInner, DbIterator, KeyRange, Keyspace,
};
use crate::batch::{check_entry_size, check_range_bound};
use crate::db::readable::Bounds;
use crate::key::SeqNo;
use crate::key_range::prefix_bounds;
use crate::options::WriteOptions;
use crate::version::edit::{KeyspaceId, DEFAULT_KEYSPACE};
use crate::version::set::DEFAULT_KEYSPACE_NAME;
use crate::{Error, Result, Value, WriteBatch};

pub use cursor::{TransactionCursor, TransactionCursorEntries};
pub(crate) use ingest_log::IngestLog;
pub use iter::TransactionIter;
use live::LiveTransaction;
pub(crate) use live::LiveTransactions;
pub(crate) use read_set::ReadSet;
use read_set::Reads;
pub use transact::TRANSACT_ATTEMPTS;
pub(crate) use transact::{compare_and_swap, transact};
pub use view::TransactionKeyspace;

/// An optimistic transaction, from [`crate::Db::transaction`]: it reads the database as of
/// the moment it began, buffers its writes (in any keyspaces) and reads them back, and
/// [`Transaction::commit`] writes them atomically — as one [`WriteBatch`] — only if nothing
/// it read has been written since it began; otherwise the commit fails with
/// [`Error::Conflict`] and writes nothing.
///
/// # Isolation
///
/// Reads ([`crate::Readable`]) see a snapshot taken when the transaction began, with the
/// transaction's own writes over it. The commit checks every key read (by `get`,
/// `multi_get` and `contains_key`) and every range scanned (by `range`, `prefix`, `cursor`,
/// `prefixes_exist`, `first_key_value` and `last_key_value`, the whole range asked for,
/// however far the iterator or cursor went) against every write made since the snapshot by
/// anyone — puts, deletes, range deletes, ingests and other transactions — and commits
/// only if none touched them. So a
/// committed transaction behaves as if it ran alone at the moment of its commit, for
/// everything it read: it is serializable with respect to the keys and ranges it read,
/// phantoms included (a key inserted into a scanned range is a conflict). Reads answered
/// from the transaction's own writes depend on nothing else and are not checked.
///
/// What is not checked: keys written without being read ("blind" writes) — two
/// transactions that only write a key both commit, the later one's value wins, as with
/// plain writes. A transaction that must not overwrite a key it did not expect should read
/// it first. A read-only transaction commits trivially: its reads were consistent already.
///
/// Conflicts are never missed; some are reported that a finer check would not: once more
/// flushed memtables than [`crate::Options::memtable_history_bytes`] keeps have been written
/// since it began, or more than 256 ingests have run, any transaction that read something
/// is refused, and so is one whose reads meet the key range of an ingest that ran meanwhile
/// (between the ingest's first and last keys, or from its first key on while it is writing
/// its tables), even where the ingest holds no key read. Retry ([`crate::Db::transact`]
/// does).
///
/// Its reads and its writes without `_in` (`put`, `delete`, ...) work on the transaction's
/// keyspace: the default one for [`crate::Db::transaction`], the handle's for
/// [`Keyspace::transaction`]. It reads any other keyspace through
/// [`Transaction::keyspace`], and writes it with the `_in` methods (`put_in`, ...).
///
/// The transaction holds the memtables and tables of its snapshot alive until it is
/// committed or dropped. Dropping it discards its writes.
///
/// ```
/// use bloomkv::Readable;
/// # fn main() -> bloomkv::Result<()> {
/// let dir = tempfile::tempdir().unwrap();
/// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
/// let accounts = db.keyspace("accounts", bloomkv::KeyspaceOptions::default())?;
/// accounts.put("alice", 100u64.to_le_bytes())?;
/// let balance = |v: Option<bloomkv::Value>| {
///     u64::from_le_bytes(v.as_deref().unwrap_or(&[0; 8]).try_into().unwrap())
/// };
///
/// let mut tx = db.transaction();
/// let alice = balance(tx.keyspace(&accounts)?.get("alice")?);
/// tx.put_in(&accounts, "alice", (alice - 30).to_le_bytes())?;
/// tx.put_in(&accounts, "bob", 30u64.to_le_bytes())?;
/// tx.put("log:1", "alice->bob 30")?; // the default keyspace, in the same batch
/// assert_eq!(balance(tx.keyspace(&accounts)?.get("alice")?), 70); // its own write
/// assert_eq!(balance(accounts.get("alice")?), 100); // not written yet
/// tx.commit()?;
/// assert_eq!(balance(accounts.get("bob")?), 30);
///
/// // A write to a key it read, after it began, makes the commit fail.
/// let mut tx = db.transaction();
/// let alice = balance(tx.keyspace(&accounts)?.get("alice")?);
/// accounts.put("alice", 0u64.to_le_bytes())?;
/// tx.put_in(&accounts, "alice", (alice + 1).to_le_bytes())?;
/// assert!(matches!(tx.commit(), Err(bloomkv::Error::Conflict)));
/// assert_eq!(balance(accounts.get("alice")?), 0);
/// # Ok(()) }
/// ```
pub struct Transaction {
    inner: Arc<DbInner>,
    view: ReadView,
    /// Keeps the memtables flushed since the snapshot in the history until the transaction
    /// is committed or dropped.
    _live: LiveTransaction,
    reads: Mutex<ReadSet>,
    writes: PerKeyspace<Pending>,
    /// The keyspace the methods without `_in` work on (`None`: the default one).
    home: Option<Keyspace>,
}

impl std::fmt::Debug for Transaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction").field("seq", &self.view.seq()).finish_non_exhaustive()
    }
}

/// The buffered writes to one keyspace. A range delete drops the buffered point writes it
/// covers, so the batch is written as every range delete, then every point write.
#[derive(Default)]
struct Pending {
    name: Option<Arc<str>>,
    /// Key → value, or `None` for a delete.
    points: BTreeMap<Vec<u8>, Option<Value>>,
    /// Half-open ranges deleted.
    ranges: Vec<(Vec<u8>, Vec<u8>)>,
    /// Key → merge operands (oldest first) written after the key's entry in `points`, if it
    /// has one, and after the range deletes; written last, so they land on top of both.
    merges: BTreeMap<Vec<u8>, Vec<Vec<u8>>>,
    /// Key → time to live in milliseconds, for the puts in `points` that expire. Only a put
    /// sets an entry (every other write of the key removes it), so one left by a put that a
    /// range delete dropped is never read.
    ttls: BTreeMap<Vec<u8>, u64>,
}

impl Pending {
    /// About the bytes these writes take in a batch (each op's header, lengths and bytes).
    fn encoded_bytes(&self) -> usize {
        let ranges = self.ranges.iter().map(|(s, e)| s.len() + e.len() + 16);
        let points =
            self.points.iter().map(|(k, v)| k.len() + v.as_ref().map_or(0, |v| v.len()) + 16);
        let merges =
            self.merges.iter().flat_map(|(k, ops)| ops.iter().map(|o| k.len() + o.len() + 16));
        ranges.chain(points).chain(merges).sum()
    }

    /// True if a buffered range delete covers `key`.
    fn hides(&self, key: &[u8]) -> bool {
        hidden(&self.ranges, key)
    }
}

/// What a transaction keeps per keyspace it touches: the default keyspace's in place (most
/// transactions touch only it, and then this allocates nothing), the others in a short list
/// (a transaction touches few: a linear search beats a map).
#[derive(Default)]
struct PerKeyspace<T> {
    default: Option<T>,
    others: Vec<(KeyspaceId, T)>,
}

impl<T: Default> PerKeyspace<T> {
    fn get(&self, id: KeyspaceId) -> Option<&T> {
        match id {
            DEFAULT_KEYSPACE => self.default.as_ref(),
            _ => self.others.iter().find(|(i, _)| *i == id).map(|(_, t)| t),
        }
    }

    /// The entry for `id`, made empty if there is none.
    fn entry(&mut self, id: KeyspaceId) -> &mut T {
        if id == DEFAULT_KEYSPACE {
            return self.default.get_or_insert_with(T::default);
        }
        let at = match self.others.iter().position(|(i, _)| *i == id) {
            Some(at) => at,
            None => {
                self.others.push((id, T::default()));
                self.others.len() - 1
            }
        };
        &mut self.others[at].1
    }

    fn iter(&self) -> impl Iterator<Item = (KeyspaceId, &T)> {
        let default = self.default.iter().map(|t| (DEFAULT_KEYSPACE, t));
        default.chain(self.others.iter().map(|(id, t)| (*id, t)))
    }

    fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.default.iter_mut().chain(self.others.iter_mut().map(|(_, t)| t))
    }
}

/// True if one of the half-open `ranges` holds `key`.
fn hidden(ranges: &[(Vec<u8>, Vec<u8>)], key: &[u8]) -> bool {
    ranges.iter().any(|(s, e)| s.as_slice() <= key && key < e.as_slice())
}

type Item = Result<(Vec<u8>, Value)>;

impl Transaction {
    pub(crate) fn new(inner: Arc<DbInner>) -> Transaction {
        // Read before the view: an ingest counted as done here installed before the view was
        // loaded, so the view holds its tables; any other is caught at the commit.
        let done = inner.ingests_done.load(Ordering::SeqCst);
        let live = LiveTransactions::begin(&inner);
        let view = inner.stable_read_view();
        let reads = ReadSet {
            seq: view.seq(),
            wal: view.state().default_tree().mem.wal_number,
            ingests_done: done,
            ..ReadSet::default()
        };
        Transaction {
            inner,
            view,
            _live: live,
            reads: Mutex::new(reads),
            writes: PerKeyspace::default(),
            home: None,
        }
    }

    /// A transaction whose methods without `_in` work on `keyspace`.
    pub(crate) fn in_keyspace(keyspace: &Keyspace) -> Transaction {
        let mut tx = Transaction::new(keyspace.inner.clone());
        tx.home = Some(keyspace.clone());
        tx
    }

    fn home_id(&self) -> KeyspaceId {
        self.home.as_ref().map_or(DEFAULT_KEYSPACE, Keyspace::id)
    }

    /// The sequence number of the snapshot the transaction reads.
    pub fn sequence(&self) -> SeqNo {
        self.view.seq()
    }

    /// `keyspace`'s id, if it is a handle of this database.
    fn id_of(&self, keyspace: &Keyspace) -> Result<KeyspaceId> {
        match keyspace.instance() == self.inner.instance {
            true => Ok(keyspace.id()),
            false => Err(Error::ForeignKeyspace { name: keyspace.name().to_string() }),
        }
    }

    fn name_of(keyspace: Option<&Keyspace>) -> Option<Arc<str>> {
        keyspace.map(|k| k.name().into())
    }

    /// The tree of keyspace `id` in the snapshot: a keyspace created after the transaction
    /// began is not in it, as for a [`crate::Snapshot`].
    fn tree(&self, id: KeyspaceId, name: Option<&Keyspace>) -> Result<&Arc<super::Tree>> {
        self.view.state().tree(id).ok_or_else(|| Error::KeyspaceDropped {
            name: name.map_or(DEFAULT_KEYSPACE_NAME, |k| k.name()).to_string(),
        })
    }

    fn record(&self, id: KeyspaceId, keyspace: Option<&Keyspace>, f: impl FnOnce(&mut Reads)) {
        let mut reads = lock(&self.reads);
        let r = reads.keyspaces.entry(id);
        if r.name.is_none() {
            r.name = Transaction::name_of(keyspace);
        }
        f(r);
    }

    fn get_at(&self, id: KeyspaceId, ks: Option<&Keyspace>, key: &[u8]) -> Result<Option<Value>> {
        self.inner.check_open()?;
        if let Some(ops) = self.writes.get(id).and_then(|p| p.merges.get(key)) {
            return self.merged_at(id, ks, key, ops).map(Some);
        }
        if let Some(p) = self.writes.get(id) {
            if let Some(v) = p.points.get(key) {
                return Ok(v.clone());
            }
            if p.hides(key) {
                return Ok(None);
            }
        }
        let tree = self.tree(id, ks)?;
        self.record(id, ks, |r| {
            r.keys.push(key.to_vec());
        });
        self.view.get(&self.inner, tree, key)
    }

    /// [`Transaction::get_at`], a value of the snapshot's in a blob file left unread.
    fn get_stored_at(
        &self,
        id: KeyspaceId,
        ks: Option<&Keyspace>,
        key: &[u8],
    ) -> Result<Option<bloomkv_tree::read::search::Stored>> {
        use bloomkv_tree::read::search::Stored;
        self.inner.check_open()?;
        let own = self.writes.get(id).is_some_and(|p| {
            p.merges.contains_key(key) || p.points.contains_key(key) || p.hides(key)
        });
        if own {
            return Ok(self.get_at(id, ks, key)?.map(Stored::Value));
        }
        let tree = self.tree(id, ks)?;
        self.record(id, ks, |r| {
            r.keys.push(key.to_vec());
        });
        self.view.get_stored(&self.inner, tree, key)
    }

    /// The value of `key` with the transaction's operands `ops` over its own write of the
    /// key, or else over the snapshot's value (a read, checked at commit).
    fn merged_at(
        &self,
        id: KeyspaceId,
        ks: Option<&Keyspace>,
        key: &[u8],
        ops: &[Vec<u8>],
    ) -> Result<Value> {
        let p = self.writes.get(id);
        let base = match p.and_then(|p| p.points.get(key)) {
            Some(own) => own.clone(),
            None if p.is_some_and(|p| p.hides(key)) => None,
            None => {
                let tree = self.tree(id, ks)?;
                self.record(id, ks, |r| r.keys.push(key.to_vec()));
                self.view.get(&self.inner, tree, key)?
            }
        };
        let operands: Vec<&[u8]> = ops.iter().map(Vec::as_slice).collect();
        let merged = self.tree(id, ks)?.merger().full(key, base.as_deref(), &operands)?;
        Ok(Value::from(merged))
    }

    fn multi_get_at<K: AsRef<[u8]>>(
        &self,
        id: KeyspaceId,
        ks: Option<&Keyspace>,
        keys: &[K],
    ) -> Result<Vec<Option<Value>>> {
        self.inner.check_open()?;
        let pending = self.writes.get(id);
        if pending.is_some_and(|p| keys.iter().any(|k| p.merges.contains_key(k.as_ref()))) {
            // Rare enough to read key by key.
            return keys.iter().map(|k| self.get_at(id, ks, k.as_ref())).collect();
        }
        let own = |key: &[u8]| -> Option<Option<Value>> {
            let p = pending?;
            p.points.get(key).cloned().or_else(|| p.hides(key).then_some(None))
        };
        let mut out: Vec<Option<Option<Value>>> = keys.iter().map(|k| own(k.as_ref())).collect();
        let missing: Vec<&[u8]> =
            keys.iter().zip(&out).filter(|(_, o)| o.is_none()).map(|(k, _)| k.as_ref()).collect();
        if !missing.is_empty() {
            let tree = self.tree(id, ks)?;
            self.record(id, ks, |r| r.keys.extend(missing.iter().map(|k| k.to_vec())));
            let mut found = self.view.multi_get(&self.inner, tree, &missing)?.into_iter();
            for slot in out.iter_mut().filter(|o| o.is_none()) {
                *slot = Some(found.next().flatten());
            }
        }
        Ok(out.into_iter().map(Option::flatten).collect())
    }

    /// Records `bounds` as scanned and returns the snapshot's tree with the transaction's
    /// writes in them (in key order) and its range deletes in the keyspace.
    #[allow(clippy::type_complexity)]
    fn scan_at(
        &self,
        id: KeyspaceId,
        ks: Option<&Keyspace>,
        bounds: &Bounds,
    ) -> Result<(Arc<super::Tree>, Vec<(Vec<u8>, Option<Value>)>, Vec<(Vec<u8>, Vec<u8>)>)> {
        self.inner.check_open()?;
        let tree = self.tree(id, ks)?.clone();
        let (start, end) = half_open(bounds.clone());
        let mut own = Vec::new();
        let mut ranges = Vec::new();
        if start < end {
            self.record(id, ks, |r| r.ranges.push((start.clone(), end.clone())));
            if let Some(p) = self.writes.get(id) {
                let bounds = (Bound::Included(start.as_slice()), Bound::Excluded(end.as_slice()));
                own.extend(p.points.range::<[u8], _>(bounds).map(|(k, v)| (k.clone(), v.clone())));
                // A key with operands reads as their result, which takes the place of any
                // write of it in `points`.
                let mut merged = Vec::new();
                for (k, ops) in p.merges.range::<[u8], _>(bounds) {
                    merged.push((k.clone(), Some(self.merged_at(id, ks, k, ops)?)));
                }
                if !merged.is_empty() {
                    own.retain(|(k, _)| !p.merges.contains_key(k));
                    own.extend(merged);
                    own.sort_by(|a, b| a.0.cmp(&b.0));
                }
                ranges = p.ranges.clone();
            }
        }
        Ok((tree, own, ranges))
    }

    /// The iterator over `bounds` in keyspace `id`; a failure to begin (a dropped keyspace, a
    /// closed database, a merge of the transaction's operands) is its first item,
    /// as [`DbIterator`] reports its own.
    fn range_at(&self, id: KeyspaceId, ks: Option<&Keyspace>, bounds: Bounds) -> TransactionIter {
        let (tree, own, ranges) = match self.scan_at(id, ks, &bounds) {
            Ok((tree, own, ranges)) => (Ok(tree), own, ranges),
            Err(e) => (Err(e), Vec::new(), Vec::new()),
        };
        let (lo, hi) = crate::db::readable::borrowed(&bounds);
        let base = DbIterator::new(self.inner.clone(), tree, self.view.seq(), lo, hi)
            .judged_at(self.view.time());
        TransactionIter {
            base,
            slots: [None, None],
            base_done: false,
            own: VecDeque::from(own),
            ranges,
            done: false,
        }
    }

    /// The cursor over `bounds` in keyspace `id`; a failure to begin fails every move, as
    /// with [`Cursor`].
    fn cursor_at(
        &self,
        id: KeyspaceId,
        ks: Option<&Keyspace>,
        bounds: Bounds,
    ) -> TransactionCursor {
        let (tree, own, ranges) = match self.scan_at(id, ks, &bounds) {
            Ok((tree, own, ranges)) => (Ok(tree), own, ranges),
            Err(e) => (Err(e), Vec::new(), Vec::new()),
        };
        let (lo, hi) = bounds;
        let base = Cursor::new(self.inner.clone(), tree, self.view.seq(), lo, hi)
            .judged_at(self.view.time());
        TransactionCursor { base, own: own.into_iter().collect(), ranges, current: None }
    }

    /// For each of `prefixes`, whether a key of keyspace `id` starting with it is visible to
    /// the transaction; each prefix's range counts as read, as a scan of it would.
    fn prefixes_exist_at<P: AsRef<[u8]>>(
        &self,
        id: KeyspaceId,
        ks: Option<&Keyspace>,
        prefixes: &[P],
    ) -> Result<Vec<bool>> {
        self.inner.check_open()?;
        if self.writes.get(id).is_some() {
            // Its own writes may add or hide keys: the merged scan decides, prefix by prefix.
            let first = |p: &P| self.range_at(id, ks, prefix_bounds(p.as_ref())).next();
            return prefixes.iter().map(|p| first(p).transpose().map(|kv| kv.is_some())).collect();
        }
        let tree = self.tree(id, ks)?;
        self.record(id, ks, |r| {
            for p in prefixes {
                let (start, end) = half_open(prefix_bounds(p.as_ref()));
                if start < end {
                    r.ranges.push((start, end));
                }
            }
        });
        let (seq, now) =
            (self.view.seq(), self.view.time().unwrap_or_else(|| self.inner.clock.now()));
        super::scan::prefixes_exist(tree, seq, prefixes, &self.inner.counters, now)
    }

    fn pending(&mut self, id: KeyspaceId, ks: Option<&Keyspace>) -> &mut Pending {
        let p = self.writes.entry(id);
        if p.name.is_none() {
            p.name = Transaction::name_of(ks);
        }
        p
    }

    /// Buffers a put, expiring `ttl_ms` after the commit if given.
    fn put_at(
        &mut self,
        id: KeyspaceId,
        ks: Option<&Keyspace>,
        key: &[u8],
        value: &[u8],
        ttl_ms: Option<u64>,
    ) -> Result<()> {
        check_entry_size(key, value)?;
        let p = self.pending(id, ks);
        p.merges.remove(key);
        match ttl_ms {
            Some(ttl) => p.ttls.insert(key.to_vec(), ttl),
            None => p.ttls.remove(key),
        };
        p.points.insert(key.to_vec(), Some(Value::copy_from_slice(value)));
        Ok(())
    }

    fn merge_at(
        &mut self,
        id: KeyspaceId,
        ks: Option<&Keyspace>,
        key: &[u8],
        operand: &[u8],
    ) -> Result<()> {
        check_entry_size(key, operand)?;
        self.tree(id, ks)?.merger().check(key, operand)?;
        self.pending(id, ks).merges.entry(key.to_vec()).or_default().push(operand.to_vec());
        Ok(())
    }

    fn delete_at(&mut self, id: KeyspaceId, ks: Option<&Keyspace>, key: &[u8]) -> Result<()> {
        check_entry_size(key, &[])?;
        let p = self.pending(id, ks);
        p.merges.remove(key);
        p.ttls.remove(key);
        p.points.insert(key.to_vec(), None);
        Ok(())
    }

    fn delete_range_at(
        &mut self,
        id: KeyspaceId,
        ks: Option<&Keyspace>,
        range: impl KeyRange,
    ) -> Result<()> {
        let (start, end) = half_open(range);
        check_range_bound(&start)?;
        check_range_bound(&end)?;
        if start >= end {
            return Ok(());
        }
        let p = self.pending(id, ks);
        p.points.retain(|k, _| k.as_slice() < start.as_slice() || k.as_slice() >= end.as_slice());
        p.merges.retain(|k, _| k.as_slice() < start.as_slice() || k.as_slice() >= end.as_slice());
        p.ranges.push((start, end));
        Ok(())
    }

    /// Buffers a put of `key` in the transaction's keyspace. Fails with [`Error::KeyTooLarge`] or
    /// [`Error::ValueTooLarge`] (buffering nothing) over the limits.
    pub fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let home = self.home.clone();
        self.put_at(self.home_id(), home.as_ref(), key.as_ref(), value.as_ref(), None)
    }

    /// [`Transaction::put`] in `keyspace`; fails with [`Error::ForeignKeyspace`] for a handle
    /// of another database.
    pub fn put_in(
        &mut self,
        keyspace: &Keyspace,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Result<()> {
        let id = self.id_of(keyspace)?;
        self.put_at(id, Some(keyspace), key.as_ref(), value.as_ref(), None)
    }

    /// Buffers a put of `key` in the transaction's keyspace that expires `ttl` after the commit
    /// writes it, by the database's clock (see [`crate::Db::put_with_ttl`]). The
    /// transaction's own reads see the value until it commits.
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
    /// let mut tx = db.transaction();
    /// if tx.get("lease")?.is_none() {
    ///     tx.put_with_ttl("lease", "worker-1", Duration::from_secs(10))?;
    /// }
    /// tx.commit()?;
    /// assert_eq!(db.get("lease")?.as_deref(), Some(&b"worker-1"[..]));
    /// clock.advance(Duration::from_secs(10));
    /// assert_eq!(db.get("lease")?, None);
    /// # Ok(()) }
    /// ```
    pub fn put_with_ttl(
        &mut self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        ttl: std::time::Duration,
    ) -> Result<()> {
        crate::clock::check_ttl("ttl", ttl)?;
        let ttl = Some(crate::clock::ttl_millis(ttl));
        let home = self.home.clone();
        self.put_at(self.home_id(), home.as_ref(), key.as_ref(), value.as_ref(), ttl)
    }

    /// [`Transaction::put_with_ttl`] in `keyspace`.
    pub fn put_with_ttl_in(
        &mut self,
        keyspace: &Keyspace,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        ttl: std::time::Duration,
    ) -> Result<()> {
        let id = self.id_of(keyspace)?;
        crate::clock::check_ttl("ttl", ttl)?;
        let ttl = Some(crate::clock::ttl_millis(ttl));
        self.put_at(id, Some(keyspace), key.as_ref(), value.as_ref(), ttl)
    }

    /// Buffers a merge operand for `key` in the transaction's keyspace (see [`crate::Db::merge`]):
    /// the transaction's reads of the key see the operands combined over its own write of
    /// the key, or else over the snapshot's value (then a read, checked at commit). The
    /// commit writes the operands, a blind write like a put: it conflicts with
    /// transactions that read the key, not with other merges. Fails with
    /// [`Error::MergeOperatorMissing`] if the keyspace has no operator, and with
    /// [`Error::Merge`] if it refuses the operand ([`crate::MergeOperator::check_operand`]).
    ///
    /// ```
    /// # fn main() -> bloomkv::Result<()> {
    /// use std::sync::Arc;
    /// use bloomkv::{Db, Options, Readable, U64Add};
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = Db::open(dir.path(), Options::new().merge_operator(Arc::new(U64Add)))?;
    /// db.put("stock", U64Add::operand(10))?;
    /// let mut tx = db.transaction();
    /// tx.merge("stock", U64Add::operand(5))?;
    /// assert_eq!(U64Add::decode(&tx.get("stock")?.unwrap()), Some(15));
    /// db.merge("stock", U64Add::operand(1))?; // not in the transaction's snapshot
    /// // A conflict: the transaction read "stock" to show the sum.
    /// assert!(matches!(tx.commit(), Err(bloomkv::Error::Conflict)));
    /// # Ok(()) }
    /// ```
    pub fn merge(&mut self, key: impl AsRef<[u8]>, operand: impl AsRef<[u8]>) -> Result<()> {
        let home = self.home.clone();
        self.merge_at(self.home_id(), home.as_ref(), key.as_ref(), operand.as_ref())
    }

    /// [`Transaction::merge`] in `keyspace`.
    pub fn merge_in(
        &mut self,
        keyspace: &Keyspace,
        key: impl AsRef<[u8]>,
        operand: impl AsRef<[u8]>,
    ) -> Result<()> {
        let id = self.id_of(keyspace)?;
        self.merge_at(id, Some(keyspace), key.as_ref(), operand.as_ref())
    }

    /// Buffers a delete of `key` in the transaction's keyspace.
    pub fn delete(&mut self, key: impl AsRef<[u8]>) -> Result<()> {
        let home = self.home.clone();
        self.delete_at(self.home_id(), home.as_ref(), key.as_ref())
    }

    /// [`Transaction::delete`] in `keyspace`.
    pub fn delete_in(&mut self, keyspace: &Keyspace, key: impl AsRef<[u8]>) -> Result<()> {
        let id = self.id_of(keyspace)?;
        self.delete_at(id, Some(keyspace), key.as_ref())
    }

    /// Buffers a delete of every key in `range` in the transaction's keyspace: the snapshot's
    /// keys there and the transaction's own earlier writes there; its later writes in the
    /// range stay.
    pub fn delete_range(&mut self, range: impl KeyRange) -> Result<()> {
        let home = self.home.clone();
        self.delete_range_at(self.home_id(), home.as_ref(), range)
    }

    /// [`Transaction::delete_range`] in `keyspace`.
    pub fn delete_range_in(&mut self, keyspace: &Keyspace, range: impl KeyRange) -> Result<()> {
        let id = self.id_of(keyspace)?;
        self.delete_range_at(id, Some(keyspace), range)
    }

    /// Buffers a delete of every key starting with `prefix` in the transaction's keyspace.
    pub fn delete_prefix(&mut self, prefix: impl AsRef<[u8]>) -> Result<()> {
        let home = self.home.clone();
        self.delete_range_at(self.home_id(), home.as_ref(), prefix_bounds(prefix.as_ref()))
    }

    /// [`Transaction::delete_prefix`] in `keyspace`.
    pub fn delete_prefix_in(
        &mut self,
        keyspace: &Keyspace,
        prefix: impl AsRef<[u8]>,
    ) -> Result<()> {
        let id = self.id_of(keyspace)?;
        self.delete_range_at(id, Some(keyspace), prefix_bounds(prefix.as_ref()))
    }

    /// Writes the buffered writes as one atomic batch, with the database's default
    /// durability ([`crate::Options::sync_writes`]), if nothing the transaction read has been
    /// written since it began; else fails with [`Error::Conflict`], writing nothing. Also
    /// fails, writing nothing, with [`Error::KeyspaceDropped`] if a keyspace it wrote to was
    /// dropped, [`Error::BatchTooLarge`] over [`crate::Options::max_batch_bytes`], or as
    /// [`crate::Db::write`] does. A transaction that wrote nothing commits without a write.
    pub fn commit(self) -> Result<()> {
        let sync = self.inner.opts.sync_writes;
        self.commit_sync(sync)
    }

    /// [`Transaction::commit`] with `opts`' durability.
    pub fn commit_with(self, opts: &WriteOptions) -> Result<()> {
        let sync = opts.resolve_sync(&self.inner.opts);
        self.commit_sync(sync)
    }

    fn commit_sync(self, sync: bool) -> Result<()> {
        self.inner.check_open()?;
        // Sized up front: growing the buffer op by op cost more than building it.
        let bytes = self.writes.iter().map(|(_, p)| p.encoded_bytes()).sum::<usize>();
        let mut batch = WriteBatch::with_capacity(bytes + 16);
        // The default keyspace cannot be dropped: only the others are checked at the commit
        // (and a transaction writing the default keyspace alone allocates nothing here).
        let mut written = Vec::new();
        for (id, p) in self.writes.iter() {
            for (start, end) in &p.ranges {
                batch.delete_range_to(id, start, end);
            }
            for (key, value) in &p.points {
                match (value, p.ttls.get(key)) {
                    (Some(v), Some(&ttl)) => batch.put_ttl_to(id, key, ttl, v),
                    (Some(v), None) => batch.put_to(id, key, v),
                    (None, _) => batch.delete_to(id, key),
                }
            }
            for (key, ops) in &p.merges {
                for op in ops {
                    batch.merge_to(id, key, op);
                }
            }
            if id != DEFAULT_KEYSPACE {
                written.push((id, p.name.clone()));
            }
        }
        if batch.is_empty() {
            return Ok(());
        }
        self.inner.check_writable()?;
        write::check_batch_bytes(&self.inner, batch.approximate_bytes())?;
        let mut reads = self.reads.into_inner().unwrap_or_else(|p| p.into_inner());
        reads.keyspaces.values_mut().for_each(Reads::seal);
        reads.written = written;
        write::write_checked(&self.inner, sync, Some(reads), |b| *b = batch)
    }
}
