//! Corruption tests in the style of LevelDB's `corruption_test`: build a real database, damage
//! one file, open and read everything. Every outcome must be correct data or an error naming
//! the damaged file — never a panic, never wrong data.

use std::path::Path;
use std::sync::Arc;

use bloomkv::fs::{fault::unique_dir, FaultFs, FileSystem};
use bloomkv::{Db, Error, Options, Readable};
use bloomkv_tree::key::{internal_key, ValueKind};
use bloomkv_tree::log::LogWriter;
use bloomkv_tree::version::edit::{TableMeta, VersionEdit};
use bloomkv_tree::version::manifest::{set_current, RecoveredManifest};

mod common;

use common::files::is_table;
use common::keys::key6;
use common::model::{scan, try_model, Model};
use common::options::OptionsExt;

fn expect_corruption_in(r: bloomkv::Result<Db>, file: &Path) {
    match r {
        Err(Error::Corruption { file: f, .. }) => assert_eq!(f, file),
        Err(e) => panic!("expected corruption in {}, got {e:?}", file.display()),
        Ok(_) => panic!("expected corruption in {}, the open succeeded", file.display()),
    }
}

/// Asserts that `opened` is a refusal as corruption of `file` whose reason mentions `cause`
/// (`what` names the case in messages). An open that succeeds fails the test with `cost`'s
/// account of what a reader of the accepted database would get wrong.
fn expect_refused(
    opened: bloomkv::Result<Db>,
    file: &Path,
    cause: &str,
    what: &str,
    cost: impl FnOnce(Db) -> String,
) {
    match opened {
        Err(Error::Corruption { file: f, reason, .. }) => {
            assert_eq!(f, file, "{what}");
            assert!(reason.contains(cause), "{what}: {reason}");
        }
        Err(e) => panic!("{what}: expected corruption, got {e:?}"),
        Ok(db) => panic!("{what}: the open succeeded; {}", cost(db)),
    }
}

/// How many of the five keys `overlapping_flushes` overwrote (`k5`..`k9`) read their old
/// value.
fn stale_of_five(db: &Db) -> String {
    let stale =
        (5..10u8).filter(|&i| db.get([b'k', i]).unwrap().is_some_and(|v| v == b"old"[..])).count();
    format!("{stale} of the 5 overwritten keys read their old value")
}

/// Regression: an edit naming a level the format allows (< 16) but the engine lacks (>= 7)
/// made `read_manifest` index out of bounds and panic.
#[test]
fn manifest_edit_with_a_level_beyond_the_engine_is_corruption() {
    let fs = FaultFs::new();
    let dir = unique_dir("level");
    let opts = || Options::default().fault_fs(&fs);
    Db::open(&dir, opts()).unwrap().close().unwrap();
    for level in [7usize, 9, 15] {
        let meta = TableMeta {
            keyspace: 0,
            number: 800,
            file_size: 100,
            smallest: internal_key(b"a", 1, ValueKind::Put),
            largest: internal_key(b"b", 1, ValueKind::Put),
            smallest_seq: 1,
            largest_seq: 1,
            num_entries: 2,
            blob_refs: Vec::new(),
        };
        let edit = VersionEdit {
            log_number: Some(0),
            next_file_number: Some(1000),
            last_seq: Some(1),
            added: vec![(level, meta)],
            ..VersionEdit::default()
        };
        let path = install_manifest(&fs, &dir, 900 + level as u64, &[edit]);
        expect_corruption_in(Db::open(&dir, opts()), &path);
    }
}

/// Regression (found by `fuzz_stable`'s manifest driver): a later edit could lower the next
/// keyspace id below a keyspace already defined, and the manifest was accepted; the next
/// `Db::keyspace` would then have handed out the existing keyspace's id, mixing the two.
#[test]
fn manifest_whose_keyspace_id_counter_goes_back_is_corruption() {
    use bloomkv::KeyspaceOptions;
    use bloomkv_tree::version::edit::KeyspaceDef;
    let fs = FaultFs::new();
    let opts = || Options::default().fault_fs(&fs);
    for (lowered, refused) in [(Some(1), true), (Some(0), true), (Some(2), false), (None, false)] {
        let dir = unique_dir("ksid");
        Db::open(&dir, opts()).unwrap().close().unwrap();
        let create = VersionEdit {
            log_number: Some(0),
            next_file_number: Some(1000),
            last_seq: Some(0),
            keyspaces: vec![KeyspaceDef {
                id: 1,
                name: "a".into(),
                opts: KeyspaceOptions::default(),
                callbacks: None,
            }],
            next_keyspace_id: Some(2),
            ..VersionEdit::default()
        };
        let later = VersionEdit { next_keyspace_id: lowered, ..VersionEdit::default() };
        let path = install_manifest(&fs, &dir, 900, &[create, later]);
        if refused {
            expect_corruption_in(Db::open(&dir, opts()), &path);
        } else {
            // The counter kept (or not restated): a new keyspace gets a fresh id and stays
            // apart from the existing one.
            let db = Db::open(&dir, opts()).unwrap();
            let a = db.existing_keyspace("a").unwrap();
            let b = db.keyspace("b", KeyspaceOptions::default()).unwrap();
            a.put(b"k", b"in a").unwrap();
            b.put(b"k", b"in b").unwrap();
            assert_eq!(a.get(b"k").unwrap().unwrap(), &b"in a"[..]);
            assert_eq!(b.get(b"k").unwrap().unwrap(), &b"in b"[..]);
            db.close().unwrap();
        }
    }
}

