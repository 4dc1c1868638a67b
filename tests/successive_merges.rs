//! `Options::max_successive_merges`: a key never has more than that many merge operands in a
//! row on top of the active memtable; a merge past them is written as a put of the combined
//! value, which reads the same, and older snapshots still read what they read.

use std::sync::Arc;
use std::time::Duration;

use bloomkv::{
    Append, Db, Error, KeyspaceOptions, ManualClock, MergeOperator, Options, Readable, U64Add,
    WriteBatch, WriteOptions,
};
use bloomkv_tree::key::ValueKind;

mod common;

use common::db::open_temp;

const N: usize = 5;

fn counting(n: usize) -> Options {
    Options::new().merge_operator(Arc::new(U64Add)).max_successive_merges(n)
}

fn count(v: Option<bloomkv::Value>) -> Option<u64> {
    v.map(|v| U64Add::decode(&v).expect("an 8-byte counter"))
}

/// The merge operands of the memtable's newest versions of `key`, before anything else.
fn operands_on_top(versions: &[(u64, ValueKind)]) -> usize {
    versions.iter().take_while(|(_, k)| *k == ValueKind::Merge).count()
}

#[test]
fn a_key_never_has_more_than_the_bound_of_operands_on_top() {
    let (_dir, db) = open_temp(counting(N));
    let mut snapshots = Vec::new();
    for i in 1..=(3 * (N as u64 + 1)) {
        db.merge("hits", U64Add::operand(i)).unwrap();
        let versions = db.memtable_versions("hits").unwrap();
        assert!(operands_on_top(&versions) <= N, "after {i} merges: {versions:?}");
        assert_eq!(count(db.get("hits").unwrap()), Some(i * (i + 1) / 2), "after {i} merges");
        snapshots.push((i, db.snapshot()));
    }
    // N operands, then a put in place of the next one, three times over; every version stays.
    let versions = db.memtable_versions("hits").unwrap();
    let kinds: Vec<ValueKind> = versions.iter().map(|(_, k)| *k).collect();
    let mut want = Vec::new();
    for _ in 0..3 {
        want.push(ValueKind::Put);
        want.extend([ValueKind::Merge; N]);
    }
    assert_eq!(kinds, want);
    for (i, s) in &snapshots {
        assert_eq!(count(s.get("hits").unwrap()), Some(i * (i + 1) / 2), "snapshot at {i}");
    }
    // After a flush, a compaction and a reopen the value is the same.
    db.flush().unwrap();
    db.compact().unwrap();
    assert_eq!(count(db.get("hits").unwrap()), Some(171));
}

#[test]
fn the_value_beneath_is_read_wherever_it_lies() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), counting(N)).unwrap();
    db.put("k", U64Add::operand(1000)).unwrap();
    db.put("gone", U64Add::operand(1000)).unwrap();
    db.flush().unwrap();
    db.compact().unwrap();
    db.delete("gone").unwrap();
    db.merge("ranged", U64Add::operand(7)).unwrap();
    db.delete_range("r".."s").unwrap();
    for _ in 0..=N {
        db.merge("k", U64Add::operand(1)).unwrap();
        db.merge("gone", U64Add::operand(1)).unwrap();
        db.merge("ranged", U64Add::operand(1)).unwrap();
    }
    for key in ["k", "gone"] {
        let versions = db.memtable_versions(key).unwrap();
        assert_eq!(versions[0].1, ValueKind::Put, "{key}: {versions:?}");
    }
    // The operand beneath the range delete counts as one on top, and combines as deleted.
    assert!(operands_on_top(&db.memtable_versions("ranged").unwrap()) <= N);
    let want = [("k", 1000 + N as u64 + 1), ("gone", N as u64 + 1), ("ranged", N as u64 + 1)];
    for (key, n) in want {
        assert_eq!(count(db.get(key).unwrap()), Some(n), "{key}");
    }
    // The WAL holds the operands: replayed, they read the same.
    drop(db);
    let db = Db::open(dir.path(), counting(N)).unwrap();
    for (key, n) in want {
        assert_eq!(count(db.get(key).unwrap()), Some(n), "{key} after a reopen");
    }
}

