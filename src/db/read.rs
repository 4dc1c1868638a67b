//! The point-read path, top to bottom:
//!
//! 1. hash the key once (`filter::hash_key`);
//! 2. the active memtable, then the immutable ones, newest first;
//! 3. every L0 table, newest first, whose key range covers the key;
//! 4. on each deeper level, the one table whose range covers the key (binary search).
//!
//! For each table: range check → filter probe with the precomputed hash → only on "maybe",
//! the in-RAM index and one data block (through the block cache). The first version found at
//! or below the read's sequence number decides: a value, or a tombstone meaning "absent".
//! Nothing is allocated on the miss path, and no lock is taken: the state is an `Arc` loaded
//! by the caller.

use super::{DbInner, DbState};
use crate::filter::hash_key;
use crate::key::SeqNo;
use crate::memtable::MemGet;
use crate::table::{GetOutcome, TableGet};
use crate::version::set::TableFile;
use crate::{Result, Value};

pub(crate) fn get(
    inner: &DbInner,
    state: &DbState,
    key: &[u8],
    seq: SeqNo,
) -> Result<Option<Value>> {
    let c = &inner.counters;
    c.gets.incr();
    for mem in std::iter::once(&state.mem).chain(&state.imm) {
        if let Some(found) = mem.table.get(key, seq) {
            c.memtable_hits.incr();
            return Ok(match found {
                MemGet::Found(v) => Some(v),
                MemGet::Deleted => None,
            });
        }
    }
    let hash = hash_key(key);
    let version = &state.version;
    for t in &version.levels[0] {
        if let Some(answer) = probe(inner, t, key, hash, seq)? {
            return Ok(answer);
        }
    }
    for level in 1..version.levels.len() {
        if let Some(t) = version.find_table(level, key) {
            if let Some(answer) = probe(inner, t, key, hash, seq)? {
                return Ok(answer);
            }
        }
    }
    Ok(None)
}

/// Asks one table. `Ok(None)`: not here, keep looking; `Ok(Some(answer))`: decided.
#[inline]
fn probe(
    inner: &DbInner,
    t: &TableFile,
    key: &[u8],
    hash: u64,
    seq: SeqNo,
) -> Result<Option<Option<Value>>> {
    let TableGet { outcome, block_read, cache_hit } = t.table.get(key, hash, seq)?;
    let c = &inner.counters;
    if !matches!(outcome, GetOutcome::OutOfRange) {
        c.tables_consulted.incr();
        c.filter_checks.incr();
    }
    if block_read {
        c.block_reads.incr();
    }
    if cache_hit {
        c.block_cache_hits.incr();
    }
    Ok(match outcome {
        GetOutcome::OutOfRange => None,
        GetOutcome::FilterNegative => {
            c.filter_negatives.incr();
            None
        }
        GetOutcome::Absent => {
            c.filter_false_positives.incr();
            None
        }
        GetOutcome::Found(v) => Some(Some(v)),
        GetOutcome::Deleted => Some(None),
    })
}
