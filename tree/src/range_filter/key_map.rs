//! The order-preserving map from keys into a range filter's integers.
//!
//! Every key a filter holds starts with the filter's *prefix* `P` (the longest one its keys
//! share), and has at most `w` more bytes when `w < 8` (`w` is the longest key's length past
//! the prefix, at most 8). A key `P ‖ s` maps to the first `w` bytes of `s`, zero-padded to
//! `w`, as a big-endian integer: `x(k) = BE(s[0..w] ‖ 0…)`. For keys with the prefix,
//! `a ≤ b ⇒ x(a) ≤ x(b)`: not one-to-one (keys equal in those bytes, or differing only by
//! trailing zeros, share an integer), but monotone, which is all a filter that must never
//! miss needs. Taking `w` bytes rather than always 8 keeps fixed-length keys (big-endian
//! integers, say) at their own spacing: 8-byte keys sharing 5 bytes map to their last 3
//! bytes' value, not that value times 2^40, so a range of width 3 is 3 integers wide.
//!
//! A query's bounds are mapped to the integers every key inside them maps into: a bound
//! without the prefix lies below or above every key with it (or leaves nothing between),
//! and an excluded upper bound steps one integer down where no key below it can share its
//! integer.

use std::ops::Bound;

/// The 8 bytes of `key` after its first `prefix_len`, big-endian, zero-padded.
#[inline]
pub fn window(key: &[u8], prefix_len: usize) -> u64 {
    let rest = &key[prefix_len.min(key.len())..];
    if let Some(w) = rest.first_chunk::<8>() {
        return u64::from_be_bytes(*w);
    }
    if let (false, Some(tail)) = (rest.is_empty(), key.last_chunk::<8>()) {
        // 1 to 7 bytes after the prefix of a key of 8 or more (fixed-width integer keys past
        // their shared high bytes): its last 8 bytes, shifted up, instead of a copy of a
        // varying length, which was nearly half the builder's cost per key.
        return u64::from_be_bytes(*tail) << (8 * (8 - rest.len()));
    }
    let mut b = [0u8; 8];
    let n = rest.len().min(8);
    b[..n].copy_from_slice(&rest[..n]);
    u64::from_be_bytes(b)
}

/// The integer of a key that starts with a prefix of `prefix_len` bytes, in a map of
/// `width` bytes (0 to 8): its next `width` bytes, zero-padded, big-endian.
#[inline]
pub fn map_key(key: &[u8], prefix_len: usize, width: u32) -> u64 {
    narrow(window(key, prefix_len), width)
}

/// An 8-byte window's integer in a map of `width` bytes: its first `width` bytes.
#[inline]
pub fn narrow(window: u64, width: u32) -> u64 {
    match width {
        0 => 0,
        w => window >> (8 * (8 - w.min(8))),
    }
}

/// A filter's prefix, its bytes (when at most 8) also held as an integer: a key of 8 bytes
/// or more is placed against it by one comparison of integers, where comparing slices
/// called `memcmp` for a few bytes, twice per query.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Prefix {
    bytes: Vec<u8>,
    /// The first 8 bytes, big-endian, zero-padded.
    head: u64,
}

/// Where a key lies against the keys with a prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Below every such key.
    Below,
    /// It starts with the prefix.
    Within,
    /// Above every such key.
    Above,
}

impl Prefix {
    /// The prefix `bytes`.
    ///
    /// ```
    /// use bloomkv_tree::range_filter::key_map::{Place, Prefix};
    ///
    /// let p = Prefix::new(b"user/".to_vec());
    /// assert_eq!(p.place(b"user/0042"), Place::Within);
    /// assert_eq!(p.place(b"group/0042"), Place::Below);
    /// assert_eq!(p.place(b"user0"), Place::Above);
    /// ```
    pub fn new(bytes: Vec<u8>) -> Prefix {
        let mut b = [0u8; 8];
        let n = bytes.len().min(8);
        b[..n].copy_from_slice(&bytes[..n]);
        Prefix { head: u64::from_be_bytes(b), bytes }
    }

    /// The prefix's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// True for the empty prefix, which every key starts with.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// True if `other` is the same prefix: mostly two integer comparisons, where comparing
    /// the byte vectors calls `memcmp`.
    #[inline]
    pub fn same(&self, other: &Prefix) -> bool {
        self.head == other.head
            && self.bytes.len() == other.bytes.len()
            && (self.bytes.len() <= 8 || self.bytes == other.bytes)
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.bytes.capacity()
    }

