//! Merge operators: the built-in counter and append through every layer (memtable, WAL
//! recovery, flush, compaction), operands across keyspaces, transactions and snapshots, a
//! missing or failing operator, and a model test against a `BTreeMap` (on an in-memory file
//! system, with power losses after a sync).

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use bloomkv::fs::FaultFs;
use bloomkv::{
    Append, Db, Error, KeyspaceOptions, MergeOperator, Options, Readable, U64Add, WriteBatch,
    WriteOptions,
};
use proptest::prelude::*;

mod common;

use common::options::{small_tables, OptionsExt};

fn counter(db: &Db, key: &str) -> Option<u64> {
    db.get(key).unwrap().map(|v| U64Add::decode(&v).expect("an 8-byte counter"))
}

/// The library's check of the whole database (what `bloomkv verify` runs) finds nothing.
fn verify(dir: &std::path::Path) {
    let report = bloomkv::check::database(Arc::new(bloomkv::fs::StdFs), dir);
    assert_eq!(report.status(), bloomkv::check::Status::Ok, "{:?}", report.problems);
}

/// The format versions of the tables in `dir`.
fn format_versions(dir: &std::path::Path) -> Vec<u32> {
    common::files::table_files(dir)
        .iter()
        .map(|p| {
            let data = std::fs::read(p).unwrap();
            u32::from_le_bytes(data[data.len() - 16..data.len() - 12].try_into().unwrap())
        })
        .collect()
}

fn counting() -> Options {
    Options::new().merge_operator(Arc::new(U64Add))
}

#[test]
fn counter_counts_through_the_wal_flush_and_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), counting()).unwrap();
    for i in 0..10u64 {
        db.merge("hits", U64Add::operand(i)).unwrap();
    }
    assert_eq!(counter(&db, "hits"), Some(45));
    assert_eq!(counter(&db, "none"), None);
    drop(db);
    // Replayed from the WAL.
    let db = Db::open(dir.path(), counting()).unwrap();
    assert_eq!(counter(&db, "hits"), Some(45));
    db.flush().unwrap();
    assert_eq!(format_versions(dir.path()), [4], "a table of operands is of format 4");
    db.merge("hits", U64Add::operand(5)).unwrap();
    db.flush().unwrap();
    db.put("other", "x").unwrap();
    assert_eq!(counter(&db, "hits"), Some(50));
    db.compact().unwrap();
    assert_eq!(counter(&db, "hits"), Some(50));
    // The bottom-most compaction folded every operand into one value.
    assert!(!format_versions(dir.path()).contains(&4), "{:?}", format_versions(dir.path()));
    verify(dir.path());
    db.merge("hits", U64Add::operand(1)).unwrap();
    db.delete("hits").unwrap();
    db.merge("hits", U64Add::operand(7)).unwrap();
    assert_eq!(counter(&db, "hits"), Some(7));
    db.compact().unwrap();
    assert_eq!(counter(&db, "hits"), Some(7));
    verify(dir.path());
    let items: Vec<_> = db.range(..).map(|r| r.unwrap()).collect();
    assert_eq!(items.len(), 2);
    assert_eq!(U64Add::decode(&items[0].1), Some(7));
}

