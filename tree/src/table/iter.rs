//! [`TableIter`]: the cursor over a whole table, a two-level iterator — the table's in-RAM
//! index picks the data block, a [`BlockIter`] walks it.

use std::sync::Arc;

use super::block::BlockIter;
use super::reader::{Fetch, Fetched, Source, Table, Wait, Window};
use crate::iter::{BidirectionalIterator, InternalIterator};
use crate::Result;

/// A two-level iterator: the in-RAM index picks the block, a [`BlockIter`] walks it. Steps
/// both ways ([`BidirectionalIterator`]).
#[derive(Debug)]
pub struct TableIter {
    table: Arc<Table>,
    block_index: usize,
    data: Option<BlockIter>,
    source: Source,
    /// For a scan that reads the table once, front to back: the bytes read ahead.
    ahead: Option<Window>,
}

impl TableIter {
    pub(super) fn new(table: Arc<Table>, source: Source) -> Self {
        TableIter { table, block_index: 0, data: None, source, ahead: None }
    }

    pub(super) fn reading_ahead(table: Arc<Table>) -> Self {
        TableIter { ahead: Some(Window::default()), ..TableIter::new(table, Source::File) }
    }

    /// Moves to block `i` (past the end: invalid) and positions inside it with `how`.
    fn enter(&mut self, i: usize, how: impl FnOnce(&mut BlockIter) -> Result<()>) -> Result<()> {
        self.block_index = i;
        self.data = None;
        let Some(handle) = self.table.block_handle(i) else { return Ok(()) };
        let r = match self.ahead.as_mut() {
            Some(window) => self.table.fetch_ahead(handle, window),
            None => self
                .table
                .fetch(handle, self.source, Wait::ForDevice)
                .and_then(Fetch::waited)
                .map(|Fetched { block, .. }| block),
        };
        let r = r.and_then(|block| {
            let mut it = block.iter();
            how(&mut it)?;
            Ok(it)
        });
        match r {
            Ok(it) => {
                self.data = Some(it);
                Ok(())
            }
            Err(e) => Err(e.in_file(self.table.path(), handle.offset)),
        }
    }

    /// Moves the cursor inside the current block with `how`.
    fn step(&mut self, how: impl FnOnce(&mut BlockIter) -> Result<()>) -> Result<()> {
        let Some(d) = self.data.as_mut() else { return Ok(()) };
        if let Err(e) = how(d) {
            self.data = None;
            let offset = self.table.block_handle(self.block_index).map_or(0, |h| h.offset);
            return Err(e.in_file(self.table.path(), offset));
        }
        Ok(())
    }

    /// Moves forward past exhausted blocks.
    fn skip_forward(&mut self) -> Result<()> {
        while self.data.as_ref().is_some_and(|d| !d.valid()) {
            self.enter(self.block_index + 1, BlockIter::seek_to_first)?;
        }
        Ok(())
    }

    /// Moves backward past exhausted blocks.
    fn skip_backward(&mut self) -> Result<()> {
        while self.data.as_ref().is_some_and(|d| !d.valid()) {
            match self.block_index.checked_sub(1) {
                Some(prev) => self.enter(prev, BlockIter::seek_to_last)?,
                None => self.data = None,
            }
        }
        Ok(())
    }
}

impl InternalIterator for TableIter {
    fn valid(&self) -> bool {
        self.data.as_ref().is_some_and(|d| d.valid())
    }

    fn key(&self) -> &[u8] {
        self.data.as_ref().map_or(&[], |d| d.key())
    }

    fn value(&self) -> &[u8] {
        self.data.as_ref().map_or(&[], |d| d.value())
    }

    fn next(&mut self) -> Result<()> {
        self.step(BlockIter::next)?;
        self.skip_forward()
    }

    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.enter(self.table.find_block(target), |d| d.seek(target))?;
        self.skip_forward()
    }

    fn seek_to_first(&mut self) -> Result<()> {
        self.enter(0, BlockIter::seek_to_first)?;
        self.skip_forward()
    }
}

impl BidirectionalIterator for TableIter {
    fn prev(&mut self) -> Result<()> {
        self.step(BlockIter::prev)?;
        self.skip_backward()
    }

    fn seek_to_last(&mut self) -> Result<()> {
        match self.table.block_count().checked_sub(1) {
            Some(last) => self.enter(last, BlockIter::seek_to_last)?,
            None => self.data = None,
        }
        self.skip_backward()
    }
}
