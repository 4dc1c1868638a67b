//! 16-byte key heads: searching sorted keys with integer comparisons.
//!
//! A key's *head* is its first 16 bytes as an integer. (Not called a prefix: in bloomkv a
//! prefix is what `Db::prefix` scans by.)
//!
//! The read path searches sorted keys twice per table it consults — the version's table
//! bounds, then the table's index. Comparing byte strings costs a `memcmp` call and a pointer
//! chase per step; comparing integers held in a dense array costs one instruction. So those
//! structures keep, beside each key, its [`key_head`]: the first 16 bytes of the user key,
//! zero-padded, read as a big-endian `u128`.
//!
//! The head is monotone (`a <= b` implies `head(a) <= head(b)`), so a strict inequality
//! between heads implies the same strict inequality between the user keys — and between
//! internal keys, which order by user key first. Only equal heads are ambiguous (`"ab"`
//! and `"ab\0"` share one; so do all keys with a common 16-byte head), and only those are
//! settled by comparing whole keys.

use std::ops::ControlFlow;

/// The first 16 bytes of `user_key`, zero-padded, as a big-endian integer.
#[inline]
pub fn key_head(user_key: &[u8]) -> u128 {
    match user_key.first_chunk::<16>() {
        Some(head) => u128::from_be_bytes(*head),
        None => {
            let mut buf = [0u8; 16];
            buf[..user_key.len()].copy_from_slice(user_key);
            u128::from_be_bytes(buf)
        }
    }
}

/// Given `lo`, the first of `n` sorted heads not below `target`, the first whole key not
/// below the target: `lo` itself unless heads equal to the target's start there.
#[inline(always)]
fn settle_ties(
    lo: usize,
    n: usize,
    head_of: impl Fn(usize) -> u128,
    target: u128,
    is_below: impl Fn(usize) -> bool,
) -> usize {
    if lo == n || head_of(lo) != target {
        return lo;
    }
    if lo + 1 == n || head_of(lo + 1) != target {
        return lo + usize::from(is_below(lo));
    }
    // A run of ties: find its end on heads, then search it on whole keys.
    let hi = first_where(lo + 1, n, |i| head_of(i) > target);
    let (mut a, mut b) = (lo, hi);
    while a < b {
        let mid = a + (b - a) / 2;
        if is_below(mid) {
            a = mid + 1;
        } else {
            b = mid;
        }
    }
    a
}

/// Sorted heads arranged for search: the heads themselves, and above them a few short levels
/// of separators, each level holding the largest head of every [`SortedHeads::FANOUT`]
/// consecutive entries of the level below (an implicit B+-tree).
///
/// A binary search over `n` heads is `log2 n` *dependent* steps: each load must arrive
/// before the next address is known, so every step pays the full latency of wherever the
/// array sits (L2 for a level's fences during a batch of lookups, DRAM for a cold table
/// index). Here a search is `log16 n` steps, and within a step the sixteen comparisons are
/// independent loads from four adjacent cache lines, which the core issues together. For
/// the 370 tables of a 50M-key tree's last level that is 3 steps instead of 9.
#[derive(Debug, Clone, Default)]
pub struct SortedHeads {
    heads: Vec<u128>,
    /// The separator levels, concatenated, the top (at most `FANOUT` entries) first.
    upper: Vec<u128>,
    /// `(start, len)` in `upper` of each separator level, top first.
    levels: Vec<(usize, usize)>,
}

impl SortedHeads {
    /// Entries per node: four cache lines of `u128` heads.
    const FANOUT: usize = 16;

    /// Arranges `heads`, which must be sorted (ascending, ties allowed).
    pub fn new(heads: Vec<u128>) -> Self {
        debug_assert!(heads.windows(2).all(|w| w[0] <= w[1]));
        let mut bottom_up: Vec<Vec<u128>> = Vec::new();
        let mut below = &heads;
        while below.len() > Self::FANOUT {
            let level: Vec<u128> = below.chunks(Self::FANOUT).map(|c| c[c.len() - 1]).collect();
            bottom_up.push(level);
            below = bottom_up.last().expect("just pushed");
        }
        let mut upper = Vec::with_capacity(bottom_up.iter().map(Vec::len).sum());
        let mut levels = Vec::with_capacity(bottom_up.len());
        for level in bottom_up.iter().rev() {
            levels.push((upper.len(), level.len()));
            upper.extend_from_slice(level);
        }
        SortedHeads { heads, upper, levels }
    }

    pub fn len(&self) -> usize {
        self.heads.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heads.is_empty()
    }

    /// Separator levels above the heads: a search takes one step more.
    pub fn levels(&self) -> usize {
        self.levels.len()
    }

