//! Edges of expiring values, under a manual clock: time to live rounding, the clock going
//! back, snapshots judging expiry at their own time, merge operands in keyspaces with a
//! default time to live, and periodic compaction of data left expired on an idle database.

use std::sync::Arc;
use std::time::Duration;

use bloomkv::{
    Db, Error, KeyspaceOptions, ManualClock, Options, Readable, WriteBatch, WriteOptions,
};

mod common;

const START: u64 = 1_700_000_000_000;

fn open(dir: &std::path::Path, clock: &Arc<ManualClock>) -> Db {
    Db::open(dir, Options::default().clock(clock.clone())).unwrap()
}

#[test]
fn sub_millisecond_ttls_round_up_and_zero_is_refused() {
    let clock = Arc::new(ManualClock::new(START));
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), &clock);
    db.put_with_ttl("ns", "v", Duration::from_nanos(1)).unwrap();
    db.put_with_ttl("us", "v", Duration::from_micros(999)).unwrap();
    db.put_with_ttl("ms+", "v", Duration::from_micros(1001)).unwrap();
    let mut batch = WriteBatch::new();
    batch.put_with_ttl("batch", "v", Duration::from_nanos(1));
    db.write(&batch, &WriteOptions::default()).unwrap();
    let mut tx = db.transaction();
    tx.put_with_ttl("tx", "v", Duration::from_nanos(1)).unwrap();
    tx.commit().unwrap();
    let ks = db
        .keyspace("ks", KeyspaceOptions::new().default_ttl(Some(Duration::from_micros(1))))
        .unwrap();
    ks.put("k", "v").unwrap();
    for k in ["ns", "us", "ms+", "batch", "tx"] {
        assert!(db.get(k).unwrap().is_some(), "{k} lives through the millisecond it was written");
    }
    assert!(ks.get("k").unwrap().is_some(), "a sub-millisecond default_ttl is rounded up");
    clock.advance(Duration::from_millis(1));
    for k in ["ns", "us", "batch", "tx"] {
        assert_eq!(db.get(k).unwrap(), None, "{k} expires a millisecond later");
    }
    assert_eq!(ks.get("k").unwrap(), None);
    assert!(db.get("ms+").unwrap().is_some(), "1.001 ms is rounded up to 2 ms");
    clock.advance(Duration::from_millis(1));
    assert_eq!(db.get("ms+").unwrap(), None);

    let named = |e: Error, what: &str| match e {
        Error::InvalidArgument(m) => assert!(m.contains(what), "{m}"),
        e => panic!("expected InvalidArgument, got {e:?}"),
    };
    named(db.put_with_ttl("z", "v", Duration::ZERO).unwrap_err(), "ttl");
    named(ks.put_with_ttl("z", "v", Duration::ZERO).unwrap_err(), "ttl");
    let mut batch = WriteBatch::new();
    batch.put("other", "v");
    batch.put_with_ttl("z", "v", Duration::ZERO);
    named(db.write(&batch, &WriteOptions::default()).unwrap_err(), "ttl");
    assert_eq!(db.get("other").unwrap(), None, "a refused batch writes nothing");
    named(db.transaction().put_with_ttl("z", "v", Duration::ZERO).unwrap_err(), "ttl");
    let zero = KeyspaceOptions::new().default_ttl(Some(Duration::ZERO));
    named(db.keyspace("zero", zero).unwrap_err(), "default_ttl");
    assert_eq!(db.get("z").unwrap(), None);
}

/// Every read path's view of `k`: get, multi_get, a scan, a cursor.
fn reads(db: &Db, k: &str) -> [bool; 4] {
    let mut cursor = db.cursor(..);
    cursor.seek_to_first().unwrap();
    [
        db.get(k).unwrap().is_some(),
        db.multi_get([k]).unwrap()[0].is_some(),
        db.range(..).any(|e| e.unwrap().0 == k.as_bytes()),
        cursor.key() == Some(k.as_bytes()),
    ]
}

