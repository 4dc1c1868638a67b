//! Compaction filters (`Options::compaction_filter`, `KeyspaceOptions::compaction_filter`):
//! what they decide is what reads see after a compaction, and never what a snapshot taken
//! before it sees; a removal never brings back an older version; they never see tombstones
//! or range-deleted values; a failing filter keeps what it failed on, and stops the database
//! only where asked to. A model test checks them all
//! together against a `BTreeMap`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use bloomkv::events::{
    BackgroundErrorInfo, CompactionFilterErrorInfo, CompactionInfo, EventListener,
};
use bloomkv::{
    CompactionFilter, Db, Decision, Error, KeyspaceOptions, Options, Readable, Snapshot,
};
use proptest::prelude::*;

mod common;

use common::keys::key3;
use common::model::{entries, pairs, Model};
use common::options::OptionsExt;

/// Values starting with `r` are removed, those starting with `c` get a capital `C`, the rest
/// are kept: every decision depends on the value alone, so a model can apply them.
fn decide(value: &[u8]) -> Decision {
    match value.first() {
        Some(b'r') => Decision::Remove,
        Some(b'c') => {
            let mut v = value.to_vec();
            v[0] = b'C';
            Decision::ChangeValue(v)
        }
        _ => Decision::Keep,
    }
}

/// A question a filter was asked: the level, the key and the value.
type Asked = (usize, Vec<u8>, Vec<u8>);

/// [`decide`], recording each key and value it is asked about and the level given.
#[derive(Default)]
struct ByValue {
    asked: Mutex<Vec<Asked>>,
}

impl CompactionFilter for ByValue {
    fn filter(&self, level: usize, key: &[u8], value: &[u8]) -> Decision {
        self.asked.lock().unwrap().push((level, key.to_vec(), value.to_vec()));
        decide(value)
    }
}

impl ByValue {
    fn asked_keys(&self) -> Vec<Vec<u8>> {
        self.asked.lock().unwrap().iter().map(|(_, k, _)| k.clone()).collect()
    }
}

/// What a compaction that rewrites everything leaves of `model` under [`decide`].
fn filtered(model: &Model) -> Model {
    model
        .iter()
        .filter_map(|(k, v)| match decide(v) {
            Decision::Keep => Some((k.clone(), v.clone())),
            Decision::ChangeValue(nv) => Some((k.clone(), nv)),
            _ => None,
        })
        .collect()
}

/// Small memtables and tables, and nothing compacted in the background: only `compact` runs
/// the filter, so what it has been applied to is known. Two threads per compaction, so the
/// filter is asked from both.
fn options(filter: Arc<dyn CompactionFilter>) -> Options {
    Options::new()
        .memtable_bytes(16 << 10)
        .block_bytes(512)
        .target_table_bytes(4 << 10)
        .level_base_bytes(1 << 30)
        .l0_triggers(1000)
        .max_subcompactions(2)
        .compaction_filter(filter)
}

fn open(dir: &Path, filter: Arc<dyn CompactionFilter>) -> Db {
    Db::open(dir, options(filter)).unwrap()
}

fn get(db: &Db, key: &str) -> Option<Vec<u8>> {
    db.get(key).unwrap().map(|v| v.to_vec())
}

fn table_count(db: &Db) -> usize {
    db.stats().tables_per_level.iter().sum()
}

/// Every read path of `db` (get, multi_get, scans both ways) against `model`.
fn check_db(db: &Db, model: &Model, keys: &[Vec<u8>], context: &str) {
    for k in keys {
        assert_eq!(db.get(k).unwrap().map(|v| v.to_vec()), model.get(k).cloned(), "{context}: get");
    }
    let got: Vec<Option<Vec<u8>>> =
        db.multi_get(keys).unwrap().into_iter().map(|v| v.map(|v| v.to_vec())).collect();
    let want: Vec<Option<Vec<u8>>> = keys.iter().map(|k| model.get(k).cloned()).collect();
    assert_eq!(got, want, "{context}: multi_get");
    assert_eq!(pairs(db.range(..)), entries(model), "{context}: scan");
    let mut back = pairs(db.range(..).rev());
    back.reverse();
    assert_eq!(back, entries(model), "{context}: reverse scan");
}