/// A manifest whose last sequence goes back, or that names a table holding entries newer
/// than its last sequence, is corruption: opened, the table's newer entries would be invisible
/// (reads see up to the last sequence) and new writes would be numbered below them.
#[test]
fn manifest_whose_last_sequence_is_behind_its_tables_is_corruption() {
    let fs = FaultFs::new();
    let opts = || Options::default().fault_fs(&fs);
    for what in ["table beyond", "goes back"] {
        // A real table holding sequences 1..=10.
        let dir = unique_dir("lastseq");
        let db = Db::open(&dir, opts()).unwrap();
        for i in 0..10u8 {
            db.put([b'k', i], [i]).unwrap();
        }
        db.flush().unwrap();
        db.close().unwrap();
        let m = bloomkv_tree::version::manifest::read_manifest(&fs, &dir).unwrap();
        let tables: Vec<(usize, TableMeta)> = m.keyspaces[0]
            .levels
            .iter()
            .enumerate()
            .flat_map(|(level, ts)| ts.iter().map(move |t| (level, t.clone())))
            .collect();
        assert_eq!(tables.len(), 1);
        assert_eq!(tables[0].1.largest_seq, 10);
        // The log number says every WAL segment is flushed, so no segment's header follows
        // the manifest's last sequence to show a gap (that check catches a lowered last
        // sequence when one does).
        let edit = |last_seq| VersionEdit {
            log_number: Some(m.next_file_number + 15),
            next_file_number: Some(m.next_file_number + 20),
            last_seq: Some(last_seq),
            added: tables.clone(),
            ..VersionEdit::default()
        };
        let edits = match what {
            "table beyond" => vec![edit(3)],
            _ => vec![edit(10), VersionEdit { last_seq: Some(3), ..VersionEdit::default() }],
        };
        let path = install_manifest(&fs, &dir, m.next_file_number + 10, &edits);
        expect_refused(Db::open(&dir, opts()), &path, "sequence", what, |db| {
            let seen = (0..10u8).filter(|&i| db.get([b'k', i]).unwrap().is_some()).count();
            format!("{seen} of the 10 keys are visible")
        });
    }
}

/// A manifest placing overlapping tables on one sorted level is corruption: a lookup asks
/// one table per level and could answer from the one holding an older version.
#[test]
fn manifest_with_overlapping_tables_on_a_sorted_level_is_corruption() {
    let (fs, dir, opts) = scratch("overlap");
    let db = Db::open(&dir, opts()).unwrap();
    overlapping_flushes(&db);
    let m = closed_manifest(&fs, &dir, db);
    let tables: Vec<TableMeta> = m.keyspaces[0].levels[0].clone();
    assert_eq!(tables.len(), 2, "two flushes, two L0 tables");
    let path = rewrite_manifest(&fs, &dir, &m, tables, 6);
    expect_refused(Db::open(&dir, opts()), &path, "overlap", "L6", |db| stale_of_five(&db));
}

/// A fresh in-memory file system and database directory for a test that rewrites the
/// manifest, and the options that open the database there.
fn scratch(name: &str) -> (FaultFs, PathBuf, impl Fn() -> Options) {
    let fs = FaultFs::new();
    let on = fs.clone();
    (fs, unique_dir(name), move || Options::default().fault_fs(&on))
}

/// Closes `db` and reads the manifest it left.
fn closed_manifest(fs: &FaultFs, dir: &Path, db: Db) -> RecoveredManifest {
    db.close().unwrap();
    bloomkv_tree::version::manifest::read_manifest(fs, dir).unwrap()
}

/// `k0`..`k9` = `v`.
fn put_ten(db: &Db) {
    for i in 0..10u8 {
        db.put([b'k', i], b"v").unwrap();
    }
}

/// Two flushes: `k0`..`k9` = `old`, then `k5`..`k14` = `new`: two overlapping L0 tables, the
/// second one newer.
fn overlapping_flushes(db: &Db) {
    for i in 0..10u8 {
        db.put([b'k', i], b"old").unwrap();
    }
    db.flush().unwrap();
    for i in 5..15u8 {
        db.put([b'k', i], b"new").unwrap();
    }
    db.flush().unwrap();
}

/// Writes manifest `number` holding `edits` and makes it current; returns its path.
fn install_manifest(
    fs: &FaultFs,
    dir: &Path,
    number: u64,
    edits: &[VersionEdit],
) -> std::path::PathBuf {
    let path = bloomkv_tree::filename::manifest_path(dir, number);
    let mut w = LogWriter::new(fs.create(&path).unwrap());
    for e in edits {
        w.add_record(&e.encode()).unwrap();
    }
    w.sync().unwrap();
    set_current(fs, dir, number).unwrap();
    path
}

/// The counters of the recovered manifest `m` (the next file number raised past the one a
/// rewrite takes), as an edit to build a rewritten manifest's one edit on.
fn restated(m: &RecoveredManifest) -> VersionEdit {
    VersionEdit {
        log_number: Some(m.log_number),
        next_file_number: Some(m.next_file_number + 20),
        last_seq: Some(m.last_seq),
        ..VersionEdit::default()
    }
}

/// Replaces the manifest of `m` with one edit: its counters, and `edit`'s changes.
fn rewrite_manifest_with(
    fs: &FaultFs,
    dir: &Path,
    m: &RecoveredManifest,
    edit: VersionEdit,
) -> std::path::PathBuf {
    install_manifest(fs, dir, m.next_file_number + 10, &[edit])
}

/// Replaces the manifest of `m` with one that puts `tables` on `level`.
fn rewrite_manifest(
    fs: &FaultFs,
    dir: &Path,
    m: &RecoveredManifest,
    tables: Vec<TableMeta>,
    level: usize,
) -> std::path::PathBuf {
    let added = tables.into_iter().map(|t| (level, t)).collect();
    rewrite_manifest_with(fs, dir, m, VersionEdit { added, ..restated(m) })
}

/// Two tables of a sorted level that only share a bounding key still overlap: a lookup of
/// that key asks the one table whose largest key it is, and never the neighbour that holds
/// it. Here the left table's range ends where its range tombstone ends (exclusive, so the
/// tombstone does not cover the key), and the right one holds the key's only value.
#[test]
fn manifest_with_touching_tables_on_a_sorted_level_is_corruption() {
    let (fs, dir, opts) = scratch("touching");
    let db = Db::open(&dir, opts()).unwrap();
    db.put(b"k9", b"v").unwrap();
    db.flush().unwrap();
    db.put(b"k0", b"x").unwrap();
    db.delete_range(&b"k2"[..]..&b"k9"[..]).unwrap();
    db.flush().unwrap();
    let m = closed_manifest(&fs, &dir, db);
    let tables: Vec<TableMeta> = m.keyspaces[0].levels[0].clone();
    let bounds: Vec<(&[u8], &[u8])> = tables
        .iter()
        .map(|t| {
            (bloomkv_tree::key::user_key(&t.smallest), bloomkv_tree::key::user_key(&t.largest))
        })
        .collect();
    assert!(
        bounds.contains(&(&b"k0"[..], &b"k9"[..])) && bounds.contains(&(&b"k9"[..], &b"k9"[..])),
        "the tables touch at k9: {bounds:?}"
    );
    let path = rewrite_manifest(&fs, &dir, &m, tables, 6);
    expect_refused(Db::open(&dir, opts()), &path, "overlap", "touching at k9", |db| {
        format!("k9 reads {:?} instead of \"v\"", db.get(b"k9").unwrap())
    });
}

