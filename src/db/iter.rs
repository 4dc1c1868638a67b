//! Range and prefix scans.
//!
//! A scan merges every source — active memtable, immutable memtables, each L0 table, and one
//! concatenating iterator per deeper level (which opens one table at a time) — into one stream
//! in internal-key order, then, reading at the scan's sequence number: skips versions newer
//! than it, keeps the first (newest) visible version of each user key, hides tombstones, and
//! stops at the end bound.

use std::ops::Bound;
use std::sync::Arc;

use super::{DbInner, DbState};
use crate::iter::{BidirectionalIterator, InternalIterator};
use crate::key::{self, SeqNo, ValueKind, KIND_FOR_SEEK, MAX_SEQNO};
use crate::merge::MergingIterator;
use crate::version::set::TableFile;
use crate::{Result, Value};

/// Iterates over a sorted, non-overlapping level, opening one table at a time.
struct LevelIter {
    tables: Vec<Arc<TableFile>>,
    index: usize,
    current: Option<Box<dyn BidirectionalIterator>>,
}

impl LevelIter {
    fn new(tables: Vec<Arc<TableFile>>) -> Self {
        LevelIter { tables, index: 0, current: None }
    }

    fn open(&mut self, index: usize) {
        self.index = index;
        self.current = self
            .tables
            .get(index)
            .map(|t| Box::new(t.table.iter()) as Box<dyn BidirectionalIterator>);
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
        self.skip_forward()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.open(0);
        if let Some(c) = self.current.as_mut() {
            c.seek_to_first()?;
        }
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
        self.skip_backward()
    }
}

/// Builds the merged view of every source in `state`, newest sources first.
pub(crate) fn merged_sources(state: &DbState) -> MergingIterator {
    let mut children: Vec<Box<dyn BidirectionalIterator>> = Vec::new();
    for m in std::iter::once(&state.mem).chain(&state.imm) {
        children.push(Box::new(m.table.iter()));
    }
    for t in &state.version.levels[0] {
        children.push(Box::new(t.table.iter()));
    }
    for level in state.version.levels.iter().skip(1) {
        if !level.is_empty() {
            children.push(Box::new(LevelIter::new(level.clone())));
        }
    }
    MergingIterator::new(children)
}

/// An iterator over `(key, value)` pairs in ascending key order, from [`crate::Db::range`],
/// [`crate::Db::prefix`] or a [`crate::Snapshot`]. It sees the database as of its creation
/// and keeps the files it reads alive until dropped. It does not keep the database open:
/// after [`crate::Db::close`] it yields one [`crate::Error::Closed`] and ends.
pub struct DbIterator {
    inner: Arc<DbInner>,
    _state: Arc<DbState>,
    merged: MergingIterator,
    seq: SeqNo,
    start: Bound<Vec<u8>>,
    end: Bound<Vec<u8>>,
    started: bool,
    done: bool,
    last_user_key: Vec<u8>,
    has_last: bool,
}

impl std::fmt::Debug for DbIterator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DbIterator").field("seq", &self.seq).finish_non_exhaustive()
    }
}

impl DbIterator {
    pub(crate) fn new(
        inner: Arc<DbInner>,
        state: Arc<DbState>,
        seq: SeqNo,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
    ) -> Self {
        let merged = merged_sources(&state);
        DbIterator {
            inner,
            _state: state,
            merged,
            seq,
            start,
            end,
            started: false,
            done: false,
            last_user_key: Vec::new(),
            has_last: false,
        }
    }

    fn position(&mut self) -> Result<()> {
        match &self.start {
            Bound::Unbounded => self.merged.seek_to_first(),
            Bound::Included(k) | Bound::Excluded(k) => {
                let target = key::internal_key(k, MAX_SEQNO, KIND_FOR_SEEK);
                if let Bound::Excluded(k) = &self.start {
                    // Treat the excluded key as already emitted: all its versions get skipped.
                    self.last_user_key = k.clone();
                    self.has_last = true;
                }
                self.merged.seek(&target)
            }
        }
    }

    fn past_end(&self, user_key: &[u8]) -> bool {
        match &self.end {
            Bound::Unbounded => false,
            Bound::Included(e) => user_key > e.as_slice(),
            Bound::Excluded(e) => user_key >= e.as_slice(),
        }
    }

    fn advance(&mut self) -> Result<Option<(Vec<u8>, Value)>> {
        if !self.started {
            self.started = true;
            self.position()?;
        }
        while self.merged.valid() {
            let k = self.merged.key();
            let Some(p) = key::parse_internal_key(k) else {
                return Err(crate::Error::corruption("", 0, "scan met a malformed internal key"));
            };
            if p.seq > self.seq || (self.has_last && p.user_key == self.last_user_key.as_slice()) {
                self.merged.next()?;
                continue;
            }
            if self.past_end(p.user_key) {
                return Ok(None);
            }
            self.last_user_key.clear();
            self.last_user_key.extend_from_slice(p.user_key);
            self.has_last = true;
            if p.kind == ValueKind::Delete {
                self.merged.next()?;
                continue;
            }
            let item = (p.user_key.to_vec(), Value::copy_from_slice(self.merged.value()));
            self.merged.next()?;
            return Ok(Some(item));
        }
        Ok(None)
    }
}

impl Iterator for DbIterator {
    type Item = Result<(Vec<u8>, Value)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if let Err(e) = self.inner.check_open() {
            self.done = true;
            return Some(Err(e));
        }
        match self.advance() {
            Ok(Some(item)) => Some(Ok(item)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// The smallest key greater than every key starting with `prefix`, or `None` if there is
/// none (the prefix is empty or all 0xff).
pub(crate) fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut p = prefix.to_vec();
    while let Some(last) = p.pop() {
        if last != 0xff {
            p.push(last + 1);
            return Some(p);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use proptest::prelude::*;

    use super::*;
    use crate::fs::{MemFile, StdFs};
    use crate::iter::tests::{check_walk, walk_op};
    use crate::key::{compare_internal, internal_key, ValueKind};
    use crate::table::{Table, TableBuilder, TableOptions};
    use crate::version::edit::TableMeta;

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
            number,
            file_size: bytes.len() as u64,
            smallest: entries[0].0.clone(),
            largest: entries[entries.len() - 1].0.clone(),
            smallest_seq: 0,
            largest_seq: 0,
            num_entries: entries.len() as u64,
        };
        let table = Table::open(Arc::new(MemFile::from(bytes)), path.clone(), None).unwrap();
        Arc::new(TableFile::new(meta, Arc::new(table), path, Arc::new(StdFs)))
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

    #[test]
    fn prefix_successor_cases() {
        assert_eq!(prefix_successor(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_successor(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_successor(b"\xff\xff"), None);
        assert_eq!(prefix_successor(b""), None);
    }
}
