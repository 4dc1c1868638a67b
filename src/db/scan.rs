//! Range and prefix scans.
//!
//! A scan merges every source — active memtable, immutable memtables, each L0 table, and one
//! concatenating iterator per deeper level (which opens one table at a time) — into one stream
//! in internal-key order, and reads it through a [`VisibleIter`]: at the scan's sequence
//! number, the newest version of each user key, tombstones hidden, inside the range.
//!
//! Only the tables that can hold a key of the range are merged ([`choose_tables`]): those
//! whose key range meets it, less — when every key of the range has one prefix under the
//! keyspace's extractor — those whose filter says they hold no key with that prefix; the
//! memtables likewise, by their own filters. A skipped source's range tombstones still
//! apply: they come from the version, which gathers every table's, and from each memtable's
//! set beside its skip list, not from the iterators. The prefix is hashed once per scan and
//! every candidate's filter line is prefetched before any is probed, so the probes' cache
//! misses overlap.
//!
//! A [`DbIterator`] is double-ended the way `BTreeMap::range` is: its front and its back are
//! two `VisibleIter`s over the same state, the back one built on the first `next_back`, and
//! the iterator ends when they meet. Two cursors rather than one turned around at every
//! change of end: alternating ends would otherwise cost a repositioning of every source per
//! item, and a scan that only goes forward pays nothing for the back.

use std::iter::FusedIterator;
use std::ops::Bound;
use std::sync::Arc;

use super::{DbInner, Tree};
use crate::clock::ExpiryTime;
use crate::filter::hash_prefix;
use crate::key::SeqNo;
use crate::prefix::PrefixExtractor;
use crate::stats::Counters;
use crate::version::set::TableFile;
use crate::{Result, Value};
use bloomkv_tree::iter::merge::MergingIterator;
use bloomkv_tree::read::sources::{
    as_slices, choose_tables_by, merge_chosen, merged_sources, scan_prefix, Judge,
};
use bloomkv_tree::read::visible::VisibleIter;
use bloomkv_tree::read::ScanTally;
use bloomkv_tree::version::range_checks::RangeChecks;

/// What a reader of `state` at `seq` sees of the keys in `(start, end)`: every source
/// merged, with the tree's range tombstones applied and values expired by `now` hidden.
#[inline]
pub(crate) fn visible(
    state: &Tree,
    seq: SeqNo,
    start: Bound<Vec<u8>>,
    end: Bound<Vec<u8>>,
    counters: &Counters,
    now: ExpiryTime,
) -> VisibleIter {
    let (sources, checks) = sources(state, as_slices(&start), as_slices(&end), counters);
    view(state, sources, seq, start, end, now, checks)
}

/// The merged sources of a scan of `(start, end)` over `state`, counted as one scan, and
/// the record its range filters' false positives go to (see [`visible`]).
#[inline]
fn sources(
    state: &Tree,
    start: Bound<&[u8]>,
    end: Bound<&[u8]>,
    counters: &Counters,
) -> (MergingIterator, Option<Arc<RangeChecks>>) {
    counters.scans.incr();
    let mut tally = ScanTally::default();
    let mut checks = None;
    let judge = Judge::Count { sink: &counters.range_filter_false_positives, checks: &mut checks };
    let sources = merged_sources(state, start, end, Some(&mut tally), judge);
    counters.record_scan(&tally);
    (sources, checks)
}

/// The view of `sources`, the merged sources of `state` for a scan of `(start, end)`.
#[inline]
fn view(
    state: &Tree,
    sources: MergingIterator,
    seq: SeqNo,
    start: Bound<Vec<u8>>,
    end: Bound<Vec<u8>>,
    now: ExpiryTime,
    checks: Option<Arc<RangeChecks>>,
) -> VisibleIter {
    VisibleIter::new(sources, seq, start, end, state.range_tombstones(), now)
        .with_merger(state.merger())
        .with_blobs(state.blobs())
        .with_range_checks(checks)
}

/// The tree a view reads (empty after a failure to load it) and the failure to report at
/// the first step.
fn loaded(state: Result<Arc<Tree>>) -> (Arc<Tree>, Option<crate::Error>) {
    match state {
        Ok(s) => (s, None),
        Err(e) => (Arc::new(Tree::empty()), Some(e)),
    }
}

/// [`visible`] for a tree that may have failed to load: the tree kept (empty after a failure),
/// the failure to report at the first step, and the view.
#[inline]
pub(crate) fn visible_or_failed(
    state: Result<Arc<Tree>>,
    seq: SeqNo,
    start: Bound<Vec<u8>>,
    end: Bound<Vec<u8>>,
    counters: &Counters,
    now: ExpiryTime,
) -> (Arc<Tree>, Option<crate::Error>, VisibleIter) {
    let (state, failed) = loaded(state);
    let view = visible(&state, seq, start, end, counters, now);
    (state, failed, view)
}

