//! The point-read path, top to bottom:
//!
//! 1. hash the key once (`filter::hash_key`);
//! 2. pick the candidate tables from the version's in-RAM key-range fences (every L0 table
//!    whose range covers the key, newest first, then one table per deeper level), and start
//!    loading each candidate's filter cache line (a prefetch: nothing waits for it yet);
//! 3. the active memtable, then the immutable ones, newest first;
//! 4. each candidate in order: probe its filter with the precomputed hash, and only on
//!    "maybe" search its in-RAM index and one data block (through the block cache).
//!
//! The first version found at or below the read's sequence number decides: a value, or a
//! tombstone meaning "absent". Prefetching all candidates' filter lines before probing any
//! lets their cache misses overlap — with each other and with the memtable search — instead
//! of being paid one after another; on a tree larger than the CPU caches that is most of an
//! absent-key lookup's cost. Nothing is allocated on the miss path, no lock is taken (the
//! state is an `Arc` loaded by the caller), and the lookup's counters are added to the shared
//! statistics once, at the end.

use std::ops::ControlFlow;

use super::{DbInner, DbState};
use crate::filter::hash_key;
use crate::key::SeqNo;
use crate::memtable::MemGet;
use crate::stats::ReadTally;
use crate::table::{GetOutcome, TableGet};
use crate::{Result, Value};

pub(crate) fn get(
    inner: &DbInner,
    state: &DbState,
    key: &[u8],
    seq: SeqNo,
) -> Result<Option<Value>> {
    let mut tally = ReadTally::default();
    let result = search(state, key, seq, &mut tally);
    inner.counters.record_get(&tally);
    result
}

fn search(state: &DbState, key: &[u8], seq: SeqNo, tally: &mut ReadTally) -> Result<Option<Value>> {
    let hash = hash_key(key);
    let version = &state.version;
    let _ = version.for_each_candidate(key, |t| {
        t.table.filter().prefetch(hash);
        ControlFlow::<()>::Continue(())
    });
    for mem in std::iter::once(&state.mem).chain(&state.imm) {
        if mem.table.is_empty() {
            continue;
        }
        if let Some(found) = mem.table.get(key, seq) {
            tally.memtable_hit = true;
            return Ok(match found {
                MemGet::Found(v) => Some(v),
                MemGet::Deleted => None,
            });
        }
    }
    let found = version.for_each_candidate(key, |t| {
        tally.tables_consulted += 1;
        if !t.table.filter().may_contain_hash(hash) {
            tally.filter_negatives += 1;
            return ControlFlow::Continue(());
        }
        match t.table.search(key, seq) {
            Err(e) => ControlFlow::Break(Err(e)),
            Ok(TableGet { outcome, block_read, cache_hit }) => {
                tally.block_reads += u64::from(block_read);
                tally.block_cache_hits += u64::from(cache_hit);
                match outcome {
                    GetOutcome::Found(v) => ControlFlow::Break(Ok(Some(v))),
                    GetOutcome::Deleted => ControlFlow::Break(Ok(None)),
                    GetOutcome::Absent | GetOutcome::OutOfRange | GetOutcome::FilterNegative => {
                        tally.filter_false_positives += 1;
                        ControlFlow::Continue(())
                    }
                }
            }
        }
    });
    match found {
        ControlFlow::Break(answer) => answer,
        ControlFlow::Continue(()) => Ok(None),
    }
}
