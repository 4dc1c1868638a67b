//! Optimistic transactions: conflicts for every kind of read against every kind of write,
//! reads of the transaction's own writes merged over its snapshot, compare-and-swap, a bank
//! whose total never changes under concurrent transfers, and a model of random transactions
//! interleaved with plain writes.

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bloomkv::{
    Db, Error, KeyspaceOptions, Options, Readable, Transaction, WriteBatch, WriteOptions,
};
use proptest::prelude::*;

mod common;

use common::db::open_temp;
use common::model::{pairs, Model, Pair};

/// A read a transaction makes that covers the key `p:k`.
#[derive(Debug, Clone, Copy)]
enum Read {
    Get,
    MultiGet,
    Range,
    RangeRev,
    Prefix,
    Cursor,
}

const READS: [Read; 6] =
    [Read::Get, Read::MultiGet, Read::Range, Read::RangeRev, Read::Prefix, Read::Cursor];

fn read(tx: &Transaction, how: Read) {
    match how {
        Read::Get => drop(tx.get("p:k").unwrap()),
        Read::MultiGet => drop(tx.multi_get(["a", "p:k"]).unwrap()),
        Read::Range => drop(pairs(tx.range("p:".."p;"))),
        Read::RangeRev => drop(pairs(tx.range("p:".."p;").rev())),
        Read::Prefix => drop(pairs(tx.prefix("p:"))),
        Read::Cursor => tx.cursor("p:".."p;").seek_to_last().unwrap(),
    }
}

/// A write made by someone else while the transaction runs.
#[derive(Debug, Clone, Copy)]
enum Write {
    Put,
    Delete,
    DeleteRange,
    Batch,
    Transaction,
    CompareAndSwap,
    Ingest,
}

const WRITES: [Write; 7] = [
    Write::Put,
    Write::Delete,
    Write::DeleteRange,
    Write::Batch,
    Write::Transaction,
    Write::CompareAndSwap,
    Write::Ingest,
];

/// Writes `key` (which exists, holding "old") as `how` says.
fn write(db: &Db, how: Write, key: &str) {
    match how {
        Write::Put => db.put(key, "new").unwrap(),
        Write::Delete => db.delete(key).unwrap(),
        Write::DeleteRange => db.delete_range(key..=key).unwrap(),
        Write::Batch => {
            let mut b = WriteBatch::new();
            b.put("unrelated", "x");
            b.put(key, "new");
            db.write(&b, &WriteOptions::default()).unwrap();
        }
        Write::Transaction => {
            let mut other = db.transaction();
            other.put(key, "new").unwrap();
            other.commit().unwrap();
        }
        Write::CompareAndSwap => {
            assert!(db.compare_and_swap(key, Some(b"old"), Some(b"new")).unwrap());
        }
        Write::Ingest => assert_eq!(db.ingest([(key, "new")]).unwrap(), 1),
    }
}

fn seeded() -> (tempfile::TempDir, Db) {
    let (dir, db) = open_temp(Options::default());
    for k in ["a", "p:k", "q:k"] {
        db.put(k, "old").unwrap();
    }
    (dir, db)
}

/// Every kind of read of `p:k` conflicts with every kind of write to it made after the
/// transaction began, and the refused commit writes nothing; the same write to a key it did
/// not read does not conflict.
#[test]
fn every_read_conflicts_with_every_later_write_to_what_it_read() {
    for how_read in READS {
        for how_write in WRITES {
            let (_dir, db) = seeded();
            let mut tx = db.transaction();
            read(&tx, how_read);
            write(&db, how_write, "p:k");
            tx.put("out", "tx").unwrap();
            let got = tx.commit();
            assert!(matches!(got, Err(Error::Conflict)), "{how_read:?} vs {how_write:?}: {got:?}");
            assert_eq!(db.get("out").unwrap(), None, "{how_read:?} vs {how_write:?}");

            let (_dir, db) = seeded();
            let mut tx = db.transaction();
            read(&tx, how_read);
            write(&db, how_write, "q:k");
            tx.put("out", "tx").unwrap();
            tx.commit().unwrap_or_else(|e| panic!("{how_read:?} vs {how_write:?}: {e}"));
            assert_eq!(db.get("out").unwrap().as_deref(), Some(&b"tx"[..]));
        }
    }
}

/// A key put into a range the transaction scanned, where it found nothing, is a conflict:
/// phantoms are caught, in both directions and for prefixes.
#[test]
fn a_key_inserted_into_a_scanned_range_conflicts() {
    for how_read in [Read::Range, Read::RangeRev, Read::Prefix, Read::Cursor] {
        let (_dir, db) = open_temp(Options::default());
        let mut tx = db.transaction();
        read(&tx, how_read);
        db.put("p:new", "x").unwrap();
        tx.put("out", "tx").unwrap();
        assert!(matches!(tx.commit(), Err(Error::Conflict)), "{how_read:?}");

        let mut tx = db.transaction();
        read(&tx, how_read);
        db.put("p;", "just past the range").unwrap();
        db.put("p", "just before it").unwrap();
        tx.put("out", "tx").unwrap();
        tx.commit().unwrap_or_else(|e| panic!("{how_read:?}: {e}"));
    }
}

/// A range deleted around a key read, and a key read as absent then put, conflict; writes
/// made before the transaction began do not.
#[test]
fn range_deletes_and_absent_keys_read() {
    let (_dir, db) = seeded();
    let mut tx = db.transaction();
    assert_eq!(tx.get("absent").unwrap(), None);
    db.put("absent", "now present").unwrap();
    tx.put("out", "1").unwrap();
    assert!(matches!(tx.commit(), Err(Error::Conflict)));

    let mut tx = db.transaction();
    drop(tx.get("p:k").unwrap());
    db.delete_range("a".."z").unwrap();
    tx.put("out", "1").unwrap();
    assert!(matches!(tx.commit(), Err(Error::Conflict)));

    db.put("p:k", "before").unwrap();
    let mut tx = db.transaction();
    assert_eq!(tx.get("p:k").unwrap().as_deref(), Some(&b"before"[..]));
    tx.put("p:k", "after").unwrap();
    tx.commit().unwrap();
    assert_eq!(db.get("p:k").unwrap().as_deref(), Some(&b"after"[..]));
}

