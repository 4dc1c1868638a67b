//! Engine behaviour: API basics, recovery after close, drop and crash, torn WAL tails, the
//! LOCK, concurrent readers and writers.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use bloomkv::{Db, Error, Options, Readable, WriteBatch, WriteOptions};

mod common;

use common::db::open_temp;
use common::files::{log_records, table_files, wal_files};
use common::keys::key8;
use common::model::{entries, keys_of, pairs};
use common::options::{small_tables, OptionsExt};

/// Options under which nothing happens in the background for small tests, so a copy of the
/// directory is a faithful picture of what a crash would leave.
fn quiet() -> Options {
    Options::default().memtable_bytes(64 << 20)
}

/// Copies the database directory as the OS holds it right now: what a process crash leaves.
fn crash_image(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_name() != "LOCK" {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// One handle is shared between threads.
#[test]
fn db_and_its_views_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Db>();
    assert_send_sync::<bloomkv::Snapshot>();
    fn assert_send<T: Send>() {}
    assert_send::<bloomkv::DbIterator>();
    assert_send::<bloomkv::Cursor>();
}

#[test]
fn put_get_delete_overwrite() {
    let (_dir, db) = open_temp(Options::default());
    assert_eq!(db.get(b"a").unwrap(), None);
    db.put(b"a", b"1").unwrap();
    db.put(b"b", b"2").unwrap();
    db.put(b"a", b"3").unwrap();
    assert_eq!(db.get(b"a").unwrap().unwrap(), b"3");
    db.delete(b"b").unwrap();
    assert_eq!(db.get(b"b").unwrap(), None);
    db.put(b"", b"empty key").unwrap();
    assert_eq!(db.get(b"").unwrap().unwrap(), b"empty key");
    db.put(b"big", vec![7u8; 1 << 20]).unwrap();
    db.flush().unwrap();
    assert_eq!(db.get(b"big").unwrap().unwrap().len(), 1 << 20);
    assert_eq!(db.get(b"a").unwrap().unwrap(), b"3");
    assert_eq!(db.get(b"b").unwrap(), None);
    let s = db.stats();
    assert_eq!(s.tables_per_level[0], 1);
    assert!(s.filter_memory_bytes > 0 && s.index_memory_bytes > 0);
    // Process-wide, so other tests' filters may add to it, but never below this database's.
    assert!(s.filter_chunk_bytes >= s.filter_memory_bytes);
    db.close().unwrap();
}

/// A thread reuses its queue entry and batch buffer from one write to the next: nothing of one
/// write may leak into the next, whatever kinds of write follow each other, and sequence
/// numbers stay consecutive.
#[test]
fn consecutive_writes_of_every_kind_on_one_thread_are_independent() {
    let (dir, db) = open_temp(quiet());
    db.put(b"a", b"1").unwrap();
    let mut b = WriteBatch::new();
    b.put(b"b", b"2");
    b.put(b"c", b"3");
    db.write(&b, &WriteOptions::new().sync(false)).unwrap();
    db.delete(b"a").unwrap();
    db.sync().unwrap();
    // Too big a buffer to be kept for the next write.
    db.put(b"d", vec![9u8; 100_000]).unwrap();
    db.write(&WriteBatch::new(), &WriteOptions::new().sync(true)).unwrap();
    db.flush().unwrap();
    db.put(b"e", b"5").unwrap();
    let check = |db: &Db| {
        assert_eq!(db.stats().last_sequence, 6);
        let all: Vec<(Vec<u8>, usize)> = db
            .range(..)
            .map(|kv| kv.map(|(k, v)| (k.to_vec(), v.len())))
            .collect::<Result<_, _>>()
            .unwrap();
        let keys: Vec<&[u8]> = all.iter().map(|(k, _)| &k[..]).collect();
        assert_eq!(keys, [&b"b"[..], b"c", b"d", b"e"]);
        assert_eq!(db.get(b"d").unwrap().unwrap().len(), 100_000);
        assert_eq!(db.get(b"e").unwrap().unwrap(), b"5");
    };
    check(&db);
    db.close().unwrap();
    check(&Db::open(dir.path(), quiet()).unwrap());
}

/// Puts and deletes from several threads join each other's groups; every acknowledged write
/// is there exactly once, with consecutive sequence numbers.
#[test]
fn concurrent_puts_and_deletes_are_all_applied_once() {
    let (_dir, db) = open_temp(Options::default().memtable_bytes(256 << 10));
    const THREADS: u64 = 4;
    const PER_THREAD: u64 = 5000;
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let db = &db;
            s.spawn(move || {
                for i in 0..PER_THREAD {
                    let k = format!("t{t}/{i:06}");
                    db.put(&k, k.as_bytes()).unwrap();
                    if i % 3 == 0 {
                        db.delete(&k).unwrap();
                    }
                }
            });
        }
    });
    let deletes = PER_THREAD.div_ceil(3);
    assert_eq!(db.stats().last_sequence, THREADS * (PER_THREAD + deletes));
    for t in 0..THREADS {
        for i in 0..PER_THREAD {
            let k = format!("t{t}/{i:06}");
            let want = (i % 3 != 0).then(|| k.clone().into_bytes());
            assert_eq!(db.get(&k).unwrap().map(|v| v.to_vec()), want, "{k}");
        }
    }
    assert_eq!(db.prefix(b"t").count() as u64, THREADS * (PER_THREAD - deletes));
}

#[test]
fn data_survives_close_and_drop() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), quiet()).unwrap();
        for i in 0..1000 {
            db.put(key8(i), format!("v{i}")).unwrap();
        }
        db.close().unwrap();
    }
    {
        let db = Db::open(dir.path(), quiet()).unwrap();
        for i in 0..1000 {
            assert_eq!(db.get(key8(i)).unwrap().unwrap(), format!("v{i}").as_bytes());
        }
        for i in 0..500 {
            db.delete(key8(i)).unwrap();
        }
        // Dropped without close.
    }
    let db = Db::open(dir.path(), quiet()).unwrap();
    assert_eq!(db.range(..).count(), 500);
    assert_eq!(db.get(key8(10)).unwrap(), None);
    assert!(db.get(key8(510)).unwrap().is_some());
}

#[test]
fn unsynced_and_synced_writes_survive_a_process_crash() {
    let dir = tempfile::tempdir().unwrap();
    let image = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), quiet()).unwrap();
    for i in 0..300 {
        let mut b = WriteBatch::new();
        b.put(key8(i), b"x");
        db.write(&b, &WriteOptions::new().sync(i % 3 == 0)).unwrap();
    }
    crash_image(dir.path(), image.path());
    drop(db);
    let db = Db::open(image.path(), quiet()).unwrap();
    for i in 0..300 {
        assert!(db.get(key8(i)).unwrap().is_some(), "write {i} lost");
    }
}

/// A WAL segment reserves disk space ahead of its writes while it is written to (so a synced
/// write syncs the records alone), and gives back what it did not use when the database
/// closes. A crash leaves the reserved space as zeros after the last record: recovery takes
/// them for the log's end.
#[test]
fn wal_space_reserved_ahead_reads_as_the_end_of_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), quiet()).unwrap();
    for i in 0..200 {
        let mut b = WriteBatch::new();
        b.put(key8(i), b"x");
        db.write(&b, &WriteOptions::new().sync(i % 2 == 0)).unwrap();
    }
    let wal = &wal_files(dir.path())[0];
    let on_disk = std::fs::metadata(wal).unwrap().len();
    assert!(on_disk >= 1 << 20, "{on_disk} bytes: no space reserved");

    let image = tempfile::tempdir().unwrap();
    crash_image(dir.path(), image.path());
    let recovered = Db::open(image.path(), quiet()).unwrap();
    for i in 0..200 {
        assert!(recovered.get(key8(i)).unwrap().is_some(), "write {i} lost");
    }
    recovered.close().unwrap();

    // A clean close cuts the unused space off: the segment is its records and nothing else.
    db.close().unwrap();
    let bytes = std::fs::read(wal).unwrap();
    assert!(bytes.len() < 1 << 20);
    assert_eq!(log_records(wal, bytes).len(), 1 + 200, "the header and every write");
}

