//! Range deletes (`Db::delete_range`, `WriteBatch::delete_range`): every reader honours
//! them wherever the tombstone and the keys it covers live (memtable, L0, deeper levels),
//! they are durable like any write, and compaction reclaims what they cover.

use bloomkv::{Db, Options, Readable, WriteBatch, WriteOptions};

mod common;

use common::db::open_temp;
use common::keys::k4;
use common::model::keys_of;

fn options() -> Options {
    // Small memtables and tables, so a few hundred keys make several tables.
    Options::new().memtable_bytes(16 << 10).target_table_bytes(8 << 10)
}

/// Checks every read path against the keys in `live` (ascending), for the key space
/// `0..n`.
fn check_reads(db: &Db, live: &[u32], n: u32, context: &str) {
    let want: Vec<Vec<u8>> = live.iter().map(|&i| k4(i)).collect();
    for i in 0..n {
        assert_eq!(db.get(k4(i)).unwrap().is_some(), live.contains(&i), "{context}: get {i}");
    }
    let all: Vec<Vec<u8>> = (0..n).map(k4).collect();
    let got = db.multi_get(&all).unwrap();
    let got: Vec<bool> = got.iter().map(Option::is_some).collect();
    let expect: Vec<bool> = (0..n).map(|i| live.contains(&i)).collect();
    assert_eq!(got, expect, "{context}: multi_get");
    assert_eq!(keys_of(db.range(..)), want, "{context}: scan");
    let mut back = keys_of(db.range(..).rev());
    back.reverse();
    assert_eq!(back, want, "{context}: reverse scan");
    let mut cursor = db.cursor(..);
    cursor.seek(k4(n / 2)).unwrap();
    let after = want.iter().find(|k| k.as_slice() >= k4(n / 2).as_slice());
    assert_eq!(cursor.key().map(<[u8]>::to_vec).as_ref(), after, "{context}: cursor seek");
    cursor.seek_for_prev(k4(n / 2)).unwrap();
    let before = want.iter().rev().find(|k| k.as_slice() <= k4(n / 2).as_slice());
    assert_eq!(cursor.key().map(<[u8]>::to_vec).as_ref(), before, "{context}: seek_for_prev");
}

#[test]
fn every_reader_honours_a_range_delete_wherever_it_lives() {
    // The tombstone in the memtable, in L0 with the keys, and in a deeper level with them;
    // also the keys deeper than the tombstone.
    for (flush_keys, flush_tombstone, compact) in [
        (false, false, false),
        (true, false, false),
        (true, true, false),
        (true, true, true),
        (true, false, true),
    ] {
        let context =
            format!("flush keys {flush_keys}, tombstone {flush_tombstone}, compact {compact}");
        let (_dir, db) = open_temp(options());
        for i in 0..300 {
            db.put(k4(i), vec![b'v'; 100]).unwrap();
        }
        if flush_keys {
            db.flush().unwrap();
        }
        if compact {
            db.compact().unwrap();
        }
        db.delete_range(k4(50)..k4(250)).unwrap();
        if flush_tombstone {
            db.flush().unwrap();
        }
        let mut live: Vec<u32> = (0..50).chain(250..300).collect();
        check_reads(&db, &live, 300, &context);

        // A put after the range delete is not covered by it.
        db.put(k4(100), "again").unwrap();
        live.insert(50, 100);
        check_reads(&db, &live, 300, &format!("{context}, put after"));
        db.compact().unwrap();
        check_reads(&db, &live, 300, &format!("{context}, put after, compacted"));
    }
}

