//! Internal keys: a user key tagged with a sequence number and a value kind.
//!
//! Encoded form (in the memtable, WAL-free structures and tables):
//!
//! ```text
//! user key bytes | trailer: u64 little-endian = (seqno << 8) | kind
//! ```
//!
//! Order: user key ascending (bytewise), then trailer *descending*, so that for one user key
//! the newest version comes first and a seek to `(key, snapshot_seqno)` lands on the newest
//! version a snapshot may see.

use std::cmp::Ordering;

/// Largest key a write accepts, in bytes (64 KiB). A longer key makes `put`, `delete` and
/// `write` fail with [`crate::Error::KeyTooLarge`] before anything reaches the WAL. Keys are
/// repeated in index blocks and key ranges that stay in memory, so they are kept short.
pub const MAX_KEY_BYTES: usize = 64 << 10;

/// Largest value a write batch, a transaction, a merge or a keyspace without a
/// `blob_threshold` accepts, in bytes (16 MiB): such a value is held whole in the WAL's
/// record and in the memtable (whose entries have 32-bit lengths). A larger value makes
/// `write` fail with [`crate::Error::ValueTooLarge`] before anything reaches the WAL.
///
/// A single `put` into a keyspace that separates values (`blob_threshold`) takes values up
/// to [`MAX_LARGE_VALUE_BYTES`]: one over this limit is written straight to a blob file of
/// its own, and only a reference to it is logged and held in the memtable.
pub const MAX_VALUE_BYTES: usize = 16 << 20;

/// Largest value a single `put` into a keyspace that separates values accepts, in bytes
/// (4 GiB). Nothing in the format bounds it (a blob reference's lengths are 64-bit and a
/// blob file's records any number of 32 KiB fragments): the bound is a `get`, which reads a
/// value whole into one allocation (its part, `get_range`, does not), and the writer, who
/// hands it over as one slice. A larger value fails with [`crate::Error::ValueTooLarge`]
/// before anything is written.
pub const MAX_LARGE_VALUE_BYTES: u64 = 4 << 30;

/// A sequence number: every write gets the next one; 56 bits are available.
pub type SeqNo = u64;

/// The largest sequence number that can be stored.
pub const MAX_SEQNO: SeqNo = (1 << 56) - 1;

/// Length of the trailer appended to a user key.
pub const TRAILER_LEN: usize = 8;

/// What an internal-key entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ValueKind {
    /// A tombstone: the key was deleted at this sequence number.
    Delete = 0,
    /// A value was put at this sequence number.
    Put = 1,
    /// A value with an expiry was put at this sequence number: the stored value is the
    /// expiry (milliseconds since the Unix epoch, `u64` little-endian) followed by the
    /// user's value. Once the clock reaches the expiry it reads as a tombstone.
    PutExpiring = 2,
    /// A merge operand (`Db::merge`) written at this sequence number: the keyspace's
    /// [`crate::merge::MergeOperator`] combines it with the older versions beneath it.
    Merge = 3,
    /// A merge operand written into a keyspace with a default time to live: the stored
    /// value is the expiry and the time it was written (milliseconds since the Unix epoch,
    /// each `u64` little-endian), then the operand. The key's merged value expires at its
    /// newest such operand's expiry; an older version takes part only if it was live when
    /// the next newer operand was written (see [`MergeClock`]).
    MergeExpiring = 4,
    /// A put whose value lives in a blob file: the stored value is a
    /// [`crate::blob::BlobRef`]. Only tables hold it (a flush or compaction separates the
    /// value); readers see a [`ValueKind::Put`] of the value it names.
    BlobPut = 5,
    /// An expiring put whose value lives in a blob file: the stored value is the expiry (as
    /// [`ValueKind::PutExpiring`]'s), then a [`crate::blob::BlobRef`], so expiry is judged
    /// without reading the blob file.
    BlobPutExpiring = 6,
}

impl ValueKind {
    /// Decodes a kind byte.
    pub fn from_u8(b: u8) -> Option<ValueKind> {
        match b {
            0 => Some(ValueKind::Delete),
            1 => Some(ValueKind::Put),
            2 => Some(ValueKind::PutExpiring),
            3 => Some(ValueKind::Merge),
            4 => Some(ValueKind::MergeExpiring),
            5 => Some(ValueKind::BlobPut),
            6 => Some(ValueKind::BlobPutExpiring),
            _ => None,
        }
    }

    /// Whether an entry of this kind is a merge operand.
    #[inline]
    pub fn is_operand(self) -> bool {
        matches!(self, ValueKind::Merge | ValueKind::MergeExpiring)
    }

    /// Whether an entry of this kind holds a blob reference rather than its value.
    #[inline]
    pub fn is_blob(self) -> bool {
        matches!(self, ValueKind::BlobPut | ValueKind::BlobPutExpiring)
    }

    /// Whether an entry of this kind is a put (of an inline value or of a reference).
    #[inline]
    pub fn is_put(self) -> bool {
        matches!(
            self,
            ValueKind::Put
                | ValueKind::PutExpiring
                | ValueKind::BlobPut
                | ValueKind::BlobPutExpiring
        )
    }

