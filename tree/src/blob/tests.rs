use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::*;
use crate::coding::crc32;
use crate::fs::{Deleter, FaultFs, FileSystem, RandomAccessFile};
use crate::log::{HEADER_SIZE as H, PAGE_SIZE as P};
use crate::table::cache::ENTRY_OVERHEAD;
use crate::table::BlockCache;

fn fs_with(name: &str) -> (FaultFs, PathBuf) {
    let fs = FaultFs::new();
    fs.create_dir_all(Path::new("/db")).unwrap();
    (fs, PathBuf::from("/db").join(name))
}

/// Writes `values` (key, value) into blob file 7 and returns the file, its size and refs.
fn write(values: &[(Vec<u8>, Vec<u8>)]) -> (FaultFs, PathBuf, BlobFileMeta, Vec<BlobRef>) {
    let (fs, path) = fs_with("000007.blob");
    let mut w = BlobWriter::new(fs.create(&path).unwrap(), 7).unwrap();
    let refs = values.iter().map(|(k, v)| w.add(k, v).unwrap()).collect();
    let meta = w.finish().unwrap();
    (fs, path, meta, refs)
}

fn open(fs: &FaultFs, path: &Path) -> Arc<dyn RandomAccessFile> {
    fs.open(path).unwrap()
}

/// Values of lengths around the page size, so that they cross zero, one and several
/// boundaries, start right after one, and end right at one.
fn awkward_values() -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    let mut x = 1u32;
    for (i, len) in
        [0, 1, 100, P - 40, P - H, P, P + 1, 3 * P + 5, 17, P - 2 * H - 13, 2 * P - 3 * H, 9000]
            .into_iter()
            .enumerate()
    {
        let v: Vec<u8> = (0..len)
            .map(|_| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                (x >> 16) as u8
            })
            .collect();
        out.push((format!("key{i}").into_bytes(), v));
    }
    out
}

#[test]
fn positions_follow_the_page_grid() {
    // A record starting at 0: its payload begins after the header.
    assert_eq!(payload_position(0, 0), H as u64);
    assert_eq!(payload_position(0, (P - H - 1) as u64), (P - 1) as u64);
    // The first byte past a page's end sits after the next page's header.
    assert_eq!(payload_position(0, (P - H) as u64), (P + H) as u64);
    assert_eq!(payload_position(0, (2 * (P - H)) as u64), (2 * P + H) as u64);
    // A record whose first fragment holds nothing (exactly a header's room was left).
    let start = (P - H) as u64;
    assert_eq!(payload_position(start, 0), (P + H) as u64);
    // Where records start.
    assert_eq!(next_record_start(10), 10);
    assert_eq!(next_record_start((P - H) as u64), (P - H) as u64);
    assert_eq!(next_record_start((P - H + 1) as u64), P as u64);
    assert_eq!(next_record_start(P as u64), P as u64);
}

#[test]
fn payload_offsets_invert_payload_positions() {
    let (p, h) = (P as u64, H as u64);
    // Records starting at the file's start, mid-page, with exactly a header's room left, and
    // right after a page boundary; payload bytes in the first, a later and a far page.
    for start in [0, 100, p - h - 1, p - h, p, 3 * p + 5000] {
        for logical in [0, 1, p - 2 * h, p - h - 1, p - h, p, 2 * (p - h) + 3, 5 * p + 17] {
            let physical = payload_position(start, logical);
            assert_eq!(payload_offset(start, physical), Some(logical), "{start} {logical}");
        }
        // No payload byte sits before the payload or in a page's header.
        assert_eq!(payload_offset(start, start), None);
        assert_eq!(payload_offset(start, start + h - 1), None);
        let next_page = (start / p + 1) * p;
        assert_eq!(payload_offset(start, next_page + 3), None);
    }
    assert_eq!(payload_offset(u64::MAX, u64::MAX), None);
}

#[test]
fn spans_count_the_headers_they_cross() {
    let (p, h) = (P as u64, H as u64);
    assert_eq!(physical_span(h, 0), Some((h, 0)));
    assert_eq!(physical_span(h, p - h), Some((h, p - h)));
    assert_eq!(physical_span(h, p - h + 1), Some((h, p - h + 1 + h)));
    assert_eq!(physical_span(p - 1, 1), Some((p - 1, 1)));
    assert_eq!(physical_span(p - 1, 2), Some((p - 1, 2 + h)));
    assert_eq!(physical_span(p - 1, 1 + 2 * (p - h)), Some((p - 1, 1 + 2 * (p - h) + 2 * h)));
    assert_eq!(physical_span(p - 1, 2 + 2 * (p - h)), Some((p - 1, 2 + 2 * (p - h) + 3 * h)));
    // Nothing starts inside a page's header.
    assert_eq!(physical_span(0, 5), None);
    assert_eq!(physical_span(p + 3, 5), None);
    // Overflow is refused, not wrapped.
    assert_eq!(physical_span(u64::MAX - 10, 100), None);
    assert_eq!(physical_span(h, u64::MAX), None);
}