/// Keys answered from the transaction's own writes depend on nothing else: a write to them
/// by someone else does not conflict (the transaction's own write wins, as a later write).
/// Writes never read do not conflict either: the later commit's value stays.
#[test]
fn own_writes_and_blind_writes_are_not_checked() {
    let (_dir, db) = seeded();
    let mut tx = db.transaction();
    tx.put("p:k", "tx").unwrap();
    assert_eq!(tx.get("p:k").unwrap().as_deref(), Some(&b"tx"[..]));
    db.put("p:k", "other").unwrap();
    tx.commit().unwrap();
    assert_eq!(db.get("p:k").unwrap().as_deref(), Some(&b"tx"[..]));

    let mut first = db.transaction();
    let mut second = db.transaction();
    first.put("blind", "1").unwrap();
    second.put("blind", "2").unwrap();
    second.commit().unwrap();
    first.commit().unwrap();
    assert_eq!(db.get("blind").unwrap().as_deref(), Some(&b"1"[..]));
}

/// Two transactions that read the same key and write it: the first to commit wins, the
/// other conflicts (a lost update prevented), and so does write skew between two keys.
#[test]
fn of_two_read_modify_writes_the_second_conflicts() {
    let (_dir, db) = seeded();
    let mut a = db.transaction();
    let mut b = db.transaction();
    assert!(a.get("p:k").unwrap().is_some());
    assert!(b.get("p:k").unwrap().is_some());
    a.put("p:k", "a").unwrap();
    b.put("p:k", "b").unwrap();
    a.commit().unwrap();
    assert!(matches!(b.commit(), Err(Error::Conflict)));
    assert_eq!(db.get("p:k").unwrap().as_deref(), Some(&b"a"[..]));

    // Write skew: each reads both keys and writes the other one.
    let mut a = db.transaction();
    let mut b = db.transaction();
    drop(a.multi_get(["x", "y"]).unwrap());
    drop(b.multi_get(["x", "y"]).unwrap());
    a.put("x", "a").unwrap();
    b.put("y", "b").unwrap();
    a.commit().unwrap();
    assert!(matches!(b.commit(), Err(Error::Conflict)));
}

