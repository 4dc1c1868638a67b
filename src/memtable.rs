//! The memtable: recent writes held in memory, sorted by internal key, until they are
//! flushed to a table.
//!
//! It is a lock-free skip list (`crossbeam_skiplist::SkipMap`) keyed by the encoded internal
//! key (user key ascending, sequence number descending, see [`crate::key`]), so one writer
//! and any number of readers proceed without locks, and a point lookup is one
//! `lower_bound` search for `(user_key, snapshot_seq)`.
//!
//! Keys and values are `bytes::Bytes`: a hit hands out a reference-counted view of the
//! stored value rather than a copy, and an iterator holds its current entry the same way.
//! Nothing is ever removed; a memtable is dropped whole once it has been flushed.

use std::borrow::Borrow;
use std::cell::Cell;
use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Arc;

use bytes::Bytes;
use crossbeam_skiplist::SkipMap;
use ref_cast::RefCast;

use crate::iter::InternalIterator;
use crate::key::{
    append_internal_key, compare_internal, pack_trailer, parse_internal_key, SeqNo, ValueKind,
    KIND_FOR_SEEK, MAX_SEQNO, TRAILER_LEN,
};
use crate::{Result, Value};

/// Estimated bytes a skip-list entry costs beyond its key and value: the node with its
/// tower of next pointers and reference count, and the two `Bytes` handles with the
/// shared headers they point to. Only used to decide when to flush, so an estimate is
/// enough.
const ENTRY_OVERHEAD: usize = 96;

/// Lookup keys up to this size are built on the stack.
const STACK_KEY: usize = 128;

/// An encoded internal key owned by the skip list.
#[derive(Clone)]
struct MemKey(Bytes);

/// A borrowed encoded internal key, so that lookups can search the map with a slice
/// instead of building an owned `MemKey`.
#[derive(RefCast)]
#[repr(transparent)]
struct KeyRef([u8]);

impl Borrow<KeyRef> for MemKey {
    fn borrow(&self) -> &KeyRef {
        KeyRef::ref_cast(&self.0)
    }
}

// Both orders are `compare_internal`, as `Borrow` requires of `MemKey` and `KeyRef`.
impl Ord for MemKey {
    fn cmp(&self, other: &Self) -> Ordering {
        compare_internal(&self.0, &other.0)
    }
}
impl PartialOrd for MemKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for MemKey {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for MemKey {}

impl Ord for KeyRef {
    fn cmp(&self, other: &Self) -> Ordering {
        compare_internal(&self.0, &other.0)
    }
}
impl PartialOrd for KeyRef {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for KeyRef {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for KeyRef {}

/// The answer of [`MemTable::get`] when the memtable knows the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemGet {
    /// The newest visible version is a put of this value.
    Found(Value),
    /// The newest visible version is a tombstone; older sources must not be consulted.
    Deleted,
}

/// Sorted in-memory buffer of recent writes. See the module documentation.
pub struct MemTable {
    map: SkipMap<MemKey, Bytes>,
    bytes: AtomicUsize,
}

impl MemTable {
    /// An empty memtable.
    pub fn new() -> Self {
        MemTable { map: SkipMap::new(), bytes: AtomicUsize::new(0) }
    }

    /// Records a put (or, with [`ValueKind::Delete`], a tombstone whose `value` should be
    /// empty) of `user_key` at `seq`. Safe to call while other threads read; the engine
    /// calls it from one writer at a time, and inserting the same `(user_key, seq, kind)`
    /// twice replaces the value.
    pub fn insert(&self, user_key: &[u8], seq: SeqNo, kind: ValueKind, value: &[u8]) {
        debug_assert!(seq <= MAX_SEQNO);
        let mut key = Vec::with_capacity(user_key.len() + TRAILER_LEN);
        append_internal_key(&mut key, user_key, seq, kind);
        self.bytes.fetch_add(key.len() + value.len() + ENTRY_OVERHEAD, AtomicOrdering::Relaxed);
        self.map.insert(MemKey(Bytes::from(key)), Bytes::copy_from_slice(value));
    }

