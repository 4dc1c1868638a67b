//! Merge operators: a keyspace's callback that combines a key's merge operands
//! (`Db::merge`) with the value beneath them, so a read-modify-write (a counter, an
//! append) becomes one blind write.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crate::{Error, Result};

/// A keyspace's merge operator, as RocksDB's `MergeOperator`.
///
/// `Db::merge` writes an *operand* for a key instead of a value. A read combines
/// the key's operands, oldest first, with the value beneath them — the newest put under
/// them, or none where a delete, a range deletion, an expired value or the bottom of the
/// tree comes first — through [`MergeOperator::full_merge`]. Compaction combines them
/// ahead of reads: onto their value when it meets one, else into one operand with
/// [`MergeOperator::partial_merge`] where the operator offers that.
///
/// Set with [`crate::options::KeyspaceOptions::merge_operator`] (or
/// `Options::merge_operator` for the default keyspace). The manifest records its
/// [`name`](MergeOperator::name), as RocksDB's OPTIONS file does, but cannot hold the object:
/// give it again at every open. An open that gives none, or one of another name, fails with
/// [`Error::SettingMismatch`], since changing the operator of a keyspace that holds operands
/// changes what they mean; to change it on purpose (to one that reads what the old one
/// wrote), set [`crate::options::KeyspaceOptions::change_settings`]. Without an operator, a merge
/// fails and a read that meets operands fails with [`Error::MergeOperatorMissing`].
///
/// An operator must be deterministic: compaction may combine some operands long before a
/// read combines the rest, and both must agree. It is called from readers' and
/// background threads at once (hence `Send + Sync`), should be quick and must not call
/// back into the database. An error or a panic is never a panic of the engine: the read
/// fails with [`Error::Merge`], and compaction keeps the operands uncombined.
///
/// # When merging fails
///
/// A merge is a blind write: nothing is read when it is written, so only what is wrong
/// with an operand on its own can be refused then ([`MergeOperator::check_operand`]; the
/// write fails with [`Error::Merge`] and nothing of it is written). Everything else — an
/// operator error, a panic, a result larger than [`crate::MAX_VALUE_BYTES`] (an
/// [`crate::merge::Append`] that has outgrown it, say) — shows when the operands are combined, as
/// in RocksDB: every read of the key fails with [`Error::Merge`] (a scan yields it at the
/// key and ends, as on any error: start the next one past the key), at once and after
/// flushes, compactions and reopens alike. Nothing is lost meanwhile: a flush or compaction
/// that cannot combine a key's operands writes them as they were (it never fails for it,
/// nor stops the database), so a fixed operator, given at the next open, reads them all. A
/// put, delete or range deletion of the key written after them replaces them, as it would
/// replace a value: from then on the key reads as that write left it.
///
/// ```
/// # fn main() -> bloomkv::Result<()> {
/// use std::sync::Arc;
/// use bloomkv::{Db, MergeOperator, Options, Readable};
///
/// /// Keeps the largest byte string written.
/// struct Max;
/// impl MergeOperator for Max {
///     fn name(&self) -> &str {
///         "max"
///     }
///     fn full_merge(
///         &self,
///         _key: &[u8],
///         existing: Option<&[u8]>,
///         operands: &[&[u8]],
///     ) -> Result<Vec<u8>, String> {
///         Ok(operands.iter().copied().chain(existing).max().unwrap_or_default().to_vec())
///     }
/// }
///
/// let dir = tempfile::tempdir().unwrap();
/// let db = Db::open(dir.path(), Options::new().merge_operator(Arc::new(Max)))?;
/// db.put("k", "m")?;
/// db.merge("k", "z")?;
/// db.merge("k", "a")?;
/// assert_eq!(db.get("k")?.as_deref(), Some(&b"z"[..]));
/// # Ok(()) }
/// ```
pub trait MergeOperator: Send + Sync {
    /// A name for errors and tools, recorded in the manifest: opens check that the operator
    /// they give has the recorded name. Rename an operator when what it makes of its
    /// operands changes.
    fn name(&self) -> &str;

    /// The value of `key` given the value beneath its operands (`None` where there is
    /// none) and the operands, oldest first. An `Err` is a reason, reported as
    /// [`Error::Merge`].
    fn full_merge(
        &self,
        key: &[u8],
        existing: Option<&[u8]>,
        operands: &[&[u8]],
    ) -> std::result::Result<Vec<u8>, String>;

