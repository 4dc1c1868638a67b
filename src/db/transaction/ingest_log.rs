//! The recent ingests' key ranges, which commits check their reads against.

use std::collections::VecDeque;

use super::ReadSet;
use crate::db::{lock_mutex as lock, DbInner};
use crate::version::edit::KeyspaceId;
use crate::{Error, Result};

/// How many ingests [`IngestLog`] remembers: a transaction open across more ingests than this
/// that read anything is refused. Each record is a keyspace id and two keys.
pub(crate) const INGEST_LOG_LEN: usize = 256;

/// The most recent ingests' keyspaces and key ranges, for commits to check their reads
/// against the ingests their snapshots may lack: an ingest's tables pass no memtable, so
/// the memtables' history does not hold them.
#[derive(Default)]
pub(crate) struct IngestLog {
    /// Oldest first, numbered as `DbInner::ingests_begun` counts them, without gaps.
    records: VecDeque<IngestRecord>,
}

struct IngestRecord {
    number: u64,
    keyspace: KeyspaceId,
    /// Its first key, known before it reserves its sequence number.
    first: Vec<u8>,
    /// Its last key, once its tables are written; until then every key from `first` on
    /// may be in it.
    last: Option<Vec<u8>>,
    /// It failed and installed nothing.
    failed: bool,
}

impl IngestRecord {
    fn holds_key(&self, key: &[u8]) -> bool {
        !self.failed
            && self.first.as_slice() <= key
            && self.last.as_ref().map_or(true, |l| key <= l.as_slice())
    }

    /// True if it may hold a key in `start..end`.
    fn overlaps(&self, start: &[u8], end: &[u8]) -> bool {
        !self.failed
            && self.first.as_slice() < end
            && self.last.as_ref().map_or(true, |l| start <= l.as_slice())
    }
}

impl IngestLog {
    /// Records ingest `number` (the newest), into `keyspace`, beginning at key `first`.
    pub(crate) fn begin(&mut self, number: u64, keyspace: KeyspaceId, first: &[u8]) {
        if self.records.len() == INGEST_LOG_LEN {
            self.records.pop_front();
        }
        let first = first.to_vec();
        let record = IngestRecord { number, keyspace, first, last: None, failed: false };
        self.records.push_back(record);
    }

    /// Ingest `number`'s tables end at `last`.
    pub(crate) fn ends_at(&mut self, number: u64, last: &[u8]) {
        if let Some(r) = self.records.iter_mut().rev().find(|r| r.number == number) {
            r.last = Some(last.to_vec());
        }
    }

    /// Ingest `number` failed without installing anything.
    pub(crate) fn failed(&mut self, number: u64) {
        if let Some(r) = self.records.iter_mut().rev().find(|r| r.number == number) {
            r.failed = true;
        }
    }

    /// `Err(Conflict)` if an ingest numbered above `done` may hold a key `reads` read or
    /// one in a range it scanned, or if such ingests are no longer all recorded. Ingests
    /// install one at a time in their numbers' order, so those at or below `done` had
    /// installed (or failed) before the snapshot was loaded, and are in it.
    pub(super) fn check(&self, reads: &ReadSet, done: u64) -> Result<()> {
        let newer = self.records.iter().filter(|r| r.number > done);
        if self.records.front().is_some_and(|r| r.number > done + 1) {
            return Err(Error::Conflict);
        }
        for r in newer {
            let Some(read) = reads.keyspaces.get(r.keyspace) else { continue };
            let from = read.keys.partition_point(|k| k.as_slice() < r.first.as_slice());
            let key_hit = read.keys.get(from).is_some_and(|k| r.holds_key(k));
            if key_hit || read.ranges.iter().any(|(s, e)| r.overlaps(s, e)) {
                return Err(Error::Conflict);
            }
        }
        Ok(())
    }
}

impl DbInner {
    pub(crate) fn ingest_log_lock(&self) -> std::sync::MutexGuard<'_, IngestLog> {
        lock(&self.ingest_log)
    }
}