#[test]
fn snapshots_taken_before_a_range_delete_still_see_its_keys() {
    let (_dir, db) = open_temp(options());
    for i in 0..200 {
        db.put(k4(i), "v").unwrap();
    }
    let before = db.snapshot();
    db.delete_range(k4(0)..k4(150)).unwrap();
    let after = db.snapshot();
    for stage in ["memtable", "flushed", "compacted"] {
        match stage {
            "flushed" => db.flush().unwrap(),
            "compacted" => db.compact().unwrap(),
            _ => {}
        }
        assert_eq!(before.range(..).count(), 200, "{stage}");
        assert!(before.get(k4(10)).unwrap().is_some(), "{stage}");
        assert_eq!(before.multi_get(&[k4(10), k4(160)]).unwrap().iter().flatten().count(), 2);
        assert_eq!(after.range(..).count(), 50, "{stage}");
        assert!(after.get(k4(10)).unwrap().is_none(), "{stage}");
        let mut c = before.cursor(..);
        c.seek_to_last().unwrap();
        c.prev().unwrap();
        assert_eq!(c.key(), Some(&k4(198)[..]), "{stage}");
    }
}

#[test]
fn a_batch_applies_its_range_delete_in_order_with_its_other_writes() {
    let (_dir, db) = open_temp(options());
    db.put("b", "old").unwrap();
    let mut batch = WriteBatch::new();
    batch.put("c", "before the range delete");
    batch.delete_range("a".."z");
    batch.put("d", "after the range delete");
    db.write(&batch, &WriteOptions::new()).unwrap();
    assert_eq!(keys_of(db.range(..)), [b"d".to_vec()]);
    db.flush().unwrap();
    assert_eq!(keys_of(db.range(..)), [b"d".to_vec()]);
    assert_eq!(db.get("c").unwrap(), None);
}

#[test]
fn range_deletes_survive_reopening_from_the_wal_and_from_tables() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), options()).unwrap();
        for i in 0..100 {
            db.put(k4(i), "v").unwrap();
        }
        db.flush().unwrap();
        db.delete_range(k4(10)..k4(20)).unwrap(); // only in the WAL at close
        db.close().unwrap();
    }
    let live: Vec<u32> = (0..10).chain(20..100).collect();
    {
        let db = Db::open(dir.path(), options()).unwrap();
        check_reads(&db, &live, 100, "replayed from the WAL");
        db.delete_range(k4(30)..k4(40)).unwrap();
        db.flush().unwrap(); // a table of nothing but a range tombstone
        let only_tombstone = db.tables().into_iter().find(|t| t.entries == 0).unwrap();
        assert_eq!(only_tombstone.range_tombstones, 1);
        assert_eq!(only_tombstone.smallest_key, k4(30));
        db.close().unwrap();
    }
    let live: Vec<u32> = (0..10).chain(20..30).chain(40..100).collect();
    let db = Db::open(dir.path(), options()).unwrap();
    check_reads(&db, &live, 100, "reopened from tables");
    let ro = Db::open_read_only(dir.path(), options()).unwrap();
    check_reads(&ro, &live, 100, "read-only");
}

#[test]
fn compaction_drops_covered_keys_then_the_tombstone_once_nothing_older_is_left() {
    let (_dir, db) = open_temp(options());
    for i in 0..400 {
        db.put(k4(i), vec![b'x'; 100]).unwrap();
        // Keys after the range, in tables of their own that the last compaction leaves
        // alone: older than the tombstone, but not under it.
        db.put(format!("z{i:04}"), vec![b'x'; 100]).unwrap();
    }
    db.compact().unwrap();
    let entries = |db: &Db| db.tables().iter().map(|t| t.entries).sum::<u64>();
    let tombstones = |db: &Db| db.tables().iter().map(|t| t.range_tombstones).sum::<u64>();
    assert_eq!(entries(&db), 800);

    // Newer keys elsewhere, then a range delete of most of the old ones.
    for i in 400..450 {
        db.put(k4(i), "new").unwrap();
    }
    db.delete_range(k4(0)..k4(390)).unwrap();
    db.flush().unwrap();
    assert_eq!(tombstones(&db), 1, "flushed with the memtable");
    assert_eq!(entries(&db), 850);
    let untouched: Vec<u64> =
        db.tables().iter().filter(|t| t.smallest_key >= b"z".to_vec()).map(|t| t.number).collect();
    assert!(!untouched.is_empty());

    // A full compaction meets the tombstone with every key it covers: the keys go, and with
    // nothing older left anywhere the tombstone goes too.
    db.compact().unwrap();
    let numbers: Vec<u64> = db.tables().iter().map(|t| t.number).collect();
    assert!(untouched.iter().all(|n| numbers.contains(n)), "the z tables were not compacted");
    assert_eq!(entries(&db), 460);
    assert_eq!(tombstones(&db), 0);
    let z: usize = db.range("z".."{").count();
    assert_eq!(z, 400);
    assert_eq!(db.range(..).count(), 460);
    for i in 0..450 {
        assert_eq!(db.get(k4(i)).unwrap().is_some(), i >= 390, "get {i}");
    }
}

