//! [`BlockIter`]: the cursor over one block's entries, decoding the prefix-compressed
//! entries (format: `docs/format/table.md`) between restart points.

use std::cmp::Ordering;

use bytes::Bytes;

use super::block::Block;
use crate::coding::Decoder;
use crate::iter::{BidirectionalIterator, InternalIterator};
use crate::key::compare_internal;
use crate::{Error, Result};

/// A cursor over one block's entries, both ways ([`BidirectionalIterator`]). Stepping back
/// costs more than stepping forward: it rescans from the restart point before the entry.
#[derive(Debug, Clone)]
pub struct BlockIter {
    block: Block,
    /// Offset of the current entry; `restarts_offset` when not valid.
    current: usize,
    /// Offset just past the current entry.
    next: usize,
    /// The restart region holding the current entry.
    restart_index: usize,
    key: Vec<u8>,
    value: (usize, usize),
}

impl BlockIter {
    pub(super) fn new(block: Block) -> Self {
        let end = block.restarts_offset;
        BlockIter {
            block,
            current: end,
            next: end,
            restart_index: 0,
            // Room for a typical internal key up front: growing from empty took three
            // allocations per point lookup.
            key: Vec::with_capacity(64),
            value: (0, 0),
        }
    }

    /// The current value as a zero-copy slice of the block's payload.
    pub fn value_bytes(&self) -> Bytes {
        self.block.data.slice(self.value.0..self.value.1)
    }

    fn invalidate(&mut self) {
        self.current = self.block.restarts_offset;
        self.next = self.block.restarts_offset;
        self.key.clear();
    }

    /// Decodes the entry at `self.next`, whose predecessor's key is in `self.key`.
    fn parse_next(&mut self) -> Result<()> {
        let end = self.block.restarts_offset;
        if self.next >= end {
            self.invalidate();
            return Ok(());
        }
        let off = self.next;
        while self.restart_index + 1 < self.block.num_restarts
            && self.block.restart(self.restart_index + 1) <= off
        {
            self.restart_index += 1;
        }
        let at_restart = self.block.restart(self.restart_index) == off;
        let data = &self.block.data[..end];
        let mut d = Decoder::new(&data[off..]);
        let parsed = (|| {
            let shared = usize::try_from(d.varint()?).ok()?;
            let unshared = d.len_prefix()?;
            let value_len = d.len_prefix()?;
            if shared > self.key.len() || (at_restart && shared != 0) {
                return None;
            }
            let suffix = d.bytes(unshared)?;
            let vstart = off + d.position();
            d.bytes(value_len)?;
            Some((shared, suffix, vstart, value_len))
        })();
        match parsed {
            Some((shared, suffix, vstart, value_len)) => {
                self.key.truncate(shared);
                self.key.extend_from_slice(suffix);
                self.current = off;
                self.value = (vstart, vstart + value_len);
                self.next = vstart + value_len;
                Ok(())
            }
            None => {
                self.invalidate();
                Err(Error::bad_bytes(off as u64, "malformed block entry"))
            }
        }
    }

    fn seek_to_restart(&mut self, i: usize) -> Result<()> {
        self.key.clear();
        self.restart_index = i;
        self.next = self.block.restart(i);
        self.parse_next()
    }
}

impl InternalIterator for BlockIter {
    fn valid(&self) -> bool {
        self.current < self.block.restarts_offset
    }

    fn key(&self) -> &[u8] {
        &self.key
    }

    fn value(&self) -> &[u8] {
        &self.block.data[self.value.0..self.value.1]
    }

    fn next(&mut self) -> Result<()> {
        self.parse_next()
    }

    fn seek(&mut self, target: &[u8]) -> Result<()> {
        if self.block.is_empty() {
            self.invalidate();
            return Ok(());
        }
        // Find the last restart whose key is < target; the answer lies in its region (or is
        // the first entry of the next one, reached by the scan below).
        let (mut lo, mut hi) = (0usize, self.block.num_restarts - 1);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            let k = match self.block.restart_key(mid) {
                Ok(k) => k,
                Err(e) => {
                    self.invalidate();
                    return Err(e);
                }
            };
            if compare_internal(k, target) == Ordering::Less {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        self.seek_to_restart(lo)?;
        while self.valid() && compare_internal(&self.key, target) == Ordering::Less {
            self.parse_next()?;
        }
        Ok(())
    }

    fn seek_to_first(&mut self) -> Result<()> {
        if self.block.is_empty() {
            self.invalidate();
            return Ok(());
        }
        self.seek_to_restart(0)
    }
}

impl BidirectionalIterator for BlockIter {
    fn prev(&mut self) -> Result<()> {
        if !self.valid() {
            return Ok(());
        }
        let original = self.current;
        // Back up to the restart region that starts before the current entry, then scan
        // forward to the entry just before it: entries can only be decoded front to back.
        while self.block.restart(self.restart_index) >= original {
            if self.restart_index == 0 {
                self.invalidate();
                return Ok(());
            }
            self.restart_index -= 1;
        }
        self.seek_to_restart(self.restart_index)?;
        while self.valid() && self.next < original {
            self.parse_next()?;
        }
        Ok(())
    }

    fn seek_to_last(&mut self) -> Result<()> {
        if self.block.is_empty() {
            self.invalidate();
            return Ok(());
        }
        self.seek_to_restart(self.block.num_restarts - 1)?;
        while self.valid() && self.next < self.block.restarts_offset {
            self.parse_next()?;
        }
        Ok(())
    }
}
