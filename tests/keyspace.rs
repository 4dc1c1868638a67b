//! Keyspaces: isolation, per-keyspace options, atomic batches across keyspaces, snapshots,
//! drop, and what survives a reopen (from tables and from the WAL alone).

use bloomkv::filter::FilterKind;
use bloomkv::{
    Compression, Db, Error, FilterPolicy, KeyspaceOptions, Options, Readable, WriteBatch,
    WriteOptions,
};

mod common;

use common::db::open_temp;
use common::model::keys_of;
use common::options::{small_tables, OptionsExt};

fn get(r: bloomkv::Result<Option<bloomkv::Value>>) -> Option<Vec<u8>> {
    r.unwrap().map(|v| v.to_vec())
}

fn ks_tables(db: &Db, name: &str) -> Vec<bloomkv::TableInfo> {
    db.tables().into_iter().filter(|t| t.keyspace == name).collect()
}

#[test]
fn keyspaces_hold_separate_keys_through_memtables_tables_and_compaction() {
    let (dir, db) = open_temp(small_tables());
    let a = db.keyspace("a", KeyspaceOptions::default()).unwrap();
    let b = db.keyspace("b", KeyspaceOptions::default()).unwrap();
    for i in 0..3000u32 {
        let k = format!("key{i:05}");
        db.put(&k, format!("default{i}")).unwrap();
        a.put(&k, format!("a{i}")).unwrap();
        if i % 2 == 0 {
            b.put(&k, format!("b{i}")).unwrap();
        }
    }
    a.delete("key00007").unwrap();
    b.delete_range("key00100".."key00200").unwrap();
    let check = |stage: &str| {
        assert_eq!(get(db.get("key00007")), Some(b"default7".to_vec()), "{stage}");
        assert_eq!(get(a.get("key00007")), None, "{stage}");
        assert_eq!(get(b.get("key00008")), Some(b"b8".to_vec()), "{stage}");
        assert_eq!(get(b.get("key00009")), None, "{stage}");
        assert_eq!(get(b.get("key00150")), None, "{stage}");
        assert_eq!(get(a.get("key00150")), Some(b"a150".to_vec()), "{stage}");
        assert_eq!(keys_of(db.range(..)).len(), 3000, "{stage}");
        assert_eq!(keys_of(a.range(..)).len(), 2999, "{stage}");
        assert_eq!(keys_of(b.range(..)).len(), 1500 - 50, "{stage}");
        assert_eq!(keys_of(b.prefix("key0010")).len(), 0, "{stage}");
        assert_eq!(keys_of(a.prefix("key0010").rev()).first(), Some(&b"key00109".to_vec()));
        let got = b.multi_get(["key00002", "key00003", "key00150"]).unwrap();
        let got: Vec<_> = got.into_iter().map(|v| v.map(|v| v.to_vec())).collect();
        assert_eq!(got, [Some(b"b2".to_vec()), None, None], "{stage}");
        let mut c = a.cursor(..);
        c.seek_for_prev("key00007").unwrap();
        assert_eq!(c.key(), Some(&b"key00006"[..]), "{stage}");
    };
    check("written");
    db.flush().unwrap();
    assert!(!ks_tables(&db, "a").is_empty() && !ks_tables(&db, "b").is_empty());
    check("flushed");
    db.compact().unwrap();
    // Every keyspace's tree was compacted to its own last level.
    for name in ["default", "a", "b"] {
        let tables = ks_tables(&db, name);
        assert!(!tables.is_empty(), "{name}");
        assert!(tables.iter().all(|t| t.level > 0), "{name}: {tables:?}");
    }
    check("compacted");
    db.close().unwrap();
    let db = Db::open(dir.path(), small_tables()).unwrap();
    let a = db.keyspace("a", KeyspaceOptions::default()).unwrap();
    let b = db.keyspace("b", KeyspaceOptions::default()).unwrap();
    assert_eq!(get(a.get("key02999")), Some(b"a2999".to_vec()));
    assert_eq!(keys_of(b.range(..)).len(), 1450);
    assert_eq!(keys_of(db.range(..)).len(), 3000);
}