    /// One operand equivalent to `operands` (oldest first, at least two), if the operator
    /// can combine operands without the value beneath them (an associative operator can);
    /// `None` keeps them apart. Used by compaction only.
    fn partial_merge(&self, _key: &[u8], _operands: &[&[u8]]) -> Option<Vec<u8>> {
        None
    }

    /// Whether `operand` may be written for `key`, asked as `Db::merge` (a
    /// `WriteBatch`, a `Transaction`) takes it: an `Err` (a reason) refuses
    /// the write with [`Error::Merge`], and nothing of it is written. It judges the operand
    /// alone — the engine reads nothing for it, a merge stays a blind write — so it can refuse
    /// only what no read could ever combine (a malformed operand); whether a key's operands
    /// combine with each other and the value beneath is known only when a read or a
    /// compaction combines them. Called on every merge: it should be quick. The default
    /// accepts every operand.
    fn check_operand(&self, _key: &[u8], _operand: &[u8]) -> std::result::Result<(), String> {
        Ok(())
    }
}

/// A counter: each operand and the value are `u64` little-endian (8 bytes), and the merge
/// is their wrapping sum; no value counts as 0. An operand of another length is refused when
/// it is written ([`Error::Merge`], see [`MergeOperator::check_operand`]). A value of another
/// length (a put) is malformed: a read of operands over it fails with [`Error::Merge`] (never
/// a panic, never a guess) until a put or delete replaces it, and compaction leaves such
/// operands as they are. Use [`U64Add::operand`] to encode one.
///
/// ```
/// # fn main() -> bloomkv::Result<()> {
/// use std::sync::Arc;
/// use bloomkv::{Db, Options, Readable, U64Add};
///
/// let dir = tempfile::tempdir().unwrap();
/// let db = Db::open(dir.path(), Options::new().merge_operator(Arc::new(U64Add)))?;
/// db.merge("hits", U64Add::operand(2))?;
/// db.merge("hits", U64Add::operand(3))?;
/// assert_eq!(U64Add::decode(&db.get("hits")?.unwrap()), Some(5));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct U64Add;

impl U64Add {
    /// The operand (or value) for `n`: its 8 bytes, little-endian.
    pub fn operand(n: u64) -> [u8; 8] {
        n.to_le_bytes()
    }

    /// The counter a value holds; `None` unless it is 8 bytes.
    pub fn decode(value: &[u8]) -> Option<u64> {
        Some(u64::from_le_bytes(value.try_into().ok()?))
    }

    fn sum<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> std::result::Result<u64, String> {
        parts.into_iter().try_fold(0u64, |sum, p| {
            U64Add::decode(p)
                .map(|n| sum.wrapping_add(n))
                .ok_or_else(|| format!("u64 counter: {} bytes where 8 were expected", p.len()))
        })
    }
}

impl MergeOperator for U64Add {
    fn name(&self) -> &str {
        "u64add"
    }

    fn full_merge(
        &self,
        _key: &[u8],
        existing: Option<&[u8]>,
        operands: &[&[u8]],
    ) -> std::result::Result<Vec<u8>, String> {
        Ok(U64Add::sum(existing.into_iter().chain(operands.iter().copied()))?
            .to_le_bytes()
            .to_vec())
    }

    fn partial_merge(&self, _key: &[u8], operands: &[&[u8]]) -> Option<Vec<u8>> {
        U64Add::sum(operands.iter().copied()).ok().map(|n| n.to_le_bytes().to_vec())
    }

    fn check_operand(&self, _key: &[u8], operand: &[u8]) -> std::result::Result<(), String> {
        U64Add::sum([operand]).map(|_| ())
    }
}

/// Appends each operand to the value, with `separator` between pieces (none before the
/// first piece when there is no value): a log, a list. Fails only when the result would be
/// larger than [`crate::MAX_VALUE_BYTES`]: a merge cannot know that when it is written
/// (it reads nothing), so the key's reads then fail with [`Error::Merge`] until a put or
/// delete of the key replaces what it holds (see `Db::merge`). A log that grows
/// without bound belongs in many keys (one per entry or per period), not in one value.
///
/// ```
/// # fn main() -> bloomkv::Result<()> {
/// use std::sync::Arc;
/// use bloomkv::{Append, Db, Options, Readable};
///
/// let dir = tempfile::tempdir().unwrap();
/// let db = Db::open(dir.path(), Options::new().merge_operator(Arc::new(Append::new(","))))?;
/// db.merge("tags", "red")?;
/// db.merge("tags", "blue")?;
/// assert_eq!(db.get("tags")?.as_deref(), Some(&b"red,blue"[..]));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct Append {
    separator: Vec<u8>,
}

