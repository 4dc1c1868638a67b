//! [`ReadView`]: what a read reads (the state, then the sequence number) and the engine's
//! entry to the tree's point-read walk (`bloomkv_tree::read::search`), which it times by
//! the database's clock and counts in the shared statistics; and [`ReadSource`], the reads
//! of [`crate::Readable`] for `Db`, `Keyspace` and `Snapshot`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use arc_swap::Guard;

use super::{Cursor, DbInner, DbIterator, DbState, Tree};
use crate::clock::{Clock, FixedClock};
use crate::db::readable::Bounds;
use crate::key::SeqNo;
use crate::version::edit::{KeyspaceId, DEFAULT_KEYSPACE};
use crate::{Error, Result, Value};
use bloomkv_tree::read::search::{search, search_stored, Stored, Unobserved};
use bloomkv_tree::read::{multi_get, ReadTally};

/// What a read reads: the engine state and the sequence number, loaded in that order by
/// [`DbInner::read_view`], the one place that builds it. Every table and immutable memtable
/// of a state holds only writes published before the state was installed, so a sequence
/// number loaded afterwards is at or above all of them; the other order could pair an old
/// sequence number with a newer state whose compaction dropped the version the read should
/// see (DESIGN.md, "Reading at a sequence number").
///
/// `get`, `multi_get` and `trace` read through one for the length of a call, holding the
/// state by an `ArcSwap` guard: no shared reference count is touched per lookup. A snapshot
/// keeps one ([`ReadView::into_owned`]).
pub(crate) struct ReadView {
    state: Guard<Arc<DbState>>,
    seq: SeqNo,
    /// A kept view's (a snapshot's, a transaction's) time, which its reads judge expiry at;
    /// `None`: the clock when each read happens.
    time: Option<u64>,
}

impl DbInner {
    /// A view of the database as it is now: the state, then the sequence number.
    #[inline]
    pub(crate) fn read_view(&self) -> ReadView {
        let state = self.state.load();
        let seq = self.visible_seq.load(Ordering::Acquire);
        ReadView { state, seq, time: None }
    }
}

impl DbInner {
    /// [`DbInner::read_view`] for a read of several keys at one sequence number
    /// (`multi_get`): it waits for the single writes still being inserted at or below the
    /// number (`db/in_flight.rs`), so its answers are those of one moment, as a snapshot's.
    pub(crate) fn read_view_of_many(&self) -> ReadView {
        let view = self.read_view();
        self.in_flight.wait_through(view.seq());
        view
    }

    /// Keyspace `keyspace`'s tree (unless it was dropped) and the sequence number to read it
    /// at, for an iterator or cursor to keep: the tree of the state current when the number
    /// was loaded. A memtable switch between the two loads would leave writes numbered at or
    /// below the sequence number in a memtable the view's state does not have: harmless for
    /// one read, which sees a consistent prefix of the history, but a kept view would be
    /// labelled with a sequence number it does not hold (a checkpoint would record it as its
    /// last), and a transaction's check would take those writes for ones its snapshot saw.
    pub(crate) fn stable_tree(&self, keyspace: KeyspaceId) -> (Option<Arc<Tree>>, SeqNo) {
        let view = self.stable_view();
        // As in `stable_read_view`.
        self.in_flight.wait_through(view.seq());
        (view.state().tree(keyspace).cloned(), view.seq())
    }

    /// A view whose state was current when its sequence number was loaded: no state was
    /// stored between the two loads, as `state_changes`, the same before the first and after
    /// the second (and even: no store under way), says. A store whose new state a write
    /// numbered at or below the number went into bumps the count before it, and the
    /// number's Acquire load sees that write's publication, so the second read of the count
    /// sees the bump.
    fn stable_view(&self) -> ReadView {
        loop {
            let before = self.state_changes.load(Ordering::Acquire);
            let view = self.read_view();
            if before % 2 == 0 && self.state_changes.load(Ordering::Acquire) == before {
                return view;
            }
            std::hint::spin_loop();
        }
    }

    /// A view to keep (a snapshot's, a transaction's), whose state is the one current when
    /// its sequence number was loaded: see [`DbInner::stable_tree`]. It judges expiry at the
    /// time it was taken, so that its reads are repeatable as the clock moves: what it saw
    /// live it keeps seeing (its files are pinned, so no compaction takes it away).
    pub(crate) fn stable_read_view(&self) -> ReadView {
        let view = self.stable_view();
        // A write below the number may still be going into the state's memtable.
        self.in_flight.wait_through(view.seq());
        let mut view = view.into_owned();
        view.time = Some(self.clock.now());
        view
    }
}

