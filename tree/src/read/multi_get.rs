//! `multi_get`: many point lookups in one call, arranged so that their memory misses overlap,
//! their shared blocks are fetched once, and their waits for the storage device overlap.
//!
//! A lone `get` (see `read.rs`) already prefetches its own candidates' filter lines before
//! probing them, but one key gives the memory system only a few misses to work on at once.
//! A batch gives it many. The keys are taken in windows of [`WINDOW`] keys; in each window:
//!
//! 1. batch by batch ([`BATCH`] keys): hash every key once and walk its candidate tables (the
//!    same fences as `get`); then start the load of every candidate's filter line for the
//!    whole batch, in one burst, before any is probed; search the memtables for every key of
//!    the batch while those loads are in flight; then probe each unanswered key's candidates
//!    up to the first whose filter says "maybe" to the key and to its prefix, as `get` asks
//!    (a key whose candidates are exhausted is absent);
//! 2. in rounds over the whole window, search the tables named, grouped by table, keys in
//!    ascending order, so a data block needed by several keys is fetched once. A key the
//!    table turns out not to hold (a false positive) goes on to its next "maybe" candidate,
//!    searched in the following round;
//! 3. within a round of two or more searches, a block that neither the block cache nor the
//!    operating system's page cache holds is not read where it is met: the round's blocks
//!    that must come from the storage device are set aside and read together on the read
//!    threads (`table::read_pool`), so the round waits for the device about once rather than
//!    once per block; the keys waiting on them are searched when they arrive.
//!
//! Every key therefore visits its candidates in exactly the order `get` would and stops where
//! `get` would: the answers, and the counters, are those of a loop of `get` at one sequence
//! number. Most windows need one round; each false positive can add one.

use std::ops::ControlFlow;
use std::sync::Arc;

use super::search::{merged_get, resolve, Answer, Found};
use super::ReadTally;
use crate::filter::{hash_key, Filter};
use crate::key::SeqNo;
use crate::table::format::BlockHandle;
use crate::table::read_pool::ReadPool;
use crate::table::reader::{KeyPrefixHash, Lookup as TableLookup, Wait};
use crate::table::{Table, TableGet};
use crate::tree::Tree;
use crate::version::set::TableFile;
use crate::{Result, Value};

/// Keys whose filter lines are in flight together. Enough that a blocked filter's one miss
/// per cold table keeps the core's miss buffers (about 20) busy; few enough that a classic
/// filter's k lines per table, prefetched for the whole batch, still fit in L1 and L2.
pub const BATCH: usize = 32;

/// Keys whose table searches go in rounds together: a window of several batches, so that a
/// call of many keys finds several blocks to read from the device in a round and reads them
/// at once (absent keys need one in about a hundred, for their false positives), while the
/// round's sort and its scratch space stay small.
const WINDOW: usize = 16 * BATCH;

/// One key of the batch being looked up.
struct Lookup {
    hash: u64,
    /// Its candidates: `candidates[next..end]` are still to be asked.
    next: usize,
    end: usize,
    answer: Option<Option<Value>>,
    /// The answer is a merge operand: the key is read again with `read::merged_get`.
    operand: bool,
    /// The answer is a value in a blob file, read once the window's searches are done.
    blob: Option<crate::blob::BlobRef>,
    /// Its prefix hash, once a table that holds prefixes asked for it.
    prefix: KeyPrefixHash,
}

/// What every step of one window's lookups reads: the tree, the window's keys, the sequence
/// number to read at, and the read threads.
struct Call<'s, 'k, K> {
    state: &'s Tree,
    keys: &'k [K],
    seq: SeqNo,
    clock: &'s dyn crate::clock::Clock,
    reads: &'s ReadPool,
}

