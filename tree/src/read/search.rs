//! The point-read path, top to bottom:
//!
//! 0. the engine's `ReadView`: the state, then the sequence number to read at;
//! 1. hash the key once (`filter::hash_key`);
//! 2. walk the candidate tables, chosen from the version's in-RAM key-range fences (every L0
//!    table whose range covers the key, newest first, then one table per deeper level):
//!    remember each and start loading its filter cache line (a prefetch: nothing waits yet);
//! 3. the active memtable, then the immutable ones, newest first, each searched only if its
//!    key filter (the same hash) says it may hold the key;
//! 4. each remembered candidate in order: ask its filter with the precomputed hash; on
//!    "maybe", if the filter also holds the table's keys' prefixes, ask it for the key's
//!    prefix (hashed once per lookup); on "maybe", if the table has a range filter, ask it
//!    for the key alone (a range one integer wide); only if all say "maybe" search its
//!    in-RAM index and one data block (through the block cache).
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

use super::ReadTally;
use crate::blob::{BlobFiles, BlobRef};
use crate::clock::{expired, Clock};
use crate::filter::{hash_key, Filter};
use crate::key::SeqNo;
use crate::memtable::MemGet;
use crate::table::reader::KeyPrefixHash;
use crate::table::{GetOutcome, TableGet};
use crate::tree::Tree;
use crate::version::set::{TableFile, Version};
use crate::{Result, Value};
use std::ops::ControlFlow;
use std::sync::Arc;

/// Watches the read path (for `Db::trace`), so the tool shows the walk `get` really makes
/// rather than a second implementation of it. Every method defaults to nothing; with
/// [`Unobserved`] the calls compile away.
pub trait ReadObserver {
    /// Keep walking after the answer is known, to see every source the walk would reach
    /// (what a later source holds shows whether a filter, or the walk, is wrong).
    const EXHAUSTIVE: bool = false;
    /// The `index`-th memtable (0 = the active one) was searched.
    fn memtable(&mut self, _index: usize, _answer: &Answer) {}
    /// A candidate table's filter was asked; `searched` is the table's answer when the
    /// filter said "maybe" and the table was searched.
    fn table(&mut self, _t: &Arc<TableFile>, _searched: Option<&Answer>) {}
    /// Leave a value in a blob file unread: the read's answer is then an empty value, and
    /// the reference is handed to [`ReadObserver::blob`] (how [`search_stored`] reads no
    /// more of a value than it needs).
    const DEFER_BLOBS: bool = false;
    /// The reference of the deciding value, with [`ReadObserver::DEFER_BLOBS`].
    fn blob(&mut self, _r: BlobRef) {}
}

/// The observer of ordinary reads: sees nothing.
pub struct Unobserved;
impl ReadObserver for Unobserved {}

/// What one source of a read — a memtable or a table — says about the key, once range
/// tombstones are applied: [`resolve`]'s answer.
#[derive(Debug)]
pub enum Answer {
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
    /// A value in a blob file no range tombstone covers (and, expiring, not expired): the
    /// read's result once the reference is read ([`Answer::decide`]).
    Blob(crate::blob::BlobRef),
}

impl Answer {
    /// The read's result if this answer decides it without reading more; `None` sends the
    /// read on to the next source, or (for [`Answer::Operand`] and [`Answer::Blob`]) leaves
    /// the caller to read what decides it.
    #[inline]
    pub fn decision(self) -> Option<Option<Value>> {
        match self {
            Answer::Value(v) => Some(Some(v)),
            Answer::Deleted | Answer::Expired | Answer::RangeDeleted => Some(None),
            Answer::Absent | Answer::Operand | Answer::Blob(_) => None,
        }
    }

    /// [`Answer::decision`], reading `key` through [`merged_get`] when this answer is a
    /// merge operand.
    #[inline]
    pub fn decide(
        self,
        tree: &Tree,
        key: &[u8],
        seq: SeqNo,
        clock: &dyn Clock,
    ) -> Result<Option<Option<Value>>> {
        match self {
            Answer::Operand => merged_get(tree, key, seq, clock).map(Some),
            Answer::Blob(r) => tree.read_blob(&r).map(|v| Some(Some(v))),
            other => Ok(other.decision()),
        }
    }
}

