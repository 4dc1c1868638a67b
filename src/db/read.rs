//! The point-read path, top to bottom:
//!
//! 0. a [`ReadView`]: the state, then the sequence number to read at;
//! 1. hash the key once (`filter::hash_key`);
//! 2. walk the candidate tables, chosen from the version's in-RAM key-range fences (every L0
//!    table whose range covers the key, newest first, then one table per deeper level):
//!    remember each and start loading its filter cache line (a prefetch: nothing waits yet);
//! 3. the active memtable, then the immutable ones, newest first, each searched only if its
//!    key filter (the same hash) says it may hold the key;
//! 4. each remembered candidate in order: ask its filter with the precomputed hash; on
//!    "maybe", if the filter also holds the table's keys' prefixes, ask it for the key's
//!    prefix (hashed once per lookup); only if both say "maybe" search its in-RAM index and
//!    one data block (through the block cache).
//!
//! The first version found at or below the read's sequence number decides: a value, or a
//! tombstone meaning "absent". An expiring value whose expiry the clock has reached is a
//! tombstone too, so an older version never shows through it. A value is then checked against the range tombstones (the
//! memtables' and the version's in-RAM sets, see `crate::range_del`): one newer than the
//! value and visible to the read makes it absent too. Filters cannot answer for ranges, so
//! this check comes after the walk, and costs a few flag checks while no range tombstone
//! exists. Prefetching all candidates' filter lines before probing any
//! lets their cache misses overlap — with each other and with the memtable search — instead
//! of being paid one after another; on a tree larger than the CPU caches that is most of an
//! absent-key lookup's cost. Nothing is allocated on the miss path, no lock is taken (the
//! view holds the state by an `ArcSwap` guard), and the lookup's counters are added to the
//! shared statistics once, at the end.

use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use arc_swap::Guard;

use super::{multi_get, DbInner, DbState, Tree};
use crate::clock::{expired, Clock, FixedClock};
use crate::filter::{hash_key, Filter};
use crate::key::SeqNo;
use crate::memtable::MemGet;
use crate::stats::ReadTally;
use crate::table::reader::KeyPrefixHash;
use crate::table::{GetOutcome, TableGet};
use crate::version::edit::KeyspaceId;
use crate::version::set::TableFile;
use crate::{Result, Value};

/// What a read reads: the engine state and the sequence number, loaded in that order by
/// [`DbInner::read_view`], the one place that builds it. Every table and immutable memtable
/// of a state holds only writes published before the state was installed, so a sequence
/// number loaded afterwards is at or above all of them; the other order could pair an old
/// sequence number with a newer state whose compaction dropped the version the read should
/// see (DESIGN.md, "Reading at a sequence number").
///
/// `get`, `multi_get` and `trace` read through one for the length of a call, holding the
/// state by an `ArcSwap` guard: no shared reference count is touched per lookup. A snapshot
/// keeps one ([`ReadView::into_owned`]).
pub(crate) struct ReadView {
    state: Guard<Arc<DbState>>,
    seq: SeqNo,
    /// A kept view's (a snapshot's, a transaction's) time, which its reads judge expiry at;
    /// `None`: the clock when each read happens.
    time: Option<u64>,
}

impl DbInner {
    /// A view of the database as it is now: the state, then the sequence number.
    #[inline]
    pub(crate) fn read_view(&self) -> ReadView {
        let state = self.state.load();
        let seq = self.visible_seq.load(Ordering::Acquire);
        ReadView { state, seq, time: None }
    }
}

impl DbInner {
    /// [`DbInner::read_view`] for a read of several keys at one sequence number
    /// (`multi_get`): it waits for the single writes still being inserted at or below the
    /// number (`db/in_flight.rs`), so its answers are those of one moment, as a snapshot's.
    pub(crate) fn read_view_of_many(&self) -> ReadView {
        let view = self.read_view();
        self.in_flight.wait_through(view.seq());
        view
    }

    /// Keyspace `keyspace`'s tree (unless it was dropped) and the sequence number to read it
    /// at, for an iterator or cursor to keep: the tree of the state current when the number
    /// was loaded. A memtable switch between the two loads would leave writes numbered at or
    /// below the sequence number in a memtable the view's state does not have: harmless for
    /// one read, which sees a consistent prefix of the history, but a kept view would be
    /// labelled with a sequence number it does not hold (a checkpoint would record it as its
    /// last), and a transaction's check would take those writes for ones its snapshot saw.
    pub(crate) fn stable_tree(&self, keyspace: KeyspaceId) -> (Option<Arc<Tree>>, SeqNo) {
        loop {
            let view = self.read_view();
            if Arc::ptr_eq(view.state(), &self.state.load()) {
                // As in `stable_read_view`.
                self.in_flight.wait_through(view.seq());
                return (view.state().tree(keyspace).cloned(), view.seq());
            }
        }
    }

