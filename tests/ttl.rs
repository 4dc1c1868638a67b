//! Expiring values (`put_with_ttl`, `KeyspaceOptions::default_ttl`) under a manual clock, so
//! no test sleeps: a model test against a `BTreeMap` of (value, expiry) with flushes,
//! compactions, reopens and snapshots; an expired newer version never bringing back an older
//! one; a last level full of expired data compacted away (by `compact` and by the background
//! thread's pick); WAL recovery keeping each value's original expiry; a transaction's expiring
//! puts; databases without expiring values keeping their table format.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bloomkv::events::{CompactionInfo, CompactionReason};
use bloomkv::{
    Db, EventListener, KeyspaceOptions, ManualClock, Options, Readable, Snapshot, WriteBatch,
    WriteOptions,
};
use proptest::prelude::*;

mod common;

use common::files::table_files;
use common::keys::key4;
use common::model::Pair;

const START: u64 = 1_700_000_000_000;

fn options(clock: &Arc<ManualClock>) -> Options {
    Options::default()
        .memtable_bytes(8 << 10)
        .block_bytes(512)
        .target_table_bytes(8 << 10)
        .level_base_bytes(16 << 10)
        .clock(clock.clone())
}

/// Every table's format version, read with the library's table reader.
fn format_versions(dir: &Path) -> Vec<u32> {
    table_files(dir)
        .iter()
        .map(|p| {
            let file = bloomkv::fs::FileSystem::open(&bloomkv::fs::StdFs, p).unwrap();
            let t = bloomkv_tree::table::Table::open(file, p.clone(), None).unwrap();
            t.properties().format_version
        })
        .collect()
}

fn total_table_bytes(db: &Db) -> u64 {
    db.stats().bytes_per_level.iter().sum()
}

/// The model: each key's value and expiry (`None`: never).
type Model = BTreeMap<Vec<u8>, (Vec<u8>, Option<u64>)>;

fn live(model: &Model, now: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
    model
        .iter()
        .filter(|(_, (_, e))| e.map_or(true, |e| e > now))
        .map(|(k, (v, _))| (k.clone(), v.clone()))
        .collect()
}

#[derive(Debug, Clone)]
enum Op {
    Put(u16, u16),
    PutTtl(u16, u16, u16),
    /// A batch of a plain put and a put with a time to live.
    Batch(u16, u16, u16),
    Delete(u16),
    /// A plain put into a keyspace whose default time to live is `KS_TTL` ms.
    KsPut(u16, u16),
    Advance(u16),
    Get(u16),
    MultiGet(Vec<u16>),
    Scan(u16, u16),
    Snapshot,
    CheckSnapshot,
    Flush,
    Compact,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    let k = || 0u16..120;
    prop_oneof![
        6 => (k(), any::<u16>()).prop_map(|(k, v)| Op::Put(k, v)),
        8 => (k(), any::<u16>(), 0u16..100).prop_map(|(k, v, t)| Op::PutTtl(k, v, t)),
        2 => (k(), k(), 1u16..100).prop_map(|(a, b, t)| Op::Batch(a, b, t)),
        2 => k().prop_map(Op::Delete),
        3 => (k(), any::<u16>()).prop_map(|(k, v)| Op::KsPut(k, v)),
        4 => (0u16..40).prop_map(Op::Advance),
        4 => k().prop_map(Op::Get),
        1 => proptest::collection::vec(k(), 1..8).prop_map(Op::MultiGet),
        2 => (k(), k()).prop_map(|(a, b)| Op::Scan(a.min(b), a.max(b))),
        1 => Just(Op::Snapshot),
        2 => Just(Op::CheckSnapshot),
        1 => Just(Op::Flush),
        1 => Just(Op::Compact),
        1 => Just(Op::Reopen),
    ]
}

/// A value that makes tables fill: 100 bytes derived from `v`.
fn value(v: u16) -> Vec<u8> {
    let mut out = v.to_le_bytes().repeat(50);
    out[0] = b'v';
    out
}

fn check_scan(db_scan: Vec<Pair>, rev: Vec<Pair>, want: &[Pair]) {
    assert_eq!(db_scan, want, "forward scan");
    let mut rev = rev;
    rev.reverse();
    assert_eq!(rev, want, "backward scan");
}

