//! A transaction's cursor: the snapshot's merged with the transaction's writes.

use std::collections::BTreeMap;
use std::ops::Bound;

use super::Item;
use crate::db::Cursor;
use crate::{Error, Result, Value};

// Named only by the rustdoc.
#[cfg(doc)]
use super::{Transaction, TransactionIter};

/// A positionable view of a transaction's range, from a [`Transaction`]'s
/// [`crate::Readable::cursor`]: the snapshot
/// (a [`Cursor`]) merged with the transaction's writes as they were when it was made. Each
/// move seeks the snapshot's cursor by key (a step costs a seek, not a link); after an error
/// the cursor is invalid until the next successful move.
pub struct TransactionCursor {
    pub(super) base: Cursor,
    /// The transaction's writes in the range (`None`: a delete).
    pub(super) own: BTreeMap<Vec<u8>, Option<Value>>,
    /// The transaction's range deletes in the keyspace.
    pub(super) ranges: Vec<(Vec<u8>, Vec<u8>)>,
    pub(super) current: Option<(Vec<u8>, Value)>,
}

impl std::fmt::Debug for TransactionCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransactionCursor").field("valid", &self.valid()).finish_non_exhaustive()
    }
}

/// The least key greater than `key`.
fn successor(key: &[u8]) -> Vec<u8> {
    let mut next = key.to_vec();
    next.push(0);
    next
}

/// The end of a range delete in `ranges` covering `key`.
fn covering<'r>(ranges: &'r [(Vec<u8>, Vec<u8>)], key: &[u8]) -> Option<&'r [u8]> {
    let over = ranges.iter().filter(|(s, e)| s.as_slice() <= key && key < e.as_slice());
    over.map(|(_, e)| e.as_slice()).max()
}

/// The start of a range delete in `ranges` covering `key`.
fn covered_from<'r>(ranges: &'r [(Vec<u8>, Vec<u8>)], key: &[u8]) -> Option<&'r [u8]> {
    let over = ranges.iter().filter(|(s, e)| s.as_slice() <= key && key < e.as_slice());
    over.map(|(s, _)| s.as_slice()).min()
}

impl TransactionCursor {
    /// The snapshot's entry the base cursor stands on, copied.
    fn base_entry(&self) -> Option<(Vec<u8>, Value)> {
        let key = self.base.key()?;
        Some((key.to_vec(), Value::copy_from_slice(self.base.value().unwrap_or_default())))
    }

    /// Positions at the first visible key at or after `from`.
    fn forward_from(&mut self, mut from: Vec<u8>) -> Result<()> {
        loop {
            self.base.seek(&from)?;
            // The snapshot's keys under a range delete of the transaction are skipped whole.
            while let Some(end) = self.base.key().and_then(|k| covering(&self.ranges, k)) {
                let end = end.to_vec();
                self.base.seek(end)?;
            }
            let own = self.own.range::<[u8], _>((Bound::Included(&from[..]), Bound::Unbounded));
            let own = own.map(|(o, v)| (o.clone(), v.clone())).next();
            let (key, value) = match (self.base.key(), own) {
                (Some(b), Some((o, v))) if o.as_slice() <= b => (o, v),
                (None, Some((o, v))) => (o, v),
                _ => {
                    self.current = self.base_entry();
                    return Ok(());
                }
            };
            match value {
                Some(v) => {
                    self.current = Some((key, v));
                    return Ok(());
                }
                None => from = successor(&key),
            }
        }
    }

    /// Positions at the last visible key before `to` (at it too if `inclusive`; `None`: from
    /// the end).
    fn backward_from(&mut self, mut to: Option<Vec<u8>>, mut inclusive: bool) -> Result<()> {
        loop {
            match &to {
                Some(k) => {
                    self.base.seek_for_prev(k)?;
                    if !inclusive && self.base.key() == Some(k.as_slice()) {
                        self.base.prev()?;
                    }
                }
                None => self.base.seek_to_last()?,
            }
            while let Some(start) = self.base.key().and_then(|k| covered_from(&self.ranges, k)) {
                let start = start.to_vec();
                self.base.seek_for_prev(&start)?;
                if self.base.key() == Some(start.as_slice()) {
                    self.base.prev()?;
                }
            }
            let upper = match (&to, inclusive) {
                (Some(k), true) => Bound::Included(&k[..]),
                (Some(k), false) => Bound::Excluded(&k[..]),
                (None, _) => Bound::Unbounded,
            };
            let own = self.own.range::<[u8], _>((Bound::Unbounded, upper));
            let own = own.map(|(o, v)| (o.clone(), v.clone())).next_back();
            let (key, value) = match (self.base.key(), own) {
                (Some(b), Some((o, v))) if o.as_slice() >= b => (o, v),
                (None, Some((o, v))) => (o, v),
                _ => {
                    self.current = self.base_entry();
                    return Ok(());
                }
            };
            match value {
                Some(v) => {
                    self.current = Some((key, v));
                    return Ok(());
                }
                None => (to, inclusive) = (Some(key), false),
            }
        }
    }

