//! Values over `MAX_VALUE_BYTES`, written straight to blob files of their own: read back by
//! every reader, across flushes, compactions and reopens, never logged, refused where they
//! would be held whole, and crash safe (a put refused or cut short leaves nothing visible and
//! no file). Parts of values (`Readable::get_range`, `Readable::value_len`): the same answers
//! from every reader, for values in memtables, tables and blob files; clamped bounds; a part
//! of a value in a blob file read and checked without the rest of it.

use std::path::Path;

use bloomkv::{Db, Error, KeyspaceOptions, Options, Readable, WriteBatch, MAX_VALUE_BYTES};

mod common;
use common::values::{pad, value};

use common::files::files_ending;

/// Values of at least this many bytes go to blob files in these tests.
const THRESHOLD: usize = 1000;

fn opts() -> Options {
    Options::new().blob_threshold(Some(THRESHOLD)).memtable_bytes(8 << 20)
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

/// A large value quickly: `len` bytes, different for each seed, eight at a time.
fn big_value(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

fn total_bytes(dir: &Path, ext: &str) -> u64 {
    files_ending(dir, ext).iter().map(|p| std::fs::metadata(p).unwrap().len()).sum()
}

#[test]
fn a_value_over_max_value_bytes_goes_to_a_file_of_its_own_and_is_never_logged() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    // 64 MiB: four times the limit on values held whole.
    let big = big_value(1, 64 << 20);
    db.put("big", &big).unwrap();
    db.put("small", "beside it").unwrap();
    // One blob file holds it; the WAL holds its reference, not its bytes.
    assert_eq!(files_ending(dir.path(), "blob").len(), 1);
    assert!(total_bytes(dir.path(), "blob") > big.len() as u64);
    // (A segment reserves its space a MiB at a time.)
    assert!(total_bytes(dir.path(), "log") <= 1 << 20, "{}", total_bytes(dir.path(), "log"));

    let check = |db: &Db, when: &str| {
        assert_eq!(db.get("big").unwrap().as_deref(), Some(&big[..]), "{when}");
        assert_eq!(db.value_len("big").unwrap(), Some(big.len() as u64), "{when}");
        for (offset, n) in [(0, 10), (40 << 20, 1 << 20), (big.len() as u64 - 5, 100)] {
            let got = db.get_range("big", offset, n).unwrap();
            assert_eq!(got.as_deref(), Some(part(&big, offset, n)), "{when}: {offset}+{n}");
        }
        assert_eq!(db.get("small").unwrap().as_deref(), Some(&b"beside it"[..]), "{when}");
    };
    check(&db, "in the memtable");
    let snap = db.snapshot();
    let mut it = db.range(..);
    db.flush().unwrap();
    check(&db, "flushed");
    // Views taken before the flush read it from the memtable they hold.
    assert_eq!(snap.get_range("big", 7, 3).unwrap().as_deref(), Some(&big[7..10]));
    let (k, v) = it.next().unwrap().unwrap();
    assert_eq!((&k[..], v.len()), (&b"big"[..], big.len()));
    drop((snap, it));
    db.compact().unwrap();
    check(&db, "compacted");
    db.close().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    check(&db, "reopened");
    // Still one file, the one written by the put: never copied.
    assert_eq!(files_ending(dir.path(), "blob").len(), 1);
}

#[test]
fn unflushed_large_values_survive_a_reopen_and_an_overwritten_ones_file_goes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let (a, b) = (big_value(2, MAX_VALUE_BYTES + 1), big_value(3, MAX_VALUE_BYTES + 70_000));
    db.put("a", &a).unwrap();
    db.put("b", &b).unwrap();
    db.put("b", "overwritten").unwrap();
    assert_eq!(files_ending(dir.path(), "blob").len(), 2);
    db.close().unwrap();
    // Replayed from the WAL: `a`'s file is adopted, `b`'s, which nothing references, removed.
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(db.get("a").unwrap().as_deref(), Some(&a[..]));
    assert_eq!(db.get("b").unwrap().as_deref(), Some(&b"overwritten"[..]));
    assert_eq!(files_ending(dir.path(), "blob").len(), 1);
    // A checkpoint taken while one sits in the memtable links its file.
    db.put("c", &b).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let copy = elsewhere.path().join("copy");
    db.checkpoint(&copy).unwrap();
    drop(db);
    let copied = Db::open(&copy, opts()).unwrap();
    assert_eq!(copied.get("a").unwrap().as_deref(), Some(&a[..]));
    assert_eq!(copied.get("c").unwrap().as_deref(), Some(&b[..]));
}

