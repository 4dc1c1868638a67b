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

/// The first 16 bytes of `user_key`, zero-padded, as a big-endian integer.
#[inline]
pub(crate) fn key_head(user_key: &[u8]) -> u128 {
    match user_key.first_chunk::<16>() {
        Some(head) => u128::from_be_bytes(*head),
        None => {
            let mut buf = [0u8; 16];
            buf[..user_key.len()].copy_from_slice(user_key);
            u128::from_be_bytes(buf)
        }
    }
}

/// `partition_point` for a sorted sequence of `n` keys: the first index whose key is not
/// below the target, where `head_of(i)` is key `i`'s head, `target` the target's head,
/// and `is_below(i)` the exact (whole-key) "key `i` sorts below the target".
///
/// The search runs on heads, branch-free (random targets make every comparison a coin
/// toss, and a mispredicted branch per step costs more than the comparison). `is_below` is
/// called only for keys whose head equals the target's: once when one key ties, and a
/// binary search's worth when many do.
#[inline(always)]
pub(crate) fn partition_by_head(
    n: usize,
    head_of: impl Fn(usize) -> u128,
    target: u128,
    is_below: impl Fn(usize) -> bool,
) -> usize {
    let lo = first_where(0, n, |i| head_of(i) >= target);
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
    fn partition_by_head_matches_a_whole_key_search() {
        let keys = tricky_keys();
        // Every contiguous run of the sorted keys, so runs of ties of every length appear,
        // against every key (present) and every key with a byte appended (absent).
        let mut targets = keys.clone();
        targets.extend(keys.iter().map(|k| [k.as_slice(), &[0x42]].concat()));
        for start in (0..keys.len()).step_by(3) {
            for end in (start..=keys.len()).step_by(5) {
                let run = &keys[start..end];
                let heads: Vec<u128> = run.iter().map(|k| key_head(k)).collect();
                for t in &targets {
                    let want = run.partition_point(|k| k < t);
                    let got =
                        partition_by_head(run.len(), |i| heads[i], key_head(t), |i| run[i] < *t);
                    assert_eq!(got, want, "run {start}..{end}, target {t:?}");
                }
            }
        }
    }
}
