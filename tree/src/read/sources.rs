//! The sources a scan merges: the memtables and tables of a [`Tree`] that can hold a key of
//! its range. Only those whose key range meets it, less — when every key of the range has
//! one prefix under the keyspace's extractor — those whose filter says they hold no key with
//! that prefix; the memtables likewise, by their own filters. A skipped source's range
//! tombstones still apply: they come from the version and from each memtable's set, not from
//! the iterators. The prefix is hashed once per scan and every candidate's filter line is
//! prefetched before any is probed, so the probes' cache misses overlap.
//!
//! A scan bounded at both ends also asks each table in range its range filter, if it has
//! one, and leaves out the tables that hold nothing in the range (`Table::probe_range`):
//! a short scan then reads no block of a table without a key of its range. A scan open at
//! either end is long, and asks nothing; a bounded one too wide for a table's filter gets
//! its answer from the key map alone (no probe). The tables a filter lets through are
//! judged as the scan positions them ([`RangeChecks`]): one that held nothing in the range
//! is a false positive.

use std::ops::Bound;
use std::sync::Arc;

use super::ScanTally;
use crate::filter::hash_prefix;
use crate::iter::merge::MergingIterator;
use crate::iter::{BidirectionalIterator, InternalIterator};
use crate::prefix::PrefixExtractor;
use crate::range_filter::{MappedBounds, PreparedProbe, RangeProbe};
use crate::tree::Tree;
use crate::version::level_iter::LevelIter;
use crate::version::lookup::LookupKey;
use crate::version::range_checks::{Direction, LevelCounts, RangeChecks};
use crate::version::set::{TableFile, NUM_LEVELS};

/// Whether a scan may be short: bounded at both ends. One open at an end reads to the end
/// of the tree, and asks no filter or memtable whether it holds a key of its range.
#[inline]
fn bounded_at_both_ends(lower: Bound<&[u8]>, upper: Bound<&[u8]>) -> bool {
    !matches!(lower, Bound::Unbounded) && !matches!(upper, Bound::Unbounded)
}

pub fn as_slices(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    b.as_ref().map(Vec::as_slice)
}

/// What a scan does with one table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableChoice {
    /// The table's key range does not meet the scan's.
    OutOfRange,
    /// The table's filter says it holds no key with the scan's prefix.
    PrefixSkipped,
    /// The table's range filter says it holds nothing in the scan's range.
    RangeSkipped,
    /// The table is read; `prefix_checked` if its prefix filter was asked (and said maybe),
    /// `range_checked` if its range filter was probed (and said maybe).
    Read { prefix_checked: bool, range_checked: bool },
}

/// The prefix every key of `(lower, upper)` has under the tree's extractor, with its hash:
/// what the scan asks the tables' filters about.
pub fn scan_prefix<'b>(
    state: &Tree,
    lower: Bound<&'b [u8]>,
    upper: Bound<&[u8]>,
) -> Option<(PrefixExtractor, &'b [u8])> {
    let e = state.opts.prefix_extractor?;
    e.common_prefix(lower, upper).map(|p| (e, p))
}

/// Calls `each(level, table, choice)` for the tables of `state` a scan of `(lower, upper)`
/// might read — every L0 table, and on each deeper level the tables from the first whose
/// range ends at or after `lower` (found by binary search) on — in read order, with what
/// the scan does with it. Tables of a deeper level wholly outside the range are left out.
/// (What `trace` reports; a scan itself goes through `choose_tables_hashed`.)
pub fn choose_tables<'t>(
    state: &'t Tree,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    each: impl FnMut(usize, &'t Arc<TableFile>, TableChoice),
) {
    let prefix = scan_prefix(state, lower, upper).map(|(e, p)| (e, hash_prefix(p)));
    choose_tables_hashed(state, lower, upper, prefix, each)
}

/// [`choose_tables`] for the prefix (extractor and hash) already computed, asking each
/// table's filter.
pub fn choose_tables_hashed<'t>(
    state: &'t Tree,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    prefix: Option<(PrefixExtractor, u64)>,
    each: impl FnMut(usize, &'t Arc<TableFile>, TableChoice),
) {
    let prefetch = |t: &TableFile, h| t.table.filter().prefetch(h);
    let may_hold = |t: &TableFile, e, h| t.table.may_hold_prefix(e, h);
    choose_tables_by(state, lower, upper, prefix, prefetch, may_hold, each)
}