#[test]
fn a_malformed_counter_is_an_error_and_compaction_keeps_it() {
    let (_dir, db) = common::db::open_temp(counting());
    db.put("c", "not eight bytes").unwrap();
    db.merge("c", U64Add::operand(1)).unwrap();
    match db.get("c") {
        Err(Error::Merge { keyspace, reason }) => {
            assert_eq!(keyspace, "default");
            assert!(reason.contains("15 bytes"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // Compaction cannot combine them either, and keeps both: nothing is lost.
    db.compact().unwrap();
    assert!(matches!(db.get("c"), Err(Error::Merge { .. })));
    assert!(matches!(db.range(..).next(), Some(Err(Error::Merge { .. }))));
    db.put("c", U64Add::operand(3)).unwrap();
    assert_eq!(counter(&db, "c"), Some(3));
}

#[test]
fn an_operand_the_operator_refuses_is_not_written() {
    let (_dir, db) = common::db::open_temp(counting());
    db.merge("c", U64Add::operand(1)).unwrap();
    let refused = |r: bloomkv::Result<()>, ks: &str| match r {
        Err(Error::Merge { keyspace, reason }) => {
            assert_eq!(keyspace, ks);
            assert!(reason.contains("3 bytes where 8 were expected"), "{reason}");
        }
        other => panic!("expected the operand to be refused, got {other:?}"),
    };
    refused(db.merge("c", "abc"), "default");
    // A batch is refused whole: its put is not written either.
    let mut batch = WriteBatch::new();
    batch.put("x", "1");
    batch.merge("c", "abc");
    refused(db.write(&batch, &WriteOptions::default()), "default");
    assert_eq!(db.get("x").unwrap(), None);
    let mut tx = db.transaction();
    refused(tx.merge("c", "abc"), "default");
    tx.merge("c", U64Add::operand(2)).unwrap();
    tx.commit().unwrap();
    let hits =
        db.keyspace("hits", KeyspaceOptions::new().merge_operator(Arc::new(U64Add))).unwrap();
    refused(hits.merge("c", "abc"), "hits");
    assert_eq!(hits.get("c").unwrap(), None);
    // The key was never made unreadable.
    assert_eq!(counter(&db, "c"), Some(3));
    db.compact().unwrap();
    assert_eq!(counter(&db, "c"), Some(3));
}

/// Reads of `key` fail with the merge error whose reason holds `reason`, through every read.
fn assert_unreadable(db: &Db, key: &str, reason: &str) {
    let check = |r: bloomkv::Result<()>, how: &str| match r {
        Err(Error::Merge { reason: got, .. }) => assert!(got.contains(reason), "{how}: {got}"),
        other => panic!("{how}: expected a merge error, got {other:?}"),
    };
    check(db.get(key).map(|_| ()), "get");
    check(db.multi_get([key]).map(|_| ()), "multi_get");
    check(db.range(key..).next().unwrap().map(|_| ()), "scan");
    check(db.range(..=key).next_back().unwrap().map(|_| ()), "reverse scan");
}

/// Reads of `key` find `want`, through every read, and so do those of the key beside it.
fn assert_reads(db: &Db, key: &str, want: Option<&[u8]>) {
    assert_eq!(db.get(key).unwrap().as_deref(), want, "get");
    assert_eq!(db.multi_get([key]).unwrap()[0].as_deref(), want, "multi_get");
    let scanned: Vec<_> = db.range(..).map(|r| r.unwrap()).collect();
    let found = scanned.iter().find(|(k, _)| k == key.as_bytes()).map(|(_, v)| v.as_ref());
    assert_eq!(found, want, "scan");
    assert_eq!(db.get("neighbour").unwrap().as_deref(), Some(&b"n"[..]));
}

/// Each way a write replaces a key's operands.
const REPAIRS: [&str; 3] = ["put", "delete", "delete_range"];

fn repair(db: &Db, how: &str, key: &str) -> Option<&'static [u8]> {
    match how {
        "put" => db.put(key, "fixed").map(|_| Some(&b"fixed"[..])),
        "delete" => db.delete(key).map(|_| None),
        _ => db.delete_range(key..&format!("{key}\0")).map(|_| None),
    }
    .unwrap()
}

/// An `Append` past `MAX_VALUE_BYTES`: every operand is acknowledged (a merge reads nothing
/// to know better), reads fail from then on, compaction goes on and keeps them, and a put,
/// delete or range deletion makes the key readable again, for good.
#[test]
fn an_append_past_max_value_bytes_fails_reads_until_a_write_replaces_it() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || Options::new().merge_operator(Arc::new(Append::default()));
    let mut db = Db::open(dir.path(), opts()).unwrap();
    db.put("neighbour", "n").unwrap();
    // Half the limit and a byte: two of them cannot be one value.
    let half = vec![b'x'; bloomkv::MAX_VALUE_BYTES / 2 + 1];
    let too_big = "2 pieces make 16777218 bytes, more than MAX_VALUE_BYTES";
    for how in REPAIRS {
        db.merge("log", &half).unwrap();
        db.flush().unwrap();
        db.merge("log", &half).unwrap();
        assert_unreadable(&db, "log", if how == "put" { too_big } else { "MAX_VALUE_BYTES" });
        // Neither a flush nor compaction fails or stops the database over it.
        db.flush().unwrap();
        db.compact().unwrap();
        assert_unreadable(&db, "log", "MAX_VALUE_BYTES");
        db.put("other", how).unwrap();
        drop(db);
        db = Db::open(dir.path(), opts()).unwrap();
        assert_unreadable(&db, "log", "MAX_VALUE_BYTES");

        let want = repair(&db, how, "log");
        assert_reads(&db, "log", want);
        db.flush().unwrap();
        assert_reads(&db, "log", want);
        db.compact().unwrap();
        assert_reads(&db, "log", want);
        drop(db);
        db = Db::open(dir.path(), opts()).unwrap();
        assert_reads(&db, "log", want);
    }
}

/// Concatenates operands with `+`; fails on the operand `bad`, or skips it when `lenient`.
struct Picky {
    lenient: bool,
}

impl MergeOperator for Picky {
    fn name(&self) -> &str {
        "picky"
    }
    fn full_merge(
        &self,
        _key: &[u8],
        existing: Option<&[u8]>,
        operands: &[&[u8]],
    ) -> Result<Vec<u8>, String> {
        if !self.lenient && operands.contains(&&b"bad"[..]) {
            return Err("a bad operand".into());
        }
        let pieces = existing.into_iter().chain(operands.iter().copied());
        Ok(pieces.filter(|p| *p != b"bad").collect::<Vec<_>>().join(&b'+'))
    }
    fn partial_merge(&self, key: &[u8], operands: &[&[u8]]) -> Option<Vec<u8>> {
        self.full_merge(key, None, operands).ok()
    }
}

/// A key whose operands an operator cannot combine, spread over a deep level, L0 and the
/// memtable, under background and manual compactions: the database goes on, compaction
/// drops none of the operands (a lenient operator reads them all after a reopen), and a
/// later put, delete or range deletion makes the key readable again.
#[test]
fn compaction_keeps_operands_it_cannot_combine_and_a_later_write_replaces_them() {
    let dir = tempfile::tempdir().unwrap();
    let opts = |lenient: bool| small_tables().merge_operator(Arc::new(Picky { lenient }));
    for how in REPAIRS {
        let db = Db::open(dir.path(), opts(false)).unwrap();
        db.put("neighbour", "n").unwrap();
        db.put("k", "base").unwrap();
        let mut want = b"base".to_vec();
        for (i, operand) in ["a", "bad", "b", "c", "bad", "d"].iter().enumerate() {
            db.merge("k", operand).unwrap();
            if *operand != "bad" {
                want.extend([b'+']);
                want.extend(operand.as_bytes());
            }
            // Other keys' writes fill tables, so background compactions meet the operands.
            for j in 0..200 {
                db.put(format!("fill{i}-{j:03}"), [b'v'; 100]).unwrap();
            }
            match i {
                1 => db.compact().unwrap(),
                3 => db.flush().unwrap(),
                _ => {}
            }
        }
        assert_unreadable(&db, "k", "a bad operand");
        db.compact().unwrap();
        assert_unreadable(&db, "k", "a bad operand");
        db.put("still", "writable").unwrap();
        db.close().unwrap();

        let db = Db::open(dir.path(), opts(true)).unwrap();
        assert_eq!(db.get("k").unwrap().as_deref(), Some(&want[..]), "{how}: every operand kept");
        db.close().unwrap();

        let db = Db::open(dir.path(), opts(false)).unwrap();
        let fixed = repair(&db, how, "k");
        assert_reads(&db, "k", fixed);
        db.merge("k", "e").unwrap();
        let after = fixed.map(|v| [v, b"+e"].concat()).unwrap_or(b"e".to_vec());
        assert_reads(&db, "k", Some(&after));
        db.compact().unwrap();
        assert_reads(&db, "k", Some(&after));
        db.close().unwrap();
        let db = Db::open(dir.path(), opts(false)).unwrap();
        assert_reads(&db, "k", Some(&after));
        db.delete("k").unwrap();
        db.close().unwrap();
    }
}

#[test]
fn append_joins_operands_in_a_keyspace_with_a_batch_and_multi_get() {
    let (dir, db) = common::db::open_temp(Options::new());
    let tags = db
        .keyspace("tags", KeyspaceOptions::new().merge_operator(Arc::new(Append::new(","))))
        .unwrap();
    tags.merge("a", "red").unwrap();
    db.flush().unwrap();
    let mut batch = WriteBatch::new();
    batch.merge_in(&tags, "a", "green");
    batch.merge_in(&tags, "b", "blue");
    db.write(&batch, &WriteOptions::default()).unwrap();
    tags.merge("a", "blue").unwrap();
    let got = tags.multi_get(["a", "b", "c"]).unwrap();
    let got: Vec<Option<&[u8]>> = got.iter().map(|v| v.as_deref()).collect();
    assert_eq!(got, [Some(&b"red,green,blue"[..]), Some(b"blue"), None]);
    drop(tags);
    db.close().unwrap();
    // The operator is given again at every open; without it (on purpose), reads of
    // operands fail.
    let db = Db::open(dir.path(), Options::new()).unwrap();
    let bare = db.keyspace("tags", KeyspaceOptions::new().change_settings(true)).unwrap();
    assert!(matches!(bare.get("a"), Err(Error::MergeOperatorMissing { .. })));
    assert!(matches!(bare.merge("a", "x"), Err(Error::MergeOperatorMissing { .. })));
    let append = KeyspaceOptions::new().merge_operator(Arc::new(Append::new(",")));
    let tags = db.keyspace("tags", append.change_settings(true)).unwrap();
    assert_eq!(tags.get("a").unwrap().as_deref(), Some(&b"red,green,blue"[..]));
    // The default keyspace has no operator.
    assert!(matches!(db.merge("a", "x"), Err(Error::MergeOperatorMissing { .. })));
    let mut batch = WriteBatch::new();
    batch.merge("a", "x");
    let refused = db.write(&batch, &WriteOptions::default());
    assert!(matches!(refused, Err(Error::MergeOperatorMissing { .. })), "{refused:?}");
}

#[test]
fn reading_operands_without_an_operator_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), counting()).unwrap();
    db.put("a", U64Add::operand(1)).unwrap();
    db.merge("b", U64Add::operand(1)).unwrap();
    db.close().unwrap();
    let db = Db::open(dir.path(), Options::new().change_settings(true)).unwrap();
    assert_eq!(db.get("a").unwrap().as_deref(), Some(&U64Add::operand(1)[..]));
    let missing = |r: bloomkv::Result<_>| matches!(r, Err(Error::MergeOperatorMissing { .. }));
    assert!(missing(db.get("b").map(|_| ())));
    assert!(missing(db.multi_get(["a", "b"]).map(|_| ())));
    assert!(missing(db.range(..).nth(1).unwrap().map(|_| ())));
    assert!(missing(db.range(..).next_back().unwrap().map(|_| ())));
    // Compaction keeps them for when the operator is back.
    db.compact().unwrap();
    db.close().unwrap();
    let db = Db::open(dir.path(), counting().change_settings(true)).unwrap();
    assert_eq!(counter(&db, "b"), Some(1));
}

