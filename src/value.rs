//! [`Value`]: what reads return.

use std::fmt;
use std::ops::Deref;

use bytes::Bytes;

/// A value returned by a read: cheap to clone, and often a zero-copy view into a cached
/// block. Dereferences to `[u8]`; converts into `Vec<u8>` or [`Bytes`].
///
/// ```
/// # fn main() -> bloomkv::Result<()> {
/// let dir = tempfile::tempdir().unwrap();
/// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::new())?;
/// db.put("k", "hello")?;
/// let v = db.get("k")?.expect("present");
/// assert_eq!(v, b"hello"); // compare with byte strings directly
/// assert_eq!(&v[..2], b"he"); // or use it as a slice
/// let owned: Vec<u8> = v.clone().into();
/// let shared: bytes::Bytes = v.into();
/// assert_eq!(owned, shared);
/// # Ok(()) }
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Value(Bytes);

impl Value {
    /// Wraps shared bytes.
    pub fn from_bytes(b: Bytes) -> Self {
        Value(b)
    }

    /// Copies a slice into a new value.
    pub fn copy_from_slice(s: &[u8]) -> Self {
        Value(Bytes::copy_from_slice(s))
    }

    /// The bytes as a `Vec` (copies).
    pub fn to_vec(&self) -> Vec<u8> {
        self.0.to_vec()
    }

    /// The underlying shared bytes.
    pub fn into_bytes(self) -> Bytes {
        self.0
    }
}

impl Deref for Value {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl AsRef<[u8]> for Value {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Self {
        Value(Bytes::from(v))
    }
}

impl From<&[u8]> for Value {
    fn from(v: &[u8]) -> Self {
        Value::copy_from_slice(v)
    }
}

impl PartialEq<[u8]> for Value {
    fn eq(&self, other: &[u8]) -> bool {
        self.0 == other
    }
}

impl PartialEq<&[u8]> for Value {
    fn eq(&self, other: &&[u8]) -> bool {
        self.0 == *other
    }
}

impl<const N: usize> PartialEq<&[u8; N]> for Value {
    fn eq(&self, other: &&[u8; N]) -> bool {
        self.0 == other[..]
    }
}

impl<const N: usize> PartialEq<[u8; N]> for Value {
    fn eq(&self, other: &[u8; N]) -> bool {
        self.0 == other[..]
    }
}

impl PartialEq<Vec<u8>> for Value {
    fn eq(&self, other: &Vec<u8>) -> bool {
        self.0 == other[..]
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Value({:?})", self.0)
    }
}

impl From<Value> for Vec<u8> {
    fn from(v: Value) -> Vec<u8> {
        Vec::from(v.0)
    }
}

impl From<Value> for Bytes {
    fn from(v: Value) -> Bytes {
        v.0
    }
}
