//! [`PrefixExtractor`]: the part of a key that scans are bounded by, which table filters also
//! record so that a scan inside one prefix can skip the tables that hold none of its keys.

use crate::{Error, Result};

/// Longest prefix [`PrefixExtractor::Fixed`] accepts, in bytes.
pub const MAX_FIXED_PREFIX_BYTES: usize = 1024;

/// Maps a key to its prefix, the way RocksDB's prefix extractor does, for a keyspace whose
/// scans are usually bounded by one prefix (a user's orders, a tenant's keys, a time bucket).
/// Set with `Options::prefix_extractor` or
/// [`crate::options::KeyspaceOptions::prefix_extractor`].
///
/// Each table's filter then also holds the table's distinct prefixes, and a scan whose keys
/// all share one prefix — `Db::prefix` with a prefix at least as long as the
/// extractor's, or a `Db::range` or `Db::cursor` whose bounds lie inside one
/// prefix — skips every table whose filter says it holds no key with that prefix.
///
/// **Domain.** As with RocksDB's `InDomain`, a key has a prefix only if it is in the
/// extractor's domain: with `Fixed(n)`, keys of at least `n` bytes; with `UpToDelimiter(d)`,
/// keys that contain `d`. A key out of the domain adds no prefix to its table's filter (it is
/// still found by point lookups and by every scan), and a scan whose range is not inside one
/// in-domain prefix skips nothing.
///
/// **Changing it.** The manifest records the keyspace's extractor, and an open that gives
/// another (or none) fails with [`crate::Error::SettingMismatch`] unless it sets
/// [`crate::options::KeyspaceOptions::change_settings`] (or `Options::change_settings`): a
/// forgotten extractor would quietly make every prefix scan read every table. Each table
/// records the extractor it was built with (its [`name`](PrefixExtractor::name)); a scan
/// skips a table only if the table's extractor is the keyspace's current one. A table built
/// with another extractor, or none, is always read, so changing or removing the extractor
/// never changes an answer; compaction brings old tables along.
///
/// ```
/// use bloomkv::{Options, PrefixExtractor, Readable};
/// # fn main() -> bloomkv::Result<()> {
/// let user = PrefixExtractor::UpToDelimiter(b'/');
/// assert_eq!(user.prefix(b"user:42/orders/7"), Some(&b"user:42/"[..]));
/// assert_eq!(user.prefix(b"user:42"), None); // out of the domain
/// assert_eq!(PrefixExtractor::Fixed(4).prefix(b"2026-11-26"), Some(&b"2026"[..]));
///
/// let dir = tempfile::tempdir().unwrap();
/// let db = bloomkv::Db::open(dir.path(), Options::new().prefix_extractor(Some(user)))?;
/// db.put("user:42/orders/7", "shoes")?;
/// db.put("user:43/orders/1", "hat")?;
/// db.flush()?;
/// let orders: Vec<_> = db.prefix("user:42/").collect::<bloomkv::Result<_>>()?;
/// assert_eq!(orders.len(), 1);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PrefixExtractor {
    /// The first `n` bytes; keys shorter than `n` are out of the domain. `n` is 1 to
    /// [`MAX_FIXED_PREFIX_BYTES`].
    Fixed(usize),
    /// Everything up to and including the first occurrence of the byte; keys without it are
    /// out of the domain.
    UpToDelimiter(u8),
}