impl Append {
    /// An append that puts `separator` between pieces (empty for none).
    pub fn new(separator: impl AsRef<[u8]>) -> Append {
        Append { separator: separator.as_ref().to_vec() }
    }

    /// The pieces joined, or an error if that is larger than [`crate::MAX_VALUE_BYTES`]:
    /// measured first, so a key that has outgrown the limit costs each read and compaction
    /// that meets it a sum, not a copy of everything it holds.
    fn join<'a>(
        &self,
        parts: impl Iterator<Item = &'a [u8]> + Clone,
    ) -> std::result::Result<Vec<u8>, String> {
        let (pieces, bytes) =
            parts.clone().fold((0usize, 0usize), |(n, b), p| (n + 1, b + p.len()));
        let len = bytes + self.separator.len() * pieces.saturating_sub(1);
        if len > crate::MAX_VALUE_BYTES {
            return Err(format!(
                "append: {pieces} pieces make {len} bytes, more than MAX_VALUE_BYTES"
            ));
        }
        let mut out = Vec::with_capacity(len);
        for (i, p) in parts.enumerate() {
            if i > 0 {
                out.extend_from_slice(&self.separator);
            }
            out.extend_from_slice(p);
        }
        Ok(out)
    }
}

impl MergeOperator for Append {
    fn name(&self) -> &str {
        "append"
    }

    fn full_merge(
        &self,
        _key: &[u8],
        existing: Option<&[u8]>,
        operands: &[&[u8]],
    ) -> std::result::Result<Vec<u8>, String> {
        self.join(existing.into_iter().chain(operands.iter().copied()))
    }

    fn partial_merge(&self, _key: &[u8], operands: &[&[u8]]) -> Option<Vec<u8>> {
        self.join(operands.iter().copied()).ok()
    }
}

/// A keyspace's operator as its options hold it: options compare equal when they hold the
/// same operator object (a callback has no other identity).
#[derive(Clone, Default)]
pub struct MergeSlot(pub Option<Arc<dyn MergeOperator>>);

impl PartialEq for MergeSlot {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }
}

impl std::fmt::Debug for MergeSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(op) => write!(f, "Some({})", op.name()),
            None => f.write_str("None"),
        }
    }
}

/// A keyspace's operator with the keyspace's name, for errors: the one place the engine
/// calls the user's operator, catching its panics.
#[derive(Clone)]
pub struct Merger {
    pub op: Option<Arc<dyn MergeOperator>>,
    pub keyspace: Arc<str>,
}

impl Merger {
    pub fn new(slot: &MergeSlot, keyspace: Arc<str>) -> Merger {
        Merger { op: slot.0.clone(), keyspace }
    }

    fn operator(&self) -> Result<&dyn MergeOperator> {
        self.op
            .as_deref()
            .ok_or_else(|| Error::MergeOperatorMissing { keyspace: self.keyspace.to_string() })
    }

    fn failure(&self, reason: String) -> Error {
        Error::Merge { keyspace: self.keyspace.to_string(), reason }
    }

    /// [`MergeOperator::full_merge`], its errors and panics as [`Error::Merge`] and a result
    /// larger than [`crate::MAX_VALUE_BYTES`] too (no table could hold it).
    pub fn full(&self, key: &[u8], existing: Option<&[u8]>, operands: &[&[u8]]) -> Result<Vec<u8>> {
        let op = self.operator()?;
        // Unwind safety: a panic fails only this read or leaves the compaction's operands
        // as they were; the operator is the user's to keep consistent.
        let merged = catch_unwind(AssertUnwindSafe(|| op.full_merge(key, existing, operands)))
            .map_err(|panic| self.failure(panic_message(panic)))?
            .map_err(|reason| self.failure(reason))?;
        if merged.len() > crate::MAX_VALUE_BYTES {
            return Err(self.failure(format!(
                "its result of {} bytes is larger than MAX_VALUE_BYTES",
                merged.len()
            )));
        }
        Ok(merged)
    }

    /// [`MergeOperator::check_operand`], its refusals and panics as [`Error::Merge`]; without
    /// an operator, [`Error::MergeOperatorMissing`].
    pub fn check(&self, key: &[u8], operand: &[u8]) -> Result<()> {
        let op = self.operator()?;
        catch_unwind(AssertUnwindSafe(|| op.check_operand(key, operand)))
            .map_err(|panic| self.failure(panic_message(panic)))?
            .map_err(|reason| self.failure(format!("it refused the operand: {reason}")))
    }