/// Whether any live key starts with each of `prefixes`, reading `state` at `seq`: for each
/// prefix, the first key of a scan of it. The prefixes' filter probes come first, table by
/// table, as one batch ([`crate::filter::Filter::may_contain_batch`] starts the load of every
/// prefix's filter line before probing any, as `multi_get` does for keys), so a table's
/// misses overlap; then each prefix's scan merges only the tables that may hold it.
pub(crate) fn prefixes_exist<P: AsRef<[u8]>>(
    state: &Tree,
    seq: SeqNo,
    prefixes: &[P],
    counters: &Counters,
    now: u64,
) -> Result<Vec<bool>> {
    let bounds: Vec<_> =
        prefixes.iter().map(|p| crate::key_range::prefix_bounds(p.as_ref())).collect();
    let scan_prefixes: Vec<Option<(PrefixExtractor, u64)>> = bounds
        .iter()
        .map(|(lo, hi)| {
            scan_prefix(state, as_slices(lo), as_slices(hi)).map(|(e, p)| (e, hash_prefix(p)))
        })
        .collect();
    // Per table built with the tree's extractor, its filter's answer for every prefix.
    let mut answers: std::collections::HashMap<u64, Vec<bool>> = Default::default();
    if let Some(e) = state.opts.prefix_extractor {
        let hashes: Vec<u64> = scan_prefixes.iter().map(|p| p.map_or(0, |(_, h)| h)).collect();
        for (_, t) in state.version.all_tables() {
            if t.table.prefix_extractor() == Some(e) {
                let mut out = vec![true; hashes.len()];
                t.table.filter().may_contain_batch(&hashes, &mut out);
                answers.insert(t.meta.number, out);
            }
        }
    }
    let range_dels = state.range_tombstones();
    let mut found = Vec::with_capacity(prefixes.len());
    for (i, (lo, hi)) in bounds.into_iter().enumerate() {
        let (l, h) = (as_slices(&lo), as_slices(&hi));
        let may_hold = |t: &TableFile, _, _| answers.get(&t.meta.number).map_or(true, |a| a[i]);
        let mut tally = ScanTally::default();
        let mut checks = None;
        let sink = &counters.range_filter_false_positives;
        let judge = Judge::Count { sink, checks: &mut checks };
        let sources =
            merge_chosen(state, scan_prefixes[i], Some(&mut tally), (l, h), judge, |each| {
                choose_tables_by(state, l, h, scan_prefixes[i], |_, _| {}, may_hold, each)
            });
        counters.record_scan(&tally);
        let mut v = VisibleIter::new(sources, seq, lo, hi, range_dels.clone(), now)
            .with_merger(state.merger())
            .with_blobs(state.blobs());
        v.seek_to_first()?;
        found.push(v.valid());
    }
    Ok(found)
}

/// An iterator over `(key, value)` pairs in ascending key order, from [`crate::Readable::range`] or
/// [`crate::Readable::prefix`] of a `Db`, a `Keyspace` or a `Snapshot`. It sees the database as of its creation
/// and keeps the files it reads alive until dropped. It does not keep the database open:
/// after [`crate::Db::close`] it yields one [`crate::Error::Closed`] and ends.
///
/// It is double-ended, like `BTreeMap::range`: [`Iterator::rev`] walks the range from its
/// end, and `next` and `next_back` may be mixed — every key comes out once, and the
/// iterator ends when the two ends meet. Both ends read at the same sequence number and
/// respect the range's bounds. An error is yielded as an `Err` item and ends the iterator
/// at both ends. Stepping backward costs more than forward (DESIGN.md, "Scans and
/// snapshots"); for paging back and forth, see [`crate::Cursor`].
///
/// ```
/// use bloomkv::Readable;
/// # fn main() -> bloomkv::Result<()> {
/// let dir = tempfile::tempdir().unwrap();
/// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::new())?;
/// for k in ["a", "b", "c", "d"] {
///     db.put(k, k.to_uppercase())?;
/// }
/// // Newest first: the last two keys before "d".
/// let last_two: Vec<_> = db.range(.."d").rev().take(2).collect::<bloomkv::Result<_>>()?;
/// assert_eq!(last_two[0].0, b"c");
/// assert_eq!(last_two[1].0, b"b");
///
/// // Both ends at once.
/// let mut it = db.range(..);
/// assert_eq!(it.next().transpose()?.map(|(k, _)| k), Some(b"a".to_vec()));
/// assert_eq!(it.next_back().transpose()?.map(|(k, _)| k), Some(b"d".to_vec()));
/// assert_eq!(it.next_back().transpose()?.map(|(k, _)| k), Some(b"c".to_vec()));
/// assert_eq!(it.next().transpose()?.map(|(k, _)| k), Some(b"b".to_vec()));
/// assert!(it.next().is_none() && it.next_back().is_none());
/// # Ok(()) }
/// ```
pub struct DbIterator {
    inner: Arc<DbInner>,
    state: Arc<Tree>,
    /// Yielded first: why the iterator cannot read (its keyspace was dropped).
    pending: Option<crate::Error>,
    /// The front end; `None` when no source of the range can hold a key of it (every table
    /// skipped, no memtable entry in range), so the iterator yields nothing: an empty short
    /// scan, the kind range filters make common, then builds no view at all. Boxed, as the
    /// back end: an iterator is moved a few times on its way to the caller, and the view is
    /// most of its size.
    front: Option<Box<VisibleIter>>,
    front_started: bool,
    /// The back end, once `next_back` has been called: while the iterator is not done it
    /// stands on the last key it yielded. Boxed: most scans never build it, and each move of
    /// the iterator on its way to the caller would otherwise copy its room.
    back: Option<Box<VisibleIter>>,
    done: bool,
}