/// Holds each flush at its start until the test opens the gate, and says when it holds one.
struct FlushGate {
    held: Mutex<std::sync::mpsc::Sender<()>>,
    open: Mutex<bool>,
    opened: Condvar,
}

impl bloomkv::EventListener for FlushGate {
    fn on_flush_begin(&self, _: &bloomkv::events::FlushInfo) {
        let _ = self.held.lock().unwrap().send(());
        let open = self.open.lock().unwrap();
        // The deadline only keeps a failing test from hanging: the test opens the gate.
        let deadline = std::time::Duration::from_secs(120);
        drop(self.opened.wait_timeout_while(open, deadline, |open| !*open).unwrap());
    }
}

/// A memtable switch syncs the old segment, starts the new one, and only then cuts off the
/// old segment's unused reserved space. A crash before that cut leaves zeros at the end of a
/// segment that is no longer the newest: that is the end of its log, not a lost record.
#[test]
fn reserved_space_left_in_an_older_wal_segment_is_its_end() {
    let (tx, rx) = std::sync::mpsc::channel();
    let gate = Arc::new(FlushGate {
        held: Mutex::new(tx),
        open: Mutex::new(false),
        opened: Condvar::new(),
    });
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), quiet().memtable_bytes(64 << 10).event_listener(gate.clone()))
        .unwrap();
    // Write until a full memtable is switched out and its flush starts (and is held).
    let mut written = 0;
    while rx.try_recv().is_err() {
        assert!(written < 100_000, "no flush started");
        db.put(key8(written), [b'v'; 100]).unwrap();
        written += 1;
    }
    // The flush thread may start late enough for the writes to fill (and switch out) a
    // second memtable: every segment but the newest is an older one.
    let mut wals = wal_files(dir.path());
    wals.sort();
    assert!(wals.len() >= 2, "the frozen memtables' segments and the new one");
    let image = tempfile::tempdir().unwrap();
    crash_image(dir.path(), image.path());
    *gate.open.lock().unwrap() = true;
    gate.opened.notify_all();
    db.close().unwrap();

    // The image as a crash before the cut leaves it.
    for wal in &wals[..wals.len() - 1] {
        let older = image.path().join(wal.file_name().unwrap());
        let mut bytes = std::fs::read(&older).unwrap();
        bytes.resize(bytes.len() + (64 << 10), 0);
        std::fs::write(&older, bytes).unwrap();
    }
    let recovered = Db::open(image.path(), quiet()).unwrap();
    for i in 0..written {
        assert!(recovered.get(key8(i)).unwrap().is_some(), "write {i} lost");
    }
}

/// Writes keys 0..n, one batch each, and returns the WAL image (one segment) and its
/// records' bytes.
fn wal_with_writes(n: u64) -> (tempfile::TempDir, Vec<u8>) {
    let (dir, db) = open_temp(quiet());
    for i in 0..n {
        let mut b = WriteBatch::new();
        b.put(key8(i), vec![b'v'; 100]);
        b.put(format!("pair{i:08}"), vec![b'v'; 100]);
        db.write(&b, &WriteOptions::default()).unwrap();
    }
    let wals = wal_files(dir.path());
    assert_eq!(wals.len(), 1);
    let mut bytes = std::fs::read(&wals[0]).unwrap();
    // The segment reserves space ahead of its records, zeros until written; the last record
    // ends in value bytes, so what follows the last nonzero byte is that space.
    let end = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    bytes.truncate(end);
    let image = tempfile::tempdir().unwrap();
    crash_image(dir.path(), image.path());
    drop(db);
    (image, bytes)
}

/// After a crash mid-write the recovered state is a prefix of the writes: no holes, batches
/// whole.
fn assert_prefix(db: &Db, n: u64) -> u64 {
    let mut present = 0;
    for i in 0..n {
        let a = db.get(key8(i)).unwrap().is_some();
        let b = db.get(format!("pair{i:08}")).unwrap().is_some();
        assert_eq!(a, b, "batch {i} half-applied");
        if a {
            assert_eq!(present, i, "hole before write {i}");
            present += 1;
        }
    }
    present
}

#[test]
fn torn_wal_tail_is_dropped_and_recovery_is_a_prefix() {
    let n = 400;
    let (image, bytes) = wal_with_writes(n);
    let wal = wal_files(image.path()).pop().unwrap();
    let total = bytes.len();
    let mut seen_partial = false;
    // Cut at many points through the last few records, and some far earlier.
    let cuts: Vec<usize> = (total.saturating_sub(700)..total)
        .step_by(13)
        .chain([0, 7, total / 2, total / 3 + 1])
        .collect();
    for cut in cuts {
        let copy = tempfile::tempdir().unwrap();
        crash_image(image.path(), copy.path());
        std::fs::write(copy.path().join(wal.file_name().unwrap()), &bytes[..cut]).unwrap();
        let db = Db::open(copy.path(), quiet()).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        let present = assert_prefix(&db, n);
        if present < n && present > 0 {
            seen_partial = true;
        }
        drop(db);
        // Recovery of a recovered database: open again, same state.
        let db = Db::open(copy.path(), quiet()).unwrap();
        assert_eq!(assert_prefix(&db, n), present, "second recovery differs at cut {cut}");
    }
    assert!(seen_partial);
}

#[test]
fn garbage_after_the_last_record_is_a_torn_tail() {
    let (image, mut bytes) = wal_with_writes(50);
    let wal = wal_files(image.path()).pop().unwrap();
    bytes.extend_from_slice(&[0xAB; 37]);
    std::fs::write(&wal, &bytes).unwrap();
    let db = Db::open(image.path(), quiet()).unwrap();
    assert_eq!(assert_prefix(&db, 50), 50);
}

#[test]
fn damage_in_the_middle_of_the_wal_is_corruption() {
    let (image, mut bytes) = wal_with_writes(400);
    let wal = wal_files(image.path()).pop().unwrap();
    bytes[1000] ^= 0xff;
    std::fs::write(&wal, &bytes).unwrap();
    match Db::open(image.path(), quiet()) {
        Err(Error::Corruption { file, .. }) => assert_eq!(file, wal),
        other => panic!("expected corruption naming the WAL, got {other:?}"),
    }
}

#[test]
fn second_open_is_locked_out() {
    let (dir, db) = open_temp(Options::default());
    match Db::open(dir.path(), Options::default()) {
        Err(Error::Locked { .. }) => {}
        other => panic!("expected Locked, got {other:?}"),
    }
    db.close().unwrap();
    Db::open(dir.path(), Options::default()).unwrap();
}

#[test]
fn invalid_options_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let bad = Options::default()
        .filter_policy(bloomkv::FilterPolicy::BlockedBloom { bits_per_key: -1.0 });
    assert!(matches!(Db::open(dir.path(), bad), Err(Error::InvalidArgument(_))));
    let bad = Options::default().l0_compaction_trigger(10).l0_stop_trigger(5);
    assert!(matches!(Db::open(dir.path(), bad), Err(Error::InvalidArgument(_))));
    let missing = dir.path().join("nope");
    assert!(Db::open(&missing, Options::default().create_if_missing(false)).is_err());
    assert!(!missing.exists());
    // An existing directory without a database is left as it was: no LOCK file appears.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let r = Db::open(&empty, Options::default().create_if_missing(false));
    assert!(matches!(&r, Err(Error::NotFound { path }) if path == &empty), "{r:?}");
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
}