/// Reads and writes across keyspaces: a write to the key in the other keyspace is no
/// conflict, one to the key read in its keyspace is; a commit writes every keyspace at once.
#[test]
fn transactions_span_keyspaces() {
    let (_dir, db) = open_temp(Options::default());
    let one = db.keyspace("one", KeyspaceOptions::default()).unwrap();
    let two = db.keyspace("two", KeyspaceOptions::default()).unwrap();
    one.put("k", "1").unwrap();
    two.put("k", "2").unwrap();

    let mut tx = db.transaction();
    assert_eq!(tx.keyspace(&one).unwrap().get("k").unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(pairs(tx.keyspace(&two).unwrap().prefix("k")), [(b"k".to_vec(), b"2".to_vec())]);
    db.put("k", "default keyspace").unwrap();
    tx.put_in(&one, "k", "one").unwrap();
    tx.delete_in(&two, "k").unwrap();
    tx.put("k", "tx").unwrap();
    let snap = db.snapshot();
    tx.commit().unwrap();
    assert_eq!(one.get("k").unwrap().as_deref(), Some(&b"one"[..]));
    assert_eq!(two.get("k").unwrap(), None);
    assert_eq!(db.get("k").unwrap().as_deref(), Some(&b"tx"[..]));
    assert_eq!(snap.keyspace(&two).unwrap().get("k").unwrap().as_deref(), Some(&b"2"[..]));

    let mut tx = db.transaction();
    drop(tx.keyspace(&two).unwrap().multi_get(["k", "l"]).unwrap());
    one.put("l", "other keyspace").unwrap();
    tx.put_in(&one, "out", "1").unwrap();
    tx.commit().unwrap();
    let mut tx = db.transaction();
    drop(pairs(tx.keyspace(&two).unwrap().range(..)));
    two.put("l", "scanned keyspace").unwrap();
    tx.put_in(&one, "out", "2").unwrap();
    assert!(matches!(tx.commit(), Err(Error::Conflict)));
    assert_eq!(one.get("out").unwrap().as_deref(), Some(&b"1"[..]));
}

/// Misuse is an error, not a panic: a handle of another database, a keyspace dropped before
/// the commit or unknown to the snapshot, a closed database.
#[test]
fn misuse_is_reported() {
    let (_dir, db) = open_temp(Options::default());
    let (_other_dir, other) = open_temp(Options::default());
    let foreign = other.keyspace("x", KeyspaceOptions::default()).unwrap();
    let mut tx = db.transaction();
    assert!(matches!(tx.keyspace(&foreign), Err(Error::ForeignKeyspace { .. })));
    assert!(matches!(tx.put_in(&foreign, "k", "v"), Err(Error::ForeignKeyspace { .. })));
    assert!(matches!(
        tx.put(vec![0; bloomkv::MAX_KEY_BYTES + 1], ""),
        Err(Error::KeyTooLarge { .. })
    ));

    let later = db.keyspace("later", KeyspaceOptions::default()).unwrap();
    let in_later = tx.keyspace(&later).unwrap();
    assert!(matches!(in_later.get("k"), Err(Error::KeyspaceDropped { .. })));
    // Scans report theirs from the iterator, as the database's do; cursors from every move.
    let mut it = in_later.range(..);
    assert!(matches!(it.next(), Some(Err(Error::KeyspaceDropped { .. }))));
    assert!(it.next().is_none());
    let mut it = in_later.prefix("k").rev();
    assert!(matches!(it.next(), Some(Err(Error::KeyspaceDropped { .. }))));
    assert!(it.next().is_none());
    let mut cursor = in_later.cursor(..);
    assert!(matches!(cursor.seek_to_first(), Err(Error::KeyspaceDropped { .. })));
    assert!(matches!(cursor.next(), Ok(())) && !cursor.valid());
    tx.put_in(&later, "k", "v").unwrap();
    db.drop_keyspace("later").unwrap();
    assert!(matches!(tx.commit(), Err(Error::KeyspaceDropped { .. })));

    let mut tx = db.transaction();
    tx.put("k", "v").unwrap();
    db.close().unwrap();
    assert!(matches!(tx.get("k"), Err(Error::Closed)));
    assert!(matches!(tx.range(..).next(), Some(Err(Error::Closed))));
    assert!(matches!(tx.cursor(..).seek_to_first(), Err(Error::Closed)));
    assert!(matches!(tx.commit(), Err(Error::Closed)));
}

/// On a read-only handle a transaction reads, and a commit with nothing to write succeeds;
/// one with writes is refused.
#[test]
fn read_only_handles_read_but_do_not_commit_writes() {
    let dir = tempfile::tempdir().unwrap();
    Db::open(dir.path(), Options::default()).unwrap().put("k", "v").unwrap();
    let db = Db::open_read_only(dir.path(), Options::default()).unwrap();
    let tx = db.transaction();
    assert_eq!(tx.get("k").unwrap().as_deref(), Some(&b"v"[..]));
    tx.commit().unwrap();
    let mut tx = db.transaction();
    tx.put("k", "w").unwrap();
    assert!(matches!(tx.commit(), Err(Error::ReadOnly)));
    assert!(matches!(db.compare_and_swap("k", Some(b"v"), None), Err(Error::ReadOnly)));
}

/// A transaction and its iterator and cursor can move to another thread.
#[test]
fn transactions_are_send() {
    fn send<T: Send>() {}
    send::<Transaction>();
    send::<bloomkv::TransactionIter>();
    send::<bloomkv::TransactionCursor>();
}

/// A transaction's cursor pages through its view like `Cursor::entries`: its own writes over
/// the snapshot, forward and backward, resuming where the last page stopped.
#[test]
fn transaction_cursor_entries_page_through_its_view() {
    let (_dir, db) = seeded();
    let mut tx = db.transaction();
    tx.put("b", "tx").unwrap();
    tx.delete("p:k").unwrap();
    tx.put("r", "tx").unwrap();
    let mut cursor = tx.cursor(..);
    let keys = |page: Vec<bloomkv::Result<(Vec<u8>, bloomkv::Value)>>| -> Vec<Vec<u8>> {
        page.into_iter().map(|kv| kv.unwrap().0).collect()
    };
    assert!(cursor.entries().next().is_none(), "an unpositioned cursor yields nothing");
    cursor.seek_to_first().unwrap();
    assert_eq!(keys(cursor.entries().take(2).collect()), [&b"a"[..], b"b"]);
    assert_eq!(cursor.key(), Some(&b"q:k"[..]));
    let rest: Vec<_> = cursor.entries().map(|kv| kv.unwrap()).collect();
    assert_eq!(rest.len(), 2);
    assert_eq!((rest[1].0.as_slice(), &rest[1].1[..]), (&b"r"[..], &b"tx"[..]));
    assert!(!cursor.valid());
    cursor.seek_for_prev("q").unwrap();
    assert_eq!(keys(cursor.entries_back().collect()), [&b"b"[..], b"a"]);
}

/// Flushes and ingests of what a transaction did not read refuse nothing; a write it read
/// that a flush carried into a table, or an ingest of a key it read, is still found. (More in
/// `tests/transaction_history.rs`.)
#[test]
fn flushes_and_ingests_conflict_only_over_what_was_read() {
    let (_dir, db) = seeded();
    for flushes in 1..3 {
        let mut tx = db.transaction();
        drop(tx.get("p:k").unwrap());
        db.put("p:k", "flushed").unwrap();
        for _ in 0..flushes {
            db.flush().unwrap();
        }
        tx.put("out", "1").unwrap();
        assert!(matches!(tx.commit(), Err(Error::Conflict)));
    }
    let mut tx = db.transaction();
    drop(tx.get("p:k").unwrap());
    db.flush().unwrap();
    tx.put("out", "0").unwrap();
    tx.commit().unwrap();
    let mut tx = db.transaction();
    drop(tx.get("p:k").unwrap());
    db.put("unrelated", "x").unwrap();
    db.flush().unwrap();
    db.ingest([("unrelated:2", "y")]).unwrap();
    tx.put("out", "1").unwrap();
    tx.commit().unwrap();

    let mut tx = db.transaction();
    drop(tx.get("p:k").unwrap());
    db.ingest([("p:k", "ingested")]).unwrap();
    tx.put("out", "3").unwrap();
    assert!(matches!(tx.commit(), Err(Error::Conflict)));
    assert_eq!(db.get("out").unwrap().as_deref(), Some(&b"1"[..]));
    let mut tx = db.transaction();
    assert_eq!(tx.get("p:k").unwrap().as_deref(), Some(&b"ingested"[..]));
    tx.put("out", "4").unwrap();
    tx.commit().unwrap();
}

#[test]
fn transact_retries_until_it_commits() {
    let (_dir, db) = seeded();
    let mut runs = 0;
    let got = db
        .transact(|tx| {
            runs += 1;
            let v = tx.get("p:k")?;
            if runs == 1 {
                // Someone writes what this run read: it must run again.
                db.put("p:k", "changed")?;
            }
            tx.put("copy", v.as_deref().unwrap_or_default())?;
            Ok::<_, Error>(runs)
        })
        .unwrap();
    assert_eq!(got, 2);
    assert_eq!(db.get("copy").unwrap().as_deref(), Some(&b"changed"[..]));

    let always = db.transact(|tx| {
        drop(tx.get("p:k")?);
        db.put("p:k", "again")?;
        tx.put("never", "")
    });
    assert!(matches!(always, Err(Error::Conflict)));
    assert_eq!(db.get("never").unwrap(), None);
    let refused: bloomkv::Result<()> = db.transact(|_| Err(Error::InvalidArgument("no".into())));
    assert!(matches!(refused, Err(Error::InvalidArgument(_))));
}

/// An application's own error type through `transact`: `?` works on both kinds of error,
/// the closure's error is returned at once without a commit, and engine errors come back
/// converted.
#[derive(Debug)]
enum AppError {
    Db(Error),
    Refused(&'static str),
}

impl From<Error> for AppError {
    fn from(e: Error) -> Self {
        AppError::Db(e)
    }
}

fn check(ok: bool) -> Result<(), AppError> {
    ok.then_some(()).ok_or(AppError::Refused("no"))
}

#[test]
fn transact_takes_the_application_error_type() {
    let (_dir, db) = seeded();
    let mut runs = 0;
    let got: Result<u32, AppError> = db.transact(|tx| {
        runs += 1;
        let v = tx.get("p:k")?;
        check(v.is_some())?;
        if runs == 1 {
            db.put("p:k", "changed")?;
        }
        tx.put("copy", v.unwrap_or_default())?;
        Ok(runs)
    });
    assert_eq!(got.unwrap(), 2, "a conflict of the commit is still retried");

    let refused: Result<(), AppError> = db.transact(|tx| {
        tx.put("never", "")?;
        check(false)
    });
    assert!(matches!(refused, Err(AppError::Refused("no"))));
    assert_eq!(db.get("never").unwrap(), None);

    let always: Result<(), AppError> = db.transact(|tx| {
        drop(tx.get("p:k")?);
        db.put("p:k", "again")?;
        Ok(tx.put("never", "")?)
    });
    assert!(matches!(always, Err(AppError::Db(Error::Conflict))));
    assert_eq!(db.get("never").unwrap(), None);
}

#[test]
fn keyspace_transactions_read_and_write_their_keyspace() {
    let (_dir, db) = seeded();
    let ks = db.keyspace("ks", KeyspaceOptions::default()).unwrap();
    ks.put("a", "ks").unwrap();
    let mut tx = ks.transaction();
    assert_eq!(tx.get("a").unwrap().as_deref(), Some(&b"ks"[..]));
    assert_eq!(tx.get("p:k").unwrap(), None, "the default keyspace's key is not there");
    tx.put("b", "tx").unwrap();
    tx.put_in(&ks, "c", "tx").unwrap();
    let keys: Vec<_> = tx.range(..).map(|kv| kv.unwrap().0).collect();
    assert_eq!(keys, [&b"a"[..], b"b", b"c"]);
    tx.commit().unwrap();
    assert_eq!(ks.get("b").unwrap().as_deref(), Some(&b"tx"[..]));
    assert_eq!(db.get("b").unwrap(), None);

    let mut runs = 0;
    let n = ks
        .transact(|tx| {
            runs += 1;
            let v = tx.get("a")?;
            if runs == 1 {
                ks.put("a", "changed")?;
            }
            tx.put("copy", v.unwrap_or_default())?;
            Ok::<_, Error>(runs)
        })
        .unwrap();
    assert_eq!(n, 2);
    assert_eq!(ks.get("copy").unwrap().as_deref(), Some(&b"changed"[..]));
    db.drop_keyspace("ks").unwrap();
    let dropped = ks.transact(|_| Ok::<_, Error>(()));
    assert!(matches!(dropped, Err(Error::KeyspaceDropped { name }) if name == "ks"));
}

#[test]
fn compare_and_swap_swaps_only_the_expected_value() {
    let (_dir, db) = open_temp(Options::default());
    assert!(!db.compare_and_swap("k", Some(b"x"), Some(b"y")).unwrap());
    assert_eq!(db.get("k").unwrap(), None);
    assert!(db.compare_and_swap("k", None, Some(b"1")).unwrap());
    assert!(!db.compare_and_swap("k", None, Some(b"2")).unwrap());
    assert!(!db.compare_and_swap("k", Some(b"2"), None).unwrap());
    assert_eq!(db.get("k").unwrap().as_deref(), Some(&b"1"[..]));
    assert!(db.compare_and_swap("k", Some(b"1"), None).unwrap());
    assert_eq!(db.get("k").unwrap(), None);

    let ks = db.keyspace("ks", KeyspaceOptions::default()).unwrap();
    assert!(ks.compare_and_swap("k", None, Some(b"ks")).unwrap());
    assert_eq!(db.get("k").unwrap(), None);
    assert_eq!(ks.get("k").unwrap().as_deref(), Some(&b"ks"[..]));
    db.drop_keyspace("ks").unwrap();
    assert!(matches!(
        ks.compare_and_swap("k", None::<&[u8]>, None),
        Err(Error::KeyspaceDropped { .. })
    ));
}

/// Threads incrementing one counter with compare-and-swap, and flushes meanwhile: no
/// increment is lost.
/// `expected` and `new` take any bytes, and a bare `None` beside a value.
#[test]
fn compare_and_swap_takes_any_bytes() {
    let (_dir, db) = seeded();
    assert!(db.compare_and_swap("s", None, Some("v1")).unwrap());
    assert!(!db.compare_and_swap("s", Some("v0"), None).unwrap());
    assert!(db.compare_and_swap("s", Some("v1"), Some("v2")).unwrap());
    assert!(db.compare_and_swap("s", Some(b"v2".to_vec()), Some(b"v3".to_vec())).unwrap());
    assert!(db.compare_and_swap("s", Some(String::from("v3")), None).unwrap());
    assert_eq!(db.get("s").unwrap(), None);
    let ks = db.keyspace("ks", KeyspaceOptions::default()).unwrap();
    assert!(ks.compare_and_swap("s", None, Some("v1")).unwrap());
    assert!(ks.compare_and_swap("s", Some("v1"), None).unwrap());
}

#[test]
fn concurrent_compare_and_swap_loses_no_increment() {
    let (_dir, db) = open_temp(Options::default().memtable_bytes(16 << 10));
    let (threads, each) = (4, 200u64);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for i in 0..each {
                    loop {
                        let cur = db.get("n").unwrap();
                        let n =
                            cur.as_deref().map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap()));
                        let new = (n + 1).to_le_bytes();
                        if db.compare_and_swap("n", cur.as_deref(), Some(&new)).unwrap() {
                            break;
                        }
                    }
                    // Enough besides to switch and flush memtables while the others swap.
                    db.put(format!("filler{i}"), [0; 512]).unwrap();
                }
            });
        }
    });
    let n = u64::from_le_bytes(db.get("n").unwrap().unwrap()[..].try_into().unwrap());
    assert_eq!(n, threads * each);
}