#[test]
fn each_keyspace_builds_its_tables_with_its_own_options_even_before_it_is_reopened() {
    let dir = tempfile::tempdir().unwrap();
    let plain = KeyspaceOptions::new()
        .filter_policy(FilterPolicy::None)
        .compression(Compression::Zstd { level: 1 });
    {
        let db = Db::open(dir.path(), small_tables()).unwrap();
        let logs = db.keyspace("logs", plain).unwrap();
        let classic =
            KeyspaceOptions::new().filter_policy(FilterPolicy::ClassicBloom { bits_per_key: 8.0 });
        let idx = db.keyspace("idx", classic).unwrap();
        for i in 0..500u32 {
            logs.put(format!("{i:04}"), "line").unwrap();
            idx.put(format!("{i:04}"), "x").unwrap();
            db.put(format!("{i:04}"), "y").unwrap();
        }
        db.flush().unwrap();
        let kinds = |name| -> Vec<FilterKind> {
            ks_tables(&db, name).iter().map(|t| t.filter_kind).collect()
        };
        assert!(kinds("logs").iter().all(|k| *k == FilterKind::None), "{:?}", kinds("logs"));
        assert!(kinds("idx").iter().all(|k| *k == FilterKind::Classic));
        assert!(kinds("default").iter().all(|k| *k == FilterKind::Blocked));
        for t in ks_tables(&db, "logs") {
            let file = bloomkv::fs::FileSystem::open(&bloomkv::fs::StdFs, &t.path).unwrap();
            let table = bloomkv_tree::table::Table::open(file, t.path.clone(), None).unwrap();
            assert_eq!(table.properties().compression, Compression::Zstd { level: 1 });
        }
        // Left in the memtables: they are replayed from the WAL at the next open.
        for i in 500..600u32 {
            logs.put(format!("{i:04}"), "line").unwrap();
        }
    }
    // Reopened without naming the keyspace: recovery's flush of the replayed writes and the
    // compaction below still use the options the manifest recorded.
    let db = Db::open(dir.path(), small_tables()).unwrap();
    assert_eq!(db.keyspace_names(), ["default", "logs", "idx"]);
    let replayed: Vec<_> = ks_tables(&db, "logs").into_iter().filter(|t| t.level == 0).collect();
    assert!(!replayed.is_empty(), "recovery flushed the replayed writes to L0");
    assert!(replayed.iter().all(|t| t.filter_kind == FilterKind::None), "{replayed:?}");
    for t in &replayed {
        let file = bloomkv::fs::FileSystem::open(&bloomkv::fs::StdFs, &t.path).unwrap();
        let table = bloomkv_tree::table::Table::open(file, t.path.clone(), None).unwrap();
        assert_eq!(table.properties().compression, Compression::Zstd { level: 1 });
    }
    db.compact().unwrap();
    let logs = ks_tables(&db, "logs");
    assert!(!logs.is_empty());
    assert!(logs.iter().all(|t| t.filter_kind == FilterKind::None), "{logs:?}");
    // Opening it with other options records them: new tables use them.
    let blocked =
        KeyspaceOptions::new().filter_policy(FilterPolicy::BlockedBloom { bits_per_key: 10.0 });
    let handle = db.keyspace("logs", blocked.clone()).unwrap();
    handle.put("9999", "late").unwrap();
    db.flush().unwrap();
    let newest = ks_tables(&db, "logs").into_iter().find(|t| t.level == 0).unwrap();
    assert_eq!(newest.filter_kind, FilterKind::Blocked);
    db.close().unwrap();
    // The change is recorded too: a compaction after the next open, before the keyspace is
    // opened again, rewrites the newest table with it.
    let db = Db::open(dir.path(), small_tables()).unwrap();
    db.compact().unwrap();
    let last = ks_tables(&db, "logs").into_iter().find(|t| t.largest_key == b"9999").unwrap();
    assert!(last.level > 0, "{last:?}");
    assert_eq!(last.filter_kind, FilterKind::Blocked);
    assert_eq!(get(db.keyspace("logs", blocked).unwrap().get("0599")), Some(b"line".to_vec()));
}

