use std::path::PathBuf;

use proptest::prelude::*;

use super::*;
use crate::fs::{FileSystem, StdFs, WritableFile};
use crate::{Error, Result};

use crate::fs::MemFile;

/// A file whose appends fail after `budget` bytes.
struct FailingFile {
    budget: usize,
    written: u64,
}

impl WritableFile for FailingFile {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        if data.len() > self.budget {
            return Err(Error::io("appending", std::io::ErrorKind::Other.into()));
        }
        self.budget -= data.len();
        self.written += data.len() as u64;
        Ok(())
    }
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }
    fn sync(&mut self) -> Result<()> {
        Ok(())
    }
    fn len(&self) -> u64 {
        self.written
    }
}

fn write_log(records: &[Vec<u8>]) -> Vec<u8> {
    let file = MemFile::default();
    let mut w = LogWriter::new(Box::new(file.clone()));
    for r in records {
        w.add_record(r).unwrap();
    }
    w.flush().unwrap();
    assert_eq!(w.len(), file.len());
    file.contents()
}

fn path() -> PathBuf {
    PathBuf::from("000007.log")
}

/// Reads every record, returning them and the reader's final result.
fn read_all(data: Vec<u8>) -> (Vec<Vec<u8>>, Result<()>, LogReader) {
    let mut r = LogReader::new(path(), data);
    let mut out = Vec::new();
    loop {
        match r.next_record() {
            Ok(Some(rec)) => out.push(rec),
            Ok(None) => return (out, Ok(()), r),
            Err(e) => return (out, Err(e), r),
        }
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// End offsets (exclusive) of each record's bytes in the file, derived from the writer.
fn record_ends(records: &[Vec<u8>]) -> Vec<u64> {
    let file = MemFile::default();
    let mut w = LogWriter::new(Box::new(file));
    records
        .iter()
        .map(|r| {
            w.add_record(r).unwrap();
            w.len()
        })
        .collect()
}

#[test]
fn round_trip_edge_sizes() {
    let max_in_first_page = PAGE_SIZE - HEADER_SIZE;
    let records = vec![
        vec![],
        vec![7],
        pattern(max_in_first_page - HEADER_SIZE - 1, 1), // leaves exactly a header's room
        vec![],                                          // empty FULL filling the page
        pattern(max_in_first_page, 2),                   // exactly one page
        pattern(max_in_first_page + 1, 3),               // one byte spills over
        pattern(100 * 1024 + 17, 4),                     // many pages
        pattern(PAGE_SIZE - 3, 5),                       // leaves a padded tail
        vec![9, 9, 9],
    ];
    let data = write_log(&records);
    let (got, res, r) = read_all(data);
    res.unwrap();
    assert_eq!(got, records);
    assert_eq!(r.dropped_tail_bytes(), 0);
}

#[test]
fn record_exactly_filling_a_page_has_one_fragment() {
    let data = write_log(&[pattern(PAGE_SIZE - HEADER_SIZE, 0)]);
    assert_eq!(data.len(), PAGE_SIZE);
    assert_eq!(data[6], FragmentType::Full as u8);
    assert_eq!(u16::from_le_bytes([data[4], data[5]]) as usize, PAGE_SIZE - HEADER_SIZE);
}

#[test]
fn header_layout_and_crc_cover_type_and_payload() {
    let data = write_log(&[b"hello".to_vec()]);
    assert_eq!(data.len(), HEADER_SIZE + 5);
    let crc = u32::from_le_bytes(data[..4].try_into().unwrap());
    assert_eq!(crc, crate::coding::crc32(&[&[1], b"hello"]));
    assert_eq!(&data[4..7], &[5, 0, 1]);
}

#[test]
fn short_page_tail_is_zero_padded_and_skipped() {
    // Leaves 3 bytes in the first page, too few for a header.
    let first = pattern(PAGE_SIZE - HEADER_SIZE - 3, 1);
    let data = write_log(&[first.clone(), b"next".to_vec()]);
    assert_eq!(&data[PAGE_SIZE - 3..PAGE_SIZE], &[0, 0, 0]);
    assert_eq!(data[PAGE_SIZE + 6], FragmentType::Full as u8);
    let (got, res, r) = read_all(data);
    res.unwrap();
    assert_eq!(got, vec![first, b"next".to_vec()]);
    assert_eq!(r.last_record_offset(), PAGE_SIZE as u64);
}

#[test]
fn writer_continues_an_existing_file_on_page_grid() {
    let file = MemFile::default();
    let mut w = LogWriter::new(Box::new(file.clone()));
    w.add_record(&pattern(PAGE_SIZE - 20, 1)).unwrap();
    drop(w);
    let mut w = LogWriter::new(Box::new(file.clone()));
    w.add_record(&pattern(50, 2)).unwrap();
    let data = file.contents();
    let (got, res, _) = read_all(data);
    res.unwrap();
    assert_eq!(got, vec![pattern(PAGE_SIZE - 20, 1), pattern(50, 2)]);
}

#[test]
fn writer_refuses_work_after_a_failed_append() {
    let mut w = LogWriter::new(Box::new(FailingFile { budget: 10, written: 0 }));
    assert!(w.add_record(b"0123456789abcdef").is_err());
    assert!(matches!(w.add_record(b""), Err(Error::Io { .. })));
    assert!(w.flush().is_err());
    assert!(w.sync().is_err());
}

#[test]
fn last_record_offset_points_at_first_fragment() {
    let big = pattern(PAGE_SIZE * 2, 3);
    let records = vec![b"a".to_vec(), big, b"b".to_vec()];
    let ends = record_ends(&records);
    let mut data = write_log(&records);
    let len = data.len() as u64;
    // Zeros reserved beyond the records are not part of them.
    data.resize(data.len() + 3 * PAGE_SIZE, 0);
    let mut r = LogReader::new(path(), data);
    r.next_record().unwrap().unwrap();
    assert_eq!(r.last_record_offset(), 0);
    assert_eq!(r.last_record_end(), ends[0]);
    r.next_record().unwrap().unwrap();
    assert_eq!(r.last_record_offset(), ends[0]);
    assert_eq!(r.last_record_end(), ends[1]);
    r.next_record().unwrap().unwrap();
    // The 3rd record starts right where the 2nd ended (its LAST leaves room).
    assert_eq!(r.last_record_offset(), ends[1]);
    assert_eq!(r.next_record().unwrap(), None);
    assert_eq!(r.last_record_end(), len);
}

#[test]
fn truncation_anywhere_in_the_last_records_is_a_silent_torn_tail() {
    let records = vec![
        pattern(100, 1),
        pattern(PAGE_SIZE - 400, 2),
        pattern(40, 3),
        pattern(1000, 4), // FIRST in page 0, LAST in page 1
        pattern(10, 5),
    ];
    let ends = record_ends(&records);
    let full = write_log(&records);
    assert!(ends[2] < PAGE_SIZE as u64 && ends[3] > PAGE_SIZE as u64);
    // Cut at every byte from the start of the third record to the end.
    for cut in ends[1] as usize..full.len() {
        let complete = ends.iter().filter(|&&e| e as usize <= cut).count();
        let (got, res, r) = read_all(full[..cut].to_vec());
        assert!(res.is_ok(), "cut at {cut}: {res:?}");
        assert_eq!(got, records[..complete].to_vec(), "cut at {cut}");
        let valid_end = if complete == 0 { 0 } else { ends[complete - 1] as usize };
        // Bytes after the last complete record are either padding or a dropped tail.
        let dropped = r.dropped_tail_bytes() as usize;
        assert!(dropped <= cut - valid_end, "cut at {cut}");
        if cut - valid_end >= HEADER_SIZE {
            assert!(dropped > 0, "cut at {cut}: tail not reported");
        }
    }
}

#[test]
fn zero_filled_tail_is_end_of_log() {
    let records = vec![pattern(300, 1), pattern(5, 2)];
    let mut data = write_log(&records);
    let valid = data.len();
    data.resize(valid + 3 * PAGE_SIZE, 0); // preallocated space spanning page boundaries
    let (got, res, r) = read_all(data);
    res.unwrap();
    assert_eq!(got, records);
    // Reserved space, not a torn record: nothing was dropped.
    assert_eq!(r.dropped_tail_bytes(), 0);
}

#[test]
fn torn_record_before_reserved_zeros_is_still_a_torn_tail() {
    // A record spanning pages whose first fragment reached the file but not the rest, in a
    // file with space reserved after it: the unfinished record is a torn tail.
    let records = vec![pattern(100, 1), pattern(2 * PAGE_SIZE, 2)];
    let ends = record_ends(&records);
    let mut data = write_log(&records);
    let torn_from = ends[0] as usize;
    data.truncate(torn_from + PAGE_SIZE / 2);
    data.resize(torn_from + 4 * PAGE_SIZE, 0);
    let (got, res, r) = read_all(data.clone());
    res.unwrap();
    assert_eq!(got, records[..1]);
    assert_eq!(r.dropped_tail_bytes(), (data.len() - torn_from) as u64);
}

#[test]
fn flipped_byte_in_last_record_is_dropped_silently() {
    let records = vec![pattern(100, 1), pattern(200, 2), pattern(300, 3)];
    let ends = record_ends(&records);
    let clean = write_log(&records);
    for pos in ends[1] as usize..clean.len() {
        let mut data = clean.clone();
        data[pos] ^= 0x40;
        let (got, res, r) = read_all(data);
        assert!(res.is_ok(), "flip at {pos}: {res:?}");
        assert_eq!(got, records[..2].to_vec(), "flip at {pos}");
        assert_eq!(r.dropped_tail_bytes(), clean.len() as u64 - ends[1]);
    }
}

#[test]
fn flipped_byte_in_early_record_is_corruption_with_path_and_offset() {
    let records: Vec<Vec<u8>> = (0..20).map(|i| pattern(50 + i * 10, i as u8)).collect();
    let ends = record_ends(&records);
    let clean = write_log(&records);
    // Damage the payload of record 3.
    let start = ends[2] as usize;
    let mut data = clean.clone();
    data[start + HEADER_SIZE + 4] ^= 1;
    let (got, res, r) = read_all(data);
    assert_eq!(got, records[..3].to_vec());
    match res {
        Err(Error::Corruption { file, offset, reason }) => {
            assert_eq!(file, path());
            assert_eq!(offset, start as u64);
            assert!(reason.contains("checksum"), "{reason}");
        }
        other => panic!("expected corruption, got {other:?}"),
    }
    assert_eq!(r.dropped_tail_bytes(), 0);
    // The error is sticky.
    let mut r = r;
    assert!(r.next_record().unwrap_err().is_corruption());
}

#[test]
fn damage_found_through_a_later_page_boundary() {
    // The length field of an early record is broken, so the reader cannot find the
    // fragment after it; the next page boundary still holds valid data.
    let records: Vec<Vec<u8>> = (0..40).map(|i| pattern(3000, i as u8)).collect();
    let ends = record_ends(&records);
    let mut data = write_log(&records);
    let start = ends[0] as usize;
    data[start + 5] = 0xff; // length now crosses the page boundary
    let (got, res, _) = read_all(data);
    assert_eq!(got, records[..1].to_vec());
    let e = res.unwrap_err();
    assert!(matches!(e, Error::Corruption { offset, .. } if offset == start as u64), "{e}");
}

#[test]
fn broken_length_in_the_last_page_is_indistinguishable_from_a_tail() {
    // Documented blind spot: with the length gone, the next record cannot be found and no
    // page boundary follows, so the records after the damage are dropped as a tail.
    let records = vec![pattern(10, 1), pattern(20, 2), pattern(30, 3)];
    let ends = record_ends(&records);
    let mut data = write_log(&records);
    data[ends[0] as usize + 5] = 0xff;
    let (got, res, r) = read_all(data);
    res.unwrap();
    assert_eq!(got, records[..1].to_vec());
    assert_eq!(r.dropped_tail_bytes(), ends[2] - ends[0]);
}

#[test]
fn damaged_first_fragment_of_multi_page_last_record_is_corruption() {
    // Its MIDDLE/LAST at the next page boundary are valid data after the damage: a torn
    // append cannot produce that, so it is not a tail.
    let records = vec![pattern(10, 1), pattern(PAGE_SIZE * 2, 2)];
    let ends = record_ends(&records);
    let mut data = write_log(&records);
    data[ends[0] as usize + HEADER_SIZE + 1] ^= 0x80;
    let (got, res, _) = read_all(data);
    assert_eq!(got, records[..1].to_vec());
    assert!(res.unwrap_err().is_corruption());
}

#[test]
fn zeroed_hole_followed_by_valid_records_is_corruption() {
    let records: Vec<Vec<u8>> = (0..30).map(|i| pattern(4000, i as u8)).collect();
    let ends = record_ends(&records);
    let mut data = write_log(&records);
    let hole = ends[1] as usize..ends[5] as usize;
    data[hole.clone()].fill(0);
    let (got, res, _) = read_all(data);
    assert_eq!(got, records[..2].to_vec());
    let e = res.unwrap_err();
    assert!(matches!(e, Error::Corruption { offset, .. } if offset == hole.start as u64), "{e}");
}

/// Builds a raw fragment for grammar tests.
fn fragment(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = fragment_crc(kind, payload).to_le_bytes().to_vec();
    v.extend_from_slice(&(payload.len() as u16).to_le_bytes());
    v.push(kind);
    v.extend_from_slice(payload);
    v
}

#[test]
fn fragment_grammar_violations() {
    let full = |p: &[u8]| fragment(1, p);
    let first = |p: &[u8]| fragment(2, p);
    let middle = |p: &[u8]| fragment(3, p);
    let last = |p: &[u8]| fragment(4, p);

    // FIRST + MIDDLE at the end of the file: torn tail.
    let data = [full(b"a"), first(b"b"), middle(b"c")].concat();
    let (got, res, r) = read_all(data);
    res.unwrap();
    assert_eq!(got, vec![b"a".to_vec()]);
    assert_eq!(r.dropped_tail_bytes(), 2 * HEADER_SIZE as u64 + 2);

    // FIRST inside an open record: corruption at the open record.
    let data = [full(b"a"), first(b"b"), first(b"c"), last(b"d")].concat();
    let (got, res, _) = read_all(data);
    assert_eq!(got, vec![b"a".to_vec()]);
    let e = res.unwrap_err();
    assert!(matches!(e, Error::Corruption { offset: 8, .. }), "{e}");

    // FULL inside an open record: corruption.
    let data = [first(b"b"), full(b"c")].concat();
    let (got, res, _) = read_all(data);
    assert!(got.is_empty());
    assert!(res.unwrap_err().is_corruption());

    // LAST without FIRST, then valid data: corruption at the orphan.
    let data = [full(b"a"), last(b"x"), full(b"b")].concat();
    let (got, res, _) = read_all(data);
    assert_eq!(got, vec![b"a".to_vec()]);
    assert!(matches!(res.unwrap_err(), Error::Corruption { offset: 8, .. }));

    // MIDDLE without FIRST as the very last thing: nothing valid follows, so a tail.
    let data = [full(b"a"), middle(b"x")].concat();
    let (got, res, r) = read_all(data);
    res.unwrap();
    assert_eq!(got, vec![b"a".to_vec()]);
    assert_eq!(r.dropped_tail_bytes(), HEADER_SIZE as u64 + 1);

    // A well-formed multi-fragment record built by hand.
    let data = [first(b"ab"), middle(b""), middle(b"cd"), last(b"e")].concat();
    let (got, res, _) = read_all(data);
    res.unwrap();
    assert_eq!(got, vec![b"abcde".to_vec()]);

    // Unknown type with valid CRC followed by data: corruption.
    let data = [full(b"a"), fragment(9, b"?"), full(b"b")].concat();
    let (_, res, _) = read_all(data);
    assert!(res.unwrap_err().is_corruption());
}

#[test]
fn empty_file_has_no_records() {
    let (got, res, r) = read_all(Vec::new());
    res.unwrap();
    assert!(got.is_empty());
    assert_eq!(r.dropped_tail_bytes(), 0);
}

#[test]
fn round_trip_through_real_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("000001.log");
    let records: Vec<Vec<u8>> = (0..50).map(|i| pattern(i * 997, i as u8)).collect();
    let mut w = LogWriter::new(StdFs.create(&p).unwrap());
    for r in &records {
        w.add_record(r).unwrap();
    }
    w.sync().unwrap();
    let len = w.len();
    drop(w);
    let data = StdFs.read_all(&p).unwrap();
    assert_eq!(data.len() as u64, len);
    let (got, res, _) = read_all(data);
    res.unwrap();
    assert_eq!(got, records);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn prop_round_trip_random_sizes(
        sizes in proptest::collection::vec(
            prop_oneof![6 => 0usize..64, 3 => 0usize..4096, 1 => 0usize..(3 * PAGE_SIZE)],
            0..300,
        ),
        seed in any::<u8>(),
    ) {
        let records: Vec<Vec<u8>> =
            sizes.iter().enumerate().map(|(i, &n)| pattern(n, seed ^ i as u8)).collect();
        let (got, res, r) = read_all(write_log(&records));
        prop_assert!(res.is_ok());
        prop_assert_eq!(got, records);
        prop_assert_eq!(r.dropped_tail_bytes(), 0);
    }

    #[test]
    fn prop_garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..(3 * PAGE_SIZE))) {
        let (_, res, r) = read_all(data.clone());
        if let Err(e) = res {
            prop_assert!(e.is_corruption());
        }
        prop_assert!(r.dropped_tail_bytes() <= data.len() as u64);
    }

    #[test]
    fn prop_damaged_log_never_panics_and_keeps_a_prefix(
        sizes in proptest::collection::vec(0usize..20_000, 1..20),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let records: Vec<Vec<u8>> =
            sizes.iter().enumerate().map(|(i, &n)| pattern(n, i as u8)).collect();
        let mut data = write_log(&records);
        for (at, x) in flips {
            let i = at.index(data.len());
            data[i] ^= x;
        }
        data.truncate(cut.index(data.len() + 1));
        let (got, res, _) = read_all(data);
        if let Err(e) = res {
            prop_assert!(e.is_corruption());
        }
        // Whatever is returned is a prefix of what was written: a CRC32 collision on a
        // damaged fragment is the only way out, and these inputs do not contain one.
        prop_assert!(got.len() <= records.len());
        prop_assert_eq!(&got[..], &records[..got.len()]);
    }
}