    /// The first index whose head is not below `target` (`len()` if none). Before the last
    /// step, `bottom` is told the range of indexes that step chooses from (at most
    /// [`SortedHeads::FANOUT`]), so a caller can start loading what it will read beside the
    /// answer while the step's heads arrive.
    #[inline]
    pub fn first_at_least(
        &self,
        target: u128,
        bottom: impl FnOnce(std::ops::Range<usize>),
    ) -> usize {
        let search = self.first_at_least_interleaved(target, |_| ControlFlow::Continue(()), bottom);
        search.expect("a search nothing ends")
    }

    /// [`SortedHeads::first_at_least`] with `between(k)` run before step `k` of the search
    /// (from 0; the last step reads the heads themselves), for a caller with loads of its own
    /// to overlap with the search's: each step waits for its node, so work put between two
    /// steps finds what it asked for a step earlier arrived. `between` may end the search,
    /// which then answers `None`.
    #[inline]
    pub fn first_at_least_interleaved(
        &self,
        target: u128,
        mut between: impl FnMut(usize) -> ControlFlow<()>,
        bottom: impl FnOnce(std::ops::Range<usize>),
    ) -> Option<usize> {
        // `at` is the position within the current level; the node below it starts at
        // `at * FANOUT` in the next level down.
        let mut at = 0;
        for (k, &(start, len)) in self.levels.iter().enumerate() {
            between(k).is_continue().then_some(())?;
            at = Self::step(&self.upper[start..start + len], at, target);
        }
        between(self.levels.len()).is_continue().then_some(())?;
        let start = (at * Self::FANOUT).min(self.heads.len());
        bottom(start..self.heads.len().min(start + Self::FANOUT));
        Some(Self::step(&self.heads, at, target))
    }

    /// Within `level`, the first position not below `target` in the node whose first entry
    /// is `node * FANOUT`: every earlier node lies wholly below the target, because their
    /// separators (their largest entries) do. Past the end means every entry is below it.
    #[inline(always)]
    fn step(level: &[u128], node: usize, target: u128) -> usize {
        let start = node * Self::FANOUT;
        if start >= level.len() {
            return level.len();
        }
        let node = &level[start..level.len().min(start + Self::FANOUT)];
        // Counted, not searched: no branch on the comparisons and no chain between loads.
        start + node.iter().map(|&h| usize::from(h < target)).sum::<usize>()
    }

    /// `partition_point` by whole keys: the first index whose key is not below the target
    /// (whose head is `target`), where `is_below(i)` is the exact (whole-key) "key `i` sorts
    /// below the target". It is called only for keys whose head equals the target's: once
    /// when one key ties, and a binary search's worth when many do.
    #[inline]
    pub fn partition(&self, target: u128, is_below: impl Fn(usize) -> bool) -> usize {
        self.partition_noting(target, is_below, |_| {})
    }

    /// [`SortedHeads::partition`], telling `bottom` the range of indexes the search's last
    /// step chooses from, before that step (see [`SortedHeads::first_at_least`]).
    #[inline]
    pub fn partition_noting(
        &self,
        target: u128,
        is_below: impl Fn(usize) -> bool,
        bottom: impl FnOnce(std::ops::Range<usize>),
    ) -> usize {
        let lo = self.first_at_least(target, bottom);
        settle_ties(lo, self.len(), |i| self.heads[i], target, is_below)
    }

    /// [`SortedHeads::partition_noting`] with work between the steps, as
    /// [`SortedHeads::first_at_least_interleaved`] runs it: `None` if `between` ended the
    /// search.
    #[inline]
    pub fn partition_interleaved(
        &self,
        target: u128,
        is_below: impl Fn(usize) -> bool,
        between: impl FnMut(usize) -> ControlFlow<()>,
        bottom: impl FnOnce(std::ops::Range<usize>),
    ) -> Option<usize> {
        let lo = self.first_at_least_interleaved(target, between, bottom)?;
        Some(settle_ties(lo, self.len(), |i| self.heads[i], target, is_below))
    }

    /// RAM held, in bytes.
    pub fn memory_bytes(&self) -> usize {
        (self.heads.capacity() + self.upper.capacity()) * std::mem::size_of::<u128>()
            + self.levels.capacity() * std::mem::size_of::<(usize, usize)>()
    }
}