fn check_snapshot(snap: &Snapshot, model: &Model, context: &str) {
    assert_eq!(pairs(snap.range(..)), entries(model), "{context}: snapshot scan");
    for (k, v) in model {
        assert_eq!(snap.get(k).unwrap().as_deref(), Some(v.as_slice()), "{context}: snapshot get");
    }
}

#[test]
fn decisions_are_what_reads_see_after_compaction_and_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let filter = Arc::new(ByValue::default());
    let db = open(dir.path(), filter.clone());
    let mut model = Model::new();
    for i in 0..600u32 {
        let v = format!("{}{i:0>40}", ["r", "c", "v"][i as usize % 3]);
        db.put(format!("{i:05}"), &v).unwrap();
        model.insert(format!("{i:05}").into_bytes(), v.into_bytes());
    }
    let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
    // Flushed but not compacted: the filter has not been asked yet.
    db.flush().unwrap();
    check_db(&db, &model, &keys, "flushed");
    assert!(filter.asked_keys().is_empty(), "a flush does not ask the filter");

    db.compact().unwrap();
    let want = filtered(&model);
    check_db(&db, &want, &keys, "compacted");
    let stats = db.stats();
    assert_eq!(stats.compaction_filter_removed, 200);
    assert_eq!(stats.compaction_filter_changed, 200);
    assert_eq!(stats.keyspace("default").unwrap().compaction_filter_changed, 200);
    assert!(stats.compaction_parts > stats.compactions, "some compaction ran in parts: {stats:?}");
    assert!(filter.asked.lock().unwrap().iter().all(|(level, _, _)| *level >= 1));

    drop(db);
    let db = open(dir.path(), Arc::new(ByValue::default()));
    check_db(&db, &want, &keys, "reopened");
}

/// Sends on a channel as each compaction ends (after it is installed).
struct CompactionEnds(Mutex<mpsc::Sender<()>>);

impl EventListener for CompactionEnds {
    fn on_compaction_end(&self, _: &CompactionInfo) {
        let _ = self.0.lock().unwrap().send(());
    }
}

#[test]
fn background_compactions_ask_the_filter_too() {
    let (tx, ended) = mpsc::channel();
    let opts = options(Arc::new(ByValue::default()))
        .l0_triggers(2)
        .event_listener(Arc::new(CompactionEnds(Mutex::new(tx))));
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts).unwrap();
    let mut model = Model::new();
    for round in ["v", "rc"] {
        for i in 0..100u32 {
            let kind = round.as_bytes()[i as usize % round.len()] as char;
            let v = format!("{kind}{i:0>40}");
            db.put(format!("{i:05}"), &v).unwrap();
            model.insert(format!("{i:05}").into_bytes(), v.into_bytes());
        }
        db.flush().unwrap();
    }
    // Two overlapping L0 tables: the compaction thread merges them into L1. A generous bound
    // only keeps a broken build from hanging.
    ended.recv_timeout(Duration::from_secs(300)).expect("a background compaction");
    let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
    check_db(&db, &filtered(&model), &keys, "after the background compaction");
    assert_eq!(db.stats().compaction_filter_removed, 50);
}

#[test]
fn a_snapshot_taken_before_compaction_still_reads_what_the_filter_removed_or_changed() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), Arc::new(ByValue::default()));
    db.put("gone", "r-removed").unwrap();
    db.put("changed", "c-changed").unwrap();
    db.put("kept", "v-kept").unwrap();
    let before = db.snapshot();
    let mut cursor_before = db.cursor(..);
    let mut iter_before = db.range(..);
    db.compact().unwrap();
    assert_eq!(get(&db, "gone"), None);
    assert_eq!(get(&db, "changed").as_deref(), Some(&b"C-changed"[..]));

    let mut old = Model::new();
    old.insert(b"gone".to_vec(), b"r-removed".to_vec());
    old.insert(b"changed".to_vec(), b"c-changed".to_vec());
    old.insert(b"kept".to_vec(), b"v-kept".to_vec());
    check_snapshot(&before, &old, "snapshot before");
    assert_eq!(before.multi_get(["gone"]).unwrap()[0].as_deref(), Some(&b"r-removed"[..]));
    // An iterator and a cursor opened before the compaction see the old values too.
    let first = iter_before.next().unwrap().unwrap();
    assert_eq!((first.0.as_slice(), &*first.1), (&b"changed"[..], &b"c-changed"[..]));
    assert_eq!(pairs(iter_before).len(), 2, "the iterator still finds \"gone\"");
    cursor_before.seek(b"gone").unwrap();
    assert_eq!(cursor_before.value(), Some(&b"r-removed"[..]));

    let after = db.snapshot();
    assert_eq!(after.get("gone").unwrap(), None);
    assert_eq!(after.get("changed").unwrap().as_deref(), Some(&b"C-changed"[..]));
}