    /// Whether an entry of this kind stores an expiry before its value (or reference).
    #[inline]
    pub fn is_expiring(self) -> bool {
        matches!(
            self,
            ValueKind::PutExpiring | ValueKind::MergeExpiring | ValueKind::BlobPutExpiring
        )
    }
}

/// The kind used when building a seek key: the largest kind code, so it sorts first among
/// equal `(key, seqno)`.
pub const KIND_FOR_SEEK: ValueKind = ValueKind::BlobPutExpiring;

/// Length of the stamp (expiry, then time written) that prefixes the stored value of a
/// [`ValueKind::MergeExpiring`].
pub const MERGE_STAMP_LEN: usize = 16;

/// Splits the stored value of a [`ValueKind::MergeExpiring`] into its expiry, the time it
/// was written and the operand; `None` if it is shorter than the stamp.
#[inline]
pub fn split_merge_expiring(stored: &[u8]) -> Option<(u64, u64, &[u8])> {
    let (expiry, rest) = stored.split_first_chunk::<8>()?;
    let (written, operand) = rest.split_first_chunk::<8>()?;
    Some((u64::from_le_bytes(*expiry), u64::from_le_bytes(*written), operand))
}

/// The stored value of a [`ValueKind::MergeExpiring`].
pub fn merge_expiring_value(expiry: u64, written: u64, operand: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(MERGE_STAMP_LEN + operand.len());
    v.extend_from_slice(&expiry.to_le_bytes());
    v.extend_from_slice(&written.to_le_bytes());
    v.extend_from_slice(operand);
    v
}

/// Judges a key's versions newest first beneath merge operands, by the rule that a key
/// merged into with a time to live lives that long past its last write, as a put would: a
/// version takes part only if it was live when the next newer stamped operand was written
/// (or, beneath plain operands only, at the read's time). Every reader of operands (views,
/// flushes and compactions) judges through this, so they agree.
#[derive(Debug, Clone, Copy)]
pub struct MergeClock {
    /// The time the next older version is judged at.
    pub at: u64,
    /// True once `at` is a stamped operand's write time rather than the read's time: the
    /// judgements below no longer depend on when the read happens.
    pub fixed: bool,
}

impl MergeClock {
    /// Judging from `now`, the read's time.
    pub fn new(now: u64) -> Self {
        MergeClock { at: now, fixed: false }
    }

    /// Whether an operand of `kind` stored as `stored` takes part, and its operand bytes;
    /// `None`: it had expired (as had everything older), so the key's history ends here.
    pub fn operand<'a>(&mut self, kind: ValueKind, stored: &'a [u8]) -> Option<&'a [u8]> {
        if kind != ValueKind::MergeExpiring {
            return Some(stored);
        }
        let (expiry, written, operand) = split_merge_expiring(stored)?;
        if expiry <= self.at {
            return None;
        }
        self.at = written.min(self.at);
        self.fixed = true;
        Some(operand)
    }

    /// Whether an expiring value expiring at `expiry` takes part as the base.
    pub fn live(&self, expiry: u64) -> bool {
        expiry > self.at
    }
}

/// Length of the expiry that prefixes the stored value of a [`ValueKind::PutExpiring`].
pub const EXPIRY_LEN: usize = 8;

/// Splits the stored value of a [`ValueKind::PutExpiring`] into its expiry (milliseconds
/// since the Unix epoch) and the user's value; `None` if it is shorter than the expiry.
#[inline]
pub fn split_expiring(stored: &[u8]) -> Option<(u64, &[u8])> {
    let (head, value) = stored.split_first_chunk::<EXPIRY_LEN>()?;
    Some((u64::from_le_bytes(*head), value))
}

/// The stored value of a [`ValueKind::PutExpiring`]: `expiry` then `value`.
pub fn expiring_value(expiry: u64, value: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(EXPIRY_LEN + value.len());
    v.extend_from_slice(&expiry.to_le_bytes());
    v.extend_from_slice(value);
    v
}

/// Packs a sequence number and kind into a trailer.
#[inline]
pub fn pack_trailer(seq: SeqNo, kind: ValueKind) -> u64 {
    debug_assert!(seq <= MAX_SEQNO);
    (seq << 8) | kind as u64
}

/// Appends the internal-key encoding of `(user_key, seq, kind)` to `buf`.
#[inline]
pub fn append_internal_key(buf: &mut Vec<u8>, user_key: &[u8], seq: SeqNo, kind: ValueKind) {
    buf.extend_from_slice(user_key);
    buf.extend_from_slice(&pack_trailer(seq, kind).to_le_bytes());
}

/// Encodes an internal key into a new vector.
pub fn internal_key(user_key: &[u8], seq: SeqNo, kind: ValueKind) -> Vec<u8> {
    let mut v = Vec::with_capacity(user_key.len() + TRAILER_LEN);
    append_internal_key(&mut v, user_key, seq, kind);
    v
}