/// Tables [`choose_tables_by`] has found in range and not yet handed on, so that the filter
/// lines of up to this many are loading at once before the first is probed.
const PROBE_BATCH: usize = 16;

/// A table [`choose_tables_by`] found and has not handed on yet: its level, its choice
/// unless a filter is still to be asked, and its range filter's query while that is still to
/// be probed.
type Waiting<'t> = Option<(usize, &'t Arc<TableFile>, Option<TableChoice>, Option<PreparedProbe>)>;

/// [`choose_tables`] for the prefix (extractor and hash) given, asking `may_hold` whether a
/// table built with that extractor may hold it. The tables are found in one walk and handed
/// on in batches of up to [`PROBE_BATCH`], so that the probes' cache misses overlap instead
/// of coming one after another: as each is found, the first line its range filter's probe
/// reads starts loading; once the batch is full (or the walk over), the lines each probe
/// most likely reads next (guessed from the first), for every table; then the range
/// filters are probed, and each table still to be read whose prefix filter is to be asked
/// has its filter line prefetched, and is asked last.
pub fn choose_tables_by<'t>(
    state: &'t Tree,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    prefix: Option<(PrefixExtractor, u64)>,
    prefetch: impl Fn(&TableFile, u64),
    mut may_hold: impl FnMut(&TableFile, PrefixExtractor, u64) -> bool,
    mut each: impl FnMut(usize, &'t Arc<TableFile>, TableChoice),
) {
    // Only a scan bounded at both ends may be short enough for a range filter; one open at
    // an end reads to the end of the tree.
    let ask_range = bounded_at_both_ends(lower, upper);
    let bounds = (lower, upper);
    // The bounds against the version's fences: mostly integer comparisons in dense arrays,
    // instead of two pointers chased to each table's key.
    let v = &state.version;
    let (lower, upper) = (lower.map(LookupKey::new), upper.map(LookupKey::new));
    let (lower, upper) = (lower.as_ref(), upper.as_ref());
    // What a table in range is chosen for once its range filter answered: `None` while its
    // prefix filter is still to be asked (its line then starts loading).
    let after_range = |t: &TableFile, range: RangeProbe| match prefix {
        _ if range == RangeProbe::Absent => Some(TableChoice::RangeSkipped),
        Some((e, h)) if t.table.prefix_extractor() == Some(e) => {
            prefetch(t, h);
            None
        }
        _ => Some(TableChoice::Read {
            prefix_checked: false,
            range_checked: range == RangeProbe::Maybe,
        }),
    };
    // The tables found and not yet handed on, in read order.
    let mut waiting: [Waiting<'t>; PROBE_BATCH] = [None; PROBE_BATCH];
    let mut n = 0;
    let mut hand_on = |waiting: &mut [Waiting<'t>]| {
        for (_, t, _, query) in waiting.iter().flatten() {
            if let (Some(q), Some(f)) = (query, t.table.range_filter()) {
                f.prefetch_words(q);
            }
        }
        for (_, t, choice, query) in waiting.iter_mut().flatten() {
            let Some(q) = query.take() else { continue };
            let f = t.table.range_filter().expect("a query is prepared by the table's filter");
            let range = t.table.with_tombstones(f.probe_prepared(&q), bounds.0, bounds.1);
            *choice = after_range(t, range);
        }
        for w in waiting {
            let Some((level, t, choice, _)) = w.take() else { continue };
            let choice = choice.unwrap_or_else(|| {
                let (e, h) = prefix.expect("a table waits for its filter only with a prefix");
                if may_hold(t, e, h) {
                    TableChoice::Read { prefix_checked: true, range_checked: false }
                } else {
                    TableChoice::PrefixSkipped
                }
            });
            each(level, t, choice);
        }
    };
    let mut mapped = MappedBounds::default();
    let mut found = |level: usize, t: &'t Arc<TableFile>, in_range: bool| {
        let (choice, query) = match t.table.range_filter() {
            _ if !in_range => (Some(TableChoice::OutOfRange), None),
            Some(f) if ask_range => match f.prepare_reusing(bounds.0, bounds.1, &mut mapped) {
                Ok(q) => {
                    f.prefetch_sample(&q);
                    (None, Some(q))
                }
                Err(answer) => {
                    (after_range(t, t.table.with_tombstones(answer, bounds.0, bounds.1)), None)
                }
            },
            _ => (after_range(t, RangeProbe::TooWide), None),
        };
        waiting[n] = Some((level, t, choice, query));
        n += 1;
        if n == PROBE_BATCH {
            hand_on(&mut waiting);
            n = 0;
        }
    };
    for (level, tables) in v.levels.iter().enumerate() {
        if level == 0 {
            for (i, t) in tables.iter().enumerate() {
                found(0, t, !v.below(0, i, lower) && !v.above(0, i, upper));
            }
            continue;
        }
        for (i, t) in tables.iter().enumerate().skip(v.first_not_below(level, lower)) {
            if v.above(level, i, upper) {
                break;
            }
            found(level, t, true);
        }
    }
    hand_on(&mut waiting[..n]);
}