#[test]
fn a_clock_set_back_does_not_bring_expired_values_back_even_after_a_reopen() {
    let clock = Arc::new(ManualClock::new(START));
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), &clock);
    db.put_with_ttl("k", "v", Duration::from_secs(10)).unwrap();
    assert_eq!(reads(&db, "k"), [true; 4]);
    clock.advance(Duration::from_secs(10));
    assert_eq!(reads(&db, "k"), [false; 4]);
    clock.set(START);
    assert_eq!(reads(&db, "k"), [false; 4], "the clock went back, expiry did not");
    // A put stamped now expires from the mark, not from the clock set back.
    db.put_with_ttl("later", "v", Duration::from_secs(10)).unwrap();
    clock.set(START + 19_999);
    assert!(db.get("later").unwrap().is_some());
    clock.set(START + 20_000);
    assert_eq!(db.get("later").unwrap(), None);
    drop(db);

    // Reopened with the clock set back: the mark recorded at close holds.
    clock.set(START);
    let db = open(dir.path(), &clock);
    assert_eq!(reads(&db, "k"), [false; 4], "after a reopen");
    assert_eq!(db.get("later").unwrap(), None);
    // Recorded with a flush too, not only at close: reopen once more, and again.
    clock.set(START + 30_000);
    db.put("x", "y").unwrap();
    db.flush().unwrap();
    drop(db);
    clock.set(START);
    let db = open(dir.path(), &clock);
    db.put_with_ttl("m", "v", Duration::from_secs(10)).unwrap();
    clock.set(START + 39_999);
    assert!(db.get("m").unwrap().is_some(), "stamped at the mark, START + 30 s");
    clock.set(START + 40_000);
    assert_eq!(db.get("m").unwrap(), None);
}

/// Whether any table file in `dir` holds `needle` (tables are uncompressed by default).
fn on_disk(dir: &std::path::Path, needle: &[u8]) -> bool {
    common::files::table_files(dir)
        .iter()
        .any(|p| std::fs::read(p).unwrap().windows(needle.len()).any(|w| w == needle))
}

#[test]
fn a_snapshot_judges_expiry_at_its_own_time_and_keeps_what_it_saw() {
    let clock = Arc::new(ManualClock::new(START));
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), &clock);
    let value = b"value-seen-by-the-snapshot";
    db.put_with_ttl("k", value, Duration::from_secs(10)).unwrap();
    db.put("plain", "p").unwrap();
    db.flush().unwrap();
    let snap = db.snapshot();
    let tx = db.transaction();
    clock.advance(Duration::from_secs(10));
    assert_eq!(reads(&db, "k"), [false; 4], "expired for the database");
    let through_snapshot = |snap: &bloomkv::Snapshot| {
        let mut cursor = snap.cursor(..);
        cursor.seek_to_first().unwrap();
        [
            snap.get("k").unwrap().as_deref() == Some(&value[..]),
            snap.multi_get(["k"]).unwrap()[0].is_some(),
            snap.range(..).any(|e| e.unwrap().0 == b"k"),
            snap.range(..).rev().any(|e| e.unwrap().0 == b"k"),
            cursor.key() == Some(&b"k"[..]),
            snap.prefixes_exist(&["k"]).unwrap()[0],
        ]
    };
    assert_eq!(through_snapshot(&snap), [true; 6], "the snapshot's reads repeat");
    assert_eq!(tx.get("k").unwrap().as_deref(), Some(&value[..]), "a transaction's too");
    assert!(tx.range(..).any(|e| e.unwrap().0 == b"k"));
    drop(tx);

    // Compaction drops the expired value from what it writes; the snapshot keeps the files it
    // reads, so the value stays on disk, and readable through it, while it lives.
    db.compact().unwrap();
    assert_eq!(through_snapshot(&snap), [true; 6], "after a compaction");
    assert!(on_disk(dir.path(), value), "the snapshot's files still hold it");
    assert_eq!(reads(&db, "k"), [false; 4]);
    drop(snap);
    db.put("other", "o").unwrap();
    db.flush().unwrap();
    db.compact().unwrap();
    assert!(!on_disk(dir.path(), value), "gone once the snapshot is dropped and compacted");
    assert!(db.get("plain").unwrap().is_some());
    // A snapshot taken after the expiry never sees it.
    assert_eq!(db.snapshot().get("k").unwrap(), None);
}