// Only snapshots clone views, so a clone owns its `Arc`, as `into_owned` makes it.
impl Clone for ReadView {
    fn clone(&self) -> Self {
        ReadView {
            state: Guard::from_inner(Arc::clone(&self.state)),
            seq: self.seq,
            time: self.time,
        }
    }
}

impl ReadView {
    /// The same view, to keep for as long as a snapshot lives. `ArcSwap` lends a fast guard
    /// from a few slots per thread, and a guard held long would keep its slot; this one owns
    /// its `Arc` instead.
    pub(crate) fn into_owned(self) -> ReadView {
        let state = Guard::from_inner(Guard::into_inner(self.state));
        ReadView { state, seq: self.seq, time: self.time }
    }

    /// The time a kept view judges expiry at (see [`DbInner::stable_read_view`]).
    pub(crate) fn time(&self) -> Option<u64> {
        self.time
    }

    /// The clock the view's reads judge expiry by.
    fn clock<'a>(&self, inner: &'a DbInner, fixed: &'a mut FixedClock) -> &'a dyn Clock {
        match self.time {
            Some(t) => {
                *fixed = FixedClock(t);
                fixed
            }
            None => &*inner.clock,
        }
    }

    /// The state the view reads.
    pub(crate) fn state(&self) -> &Arc<DbState> {
        &self.state
    }

    /// The sequence number the view reads at.
    pub(crate) fn seq(&self) -> SeqNo {
        self.seq
    }

    /// The newest value of `key` in `tree` (one of this view's trees) at the view's sequence
    /// number.
    pub(crate) fn get(&self, inner: &DbInner, tree: &Tree, key: &[u8]) -> Result<Option<Value>> {
        let mut tally = ReadTally { lookups: 1, ..ReadTally::default() };
        let mut fixed = FixedClock(0);
        let clock = self.clock(inner, &mut fixed);
        let result = search(tree, key, self.seq, clock, &mut tally, &mut Unobserved);
        inner.counters.record_gets(&tally);
        result
    }

    /// [`ReadView::get`], a value in a blob file left unread (`Readable::get_range`).
    pub(crate) fn get_stored(
        &self,
        inner: &DbInner,
        tree: &Tree,
        key: &[u8],
    ) -> Result<Option<Stored>> {
        let mut tally = ReadTally { lookups: 1, ..ReadTally::default() };
        let mut fixed = FixedClock(0);
        let clock = self.clock(inner, &mut fixed);
        let result = search_stored(tree, key, self.seq, clock, &mut tally);
        inner.counters.record_gets(&tally);
        result
    }

    /// The newest value of each of `keys` in `tree` (one of this view's trees), in order:
    /// the answers of [`ReadView::get`] for each, found together (see `db::multi_get`).
    pub(crate) fn multi_get<K: AsRef<[u8]>>(
        &self,
        inner: &DbInner,
        tree: &Tree,
        keys: &[K],
    ) -> Result<Vec<Option<Value>>> {
        let mut tally = ReadTally { lookups: keys.len() as u64, ..ReadTally::default() };
        let mut fixed = FixedClock(0);
        let clock = self.clock(inner, &mut fixed);
        let result =
            multi_get::lookup_all(tree, keys, self.seq, clock, &mut tally, &inner.caches.reads);
        inner.counters.record_gets(&tally);
        result
    }
}

/// What the reads of a `Db`, a `Keyspace` or a `Snapshot` read: one keyspace of one
/// database, through a view taken for each read (`kept: None`) or the snapshot's. The three
/// differ in nothing else, so their [`crate::Readable`] primitives are these.
#[derive(Clone, Copy)]
pub(crate) struct ReadSource<'a> {
    pub inner: &'a Arc<DbInner>,
    pub keyspace: KeyspaceId,
    /// The keyspace's name, for [`Error::KeyspaceDropped`].
    pub name: &'a str,
    pub kept: Option<&'a ReadView>,
}

