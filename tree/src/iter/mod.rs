//! The internal iterator traits every sorted source implements (memtable, block, table,
//! level, merge), in the style of LevelDB's `Iterator` and mini-lsm's `StorageIterator`.
//!
//! Keys are encoded internal keys (see [`crate::key`]) and come in [`crate::key::compare_internal`]
//! order. Errors are returned from the moving methods; after an error the iterator is invalid.
//!
//! Two traits, as `Iterator` and `DoubleEndedIterator` are two: [`InternalIterator`] moves
//! forward and is all the write path's filters (flush, compaction) can offer;
//! [`BidirectionalIterator`] adds backward movement, which every source has and scans need.
//!
//! The implementations, from the bottom up:
//!
//! | iterator | over | file |
//! |---|---|---|
//! | `BlockIter` | one block's prefix-compressed entries | `table/block_iter.rs` |
//! | `TableIter` | a table: the index picks the block | `table/iter.rs` |
//! | `MemTableIter` | a memtable's skip list | `memtable/mod.rs` |
//! | `LevelIter` | one sorted level, one table open at a time | `version/level_iter.rs` |
//! | [`merge::MergingIterator`] | any of the above, merged newest first | `iter/merge.rs` |
//!
//! Above them sit the engine's readers of a merged stream: the visible-version filter scans
//! read through (`db/visible.rs`) and the compaction iterator (`db/compaction_iter.rs`).

pub mod merge;

use std::cmp::Ordering;

use crate::key::compare_internal;
use crate::Result;

/// A cursor over sorted internal-key/value entries.
pub trait InternalIterator: Send {
    /// True while the cursor is on an entry.
    fn valid(&self) -> bool;
    /// The current entry's encoded internal key. Only called while `valid()`.
    fn key(&self) -> &[u8];
    /// The current entry's value. Only called while `valid()`.
    fn value(&self) -> &[u8];
    /// Advances to the next entry (nothing when not `valid()`).
    fn next(&mut self) -> Result<()>;
    /// Positions at the first entry whose internal key is `>= target`.
    fn seek(&mut self, target: &[u8]) -> Result<()>;
    /// Positions at the first entry.
    fn seek_to_first(&mut self) -> Result<()>;
}

/// An [`InternalIterator`] that can also move backward. Direction may change at any entry:
/// `next` then `prev` returns to the same entry.
pub trait BidirectionalIterator: InternalIterator {
    /// Steps back to the previous entry; invalid after the first (nothing when not
    /// `valid()`).
    fn prev(&mut self) -> Result<()>;
    /// Positions at the last entry.
    fn seek_to_last(&mut self) -> Result<()>;
    /// Positions at the last entry whose internal key is `<= target`.
    ///
    /// The default seeks forward and steps back once; a source that can search backward
    /// directly (the memtable) does.
    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        self.seek(target)?;
        if !self.valid() {
            return self.seek_to_last();
        }
        if compare_internal(self.key(), target) == Ordering::Greater {
            self.prev()?;
        }
        Ok(())
    }
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

impl<I: BidirectionalIterator + ?Sized> BidirectionalIterator for Box<I> {
    fn prev(&mut self) -> Result<()> {
        (**self).prev()
    }
    fn seek_to_last(&mut self) -> Result<()> {
        (**self).seek_to_last()
    }
    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        (**self).seek_for_prev(target)
    }
}

/// A model check any [`BidirectionalIterator`] can be put through: a random walk of seeks and
/// steps, compared after every move with a cursor over the sorted entries.
/// Checks every iterator runs against a model; for this crate's tests and the engine's.
#[cfg(test)]
pub mod testing {
    use proptest::prelude::*;

    use super::*;

    /// One move of a walk; seek targets are internal keys.
    #[derive(Debug, Clone)]
    pub enum Walk {
        Seek(Vec<u8>),
        SeekForPrev(Vec<u8>),
        First,
        Last,
        /// Several steps forward, so runs cross read-ahead and block boundaries.
        Next(usize),
        Prev(usize),
    }

    /// Walks with seek targets from `target`, mostly steps.
    pub fn walk_op(target: impl Strategy<Value = Vec<u8>> + Clone) -> impl Strategy<Value = Walk> {
        prop_oneof![
            2 => target.clone().prop_map(Walk::Seek),
            2 => target.prop_map(Walk::SeekForPrev),
            1 => Just(Walk::First),
            1 => Just(Walk::Last),
            4 => (1usize..5).prop_map(Walk::Next),
            4 => (1usize..5).prop_map(Walk::Prev),
            1 => (5usize..80).prop_map(Walk::Next),
            1 => (5usize..80).prop_map(Walk::Prev),
        ]
    }

    /// Runs `walk` on `it` and on a model cursor over `sorted` (strictly increasing
    /// internal keys with their values), checking the position after every step.
    pub fn check_walk(
        it: &mut dyn BidirectionalIterator,
        sorted: &[(Vec<u8>, Vec<u8>)],
        walk: &[Walk],
    ) -> std::result::Result<(), TestCaseError> {
        let first_at_or_after =
            |t: &[u8]| sorted.partition_point(|(k, _)| compare_internal(k, t).is_lt());
        let after = |t: &[u8]| sorted.partition_point(|(k, _)| compare_internal(k, t).is_le());
        // The model: an index into `sorted`, `None` when invalid.
        let mut at: Option<usize> = None;
        for op in walk {
            let steps = match op {
                Walk::Seek(t) => {
                    it.seek(t).unwrap();
                    at = Some(first_at_or_after(t)).filter(|&i| i < sorted.len());
                    1
                }
                Walk::SeekForPrev(t) => {
                    it.seek_for_prev(t).unwrap();
                    at = after(t).checked_sub(1);
                    1
                }
                Walk::First => {
                    it.seek_to_first().unwrap();
                    at = (!sorted.is_empty()).then_some(0);
                    1
                }
                Walk::Last => {
                    it.seek_to_last().unwrap();
                    at = sorted.len().checked_sub(1);
                    1
                }
                Walk::Next(n) | Walk::Prev(n) => *n,
            };
            for step in 0..steps {
                match op {
                    Walk::Next(_) => {
                        it.next().unwrap();
                        at = at.map(|i| i + 1).filter(|&i| i < sorted.len());
                    }
                    Walk::Prev(_) => {
                        it.prev().unwrap();
                        at = at.and_then(|i| i.checked_sub(1));
                    }
                    _ => {}
                }
                match at {
                    Some(i) => {
                        prop_assert!(
                            it.valid(),
                            "{:?} step {}: expected {:?}",
                            op,
                            step,
                            sorted[i]
                        );
                        prop_assert_eq!(it.key(), &sorted[i].0[..], "{:?} step {}", op, step);
                        prop_assert_eq!(it.value(), &sorted[i].1[..], "{:?} step {}", op, step);
                    }
                    None => {
                        prop_assert!(!it.valid(), "{:?} step {}: expected the end", op, step)
                    }
                }
            }
        }
        Ok(())
    }
}
