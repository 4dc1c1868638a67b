//! Keeping a flushed WAL segment as a blob file, so that a large value reaches the disk once.
//!
//! A WAL segment is a record log in the framing blob files use (`docs/format/blob.md`), and
//! it already holds every value its memtable generation was given. So instead of copying a
//! large value into a new blob file, a flush can reference it where it lies in the segment:
//! [`SegmentIndex`] reads the segment (in the page cache: it was synced at its switch) and
//! finds each put's value by its sequence number, which is unique to the op that wrote it.
//!
//! A memtable entry the index does not hold with exactly those bytes (a value a merge
//! produced, or written by a path that bypasses the segment) is copied as before. Whether a
//! segment is kept at all is decided once per segment by its flush, which handles every
//! keyspace's memtable of the generation in one manifest edit: see [`worth_keeping`].

use std::collections::HashMap;
use std::path::Path;

use crate::batch::PutValue;
use crate::blob::{payload_position, BlobRef};
use crate::coding::crc32;
use crate::key::SeqNo;
use crate::log::LogReader;
use crate::version::edit::KeyspaceId;
use crate::{Error, Result, WriteBatch};

/// Where the large puts of one WAL segment lie in it.
#[derive(Debug)]
pub(crate) struct SegmentIndex {
    /// The segment's file number.
    pub number: u64,
    /// The end of its last record: its size without the space reserved beyond the records.
    pub len: u64,
    /// The values indexed, by the sequence number of the put that wrote each.
    values: HashMap<SeqNo, Located>,
}

/// One value in the segment.
#[derive(Debug, Clone, Copy)]
struct Located {
    keyspace: KeyspaceId,
    /// Physical offset of the value's first byte.
    offset: u64,
    len: u64,
    crc: u32,
}

impl SegmentIndex {
    /// Indexes WAL segment `number` (at `path`, whose whole contents are `data`): every put
    /// whose value has at least `min_len(keyspace)` bytes (`None`: the keyspace separates no
    /// value). A segment that does not read cleanly to its end is an error: a sealed segment
    /// was synced whole, and one that is not is no place to leave values in.
    pub(crate) fn build(
        path: &Path,
        number: u64,
        data: Vec<u8>,
        min_len: impl Fn(KeyspaceId) -> Option<usize>,
    ) -> Result<SegmentIndex> {
        let mut reader = LogReader::new(path.to_path_buf(), data);
        let mut values = HashMap::new();
        while let Some(record) = reader.next_record()? {
            let start = reader.last_record_offset();
            let batch = WriteBatch::from_record(record).map_err(|e| e.in_file(path, start))?;
            for PutValue { seq, keyspace, offset, len } in batch.put_values() {
                if min_len(keyspace).map_or(true, |m| len < m) {
                    continue;
                }
                let value = &batch.data()[offset..offset + len];
                let offset = payload_position(start, offset as u64);
                let crc = crc32(&[value]);
                values.insert(seq, Located { keyspace, offset, len: len as u64, crc });
            }
        }
        if reader.dropped_tail_bytes() > 0 {
            let at = reader.last_record_end();
            return Err(Error::corruption(path, at, "sealed WAL segment ends in a torn record"));
        }
        Ok(SegmentIndex { number, len: reader.last_record_end(), values })
    }

    /// Bytes of the values indexed: the most the flush's tables can reference.
    pub(crate) fn indexed_bytes(&self) -> u64 {
        self.values.values().map(|v| v.len).sum()
    }

    /// True if the segment holds a value of `len` bytes written at `seq` into `keyspace`.
    pub(crate) fn holds(&self, keyspace: KeyspaceId, seq: SeqNo, len: usize) -> bool {
        self.values.get(&seq).is_some_and(|v| v.keyspace == keyspace && v.len == len as u64)
    }

    /// The reference to `value`, written at `seq` into `keyspace`, where the segment holds
    /// it; `None` unless the segment holds exactly these bytes for that write (its CRC is
    /// compared, so a value the flush produced rather than found is never mistaken for it).
    pub(crate) fn find(&self, keyspace: KeyspaceId, seq: SeqNo, value: &[u8]) -> Option<BlobRef> {
        let v = self.values.get(&seq)?;
        let same = v.keyspace == keyspace && v.len == value.len() as u64;
        (same && crc32(&[value]) == v.crc).then_some(BlobRef {
            file: self.number,
            offset: v.offset,
            len: v.len,
            crc: v.crc,
        })
    }
}

