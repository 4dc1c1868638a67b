//! Blocks: the sorted, prefix-compressed runs of entries that data and index blocks share.
//!
//! # Format
//!
//! ```text
//! entry*  restart[0] u32 LE … restart[n-1] u32 LE  n u32 LE
//!
//! entry := shared varint | unshared varint | value_len varint | key[shared..] | value
//! ```
//!
//! Each key is stored as the number of leading bytes it shares with the previous key plus the
//! bytes that differ, because neighbouring internal keys in a sorted run usually share long
//! prefixes. Every `restart_interval` entries the builder stores a key whole (`shared = 0`) and
//! records the entry's offset in the restart array, so a seek can binary-search the restart
//! keys without decoding the whole block and then scan at most `restart_interval` entries.
//! The array always holds at least one restart (offset 0), even for an empty block.
//!
//! A [`Block`] validates the restart array once when it is built (count against the size,
//! every offset inside the entry region, offsets strictly increasing, the first one zero), and
//! every entry read checks its three lengths against the bytes that remain, so a damaged block
//! yields [`crate::Error::Corruption`] and never a panic or an oversized allocation. Errors carry
//! the offset inside the block; the table reader adds the file and the block's offset.

use std::cmp::Ordering;

use bytes::Bytes;

pub use super::block_iter::BlockIter;
use crate::coding::{get_u32, put_u32, put_varint, Decoder};
use crate::iter::InternalIterator;
use crate::key::compare_internal;
use crate::{Error, Result};

/// Builds one block from entries added in strictly increasing internal-key order.
#[derive(Debug, Clone)]
pub struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    restart_interval: usize,
    since_restart: usize,
    last_key: Vec<u8>,
    num_entries: usize,
}

impl BlockBuilder {
    /// A builder that stores a whole key every `restart_interval` entries (at least 1).
    pub fn new(restart_interval: usize) -> Self {
        BlockBuilder {
            buf: Vec::new(),
            restarts: vec![0],
            restart_interval: restart_interval.max(1),
            since_restart: 0,
            last_key: Vec::new(),
            num_entries: 0,
        }
    }

    /// Appends an entry. The caller guarantees `key` sorts after the previous key and that the
    /// block stays below 4 GiB (the table builder bounds entry sizes).
    pub fn add(&mut self, key: &[u8], value: &[u8]) {
        debug_assert!(
            self.num_entries == 0 || compare_internal(&self.last_key, key) == Ordering::Less,
            "block keys must be strictly increasing"
        );
        let shared = if self.since_restart == self.restart_interval {
            self.restarts.push(self.buf.len() as u32);
            self.since_restart = 0;
            0
        } else {
            self.last_key.iter().zip(key).take_while(|(a, b)| a == b).count()
        };
        put_varint(&mut self.buf, shared as u64);
        put_varint(&mut self.buf, (key.len() - shared) as u64);
        put_varint(&mut self.buf, value.len() as u64);
        self.buf.extend_from_slice(&key[shared..]);
        self.buf.extend_from_slice(value);
        self.last_key.truncate(shared);
        self.last_key.extend_from_slice(&key[shared..]);
        self.since_restart += 1;
        self.num_entries += 1;
    }

    /// The size the block would have if finished now.
    pub fn estimated_size(&self) -> usize {
        self.buf.len() + self.restarts.len() * 4 + 4
    }

    /// Entries added since the last reset.
    pub fn num_entries(&self) -> usize {
        self.num_entries
    }

    /// True when no entry has been added since the last reset.
    pub fn is_empty(&self) -> bool {
        self.num_entries == 0
    }

    /// Appends the restart array and returns the finished payload, leaving the builder empty
    /// and ready for the next block.
    pub fn finish(&mut self) -> Vec<u8> {
        self.finish_with(std::mem::take)
    }

    /// Appends the restart array and hands the finished payload to `f`, which may append to
    /// it (a block trailer) before it is written; then empties the builder for the next
    /// block. The buffer keeps its capacity, so a table's blocks are built without
    /// reallocating it from empty each time.
    pub fn finish_with<R>(&mut self, f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
        for &r in &self.restarts {
            put_u32(&mut self.buf, r);
        }
        put_u32(&mut self.buf, self.restarts.len() as u32);
        let out = f(&mut self.buf);
        self.reset();
        out
    }

    /// Drops everything added so far.
    pub fn reset(&mut self) {
        self.buf.clear();
        self.restarts.clear();
        self.restarts.push(0);
        self.since_restart = 0;
        self.last_key.clear();
        self.num_entries = 0;
    }
}

