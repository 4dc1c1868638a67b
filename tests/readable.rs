//! `Readable`: one read API, the same answers from every reader — the database, a keyspace,
//! snapshots, transactions and a transaction's view of another keyspace — over the same data,
//! and a transaction view's reads checked at the commit like the transaction's own.

use bloomkv::{
    Db, Error, Keyspace, KeyspaceOptions, Options, ReadCursor, Readable, TransactionKeyspace,
};

/// What every reader below sees, in key order.
const LIVE: [(&str, &str); 6] = [
    ("a", "1"),
    ("b", "2"),
    ("c", "3"),
    ("user:1", "ada"),
    ("user:2", "grace"),
    ("vendor:1", "acme"),
];

fn keys(items: impl Iterator<Item = bloomkv::Result<(Vec<u8>, bloomkv::Value)>>) -> Vec<String> {
    items.map(|kv| String::from_utf8(kv.unwrap().0).unwrap()).collect()
}

fn strs(keys: &[&str]) -> Vec<String> {
    keys.iter().map(|k| k.to_string()).collect()
}

fn at<C: ReadCursor>(cursor: &C) -> Option<String> {
    cursor.key().map(|k| String::from_utf8(k.to_vec()).unwrap())
}

/// Every read of `r`, which should see exactly [`LIVE`].
fn check<R: Readable>(r: &R, who: &str) {
    for (k, v) in LIVE {
        assert_eq!(r.get(k).unwrap().as_deref(), Some(v.as_bytes()), "{who}: get {k}");
        assert!(r.contains_key(k).unwrap(), "{who}: contains {k}");
    }
    for k in ["missing", "r:1", "r:2", "x:gone", ""] {
        assert_eq!(r.get(k).unwrap(), None, "{who}: get {k}");
        assert!(!r.contains_key(k).unwrap(), "{who}: contains {k}");
    }
    let got = r.multi_get(["c", "missing", "a", "r:1", "a"]).unwrap();
    let got: Vec<_> = got.iter().map(|v| v.as_deref()).collect();
    assert_eq!(got, [Some(&b"3"[..]), None, Some(b"1"), None, Some(b"1")], "{who}: multi_get");
    assert_eq!(r.multi_get(Vec::<Vec<u8>>::new()).unwrap(), [], "{who}: multi_get of nothing");

    let all: Vec<String> = LIVE.iter().map(|(k, _)| k.to_string()).collect();
    assert_eq!(keys(r.range(..)), all, "{who}: range");
    let back: Vec<String> = all.iter().rev().cloned().collect();
    assert_eq!(keys(r.range(..).rev()), back, "{who}: range rev");
    assert_eq!(keys(r.range("b".."user:2")), strs(&["b", "c", "user:1"]), "{who}");
    assert_eq!(keys(r.range("b"..="user:2").rev()), strs(&["user:2", "user:1", "c", "b"]));
    let values: Vec<_> = r.range(..).map(|kv| kv.unwrap().1.to_vec()).collect();
    let want: Vec<_> = LIVE.iter().map(|(_, v)| v.as_bytes().to_vec()).collect();
    assert_eq!(values, want, "{who}: values");

    assert_eq!(keys(r.prefix("user:")), strs(&["user:1", "user:2"]), "{who}: prefix");
    assert_eq!(keys(r.prefix("user:").rev()), strs(&["user:2", "user:1"]), "{who}");
    assert_eq!(keys(r.prefix("r:")), Vec::<String>::new(), "{who}: range-deleted");
    let probed = r.prefixes_exist(&["user:", "r:", "vendor:", "x:", "zzz", "b"]).unwrap();
    assert_eq!(probed, [true, false, true, false, false, true], "{who}: prefixes_exist");

    let mut cursor = r.cursor(..);
    cursor.seek("bb").unwrap();
    assert_eq!(at(&cursor).as_deref(), Some("c"), "{who}: seek");
    assert_eq!(cursor.value(), Some(&b"3"[..]), "{who}: value");
    cursor.seek_for_prev("bb").unwrap();
    assert_eq!(at(&cursor).as_deref(), Some("b"), "{who}: seek_for_prev");
    cursor.next().unwrap();
    assert_eq!(at(&cursor).as_deref(), Some("c"), "{who}: next");
    cursor.prev().unwrap();
    cursor.prev().unwrap();
    assert_eq!(at(&cursor).as_deref(), Some("a"), "{who}: prev");
    cursor.prev().unwrap();
    assert!(!cursor.valid() && cursor.key().is_none(), "{who}: before the first");
    cursor.seek_to_last().unwrap();
    assert_eq!(at(&cursor).as_deref(), Some("vendor:1"), "{who}: seek_to_last");
    cursor.seek("r:").unwrap(); // range-deleted keys are skipped
    assert_eq!(at(&cursor).as_deref(), Some("user:1"), "{who}: seek over deleted");
    cursor.seek_to_first().unwrap();
    assert_eq!(at(&cursor).as_deref(), Some("a"), "{who}: seek_to_first");
    let mut inside = r.cursor("b".."user:2");
    inside.seek_to_last().unwrap();
    assert_eq!(at(&inside).as_deref(), Some("user:1"), "{who}: bounded seek_to_last");
    inside.next().unwrap();
    assert!(!inside.valid(), "{who}: past the range");
    inside.seek("0").unwrap();
    assert_eq!(at(&inside).as_deref(), Some("b"), "{who}: seek before the range");

    let (first, value) = r.first_key_value().unwrap().unwrap();
    assert_eq!((&first[..], &value[..]), (&b"a"[..], &b"1"[..]), "{who}: first");
    let (last, value) = r.last_key_value().unwrap().unwrap();
    assert_eq!((&last[..], &value[..]), (&b"vendor:1"[..], &b"acme"[..]), "{who}: last");
}

