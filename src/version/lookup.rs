//! Choosing the tables a point lookup must consult, without touching the tables.
//!
//! A lookup asks every L0 table whose key range covers the key (newest first), then the one
//! table per deeper level whose range covers it. Deciding that from the tables' own key
//! bounds would chase two pointers per comparison (the shared table, then its heap-allocated
//! key), and on a cold cache each is a miss. So every [`Version`] also keeps, per level, a
//! dense array of [`Fence`]s: the first 16 bytes of each table's smallest and largest user
//! key as big-endian integers. Almost every comparison is then one integer comparison in a
//! contiguous array; only when the key's 16-byte prefix equals a bound's does the full key
//! decide.
//!
//! Why the prefix is sound: `prefix(k)` is `k` zero-padded (or cut) to 16 bytes, read as a
//! big-endian `u128`. It is monotone (`a <= b` implies `prefix(a) <= prefix(b)`), so a strict
//! inequality between prefixes implies the same strict inequality between the keys; only
//! equal prefixes are ambiguous (`"ab"` and `"ab\0"` share one).

use std::cmp::Ordering;
use std::ops::ControlFlow;
use std::sync::Arc;

use super::set::{TableFile, Version};

/// The first 16 bytes of `key`, zero-padded, as a big-endian integer. See the module docs.
#[inline]
pub(crate) fn key_prefix(key: &[u8]) -> u128 {
    match key.first_chunk::<16>() {
        Some(head) => u128::from_be_bytes(*head),
        None => {
            let mut buf = [0u8; 16];
            buf[..key.len()].copy_from_slice(key);
            u128::from_be_bytes(buf)
        }
    }
}

/// One table's user-key range as prefixes of its bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fence {
    lo: u128,
    hi: u128,
}

impl Fence {
    pub(crate) fn of(t: &TableFile) -> Fence {
        Fence { lo: key_prefix(t.smallest_user_key()), hi: key_prefix(t.largest_user_key()) }
    }
}

/// A user key prepared for fence comparisons.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LookupKey<'a> {
    key: &'a [u8],
    prefix: u128,
}

impl<'a> LookupKey<'a> {
    pub(crate) fn new(key: &'a [u8]) -> Self {
        LookupKey { key, prefix: key_prefix(key) }
    }

    /// The table's largest key is below this key.
    #[inline]
    fn after(&self, f: &Fence, t: &TableFile) -> bool {
        match f.hi.cmp(&self.prefix) {
            Ordering::Less => true,
            Ordering::Greater => false,
            Ordering::Equal => t.largest_user_key() < self.key,
        }
    }

    /// The table's smallest key is above this key.
    #[inline]
    fn before(&self, f: &Fence, t: &TableFile) -> bool {
        match f.lo.cmp(&self.prefix) {
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

/// The number of fences whose upper prefix is below `prefix` (fences sorted by it).
///
/// A branch-free binary search: random keys make every comparison a coin toss, and a
/// mispredicted branch per step would cost more than the whole search otherwise does.
#[inline(always)]
fn first_not_below(fences: &[Fence], prefix: u128) -> usize {
    if fences.is_empty() {
        return 0;
    }
    let (mut base, mut size) = (0, fences.len());
    while size > 1 {
        let half = size / 2;
        // Arithmetic instead of `if`, so the step compiles to no branch.
        base += half * usize::from(fences[base + half].hi < prefix);
        size -= half;
    }
    base + usize::from(fences[base].hi < prefix)
}

impl Version {
    /// On a sorted level (≥ 1), the index of the one table whose range may hold the key.
    #[inline(always)]
    pub(crate) fn find_in_level(&self, level: usize, key: &LookupKey) -> Option<usize> {
        let (tables, fences) = (&self.levels[level], &self.fences[level]);
        // The first table whose largest key is not below the key: a search on prefixes alone,
        // then past any table whose largest key shares the key's prefix yet sorts below it.
        let mut i = first_not_below(fences, key.prefix);
        while i < tables.len() && fences[i].hi == key.prefix && key.after(&fences[i], &tables[i]) {
            i += 1;
        }
        (i < tables.len() && !key.before(&fences[i], &tables[i])).then_some(i)
    }

    /// Calls `f` with each table a point lookup of `key` must consult, in the order it must
    /// consult them, until `f` breaks. Cheap enough (a few dozen integer comparisons on
    /// arrays already in cache) that the read path walks it twice: once to prefetch, once to
    /// probe.
    #[inline]
    pub(crate) fn for_each_candidate<B>(
        &self,
        key: &[u8],
        mut f: impl FnMut(&Arc<TableFile>) -> ControlFlow<B>,
    ) -> ControlFlow<B> {
        let key = LookupKey::new(key);
        if let (Some(tables), Some(fences)) = (self.levels.first(), self.fences.first()) {
            for (t, fence) in tables.iter().zip(fences) {
                if key.inside(fence, t) {
                    f(t)?;
                }
            }
        }
        for level in 1..self.levels.len() {
            if let Some(i) = self.find_in_level(level, &key) {
                f(&self.levels[level][i])?;
            }
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive_cmp(a: &[u8], b: &[u8]) -> Ordering {
        a.cmp(b)
    }

    #[test]
    fn branch_free_search_matches_partition_point() {
        for n in 0..40u128 {
            // Upper bounds 10, 20, 20, 30, ... (duplicates included) against every probe.
            let fences: Vec<Fence> =
                (0..n).map(|i| Fence { lo: 0, hi: (i + 1).div_ceil(2) * 10 }).collect();
            for p in 0..(n * 5 + 20) {
                let want = fences.partition_point(|f| f.hi < p);
                assert_eq!(first_not_below(&fences, p), want, "n {n} prefix {p}");
            }
        }
    }

    #[test]
    fn prefix_is_monotone_and_strictly_decisive() {
        // Short keys, keys with zero bytes, keys sharing 16-byte heads, the empty key.
        let mut keys: Vec<Vec<u8>> = vec![vec![], vec![0], vec![0, 0], vec![1], vec![0xff]];
        for len in [1usize, 7, 15, 16, 17, 24] {
            for fill in [0u8, 1, 0x7f, 0x80, 0xff] {
                let mut k = vec![fill; len];
                keys.push(k.clone());
                k[len - 1] = k[len - 1].wrapping_add(1);
                keys.push(k.clone());
                k.push(0);
                keys.push(k);
            }
        }
        keys.push(b"0000000000000001".to_vec());
        keys.push(b"00000000000000010".to_vec());
        keys.push(b"0000000000000002".to_vec());
        for a in &keys {
            for b in &keys {
                let (pa, pb) = (key_prefix(a), key_prefix(b));
                match pa.cmp(&pb) {
                    Ordering::Equal => {}
                    strict => assert_eq!(naive_cmp(a, b), strict, "{a:?} vs {b:?}"),
                }
                if a <= b {
                    assert!(pa <= pb, "not monotone: {a:?} <= {b:?}");
                }
            }
        }
    }
}
