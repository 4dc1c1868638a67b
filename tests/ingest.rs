//! `Db::ingest`: bulk loads of sorted entries straight into tables. The level each ingest
//! lands on, its place in the sequence history (snapshots, later writes, compaction), reopen,
//! refused input, a model run mixing ingests with every other operation, and writers and
//! readers around an ingest. Crash safety under injected faults is in `tests/faults.rs`.

use std::sync::mpsc;
use std::time::Duration;

use bloomkv::{Db, Error, Options, Readable, WriteOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

mod common;

use common::db::open_temp;
use common::files::{log_records, table_files, wal_files};
use common::keys::key6;
use common::model::{entries, scan, to_model, Model};
use common::options::OptionsExt;

/// Values name their key and the step that wrote them, so a stale value cannot pass.
fn value(k: u32, step: u64) -> Vec<u8> {
    let mut v = format!("k{k}-s{step}-").into_bytes();
    v.resize(v.len() + (step as usize * 7 + k as usize) % 120, b'.');
    v
}

/// Small tables and levels, so that a few thousand entries spread over several levels.
fn options() -> Options {
    Options::default()
        .memtable_bytes(8 << 10)
        .block_bytes(256)
        .target_table_bytes(4 << 10)
        .level_base_bytes(16 << 10)
        .l0_compaction_trigger(2)
        .l0_slowdown_trigger(4)
        .l0_stop_trigger(6)
}

/// Like [`options`], but with tables and L1 large beside the flushes and L0 allowed to hold
/// a few tables, so the newest L0 tables are often merged with each other; ingests still
/// write several tables, the last one small, so a merge can reach into one.
fn l0_merging() -> Options {
    options()
        .memtable_bytes(4 << 10)
        .target_table_bytes(8 << 10)
        .level_base_bytes(64 << 10)
        .l0_compaction_trigger(3)
        .l0_slowdown_trigger(8)
        .l0_stop_trigger(12)
}

/// Counts the compactions that merged L0 tables with each other.
#[derive(Default)]
struct L0Merges(std::sync::atomic::AtomicU64);

impl bloomkv::EventListener for L0Merges {
    fn on_compaction_end(&self, info: &bloomkv::events::CompactionInfo) {
        if info.reason == bloomkv::events::CompactionReason::L0Merge {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Options under which nothing happens in the background unless asked (no memtable fills
/// up, L0 never reaches its trigger), so a test decides exactly where tables lie.
fn still() -> Options {
    Options::default()
        .memtable_bytes(64 << 20)
        .block_bytes(256)
        .target_table_bytes(4 << 10)
        .l0_compaction_trigger(100)
        .l0_slowdown_trigger(200)
        .l0_stop_trigger(300)
}

/// The level of every table whose number is not in `before`: where the last ingest went.
fn new_table_levels(db: &Db, before: &[u64]) -> Vec<usize> {
    db.tables().into_iter().filter(|t| !before.contains(&t.number)).map(|t| t.level).collect()
}

fn table_numbers(db: &Db) -> Vec<u64> {
    db.tables().into_iter().map(|t| t.number).collect()
}

/// Ingests `range` of keys (every `step`-th) with values of `step_id`; returns the entries.
fn ingest_range(db: &Db, keys: std::ops::Range<u32>, step: usize, step_id: u64) -> Model {
    let m: Model = keys.step_by(step).map(|k| (key6(k.into()), value(k, step_id))).collect();
    assert_eq!(db.ingest(entries(&m)).unwrap(), m.len() as u64);
    m
}

#[test]
fn ingest_lands_on_the_deepest_level_its_key_range_leaves_free() {
    let (_dir, db) = open_temp(still());
    let last = db.stats().tables_per_level.len() - 1;
    let mut model = Model::new();

    // An empty tree: the last level, where compaction will never touch the tables again.
    let before = table_numbers(&db);
    model.extend(ingest_range(&db, 0..1000, 1, 1));
    let levels = new_table_levels(&db, &before);
    assert!(levels.len() > 1, "{levels:?}: 4 KiB tables, so an ingest writes several");
    assert!(levels.iter().all(|&l| l == last), "{levels:?}");

    // A disjoint range fits between the tables already there.
    let before = table_numbers(&db);
    model.extend(ingest_range(&db, 2000..2500, 1, 2));
    assert!(new_table_levels(&db, &before).iter().all(|&l| l == last));

    // Overlapping the last level: the level above it.
    let before = table_numbers(&db);
    model.extend(ingest_range(&db, 500..700, 3, 3));
    assert!(new_table_levels(&db, &before).iter().all(|&l| l == last - 1));

    // Overlapping that one too: one more level up.
    let before = table_numbers(&db);
    model.extend(ingest_range(&db, 600..620, 1, 4));
    assert!(new_table_levels(&db, &before).iter().all(|&l| l == last - 2));

    // Overlapping only the memtable: it is flushed to L0 first, and the ingest goes to L0,
    // above the older writes.
    db.put(key6(5000), value(5000, 5)).unwrap();
    db.put(key6(5002), value(5002, 5)).unwrap();
    let before = table_numbers(&db);
    model.extend(ingest_range(&db, 5000..5003, 1, 6));
    let added = db.tables().into_iter().filter(|t| !before.contains(&t.number)).count();
    assert_eq!(added, 2, "the flushed memtable and the ingest's table");
    assert!(new_table_levels(&db, &before).iter().all(|&l| l == 0));
    assert_eq!(db.stats().tables_per_level[0], 2);

    // Keys below everything, but spanning an L0 table's range: L0 again.
    let before = table_numbers(&db);
    model.extend(ingest_range(&db, 4999..5001, 1, 7));
    assert_eq!(new_table_levels(&db, &before), vec![0]);

    assert_eq!(scan(&db), model);
    for (k, v) in &model {
        assert_eq!(db.get(k).unwrap().as_deref(), Some(&v[..]));
    }
    db.compact().unwrap();
    assert_eq!(scan(&db), model);
    let s = db.stats();
    assert_eq!(s.ingests, 6);
    let ingested: u64 = model.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum();
    assert!(s.ingested_bytes >= ingested, "{} < {ingested}", s.ingested_bytes);
    assert!(s.ingest_bytes_written > 0);
    assert!(s.write_amplification() > 0.0);
}

#[test]
fn an_empty_ingest_changes_nothing() {
    let (_dir, db) = open_temp(still());
    db.put(b"a", b"1").unwrap();
    let seq = db.stats().last_sequence;
    assert_eq!(db.ingest(Vec::<(Vec<u8>, Vec<u8>)>::new()).unwrap(), 0);
    let s = db.stats();
    assert_eq!(s.last_sequence, seq);
    assert_eq!(s.tables_per_level.iter().sum::<usize>(), 0, "not even a flush");
    assert_eq!(s.ingests, 0);
    assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
}

/// An ingest takes one sequence number after every earlier write; snapshots and iterators
/// from before it do not see it, and writes after it override it.
#[test]
fn an_ingest_is_one_point_in_the_history() {
    let (dir, db) = open_temp(still());
    for k in 0..100 {
        db.put(key6(k.into()), value(k, 0)).unwrap();
    }
    let snap = db.snapshot();
    let iter = db.range(..);
    let seq = db.stats().last_sequence;
    let ingested = ingest_range(&db, 50..150, 1, 1);
    assert_eq!(db.stats().last_sequence, seq + 1, "one sequence number for the whole ingest");

    let old: Model = (0..100).map(|k| (key6(k.into()), value(k, 0))).collect();
    assert_eq!(snap.get(key6(60)).unwrap().as_deref(), Some(&value(60, 0)[..]));
    assert_eq!(snap.get(key6(120)).unwrap(), None);
    assert_eq!(to_model(snap.range(..)), old);
    assert_eq!(to_model(iter), old);

    let mut model = old;
    model.extend(ingested);
    assert_eq!(scan(&db), model);
    // A later snapshot does see it.
    assert_eq!(db.snapshot().get(key6(120)).unwrap().as_deref(), Some(&value(120, 1)[..]));

    // Later writes win, in the memtable, after a flush and after compactions merge them with
    // the ingested tables.
    db.put(key6(60), b"put after").unwrap();
    db.delete(key6(61)).unwrap();
    model.insert(key6(60), b"put after".to_vec());
    model.remove(&key6(61));
    assert_eq!(scan(&db), model);
    db.flush().unwrap();
    assert_eq!(scan(&db), model);
    db.compact().unwrap();
    assert_eq!(scan(&db), model);
    assert_eq!(db.get(key6(60)).unwrap().as_deref(), Some(&b"put after"[..]));
    assert_eq!(db.get(key6(61)).unwrap(), None);
    drop(snap);
    db.close().unwrap();
    let db = Db::open(dir.path(), still()).unwrap();
    assert_eq!(scan(&db), model);
}

/// An ingest over keys whose older versions lie deeper in the tree overrides them, and
/// compacting the two together keeps the ingested versions.
#[test]
fn ingested_values_override_older_data_through_compaction() {
    let (_dir, db) = open_temp(options());
    let mut model = Model::new();
    for k in 0..3000 {
        db.put(key6(k.into()), value(k, 0)).unwrap();
        model.insert(key6(k.into()), value(k, 0));
    }
    db.compact().unwrap();
    for k in (0..3000).step_by(5) {
        db.delete(key6(k)).unwrap();
        model.remove(&key6(k));
    }
    // Over tombstones in the memtable and values in the last level.
    model.extend(ingest_range(&db, 0..3000, 3, 1));
    assert_eq!(scan(&db), model);
    db.compact().unwrap();
    assert_eq!(scan(&db), model);
    for k in 0..3000 {
        assert_eq!(db.get(key6(k)).unwrap(), model.get(&key6(k)).cloned().map(Into::into), "{k}");
    }
}

#[test]
fn ingest_survives_reopen_and_a_process_crash() {
    let (dir, db) = open_temp(still());
    let mut model = Model::new();
    db.put(key6(1), value(1, 0)).unwrap();
    model.insert(key6(1), value(1, 0));
    model.extend(ingest_range(&db, 0..500, 2, 1));
    // Writes continue the sequence after the ingest in the new WAL segment.
    db.put(key6(2), value(2, 2)).unwrap();
    db.put(key6(1000), value(1000, 2)).unwrap();
    model.insert(key6(2), value(2, 2));
    model.insert(key6(1000), value(1000, 2));
    let seq = db.stats().last_sequence;
    assert_eq!(seq, 4);
    assert_eq!(wal_files(dir.path()).len(), 1, "the segment before the ingest is deleted");
    // The memtable belongs to the new segment (the next flush records it as the log number).
    assert!(db.stats().wal_bytes > 0);

    // What a process crash leaves: the directory as the OS holds it, no close.
    let image = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let e = e.unwrap();
        if e.file_name() != "LOCK" {
            std::fs::copy(e.path(), image.path().join(e.file_name())).unwrap();
        }
    }
    let crashed = Db::open(image.path(), still()).unwrap();
    assert_eq!(scan(&crashed), model);
    assert_eq!(crashed.stats().last_sequence, seq);
    drop(crashed);

    db.close().unwrap();
    let db = Db::open(dir.path(), still()).unwrap();
    assert_eq!(scan(&db), model);
    assert_eq!(db.stats().last_sequence, seq);
    model.extend(ingest_range(&db, 100..200, 1, 3));
    db.put(key6(150), value(150, 4)).unwrap();
    model.insert(key6(150), value(150, 4));
    drop(db);
    let db = Db::open(dir.path(), still()).unwrap();
    assert_eq!(scan(&db), model);
    assert_eq!(db.stats().last_sequence, seq + 2);
}

fn is_invalid<T: std::fmt::Debug>(r: bloomkv::Result<T>) -> bool {
    matches!(r, Err(Error::InvalidArgument(_)))
}

/// Refused input — out of order, repeated, too large, or a failing source — is refused
/// whether it shows at the first entry or after several tables were written: the error is
/// returned, no table file is left, the data is unchanged and the database goes on working.
#[test]
fn bad_input_is_refused_and_leaves_nothing_behind() {
    let (dir, db) = open_temp(still());
    let mut model = ingest_range(&db, 0..1000, 1, 0);
    db.put(key6(5000), b"in the memtable").unwrap();
    model.insert(key6(5000), b"in the memtable".to_vec());
    let mut seq = db.stats().last_sequence;
    let good = |n: u32| (0..n).map(|k| (key6(u64::from(10_000 + k)), value(k, 1)));
    let big_value = vec![0u8; bloomkv::MAX_VALUE_BYTES + 1];
    let big_key = vec![b'k'; bloomkv::MAX_KEY_BYTES + 1];
    // At the first entry nothing has happened yet, not even the memtable's flush.
    let tables = db.stats().tables_per_level;
    let r = db.ingest([(key6(20_000), big_value.clone())]);
    assert!(matches!(r, Err(Error::ValueTooLarge { .. })), "{r:?}");
    let r = db.ingest([(big_key.clone(), Vec::new())]);
    assert!(matches!(r, Err(Error::KeyTooLarge { .. })), "{r:?}");
    let r = db.try_ingest([Err::<(&[u8], &[u8]), _>(Error::InvalidArgument("no".into()))]);
    assert!(is_invalid(r));
    assert_eq!(db.stats().tables_per_level, tables);
    // Later: the second entry, and far more than one 4 KiB table's worth in.
    for at in [1u32, 800] {
        let before = table_files(dir.path());
        let then = |bad: (Vec<u8>, Vec<u8>)| good(at).chain(std::iter::once(bad));
        let last_good = key6(u64::from(10_000 + at - 1));
        // The ingest's own check, naming the entry, not only the table builder's.
        let r = db.ingest(then((last_good, b"repeat".to_vec())));
        let n = at + 1;
        assert!(
            matches!(&r, Err(Error::InvalidArgument(m)) if m.contains(&format!("entry {n} (\"key01")) && m.contains("repeats")),
            "{r:?}"
        );
        let r = db.ingest(then((key6(9_999), b"descending".to_vec())));
        assert!(
            matches!(&r, Err(Error::InvalidArgument(m)) if m.contains("sorts before")),
            "{r:?}"
        );
        let r = db.ingest(then((key6(20_000), big_value.clone())));
        assert!(matches!(r, Err(Error::ValueTooLarge { .. })), "{at}: {r:?}");
        let r = db.ingest(then((big_key.clone(), Vec::new())));
        assert!(matches!(r, Err(Error::KeyTooLarge { .. })), "{at}: {r:?}");
        let failing = good(at)
            .map(Ok)
            .chain(std::iter::once(Err(Error::InvalidArgument("the source failed".into()))));
        let r = db.try_ingest(failing);
        assert!(matches!(&r, Err(Error::InvalidArgument(m)) if m == "the source failed"), "{r:?}");
        // Only the memtable's flush may have added a table.
        let after = table_files(dir.path());
        let new: Vec<_> = after.iter().filter(|p| !before.contains(p)).collect();
        assert!(new.len() <= 1, "{at}: tables left behind: {new:?}");
        assert_eq!(after.len(), db.stats().tables_per_level.iter().sum::<usize>(), "{at}");
        // Each of the five refused ingests had reserved a sequence number, which holds
        // nothing.
        seq += 5;
        assert_eq!(db.stats().last_sequence, seq, "{at}");
        assert_eq!(scan(&db), model, "{at}");
    }
    assert_eq!(db.stats().ingests, 1);
    // Still usable: writes and ingests work.
    db.put(b"after", b"1").unwrap();
    model.insert(b"after".to_vec(), b"1".to_vec());
    model.extend(ingest_range(&db, 20_000..20_100, 1, 2));
    assert_eq!(scan(&db), model);
    db.close().unwrap();
    assert_eq!(scan(&Db::open(dir.path(), still()).unwrap()), model);
}

#[test]
fn a_read_only_handle_refuses_to_ingest() {
    let dir = tempfile::tempdir().unwrap();
    Db::open(dir.path(), still()).unwrap().close().unwrap();
    let db = Db::open_read_only(dir.path(), still()).unwrap();
    assert!(matches!(db.ingest([(b"k", b"v")]), Err(Error::ReadOnly)));
    assert!(matches!(db.try_ingest([Ok((b"k", b"v"))]), Err(Error::ReadOnly)));
    let db = Db::open(dir.path(), still()).unwrap();
    db.close().unwrap();
    assert!(matches!(db.ingest([(b"k", b"v")]), Err(Error::Closed)));
}

/// How long a test waits for a write made while an ingest runs before failing: a write that
/// waited for the ingest would never come, since the ingest waits for it.
const WATCHDOG: Duration = Duration::from_secs(120);

/// Runs `write` on another thread from inside an ingest's source, once it reaches entry
/// `at`, and lets the source go on only once `write` has returned: so the write is made, and
/// completes, while the ingest runs. A write that waited for the ingest to finish would never
/// return; the watchdog turns that into a failure.
fn ingest_with_write_midway(
    db: &Db,
    entries: impl Iterator<Item = (Vec<u8>, Vec<u8>)>,
    at: usize,
    write: impl FnOnce(&Db) + Send,
) -> u64 {
    let (go, start) = mpsc::channel::<()>();
    let (done, finished) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        s.spawn(move || {
            if start.recv().is_ok() {
                write(db);
                let _ = done.send(());
            }
        });
        let source = entries.enumerate().map(|(i, entry)| {
            if i == at {
                go.send(()).unwrap();
                finished
                    .recv_timeout(WATCHDOG)
                    .expect("a write made while an ingest runs waited for the ingest");
            }
            entry
        });
        db.ingest(source).unwrap()
    })
}

/// A write made while an ingest runs completes before the ingest does, and reads inside the
/// ingest's source see it at once. It is newer than the ingest, so it wins over the
/// ingested value of its key, through flush, compaction and reopen.
#[test]
fn writes_made_while_an_ingest_runs_complete_before_it_and_win() {
    let (dir, db) = open_temp(options());
    for k in 0..2000 {
        db.put(key6(k.into()), value(k, 0)).unwrap();
    }
    let seq = db.stats().last_sequence;
    let entries = (0..2000u32).map(|k| {
        if k % 100 == 0 {
            let want = if k == 1500 { b"written during the ingest".to_vec() } else { value(k, 0) };
            assert_eq!(db.get(key6(k.into())).unwrap().as_deref(), Some(&want[..]), "{k}");
        }
        (key6(k.into()), value(k, 1))
    });
    let n = ingest_with_write_midway(&db, entries, 1000, |db| {
        db.put(key6(1500), b"written during the ingest").unwrap();
        db.put(key6(5000), b"new during the ingest").unwrap();
    });
    assert_eq!(n, 2000);
    // The ingest's one sequence number came before the two puts'.
    assert_eq!(db.stats().last_sequence, seq + 1 + 2);
    let check = |db: &Db, when: &str| {
        assert_eq!(
            db.get(key6(1500)).unwrap().as_deref(),
            Some(&b"written during the ingest"[..]),
            "{when}"
        );
        assert_eq!(db.get(key6(5000)).unwrap().as_deref(), Some(&b"new during the ingest"[..]));
        assert_eq!(db.get(key6(1499)).unwrap().as_deref(), Some(&value(1499, 1)[..]), "{when}");
        let scanned = scan(db);
        assert_eq!(scanned.len(), 2001, "{when}");
        assert_eq!(scanned[&key6(1500)], b"written during the ingest", "{when}");
    };
    check(&db, "after the ingest");
    db.flush().unwrap();
    check(&db, "after a flush");
    db.compact().unwrap();
    check(&db, "after a compaction");
    db.close().unwrap();
    let db = Db::open(dir.path(), options()).unwrap();
    check(&db, "after reopening");
}

/// Writes made while an ingest runs may be flushed to L0 before it installs, under a file
/// number below some of the ingest's tables: L0 is ordered by sequence number, so lookups
/// still find the newer write above the ingest, and the open-time check and `verify` accept
/// the order.
#[test]
fn an_l0_table_of_writes_made_during_an_ingest_stays_above_it() {
    let (dir, db) = open_temp(still());
    // Older data on L0, below where the ingest goes.
    for k in (0..2000).step_by(10) {
        db.put(key6(k.into()), value(k, 0)).unwrap();
    }
    db.flush().unwrap();
    let before = table_numbers(&db);
    let entries = (0..2000u32).map(|k| (key6(k.into()), value(k, 1)));
    ingest_with_write_midway(&db, entries, 1000, |db| {
        db.put(key6(1500), b"newer").unwrap();
        db.put(key6(20), b"newer too").unwrap();
        db.flush().unwrap();
    });
    let new: Vec<_> = db.tables().into_iter().filter(|t| !before.contains(&t.number)).collect();
    assert!(new.iter().all(|t| t.level == 0), "{new:?}");
    // The flushed writes' table is numbered between the ingest's tables (written before and
    // after the write), which is what makes number order wrong here.
    let flushed = new.iter().find(|t| t.entries == 2).expect("the flushed writes' table");
    assert!(new.iter().any(|t| t.number < flushed.number && t.entries > 2), "{new:?}");
    assert!(new.iter().any(|t| t.number > flushed.number && t.entries > 2), "{new:?}");
    let check = |db: &Db, when: &str| {
        assert_eq!(db.get(key6(1500)).unwrap().as_deref(), Some(&b"newer"[..]), "{when}");
        assert_eq!(db.get(key6(20)).unwrap().as_deref(), Some(&b"newer too"[..]), "{when}");
        assert_eq!(db.get(key6(30)).unwrap().as_deref(), Some(&value(30, 1)[..]), "{when}");
        assert_eq!(db.get(key6(1501)).unwrap().as_deref(), Some(&value(1501, 1)[..]), "{when}");
        let got = db.multi_get([key6(1500), key6(20), key6(30)]).unwrap();
        let got: Vec<_> = got.iter().map(|v| v.as_deref().map(<[u8]>::to_vec)).collect();
        assert_eq!(
            got,
            vec![Some(b"newer".to_vec()), Some(b"newer too".to_vec()), Some(value(30, 1))],
            "{when}"
        );
        let scanned = scan(db);
        assert_eq!(scanned[&key6(1500)], b"newer", "{when}");
        assert_eq!(scanned[&key6(20)], b"newer too", "{when}");
    };
    check(&db, "after the ingest");
    db.close().unwrap();
    let report = bloomkv::check::database(std::sync::Arc::new(bloomkv::fs::StdFs), dir.path());
    assert_eq!(report.status(), bloomkv::check::Status::Ok, "{:?}", report.problems);
    let db = Db::open(dir.path(), still()).unwrap();
    assert!(db.tables().iter().any(|t| t.level == 0 && t.entries == 2));
    check(&db, "after reopening");
    db.compact().unwrap();
    check(&db, "after a compaction");
}

/// A WAL segment holding the record of a sequence number reserved for an ingest (what a
/// crash leaves before the memtable frozen with it is flushed) replays as a number taken
/// that holds nothing: the writes after it keep their places, and the next write goes on
/// after them.
#[test]
fn replay_skips_a_reserved_sequence_number() {
    let (dir, db) = open_temp(still());
    db.put(b"a", b"1").unwrap();
    let seq = db.stats().last_sequence;
    db.close().unwrap();
    let wal = wal_files(dir.path()).pop().unwrap();
    let mut records = log_records(&wal, std::fs::read(&wal).unwrap());
    // seq + 1 reserved (kind 3: no keyspace, key or value), then a put "b" -> "2" at seq + 2.
    let mut reserved = (seq + 1).to_le_bytes().to_vec();
    reserved.extend_from_slice(&1u32.to_le_bytes());
    reserved.push(3);
    let mut put = (seq + 2).to_le_bytes().to_vec();
    put.extend_from_slice(&1u32.to_le_bytes());
    put.extend_from_slice(&[1, 1, b'b', 1, b'2']);
    records.extend([reserved, put]);
    let mut w = bloomkv_tree::log::LogWriter::new(
        bloomkv::fs::FileSystem::create(&bloomkv::fs::StdFs, &wal).unwrap(),
    );
    for r in &records {
        w.add_record(r).unwrap();
    }
    w.sync().unwrap();
    drop(w);

    let db = Db::open(dir.path(), still()).unwrap();
    assert_eq!(db.stats().last_sequence, seq + 2);
    let want: Model = [(b"a".to_vec(), b"1".to_vec()), (b"b".to_vec(), b"2".to_vec())].into();
    assert_eq!(scan(&db), want);
    db.put(b"c", b"3").unwrap();
    assert_eq!(db.stats().last_sequence, seq + 3);
    db.flush().unwrap();
    db.close().unwrap();
    let db = Db::open(dir.path(), still()).unwrap();
    assert_eq!(scan(&db).len(), 3);
    assert_eq!(db.stats().last_sequence, seq + 3);
}

/// `close` while an ingest runs: the ingest stops with `Error::Closed` — soon, since it looks
/// at the flag every few thousand entries, or at the latest before it installs anything —
/// removes its tables, and `close` returns once it has; the database reopens as it was.
#[test]
fn close_during_an_ingest_stops_it_and_leaves_nothing_behind() {
    for total in [100_000u32, 1001] {
        let (dir, db) = open_temp(still());
        let before = ingest_range(&db, 0..100, 1, 0);
        let tables = table_files(dir.path());
        let pulled = std::cell::Cell::new(0u32);
        std::thread::scope(|s| {
            let mut closer = None;
            let source = (0..total).map(|k| {
                pulled.set(k + 1);
                if k == 1000 {
                    closer = Some(s.spawn(|| db.close()));
                    // Until `close` has begun (reads then fail with `Closed`).
                    while db.get(b"x").is_ok() {
                        std::thread::yield_now();
                    }
                }
                (key6(u64::from(10_000 + k)), value(k, 1))
            });
            let r = db.ingest(source);
            assert!(matches!(r, Err(Error::Closed)), "{total}: {r:?}");
            closer.unwrap().join().unwrap().unwrap();
        });
        assert!(pulled.get() < 1000 + 2 * 4096, "the ingest went on: {} entries", pulled.get());
        assert_eq!(table_files(dir.path()), tables, "{total}");
        let db = Db::open(dir.path(), still()).unwrap();
        assert_eq!(scan(&db), before, "{total}");
    }
}

/// Writers on several threads and repeated ingests of disjoint keys: every write and every
/// ingest is there once, and no ingest deadlocks with flushes or compactions.
#[test]
fn ingests_between_concurrent_writers() {
    // In memory: the small memtable makes hundreds of flushes, each with its fsyncs.
    let fs = bloomkv::fs::FaultFs::new();
    let dir = bloomkv::fs::fault::unique_dir("ingest-writers");
    let options = || options().fault_fs(&fs);
    let db = Db::open(&dir, options()).unwrap();
    const WRITERS: u32 = 3;
    const PER_WRITER: u32 = 3000;
    const INGESTS: u32 = 20;
    std::thread::scope(|s| {
        for t in 0..WRITERS {
            let db = &db;
            s.spawn(move || {
                for i in 0..PER_WRITER {
                    let k = 100_000 * (t + 1) + i;
                    db.put(key6(k.into()), value(k, 0)).unwrap();
                }
            });
        }
        for n in 0..INGESTS {
            let m: Model = (0..200)
                .map(|i| (key6(u64::from(n * 1000 + i * 3)), value(i, u64::from(n))))
                .collect();
            db.ingest(entries(&m)).unwrap();
        }
    });
    let s = db.stats();
    assert_eq!(s.last_sequence, u64::from(WRITERS * PER_WRITER + INGESTS));
    let all = scan(&db);
    assert_eq!(all.len() as u32, WRITERS * PER_WRITER + INGESTS * 200);
    db.close().unwrap();
    assert_eq!(scan(&Db::open(&dir, options()).unwrap()), all);
}

#[test]
fn verify_accepts_a_database_after_ingests() {
    let (dir, db) = open_temp(options());
    for k in 0..1500 {
        db.put(key6(k.into()), value(k, 0)).unwrap();
    }
    ingest_range(&db, 0..3000, 2, 1);
    ingest_range(&db, 10_000..12_000, 1, 2);
    db.put(key6(7), b"after").unwrap();
    db.close().unwrap();
    let report = bloomkv::check::database(std::sync::Arc::new(bloomkv::fs::StdFs), dir.path());
    assert_eq!(report.status(), bloomkv::check::Status::Ok, "{:?}", report.problems);
}

// ---------------------------------------------------------------------------------------
// The model run.

#[derive(Debug, Default)]
struct Coverage {
    ingests: u64,
    on_l0: u64,
    deeper: u64,
    over_memtable: u64,
    l0_merges: u64,
}

/// Random puts, deletes, batches, ingests (of fresh ranges and of ranges over the memtable,
/// L0 and deeper levels), flushes, compactions, snapshots and reopens, checked against a
/// `BTreeMap` throughout.
/// In memory (`FaultFs` without faults): the run fsyncs thousands of times.
fn model_run(seed: u64, steps: u64, cov: &mut Coverage, base: fn() -> Options) {
    let mut rng = StdRng::seed_from_u64(seed);
    let fs = bloomkv::fs::FaultFs::new();
    let dir = bloomkv::fs::fault::unique_dir("ingest-model");
    let merges = std::sync::Arc::new(L0Merges::default());
    let options = || base().fault_fs(&fs).event_listener(merges.clone());
    let mut db = Some(Db::open(&dir, options()).unwrap());
    let mut model = Model::new();
    let mut snap: Option<(bloomkv::Snapshot, Model)> = None;
    let mut fresh = 50_000u32;
    for step in 0..steps {
        let d = db.as_ref().unwrap();
        match rng.gen_range(0..100) {
            0..=44 => {
                let k = rng.gen_range(0..4000);
                d.put(key6(k.into()), value(k, step)).unwrap();
                model.insert(key6(k.into()), value(k, step));
            }
            45..=54 => {
                let k = rng.gen_range(0..4000u32);
                d.delete(key6(k.into())).unwrap();
                model.remove(&key6(k.into()));
            }
            55..=59 => {
                let mut b = bloomkv::WriteBatch::new();
                for _ in 0..rng.gen_range(1..6) {
                    let k = rng.gen_range(0..4000);
                    b.put(key6(k.into()), value(k, step));
                    model.insert(key6(k.into()), value(k, step));
                }
                d.write(&b, &WriteOptions::new()).unwrap();
            }
            60..=69 => {
                // Over existing keys (anywhere in the tree or the memtable), or fresh ones.
                let (lo, len) = if rng.gen_bool(0.25) {
                    fresh += 1000;
                    (fresh, rng.gen_range(1..600))
                } else {
                    (rng.gen_range(0..4000), rng.gen_range(1..800))
                };
                let stride = rng.gen_range(1..4);
                let memtable_overlaps =
                    model.range(key6(lo.into())..key6(u64::from(lo + len))).next().is_some()
                        && d.stats().memtable_bytes > 0;
                let before = table_numbers(d);
                let m: Model = (lo..lo + len)
                    .step_by(stride)
                    .map(|k| (key6(k.into()), value(k, step)))
                    .collect();
                assert_eq!(d.ingest(entries(&m)).unwrap(), m.len() as u64);
                model.extend(m);
                cov.ingests += 1;
                cov.over_memtable += u64::from(memtable_overlaps);
                let levels = new_table_levels(d, &before);
                // Compactions may have run meanwhile; the ingest's own tables share one level.
                if levels.contains(&0) {
                    cov.on_l0 += 1;
                } else {
                    cov.deeper += 1;
                }
                for _ in 0..5 {
                    let k = rng.gen_range(lo..lo + len);
                    assert_eq!(
                        d.get(key6(k.into())).unwrap().map(|v| v.to_vec()),
                        model.get(&key6(k.into())).cloned()
                    );
                }
            }
            70..=84 => {
                let k = rng.gen_range(0..4000u32);
                assert_eq!(
                    d.get(key6(k.into())).unwrap().map(|v| v.to_vec()),
                    model.get(&key6(k.into())).cloned(),
                    "seed {seed} step {step} get {k}"
                );
            }
            85..=87 => {
                let (a, b) = (rng.gen_range(0..4000u32), rng.gen_range(0..4000u32));
                let (lo, hi) = (key6(u64::from(a.min(b))), key6(u64::from(a.max(b))));
                let got = to_model(d.range(lo.clone()..hi.clone()));
                let want: Model =
                    model.range(lo..hi).map(|(k, v)| (k.clone(), v.clone())).collect();
                assert_eq!(got, want, "seed {seed} step {step} range");
            }
            88..=89 => snap = Some((d.snapshot(), model.clone())),
            90..=91 => {
                if let Some((s, m)) = &snap {
                    let got = to_model(s.range(..));
                    assert!(got == *m, "seed {seed} step {step}: snapshot changed");
                }
            }
            92..=94 => d.flush().unwrap(),
            95..=96 => d.compact().unwrap(),
            _ => {
                snap = None;
                db.take().unwrap().close().unwrap();
                db = Some(Db::open(&dir, options()).unwrap());
            }
        }
    }
    let d = db.take().unwrap();
    assert_eq!(scan(&d), model, "seed {seed}: final scan");
    drop(snap);
    d.close().unwrap();
    let d = Db::open(&dir, options()).unwrap();
    assert_eq!(scan(&d), model, "seed {seed}: after reopen");
    let report = bloomkv::check::database(std::sync::Arc::new(fs.clone()), &dir);
    assert!(report.problems.is_empty(), "seed {seed}: {:?}", report.problems);
    cov.l0_merges += merges.0.load(std::sync::atomic::Ordering::Relaxed);
}

#[test]
fn ingests_mixed_with_every_operation_match_a_btreemap() {
    let mut cov = Coverage::default();
    for seed in 0..4 {
        model_run(seed, 1500, &mut cov, options);
    }
    eprintln!("{cov:?}");
    assert!(cov.ingests > 300, "{cov:?}");
    assert!(cov.on_l0 > 20 && cov.deeper > 20 && cov.over_memtable > 20, "{cov:?}");
}

/// The same run where L0's newest tables are often merged with each other, ingested tables
/// among them (which share one sequence number, so a merge takes all of an ingest's L0
/// tables or none: the reopens and the final check would find an L0 table out of order).
#[test]
fn ingests_beside_l0_merges_match_a_btreemap() {
    let mut cov = Coverage::default();
    for seed in 10..14 {
        model_run(seed, 1500, &mut cov, l0_merging);
    }
    eprintln!("{cov:?}");
    assert!(cov.on_l0 > 20 && cov.l0_merges > 50, "{cov:?}");
}