/// Reads of the transaction's own writes merged over the snapshot, in both directions and
/// with the two ends taken in turn, against a model built from the same operations.
#[derive(Debug, Clone)]
enum TxOp {
    Put(u8, u8),
    Delete(u8),
    DeleteRange(u8, u8),
}

fn tx_op() -> impl Strategy<Value = TxOp> {
    prop_oneof![
        4 => (0u8..40, any::<u8>()).prop_map(|(k, v)| TxOp::Put(k, v)),
        2 => (0u8..40).prop_map(TxOp::Delete),
        1 => (0u8..40, 0u8..40).prop_map(|(a, b)| TxOp::DeleteRange(a, b)),
    ]
}

fn key(k: u8) -> Vec<u8> {
    format!("k{k:02}").into_bytes()
}

fn apply_tx_op(model: &mut Model, op: &TxOp) {
    match *op {
        TxOp::Put(k, v) => drop(model.insert(key(k), vec![v])),
        TxOp::Delete(k) => drop(model.remove(&key(k))),
        TxOp::DeleteRange(a, b) => model.retain(|k, _| !(key(a) <= *k && *k < key(b))),
    }
}

fn do_tx_op(tx: &mut Transaction, op: &TxOp) {
    match *op {
        TxOp::Put(k, v) => tx.put(key(k), [v]).unwrap(),
        TxOp::Delete(k) => tx.delete(key(k)).unwrap(),
        TxOp::DeleteRange(a, b) => tx.delete_range(key(a)..key(b)).unwrap(),
    }
}