/// A file whose space cannot be reserved (a nearly full disk refuses `fallocate` for a whole
/// step while a record still fits), counting the attempts.
struct NoRoomToReserve {
    file: MemFile,
    attempts: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl WritableFile for NoRoomToReserve {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        self.file.append(data)
    }
    fn flush(&mut self) -> Result<()> {
        self.file.flush()
    }
    fn sync(&mut self) -> Result<()> {
        self.file.sync()
    }
    fn preallocate(&mut self, _len: u64) -> Result<()> {
        self.attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Err(Error::io("reserving space", std::io::ErrorKind::StorageFull.into()))
    }
    fn len(&self) -> u64 {
        self.file.len()
    }
}

#[test]
fn a_refused_reservation_leaves_the_records_writable() {
    let file = MemFile::default();
    let attempts = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let inner = NoRoomToReserve { file: file.clone(), attempts: attempts.clone() };
    let mut w = LogWriter::new(Box::new(inner)).reserving(1 << 20);
    let records: Vec<Vec<u8>> = (0..50).map(|i| pattern(100 + i * 37, i as u8)).collect();
    for r in &records {
        w.add_record(r).unwrap();
    }
    w.sync().unwrap();
    // Asked once, then no more: a full disk is not asked again at every record.
    assert_eq!(attempts.load(std::sync::atomic::Ordering::Relaxed), 1);
    let (got, res, r) = read_all(file.contents());
    res.unwrap();
    assert_eq!(got, records);
    assert_eq!(r.dropped_tail_bytes(), 0);
}
