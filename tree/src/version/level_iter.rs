//! [`LevelIter`]: the iterator over one sorted level (L1 and deeper), which concatenates the
//! level's tables in key order and opens only the one it is in, so a scan over a level of
//! thousands of tables holds one table iterator, not thousands.

use std::sync::Arc;

use crate::iter::{BidirectionalIterator, InternalIterator};
use crate::key;
use crate::table::iter::TableIter;
use crate::version::range_checks::{Direction, RangeChecks};
use crate::version::set::TableFile;
use crate::Result;

/// Iterates over a sorted, non-overlapping level, opening one table at a time.
pub struct LevelIter {
    tables: Vec<Arc<TableFile>>,
    index: usize,
    current: Option<TableIter>,
    /// A compaction's one pass: each table read ahead, past the block cache.
    for_compaction: bool,
    /// A short scan's record of its range filters' false positives, the level's number, and
    /// which tables (by index) their filter let through and are still to be judged.
    checks: Option<(Arc<RangeChecks>, usize, Vec<bool>)>,
}

impl LevelIter {
    pub fn new(tables: Vec<Arc<TableFile>>) -> Self {
        LevelIter { tables, index: 0, current: None, for_compaction: false, checks: None }
    }

    /// A scan's iterator of `level` that judges the tables marked in `pending` (their range
    /// filter let them through) by `checks` as it enters them.
    pub fn with_checks(
        level: usize,
        tables: Vec<Arc<TableFile>>,
        checks: Arc<RangeChecks>,
        pending: Vec<bool>,
    ) -> Self {
        debug_assert_eq!(tables.len(), pending.len());
        LevelIter { checks: Some((checks, level, pending)), ..LevelIter::new(tables) }
    }

    /// A level's tables as a compaction reads them: once, front to back, past the block
    /// cache (see `Table::iter_ahead`).
    pub fn for_compaction(tables: Vec<Arc<TableFile>>) -> Self {
        LevelIter { tables, index: 0, current: None, for_compaction: true, checks: None }
    }

    /// Judges the current table, if it is still to be, from where a positioning toward
    /// `from` left it.
    #[inline]
    fn judge(&mut self, direction: Direction, from: Option<&[u8]>) {
        let Some((checks, level, pending)) = &mut self.checks else { return };
        if !pending.get(self.index).copied().unwrap_or(false) {
            return;
        }
        let at = self.current.as_ref().filter(|c| c.valid()).map(|c| c.key());
        if checks.judge(*level, &self.tables[self.index], direction, from, at) {
            pending[self.index] = false;
        }
    }

    fn open(&mut self, index: usize) {
        self.index = index;
        self.current = self.tables.get(index).map(|t| match self.for_compaction {
            true => t.table.iter_ahead(),
            false => t.table.iter(),
        });
    }

    /// Moves on to the next table while the current one is exhausted.
    fn skip_forward(&mut self) -> Result<()> {
        while self.current.as_ref().is_some_and(|c| !c.valid())
            && self.index + 1 < self.tables.len()
        {
            self.open(self.index + 1);
            if let Some(c) = self.current.as_mut() {
                c.seek_to_first()?;
            }
            self.judge(Direction::Forward, None);
        }
        Ok(())
    }

    /// Moves back to the previous table while the current one is exhausted.
    fn skip_backward(&mut self) -> Result<()> {
        while self.current.as_ref().is_some_and(|c| !c.valid()) && self.index > 0 {
            self.open(self.index - 1);
            if let Some(c) = self.current.as_mut() {
                c.seek_to_last()?;
            }
            self.judge(Direction::Backward, None);
        }
        Ok(())
    }
}

impl InternalIterator for LevelIter {
    fn valid(&self) -> bool {
        self.current.as_ref().is_some_and(|c| c.valid())
    }
    fn key(&self) -> &[u8] {
        self.current.as_ref().expect("valid").key()
    }
    fn value(&self) -> &[u8] {
        self.current.as_ref().expect("valid").value()
    }
    fn next(&mut self) -> Result<()> {
        // Not when exhausted: an iterator that ran off the front must not restart at the
        // second table.
        if !self.valid() {
            return Ok(());
        }
        if let Some(c) = self.current.as_mut() {
            c.next()?;
        }
        self.skip_forward()
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let i =
            self.tables.partition_point(|t| key::compare_internal(&t.meta.largest, target).is_lt());
        self.open(i);
        if let Some(c) = self.current.as_mut() {
            c.seek(target)?;
        }
        self.judge(Direction::Forward, Some(target));
        self.skip_forward()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.open(0);
        if let Some(c) = self.current.as_mut() {
            c.seek_to_first()?;
        }
        self.judge(Direction::Forward, None);
        self.skip_forward()
    }
}