/// A reader of an empty keyspace finds nothing, every way.
fn check_empty<R: Readable>(r: &R, who: &str) {
    assert_eq!(r.first_key_value().unwrap(), None, "{who}");
    assert_eq!(r.last_key_value().unwrap(), None, "{who}");
    assert!(!r.contains_key("a").unwrap(), "{who}");
    assert_eq!(r.range(..).count(), 0, "{who}");
    assert_eq!(r.prefixes_exist(&["", "a"]).unwrap(), [false, false], "{who}");
    let mut cursor = r.cursor(..);
    cursor.seek_to_first().unwrap();
    assert!(!cursor.valid(), "{who}");
}

/// Writes [`LIVE`] to the default keyspace and to `ks` — less "b", plus "x:gone" and the
/// soon range-deleted "r:1" and "r:2" — partly flushed to tables.
fn seed(db: &Db, ks: &Keyspace) {
    for (k, v) in LIVE.iter().filter(|(k, _)| *k != "b") {
        db.put(k, v).unwrap();
        ks.put(k, v).unwrap();
    }
    for k in ["x:gone", "r:1", "r:2"] {
        db.put(k, "old").unwrap();
        ks.put(k, "old").unwrap();
    }
    db.flush().unwrap();
}

/// The writes that make the seeded data [`LIVE`].
fn finish(db: &Db, ks: &Keyspace) {
    db.put("b", "2").unwrap();
    ks.put("b", "2").unwrap();
    db.delete("x:gone").unwrap();
    ks.delete("x:gone").unwrap();
    db.delete_range("r:".."r;").unwrap();
    ks.delete_range("r:".."r;").unwrap();
}