/// L0 tables are asked by their newest entry, newest first, and the first version found
/// answers, so of two overlapping L0 tables the one asked first must hold only newer entries
/// than the other. The engine never writes two whose sequence ranges interleave (flushes
/// follow the writes' order, an ingest's one number lies between flushes'). Here a
/// compaction's output holding the old `k0`..`k9` (and newer, unrelated `k20`..`k29`) is put
/// back on L0 beside a table holding newer `k5`..`k9` at sequence numbers in between, taken
/// from a second database: asked first, the compacted table would answer with old values.
#[test]
fn l0_tables_whose_sequence_ranges_interleave_are_corruption() {
    let (fs, dir, opts) = scratch("l0-order");
    let db = Db::open(&dir, opts()).unwrap();
    for i in 0..10u8 {
        db.put([b'k', i], b"old").unwrap();
    }
    db.flush().unwrap();
    for i in 20..30u8 {
        db.put([b'k', i], b"later").unwrap();
    }
    db.compact().unwrap();
    let m = closed_manifest(&fs, &dir, db);
    let compacted: Vec<TableMeta> = m.keyspaces[0].levels.iter().flatten().cloned().collect();
    assert_eq!(compacted.len(), 1, "one compacted table");
    assert_eq!((compacted[0].smallest_seq, compacted[0].largest_seq), (1, 20));

    let (other_fs, other_dir, other_opts) = scratch("l0-order-other");
    let other = Db::open(&other_dir, other_opts()).unwrap();
    for i in 0..10u8 {
        other.put([b'z', i], b"filler").unwrap();
    }
    other.flush().unwrap();
    for i in 5..10u8 {
        other.put([b'k', i], b"new").unwrap();
    }
    other.flush().unwrap();
    let om = closed_manifest(&other_fs, &other_dir, other);
    let mut newer = om.keyspaces[0].levels[0]
        .iter()
        .find(|t| t.smallest_seq == 11)
        .expect("the table of the newer writes")
        .clone();
    assert_eq!(newer.largest_seq, 15);
    let bytes =
        other_fs.read_all(&bloomkv_tree::filename::table_path(&other_dir, newer.number)).unwrap();
    newer.number = m.next_file_number + 5;
    let mut f = fs.create(&bloomkv_tree::filename::table_path(&dir, newer.number)).unwrap();
    f.append(&bytes).unwrap();
    f.sync().unwrap();
    drop(f);

    let path = rewrite_manifest(&fs, &dir, &m, vec![compacted[0].clone(), newer], 0);
    expect_refused(Db::open(&dir, opts()), &path, "L0 tables", "L0 order", |db| stale_of_five(&db));
}

/// A manifest naming one table file twice is corruption. Here the default keyspace and a
/// second one both name one table. Accepted, the database opens and reads, but once the
/// second keyspace is dropped it no longer opens: the drop's deletion, replayed, takes the
/// default keyspace's entry, and the dropped keyspace still has a table.
#[test]
fn manifest_adding_a_live_table_again_is_corruption() {
    let (fs, dir, opts) = scratch("twice");
    let db = Db::open(&dir, opts()).unwrap();
    db.keyspace("other", bloomkv::KeyspaceOptions::default()).unwrap();
    put_ten(&db);
    db.flush().unwrap();
    let m = closed_manifest(&fs, &dir, db);
    let table = m.keyspaces[0].levels[0][0].clone();
    let other = m.keyspaces.iter().find(|k| k.def.name == "other").unwrap().def.clone();
    let edit = VersionEdit {
        next_keyspace_id: Some(m.next_keyspace_id),
        keyspaces: vec![other.clone()],
        added: vec![(0, table.clone()), (0, TableMeta { keyspace: other.id, ..table })],
        ..restated(&m)
    };
    let path = rewrite_manifest_with(&fs, &dir, &m, edit);
    expect_refused(Db::open(&dir, opts()), &path, "already live", "shared table", |db| {
        db.drop_keyspace("other").unwrap();
        db.close().unwrap();
        let again = Db::open(&dir, opts()).map(|_| ());
        format!("after dropping the other keyspace the next open gives {again:?}")
    });
}

/// A manifest whose log number retires a WAL segment holding writes no table has is
/// corruption naming the segment: opened, the writes would be gone, and the segment deleted.
#[test]
fn manifest_retiring_an_unflushed_wal_segment_is_corruption() {
    let (fs, dir, opts) = scratch("retired-wal");
    let db = Db::open(&dir, opts()).unwrap();
    put_ten(&db);
    // Not flushed: the WAL segment alone holds the writes.
    let m = closed_manifest(&fs, &dir, db);
    let wal = bloomkv_tree::filename::wal_path(&dir, m.log_number);
    assert!(fs.exists(&wal), "the writes are in WAL segment {}", m.log_number);
    let edit = VersionEdit { log_number: Some(m.log_number + 1), ..restated(&m) };
    rewrite_manifest_with(&fs, &dir, &m, edit);
    expect_refused(Db::open(&dir, opts()), &wal, "last sequence", "skipped WAL", |db| {
        let lost = (0..10u8).filter(|&i| db.get([b'k', i]).unwrap().is_none()).count();
        format!("{lost} of the 10 acknowledged keys are gone")
    });
    assert!(fs.exists(&wal), "the segment is kept");
    // `verify` gives recovery the last word, so it reports the same.
    let report = bloomkv::check::database(Arc::new(fs.clone()), &dir);
    assert!(
        report.problems.iter().any(|p| p.file == wal && p.what.contains("last sequence")),
        "verify reports what recovery refuses: {:?}",
        report.problems
    );
}