fn scan_both(range: impl Fn() -> bloomkv::DbIterator) -> (Vec<Pair>, Vec<Pair>) {
    (common::model::pairs(range()), common::model::pairs(range().rev()))
}

const KS_TTL: u64 = 50;

fn ks_options() -> KeyspaceOptions {
    KeyspaceOptions::new().default_ttl(Some(Duration::from_millis(KS_TTL)))
}

fn run_model(ops: Vec<Op>) {
    let clock = Arc::new(ManualClock::new(START));
    let dir = tempfile::tempdir().unwrap();
    let mut db = Db::open(dir.path(), options(&clock)).unwrap();
    let mut ks = db.keyspace("ks", ks_options()).unwrap();
    let mut ks_model = Model::new();
    let mut model = Model::new();
    let mut snap: Option<(Snapshot, Model, u64)> = None;
    for op in ops {
        let now = clock.now();
        match op {
            Op::Put(k, v) => {
                db.put(key4(k), value(v)).unwrap();
                model.insert(key4(k), (value(v), None));
            }
            Op::PutTtl(k, v, 0) => {
                // A zero time to live is refused, writing nothing.
                assert!(db.put_with_ttl(key4(k), value(v), Duration::ZERO).is_err());
            }
            Op::PutTtl(k, v, t) => {
                db.put_with_ttl(key4(k), value(v), Duration::from_millis(t.into())).unwrap();
                model.insert(key4(k), (value(v), Some(now + u64::from(t))));
            }
            Op::Batch(a, b, t) => {
                let mut batch = WriteBatch::new();
                batch.put(key4(a), value(a));
                batch.put_with_ttl(key4(b), value(b), Duration::from_millis(t.into()));
                db.write(&batch, &WriteOptions::default()).unwrap();
                model.insert(key4(a), (value(a), None));
                model.insert(key4(b), (value(b), Some(now + u64::from(t))));
            }
            Op::Delete(k) => {
                db.delete(key4(k)).unwrap();
                model.remove(&key4(k));
            }
            Op::KsPut(k, v) => {
                ks.put(key4(k), value(v)).unwrap();
                ks_model.insert(key4(k), (value(v), Some(now + KS_TTL)));
            }
            Op::Advance(ms) => clock.advance(Duration::from_millis(ms.into())),
            Op::Get(k) => {
                let want = model.get(&key4(k)).filter(|(_, e)| e.map_or(true, |e| e > now));
                let got = db.get(key4(k)).unwrap();
                assert_eq!(got.map(|v| v.to_vec()), want.map(|(v, _)| v.clone()), "get {k}");
            }
            Op::MultiGet(keys) => {
                let ks: Vec<Vec<u8>> = keys.iter().map(|&k| key4(k)).collect();
                let got: Vec<Option<Vec<u8>>> =
                    db.multi_get(&ks).unwrap().into_iter().map(|v| v.map(|v| v.to_vec())).collect();
                let want: Vec<Option<Vec<u8>>> = ks
                    .iter()
                    .map(|k| {
                        model
                            .get(k)
                            .filter(|(_, e)| e.map_or(true, |e| e > now))
                            .map(|(v, _)| v.clone())
                    })
                    .collect();
                assert_eq!(got, want, "multi_get");
            }
            Op::Scan(a, b) => {
                let (lo, hi) = (key4(a), key4(b));
                let want: Vec<_> =
                    live(&model, now).into_iter().filter(|(k, _)| *k >= lo && *k < hi).collect();
                let (f, r) = scan_both(|| db.range(lo.clone()..hi.clone()));
                check_scan(f, r, &want);
                let (f, r) = scan_both(|| db.range(..));
                check_scan(f, r, &live(&model, now));
                let (f, r) = scan_both(|| ks.range(..));
                check_scan(f, r, &live(&ks_model, now));
            }
            Op::Snapshot => snap = Some((db.snapshot(), model.clone(), now)),
            Op::CheckSnapshot => {
                if let Some((s, m, taken)) = &snap {
                    // A snapshot judges expiry at the time it was taken: its reads repeat.
                    let now = *taken;
                    let want = live(m, now);
                    let (f, r) = scan_both(|| s.range(..));
                    check_scan(f, r, &want);
                    for (k, (v, e)) in m.iter().take(10) {
                        let want = e.map_or(true, |e| e > now).then(|| v.clone());
                        assert_eq!(s.get(k).unwrap().map(|v| v.to_vec()), want);
                    }
                }
            }
            Op::Flush => db.flush().unwrap(),
            Op::Compact => db.compact().unwrap(),
            Op::Reopen => {
                snap = None;
                drop(ks);
                drop(db);
                db = Db::open(dir.path(), options(&clock)).unwrap();
                ks = db.keyspace("ks", ks_options()).unwrap();
            }
        }
    }
    let now = clock.now();
    let (f, r) = scan_both(|| db.range(..));
    check_scan(f, r, &live(&model, now));
    // Everything expired by now is dropped by a full compaction: nothing but live entries
    // (and no expiring entry that expired) remains in any table.
    db.compact().unwrap();
    let (f, r) = scan_both(|| db.range(..));
    check_scan(f, r, &live(&model, now));
    let (f, r) = scan_both(|| ks.range(..));
    check_scan(f, r, &live(&ks_model, now));
}