#[test]
fn snapshot_sees_a_fixed_view_across_flush_and_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default()
        .memtable_bytes(16 << 10)
        .target_table_bytes(16 << 10)
        .level_base_bytes(64 << 10);
    let db = Db::open(dir.path(), opts).unwrap();
    for i in 0..2000 {
        db.put(key8(i), b"old").unwrap();
    }
    let snap = db.snapshot();
    for i in 0..2000 {
        if i % 2 == 0 {
            db.delete(key8(i)).unwrap();
        } else {
            db.put(key8(i), b"new").unwrap();
        }
    }
    db.compact().unwrap();
    assert_eq!(db.range(..).count(), 1000);
    for i in (0..2000).step_by(97) {
        assert_eq!(snap.get(key8(i)).unwrap().unwrap(), b"old");
    }
    let all: Vec<_> = snap.range(..).collect::<Result<_, _>>().unwrap();
    assert_eq!(all.len(), 2000);
    assert!(all.iter().all(|(_, v)| v == b"old"));
    drop(snap);
    // Once the snapshot is gone, the files it pinned are deleted; after close nothing else
    // (such as background work in flight) can still hold one, so the directory holds exactly
    // the live tables.
    db.compact().unwrap();
    let live = db.stats().tables_per_level.iter().sum::<usize>();
    db.close().unwrap();
    assert_eq!(table_files(dir.path()).len(), live);
}

#[test]
fn concurrent_writers_and_readers_see_whole_batches() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default()
        .memtable_bytes(64 << 10)
        .target_table_bytes(64 << 10)
        .level_base_bytes(256 << 10);
    let db = Db::open(dir.path(), opts).unwrap();
    let done = AtomicBool::new(false);
    const WRITERS: u64 = 4;
    const PER_WRITER: u64 = 3000;
    std::thread::scope(|s| {
        let mut writers = Vec::new();
        for w in 0..WRITERS {
            let db = &db;
            writers.push(s.spawn(move || {
                for i in 0..PER_WRITER {
                    // Each batch writes the same value under two keys; readers check they agree.
                    let v = format!("w{w}-{i}");
                    let mut b = WriteBatch::new();
                    b.put(format!("a{}", i % 100), &v);
                    b.put(format!("b{}", i % 100), &v);
                    b.put(format!("w{w}/{i:06}"), &v);
                    db.write(&b, &WriteOptions::new().sync(i % 500 == 0)).unwrap();
                }
            }));
        }
        let mut readers = Vec::new();
        for _ in 0..2 {
            let (db, done) = (&db, &done);
            readers.push(s.spawn(move || {
                let mut checks = 0u64;
                while !done.load(Ordering::Acquire) {
                    let snap = db.snapshot();
                    for j in 0..100 {
                        let a = snap.get(format!("a{j}")).unwrap();
                        let b = snap.get(format!("b{j}")).unwrap();
                        assert_eq!(a, b, "half-applied batch seen");
                        checks += 1;
                    }
                }
                checks
            }));
        }
        for w in writers {
            w.join().unwrap();
        }
        done.store(true, Ordering::Release);
        for r in readers {
            assert!(r.join().unwrap() > 0);
        }
    });
    for w in 0..WRITERS {
        for i in 0..PER_WRITER {
            let v = db.get(format!("w{w}/{i:06}")).unwrap();
            assert_eq!(v.unwrap(), format!("w{w}-{i}").as_bytes());
        }
    }
    assert_eq!(db.prefix(b"w").count() as u64, WRITERS * PER_WRITER);
    let s = db.stats();
    assert!(s.flushes > 0, "the test should have driven flushes: {s:?}");
}

#[test]
fn read_only_open_works_beside_a_live_writer_and_changes_nothing() {
    let (dir, db) = open_temp(Options::default().memtable_bytes(16 << 10));
    for i in 0..3000 {
        db.put(key8(i), format!("v{i}")).unwrap();
    }
    // Settle the tree so no flush or compaction can run between the two listings below; the
    // delete then lives only in the WAL.
    db.compact().unwrap();
    db.delete(key8(5)).unwrap();
    let listing = |p: &Path| -> std::collections::BTreeMap<String, u64> {
        std::fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap())
            // A replaced table may vanish between the listing and its `stat`; it then counts
            // as removed, which the checks below allow only for replaced tables.
            .filter_map(|e| Some((e.file_name().into_string().unwrap(), e.metadata().ok()?.len())))
            .collect()
    };
    let before = listing(dir.path());
    let ro = Db::open_read_only(dir.path(), Options::default()).unwrap();
    let after = listing(dir.path());
    // A read-only open creates, grows and removes nothing. The only change allowed is the
    // writer's own: a table the compaction replaced is deleted when the last reference to it
    // drops, which background work may still have held when `compact` returned.
    let live: Vec<String> = db
        .tables()
        .iter()
        .map(|t| t.path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for (name, len) in &after {
        assert_eq!(before.get(name), Some(len), "{name} created or changed by a read-only open");
    }
    for name in before.keys().filter(|n| !after.contains_key(*n)) {
        assert!(
            name.ends_with(".sst") && !live.contains(name),
            "{name} removed, and it is not a replaced table"
        );
    }
    assert_eq!(ro.get(key8(7)).unwrap().unwrap(), b"v7");
    assert_eq!(ro.get(key8(5)).unwrap(), None);
    assert_eq!(ro.range(..).count(), 2999);
    assert!(matches!(ro.put(b"x", b"y"), Err(Error::ReadOnly)));
    assert!(matches!(ro.flush(), Err(Error::ReadOnly)));
    // The owner keeps writing; the read-only view is fixed at its open.
    db.put(b"later", b"1").unwrap();
    assert_eq!(ro.get(b"later").unwrap(), None);
    drop(ro);
    assert_eq!(db.get(b"later").unwrap().unwrap(), b"1");
}

#[test]
fn table_info_and_trace_show_the_read_path() {
    let (_dir, db) = open_temp(Options::default());
    for i in 0..2000 {
        db.put(key8(i * 2), b"even").unwrap();
    }
    db.flush().unwrap();
    for i in 0..100 {
        db.put(key8(i * 2), b"newer").unwrap();
    }
    db.flush().unwrap();
    db.put(key8(0), b"in memtable").unwrap();
    let tables = db.tables();
    assert_eq!(tables.len(), 2);
    assert_eq!(tables.iter().map(|t| t.entries).sum::<u64>(), 2100);
    assert!(tables
        .iter()
        .all(|t| t.filter_kind == bloomkv::filter::FilterKind::Blocked && t.expected_fpr < 0.02));
    assert_eq!(tables[0].smallest_key, key8(0));

    // Key 0: the memtable decides; both tables hold older versions, and their filters say maybe.
    let steps = db.trace(key8(0)).unwrap();
    assert_eq!(steps[0].source, bloomkv::TraceSource::Memtable);
    assert!(steps[0].decides && steps[0].actual == bloomkv::Presence::Value);
    let table_steps: Vec<_> =
        steps.iter().filter(|s| matches!(s.source, bloomkv::TraceSource::Table { .. })).collect();
    assert_eq!(table_steps.len(), 2);
    assert!(table_steps.iter().all(|s| s.in_range && s.filter_maybe == Some(true) && !s.decides));

    // Key 398 lives only in the older table; key 399 is absent everywhere but inside both
    // tables' ranges, so only a filter can rule them out.
    let steps = db.trace(key8(398)).unwrap();
    let deciding: Vec<_> = steps.iter().filter(|s| s.decides).collect();
    assert_eq!(deciding.len(), 1);
    assert_eq!(
        deciding[0].source,
        bloomkv::TraceSource::Table { level: 0, number: tables[1].number }
    );
    for i in 0..200 {
        for s in db.trace(key8(i * 2 + 1)).unwrap() {
            assert_eq!(s.actual, bloomkv::Presence::Absent);
            assert!(!s.decides);
        }
    }
    // No false negatives on the read path: every present key's table says maybe.
    for i in 0..2000 {
        let steps = db.trace(key8(i * 2)).unwrap();
        for s in steps.iter().filter(|s| s.actual == bloomkv::Presence::Value) {
            assert_ne!(s.filter_maybe, Some(false), "false negative for key {}", i * 2);
        }
        assert_eq!(steps.iter().any(|s| s.decides), db.get(key8(i * 2)).unwrap().is_some());
    }
}

