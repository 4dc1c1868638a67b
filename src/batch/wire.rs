//! The encoding of a write batch (specified byte by byte in `docs/format/batch.md`):
//! building it op by op, checking a decoded one, and iterating over its ops.
//!
//! # Encoding
//!
//! A batch's bytes are exactly the payload of its write-ahead-log record, so committing a
//! batch costs no re-encoding and replaying the log decodes records straight into batches:
//!
//! ```text
//! seq    u64 little-endian   sequence number of the first operation (the i-th gets seq + i)
//! count  u32 little-endian   number of operations
//! ops    count times:
//!          kind  u8          0 = delete, 1 = put (the values of `ValueKind`),
//!                            2 = range delete, 3 = reserved, 4 = expiring put,
//!                            6 = merge operand, 7 = stamped merge
//!                            operand, 8 = put of a value in a blob file of
//!                            its own; plus 0x80 if a keyspace id follows
//!          keyspace varint   (only with 0x80) the keyspace the op writes to; without it,
//!                            the default keyspace (0)
//!          klen  varint, key bytes          (a range delete's start; not for reserved)
//!          vlen  varint, value bytes        (puts, operands; a range delete's end,
//!                                           exclusive)
//! ```
//!
//! An expiring put's value bytes are the entry's stored value: the expiry, `u64`
//! little-endian milliseconds since the Unix epoch, then the user's value (so `vlen` is at
//! least 8). Only builds that know expiring puts write kind 4, and only for a database that
//! was given one; older builds refuse such a record as corrupt rather than misread it.
//!
//! A merge operand's value bytes are the operand as given to `merge`. Only builds that know
//! merge operands write kind 6; older builds refuse such a record as corrupt. A merge into a
//! keyspace with a default time to live is logged as kind 7, whose value bytes are the
//! entry's stored value: the expiry and the time written (`u64` little-endian milliseconds
//! each), then the operand; older builds refuse it as corrupt.
//!
//! A batch being built may also hold kind 5, a put with a time to live (8 bytes of
//! milliseconds in place of the expiry). It never reaches a log: the write path turns each
//! into kind 4 with the clock's time added (and a plain put into a keyspace with a default
//! time to live likewise) before logging, and a log record holding kind 5 is corrupt.
//!
//! A reserved op takes a sequence number and changes nothing: an ingest logs one, alone in
//! its batch, to claim the number its tables' entries carry while writes after it go on
//! (see `db::ingest`).
//!
//! The count in the header lets a decoder check that the record holds exactly the
//! operations it claims, so a record cut short at an operation boundary is still caught.
//! Empty keys and empty values are allowed, as in LevelDB: nothing in the engine gives the
//! empty key a special meaning.

use super::{Handles, WriteBatch};
use crate::coding::{put_bytes, put_varint, Decoder};
use crate::key::{SeqNo, ValueKind};
use crate::version::edit::{KeyspaceId, DEFAULT_KEYSPACE};
use crate::{Error, Result};

/// The kind byte of a range deletion (after `ValueKind`'s 0 and 1).
pub(super) const OP_DELETE_RANGE: u8 = 2;

/// The kind byte of a sequence number reserved for an ingest: no keyspace, key or value.
pub(super) const OP_RESERVED: u8 = 3;

/// The kind byte of an expiring put: the value is the expiry (8 bytes) and the user's value.
pub(super) const OP_PUT_EXPIRING: u8 = ValueKind::PutExpiring as u8 + 2;

/// The kind byte of a put with a time to live, in a batch not yet written (never logged):
/// the value is the time to live in milliseconds (8 bytes) and the user's value.
pub(super) const OP_PUT_TTL: u8 = 5;

/// The kind byte of a merge operand.
pub(super) const OP_MERGE: u8 = 6;

/// The kind byte of a merge operand stamped with an expiry and its write time.
pub(super) const OP_MERGE_EXPIRING: u8 = 7;

/// The kind byte of a put whose value was written straight to a blob file of its own (one
/// over `MAX_VALUE_BYTES`): the value bytes are the `BlobRef` naming it.
pub(super) const OP_BLOB_PUT: u8 = 8;

/// Set in the kind byte of an op on a keyspace other than the default one: the keyspace id
/// follows as a varint. Ops on the default keyspace are encoded as before keyspaces existed.
pub(super) const IN_KEYSPACE: u8 = 0x80;

