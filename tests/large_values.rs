//! Parts of values (`Readable::get_range`, `Readable::value_len`): the same answers from every
//! reader, for values in memtables, tables and blob files; clamped bounds; a part of a value
//! in a blob file read and checked without the rest of it.

use std::path::Path;

use bloomkv::{Db, Error, KeyspaceOptions, Options, Readable};

mod common;

use common::files::files_ending;

/// Values of at least this many bytes go to blob files in these tests.
const THRESHOLD: usize = 1000;

fn opts() -> Options {
    Options::new().blob_threshold(Some(THRESHOLD)).memtable_bytes(8 << 20)
}

/// A value of `len` bytes, different for each `(seed, len)`.
fn value(seed: u64, len: usize) -> Vec<u8> {
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

/// Values below the threshold (keys `pad/...`), at least `bytes` of them: a WAL segment
/// mostly of these is not kept as a blob file, so its large values are copied into a `.blob`.
fn pad(db: &Db, bytes: usize) {
    for i in 0..bytes.div_ceil(900) {
        db.put(format!("pad/{i:05}"), value(i as u64, 900)).unwrap();
    }
}

/// What `get_range` should answer: the slice clamped to the value.
fn part(v: &[u8], offset: u64, len: u64) -> &[u8] {
    let from = offset.min(v.len() as u64) as usize;
    let to = offset.saturating_add(len).min(v.len() as u64) as usize;
    &v[from..to.max(from)]
}

/// Offsets and lengths around the page size and each value's ends.
fn probes(len: u64) -> Vec<(u64, u64)> {
    let edges = [0, 1, 6, 7, 32_761, 32_768, 32_769, 65_536, 100_000, len / 2];
    let mut out = Vec::new();
    for offset in edges.into_iter().chain([len.saturating_sub(1), len, len + 1, u64::MAX]) {
        for n in [0, 1, 7, 4096, 32_768, 40_000, len, u64::MAX] {
            out.push((offset, n));
        }
    }
    out
}

fn check_reader<R: Readable>(r: &R, name: &str, values: &[(&str, Vec<u8>)]) {
    for (key, v) in values {
        assert_eq!(r.value_len(key).unwrap(), Some(v.len() as u64), "{name}: {key}");
        for (offset, n) in probes(v.len() as u64) {
            let got = r.get_range(key, offset, n).unwrap();
            assert_eq!(got.as_deref(), Some(part(v, offset, n)), "{name}: {key} {offset}+{n}");
        }
    }
    assert_eq!(r.get_range("absent", 0, 10).unwrap(), None, "{name}");
    assert_eq!(r.value_len("absent").unwrap(), None, "{name}");
}

#[test]
fn every_reader_reads_parts_of_inline_memtable_and_blob_values() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let ks = db.keyspace("other", KeyspaceOptions::default().blob_threshold(Some(THRESHOLD)));
    let ks = ks.unwrap();
    let flushed = [("empty", vec![]), ("small", value(1, 100)), ("blob", value(2, 300_000))];
    for (k, v) in &flushed {
        db.put(k, v).unwrap();
        ks.put(k, v).unwrap();
    }
    pad(&db, 1 << 20);
    db.flush().unwrap();
    assert!(!files_ending(dir.path(), "blob").is_empty());
    // Large, but still in the memtable: held inline until its flush.
    let unflushed = ("unflushed", value(3, 70_000));
    db.put(unflushed.0, &unflushed.1).unwrap();
    ks.put(unflushed.0, &unflushed.1).unwrap();
    let mut values = flushed.to_vec();
    values.push(unflushed);

    check_reader(&db, "db", &values);
    check_reader(&ks, "keyspace", &values);
    let snap = db.snapshot();
    db.put("blob", "overwritten after the snapshot").unwrap();
    check_reader(&snap, "snapshot", &values);
    db.put("blob", &values[2].1).unwrap();
    let tx = db.transaction();
    check_reader(&tx, "transaction", &values);
    check_reader(&tx.keyspace(&ks).unwrap(), "transaction keyspace", &values);

    // A deleted value has no part and no length.
    db.delete("small").unwrap();
    assert_eq!(db.get_range("small", 0, 1).unwrap(), None);
    assert_eq!(db.value_len("small").unwrap(), None);
}

#[test]
fn a_transaction_reads_its_own_writes_in_part_and_its_part_reads_are_checked_at_commit() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    db.put("big", value(5, 200_000)).unwrap();
    db.flush().unwrap();

    let mut tx = db.transaction();
    tx.put("mine", "0123456789").unwrap();
    assert_eq!(tx.get_range("mine", 2, 3).unwrap().as_deref(), Some(&b"234"[..]));
    assert_eq!(tx.value_len("mine").unwrap(), Some(10));
    tx.delete("big").unwrap();
    assert_eq!(tx.get_range("big", 0, 3).unwrap(), None);
    drop(tx);

    // A part read of a value another writer then changed is a read the commit refuses.
    let mut tx = db.transaction();
    assert_eq!(tx.get_range("big", 10, 5).unwrap().as_deref(), Some(&value(5, 200_000)[10..15]));
    db.put("big", "changed").unwrap();
    tx.put("other", "x").unwrap();
    assert!(matches!(tx.commit(), Err(Error::Conflict)));
    // So is a length read.
    let mut tx = db.transaction();
    assert_eq!(tx.value_len("big").unwrap(), Some(7));
    db.put("big", "changed again").unwrap();
    tx.put("other", "x").unwrap();
    assert!(matches!(tx.commit(), Err(Error::Conflict)));
}

/// Damages the byte `back` bytes before the end of `file` (in its last value's last page).
fn damage(file: &Path, back: u64) -> u64 {
    let mut bytes = std::fs::read(file).unwrap();
    let at = bytes.len() as u64 - back;
    bytes[at as usize] ^= 0x40;
    std::fs::write(file, &bytes).unwrap();
    at
}

#[test]
fn a_part_of_a_damaged_blob_value_fails_only_where_the_damage_is() {
    let dir = tempfile::tempdir().unwrap();
    // No block cache: every read goes to the file.
    let db = Db::open(dir.path(), opts().block_cache_bytes(0)).unwrap();
    let v = value(7, 300_000);
    db.put("k", &v).unwrap();
    pad(&db, 1 << 20);
    db.flush().unwrap();
    let blob = files_ending(dir.path(), "blob").remove(0);
    let at = damage(&blob, 100);

    // The start of the value, and its middle, are read and checked without the damaged page.
    assert_eq!(db.get_range("k", 0, 5000).unwrap().unwrap(), v[..5000]);
    assert_eq!(db.get_range("k", 150_000, 40_000).unwrap().unwrap(), v[150_000..190_000]);
    // A part in the damaged page, and the whole value, fail naming the file; the part names
    // the damaged page's fragment.
    match db.get_range("k", 299_000, 1000) {
        Err(Error::Corruption { file, offset, .. }) => {
            assert_eq!(file, blob);
            assert_eq!(offset, at - at % 32_768);
        }
        other => panic!("expected corruption, got {:?}", other.map(|v| v.map(|v| v.len()))),
    }
    match db.get("k") {
        Err(Error::Corruption { file, .. }) => assert_eq!(file, blob),
        other => panic!("expected corruption, got {:?}", other.map(|v| v.map(|v| v.len()))),
    }
    // Its length is in the reference: no read of the file at all.
    assert_eq!(db.value_len("k").unwrap(), Some(300_000));
}