fn bounds(a: u8, b: u8, kinds: u8) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let lo = match kinds % 3 {
        0 => Bound::Included(key(a)),
        1 => Bound::Excluded(key(a)),
        _ => Bound::Unbounded,
    };
    let hi = match (kinds / 3) % 3 {
        0 => Bound::Excluded(key(b)),
        1 => Bound::Included(key(b)),
        _ => Bound::Unbounded,
    };
    (lo, hi)
}

fn model_range(model: &Model, (lo, hi): (Bound<Vec<u8>>, Bound<Vec<u8>>)) -> Vec<Pair> {
    let inside = |k: &Vec<u8>| {
        (match &lo {
            Bound::Included(l) => k >= l,
            Bound::Excluded(l) => k > l,
            Bound::Unbounded => true,
        }) && (match &hi {
            Bound::Included(h) => k <= h,
            Bound::Excluded(h) => k < h,
            Bound::Unbounded => true,
        })
    };
    model.iter().filter(|(k, _)| inside(k)).map(|(k, v)| (k.clone(), v.clone())).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn prop_a_transaction_reads_its_own_writes_over_its_snapshot(
        before in proptest::collection::vec(tx_op(), 0..40),
        flush in any::<bool>(),
        after in proptest::collection::vec(tx_op(), 0..20),
        ops in proptest::collection::vec(tx_op(), 0..30),
        scans in proptest::collection::vec((0u8..40, 0u8..40, 0u8..9, proptest::collection::vec(any::<bool>(), 0..50)), 1..6),
        walks in proptest::collection::vec((0u8..40, 0u8..40, 0u8..9, proptest::collection::vec((0u8..6, 0u8..41), 0..30)), 1..4),
    ) {
        let (_dir, db) = open_temp(Options::default());
        let mut snapshot = Model::new();
        let mut seed = db.transaction();
        for op in &before {
            do_tx_op(&mut seed, op);
            apply_tx_op(&mut snapshot, op);
        }
        seed.commit().unwrap();
        if flush {
            db.flush().unwrap();
        }
        let mut tx = db.transaction();
        // Written after the transaction began: invisible to it.
        let mut plain = db.transaction();
        for op in &after {
            do_tx_op(&mut plain, op);
        }
        plain.commit().unwrap();

        let mut model = snapshot.clone();
        for op in &ops {
            do_tx_op(&mut tx, op);
            apply_tx_op(&mut model, op);
        }
        for k in 0..40 {
            prop_assert_eq!(tx.get(key(k)).unwrap().map(|v| v.to_vec()), model.get(&key(k)).cloned());
        }
        let all: Vec<Vec<u8>> = (0..40).map(key).collect();
        let got: Vec<_> = tx.multi_get(&all).unwrap().into_iter().map(|v| v.map(|v| v.to_vec())).collect();
        let want: Vec<_> = all.iter().map(|k| model.get(k).cloned()).collect();
        prop_assert_eq!(got, want);
        for (a, b, kinds, turns) in scans {
            let range = bounds(a, b, kinds);
            let want = model_range(&model, range.clone());
            prop_assert_eq!(pairs(tx.range(range.clone())), want.clone());
            let mut back = pairs(tx.range(range.clone()).rev());
            back.reverse();
            prop_assert_eq!(&back, &want);
            // The two ends in turn: front entries in order, then back entries reversed.
            let mut it = tx.range(range);
            let (mut front, mut rear) = (Vec::new(), Vec::new());
            for &from_front in turns.iter().chain(std::iter::repeat(&true).take(want.len() + 1)) {
                let next = if from_front { it.next() } else { it.next_back() };
                match next {
                    Some(kv) => {
                        let (k, v) = kv.unwrap();
                        if from_front { front.push((k, v.to_vec())) } else { rear.push((k, v.to_vec())) }
                    }
                    None => break,
                }
            }
            prop_assert!(it.next().is_none() && it.next_back().is_none());
            rear.reverse();
            front.extend(rear);
            prop_assert_eq!(front, want);
        }
        for (a, b, kinds, moves) in walks {
            let range = bounds(a, b, kinds);
            let want = model_range(&model, range.clone());
            let mut cursor = tx.cursor(range);
            // The model cursor: an index into `want`.
            let mut at: Option<usize> = None;
            for (how, k) in moves {
                let k = key(k);
                match how {
                    0 => {
                        cursor.seek(&k).unwrap();
                        at = want.iter().position(|(w, _)| *w >= k);
                    }
                    1 => {
                        cursor.seek_for_prev(&k).unwrap();
                        at = want.iter().rposition(|(w, _)| *w <= k);
                    }
                    2 => {
                        cursor.seek_to_first().unwrap();
                        at = (!want.is_empty()).then_some(0);
                    }
                    3 => {
                        cursor.seek_to_last().unwrap();
                        at = want.len().checked_sub(1);
                    }
                    4 => {
                        cursor.next().unwrap();
                        at = at.map(|i| i + 1).filter(|&i| i < want.len());
                    }
                    _ => {
                        cursor.prev().unwrap();
                        at = at.and_then(|i| i.checked_sub(1));
                    }
                }
                let expected = at.map(|i| (want[i].0.as_slice(), want[i].1.as_slice()));
                prop_assert_eq!(cursor.key().zip(cursor.value()), expected);
                prop_assert_eq!(cursor.valid(), expected.is_some());
            }
        }
        let prefix_want: Vec<Pair> = model.range(b"k1".to_vec()..b"k2".to_vec()).map(|(k, v)| (k.clone(), v.clone())).collect();
        prop_assert_eq!(pairs(tx.prefix("k1")), prefix_want.clone());
        let mut rev = pairs(tx.prefix("k1").rev());
        rev.reverse();
        prop_assert_eq!(rev, prefix_want);
    }
}