#[test]
fn values_round_trip_across_page_boundaries() {
    let values = awkward_values();
    let (fs, path, meta, refs) = write(&values);
    let file = open(&fs, &path);
    assert_eq!(meta.file_size, file.size());
    assert_eq!(meta.values, values.len() as u64);
    assert_eq!(meta.value_bytes, values.iter().map(|(_, v)| v.len() as u64).sum::<u64>());
    for ((_, v), r) in values.iter().zip(&refs) {
        assert_eq!(r.file, 7);
        assert_eq!(&read_value(file.as_ref(), &path, meta.file_size, r).unwrap(), v);
        assert_eq!(BlobRef::decode(&r.encode()).unwrap(), *r);
    }
    // The whole-file reader finds the same records, with the same references.
    let mut all = BlobRecords::new(&path, fs.read_all(&path).unwrap(), Some(7)).unwrap();
    for ((k, v), r) in values.iter().zip(&refs) {
        let rec = all.next_record().unwrap().unwrap();
        assert_eq!((&rec.key, &rec.value, &rec.reference), (k, v, r));
    }
    assert!(all.next_record().unwrap().is_none());
    assert_eq!(all.dropped_tail_bytes(), 0);
}

#[test]
fn bad_references_are_corruption_naming_file_and_offset() {
    let values = awkward_values();
    let (fs, path, meta, refs) = write(&values);
    let file = open(&fs, &path);
    let read = |r: &BlobRef| read_value(file.as_ref(), &path, meta.file_size, r).unwrap_err();
    let big = refs[7];
    for r in [
        BlobRef { crc: big.crc ^ 1, ..big },
        BlobRef { len: big.len - 1, ..big },
        BlobRef { offset: big.offset + 1, ..big },
        BlobRef { offset: meta.file_size - 3, len: 100, ..big },
        BlobRef { len: u64::MAX / 2, ..big },
        BlobRef { offset: u64::MAX - 3, ..big },
        BlobRef { offset: 3, ..big },
    ] {
        let e = read(&r);
        assert!(e.is_corruption(), "{e}");
        match e {
            Error::Corruption { file, offset, .. } => {
                assert_eq!(file, path);
                assert_eq!(offset, r.offset);
            }
            _ => unreachable!(),
        }
    }
    // A reference spanning a boundary but shifted onto another record's header.
    let shifted = BlobRef { offset: refs[6].offset + P as u64, ..refs[6] };
    assert!(read(&shifted).is_corruption());
    // Malformed encodings.
    let enc = big.encode();
    for n in 0..enc.len() {
        assert!(BlobRef::decode(&enc[..n]).unwrap_err().is_corruption());
    }
    let mut long = enc.clone();
    long.push(0);
    assert!(BlobRef::decode(&long).unwrap_err().is_corruption());
}

#[test]
fn damaged_and_truncated_files_never_panic() {
    let values = awkward_values();
    let (fs, path, meta, refs) = write(&values);
    let bytes = fs.read_all(&path).unwrap();
    // Every prefix: whole-file reading stops (a torn tail or corruption), never panics, and
    // a value read through a reference fails cleanly once the file is too short for it.
    for cut in (0..bytes.len()).step_by(97).chain([0, 1, 7, 20, 28, 29, bytes.len() - 1]) {
        let short = bytes[..cut].to_vec();
        if let Ok(mut recs) = BlobRecords::new(&path, short.clone(), Some(7)) {
            while let Ok(Some(_)) = recs.next_record() {}
        }
        let (fs2, p2) = fs_with("cut.blob");
        let mut f = fs2.create(&p2).unwrap();
        f.append(&short).unwrap();
        f.sync().unwrap();
        let file = open(&fs2, &p2);
        for r in &refs {
            // The manifest's size is the full one: the read itself must notice.
            if let Ok(v) = read_value(file.as_ref(), &p2, meta.file_size, r) {
                assert_eq!(crc32(&[&v]), r.crc);
            }
        }
    }
    // Every byte flipped in turn (sampled): a value read either returns the true value or
    // corruption; whole-file reading never panics.
    for at in (0..bytes.len()).step_by(61) {
        let mut damaged = bytes.clone();
        damaged[at] ^= 0x5a;
        if let Ok(mut recs) = BlobRecords::new(&path, damaged.clone(), Some(7)) {
            while let Ok(Some(_)) = recs.next_record() {}
        }
        let (fs2, p2) = fs_with("flip.blob");
        let mut f = fs2.create(&p2).unwrap();
        f.append(&damaged).unwrap();
        f.sync().unwrap();
        let file = open(&fs2, &p2);
        for ((_, v), r) in values.iter().zip(&refs) {
            match read_value(file.as_ref(), &p2, meta.file_size, r) {
                Ok(got) => assert_eq!(&got, v),
                Err(e) => assert!(e.is_corruption(), "{e}"),
            }
        }
    }
}