#[test]
fn a_batch_across_keyspaces_is_one_atomic_write() {
    let (dir, db) = open_temp(small_tables());
    let users = db.keyspace("users", KeyspaceOptions::default()).unwrap();
    let emails = db.keyspace("emails", KeyspaceOptions::default()).unwrap();
    let mut batch = WriteBatch::new();
    batch.put_in(&users, "u1", "ada@example.com");
    batch.put_in(&emails, "ada@example.com", "u1");
    batch.put("count", "1");
    batch.delete_range_in(&users, "u5".."u9");
    let before = db.snapshot();
    db.write(&batch, &WriteOptions::default()).unwrap();
    let after = db.snapshot();
    // One sequence number step per op, shared by the keyspaces.
    assert_eq!(after.sequence(), before.sequence() + 4);
    assert_eq!(get(before.keyspace(&users).unwrap().get("u1")), None);
    assert_eq!(get(before.keyspace(&emails).unwrap().get("ada@example.com")), None);
    assert_eq!(get(after.keyspace(&users).unwrap().get("u1")), Some(b"ada@example.com".to_vec()));
    assert_eq!(get(after.keyspace(&emails).unwrap().get("ada@example.com")), Some(b"u1".to_vec()));
    assert_eq!(get(after.get("count")), Some(b"1".to_vec()));

    // A batch naming a dropped keyspace is refused whole.
    let scratch = db.keyspace("scratch", KeyspaceOptions::default()).unwrap();
    let mut batch = WriteBatch::new();
    batch.put_in(&users, "u2", "grace@example.com");
    batch.put_in(&scratch, "k", "v");
    db.drop_keyspace("scratch").unwrap();
    let e = db.write(&batch, &WriteOptions::default()).unwrap_err();
    assert!(matches!(&e, Error::KeyspaceDropped { name } if name == "scratch"), "{e}");
    assert_eq!(get(users.get("u2")), None);

    // Killed without close: the batch comes back from the WAL alone, in every keyspace.
    drop(after);
    drop(before);
    std::mem::forget(db);
    let db = Db::open_read_only(dir.path(), small_tables()).unwrap();
    let users = db.keyspace("users", KeyspaceOptions::default()).unwrap();
    let emails = db.keyspace("emails", KeyspaceOptions::default()).unwrap();
    assert_eq!(get(users.get("u1")), Some(b"ada@example.com".to_vec()));
    assert_eq!(get(emails.get("ada@example.com")), Some(b"u1".to_vec()));
    assert_eq!(db.keyspace_names(), ["default", "users", "emails"]);
    // A read-only handle cannot create one.
    let e = db.keyspace("new", KeyspaceOptions::default()).unwrap_err();
    assert!(matches!(e, Error::ReadOnly), "{e}");
}

#[test]
fn a_dropped_keyspace_is_gone_for_good_even_where_its_writes_are_still_in_the_wal() {
    use bloomkv::fs::fault::{unique_dir, CrashMode, FaultFs};
    use std::sync::Arc;
    let fs = FaultFs::new();
    let dir = unique_dir("drop");
    let on = |fs: &FaultFs| small_tables().fault_fs(fs);
    let db = Db::open(&dir, on(&fs)).unwrap();
    let temp = db.keyspace("temp", KeyspaceOptions::default()).unwrap();
    let keep = db.keyspace("keep", KeyspaceOptions::default()).unwrap();
    for i in 0..2000u32 {
        temp.put(format!("{i:05}"), "gone").unwrap();
        keep.put(format!("{i:05}"), "kept").unwrap();
    }
    // Compacted to its last level, the tree gives background compaction nothing to do, so no
    // compaction replaces (and deletes) the tables listed below before the snapshot holds them.
    db.compact().unwrap();
    // More writes that stay in the memtable and the WAL.
    for i in 0..50u32 {
        temp.put(format!("late{i}"), "gone").unwrap();
    }
    let files: Vec<_> = ks_tables(&db, "temp").into_iter().map(|t| t.path).collect();
    assert!(!files.is_empty());
    let old = temp.snapshot();
    db.drop_keyspace("temp").unwrap();

    assert_eq!(db.keyspace_names(), ["default", "keep"]);
    for e in [temp.get("00001").unwrap_err(), temp.put("x", "y").unwrap_err()] {
        assert!(matches!(&e, Error::KeyspaceDropped { name } if name == "temp"), "{e}");
    }
    assert!(matches!(temp.range(..).next(), Some(Err(Error::KeyspaceDropped { .. }))));
    assert!(matches!(temp.cursor(..).seek_to_first(), Err(Error::KeyspaceDropped { .. })));
    assert!(matches!(db.drop_keyspace("temp"), Err(Error::KeyspaceDropped { .. })));
    assert!(matches!(db.drop_keyspace("default"), Err(Error::InvalidArgument(_))));
    // A snapshot from before the drop still reads it, and keeps its files until dropped.
    assert_eq!(get(old.get("late3")), Some(b"gone".to_vec()));
    assert!(files.iter().all(|f| fs.contents(f).is_some()));
    drop(old);
    db.wait_for_file_removals();
    assert!(files.iter().all(|f| fs.contents(f).is_none()), "its tables are deleted");

    // A keyspace created under the old name is a new, empty one — also after a crash
    // whose WAL replay meets the old keyspace's writes.
    let temp2 = db.keyspace("temp", KeyspaceOptions::default()).unwrap();
    assert_eq!(get(temp2.get("late3")), None);
    temp2.put("fresh", "1").unwrap();
    db.sync().unwrap();
    // Power off now: the old keyspace's last writes are in a synced WAL segment, and so
    // are the new one's.
    let after = fs.crash(CrashMode::DropUnsynced);
    drop(db);
    let db = Db::open(&dir, on(&after)).unwrap();
    assert_eq!(db.keyspace_names(), ["default", "keep", "temp"]);
    let temp = db.keyspace("temp", KeyspaceOptions::default()).unwrap();
    assert_eq!(keys_of(temp.range(..)), [b"fresh".to_vec()]);
    let keep = db.keyspace("keep", KeyspaceOptions::default()).unwrap();
    assert_eq!(keys_of(keep.range(..)).len(), 2000);
    db.close().unwrap();
    let report = bloomkv::check::database(Arc::new(after), &dir);
    assert_eq!(report.status(), bloomkv::check::Status::Ok, "{report:?}");
}