    /// The result of a move: on an error the cursor is left invalid.
    fn moved(&mut self, r: Result<()>) -> Result<()> {
        if r.is_err() {
            self.current = None;
        }
        r
    }

    /// Positions at the first key of the range.
    pub fn seek_to_first(&mut self) -> Result<()> {
        let r = self.forward_from(Vec::new());
        self.moved(r)
    }

    /// Positions at the last key of the range.
    pub fn seek_to_last(&mut self) -> Result<()> {
        let r = self.backward_from(None, true);
        self.moved(r)
    }

    /// Positions at the first key at or after `key`.
    pub fn seek(&mut self, key: impl AsRef<[u8]>) -> Result<()> {
        let r = self.forward_from(key.as_ref().to_vec());
        self.moved(r)
    }

    /// Positions at the last key at or before `key`.
    pub fn seek_for_prev(&mut self, key: impl AsRef<[u8]>) -> Result<()> {
        let r = self.backward_from(Some(key.as_ref().to_vec()), true);
        self.moved(r)
    }

    /// Moves to the next key; an invalid cursor stays invalid.
    #[allow(clippy::should_implement_trait)] // A move, not an `Iterator`: it yields nothing.
    pub fn next(&mut self) -> Result<()> {
        let Some((key, _)) = &self.current else { return Ok(()) };
        let r = self.forward_from(successor(key));
        self.moved(r)
    }

    /// Moves to the previous key; an invalid cursor stays invalid.
    pub fn prev(&mut self) -> Result<()> {
        let Some((key, _)) = &self.current else { return Ok(()) };
        let r = self.backward_from(Some(key.clone()), false);
        self.moved(r)
    }

    /// True while the cursor stands on a key.
    pub fn valid(&self) -> bool {
        self.current.is_some()
    }

    /// The key the cursor stands on.
    pub fn key(&self) -> Option<&[u8]> {
        self.current.as_ref().map(|(k, _)| k.as_slice())
    }

    /// The value of the key the cursor stands on.
    pub fn value(&self) -> Option<&[u8]> {
        self.current.as_ref().map(|(_, v)| v.as_ref())
    }

    /// An iterator over the entries from the one the cursor stands on forward, moving the
    /// cursor as it goes, as [`Cursor::entries`] does: when it is dropped the cursor stands
    /// on the first entry not yielded. Nothing on an invalid cursor; a failed step is yielded
    /// as the last item.
    ///
    /// ```
    /// # use bloomkv::Readable;
    /// # fn main() -> bloomkv::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::new())?;
    /// for k in ["a", "c", "d"] {
    ///     db.put(k, "db")?;
    /// }
    /// let mut tx = db.transaction();
    /// tx.put("b", "tx")?;
    /// tx.delete("c")?;
    /// let mut cursor = tx.cursor(..);
    /// cursor.seek_to_first()?;
    /// let keys = |page: Vec<bloomkv::Result<(Vec<u8>, bloomkv::Value)>>| -> bloomkv::Result<Vec<Vec<u8>>> {
    ///     page.into_iter().map(|kv| kv.map(|(k, _)| k)).collect()
    /// };
    /// assert_eq!(keys(cursor.entries().take(2).collect())?, [b"a", b"b"]);
    /// assert_eq!(cursor.key(), Some(&b"d"[..])); // the next page starts here
    /// assert_eq!(keys(cursor.entries_back().collect())?, [b"d", b"b", b"a"]);
    /// assert!(!cursor.valid());
    /// # Ok(()) }
    /// ```
    pub fn entries(&mut self) -> TransactionCursorEntries<'_> {
        TransactionCursorEntries { cursor: self, back: false, failed: None }
    }

    /// [`TransactionCursor::entries`] backward: the current entry, then the ones before it.
    pub fn entries_back(&mut self) -> TransactionCursorEntries<'_> {
        TransactionCursorEntries { cursor: self, back: true, failed: None }
    }
}

/// The entries of a [`TransactionCursor`] from where it stands, from
/// [`TransactionCursor::entries`] and [`TransactionCursor::entries_back`]:
/// `Result<(key, value)>` items, as a [`TransactionIter`] yields.
#[derive(Debug)]
pub struct TransactionCursorEntries<'c> {
    cursor: &'c mut TransactionCursor,
    back: bool,
    /// A step failed after the entry before it was yielded: the next item.
    failed: Option<Error>,
}

impl Iterator for TransactionCursorEntries<'_> {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        if let Some(e) = self.failed.take() {
            return Some(Err(e));
        }
        let entry = self.cursor.current.clone()?;
        let step = match self.back {
            false => self.cursor.next(),
            true => self.cursor.prev(),
        };
        // The failed step left the cursor invalid, so the error is followed by the end.
        self.failed = step.err();
        Some(Ok(entry))
    }
}

impl std::iter::FusedIterator for TransactionCursorEntries<'_> {}