#[test]
fn headers_are_checked() {
    let (fs, path, _, _) = write(&[(b"k".to_vec(), b"v".to_vec())]);
    let bytes = fs.read_all(&path).unwrap();
    assert!(BlobRecords::new(&path, bytes.clone(), Some(8)).unwrap_err().is_corruption());
    assert_eq!(BlobRecords::new(&path, bytes.clone(), None).unwrap().number(), 7);
    assert!(BlobRecords::new(&path, Vec::new(), None).unwrap_err().is_corruption());
    // A log whose first record is not a blob header (a WAL segment, a manifest).
    let (fs2, p2) = fs_with("000001.log");
    let mut log = crate::log::LogWriter::new(fs2.create(&p2).unwrap());
    log.add_record(b"not a header").unwrap();
    log.sync().unwrap();
    let e = BlobRecords::new(&p2, fs2.read_all(&p2).unwrap(), None).unwrap_err();
    assert!(e.to_string().contains("not a blob file"), "{e}");
    let mut wrong_version = bytes[H..H + HEADER_LEN].to_vec();
    wrong_version[8] = 9;
    assert!(read_header(&wrong_version, None).unwrap_err().contains("version 9"));
}

#[test]
fn refs_are_counted_per_file() {
    let mut refs = Vec::new();
    for (file, len) in [(5, 10), (3, 4), (5, 6)] {
        count_ref(&mut refs, &BlobRef { file, offset: 7, len, crc: 0 });
    }
    assert_eq!(
        refs,
        [BlobRefs { file: 3, count: 1, bytes: 4 }, BlobRefs { file: 5, count: 2, bytes: 16 }]
    );
}

/// A blob file over `fs` reading through `cache`.
fn blob_file(fs: &FaultFs, path: &Path, meta: BlobFileMeta, cache: &Arc<BlockCache>) -> BlobFile {
    let shared: Arc<dyn FileSystem> = Arc::new(fs.clone());
    let files = Arc::new(crate::fs::FileCache::new(shared.clone(), 4));
    let cache: Arc<dyn super::ValueCache> = cache.clone();
    BlobFile::new(meta, path.to_path_buf(), files, Some(cache), Deleter::new(shared))
}

#[test]
fn reads_cache_values_charged_their_length_unless_told_not_to() {
    let values = awkward_values();
    let (fs, path, meta, refs) = write(&values);
    let cache = Arc::new(BlockCache::new(1 << 20));
    let blob = blob_file(&fs, &path, meta, &cache);
    let charge = |i: usize| values[i].1.len() as u64 + ENTRY_OVERHEAD;
    // Compactions' reads leave the cache as it was.
    assert_eq!(blob.read_with(&refs[7], false).unwrap(), values[7].1);
    assert_eq!(cache.usage_bytes(), 0);
    assert_eq!(blob.read(&refs[7]).unwrap(), values[7].1);
    assert_eq!(cache.usage_bytes(), charge(7));
    let reads = fs.calls(crate::fs::OpKind::Read);
    assert_eq!(blob.read(&refs[7]).unwrap(), values[7].1);
    assert_eq!(fs.calls(crate::fs::OpKind::Read), reads, "a cached value reads no file");
    assert_eq!(blob.read(&refs[2]).unwrap(), values[2].1);
    assert_eq!(cache.usage_bytes(), charge(7) + charge(2));
    // A value too large for the cache is read from the file every time and never charged.
    let huge = vec![(b"big".to_vec(), vec![9u8; cache.max_blob_charge() as usize])];
    let (fs, path, meta, refs) = write(&huge);
    let big = blob_file(&fs, &path, meta, &cache);
    assert_eq!(big.read(&refs[0]).unwrap(), huge[0].1);
    assert_eq!(cache.usage_bytes(), charge(7) + charge(2));
}

