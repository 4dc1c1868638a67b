//! The compaction iterator, [`NewestVersions`]: the filter every table write (flush,
//! compaction, recovery, checkpoint) passes its entries through.

use std::sync::Arc;

use crate::iter::InternalIterator;
use crate::key::{self, ValueKind, MAX_SEQNO};
use crate::range_del::Fragments;
use crate::Result;

/// Decides, per user key, whether a tombstone may be dropped (nothing older lies below).
pub type TombstoneFilter<'a> = Box<dyn FnMut(&[u8]) -> bool + Send + 'a>;

/// Yields the newest version of each user key from a sorted source (the oldest versions are
/// shadowed and no reader can need them: readers and snapshots keep their own state alive).
/// Tombstones are dropped only where `drop_tombstone` says nothing older can lie below. A
/// newest version that a range tombstone of the source covers is dropped too (the range
/// tombstone, written beside the entries, still covers whatever older lies below).
///
/// A newest version that is a merge operand keeps the versions beneath it that the read
/// would combine with it: the operands down to the first put or tombstone, which is kept
/// too (a tombstone even where one could be dropped, as a clear "no value" for
/// `merge_stage`); one a range tombstone covers ends them, dropped with what lies below.
/// Whether they can be combined is `merge_stage`'s to decide, with the keyspace's operator.
pub struct NewestVersions<'a, I: InternalIterator> {
    inner: I,
    last_user_key: Vec<u8>,
    has_last: bool,
    /// The entries kept so far of `last_user_key` are all merge operands: the next version
    /// is kept too.
    in_operands: bool,
    drop_tombstone: TombstoneFilter<'a>,
    range_dels: Option<Arc<Fragments>>,
    /// Bytes (keys + values) of the input seen, for compaction accounting.
    pub input_bytes: u64,
}

impl<'a, I: InternalIterator> NewestVersions<'a, I> {
    pub fn new(inner: I, drop_tombstone: TombstoneFilter<'a>) -> Self {
        NewestVersions {
            inner,
            last_user_key: Vec::new(),
            has_last: false,
            in_operands: false,
            drop_tombstone,
            range_dels: None,
            input_bytes: 0,
        }
    }

    /// Also drops the versions these range tombstones (the source's own) cover.
    pub fn with_range_tombstones(mut self, range_dels: Option<Arc<Fragments>>) -> Self {
        self.range_dels = range_dels.filter(|r| !r.is_empty());
        self
    }

    /// Skips forward to the next entry to keep.
    fn settle(&mut self) -> Result<()> {
        while self.inner.valid() {
            let k = self.inner.key();
            self.input_bytes += (k.len() + self.inner.value().len()) as u64;
            let uk = key::user_key(k);
            let parsed = key::parse_internal_key(k);
            if self.has_last && uk == self.last_user_key.as_slice() {
                if self.in_operands {
                    let covered = match (&self.range_dels, parsed) {
                        (Some(r), Some(p)) => r.covers(uk, p.seq, MAX_SEQNO),
                        _ => false,
                    };
                    self.in_operands = !covered && parsed.is_some_and(|p| p.kind.is_operand());
                    if !covered {
                        return Ok(());
                    }
                }
                self.inner.next()?;
                continue;
            }
            self.last_user_key.clear();
            self.last_user_key.extend_from_slice(uk);
            self.has_last = true;
            self.in_operands = false;
            let is_tombstone = parsed.is_some_and(|p| p.kind == ValueKind::Delete);
            let covered = match (&self.range_dels, parsed) {
                (Some(r), Some(p)) => r.covers(uk, p.seq, MAX_SEQNO),
                _ => false,
            };
            if covered || (is_tombstone && (self.drop_tombstone)(uk)) {
                self.inner.next()?;
                continue;
            }
            self.in_operands = parsed.is_some_and(|p| p.kind.is_operand());
            return Ok(());
        }
        Ok(())
    }
}

impl<I: InternalIterator> InternalIterator for NewestVersions<'_, I> {
    fn valid(&self) -> bool {
        self.inner.valid()
    }
    fn key(&self) -> &[u8] {
        self.inner.key()
    }
    fn value(&self) -> &[u8] {
        self.inner.value()
    }
    fn next(&mut self) -> Result<()> {
        self.inner.next()?;
        self.settle()
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.has_last = false;
        self.in_operands = false;
        self.inner.seek(target)?;
        self.settle()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.has_last = false;
        self.in_operands = false;
        self.inner.seek_to_first()?;
        self.settle()
    }
}