/// A table whose manifest record disagrees with the table's own properties is corruption,
/// naming the table: a lookup trusts the record's key range to decide whether to ask the
/// table at all, so a record narrower than the table hides the keys outside it.
#[test]
fn table_contradicting_its_manifest_record_is_corruption() {
    let (fs, dir, opts) = scratch("record");
    let db = Db::open(&dir, opts()).unwrap();
    put_ten(&db);
    db.flush().unwrap();
    let m = closed_manifest(&fs, &dir, db);
    let table = m.keyspaces[0].levels[0][0].clone();
    let table_path = bloomkv_tree::filename::table_path(&dir, table.number);
    type Lie = fn(&mut TableMeta);
    let lies: [(&str, Lie); 4] = [
        ("a narrower key range", |t| t.largest = internal_key(&[b'k', 4], 5, ValueKind::Put)),
        ("a wider key range", |t| t.smallest = internal_key(b"a", 1, ValueKind::Put)),
        ("an older newest sequence", |t| t.largest_seq -= 1),
        ("fewer entries", |t| t.num_entries -= 1),
    ];
    for (what, lie) in lies {
        let mut told = table.clone();
        lie(&mut told);
        rewrite_manifest(&fs, &dir, &m, vec![told], 1);
        expect_refused(Db::open(&dir, opts()), &table_path, "manifest records", what, |db| {
            let hidden = (0..10u8).filter(|&i| db.get([b'k', i]).unwrap().is_none()).count();
            format!("{hidden} of the 10 keys read as absent")
        });
    }
}

// ---------------------------------------------------------------------------------------
// Damage to each kind of file of a real database.

use std::path::PathBuf;

use bloomkv::fs::StdFs;
use bloomkv::{Compression, WriteOptions};
use bloomkv_tree::filename::{parse, FileKind};
use bloomkv_tree::table::{BlockHandle, Footer, Table, TableProperties};

fn val(i: u64, gen: u64) -> Vec<u8> {
    let mut v = format!("value-{i}-{gen}-").into_bytes();
    v.resize(v.len() + (i % 70) as usize, b'a' + (gen % 26) as u8);
    v
}

fn opts() -> Options {
    Options::default()
        .memtable_bytes(32 << 10)
        .block_bytes(512)
        .target_table_bytes(24 << 10)
        .level_base_bytes(64 << 10)
        // L0 is never compacted here, so the range tombstones `build` leaves in L0 tables
        // stay there, whatever the background thread does meanwhile (an L0 compaction
        // meeting every key they cover would drop them).
        .l0_compaction_trigger(64)
        .l0_slowdown_trigger(96)
        .l0_stop_trigger(128)
        .compression(Compression::Zstd { level: 1 })
}

/// One WAL-only write as the (key, Some(value) = put / None = delete) changes it makes at
/// once: one for a put or delete, one per covered key for a range delete.
type WalWrite = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// A database with tables on L0 and deeper levels, a manifest with several edits, and a WAL
/// holding writes not yet in any table. Returns its directory, the final model, and the
/// writes held only by the WAL (in order), with the model before them.
struct Built {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    model: Model,
    before_wal: Model,
    wal_writes: Vec<WalWrite>,
}

fn build() -> Built {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let mut model = Model::new();
    {
        let db = Db::open(&dir, opts()).unwrap();
        for i in 0..3000 {
            db.put(key6(i), val(i, 0)).unwrap();
            model.insert(key6(i), val(i, 0));
        }
        db.compact().unwrap();
        for i in (0..3000).step_by(3) {
            db.put(key6(i), val(i, 1)).unwrap();
            model.insert(key6(i), val(i, 1));
        }
        // Range tombstones in the L0 tables (their range-deletion blocks and properties
        // #22-#24 get damaged too), over keys below them and with newer keys inside.
        delete_range(&db, &mut model, 400, 460);
        db.put(key6(430), val(430, 1)).unwrap();
        model.insert(key6(430), val(430, 1));
        db.flush().unwrap();
        for i in (0..3000).step_by(7) {
            db.delete(key6(i)).unwrap();
            model.remove(&key6(i));
        }
        delete_range(&db, &mut model, 1200, 1217);
        delete_range(&db, &mut model, 2990, 3100);
        db.flush().unwrap();
        let s = db.stats();
        assert!(s.tables_per_level[0] >= 2, "{:?}", s.tables_per_level);
        assert!(s.tables_per_level[1..].iter().sum::<usize>() >= 4, "{:?}", s.tables_per_level);
        db.close().unwrap();
    }
    let db = Db::open(&dir, opts()).unwrap();
    // A flush in this session gives its manifest an edit after the opening snapshot.
    for i in (2..3000).step_by(13) {
        db.put(key6(i), val(i, 3)).unwrap();
        model.insert(key6(i), val(i, 3));
    }
    delete_range(&db, &mut model, 1500, 1600);
    db.flush().unwrap();
    let before_wal = model.clone();
    let mut wal_writes = Vec::new();
    // About half a memtable: these stay in the live WAL (a segment switch mid-way would only
    // add a second segment, whose damage is caught by the sequence-continuity check).
    for i in (1..3000).step_by(19) {
        let w = if i % 5 == 0 { None } else { Some(val(i, 2)) };
        match &w {
            Some(v) => db.put(key6(i), v).unwrap(),
            None => db.delete(key6(i)).unwrap(),
        }
        wal_writes.push(vec![(key6(i), w)]);
        if i == 1008 {
            // A range delete held only by the WAL: replayed whole or not at all.
            db.delete_range(key6(1010)..key6(1040)).unwrap();
            wal_writes.push((1010..1040).map(|k| (key6(k), None)).collect());
        }
    }
    db.write(&bloomkv::WriteBatch::new(), &WriteOptions::new().sync(true)).unwrap();
    // Dropping the handle leaves the writes in the WAL (close does not flush the memtable).
    drop(db);
    for (k, v) in wal_writes.iter().flatten() {
        match v {
            Some(v) => model.insert(k.clone(), v.clone()),
            None => model.remove(k),
        };
    }
    Built { _tmp: tmp, dir, model, before_wal, wal_writes }
}

/// Deletes `key6(lo)..key6(hi)` from the database and the model.
fn delete_range(db: &Db, model: &mut Model, lo: u64, hi: u64) {
    db.delete_range(key6(lo)..key6(hi)).unwrap();
    model.retain(|k, _| *k < key6(lo) || *k >= key6(hi));
}