#[test]
fn a_value_over_max_value_bytes_is_refused_where_it_would_be_held_whole() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let big = big_value(4, MAX_VALUE_BYTES + 1);
    let too_large = |r: bloomkv::Result<()>| match r {
        Err(Error::ValueTooLarge { len }) => assert_eq!(len, big.len()),
        other => panic!("expected ValueTooLarge, got {other:?}"),
    };
    // A batch and a transaction hold their values whole: refused, at once or at commit.
    let mut batch = WriteBatch::new();
    batch.put("k", &big);
    too_large(db.write(&batch, &Default::default()));
    let mut tx = db.transaction();
    too_large(tx.put("k", &big).and_then(|()| tx.commit()));
    // A time to live, or a keyspace without a blob threshold, cannot take a reference.
    too_large(db.put_with_ttl("k", &big, std::time::Duration::from_secs(60)));
    let plain = db.keyspace("plain", KeyspaceOptions::default()).unwrap();
    too_large(plain.put("k", &big));
    let ttl = KeyspaceOptions::default()
        .blob_threshold(Some(THRESHOLD))
        .default_ttl(Some(std::time::Duration::from_secs(60)));
    too_large(db.keyspace("ttl", ttl).unwrap().put("k", &big));
    // Nothing was written.
    assert!(files_ending(dir.path(), "blob").is_empty());
    assert_eq!(db.get("k").unwrap(), None);
    // The message says which limit, and where larger values go.
    let msg = Error::ValueTooLarge { len: big.len() }.to_string();
    assert!(msg.contains("MAX_VALUE_BYTES") && msg.contains("blob_threshold"), "{msg}");
}

#[test]
fn a_large_put_whose_wal_record_never_lands_leaves_nothing_visible_and_no_file() {
    use bloomkv::fs::{fault::unique_dir, CrashMode, Fault, FaultFs, OpKind};
    use common::options::OptionsExt;
    let fs = FaultFs::new();
    let dir = unique_dir("large-orphan");
    let db = Db::open(&dir, opts().fault_fs(&fs)).unwrap();
    db.put("before", "kept").unwrap();
    db.sync().unwrap();
    // The blob file is written and synced; the append of its WAL record fails.
    let wal = |p: &Path| p.extension().is_some_and(|e| e == "log");
    fs.inject(Fault::on(OpKind::Append).matching(wal).power_off());
    let err = db.put("big", big_value(5, MAX_VALUE_BYTES + 5)).unwrap_err();
    assert!(!matches!(err, Error::ValueTooLarge { .. }), "{err}");
    let blobs = |fs: &FaultFs| {
        let files = fs.files();
        files.into_iter().filter(|p| p.extension().is_some_and(|e| e == "blob")).count()
    };
    assert_eq!(blobs(&fs), 1, "the value's file was written before its record");
    drop(db);
    let fs = fs.crash(CrashMode::DropUnsynced);
    let db = Db::open(&dir, opts().fault_fs(&fs)).unwrap();
    assert_eq!(db.get("big").unwrap(), None);
    assert_eq!(db.get("before").unwrap().as_deref(), Some(&b"kept"[..]));
    assert_eq!(blobs(&fs), 0, "the orphan is removed at open");
}

