//! [`Value`]: what reads return.

use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

/// A value returned by a read: cheap to clone, and for a large value a zero-copy view into
/// the block it was read from. Dereferences to `[u8]`; converts into `Vec<u8>` or
/// [`Bytes`], and into `String` (or is read as `&str` with [`Value::to_str`]) when it holds
/// UTF-8. It compares equal to byte strings and to `str`/`String` holding the same bytes.
/// It is made from `Vec<u8>`, `&[u8]`, [`Bytes`], `String` and `&str`.
///
/// There is deliberately no `From<Value> for String` and no `Display`: a value is bytes,
/// and either would have to replace what is not UTF-8 (silently changing the data) or
/// panic. `String::try_from(value)` and [`Value::to_str`] say when it is not text;
/// `String::from_utf8_lossy(&value)` is there for whoever wants the replacement.
///
/// ```
/// # use bloomkv::Readable;
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
///
/// # Memory a held value keeps
///
/// A value that shares the buffer it was found in (a table's data block, or a chunk of
/// the memtable) keeps that whole buffer allocated for as long as any clone of it lives,
/// even after the block cache has evicted the block or the memtable was flushed, and that
/// memory counts against no budget of the database. So a read shares the buffer only when
/// the value is at least 1/8 of it, and copies a smaller value out: a held value keeps at
/// most 8 times its own size allocated (plus the allocator's and `Bytes`' small
/// per-allocation overhead). With the default 4 KiB blocks, values under 512 bytes are
/// copies; values from the memtable (which is carved into 32 KiB chunks, with entries
/// over 2 KiB allocated alone) are copies unless the entry has an allocation of its own.
/// Lookups in uncompressed tables read through a memory mapping (`Options::mmap_reads`)
/// always copy, and so do iterators. [`Value::into_bytes`] hands over the same `Bytes`,
/// sharing what the value shares; [`Value::to_vec`] copies. What shared values keep alive
/// is reported by `Stats::pinned_value_bytes`.
///
/// ```
/// # use bloomkv::Readable;
/// # fn main() -> bloomkv::Result<()> {
/// let dir = tempfile::tempdir().unwrap();
/// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::new())?;
/// for i in 0..100 {
///     db.put(format!("key{i:03}"), [1u8; 100])?; // 100-byte values in 4 KiB blocks
/// }
/// db.flush()?;
/// // A small value is a copy: it owns its allocation, which is just its size, and keeps
/// // nothing else (not the block cached behind it) alive.
/// let held = db.get("key042")?.expect("present").into_bytes();
/// assert!(held.is_unique());
/// assert_eq!(bytes::BytesMut::from(held).capacity(), 100);
/// # Ok(()) }
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Value(Bytes);

/// A read shares the buffer a value lies in only if the value is at least 1/`MAX_PIN_RATIO`
/// of it, so a held value keeps at most this many times its own size allocated. The copy a
/// smaller value costs is one allocation and a copy of under 1/8 of a block, next to a
/// lookup that has already searched the block (and often read and checked it).
pub const MAX_PIN_RATIO: usize = 8;

/// Bytes of buffers kept allocated by values that share them, counted once per shared value
/// (two held values sharing one block count it twice), for every database in the process:
/// `Stats::pinned_value_bytes`.
static PINNED: AtomicU64 = AtomicU64::new(0);

/// The owner of a shared value's bytes: it counts the buffer it keeps alive in [`PINNED`]
/// until the last clone of the value is dropped.
struct Pinned {
    bytes: Bytes,
    buffer: u64,
}

impl AsRef<[u8]> for Pinned {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        PINNED.fetch_sub(self.buffer, Ordering::Relaxed);
    }
}

/// The bytes of buffers held values keep alive now (see [`PINNED`]).
pub fn pinned_bytes() -> u64 {
    PINNED.load(Ordering::Relaxed)
}

/// Whether a value of `len` bytes may share a buffer of `buffer` bytes (see
/// [`MAX_PIN_RATIO`]); if not, it is copied out.
pub const fn may_share(len: usize, buffer: usize) -> bool {
    len.saturating_mul(MAX_PIN_RATIO) >= buffer
}

