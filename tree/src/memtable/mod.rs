//! The memtable: recent writes held in memory, sorted by internal key, until they are
//! flushed to a table.
//!
//! Entries live in a skip list of its own (`skiplist.rs`) ordered by internal key (user key
//! ascending, sequence number descending, see [`crate::key`]): nodes laid out inline in
//! 32 KiB arena chunks, each holding the first 16 bytes of its user key as integers (so most
//! comparisons during a search read nothing else), its tower of next pointers, and the
//! encoded internal key followed by the value. A point lookup is one search for
//! `(user_key, snapshot_seq)`; an iterator holds a node and steps forward along its link.
//! Nothing is ever removed; a memtable is dropped whole once it has been flushed. Beside the
//! list, a Bloom filter of its user keys (`filter.rs`) lets a point lookup skip the search for
//! a key the memtable does not hold; in a keyspace with a prefix extractor it holds their
//! prefixes too, and a scan inside one prefix skips a memtable that holds none of its keys.
//!
//! **One writer at a time, any number of readers.** Readers take no lock. Inserts take turns
//! on a mutex (range deletions on one of their own); the engine makes them from one thread at a time (the
//! write-group leader, holding the WAL lock, in `db/write.rs`; recovery's single-threaded
//! replay), so that mutex is never contended. The skip list's module documentation has the
//! memory-ordering argument that makes lock-free reading sound.
//!
//! A value read from the memtable is copied out unless its entry has a buffer of its own that
//! it fills enough of (`crate::value::may_share`): then the value shares that buffer, which
//! it keeps alive after the memtable is dropped.
//!
//! Range deletions are kept beside the skip list, not in it: a list of the memtable's range
//! tombstones and, for readers, the [`Fragments`] set built from it, replaced whole (copy on
//! write) by each range deletion. The writer is one thread at a time, so rebuilding costs
//! O(n log n) per range deletion in a memtable already holding n of them; readers load the
//! current set without a lock, and skip it with one flag check while there is none.

mod filter;
mod skiplist;

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use self::filter::MemFilter;
use self::skiplist::{Parts, RawNode, SkipList};
use crate::filter::{hash_key, hash_prefix};
use crate::iter::{BidirectionalIterator, InternalIterator};
use crate::key::{pack_trailer, SeqNo, ValueKind, KIND_FOR_SEEK, MAX_SEQNO};
use crate::prefix::PrefixExtractor;
use crate::range_del::{Fragments, RangeTombstone};
use crate::{Result, Value};

/// Estimated bytes a range tombstone costs beyond its bounds: the tombstone in its chunk and
/// its share of the readers' sets. Only used to decide when to flush, so an estimate is
/// enough.
const RANGE_TOMBSTONE_OVERHEAD: usize = 96;

/// The answer of [`MemTable::get`] when the memtable knows the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemGet {
    /// The newest visible version is a put of this value, at this sequence number.
    Found(Value, SeqNo),
    /// The newest visible version is an expiring put of this value (without its expiry), at
    /// this sequence number, expiring at the last field (milliseconds since the Unix epoch).
    Expiring(Value, SeqNo, u64),
    /// The newest visible version is a tombstone; older sources must not be consulted.
    Deleted,
    /// The newest visible version is a merge operand, at this sequence number: the read
    /// combines it with what lies beneath (`read::visible`).
    Merge(SeqNo),
    /// The newest visible version is a put of the value this reference names, at this
    /// sequence number: a value too large to hold here, written straight to a blob file
    /// the memtable holds ([`MemTable::hold_blob`]).
    Blob(crate::blob::BlobRef, SeqNo),
}

/// Sorted in-memory buffer of recent writes. See the module documentation.
pub struct MemTable {
    list: SkipList,
    /// Which user keys (and, with `prefix`, which of their prefixes) the skip list may hold
    /// (`filter.rs`).
    filter: MemFilter,
    /// The extractor whose prefixes `filter` also holds.
    prefix: Option<PrefixExtractor>,
    /// Bytes of the range tombstones (the skip list counts its own).
    range_del_bytes: AtomicUsize,
    range_dels: RangeDels,
    /// The blob files its `BlobPut` entries reference: values written straight to a file
    /// of their own, which no version holds until this memtable's flush adopts them. Held
    /// here so that whoever can read the entries can read their values.
    blobs: Mutex<Vec<Arc<crate::blob::BlobFile>>>,
    /// Set once `blobs` holds a file, so that the readers of a memtable without any (most
    /// of them) skip the lock: every scan gathers the files its sources may name.
    holds_blobs: AtomicBool,
    /// Bytes of the values its entries hold by reference into the WAL segment that logged
    /// them ([`MemTable::insert_referenced`]): charged a share, not all, of the budget.
    referenced_bytes: AtomicUsize,
}

/// A value the memtable holds as a reference into its WAL segment is charged this fraction
/// of its bytes ([`MemTable::charged_bytes`]). Not nothing: the segment, which becomes a
/// blob file at the flush and is replayed whole by recovery, stays bounded at about this
/// many memtables' worth of values (256 MiB at the default 16 MiB, RocksDB's blob file size).
pub const REFERENCED_VALUE_SHARE: usize = 16;

/// The memtable's range tombstones (see the module documentation).
///
/// The tombstones are kept in chunks whose sizes are distinct powers of two, largest first,
/// each with its readers' set (Bentley and Saxe's logarithmic method): an insert becomes a
/// chunk of one, merged with the last chunk while that is no larger, and only the merged
/// chunk's set is rebuilt. Each tombstone is thus sorted into a new set O(log n) times,
/// where rebuilding one set of every tombstone per insert made n range deletes into one
/// memtable cost O(n² log n) (16,000 of them took 54 s); a reader asks at most
/// log₂ n + 1 sets.
#[derive(Default)]
struct RangeDels {
    /// The chunks, largest first (only the writer changes them).
    chunks: Mutex<Vec<Vec<RangeTombstone>>>,
    /// The readers' sets, one per chunk, in the same order.
    sets: ArcSwap<Vec<Arc<Fragments>>>,
    /// Set once the first range tombstone is in `sets`: until then readers skip them.
    any: AtomicBool,
}

impl RangeDels {
    fn insert(&self, t: RangeTombstone) {
        let mut chunks = self.chunks.lock().unwrap_or_else(|p| p.into_inner());
        let mut chunk = vec![t];
        while chunks.last().is_some_and(|last| last.len() <= chunk.len()) {
            let mut last = chunks.pop().unwrap_or_default();
            last.append(&mut chunk);
            chunk = last;
        }
        let set = Arc::new(Fragments::new(chunk.iter()));
        chunks.push(chunk);
        // The chunks before the new one are unchanged, and so are their sets.
        let mut sets: Vec<Arc<Fragments>> = self.sets.load()[..chunks.len() - 1].to_vec();
        sets.push(set);
        self.sets.store(Arc::new(sets));
    }

    fn covers(&self, user_key: &[u8], seq: SeqNo, read_seq: SeqNo) -> bool {
        self.sets.load().iter().any(|s| s.covers(user_key, seq, read_seq))
    }

    /// Every tombstone as one set.
    fn all(&self) -> Arc<Fragments> {
        let sets = self.sets.load();
        match &sets[..] {
            [one] => one.clone(),
            _ => {
                let chunks = self.chunks.lock().unwrap_or_else(|p| p.into_inner());
                Arc::new(Fragments::new(chunks.iter().flatten()))
            }
        }
    }
}

impl MemTable {
    /// An empty memtable, its key filter sized for a memtable of 1 MiB.
    pub fn new() -> Self {
        MemTable::sized_for(1 << 20)
    }