#[test]
fn empty_ranges_write_nothing_and_oversized_bounds_are_refused() {
    let (_dir, db) = open_temp(options());
    db.put("m", "v").unwrap();
    let seq = db.snapshot().sequence();
    db.delete_range("z".."a").unwrap();
    db.delete_range("m".."m").unwrap();
    assert_eq!(db.snapshot().sequence(), seq);
    assert_eq!(db.get("m").unwrap().as_deref(), Some(&b"v"[..]));

    // A bound may be one byte longer than a key (the bound just past the longest key).
    let huge = vec![b'z'; bloomkv::MAX_KEY_BYTES + 2];
    let e = db.delete_range(b"a".to_vec()..huge.clone()).unwrap_err();
    assert!(matches!(e, bloomkv::Error::KeyTooLarge { .. }), "{e}");
    let mut batch = WriteBatch::new();
    batch.delete_range(b"a".to_vec()..huge);
    assert!(matches!(
        db.write(&batch, &WriteOptions::new()).unwrap_err(),
        bloomkv::Error::KeyTooLarge { .. }
    ));
    assert_eq!(db.get("m").unwrap().as_deref(), Some(&b"v"[..]));
}

#[test]
fn trace_shows_the_value_a_range_tombstone_covers_as_what_decides() {
    use bloomkv::{Presence, TraceSource};
    let (_dir, db) = open_temp(options());
    db.put("k", "old").unwrap();
    db.flush().unwrap();
    db.delete_range("a".."z").unwrap();
    db.put("k2", "new").unwrap();
    let steps = db.trace("k").unwrap();
    let deciding: Vec<_> = steps.iter().filter(|s| s.decides).collect();
    assert_eq!(deciding.len(), 1, "{steps:?}");
    assert!(matches!(deciding[0].source, TraceSource::Table { .. }), "{steps:?}");
    assert_eq!(deciding[0].actual, Presence::RangeDeleted);
    assert_eq!(db.get("k").unwrap(), None);
    // A value written after the range delete is a plain value.
    db.put("k", "again").unwrap();
    let steps = db.trace("k").unwrap();
    let first = steps.iter().find(|s| s.decides).unwrap();
    assert_eq!((&first.source, &first.actual), (&TraceSource::Memtable, &Presence::Value));
    db.flush().unwrap();
    let steps = db.trace("k").unwrap();
    let actual: Vec<&Presence> = steps.iter().filter(|s| s.in_range).map(|s| &s.actual).collect();
    assert!(actual.contains(&&Presence::Value) && actual.contains(&&Presence::RangeDeleted));
}

#[test]
fn a_checkpoint_carries_the_range_deletes_its_snapshot_sees() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("live"), options()).unwrap();
    for i in 0..200 {
        db.put(k4(i), "v").unwrap();
    }
    db.delete_range(k4(0)..k4(50)).unwrap();
    db.flush().unwrap(); // this tombstone is in a table
    db.delete_range(k4(100)..k4(120)).unwrap(); // this one only in the memtable
    let snap = db.snapshot();
    db.delete_range(k4(150)..k4(200)).unwrap(); // after the snapshot: not in the copy
    snap.checkpoint(dir.path().join("copy")).unwrap();
    let copy = Db::open(dir.path().join("copy"), options()).unwrap();
    let live: Vec<u32> = (50..100).chain(120..200).collect();
    check_reads(&copy, &live, 200, "checkpoint");
    copy.compact().unwrap();
    check_reads(&copy, &live, 200, "checkpoint, compacted");
}