/// One operation of a batch, as [`WriteBatch::iter`] yields it. Not part of the stable API.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchOp<'a> {
    /// `key → value`.
    Put {
        /// The key.
        key: &'a [u8],
        /// The value.
        value: &'a [u8],
    },
    /// `key → value` expiring at `expiry` (milliseconds since the Unix epoch); `stored` is
    /// the entry's stored value (the expiry, then the value).
    PutExpiring {
        /// The key.
        key: &'a [u8],
        /// The expiry followed by the value.
        stored: &'a [u8],
    },
    /// `key → value` with a time to live, in a batch not yet written: `stored` holds the
    /// time to live in milliseconds (8 bytes), then the value.
    PutTtl {
        /// The key.
        key: &'a [u8],
        /// The time to live followed by the value.
        stored: &'a [u8],
    },
    /// A merge operand for `key` ([`crate::Db::merge`]).
    Merge {
        /// The key.
        key: &'a [u8],
        /// The operand.
        operand: &'a [u8],
    },
    /// A merge operand for `key` into a keyspace with a default time to live, stamped when
    /// written: `stored` is the expiry and the write time (8 bytes each), then the operand.
    MergeExpiring {
        /// The key.
        key: &'a [u8],
        /// The stamp followed by the operand.
        stored: &'a [u8],
    },
    /// A deletion of `key`.
    Delete {
        /// The key.
        key: &'a [u8],
    },
    /// A deletion of every key in `start..end`.
    DeleteRange {
        /// First key deleted.
        start: &'a [u8],
        /// First key kept after the range (exclusive).
        end: &'a [u8],
    },
    /// `key → ` the value in a blob file of its own that `reference` (an encoded
    /// `BlobRef`) names: a value larger than `MAX_VALUE_BYTES`, written there, and synced,
    /// before this op was logged.
    BlobPut {
        /// The key.
        key: &'a [u8],
        /// The encoded reference.
        reference: &'a [u8],
    },
    /// A sequence number taken by an ingest, whose tables hold the entries written at it;
    /// it changes nothing here. Always the only op of its batch, on no keyspace.
    Reserved,
}

/// Size of the `seq | count` header.
pub(super) const HEADER_LEN: usize = 12;

impl WriteBatch {
    pub(crate) fn merge_to(&mut self, keyspace: KeyspaceId, key: &[u8], operand: &[u8]) {
        self.op_header(OP_MERGE, keyspace);
        put_bytes(&mut self.data, key);
        put_bytes(&mut self.data, operand);
    }

    pub(crate) fn put_to(&mut self, keyspace: KeyspaceId, key: &[u8], value: &[u8]) {
        self.op_header(ValueKind::Put as u8, keyspace);
        put_bytes(&mut self.data, key);
        put_bytes(&mut self.data, value);
    }

    /// Adds `key →` the value blob reference `reference` names.
    pub(crate) fn put_blob_ref_to(&mut self, keyspace: KeyspaceId, key: &[u8], reference: &[u8]) {
        self.op_header(OP_BLOB_PUT, keyspace);
        put_bytes(&mut self.data, key);
        put_bytes(&mut self.data, reference);
    }

    /// Adds `key → value` expiring at `expiry` (milliseconds since the Unix epoch).
    pub(crate) fn put_expiring_to(
        &mut self,
        keyspace: KeyspaceId,
        key: &[u8],
        expiry: u64,
        value: &[u8],
    ) {
        self.op_header(OP_PUT_EXPIRING, keyspace);
        self.put_prefixed_value(key, expiry, value);
    }

    /// Adds `key → value` living `ttl_ms` milliseconds from when the batch is written.
    pub(crate) fn put_ttl_to(
        &mut self,
        keyspace: KeyspaceId,
        key: &[u8],
        ttl_ms: u64,
        value: &[u8],
    ) {
        self.op_header(OP_PUT_TTL, keyspace);
        self.put_prefixed_value(key, ttl_ms, value);
        self.relative_ttls = true;
    }

    fn put_prefixed_value(&mut self, key: &[u8], head: u64, value: &[u8]) {
        put_bytes(&mut self.data, key);
        put_varint(&mut self.data, (value.len() + crate::key::EXPIRY_LEN) as u64);
        self.data.extend_from_slice(&head.to_le_bytes());
        self.data.extend_from_slice(value);
    }

    pub(crate) fn delete_to(&mut self, keyspace: KeyspaceId, key: &[u8]) {
        self.op_header(ValueKind::Delete as u8, keyspace);
        put_bytes(&mut self.data, key);
    }