    /// A view to keep (a snapshot's, a transaction's), whose state is the one current when
    /// its sequence number was loaded: see [`DbInner::stable_tree`]. It judges expiry at the
    /// time it was taken, so that its reads are repeatable as the clock moves: what it saw
    /// live it keeps seeing (its files are pinned, so no compaction takes it away).
    pub(crate) fn stable_read_view(&self) -> ReadView {
        loop {
            let view = self.read_view();
            if Arc::ptr_eq(view.state(), &self.state.load()) {
                // A write below the number may still be going into the state's memtable.
                self.in_flight.wait_through(view.seq());
                let mut view = view.into_owned();
                view.time = Some(self.clock.now());
                return view;
            }
        }
    }
}

// Only snapshots clone views, so a clone owns its `Arc`, as `into_owned` makes it.
impl Clone for ReadView {
    fn clone(&self) -> Self {
        ReadView {
            state: Guard::from_inner(Arc::clone(&self.state)),
            seq: self.seq,
            time: self.time,
        }
    }
}

impl ReadView {
    /// The same view, to keep for as long as a snapshot lives. `ArcSwap` lends a fast guard
    /// from a few slots per thread, and a guard held long would keep its slot; this one owns
    /// its `Arc` instead.
    pub(crate) fn into_owned(self) -> ReadView {
        let state = Guard::from_inner(Guard::into_inner(self.state));
        ReadView { state, seq: self.seq, time: self.time }
    }

    /// The time a kept view judges expiry at (see [`DbInner::stable_read_view`]).
    pub(crate) fn time(&self) -> Option<u64> {
        self.time
    }

    /// The clock the view's reads judge expiry by.
    fn clock<'a>(&self, inner: &'a DbInner, fixed: &'a mut FixedClock) -> &'a dyn Clock {
        match self.time {
            Some(t) => {
                *fixed = FixedClock(t);
                fixed
            }
            None => &*inner.clock,
        }
    }

    /// The state the view reads.
    pub(crate) fn state(&self) -> &Arc<DbState> {
        &self.state
    }

    /// The sequence number the view reads at.
    pub(crate) fn seq(&self) -> SeqNo {
        self.seq
    }

    /// The newest value of `key` in `tree` (one of this view's trees) at the view's sequence
    /// number.
    pub(crate) fn get(&self, inner: &DbInner, tree: &Tree, key: &[u8]) -> Result<Option<Value>> {
        let mut tally = ReadTally { lookups: 1, ..ReadTally::default() };
        let mut fixed = FixedClock(0);
        let clock = self.clock(inner, &mut fixed);
        let result = search(tree, key, self.seq, clock, &mut tally, &mut Unobserved);
        inner.counters.record_gets(&tally);
        result
    }

    /// The newest value of each of `keys` in `tree` (one of this view's trees), in order:
    /// the answers of [`ReadView::get`] for each, found together (see `db::multi_get`).
    pub(crate) fn multi_get<K: AsRef<[u8]>>(
        &self,
        inner: &DbInner,
        tree: &Tree,
        keys: &[K],
    ) -> Result<Vec<Option<Value>>> {
        let mut tally = ReadTally { lookups: keys.len() as u64, ..ReadTally::default() };
        let mut fixed = FixedClock(0);
        let clock = self.clock(inner, &mut fixed);
        let result =
            multi_get::lookup_all(tree, keys, self.seq, clock, &mut tally, &inner.caches.reads);
        inner.counters.record_gets(&tally);
        result
    }
}

/// Watches the read path (for `Db::trace`), so the tool shows the walk `get` really makes
/// rather than a second implementation of it. Every method defaults to nothing; with
/// [`Unobserved`] the calls compile away.
pub(crate) trait ReadObserver {
    /// Keep walking after the answer is known, to see every source the walk would reach
    /// (what a later source holds shows whether a filter, or the walk, is wrong).
    const EXHAUSTIVE: bool = false;
    /// The `index`-th memtable (0 = the active one) was searched.
    fn memtable(&mut self, _index: usize, _answer: &Answer) {}
    /// A candidate table's filter was asked; `searched` is the table's answer when the
    /// filter said "maybe" and the table was searched.
    fn table(&mut self, _t: &Arc<TableFile>, _searched: Option<&Answer>) {}
}