/// One step of the model test: transactions in slots, begun, read, written and committed in
/// any interleaving with plain writes and flushes.
#[derive(Debug, Clone)]
enum Step {
    Begin(usize),
    Get(usize, u8),
    MultiGet(usize, Vec<u8>),
    Scan(usize, u8, u8, bool),
    Write(usize, TxOp),
    Commit(usize),
    Plain(TxOp),
    Flush,
}

fn step() -> impl Strategy<Value = Step> {
    let slot = 0usize..3;
    prop_oneof![
        2 => slot.clone().prop_map(Step::Begin),
        3 => (slot.clone(), 0u8..40).prop_map(|(s, k)| Step::Get(s, k)),
        1 => (slot.clone(), proptest::collection::vec(0u8..40, 1..4)).prop_map(|(s, k)| Step::MultiGet(s, k)),
        1 => (slot.clone(), 0u8..40, 0u8..40, any::<bool>()).prop_map(|(s, a, b, r)| Step::Scan(s, a, b, r)),
        3 => (slot.clone(), tx_op()).prop_map(|(s, op)| Step::Write(s, op)),
        2 => slot.prop_map(Step::Commit),
        3 => tx_op().prop_map(Step::Plain),
        1 => Just(Step::Flush),
    ]
}

/// What the model knows of an open transaction.
struct ModelTx {
    tx: Transaction,
    /// The database as the transaction sees it: its snapshot with its writes over it.
    view: Model,
    ops: Vec<TxOp>,
    /// Keys and half-open ranges it read from its snapshot (not from its own writes).
    keys: Vec<Vec<u8>>,
    ranges: Vec<(Vec<u8>, Vec<u8>)>,
    /// Index into the write log when it began; whether a flush came after.
    begun: usize,
    flushed: bool,
}

/// True if `op` writes a key in `keys` or in one of `ranges`.
fn touches(op: &TxOp, keys: &[Vec<u8>], ranges: &[(Vec<u8>, Vec<u8>)]) -> bool {
    let (lo, hi) = match *op {
        TxOp::Put(k, _) | TxOp::Delete(k) => (key(k), [key(k), vec![0]].concat()),
        TxOp::DeleteRange(a, b) if a < b => (key(a), key(b)),
        TxOp::DeleteRange(..) => return false,
    };
    keys.iter().any(|k| lo <= *k && *k < hi) || ranges.iter().any(|(s, e)| *s < hi && lo < *e)
}