/// The value of `key` in `tree` at `seq` when its newest visible version is a merge
/// operand: read through a view of the one key, which gathers the operands across every
/// source and combines them (`db::visible`), so point reads and scans combine the same way.
#[cold]
pub fn merged_get(tree: &Tree, key: &[u8], seq: SeqNo, clock: &dyn Clock) -> Result<Option<Value>> {
    use std::ops::Bound;
    let (lo, hi) = (Bound::Included(key), Bound::Included(key));
    let sources = super::sources::merged_sources(tree, lo, hi, None, super::sources::Judge::Off);
    let own = || Bound::Included(key.to_vec());
    let now = clock.now_millis();
    let mut view =
        super::visible::VisibleIter::new(sources, seq, own(), own(), tree.range_tombstones(), now)
            .with_merger(tree.merger())
            .with_blobs(tree.blobs());
    view.seek_to_first()?;
    Ok(view.valid().then(|| Value::from(view.value().to_vec())))
}

/// [`Answer::decide`], or with [`ReadObserver::DEFER_BLOBS`] a blob's reference handed to
/// `observer` unread.
#[inline]
fn decide<O: ReadObserver>(
    got: Answer,
    observer: &mut O,
    tree: &Tree,
    key: &[u8],
    seq: SeqNo,
    clock: &dyn Clock,
) -> Result<Option<Option<Value>>> {
    match got {
        Answer::Blob(r) if O::DEFER_BLOBS => {
            observer.blob(r);
            Ok(Some(Some(Value::default())))
        }
        got => got.decide(tree, key, seq, clock),
    }
}

/// What a point read found, a value in a blob file not read yet: how a read of part of a
/// value, or of its length, reads no more of it than it needs.
#[derive(Debug, Clone)]
pub enum Stored {
    /// A value held in a memtable or a table (or a merge's result): already read whole.
    Value(Value),
    /// A value in one of `BlobFiles`, at the reference.
    Blob(BlobFiles, BlobRef),
}

impl Stored {
    /// The value's length in bytes (a blob's from its reference, reading nothing).
    pub fn len(&self) -> u64 {
        match self {
            Stored::Value(v) => v.len() as u64,
            Stored::Blob(_, r) => r.len,
        }
    }

    /// True for an empty value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes `from..from + n` of the value, clamped to its end (empty from its end on): a
    /// slice of a value already read, or a blob's read of those bytes alone
    /// ([`BlobFiles::read_part`]).
    pub fn read_part(&self, from: u64, n: u64) -> Result<Value> {
        match self {
            Stored::Value(v) => {
                let from = from.min(v.len() as u64) as usize;
                let to = from + (n.min((v.len() - from) as u64) as usize);
                // A small part is a copy, as every read's: it keeps no large buffer alive.
                Ok(match (to - from) * crate::value::MAX_PIN_RATIO >= v.len() {
                    true => Value::from_bytes(v.clone().into_bytes().slice(from..to)),
                    false => Value::copy_from_slice(&v[from..to]),
                })
            }
            Stored::Blob(files, r) => files.read_part(r, from, n),
        }
    }

    /// The whole value.
    pub fn into_value(self) -> Result<Value> {
        match self {
            Stored::Value(v) => Ok(v),
            Stored::Blob(files, r) => files.read(&r),
        }
    }
}

/// Defers the deciding blob's read ([`search_stored`]).
struct DeferBlobs(Option<BlobRef>);

impl ReadObserver for DeferBlobs {
    const DEFER_BLOBS: bool = true;
    fn blob(&mut self, r: BlobRef) {
        self.0 = Some(r);
    }
}

/// [`search`], leaving a value in a blob file unread: [`Stored`] reads the part wanted.
pub fn search_stored(
    state: &Tree,
    key: &[u8],
    seq: SeqNo,
    clock: &dyn Clock,
    tally: &mut ReadTally,
) -> Result<Option<Stored>> {
    let mut deferred = DeferBlobs(None);
    let found = search(state, key, seq, clock, tally, &mut deferred)?;
    Ok(match (found, deferred.0) {
        (None, _) => None,
        (Some(_), Some(r)) => Some(Stored::Blob(state.blobs(), r)),
        (Some(v), None) => Some(Stored::Value(v)),
    })
}

