//! [`KeyRange`]: the ranges `range` scans accept.
//!
//! Why not `RangeBounds<K>`: `..` implements `RangeBounds<T>` for every `T`, and `a..b` of
//! references implements it for two `T`s, so `db.range(..)` and `db.range(b"a"..b"c")` left
//! the key type for the caller to spell out. One impl per range type leaves nothing to infer.

use std::ops::{Bound, Range, RangeFrom, RangeFull, RangeInclusive, RangeTo, RangeToInclusive};

mod sealed {
    pub trait Sealed {}
}

/// A range of keys for [`crate::Db::range`] and [`crate::Snapshot::range`]: any of Rust's
/// range expressions (`..`, `a..b`, `a..=b`, `a..`, `..b`, `..=b`) or a `(Bound, Bound)`
/// pair, over anything that is bytes (`&[u8]`, `&[u8; N]`, `Vec<u8>`, `&str`, `String`).
///
/// ```
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
}

fn owned<K: AsRef<[u8]>>(b: Bound<K>) -> Bound<Vec<u8>> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_ref().to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.as_ref().to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

impl sealed::Sealed for RangeFull {}
impl KeyRange for RangeFull {
    fn into_bounds(self) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
        (Bound::Unbounded, Bound::Unbounded)
    }
}

macro_rules! key_range {
    ($($ty:ty => |$r:ident| $bounds:expr;)*) => {$(
        impl<K: AsRef<[u8]>> sealed::Sealed for $ty {}
        impl<K: AsRef<[u8]>> KeyRange for $ty {
            fn into_bounds(self) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
                let $r = self;
                let (lo, hi): (Bound<K>, Bound<K>) = $bounds;
                (owned(lo), owned(hi))
            }
        }
    )*};
}

key_range! {
    Range<K> => |r| (Bound::Included(r.start), Bound::Excluded(r.end));
    RangeInclusive<K> => |r| {
        let (start, end) = r.into_inner();
        (Bound::Included(start), Bound::Included(end))
    };
    RangeFrom<K> => |r| (Bound::Included(r.start), Bound::Unbounded);
    RangeTo<K> => |r| (Bound::Unbounded, Bound::Excluded(r.end));
    RangeToInclusive<K> => |r| (Bound::Unbounded, Bound::Included(r.end));
    (Bound<K>, Bound<K>) => |r| (r.0, r.1);
}