/// Point lookups choose tables by comparing 16-byte key prefixes and fall back to whole keys
/// only when a prefix ties with a table's bound. Keys that all share their first 16 bytes, and
/// short keys that differ only in trailing zero bytes (which pad to the same prefix), make
/// every table boundary a tie; every lookup must still find exactly what was written.
#[test]
fn lookups_are_exact_when_keys_share_their_first_16_bytes() {
    let (dir, db) = open_temp(small_tables());
    let long = |i: u64| format!("sixteen-byte-hd:{i:06}").into_bytes();
    let short = |i: u64| {
        let mut k = format!("k{i:03}").into_bytes();
        k.resize(k.len() + (i % 3) as usize, 0);
        k
    };
    let mut model = std::collections::BTreeMap::new();
    let mut write = |k: Vec<u8>, v: Vec<u8>| {
        db.put(&k, &v).unwrap();
        model.insert(k, v);
    };
    for round in 0..3u64 {
        for i in (round..3000).step_by(2) {
            write(long(i), format!("long {i} round {round}").into_bytes());
        }
        for i in (round..1000).step_by(3) {
            write(short(i), format!("short {i} round {round}").into_bytes());
        }
        if round == 1 {
            db.compact().unwrap();
        } else {
            db.flush().unwrap();
        }
    }
    // Read-only, so no background compaction can change the tables between the checks.
    db.close().unwrap();
    let db = Db::open_read_only(dir.path(), Options::default()).unwrap();
    let levels = db.stats().tables_per_level;
    assert!(levels.iter().filter(|&&n| n > 0).count() >= 2, "want several levels: {levels:?}");
    for (k, v) in &model {
        assert_eq!(db.get(k).unwrap().as_deref(), Some(v.as_slice()), "key {k:?}");
    }
    // An absent key must be looked for in exactly the tables whose range covers it: no table
    // skipped (a wrong answer could follow), none asked needlessly.
    let tables = db.tables();
    let absent = (0..3000).map(|i| [long(i), b"x".to_vec()].concat()).chain((0..1000).map(|i| {
        let mut k = format!("k{i:03}").into_bytes();
        k.resize(k.len() + 3, 0);
        k
    }));
    for k in absent {
        let covering = tables
            .iter()
            .filter(|t| t.smallest_key.as_slice() <= k.as_slice() && k <= t.largest_key)
            .count() as u64;
        let before = db.stats().tables_consulted;
        assert_eq!(db.get(&k).unwrap(), None, "key {k:?}");
        assert_eq!(db.stats().tables_consulted - before, covering, "key {k:?}");
    }
}

/// A lookup remembers (and prefetches) its candidate tables 16 at a time, walking again for
/// each further chunk; with 40 overlapping L0 tables (three chunks, the last one partial),
/// keys in the oldest tables and absent keys must still be answered exactly, consulting every
/// covering table once.
#[test]
fn lookups_are_exact_past_sixteen_overlapping_tables() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default().l0_triggers(100);
    let db = Db::open(dir.path(), opts).unwrap();
    const ROUNDS: u64 = 40;
    for round in 0..ROUNDS {
        // Every table spans nearly the whole key range, so they all overlap.
        for i in (round..2400).step_by(ROUNDS as usize) {
            db.put(key8(2 * i), format!("v{i}")).unwrap();
        }
        db.put(key8(0), format!("newest {round}")).unwrap();
        db.flush().unwrap();
    }
    db.close().unwrap();
    let db = Db::open_read_only(dir.path(), Options::default()).unwrap();
    assert_eq!(db.stats().tables_per_level[0], ROUNDS as usize);
    let tables = db.tables();
    for i in 1..2400 {
        assert_eq!(db.get(key8(2 * i)).unwrap().unwrap(), format!("v{i}").as_bytes(), "{i}");
        let absent = key8(2 * i + 1);
        let covering = tables
            .iter()
            .filter(|t| t.smallest_key.as_slice() <= absent.as_slice() && absent <= t.largest_key)
            .count() as u64;
        let before = db.stats().tables_consulted;
        assert_eq!(db.get(&absent).unwrap(), None);
        assert_eq!(db.stats().tables_consulted - before, covering, "key {i}");
    }
    assert_eq!(db.get(key8(0)).unwrap().unwrap(), format!("newest {}", ROUNDS - 1).as_bytes());
}

fn key_too_large<T>(r: bloomkv::Result<T>) -> bool {
    matches!(r, Err(Error::KeyTooLarge { len }) if len == bloomkv::MAX_KEY_BYTES + 1)
}

fn value_too_large<T>(r: bloomkv::Result<T>) -> bool {
    matches!(r, Err(Error::ValueTooLarge { len }) if len == bloomkv::MAX_VALUE_BYTES + 1)
}

/// Regression: a 17 MiB value was acknowledged, then failed the flush, every later write,
/// `close`, and every later open (recovery flushes the replayed WAL). The limits are now
/// checked when a write is accepted, before anything reaches the WAL.
#[test]
fn writes_over_the_size_limits_are_refused_before_the_wal() {
    use bloomkv::{MAX_KEY_BYTES, MAX_VALUE_BYTES};
    let (dir, db) = open_temp(quiet());
    let long_key = vec![b'k'; MAX_KEY_BYTES + 1];
    let big_value = vec![7u8; MAX_VALUE_BYTES + 1];
    let wal_len = || wal_files(dir.path()).iter().map(|p| p.metadata().unwrap().len()).sum::<u64>();
    let before = wal_len();
    assert!(key_too_large(db.put(&long_key, b"v")));
    assert!(value_too_large(db.put(b"k", &big_value)));
    assert!(key_too_large(db.delete(&long_key)));
    let mut batch = WriteBatch::new();
    batch.put(b"fine", b"v");
    batch.put(b"too-big", &big_value);
    assert!(value_too_large(db.write(&batch, &WriteOptions::default())));
    let mut batch = WriteBatch::new();
    batch.put(b"fine", b"v");
    batch.delete(&long_key);
    assert!(key_too_large(db.write(&batch, &WriteOptions::default())));
    assert_eq!(wal_len(), before, "a refused write reached the WAL");
    assert_eq!(db.get(b"fine").unwrap(), None, "part of a refused batch was applied");

    // The database is unharmed: writes, flush, close and reopen all work.
    db.put(b"after", b"ok").unwrap();
    db.flush().unwrap();
    db.close().unwrap();
    let db = Db::open(dir.path(), quiet()).unwrap();
    assert_eq!(db.get(b"after").unwrap().as_deref(), Some(&b"ok"[..]));
    assert_eq!(db.get(b"too-big").unwrap(), None);
}