fn files(dir: &Path, want: impl Fn(FileKind) -> bool) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).and_then(parse).is_some_and(&want))
        .collect();
    out.sort();
    out
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// True if `e` blames `file`: corruption in it, or an I/O error whose context names it.
fn blames(e: &Error, file: &Path) -> bool {
    match e {
        Error::Corruption { file: f, .. } => f == file,
        Error::Io { context, .. } => context.contains(&*file.to_string_lossy()),
        Error::Background(inner) => blames(inner, file),
        _ => false,
    }
}

/// How a damaged database may legitimately read back.
enum Allowed<'a> {
    /// Exactly the model.
    Exact(&'a Model),
    /// The state before the WAL writes plus some prefix of them (the torn-tail rule).
    WalPrefix(&'a Built),
}

impl Allowed<'_> {
    fn accepts(&self, got: &Model) -> bool {
        match self {
            Allowed::Exact(m) => got == *m,
            Allowed::WalPrefix(b) => {
                let mut m = b.before_wal.clone();
                if got == &m {
                    return true;
                }
                for write in &b.wal_writes {
                    for (k, v) in write {
                        match v {
                            Some(v) => m.insert(k.clone(), v.clone()),
                            None => m.remove(k),
                        };
                    }
                    if got == &m {
                        return true;
                    }
                }
                false
            }
        }
    }
}

/// Statistics of a damage run.
#[derive(Default, Debug)]
struct Outcomes {
    open_failed: u64,
    read_errors: u64,
    read_fine: u64,
}

/// Opens the damaged copy and reads everything: each result is right or an error blaming
/// `damaged`.
fn check_damaged(
    dir: &Path,
    damaged: &Path,
    allowed: &Allowed<'_>,
    what: &str,
    out: &mut Outcomes,
) {
    check_damaged_with(false, dir, damaged, allowed, what, out)
}

/// [`check_damaged`]; with `mapped`, the database is opened with `mmap_reads`, so its point
/// lookups read every table through a mapping (checked).
fn check_damaged_with(
    mapped: bool,
    dir: &Path,
    damaged: &Path,
    allowed: &Allowed<'_>,
    what: &str,
    out: &mut Outcomes,
) {
    let db = match Db::open(dir, opts().mmap_reads(mapped)) {
        Ok(db) => db,
        Err(e) => {
            assert!(blames(&e, damaged), "{what}: open failed blaming something else: {e:?}");
            out.open_failed += 1;
            return;
        }
    };
    // `StdFs` maps on Unix only.
    if mapped && cfg!(unix) {
        let s = db.stats();
        let tables: usize = s.tables_per_level.iter().sum();
        assert_eq!(s.mapped_table_files, tables as u64, "{what}: every table mapped");
    }
    let scanned = try_model(db.range(..));
    let reference: Model = match scanned {
        Ok(got) => {
            assert!(allowed.accepts(&got), "{what}: scan returned wrong data");
            out.read_fine += 1;
            got
        }
        Err(e) => {
            assert!(blames(&e, damaged), "{what}: scan error blames something else: {e:?}");
            out.read_errors += 1;
            match allowed {
                Allowed::Exact(m) => (*m).clone(),
                // A prefix state we cannot pin down without the scan: check gets against
                // "some version this key had".
                Allowed::WalPrefix(b) => b.model.clone(),
            }
        }
    };
    // Backward, by iterator and by cursor: the same data, or an error blaming the file.
    let reversed = try_model(db.range(..).rev());
    let mut cursor = db.cursor(..);
    let walked = (|| -> bloomkv::Result<Model> {
        let mut got = Model::new();
        cursor.seek_to_last()?;
        while let (Some(k), Some(v)) = (cursor.key(), cursor.value()) {
            got.insert(k.to_vec(), v.to_vec());
            cursor.prev()?;
        }
        Ok(got)
    })();
    for (how, r) in [("reverse scan", reversed), ("backward cursor walk", walked)] {
        match r {
            Ok(got) => assert!(allowed.accepts(&got), "{what}: {how} returned wrong data"),
            Err(e) => {
                assert!(blames(&e, damaged), "{what}: {how} error blames something else: {e:?}");
                out.read_errors += 1;
            }
        }
    }
    for i in 0..3000 {
        let k = key6(i);
        match db.get(&k) {
            Ok(v) => {
                let ok = v.as_deref() == reference.get(&k).map(|v| &v[..])
                    || matches!(allowed, Allowed::WalPrefix(b)
                        if v.as_deref() == b.before_wal.get(&k).map(|v| &v[..])
                            || b.wal_writes.iter().flatten().any(|(wk, wv)| *wk == k && v.as_deref() == wv.as_deref()));
                assert!(ok, "{what}: get({i}) returned wrong data");
            }
            Err(e) => {
                assert!(blames(&e, damaged), "{what}: get error blames something else: {e:?}");
                out.read_errors += 1;
            }
        }
    }
    // multi_get over the same keys: all of a call right, or the call fails blaming the file.
    let keys: Vec<_> = (0..3000).map(key6).collect();
    for chunk in keys.chunks(700) {
        match db.multi_get(chunk) {
            Ok(got) => {
                for (k, v) in chunk.iter().zip(got) {
                    let ok = v.as_deref() == reference.get(k).map(|v| &v[..])
                        || matches!(allowed, Allowed::WalPrefix(b)
                            if v.as_deref() == b.before_wal.get(k).map(|v| &v[..])
                                || b.wal_writes.iter().flatten().any(|(wk, wv)| wk == k && v.as_deref() == wv.as_deref()));
                    assert!(ok, "{what}: multi_get returned wrong data for {k:?}");
                }
            }
            Err(e) => {
                assert!(
                    blames(&e, damaged),
                    "{what}: multi_get error blames something else: {e:?}"
                );
                out.read_errors += 1;
            }
        }
    }
}

fn damage_copy(
    b: &Built,
    name: &str,
    f: impl FnOnce(&mut Vec<u8>),
) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    copy_dir(&b.dir, &dir);
    let path = dir.join(name);
    let mut data = std::fs::read(&path).unwrap();
    f(&mut data);
    std::fs::write(&path, &data).unwrap();
    (tmp, dir, path)
}

fn flip(data: &mut [u8], at: u64) {
    let at = (at as usize).min(data.len() - 1);
    data[at] ^= 0x5a;
}

fn name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