trait Now {
    fn now(&self) -> u64;
}

impl Now for ManualClock {
    fn now(&self) -> u64 {
        bloomkv::Clock::now_millis(self)
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: common::env::u64_or("TTL_MODEL_CASES", 48) as u32,
        ..ProptestConfig::default()
    })]

    #[test]
    fn model_with_a_manual_clock(ops in proptest::collection::vec(op(), 1..400)) {
        run_model(ops);
    }
}

/// Reads of `k` through every read path: get, multi_get, a forward and a backward scan, a
/// cursor.
fn read_everywhere(db: &Db, k: &[u8]) -> [Option<Vec<u8>>; 4] {
    let get = db.get(k).unwrap().map(|v| v.to_vec());
    let multi = db.multi_get([k]).unwrap().remove(0).map(|v| v.to_vec());
    let fwd = common::model::pairs(db.range(..)).into_iter().find(|(x, _)| x == k).map(|p| p.1);
    let rev =
        common::model::pairs(db.range(..).rev()).into_iter().find(|(x, _)| x == k).map(|p| p.1);
    [get, multi, fwd, rev]
}

#[test]
fn an_expired_newer_version_never_brings_back_an_older_one() {
    let clock = Arc::new(ManualClock::new(START));
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options(&clock)).unwrap();
    // Older versions in the deepest level, under enough other keys to make several levels.
    for i in 0..400u16 {
        db.put(key4(i), value(i)).unwrap();
    }
    db.compact().unwrap();
    db.put_with_ttl(key4(7), "new", Duration::from_secs(10)).unwrap();
    db.put_with_ttl(key4(8), "new", Duration::from_secs(10)).unwrap();
    db.flush().unwrap(); // key 8's expiring version in a table, key 7's ...
    db.put_with_ttl(key4(7), "newer", Duration::from_secs(10)).unwrap(); // ... in the memtable
    let live = [
        Some(b"new".to_vec()),
        Some(b"new".to_vec()),
        Some(b"new".to_vec()),
        Some(b"new".to_vec()),
    ];
    assert_eq!(read_everywhere(&db, &key4(8)), live);
    clock.advance(Duration::from_secs(10));
    for k in [7, 8] {
        assert_eq!(read_everywhere(&db, &key4(k)), [None, None, None, None], "key {k}");
        // A cursor both ways around it.
        let mut c = db.cursor(..);
        c.seek(key4(k)).unwrap();
        assert_eq!(c.key(), Some(&key4(9)[..]));
        c.seek_for_prev(key4(k)).unwrap();
        assert_eq!(c.key(), Some(&key4(6)[..]));
    }
    assert_eq!(db.range(..).count(), 398);
    // Compaction drops the expired versions without the older ones coming back, whether
    // it merges everything (`compact`) or rewrites a level in place.
    db.compact().unwrap();
    for k in [7, 8] {
        assert_eq!(read_everywhere(&db, &key4(k)), [None, None, None, None], "key {k}");
    }
    assert_eq!(db.range(..).count(), 398);
    drop(db);
    let db = Db::open(dir.path(), options(&clock)).unwrap();
    assert_eq!(read_everywhere(&db, &key4(7)), [None, None, None, None]);
    assert_eq!(db.range(..).count(), 398);
}