/// True if the transaction's own writes answer a read of `k` (a put, delete or range delete
/// of it).
fn own(ops: &[TxOp], k: &[u8]) -> bool {
    ops.iter().any(|op| touches(op, &[k.to_vec()], &[]))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Random transactions interleaved with plain writes and flushes: every read a
    /// transaction makes matches its snapshot with its writes over it; a commit conflicts
    /// whenever a key or range it read was written since it began, and otherwise commits
    /// (unless a flush since it began makes the check give up), its writes then applied at
    /// once; the database always matches the model.
    #[test]
    fn prop_transactions_and_plain_writes_match_a_model(steps in proptest::collection::vec(step(), 1..80)) {
        let (_dir, db) = open_temp(Options::default());
        let mut model = Model::new();
        // Every write applied, in order: what a commit's check is judged against.
        let mut log: Vec<TxOp> = Vec::new();
        let mut slots: [Option<ModelTx>; 3] = [None, None, None];
        for step in steps {
            match step {
                Step::Begin(s) => {
                    slots[s] = Some(ModelTx {
                        tx: db.transaction(),
                        view: model.clone(),
                        ops: Vec::new(),
                        keys: Vec::new(),
                        ranges: Vec::new(),
                        begun: log.len(),
                        flushed: false,
                    });
                }
                Step::Get(s, k) => if let Some(t) = &mut slots[s] {
                    let got = t.tx.get(key(k)).unwrap().map(|v| v.to_vec());
                    prop_assert_eq!(got, t.view.get(&key(k)).cloned());
                    if !own(&t.ops, &key(k)) {
                        t.keys.push(key(k));
                    }
                }
                Step::MultiGet(s, ks) => if let Some(t) = &mut slots[s] {
                    let ks: Vec<Vec<u8>> = ks.into_iter().map(key).collect();
                    let got: Vec<_> = t.tx.multi_get(&ks).unwrap().into_iter().map(|v| v.map(|v| v.to_vec())).collect();
                    let want: Vec<_> = ks.iter().map(|k| t.view.get(k).cloned()).collect();
                    prop_assert_eq!(got, want);
                    for k in ks {
                        if !own(&t.ops, &k) {
                            t.keys.push(k);
                        }
                    }
                }
                Step::Scan(s, a, b, rev) => if let Some(t) = &mut slots[s] {
                    let want: Vec<Pair> = match a < b {
                        true => t.view.range(key(a)..key(b)).map(|(k, v)| (k.clone(), v.clone())).collect(),
                        false => Vec::new(),
                    };
                    let it = t.tx.range(key(a)..key(b));
                    let mut got = if rev { pairs(it.rev()) } else { pairs(it) };
                    if rev {
                        got.reverse();
                    }
                    prop_assert_eq!(got, want);
                    if a < b {
                        t.ranges.push((key(a), key(b)));
                    }
                }
                Step::Write(s, op) => if let Some(t) = &mut slots[s] {
                    do_tx_op(&mut t.tx, &op);
                    apply_tx_op(&mut t.view, &op);
                    t.ops.push(op);
                }
                Step::Commit(s) => if let Some(t) = slots[s].take() {
                    let conflict = log[t.begun..].iter().any(|op| touches(op, &t.keys, &t.ranges));
                    let writes_nothing = t.ops.iter().all(|op| matches!(op, TxOp::DeleteRange(a, b) if a >= b));
                    let got = t.tx.commit();
                    match got {
                        Ok(()) => {
                            prop_assert!(!conflict || writes_nothing, "a conflict was missed");
                            for op in &t.ops {
                                apply_tx_op(&mut model, op);
                            }
                            log.extend(t.ops.iter().cloned());
                        }
                        Err(Error::Conflict) => {
                            // Flushes keep no commit from its check: the history holds
                            // every memtable of a run this short.
                            prop_assert!(conflict, "a conflict was reported for nothing (flushed since: {})", t.flushed);
                        }
                        Err(e) => panic!("commit failed: {e}"),
                    }
                }
                Step::Plain(op) => {
                    match op {
                        TxOp::Put(k, v) => db.put(key(k), [v]).unwrap(),
                        TxOp::Delete(k) => db.delete(key(k)).unwrap(),
                        TxOp::DeleteRange(a, b) => db.delete_range(key(a)..key(b)).unwrap(),
                    }
                    apply_tx_op(&mut model, &op);
                    log.push(op);
                }
                Step::Flush => {
                    db.flush().unwrap();
                    for t in slots.iter_mut().flatten() {
                        t.flushed = true;
                    }
                }
            }
            prop_assert_eq!(&common::model::scan(&db), &model);
        }
    }
}

const ACCOUNTS: u64 = 8;
const OPENING: u64 = 1_000;

fn amount(v: Option<bloomkv::Value>) -> u64 {
    v.map_or(0, |v| u64::from_le_bytes(v[..].try_into().unwrap()))
}

fn account(i: u64) -> String {
    format!("acct{i:02}")
}

/// The bank's total as one snapshot sees it, both keyspaces.
fn total(db: &Db, checking: &bloomkv::Keyspace, savings: &bloomkv::Keyspace) -> u64 {
    let snap = db.snapshot();
    let mut sum = 0;
    for ks in [checking, savings] {
        for kv in snap.keyspace(ks).unwrap().range(..) {
            sum += amount(Some(kv.unwrap().1));
        }
    }
    sum
}

/// Threads move money between accounts in two keyspaces with transactions (a transfer reads
/// both balances and writes both), with memtables small enough to flush often; a reader
/// checks the total in snapshots meanwhile. The total never changes, every transfer that
/// committed is counted, and after close and reopen the total is the same.
#[test]
fn bank_transfers_keep_the_total() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || Options::default().memtable_bytes(32 << 10);
    let db = Db::open(dir.path(), opts()).unwrap();
    let checking = db.keyspace("checking", KeyspaceOptions::default()).unwrap();
    let savings = db.keyspace("savings", KeyspaceOptions::default()).unwrap();
    let mut open = WriteBatch::new();
    for i in 0..ACCOUNTS {
        open.put_in(&checking, account(i), OPENING.to_le_bytes());
        open.put_in(&savings, account(i), OPENING.to_le_bytes());
    }
    db.write(&open, &WriteOptions::default()).unwrap();
    let expected = 2 * ACCOUNTS * OPENING;

    let threads = common::env::u64_or("BLOOMKV_TXN_THREADS", 4);
    let transfers = common::env::u64_or("BLOOMKV_TXN_TRANSFERS", 300);
    let committed = AtomicU64::new(0);
    let moved = AtomicU64::new(0);
    let running = AtomicBool::new(true);
    std::thread::scope(|s| {
        let checker = s.spawn(|| {
            let mut checks = 0u64;
            while running.load(Ordering::Acquire) || checks == 0 {
                assert_eq!(
                    total(&db, &checking, &savings),
                    expected,
                    "a snapshot saw money appear or vanish"
                );
                checks += 1;
            }
            checks
        });
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (db, checking, savings, committed, moved) =
                    (&db, &checking, &savings, &committed, &moved);
                s.spawn(move || {
                    let mut rng = t.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                    let mut next = || {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        rng
                    };
                    for _ in 0..transfers {
                        let (from, to) = (next() % ACCOUNTS, next() % ACCOUNTS);
                        let (src, dst) = match next() % 3 {
                            0 => (checking, savings),
                            1 => (savings, checking),
                            _ => (checking, checking),
                        };
                        if std::ptr::eq(src, dst) && from == to {
                            continue;
                        }
                        let want = next() % 50 + 1;
                        loop {
                            let got = db.transact(|tx| {
                                let have = amount(tx.keyspace(src)?.get(account(from))?);
                                let sum = amount(tx.keyspace(dst)?.get(account(to))?);
                                let amt = want.min(have);
                                tx.put_in(src, account(from), (have - amt).to_le_bytes())?;
                                tx.put_in(dst, account(to), (sum + amt).to_le_bytes())?;
                                tx.put(format!("log{t}"), amt.to_le_bytes())?;
                                Ok(amt)
                            });
                            match got {
                                Ok(amt) => {
                                    committed.fetch_add(1, Ordering::Relaxed);
                                    moved.fetch_add(amt, Ordering::Relaxed);
                                    break;
                                }
                                Err(Error::Conflict) => continue,
                                Err(e) => panic!("transfer failed: {e}"),
                            }
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        running.store(false, Ordering::Release);
        assert!(checker.join().unwrap() > 0);
    });
    assert!(committed.load(Ordering::Relaxed) > 0);
    assert!(moved.load(Ordering::Relaxed) > 0, "no money moved: the test checked nothing");
    assert_eq!(total(&db, &checking, &savings), expected);
    let before: Vec<Pair> = pairs(savings.range(..));
    drop((checking, savings));
    db.close().unwrap();
    drop(db);

    let db = Db::open(dir.path(), opts()).unwrap();
    let checking = db.existing_keyspace("checking").unwrap();
    let savings = db.existing_keyspace("savings").unwrap();
    assert_eq!(total(&db, &checking, &savings), expected);
    assert_eq!(pairs(savings.range(..)), before);
}

/// A synced commit is durable; a transaction dropped before its commit leaves nothing.
#[test]
fn committed_writes_survive_reopen_and_dropped_ones_vanish() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), Options::default()).unwrap();
        let mut tx = db.transaction();
        tx.put("kept", "1").unwrap();
        tx.delete_range("a".."c").unwrap();
        tx.commit_with(&WriteOptions::default().sync(true)).unwrap();
        let mut dropped = db.transaction();
        dropped.put("gone", "1").unwrap();
        drop(dropped);
        db.close().unwrap();
    }
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.get("kept").unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(db.get("gone").unwrap(), None);
    assert_eq!(db.get("a").unwrap(), None);
}

