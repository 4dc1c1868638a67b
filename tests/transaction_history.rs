//! What a transaction's commit checks once memtables are flushed or ingests run while it is
//! open: flushes and ingests of keys it did not read refuse nothing, and a write to a key or
//! range it read is found however the write reached the tables.

use bloomkv::{Db, Error, KeyspaceOptions, Options, Readable, Transaction};

mod common;

use common::db::open_temp;
use common::model::pairs;

/// Small memtables, so a few writes fill one.
fn small() -> Options {
    Options::default().memtable_bytes(4 << 10)
}

fn seeded(opts: Options) -> (tempfile::TempDir, Db) {
    let (dir, db) = open_temp(opts);
    for k in ["a", "p:k", "p:l", "q:k"] {
        db.put(k, "old").unwrap();
    }
    (dir, db)
}

/// Writes keys no test transaction reads, enough to fill and switch several memtables, and
/// flushes each time.
fn unrelated_writes_and_flushes(db: &Db, round: usize) {
    for i in 0..200 {
        db.put(format!("z:{round}:{i:04}"), [b'x'; 64]).unwrap();
        if i % 50 == 49 {
            db.flush().unwrap();
        }
    }
    db.flush().unwrap();
}

fn commit(mut tx: Transaction, out: &str) -> bloomkv::Result<()> {
    tx.put(out, "tx").unwrap();
    tx.commit()
}