/// A validated, immutable block, cheap to clone (the payload is shared `Bytes`).
#[derive(Clone, Debug)]
pub struct Block {
    pub(super) data: Bytes,
    /// Where the restart array starts, which is also where the entries end.
    pub(super) restarts_offset: usize,
    pub(super) num_restarts: usize,
}

impl Block {
    /// Validates the restart array of `data` and wraps it.
    pub fn new(data: Bytes) -> Result<Block> {
        let len = data.len();
        let count_pos = len
            .checked_sub(4)
            .ok_or_else(|| Error::bad_bytes(0, format!("block of {len} bytes has no trailer")))?;
        let n = get_u32(&data, count_pos).unwrap_or(0) as usize;
        if n == 0 {
            return Err(Error::bad_bytes(count_pos as u64, "block has no restart points"));
        }
        let restarts_offset =
            n.checked_mul(4).and_then(|b| count_pos.checked_sub(b)).ok_or_else(|| {
                Error::bad_bytes(
                    count_pos as u64,
                    format!("{n} restart points do not fit in a block of {len} bytes"),
                )
            })?;
        let mut prev: Option<usize> = None;
        for i in 0..n {
            let pos = restarts_offset + 4 * i;
            let r = get_u32(&data, pos).unwrap_or(u32::MAX) as usize;
            let ok = match prev {
                None => r == 0,
                Some(p) => r > p && r < restarts_offset,
            };
            if !ok {
                return Err(Error::bad_bytes(
                    pos as u64,
                    format!("restart point {i} at {r} is out of order or outside the entries"),
                ));
            }
            prev = Some(r);
        }
        Ok(Block { data, restarts_offset, num_restarts: n })
    }

    /// The payload size in bytes (what the block cache charges for it).
    pub fn size(&self) -> usize {
        self.data.len()
    }

    /// True when the block holds no entry.
    pub fn is_empty(&self) -> bool {
        self.restarts_offset == 0
    }

    /// An unpositioned iterator over the entries.
    pub fn iter(&self) -> BlockIter {
        BlockIter::new(self.clone())
    }

    /// The point-lookup seek: an iterator positioned at the first entry `>= target`
    /// (invalid when there is none).
    pub fn seek(&self, target: &[u8]) -> Result<BlockIter> {
        let mut it = self.iter();
        it.seek(target)?;
        Ok(it)
    }

    pub(super) fn restart(&self, i: usize) -> usize {
        // In range by construction: `i < num_restarts` and the array was validated.
        get_u32(&self.data, self.restarts_offset + 4 * i).unwrap_or(0) as usize
    }

    /// The whole key stored at restart point `i` (restart entries share nothing).
    pub(super) fn restart_key(&self, i: usize) -> Result<&[u8]> {
        let off = self.restart(i);
        let mut d = Decoder::new(&self.data[off..self.restarts_offset]);
        let bad = || Error::bad_bytes(off as u64, "malformed entry at restart point");
        let shared = d.varint().ok_or_else(bad)?;
        let unshared = d.len_prefix().ok_or_else(bad)?;
        let _value_len = d.varint().ok_or_else(bad)?;
        if shared != 0 {
            return Err(bad());
        }
        d.bytes(unshared).ok_or_else(bad)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::iter::testing::{check_walk, walk_op};
    use crate::iter::BidirectionalIterator;
    use crate::key::{internal_key, ValueKind};

    fn entries(n: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        (0..n)
            .map(|i| {
                let uk = format!("key{:05}", i / 2);
                let seq = 1000 - (i % 2) as u64;
                (internal_key(uk.as_bytes(), seq, ValueKind::Put), format!("v{i}").into_bytes())
            })
            .collect()
    }

    fn build(es: &[(Vec<u8>, Vec<u8>)], interval: usize) -> Block {
        let mut b = BlockBuilder::new(interval);
        for (k, v) in es {
            b.add(k, v);
        }
        let est = b.estimated_size();
        let data = b.finish();
        assert_eq!(est, data.len());
        assert!(b.is_empty());
        Block::new(Bytes::from(data)).unwrap()
    }

    fn collect_forward(it: &mut BlockIter) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        it.seek_to_first().unwrap();
        while it.valid() {
            out.push((it.key().to_vec(), it.value().to_vec()));
            it.next().unwrap();
        }
        out
    }

