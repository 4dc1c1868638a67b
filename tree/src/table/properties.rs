//! Table properties: statistics and settings recorded when a table is built.
//!
//! # Format
//!
//! The properties block (stored with the usual block trailer, uncompressed) is a sequence of
//! tagged fields:
//!
//! ```text
//! field := tag varint | value
//! tag   := field_number << 1 | wire_type
//! wire_type 0: value is a varint
//! wire_type 1: value is len varint | len bytes
//! ```
//!
//! The wire type makes every field skippable, so a newer writer may add fields and this reader
//! ignores numbers it does not know (checking the lengths of what it skips). Signed values are
//! zigzag-encoded varints; `f64` values are the varint of their IEEE bits. Field numbers are
//! listed in [`TableProperties`]'s fields' docs as `#n` and never reused. Fields #22-#24
//! (range deletions) are written only by tables that have some, #25-#26 (prefixes) only by
//! tables whose filter holds prefixes, #27-#30 (expiring entries) and #31 (merge operands)
//! only by tables that hold some, #34-#36 (the range filter) only by tables that have one.

use crate::coding::{put_bytes, put_varint, Decoder};
use crate::table::format::{BlockHandle, Compression};
use crate::{Error, Result};

/// Facts about one table, written by the builder and read back at open.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TableProperties {
    /// #1: entries (puts and tombstones, every version).
    pub num_entries: u64,
    /// #2: entries that are tombstones.
    pub num_tombstones: u64,
    /// #3: smallest user key (empty for an empty table).
    pub smallest_user_key: Vec<u8>,
    /// #4: largest user key (empty for an empty table).
    pub largest_user_key: Vec<u8>,
    /// #5: smallest sequence number.
    pub smallest_seq: u64,
    /// #6: largest sequence number.
    pub largest_seq: u64,
    /// #7: sum of internal-key lengths as added.
    pub raw_key_bytes: u64,
    /// #8: sum of value lengths as added.
    pub raw_value_bytes: u64,
    /// #9: bytes of data blocks on disk, trailers included.
    pub data_bytes: u64,
    /// #10: bytes of the index block on disk, trailer included.
    pub index_bytes: u64,
    /// #11: bytes of the filter block on disk, trailer included.
    pub filter_bytes: u64,
    /// #12: number of data blocks.
    pub num_data_blocks: u64,
    /// #13 (kind code) and #14 (level, zigzag): compression of data and index blocks.
    pub compression: Compression,
    /// #15: the filter's kind as displayed by the filter module (e.g. "blocked").
    pub filter_kind: String,
    /// #16: filter bits per key (f64 bits).
    pub filter_bits_per_key: f64,
    /// #17: filter probes per key.
    pub filter_probes: u32,
    /// #18: when the table was built, seconds since the Unix epoch.
    pub creation_time: u64,
    /// #19: the table format version.
    pub format_version: u32,
    /// #20: the smallest data block on disk, trailer included (0 without data blocks).
    pub min_data_block_bytes: u64,
    /// #21: the largest data block on disk, trailer included.
    pub max_data_block_bytes: u64,
    /// #22 (offset) and #23 (size): the range-deletion block, if `num_range_deletions > 0`.
    pub range_del: BlockHandle,
    /// #24: range tombstones in the range-deletion block (see [`crate::range_del`]).
    pub num_range_deletions: u64,
    /// #25: the name of the prefix extractor whose prefixes the filter holds
    /// ([`crate::PrefixExtractor::name`]); empty if it holds none.
    pub prefix_extractor: String,
    /// #26: distinct prefixes in the filter.
    pub num_prefixes: u64,
    /// #27: entries that are expiring puts (`ValueKind::PutExpiring`).
    pub num_expiring: u64,
    /// #28: the earliest expiry of those entries, milliseconds since the Unix epoch.
    pub oldest_expiry: u64,
    /// #29: the latest expiry of those entries.
    pub newest_expiry: u64,
    /// #30: bytes of those entries (internal keys and stored values, as added).
    pub expiring_bytes: u64,
    /// #31: entries that are merge operands (`ValueKind::Merge`).
    pub num_merge_operands: u64,
    /// #32: entries holding a blob reference (`ValueKind::BlobPut`, `BlobPutExpiring`).
    pub num_blob_refs: u64,
    /// #33: the bytes of the values those references name.
    pub blob_ref_bytes: u64,
    /// #34 (offset) and #35 (size): the range-filter block (see [`crate::range_filter`]);
    /// size 0 when the table has none.
    pub range_filter: BlockHandle,
    /// #36: the distinct integers the range filter was built over.
    pub range_filter_keys: u64,
}

