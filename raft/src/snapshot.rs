//! The snapshot format, and where the current snapshot is kept.
//!
//! A snapshot is one byte string:
//!
//! ```text
//! magic    8 bytes   "bkvraft1"
//! hlen     u32 LE    length of the header
//! header   hlen      postcard `Header`: last applied log id, last membership
//! pairs    repeated: klen u32 LE, key (without "data/"), vlen u32 LE, value; in key order
//! end      u32 LE    0xFFFF_FFFF, where the next klen would be
//! count    u64 LE    number of pairs
//! crc      u32 LE    CRC-32 (IEEE) of every byte before it
//! ```
//!
//! The header repeats what openraft's `SnapshotMeta` says of the state, so a snapshot is
//! checked against the meta it is installed with. The current snapshot is stored in the
//! node's database (`snapshot/meta` and `snapshot/chunk/<n>`, see `keys.rs`), replaced by one
//! batch, so a crash leaves the old one or the new one.

use bloomkv::WriteBatch;
use openraft::{AnyError, BasicNode, LogId, SnapshotMeta, StoredMembership};
use serde::{Deserialize, Serialize};

use crate::{decode, encode, keys, NodeId};

const MAGIC: &[u8; 8] = b"bkvraft1";
const END: u32 = u32::MAX;

/// What a snapshot says of the state it holds.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub(crate) struct Header {
    pub last_applied: Option<LogId<NodeId>>,
    pub last_membership: StoredMembership<NodeId, BasicNode>,
}

/// Serialises a view of the state machine (a bloomkv snapshot, so the data, the applied id
/// and the membership are of one moment).
pub(crate) fn build(view: &bloomkv::Snapshot) -> Result<(Header, Vec<u8>), AnyError> {
    let header = Header {
        last_applied: decode(view.get(keys::APPLIED))?,
        last_membership: decode(view.get(keys::MEMBERSHIP))?.unwrap_or_default(),
    };
    let header_bytes = encode(&header)?;
    let mut out = Vec::with_capacity(1024);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&len32(header_bytes.len())?.to_le_bytes());
    out.extend_from_slice(&header_bytes);
    let mut count = 0u64;
    for item in view.prefix(keys::DATA) {
        let (key, value) = item.map_err(|e| AnyError::new(&e))?;
        let key = &key[keys::DATA.len()..];
        out.extend_from_slice(&len32(key.len())?.to_le_bytes());
        out.extend_from_slice(key);
        out.extend_from_slice(&len32(value.len())?.to_le_bytes());
        out.extend_from_slice(&value);
        count += 1;
    }
    out.extend_from_slice(&END.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok((header, out))
}

fn len32(len: usize) -> Result<u32, AnyError> {
    // bloomkv's own limits keep keys and values far below this; the check keeps a length
    // from being cut silently if those limits ever grow.
    u32::try_from(len).ok().filter(|&l| l != END).ok_or_else(|| AnyError::error("entry too long"))
}

/// Checks `bytes` and hands each pair to `pair`, in order; returns the header. Nothing is
/// handed over unless the whole snapshot checks out.
pub(crate) fn read(bytes: &[u8], mut pair: impl FnMut(&[u8], &[u8])) -> Result<Header, AnyError> {
    let bad = |what: &str| AnyError::error(format!("bad snapshot: {what}"));
    let body_len = bytes.len().checked_sub(4).ok_or_else(|| bad("too short"))?;
    let (body, crc) = bytes.split_at(body_len);
    if crc32fast::hash(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
        return Err(bad("checksum mismatch"));
    }
    let mut r = Reader { rest: body };
    if r.take(MAGIC.len()).ok_or_else(|| bad("too short"))? != MAGIC {
        return Err(bad("not a bloomkv-raft snapshot"));
    }
    let header_len = r.u32().ok_or_else(|| bad("no header"))? as usize;
    let header_bytes = r.take(header_len).ok_or_else(|| bad("header cut short"))?;
    let header: Header = postcard::from_bytes(header_bytes).map_err(|e| AnyError::new(&e))?;
    // Two passes: the checksum already matched, so this one only validates the framing
    // before the second hands out pairs.
    let pairs_start = r.rest;
    let count = walk(&mut r, |_, _| {}).ok_or_else(|| bad("pair cut short"))?;
    let trailer = r.take(8).ok_or_else(|| bad("no count"))?;
    if !r.rest.is_empty() || u64::from_le_bytes(trailer.try_into().expect("8 bytes")) != count {
        return Err(bad("count mismatch"));
    }
    walk(&mut Reader { rest: pairs_start }, &mut pair).expect("validated above");
    Ok(header)
}