/// Whether a segment of `len` bytes is worth keeping for the `referenced` bytes of values
/// the flush's tables would reference in it: at least half of it. A segment of mostly
/// small or overwritten values would otherwise be kept as mostly garbage; its large values
/// are copied instead, and it is deleted as any flushed segment is.
pub(crate) fn worth_keeping(referenced: u64, len: u64) -> bool {
    len > 0 && referenced >= len.div_ceil(2)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::blob::read_value;
    use crate::fs::{FaultFs, FileSystem};
    use crate::log::{LogWriter, PAGE_SIZE};

    /// Deterministic bytes of `len`, different per `seed`.
    fn bytes(seed: u64, len: usize) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    /// A put's keyspace, sequence number and value.
    type Put = (KeyspaceId, SeqNo, Vec<u8>);

    /// Writes `batches` as a WAL segment (a header batch first) into a file of `fs`,
    /// numbering their ops from 1, and returns its path.
    fn segment(fs: &FaultFs, batches: Vec<WriteBatch>) -> PathBuf {
        let path = PathBuf::from("/db/000009.log");
        fs.create_dir_all(Path::new("/db")).unwrap();
        let mut w = LogWriter::new(fs.create(&path).unwrap());
        let mut header = WriteBatch::new();
        header.set_sequence(1);
        w.add_record(header.data()).unwrap();
        let mut seq = 1;
        for mut b in batches {
            b.set_sequence(seq);
            seq += b.len() as u64;
            w.add_record(b.data()).unwrap();
        }
        w.sync().unwrap();
        path
    }

    /// Batches of many ops mixing small and large values (larger than a page too), expiring
    /// puts, deletes and other keyspaces, so values start and end all over the page grid.
    fn batches() -> (Vec<WriteBatch>, Vec<Put>) {
        let lens = [10, 999, 1000, 1001, 5000, PAGE_SIZE - 7, PAGE_SIZE, 3 * PAGE_SIZE + 11, 20];
        let (mut out, mut puts, mut seq) = (Vec::new(), Vec::new(), 1u64);
        for b in 0..40u64 {
            let mut batch = WriteBatch::new();
            for i in 0..(1 + b % 7) {
                let n = b * 10 + i;
                let len = lens[(n % lens.len() as u64) as usize];
                let value = bytes(n, len);
                let key = format!("key{n}").into_bytes();
                let keyspace = (n % 3) as KeyspaceId;
                match n % 5 {
                    0 => batch.delete_to(keyspace, &key),
                    1 => batch.put_expiring_to(keyspace, &key, 1_000_000 + n, &value),
                    _ => batch.put_to(keyspace, &key, &value),
                }
                if n % 5 != 0 && len >= 1000 {
                    puts.push((keyspace, seq, value));
                }
                seq += 1;
            }
            out.push(batch);
        }
        (out, puts)
    }

    #[test]
    fn every_large_put_is_found_where_it_lies() {
        let fs = FaultFs::new();
        let (batches, puts) = batches();
        let path = segment(&fs, batches);
        let data = fs.read_all(&path).unwrap();
        let size = data.len() as u64;
        let index = SegmentIndex::build(&path, 9, data, |_| Some(1000)).unwrap();
        assert_eq!(index.len, size);
        assert_eq!(index.values.len(), puts.len(), "puts below the threshold are not indexed");
        let file = fs.open(&path).unwrap();
        let mut crossing = 0;
        for (keyspace, seq, value) in &puts {
            assert!(index.holds(*keyspace, *seq, value.len()));
            let r = index.find(*keyspace, *seq, value).expect("found");
            assert_eq!(r.file, 9);
            let (start, span) = crate::blob::physical_span(r.offset, r.len).unwrap();
            crossing += usize::from(start / PAGE_SIZE as u64 != (start + span) / PAGE_SIZE as u64);
            assert_eq!(&read_value(file.as_ref(), &path, size, &r).unwrap(), value, "seq {seq}");
        }
        assert!(crossing > 10, "values cross page boundaries ({crossing})");
        assert_eq!(index.indexed_bytes(), puts.iter().map(|p| p.2.len() as u64).sum::<u64>());
    }

    #[test]
    fn other_bytes_keyspaces_and_sequences_are_not_found() {
        let fs = FaultFs::new();
        let (batches, puts) = batches();
        let path = segment(&fs, batches);
        let index = SegmentIndex::build(&path, 9, fs.read_all(&path).unwrap(), |k| {
            // Keyspace 2 separates nothing.
            (k != 2).then_some(1000)
        })
        .unwrap();
        for (keyspace, seq, value) in &puts {
            let found = index.find(*keyspace, *seq, value);
            assert_eq!(found.is_some(), *keyspace != 2);
            let mut other = value.clone();
            other[0] ^= 1;
            assert!(index.find(*keyspace, *seq, &other).is_none(), "a value merged or changed");
            assert!(index.find(*keyspace, *seq, &value[1..]).is_none());
            assert!(index.find(*keyspace + 1, *seq, value).is_none());
        }
        assert!(index.find(0, 1_000_000, &puts[0].2).is_none());
    }

    #[test]
    fn a_zero_tail_is_not_part_of_the_segment_and_damage_is_an_error() {
        let fs = FaultFs::new();
        let (batches, _) = batches();
        let path = segment(&fs, batches);
        let data = fs.read_all(&path).unwrap();
        let len = data.len() as u64;
        // Space reserved beyond the records and not cut (yet, or after a power loss).
        let mut reserved = data.clone();
        reserved.resize(data.len() + (1 << 20), 0);
        let index = SegmentIndex::build(&path, 9, reserved, |_| Some(1000)).unwrap();
        assert_eq!(index.len, len);
        // A torn last record: not sealed whole.
        let torn = data[..data.len() - 10].to_vec();
        assert!(SegmentIndex::build(&path, 9, torn, |_| Some(1000)).is_err());
        let mut damaged = data;
        damaged[100] ^= 0x55;
        assert!(SegmentIndex::build(&path, 9, damaged, |_| Some(1000)).is_err());
    }

    #[test]
    fn worth_keeping_takes_half_the_segment() {
        assert!(worth_keeping(50, 100));
        assert!(worth_keeping(51, 101));
        assert!(!worth_keeping(50, 101));
        assert!(!worth_keeping(0, 0));
        assert!(worth_keeping(u64::MAX, u64::MAX));
    }
}