    /// The newest version of `user_key` with a sequence number `<= seq`, or `None` if the
    /// memtable holds no such version. Allocates nothing: the search key is built on the
    /// stack or in a per-thread buffer, and a found value is shared, not copied.
    pub fn get(&self, user_key: &[u8], seq: SeqNo) -> Option<MemGet> {
        // `KIND_FOR_SEEK` gives the largest trailer for `seq`, so the search lands on the
        // first entry of `user_key` whose seq is `<= seq`.
        let trailer = pack_trailer(seq.min(MAX_SEQNO), KIND_FOR_SEEK).to_le_bytes();
        with_lookup_key(user_key, &trailer, |lookup| {
            let entry = self.map.lower_bound(Bound::Included(KeyRef::ref_cast(lookup)))?;
            let found = parse_internal_key(&entry.key().0)?;
            if found.user_key != user_key {
                return None;
            }
            Some(match found.kind {
                ValueKind::Put => MemGet::Found(Value::from_bytes(entry.value().clone())),
                ValueKind::Delete => MemGet::Deleted,
            })
        })
    }

    /// Estimated memory held: keys, values and per-entry overhead.
    pub fn approximate_bytes(&self) -> usize {
        self.bytes.load(AtomicOrdering::Relaxed)
    }

    /// Number of entries (versions, not distinct user keys).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when nothing has been inserted.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The smallest internal key held, if any.
    pub fn first_key(&self) -> Option<Bytes> {
        self.map.front().map(|e| e.key().0.clone())
    }

    /// The largest internal key held, if any.
    pub fn last_key(&self) -> Option<Bytes> {
        self.map.back().map(|e| e.key().0.clone())
    }

    /// An iterator over every entry in internal-key order. It starts unpositioned: call
    /// `seek_to_first` or `seek` first. It keeps the memtable alive, and may or may not
    /// see entries inserted after it was created.
    pub fn iter(self: &Arc<Self>) -> MemTableIter {
        MemTableIter { mem: Arc::clone(self), ahead: Vec::new() }
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

thread_local! {
    /// Reused buffer for lookup keys too long for the stack.
    static LOOKUP_KEY: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// Calls `f` with `user_key || trailer` without allocating in the common case.
fn with_lookup_key<R>(user_key: &[u8], trailer: &[u8], f: impl FnOnce(&[u8]) -> R) -> R {
    let n = user_key.len() + trailer.len();
    if n <= STACK_KEY {
        let mut buf = [0u8; STACK_KEY];
        buf[..user_key.len()].copy_from_slice(user_key);
        buf[user_key.len()..n].copy_from_slice(trailer);
        return f(&buf[..n]);
    }
    LOOKUP_KEY.with(|cell| {
        // Taking the buffer out (instead of a `RefCell` borrow) cannot fail even if `f`
        // were to look up again on this thread; that lookup would just allocate.
        let mut buf = cell.take();
        buf.clear();
        buf.extend_from_slice(user_key);
        buf.extend_from_slice(trailer);
        let r = f(&buf);
        cell.set(buf);
        r
    })
}

/// Iterator over a memtable, from [`MemTable::iter`].
///
/// Holds its current entry as shared `Bytes`, and finds the next one with a fresh search
/// for the first key after it: O(log n) per step, but no lifetimes tie the iterator to a
/// skip-list guard, so it can be boxed and sent between threads.
pub struct MemTableIter {
    mem: Arc<MemTable>,
    /// Entries read ahead from the skip list, current first (stored reversed so the current
    /// entry is at the end and advancing is a `pop`). Reading a run of entries per search
    /// makes a full scan — a flush — cost O(1) amortised per entry instead of O(log n).
    ahead: Vec<(Bytes, Bytes)>,
}

/// Entries fetched per skip-list search.
const READ_AHEAD: usize = 64;

impl MemTableIter {
    fn position(&mut self, bound: Bound<&KeyRef>) {
        self.ahead.clear();
        let range = self.mem.map.range::<KeyRef, _>((bound, Bound::Unbounded));
        self.ahead.extend(range.take(READ_AHEAD).map(|e| (e.key().0.clone(), e.value().clone())));
        self.ahead.reverse();
    }
}

impl InternalIterator for MemTableIter {
    fn valid(&self) -> bool {
        !self.ahead.is_empty()
    }

    fn key(&self) -> &[u8] {
        self.ahead.last().map_or(&[], |(k, _)| k)
    }

    fn value(&self) -> &[u8] {
        self.ahead.last().map_or(&[], |(_, v)| v)
    }

    fn next(&mut self) -> Result<()> {
        if let Some((key, _)) = self.ahead.pop() {
            if self.ahead.is_empty() {
                self.position(Bound::Excluded(KeyRef::ref_cast(&key)));
            }
        }
        Ok(())
    }

    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.position(Bound::Included(KeyRef::ref_cast(target)));
        Ok(())
    }

    fn seek_to_first(&mut self) -> Result<()> {
        self.position(Bound::Unbounded);
        Ok(())
    }
}

impl std::fmt::Debug for MemTableIter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemTableIter").field("key", &self.ahead.last().map(|c| &c.0)).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::key::internal_key;

    fn found(v: &[u8]) -> Option<MemGet> {
        Some(MemGet::Found(Value::copy_from_slice(v)))
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
            assert_eq!(m.get(b"a", seq), found(b"v1"), "seq {seq}");
        }
        assert_eq!(m.get(b"a", 5), found(b"v5"));
        assert_eq!(m.get(b"a", 6), found(b"v5"));
        assert_eq!(m.get(b"a", 7), Some(MemGet::Deleted));
        assert_eq!(m.get(b"a", 8), Some(MemGet::Deleted));
        assert_eq!(m.get(b"a", 9), found(b"v9"));
        assert_eq!(m.get(b"a", MAX_SEQNO), found(b"v9"));
        assert_eq!(m.get(b"a", u64::MAX), found(b"v9"));
        // A longer key sharing the prefix is a different key.
        assert_eq!(m.get(b"ab", 2), None);
        assert_eq!(m.get(b"ab", 3), found(b"other"));
        assert_eq!(m.get(b"b", 100), None);
        assert_eq!(m.get(b"", 100), found(b"empty key"));
        assert_eq!(m.get(b"", 1), None);
        assert_eq!(m.len(), 6);
    }

