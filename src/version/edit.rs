//! One manifest record: a change to the set of tables and to the engine's counters.
//!
//! # Encoding
//!
//! A sequence of fields, each a varint tag followed by the field's data; all integers are
//! varints and byte strings are varint-length-prefixed:
//!
//! ```text
//! tag 1  format version   u           must come first; this code writes and reads 1
//! tag 2  log number       u           WAL files numbered below this are obsolete
//! tag 3  next file number u
//! tag 4  last sequence    u
//! tag 5  deleted table    level u, file number u
//! tag 6  added table      level u, number u, file size u, smallest bytes, largest bytes,
//!                         smallest seq u, largest seq u, entry count u
//! tag 0  end              must come last, with nothing after it
//! ```
//!
//! Tags rather than a fixed layout let a later format add fields; the leading format
//! version lets an older reader refuse a newer manifest outright instead of misreading it.
//! Any tag this code does not know is [`crate::Error::Corruption`]: silently skipping a
//! field could lose a table. The end tag makes a record cut short at a field boundary
//! detectable on its own, without relying on the log's CRC. Tags 2–4 may appear at most
//! once; levels must be below [`MAX_LEVELS`]; smallest and largest keys must be internal
//! keys; sequence numbers must fit in 56 bits. Decoding never panics and never sizes an
//! allocation from an unchecked length.

use crate::coding::{put_bytes, put_varint, Decoder};
use crate::key::{parse_internal_key, SeqNo, MAX_SEQNO};
use crate::{Error, Result};

/// The format version written into every edit.
pub const FORMAT_VERSION: u64 = 1;

/// Levels allowed by the format (the engine may use fewer).
pub const MAX_LEVELS: usize = 16;

const TAG_END: u64 = 0;
const TAG_FORMAT_VERSION: u64 = 1;
const TAG_LOG_NUMBER: u64 = 2;
const TAG_NEXT_FILE_NUMBER: u64 = 3;
const TAG_LAST_SEQ: u64 = 4;
const TAG_DELETED: u64 = 5;
const TAG_ADDED: u64 = 6;

/// What the manifest records about one table.
#[derive(Clone, Debug, PartialEq)]
pub struct TableMeta {
    /// File number; the table lives in `<number>.sst`.
    pub number: u64,
    /// Size of the file in bytes.
    pub file_size: u64,
    /// Smallest encoded internal key in the table.
    pub smallest: Vec<u8>,
    /// Largest encoded internal key in the table.
    pub largest: Vec<u8>,
    /// Smallest sequence number of any entry.
    pub smallest_seq: SeqNo,
    /// Largest sequence number of any entry.
    pub largest_seq: SeqNo,
    /// Number of entries.
    pub num_entries: u64,
}

/// A change to the database's table set and counters; the manifest is a log of these.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VersionEdit {
    /// WAL files with lower numbers no longer hold unflushed data.
    pub log_number: Option<u64>,
    /// The next file number to hand out.
    pub next_file_number: Option<u64>,
    /// The last sequence number used.
    pub last_seq: Option<SeqNo>,
    /// Tables added, with their level.
    pub added: Vec<(usize, TableMeta)>,
    /// Tables removed: level and file number.
    pub deleted: Vec<(usize, u64)>,
}

impl VersionEdit {
    /// Encodes the edit as one manifest record.
    pub fn encode(&self) -> Vec<u8> {
        let mut buf = Vec::with_capacity(32 + self.added.len() * 64 + self.deleted.len() * 4);
        put_varint(&mut buf, TAG_FORMAT_VERSION);
        put_varint(&mut buf, FORMAT_VERSION);
        for (tag, value) in [
            (TAG_LOG_NUMBER, self.log_number),
            (TAG_NEXT_FILE_NUMBER, self.next_file_number),
            (TAG_LAST_SEQ, self.last_seq),
        ] {
            if let Some(v) = value {
                put_varint(&mut buf, tag);
                put_varint(&mut buf, v);
            }
        }
        for &(level, number) in &self.deleted {
            put_varint(&mut buf, TAG_DELETED);
            put_varint(&mut buf, level as u64);
            put_varint(&mut buf, number);
        }
        for (level, t) in &self.added {
            put_varint(&mut buf, TAG_ADDED);
            put_varint(&mut buf, *level as u64);
            put_varint(&mut buf, t.number);
            put_varint(&mut buf, t.file_size);
            put_bytes(&mut buf, &t.smallest);
            put_bytes(&mut buf, &t.largest);
            put_varint(&mut buf, t.smallest_seq);
            put_varint(&mut buf, t.largest_seq);
            put_varint(&mut buf, t.num_entries);
        }
        put_varint(&mut buf, TAG_END);
        buf
    }

