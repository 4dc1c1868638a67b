//! [`Cursor`]: a positionable view for callers that page through data, like RocksDB's raw
//! iterator.

use std::ops::Bound;
use std::sync::Arc;

use super::scan::visible_or_failed;
use super::{DbInner, Tree};
use crate::key::SeqNo;
use crate::Result;
use bloomkv_tree::read::visible::VisibleIter;

/// A cursor over the keys of a range, from [`crate::Readable::cursor`] of a
/// `Db`, a `Keyspace` or a `Snapshot`, that seeks and steps both ways.
///
/// Where a [`crate::DbIterator`] runs through a range once, a cursor is positioned and moved:
/// [`seek`](Cursor::seek) to the first key at or after a key, [`seek_for_prev`](Cursor::seek_for_prev)
/// to the last key at or before it, [`seek_to_first`](Cursor::seek_to_first) and
/// [`seek_to_last`](Cursor::seek_to_last), then [`next`](Cursor::next) and
/// [`prev`](Cursor::prev), changing direction whenever it likes. It stands on a key or is
/// invalid — before the first key or after the last, or after an error; [`key`](Cursor::key)
/// and [`value`](Cursor::value) are `None` then.
///
/// Like a snapshot, it sees the database as of its creation, whatever is written later,
/// holds the memtables and files it reads alive until dropped, and sees only the keys of
/// the range it was made with: seeking outside the range lands on the range's nearest end.
///
/// **Errors.** Every method that moves returns `Result<()>`. A failure (a damaged table,
/// [`crate::Error::Closed`] after the database was closed) leaves the cursor invalid; a
/// later seek may try again. `next` and `prev` on an invalid cursor do nothing: seek first.
///
/// **Cost.** A seek positions every source (memtables, L0 tables, one table per level).
/// Steps forward are as cheap as a [`crate::DbIterator`]'s. Steps backward cost more: a
/// table block is decoded from its restart point for each entry, and a key's value is
/// copied. Changing direction repositions every source once.
///
/// ```
/// use bloomkv::Readable;
/// # fn main() -> bloomkv::Result<()> {
/// let dir = tempfile::tempdir().unwrap();
/// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::new())?;
/// for i in 0..10 {
///     db.put(format!("item:{i:02}"), format!("value {i}"))?;
/// }
/// let mut cursor = db.cursor(..);
///
/// // A page of three keys from "item:04" on.
/// cursor.seek("item:04")?;
/// let mut page = Vec::new();
/// while let (Some(key), true) = (cursor.key(), page.len() < 3) {
///     page.push(key.to_vec());
///     cursor.next()?;
/// }
/// assert_eq!(page, [b"item:04", b"item:05", b"item:06"]);
///
/// // Back to the previous page's last key, wherever the cursor was.
/// cursor.seek_for_prev("item:03~")?;
/// assert_eq!(cursor.key(), Some(&b"item:03"[..]));
/// cursor.prev()?;
/// assert_eq!(cursor.value(), Some(&b"value 2"[..]));
///
/// // Off either end, it is invalid until the next seek.
/// cursor.seek_to_first()?;
/// cursor.prev()?;
/// assert!(!cursor.valid());
/// cursor.seek_to_last()?;
/// assert_eq!(cursor.key(), Some(&b"item:09"[..]));
/// # Ok(()) }
/// ```
pub struct Cursor {
    inner: Arc<DbInner>,
    _state: Arc<Tree>,
    /// Returned by every move: why the cursor cannot read (its keyspace was dropped).
    unreadable: Option<crate::Error>,
    view: VisibleIter,
}

impl std::fmt::Debug for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cursor").field("valid", &self.view.valid()).finish_non_exhaustive()
    }
}

impl Cursor {
    pub(crate) fn new(
        inner: Arc<DbInner>,
        state: Result<Arc<Tree>>,
        seq: SeqNo,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
    ) -> Self {
        let now = crate::clock::ExpiryTime::of(&inner.clock);
        let (state, unreadable, view) =
            visible_or_failed(state, seq, start, end, &inner.counters, now);
        Cursor { inner, _state: state, unreadable, view }
    }

    /// The same cursor, judging expiry at `time` if given (a kept view's time); before its
    /// first move.
    pub(crate) fn judged_at(mut self, time: Option<u64>) -> Self {
        if let Some(t) = time {
            self.view.judge_at(t);
        }
        self
    }

    /// Runs a move, after checking that the database is open; any failure leaves the
    /// cursor invalid.
    fn apply(&mut self, how: impl FnOnce(&mut VisibleIter) -> Result<()>) -> Result<()> {
        let r = self.inner.check_open().and_then(|()| match &self.unreadable {
            Some(e) => Err(e.clone()),
            None => how(&mut self.view),
        });
        if r.is_err() {
            self.view.invalidate();
        }
        r
    }