/// The largest key and value the limits allow go through the WAL, a flush, a compaction
/// (with and without compression) and a reopen intact.
#[test]
fn keys_and_values_at_the_size_limits_round_trip() {
    use bloomkv::{Compression, MAX_KEY_BYTES, MAX_VALUE_BYTES};
    for compression in [Compression::None, Compression::Zstd { level: 1 }] {
        let dir = tempfile::tempdir().unwrap();
        let opts = || quiet().compression(compression);
        let long_key: Vec<u8> = (0..MAX_KEY_BYTES).map(|i| (i % 251) as u8).collect();
        // Half compressible, half not: exercises the compressed block path's caps.
        let mut value: Vec<u8> = vec![b'z'; MAX_VALUE_BYTES / 2];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        value.extend((MAX_VALUE_BYTES / 2..MAX_VALUE_BYTES).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        }));
        let db = Db::open(dir.path(), opts()).unwrap();
        db.put(&long_key, b"short").unwrap();
        db.put(b"big", &value).unwrap();
        drop(db); // left in the WAL: recovery replays and flushes it
        let db = Db::open(dir.path(), opts()).unwrap();
        assert_eq!(db.get(&long_key).unwrap().as_deref(), Some(&b"short"[..]));
        assert!(db.get(b"big").unwrap().as_deref() == Some(&value[..]));
        db.put(b"small", b"s").unwrap();
        db.compact().unwrap();
        db.close().unwrap();
        let db = Db::open(dir.path(), opts()).unwrap();
        assert_eq!(db.get(&long_key).unwrap().as_deref(), Some(&b"short"[..]));
        assert!(db.get(b"big").unwrap().as_deref() == Some(&value[..]));
        let keys = keys_of(db.range(..));
        // (assert!, not assert_eq!: a failure would print 64 KiB of key)
        assert!(keys == vec![long_key.clone(), b"big".to_vec(), b"small".to_vec()]);
    }
}

fn push_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A WAL record no table could hold (written by a build without the size check, or
/// forged with a valid CRC) is reported as corruption at its offset; it does not fail the
/// open later in a flush, and leaves no table file behind.
#[test]
fn a_wal_record_over_the_limits_is_corruption_at_its_offset() {
    let (dir, db) = open_temp(quiet());
    db.put(b"a", b"1").unwrap();
    let seq = db.stats().last_sequence;
    db.close().unwrap();
    // Rewrite the newest segment with its records followed by the oversized one.
    let wal = wal_files(dir.path()).pop().unwrap();
    let records = log_records(&wal, std::fs::read(&wal).unwrap());
    let mut record = (seq + 1).to_le_bytes().to_vec();
    record.extend_from_slice(&1u32.to_le_bytes());
    record.push(1); // put
    push_varint(&mut record, 1);
    record.push(b'b');
    let value_len = bloomkv::MAX_VALUE_BYTES + 1;
    push_varint(&mut record, value_len as u64);
    record.resize(record.len() + value_len, 0xab);
    let mut w = bloomkv_tree::log::LogWriter::new(
        bloomkv::fs::FileSystem::create(&bloomkv::fs::StdFs, &wal).unwrap(),
    );
    for r in &records {
        w.add_record(r).unwrap();
    }
    let offset = w.len();
    w.add_record(&record).unwrap();
    w.sync().unwrap();
    drop(w);

    for _ in 0..2 {
        match Db::open(dir.path(), quiet()) {
            Err(Error::Corruption { file, offset: at, reason }) => {
                assert_eq!(file, wal, "{reason}");
                assert_eq!(at, offset, "{reason}");
            }
            other => panic!("expected corruption in the WAL, got {other:?}"),
        }
        assert!(table_files(dir.path()).is_empty(), "a failed open left a table behind");
    }
}

/// Regression: `close()` returned Ok while a live `Snapshot` held the LOCK, so the next open
/// failed with `Error::Locked`; and `close` took `self`, so a `Db` in an `Arc` could not be
/// closed. Now `close(&self)` releases the LOCK whatever views are alive, and reads through
/// those views fail with `Error::Closed`.
#[test]
fn close_releases_the_lock_and_later_reads_through_old_views_fail_clearly() {
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(dir.path(), quiet()).unwrap());
    db.put(b"a", b"1").unwrap();
    db.put(b"b", b"2").unwrap();
    db.flush().unwrap();
    db.put(b"c", b"3").unwrap();
    let snap = db.snapshot();
    db.put(b"a", b"1-new").unwrap();
    db.compact().unwrap(); // the snapshot now holds tables the live version replaced
    let mut it = db.range(..);
    assert_eq!(it.next().unwrap().unwrap().0, b"a".to_vec());
    let mut back = db.range(..);
    assert_eq!(back.next_back().unwrap().unwrap().0, b"c".to_vec());
    let mut cursor = db.cursor(..);
    cursor.seek_to_last().unwrap();
    // No source holds a key of it: an iterator with nothing to merge fails as the others.
    let (mut empty, mut empty_back) = (db.range("x".."y"), db.range("x".."y"));
    assert!(matches!(Db::open(dir.path(), quiet()), Err(Error::Locked { .. })));

    // Closed from another thread, through its own Arc.
    let other = db.clone();
    std::thread::spawn(move || other.close()).join().unwrap().unwrap();

    assert!(matches!(snap.get(b"a"), Err(Error::Closed)));
    assert!(matches!(it.next(), Some(Err(Error::Closed))));
    assert!(it.next().is_none());
    assert!(matches!(empty.next(), Some(Err(Error::Closed))));
    assert!(matches!(empty_back.next_back(), Some(Err(Error::Closed))));
    assert!(empty.next().is_none() && empty_back.next_back().is_none());
    assert!(matches!(snap.range(..).next(), Some(Err(Error::Closed))));
    assert!(matches!(back.next_back(), Some(Err(Error::Closed))));
    assert!(back.next_back().is_none() && back.next().is_none());
    assert!(matches!(snap.range(..).next_back(), Some(Err(Error::Closed))));
    assert!(matches!(cursor.prev(), Err(Error::Closed)));
    assert!(!cursor.valid() && cursor.key().is_none());
    assert!(matches!(cursor.seek_to_first(), Err(Error::Closed)));
    assert!(matches!(snap.cursor(..).seek(b"a"), Err(Error::Closed)));
    assert!(matches!(db.get(b"a"), Err(Error::Closed)));
    assert!(matches!(db.put(b"x", b"y"), Err(Error::Closed)));
    assert!(matches!(db.write(&WriteBatch::new(), &WriteOptions::default()), Err(Error::Closed)));
    assert!(matches!(db.flush(), Err(Error::Closed)));
    db.close().unwrap(); // a second close is a no-op

    // The directory opens again while the old handle and its views are still alive, and
    // dropping them later (the snapshot's replaced tables are deleted then) harms nothing.
    let again = Db::open(dir.path(), quiet()).unwrap();
    again.put(b"d", b"4").unwrap();
    again.flush().unwrap();
    drop(snap);
    drop(it);
    drop(back);
    drop(cursor);
    drop(db);
    again.close().unwrap();
    let again = Db::open(dir.path(), quiet()).unwrap();
    let all = pairs(again.range(..));
    let want: Vec<(Vec<u8>, Vec<u8>)> = [("a", "1-new"), ("b", "2"), ("c", "3"), ("d", "4")]
        .iter()
        .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect();
    assert_eq!(all, want);
}