#[test]
fn a_removal_leaves_a_tombstone_over_an_older_version_below() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), Arc::new(ByValue::default()));
    // An ingest into an empty tree goes to the last level: the old versions lie below
    // whatever the compactions from L0 write.
    db.ingest((0..50u32).map(|i| (format!("{i:03}"), "v-old"))).unwrap();
    let deepest = db.stats().tables_per_level.iter().rposition(|&n| n > 0).unwrap();
    assert!(deepest >= 2, "ingested into L{deepest}");
    for i in 0..50u32 {
        db.put(format!("{i:03}"), if i % 2 == 0 { "r-new" } else { "v-new" }).unwrap();
    }
    db.compact().unwrap();
    for i in 0..50u32 {
        let want = (i % 2 == 1).then(|| b"v-new".to_vec());
        assert_eq!(get(&db, &format!("{i:03}")), want, "key {i}");
    }
    drop(db);
    let db = open(dir.path(), Arc::new(ByValue::default()));
    assert_eq!(get(&db, "000"), None, "after reopen");
    assert_eq!(pairs(db.range(..)).len(), 25);
}

#[test]
fn a_removal_with_nothing_below_drops_the_entry() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), Arc::new(ByValue::default()));
    for i in 0..300u32 {
        db.put(format!("{i:05}"), format!("r{i:0>60}")).unwrap();
    }
    db.compact().unwrap();
    assert_eq!(db.stats().compaction_filter_removed, 300);
    // No tombstone was needed: the last level holds nothing at all.
    assert_eq!(table_count(&db), 0);
    assert_eq!(pairs(db.range(..)), vec![]);
}

#[test]
fn the_filter_never_sees_tombstones_or_range_deleted_values() {
    let dir = tempfile::tempdir().unwrap();
    let filter = Arc::new(ByValue::default());
    let db = open(dir.path(), filter.clone());
    // Older versions in the last level, so the tombstones are kept as they move down.
    db.ingest(["a", "b", "c", "d", "e"].map(|k| (k, "v-old"))).unwrap();
    for k in ["a", "b", "c", "d", "e"] {
        db.put(k, "v").unwrap();
    }
    db.flush().unwrap();
    db.delete("b").unwrap();
    db.delete_range("c".."e").unwrap();
    db.compact().unwrap();
    let mut asked = filter.asked_keys();
    asked.sort();
    asked.dedup();
    assert_eq!(asked, [b"a".to_vec(), b"e".to_vec()]);
    assert_eq!(
        pairs(db.range(..)),
        [(b"a".to_vec(), b"v".to_vec()), (b"e".to_vec(), b"v".to_vec())]
    );
}

/// [`decide`], but panics on the key "boom" and gives a replacement larger than
/// `MAX_VALUE_BYTES` for the key "huge": fails on them at every compaction.
struct Boom;

impl CompactionFilter for Boom {
    fn filter(&self, _level: usize, key: &[u8], value: &[u8]) -> Decision {
        assert_ne!(key, b"boom", "the filter was asked about boom");
        if key == b"huge" {
            return Decision::ChangeValue(vec![b'h'; bloomkv::MAX_VALUE_BYTES + 1]);
        }
        decide(value)
    }
}

/// 400 keys the filter removes or changes, and "boom" and "huge", which it fails on, all
/// flushed to L0: the model before any compaction, and its keys.
fn fill_with_failures(db: &Db) -> (Model, Vec<Vec<u8>>) {
    let mut model = Model::new();
    for i in 0..400u32 {
        let v = format!("{}{i:0>40}", ["r", "c"][i as usize % 2]);
        db.put(format!("{i:05}"), &v).unwrap();
        model.insert(format!("{i:05}").into_bytes(), v.into_bytes());
    }
    for k in ["boom", "huge"] {
        db.put(k, "r").unwrap();
        model.insert(k.as_bytes().to_vec(), b"r".to_vec());
    }
    db.flush().unwrap();
    let keys = model.keys().cloned().collect();
    (model, keys)
}