/// A decoded internal key borrowing its user key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParsedKey<'a> {
    /// The user's key.
    pub user_key: &'a [u8],
    /// Its sequence number.
    pub seq: SeqNo,
    /// Put or delete.
    pub kind: ValueKind,
}

/// Splits an encoded internal key; `None` if it is too short or the kind byte is unknown.
#[inline]
pub fn parse_internal_key(ikey: &[u8]) -> Option<ParsedKey<'_>> {
    let split = ikey.len().checked_sub(TRAILER_LEN)?;
    let trailer = u64::from_le_bytes(ikey[split..].try_into().ok()?);
    let kind = ValueKind::from_u8(trailer as u8)?;
    Some(ParsedKey { user_key: &ikey[..split], seq: trailer >> 8, kind })
}

/// The user-key part of an encoded internal key (the whole slice if it is too short).
#[inline]
pub fn user_key(ikey: &[u8]) -> &[u8] {
    &ikey[..ikey.len().saturating_sub(TRAILER_LEN)]
}

/// The trailer of an encoded internal key (0 if it is too short), as `compare_internal`
/// reads it.
#[inline]
pub fn trailer(ikey: &[u8]) -> u64 {
    match ikey.len().checked_sub(TRAILER_LEN) {
        Some(s) => u64::from_le_bytes(ikey[s..].try_into().unwrap_or([0; 8])),
        None => 0,
    }
}

/// Compares two encoded internal keys: user key ascending, then trailer descending.
#[inline]
pub fn compare_internal(a: &[u8], b: &[u8]) -> Ordering {
    let (ua, ub) = (user_key(a), user_key(b));
    // Most keys differ within their first eight bytes: two numbers decide, without a call
    // to `memcmp` (merges, table building and lookups compare keys per entry).
    if let (Some(ha), Some(hb)) = (ua.first_chunk::<8>(), ub.first_chunk::<8>()) {
        let (ha, hb) = (u64::from_be_bytes(*ha), u64::from_be_bytes(*hb));
        if ha != hb {
            return ha.cmp(&hb);
        }
    }
    match ua.cmp(ub) {
        Ordering::Equal => trailer(b).cmp(&trailer(a)),
        o => o,
    }
}

/// The smallest user key greater than every key starting with `prefix`, or `None` if there is
/// none (the prefix is empty or all 0xff).
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut p = prefix.to_vec();
    while let Some(last) = p.pop() {
        if last != 0xff {
            p.push(last + 1);
            return Some(p);
        }
    }
    None
}

/// An encoded internal key ordered as [`compare_internal`] orders it, for `BTreeMap` models
/// in tests.
#[cfg(test)]
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct OrderedKey(pub Vec<u8>);

#[cfg(test)]
impl Ord for OrderedKey {
    fn cmp(&self, o: &Self) -> Ordering {
        compare_internal(&self.0, &o.0)
    }
}

#[cfg(test)]
impl PartialOrd for OrderedKey {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// `bytes` as text, the way reports and errors show keys: printable ASCII as is, `\\`,
/// `\"` and `\xNN` for everything else, so any byte string prints on one line.
pub fn escape(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len());
    for &b in bytes {
        match b {
            b'\\' => s.push_str("\\\\"),
            b'"' => s.push_str("\\\""),
            0x20..=0x7e => s.push(b as char),
            _ => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The comparison's shortcut on the first eight bytes agrees with comparing the user
        /// keys byte by byte, then the trailers: keys shorter, longer and around eight bytes,
        /// over few byte values so that long shared heads are common.
        #[test]
        fn prop_order_is_bytewise_user_key_then_trailer(
            a in proptest::collection::vec(0u8..3, 0..12),
            b in proptest::collection::vec(0u8..3, 0..12),
            s in 0u64..3,
            t in 0u64..3,
        ) {
            let (x, y) = (internal_key(&a, s, ValueKind::Put), internal_key(&b, t, ValueKind::Put));
            let want = a.cmp(&b).then(t.cmp(&s));
            prop_assert_eq!(compare_internal(&x, &y), want);
        }
    }

    #[test]
    fn order_is_user_key_then_newest_first() {
        let a1 = internal_key(b"a", 1, ValueKind::Put);
        let a5 = internal_key(b"a", 5, ValueKind::Delete);
        let ab0 = internal_key(b"ab", 0, ValueKind::Put);
        let b9 = internal_key(b"b", 9, ValueKind::Put);
        let mut v = vec![b9.clone(), ab0.clone(), a1.clone(), a5.clone()];
        v.sort_by(|x, y| compare_internal(x, y));
        assert_eq!(v, vec![a5, a1, ab0, b9]);
        let encoded = internal_key(b"xy", 42, ValueKind::Delete);
        let p = parse_internal_key(&encoded).unwrap();
        assert_eq!((p.user_key, p.seq, p.kind), (&b"xy"[..], 42, ValueKind::Delete));
        assert!(parse_internal_key(b"short").is_none());
    }

    #[test]
    fn prefix_successor_cases() {
        assert_eq!(prefix_successor(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_successor(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_successor(b"\xff\xff"), None);
        assert_eq!(prefix_successor(b""), None);
    }
}