/// What a source's search found: [`resolve`]'s input.
pub enum Found {
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
pub fn resolve(
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
                MemGet::Blob(r, at) => (GetOutcome::Blob(r), at),
            }
        }
        Found::Table(got) => {
            tally.block_reads += u64::from(got.block_read);
            tally.block_cache_hits += u64::from(got.cache_hit);
            (got.outcome, got.seq)
        }
    };
    match outcome {
        GetOutcome::Found(_)
        | GetOutcome::Expiring(..)
        | GetOutcome::Merge
        | GetOutcome::Blob(_)
        | GetOutcome::BlobExpiring(..)
            if tree.range_deleted(key, at, seq) =>
        {
            Answer::RangeDeleted
        }
        GetOutcome::Merge => Answer::Operand,
        GetOutcome::Blob(r) => Answer::Blob(r),
        GetOutcome::BlobExpiring(_, expiry) if expired(expiry, clock.now_millis()) => {
            Answer::Expired
        }
        GetOutcome::BlobExpiring(r, _) => Answer::Blob(r),
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

/// Candidates remembered (and prefetched) by one walk. A lookup consults the L0 tables plus
/// at most one table per sorted level; a keyspace that gathers runs keeps up to K of them per
/// level in L0 (lazy leveling at ratio 10: 9 per level above the last, so 19 at four levels,
/// 28 at five). Beyond this many, the walk is taken again for the next ones, each time
/// prefetching all of them before any is probed: the cache misses still overlap, a chunk at a
/// time, where a candidate past the first chunk used to wait for its own.
const REMEMBERED: usize = 16;

/// Candidate tables with their filters, remembered by one walk.
type Chunk<'v> = [Option<(&'v Arc<TableFile>, &'v Filter)>; REMEMBERED];

/// Remembers the candidates for `key` after the first `skip` in `chunk`, up to
/// [`REMEMBERED`] of them, and starts loading each one's filter line; true if more follow.
#[inline]
fn remember<'v>(
    version: &'v Version,
    key: &[u8],
    hash: u64,
    chunk: &mut Chunk<'v>,
    mut skip: usize,
) -> bool {
    let mut n = 0;
    let more = version.for_each_candidate(key, |t, filter| {
        if skip > 0 {
            skip -= 1;
            return ControlFlow::Continue(());
        }
        if n == REMEMBERED {
            return ControlFlow::Break(());
        }
        filter.prefetch(hash);
        chunk[n] = Some((t, filter));
        n += 1;
        ControlFlow::Continue(())
    });
    chunk[n..].fill(None);
    more.is_break()
}

// Inlined into the engine's `ReadView::get`, as it was when both were one crate: the call
// between them cost every lookup (docs/results/2026-11-29-tree-crate-callgrind.md).
#[inline]
pub fn search<O: ReadObserver>(
    state: &Tree,
    key: &[u8],
    seq: SeqNo,
    clock: &dyn Clock,
    tally: &mut ReadTally,
    observer: &mut O,
) -> Result<Option<Value>> {
    let hash = hash_key(key);
    let version = &state.version;
    let mut chunk: Chunk<'_> = [None; REMEMBERED];
    let mut more = remember(version, key, hash, &mut chunk, 0);
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
        if let Some(decided) = decide(got, observer, state, key, seq, clock)? {
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
        // Only after a point filter's "maybe": the range filter's probe is a few dependent
        // cache misses where a point filter's is one, so it runs beside the index search a
        // key the table holds needs anyway, and before the block fetch.
        let got = match t.table.get_unless_range_filtered(key, seq) {
            Ok(Some(got)) => resolve(state, key, seq, Found::Table(got), tally, clock),
            Ok(None) => {
                tally.filter_negatives += 1;
                tally.range_filter_point_negatives += 1;
                observer.table(t, None);
                return ControlFlow::Continue(());
            }
            Err(e) => return ControlFlow::Break(Err(e)),
        };
        observer.table(t, Some(&got));
        let decided = match decide(got, observer, state, key, seq, clock) {
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
    let mut walked = 0;
    loop {
        for &(t, filter) in chunk.iter().flatten() {
            if let ControlFlow::Break(answer) = consult(t, filter) {
                return answer;
            }
        }
        if !more {
            break;
        }
        walked += REMEMBERED;
        more = remember(version, key, hash, &mut chunk, walked);
    }
    Ok(answer.unwrap_or(None))
}