    /// Where `key` lies against the keys that start with the prefix.
    #[inline]
    pub fn place(&self, key: &[u8]) -> Place {
        let p = self.bytes.len();
        if let (true, Some(k)) = (p <= 8, key.first_chunk::<8>()) {
            // The key's first `p` bytes against the prefix, as the top `8p` bits (none of
            // either for an empty prefix).
            let top = |x: u64| x.checked_shr(64 - 8 * p as u32).unwrap_or(0);
            return match top(u64::from_be_bytes(*k)).cmp(&top(self.head)) {
                std::cmp::Ordering::Less => Place::Below,
                std::cmp::Ordering::Equal => Place::Within,
                std::cmp::Ordering::Greater => Place::Above,
            };
        }
        if key.starts_with(&self.bytes) {
            Place::Within
        } else if key < &self.bytes[..] {
            // A proper prefix of the prefix, or smaller at the first byte that differs.
            Place::Below
        } else {
            // Larger at a byte inside the prefix: above every key that has it.
            Place::Above
        }
    }
}

/// Where a bound lies against the keys with `prefix`.
enum Side {
    /// Below every such key.
    Below,
    /// Above every such key.
    Above,
    /// Among them: its integer.
    At(u64),
}

#[inline]
fn side(key: &[u8], prefix: &Prefix, width: u32) -> Side {
    match prefix.place(key) {
        Place::Within => Side::At(map_key(key, prefix.len(), width)),
        Place::Below => Side::Below,
        Place::Above => Side::Above,
    }
}

/// The integers `[lo, hi]` that every key with `prefix` and at most `width` bytes after it
/// (any number if `width` is 8) inside `(start, end)` maps into, in the map of `width`
/// bytes, or `None` when no such key can exist.
pub fn map_range(
    prefix: &Prefix,
    width: u32,
    start: Bound<&[u8]>,
    end: Bound<&[u8]>,
) -> Option<(u64, u64)> {
    let lo = match start {
        Bound::Unbounded => 0,
        // A key above an excluded bound may share its integer (it may extend it by zeros),
        // so both kinds of lower bound map to the bound's integer.
        Bound::Included(k) | Bound::Excluded(k) => match side(k, prefix, width) {
            Side::Below => 0,
            Side::Above => return None,
            Side::At(x) => x,
        },
    };
    let hi = match end {
        Bound::Unbounded => u64::MAX,
        Bound::Included(k) => match side(k, prefix, width) {
            Side::Below => return None,
            Side::Above => u64::MAX,
            Side::At(x) => x,
        },
        Bound::Excluded(k) => match side(k, prefix, width) {
            Side::Below => return None,
            Side::Above => u64::MAX,
            Side::At(x) => {
                let rest = &k[prefix.len()..];
                match rest.last() {
                    // No key with the prefix sorts below the prefix itself.
                    None => return None,
                    // A key below `k` with `k`'s integer would equal `k`'s bytes in the
                    // window and be shorter: `k` less trailing zeros. With `k` ending in
                    // a non-zero byte inside the window there is none.
                    Some(&last) if rest.len() <= width as usize && last != 0 => x - 1,
                    Some(_) => x,
                }
            }
        },
    };
    // No key maps above the largest integer of `width` bytes: a bound past every key
    // leaves a narrower range.
    let hi = hi.min(narrow(u64::MAX, width));
    (lo <= hi).then_some((lo, hi))
}