/// What a compaction under [`Boom`] leaves of `model`: [`filtered`], but "boom" and "huge"
/// as they were.
fn filtered_but_failures(model: &Model) -> Model {
    let mut want = filtered(model);
    for k in [&b"boom"[..], b"huge"] {
        if let Some(v) = model.get(k) {
            want.insert(k.to_vec(), v.clone());
        }
    }
    want
}

/// Records the filter failures and background errors reported, and each compaction's end.
#[derive(Default)]
struct Failures {
    filter: Mutex<Vec<CompactionFilterErrorInfo>>,
    background: Mutex<Vec<String>>,
    ends: Mutex<Option<mpsc::Sender<()>>>,
}

impl EventListener for Failures {
    fn on_compaction_filter_error(&self, info: &CompactionFilterErrorInfo) {
        self.filter.lock().unwrap().push(info.clone());
    }
    fn on_background_error(&self, info: &BackgroundErrorInfo) {
        self.background.lock().unwrap().push(info.error.to_string());
    }
    fn on_compaction_end(&self, _: &CompactionInfo) {
        if let Some(tx) = &*self.ends.lock().unwrap() {
            let _ = tx.send(());
        }
    }
}

impl Failures {
    /// The values reported failed on, summed over the reports.
    fn failed(&self) -> u64 {
        self.filter.lock().unwrap().iter().map(|i| i.failed).sum()
    }
}

#[test]
fn a_failing_filter_keeps_what_it_failed_on_and_the_database_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let events = Arc::new(Failures::default());
    let opts = || options(Arc::new(Boom)).event_listener(events.clone());
    let db = Db::open(dir.path(), opts()).unwrap();
    let (mut model, keys) = fill_with_failures(&db);

    db.compact().unwrap();
    check_db(&db, &filtered_but_failures(&model), &keys, "compacted");
    let stats = db.stats();
    assert_eq!(stats.compaction_filter_failed, 2);
    assert_eq!(stats.keyspace("default").unwrap().compaction_filter_failed, 2);
    assert_eq!(stats.compaction_filter_removed, 200);
    {
        let reports = events.filter.lock().unwrap();
        assert_eq!(reports.len(), 1, "{reports:?}");
        let first = &reports[0];
        assert_eq!((first.keyspace.as_str(), first.failed), ("default", 2));
        assert_eq!(first.key, b"boom");
        assert!(first.reason.contains("the filter was asked about boom"), "{}", first.reason);
        assert!(first.level >= 1);
    }

    // The database goes on: writes, and compactions, which fail on the same values again.
    db.put("00001", "c-again").unwrap();
    model.insert(b"00001".to_vec(), b"c-again".to_vec());
    db.compact().unwrap();
    let model = filtered_but_failures(&model);
    check_db(&db, &model, &keys, "compacted twice");
    assert_eq!(db.stats().compaction_filter_failed, 4);
    assert_eq!(events.failed(), 4);
    drop(db);

    // Background compactions too.
    let (tx, ended) = mpsc::channel();
    *events.ends.lock().unwrap() = Some(tx);
    let db = Db::open(dir.path(), opts().l0_triggers(2)).unwrap();
    for round in 0..2 {
        db.put("boom", format!("v{round}")).unwrap();
        db.put("huge", format!("v{round}")).unwrap();
        db.flush().unwrap();
    }
    ended.recv_timeout(Duration::from_secs(300)).expect("a background compaction");
    db.put("after", "the background compaction").unwrap();
    assert_eq!(get(&db, "boom").as_deref(), Some(&b"v1"[..]));
    assert_eq!(get(&db, "huge").as_deref(), Some(&b"v1"[..]));
    assert_eq!(db.stats().compaction_filter_failed, 2, "counted since the open");
    assert_eq!(events.failed(), 6);
    assert_eq!(*events.background.lock().unwrap(), Vec::<String>::new());
    db.put("boom", "r").unwrap();
    db.put("huge", "r").unwrap();
    db.delete("after").unwrap();
    drop(db);

    // What the filter failed on was kept whole: a working filter judges it.
    let db = open(dir.path(), Arc::new(ByValue::default()));
    db.compact().unwrap();
    check_db(&db, &filtered(&model), &keys, "compacted with a working filter");
}