/// A named read a transaction makes.
type Reading = (&'static str, fn(&Transaction));

/// A named write made while a transaction is open.
type Writing = (&'static str, fn(&Db));

/// The reads the tests make, each covering `p:k`.
fn reads() -> Vec<Reading> {
    vec![
        ("get", |tx| drop(tx.get("p:k").unwrap())),
        ("multi_get", |tx| drop(tx.multi_get(["a", "p:k"]).unwrap())),
        ("range", |tx| drop(pairs(tx.range("p:".."p;")))),
        ("prefix", |tx| drop(pairs(tx.prefix("p:")))),
        ("cursor", |tx| tx.cursor("p:".."p;").seek_to_first().unwrap()),
    ]
}

#[test]
fn flushes_of_writes_a_transaction_did_not_read_do_not_conflict() {
    for (what, read) in reads() {
        let (_dir, db) = seeded(small());
        let tx = db.transaction();
        read(&tx);
        unrelated_writes_and_flushes(&db, 0);
        commit(tx, "out").unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(db.get("out").unwrap().as_deref(), Some(&b"tx"[..]), "{what}");
    }
}

/// A write to what the transaction read, made after its snapshot and then flushed (and
/// compacted, where a put and a later delete of the key both vanish), is still a conflict.
#[test]
fn a_write_flushed_after_the_snapshot_still_conflicts() {
    let writes: Vec<Writing> = vec![
        ("put", |db| db.put("p:k", "new").unwrap()),
        ("delete", |db| db.delete("p:k").unwrap()),
        ("delete_range", |db| db.delete_range("p:j".."p:kk").unwrap()),
        ("put then delete", |db| {
            db.put("p:k", "new").unwrap();
            db.flush().unwrap();
            db.delete("p:k").unwrap();
        }),
    ];
    for (what_read, read) in reads() {
        for &(what_write, write) in &writes {
            for compact in [false, true] {
                let (_dir, db) = seeded(small());
                let tx = db.transaction();
                read(&tx);
                write(&db);
                db.flush().unwrap();
                unrelated_writes_and_flushes(&db, 1);
                if compact {
                    db.compact().unwrap();
                }
                let got = commit(tx, "out");
                let case = format!("{what_read} vs {what_write}, compacted: {compact}");
                assert!(matches!(got, Err(Error::Conflict)), "{case}: {got:?}");
                assert_eq!(db.get("out").unwrap(), None, "{case}");
            }
        }
    }
}

/// A key inserted into a scanned range where the transaction found nothing, then flushed,
/// is a conflict (a phantom).
#[test]
fn a_flushed_phantom_conflicts() {
    let (_dir, db) = seeded(small());
    let tx = db.transaction();
    assert!(pairs(tx.prefix("r:")).is_empty());
    db.put("r:new", "x").unwrap();
    unrelated_writes_and_flushes(&db, 0);
    assert!(matches!(commit(tx, "out"), Err(Error::Conflict)));
}

/// The history is bounded: once the memtable active at the snapshot has left it, a
/// transaction that read something is refused even if nothing it read was written.
#[test]
fn past_the_history_a_commit_is_refused() {
    let (_dir, db) = seeded(small().memtable_history_bytes(0));
    let tx = db.transaction();
    drop(tx.get("p:k").unwrap());
    unrelated_writes_and_flushes(&db, 0);
    assert!(matches!(commit(tx, "out"), Err(Error::Conflict)));

    let (_dir, db) = seeded(small().memtable_history_bytes(8 << 10));
    let tx = db.transaction();
    drop(tx.get("p:k").unwrap());
    db.put("z", "x").unwrap();
    db.flush().unwrap();
    let far = db.transaction();
    drop(far.get("p:k").unwrap());
    // Many flushes: far more than 8 KiB of memtables leave the history.
    for round in 0..4 {
        unrelated_writes_and_flushes(&db, round);
    }
    assert!(matches!(commit(tx, "out"), Err(Error::Conflict)));
    assert!(matches!(commit(far, "out"), Err(Error::Conflict)));
    // A transaction that read nothing depends on nothing.
    let tx = db.transaction();
    unrelated_writes_and_flushes(&db, 9);
    commit(tx, "out").unwrap();
}

/// Flushed memtables stay in the history only while an open transaction may need them: none
/// without a transaction, and those older than every open transaction's snapshot leave at
/// the next flush once the transactions that needed them are gone.
#[test]
fn the_history_keeps_only_what_open_transactions_need() {
    let (_dir, db) = seeded(small());
    let history = |db: &Db| {
        let stats = db.stats();
        assert_eq!(stats.memtable_history_bytes, stats.keyspaces[0].memtable_history_bytes);
        stats.memtable_history_bytes
    };
    unrelated_writes_and_flushes(&db, 0);
    assert_eq!(history(&db), 0, "no transaction: nothing kept");

    let (conflicting, clean) = (db.transaction(), db.transaction());
    drop(conflicting.get("p:k").unwrap());
    drop(clean.get("a").unwrap());
    db.put("p:k", "new").unwrap();
    unrelated_writes_and_flushes(&db, 1);
    let both = history(&db);
    assert!(both > 0, "the flushes since the transactions began are kept");
    let later = db.transaction();
    drop(later.get("q:k").unwrap());
    unrelated_writes_and_flushes(&db, 2);
    assert!(history(&db) > both);
    // The write to `p:k` is in a flushed memtable: found in the history, and `clean`, which
    // began at the same moment, commits, so the history reaches back to their snapshots.
    assert!(matches!(commit(conflicting, "out"), Err(Error::Conflict)));
    commit(clean, "out").unwrap();
    let only_later = history(&db);
    db.put("z", "x").unwrap();
    db.flush().unwrap();
    let after = history(&db);
    assert!(0 < after && after < only_later, "{after} of {only_later}: the older ones left");
    commit(later, "out2").unwrap();
    assert_eq!(history(&db), after, "kept until the next install");
    db.put("z", "y").unwrap();
    db.flush().unwrap();
    assert_eq!(history(&db), 0, "no transaction open: nothing kept");
}

/// Ingests of keys the transaction did not read refuse nothing; one of a key it read, or
/// into a range it scanned, conflicts.
#[test]
fn ingests_conflict_only_where_they_overlap_what_was_read() {
    for (what, read) in reads() {
        let (_dir, db) = seeded(Options::default());
        let tx = db.transaction();
        read(&tx);
        db.ingest([("b", "ingested"), ("c", "ingested")]).unwrap();
        db.ingest([("x:1", "ingested"), ("x:2", "ingested")]).unwrap();
        commit(tx, "out").unwrap_or_else(|e| panic!("{what}: {e}"));

        // The ingest's range holds the key read, though not the key itself.
        let (_dir, db) = seeded(Options::default());
        let tx = db.transaction();
        read(&tx);
        db.ingest([("o", "ingested"), ("z", "ingested")]).unwrap();
        assert!(matches!(commit(tx, "out"), Err(Error::Conflict)), "{what}");

        let (_dir, db) = seeded(Options::default());
        let tx = db.transaction();
        read(&tx);
        db.ingest([("p:k", "ingested")]).unwrap();
        assert!(matches!(commit(tx, "out"), Err(Error::Conflict)), "{what}");
        assert_eq!(db.get("out").unwrap(), None, "{what}");
    }
}

/// An ingest's keys are in one keyspace: the same keys read in another do not conflict.
#[test]
fn an_ingest_into_another_keyspace_does_not_conflict() {
    let (_dir, db) = seeded(Options::default());
    let other = db.keyspace("other", KeyspaceOptions::default()).unwrap();
    let tx = db.transaction();
    drop(tx.get("p:k").unwrap());
    other.ingest([("p:k", "ingested")]).unwrap();
    commit(tx, "out").unwrap();

    let tx = other.transaction();
    drop(tx.get("p:k").unwrap());
    db.ingest([("p:k", "ingested")]).unwrap();
    other.ingest([("a", "ingested")]).unwrap();
    commit(tx, "out").unwrap();
    let tx = other.transaction();
    drop(tx.get("p:k").unwrap());
    other.ingest([("p:k", "again")]).unwrap();
    assert!(matches!(commit(tx, "out"), Err(Error::Conflict)));
}

/// A transaction begun while an ingest was writing its tables does not see them; once the
/// ingest is in, only what it overlaps conflicts.
#[test]
fn a_transaction_begun_during_an_ingest_conflicts_only_with_its_keys() {
    let (_dir, db) = seeded(Options::default());
    let mut during: Vec<Transaction> = Vec::new();
    let entries = ["m:1", "m:2", "m:3"].into_iter().enumerate().map(|(i, k)| {
        // The ingest asks for its second entry once its sequence number is reserved.
        if i == 1 {
            for _ in 0..3 {
                during.push(db.transaction());
            }
        }
        Ok((k, "ingested"))
    });
    assert_eq!(db.try_ingest(entries).unwrap(), 3);
    let [below, inside, above]: [Transaction; 3] = during.try_into().ok().unwrap();
    assert_eq!(below.get("a").unwrap().as_deref(), Some(&b"old"[..]));
    assert_eq!(inside.get("m:2").unwrap(), None);
    assert_eq!(above.get("p:k").unwrap().as_deref(), Some(&b"old"[..]));
    commit(below, "out1").unwrap();
    assert!(matches!(commit(inside, "out2"), Err(Error::Conflict)));
    commit(above, "out3").unwrap();
}

/// Many ingests of keys a transaction did not read: it commits while they are within the
/// bounded record of ingests, and is refused once the record no longer reaches back to it.
#[test]
fn past_the_ingest_record_a_commit_is_refused() {
    let (_dir, db) = seeded(Options::default());
    let tx = db.transaction();
    drop(tx.get("p:k").unwrap());
    db.ingest([("x", "1")]).unwrap();
    commit(tx, "out").unwrap();
    let tx = db.transaction();
    drop(tx.get("p:k").unwrap());
    for i in 0..300 {
        db.ingest([(format!("x:{i:04}"), "1")]).unwrap();
    }
    assert!(matches!(commit(tx, "out"), Err(Error::Conflict)));
}