/// The observer of ordinary reads: sees nothing.
pub(crate) struct Unobserved;
impl ReadObserver for Unobserved {}

/// What one source of a read — a memtable or a table — says about the key, once range
/// tombstones are applied: [`resolve`]'s answer.
#[derive(Debug)]
pub(crate) enum Answer {
    /// A value no range tombstone covers: the read's result.
    Value(Value),
    /// A tombstone: the key is absent, and older sources are not asked.
    Deleted,
    /// An expiring value whose expiry the clock has reached: absent, as `Deleted`.
    Expired,
    /// A value that a newer range tombstone visible to the read covers: absent, as `Deleted`.
    RangeDeleted,
    /// Nothing for the key here: the next source is asked.
    Absent,
    /// A merge operand no range tombstone covers: the read combines the key's versions
    /// with [`merged_get`].
    Operand,
}

impl Answer {
    /// The read's result if this answer decides it; `None` sends the read on to the next
    /// source.
    #[inline]
    pub(crate) fn decision(self) -> Option<Option<Value>> {
        match self {
            Answer::Value(v) => Some(Some(v)),
            Answer::Deleted | Answer::Expired | Answer::RangeDeleted => Some(None),
            Answer::Absent | Answer::Operand => None,
        }
    }

    /// [`Answer::decision`], reading `key` through [`merged_get`] when this answer is a
    /// merge operand.
    #[inline]
    pub(crate) fn decide(
        self,
        tree: &Tree,
        key: &[u8],
        seq: SeqNo,
        clock: &dyn Clock,
    ) -> Result<Option<Option<Value>>> {
        match self {
            Answer::Operand => merged_get(tree, key, seq, clock).map(Some),
            other => Ok(other.decision()),
        }
    }
}

/// The value of `key` in `tree` at `seq` when its newest visible version is a merge
/// operand: read through a view of the one key, which gathers the operands across every
/// source and combines them (`db::visible`), so point reads and scans combine the same way.
#[cold]
pub(crate) fn merged_get(
    tree: &Tree,
    key: &[u8],
    seq: SeqNo,
    clock: &dyn Clock,
) -> Result<Option<Value>> {
    use std::ops::Bound;
    let (lo, hi) = (Bound::Included(key), Bound::Included(key));
    let sources = super::scan::merged_sources(tree, lo, hi, None);
    let own = || Bound::Included(key.to_vec());
    let now = clock.now_millis();
    let mut view = bloomkv_tree::read::visible::VisibleIter::new(
        sources,
        seq,
        own(),
        own(),
        tree.range_tombstones(),
        now,
    )
    .with_merger(tree.merger());
    view.seek_to_first()?;
    Ok(view.valid().then(|| Value::from(view.value().to_vec())))
}

/// What a source's search found: [`resolve`]'s input.
pub(crate) enum Found {
    /// A memtable's.
    Memtable(Option<MemGet>),
    /// A table's, searched once its filter said "maybe".
    Table(TableGet),
}

/// What `found`, a source's search for `key` in `tree` at `seq`, answers — a value found is
/// checked against the range tombstones here, after the search, because filters cannot
/// answer for ranges — and its counts in `tally`: a memtable hit, a table's block read or
/// cache hit, a filter's false positive. `get`, `multi_get` and `trace` all decide here, so
/// their answers and counters cannot drift apart. An expiring value is judged by `clock`,
/// read only when one is found.
#[inline]
pub(crate) fn resolve(
    tree: &Tree,
    key: &[u8],
    seq: SeqNo,
    found: Found,
    tally: &mut ReadTally,
    clock: &dyn Clock,
) -> Answer {
    let (outcome, at) = match found {
        Found::Memtable(None) => return Answer::Absent,
        Found::Memtable(Some(got)) => {
            tally.memtable_hits += 1;
            match got {
                MemGet::Found(v, at) => (GetOutcome::Found(v), at),
                MemGet::Expiring(v, at, expiry) => (GetOutcome::Expiring(v, expiry), at),
                MemGet::Deleted => (GetOutcome::Deleted, 0),
                MemGet::Merge(at) => (GetOutcome::Merge, at),
            }
        }
        Found::Table(got) => {
            tally.block_reads += u64::from(got.block_read);
            tally.block_cache_hits += u64::from(got.cache_hit);
            (got.outcome, got.seq)
        }
    };
    match outcome {
        GetOutcome::Found(_) | GetOutcome::Expiring(..) | GetOutcome::Merge
            if tree.range_deleted(key, at, seq) =>
        {
            Answer::RangeDeleted
        }
        GetOutcome::Merge => Answer::Operand,
        GetOutcome::Found(v) => Answer::Value(v),
        GetOutcome::Expiring(_, expiry) if expired(expiry, clock.now_millis()) => Answer::Expired,
        GetOutcome::Expiring(v, _) => Answer::Value(v),
        GetOutcome::Deleted => Answer::Deleted,
        GetOutcome::Absent => {
            // The table's filter said "maybe" and the table holds nothing for the key.
            tally.filter_false_positives += 1;
            Answer::Absent
        }
    }
}