/// Regression: `Db::open` on a non-empty directory of other files silently wrote CURRENT,
/// LOCK, a manifest and a WAL beside them. Creating a database now needs a new, empty, or
/// database-only directory; `error_if_exists` refuses an existing database.
#[test]
fn a_database_is_created_only_where_nothing_else_lives() {
    let listing = |d: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    // Foreign files: refused, nothing written, nothing removed. `notes.tmp` used to be
    // taken for one of bloomkv's temporary files (deleted at open).
    for foreign in ["notes.txt", "notes.tmp", ".hidden", "000012.log.bak"] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(foreign), b"mine").unwrap();
        let before = listing(dir.path());
        match Db::open(dir.path(), quiet()) {
            Err(Error::NotADatabase { path, foreign: found }) => {
                assert_eq!(path, dir.path());
                assert_eq!(found, vec![foreign.to_string()]);
            }
            other => panic!("{foreign}: expected a refusal, got {other:?}"),
        }
        assert_eq!(
            listing(dir.path()),
            before,
            "{foreign}: the refused open changed the directory"
        );
    }
    // A subdirectory is somebody else's too.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    let r = Db::open(dir.path(), quiet());
    assert!(
        matches!(&r, Err(Error::NotADatabase { foreign, .. }) if foreign == &["data"]),
        "{r:?}"
    );

    // A mount point's lost+found, an empty directory, a new one: fine.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("lost+found")).unwrap();
    Db::open(dir.path(), quiet()).unwrap().close().unwrap();
    let dir = tempfile::tempdir().unwrap();
    Db::open(dir.path(), quiet().error_if_exists(true)).unwrap().close().unwrap();
    let new_dir = dir.path().join("new");
    let db = Db::open(&new_dir, quiet().error_if_exists(true)).unwrap();
    db.put(b"k", b"v").unwrap();
    db.close().unwrap();

    // An existing database: error_if_exists refuses it; otherwise it opens, and a file the
    // user put beside it later is left alone (a foreign `.tmp` is not deleted as ours).
    let r = Db::open(&new_dir, quiet().error_if_exists(true));
    assert!(matches!(&r, Err(Error::AlreadyExists { path }) if path == &new_dir), "{r:?}");
    std::fs::write(new_dir.join("README.tmp"), b"mine").unwrap();
    let db = Db::open(&new_dir, quiet()).unwrap();
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    db.close().unwrap();
    assert_eq!(std::fs::read(new_dir.join("README.tmp")).unwrap(), b"mine");
}

/// `trace` shows the walk `get` makes (it observes the engine's own read path): on sorted
/// levels exactly the one table whose range covers the key is consulted, every consulted
/// table's range covers it, and the deciding step agrees with `get`.
#[test]
fn trace_observes_the_walk_get_makes_on_every_level() {
    let (dir, db) = open_temp(small_tables().block_bytes(512));
    for i in 0..4000 {
        db.put(key8(i * 2), format!("v{i}")).unwrap();
    }
    db.compact().unwrap();
    for i in (0..4000).step_by(7) {
        db.put(key8(i * 2), b"newer").unwrap();
    }
    db.flush().unwrap();
    // A read-only handle runs no background work, so the tree cannot change between listing
    // the tables and tracing (a compaction the flushes made due would otherwise race them).
    db.close().unwrap();
    let db = Db::open_read_only(dir.path(), Options::new()).unwrap();
    let tables = db.tables();
    assert!(tables.iter().filter(|t| t.level > 0).count() > 4, "several tables on sorted levels");
    let by_number: std::collections::HashMap<u64, &bloomkv::TableInfo> =
        tables.iter().map(|t| (t.number, t)).collect();
    for i in (0..8000).step_by(37) {
        let k = key8(i);
        let steps = db.trace(&k).unwrap();
        let mut consulted_per_level = std::collections::BTreeMap::new();
        for s in &steps {
            if let bloomkv::TraceSource::Table { level, number } = s.source {
                let t = by_number[&number];
                let covers = t.smallest_key <= k && k <= t.largest_key;
                if s.in_range {
                    assert!(covers, "key {i}: consulted table {number} does not cover it");
                    *consulted_per_level.entry(level).or_insert(0) += 1;
                } else {
                    assert!(!covers, "key {i}: table {number} covers it but was not consulted");
                }
            }
        }
        assert!(
            consulted_per_level.iter().all(|(&l, &n)| l == 0 || n == 1),
            "{consulted_per_level:?}"
        );
        let decided = steps.iter().find(|s| s.decides).map(|s| s.actual.clone());
        let got = db.get(&k).unwrap();
        assert_eq!(decided == Some(bloomkv::Presence::Value), got.is_some(), "key {i}");
    }
}

/// Compactions split into key ranges merged by parallel threads lose, duplicate and reorder
/// nothing: with small tables and up to four parts, every background and manual compaction
/// of a workload of puts, overwrites and deletes leaves exactly the model's contents, and
/// every sorted level's tables stay in order without overlapping.
#[test]
fn compactions_split_into_parallel_parts_keep_every_key_once() {
    use rand::{Rng, SeedableRng};
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::new()
        .memtable_bytes(32 << 10)
        .target_table_bytes(8 << 10)
        .level_base_bytes(32 << 10)
        .block_bytes(512)
        .max_subcompactions(4);
    let db = Db::open(dir.path(), opts.clone()).unwrap();
    let mut model = std::collections::BTreeMap::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for round in 0..30_000u64 {
        let k = key8(rng.gen_range(0..6_000));
        if rng.gen_bool(0.1) {
            db.delete(&k).unwrap();
            model.remove(&k);
        } else {
            let v = format!("value {round} {}", "x".repeat(rng.gen_range(0..60))).into_bytes();
            db.put(&k, &v).unwrap();
            model.insert(k, v);
        }
    }
    db.compact().unwrap();
    let stats = db.stats();
    assert!(
        stats.compaction_parts > stats.compactions,
        "no compaction was split: {} parts in {} compactions",
        stats.compaction_parts,
        stats.compactions
    );
    db.close().unwrap();

    // Read-only, so the tree cannot change while it is checked.
    let db = Db::open_read_only(dir.path(), opts).unwrap();
    let mut tables = db.tables();
    tables.sort_by(|a, b| (a.level, &a.smallest_key).cmp(&(b.level, &b.smallest_key)));
    for pair in tables.windows(2) {
        if pair[0].level == pair[1].level && pair[0].level > 0 {
            assert!(
                pair[0].largest_key < pair[1].smallest_key,
                "tables {} and {} on level {} overlap",
                pair[0].number,
                pair[1].number,
                pair[0].level
            );
        }
    }
    let scanned = pairs(db.range(..));
    let expected = entries(&model);
    assert_eq!(scanned.len(), expected.len());
    assert!(scanned == expected, "scan differs from the model");
    for i in 0..6_000 {
        let k = key8(i);
        assert_eq!(db.get(&k).unwrap().as_deref(), model.get(&k).map(|v| &v[..]), "key {i}");
    }
}

