//! A transaction's iterator: the snapshot's merged with the transaction's writes.

use std::collections::VecDeque;

use super::{hidden, Item};
use crate::db::DbIterator;
use crate::{Result, Value};

// Named only by the rustdoc.
#[cfg(doc)]
use super::Transaction;

/// An iterator over a transaction's view of a range, from a [`Transaction`]'s (or a
/// [`crate::TransactionKeyspace`]'s) [`crate::Readable::range`] and `prefix`: the snapshot merged with the transaction's writes. Double-ended,
/// like [`DbIterator`]; after an error it yields nothing more.
pub struct TransactionIter {
    pub(super) base: DbIterator,
    /// Entries taken from the snapshot's front (0) and back (1) end, not yet yielded.
    pub(super) slots: [Option<(Vec<u8>, Value)>; 2],
    pub(super) base_done: bool,
    /// The transaction's writes in the range, in key order (`None`: a delete).
    pub(super) own: VecDeque<(Vec<u8>, Option<Value>)>,
    /// The transaction's range deletes in the keyspace.
    pub(super) ranges: Vec<(Vec<u8>, Vec<u8>)>,
    pub(super) done: bool,
}

impl std::fmt::Debug for TransactionIter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransactionIter").field("done", &self.done).finish_non_exhaustive()
    }
}

impl TransactionIter {
    /// Makes sure the snapshot entry nearest end `end` (0: front, 1: back) is in a slot, and
    /// says which slot holds it: the other one once the snapshot's two ends have met.
    fn fill(&mut self, end: usize) -> Result<Option<usize>> {
        while self.slots[end].is_none() && !self.base_done {
            let item = match end {
                0 => self.base.next(),
                _ => self.base.next_back(),
            };
            match item {
                None => self.base_done = true,
                Some(Err(e)) => return Err(e),
                Some(Ok((k, v))) if !hidden(&self.ranges, &k) => self.slots[end] = Some((k, v)),
                Some(Ok(_)) => {}
            }
        }
        Ok([end, 1 - end].into_iter().find(|&i| self.slots[i].is_some()))
    }

    fn step(&mut self, end: usize) -> Option<Item> {
        if self.done {
            return None;
        }
        loop {
            let slot = match self.fill(end) {
                Ok(slot) => slot,
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            };
            let own = match end {
                0 => self.own.front(),
                _ => self.own.back(),
            };
            let base = slot.and_then(|i| self.slots[i].as_ref()).map(|(k, _)| k);
            // Which of the two entries nearest this end comes first; on a tie the
            // transaction's write replaces the snapshot's entry.
            let (take_base, take_own) = match (base, own) {
                (None, None) => {
                    self.done = true;
                    return None;
                }
                (Some(_), None) => (true, false),
                (None, Some(_)) => (false, true),
                (Some(b), Some((o, _))) => match (b.as_slice().cmp(o.as_slice()), end) {
                    (std::cmp::Ordering::Equal, _) => (true, true),
                    (std::cmp::Ordering::Less, 0) | (std::cmp::Ordering::Greater, 1) => {
                        (true, false)
                    }
                    _ => (false, true),
                },
            };
            let from_base = match take_base {
                true => slot.and_then(|i| self.slots[i].take()),
                false => None,
            };
            if !take_own {
                return from_base.map(Ok);
            }
            let taken = match end {
                0 => self.own.pop_front(),
                _ => self.own.pop_back(),
            };
            if let Some((k, Some(v))) = taken {
                return Some(Ok((k, v)));
            }
        }
    }
}

impl Iterator for TransactionIter {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        self.step(0)
    }
}

impl DoubleEndedIterator for TransactionIter {
    fn next_back(&mut self) -> Option<Item> {
        self.step(1)
    }
}

impl std::iter::FusedIterator for TransactionIter {}