    /// An empty memtable whose key filter is sized for `memtable_bytes` (none when 0).
    pub fn sized_for(memtable_bytes: usize) -> Self {
        MemTable::with_prefixes(memtable_bytes, None)
    }

    /// An empty memtable whose filter, sized for `memtable_bytes` (none when 0), also holds
    /// the prefixes of the keys `extractor` has one for ([`MemTable::may_hold_prefix`]).
    pub fn with_prefixes(memtable_bytes: usize, extractor: Option<PrefixExtractor>) -> Self {
        MemTable {
            list: SkipList::new(),
            filter: MemFilter::new(memtable_bytes, extractor.is_some()),
            prefix: extractor,
            range_del_bytes: AtomicUsize::new(0),
            range_dels: RangeDels::default(),
            blobs: Mutex::new(Vec::new()),
            holds_blobs: AtomicBool::new(false),
            referenced_bytes: AtomicUsize::new(0),
        }
    }

    /// Holds blob file `file` for this memtable's `BlobPut` entries that reference it:
    /// called before the first such entry is inserted, so a reader finding the entry finds
    /// the file.
    pub fn hold_blob(&self, file: Arc<crate::blob::BlobFile>) {
        let mut blobs = self.blobs.lock().unwrap_or_else(|p| p.into_inner());
        if !blobs.iter().any(|b| b.meta.number == file.meta.number) {
            blobs.push(file);
        }
        // Before the entries naming the file are inserted, so a reader that can see them
        // (through the sequence number it read, published after) sees the flag.
        self.holds_blobs.store(true, AtomicOrdering::Release);
    }

    /// The blob files held for this memtable's entries ([`MemTable::hold_blob`]).
    pub fn held_blobs(&self) -> Vec<Arc<crate::blob::BlobFile>> {
        if !self.holds_blobs() {
            return Vec::new();
        }
        self.blobs.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The blob file numbered `number` held for this memtable's entries, if it holds one.
    pub fn held_blob(&self, number: u64) -> Option<Arc<crate::blob::BlobFile>> {
        let blobs = self.blobs.lock().unwrap_or_else(|p| p.into_inner());
        blobs.iter().find(|b| b.meta.number == number).cloned()
    }

    /// Records a put of a value of `value_len` bytes at `seq` held as `reference` (an
    /// encoded [`crate::blob::BlobRef`]) to where the WAL segment logged it, rather than
    /// copied: a `BlobPut` entry, charged the reference and a share of the value
    /// ([`REFERENCED_VALUE_SHARE`]). The file must be held ([`MemTable::hold_blob`]) first.
    pub fn insert_referenced(
        &self,
        user_key: &[u8],
        seq: SeqNo,
        reference: &[u8],
        value_len: usize,
    ) {
        self.insert(user_key, seq, ValueKind::BlobPut, reference);
        self.referenced_bytes.fetch_add(value_len, AtomicOrdering::Relaxed);
    }

    /// What the memtable counts against `memtable_bytes`: [`MemTable::approximate_bytes`]
    /// and a share of the values it holds by reference ([`MemTable::insert_referenced`]).
    #[inline]
    pub fn charged_bytes(&self) -> usize {
        let referenced = self.referenced_bytes.load(AtomicOrdering::Relaxed);
        self.approximate_bytes() + referenced / REFERENCED_VALUE_SHARE
    }

    /// True when the memtable holds a blob file for its entries.
    #[inline]
    pub fn holds_blobs(&self) -> bool {
        self.holds_blobs.load(AtomicOrdering::Acquire)
    }

    /// Records the deletion of every key in `start..end` at `seq`. Like [`MemTable::insert`],
    /// safe while other threads read and insert (tombstones take a mutex of their own).
    pub fn delete_range(&self, start: &[u8], end: &[u8], seq: SeqNo) {
        let t = RangeTombstone { start: start.to_vec(), end: end.to_vec(), seq };
        self.range_dels.insert(t);
        self.range_dels.any.store(true, AtomicOrdering::Release);
        self.range_del_bytes
            .fetch_add(start.len() + end.len() + RANGE_TOMBSTONE_OVERHEAD, AtomicOrdering::Relaxed);
    }

    /// True if a range tombstone in this memtable visible at `read_seq` deletes the version
    /// of `user_key` written at `seq`. One flag check when the memtable has none.
    #[inline]
    pub fn range_deleted(&self, user_key: &[u8], seq: SeqNo, read_seq: SeqNo) -> bool {
        self.range_dels.any.load(AtomicOrdering::Acquire)
            && self.range_dels.covers(user_key, seq, read_seq)
    }

    /// The memtable's range tombstones as one set, or `None` while it has none: for a flush
    /// or a checkpoint (it may merge the chunks' sets). Tombstones inserted later are not in
    /// the returned set.
    pub fn range_tombstones(&self) -> Option<Arc<Fragments>> {
        self.range_dels.any.load(AtomicOrdering::Acquire).then(|| self.range_dels.all())
    }

    /// The memtable's range tombstones as the sets they are kept in (together, what
    /// [`MemTable::range_tombstones`] returns), for scans, which check each key against
    /// every set anyway; none while it has none.
    pub fn range_tombstone_sets(&self) -> Vec<Arc<Fragments>> {
        if !self.range_dels.any.load(AtomicOrdering::Acquire) {
            return Vec::new();
        }
        self.range_dels.sets.load().to_vec()
    }

    /// Records a put (or, with [`ValueKind::Delete`], a tombstone whose `value` should be
    /// empty) of `user_key` at `seq`. Safe to call while other threads read and insert.
    /// Inserting the same `(user_key, seq, kind)` twice replaces the value (the
    /// engine never does: every write has a sequence number of its own).
    ///
    /// # Panics
    ///
    /// If the key is longer than [`crate::MAX_KEY_BYTES`] or the value larger than
    /// [`crate::MAX_VALUE_BYTES`] (plus the 8-byte expiry of a [`ValueKind::PutExpiring`]);
    /// writes are checked against both before they get here.
    pub fn insert(&self, user_key: &[u8], seq: SeqNo, kind: ValueKind, value: &[u8]) {
        debug_assert!(seq <= MAX_SEQNO);
        let hash = hash_key(user_key);
        self.filter.prefetch(hash);
        // Every kind of entry adds its prefix: a tombstone too must stop a scan from skipping
        // the memtable, or the older version it deletes would show.
        let prefix_hash = self.prefix.and_then(|e| e.prefix(user_key)).map(hash_prefix);
        if let Some(h) = prefix_hash {
            self.filter.prefetch(h);
        }
        let add = || {
            self.filter.add(hash);
            if let Some(h) = prefix_hash {
                self.filter.add(h);
            }
        };
        self.list.insert_with(user_key, pack_trailer(seq, kind), value, add);
    }

    /// An empty memtable to take over from this one: its filter sized the same, holding the
    /// prefixes of `extractor` (the keyspace's now).
    pub fn successor(&self, extractor: Option<PrefixExtractor>) -> MemTable {
        MemTable::with_prefixes(self.filter.memtable_bytes(), extractor)
    }

    /// False only if the skip list holds no entry of a key whose prefix under `extractor` has
    /// this hash ([`crate::filter::hash_prefix`]): then a scan inside that prefix may leave the
    /// memtable out. Its range tombstones are not in the skip list and still apply
    /// ([`MemTable::range_tombstone_sets`]). True whenever the filter was not built with
    /// `extractor`.
    #[inline]
    pub fn may_hold_prefix(&self, extractor: PrefixExtractor, hash: u64) -> bool {
        self.prefix != Some(extractor) || self.filter.may_contain(hash)
    }

    /// Starts loading what [`MemTable::may_hold_prefix`] will read for `hash`.
    #[inline]
    pub fn prefetch_prefix(&self, extractor: PrefixExtractor, hash: u64) {
        if self.prefix == Some(extractor) {
            self.filter.prefetch(hash);
        }
    }

    /// False if this memtable holds no version of the key with this hash
    /// ([`crate::filter::hash_key`]); true if it may. A point lookup asks this before
    /// [`MemTable::get`], which then skips its search of the skip list for most absent keys.
    #[inline]
    pub fn may_contain_hash(&self, hash: u64) -> bool {
        self.filter.may_contain(hash)
    }

    /// Starts loading what [`MemTable::may_contain_hash`] will read for `hash`.
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        self.filter.prefetch(hash);
    }