/// Every kind of bound, an open end and prefixes, against a model, through the memtable,
/// a flush, a compaction and a reopen; the keys include the longest allowed and ones made of
/// 0xff bytes, which an open end must still cover.
#[test]
fn open_and_inclusive_bounds_and_prefixes_delete_exactly_their_keys() {
    use std::collections::BTreeSet;
    use std::ops::Bound;
    let longest = vec![0xffu8; bloomkv::MAX_KEY_BYTES];
    let mut all: BTreeSet<Vec<u8>> = (0..300).map(k4).collect();
    all.extend([
        b"\xff".to_vec(),
        b"\xff\xff\x00".to_vec(),
        longest.clone(),
        b"p/\xff\xff".to_vec(),
    ]);
    all.extend([b"p/".to_vec(), b"p/a".to_vec(), b"p0".to_vec(), b"".to_vec(), b"\x00".to_vec()]);
    type Step = (&'static str, Box<dyn Fn(&Db) -> bloomkv::Result<()>>, Box<dyn Fn(&[u8]) -> bool>);
    let steps: Vec<Step> = vec![
        ("..=k0010", Box::new(|db| db.delete_range(..=k4(10))), Box::new(|k| k <= &k4(10)[..])),
        (
            "(k0020, k0030]",
            Box::new(|db| db.delete_range((Bound::Excluded(k4(20)), Bound::Included(k4(30))))),
            Box::new(|k| k > &k4(20)[..] && k <= &k4(30)[..]),
        ),
        ("prefix k01", Box::new(|db| db.delete_prefix("k01")), Box::new(|k| k.starts_with(b"k01"))),
        ("prefix p/", Box::new(|db| db.delete_prefix("p/")), Box::new(|k| k.starts_with(b"p/"))),
        ("k0250..", Box::new(|db| db.delete_range(k4(250)..)), Box::new(|k| k >= &k4(250)[..])),
    ];
    let (dir, mut db) = open_temp(options());
    for k in &all {
        db.put(k, b"v").unwrap();
    }
    let mut live = all.clone();
    let check = |db: &Db, live: &BTreeSet<Vec<u8>>, what: &str| {
        let got: BTreeSet<Vec<u8>> = keys_of(db.range(..)).into_iter().collect();
        assert!(got == *live, "{what}: scan differs");
        for k in &all {
            assert_eq!(db.get(k).unwrap().is_some(), live.contains(k), "{what}: get {k:?}");
        }
    };
    for (i, (what, delete, covers)) in steps.iter().enumerate() {
        delete(&db).unwrap();
        live.retain(|k| !covers(k));
        check(&db, &live, what);
        match i % 3 {
            0 => db.flush().unwrap(),
            1 => db.compact().unwrap(),
            _ => {
                drop(db);
                db = Db::open(dir.path(), options()).unwrap();
            }
        }
        check(&db, &live, &format!("{what}, then flushed/compacted/reopened"));
    }
    // The open end covered the longest key and the 0xff ones; keys below the ranges stand.
    assert!(
        live.contains(&k4(15)) && !live.contains(&longest) && !live.contains(b"\xff".as_slice())
    );
    // An empty prefix deletes everything; new writes stand.
    let mut batch = WriteBatch::new();
    batch.delete_prefix("");
    batch.put("after", "v");
    db.write(&batch, &WriteOptions::default()).unwrap();
    db.compact().unwrap();
    assert_eq!(keys_of(db.range(..)), [b"after".to_vec()]);
    // A bound longer than a key can be is refused.
    let too_long = vec![b'a'; bloomkv::MAX_KEY_BYTES + 2];
    assert!(matches!(db.delete_range(..too_long), Err(bloomkv::Error::KeyTooLarge { .. })));
}