#[test]
fn every_reader_reads_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let ks = db.keyspace("ks", KeyspaceOptions::default()).unwrap();
    let empty = db.keyspace("empty", KeyspaceOptions::default()).unwrap();
    seed(&db, &ks);

    // A transaction that makes the seeded data `LIVE` with writes of its own, in its keyspace
    // and in `ks`: its reads see the snapshot with its writes over it.
    let mut tx = db.transaction();
    tx.put("b", "2").unwrap();
    tx.delete("x:gone").unwrap();
    tx.delete_range("r:".."r;").unwrap();
    tx.put_in(&ks, "b", "2").unwrap();
    tx.delete_in(&ks, "x:gone").unwrap();
    tx.delete_range_in(&ks, "r:".."r;").unwrap();
    // One over `ks` that wrote nothing, made before the database was finished: it must not
    // see `LIVE`, which tells the transaction's reads are its snapshot's.
    let early = ks.transaction();
    assert_eq!(early.get("b").unwrap(), None);
    assert_eq!(early.keyspace(&ks).unwrap().get("x:gone").unwrap().as_deref(), Some(&b"old"[..]));

    finish(&db, &ks);
    let snap = db.snapshot();
    let ks_snap = ks.snapshot();
    let later = db.transaction(); // no writes of its own
    let ks_tx = ks.transaction();

    check(&db, "db");
    check(&ks, "keyspace");
    check(&snap, "snapshot");
    check(&snap.keyspace(&ks).unwrap(), "snapshot in ks");
    check(&ks_snap, "keyspace snapshot");
    check(&tx, "transaction");
    check(&tx.keyspace(&ks).unwrap(), "transaction in ks");
    check(&later, "later transaction");
    check(&later.keyspace(&ks).unwrap(), "later transaction in ks");
    check(&ks_tx, "keyspace transaction");
    check(&ks_tx.keyspace(&ks).unwrap(), "keyspace transaction in ks");

    // The snapshots and transactions keep their view while the database moves on.
    db.delete_range(..).unwrap();
    ks.delete_range(..).unwrap();
    check(&snap, "snapshot, after");
    check(&tx.keyspace(&ks).unwrap(), "transaction in ks, after");
    check_empty(&db, "db, after");
    check_empty(&ks, "keyspace, after");
    check_empty(&empty, "empty keyspace");
    check_empty(&later.keyspace(&empty).unwrap(), "transaction in the empty keyspace");
}