/// A read-only database records nothing, so a named keyspace's operator comes only from the
/// handle that opens it: from then on its operands, in tables and in the WAL, read combined.
#[test]
fn a_read_only_keyspace_reads_operands_with_the_operator_its_open_gives() {
    let dir = tempfile::tempdir().unwrap();
    let hits = || KeyspaceOptions::new().merge_operator(Arc::new(U64Add));
    let db = Db::open(dir.path(), Options::new()).unwrap();
    let ks = db.keyspace("hits", hits()).unwrap();
    ks.merge("a", U64Add::operand(2)).unwrap();
    db.flush().unwrap();
    ks.merge("a", U64Add::operand(3)).unwrap();
    ks.merge("b", U64Add::operand(1)).unwrap();
    drop(ks);
    db.close().unwrap();

    let db = Db::open_read_only(dir.path(), Options::new()).unwrap();
    let bare = db.keyspace("hits", KeyspaceOptions::new()).unwrap();
    assert!(matches!(bare.get("a"), Err(Error::MergeOperatorMissing { .. })));
    let ks = db.keyspace("hits", hits()).unwrap();
    let read = |ks: &bloomkv::Keyspace, key: &str| U64Add::decode(&ks.get(key).unwrap().unwrap());
    assert_eq!(read(&ks, "a"), Some(5));
    let all: Vec<_> = ks.range(..).map(|r| r.unwrap().1.to_vec()).collect();
    assert_eq!(all, [U64Add::operand(5), U64Add::operand(1)]);
    // The operator stays with the keyspace, whichever handle reads it.
    assert_eq!(read(&bare, "b"), Some(1));
    assert_eq!(read(&db.keyspace("hits", KeyspaceOptions::new()).unwrap(), "a"), Some(5));
}