#[test]
fn damaged_tables_read_correctly_or_fail_naming_the_table() {
    let b = build();
    let tables = files(&b.dir, |k| matches!(k, FileKind::Table(_)));
    assert!(tables.len() >= 6);
    // Newest two (L0), oldest two and one in the middle.
    let mut picks = vec![0, 1, tables.len() / 2, tables.len() - 2, tables.len() - 1];
    // And every table with range tombstones.
    for (i, path) in tables.iter().enumerate() {
        let t = Table::open(FileSystem::open(&StdFs, path).unwrap(), path.clone(), None).unwrap();
        if t.properties().num_range_deletions > 0 {
            picks.push(i);
        }
    }
    picks.sort_unstable();
    picks.dedup();
    let mut out = Outcomes::default();
    let mut mapped = Outcomes::default();
    let mut cases = 0;
    let mut with_range_dels = 0;
    for &i in &picks {
        let path = &tables[i];
        let file = FileSystem::open(&StdFs, path).unwrap();
        let t = Table::open(file, path.clone(), None).unwrap();
        let footer = *t.footer();
        let size = t.file_size();
        let blocks = t.data_block_handles();
        let mut offsets: Vec<(String, u64)> = vec![
            ("first data block".into(), blocks[0].offset + blocks[0].size / 2),
            ("last data block".into(), blocks[blocks.len() - 1].offset + 1),
            ("middle data block trailer".into(), {
                let h = blocks[blocks.len() / 2];
                h.offset + h.size + 1
            }),
            ("filter block".into(), footer.filter.offset + footer.filter.size / 2),
            ("properties block".into(), footer.properties.offset + 2),
            ("index block".into(), footer.index.offset + footer.index.size / 2),
            ("footer handles".into(), size - 64 + 3),
            ("footer magic".into(), size - 2),
        ];
        offsets.push(("index trailer crc".into(), footer.index.offset + footer.index.size + 2));
        let p = t.properties();
        if p.num_range_deletions > 0 {
            with_range_dels += 1;
            let h = p.range_del;
            offsets.push(("range-deletion block start".into(), h.offset));
            offsets.push(("range-deletion block".into(), h.offset + h.size / 2));
            offsets.push(("range-deletion block end".into(), h.offset + h.size - 1));
            offsets.push(("range-deletion trailer kind".into(), h.offset + h.size));
            offsets.push(("range-deletion trailer crc".into(), h.offset + h.size + 3));
            // Properties #22-#24 are encoded last (when there are range deletions).
            let without = TableProperties { num_range_deletions: 0, ..p.clone() }.encode();
            let tail = footer.properties.offset + without.len() as u64;
            let end = footer.properties.offset + footer.properties.size;
            for at in tail..end {
                offsets.push((format!("properties #22-#24 byte {}", at - tail), at));
            }
        }
        for (what, at) in offsets {
            let (_tmp, dir, damaged) = damage_copy(&b, &name(path), |d| flip(d, at));
            let what = format!("{} {what}", name(path));
            check_damaged(&dir, &damaged, &Allowed::Exact(&b.model), &what, &mut out);
            cases += 1;
            // Data blocks are what point lookups read through a mapping: the same damage,
            // read that way, must fail the same way.
            if what.contains("data block") {
                let what = format!("{what} (mapped)");
                let allowed = Allowed::Exact(&b.model);
                check_damaged_with(true, &dir, &damaged, &allowed, &what, &mut mapped);
                cases += 1;
            }
        }
        for cut in [size / 2, size - 1, 10] {
            let (_tmp, dir, damaged) = damage_copy(&b, &name(path), |d| d.truncate(cut as usize));
            check_damaged(
                &dir,
                &damaged,
                &Allowed::Exact(&b.model),
                &format!("{} cut at {cut}", name(path)),
                &mut out,
            );
            cases += 1;
        }
    }
    eprintln!(
        "table damage: {cases} cases ({with_range_dels} tables with range deletions), {out:?}, \
         through mappings {mapped:?}"
    );
    // Through a mapping, data-block damage fails the lookups that meet it, as without.
    assert!(mapped.read_errors > 0 && mapped.open_failed == 0, "{mapped:?}");
    // The L0 tables of both sessions' flushes hold range tombstones (see `opts`).
    assert!(with_range_dels >= 2, "tables with range tombstones are damaged too");
    // Data-block damage opens and fails reads; metadata damage fails the open.
    assert!(out.open_failed > 0 && out.read_errors > 0);
}

#[test]
fn damaged_wal_recovers_a_prefix_or_fails_naming_the_wal() {
    let b = build();
    let wals = files(&b.dir, |k| matches!(k, FileKind::Wal(_)));
    let wal = wals.iter().max_by_key(|p| std::fs::metadata(p).unwrap().len()).unwrap().clone();
    let len = std::fs::metadata(&wal).unwrap().len();
    assert!(len > 1000, "the WAL holds the last writes");
    let mut out = Outcomes::default();
    let mut cases = 0;
    let points: Vec<u64> = (0..40).map(|i| i * len / 40).chain([len - 1, len - 5, 3]).collect();
    for &at in &points {
        let (_tmp, dir, damaged) = damage_copy(&b, &name(&wal), |d| flip(d, at));
        check_damaged(
            &dir,
            &damaged,
            &Allowed::WalPrefix(&b),
            &format!("WAL flip at {at}"),
            &mut out,
        );
        let (_tmp, dir, damaged) = damage_copy(&b, &name(&wal), |d| d.truncate(at as usize));
        check_damaged(
            &dir,
            &damaged,
            &Allowed::WalPrefix(&b),
            &format!("WAL cut at {at}"),
            &mut out,
        );
        cases += 2;
    }
    eprintln!("WAL damage: {cases} cases, {out:?}");
    assert!(out.open_failed > 0, "damage before valid records is corruption");
}