impl PrefixExtractor {
    /// The prefix of `key`, or `None` if `key` is out of the extractor's domain.
    #[inline]
    pub fn prefix<'k>(&self, key: &'k [u8]) -> Option<&'k [u8]> {
        match *self {
            PrefixExtractor::Fixed(n) => key.get(..n),
            PrefixExtractor::UpToDelimiter(d) => {
                key.iter().position(|&b| b == d).map(|i| &key[..=i])
            }
        }
    }

    /// True if `key` has a prefix (RocksDB's `InDomain`).
    pub fn in_domain(&self, key: &[u8]) -> bool {
        self.prefix(key).is_some()
    }

    /// The stable name and parameters recorded in each table's properties: `fixed:N` or
    /// `delimiter:0xHH`. Two extractors with the same name extract the same prefixes.
    ///
    /// ```
    /// use bloomkv::PrefixExtractor;
    /// assert_eq!(PrefixExtractor::Fixed(8).name(), "fixed:8");
    /// assert_eq!(PrefixExtractor::UpToDelimiter(b'/').name(), "delimiter:0x2f");
    /// assert_eq!(PrefixExtractor::from_name("delimiter:0x2f"), Some(PrefixExtractor::UpToDelimiter(b'/')));
    /// ```
    pub fn name(&self) -> String {
        match *self {
            PrefixExtractor::Fixed(n) => format!("fixed:{n}"),
            PrefixExtractor::UpToDelimiter(d) => format!("delimiter:0x{d:02x}"),
        }
    }

    /// Parses a [`name`](PrefixExtractor::name); `None` for anything else, or for parameters
    /// [`validate`](PrefixExtractor::validate) refuses.
    pub fn from_name(name: &str) -> Option<PrefixExtractor> {
        let e = if let Some(n) = name.strip_prefix("fixed:") {
            if n.starts_with('+') || (n.len() > 1 && n.starts_with('0')) {
                return None;
            }
            PrefixExtractor::Fixed(n.parse().ok()?)
        } else {
            let hex = name.strip_prefix("delimiter:0x")?;
            if hex.len() != 2
                || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            {
                return None;
            }
            PrefixExtractor::UpToDelimiter(u8::from_str_radix(hex, 16).ok()?)
        };
        e.validate().ok().map(|()| e)
    }

    /// Checks the parameters: a fixed length of 1 to [`MAX_FIXED_PREFIX_BYTES`].
    pub fn validate(&self) -> Result<()> {
        match *self {
            PrefixExtractor::Fixed(n) if !(1..=MAX_FIXED_PREFIX_BYTES).contains(&n) => {
                Err(Error::InvalidArgument(format!(
                    "fixed prefix length must be 1 to {MAX_FIXED_PREFIX_BYTES}, got {n}"
                )))
            }
            _ => Ok(()),
        }
    }

    /// The one prefix every key of the range `(lower, upper)` has, if there is one: then
    /// every key of the range is in the domain and has that prefix, and a table whose filter
    /// holds no such prefix holds no key of the range. `None` when the range may hold keys
    /// of other prefixes, or out of the domain.
    ///
    /// All keys that start with an in-domain prefix `p` have the prefix `p` (the extractor
    /// only looks at the key's first bytes), and they are exactly the keys in
    /// `[p, successor(p))`. So the range qualifies when its lower bound has a prefix `p` and
    /// its upper bound does not go past the keys starting with `p`.
    pub fn common_prefix<'b>(
        &self,
        lower: std::ops::Bound<&'b [u8]>,
        upper: std::ops::Bound<&[u8]>,
    ) -> Option<&'b [u8]> {
        use std::ops::Bound;
        let lo = match lower {
            Bound::Included(k) | Bound::Excluded(k) => k,
            Bound::Unbounded => return None,
        };
        let p = self.prefix(lo)?;
        let inside = match upper {
            Bound::Unbounded => false,
            Bound::Included(u) => u.starts_with(p),
            Bound::Excluded(u) => u.starts_with(p) || at_most_successor(u, p),
        };
        inside.then_some(p)
    }
}

/// True if `u <= successor(p)` ([`crate::key::prefix_successor`]: `p` less its trailing
/// `0xff` bytes, the last byte left incremented), false when `p` has no successor: without
/// building the successor, since every scan asks.
fn at_most_successor(u: &[u8], p: &[u8]) -> bool {
    let Some(last) = p.iter().rposition(|&b| b != 0xff) else { return false };
    let successor = p[..last].iter().copied().chain(std::iter::once(p[last] + 1));
    u.iter().copied().cmp(successor) != std::cmp::Ordering::Greater
}

#[cfg(test)]
mod tests {
    use std::ops::Bound::{self, Excluded, Included, Unbounded};
    use std::ops::RangeBounds;

    use super::*;

    #[test]
    fn fixed_and_delimiter_prefixes_and_their_domains() {
        let f = PrefixExtractor::Fixed(3);
        assert_eq!(f.prefix(b"abcd"), Some(&b"abc"[..]));
        assert_eq!(f.prefix(b"abc"), Some(&b"abc"[..]));
        assert_eq!(f.prefix(b"ab"), None);
        assert!(!f.in_domain(b""));
        let d = PrefixExtractor::UpToDelimiter(b':');
        assert_eq!(d.prefix(b"a:b:c"), Some(&b"a:"[..]));
        assert_eq!(d.prefix(b":x"), Some(&b":"[..]));
        assert_eq!(d.prefix(b"abc"), None);
    }