#[test]
fn values_from_get_and_scans_never_include_the_expiry() {
    let clock = Arc::new(ManualClock::new(START));
    let (_dir, db) = common::db::open_temp(options(&clock));
    let big = vec![b'x'; 4000]; // large enough to share its block when read
    db.put_with_ttl("big", &big, Duration::from_secs(1)).unwrap();
    db.put_with_ttl("small", "s", Duration::from_secs(1)).unwrap();
    for flush in [false, true] {
        if flush {
            db.flush().unwrap();
        }
        assert_eq!(db.get("big").unwrap().unwrap(), big[..]);
        assert_eq!(db.get("small").unwrap().unwrap(), b"s"[..]);
        let all = common::model::pairs(db.range(..));
        assert_eq!(all, [(b"big".to_vec(), big.clone()), (b"small".to_vec(), b"s".to_vec())]);
        let mut c = db.cursor(..);
        c.seek_to_last().unwrap();
        assert_eq!(c.value(), Some(&b"s"[..]));
    }
}

/// Sends every compaction's end to a channel.
struct Compactions(Mutex<mpsc::Sender<CompactionInfo>>);

impl EventListener for Compactions {
    fn on_compaction_end(&self, info: &CompactionInfo) {
        let _ = self.0.lock().unwrap().send(info.clone());
    }
}

/// Fills the last level with `n` values expiring in an hour; returns the bytes of tables.
fn fill_expiring(db: &Db, n: u16) -> u64 {
    for i in 0..n {
        db.put_with_ttl(key4(i), value(i), Duration::from_secs(3600)).unwrap();
    }
    db.compact().unwrap();
    let bytes = total_table_bytes(db);
    assert!(bytes > u64::from(n) * 100, "{bytes} bytes of tables");
    bytes
}

#[test]
fn a_last_level_full_of_expired_data_is_compacted_away_by_compact() {
    let clock = Arc::new(ManualClock::new(START));
    let (dir, db) = common::db::open_temp(options(&clock));
    fill_expiring(&db, 2000);
    verify(dir.path());
    let levels = db.stats().tables_per_level;
    assert!(levels[0] == 0 && levels.iter().filter(|&&n| n > 0).count() == 1, "{levels:?}");
    // Nothing has expired: a compaction keeps it all.
    db.compact().unwrap();
    assert_eq!(db.range(..).count(), 2000);
    clock.advance(Duration::from_secs(3600));
    assert_eq!(db.range(..).count(), 0);
    db.compact().unwrap();
    assert_eq!(total_table_bytes(&db), 0, "{:?}", db.stats().bytes_per_level);
    assert_eq!(db.stats().compaction_expired_dropped, 2000);
    assert!(table_files(dir.path()).is_empty());
}

#[test]
fn the_background_thread_picks_a_table_whose_data_has_expired() {
    let clock = Arc::new(ManualClock::new(START));
    let (tx, rx) = mpsc::channel();
    let listener = Arc::new(Compactions(Mutex::new(tx)));
    let (dir, db) = common::db::open_temp(options(&clock).event_listener(listener));
    let before = fill_expiring(&db, 2000);
    while rx.try_recv().is_ok() {}
    clock.advance(Duration::from_secs(3601));
    // A flush wakes the compaction thread (as its periodic check would), which finds the
    // last level's tables expired and rewrites them in place, one by one.
    db.put("other", "v").unwrap();
    db.flush().unwrap();
    let mut expiry_runs = 0;
    while db.stats().bytes_per_level.iter().skip(1).sum::<u64>() > 0 {
        let info = rx.recv_timeout(Duration::from_secs(60)).expect("a compaction");
        if info.reason == CompactionReason::Expiry {
            expiry_runs += 1;
            assert!(info.output_level >= 1);
        }
    }
    assert!(expiry_runs > 0);
    let after = total_table_bytes(&db);
    assert!(after * 50 < before, "{after} of {before} bytes left");
    assert_eq!(common::model::pairs(db.range(..)), [(b"other".to_vec(), b"v".to_vec())]);
    let tables: usize = db.stats().tables_per_level.iter().sum();
    assert_eq!(tables, 1, "only the flushed table");
    drop(db); // the replaced tables' files are gone once nothing reads them
    assert_eq!(table_files(dir.path()).len(), 1);
}