    #[test]
    fn long_keys_use_the_thread_local_buffer() {
        let m = MemTable::new();
        let long: Vec<u8> = (0..1000).map(|i| i as u8).collect();
        let mut longer = long.clone();
        longer.push(0);
        m.insert(&long, 4, ValueKind::Put, b"x");
        m.insert(&longer, 4, ValueKind::Delete, b"");
        assert_eq!(m.get(&long, 4), found(b"x"));
        assert_eq!(m.get(&long, 3), None);
        assert_eq!(m.get(&longer, 10), Some(MemGet::Deleted));
        assert_eq!(m.get(&long[..STACK_KEY - TRAILER_LEN], 10), None);
    }

    #[test]
    fn hits_share_the_stored_bytes() {
        let m = MemTable::new();
        m.insert(b"k", 1, ValueKind::Put, b"shared value");
        let (Some(MemGet::Found(a)), Some(MemGet::Found(b))) = (m.get(b"k", 1), m.get(b"k", 2))
        else {
            panic!("key not found");
        };
        assert_eq!(a.as_ptr(), b.as_ptr());
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
        const PER_THREAD: usize = 2000;
        let m = MemTable::new();
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
                        assert_eq!(hit, MemGet::Found(Value::from(key.into_bytes())));
                    }
                }
            });
        });
        assert_eq!(m.len(), THREADS * PER_THREAD);
        for i in 0..THREADS * PER_THREAD {
            let key = format!("key{i:06}");
            assert_eq!(m.get(key.as_bytes(), MAX_SEQNO), found(key.as_bytes()), "{key}");
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
        assert_eq!(m.first_key().unwrap(), internal_key(b"a", 2, ValueKind::Put));
        assert_eq!(m.last_key().unwrap(), internal_key(b"b", 1, ValueKind::Put));
        // Seeking to (b, seq 2) skips the version at seq 3.
        it.seek(&internal_key(b"b", 2, KIND_FOR_SEEK)).unwrap();
        assert_eq!(it.key(), &internal_key(b"b", 1, ValueKind::Put)[..]);
    }

    /// Model key with the engine's order, for a BTreeMap.
    #[derive(Clone, PartialEq, Eq, Debug)]
    struct Ik(Vec<u8>);
    impl Ord for Ik {
        fn cmp(&self, o: &Self) -> Ordering {
            compare_internal(&self.0, &o.0)
        }
    }
    impl PartialOrd for Ik {
        fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
            Some(self.cmp(o))
        }
    }

    fn entry() -> impl Strategy<Value = (Vec<u8>, SeqNo, bool, Vec<u8>)> {
        (
            proptest::collection::vec(0u8..4, 0..4),
            0u64..50,
            any::<bool>(),
            proptest::collection::vec(any::<u8>(), 0..8),
        )
    }

    proptest! {
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
                        ValueKind::Put => MemGet::Found(Value::copy_from_slice(wv)),
                        ValueKind::Delete => MemGet::Deleted,
                    })
                });
                prop_assert_eq!(m.get(&k, seq), want_get);
            }
        }
    }
}
