//! [`NewestVersions`]: the filter every table write passes its entries through.

use crate::iter::InternalIterator;
use crate::key::{self, ValueKind};
use crate::Result;

/// Decides, per user key, whether a tombstone may be dropped (nothing older lies below).
pub(crate) type TombstoneFilter<'a> = Box<dyn FnMut(&[u8]) -> bool + Send + 'a>;

/// Yields the newest version of each user key from a sorted source (the oldest versions are
/// shadowed and no reader can need them: readers and snapshots keep their own state alive).
/// Tombstones are dropped only where `drop_tombstone` says nothing older can lie below.
pub(crate) struct NewestVersions<'a, I: InternalIterator> {
    inner: I,
    last_user_key: Vec<u8>,
    has_last: bool,
    drop_tombstone: TombstoneFilter<'a>,
    /// Bytes (keys + values) of the input seen, for compaction accounting.
    pub input_bytes: u64,
}

impl<'a, I: InternalIterator> NewestVersions<'a, I> {
    pub(crate) fn new(inner: I, drop_tombstone: TombstoneFilter<'a>) -> Self {
        NewestVersions {
            inner,
            last_user_key: Vec::new(),
            has_last: false,
            drop_tombstone,
            input_bytes: 0,
        }
    }

    /// Skips forward to the next entry to keep.
    fn settle(&mut self) -> Result<()> {
        while self.inner.valid() {
            let k = self.inner.key();
            self.input_bytes += (k.len() + self.inner.value().len()) as u64;
            let uk = key::user_key(k);
            if self.has_last && uk == self.last_user_key.as_slice() {
                self.inner.next()?;
                continue;
            }
            self.last_user_key.clear();
            self.last_user_key.extend_from_slice(uk);
            self.has_last = true;
            let is_tombstone =
                key::parse_internal_key(k).is_some_and(|p| p.kind == ValueKind::Delete);
            if is_tombstone && (self.drop_tombstone)(uk) {
                self.inner.next()?;
                continue;
            }
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
        self.inner.seek(target)?;
        self.settle()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.has_last = false;
        self.inner.seek_to_first()?;
        self.settle()
    }
}