/// Per-call scratch space, reused by every window of the call.
struct Scratch<'s> {
    candidates: Vec<(&'s Arc<TableFile>, &'s Filter)>,
    lookups: Vec<Lookup>,
    /// This round's table searches: (table, index of the key in the window).
    searches: Vec<(&'s Arc<TableFile>, usize)>,
    /// This round's searches whose block must come from the storage device: (table, index
    /// of the key in the window, the block).
    waiting: Vec<(&'s Arc<TableFile>, usize, BlockHandle)>,
}

/// Looks up every key of `keys` at `seq` in `state`; the results are in input order.
pub fn lookup_all<K: AsRef<[u8]>>(
    state: &Tree,
    keys: &[K],
    seq: SeqNo,
    clock: &dyn crate::clock::Clock,
    tally: &mut ReadTally,
    reads: &ReadPool,
) -> Result<Vec<Option<Value>>> {
    let mut out = Vec::with_capacity(keys.len());
    let window_keys = WINDOW.min(keys.len());
    let mut scratch = Scratch {
        // Room for every candidate of a window up front (grown push by push, a 32-key call
        // reallocated it six times, about 5% of an absent-key `multi_get` at 50M keys), but
        // no more than 64 KiB: a call of many keys over a deep L0 just grows it.
        candidates: Vec::with_capacity((window_keys * state.version.max_candidates()).min(4096)),
        lookups: Vec::with_capacity(window_keys),
        searches: Vec::new(),
        waiting: Vec::new(),
    };
    for chunk in keys.chunks(WINDOW) {
        let call = Call { state, keys: chunk, seq, clock, reads };
        window(&call, &mut scratch, tally)?;
        for (l, key) in scratch.lookups.drain(..).zip(chunk) {
            out.push(match (l.operand, l.blob) {
                (true, _) => merged_get(state, key.as_ref(), seq, clock)?,
                (false, Some(r)) => Some(state.read_blob(&r)?),
                (false, None) => l.answer.unwrap_or(None),
            });
        }
    }
    Ok(out)
}

/// Looks up one window of keys: the filter work in batches of [`BATCH`], then the table
/// searches of the whole window in rounds.
fn window<'s, K: AsRef<[u8]>>(
    call: &Call<'s, '_, K>,
    s: &mut Scratch<'s>,
    tally: &mut ReadTally,
) -> Result<()> {
    let &Call { state, keys, seq, clock, reads } = call;
    s.candidates.clear();
    s.lookups.clear();
    s.searches.clear();
    // Asked once per window rather than once per key. A memtable empty now holds nothing
    // this call can see: what is written from here on is newer than `seq`.
    let mems_hold_any = state.mems().any(|m| !m.table.is_empty());
    for (b, batch) in keys.chunks(BATCH).enumerate() {
        let first = b * BATCH;
        for key in batch {
            let hash = hash_key(key.as_ref());
            let start = s.candidates.len();
            let _ = state.version.for_each_candidate(key.as_ref(), |t, filter| {
                s.candidates.push((t, filter));
                ControlFlow::<()>::Continue(())
            });
            s.lookups.push(Lookup {
                hash,
                next: start,
                end: s.candidates.len(),
                answer: None,
                operand: false,
                blob: None,
                prefix: Default::default(),
            });
        }
        // The batch's filter lines are requested in one burst once every key's candidates
        // are known, not key by key between the fence searches. A line out of cache usually
        // misses the TLB too, and its prefetch holds up retirement until the page walk is
        // done: back to back, the batch's walks overlap; spread out, they queue one behind
        // another (absent keys at 50M, 32-key calls: 5% faster in ten alternating pairs).
        for lookup in &s.lookups[first..] {
            for (_, filter) in &s.candidates[lookup.next..lookup.end] {
                filter.prefetch(lookup.hash);
            }
        }

        let in_memtables = if mems_hold_any { batch.len() } else { 0 };
        for lookup in s.lookups[first..].iter().take(in_memtables) {
            state.mems().for_each(|m| m.table.prefetch(lookup.hash));
        }
        for (lookup, key) in s.lookups[first..].iter_mut().zip(batch).take(in_memtables) {
            for mem in state.mems() {
                if mem.table.is_empty() || !mem.table.may_contain_hash(lookup.hash) {
                    continue;
                }
                let found = Found::Memtable(mem.table.get(key.as_ref(), seq));
                let answer = resolve(state, key.as_ref(), seq, found, tally, clock);
                lookup.operand = matches!(answer, Answer::Operand);
                // A value the memtable holds by reference decides too: read after the window.
                if let Answer::Blob(r) = answer {
                    lookup.blob = Some(r);
                    lookup.answer = Some(None);
                    break;
                }
                if let Some(decided) = answer.decision().or(lookup.operand.then_some(None)) {
                    lookup.answer = Some(decided);
                    break;
                }
            }
        }
        // The batch's first probes, while its filter lines are fresh in cache.
        advance(s, keys, first, tally);
    }

    loop {
        if s.searches.is_empty() {
            return Ok(());
        }
        s.searches.sort_unstable_by(|(ta, a), (tb, b)| {
            (ta.table.id(), keys[*a].as_ref()).cmp(&(tb.table.id(), keys[*b].as_ref()))
        });
        // With two or more searches, blocks that must come from the device are set aside
        // and read together afterwards; a lone search just reads.
        let defer = s.searches.len() >= 2 && reads.worth_asking();
        let wait = if defer { Wait::IfResident } else { Wait::ForDevice };
        s.waiting.clear();
        for group in s.searches.chunk_by(|(a, _), (b, _)| Arc::ptr_eq(a, b)) {
            let t = group[0].0;
            let group_keys = group.iter().map(|&(_, i)| keys[i].as_ref());
            t.table.get_many(group_keys, seq, wait, |k, got| {
                let i = group[k].1;
                match got {
                    TableLookup::Done(got) => {
                        t.table.record_point_outcome(&got.outcome);
                        settle(call, &mut s.lookups, tally, i, got)
                    }
                    TableLookup::Waiting(handle) => s.waiting.push((t, i, handle)),
                }
            })?;
        }
        if defer {
            reads.round_asked(!s.waiting.is_empty());
        }
        if !s.waiting.is_empty() {
            fetch_waiting(call, s, tally)?;
        }
        s.searches.clear();
        advance(s, keys, 0, tally);
    }
}