    #[test]
    fn names_round_trip_and_bad_ones_are_refused() {
        for e in [
            PrefixExtractor::Fixed(1),
            PrefixExtractor::Fixed(MAX_FIXED_PREFIX_BYTES),
            PrefixExtractor::UpToDelimiter(0),
            PrefixExtractor::UpToDelimiter(0xff),
        ] {
            assert_eq!(PrefixExtractor::from_name(&e.name()), Some(e));
        }
        for bad in [
            "",
            "fixed:",
            "fixed:0",
            "fixed:08",
            "fixed:+8",
            "fixed:1025",
            "fixed:-1",
            "delimiter:0x2F",
            "delimiter:0x2",
            "delimiter:2f",
            "capped:8",
        ] {
            assert_eq!(PrefixExtractor::from_name(bad), None, "{bad}");
        }
        assert!(PrefixExtractor::Fixed(0).validate().is_err());
    }

    #[test]
    fn at_most_successor_agrees_with_the_successor() {
        let keys: [&[u8]; 9] = [b"", b"a", b"ab", b"ac", b"ac\0", b"b", b"\xff", b"a\xff", b"b\0"];
        for p in keys {
            for u in keys {
                let want = crate::key::prefix_successor(p).is_some_and(|s| u <= s.as_slice());
                assert_eq!(at_most_successor(u, p), want, "{u:?} {p:?}");
            }
        }
    }

    #[test]
    fn a_range_has_a_common_prefix_only_inside_one_prefix() {
        let f = PrefixExtractor::Fixed(2);
        let cp = |lo: Bound<&'static [u8]>, hi: Bound<&'static [u8]>| f.common_prefix(lo, hi);
        assert_eq!(cp(Included(b"ab"), Excluded(b"ac")), Some(&b"ab"[..]));
        assert_eq!(cp(Included(b"abx"), Excluded(b"aby")), Some(&b"ab"[..]));
        assert_eq!(cp(Excluded(b"abx"), Included(b"abz")), Some(&b"ab"[..]));
        assert_eq!(cp(Included(b"ab"), Included(b"ac")), None);
        assert_eq!(cp(Included(b"ab"), Excluded(b"ac\0")), None);
        assert_eq!(cp(Included(b"ab"), Unbounded), None);
        assert_eq!(cp(Unbounded, Excluded(b"ab")), None);
        assert_eq!(cp(Included(b"a"), Excluded(b"ab")), None);
        // The last prefix of all has no successor: only a bound inside it qualifies.
        let top: &'static [u8] = b"\xff\xff";
        assert_eq!(cp(Included(top), Excluded(b"\xff\xff\x01")), Some(top));
        let d = PrefixExtractor::UpToDelimiter(b'/');
        assert_eq!(d.common_prefix(Included(b"u/1"), Excluded(b"u0")), Some(&b"u/"[..]));
        assert_eq!(d.common_prefix(Included(b"u"), Excluded(b"u0")), None);
    }

    /// Checks the claim `common_prefix` rests on by brute force over short keys: every key in
    /// the range has the returned prefix.
    #[test]
    fn every_key_of_a_qualifying_range_has_the_prefix() {
        let alphabet = [0u8, b'/', b'a', 0xff];
        let mut keys: Vec<Vec<u8>> = vec![vec![]];
        for len in 1..=3 {
            let mut more = Vec::new();
            for k in keys.iter().filter(|k| k.len() == len - 1) {
                for &b in &alphabet {
                    let mut k = k.clone();
                    k.push(b);
                    more.push(k);
                }
            }
            keys.extend(more);
        }
        for e in [
            PrefixExtractor::Fixed(1),
            PrefixExtractor::Fixed(2),
            PrefixExtractor::UpToDelimiter(b'/'),
        ] {
            for lo in &keys {
                for hi in &keys {
                    for (l, h) in [
                        (Included(&lo[..]), Excluded(&hi[..])),
                        (Excluded(&lo[..]), Included(&hi[..])),
                    ] {
                        let Some(p) = e.common_prefix(l, h) else { continue };
                        for k in &keys {
                            if RangeBounds::<[u8]>::contains(&(l, h), &k[..]) {
                                assert_eq!(e.prefix(k), Some(p), "{e:?} {l:?} {h:?} {k:?}");
                            }
                        }
                    }
                }
            }
        }
    }
}