    /// Decodes a manifest record, checking everything listed in the module documentation.
    /// Errors are [`Error::Corruption`] with offsets inside `data` and no file; the caller
    /// adds the file with [`Error::in_file`].
    pub fn decode(data: &[u8]) -> Result<VersionEdit> {
        let mut d = Decoder::new(data);
        let mut edit = VersionEdit::default();
        let mut field = 0usize;
        loop {
            let at = d.position() as u64;
            let bad = |what: String| Error::bad_bytes(at, format!("version edit: {what}"));
            let tag = d.varint().ok_or_else(|| bad("truncated (no end tag)".into()))?;
            if field == 0 && tag != TAG_FORMAT_VERSION {
                return Err(bad(format!("starts with tag {tag}, not the format version")));
            }
            field += 1;
            let truncated = || bad(format!("field with tag {tag} is truncated or malformed"));
            match tag {
                TAG_END => break,
                TAG_FORMAT_VERSION => {
                    if field != 1 {
                        return Err(bad("format version repeated".into()));
                    }
                    let v = d.varint().ok_or_else(truncated)?;
                    if v != FORMAT_VERSION {
                        return Err(bad(format!("unsupported format version {v}")));
                    }
                }
                TAG_LOG_NUMBER | TAG_NEXT_FILE_NUMBER | TAG_LAST_SEQ => {
                    let v = d.varint().ok_or_else(truncated)?;
                    let slot = match tag {
                        TAG_LOG_NUMBER => &mut edit.log_number,
                        TAG_NEXT_FILE_NUMBER => &mut edit.next_file_number,
                        _ => {
                            if v > MAX_SEQNO {
                                return Err(bad(format!("last sequence {v} exceeds 56 bits")));
                            }
                            &mut edit.last_seq
                        }
                    };
                    if slot.replace(v).is_some() {
                        return Err(bad(format!("field with tag {tag} repeated")));
                    }
                }
                TAG_DELETED => {
                    let level = level(&mut d).map_err(&bad)?;
                    let number = d.varint().ok_or_else(truncated)?;
                    edit.deleted.push((level, number));
                }
                TAG_ADDED => {
                    let level = level(&mut d).map_err(&bad)?;
                    let meta = table_meta(&mut d).map_err(bad)?;
                    edit.added.push((level, meta));
                }
                _ => return Err(bad(format!("unknown tag {tag}"))),
            }
        }
        if !d.is_empty() {
            let at = d.position() as u64;
            return Err(Error::bad_bytes(at, "version edit: bytes after the end tag"));
        }
        Ok(edit)
    }
}

fn level(d: &mut Decoder<'_>) -> std::result::Result<usize, String> {
    let level = d.varint().ok_or("truncated level")?;
    if level >= MAX_LEVELS as u64 {
        return Err(format!("level {level} is not below {MAX_LEVELS}"));
    }
    Ok(level as usize)
}