/// Whether a scan judges the tables its range filters let through (see [`RangeChecks`]).
pub enum Judge<'a> {
    /// No: a read that counts nothing (a point read's view, the other end of a scan whose
    /// first end judges none).
    Off,
    /// Into `sink`; `checks` receives the record, made at the first table a filter lets
    /// through, for the scan's other end to share.
    Count { sink: &'a Arc<LevelCounts>, checks: &'a mut Option<Arc<RangeChecks>> },
    /// Into the record the scan's other end made.
    Shared(&'a Arc<RangeChecks>),
}

/// Builds the merged view of the sources in `state` a scan of `(lower, upper)` reads,
/// newest sources first: the memtables whose filter may hold the scan's prefix (all of them
/// when it has none) and the tables [`choose_tables`] chooses. With `tally`, the prefix
/// filters' answers are counted; `judge` says whether range filters' false positives are.
pub fn merged_sources(
    state: &Tree,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    tally: Option<&mut ScanTally>,
    judge: Judge<'_>,
) -> MergingIterator {
    let prefix = scan_prefix(state, lower, upper).map(|(e, p)| (e, hash_prefix(p)));
    if let Some((e, h)) = prefix {
        state.mems().for_each(|m| m.table.prefetch_prefix(e, h));
    }
    merge_chosen(state, prefix, tally, (lower, upper), judge, |each| {
        choose_tables_hashed(state, lower, upper, prefix, each)
    })
}