struct Panics;
impl MergeOperator for Panics {
    fn name(&self) -> &str {
        "panics"
    }
    fn full_merge(&self, _: &[u8], _: Option<&[u8]>, _: &[&[u8]]) -> Result<Vec<u8>, String> {
        panic!("operator bug")
    }
    fn partial_merge(&self, _: &[u8], _: &[&[u8]]) -> Option<Vec<u8>> {
        panic!("operator bug")
    }
}

#[test]
fn a_panicking_operator_fails_reads_not_the_engine() {
    let (_dir, db) = common::db::open_temp(Options::new().merge_operator(Arc::new(Panics)));
    db.put("k", "v").unwrap();
    db.merge("k", "x").unwrap();
    db.merge("k", "y").unwrap();
    let reason = |r: bloomkv::Result<_>| match r {
        Err(Error::Merge { reason, .. }) => reason,
        other => panic!("{:?}", other.map(|_: Option<bloomkv::Value>| ())),
    };
    assert!(reason(db.get("k")).contains("operator bug"));
    db.flush().unwrap();
    db.compact().unwrap();
    assert!(reason(db.get("k")).contains("operator bug"));
    // The database goes on.
    db.put("other", "1").unwrap();
    assert_eq!(db.get("other").unwrap().as_deref(), Some(&b"1"[..]));
}