/// A batch over `max_batch_bytes` is refused whole, before it is copied or reaches the WAL,
/// with an error naming both sizes, and the database goes on; a batch of exactly the limit
/// is written. Single writes of the database and of a keyspace are held to it too.
#[test]
fn batches_over_max_batch_bytes_are_refused_before_the_wal() {
    let dir = tempfile::tempdir().unwrap();
    let mut batch = WriteBatch::new();
    for i in 0..64 {
        batch.put(key8(i), vec![b'v'; 1000]);
    }
    let limit = batch.approximate_bytes();
    let opts = || quiet().max_batch_bytes(limit);
    let db = Db::open(dir.path(), opts()).unwrap();
    let side = db.keyspace("side", bloomkv::KeyspaceOptions::new()).unwrap();
    let wal_len = || wal_files(dir.path()).iter().map(|p| p.metadata().unwrap().len()).sum::<u64>();

    let mut over = batch.clone();
    over.put(b"extra", b"x");
    let bytes = over.approximate_bytes();
    let before = wal_len();
    let r = db.write(&over, &WriteOptions::default());
    assert!(
        matches!(r, Err(Error::BatchTooLarge { bytes: b, limit: l }) if b == bytes && l == limit),
        "{r:?}"
    );
    let big = vec![b'b'; limit + 1];
    let r = db.put(b"big", &big);
    assert!(matches!(r, Err(Error::BatchTooLarge { limit: l, .. }) if l == limit), "{r:?}");
    let r = side.put(b"big", &big);
    assert!(matches!(r, Err(Error::BatchTooLarge { limit: l, .. }) if l == limit), "{r:?}");
    assert_eq!(wal_len(), before, "a refused write reached the WAL");
    assert_eq!(db.get(key8(0)).unwrap(), None, "part of a refused batch was applied");
    assert_eq!(db.get(b"extra").unwrap(), None);

    // At the limit: written.
    db.write(&batch, &WriteOptions::default()).unwrap();
    side.put(b"small", b"s").unwrap();
    db.flush().unwrap();
    drop(side);
    db.close().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    for i in 0..64 {
        assert_eq!(db.get(key8(i)).unwrap().as_deref(), Some(&[b'v'; 1000][..]), "{i}");
    }
    assert_eq!(db.get(b"extra").unwrap(), None);
    assert_eq!(db.get(b"big").unwrap(), None);
    let side = db.keyspace("side", bloomkv::KeyspaceOptions::new()).unwrap();
    assert_eq!(side.get(b"big").unwrap(), None);
    assert_eq!(side.get(b"small").unwrap().as_deref(), Some(&b"s"[..]));
}

/// Under the default limit a batch holding the largest key and the largest value is
/// written; a limit below 1 KiB is refused as an invalid option.
#[test]
fn the_default_batch_limit_admits_the_largest_entry() {
    use bloomkv::{MAX_KEY_BYTES, MAX_VALUE_BYTES};
    let dir = tempfile::tempdir().unwrap();
    let r = Db::open(dir.path(), quiet().max_batch_bytes(100));
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{:?}", r.err());
    let db = Db::open(dir.path(), quiet()).unwrap();
    let long_key = vec![b'k'; MAX_KEY_BYTES];
    let value = vec![b'v'; MAX_VALUE_BYTES];
    let mut batch = WriteBatch::new();
    batch.put(&long_key, &value);
    batch.put(b"k", &value);
    db.write(&batch, &WriteOptions::default()).unwrap();
    assert!(db.get(b"k").unwrap().as_deref() == Some(&value[..]));
    assert!(db.get(&long_key).unwrap().as_deref() == Some(&value[..]));
}

/// A read-only open of a directory that does not exist fails with `Error::NotFound` naming
/// it, as documented (not with the I/O error of listing it), and creates nothing.
#[test]
fn read_only_open_of_a_missing_directory_is_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-db");
    match Db::open_read_only(&missing, Options::default()) {
        Err(Error::NotFound { path }) => assert_eq!(path, missing),
        other => panic!("expected NotFound, got {:?}", other.err()),
    }
    assert!(!missing.exists());
    // The same through a file system held in memory.
    let fs = bloomkv::fs::FaultFs::new();
    let opts = Options::default().file_system(std::sync::Arc::new(fs.clone()));
    match Db::open_read_only("/nowhere/db", opts) {
        Err(Error::NotFound { path }) => assert_eq!(path, Path::new("/nowhere/db")),
        other => panic!("expected NotFound, got {:?}", other.err()),
    }
}

/// Opening a path that is a regular file says so, read-write or read-only, and leaves the
/// file alone.
#[test]
fn opening_a_file_as_a_database_says_it_is_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("data.txt");
    std::fs::write(&file, b"not a database").unwrap();
    let fs = bloomkv::fs::FaultFs::new();
    fs.create_dir_all(Path::new("/mem")).unwrap();
    let mem_file = Path::new("/mem/data.txt");
    fs.create(mem_file).unwrap().append(b"not a database").unwrap();
    let in_mem = || Options::default().file_system(std::sync::Arc::new(fs.clone()));
    use bloomkv::fs::FileSystem as _;
    let attempts = [
        ("open", Db::open(&file, Options::default()).err()),
        ("open_read_only", Db::open_read_only(&file, Options::default()).err()),
        ("open, no create", Db::open(&file, Options::default().create_if_missing(false)).err()),
        ("open in memory", Db::open(mem_file, in_mem()).err()),
        ("open_read_only in memory", Db::open_read_only(mem_file, in_mem()).err()),
    ];
    for (what, r) in attempts {
        match r {
            Some(Error::InvalidArgument(msg)) => {
                assert!(msg.contains("data.txt") && msg.contains("is a file"), "{what}: {msg}")
            }
            other => panic!("{what}: expected InvalidArgument, got {other:?}"),
        }
    }
    assert_eq!(std::fs::read(&file).unwrap(), b"not a database");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "something was created");
    assert_eq!(fs.files(), vec![mem_file.to_path_buf()]);
}

/// Scans choose their tables by the heads (first 16 bytes) of the tables' bounds, falling
/// back to whole keys on a tie. Keys here share their first 20 bytes, so every comparison
/// ties; each bound kind, at every table's edge and between, must return what a `BTreeMap`
/// returns, both ways.
#[test]
fn range_bounds_at_table_edges_of_keys_that_share_their_first_16_bytes() {
    use std::collections::BTreeMap;
    use std::ops::{Bound, RangeBounds};

    let (_dir, db) = open_temp(small_tables());
    let key = |i: u32| format!("tenant-0000000000000/{:06}", i * 2).into_bytes();
    let mut model = BTreeMap::new();
    // Several flushes of interleaved keys: L0 tables that overlap, then sorted levels.
    for round in 0..4u32 {
        for i in (round..400).step_by(4) {
            db.put(key(i), [b'v'; 200]).unwrap();
            model.insert(key(i), ());
        }
        db.flush().unwrap();
        if round == 1 {
            db.compact().unwrap();
        }
    }
    let stats = db.stats();
    assert!(stats.tables_per_level.iter().sum::<usize>() > 4, "{:?}", stats.tables_per_level);
    // Bounds at keys present (table edges among them) and between them (odd numbers).
    let probe = |j: u32| format!("tenant-0000000000000/{:06}", j).into_bytes();
    let bounds = |j: u32| {
        [Bound::Included(probe(j)), Bound::Excluded(probe(j)), Bound::Unbounded::<Vec<u8>>]
    };
    for lo_j in (0..802).step_by(37) {
        for hi_j in (lo_j..802).step_by(53) {
            for lo in bounds(lo_j) {
                for hi in bounds(hi_j) {
                    let within = |k: &Vec<u8>| {
                        RangeBounds::<Vec<u8>>::contains(&(lo.clone(), hi.clone()), k)
                    };
                    let want: Vec<Vec<u8>> = model.keys().filter(|k| within(k)).cloned().collect();
                    let got: Vec<Vec<u8>> =
                        db.range((lo.clone(), hi.clone())).map(|r| r.unwrap().0).collect();
                    assert_eq!(got, want, "{lo:?}..{hi:?}");
                    let back: Vec<Vec<u8>> =
                        db.range((lo.clone(), hi.clone())).rev().map(|r| r.unwrap().0).collect();
                    assert_eq!(back, want.iter().rev().cloned().collect::<Vec<_>>());
                }
            }
        }
    }
}