    pub(crate) fn delete_range_to(&mut self, keyspace: KeyspaceId, start: &[u8], end: &[u8]) {
        if start >= end {
            return;
        }
        self.op_header(OP_DELETE_RANGE, keyspace);
        put_bytes(&mut self.data, start);
        put_bytes(&mut self.data, end);
    }

    pub(super) fn op_header(&mut self, kind: u8, keyspace: KeyspaceId) {
        self.bump_count();
        if keyspace == DEFAULT_KEYSPACE {
            self.data.push(kind);
        } else {
            self.data.push(kind | IN_KEYSPACE);
            put_varint(&mut self.data, keyspace.into());
        }
    }

    /// A batch that only takes one sequence number, for an ingest to claim it in the log.
    pub(crate) fn reserved() -> WriteBatch {
        let mut b = WriteBatch::new();
        b.data.push(OP_RESERVED);
        b.bump_count();
        b
    }

    /// Whether the batch is one put or delete (plain or expiring): an entry that reads
    /// never combine with the versions beneath it, so it may be applied beside other writes
    /// (`db/in_flight.rs`).
    pub(crate) fn is_single_overwrite(&self) -> bool {
        // The first op's kind byte, read without decoding the op.
        let kind = |k: u8| k & !IN_KEYSPACE;
        self.count() == 1
            && self.data.get(HEADER_LEN).is_some_and(|&k| {
                [ValueKind::Put as u8, ValueKind::Delete as u8, OP_PUT_EXPIRING].contains(&kind(k))
            })
    }

    /// Sets the sequence number of the first operation.
    pub(crate) fn set_sequence(&mut self, seq: SeqNo) {
        self.data[..8].copy_from_slice(&seq.to_le_bytes());
    }

    /// Bytes allocated for the encoding.
    pub(crate) fn capacity(&self) -> usize {
        self.data.capacity()
    }

    /// The encoded batch: the log record payload.
    pub(crate) fn data(&self) -> &[u8] {
        &self.data
    }

    /// Decodes a log record, checking the whole of it: the header, every operation's kind
    /// and lengths, that exactly `count` operations are present and nothing follows them.
    /// Errors are [`Error::Corruption`] with offsets inside the record and no file; the
    /// caller adds the file with [`Error::in_file`].
    pub(crate) fn from_record(data: Vec<u8>) -> Result<WriteBatch> {
        if data.len() < HEADER_LEN {
            return Err(Error::bad_bytes(0, "write batch shorter than its header"));
        }
        let count = crate::coding::get_u32(&data, 8).unwrap_or(0);
        let mut d = Decoder::new(&data[HEADER_LEN..]);
        for i in 0..count {
            let at = (HEADER_LEN + d.position()) as u64;
            let bad = |what: &str| Error::bad_bytes(at, format!("write batch op {i}: {what}"));
            let kind = d.u8().ok_or_else(|| bad("missing (batch has fewer ops than counted)"))?;
            if kind & IN_KEYSPACE != 0 {
                let id = d.varint().ok_or_else(|| bad("bad keyspace id"))?;
                if id == 0 || id > u64::from(KeyspaceId::MAX) {
                    return Err(bad("keyspace id out of range"));
                }
            }
            if kind == OP_RESERVED {
                // Only an ingest writes one, alone in a batch and on no keyspace.
                if count != 1 {
                    return Err(bad("reserved op in a batch of more than one op"));
                }
                continue;
            }
            let kind = kind & !IN_KEYSPACE;
            let has_value = match kind {
                k if k == ValueKind::Put as u8 => true,
                k if k == ValueKind::Delete as u8 => false,
                OP_DELETE_RANGE | OP_PUT_EXPIRING | OP_MERGE | OP_MERGE_EXPIRING | OP_BLOB_PUT => {
                    true
                }
                OP_PUT_TTL => return Err(bad("put with a time to live (never logged)")),
                _ => return Err(bad("unknown kind")),
            };
            let key = d.length_prefixed().ok_or_else(|| bad("bad key length"))?;
            if has_value {
                let value = d.length_prefixed().ok_or_else(|| bad("bad value length"))?;
                // `delete_range` never writes an empty range, and a replay must not meet one.
                if kind == OP_DELETE_RANGE && key >= value {
                    return Err(bad("range delete with start not below end"));
                }
                if kind == OP_PUT_EXPIRING && value.len() < crate::key::EXPIRY_LEN {
                    return Err(bad("expiring put without its 8-byte expiry"));
                }
                if kind == OP_MERGE_EXPIRING && value.len() < crate::key::MERGE_STAMP_LEN {
                    return Err(bad("expiring merge operand without its 16-byte stamp"));
                }
                if kind == OP_BLOB_PUT && crate::blob::BlobRef::decode(value).is_err() {
                    return Err(bad("malformed blob reference"));
                }
            }
        }
        if !d.is_empty() {
            let at = (HEADER_LEN + d.position()) as u64;
            return Err(Error::bad_bytes(at, "bytes after the last counted op of a write batch"));
        }
        Ok(WriteBatch { data, handles: Handles::default(), relative_ttls: false })
    }