    #[test]
    fn round_trip_forward_backward_and_seek() {
        for interval in [1, 2, 3, 16] {
            for n in [0, 1, 2, 15, 16, 17, 100] {
                let es = entries(n);
                let block = build(&es, interval);
                let mut it = block.iter();
                assert_eq!(collect_forward(&mut it), es, "interval {interval} n {n}");

                let mut back = Vec::new();
                it.seek_to_last().unwrap();
                while it.valid() {
                    back.push((it.key().to_vec(), it.value().to_vec()));
                    it.prev().unwrap();
                }
                back.reverse();
                assert_eq!(back, es);

                for (i, (k, _)) in es.iter().enumerate() {
                    let it = block.seek(k).unwrap();
                    assert!(it.valid());
                    assert_eq!(it.key(), &k[..]);
                    assert_eq!(it.value_bytes(), es[i].1);
                    // A seek for a newer version of the same user key lands on this entry or
                    // the first entry of the same user key.
                    let uk = crate::key::user_key(k);
                    let it = block.seek(&internal_key(uk, 5000, ValueKind::Put)).unwrap();
                    assert_eq!(crate::key::user_key(it.key()), uk);
                }
                let after = block.seek(&internal_key(b"zzz", 1, ValueKind::Put)).unwrap();
                assert!(!after.valid());
                let before = block.seek(&internal_key(b"a", 1, ValueKind::Put)).unwrap();
                assert_eq!(before.valid(), n > 0);
                if n > 0 {
                    assert_eq!(before.key(), &es[0].0[..]);
                }
            }
        }
    }

    proptest! {
        /// Seeks both ways and steps that turn around anywhere agree with a model cursor,
        /// for any restart interval.
        #[test]
        fn prop_random_walks_match_a_model(
            keys in prop::collection::btree_set((prop::collection::vec(0u8..4, 0..5), 0u64..5), 0..120),
            interval in 1usize..20,
            walk in prop::collection::vec(walk_op(
                (prop::collection::vec(0u8..4, 0..5), 0u64..6)
                    .prop_map(|(k, s)| internal_key(&k, s, ValueKind::Put)),
            ), 1..30),
        ) {
            let mut es: Vec<_> = keys
                .iter()
                .map(|(k, s)| (internal_key(k, *s, ValueKind::Put), format!("{k:?}{s}").into_bytes()))
                .collect();
            es.sort_by(|a, b| compare_internal(&a.0, &b.0));
            let block = build(&es, interval);
            check_walk(&mut block.iter(), &es, &walk)?;
        }
    }

    #[test]
    fn prefix_compression_shrinks_shared_keys() {
        let es = entries(100);
        let raw: usize = es.iter().map(|(k, v)| k.len() + v.len()).sum();
        let block = build(&es, 16);
        assert!(block.size() < raw, "{} >= {raw}", block.size());
    }

    #[test]
    fn rejects_bad_restart_arrays() {
        assert!(Block::new(Bytes::from_static(&[1, 0])).unwrap_err().is_corruption());
        // Zero restarts.
        assert!(Block::new(Bytes::from_static(&[0, 0, 0, 0])).is_err());
        // Huge restart count.
        assert!(Block::new(Bytes::from_static(&[0xff, 0xff, 0xff, 0xff])).is_err());
        // Restart offset past the entries.
        let mut v = Vec::new();
        put_u32(&mut v, 0);
        put_u32(&mut v, 9);
        put_u32(&mut v, 2);
        assert!(Block::new(Bytes::from(v)).is_err());
        // The minimal empty block is fine and yields nothing.
        let mut v = Vec::new();
        put_u32(&mut v, 0);
        put_u32(&mut v, 1);
        let b = Block::new(Bytes::from(v)).unwrap();
        let mut it = b.iter();
        it.seek_to_first().unwrap();
        assert!(!it.valid());
        it.seek_to_last().unwrap();
        assert!(!it.valid());
    }

    #[test]
    fn every_single_byte_flip_errors_or_decodes_without_panic() {
        let es = entries(40);
        let mut b = BlockBuilder::new(4);
        for (k, v) in &es {
            b.add(k, v);
        }
        let data = b.finish();
        for i in 0..data.len() {
            for x in [0x01u8, 0x55, 0x80, 0xff] {
                let mut d = data.clone();
                d[i] ^= x;
                let Ok(block) = Block::new(Bytes::from(d)) else { continue };
                let mut it = block.iter();
                let mut steps = 0;
                if it.seek_to_first().is_ok() {
                    while it.valid() && steps < 1000 {
                        steps += 1;
                        if it.next().is_err() {
                            break;
                        }
                    }
                }
                assert!(steps < 1000, "iteration must terminate");
                let _ = block.seek(&es[20].0);
                if it.seek_to_last().is_ok() {
                    let mut steps = 0;
                    while it.valid() && steps < 1000 {
                        steps += 1;
                        if it.prev().is_err() {
                            break;
                        }
                    }
                }
            }
        }
    }
}