const VARINT: u64 = 0;
const BYTES: u64 = 1;

fn put_field(buf: &mut Vec<u8>, number: u64, v: u64) {
    put_varint(buf, number << 1 | VARINT);
    put_varint(buf, v);
}

fn put_field_bytes(buf: &mut Vec<u8>, number: u64, v: &[u8]) {
    put_varint(buf, number << 1 | BYTES);
    put_bytes(buf, v);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

impl TableProperties {
    /// The tagged encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut b =
            Vec::with_capacity(128 + self.smallest_user_key.len() + self.largest_user_key.len());
        put_field(&mut b, 1, self.num_entries);
        put_field(&mut b, 2, self.num_tombstones);
        put_field_bytes(&mut b, 3, &self.smallest_user_key);
        put_field_bytes(&mut b, 4, &self.largest_user_key);
        put_field(&mut b, 5, self.smallest_seq);
        put_field(&mut b, 6, self.largest_seq);
        put_field(&mut b, 7, self.raw_key_bytes);
        put_field(&mut b, 8, self.raw_value_bytes);
        put_field(&mut b, 9, self.data_bytes);
        put_field(&mut b, 10, self.index_bytes);
        put_field(&mut b, 11, self.filter_bytes);
        put_field(&mut b, 12, self.num_data_blocks);
        put_field(&mut b, 13, u64::from(self.compression.code()));
        put_field(&mut b, 14, zigzag(i64::from(self.compression.level())));
        put_field_bytes(&mut b, 15, self.filter_kind.as_bytes());
        put_field(&mut b, 16, self.filter_bits_per_key.to_bits());
        put_field(&mut b, 17, u64::from(self.filter_probes));
        put_field(&mut b, 18, self.creation_time);
        put_field(&mut b, 19, u64::from(self.format_version));
        put_field(&mut b, 20, self.min_data_block_bytes);
        put_field(&mut b, 21, self.max_data_block_bytes);
        if self.num_range_deletions > 0 {
            put_field(&mut b, 22, self.range_del.offset);
            put_field(&mut b, 23, self.range_del.size);
            put_field(&mut b, 24, self.num_range_deletions);
        }
        if !self.prefix_extractor.is_empty() {
            put_field_bytes(&mut b, 25, self.prefix_extractor.as_bytes());
            put_field(&mut b, 26, self.num_prefixes);
        }
        if self.num_expiring > 0 {
            put_field(&mut b, 27, self.num_expiring);
            put_field(&mut b, 28, self.oldest_expiry);
            put_field(&mut b, 29, self.newest_expiry);
            put_field(&mut b, 30, self.expiring_bytes);
        }
        if self.num_merge_operands > 0 {
            put_field(&mut b, 31, self.num_merge_operands);
        }
        if self.num_blob_refs > 0 {
            put_field(&mut b, 32, self.num_blob_refs);
            put_field(&mut b, 33, self.blob_ref_bytes);
        }
        if self.range_filter.size > 0 {
            put_field(&mut b, 34, self.range_filter.offset);
            put_field(&mut b, 35, self.range_filter.size);
            put_field(&mut b, 36, self.range_filter_keys);
        }
        b
    }

    /// Decodes the tagged encoding; unknown fields are skipped, missing ones keep their
    /// defaults. Errors carry the offset inside `bytes`.
    pub fn decode(bytes: &[u8]) -> Result<TableProperties> {
        let mut p = TableProperties::default();
        let (mut code, mut level) = (0u8, 0i32);
        let mut d = Decoder::new(bytes);
        while !d.is_empty() {
            let at = d.position() as u64;
            let bad = |what: &str| Error::bad_bytes(at, format!("properties: {what}"));
            let tag = d.varint().ok_or_else(|| bad("bad tag"))?;
            let number = tag >> 1;
            if tag & 1 == BYTES {
                let v = d.length_prefixed().ok_or_else(|| bad("bad length"))?;
                match number {
                    3 => p.smallest_user_key = v.to_vec(),
                    4 => p.largest_user_key = v.to_vec(),
                    15 => {
                        p.filter_kind = String::from_utf8(v.to_vec())
                            .map_err(|_| bad("filter kind is not UTF-8"))?
                    }
                    25 => {
                        p.prefix_extractor = String::from_utf8(v.to_vec())
                            .map_err(|_| bad("prefix extractor is not UTF-8"))?
                    }
                    _ => {}
                }
                continue;
            }
            let v = d.varint().ok_or_else(|| bad("bad varint"))?;
            let small = || u32::try_from(v).map_err(|_| bad("value out of range"));
            match number {
                1 => p.num_entries = v,
                2 => p.num_tombstones = v,
                5 => p.smallest_seq = v,
                6 => p.largest_seq = v,
                7 => p.raw_key_bytes = v,
                8 => p.raw_value_bytes = v,
                9 => p.data_bytes = v,
                10 => p.index_bytes = v,
                11 => p.filter_bytes = v,
                12 => p.num_data_blocks = v,
                13 => code = u8::try_from(v).map_err(|_| bad("bad compression code"))?,
                14 => {
                    level = i32::try_from(unzigzag(v)).map_err(|_| bad("bad compression level"))?
                }
                16 => p.filter_bits_per_key = f64::from_bits(v),
                17 => p.filter_probes = small()?,
                18 => p.creation_time = v,
                19 => p.format_version = small()?,
                20 => p.min_data_block_bytes = v,
                21 => p.max_data_block_bytes = v,
                22 => p.range_del.offset = v,
                23 => p.range_del.size = v,
                24 => p.num_range_deletions = v,
                26 => p.num_prefixes = v,
                27 => p.num_expiring = v,
                28 => p.oldest_expiry = v,
                29 => p.newest_expiry = v,
                30 => p.expiring_bytes = v,
                31 => p.num_merge_operands = v,
                32 => p.num_blob_refs = v,
                33 => p.blob_ref_bytes = v,
                34 => p.range_filter.offset = v,
                35 => p.range_filter.size = v,
                36 => p.range_filter_keys = v,
                _ => {}
            }
        }
        p.compression = Compression::from_code(code, level).ok_or_else(|| {
            Error::bad_bytes(0, format!("properties: unknown compression {code}"))
        })?;
        if p.num_expiring > p.num_entries
            || p.num_merge_operands > p.num_entries
            || p.num_blob_refs > p.num_entries
            || (p.num_expiring > 0 && p.oldest_expiry > p.newest_expiry)
        {
            return Err(Error::bad_bytes(0, "properties: inconsistent expiring or merge entries"));
        }
        if p.num_entries > 0 && p.smallest_user_key > p.largest_user_key {
            return Err(Error::bad_bytes(0, "properties: smallest key above largest key"));
        }
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> TableProperties {
        TableProperties {
            num_entries: 1000,
            num_tombstones: 7,
            smallest_user_key: b"aa".to_vec(),
            largest_user_key: b"zz".to_vec(),
            smallest_seq: 3,
            largest_seq: 99,
            raw_key_bytes: 12345,
            raw_value_bytes: 678910,
            data_bytes: 5000,
            index_bytes: 300,
            filter_bytes: 1250,
            num_data_blocks: 2,
            compression: Compression::Zstd { level: -5 },
            filter_kind: "blocked".into(),
            filter_bits_per_key: 10.0,
            filter_probes: 6,
            creation_time: 1_800_000_000,
            format_version: 1,
            min_data_block_bytes: 2000,
            max_data_block_bytes: 3000,
            range_del: BlockHandle { offset: 6250, size: 40 },
            num_range_deletions: 2,
            prefix_extractor: "fixed:8".into(),
            num_prefixes: 40,
            num_expiring: 10,
            oldest_expiry: 1_800_000_000_000,
            newest_expiry: 1_800_000_500_000,
            expiring_bytes: 400,
            num_merge_operands: 7,
            num_blob_refs: 3,
            blob_ref_bytes: 300_000,
            range_filter: BlockHandle { offset: 6295, size: 120 },
            range_filter_keys: 998,
        }
    }

    #[test]
    fn round_trip_and_unknown_fields_are_skipped() {
        let p = sample();
        let mut enc = p.encode();
        assert_eq!(TableProperties::decode(&enc).unwrap(), p);
        // A future writer's extra fields of both wire types are ignored.
        put_field(&mut enc, 77, 5);
        put_field_bytes(&mut enc, 78, b"future");
        assert_eq!(TableProperties::decode(&enc).unwrap(), p);
    }

    #[test]
    fn truncations_and_bad_lengths_are_errors_not_panics() {
        let enc = sample().encode();
        for n in 0..enc.len() {
            // Any prefix either decodes (ending on a field boundary) or is corruption.
            if let Err(e) = TableProperties::decode(&enc[..n]) {
                assert!(e.is_corruption());
            }
        }
        let mut forged = Vec::new();
        put_varint(&mut forged, 99 << 1 | BYTES);
        put_varint(&mut forged, u64::MAX);
        assert!(TableProperties::decode(&forged).unwrap_err().is_corruption());
        let mut forged = Vec::new();
        put_field(&mut forged, 13, 9);
        assert!(TableProperties::decode(&forged).is_err());
    }
}