#[test]
fn with_stop_on_compaction_filter_error_a_failing_filter_stops_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let events = Arc::new(Failures::default());
    let opts = options(Arc::new(Boom))
        .stop_on_compaction_filter_error(true)
        .event_listener(events.clone());
    let db = Db::open(dir.path(), opts).unwrap();
    let (model, keys) = fill_with_failures(&db);
    let tables = table_count(&db);

    let failed = |r: bloomkv::Result<()>| match r {
        Err(Error::CompactionFilter { keyspace, reason }) => {
            assert_eq!(keyspace, "default");
            assert!(reason.contains("the filter was asked about boom"), "{reason}");
        }
        other => panic!("expected the filter's failure, got {other:?}"),
    };
    failed(db.compact());
    // Reads go on, and see every value as it was; writes stop, as after any failed
    // background work.
    check_db(&db, &model, &keys, "after the failure");
    assert_eq!(table_count(&db), tables);
    assert_eq!(db.stats().compaction_filter_removed, 0);
    assert_eq!(db.stats().compaction_filter_failed, 0);
    assert!(matches!(db.put("x", "y"), Err(Error::Background(_))));
    assert_eq!(events.background.lock().unwrap().len(), 1);
    assert!(events.filter.lock().unwrap().is_empty());
    // A resume lasts until the next compaction that meets the value.
    db.resume().unwrap();
    db.put("x", "y").unwrap();
    failed(db.compact());
    assert!(matches!(db.put("x", "z"), Err(Error::Background(_))));
    drop(db);

    // The keyspace setting does the same for a named keyspace.
    let db = Db::open(dir.path(), options(Arc::new(ByValue::default()))).unwrap();
    let stopping = KeyspaceOptions::new().compaction_filter(Arc::new(Boom));
    let ks = db.keyspace("f", stopping.clone().stop_on_compaction_filter_error(true)).unwrap();
    ks.put("boom", "v").unwrap();
    assert!(matches!(db.compact(), Err(Error::CompactionFilter { .. })));
    drop(ks);
    drop(db);
    let db = Db::open(dir.path(), options(Arc::new(ByValue::default()))).unwrap();
    let ks = db.keyspace("f", stopping).unwrap();
    db.compact().unwrap();
    assert_eq!(ks.get("boom").unwrap().as_deref(), Some(&b"v"[..]));
    assert_eq!(db.stats().keyspace("f").unwrap().compaction_filter_failed, 1);
    let mut want = filtered(&model);
    want.insert(b"x".to_vec(), b"y".to_vec());
    check_db(&db, &want, &keys, "reopened with a working filter");
}

#[test]
fn a_keyspace_filter_applies_to_its_keyspace_only_and_is_given_at_every_open() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || options(Arc::new(ByValue::default()));
    let plain = Options::new().l0_triggers(1000);
    let db = Db::open(dir.path(), plain.clone()).unwrap();
    let ks_opts = KeyspaceOptions::new().target_table_bytes(4 << 10);
    let filter: Arc<dyn CompactionFilter> = Arc::new(ByValue::default());
    let ks = db.keyspace("f", ks_opts.clone().compaction_filter(filter.clone())).unwrap();
    for k in ["a", "b"] {
        ks.put(k, "r").unwrap();
        db.put(k, "r").unwrap();
    }
    ks.put("c", "c").unwrap();
    db.compact().unwrap();
    assert_eq!(ks.get("a").unwrap(), None);
    assert_eq!(ks.get("c").unwrap().as_deref(), Some(&b"C"[..]));
    assert_eq!(db.get("a").unwrap().as_deref(), Some(&b"r"[..]), "default keyspace unfiltered");
    drop(ks);
    drop(db);

    // Reopened, the keyspace has no filter until it is given again; opening it without one
    // is refused, unless meant.
    let db = Db::open(dir.path(), plain).unwrap();
    let err = db.keyspace("f", ks_opts.clone()).unwrap_err();
    assert!(matches!(err, Error::SettingMismatch { setting: "compaction_filter", .. }), "{err}");
    let ks = db.keyspace("f", ks_opts.clone().change_settings(true)).unwrap();
    ks.put("d", "r").unwrap();
    db.compact().unwrap();
    assert_eq!(ks.get("d").unwrap().as_deref(), Some(&b"r"[..]));
    drop(ks);
    let ks = db.keyspace("f", ks_opts.compaction_filter(filter).change_settings(true)).unwrap();
    db.compact().unwrap();
    assert_eq!(ks.get("d").unwrap(), None);
    assert_eq!(db.stats().keyspace("f").unwrap().compaction_filter_removed, 1);
    drop(ks);
    drop(db);
    // The default keyspace's filter comes from `Options`.
    let db = Db::open(dir.path(), opts().change_settings(true)).unwrap();
    db.compact().unwrap();
    assert_eq!(db.get("a").unwrap(), None);
}