/// Operands in one batch, and in a transaction's batch: each is judged against those applied
/// before it, earlier ops of its own batch included.
#[test]
fn operands_in_one_batch_count_each_other() {
    let (_dir, db) = open_temp(counting(N));
    let mut b = WriteBatch::new();
    b.put("k", U64Add::operand(10));
    for _ in 0..2 * N + 1 {
        b.merge("k", U64Add::operand(1));
    }
    db.write(&b, &WriteOptions::default()).unwrap();
    let versions = db.memtable_versions("k").unwrap();
    assert_eq!(operands_on_top(&versions), N, "{versions:?}");
    assert_eq!(count(db.get("k").unwrap()), Some(10 + 2 * N as u64 + 1));

    let mut tx = db.transaction();
    for _ in 0..N {
        tx.merge("k", U64Add::operand(2)).unwrap();
    }
    tx.commit().unwrap();
    let versions = db.memtable_versions("k").unwrap();
    assert!(operands_on_top(&versions) <= N, "{versions:?}");
    assert_eq!(count(db.get("k").unwrap()), Some(10 + 2 * N as u64 + 1 + 2 * N as u64));
}

/// Each keyspace combines with its own operator.
#[test]
fn keyspaces_combine_with_their_own_operator() {
    let (_dir, db) = open_temp(counting(N));
    let log = db
        .keyspace("log", KeyspaceOptions::new().merge_operator(Arc::new(Append::new(","))))
        .unwrap();
    let mut want = Vec::new();
    for i in 0..3 * N {
        log.merge("l", i.to_string()).unwrap();
        db.merge("l", U64Add::operand(1)).unwrap();
        want.push(i.to_string());
    }
    assert!(operands_on_top(&log.memtable_versions("l").unwrap()) <= N);
    assert!(operands_on_top(&db.memtable_versions("l").unwrap()) <= N);
    assert_eq!(log.get("l").unwrap().as_deref(), Some(want.join(",").as_bytes()));
    assert_eq!(count(db.get("l").unwrap()), Some(3 * N as u64));
}

/// 0 turns the bound off: every operand stays an operand.
#[test]
fn zero_keeps_every_operand() {
    let (_dir, db) = open_temp(counting(0));
    for _ in 0..100 {
        db.merge("k", U64Add::operand(1)).unwrap();
    }
    assert_eq!(operands_on_top(&db.memtable_versions("k").unwrap()), 100);
    assert_eq!(count(db.get("k").unwrap()), Some(100));
}

/// Over a live expiring value the operands stay (their result changes when it expires), and
/// where the operator fails they stay too: reads show the failure as they would have.
#[test]
fn operands_stay_where_a_put_would_read_differently() {
    let clock = Arc::new(ManualClock::new(0));
    let (_dir, db) = open_temp(counting(N).clock(clock.clone()));
    db.put_with_ttl("lease", U64Add::operand(100), Duration::from_secs(10)).unwrap();
    for _ in 0..2 * N {
        db.merge("lease", U64Add::operand(1)).unwrap();
    }
    assert_eq!(operands_on_top(&db.memtable_versions("lease").unwrap()), 2 * N);
    assert_eq!(count(db.get("lease").unwrap()), Some(100 + 2 * N as u64));
    clock.advance(Duration::from_secs(10));
    assert_eq!(count(db.get("lease").unwrap()), Some(2 * N as u64));
    // Expired now: the next merge past the bound combines without it.
    db.merge("lease", U64Add::operand(1)).unwrap();
    assert_eq!(db.memtable_versions("lease").unwrap()[0].1, ValueKind::Put);
    assert_eq!(count(db.get("lease").unwrap()), Some(2 * N as u64 + 1));

    /// Fails on any operand but "ok".
    struct Strict;
    impl MergeOperator for Strict {
        fn name(&self) -> &str {
            "strict"
        }
        fn full_merge(
            &self,
            _key: &[u8],
            _existing: Option<&[u8]>,
            operands: &[&[u8]],
        ) -> Result<Vec<u8>, String> {
            match operands.iter().all(|o| *o == b"ok") {
                true => Ok(b"ok".to_vec()),
                false => Err("not ok".into()),
            }
        }
    }
    let (_dir, db) =
        open_temp(Options::new().merge_operator(Arc::new(Strict)).max_successive_merges(N));
    db.merge("k", "bad").unwrap();
    for _ in 0..2 * N {
        db.merge("k", "ok").unwrap();
    }
    assert_eq!(operands_on_top(&db.memtable_versions("k").unwrap()), 2 * N + 1);
    assert!(matches!(db.get("k"), Err(Error::Merge { .. })));
    db.put("k", "ok").unwrap();
    assert_eq!(db.get("k").unwrap().as_deref(), Some(&b"ok"[..]));
}
