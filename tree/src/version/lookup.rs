//! Choosing the tables a point lookup must consult, without touching the tables.
//!
//! A lookup asks every L0 table whose key range covers the key (newest first), then the one
//! table per deeper level whose range covers it. Deciding that from the tables' own key
//! bounds would chase two pointers per comparison (the shared table, then its heap-allocated
//! key), and on a cold cache each is a miss. So every [`Version`] also keeps, per level, a
//! dense array of [`Fence`]s: the [`key_head`]es of each table's smallest and largest user
//! key, and for each sorted level its tables' upper bounds again as a `SortedHeads`, whose
//! 16-way nodes the search for the level's one candidate walks (see `crate::key_head`).
//! Almost every comparison is then one integer comparison in a contiguous array; only a head
//! equal to the key's sends the comparison to the whole keys. The version also hands
//! out each candidate's filter (a clone sharing the table's bit array), so a lookup can
//! prefetch and probe it without loading the table either.

use std::cmp::Ordering;
use std::ops::Bound;
use std::ops::ControlFlow;
use std::sync::Arc;

use super::set::{TableFile, Version};
use crate::filter::Filter;
use crate::key_head::key_head;

/// One table's user-key range as heads of its bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    lo: u128,
    hi: u128,
}

impl Fence {
    pub fn of(t: &TableFile) -> Fence {
        Fence { lo: key_head(t.smallest_user_key()), hi: key_head(t.largest_user_key()) }
    }

    pub fn hi(&self) -> u128 {
        self.hi
    }
}

/// A user key prepared for fence comparisons.
#[derive(Debug, Clone, Copy)]
pub struct LookupKey<'a> {
    key: &'a [u8],
    head: u128,
}

impl<'a> LookupKey<'a> {
    #[inline]
    pub fn new(key: &'a [u8]) -> Self {
        LookupKey { key, head: key_head(key) }
    }

    /// The table's largest key is below this key.
    #[inline]
    fn after(&self, f: &Fence, t: &TableFile) -> bool {
        match f.hi.cmp(&self.head) {
            Ordering::Less => true,
            Ordering::Greater => false,
            Ordering::Equal => t.largest_user_key() < self.key,
        }
    }

    /// The table's smallest key is above this key.
    #[inline]
    fn before(&self, f: &Fence, t: &TableFile) -> bool {
        match f.lo.cmp(&self.head) {
            Ordering::Greater => true,
            Ordering::Less => false,
            Ordering::Equal => t.smallest_user_key() > self.key,
        }
    }

    #[inline]
    fn inside(&self, f: &Fence, t: &TableFile) -> bool {
        !self.after(f, t) && !self.before(f, t)
    }
}

impl Version {
    /// Whether table `i` of `level` lies wholly below `lower`: a scan from there skips it.
    #[inline]
    pub fn below(&self, level: usize, i: usize, lower: Bound<&LookupKey>) -> bool {
        let (f, t) = (&self.fences[level][i], &self.levels[level][i]);
        match lower {
            Bound::Unbounded => false,
            Bound::Included(k) => k.after(f, t),
            Bound::Excluded(k) => match f.hi.cmp(&k.head) {
                Ordering::Less => true,
                Ordering::Greater => false,
                Ordering::Equal => t.largest_user_key() <= k.key,
            },
        }
    }

    /// Whether table `i` of `level` lies wholly above `upper`.
    #[inline]
    pub fn above(&self, level: usize, i: usize, upper: Bound<&LookupKey>) -> bool {
        let (f, t) = (&self.fences[level][i], &self.levels[level][i]);
        match upper {
            Bound::Unbounded => false,
            Bound::Included(k) => k.before(f, t),
            Bound::Excluded(k) => match f.lo.cmp(&k.head) {
                Ordering::Greater => true,
                Ordering::Less => false,
                Ordering::Equal => t.smallest_user_key() >= k.key,
            },
        }
    }

    /// On a sorted level (≥ 1), the index of the first table not wholly below `lower`,
    /// found as [`Version::find_in_level`] finds a lookup's table.
    #[inline]
    pub fn first_not_below(&self, level: usize, lower: Bound<&LookupKey>) -> usize {
        match lower {
            Bound::Unbounded => 0,
            Bound::Included(k) | Bound::Excluded(k) => {
                self.upper_bounds[level].partition(k.head, |i| self.below(level, i, lower))
            }
        }
    }

    /// On a sorted level (≥ 1), the index of the one table whose range may hold the key.
    #[inline(always)]
    pub fn find_in_level(&self, level: usize, key: &LookupKey) -> Option<usize> {
        let (tables, fences) = (&self.levels[level], &self.fences[level]);
        let i = self.upper_bounds[level]
            .partition(key.head, |i| tables[i].largest_user_key() < key.key);
        (i < tables.len() && !key.before(&fences[i], &tables[i])).then_some(i)
    }

    /// The most tables [`Version::for_each_candidate`] can name for one key: every L0 table
    /// and one per non-empty sorted level.
    pub fn max_candidates(&self) -> usize {
        let l0 = self.levels.first().map_or(0, Vec::len);
        l0 + self.sorted_in_use.len()
    }

    /// Calls `f` with each table a point lookup of `key` must consult, and that table's
    /// filter, in the order the lookup must consult them, until `f` breaks.
    #[inline]
    pub fn for_each_candidate<'a, B>(
        &'a self,
        key: &[u8],
        mut f: impl FnMut(&'a Arc<TableFile>, &'a Filter) -> ControlFlow<B>,
    ) -> ControlFlow<B> {
        let key = LookupKey::new(key);
        if let (Some(tables), Some(fences), Some(filters)) =
            (self.levels.first(), self.fences.first(), self.filters.first())
        {
            for ((t, fence), filter) in tables.iter().zip(fences).zip(filters) {
                if key.inside(fence, t) {
                    f(t, filter)?;
                }
            }
        }
        for &level in &self.sorted_in_use {
            if let Some(i) = self.find_in_level(level, &key) {
                f(&self.levels[level][i], &self.filters[level][i])?;
            }
        }
        ControlFlow::Continue(())
    }
}