/// Candidates remembered (and prefetched) by the first walk. A lookup consults the L0 tables
/// plus at most one table per sorted level, so this covers every lookup unless L0 has grown
/// far past its stop trigger; any candidates beyond it are found by a second walk.
const REMEMBERED: usize = 16;

pub(crate) fn search<O: ReadObserver>(
    state: &Tree,
    key: &[u8],
    seq: SeqNo,
    clock: &dyn Clock,
    tally: &mut ReadTally,
    observer: &mut O,
) -> Result<Option<Value>> {
    let hash = hash_key(key);
    let version = &state.version;
    let mut first: [Option<(&Arc<TableFile>, &Filter)>; REMEMBERED] = [None; REMEMBERED];
    let mut n = 0;
    let more = version
        .for_each_candidate(key, |t, filter| {
            if n == REMEMBERED {
                return ControlFlow::Break(());
            }
            filter.prefetch(hash);
            first[n] = Some((t, filter));
            n += 1;
            ControlFlow::Continue(())
        })
        .is_break();
    // Only an exhaustive observer gets here with an answer already found: it is kept, and
    // the walk goes on for the observer's sake.
    let mut answer: Option<Option<Value>> = None;
    for (i, mem) in state.mems().enumerate() {
        if mem.table.is_empty() && !O::EXHAUSTIVE {
            continue;
        }
        let found = match mem.table.may_contain_hash(hash) {
            true => Found::Memtable(mem.table.get(key, seq)),
            false => Found::Memtable(None),
        };
        let got = resolve(state, key, seq, found, tally, clock);
        observer.memtable(i, &got);
        if let Some(decided) = got.decide(state, key, seq, clock)? {
            if !O::EXHAUSTIVE {
                return Ok(decided);
            }
            answer.get_or_insert(decided);
        }
    }
    let mut prefix = KeyPrefixHash::default();
    let mut consult = |t: &Arc<TableFile>, filter: &Filter| {
        tally.tables_consulted += 1;
        if !filter.may_contain_hash(hash) || !t.table.may_hold_prefix_of(key, &mut prefix) {
            tally.filter_negatives += 1;
            observer.table(t, None);
            return ControlFlow::Continue(());
        }
        let got = match t.table.get(key, seq) {
            Ok(got) => resolve(state, key, seq, Found::Table(got), tally, clock),
            Err(e) => return ControlFlow::Break(Err(e)),
        };
        observer.table(t, Some(&got));
        let decided = match got.decide(state, key, seq, clock) {
            Ok(decided) => decided,
            Err(e) => return ControlFlow::Break(Err(e)),
        };
        match decided {
            None => ControlFlow::Continue(()),
            Some(decided) if O::EXHAUSTIVE => {
                answer.get_or_insert(decided);
                ControlFlow::Continue(())
            }
            Some(decided) => ControlFlow::Break(Ok(decided)),
        }
    };
    for &(t, filter) in first.iter().flatten() {
        if let ControlFlow::Break(answer) = consult(t, filter) {
            return answer;
        }
    }
    if more {
        let mut skip = REMEMBERED;
        let rest = version.for_each_candidate(key, |t, filter| {
            if skip > 0 {
                skip -= 1;
                return ControlFlow::Continue(());
            }
            consult(t, filter)
        });
        if let ControlFlow::Break(answer) = rest {
            return answer;
        }
    }
    Ok(answer.unwrap_or(None))
}