#[test]
fn damaged_manifest_fails_naming_the_manifest() {
    let b = build();
    let manifest = files(&b.dir, |k| matches!(k, FileKind::Manifest(_))).pop().unwrap();
    let data = std::fs::read(&manifest).unwrap();
    // The record boundaries: damage before the last record is corruption by the log's own
    // rule (valid data follows it); the last record is checked separately below.
    let mut reader = bloomkv_tree::log::LogReader::new(manifest.clone(), data.clone());
    let mut starts = Vec::new();
    while reader.next_record().unwrap().is_some() {
        starts.push(reader.last_record_offset());
    }
    assert!(starts.len() >= 2, "the manifest has a snapshot and later edits");
    let last = *starts.last().unwrap();
    let mut out = Outcomes::default();
    for at in (0..last).step_by(((last / 60).max(1)) as usize) {
        let (_tmp, dir, damaged) = damage_copy(&b, &name(&manifest), |d| flip(d, at));
        check_damaged(
            &dir,
            &damaged,
            &Allowed::Exact(&b.model),
            &format!("manifest flip at {at}"),
            &mut out,
        );
    }
    // Truncations inside the first record leave no complete record.
    for cut in [0, 1, 7, starts[1] / 2, starts[1] - 1] {
        let (_tmp, dir, damaged) = damage_copy(&b, &name(&manifest), |d| d.truncate(cut as usize));
        check_damaged(
            &dir,
            &damaged,
            &Allowed::Exact(&b.model),
            &format!("manifest cut at {cut}"),
            &mut out,
        );
    }
    // Damage to the last record is read as a torn tail; the edit it held (here a flush
    // whose WAL is gone) must then be missed: corruption naming the manifest. The close may
    // have added an edit recording the clock's mark after it (a torn one loses nothing), so
    // the record before the last is damaged too. Every byte of the last two records:
    // `damaged_last_manifest_records_never_open_with_lost_data`.
    let before_last = starts[starts.len() - 2];
    let mut refused = 0;
    for at in [before_last + 3, last + 3, last + 9, data.len() as u64 - 1] {
        let (_tmp, dir, damaged) = damage_copy(&b, &name(&manifest), |d| flip(d, at));
        match Db::open(&dir, opts()) {
            Err(e) => {
                assert!(matches!(&e, Error::Corruption { file, .. } if *file == damaged), "{e:?}");
                refused += 1;
            }
            Ok(db) => {
                assert_eq!(scan(&db), b.model, "manifest last record flip at {at}: wrong data");
            }
        }
    }
    assert!(refused > 0);
    eprintln!("manifest damage: {out:?}");
    assert_eq!(out.read_errors + out.read_fine, 0, "every damaged manifest fails the open");
}

#[test]
fn damaged_current_fails_naming_current_or_the_missing_manifest() {
    let b = build();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("garbage", b"\x00\xffgarbage\n".to_vec()),
        ("empty", Vec::new()),
        ("no newline", b"MANIFEST-000001".to_vec()),
        ("missing manifest", b"MANIFEST-999999\n".to_vec()),
        ("path escape", b"../MANIFEST-000001\n".to_vec()),
        ("not a manifest", b"000001.log\n".to_vec()),
    ];
    for (what, content) in cases {
        let (_tmp, dir, damaged) = damage_copy(&b, "CURRENT", |d| *d = content.clone());
        let e = Db::open(&dir, opts()).err().unwrap_or_else(|| panic!("{what}: opened"));
        let blamed = if what == "missing manifest" { dir.join("MANIFEST-999999") } else { damaged };
        assert!(blames(&e, &blamed), "{what}: {e:?}");
        if what == "missing manifest" {
            assert!(matches!(e, Error::Io { .. }), "{what}: {e:?}");
        }
    }
    // And the undamaged original still opens with everything.
    let db = Db::open(&b.dir, opts()).unwrap();
    assert_eq!(scan(&db), b.model);
}

// ---------------------------------------------------------------------------------------
// Corrupted length fields fail fast instead of sizing an allocation (an allocation of
// 2^40 bytes would abort the test process).

#[test]
fn huge_length_fields_fail_without_allocating() {
    let huge = 1u64 << 40;
    // Table footer handles.
    let fs = FaultFs::new();
    let dir = unique_dir("huge");
    fs.create_dir_all(&dir).unwrap();
    for (i, footer) in [
        Footer { index: BlockHandle { offset: 0, size: huge }, ..Footer::default() },
        Footer {
            filter: BlockHandle { offset: 0, size: huge },
            properties: BlockHandle { offset: huge, size: 1 },
            index: BlockHandle { offset: huge + 10, size: 1 },
            version: 1,
        },
        Footer {
            properties: BlockHandle { offset: 0, size: u64::MAX - 3 },
            version: 1,
            ..Footer::default()
        },
    ]
    .into_iter()
    .enumerate()
    {
        let path = dir.join(format!("{i}.sst"));
        let mut w = fs.create(&path).unwrap();
        w.append(&[0u8; 100]).unwrap();
        w.append(&footer.encode()).unwrap();
        drop(w);
        let e = Table::open(FileSystem::open(&fs, &path).unwrap(), path.clone(), None).unwrap_err();
        assert!(e.is_corruption(), "{e:?}");
    }
    // A version edit whose key length is 2^40.
    let mut edit = vec![1, 1, 6, 0, 5, 100];
    bloomkv_tree::coding::put_varint(&mut edit, huge);
    assert!(VersionEdit::decode(&edit).unwrap_err().is_corruption());
    // A write batch claiming u32::MAX ops with a 2^40-byte key.
    let mut batch = vec![0u8; 8];
    batch.extend_from_slice(&u32::MAX.to_le_bytes());
    batch.push(1);
    bloomkv_tree::coding::put_varint(&mut batch, huge);
    assert!(bloomkv::WriteBatch::decode(batch).unwrap_err().is_corruption());
    // A filter claiming 2^40 bits.
    let f = bloomkv::filter::Filter::build(
        bloomkv::FilterPolicy::BlockedBloom { bits_per_key: 10.0 },
        [b"a", b"b"],
    );
    let mut enc = f.encode();
    let body = enc.len() - 4;
    enc[24..32].copy_from_slice(&(huge * 8).to_le_bytes());
    let crc = bloomkv_tree::coding::crc32(&[&enc[..body]]);
    enc[body..].copy_from_slice(&crc.to_le_bytes());
    assert!(bloomkv::filter::Filter::decode(&enc).unwrap_err().is_corruption());
    // A block whose restart count is 2^31.
    let mut block = vec![0u8; 16];
    block.extend_from_slice(&(1u32 << 31).to_le_bytes());
    assert!(bloomkv_tree::table::Block::new(bytes::Bytes::from(block))
        .unwrap_err()
        .is_corruption());
}

