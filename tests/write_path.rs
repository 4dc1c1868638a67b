//! The write path under concurrent writers of every kind at once: unsynced writes (which log
//! directly when nobody is queued), synced writes and transactions (which queue behind a
//! leader), flushes and memtable switches (which only a leader makes). Bounded by operation
//! counts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bloomkv::{Db, Options, Readable, U64Add, WriteBatch, WriteOptions};

mod common;

use common::options::small_tables;

const COUNTERS: u64 = 4;

fn counter(db: &Db, k: u64) -> u64 {
    db.get(format!("c{k}")).unwrap().map_or(0, |v| U64Add::decode(&v).expect("a counter"))
}

fn options() -> Options {
    small_tables().merge_operator(Arc::new(U64Add))
}

/// Counters take increments two ways at once: unsynced merges (blind writes, logged
/// directly) and read-modify-write transactions (checked by the write leader before they
/// take their sequence numbers). A merge that slipped in between a transaction's check and
/// its write, or onto a memtable a leader was switching, would be overwritten or lost, and
/// its counter would end short of the increments acknowledged.
#[test]
fn direct_writes_never_slip_past_a_leaders_check_or_switch() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options()).unwrap();
    let merged = AtomicU64::new(0);
    let committed = AtomicU64::new(0);
    let txns_done = AtomicU64::new(0);
    let synced = WriteOptions::new().sync(true);
    std::thread::scope(|s| {
        // Merging until the transactions are done, so that the two overlap throughout.
        for t in 0..3u64 {
            let (db, merged, txns_done) = (&db, &merged, &txns_done);
            s.spawn(move || {
                let mut i = 0u64;
                while i < 6000 || txns_done.load(Ordering::Relaxed) < 2 {
                    db.merge(format!("c{}", (t + i) % COUNTERS), U64Add::operand(1)).unwrap();
                    merged.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
            });
        }
        for t in 0..2u64 {
            let (db, committed, txns_done) = (&db, &committed, &txns_done);
            s.spawn(move || {
                for i in 0..300u64 {
                    let key = format!("c{}", (t * 3 + i) % COUNTERS);
                    let done = db.transact(|tx| {
                        // Many reads make the leader's check of them long: the window a
                        // direct write must not slip into.
                        for j in 0..2000 {
                            tx.get(format!("pad{j}"))?;
                        }
                        let old = tx.get(&key)?.map_or(0, |v| U64Add::decode(&v).unwrap());
                        tx.put(&key, U64Add::operand(old + 1))?;
                        Ok(())
                    });
                    match done {
                        Ok(()) => {
                            committed.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(bloomkv::Error::Conflict) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
                txns_done.fetch_add(1, Ordering::Relaxed);
            });
        }
        // Synced writes and flushes keep a leader busy now and then, so the direct writers
        // keep switching between logging directly and queueing.
        let db = &db;
        s.spawn(move || {
            for i in 0..300u64 {
                let mut b = WriteBatch::new();
                b.put(format!("s{i:04}"), [7u8; 64]);
                db.write(&b, &synced).unwrap();
                if i % 50 == 0 {
                    db.flush().unwrap();
                }
            }
        });
    });
    let expected = merged.load(Ordering::Relaxed) + committed.load(Ordering::Relaxed);
    assert!(committed.load(Ordering::Relaxed) > 0, "no transaction committed");
    let total = |db: &Db| (0..COUNTERS).map(|k| counter(db, k)).sum::<u64>();
    assert_eq!(total(&db), expected);
    assert!((0..300).all(|i| db.get(format!("s{i:04}")).unwrap().is_some()));
    drop(db);
    let db = Db::open(dir.path(), options()).unwrap();
    assert_eq!(total(&db), expected, "after reopening");
}

/// Unsynced writers, some writing batches across two keyspaces, while another thread flushes:
/// every write is there, batches whole, before and after a reopen, and the sequence numbers
/// the writes took run on without a gap (the WAL replays them all).
#[test]
fn unsynced_writers_beside_flushes_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_tables()).unwrap();
    let other = db.keyspace("other", Default::default()).unwrap();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (db, other) = (&db, &other);
            s.spawn(move || {
                for i in 0..3000u64 {
                    let key = format!("w{t}/{i:05}");
                    if i % 3 == 0 {
                        let mut b = WriteBatch::new();
                        b.put(&key, i.to_le_bytes());
                        b.put_in(other, &key, (i + 1).to_le_bytes());
                        db.write(&b, &WriteOptions::new()).unwrap();
                    } else {
                        db.put(&key, i.to_le_bytes()).unwrap();
                    }
                }
            });
        }
        let db = &db;
        s.spawn(move || {
            for _ in 0..20 {
                db.flush().unwrap();
            }
        });
    });
    let check = |db: &Db, other: &bloomkv::Keyspace| {
        for t in 0..4u64 {
            for i in 0..3000u64 {
                let key = format!("w{t}/{i:05}");
                assert_eq!(db.get(&key).unwrap().as_deref(), Some(&i.to_le_bytes()[..]), "{key}");
                let theirs = other.get(&key).unwrap();
                match i % 3 {
                    0 => assert_eq!(theirs.as_deref(), Some(&(i + 1).to_le_bytes()[..]), "{key}"),
                    _ => assert_eq!(theirs, None, "{key}"),
                }
            }
        }
    };
    check(&db, &other);
    let last = db.stats().last_sequence;
    assert_eq!(last, 4 * 3000 + 4 * 1000, "one sequence number per put, none skipped");
    drop((db, other));
    let db = Db::open(dir.path(), small_tables()).unwrap();
    let other = db.keyspace("other", Default::default()).unwrap();
    check(&db, &other);
}

/// Snapshots taken while writers put single keys (each inserted into the memtable after the
/// WAL's lock is released, and published before earlier ones may have finished): a snapshot
/// reads the same twice, because it waits for the writes below its number still being
/// inserted; one that did not could see such a write appear between its two reads.
#[test]
fn snapshots_beside_single_put_writers_read_the_same_twice() {
    const WRITERS: u64 = 4;
    const KEYS: u64 = 64;
    const PUTS: u64 = 20_000;
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let db = &db;
                s.spawn(move || {
                    for i in 0..PUTS {
                        db.put(format!("w{w}/{:03}", i % KEYS), i.to_le_bytes()).unwrap();
                    }
                })
            })
            .collect();
        let (db, done) = (&db, &done);
        let reader = s.spawn(move || {
            let mut snapshots = 0u64;
            while !done.load(Ordering::Acquire) {
                let snap = db.snapshot();
                let first: Vec<_> = snap.range(..).map(Result::unwrap).collect();
                let second: Vec<_> = snap.range(..).map(Result::unwrap).collect();
                assert!(first == second, "a snapshot changed between two reads");
                snapshots += 1;
            }
            snapshots
        });
        for w in writers {
            w.join().unwrap();
        }
        done.store(true, Ordering::Release);
        assert!(reader.join().unwrap() > 0);
    });
    for w in 0..WRITERS {
        for k in 0..KEYS {
            let last = (PUTS - 1 - k) / KEYS * KEYS + k;
            let got = db.get(format!("w{w}/{k:03}")).unwrap();
            assert_eq!(got.as_deref(), Some(&last.to_le_bytes()[..]), "w{w}/{k:03}");
        }
    }
}