#[derive(Debug, Clone)]
enum Op {
    /// Key, and the value's kind: 0 kept, 1 removed, 2 changed.
    Put(u8, u8, u16),
    Delete(u8),
    DeleteRange(u8, u8),
    /// Keys from the first, every step-th, with values of one kind.
    Ingest(u8, u8, u8),
    Flush,
    Compact,
    Snapshot,
    CheckSnapshots,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (any::<u8>(), 0..3u8, any::<u16>()).prop_map(|(k, kind, v)| Op::Put(k, kind, v)),
        2 => any::<u8>().prop_map(Op::Delete),
        1 => (any::<u8>(), 1..40u8).prop_map(|(a, n)| Op::DeleteRange(a, a.saturating_add(n))),
        1 => (any::<u8>(), 1..8u8, 0..3u8).prop_map(|(a, s, kind)| Op::Ingest(a, s, kind)),
        2 => Just(Op::Flush),
        2 => Just(Op::Compact),
        1 => Just(Op::Snapshot),
        1 => Just(Op::CheckSnapshots),
        1 => Just(Op::Reopen),
    ]
}

fn value(kind: u8, v: u16) -> Vec<u8> {
    format!("{}{v:0>30}", ["v", "r", "c"][usize::from(kind)]).into_bytes()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random writes, flushes, compactions, ingests, snapshots and reopens: after each
    /// compaction the database holds the model with the filter applied; snapshots keep
    /// reading what they saw when taken.
    #[test]
    fn model(ops in proptest::collection::vec(op(), 1..120)) {
        let dir = tempfile::tempdir().unwrap();
        let filter = || -> Arc<dyn CompactionFilter> { Arc::new(ByValue::default()) };
        let mut db = open(dir.path(), filter());
        let mut model = Model::new();
        let mut snaps: Vec<(Snapshot, Model)> = Vec::new();
        let keys: Vec<Vec<u8>> = (0..=255u8).map(key3).collect();
        for (step, op) in ops.iter().enumerate() {
            match *op {
                Op::Put(k, kind, v) => {
                    db.put(key3(k), value(kind, v)).unwrap();
                    model.insert(key3(k), value(kind, v));
                }
                Op::Delete(k) => {
                    db.delete(key3(k)).unwrap();
                    model.remove(&key3(k));
                }
                Op::DeleteRange(a, b) => {
                    db.delete_range(key3(a)..key3(b)).unwrap();
                    let doomed: Vec<Vec<u8>> =
                        model.range(key3(a)..key3(b)).map(|(k, _)| k.clone()).collect();
                    for k in doomed {
                        model.remove(&k);
                    }
                }
                Op::Ingest(first, step_by, kind) => {
                    let rows: BTreeMap<Vec<u8>, Vec<u8>> = (first..=255)
                        .step_by(usize::from(step_by))
                        .map(|k| (key3(k), value(kind, u16::from(k))))
                        .collect();
                    db.ingest(rows.clone()).unwrap();
                    model.extend(rows);
                }
                Op::Flush => db.flush().unwrap(),
                Op::Compact => {
                    db.compact().unwrap();
                    model = filtered(&model);
                }
                Op::Snapshot => snaps.push((db.snapshot(), model.clone())),
                Op::CheckSnapshots => {
                    for (snap, seen) in &snaps {
                        check_snapshot(snap, seen, &format!("step {step}"));
                    }
                }
                Op::Reopen => {
                    snaps.clear();
                    drop(db);
                    db = open(dir.path(), filter());
                }
            }
            check_db(&db, &model, &keys, &format!("step {step}: {op:?}"));
        }
    }
}