/// Power cuts on `FaultFs`: a synced commit survives, and so does every commit before it; a
/// commit after the last fsync survives whole or not at all, in both keyspaces; a refused or
/// dropped transaction before the synced commit leaves nothing.
#[test]
fn power_loss_keeps_synced_commits_and_no_part_of_any_other() {
    use bloomkv::fs::{CrashMode, FaultFs};
    use common::options::OptionsExt;

    let modes = [CrashMode::DropUnsynced]
        .into_iter()
        .chain((0..8).map(|seed| CrashMode::TornTails { seed }));
    let mut saw = [false; 2];
    for mode in modes {
        let fs = FaultFs::new();
        let db = Db::open("/db", Options::default().fault_fs(&fs)).unwrap();
        let one = db.keyspace("one", KeyspaceOptions::default()).unwrap();
        let two = db.keyspace("two", KeyspaceOptions::default()).unwrap();
        let commit = |name: &str, sync: bool| {
            let mut tx = db.transaction();
            drop(tx.keyspace(&one).unwrap().get(name).unwrap());
            tx.put_in(&one, name, "1").unwrap();
            tx.put_in(&two, name, "2").unwrap();
            tx.commit_with(&WriteOptions::default().sync(sync)).unwrap();
        };
        commit("before", false);
        let mut refused = db.transaction();
        drop(refused.get("k").unwrap());
        refused.put_in(&one, "refused", "1").unwrap();
        db.put("k", "v").unwrap();
        assert!(matches!(refused.commit(), Err(Error::Conflict)));
        let mut dropped = db.transaction();
        dropped.put_in(&one, "dropped", "1").unwrap();
        drop(dropped);
        // Makes everything before it durable: a refused commit that wrote would be found.
        commit("synced", true);
        commit("after", false);

        let fs = fs.crash(mode);
        drop((one, two, db));
        let db = Db::open("/db", Options::default().fault_fs(&fs)).unwrap();
        let one = db.existing_keyspace("one").unwrap();
        let two = db.existing_keyspace("two").unwrap();
        let has = |name: &str| {
            let (a, b) = (one.get(name).unwrap(), two.get(name).unwrap());
            assert_eq!(a.is_some(), b.is_some(), "{name}: half a commit after {mode:?}");
            a.is_some()
        };
        assert!(has("before") && has("synced"), "{mode:?}");
        saw[usize::from(has("after"))] = true;
        assert!(!has("refused") && !has("dropped"), "{mode:?}");
        assert_eq!(one.get("refused").unwrap(), None);
        assert_eq!(one.get("dropped").unwrap(), None);
    }
    assert!(saw[0], "no power cut lost the unsynced commit: the test checked nothing");
}

/// A transaction begun while an ingest runs — after it took its sequence number, before its
/// tables are in — reads without the ingest, and its commit after the ingest conflicts.
#[test]
fn a_transaction_begun_during_an_ingest_conflicts_with_it() {
    let (_dir, db) = seeded();
    let mut during: Option<Transaction> = None;
    let entries = ["p:k", "p:l"].into_iter().enumerate().map(|(i, k)| {
        // The ingest asks for its second entry once its sequence number is reserved.
        if i == 1 {
            let tx = db.transaction();
            assert_eq!(tx.get("p:k").unwrap().as_deref(), Some(&b"old"[..]));
            during = Some(tx);
        }
        Ok((k, "ingested"))
    });
    assert_eq!(db.try_ingest(entries).unwrap(), 2);
    let mut tx = during.expect("the ingest read its second entry");
    assert_eq!(tx.get("p:k").unwrap().as_deref(), Some(&b"old"[..]));
    tx.put("out", "1").unwrap();
    assert!(matches!(tx.commit(), Err(Error::Conflict)));
    assert_eq!(db.get("p:k").unwrap().as_deref(), Some(&b"ingested"[..]));
    assert_eq!(db.get("out").unwrap(), None);
}