#[test]
fn checkpoints_ingests_and_bad_names() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("db"), small_tables()).unwrap();
    let a = db.keyspace("a", KeyspaceOptions::default()).unwrap();
    assert_eq!(a.ingest((0..1000u32).map(|i| (format!("{i:04}"), "ingested"))).unwrap(), 1000);
    a.put("0001", "newer").unwrap();
    db.put("d", "default").unwrap();
    let seq = db.checkpoint(dir.path().join("copy")).unwrap();
    a.put("0002", "after the checkpoint").unwrap();
    let copy = Db::open(dir.path().join("copy"), small_tables()).unwrap();
    let ca = copy.keyspace("a", KeyspaceOptions::default()).unwrap();
    assert_eq!(get(ca.get("0001")), Some(b"newer".to_vec()));
    assert_eq!(get(ca.get("0002")), Some(b"ingested".to_vec()));
    assert_eq!(keys_of(ca.range(..)).len(), 1000);
    assert_eq!(get(copy.get("d")), Some(b"default".to_vec()));
    assert_eq!(copy.snapshot().sequence(), seq);
    assert_eq!(get(db.get("0001")), None, "the ingest went to keyspace a only");

    for bad in ["", &"x".repeat(256)] {
        let e = db.keyspace(bad, KeyspaceOptions::default()).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    }
    let e = db.keyspace("b", KeyspaceOptions::new().block_bytes(1)).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    // The default keyspace's options belong to `Options`.
    assert!(db.keyspace("default", KeyspaceOptions::new().target_table_bytes(8 << 10)).is_ok());
    let other = KeyspaceOptions::new().filter_policy(FilterPolicy::None);
    assert!(matches!(db.keyspace("default", other), Err(Error::InvalidArgument(_))));
}

#[test]
fn keyspaces_are_shared_between_threads_and_concurrent_creates_agree() {
    let (_dir, db) = open_temp(small_tables());
    std::thread::scope(|s| {
        for t in 0..4u32 {
            let db = &db;
            s.spawn(move || {
                let ks = db.keyspace("shared", KeyspaceOptions::default()).unwrap();
                let own = db.keyspace(format!("own{t}"), KeyspaceOptions::default()).unwrap();
                for i in 0..500u32 {
                    let mut b = WriteBatch::new();
                    b.put_in(&ks, format!("{t}-{i:04}"), "s");
                    b.put_in(&own, format!("{i:04}"), "o");
                    db.write(&b, &WriteOptions::default()).unwrap();
                }
            });
        }
    });
    let names = db.keyspace_names();
    assert_eq!(names.len(), 6, "{names:?}");
    assert_eq!(names.iter().filter(|n| *n == "shared").count(), 1);
    let shared = db.keyspace("shared", KeyspaceOptions::default()).unwrap();
    assert_eq!(keys_of(shared.range(..)).len(), 2000);
    for t in 0..4 {
        let own = db.keyspace(format!("own{t}"), KeyspaceOptions::default()).unwrap();
        assert_eq!(keys_of(own.range(..)).len(), 500);
    }
}

