//! The internal iterator trait every sorted source implements (memtable, block, table,
//! level, merge), in the style of LevelDB's `Iterator` and mini-lsm's `StorageIterator`.
//!
//! Keys are encoded internal keys (see [`crate::key`]) and come in [`crate::key::compare_internal`]
//! order. Errors are returned from the moving methods; after an error the iterator is invalid.

use crate::Result;

/// A cursor over sorted internal-key/value entries.
pub trait InternalIterator: Send {
    /// True while the cursor is on an entry.
    fn valid(&self) -> bool;
    /// The current entry's encoded internal key. Only called while `valid()`.
    fn key(&self) -> &[u8];
    /// The current entry's value. Only called while `valid()`.
    fn value(&self) -> &[u8];
    /// Advances to the next entry.
    fn next(&mut self) -> Result<()>;
    /// Positions at the first entry whose internal key is `>= target`.
    fn seek(&mut self, target: &[u8]) -> Result<()>;
    /// Positions at the first entry.
    fn seek_to_first(&mut self) -> Result<()>;
}

impl<I: InternalIterator + ?Sized> InternalIterator for Box<I> {
    fn valid(&self) -> bool {
        (**self).valid()
    }
    fn key(&self) -> &[u8] {
        (**self).key()
    }
    fn value(&self) -> &[u8] {
        (**self).value()
    }
    fn next(&mut self) -> Result<()> {
        (**self).next()
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        (**self).seek(target)
    }
    fn seek_to_first(&mut self) -> Result<()> {
        (**self).seek_to_first()
    }
}