/// A keyspace counting with `U64Add` whose entries live `ttl`.
fn counters(db: &Db, ttl: Duration) -> bloomkv::Keyspace {
    let opts =
        KeyspaceOptions::new().merge_operator(Arc::new(bloomkv::U64Add)).default_ttl(Some(ttl));
    db.keyspace("counters", opts).unwrap()
}

/// The counter `k` by every read path (get, multi_get, forward and backward scans), which
/// must agree.
fn count(ks: &bloomkv::Keyspace, k: &str) -> Option<u64> {
    let decode = |v: &[u8]| bloomkv::U64Add::decode(v).unwrap();
    let get = ks.get(k).unwrap().map(|v| decode(&v));
    let multi = ks.multi_get([k]).unwrap()[0].as_ref().map(|v| decode(v));
    let find = |it: &mut dyn Iterator<Item = bloomkv::Result<(Vec<u8>, bloomkv::Value)>>| {
        it.map(Result::unwrap).find(|e| e.0 == k.as_bytes()).map(|e| decode(&e.1))
    };
    let fwd = find(&mut ks.range(..));
    let rev = find(&mut ks.range(..).rev());
    assert_eq!([multi, fwd, rev], [get; 3], "read paths disagree on {k}");
    get
}

#[test]
fn a_counter_merged_into_a_keyspace_with_a_ttl_expires_ttl_after_its_last_merge() {
    let clock = Arc::new(ManualClock::new(START));
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), &clock);
    let ttl = Duration::from_secs(10);
    let ks = counters(&db, ttl);
    let one = bloomkv::U64Add::operand(1);
    let at = |ms: u64| clock.set(START + ms);
    for t in [0, 5_000, 8_000] {
        at(t);
        ks.merge("c", one).unwrap();
    }
    at(17_999);
    assert_eq!(count(&ks, "c"), Some(3), "every operand counts until ttl after the last");
    at(18_000);
    assert_eq!(count(&ks, "c"), None, "expired ttl after the last merge");
    // Merged again after it expired: it starts over, the old operands do not come back.
    at(20_000);
    ks.merge("c", one).unwrap();
    assert_eq!(count(&ks, "c"), Some(1));
    // A put (which takes the default ttl too) with a merge on it before it expired.
    ks.put("p", bloomkv::U64Add::operand(10)).unwrap();
    at(29_000);
    ks.merge("p", one).unwrap();
    ks.merge("c", one).unwrap();
    at(35_000);
    assert_eq!(count(&ks, "p"), Some(11), "the put was live when the merge was written");
    assert_eq!(count(&ks, "c"), Some(2));
    // Flushed, compacted and reopened, the answers stay.
    ks.merge("c", one).unwrap();
    db.flush().unwrap();
    db.compact().unwrap();
    assert_eq!(count(&ks, "c"), Some(3));
    ks.merge("c", one).unwrap();
    drop(ks);
    drop(db);
    let db = open(dir.path(), &clock);
    let ks = counters(&db, ttl);
    db.compact().unwrap();
    assert_eq!(count(&ks, "c"), Some(4));
    assert_eq!(count(&ks, "p"), Some(11));
    at(38_999);
    assert_eq!(count(&ks, "p"), Some(11));
    at(39_000);
    assert_eq!(count(&ks, "p"), None);
    at(44_999);
    db.flush().unwrap();
    db.compact().unwrap();
    assert_eq!(count(&ks, "c"), Some(4));
    at(45_000);
    assert_eq!(count(&ks, "c"), None);
    db.compact().unwrap();
    assert_eq!(count(&ks, "c"), None);
    assert_eq!(ks.range(..).count(), 0);
}