#[test]
fn wal_recovery_keeps_each_values_expiry() {
    let clock = Arc::new(ManualClock::new(START));
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options(&clock)).unwrap();
    let sessions = KeyspaceOptions::new().default_ttl(Some(Duration::from_secs(20)));
    let ks = db.keyspace("sessions", sessions.clone()).unwrap();
    db.put_with_ttl("short", "a", Duration::from_secs(10)).unwrap();
    db.put_with_ttl("long", "b", Duration::from_secs(30)).unwrap();
    db.put("forever", "c").unwrap();
    ks.put("s", "d").unwrap(); // the keyspace's default: 20 s
    ks.put_with_ttl("t", "e", Duration::from_secs(5)).unwrap();
    let mut batch = WriteBatch::new();
    batch.put_with_ttl_in(&ks, "u", "f", Duration::from_secs(25));
    db.write(&batch, &WriteOptions::default()).unwrap();
    drop(ks);
    drop(db); // the memtables are not flushed: reopening replays the WAL
    assert!(table_files(dir.path()).is_empty());
    // Replayed 15 s later, the values keep the expiries they were written with.
    clock.advance(Duration::from_secs(15));
    let db = Db::open(dir.path(), options(&clock)).unwrap();
    let ks = db.keyspace("sessions", sessions).unwrap();
    assert_eq!(db.get("short").unwrap(), None);
    assert_eq!(db.get("long").unwrap().unwrap(), b"b"[..]);
    assert_eq!(db.get("forever").unwrap().unwrap(), b"c"[..]);
    assert_eq!(ks.get("s").unwrap().unwrap(), b"d"[..]);
    assert_eq!(ks.get("t").unwrap(), None);
    assert_eq!(ks.get("u").unwrap().unwrap(), b"f"[..]);
    clock.advance(Duration::from_secs(5));
    assert_eq!(ks.get("s").unwrap(), None);
    assert_eq!(common::model::pairs(ks.range(..)), [(b"u".to_vec(), b"f".to_vec())]);
    db.flush().unwrap();
    // Closed first: the flush may start a compaction whose table is still being written.
    drop(ks);
    db.close().unwrap();
    assert!(format_versions(dir.path()).contains(&3));
    verify(dir.path());
}

/// The library's check of the whole database (what `bloomkv verify` runs) finds nothing.
fn verify(dir: &Path) {
    let report = bloomkv::check::database(Arc::new(bloomkv::fs::StdFs), dir);
    assert_eq!(report.status(), bloomkv::check::Status::Ok, "{:?}", report.problems);
}

#[test]
fn a_keyspace_default_ttl_is_recorded_and_applies_to_plain_puts() {
    let clock = Arc::new(ManualClock::new(START));
    let dir = tempfile::tempdir().unwrap();
    let ttl = KeyspaceOptions::new().default_ttl(Some(Duration::from_secs(60)));
    {
        let db = Db::open(dir.path(), options(&clock)).unwrap();
        db.keyspace("cache", ttl.clone()).unwrap();
    }
    // The manifest records it.
    let m =
        bloomkv_tree::version::manifest::read_manifest(&bloomkv::fs::StdFs, dir.path()).unwrap();
    let def = &m.keyspaces.iter().find(|k| k.def.name == "cache").unwrap().def;
    assert_eq!(def.opts, ttl);
    let db = Db::open(dir.path(), options(&clock)).unwrap();
    let ks = db.keyspace("cache", ttl).unwrap();
    ks.put("k", "v").unwrap();
    let mut batch = WriteBatch::new();
    batch.put_in(&ks, "b", "w");
    db.write(&batch, &WriteOptions::default()).unwrap();
    db.put("plain", "p").unwrap(); // the default keyspace has no default ttl
    clock.advance(Duration::from_secs(59));
    assert_eq!(ks.range(..).count(), 2);
    clock.advance(Duration::from_secs(1));
    assert_eq!(ks.range(..).count(), 0);
    assert!(db.get("plain").unwrap().is_some());
    // Opened without it, on purpose, later plain puts do not expire.
    let ks = db.keyspace("cache", KeyspaceOptions::new().change_settings(true)).unwrap();
    ks.put("k2", "v").unwrap();
    clock.advance(Duration::from_secs(3600));
    assert!(ks.get("k2").unwrap().is_some());
    let zero = KeyspaceOptions::new().default_ttl(Some(Duration::ZERO));
    assert!(matches!(db.keyspace("zero", zero), Err(bloomkv::Error::InvalidArgument(_))));
}