#[test]
fn a_wal_record_for_a_keyspace_the_manifest_never_created_is_corruption() {
    use bloomkv_tree::filename::{self, FileKind};
    let dir = tempfile::tempdir().unwrap();
    Db::open(dir.path(), small_tables()).unwrap().close().unwrap();
    let wal = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            match filename::parse(&name) {
                Some(FileKind::Wal(n)) => Some(n),
                _ => None,
            }
        })
        .max()
        .unwrap();
    let last = filename::wal_path(dir.path(), wal);
    // The last segment holds only its header, an empty batch naming the next sequence
    // number; a forged next segment continues from it with one put to keyspace 7.
    let header = bloomkv_tree::log::LogReader::new(last.clone(), std::fs::read(&last).unwrap())
        .next_record()
        .unwrap()
        .unwrap();
    let next = WriteBatch::decode(header).unwrap().sequence();
    let mut record = next.to_le_bytes().to_vec();
    record.extend_from_slice(&1u32.to_le_bytes());
    record.extend_from_slice(&[0x81, 7, 1, b'k', 1, b'v']);
    let path = filename::wal_path(dir.path(), wal + 1);
    let fs = bloomkv::fs::StdFs;
    let mut w =
        bloomkv_tree::log::LogWriter::new(bloomkv::fs::FileSystem::create(&fs, &path).unwrap());
    w.add_record(&record).unwrap();
    w.sync().unwrap();
    drop(w);
    match Db::open(dir.path(), small_tables()) {
        Err(Error::Corruption { file, reason, .. }) => {
            assert_eq!(file, path);
            assert!(reason.contains("keyspace 7"), "{reason}");
        }
        other => panic!("expected corruption, got {other:?}"),
    }
}

#[test]
fn writes_to_any_keyspace_count_against_the_one_write_buffer() {
    let dir = tempfile::tempdir().unwrap();
    let memtable = 64 << 10;
    let db = Db::open(dir.path(), Options::default().memtable_bytes(memtable)).unwrap();
    let a = db.keyspace("a", KeyspaceOptions::default()).unwrap();
    let value = vec![7u8; 100];
    let mut peak = 0;
    for i in 0..20_000u32 {
        a.put(format!("{i:08}"), &value).unwrap();
        if i % 500 == 0 {
            peak = peak.max(db.stats().memtable_bytes);
        }
    }
    // 2 MB written to a keyspace other than the default one: its memtables were switched
    // and flushed like the default one's, so memory stayed within the active memtable plus
    // the immutable ones allowed (two by default), with a little slack for the entry that
    // crosses the limit.
    assert!(peak <= 3 * memtable as u64 + 4096, "peak memtable bytes {peak}");
    assert!(db.stats().flushes >= 10, "{:?}", db.stats().flushes);
    assert!(!ks_tables(&db, "a").is_empty());
    assert!(ks_tables(&db, "default").is_empty());
}

/// Regression: a flush recorded as durable only the newest sequence number its tables
/// held, so when a dropped keyspace's writes were the last in the retired WAL segment, the
/// manifest stopped short of the next segment's first sequence number and the next open
/// refused the database as missing writes. Found by the model test.
#[test]
fn writes_to_a_dropped_keyspace_leave_no_gap_in_the_sequence_numbers() {
    let (dir, db) = open_temp(small_tables());
    let a = db.keyspace("a", KeyspaceOptions::default()).unwrap();
    db.put("x", "1").unwrap();
    a.put("k", "v").unwrap();
    db.drop_keyspace("a").unwrap();
    db.flush().unwrap();
    db.put("y", "2").unwrap();
    db.close().unwrap();
    let db = Db::open(dir.path(), small_tables()).unwrap();
    assert_eq!(get(db.get("x")), Some(b"1".to_vec()));
    assert_eq!(get(db.get("y")), Some(b"2".to_vec()));
}