impl Value {
    /// A value that shares `slice` of a buffer of `buffer` bytes (a block, a memtable
    /// entry), counted in `Stats::pinned_value_bytes` while it lives. Only for
    /// values [`may_share`] lets share.
    pub fn pinning(slice: Bytes, buffer: usize) -> Self {
        let buffer = buffer as u64;
        PINNED.fetch_add(buffer, Ordering::Relaxed);
        Value(Bytes::from_owner(Pinned { bytes: slice, buffer }))
    }

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

    /// The value as `&str`, without copying, if it is UTF-8.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let v = bloomkv::Value::from(b"caf\xc3\xa9".to_vec());
    /// assert_eq!(v.to_str()?, "café");
    /// assert!(bloomkv::Value::from(vec![0xff]).to_str().is_err());
    /// # Ok(()) }
    /// ```
    pub fn to_str(&self) -> Result<&str, std::str::Utf8Error> {
        std::str::from_utf8(&self.0)
    }
}

/// A value into a `String`, if it is UTF-8.
///
/// The error is the standard library's [`FromUtf8Error`](std::string::FromUtf8Error), as
/// from [`String::from_utf8`], rather than [`crate::Error`]: a value that is not text is the
/// application's business, not a database failure, and this way `?` converts it wherever
/// `Box<dyn Error>` (or a similar error type) is returned, and the bytes can be taken back
/// with `into_bytes`.
///
/// ```
/// # use bloomkv::Readable;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::new())?;
/// db.put("name", "Ada")?;
/// let name = String::try_from(db.get("name")?.expect("present"))?;
/// assert_eq!(name, "Ada");
///
/// db.put("raw", [0xff, 0xfe])?;
/// let err = String::try_from(db.get("raw")?.expect("present")).unwrap_err();
/// assert_eq!(err.into_bytes(), [0xff, 0xfe]);
/// # Ok(()) }
/// ```
impl TryFrom<Value> for String {
    type Error = std::string::FromUtf8Error;

    fn try_from(v: Value) -> Result<String, Self::Error> {
        String::from_utf8(Vec::from(v.0))
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

impl From<Bytes> for Value {
    fn from(b: Bytes) -> Self {
        Value(b)
    }
}

/// ```
/// let v = bloomkv::Value::from("text");
/// assert_eq!(v, "text");
/// assert_eq!(bloomkv::Value::from(String::from("text")), v);
/// assert_eq!(bloomkv::Value::from(bytes::Bytes::from_static(b"text")), v);
/// assert_eq!(Vec::from(v), b"text");
/// ```
impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value(Bytes::copy_from_slice(s.as_bytes()))
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value(Bytes::from(s))
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

/// A value equals a string holding the same bytes (a value that is not UTF-8 equals no
/// string).
///
/// ```
/// let v = bloomkv::Value::from(b"hello".to_vec());
/// assert_eq!(v, "hello");
/// assert!(v != "world");
/// assert_eq!(v, *"hello");
/// assert_eq!(v, String::from("hello"));
/// ```
impl PartialEq<str> for Value {
    fn eq(&self, other: &str) -> bool {
        self.0 == other.as_bytes()
    }
}

/// Compares with a string literal, as `PartialEq<str>` does.
///
/// ```
/// let v = bloomkv::Value::from(b"hello".to_vec());
/// assert!(v == "hello" && v != "hell");
/// ```
impl PartialEq<&str> for Value {
    fn eq(&self, other: &&str) -> bool {
        self.0 == other.as_bytes()
    }
}

/// Compares with a `String`, as `PartialEq<str>` does.
///
/// ```
/// let v = bloomkv::Value::from(b"hello".to_vec());
/// let expected = format!("hel{}", "lo");
/// assert_eq!(v, expected);
/// assert!(bloomkv::Value::from(vec![0xff]) != String::from("\u{ff}")); // bytes, not chars
/// ```
impl PartialEq<String> for Value {
    fn eq(&self, other: &String) -> bool {
        self.0 == other.as_bytes()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_shares_a_buffer_only_when_it_is_an_eighth_of_it_or_more() {
        assert!(may_share(512, 4096) && may_share(4096, 4096) && may_share(9000, 4096));
        assert!(!may_share(511, 4096) && !may_share(0, 1) && !may_share(100, 32 * 1024));
        assert!(may_share(0, 0), "an empty buffer pins nothing");
        assert!(may_share(usize::MAX, usize::MAX), "no overflow");
    }
}