/// The merged view of the memtables that may hold `prefix` (every one without a prefix) and
/// of the tables `choose` chooses for a scan of `bounds`.
pub fn merge_chosen<'t>(
    state: &'t Tree,
    prefix: Option<(PrefixExtractor, u64)>,
    tally: Option<&mut ScanTally>,
    bounds: (Bound<&[u8]>, Bound<&[u8]>),
    judge: Judge<'_>,
    choose: impl FnOnce(&mut dyn FnMut(usize, &'t Arc<TableFile>, TableChoice)),
) -> MergingIterator {
    let mut children: Vec<Box<dyn BidirectionalIterator>> = Vec::new();
    let mut mem_skips = 0u64;
    // A scan bounded at both ends may be short, and then mostly meets no memtable entry:
    // such a memtable is left out (one seek, which the merged view would otherwise make at
    // its first step), so that an empty range can end with nothing to merge.
    let bounded = bounded_at_both_ends(bounds.0, bounds.1);
    for m in state.mems() {
        // An empty memtable (the active one after a flush) has nothing to merge; its range
        // tombstones, if any, come from its set, not from the iterator.
        if m.table.is_empty() {
            continue;
        }
        if prefix.is_some_and(|(e, h)| !m.table.may_hold_prefix(e, h)) {
            mem_skips += 1;
            continue;
        }
        if bounded && !m.table.has_entry_in(bounds.0, bounds.1) {
            continue;
        }
        children.push(Box::new(m.table.iter()));
    }
    let mut levels: Vec<LevelChoice> = Vec::new();
    let (mut checks, mut skips) = (0u64, 0u64);
    let (mut range_probes, mut range_skips) = ([0u64; NUM_LEVELS], [0u64; NUM_LEVELS]);
    let (mut sink, mut shared) = match judge {
        Judge::Off => (None, None),
        Judge::Count { sink, checks } => (Some((sink, checks)), None),
        Judge::Shared(c) => (None, Some(c.clone())),
    };
    choose(&mut |level, t, choice| {
        let range_checked = match choice {
            TableChoice::OutOfRange => return,
            TableChoice::PrefixSkipped => {
                checks += 1;
                skips += 1;
                return;
            }
            TableChoice::RangeSkipped => {
                range_probes[level.min(NUM_LEVELS - 1)] += 1;
                range_skips[level.min(NUM_LEVELS - 1)] += 1;
                return;
            }
            TableChoice::Read { prefix_checked, range_checked } => {
                checks += u64::from(prefix_checked);
                range_probes[level.min(NUM_LEVELS - 1)] += u64::from(range_checked);
                range_checked
            }
        };
        // The record, made at the first table a filter let through.
        let judged = match (range_checked, &shared, &mut sink) {
            (false, _, _) => None,
            (true, Some(c), _) => Some(c.clone()),
            (true, None, Some((sink, out))) => {
                shared = RangeChecks::new(bounds.0, bounds.1, sink).map(Arc::new);
                **out = shared.clone();
                shared.clone()
            }
            (true, None, None) => None,
        };
        if level == 0 {
            match judged {
                Some(c) => children.push(Box::new(JudgedTable::new(t, c))),
                None => children.push(Box::new(t.table.iter())),
            }
        } else {
            if levels.len() < level {
                levels.resize_with(level, Default::default);
            }
            let (tables, pending) = &mut levels[level - 1];
            if judged.is_some() && pending.is_none() {
                *pending = Some(vec![false; tables.len()]);
            }
            if let Some(p) = pending {
                p.push(judged.is_some());
            }
            tables.push(t.clone());
        }
    });
    if let Some(t) = tally {
        t.prefix_filter_checks += checks;
        t.prefix_filter_skips += skips;
        t.memtable_prefix_skips += mem_skips;
        for l in 0..NUM_LEVELS {
            t.range_filter_probes[l] += range_probes[l];
            t.range_filter_skips[l] += range_skips[l];
        }
    }
    for (i, (tables, pending)) in levels.into_iter().enumerate() {
        if tables.is_empty() {
            continue;
        }
        match (&shared, pending) {
            (Some(c), Some(p)) => {
                children.push(Box::new(LevelIter::with_checks(i + 1, tables, c.clone(), p)))
            }
            _ => children.push(Box::new(LevelIter::new(tables))),
        }
    }
    MergingIterator::new(children)
}

/// A level's tables a scan reads, and (once a range filter let one through) which were.
type LevelChoice = (Vec<Arc<TableFile>>, Option<Vec<bool>>);

/// An L0 table's iterator in a scan that its range filter let through: judged by the scan's
/// [`RangeChecks`] at each positioning until its answer is settled.
struct JudgedTable {
    iter: crate::table::iter::TableIter,
    table: Arc<TableFile>,
    checks: Option<Arc<RangeChecks>>,
}

impl JudgedTable {
    fn new(table: &Arc<TableFile>, checks: Arc<RangeChecks>) -> Self {
        JudgedTable { iter: table.table.iter(), table: table.clone(), checks: Some(checks) }
    }

    fn judge(&mut self, direction: Direction, from: Option<&[u8]>) {
        let Some(c) = &self.checks else { return };
        let at = self.iter.valid().then(|| self.iter.key());
        if c.judge(0, &self.table, direction, from, at) {
            self.checks = None;
        }
    }
}

impl InternalIterator for JudgedTable {
    fn valid(&self) -> bool {
        self.iter.valid()
    }
    fn key(&self) -> &[u8] {
        self.iter.key()
    }
    fn value(&self) -> &[u8] {
        self.iter.value()
    }
    fn next(&mut self) -> crate::Result<()> {
        self.iter.next()
    }
    fn seek(&mut self, target: &[u8]) -> crate::Result<()> {
        self.iter.seek(target)?;
        self.judge(Direction::Forward, Some(target));
        Ok(())
    }
    fn seek_to_first(&mut self) -> crate::Result<()> {
        self.iter.seek_to_first()?;
        self.judge(Direction::Forward, None);
        Ok(())
    }
}

impl BidirectionalIterator for JudgedTable {
    fn prev(&mut self) -> crate::Result<()> {
        self.iter.prev()
    }
    fn seek_to_last(&mut self) -> crate::Result<()> {
        self.iter.seek_to_last()?;
        self.judge(Direction::Backward, None);
        Ok(())
    }
    fn seek_for_prev(&mut self, target: &[u8]) -> crate::Result<()> {
        self.iter.seek_for_prev(target)?;
        self.judge(Direction::Backward, Some(target));
        Ok(())
    }
}