    /// The newest version of `user_key` with a sequence number `<= seq`, or `None` if the
    /// memtable holds no such version. The search borrows `user_key`; a found value is
    /// copied out of its arena chunk (a held value would keep the whole chunk alive after
    /// the memtable is flushed), and shared only when its entry has a buffer of its own
    /// that it fills enough of (see `Value`).
    pub fn get(&self, user_key: &[u8], seq: SeqNo) -> Option<MemGet> {
        // `KIND_FOR_SEEK` gives the largest trailer for `seq`, so the search lands on the
        // first entry of `user_key` whose seq is `<= seq`.
        let seek = Parts::new(user_key, pack_trailer(seq.min(MAX_SEQNO), KIND_FOR_SEEK));
        let found = self.list.seek(&seek)?;
        if found.user_key() != user_key {
            return None;
        }
        let trailer = found.trailer();
        match ValueKind::from_u8(trailer as u8)? {
            ValueKind::PutExpiring => {
                // Written only through a batch, which checked the expiry is there.
                let (expiry, value) = crate::key::split_expiring(found.value())?;
                Some(MemGet::Expiring(Value::copy_from_slice(value), trailer >> 8, expiry))
            }
            ValueKind::Put => {
                let value = found.value();
                let shared = match found.own_buffer_len() {
                    Some(buffer) if crate::value::may_share(value.len(), buffer) => {
                        found.share_value().map(|v| Value::pinning(v, buffer))
                    }
                    _ => None,
                };
                Some(MemGet::Found(
                    shared.unwrap_or_else(|| Value::copy_from_slice(value)),
                    trailer >> 8,
                ))
            }
            ValueKind::Delete => Some(MemGet::Deleted),
            ValueKind::Merge | ValueKind::MergeExpiring => Some(MemGet::Merge(trailer >> 8)),
            // Written only by the engine, which encoded the reference.
            ValueKind::BlobPut => {
                let r = crate::blob::BlobRef::decode(found.value()).ok()?;
                Some(MemGet::Blob(r, trailer >> 8))
            }
            // Never inserted: a value written straight to a blob file has no time to live.
            ValueKind::BlobPutExpiring => None,
        }
    }

    /// The sequence number of the newest write to `user_key` this memtable holds: its
    /// newest entry, or a range tombstone over it, whichever is newer. What a transaction's
    /// commit asks of each key it read (`db/transaction.rs`), with the key's
    /// [`crate::filter::hash_key`], computed once for every memtable asked.
    pub fn newest_write(&self, user_key: &[u8], hash: u64) -> Option<SeqNo> {
        let point = match self.filter.may_contain(hash) {
            false => None,
            true => {
                let seek = Parts::new(user_key, pack_trailer(MAX_SEQNO, KIND_FOR_SEEK));
                let entry = self.list.seek(&seek).filter(|n| n.user_key() == user_key);
                entry.map(|n| n.trailer() >> 8)
            }
        };
        if !self.range_dels.any.load(AtomicOrdering::Acquire) {
            return point;
        }
        let sets = self.range_dels.sets.load();
        let ranged = sets.iter().filter_map(|s| s.covering_seq(user_key, MAX_SEQNO)).max();
        point.max(ranged)
    }

    /// How many merge operands of `user_key` come first among its versions here, newest
    /// first, counted up to `limit` (`Options::max_successive_merges`): one search and a
    /// step per operand counted, nothing for a key the filter rules out.
    pub fn successive_merges(&self, user_key: &[u8], limit: usize) -> usize {
        if limit == 0 || !self.filter.may_contain(hash_key(user_key)) {
            return 0;
        }
        let seek = Parts::new(user_key, pack_trailer(MAX_SEQNO, KIND_FOR_SEEK));
        let mut node = self.list.seek(&seek);
        let mut count = 0;
        while let Some(n) = node.filter(|n| n.user_key() == user_key) {
            if n.trailer() as u8 != ValueKind::Merge as u8 || count == limit {
                break;
            }
            count += 1;
            node = self.list.next(n);
        }
        count
    }

    /// True if this memtable holds a write newer than `seq` to a key in `start..end`: an
    /// entry, or a range tombstone overlapping the range. Walks every entry in the range.
    pub fn written_after(&self, start: &[u8], end: &[u8], seq: SeqNo) -> bool {
        let seek = Parts::new(start, pack_trailer(MAX_SEQNO, KIND_FOR_SEEK));
        let mut node = self.list.seek(&seek);
        while let Some(n) = node.filter(|n| n.user_key() < end) {
            if n.trailer() >> 8 > seq {
                return true;
            }
            node = self.list.next(n);
        }
        self.range_dels.any.load(AtomicOrdering::Acquire)
            && self
                .range_dels
                .sets
                .load()
                .iter()
                .any(|s| s.newest_overlapping(start, end) > Some(seq))
    }

    /// Whether an entry (any version of any kind) has its user key in `(lower, upper)`:
    /// one seek. Range tombstones are not entries: a reader takes them from their set.
    pub fn has_entry_in(&self, lower: Bound<&[u8]>, upper: Bound<&[u8]>) -> bool {
        let mut node = match lower {
            Bound::Unbounded => self.list.first(),
            Bound::Included(k) | Bound::Excluded(k) => {
                self.list.seek(&Parts::new(k, pack_trailer(MAX_SEQNO, KIND_FOR_SEEK)))
            }
        };
        if let Bound::Excluded(k) = lower {
            // The excluded key's versions come first.
            while let Some(n) = node.filter(|n| n.user_key() == k) {
                node = self.list.next(n);
            }
        }
        node.is_some_and(|n| match upper {
            Bound::Included(u) => n.user_key() <= u,
            Bound::Excluded(u) => n.user_key() < u,
            Bound::Unbounded => true,
        })
    }

    /// Memory held: the arena bytes the entries took (each entry's key, trailer and value,
    /// its node's header and tower, and the chunk tails left unfilled), plus an estimate for
    /// the range tombstones.
    pub fn approximate_bytes(&self) -> usize {
        self.list.bytes() + self.range_del_bytes.load(AtomicOrdering::Relaxed)
    }

    /// Number of entries (versions, not distinct user keys).
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// True when nothing has been inserted: no entry and no range tombstone.
    #[inline]
    pub fn is_empty(&self) -> bool {
        // The first link, one load, not the entry count, which sums the arena's shards: every
        // read asks this of every memtable.
        self.list.first().is_none() && !self.range_dels.any.load(AtomicOrdering::Acquire)
    }

    /// An iterator over every entry in internal-key order, both ways. It starts
    /// unpositioned: call a seek first. It keeps the memtable alive, and may or may not
    /// see entries inserted after it was created.
    pub fn iter(self: &Arc<Self>) -> MemTableIter {
        MemTableIter { mem: Arc::clone(self), node: None }
    }
}