#[test]
fn snapshots_keep_what_they_saw_through_compaction() {
    let (_dir, db) = common::db::open_temp(counting());
    db.merge("c", U64Add::operand(1)).unwrap();
    db.flush().unwrap();
    let one = db.snapshot();
    db.merge("c", U64Add::operand(2)).unwrap();
    db.flush().unwrap();
    let three = db.snapshot();
    db.merge("c", U64Add::operand(4)).unwrap();
    db.compact().unwrap();
    let get = |s: &bloomkv::Snapshot| U64Add::decode(&s.get("c").unwrap().unwrap()).unwrap();
    assert_eq!((get(&one), get(&three)), (1, 3));
    assert_eq!(counter(&db, "c"), Some(7));
    let back: Vec<_> = three.range(..).rev().map(|r| r.unwrap().1).collect();
    assert_eq!(U64Add::decode(&back[0]), Some(3));
    db.delete_range("a".."z").unwrap();
    db.merge("c", U64Add::operand(10)).unwrap();
    db.compact().unwrap();
    assert_eq!(counter(&db, "c"), Some(10));
    assert_eq!((get(&one), get(&three)), (1, 3));
}

#[test]
fn operands_over_an_expiring_value_follow_its_expiry() {
    let clock = Arc::new(bloomkv::ManualClock::new(1_000));
    let (_dir, db) = common::db::open_temp(counting().clock(clock.clone()));
    let ttl = std::time::Duration::from_secs(10);
    db.put_with_ttl("c", U64Add::operand(100), ttl).unwrap();
    db.merge("c", U64Add::operand(1)).unwrap();
    db.compact().unwrap();
    assert_eq!(counter(&db, "c"), Some(101));
    clock.advance(ttl);
    assert_eq!(counter(&db, "c"), Some(1));
    db.compact().unwrap();
    assert_eq!(counter(&db, "c"), Some(1));
}