/// Reads pairs up to the end marker; `None` if the bytes end first.
fn walk(r: &mut Reader, mut pair: impl FnMut(&[u8], &[u8])) -> Option<u64> {
    let mut count = 0;
    loop {
        let key_len = r.u32()?;
        if key_len == END {
            return Some(count);
        }
        let key = r.take(key_len as usize)?;
        let value_len = r.u32()? as usize;
        let value = r.take(value_len)?;
        pair(key, value);
        count += 1;
    }
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.rest.len() < n {
            return None;
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Some(head)
    }

    fn u32(&mut self) -> Option<u32> {
        self.take(4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }
}

/// The record of the current snapshot under `snapshot/meta`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Stored {
    pub meta: SnapshotMeta<NodeId, BasicNode>,
    pub len: u64,
    pub chunks: u32,
}

/// Adds to `batch` what makes `bytes` the current snapshot in place of `previous`.
pub(crate) fn stage_store(
    batch: &mut WriteBatch,
    previous: Option<&Stored>,
    meta: &SnapshotMeta<NodeId, BasicNode>,
    bytes: &[u8],
) -> Result<(), AnyError> {
    let mut chunks = 0u32;
    for chunk in bytes.chunks(keys::SNAPSHOT_CHUNK_BYTES) {
        batch.put(keys::snapshot_chunk(chunks), chunk);
        chunks += 1;
    }
    for stale in chunks..previous.map_or(0, |p| p.chunks) {
        batch.delete(keys::snapshot_chunk(stale));
    }
    let stored = Stored { meta: meta.clone(), len: bytes.len() as u64, chunks };
    batch.put(keys::SNAPSHOT_META, encode(&stored)?);
    Ok(())
}

/// The current snapshot's record, from `view`.
pub(crate) fn stored(view: &bloomkv::Snapshot) -> Result<Option<Stored>, AnyError> {
    decode(view.get(keys::SNAPSHOT_META))
}

/// The current snapshot's bytes, from `view`.
pub(crate) fn load(view: &bloomkv::Snapshot, stored: &Stored) -> Result<Vec<u8>, AnyError> {
    let mut bytes = Vec::with_capacity(stored.len as usize);
    for n in 0..stored.chunks {
        let chunk = view
            .get(keys::snapshot_chunk(n))
            .map_err(|e| AnyError::new(&e))?
            .ok_or_else(|| AnyError::error(format!("snapshot chunk {n} is missing")))?;
        bytes.extend_from_slice(&chunk);
    }
    if bytes.len() as u64 != stored.len {
        return Err(AnyError::error("snapshot chunks do not add up to its length"));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use openraft::testing::log_id;
    use openraft::Membership;

    use super::*;

    #[test]
    fn round_trip_and_every_damage_is_caught() {
        let dir = tempfile::tempdir().unwrap();
        let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default()).unwrap();
        let header = Header {
            last_applied: Some(log_id(2, 1, 7)),
            last_membership: StoredMembership::new(
                Some(log_id(1, 1, 1)),
                Membership::new(vec![BTreeSet::from([1, 2, 3])], None),
            ),
        };
        let mut batch = WriteBatch::new();
        batch.put(keys::APPLIED, encode(&header.last_applied.unwrap()).unwrap());
        batch.put(keys::MEMBERSHIP, encode(&header.last_membership).unwrap());
        batch.put(keys::data(b"a"), b"1");
        batch.put(keys::data(b""), b"empty key");
        batch.put(keys::data(b"b"), b"");
        batch.put(b"log/not-data", b"x");
        db.write(&batch, &Default::default()).unwrap();

        let (built, bytes) = build(&db.snapshot()).unwrap();
        assert_eq!(built, header);
        let mut pairs = Vec::new();
        let read_header = read(&bytes, |k, v| pairs.push((k.to_vec(), v.to_vec()))).unwrap();
        assert_eq!(read_header, header);
        let want: Vec<(Vec<u8>, Vec<u8>)> = vec![
            (b"".into(), b"empty key".into()),
            (b"a".into(), b"1".into()),
            (b"b".into(), b"".into()),
        ];
        assert_eq!(pairs, want);

        for i in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[i] ^= 0x40;
            assert!(read(&damaged, |_, _| panic!("pair from a damaged snapshot")).is_err(), "{i}");
            assert!(read(&bytes[..i], |_, _| panic!("pair from a cut snapshot")).is_err(), "{i}");
        }
    }
}