/// A transaction's expiring puts: seen by its own reads before the commit, written expiring
/// from the commit's time, in the default keyspace and another one; a later plain put or
/// delete of the key in the same transaction drops the time to live; a keyspace's default
/// time to live applies to a transaction's plain puts.
#[test]
fn a_transaction_writes_expiring_puts_and_plain_puts_take_the_default() {
    let clock = Arc::new(ManualClock::new(START));
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options(&clock)).unwrap();
    let other = db.keyspace("other", KeyspaceOptions::new()).unwrap();
    let cache = KeyspaceOptions::new().default_ttl(Some(Duration::from_secs(60)));
    let cache = db.keyspace("cache", cache).unwrap();
    let mut tx = db.transaction();
    tx.put_with_ttl("lease", "w1", Duration::from_secs(10)).unwrap();
    tx.put_with_ttl_in(&other, "o", "v", Duration::from_secs(20)).unwrap();
    tx.put_with_ttl("kept", "x", Duration::from_secs(10)).unwrap();
    tx.put("kept", "y").unwrap();
    tx.put_with_ttl("gone", "x", Duration::from_secs(10)).unwrap();
    tx.delete("gone").unwrap();
    tx.put_in(&cache, "c", "v").unwrap();
    assert_eq!(tx.get("lease").unwrap().as_deref(), Some(&b"w1"[..]));
    clock.advance(Duration::from_secs(5)); // the time to live runs from the commit
    tx.commit().unwrap();
    clock.advance(Duration::from_secs(9));
    assert_eq!(db.get("lease").unwrap().as_deref(), Some(&b"w1"[..]));
    clock.advance(Duration::from_secs(1));
    assert_eq!(db.get("lease").unwrap(), None);
    assert_eq!(other.get("o").unwrap().as_deref(), Some(&b"v"[..]));
    clock.advance(Duration::from_secs(10));
    assert_eq!(other.get("o").unwrap(), None);
    assert_eq!(db.get("kept").unwrap().as_deref(), Some(&b"y"[..]));
    assert_eq!(db.get("gone").unwrap(), None);
    assert!(cache.get("c").unwrap().is_some());
    clock.advance(Duration::from_secs(40));
    assert_eq!(cache.get("c").unwrap(), None);
    assert_eq!(db.get("kept").unwrap().as_deref(), Some(&b"y"[..]), "a plain put never expires");
    // The expiring put survives a reopen with its expiry.
    let mut tx = db.transaction();
    tx.put_with_ttl("late", "v", Duration::from_secs(30)).unwrap();
    tx.commit().unwrap();
    drop((other, cache));
    db.close().unwrap();
    let db = Db::open(dir.path(), options(&clock)).unwrap();
    clock.advance(Duration::from_secs(29));
    assert!(db.get("late").unwrap().is_some());
    clock.advance(Duration::from_secs(1));
    assert_eq!(db.get("late").unwrap(), None);
}