    /// Positions at the first key of the range.
    pub fn seek_to_first(&mut self) -> Result<()> {
        self.apply(VisibleIter::seek_to_first)
    }

    /// Positions at the last key of the range.
    pub fn seek_to_last(&mut self) -> Result<()> {
        self.apply(VisibleIter::seek_to_last)
    }

    /// Positions at the first key `>= key` (at the range's first key if `key` lies before
    /// the range); invalid if there is none in the range.
    pub fn seek(&mut self, key: impl AsRef<[u8]>) -> Result<()> {
        self.apply(|v| v.seek(key.as_ref()))
    }

    /// Positions at the last key `<= key` (at the range's last key if `key` lies after the
    /// range); invalid if there is none in the range.
    pub fn seek_for_prev(&mut self, key: impl AsRef<[u8]>) -> Result<()> {
        self.apply(|v| v.seek_for_prev(key.as_ref()))
    }

    /// Moves to the next key; invalid after the range's last key. Does nothing on an
    /// invalid cursor.
    #[allow(clippy::should_implement_trait)] // A move, not an `Iterator`: it yields nothing.
    pub fn next(&mut self) -> Result<()> {
        self.apply(VisibleIter::next)
    }

    /// Moves to the previous key; invalid before the range's first key. Does nothing on an
    /// invalid cursor.
    pub fn prev(&mut self) -> Result<()> {
        self.apply(VisibleIter::prev)
    }

    /// True while the cursor stands on a key.
    pub fn valid(&self) -> bool {
        self.view.valid()
    }

    /// The key the cursor stands on, or `None` when it is invalid.
    pub fn key(&self) -> Option<&[u8]> {
        self.view.valid().then(|| self.view.key())
    }

    /// The value of the key the cursor stands on, or `None` when it is invalid.
    pub fn value(&self) -> Option<&[u8]> {
        self.view.valid().then(|| self.view.value())
    }

    /// An iterator over the entries from the one the cursor stands on forward, moving the
    /// cursor as it goes: it yields the current entry and then steps, so when it is dropped
    /// the cursor stands on the first entry not yielded, where the next page begins. Nothing
    /// on an invalid cursor (seek first); a failed step is yielded as the last item.
    ///
    /// `Cursor` is not itself an [`Iterator`]: its [`next`](Cursor::next) is a move that
    /// yields nothing, and one name with two meanings would mislead.
    ///
    /// ```
    /// # use bloomkv::Readable;
    /// # fn main() -> bloomkv::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::new())?;
    /// for k in ["a", "b", "c", "d", "e"] {
    ///     db.put(k, "v")?;
    /// }
    /// let mut cursor = db.cursor(..);
    /// cursor.seek("b")?;
    /// let keys = |page: Vec<bloomkv::Result<(Vec<u8>, bloomkv::Value)>>| -> bloomkv::Result<Vec<Vec<u8>>> {
    ///     page.into_iter().map(|kv| kv.map(|(k, _)| k)).collect()
    /// };
    /// assert_eq!(keys(cursor.entries().take(2).collect())?, [b"b", b"c"]);
    /// assert_eq!(cursor.key(), Some(&b"d"[..])); // the next page starts here
    /// assert_eq!(keys(cursor.entries().collect())?, [b"d", b"e"]);
    /// assert!(!cursor.valid());
    /// cursor.seek_to_last()?;
    /// assert_eq!(keys(cursor.entries_back().collect())?, [b"e", b"d", b"c", b"b", b"a"]);
    /// # Ok(()) }
    /// ```
    pub fn entries(&mut self) -> CursorEntries<'_> {
        CursorEntries { cursor: self, back: false, failed: None }
    }

    /// [`Cursor::entries`] backward: the current entry, then the ones before it.
    pub fn entries_back(&mut self) -> CursorEntries<'_> {
        CursorEntries { cursor: self, back: true, failed: None }
    }
}

/// The entries of a [`Cursor`] from where it stands, from [`Cursor::entries`] and
/// [`Cursor::entries_back`]: `Result<(key, value)>` items, as a [`crate::DbIterator`]
/// yields.
#[derive(Debug)]
pub struct CursorEntries<'c> {
    cursor: &'c mut Cursor,
    back: bool,
    /// A step failed after the entry before it was yielded: the next item.
    failed: Option<crate::Error>,
}

impl Iterator for CursorEntries<'_> {
    type Item = Result<(Vec<u8>, crate::Value)>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.failed.take() {
            return Some(Err(e));
        }
        let entry =
            (self.cursor.key()?.to_vec(), crate::Value::copy_from_slice(self.cursor.value()?));
        let step = match self.back {
            false => self.cursor.next(),
            true => self.cursor.prev(),
        };
        // The failed step left the cursor invalid, so the error is followed by the end.
        self.failed = step.err();
        Some(Ok(entry))
    }
}

impl std::iter::FusedIterator for CursorEntries<'_> {}