impl std::fmt::Debug for DbIterator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DbIterator").field("done", &self.done).finish_non_exhaustive()
    }
}

type Item = Result<(Vec<u8>, Value)>;

impl DbIterator {
    #[inline]
    pub(crate) fn new(
        inner: Arc<DbInner>,
        state: Result<Arc<Tree>>,
        seq: SeqNo,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
    ) -> Self {
        let (state, pending) = loaded(state);
        let (sources, checks) = sources(&state, start, end, &inner.counters);
        let front = (!sources.has_no_children()).then(|| {
            let now = ExpiryTime::of(&inner.clock);
            let (start, end) = (start.map(<[u8]>::to_vec), end.map(<[u8]>::to_vec));
            Box::new(view(&state, sources, seq, start, end, now, checks))
        });
        DbIterator { inner, state, pending, front, front_started: false, back: None, done: false }
    }

    /// The same iterator, judging expiry at `time` if given (a kept view's time); before
    /// its first step.
    #[inline]
    pub(crate) fn judged_at(mut self, time: Option<u64>) -> Self {
        if let (Some(t), Some(front)) = (time, self.front.as_mut()) {
            front.judge_at(t);
        }
        self
    }

    /// Why the next step cannot be taken, if it cannot: the database is closed, or the view
    /// could not be built.
    fn refusal(&mut self) -> Option<crate::Error> {
        self.inner.check_open().err().or_else(|| self.pending.take())
    }

    /// Ends the iterator at both ends with `e`.
    fn fail(&mut self, e: crate::Error) -> Option<Item> {
        self.done = true;
        Some(Err(e))
    }

    fn item(v: &VisibleIter) -> Option<Item> {
        Some(Ok((v.key().to_vec(), Value::copy_from_slice(v.value()))))
    }
}

impl Iterator for DbIterator {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        if self.done {
            return None;
        }
        if let Some(e) = self.refusal() {
            return self.fail(e);
        }
        let Some(front) = self.front.as_mut() else {
            self.done = true;
            return None;
        };
        let moved = if self.front_started {
            front.next()
        } else {
            self.front_started = true;
            front.seek_to_first()
        };
        if let Err(e) = moved {
            return self.fail(e);
        }
        if !front.valid() || self.back.as_ref().is_some_and(|b| front.key() >= b.key()) {
            self.done = true;
            return None;
        }
        DbIterator::item(front)
    }
}

impl DoubleEndedIterator for DbIterator {
    fn next_back(&mut self) -> Option<Item> {
        if self.done {
            return None;
        }
        if let Some(e) = self.refusal() {
            return self.fail(e);
        }
        let Some(front) = self.front.as_ref() else {
            self.done = true;
            return None;
        };
        let moved = match self.back.as_mut() {
            Some(back) => back.prev(),
            None => {
                let (lower, upper) = front.bounds();
                // Counted once, whichever end positions a table from the range's end first.
                let judge = front.range_checks().map_or(Judge::Off, Judge::Shared);
                let sources = merged_sources(&self.state, lower, upper, None, judge);
                let back = self.back.insert(Box::new(front.twin(sources)));
                back.seek_to_last()
            }
        };
        if let Err(e) = moved {
            return self.fail(e);
        }
        let back = self.back.as_ref().expect("the back end was just positioned");
        // A front that has started stands on the last key it yielded.
        let front = self.front.as_ref().expect("a back end is built from the front");
        if !back.valid() || (self.front_started && back.key() <= front.key()) {
            self.done = true;
            return None;
        }
        DbIterator::item(back)
    }
}

impl FusedIterator for DbIterator {}