/// Moves each unanswered key from `lookups[from..]` to its next candidate whose filter says
/// "maybe", naming that table search in `searches`; a key with no candidate left is absent.
fn advance<K: AsRef<[u8]>>(s: &mut Scratch<'_>, keys: &[K], from: usize, tally: &mut ReadTally) {
    for (i, lookup) in s.lookups.iter_mut().enumerate().skip(from) {
        if lookup.answer.is_some() {
            continue;
        }
        let mut searching = false;
        while lookup.next < lookup.end {
            let (t, filter) = s.candidates[lookup.next];
            lookup.next += 1;
            tally.tables_consulted += 1;
            if filter.may_contain_hash(lookup.hash)
                && t.table.may_hold_prefix_of(keys[i].as_ref(), &mut lookup.prefix)
            {
                // As `get`: the range filter only after the point filters' "maybe".
                if t.table.range_filter_may_hold(keys[i].as_ref()) {
                    s.searches.push((t, i));
                    searching = true;
                    break;
                }
                tally.range_filter_point_negatives += 1;
            }
            tally.filter_negatives += 1;
        }
        if !searching {
            // Every candidate asked and none holds the key.
            lookup.answer = Some(None);
        }
    }
}

/// Records what a table search found for the window's key `i`.
fn settle<K: AsRef<[u8]>>(
    &Call { state, keys, seq, clock, .. }: &Call<'_, '_, K>,
    lookups: &mut [Lookup],
    tally: &mut ReadTally,
    i: usize,
    got: TableGet,
) {
    let answer = resolve(state, keys[i].as_ref(), seq, Found::Table(got), tally, clock);
    if let Answer::Operand = answer {
        lookups[i].operand = true;
        lookups[i].answer = Some(None);
    } else if let Answer::Blob(r) = answer {
        lookups[i].blob = Some(r);
        lookups[i].answer = Some(None);
    } else if let Some(decided) = answer.decision() {
        lookups[i].answer = Some(decided);
    }
}

/// Fetches the round's blocks that must come from the storage device — two or more at the
/// same time, on the read pool, so their waits overlap — and searches each waiting key in
/// its block. Keys waiting on one block (they are in table and key order) share its fetch.
fn fetch_waiting<K: AsRef<[u8]>>(
    call: &Call<'_, '_, K>,
    s: &mut Scratch<'_>,
    tally: &mut ReadTally,
) -> Result<()> {
    let &Call { keys, seq, reads, .. } = call;
    let mut blocks: Vec<(Arc<Table>, BlockHandle)> = Vec::new();
    let mut which = Vec::with_capacity(s.waiting.len());
    for &(t, _, handle) in &s.waiting {
        let same = blocks.last().is_some_and(|(b, h)| Arc::ptr_eq(b, &t.table) && *h == handle);
        if !same {
            blocks.push((Arc::clone(&t.table), handle));
        }
        which.push(blocks.len() - 1);
    }
    let fetched = if blocks.len() >= 2 {
        reads.fetch_all(blocks)?
    } else {
        let (table, handle) = &blocks[0];
        vec![table.fetch_for_lookup(*handle)?]
    };
    let mut previous = None;
    for (&(t, i, handle), &b) in s.waiting.iter().zip(&which) {
        let first = previous != Some(b);
        previous = Some(b);
        let got = t.table.get_in(&fetched[b], handle, keys[i].as_ref(), seq, first)?;
        t.table.record_point_outcome(&got.outcome);
        settle(call, &mut s.lookups, tally, i, got);
    }
    Ok(())
}