#[test]
fn a_database_without_expiring_values_keeps_its_table_format() {
    let clock = Arc::new(ManualClock::new(START));
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options(&clock)).unwrap();
    for i in 0..500 {
        db.put(key4(i), value(i)).unwrap();
    }
    db.delete_range(key4(10)..key4(20)).unwrap();
    db.compact().unwrap();
    drop(db);
    let versions = format_versions(dir.path());
    assert!(!versions.is_empty() && versions.iter().all(|&v| v == 1 || v == 2), "{versions:?}");
    // Reopened by this build, read unchanged.
    let db = Db::open(dir.path(), options(&clock)).unwrap();
    assert_eq!(db.range(..).count(), 490);
    assert_eq!(db.get(key4(42)).unwrap().unwrap(), value(42)[..]);
}

#[test]
fn the_largest_value_may_expire_and_a_larger_one_is_refused() {
    let clock = Arc::new(ManualClock::new(START));
    let dir = tempfile::tempdir().unwrap();
    let opts = || Options::new().clock(clock.clone());
    let db = Db::open(dir.path(), opts()).unwrap();
    let largest = vec![3u8; bloomkv::MAX_VALUE_BYTES];
    let ttl = Duration::from_secs(5);
    db.put_with_ttl("big", &largest, ttl).unwrap();
    let too_big = vec![3u8; bloomkv::MAX_VALUE_BYTES + 1];
    let e = db.put_with_ttl("bigger", &too_big, ttl).unwrap_err();
    assert!(matches!(e, bloomkv::Error::ValueTooLarge { .. }), "{e}");
    let mut batch = WriteBatch::new();
    batch.put_with_ttl("bigger", &too_big, ttl);
    let e = db.write(&batch, &WriteOptions::default()).unwrap_err();
    assert!(matches!(e, bloomkv::Error::ValueTooLarge { .. }), "{e}");
    drop(db); // replayed from the WAL, then flushed at open
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(db.get("big").unwrap().unwrap().len(), bloomkv::MAX_VALUE_BYTES);
    db.compact().unwrap();
    assert_eq!(db.get("big").unwrap().unwrap().len(), bloomkv::MAX_VALUE_BYTES);
    clock.advance(ttl);
    assert_eq!(db.get("big").unwrap(), None);
}

/// A database written by the build before expiring values existed (by the program in
/// `tests/testdata/db_before_ttl.rs.txt`): tables in two levels, one with a range tombstone,
/// a named keyspace, and writes left in the WAL.
#[test]
fn a_database_written_before_expiring_values_opens_and_reads_unchanged() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testdata/db_before_ttl");
    let versions = format_versions(&fixture);
    assert!(!versions.is_empty() && versions.iter().all(|&v| v == 1 || v == 2), "{versions:?}");
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(&fixture).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.path().join(e.file_name())).unwrap();
    }
    let clock = Arc::new(ManualClock::new(START));
    let check = |db: &Db| {
        let mut want = BTreeMap::new();
        for i in 0..300u32 {
            let v = if i < 20 { format!("new{i}") } else { format!("value{i}") };
            if !(100..110).contains(&i) && i != 200 {
                want.insert(format!("key{i:04}").into_bytes(), v.into_bytes());
            }
        }
        want.insert(b"wal-only".to_vec(), b"in the log".to_vec());
        assert_eq!(common::model::scan(db), want);
        let ks = db.keyspace("named", KeyspaceOptions::new()).unwrap();
        assert_eq!(ks.range(..).count(), 300);
        assert_eq!(ks.get("k0042").unwrap().unwrap(), b"v42"[..]);
    };
    let db = Db::open(dir.path(), options(&clock)).unwrap();
    check(&db);
    db.compact().unwrap();
    check(&db);
    // It takes expiring values from then on.
    db.put_with_ttl("key0000", "brief", Duration::from_secs(1)).unwrap();
    clock.advance(Duration::from_secs(1));
    assert_eq!(db.get("key0000").unwrap(), None);
    drop(db);
    let db = Db::open(dir.path(), options(&clock)).unwrap();
    assert_eq!(db.get("key0000").unwrap(), None);
    assert_eq!(db.get("key0001").unwrap().unwrap(), b"new1"[..]);
    verify(dir.path());
}