/// A large put whose WAL record is refused (its append or its sync fails, as on a full
/// disk), or which finds the database already stopped, fails with that error and removes the
/// blob file it wrote at once, not at the next open: a database kept running (resumed) does
/// not collect a 16 MiB orphan per failed put. The put never appears, not after the resume,
/// nor after a reopen.
#[test]
fn a_failed_large_put_removes_its_file_at_once() {
    use bloomkv::fs::{fault::unique_dir, Fault, FaultFs, OpKind};
    use common::options::OptionsExt;
    let wal = |p: &Path| p.extension().is_some_and(|e| e == "log");
    let blobs = |fs: &FaultFs| {
        let files = fs.files();
        files.into_iter().filter(|p| p.extension().is_some_and(|e| e == "blob")).count()
    };
    let cases: [(&str, Option<Fault>); 4] = [
        ("append", Some(Fault::on(OpKind::Append).matching(wal).nth(1))),
        ("short append", Some(Fault::on(OpKind::Append).matching(wal).nth(1).short_write(400))),
        ("sync", Some(Fault::on(OpKind::Sync).matching(wal).nth(1))),
        ("already stopped", None),
    ];
    for (what, fault) in cases {
        let fs = FaultFs::new();
        let dir = unique_dir("large-failed");
        let opts = || opts().sync_writes(true).fault_fs(&fs);
        let db = Db::open(&dir, opts()).unwrap();
        db.put("before", "kept").unwrap();
        match fault {
            Some(fault) => fs.inject(fault),
            None => {
                // A failed synced write stops the database before the large put.
                fs.inject(Fault::on(OpKind::Sync).matching(wal).nth(1));
                assert!(db.put("small", "refused").is_err(), "{what}");
                fs.clear_faults();
            }
        }
        let err = db.put("big", big_value(7, MAX_VALUE_BYTES + 3)).unwrap_err();
        assert!(!matches!(err, Error::ValueTooLarge { .. }), "{what}: {err}");
        assert_eq!(blobs(&fs), 0, "{what}: the refused put's file is removed at once");
        fs.clear_faults();
        db.resume().unwrap();
        assert_eq!(db.get("big").unwrap(), None, "{what}");
        // The database goes on, large puts included.
        let v = big_value(8, MAX_VALUE_BYTES + 9);
        db.put("big2", &v).unwrap();
        db.close().unwrap();
        drop(db);
        let db = Db::open(&dir, opts()).unwrap();
        assert_eq!(db.get("big").unwrap(), None, "{what}");
        assert_eq!(db.get("big2").unwrap().as_deref(), Some(&v[..]), "{what}");
        assert_eq!(db.get("before").unwrap().as_deref(), Some(&b"kept"[..]), "{what}");
        assert_eq!(blobs(&fs), 1, "{what}");
    }
    // When the refused record cannot be cut back off the WAL (its truncation fails too), the
    // next open may replay it: the file stays for that open to adopt or remove, and the put,
    // refused, still never appears.
    let fs = FaultFs::new();
    let dir = unique_dir("large-failed-cut");
    let opts = || opts().fault_fs(&fs);
    let db = Db::open(&dir, opts()).unwrap();
    fs.inject(Fault::on(OpKind::Append).matching(wal).nth(1));
    fs.inject(Fault::on(OpKind::Truncate).matching(wal).nth(1));
    assert!(db.put("big", big_value(9, MAX_VALUE_BYTES + 1)).is_err());
    assert_eq!(blobs(&fs), 1, "kept while its record may be replayed");
    fs.clear_faults();
    db.resume().unwrap();
    db.close().unwrap();
    drop(db);
    let db = Db::open(&dir, opts()).unwrap();
    assert_eq!(db.get("big").unwrap(), None);
    assert_eq!(blobs(&fs), 0, "the open removed it");
}

/// Power lost at each step of a large put (the blob file's creation, appends, sync, the
/// directory's sync, the WAL record's append and sync): after recovery the value is there
/// whole if the put was acknowledged (synced writes), or else absent, and no file is left
/// that nothing references.
#[test]
fn power_loss_during_a_large_put_keeps_it_whole_or_leaves_nothing() {
    use bloomkv::fs::{fault::unique_dir, CrashMode, Fault, FaultFs, OpKind};
    use common::options::OptionsExt;
    let big = big_value(6, MAX_VALUE_BYTES + 100_000);
    let points = [
        (OpKind::Create, 1),
        (OpKind::Create, 2),
        (OpKind::Append, 1),
        (OpKind::Append, 700),
        (OpKind::Append, 1700),
        (OpKind::Sync, 1),
        (OpKind::Sync, 2),
        (OpKind::SyncDir, 1),
        (OpKind::SyncDir, 2),
    ];
    let mut acked_rounds = 0;
    for (i, (kind, nth)) in points.into_iter().enumerate() {
        let fs = FaultFs::new();
        let dir = unique_dir("large-power");
        let db = Db::open(&dir, opts().sync_writes(true).fault_fs(&fs)).unwrap();
        fs.inject(Fault::on(kind).nth(nth).power_off());
        let acked = db.put("big", &big).is_ok();
        acked_rounds += u32::from(acked);
        drop(db);
        let mode = match i % 2 {
            0 => CrashMode::DropUnsynced,
            _ => CrashMode::TornTails { seed: i as u64 },
        };
        let fs = fs.crash(mode);
        let db = Db::open(&dir, opts().fault_fs(&fs)).unwrap();
        let got = db.get("big").unwrap();
        match (acked, &got) {
            (true, _) => assert_eq!(got.as_deref(), Some(&big[..]), "{kind:?} #{nth}"),
            (false, Some(v)) => assert_eq!(&v[..], &big[..], "{kind:?} #{nth}"),
            (false, None) => {}
        }
        let blobs: Vec<_> =
            fs.files().into_iter().filter(|p| p.extension().is_some_and(|e| e == "blob")).collect();
        assert_eq!(blobs.len(), usize::from(got.is_some()), "{kind:?} #{nth}: {blobs:?}");
        db.close().unwrap();
    }
    assert!(acked_rounds > 0 && acked_rounds < points.len() as u32, "{acked_rounds}");
}