/// The length of the longest prefix `a` and `b` share.
#[inline]
pub fn common_prefix_len(a: &[u8], b: &[u8]) -> usize {
    // Eight bytes at a time: a table build calls this once per key.
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + 8 <= n {
        let word = |s: &[u8]| u64::from_be_bytes(s[i..i + 8].try_into().expect("8 bytes"));
        let diff = word(a) ^ word(b);
        if diff != 0 {
            return i + (diff.leading_zeros() / 8) as usize;
        }
        i += 8;
    }
    i + a[i..n].iter().zip(&b[i..n]).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use Bound::{Excluded, Included, Unbounded};

    /// [`super::map_range`] for a prefix given as bytes.
    fn map_range(
        prefix: &[u8],
        width: u32,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
    ) -> Option<(u64, u64)> {
        super::map_range(&Prefix::new(prefix.to_vec()), width, lo, hi)
    }

    /// A key is placed against a prefix as comparing the slices places it, for prefixes of 0
    /// to 10 bytes and keys of 0 to 12 (both sides of 8, where the integer comparison
    /// starts), over an alphabet of three bytes, so that keys mostly share their prefix's
    /// first bytes and differ at every position.
    #[test]
    fn place_agrees_with_comparing_slices() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let mut bytes = |most: usize| -> Vec<u8> {
            let n = rng.gen_range(0..=most);
            (0..n).map(|_| [0u8, 0x7f, 0xff][rng.gen_range(0..3)]).collect()
        };
        for _ in 0..200_000 {
            let (p, k) = (bytes(10), bytes(12));
            let want = if k.starts_with(&p) {
                Place::Within
            } else if k < p {
                Place::Below
            } else {
                Place::Above
            };
            assert_eq!(Prefix::new(p.clone()).place(&k), want, "{k:?} against {p:?}");
        }
    }

    /// Whether `k` lies in `(lo, hi)`.
    pub(crate) fn in_bounds(k: &[u8], lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> bool {
        let above = match lo {
            Unbounded => true,
            Included(b) => k >= b,
            Excluded(b) => k > b,
        };
        above
            && match hi {
                Unbounded => true,
                Included(b) => k <= b,
                Excluded(b) => k < b,
            }
    }

    /// Checks that `map_range` covers every key of `keys` (all with `prefix`, at most `width`
    /// bytes past it unless `width` is 8) inside any pair of bounds made from `bounds`.
    fn check_cover(prefix: &[u8], width: u32, keys: &[&[u8]], bounds: &[&[u8]]) {
        let p = prefix.len();
        for w in keys.windows(2) {
            assert!(map_key(w[0], p, width) <= map_key(w[1], p, width));
        }
        let bounds: Vec<&[u8]> = [keys, bounds].concat();
        let all: Vec<Bound<&[u8]>> = std::iter::once(Unbounded)
            .chain(bounds.iter().flat_map(|&b| [Included(b), Excluded(b)]))
            .collect();
        for &lo in &all {
            for &hi in &all {
                let inside: Vec<u64> = keys
                    .iter()
                    .filter(|k| in_bounds(k, lo, hi))
                    .map(|k| map_key(k, p, width))
                    .collect();
                match map_range(prefix, width, lo, hi) {
                    None => assert!(inside.is_empty(), "{lo:?}..{hi:?}: {inside:?}"),
                    Some((a, b)) => {
                        assert!(inside.iter().all(|&x| a <= x && x <= b), "{lo:?}..{hi:?}")
                    }
                }
            }
        }
    }

    /// The shortcut for a key of 8 bytes or more with fewer left after the prefix gives
    /// the definition's window: the bytes after the prefix, zero-padded.
    #[test]
    fn window_is_the_bytes_after_the_prefix_zero_padded() {
        for key in [
            &b""[..],
            b"a",
            b"0123456",
            b"01234567",
            b"0123456789ab",
            b"\xff\x00\xff\x00\xff\x00\xff\x00\x01",
        ] {
            for p in 0..=key.len() + 2 {
                let rest = &key[p.min(key.len())..];
                let mut b = [0u8; 8];
                let n = rest.len().min(8);
                b[..n].copy_from_slice(&rest[..n]);
                assert_eq!(window(key, p), u64::from_be_bytes(b), "{key:?} after {p}");
            }
        }
    }

    #[test]
    fn keys_map_in_order_and_bounds_cover_their_keys() {
        assert_eq!(window(b"user/", 5), 0);
        assert_eq!(window(b"user/\x01", 5), 1 << 56);
        assert_eq!(window(b"user/abcdefghij", 5), u64::from_be_bytes(*b"abcdefgh"));
        assert_eq!(map_key(b"user/\x01\x02", 5, 2), 0x0102);
        assert_eq!(map_key(b"user/\x01", 5, 2), 0x0100);
        assert_eq!(map_key(b"user/\x01", 5, 0), 0);
        let keys: Vec<&[u8]> = vec![
            b"user/",
            b"user/\x00",
            b"user/\x00\x01",
            b"user/a",
            b"user/a\x00",
            b"user/ab",
            b"user/abcdefgh",
            b"user/abcdefgh\xff",
            b"user/abcdefgi",
            b"user/\xff\xff\xff\xff\xff\xff\xff\xff\xff",
        ];
        let others: Vec<&[u8]> =
            vec![b"a", b"user", b"user.", b"user0", b"v", b"", b"user/a\x00\x00", b"user/ac"];
        check_cover(b"user/", 8, &keys, &others);
        let short: Vec<&[u8]> =
            vec![b"user/", b"user/\x00", b"user/\x00\x01", b"user/a", b"user/a\x00", b"user/ab"];
        check_cover(b"user/", 2, &short, &others);
        // Exactness where it is cheap: `..user/a` leaves out `user/a`'s integer.
        let a = window(b"user/a", 5);
        assert_eq!(map_range(b"user/", 8, Unbounded, Excluded(b"user/a")), Some((0, a - 1)));
        assert_eq!(map_range(b"user/", 2, Unbounded, Excluded(b"user/a")), Some((0, 0x60ff)));
        assert_eq!(map_range(b"user/", 8, Unbounded, Excluded(b"user/")), None);
        assert_eq!(map_range(b"user/", 8, Included(b"user0"), Unbounded), None);
        assert_eq!(map_range(b"user/", 8, Included(b"a"), Included(b"user")), None);
    }
}