#[test]
fn a_checkpoint_keeps_each_values_expiry() {
    let clock = Arc::new(ManualClock::new(START));
    let (_dir, db) = common::db::open_temp(options(&clock));
    let dest = tempfile::tempdir().unwrap();
    db.put_with_ttl("flushed", "a", Duration::from_secs(10)).unwrap();
    db.flush().unwrap();
    db.put_with_ttl("in-memtable", "b", Duration::from_secs(20)).unwrap();
    db.put("forever", "c").unwrap();
    let copy = dest.path().join("copy");
    db.checkpoint(&copy).unwrap();
    let db = Db::open(&copy, options(&clock)).unwrap();
    assert_eq!(db.range(..).count(), 3);
    clock.advance(Duration::from_secs(10));
    assert_eq!(db.get("flushed").unwrap(), None);
    assert!(db.get("in-memtable").unwrap().is_some());
    clock.advance(Duration::from_secs(10));
    assert_eq!(common::model::keys_of(db.range(..)), [b"forever".to_vec()]);
    verify(&copy);
}

#[test]
fn transactions_stamp_default_ttls_and_conflict_with_expiring_puts() {
    let clock = Arc::new(ManualClock::new(START));
    let (_dir, db) = common::db::open_temp(options(&clock));
    let ks = db.keyspace("cache", ks_options()).unwrap();
    // A transaction's plain put into a keyspace with a default time to live expires.
    let mut tx = db.transaction();
    tx.put_in(&ks, "k", "v").unwrap();
    tx.put("plain", "p").unwrap();
    tx.commit().unwrap();
    clock.advance(Duration::from_millis(KS_TTL));
    assert_eq!(ks.get("k").unwrap(), None);
    assert!(db.get("plain").unwrap().is_some());
    // An expiring put written after a transaction read the key is a conflict, alone or in
    // a batch.
    for in_batch in [false, true] {
        let mut tx = db.transaction();
        assert!(tx.get("plain").unwrap().is_some());
        tx.put("other", "x").unwrap();
        if in_batch {
            let mut batch = WriteBatch::new();
            batch.put_with_ttl("plain", "q", Duration::from_secs(1));
            db.write(&batch, &WriteOptions::default()).unwrap();
        } else {
            db.put_with_ttl("plain", "q", Duration::from_secs(1)).unwrap();
        }
        assert!(matches!(tx.commit(), Err(bloomkv::Error::Conflict)), "in a batch: {in_batch}");
    }
}

/// An idle database frees a few expired values once their table is older than
/// `Options::periodic_compaction`: too few for an expiry pick, and no write pushes the table
/// down. The table's age is judged by the database's clock.
#[test]
fn periodic_compaction_frees_expired_values_an_idle_database_keeps() {
    let clock = Arc::new(ManualClock::new(START));
    let day = Duration::from_secs(86_400);
    let opts = Options::default()
        .clock(clock.clone())
        .periodic_compaction(Some(day))
        .background_compactions(false);
    let (dir, db) = common::db::open_temp(opts);
    db.put_with_ttl("gone", "x", Duration::from_secs(3600)).unwrap();
    for i in 0..20u16 {
        db.put(key4(i), vec![b'v'; 1000]).unwrap();
    }
    db.flush().unwrap();
    let entries = |db: &Db| db.tables().iter().map(|t| t.entries).sum::<u64>();
    assert_eq!(entries(&db), 21);
    clock.advance(Duration::from_secs(2 * 3600));
    assert_eq!(db.get("gone").unwrap(), None);
    // Expired, but a small share of its table: nothing is due yet.
    assert_eq!(db.picked_compaction(), None);
    assert_eq!(db.compact_step().unwrap(), None);
    assert_eq!(entries(&db), 21, "the expired value is still on disk");
    clock.advance(day);
    let step = db.compact_step().unwrap().expect("a periodic compaction");
    assert_eq!(step.reason, CompactionReason::Periodic);
    assert_eq!((step.level, step.out_level), (0, 1));
    assert_eq!(entries(&db), 20, "{:?}", db.tables());
    assert_eq!(db.stats().compaction_expired_dropped, 1);
    // The rewritten table is new: not due again for another period.
    assert_eq!(db.compact_step().unwrap(), None);
    drop(db);
    verify(dir.path());
}