impl BidirectionalIterator for LevelIter {
    fn prev(&mut self) -> Result<()> {
        if !self.valid() {
            return Ok(());
        }
        if let Some(c) = self.current.as_mut() {
            c.prev()?;
        }
        self.skip_backward()
    }
    fn seek_to_last(&mut self) -> Result<()> {
        match self.tables.len().checked_sub(1) {
            Some(last) => {
                self.open(last);
                if let Some(c) = self.current.as_mut() {
                    c.seek_to_last()?;
                }
                self.judge(Direction::Backward, None);
            }
            None => self.current = None,
        }
        self.skip_backward()
    }
    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        // The first table ending at or after `target` holds the answer if it starts at or
        // before it; otherwise (it is exhausted backward) the table before it does.
        let i =
            self.tables.partition_point(|t| key::compare_internal(&t.meta.largest, target).is_lt());
        if i == self.tables.len() {
            return self.seek_to_last();
        }
        self.open(i);
        if let Some(c) = self.current.as_mut() {
            c.seek_for_prev(target)?;
        }
        self.judge(Direction::Backward, Some(target));
        self.skip_backward()
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use proptest::prelude::*;

    use super::*;
    use crate::fs::{Deleter, MemFile, StdFs};
    use crate::iter::testing::{check_walk, walk_op};
    use crate::key::{self, compare_internal, internal_key, ValueKind};
    use crate::table::{Table, TableBuilder, TableOptions};
    use crate::version::edit::TableMeta;
    use crate::version::set::TableFile;

    /// One level's table holding `entries` (sorted), with small blocks.
    fn table_file(number: u64, entries: &[(Vec<u8>, Vec<u8>)]) -> Arc<TableFile> {
        let sink = MemFile::new();
        let opts = TableOptions::default().block_bytes(64).restart_interval(3);
        let mut b = TableBuilder::new(Box::new(sink.clone()), opts);
        for (k, v) in entries {
            b.add(k, v).unwrap();
        }
        b.finish().unwrap();
        let path = PathBuf::from(format!("mem/{number:06}.sst"));
        let bytes = sink.contents();
        let meta = TableMeta {
            keyspace: 0,
            number,
            file_size: bytes.len() as u64,
            smallest: entries[0].0.clone(),
            largest: entries[entries.len() - 1].0.clone(),
            smallest_seq: 0,
            largest_seq: 0,
            num_entries: entries.len() as u64,
            blob_refs: Vec::new(),
        };
        let table = Table::open(Arc::new(MemFile::from(bytes)), path.clone(), None).unwrap();
        Arc::new(TableFile::new(meta, Arc::new(table), path, Deleter::new(Arc::new(StdFs))))
    }

    proptest! {
        /// A level's tables walked as one sorted run: seeks both ways land in the right
        /// table (or the one before), steps cross from table to table both ways, and steps
        /// off either end stay off.
        #[test]
        fn prop_level_walks_match_a_model(
            keys in prop::collection::btree_set((prop::collection::vec(0u8..4, 1..5), 0u64..3), 1..150),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
            walk in prop::collection::vec(walk_op(
                (prop::collection::vec(0u8..4, 0..5), 0u64..4)
                    .prop_map(|(k, s)| internal_key(&k, s, ValueKind::Put)),
            ), 1..30),
        ) {
            let mut sorted: Vec<_> = keys
                .iter()
                .map(|(k, s)| (internal_key(k, *s, ValueKind::Put), format!("{k:?}{s}").into_bytes()))
                .collect();
            sorted.sort_by(|a, b| compare_internal(&a.0, &b.0));
            // Tables end where a user key ends, as in a real level.
            let mut ends: Vec<usize> = cuts.iter().map(|c| c.index(sorted.len()) + 1).collect();
            ends.push(sorted.len());
            ends.sort_unstable();
            ends.dedup();
            ends.retain(|&e| {
                e == sorted.len() || key::user_key(&sorted[e - 1].0) != key::user_key(&sorted[e].0)
            });
            let mut tables = Vec::new();
            let mut start = 0;
            for end in ends {
                tables.push(table_file(tables.len() as u64 + 1, &sorted[start..end]));
                start = end;
            }
            check_walk(&mut LevelIter::new(tables), &sorted, &walk)?;
        }
    }
}
