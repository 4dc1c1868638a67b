//! [`LevelIter`]: the iterator over one sorted level (L1 and deeper), which concatenates the
//! level's tables in key order and opens only the one it is in, so a scan over a level of
//! thousands of tables holds one table iterator, not thousands.

use std::sync::Arc;

use crate::iter::{BidirectionalIterator, InternalIterator};
use crate::key;
use crate::table::iter::TableIter;
use crate::version::set::TableFile;
use crate::Result;

/// Iterates over a sorted, non-overlapping level, opening one table at a time.
pub(crate) struct LevelIter {
    tables: Vec<Arc<TableFile>>,
    index: usize,
    current: Option<TableIter>,
    /// A compaction's one pass: each table read ahead, past the block cache.
    for_compaction: bool,
}

impl LevelIter {
    pub(crate) fn new(tables: Vec<Arc<TableFile>>) -> Self {
        LevelIter { tables, index: 0, current: None, for_compaction: false }
    }

    /// A level's tables as a compaction reads them: once, front to back, past the block
    /// cache (see `Table::iter_ahead`).
    pub(crate) fn for_compaction(tables: Vec<Arc<TableFile>>) -> Self {
        LevelIter { tables, index: 0, current: None, for_compaction: true }
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