#[test]
fn a_transaction_reads_its_merges_and_they_count_as_writes() {
    let (_dir, db) = common::db::open_temp(counting());
    db.put("n", U64Add::operand(10)).unwrap();
    let mut tx = db.transaction();
    tx.merge("n", U64Add::operand(5)).unwrap();
    tx.merge("m", U64Add::operand(2)).unwrap();
    assert_eq!(U64Add::decode(&tx.get("n").unwrap().unwrap()), Some(15));
    let all: Vec<_> = tx.range(..).map(|r| r.unwrap()).collect();
    let all: Vec<_> = all.iter().map(|(k, v)| (k.clone(), U64Add::decode(v).unwrap())).collect();
    assert_eq!(all, [(b"m".to_vec(), 2), (b"n".to_vec(), 15)]);
    tx.commit().unwrap();
    assert_eq!(counter(&db, "n"), Some(15));
    // A transaction that read the key conflicts with a merge committed after its snapshot.
    let reader = db.transaction();
    assert_eq!(reader.get("n").unwrap().map(|v| U64Add::decode(&v)), Some(Some(15)));
    let mut blind = db.transaction();
    blind.merge("n", U64Add::operand(1)).unwrap();
    blind.commit().unwrap();
    let mut reader = reader;
    reader.put("x", "y").unwrap();
    assert!(matches!(reader.commit(), Err(Error::Conflict)));
    assert_eq!(counter(&db, "n"), Some(16));
    // A put in the transaction supersedes its earlier merges.
    let mut tx = db.transaction();
    tx.merge("n", U64Add::operand(1)).unwrap();
    tx.put("n", U64Add::operand(3)).unwrap();
    tx.merge("n", U64Add::operand(4)).unwrap();
    assert_eq!(U64Add::decode(&tx.get("n").unwrap().unwrap()), Some(7));
    tx.commit().unwrap();
    assert_eq!(counter(&db, "n"), Some(7));
}

#[derive(Debug, Clone)]
enum Op {
    Put(u8, u8),
    Merge(u8, u8),
    Delete(u8),
    DeleteRange(u8, u8),
    Flush,
    Compact,
    Reopen,
    /// `sync`, then power off and reopen: every operand was synced, so none may be lost.
    Crash,
    Snapshot,
    Check,
}