    /// [`MergeOperator::partial_merge`]; `None` also for a panic or an oversized result.
    pub fn partial(&self, key: &[u8], operands: &[&[u8]]) -> Option<Vec<u8>> {
        let op = self.op.as_deref()?;
        catch_unwind(AssertUnwindSafe(|| op.partial_merge(key, operands)))
            .ok()
            .flatten()
            .filter(|m| m.len() <= crate::MAX_VALUE_BYTES)
    }
}

/// A caught panic's message, when it has one.
pub fn panic_message(panic: Box<dyn std::any::Any + Send>) -> String {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string());
    format!("it panicked: {message}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_adds_and_refuses_malformed_values() {
        let c = U64Add;
        let (two, three) = (U64Add::operand(2), U64Add::operand(3));
        let sum = c.full_merge(b"k", Some(&two), &[&three, &three]).unwrap();
        assert_eq!(U64Add::decode(&sum), Some(8));
        assert_eq!(U64Add::decode(&c.full_merge(b"k", None, &[&two]).unwrap()), Some(2));
        let max = U64Add::operand(u64::MAX);
        assert_eq!(U64Add::decode(&c.full_merge(b"k", Some(&max), &[&two]).unwrap()), Some(1));
        assert!(c.full_merge(b"k", Some(b"abc"), &[&two]).unwrap_err().contains("3 bytes"));
        assert!(c.full_merge(b"k", None, &[b""]).is_err());
        assert_eq!(c.partial_merge(b"k", &[&two, &three]), Some(U64Add::operand(5).to_vec()));
        assert_eq!(c.partial_merge(b"k", &[&two, b"x"]), None);
        assert_eq!(c.check_operand(b"k", &two), Ok(()));
        assert!(c.check_operand(b"k", b"abc").unwrap_err().contains("3 bytes"));
    }

    #[test]
    fn append_joins_with_its_separator() {
        let a = Append::new(", ");
        assert_eq!(a.full_merge(b"k", None, &[b"x", b"y"]).unwrap(), b"x, y");
        assert_eq!(a.full_merge(b"k", Some(b"w"), &[b"x"]).unwrap(), b"w, x");
        assert_eq!(a.partial_merge(b"k", &[b"x", b"y"]).unwrap(), b"x, y");
        assert_eq!(Append::default().full_merge(b"k", Some(b"a"), &[b"b"]).unwrap(), b"ab");
    }

    #[test]
    fn append_refuses_a_result_over_max_value_bytes_before_building_it() {
        let half = vec![b'x'; crate::MAX_VALUE_BYTES / 2];
        let a = Append::new(",");
        // Exactly at the limit without a separator, one byte over with one.
        let at_limit = Append::default().full_merge(b"k", Some(&half), &[&half]).unwrap();
        assert_eq!(at_limit.len(), crate::MAX_VALUE_BYTES);
        let reason = a.full_merge(b"k", Some(&half), &[&half]).unwrap_err();
        assert!(reason.contains("2 pieces make 16777217 bytes"), "{reason}");
        assert_eq!(a.partial_merge(b"k", &[&half, &half]), None);
        assert_eq!(a.partial_merge(b"k", &[&half, b"y"]).unwrap().len(), half.len() + 2);
    }

    struct Panics;
    impl MergeOperator for Panics {
        fn name(&self) -> &str {
            "panics"
        }
        fn full_merge(&self, _: &[u8], _: Option<&[u8]>, _: &[&[u8]]) -> Result<Vec<u8>, String> {
            panic!("boom")
        }
        fn partial_merge(&self, _: &[u8], _: &[&[u8]]) -> Option<Vec<u8>> {
            panic!("boom")
        }
    }

    #[test]
    fn panics_and_errors_become_merge_errors() {
        let m = Merger { op: Some(Arc::new(Panics)), keyspace: "ks".into() };
        match m.full(b"k", None, &[b"x"]) {
            Err(Error::Merge { keyspace, reason }) => {
                assert_eq!(keyspace, "ks");
                assert!(reason.contains("boom"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(m.partial(b"k", &[b"x", b"y"]), None);
        let none = Merger { op: None, keyspace: "ks".into() };
        assert!(matches!(none.full(b"k", None, &[]), Err(Error::MergeOperatorMissing { .. })));
        let counter = Merger { op: Some(Arc::new(U64Add)), keyspace: "ks".into() };
        assert!(matches!(counter.full(b"k", Some(b"x"), &[]), Err(Error::Merge { .. })));
    }
}