    /// Every put's value (plain or expiring) as it lies in the batch's bytes: its sequence
    /// number (the batch's first plus the op's index), keyspace, and the user value's offset
    /// in [`WriteBatch::data`] and length (an expiring put's expiry is not part of it). What
    /// a flush needs to find a logged value in its WAL segment.
    pub(crate) fn put_values(&self) -> impl Iterator<Item = PutValue> + '_ {
        let base = self.data.as_ptr() as usize;
        (self.sequence()..).zip(self.iter()).filter_map(move |(seq, (keyspace, op))| {
            let (value, skip) = match op {
                BatchOp::Put { value, .. } => (value, 0),
                BatchOp::PutExpiring { stored, .. } => (stored, crate::key::EXPIRY_LEN),
                _ => return None,
            };
            // The op borrows from `data`, so its value lies inside it.
            let offset = value.as_ptr() as usize - base + skip;
            Some(PutValue { seq, keyspace, offset, len: value.len().saturating_sub(skip) })
        })
    }

    pub(super) fn count(&self) -> u32 {
        crate::coding::get_u32(&self.data, 8).unwrap_or(0)
    }

    fn set_count(&mut self, count: u32) {
        self.data[8..HEADER_LEN].copy_from_slice(&count.to_le_bytes());
    }

    pub(super) fn bump_count(&mut self) {
        let count = self.count().checked_add(1).expect("write batch op count overflow");
        self.set_count(count);
    }
}

/// A put's value as it lies in its batch's bytes ([`WriteBatch::put_values`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PutValue {
    pub seq: SeqNo,
    pub keyspace: KeyspaceId,
    /// Offset of the user value's first byte in the batch's bytes.
    pub offset: usize,
    pub len: usize,
}

/// Iterator over a batch's operations, from [`WriteBatch::iter`].
#[derive(Debug)]
pub struct WriteBatchIter<'a> {
    pub(super) d: Decoder<'a>,
    pub(super) left: u32,
}

impl<'a> Iterator for WriteBatchIter<'a> {
    type Item = (KeyspaceId, BatchOp<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        // The batch was validated, so the decoder cannot run short; ending the iteration
        // is the panic-free answer if it somehow did.
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let kind = self.d.u8()?;
        if kind == OP_RESERVED {
            return Some((DEFAULT_KEYSPACE, BatchOp::Reserved));
        }
        let keyspace = match kind & IN_KEYSPACE {
            0 => DEFAULT_KEYSPACE,
            _ => KeyspaceId::try_from(self.d.varint()?).ok()?,
        };
        let kind = kind & !IN_KEYSPACE;
        let key = self.d.length_prefixed()?;
        let op = match kind {
            k if k == ValueKind::Put as u8 => {
                BatchOp::Put { key, value: self.d.length_prefixed()? }
            }
            k if k == ValueKind::Delete as u8 => BatchOp::Delete { key },
            OP_PUT_EXPIRING => BatchOp::PutExpiring { key, stored: self.d.length_prefixed()? },
            OP_PUT_TTL => BatchOp::PutTtl { key, stored: self.d.length_prefixed()? },
            OP_MERGE => BatchOp::Merge { key, operand: self.d.length_prefixed()? },
            OP_MERGE_EXPIRING => BatchOp::MergeExpiring { key, stored: self.d.length_prefixed()? },
            OP_DELETE_RANGE => BatchOp::DeleteRange { start: key, end: self.d.length_prefixed()? },
            OP_BLOB_PUT => BatchOp::BlobPut { key, reference: self.d.length_prefixed()? },
            _ => return None,
        };
        Some((keyspace, op))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.left as usize))
    }
}