fn op() -> impl Strategy<Value = Op> {
    let k = || 0u8..40;
    prop_oneof![
        4 => (k(), any::<u8>()).prop_map(|(k, v)| Op::Put(k, v)),
        10 => (k(), any::<u8>()).prop_map(|(k, v)| Op::Merge(k, v)),
        2 => k().prop_map(Op::Delete),
        1 => (k(), k()).prop_map(|(a, b)| Op::DeleteRange(a.min(b), a.max(b))),
        2 => Just(Op::Flush),
        1 => Just(Op::Compact),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
        1 => Just(Op::Snapshot),
        2 => Just(Op::Check),
    ]
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn key(k: u8) -> Vec<u8> {
    format!("key{k:03}").into_bytes()
}

fn model_options(fs: &FaultFs) -> Options {
    small_tables()
        .fault_fs(fs)
        .memtable_bytes(2 << 10)
        .block_bytes(128)
        .target_table_bytes(2 << 10)
        .level_base_bytes(4 << 10)
        .l0_triggers(3)
        .merge_operator(Arc::new(Append::new("+")))
        // Operands past two in a row become puts: the model checks them under snapshots,
        // flushes, compactions, reopens and crashes too.
        .max_successive_merges(2)
}

/// Every read of `db` (or of the snapshot) against `model`: get and multi_get of every key,
/// the whole range forward and backward, and a bounded range both ways.
fn check(read: &dyn Fn(&[u8]) -> Option<Vec<u8>>, scan: &dyn Fn(bool) -> Model, model: &Model) {
    let keys: Vec<Vec<u8>> = (0..40).map(key).collect();
    for k in &keys {
        assert_eq!(read(k), model.get(k).cloned(), "get {}", String::from_utf8_lossy(k));
    }
    assert_eq!(&scan(false), model, "forward scan");
    assert_eq!(&scan(true), model, "backward scan");
}

fn run_model(ops: Vec<Op>) {
    let mut fs = FaultFs::new();
    let dir = bloomkv::fs::fault::unique_dir("merge-model");
    let mut db = Some(Db::open(&dir, model_options(&fs)).unwrap());
    let mut model = Model::new();
    let mut snap: Option<(bloomkv::Snapshot, Model)> = None;
    for op in ops {
        let d = db.as_ref().unwrap();
        match op {
            Op::Put(k, v) => {
                d.put(key(k), [v]).unwrap();
                model.insert(key(k), vec![v]);
            }
            Op::Merge(k, v) => {
                d.merge(key(k), [v]).unwrap();
                // The model's append: `+operand` onto a value, or the operand alone.
                model.entry(key(k)).and_modify(|e| e.extend([b'+', v])).or_insert(vec![v]);
            }
            Op::Delete(k) => {
                d.delete(key(k)).unwrap();
                model.remove(&key(k));
            }
            Op::DeleteRange(a, b) => {
                d.delete_range(key(a)..key(b)).unwrap();
                model.retain(|k, _| k < &key(a) || k >= &key(b));
            }
            Op::Flush => d.flush().unwrap(),
            Op::Compact => d.compact().unwrap(),
            Op::Reopen => {
                snap = None;
                db.take().unwrap().close().unwrap();
                db = Some(Db::open(&dir, model_options(&fs)).unwrap());
            }
            Op::Crash => {
                snap = None;
                d.sync().unwrap();
                let after = fs.crash(bloomkv::fs::CrashMode::DropUnsynced);
                drop(db.take());
                fs = after;
                db = Some(Db::open(&dir, model_options(&fs)).unwrap());
            }
            Op::Snapshot => snap = Some((d.snapshot(), model.clone())),
            Op::Check => {
                let read = |k: &[u8]| d.get(k).unwrap().map(|v| v.to_vec());
                let scan = |rev: bool| scan_model(d.range(..), rev);
                check(&read, &scan, &model);
                let keys: Vec<Vec<u8>> = (0..40).map(key).collect();
                let many = d.multi_get(&keys).unwrap();
                for (k, v) in keys.iter().zip(many) {
                    assert_eq!(v.map(|v| v.to_vec()), model.get(k).cloned(), "multi_get");
                }
                let (lo, hi) = (key(10), key(30));
                let bounded = (Bound::Excluded(lo.clone()), Bound::Included(hi.clone()));
                let want: Model =
                    model.range(bounded.clone()).map(|(k, v)| (k.clone(), v.clone())).collect();
                assert_eq!(scan_model(d.range(bounded.clone()), true), want, "bounded backward");
                // A cursor turning around on every key.
                let mut c = d.cursor(..);
                c.seek_to_first().unwrap();
                let mut seen = Model::new();
                while c.valid() {
                    let (k, v) = (c.key().unwrap().to_vec(), c.value().unwrap().to_vec());
                    c.next().unwrap();
                    if c.valid() {
                        c.prev().unwrap();
                        assert_eq!(c.key(), Some(&k[..]), "cursor turned back");
                        c.next().unwrap();
                    }
                    seen.insert(k, v);
                }
                assert_eq!(seen, model, "cursor");
                if let Some((s, m)) = &snap {
                    let read = |k: &[u8]| s.get(k).unwrap().map(|v| v.to_vec());
                    let scan = |rev: bool| scan_model(s.range(..), rev);
                    check(&read, &scan, m);
                    let many = s.multi_get(&keys).unwrap();
                    for (k, v) in keys.iter().zip(many) {
                        assert_eq!(v.map(|v| v.to_vec()), m.get(k).cloned(), "snapshot multi_get");
                    }
                }
            }
        }
    }
}

fn scan_model(it: bloomkv::DbIterator, rev: bool) -> Model {
    let items: Vec<_> = if rev { it.rev().collect() } else { it.collect() };
    items.into_iter().map(|r| r.unwrap()).map(|(k, v)| (k, v.to_vec())).collect()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: common::env::u64_or("MERGE_MODEL_CASES", 64) as u32,
        ..ProptestConfig::default()
    })]

    #[test]
    fn merges_match_a_model(ops in proptest::collection::vec(op(), 1..300)) {
        run_model(ops);
    }
}