fn table_meta(d: &mut Decoder<'_>) -> std::result::Result<TableMeta, String> {
    let truncated = "added table is truncated or malformed";
    let number = d.varint().ok_or(truncated)?;
    let file_size = d.varint().ok_or(truncated)?;
    let smallest = d.length_prefixed().ok_or(truncated)?;
    let largest = d.length_prefixed().ok_or(truncated)?;
    for key in [smallest, largest] {
        if parse_internal_key(key).is_none() {
            return Err(format!("table {number} has a bound that is not an internal key"));
        }
    }
    let smallest_seq = d.varint().ok_or(truncated)?;
    let largest_seq = d.varint().ok_or(truncated)?;
    if smallest_seq > MAX_SEQNO || largest_seq > MAX_SEQNO {
        return Err(format!("table {number} has a sequence number above 56 bits"));
    }
    let num_entries = d.varint().ok_or(truncated)?;
    Ok(TableMeta {
        number,
        file_size,
        smallest: smallest.to_vec(),
        largest: largest.to_vec(),
        smallest_seq,
        largest_seq,
        num_entries,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::key::{internal_key, ValueKind};

    fn meta(number: u64) -> TableMeta {
        TableMeta {
            number,
            file_size: 4096 + number,
            smallest: internal_key(b"apple", 3, ValueKind::Put),
            largest: internal_key(b"zebra", 9, ValueKind::Delete),
            smallest_seq: 3,
            largest_seq: 9,
            num_entries: 1000,
        }
    }

    fn sample() -> VersionEdit {
        VersionEdit {
            log_number: Some(12),
            next_file_number: Some(40),
            last_seq: Some(MAX_SEQNO),
            added: vec![(0, meta(38)), (15, meta(39))],
            deleted: vec![(1, 7), (2, 8)],
        }
    }

    fn corrupt(data: &[u8]) -> String {
        match VersionEdit::decode(data) {
            Err(Error::Corruption { reason, .. }) => reason,
            other => panic!("expected corruption, got {other:?}"),
        }
    }

    #[test]
    fn round_trip_sample_and_empty() {
        let e = sample();
        assert_eq!(VersionEdit::decode(&e.encode()).unwrap(), e);
        let empty = VersionEdit::default();
        assert_eq!(empty.encode(), vec![1, 1, 0]);
        assert_eq!(VersionEdit::decode(&empty.encode()).unwrap(), empty);
    }

    #[test]
    fn rejects_specific_damage() {
        // Unknown tag before the end.
        assert!(corrupt(&[1, 1, 9, 0]).contains("unknown tag 9"));
        // Missing or wrong format version.
        assert!(corrupt(&[2, 5, 0]).contains("format version"));
        assert!(corrupt(&[1, 2, 0]).contains("unsupported format version 2"));
        assert!(corrupt(&[1, 1, 1, 1, 0]).contains("repeated"));
        // Repeated scalar field.
        assert!(corrupt(&[1, 1, 2, 5, 2, 6, 0]).contains("repeated"));
        // Level 16 is out of range; 15 is fine.
        assert!(corrupt(&[1, 1, 5, 16, 3, 0]).contains("level 16"));
        assert_eq!(VersionEdit::decode(&[1, 1, 5, 15, 3, 0]).unwrap().deleted, vec![(15, 3)]);
        // Bytes after the end tag.
        assert!(corrupt(&[1, 1, 0, 0]).contains("after the end"));
        // A table bound that is not an internal key.
        let mut e = VersionEdit::default();
        let mut m = meta(1);
        m.largest = b"short".to_vec();
        e.added.push((0, m));
        assert!(corrupt(&e.encode()).contains("not an internal key"));
        // Sequence number above 56 bits.
        let mut last = vec![1, 1, 4];
        put_varint(&mut last, MAX_SEQNO + 1);
        last.push(0);
        assert!(corrupt(&last).contains("56 bits"));
        // A huge length prefix is refused, not allocated.
        let mut huge = vec![1, 1, 6, 0, 1, 1];
        put_varint(&mut huge, u64::MAX >> 1);
        assert!(corrupt(&huge).contains("truncated"));
    }

    #[test]
    fn error_offset_points_at_the_bad_field() {
        let e = VersionEdit::decode(&[1, 1, 2, 5, 77, 0]).unwrap_err();
        assert!(matches!(e, Error::Corruption { offset: 4, .. }), "{e}");
        let e = e.in_file(std::path::Path::new("MANIFEST-000002"), 100);
        assert!(matches!(e, Error::Corruption { offset: 104, .. }), "{e}");
    }

    fn meta_strategy() -> impl Strategy<Value = TableMeta> {
        let key = || {
            (proptest::collection::vec(any::<u8>(), 0..20), 0..=MAX_SEQNO, any::<bool>()).prop_map(
                |(k, s, put)| {
                    internal_key(&k, s, if put { ValueKind::Put } else { ValueKind::Delete })
                },
            )
        };
        (any::<u64>(), any::<u64>(), key(), key(), 0..=MAX_SEQNO, 0..=MAX_SEQNO, any::<u64>())
            .prop_map(|(number, file_size, smallest, largest, s1, s2, num_entries)| TableMeta {
                number,
                file_size,
                smallest,
                largest,
                smallest_seq: s1.min(s2),
                largest_seq: s1.max(s2),
                num_entries,
            })
    }

    fn edit_strategy() -> impl Strategy<Value = VersionEdit> {
        (
            proptest::option::of(any::<u64>()),
            proptest::option::of(any::<u64>()),
            proptest::option::of(0..=MAX_SEQNO),
            proptest::collection::vec((0..MAX_LEVELS, meta_strategy()), 0..5),
            proptest::collection::vec((0..MAX_LEVELS, any::<u64>()), 0..5),
        )
            .prop_map(|(log_number, next_file_number, last_seq, added, deleted)| {
                VersionEdit { log_number, next_file_number, last_seq, added, deleted }
            })
    }

    proptest! {
        #[test]
        fn prop_round_trip(e in edit_strategy()) {
            prop_assert_eq!(VersionEdit::decode(&e.encode()).unwrap(), e);
        }

        #[test]
        fn prop_every_truncation_is_corruption(e in edit_strategy()) {
            let data = e.encode();
            for cut in 0..data.len() {
                let r = VersionEdit::decode(&data[..cut]);
                prop_assert!(r.unwrap_err().is_corruption(), "cut at {}", cut);
            }
        }

        #[test]
        fn prop_damaged_edit_never_panics(
            e in edit_strategy(),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
        ) {
            let mut data = e.encode();
            for (at, x) in flips {
                let i = at.index(data.len());
                data[i] ^= x;
            }
            match VersionEdit::decode(&data) {
                Ok(d) => prop_assert_eq!(VersionEdit::decode(&d.encode()).unwrap(), d),
                Err(err) => prop_assert!(err.is_corruption()),
            }
        }

        #[test]
        fn prop_garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            match VersionEdit::decode(&data) {
                Ok(d) => prop_assert_eq!(VersionEdit::decode(&d.encode()).unwrap(), d),
                Err(err) => prop_assert!(err.is_corruption()),
            }
        }
    }
}
