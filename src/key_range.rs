//! [`KeyRange`]: the ranges `range` scans accept.
//!
//! Why not `RangeBounds<K>`: `..` implements `RangeBounds<T>` for every `T`, and `a..b` of
//! references implements it for two `T`s, so `db.range(..)` and `db.range(b"a"..b"c")` left
//! the key type for the caller to spell out. One impl per range type leaves nothing to infer.

use std::ops::{Bound, Range, RangeFrom, RangeFull, RangeInclusive, RangeTo, RangeToInclusive};

use crate::key::{prefix_successor, MAX_KEY_BYTES};

mod sealed {
    pub trait Sealed {}
}

/// A range of keys for [`crate::Readable::range`] (and `prefix`, `cursor`) and
/// [`crate::Db::delete_range`]: any of Rust's range expressions (`..`, `a..b`, `a..=b`, `a..`, `..b`, `..=b`) or a `(Bound, Bound)`
/// pair, over anything that is bytes (`&[u8]`, `&[u8; N]`, `Vec<u8>`, `&str`, `String`).
///
/// ```
/// use bloomkv::Readable;
/// # fn main() -> bloomkv::Result<()> {
/// let dir = tempfile::tempdir().unwrap();
/// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::new())?;
/// for k in ["a", "b", "c"] {
///     db.put(k, "v")?;
/// }
/// assert_eq!(db.range(..).count(), 3);
/// assert_eq!(db.range(b"a"..b"c").count(), 2);
/// assert_eq!(db.range("b"..).count(), 2);
/// assert_eq!(db.range(..=b"b".to_vec()).count(), 2);
/// # Ok(()) }
/// ```
pub trait KeyRange: sealed::Sealed {
    /// The range's bounds, owned.
    #[doc(hidden)]
    fn into_bounds(self) -> (Bound<Vec<u8>>, Bound<Vec<u8>>);
    #[doc(hidden)]
    fn as_bounds(&self) -> (Bound<&[u8]>, Bound<&[u8]>);
}

impl sealed::Sealed for RangeFull {}
impl KeyRange for RangeFull {
    fn into_bounds(self) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
        (Bound::Unbounded, Bound::Unbounded)
    }
    fn as_bounds(&self) -> (Bound<&[u8]>, Bound<&[u8]>) {
        (Bound::Unbounded, Bound::Unbounded)
    }
}

macro_rules! key_range {
    ($($ty:ty => |$r:ident| $bounds:expr;)*) => {$(
        impl<K: AsRef<[u8]>> sealed::Sealed for $ty {}
        impl<K: AsRef<[u8]>> KeyRange for $ty {
            fn into_bounds(self) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
                let (lo, hi) = self.as_bounds();
                (lo.map(<[u8]>::to_vec), hi.map(<[u8]>::to_vec))
            }
            fn as_bounds(&self) -> (Bound<&[u8]>, Bound<&[u8]>) {
                let $r = self;
                let (lo, hi): (Bound<&K>, Bound<&K>) = $bounds;
                (lo.map(K::as_ref), hi.map(K::as_ref))
            }
        }
    )*};
}

key_range! {
    Range<K> => |r| (Bound::Included(&r.start), Bound::Excluded(&r.end));
    RangeInclusive<K> => |r| (Bound::Included(r.start()), Bound::Included(r.end()));
    RangeFrom<K> => |r| (Bound::Included(&r.start), Bound::Unbounded);
    RangeTo<K> => |r| (Bound::Unbounded, Bound::Excluded(&r.end));
    RangeToInclusive<K> => |r| (Bound::Unbounded, Bound::Included(&r.end));
    (Bound<K>, Bound<K>) => |r| (r.0.as_ref(), r.1.as_ref());
}

/// The longest bound a range delete may store: one byte over [`MAX_KEY_BYTES`], so that the
/// bound just past the longest key (`k` followed by a zero byte) and [`end_of_keys`] fit.
pub(crate) const MAX_RANGE_BOUND_BYTES: usize = MAX_KEY_BYTES + 1;

/// A key above every key a write accepts (no key may be longer than [`MAX_KEY_BYTES`]): what
/// a range delete with an open end stores as its end. Tombstones keep half-open `[start,
/// end)` bounds in every format, and this keeps them so rather than adding an "unbounded"
/// case to each; the price is a 64 KiB bound held by the tombstone until compaction drops it.
pub(crate) fn end_of_keys() -> Vec<u8> {
    vec![0xff; MAX_RANGE_BOUND_BYTES]
}

/// The half-open `[start, end)` holding exactly the keys of `range`: what a range delete
/// writes. Empty when `start >= end`.
pub(crate) fn half_open(range: impl KeyRange) -> (Vec<u8>, Vec<u8>) {
    let just_after = |mut k: Vec<u8>| {
        k.push(0);
        k
    };
    let (lo, hi) = range.into_bounds();
    let start = match lo {
        Bound::Included(k) => k,
        Bound::Excluded(k) => just_after(k),
        Bound::Unbounded => Vec::new(),
    };
    let end = match hi {
        Bound::Excluded(k) => k,
        Bound::Included(k) => just_after(k),
        Bound::Unbounded => end_of_keys(),
    };
    (start, end)
}

/// A prefix scan's bounds.
pub(crate) fn prefix_bounds(prefix: &[u8]) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let end = match prefix_successor(prefix) {
        Some(s) => Bound::Excluded(s),
        None => Bound::Unbounded,
    };
    (Bound::Included(prefix.to_vec()), end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_open_bounds_hold_exactly_the_range() {
        assert_eq!(half_open("a".."c"), (b"a".to_vec(), b"c".to_vec()));
        assert_eq!(half_open("a"..="c"), (b"a".to_vec(), b"c\0".to_vec()));
        assert_eq!(half_open(..="c"), (Vec::new(), b"c\0".to_vec()));
        assert_eq!(half_open("b"..), (b"b".to_vec(), end_of_keys()));
        assert_eq!(half_open(..), (Vec::new(), end_of_keys()));
        let excluded = (Bound::Excluded("a"), Bound::Excluded("c"));
        assert_eq!(half_open(excluded), (b"a\0".to_vec(), b"c".to_vec()));
        // Above the longest key there is.
        assert!(end_of_keys() > vec![0xff; MAX_KEY_BYTES]);
    }
}