/// Records every value a compaction filter is asked about.
struct Seen(std::sync::Mutex<Vec<Vec<u8>>>);
impl bloomkv::CompactionFilter for Seen {
    fn filter(&self, _level: usize, _key: &[u8], value: &[u8]) -> bloomkv::Decision {
        self.0.lock().unwrap().push(value.to_vec());
        bloomkv::Decision::Keep
    }
}

#[test]
fn a_compaction_filter_sees_what_operands_combine_into_never_an_operand() {
    let seen = Arc::new(Seen(Default::default()));
    let opts =
        Options::new().merge_operator(Arc::new(Append::new(","))).compaction_filter(seen.clone());
    let (_dir, db) = common::db::open_temp(opts);
    db.put("k", "base").unwrap();
    db.flush().unwrap();
    db.merge("k", "x").unwrap();
    db.merge("k", "y").unwrap();
    db.compact().unwrap();
    assert_eq!(*seen.0.lock().unwrap(), [b"base,x,y".to_vec()]);
    assert_eq!(db.get("k").unwrap().as_deref(), Some(&b"base,x,y"[..]));
}

/// A checkpoint keeps operands as they are: those over a flushed value, those still in the
/// memtable (copied into the checkpoint's own table), and a snapshot's checkpoint those at
/// or below it; the copy, opened with the operator, reads the same sums and passes `verify`.
#[test]
fn checkpoints_keep_operands_from_the_memtable_and_the_tables() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), counting()).unwrap();
    db.put("a", U64Add::operand(100)).unwrap();
    db.merge("a", U64Add::operand(1)).unwrap();
    db.flush().unwrap();
    db.merge("a", U64Add::operand(2)).unwrap(); // in the memtable, over the flushed operand
    db.merge("b", U64Add::operand(7)).unwrap(); // in the memtable, nothing beneath
    let snap = db.snapshot();
    db.merge("a", U64Add::operand(1000)).unwrap();
    let copies = tempfile::tempdir().unwrap();
    let live = copies.path().join("live");
    db.checkpoint(&live).unwrap();
    let at_snap = copies.path().join("at-snapshot");
    snap.checkpoint(&at_snap).unwrap();
    for (copy, a) in [(&live, 1103), (&at_snap, 103)] {
        verify(copy);
        let c = Db::open(copy, counting()).unwrap();
        assert_eq!(counter(&c, "a"), Some(a), "{}", copy.display());
        assert_eq!(counter(&c, "b"), Some(7));
        c.compact().unwrap();
        assert_eq!(counter(&c, "a"), Some(a), "after compaction");
    }
}