impl Default for MemTable {
    fn default() -> Self {
        MemTable::new()
    }
}

impl std::fmt::Debug for MemTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemTable")
            .field("entries", &self.len())
            .field("approximate_bytes", &self.approximate_bytes())
            .finish()
    }
}

/// Iterator over a memtable, from [`MemTable::iter`], both ways.
///
/// Holds the memtable and the address of its current node: a step forward follows the
/// node's link (O(1)); a step back searches for the node's predecessor (O(log n)), as the
/// skip list has no back links. No lifetime ties it to the memtable, so it can be boxed and
/// sent between threads.
pub struct MemTableIter {
    mem: Arc<MemTable>,
    node: Option<RawNode>,
}

impl MemTableIter {
    fn current(&self) -> Option<skiplist::Node<'_>> {
        // SAFETY: `node` was taken from `self.mem.list`, which `self.mem` keeps alive.
        self.node.map(|n| unsafe { self.mem.list.node_at(n) })
    }
}

impl InternalIterator for MemTableIter {
    fn valid(&self) -> bool {
        self.node.is_some()
    }

    fn key(&self) -> &[u8] {
        self.current().map_or(&[], |n| n.internal_key())
    }

    fn value(&self) -> &[u8] {
        self.current().map_or(&[], |n| n.value())
    }

    fn next(&mut self) -> Result<()> {
        let next = self.current().and_then(|n| self.mem.list.next(n)).map(|n| n.raw());
        self.node = next;
        Ok(())
    }

    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let node = self.mem.list.seek(&Parts::from_internal(target)).map(|n| n.raw());
        self.node = node;
        Ok(())
    }

    fn seek_to_first(&mut self) -> Result<()> {
        let node = self.mem.list.first().map(|n| n.raw());
        self.node = node;
        Ok(())
    }
}

impl BidirectionalIterator for MemTableIter {
    fn prev(&mut self) -> Result<()> {
        let prev = self.current().and_then(|n| self.mem.list.prev(n)).map(|n| n.raw());
        self.node = prev;
        Ok(())
    }

    fn seek_to_last(&mut self) -> Result<()> {
        let node = self.mem.list.last().map(|n| n.raw());
        self.node = node;
        Ok(())
    }

    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        let node = self.mem.list.seek_for_prev(&Parts::from_internal(target)).map(|n| n.raw());
        self.node = node;
        Ok(())
    }
}