/// The first index in `start..end` where the monotone `pred` holds (`end` if none), without
/// branching on `pred`.
#[inline(always)]
fn first_where(start: usize, end: usize, pred: impl Fn(usize) -> bool) -> usize {
    if start >= end {
        return end;
    }
    let (mut base, mut size) = (start, end - start);
    while size > 1 {
        let half = size / 2;
        // Arithmetic instead of `if`, so the step compiles to no branch.
        base += half * usize::from(!pred(base + half));
        size -= half;
    }
    base + usize::from(!pred(base))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Ordering;

    fn tricky_keys() -> Vec<Vec<u8>> {
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
        keys.extend(
            [&b"0000000000000001"[..], b"00000000000000010", b"0000000000000002"].map(Vec::from),
        );
        keys.sort();
        keys.dedup();
        keys
    }

    #[test]
    fn head_is_monotone_and_strictly_decisive() {
        let keys = tricky_keys();
        for a in &keys {
            for b in &keys {
                let (pa, pb) = (key_head(a), key_head(b));
                match pa.cmp(&pb) {
                    Ordering::Equal => {}
                    strict => assert_eq!(a.cmp(b), strict, "{a:?} vs {b:?}"),
                }
                if a <= b {
                    assert!(pa <= pb, "not monotone: {a:?} <= {b:?}");
                }
            }
        }
    }

    /// Work put between the steps runs once before each, in order (one step per separator
    /// level and the last), and changes nothing unless it ends the search: then the answer
    /// is `None` and no later step runs, nor the announcement of the last.
    #[test]
    fn interleaved_work_runs_before_each_step_and_may_end_the_search() {
        for n in [0usize, 1, 16, 17, 256, 257, 4097, 70_000] {
            let heads: Vec<u128> = (0..n as u128).map(|i| i * 10).collect();
            let sorted = SortedHeads::new(heads.clone());
            let steps = sorted.levels.len() + 1;
            for t in [0, 5, n as u128 * 5, n as u128 * 10 + 1] {
                let want = heads.partition_point(|&h| h < t);
                let mut seen = Vec::new();
                let got = sorted.first_at_least_interleaved(
                    t,
                    |k| {
                        seen.push(k);
                        ControlFlow::Continue(())
                    },
                    |_| {},
                );
                assert_eq!(got, Some(want), "n {n}, target {t}");
                assert_eq!(seen, (0..steps).collect::<Vec<_>>(), "n {n}");
                for end in 0..steps {
                    let (mut seen, mut announced) = (Vec::new(), false);
                    let got = sorted.first_at_least_interleaved(
                        t,
                        |k| {
                            seen.push(k);
                            if k == end {
                                ControlFlow::Break(())
                            } else {
                                ControlFlow::Continue(())
                            }
                        },
                        |_| announced = true,
                    );
                    assert_eq!(got, None, "n {n}, ended before step {end}");
                    assert_eq!(seen, (0..=end).collect::<Vec<_>>(), "n {n}");
                    assert!(!announced, "n {n}: the last step announced after the end");
                }
            }
        }
    }

    #[test]
    fn first_where_matches_partition_point() {
        for n in 0..40usize {
            let values: Vec<usize> = (0..n).map(|i| i.div_ceil(2) * 10).collect();
            for start in 0..=n {
                for t in 0..(n * 5 + 20) {
                    let want = start + values[start..].partition_point(|&v| v < t);
                    assert_eq!(first_where(start, n, |i| values[i] >= t), want, "{n} {start} {t}");
                }
            }
        }
    }

    #[test]
    fn sorted_heads_find_what_partition_point_finds() {
        // Sizes around every node boundary of one, two and three separator levels, heads
        // with long runs of ties, and targets below, between, on and above them all.
        for n in [0usize, 1, 2, 15, 16, 17, 31, 32, 33, 255, 256, 257, 300, 4095, 4096, 4097] {
            let heads: Vec<u128> = (0..n as u128).map(|i| (i / 3) * 10 + 5).collect();
            let sorted = SortedHeads::new(heads.clone());
            assert_eq!(sorted.len(), n);
            let top = (n as u128 / 3) * 10 + 20;
            for t in (0..top).step_by(if n > 1000 { 7 } else { 1 }) {
                let want = heads.partition_point(|&h| h < t);
                let mut bottom = None;
                assert_eq!(sorted.first_at_least(t, |r| bottom = Some(r)), want, "n {n}, {t}");
                // The range announced before the last step holds the answer (or ends where
                // the answer is one past it): what a caller prefetches beside it is used.
                let bottom = bottom.expect("the last step is announced");
                assert!(bottom.len() <= SortedHeads::FANOUT, "n {n}, target {t}: {bottom:?}");
                assert!(bottom.start <= want && want <= bottom.end, "n {n}, {t}: {bottom:?}");
            }
            let want = heads.partition_point(|&h| h < u128::MAX);
            assert_eq!(sorted.first_at_least(u128::MAX, |_| {}), want);
        }
    }

    #[test]
    fn sorted_heads_partition_matches_a_whole_key_search() {
        let mut keys = tricky_keys();
        // A run of ties longer than a node, so it crosses node boundaries.
        keys.extend((0..50u8).map(|i| [&[b'k'; 16][..], &[i]].concat()));
        keys.sort();
        keys.dedup();
        let mut targets = keys.clone();
        targets.extend(keys.iter().map(|k| [k.as_slice(), &[0x42]].concat()));
        for start in (0..keys.len()).step_by(7) {
            for end in (start..=keys.len()).step_by(3) {
                let run = &keys[start..end];
                let sorted = SortedHeads::new(run.iter().map(|k| key_head(k)).collect());
                for t in &targets {
                    let want = run.partition_point(|k| k < t);
                    assert_eq!(sorted.partition(key_head(t), |i| run[i] < *t), want);
                }
            }
        }
    }
}