/// Whether a transaction that reads through `read` and then sees `write` happen fails to
/// commit.
fn conflicts(
    db: &Db,
    ks: &Keyspace,
    own_write: bool,
    read: impl Fn(&TransactionKeyspace<'_>),
    write: impl Fn(&Keyspace),
) -> bool {
    ks.delete_range(..).unwrap();
    ks.put("k", "v").unwrap();
    ks.put("p/1", "v").unwrap();
    let mut tx = db.transaction();
    if own_write {
        // A write of its own in the keyspace, so reads merge it over the snapshot.
        tx.put_in(ks, "own", "1").unwrap();
    }
    read(&tx.keyspace(ks).unwrap());
    write(ks);
    tx.put("out", "1").unwrap();
    match tx.commit() {
        Ok(()) => false,
        Err(Error::Conflict) => true,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn a_transaction_keyspace_records_its_reads() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let ks = db.keyspace("ks", KeyspaceOptions::default()).unwrap();
    let other = db.keyspace("other", KeyspaceOptions::default()).unwrap();
    for own in [false, true] {
        let c = |read: &dyn Fn(&TransactionKeyspace<'_>), write: &dyn Fn(&Keyspace)| {
            conflicts(&db, &ks, own, read, write)
        };
        let get = |t: &TransactionKeyspace<'_>| drop(t.get("k").unwrap());
        assert!(c(&get, &|ks| ks.put("k", "changed").unwrap()), "own {own}: get");
        assert!(!c(&get, &|ks| ks.put("k2", "x").unwrap()), "own {own}: another key");
        assert!(!c(&get, &|_| other.put("k", "x").unwrap()), "own {own}: another keyspace");
        let contains = |t: &TransactionKeyspace<'_>| assert!(t.contains_key("k").unwrap());
        assert!(c(&contains, &|ks| ks.delete("k").unwrap()), "own {own}: contains_key");
        let many = |t: &TransactionKeyspace<'_>| drop(t.multi_get(["a", "k"]).unwrap());
        assert!(c(&many, &|ks| ks.put("a", "new").unwrap()), "own {own}: multi_get");
        // A scan's whole range counts, phantoms included, however far it went.
        let scan = |t: &TransactionKeyspace<'_>| drop(t.range("j".."m").next());
        assert!(c(&scan, &|ks| ks.put("l", "x").unwrap()), "own {own}: range");
        assert!(!c(&scan, &|ks| ks.put("z", "x").unwrap()), "own {own}: outside the range");
        let prefix = |t: &TransactionKeyspace<'_>| drop(t.prefix("p/").next_back());
        assert!(c(&prefix, &|ks| ks.put("p/0", "x").unwrap()), "own {own}: prefix");
        let probe = |t: &TransactionKeyspace<'_>| drop(t.prefixes_exist(&["q/"]).unwrap());
        assert!(c(&probe, &|ks| ks.put("q/9", "x").unwrap()), "own {own}: prefixes_exist");
        assert!(!c(&probe, &|ks| ks.put("p/9", "x").unwrap()), "own {own}: another prefix");
        let cursor = |t: &TransactionKeyspace<'_>| {
            let mut c = t.cursor("j".."m");
            c.seek_to_first().unwrap();
        };
        assert!(c(&cursor, &|ks| ks.put("j", "x").unwrap()), "own {own}: cursor");
        let first = |t: &TransactionKeyspace<'_>| drop(t.first_key_value().unwrap());
        assert!(c(&first, &|ks| ks.put("0", "x").unwrap()), "own {own}: first_key_value");
        let last = |t: &TransactionKeyspace<'_>| drop(t.last_key_value().unwrap());
        assert!(c(&last, &|ks| ks.put("zz", "x").unwrap()), "own {own}: last_key_value");
        assert!(!c(&|_| {}, &|ks| ks.put("k", "x").unwrap()), "own {own}: nothing read");
    }
}

/// A read answered by the transaction's own write depends on nothing else: not recorded.
#[test]
fn a_transaction_keyspace_sees_its_own_writes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let ks = db.keyspace("ks", KeyspaceOptions::default()).unwrap();
    let mut tx = db.transaction();
    tx.put_in(&ks, "k", "mine").unwrap();
    assert_eq!(tx.keyspace(&ks).unwrap().get("k").unwrap().as_deref(), Some(&b"mine"[..]));
    assert_eq!(tx.get("k").unwrap(), None); // the transaction's own keyspace is the default
    ks.put("k", "theirs").unwrap();
    tx.commit().unwrap(); // "k" was answered by its own write
    assert_eq!(ks.get("k").unwrap().as_deref(), Some(&b"mine"[..]));

    // Probing prefixes merges its writes too: a put adds a key, a delete hides one.
    let mut tx = db.transaction();
    tx.put_in(&ks, "j/1", "mine").unwrap();
    tx.delete_in(&ks, "k").unwrap();
    assert_eq!(tx.prefixes_exist(&["j/", "k"]).unwrap(), [false, false]); // the default keyspace
    let probed = tx.keyspace(&ks).unwrap().prefixes_exist(&["j/", "k", "l"]).unwrap();
    assert_eq!(probed, [true, false, false]);

    let (_other_dir, other) = {
        let d = tempfile::tempdir().unwrap();
        let o = Db::open(d.path(), Options::default()).unwrap();
        (d, o)
    };
    let foreign = other.keyspace("ks", KeyspaceOptions::default()).unwrap();
    let tx = db.transaction();
    assert!(matches!(tx.keyspace(&foreign), Err(Error::ForeignKeyspace { .. })));
}