impl std::fmt::Debug for MemTableIter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemTableIter")
            .field("key", &self.current().map(|n| n.internal_key()))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::cmp::Ordering;
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::skiplist::{compare_parts, Head, CHUNK_BYTES, MAX_CHUNKED_ENTRY};
    use super::*;
    use crate::iter::testing::{check_walk, walk_op};
    use crate::key::{compare_internal, internal_key, parse_internal_key, TRAILER_LEN};

    /// A hit on `v`, whatever its sequence number (compared through [`strip`]).
    fn found(v: &[u8]) -> Option<MemGet> {
        Some(MemGet::Found(Value::copy_from_slice(v), 0))
    }

    fn strip(g: Option<MemGet>) -> Option<MemGet> {
        g.map(|g| match g {
            MemGet::Found(v, _) => MemGet::Found(v, 0),
            other => other,
        })
    }

    proptest! {
        /// `has_entry_in` against the entries' keys: every kind of bound, keys with several
        /// versions (an excluded bound's versions all come before the next key), deletes.
        #[test]
        fn has_entry_in_answers_as_the_keys_do(
            keys in proptest::collection::vec((0u8..12, 1usize..3), 0..8),
            lo in 0u8..14, hi in 0u8..14, lo_kind in 0u8..3, hi_kind in 0u8..3,
        ) {
            let m = MemTable::new();
            let mut seq = 0;
            for &(k, versions) in &keys {
                for v in 0..versions {
                    seq += 1;
                    let kind = if v == 0 { ValueKind::Delete } else { ValueKind::Put };
                    m.insert(&[k], seq, kind, b"v");
                }
            }
            m.delete_range(&[0], &[13], seq + 1);
            let bound = |kind: u8, k: &'static [u8]| match kind {
                0 => Bound::Included(k),
                1 => Bound::Excluded(k),
                _ => Bound::Unbounded,
            };
            const KEYS: [[u8; 1]; 14] =
                [[0], [1], [2], [3], [4], [5], [6], [7], [8], [9], [10], [11], [12], [13]];
            let (lower, upper) =
                (bound(lo_kind, &KEYS[lo as usize]), bound(hi_kind, &KEYS[hi as usize]));
            let expected = keys.iter().any(|&(k, _)| {
                let k: &[u8] = &[k];
                std::ops::RangeBounds::<&[u8]>::contains(&(lower, upper), &k)
            });
            prop_assert_eq!(m.has_entry_in(lower, upper), expected);
        }
    }

    #[test]
    fn the_filter_holds_every_entry_s_prefix_under_its_own_extractor() {
        let e = PrefixExtractor::UpToDelimiter(b'/');
        let m = MemTable::with_prefixes(1 << 20, Some(e));
        let h = |p: &[u8]| hash_prefix(p);
        assert!(!m.may_hold_prefix(e, h(b"a/")), "empty");
        m.insert(b"a/1", 1, ValueKind::Put, b"v");
        m.insert(b"b/1", 2, ValueKind::Delete, b"");
        m.insert(b"c", 3, ValueKind::Put, b"out of the domain");
        m.delete_range(b"d/", b"e/", 4);
        assert!(m.may_hold_prefix(e, h(b"a/")));
        assert!(m.may_hold_prefix(e, h(b"b/")), "a tombstone's prefix");
        assert!(!m.may_hold_prefix(e, h(b"c")), "no prefix for a key out of the domain");
        assert!(!m.may_hold_prefix(e, h(b"d/")), "range tombstones are not in the filter");
        assert!(m.may_contain_hash(hash_key(b"a/1")) && m.may_contain_hash(hash_key(b"c")));
        // Asked about another extractor's prefixes, or made without one: always "maybe".
        assert!(m.may_hold_prefix(PrefixExtractor::Fixed(2), h(b"d/")));
        let plain = MemTable::sized_for(1 << 20);
        plain.insert(b"a/1", 1, ValueKind::Put, b"v");
        assert!(plain.may_hold_prefix(e, h(b"d/")));
        // A successor holds the extractor it is given.
        let next = m.successor(Some(PrefixExtractor::Fixed(2)));
        next.insert(b"a/1", 5, ValueKind::Put, b"v");
        assert!(next.may_hold_prefix(PrefixExtractor::Fixed(2), h(b"a/")));
        assert!(next.may_hold_prefix(e, h(b"d/")));
        assert!(!next.may_hold_prefix(PrefixExtractor::Fixed(2), h(b"d/")));
    }

    #[test]
    fn get_returns_newest_version_visible_at_seq() {
        let m = MemTable::new();
        m.insert(b"a", 1, ValueKind::Put, b"v1");
        m.insert(b"a", 5, ValueKind::Put, b"v5");
        m.insert(b"a", 7, ValueKind::Delete, b"");
        m.insert(b"a", 9, ValueKind::Put, b"v9");
        m.insert(b"ab", 3, ValueKind::Put, b"other");
        m.insert(b"", 2, ValueKind::Put, b"empty key");

        assert_eq!(m.get(b"a", 0), None);
        for seq in 1..5 {
            assert_eq!(strip(m.get(b"a", seq)), found(b"v1"), "seq {seq}");
        }
        assert_eq!(strip(m.get(b"a", 5)), found(b"v5"));
        assert_eq!(strip(m.get(b"a", 6)), found(b"v5"));
        assert!(matches!(m.get(b"a", 6), Some(MemGet::Found(_, 5))), "the version's seq");
        assert_eq!(m.get(b"a", 7), Some(MemGet::Deleted));
        assert_eq!(m.get(b"a", 8), Some(MemGet::Deleted));
        assert_eq!(strip(m.get(b"a", 9)), found(b"v9"));
        assert_eq!(strip(m.get(b"a", MAX_SEQNO)), found(b"v9"));
        assert_eq!(strip(m.get(b"a", u64::MAX)), found(b"v9"));
        // A longer key sharing the head is a different key.
        assert_eq!(m.get(b"ab", 2), None);
        assert_eq!(strip(m.get(b"ab", 3)), found(b"other"));
        assert_eq!(m.get(b"b", 100), None);
        assert_eq!(strip(m.get(b"", 100)), found(b"empty key"));
        assert_eq!(m.get(b"", 1), None);
        assert_eq!(m.len(), 6);
    }

    #[test]
    fn long_keys_and_keys_sharing_the_head() {
        let m = MemTable::new();
        let long: Vec<u8> = (0..1000).map(|i| i as u8).collect();
        let mut longer = long.clone();
        longer.push(0);
        m.insert(&long, 4, ValueKind::Put, b"x");
        m.insert(&longer, 4, ValueKind::Delete, b"");
        // Same 16-byte head, differing after it.
        m.insert(&long[..17], 5, ValueKind::Put, b"17");
        // Same zero-padded head, differing only in length.
        m.insert(b"k", 6, ValueKind::Put, b"k");
        m.insert(b"k\0", 7, ValueKind::Put, b"k0");
        m.insert(b"k\0\0", 8, ValueKind::Delete, b"");
        assert_eq!(strip(m.get(&long, 4)), found(b"x"));
        assert_eq!(m.get(&long, 3), None);
        assert_eq!(m.get(&longer, 10), Some(MemGet::Deleted));
        assert_eq!(strip(m.get(&long[..17], 10)), found(b"17"));
        assert_eq!(m.get(&long[..16], 10), None);
        assert_eq!(m.get(&long[..18], 10), None);
        assert_eq!(strip(m.get(b"k", 10)), found(b"k"));
        assert_eq!(strip(m.get(b"k\0", 10)), found(b"k0"));
        assert_eq!(m.get(b"k\0\0", 10), Some(MemGet::Deleted));
        assert_eq!(m.get(b"k\0\0\0", 10), None);
        assert_eq!(m.get(b"k\0", 6), None);
    }

    /// The skip list's order (stored nodes against lookup keys and each other, and lookup
    /// keys against each other) must be exactly `compare_internal` on the encoded keys.
    fn check_order(a: (&[u8], SeqNo, ValueKind), b: (&[u8], SeqNo, ValueKind)) {
        let list = SkipList::new();
        let na = list.insert(a.0, pack_trailer(a.1, a.2), b"va");
        let nb = list.insert(b.0, pack_trailer(b.1, b.2), b"");
        let (ia, ib) = (internal_key(a.0, a.1, a.2), internal_key(b.0, b.1, b.2));
        let want = compare_internal(&ia, &ib);
        let (pa, pb) = (Parts::from_internal(&ia), Parts::from_internal(&ib));
        assert_eq!(na.compare(&pb), want, "{a:?} vs seek key {b:?}");
        assert_eq!(nb.compare(&pa), want.reverse(), "{b:?} vs seek key {a:?}");
        assert_eq!(compare_parts(na.parts(), nb.parts()), want, "{a:?} vs {b:?}");
        assert_eq!(compare_parts(pa, pb), want, "seek keys {a:?} vs {b:?}");
        assert_eq!(na.internal_key(), &ia[..]);
        assert_eq!(na.value(), b"va");
    }

    #[test]
    fn order_matches_compare_internal_exhaustively_on_small_keys() {
        // Every key of up to 3 bytes over {0x00, 0x01, 0xff}, alone and after 14 filler
        // bytes, so the keys straddle the 16-byte head: shorter, exactly 16, longer;
        // zero bytes that look like padding; equal heads with different lengths.
        let mut tails: Vec<Vec<u8>> = vec![vec![]];
        for len in 1..=3 {
            let mut next = Vec::new();
            for t in tails.iter().filter(|t| t.len() == len - 1) {
                for b in [0x00, 0x01, 0xff] {
                    let mut t = t.clone();
                    t.push(b);
                    next.push(t);
                }
            }
            tails.extend(next);
        }
        let filler = [0x01u8; 14];
        let mut keys: Vec<Vec<u8>> = tails.clone();
        keys.extend(tails.iter().map(|t| [&filler[..], t].concat()));
        let versions = [
            (0, ValueKind::Delete),
            (0, ValueKind::Put),
            (7, ValueKind::Put),
            (MAX_SEQNO, ValueKind::Delete),
        ];
        for a in &keys {
            for b in &keys {
                for &(sa, ka) in &versions {
                    for &(sb, kb) in &versions {
                        check_order((a, sa, ka), (b, sb, kb));
                    }
                }
            }
        }
    }

    #[test]
    fn head_is_monotone() {
        let keys: [&[u8]; 8] = [
            b"",
            b"\0",
            b"\0\0",
            b"a",
            b"a\0",
            b"0000000000000001",
            b"00000000000000010",
            b"00000000000000011",
        ];
        for a in keys {
            for b in keys {
                if Head::of(a) < Head::of(b) {
                    assert!(a < b, "{a:?} {b:?}");
                }
                if a <= b {
                    assert!(Head::of(a) <= Head::of(b), "{a:?} {b:?}");
                }
            }
        }
    }

    #[test]
    fn inserting_the_same_version_again_replaces_it() {
        let m = Arc::new(MemTable::new());
        m.insert(b"k", 3, ValueKind::Put, b"first");
        m.insert(b"k", 3, ValueKind::Put, b"second");
        assert_eq!(m.len(), 1);
        assert_eq!(strip(m.get(b"k", 3)), found(b"second"));
        let mut it = m.iter();
        it.seek_to_first().unwrap();
        assert_eq!(it.value(), b"second");
    }

    #[test]
    fn entries_of_every_size_survive_chunk_boundaries_and_the_memtable() {
        let m = Arc::new(MemTable::new());
        let value = |i: usize| -> Vec<u8> {
            // Mostly small, some just above and below the chunking limit, some huge.
            let len = match i % 7 {
                0 => MAX_CHUNKED_ENTRY - 3,
                1 => MAX_CHUNKED_ENTRY + 1,
                2 => CHUNK_BYTES + 5,
                _ => i % 300,
            };
            (0..len).map(|j| (i * 31 + j) as u8).collect()
        };
        let n = 2000;
        for i in 0..n {
            m.insert(format!("{i:05}").as_bytes(), i as SeqNo + 1, ValueKind::Put, &value(i));
        }
        for i in 0..n {
            assert_eq!(
                strip(m.get(format!("{i:05}").as_bytes(), MAX_SEQNO)),
                found(&value(i)),
                "{i}"
            );
        }
        let mut it = m.iter();
        it.seek_to_first().unwrap();
        for i in 0..n {
            assert_eq!(
                it.key(),
                &internal_key(format!("{i:05}").as_bytes(), i as SeqNo + 1, ValueKind::Put)[..]
            );
            assert_eq!(it.value(), &value(i)[..]);
            it.next().unwrap();
        }
        assert!(!it.valid());
        // A value read from the memtable outlives it.
        let Some(MemGet::Found(held, _)) = m.get(b"00010", MAX_SEQNO) else { panic!("missing") };
        drop(it);
        drop(m);
        assert_eq!(&held[..], &value(10)[..]);
    }

    #[test]
    fn range_tombstones_cover_older_versions_only() {
        let m = MemTable::new();
        assert!(m.is_empty() && m.range_tombstones().is_none());
        m.delete_range(b"b", b"d", 10);
        assert!(!m.is_empty(), "a memtable holding only a range delete still needs a flush");
        assert!(m.range_deleted(b"b", 9, 100));
        assert!(m.range_deleted(b"c", 9, 10));
        assert!(!m.range_deleted(b"c", 9, 9), "a read before the tombstone");
        assert!(!m.range_deleted(b"c", 11, 100), "a version after the tombstone");
        assert!(!m.range_deleted(b"d", 1, 100), "the end is exclusive");
        m.delete_range(b"a", b"c", 20);
        assert!(m.range_deleted(b"b", 15, 100));
        assert!(!m.range_deleted(b"c", 15, 100));
        let t = |a: &str, b: &str, seq| RangeTombstone { start: a.into(), end: b.into(), seq };
        assert_eq!(m.range_tombstones().unwrap().newest(), [t("a", "c", 20), t("c", "d", 10)]);
    }

    proptest! {
        /// The chunked sets answer as one set of every tombstone would, stay few, and merge
        /// back into exactly that set for a flush.
        #[test]
        fn prop_chunked_range_tombstones_match_one_set(
            ts in proptest::collection::vec((0u8..40, 1u8..10), 1..150),
            probes in proptest::collection::vec((0u8..50, 0u64..160, 0u64..160), 40),
        ) {
            let m = MemTable::new();
            let mut all = Vec::new();
            for (i, &(a, n)) in ts.iter().enumerate() {
                let (start, end) = (vec![a], vec![a.saturating_add(n)]);
                let seq = 2 * i as u64 + 1;
                m.delete_range(&start, &end, seq);
                all.push(RangeTombstone { start, end, seq });
                let sets = m.range_tombstone_sets();
                prop_assert!(sets.len() <= (i + 1).ilog2() as usize + 1, "{} sets", sets.len());
            }
            let one = Fragments::new(&all);
            for (k, seq, read) in probes {
                prop_assert_eq!(m.range_deleted(&[k], seq, read), one.covers(&[k], seq, read));
            }
            let merged = m.range_tombstones().unwrap();
            prop_assert_eq!(merged.as_ref(), &one);
        }
    }

    /// A hit shares the stored bytes only when its entry has an allocation of its own: a
    /// value shared with a chunk would keep the whole chunk alive after a flush.
    #[test]
    fn hits_share_the_stored_bytes_of_large_entries_only() {
        let m = MemTable::new();
        let large = vec![7u8; MAX_CHUNKED_ENTRY + 1];
        m.insert(b"small", 1, ValueKind::Put, b"copied value");
        m.insert(b"large", 1, ValueKind::Put, &large);
        let hit = |k: &[u8], seq| match m.get(k, seq) {
            Some(MemGet::Found(v, _)) => v,
            other => panic!("{other:?}"),
        };
        let (a, b) = (hit(b"small", 1), hit(b"small", 2));
        assert_eq!(a, b"copied value");
        assert_ne!(a.as_ptr(), b.as_ptr(), "each hit is a copy");
        let (a, b) = (hit(b"large", 1), hit(b"large", 2));
        assert_eq!(a, large);
        assert_eq!(a.as_ptr(), b.as_ptr(), "both share the entry");
    }

    #[test]
    fn memory_accounting_grows() {
        let m = MemTable::new();
        assert_eq!(m.approximate_bytes(), 0);
        assert!(m.is_empty());
        m.insert(b"key", 1, ValueKind::Put, &[0; 1000]);
        let one = m.approximate_bytes();
        assert!(one >= 3 + TRAILER_LEN + 1000);
        m.insert(b"key2", 2, ValueKind::Put, &[0; 10]);
        assert!(m.approximate_bytes() >= one + 4 + TRAILER_LEN + 10);
        assert!(!m.is_empty());
    }

    #[test]
    fn concurrent_inserts_are_all_present() {
        const THREADS: usize = 4;
        const PER_THREAD: usize = 20_000;
        // A small filter, so that writers often set bits in the same word at once.
        let m = MemTable::with_prefixes(64 << 10, None);
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let m = &m;
                s.spawn(move || {
                    for i in 0..PER_THREAD {
                        let key = format!("key{:06}", i * THREADS + t);
                        let seq = (i * THREADS + t + 1) as SeqNo;
                        m.insert(key.as_bytes(), seq, ValueKind::Put, key.as_bytes());
                    }
                });
            }
            // A reader running alongside must only ever see complete entries.
            s.spawn(|| {
                for i in 0..THREADS * PER_THREAD {
                    let key = format!("key{i:06}");
                    if let Some(hit) = m.get(key.as_bytes(), MAX_SEQNO) {
                        assert!(matches!(hit, MemGet::Found(v, _) if v[..] == *key.as_bytes()));
                    }
                }
            });
        });
        assert_eq!(m.len(), THREADS * PER_THREAD);
        for i in 0..THREADS * PER_THREAD {
            let key = format!("key{i:06}");
            // A bit lost to a concurrent update would be a false "absent".
            assert!(m.may_contain_hash(crate::filter::hash_key(key.as_bytes())), "{key} filtered");
            assert_eq!(strip(m.get(key.as_bytes(), MAX_SEQNO)), found(key.as_bytes()), "{key}");
            assert_eq!(m.get(key.as_bytes(), i as SeqNo), None, "{key} visible too early");
        }
    }

    #[test]
    fn iterator_starts_unpositioned_and_walks_in_order() {
        let m = Arc::new(MemTable::new());
        let mut it = m.iter();
        assert!(!it.valid());
        it.seek_to_first().unwrap();
        assert!(!it.valid());
        m.insert(b"b", 1, ValueKind::Put, b"1");
        m.insert(b"a", 2, ValueKind::Put, b"2");
        m.insert(b"b", 3, ValueKind::Delete, b"");
        it.seek_to_first().unwrap();
        let mut seen = Vec::new();
        while it.valid() {
            seen.push((it.key().to_vec(), it.value().to_vec()));
            it.next().unwrap();
        }
        assert_eq!(
            seen,
            vec![
                (internal_key(b"a", 2, ValueKind::Put), b"2".to_vec()),
                (internal_key(b"b", 3, ValueKind::Delete), vec![]),
                (internal_key(b"b", 1, ValueKind::Put), b"1".to_vec()),
            ]
        );
        // Seeking to (b, seq 2) skips the version at seq 3.
        it.seek(&internal_key(b"b", 2, KIND_FOR_SEEK)).unwrap();
        assert_eq!(it.key(), &internal_key(b"b", 1, ValueKind::Put)[..]);
    }

    use crate::key::OrderedKey as Ik;

    fn entry() -> impl Strategy<Value = (Vec<u8>, SeqNo, bool, Vec<u8>)> {
        (
            proptest::collection::vec(0u8..4, 0..4),
            0u64..50,
            any::<bool>(),
            proptest::collection::vec(any::<u8>(), 0..8),
        )
    }

    /// Keys over a small alphabet with a long shared start, so that heads are often equal
    /// and keys often run past them.
    fn ordered_key() -> impl Strategy<Value = Vec<u8>> {
        (0usize..20, proptest::collection::vec(prop_oneof![Just(0u8), Just(1), Just(0xff)], 0..6))
            .prop_map(|(n, tail)| [vec![b'0'; n], tail].concat())
    }

    proptest! {
        /// Seeks both ways and runs of steps that turn around anywhere agree with a model
        /// cursor, across read-ahead (64 forward) and read-behind (4 backward) runs.
        #[test]
        fn prop_random_walks_match_a_model(
            entries in proptest::collection::vec(entry(), 0..300),
            walk in proptest::collection::vec(walk_op(
                (proptest::collection::vec(0u8..4, 0..4), 0u64..60, any::<bool>()).prop_map(
                    |(k, seq, put)| {
                        let kind = if put { ValueKind::Put } else { ValueKind::Delete };
                        internal_key(&k, seq, kind)
                    },
                ),
            ), 1..40),
        ) {
            let m = Arc::new(MemTable::new());
            let mut model = BTreeMap::new();
            for (k, seq, put, v) in &entries {
                let kind = if *put { ValueKind::Put } else { ValueKind::Delete };
                m.insert(k, *seq, kind, v);
                model.insert(Ik(internal_key(k, *seq, kind)), v.clone());
            }
            let sorted: Vec<_> = model.into_iter().map(|(k, v)| (k.0, v)).collect();
            check_walk(&mut m.iter(), &sorted, &walk)?;
        }

        #[test]
        fn prop_order_matches_compare_internal(
            a in ordered_key(), sa in 0u64..4, pa in any::<bool>(),
            b in ordered_key(), sb in 0u64..4, pb in any::<bool>(),
        ) {
            let kind = |p| if p { ValueKind::Put } else { ValueKind::Delete };
            check_order((&a, sa, kind(pa)), (&b, sb, kind(pb)));
        }

        #[test]
        fn prop_iteration_and_get_match_a_model(
            entries in proptest::collection::vec(entry(), 0..200),
            seeks in proptest::collection::vec((proptest::collection::vec(0u8..4, 0..4), 0u64..60), 0..20),
        ) {
            let m = Arc::new(MemTable::new());
            let mut model = BTreeMap::new();
            for (k, seq, put, v) in &entries {
                let kind = if *put { ValueKind::Put } else { ValueKind::Delete };
                let v = if *put { v.clone() } else { Vec::new() };
                m.insert(k, *seq, kind, &v);
                model.insert(Ik(internal_key(k, *seq, kind)), v);
            }
            prop_assert_eq!(m.len(), model.len());

            let mut it = m.iter();
            it.seek_to_first().unwrap();
            let mut got = Vec::new();
            while it.valid() {
                got.push((it.key().to_vec(), it.value().to_vec()));
                it.next().unwrap();
            }
            let want: Vec<_> = model.iter().map(|(k, v)| (k.0.clone(), v.clone())).collect();
            prop_assert_eq!(got, want);

            for (k, seq) in seeks {
                let target = internal_key(&k, seq, KIND_FOR_SEEK);
                it.seek(&target).unwrap();
                let want = model.range(Ik(target.clone())..).next();
                match want {
                    Some((wk, wv)) => {
                        prop_assert!(it.valid());
                        prop_assert_eq!(it.key(), &wk.0[..]);
                        prop_assert_eq!(it.value(), &wv[..]);
                    }
                    None => prop_assert!(!it.valid()),
                }
                // get = the first model entry at or after the seek key, if same user key.
                let want_get = want.and_then(|(wk, wv)| {
                    let p = parse_internal_key(&wk.0).unwrap();
                    (p.user_key == &k[..]).then(|| match p.kind {
                        ValueKind::Put => MemGet::Found(Value::copy_from_slice(wv), p.seq),
                        ValueKind::Delete => MemGet::Deleted,
                        ValueKind::PutExpiring
                        | ValueKind::Merge
                        | ValueKind::MergeExpiring
                        | ValueKind::BlobPut
                        | ValueKind::BlobPutExpiring => unreachable!("not generated"),
                    })
                });
                prop_assert_eq!(m.get(&k, seq), want_get);
            }
        }
    }

    /// A value length for the model tests: mostly small, sometimes a node of its own.
    fn model_value() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            8 => proptest::collection::vec(any::<u8>(), 0..12),
            1 => (MAX_CHUNKED_ENTRY - 40..MAX_CHUNKED_ENTRY + 40).prop_map(|n| vec![0xab; n]),
        ]
    }

    proptest! {
        /// The skip list against a `BTreeMap` of internal keys: many versions of few user
        /// keys, some inserted twice (the second replaces the first), walked whole both
        /// ways, sought both ways, and read at random sequence numbers.
        #[test]
        fn prop_skip_list_matches_a_btreemap(
            entries in proptest::collection::vec(
                (proptest::collection::vec(0u8..3, 0..3), 0u64..12, any::<bool>(), model_value(), any::<bool>()),
                0..400,
            ),
            probes in proptest::collection::vec(
                (proptest::collection::vec(0u8..3, 0..4), 0u64..14, any::<bool>()),
                0..60,
            ),
        ) {
            let m = Arc::new(MemTable::new());
            let mut model: BTreeMap<Ik, Vec<u8>> = BTreeMap::new();
            for (k, seq, put, v, twice) in &entries {
                let kind = if *put { ValueKind::Put } else { ValueKind::Delete };
                let v = if *put { v.clone() } else { Vec::new() };
                m.insert(k, *seq, kind, &v);
                model.insert(Ik(internal_key(k, *seq, kind)), v.clone());
                if *twice {
                    let mut again = v.clone();
                    again.push(7);
                    m.insert(k, *seq, kind, &again);
                    model.insert(Ik(internal_key(k, *seq, kind)), again);
                }
            }
            prop_assert_eq!(m.len(), model.len());
            prop_assert_eq!(m.is_empty(), model.is_empty());
            let want: Vec<(Vec<u8>, Vec<u8>)> =
                model.iter().map(|(k, v)| (k.0.clone(), v.clone())).collect();

            let mut it = m.iter();
            let mut forward = Vec::new();
            it.seek_to_first().unwrap();
            while it.valid() {
                forward.push((it.key().to_vec(), it.value().to_vec()));
                it.next().unwrap();
            }
            prop_assert_eq!(&forward, &want);
            let mut backward = Vec::new();
            it.seek_to_last().unwrap();
            while it.valid() {
                backward.push((it.key().to_vec(), it.value().to_vec()));
                it.prev().unwrap();
            }
            backward.reverse();
            prop_assert_eq!(&backward, &want);

            for (k, seq, put) in probes {
                let kind = if put { ValueKind::Put } else { ValueKind::Delete };
                let target = internal_key(&k, seq, kind);
                it.seek(&target).unwrap();
                match model.range(Ik(target.clone())..).next() {
                    Some((wk, wv)) => {
                        prop_assert!(it.valid());
                        prop_assert_eq!(it.key(), &wk.0[..]);
                        prop_assert_eq!(it.value(), &wv[..]);
                    }
                    None => prop_assert!(!it.valid()),
                }
                it.seek_for_prev(&target).unwrap();
                match model.range(..=Ik(target.clone())).next_back() {
                    Some((wk, wv)) => {
                        prop_assert!(it.valid());
                        prop_assert_eq!(it.key(), &wk.0[..]);
                        prop_assert_eq!(it.value(), &wv[..]);
                    }
                    None => prop_assert!(!it.valid()),
                }
                // The newest version at or below `seq`: the first entry at or after
                // `(k, seq, KIND_FOR_SEEK)`, if it is `k`'s.
                let seek = Ik(internal_key(&k, seq, KIND_FOR_SEEK));
                let want_get = model.range(seek..).next().and_then(|(wk, wv)| {
                    let p = parse_internal_key(&wk.0).unwrap();
                    (p.user_key == &k[..]).then(|| match p.kind {
                        ValueKind::Put => MemGet::Found(Value::copy_from_slice(wv), p.seq),
                        ValueKind::Delete => MemGet::Deleted,
                        ValueKind::PutExpiring
                        | ValueKind::Merge
                        | ValueKind::MergeExpiring
                        | ValueKind::BlobPut
                        | ValueKind::BlobPutExpiring => unreachable!("not generated"),
                    })
                });
                prop_assert_eq!(m.get(&k, seq), want_get);
            }
        }
    }

    /// One writer inserting while readers iterate both ways and look keys up: every
    /// sequence a reader observes is sorted and holds only whole entries, and every key the
    /// writer had finished inserting before a reader's pass began is found by it.
    #[test]
    fn readers_running_beside_the_writer_see_sorted_complete_entries() {
        use std::sync::atomic::AtomicBool;
        use std::sync::Barrier;

        const KEYS: u64 = 20_000;
        const READERS: usize = 3;
        // Keys in a scrambled order (a multiplier coprime to KEYS), so that inserts land
        // all over the list; three of every ten also get an older version afterwards.
        let key_of = |i: u64| format!("key{:08}", (i * 7919) % KEYS).into_bytes();
        let value_of = |k: &[u8], seq: u64| [k, &seq.to_le_bytes()[..]].concat();
        let m = Arc::new(MemTable::new());
        let done = AtomicUsize::new(0);
        let finished = AtomicBool::new(false);
        let start = Barrier::new(READERS + 1);
        std::thread::scope(|s| {
            s.spawn(|| {
                start.wait();
                for i in 0..KEYS {
                    let k = key_of(i);
                    // Sequence numbers ascending with `i`; the older version of a key gets
                    // one below every newer key's, so a read at MAX_SEQNO sees the newer.
                    let seq = KEYS + i + 1;
                    m.insert(&k, seq, ValueKind::Put, &value_of(&k, seq));
                    if i % 10 < 3 {
                        m.insert(&k, i + 1, ValueKind::Put, &value_of(&k, i + 1));
                    }
                    done.store(i as usize + 1, AtomicOrdering::Release);
                }
                finished.store(true, AtomicOrdering::Release);
            });
            for r in 0..READERS {
                let (m, done, finished, start) = (&m, &done, &finished, &start);
                s.spawn(move || {
                    start.wait();
                    let mut passes = 0;
                    loop {
                        let last = finished.load(AtomicOrdering::Acquire);
                        let before = done.load(AtomicOrdering::Acquire) as u64;
                        let mut it = m.iter();
                        let mut seen: Vec<Vec<u8>> = Vec::new();
                        let backward = (passes + r) % 2 == 1;
                        if backward {
                            it.seek_to_last().unwrap();
                        } else {
                            it.seek_to_first().unwrap();
                        }
                        while it.valid() {
                            let p = parse_internal_key(it.key()).unwrap();
                            assert_eq!(it.value(), value_of(p.user_key, p.seq), "a torn entry");
                            if let Some(prev) = seen.last() {
                                let o = compare_internal(prev, it.key());
                                let want =
                                    if backward { Ordering::Greater } else { Ordering::Less };
                                assert_eq!(o, want, "out of order");
                            }
                            seen.push(it.key().to_vec());
                            if backward {
                                it.prev().unwrap();
                            } else {
                                it.next().unwrap();
                            }
                        }
                        if backward {
                            seen.reverse();
                        }
                        let user_keys: Vec<&[u8]> =
                            seen.iter().map(|k| crate::key::user_key(k)).collect();
                        for i in 0..before {
                            let k = key_of(i);
                            assert!(
                                user_keys.binary_search(&&k[..]).is_ok(),
                                "{} inserted before the pass and missing",
                                String::from_utf8_lossy(&k)
                            );
                        }
                        // Point lookups of a sample of them, and of the newest one.
                        for i in (0..before).step_by(97).chain(before.checked_sub(1)) {
                            let k = key_of(i);
                            let seq = KEYS + i + 1;
                            let want = MemGet::Found(Value::from(value_of(&k, seq)), seq);
                            assert_eq!(m.get(&k, MAX_SEQNO), Some(want));
                        }
                        passes += 1;
                        if last {
                            assert_eq!(before, KEYS);
                            assert_eq!(seen.len() as u64, KEYS + (KEYS / 10) * 3);
                            break;
                        }
                    }
                    assert!(passes >= 1);
                });
            }
        });
        assert_eq!(m.len() as u64, KEYS + (KEYS / 10) * 3);
    }

    /// A value shared out of a node's own buffer keeps that buffer alive after the memtable
    /// is gone, and is counted as pinned while it lives.
    #[test]
    fn a_shared_value_outlives_its_memtable() {
        let m = Arc::new(MemTable::new());
        let big: Vec<u8> = (0..4 * MAX_CHUNKED_ENTRY).map(|i| (i * 7) as u8).collect();
        m.insert(b"small", 1, ValueKind::Put, b"x");
        m.insert(b"big", 2, ValueKind::Put, &big);
        let (Some(MemGet::Found(held, 2)), Some(MemGet::Found(again, 2))) =
            (m.get(b"big", 9), m.get(b"big", 9))
        else {
            panic!("missing")
        };
        assert_eq!(held.as_ptr(), again.as_ptr(), "both share the node's buffer");
        drop(again);
        assert!(crate::value::pinned_bytes() >= big.len() as u64);
        let mut it = m.iter();
        it.seek_to_first().unwrap();
        assert_eq!(it.value(), &big[..]);
        drop(it);
        drop(m);
        // Reuse freed memory, so that a buffer freed with the memtable would be overwritten.
        let junk: Vec<Vec<u8>> = (0..64).map(|_| vec![0x5a; big.len()]).collect();
        assert_eq!(&held[..], &big[..]);
        let bytes = held.into_bytes();
        assert_eq!(&bytes[..], &big[..]);
        drop(junk);
    }

    /// The memtable's size is its arena's: every node's bytes, and the chunk tails left
    /// unfilled, so it lies between the nodes' minimum size and the chunks allocated.
    #[test]
    fn approximate_bytes_counts_the_arena() {
        let m = MemTable::new();
        let n = 5000usize;
        let value = [3u8; 100];
        for i in 0..n {
            m.insert(format!("{i:016}").as_bytes(), i as SeqNo, ValueKind::Put, &value);
        }
        let entry = 16 + TRAILER_LEN + value.len();
        // Each node has at least a header of 24 bytes and one link, and at most the tallest
        // tower and 7 bytes of padding.
        let low = n * (entry + 24 + 8);
        let high = n * (entry + 24 + 8 * super::skiplist::MAX_HEIGHT + 7);
        let bytes = m.approximate_bytes();
        assert!(bytes >= low && bytes <= high, "{bytes} not in {low}..={high}");
        // With a quarter of the towers one taller than the last, the average is close to
        // the low end: about 4/3 links per node.
        assert!(bytes < n * (entry + 24 + 8 * 2 + 8), "{bytes}");
        assert!(bytes.div_ceil(CHUNK_BYTES) * CHUNK_BYTES >= bytes);
    }

    #[test]
    fn iterators_and_memtables_cross_threads() {
        fn send<T: Send>() {}
        fn sync<T: Sync>() {}
        send::<MemTableIter>();
        send::<MemTable>();
        sync::<MemTable>();
    }
}