// ---------------------------------------------------------------------------------------
// Damage to the last two manifest records (issue 11). A damaged last record is read as a
// torn append and ignored; that is harmless only when everything the edit retired (a
// flush's WAL segment, a compaction's input tables) is still on disk. When it is not, the
// open must fail naming the manifest — never open with the edit's data silently gone.

use bloomkv::fs::Fault;
use bloomkv::fs::OpKind;

const LAST_KEYS: u64 = 400;

fn last_record_opts(fs: &FaultFs) -> Options {
    // Memtables large enough that only explicit flushes switch them, compaction only on
    // request, small tables so a compaction writes several.
    Options::default()
        .memtable_bytes(1 << 20)
        .block_bytes(256)
        .target_table_bytes(4 << 10)
        .level_base_bytes(16 << 10)
        .l0_compaction_trigger(50)
        .l0_slowdown_trigger(60)
        .l0_stop_trigger(70)
        .fault_fs(fs)
}

/// Applies one generation of writes: overwrites every `step`-th key, deletes every
/// `del`-th, so that losing it shows up as stale values and resurrected keys.
fn generation(db: &Db, model: &mut Model, gen: u64, step: u64, del: u64) {
    for i in (0..LAST_KEYS).step_by(step as usize) {
        if del > 0 && i % del == 0 {
            db.delete(key6(i)).unwrap();
            model.remove(&key6(i));
        } else {
            db.put(key6(i), val(i, gen)).unwrap();
            model.insert(key6(i), val(i, gen));
        }
    }
}

/// The three shapes the issue names: the manifest's last edit is a flush (its WAL deleted,
/// nothing written after), a compaction, or a flush followed by a memtable switch whose own
/// flush never made it into the manifest (its writes are in a synced WAL segment).
fn last_record_scenario(shape: &str) -> (FaultFs, PathBuf, Model) {
    let fs = FaultFs::new();
    let dir = unique_dir(&format!("last-record-{shape}"));
    let mut model = Model::new();
    let db = Db::open(&dir, last_record_opts(&fs)).unwrap();
    generation(&db, &mut model, 0, 1, 0);
    db.compact().unwrap();
    generation(&db, &mut model, 1, 2, 0);
    db.flush().unwrap();
    match shape {
        "flush" => {
            generation(&db, &mut model, 2, 3, 5);
            db.flush().unwrap();
        }
        "compaction" => {
            generation(&db, &mut model, 2, 3, 5);
            db.compact().unwrap();
        }
        "switch" => {
            generation(&db, &mut model, 2, 3, 5);
            db.flush().unwrap();
            generation(&db, &mut model, 3, 4, 7);
            // The switch happens (the segment holding generation 3 is synced, a new one is
            // started); the table for it can never be created, so its flush is never logged.
            fs.inject(Fault::on(OpKind::Create).matching(is_table));
            assert!(db.flush().is_err());
        }
        _ => unreachable!(),
    }
    drop(db);
    fs.clear_faults();
    (fs, dir, model)
}

/// A durable copy of `fs` (a database directory), with `manifest`'s bytes replaced.
fn copy_with(fs: &FaultFs, dir: &Path, manifest: &Path, data: &[u8]) -> FaultFs {
    let copy = FaultFs::new();
    copy.create_dir_all(dir).unwrap();
    for path in fs.files() {
        let bytes = if path == manifest { data.to_vec() } else { fs.contents(&path).unwrap() };
        let mut f = copy.create(&path).unwrap();
        f.append(&bytes).unwrap();
        f.sync().unwrap();
    }
    copy.sync_dir(dir).unwrap();
    copy
}

#[test]
fn damaged_last_manifest_records_never_open_with_lost_data() {
    for shape in ["flush", "compaction", "switch"] {
        let (fs, dir, model) = last_record_scenario(shape);
        let manifest = fs
            .files()
            .into_iter()
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("MANIFEST-"))
            .max()
            .unwrap();
        let data = fs.contents(&manifest).unwrap();
        let mut reader = bloomkv_tree::log::LogReader::new(manifest.clone(), data.clone());
        let mut starts = Vec::new();
        while reader.next_record().unwrap().is_some() {
            starts.push(reader.last_record_offset() as usize);
        }
        assert!(starts.len() >= 3, "{shape}: the manifest has a snapshot and later edits");
        let from = starts[starts.len() - 2];
        let (mut refused, mut opened) = (0u64, 0u64);
        for at in from..data.len() {
            let mut damaged: Vec<(&str, Vec<u8>)> = Vec::new();
            let mut d = data.clone();
            d[at] ^= 0x5a;
            damaged.push(("flip", d));
            damaged.push(("cut", data[..at].to_vec()));
            let mut d = data.clone();
            d[at..(at + 16).min(data.len())].fill(0);
            damaged.push(("zero 16", d));
            let mut d = data.clone();
            d[at..].fill(0);
            damaged.push(("zero to end", d));
            for (how, bytes) in damaged {
                let what = format!("{shape}: {how} at {at} (last two records start at {from})");
                let copy = copy_with(&fs, &dir, &manifest, &bytes);
                let db = match Db::open(&dir, last_record_opts(&copy)) {
                    Err(Error::Corruption { file, offset, reason }) => {
                        assert_eq!(file, manifest, "{what}: corruption blames another file");
                        assert!(offset <= data.len() as u64, "{what}: offset {offset}: {reason}");
                        refused += 1;
                        continue;
                    }
                    Err(e) => {
                        panic!("{what}: open failed with something other than corruption: {e}")
                    }
                    Ok(db) => db,
                };
                opened += 1;
                let got =
                    try_model(db.range(..)).unwrap_or_else(|e| panic!("{what}: scan failed: {e}"));
                assert!(got == model, "{what}: opened with wrong or missing data");
                for i in 0..LAST_KEYS {
                    let v = db.get(key6(i)).unwrap_or_else(|e| panic!("{what}: get failed: {e}"));
                    assert_eq!(
                        v.as_deref(),
                        model.get(&key6(i)).map(|v| &v[..]),
                        "{what}: get({i})"
                    );
                }
            }
        }
        eprintln!("{shape}: {} damaged manifests: {refused} refused, {opened} opened with exactly the acknowledged data", refused + opened);
        assert!(refused > 0, "{shape}: no damage was refused");
    }
}