#[test]
fn a_cached_value_is_the_checked_one_and_damage_shows_on_the_next_file_read() {
    let values = awkward_values();
    let (fs, path, meta, refs) = write(&values);
    let cache = Arc::new(BlockCache::new(1 << 20));
    let blob = blob_file(&fs, &path, meta, &cache);
    assert_eq!(blob.read(&refs[7]).unwrap(), values[7].1);
    assert_eq!(blob.read_with(&refs[8], false).unwrap(), values[8].1);
    // Damage both values' bytes after they were read.
    let mut bytes = fs.contents(&path).unwrap();
    for r in [refs[7], refs[8]] {
        bytes[r.offset as usize + 10] ^= 0xff;
    }
    fs.set_contents(&path, bytes).unwrap();
    // The cached one is served as it was checked; the other is read again and fails.
    assert_eq!(blob.read(&refs[7]).unwrap(), values[7].1);
    match blob.read(&refs[8]) {
        Err(crate::Error::Corruption { file, offset, .. }) => {
            assert_eq!((file, offset), (path.clone(), refs[8].offset));
        }
        other => panic!("expected corruption, got {:?}", other.map(|v| v.len())),
    }
    // Once evicted, the damaged value is found too.
    let fresh = blob_file(&fs, &path, meta, &Arc::new(BlockCache::new(1 << 20)));
    assert!(matches!(fresh.read(&refs[7]), Err(crate::Error::Corruption { .. })));
}

#[test]
fn advance_follows_the_payload_across_pages() {
    for start in [0u64, 100, (P - H) as u64, (P - H - 1) as u64, 3 * P as u64 + 500] {
        let start = next_record_start(start);
        for a in [0u64, 1, 5000, (P - 2 * H) as u64, (P - H) as u64, 70_000] {
            for k in [0u64, 1, (P - H - 1) as u64, (P - H) as u64, (P - H + 1) as u64, 200_000] {
                assert_eq!(
                    advance(payload_position(start, a), k),
                    Some(payload_position(start, a + k)),
                    "record at {start}, byte {a}, {k} on"
                );
            }
        }
    }
    assert_eq!(advance(u64::MAX - 100, 1 << 20), None);
}

#[test]
fn parts_of_values_read_only_their_pages_and_match_the_value() {
    let values = awkward_values();
    let (fs, path, meta, refs) = write(&values);
    let file = open(&fs, &path);
    for ((_, v), r) in values.iter().zip(&refs) {
        let len = v.len() as u64;
        let cuts = [0, 1, 7, 100, (P - H) as u64, P as u64, (P + 1) as u64, 2 * P as u64, len];
        for from in cuts.into_iter().filter(|&c| c <= len) {
            for n in [0u64, 1, 13, (P - H) as u64, P as u64 + 9, len, u64::MAX] {
                let got = read_value_part(file.as_ref(), &path, meta.file_size, r, from, n)
                    .unwrap_or_else(|e| panic!("{len}-byte value, {n} from {from}: {e}"));
                let to = from.saturating_add(n).min(len) as usize;
                assert_eq!(got, v[from as usize..to], "{len}-byte value, {n} from {from}");
            }
        }
    }
}

#[test]
fn a_damaged_page_fails_only_the_parts_read_from_it() {
    // One value over five pages in a file of its own.
    let v: Vec<u8> = (0..5 * P as u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let (fs, path, meta, refs) = write(&[(b"big".to_vec(), v.clone())]);
    let r = refs[0];
    let mut bytes = fs.read_all(&path).unwrap();
    // Damage one byte of the value inside the third page.
    let third = 2 * P;
    bytes[third + 1000] ^= 0x10;
    fs.set_contents(&path, bytes.clone()).unwrap();
    let file = open(&fs, &path);
    let part =
        |from: u64, n: u64| read_value_part(file.as_ref(), &path, meta.file_size, &r, from, n);
    // The value's byte 10 bytes into page `k` (k > 0: the value starts in page 0).
    let in_page = |k: u64| (P as u64 - r.offset % P as u64) + (k - 1) * (P - H) as u64 + 10;
    // Parts in the other pages are unaffected.
    for from in [0, 4000, in_page(1) + 100, in_page(3) + 100, in_page(4) + 100] {
        assert_eq!(part(from, 1000).unwrap(), v[from as usize..from as usize + 1000]);
    }
    // A part in the damaged page names the file and that page's fragment.
    for (from, n) in [(in_page(2) + 500, 100), (0, 4 * P as u64), (in_page(1), P as u64)] {
        match part(from, n) {
            Err(Error::Corruption { file, offset, reason }) => {
                assert_eq!((file, offset), (path.clone(), third as u64), "{reason}");
            }
            other => panic!("expected corruption, got {:?}", other.map(|v| v.len())),
        }
    }
    // The whole value fails its checksum, at the reference.
    assert!(read_value(file.as_ref(), &path, meta.file_size, &r).unwrap_err().is_corruption());
    // A damaged fragment header is damage to its page too.
    bytes[third + 1000] ^= 0x10;
    bytes[third + 4] ^= 0x01; // the length
    fs.set_contents(&path, bytes).unwrap();
    let file = open(&fs, &path);
    let e = read_value_part(file.as_ref(), &path, meta.file_size, &r, in_page(2), 10).unwrap_err();
    assert!(matches!(e, Error::Corruption { offset, .. } if offset == third as u64), "{e}");
}