impl ReadSource<'_> {
    fn dropped(&self) -> Error {
        Error::KeyspaceDropped { name: self.name.to_string() }
    }

    /// The keyspace's tree in `state`. The default keyspace is always there, first: a
    /// constant for `Db`, so its reads skip the search.
    #[inline]
    fn tree<'s>(&self, state: &'s DbState) -> Result<&'s Arc<Tree>> {
        match self.keyspace {
            DEFAULT_KEYSPACE => Ok(state.default_tree()),
            id => state.tree(id).ok_or_else(|| self.dropped()),
        }
    }

    #[inline]
    pub fn get(self, key: &[u8]) -> Result<Option<Value>> {
        self.inner.check_open()?;
        match self.kept {
            Some(view) => view.get(self.inner, self.tree(view.state())?, key),
            None => {
                let view = self.inner.read_view();
                view.get(self.inner, self.tree(view.state())?, key)
            }
        }
    }

    pub fn get_stored(self, key: &[u8]) -> Result<Option<Stored>> {
        self.inner.check_open()?;
        match self.kept {
            Some(view) => view.get_stored(self.inner, self.tree(view.state())?, key),
            None => {
                let view = self.inner.read_view();
                view.get_stored(self.inner, self.tree(view.state())?, key)
            }
        }
    }

    #[inline]
    pub fn multi_get<K: AsRef<[u8]>>(self, keys: &[K]) -> Result<Vec<Option<Value>>> {
        self.inner.check_open()?;
        match self.kept {
            Some(view) => view.multi_get(self.inner, self.tree(view.state())?, keys),
            None => {
                let view = self.inner.read_view_of_many();
                view.multi_get(self.inner, self.tree(view.state())?, keys)
            }
        }
    }

    /// The tree an iterator or cursor reads (its failure to report at the first step), the
    /// sequence number, and the time to judge expiry at (`None`: the clock's when it is
    /// made). Made now, it reads what a snapshot taken now would, without making one (the
    /// iterator keeps the tree alive itself).
    fn scan_view(self) -> (Result<Arc<Tree>>, SeqNo, Option<u64>) {
        match self.kept {
            Some(view) => (self.tree(view.state()).cloned(), view.seq(), view.time()),
            None => {
                let (tree, seq) = self.inner.stable_tree(self.keyspace);
                (tree.ok_or_else(|| self.dropped()), seq, None)
            }
        }
    }

    #[inline]
    pub fn iter(self, (start, end): crate::db::readable::BoundsRef<'_>) -> DbIterator {
        let (tree, seq, time) = self.scan_view();
        DbIterator::new(self.inner.clone(), tree, seq, start, end).judged_at(time)
    }

    pub fn cursor(self, (start, end): Bounds) -> Cursor {
        let (tree, seq, time) = self.scan_view();
        Cursor::new(self.inner.clone(), tree, seq, start, end).judged_at(time)
    }

    /// Answered as of one view: a snapshot's, or one taken now as a snapshot would be.
    pub fn prefixes_exist<P: AsRef<[u8]>>(self, prefixes: &[P]) -> Result<Vec<bool>> {
        let Some(view) = self.kept else {
            let view = self.inner.stable_read_view();
            return ReadSource { kept: Some(&view), ..self }.prefixes_exist(prefixes);
        };
        self.inner.check_open()?;
        let now = view.time().unwrap_or_else(|| self.inner.clock.now());
        let (tree, counters) = (self.tree(view.state())?, &self.inner.counters);
        super::scan::prefixes_exist(tree, view.seq(), prefixes, counters, now)
    }
}

/// [`crate::Readable`] for types with a `source(&self) -> ReadSource<'_>`.
macro_rules! readable_by_source {
    ($($ty:ty),*) => {$(
        impl crate::db::readable::sealed::Sealed for $ty {
            #[inline]
            fn read_one(
                &self,
                _: crate::db::readable::sealed::Token,
                key: &[u8],
            ) -> Result<Option<Value>> {
                self.source().get(key)
            }

            fn read_stored(
                &self,
                _: crate::db::readable::sealed::Token,
                key: &[u8],
            ) -> Result<Option<Stored>> {
                self.source().get_stored(key)
            }

            #[inline]
            fn read_many<K: AsRef<[u8]>>(
                &self,
                _: crate::db::readable::sealed::Token,
                keys: &[K],
            ) -> Result<Vec<Option<Value>>> {
                self.source().multi_get(keys)
            }

            fn open_iter(&self, _: crate::db::readable::sealed::Token, bounds: crate::db::readable::BoundsRef<'_>) -> <Self as crate::Readable>::Iter {
                self.source().iter(bounds)
            }

            fn open_cursor(&self, _: crate::db::readable::sealed::Token, bounds: Bounds) -> <Self as crate::Readable>::Cursor {
                self.source().cursor(bounds)
            }

            fn probe_prefixes<P: AsRef<[u8]>>(
                &self,
                _: crate::db::readable::sealed::Token,
                prefixes: &[P],
            ) -> Result<Vec<bool>> {
                self.source().prefixes_exist(prefixes)
            }
        }

        impl crate::Readable for $ty {
            type Iter = DbIterator;
            type Cursor = Cursor;
        }
    )*};
}

readable_by_source!(super::Db, super::Keyspace, super::Snapshot);