#[test]
fn a_handle_of_another_database_is_refused_everywhere() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = Db::open(dir_a.path(), small_tables()).unwrap();
    let b = Db::open(dir_b.path(), small_tables()).unwrap();
    // Same names, created in the same order: the same ids in both databases.
    let orders_a = a.keyspace("orders", KeyspaceOptions::default()).unwrap();
    let orders_b = b.keyspace("orders", KeyspaceOptions::default()).unwrap();
    orders_b.put("o1", "b's order").unwrap();
    let foreign = |r: bloomkv::Result<()>| matches!(r, Err(Error::ForeignKeyspace { name }) if name == "orders");

    let mut batch = WriteBatch::new();
    batch.put_in(&orders_a, "o1", "a's order");
    assert!(foreign(b.write(&batch, &WriteOptions::default())));
    let mut batch = WriteBatch::new();
    batch.delete_in(&orders_a, "o1");
    assert!(foreign(b.write(&batch, &WriteOptions::default())));
    let mut batch = WriteBatch::new();
    batch.delete_range_in(&orders_a, "a".."z");
    assert!(foreign(b.write(&batch, &WriteOptions::default())));
    // A batch mixing both databases' handles fits neither.
    let mut mixed = WriteBatch::new();
    mixed.put_in(&orders_b, "o2", "b");
    mixed.put_in(&orders_a, "o2", "a");
    assert!(foreign(b.write(&mixed, &WriteOptions::default())));
    assert!(foreign(a.write(&mixed, &WriteOptions::default())));
    assert_eq!(get(orders_b.get("o1")), Some(b"b's order".to_vec()), "b was written to");
    assert_eq!(get(orders_b.get("o2")), None);
    assert_eq!(get(orders_a.get("o1")), None);
    let snap = b.snapshot();
    assert!(matches!(snap.keyspace(&orders_a), Err(Error::ForeignKeyspace { .. })));
    assert_eq!(get(snap.keyspace(&orders_b).unwrap().get("o1")), Some(b"b's order".to_vec()));

    // The batch is fine in its own database, and cleared it takes other handles.
    let mut batch = WriteBatch::new();
    batch.put_in(&orders_a, "o1", "a's order");
    a.write(&batch, &WriteOptions::default()).unwrap();
    batch.clear();
    batch.put_in(&orders_b, "o3", "b");
    b.write(&batch, &WriteOptions::default()).unwrap();

    // A handle from an earlier opening of the same directory is another database's too.
    a.close().unwrap();
    drop(a);
    let a = Db::open(dir_a.path(), small_tables()).unwrap();
    let mut batch = WriteBatch::new();
    batch.put_in(&orders_a, "o9", "stale handle");
    assert!(foreign(a.write(&batch, &WriteOptions::default())));
    assert!(matches!(a.snapshot().keyspace(&orders_a), Err(Error::ForeignKeyspace { .. })));
    let orders = a.existing_keyspace("orders").unwrap();
    assert_eq!(get(orders.get("o1")), Some(b"a's order".to_vec()));
    assert_eq!(get(orders.get("o9")), None);
}

#[test]
fn a_keyspace_handle_keeps_its_database_open_until_the_last_handle_goes() {
    let dir = tempfile::tempdir().unwrap();
    let users = {
        let db = Db::open(dir.path(), small_tables()).unwrap();
        db.keyspace("users", KeyspaceOptions::default()).unwrap()
    };
    // The `Db` is gone; the handle works and the LOCK is still held.
    users.put("u1", "ada").unwrap();
    assert_eq!(get(users.get("u1")), Some(b"ada".to_vec()));
    assert!(matches!(Db::open(dir.path(), small_tables()), Err(Error::Locked { .. })));
    let clone = users.clone();
    drop(users);
    clone.put("u2", "grace").unwrap();
    drop(clone);
    // The last handle closed it: the directory opens again, with both writes.
    let db = Db::open(dir.path(), small_tables()).unwrap();
    let users = db.existing_keyspace("users").unwrap();
    assert_eq!(get(users.get("u2")), Some(b"grace".to_vec()));

    // `close` closes the database under every handle at once.
    db.close().unwrap();
    assert!(matches!(users.put("u3", "x"), Err(Error::Closed)));
    assert!(matches!(users.get("u1"), Err(Error::Closed)));
    let again = Db::open(dir.path(), small_tables()).unwrap();
    assert_eq!(get(again.existing_keyspace("users").unwrap().get("u1")), Some(b"ada".to_vec()));
}

#[test]
fn prefix_and_open_range_deletes_stay_in_their_keyspace() {
    let (_dir, db) = open_temp(small_tables());
    let a = db.keyspace("a", KeyspaceOptions::default()).unwrap();
    for k in ["s/1", "s/2", "t/1"] {
        db.put(k, "default").unwrap();
        a.put(k, "a").unwrap();
    }
    let mut batch = WriteBatch::new();
    batch.delete_prefix_in(&a, "s/");
    db.write(&batch, &WriteOptions::default()).unwrap();
    assert_eq!(keys_of(a.range(..)), [b"t/1".to_vec()]);
    assert_eq!(keys_of(db.range(..)).len(), 3);
    a.delete_range("t"..).unwrap();
    assert!(keys_of(a.range(..)).is_empty());
    db.delete_prefix("t/").unwrap();
    assert_eq!(keys_of(db.range(..)), [b"s/1".to_vec(), b"s/2".to_vec()]);
}