#[test]
fn compact_leaves_the_tree_on_the_first_level_it_fits_under_its_target() {
    // L1's target is 16 KiB, L2's 64 KiB, L3's 256 KiB, L4's 1 MiB; each round's data is about
    // 220 KiB, all in the memtable when `compact` flushes it: new keys, then the same keys
    // again, then as many new ones (440 KiB, over L3's target).
    let (base, ratio) = (16u64 << 10, 4u64);
    let opts =
        Options::default().memtable_bytes(1 << 20).level_base_bytes(base).level_size_ratio(ratio);
    let (_dir, db) = open_temp(opts);
    let target = |l: usize| base * ratio.pow(l as u32 - 1);
    for (round, keys, live, end_level) in
        [(0u64, 0..2000u64, 2000, 3), (1, 0..2000, 2000, 3), (2, 2000..4000, 4000, 4)]
    {
        for i in keys {
            db.put(key8(i), [(round as u8).wrapping_add(i as u8); 100]).unwrap();
        }
        let written_before = db.stats().compaction_bytes_written;
        db.compact().unwrap();
        let s = db.stats();
        let levels: Vec<usize> =
            (0..s.tables_per_level.len()).filter(|&l| s.tables_per_level[l] > 0).collect();
        assert_eq!(
            levels,
            [end_level],
            "one level after a full compaction: {:?}",
            s.tables_per_level
        );
        let bytes = s.bytes_per_level[end_level];
        // Under its level's target, so the background has nothing left to move down, and
        // not deeper than it had to go.
        assert!(bytes < target(end_level) && bytes >= target(end_level - 1), "{bytes} bytes");
        // Written once, passing over empty levels (not once per level); the last round's
        // merged level is over its target and moves on down once more.
        let written = s.compaction_bytes_written - written_before;
        let times = if round == 2 { 2 } else { 1 };
        assert!(
            written < bytes * times + bytes / 2,
            "round {round}: {written} bytes written for {bytes}"
        );
        assert_eq!(db.range(..).count(), live);
    }
}

/// Tables that compactions replace are removed on the deleter's thread, never by the flush or
/// compaction thread that installed their replacement (a removal can wait out the device's
/// discard of the file's extents, and those threads hold up writers), and a manual compaction
/// returns once the files are gone.
#[test]
fn replaced_tables_are_removed_aside_and_gone_when_compact_returns() {
    use bloomkv::fs::fault::{unique_dir, Fault, FaultFs, OpKind};
    let fs = FaultFs::new();
    let removers = Arc::new(Mutex::new(Vec::new()));
    let noted = removers.clone();
    // A fault that never fires, to note which thread removes each table, and to make each
    // removal slow, as a device discarding the file's extents does.
    fs.inject(Fault::on(OpKind::Remove).matching(move |p: &Path| {
        if p.extension().is_some_and(|e| e == "sst") {
            let name = std::thread::current().name().unwrap_or("unnamed").to_string();
            noted.lock().unwrap().push(name);
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        false
    }));
    let dir = unique_dir("removed-aside");
    let db = Db::open(&dir, small_tables().l0_triggers(4).fault_fs(&fs)).unwrap();
    for round in 0..6u64 {
        for i in 0..600u64 {
            db.put(key8(i * 7 + round), vec![round as u8; 40]).unwrap();
        }
        db.flush().unwrap();
    }
    db.compact().unwrap();
    let mut live: Vec<_> = db.tables().into_iter().map(|t| t.path).collect();
    live.sort();
    let mut on_disk: Vec<_> =
        fs.files().into_iter().filter(|p| p.extension().is_some_and(|e| e == "sst")).collect();
    on_disk.sort();
    assert_eq!(on_disk, live, "only the live tables are left once compact returns");
    let names = removers.lock().unwrap().clone();
    assert!(names.len() > 5, "compactions replaced tables: {names:?}");
    assert!(names.iter().all(|n| n == "bloomkv-delete"), "{names:?}");
    db.close().unwrap();
}

/// A clone of a `Db` is the same database: writes through either are seen by both, dropping
/// one leaves the other open, and `close` through one closes them all. A clone of a snapshot
/// reads the same view, after the snapshot it came from is gone.
#[test]
fn clones_of_a_database_and_of_a_snapshot_are_the_same_database_and_view() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), quiet()).unwrap();
    let other = db.clone();
    other.put("k", "v1").unwrap();
    assert_eq!(db.get("k").unwrap().as_deref(), Some(&b"v1"[..]));
    let snap = db.snapshot();
    let snap_clone = snap.clone();
    drop(snap);
    db.put("k", "v2").unwrap();
    assert_eq!(snap_clone.get("k").unwrap().as_deref(), Some(&b"v1"[..]));
    drop(other);
    db.put("k2", "v").unwrap();
    let again = db.clone();
    db.close().unwrap();
    assert!(matches!(again.get("k"), Err(Error::Closed)));
    assert!(matches!(snap_clone.get("k"), Err(Error::Closed)));
}

/// `Stats::wal_bytes_written` counts every byte the log appends since open, whichever way a
/// write reaches it (a direct unsynced put, a queued synced batch, an ingest's reserved
/// sequence number) and each new segment's header: the segment a close leaves (cut back to
/// its records) is the open's header plus exactly what was counted.
#[test]
fn wal_bytes_written_counts_every_appended_byte() {
    let header = {
        let (dir, db) = open_temp(quiet());
        assert_eq!(db.stats().wal_bytes_written, 0, "the open's own header is not counted");
        db.close().unwrap();
        let wals = wal_files(dir.path());
        assert_eq!(wals.len(), 1);
        std::fs::metadata(&wals[0]).unwrap().len()
    };
    assert!(header > 0);

    let (dir, db) = open_temp(quiet());
    let mut payload = 0;
    for i in 0..200u64 {
        let value = vec![b'v'; 10 + (i as usize % 50)];
        payload += (key8(i).len() + value.len()) as u64;
        db.put(key8(i), value).unwrap();
    }
    let direct = db.stats().wal_bytes_written;
    // Each record carries its key and value, plus a few dozen bytes of framing at most.
    assert!(payload < direct && direct < payload + 200 * 40, "{direct} for {payload}");
    let mut batch = WriteBatch::new();
    batch.put(b"synced-1", [1u8; 3000]);
    batch.put(b"synced-2", [2u8; 9000]); // spans pages: fragment headers count too
    db.write(&batch, &WriteOptions::new().sync(true)).unwrap();
    let grouped = db.stats().wal_bytes_written - direct;
    assert!(grouped > 12_000 && grouped < 12_100, "{grouped}");
    db.close().unwrap();
    let wals = wal_files(dir.path());
    assert_eq!(wals.len(), 1);
    let counted = db.stats().wal_bytes_written;
    assert_eq!(std::fs::metadata(&wals[0]).unwrap().len(), header + counted);

    // A flush starts a segment (its header counted); an ingest logs its reserved sequence
    // number in the old one and starts another.
    let (_dir, db) = open_temp(quiet());
    db.put(b"k", b"v").unwrap();
    let before = db.stats().wal_bytes_written;
    db.flush().unwrap();
    assert_eq!(db.stats().wal_bytes_written - before, header);
    let before = db.stats().wal_bytes_written;
    db.ingest([(b"a", b"1"), (b"b", b"2")]).unwrap();
    let ingest = db.stats().wal_bytes_written - before;
    assert!(ingest > header && ingest < header + 64, "{ingest}");
}
