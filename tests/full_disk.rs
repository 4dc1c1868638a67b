//! Running out of space, and coming back: what a failed write, flush, manifest edit or
//! keyspace change leaves behind, and `Db::resume`.
//!
//! - On `FaultFs`, a one-shot fault in the manifest or the WAL: the call fails, the database
//!   stops, nothing refused appears later (after a resume, a close or a reopen), nothing
//!   acknowledged is lost, and a power loss at any point of a resume recovers the same.
//! - On a real, small tmpfs (only when the tests run as root and may mount one; skipped with
//!   a message otherwise): writes until the disk is full, then free space and resume.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bloomkv::fs::{fault::unique_dir, CrashMode, Fault, FaultFs, OpKind};
use bloomkv::{Db, Error, KeyspaceOptions, Options, Readable, WriteBatch, WriteOptions};

mod common;

use common::files::{is_manifest, is_table, is_wal};
use common::model::scan;
use common::options::OptionsExt;

fn options(fs: &FaultFs) -> Options {
    Options::default().memtable_bytes(4 << 10).fault_fs(fs)
}

fn stopped(r: bloomkv::Result<()>) -> bool {
    matches!(r, Err(Error::Background(_)))
}

#[test]
fn a_failed_keyspace_drop_stops_writes_and_keeps_the_keyspace() {
    for resume in [false, true] {
        let fs = FaultFs::new();
        let dir = unique_dir("drop");
        let db = Db::open(&dir, options(&fs)).unwrap();
        let x = db.keyspace("x", KeyspaceOptions::default()).unwrap();
        x.put("before", "1").unwrap();
        fs.inject(Fault::on(OpKind::Sync).matching(is_manifest).nth(1));
        assert!(matches!(db.drop_keyspace("x"), Err(Error::Io { .. })));
        // The drop may or may not be on disk: nothing may be acknowledged on top of it.
        assert!(stopped(x.put("after", "2")), "a write after a failed drop was accepted");
        assert!(stopped(db.put("after", "2")));
        if resume {
            db.resume().unwrap();
            // The drop failed, so the keyspace is still there, and takes writes again.
            assert_eq!(x.get("before").unwrap().as_deref(), Some(&b"1"[..]));
            x.put("after", "2").unwrap();
            assert_eq!(db.keyspace_names(), ["default", "x"]);
            db.close().unwrap();
        } else {
            assert!(matches!(db.close(), Err(Error::Background(_))));
        }
        drop(db);
        let db = Db::open(&dir, options(&fs)).unwrap();
        let x = db.existing_keyspace("x").expect("the failed drop did not happen");
        assert_eq!(x.get("before").unwrap().as_deref(), Some(&b"1"[..]));
        let after = x.get("after").unwrap();
        assert_eq!(after.as_deref(), resume.then_some(&b"2"[..]), "resume {resume}");
        // And it can be dropped now.
        db.drop_keyspace("x").unwrap();
    }
}

#[test]
fn a_failed_keyspace_creation_stops_writes_and_leaves_no_keyspace() {
    let fs = FaultFs::new();
    let dir = unique_dir("create");
    let db = Db::open(&dir, options(&fs)).unwrap();
    db.put("k", "v").unwrap();
    fs.inject(Fault::on(OpKind::Sync).matching(is_manifest).nth(1));
    assert!(db.keyspace("y", KeyspaceOptions::default()).is_err());
    assert!(stopped(db.put("k2", "v2")));
    db.resume().unwrap();
    assert_eq!(db.keyspace_names(), ["default"]);
    db.put("k2", "v2").unwrap();
    let y = db.keyspace("y", KeyspaceOptions::default()).unwrap();
    y.put("a", "b").unwrap();
    drop((y, db));
    let db = Db::open(&dir, options(&fs)).unwrap();
    assert_eq!(db.keyspace_names(), ["default", "y"]);
    assert_eq!(db.get("k2").unwrap().as_deref(), Some(&b"v2"[..]));
}

#[test]
fn a_refused_write_never_appears_later() {
    // A failed fsync leaves the whole record in the file; a short write, part of it.
    let faults = [
        Fault::on(OpKind::Sync).matching(is_wal).nth(1),
        Fault::on(OpKind::Append).matching(is_wal).nth(1).short_write(500),
        Fault::on(OpKind::Flush).matching(is_wal).nth(1),
    ];
    for (i, fault) in faults.into_iter().enumerate() {
        for resume in [false, true] {
            let what = format!("fault {i}, resume {resume}");
            let fs = FaultFs::new();
            let dir = unique_dir("refused");
            let db = Db::open(&dir, options(&fs)).unwrap();
            db.put("acknowledged", "1").unwrap();
            fs.inject(fault.clone());
            let sync = WriteOptions::new().sync(true);
            let mut batch = WriteBatch::new();
            batch.put("refused", "2");
            assert!(matches!(db.write(&batch, &sync), Err(Error::Io { .. })), "{what}");
            assert!(stopped(db.put("later", "3")), "{what}");
            if resume {
                db.resume().unwrap();
                assert_eq!(db.get("refused").unwrap(), None, "{what}");
                db.put("later", "3").unwrap();
            }
            let _ = db.close();
            drop(db);
            let db = Db::open(&dir, options(&fs)).unwrap();
            assert_eq!(db.get("acknowledged").unwrap().as_deref(), Some(&b"1"[..]), "{what}");
            assert_eq!(db.get("refused").unwrap(), None, "{what}: the refused write appeared");
            let later = db.get("later").unwrap();
            assert_eq!(later.as_deref(), resume.then_some(&b"3"[..]), "{what}");
        }
    }
}

#[test]
fn a_failed_flush_resumes_with_everything_acknowledged() {
    let fs = FaultFs::new();
    let dir = unique_dir("flush");
    let db = Db::open(&dir, options(&fs)).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..50u32 {
        db.put(i.to_be_bytes(), [i as u8; 100]).unwrap();
        model.insert(i.to_be_bytes().to_vec(), vec![i as u8; 100]);
    }
    fs.inject(Fault::on(OpKind::Append).matching(is_table));
    assert!(db.flush().is_err());
    assert!(stopped(db.put("x", "y")));
    // Still full: resuming fails and leaves the database stopped.
    assert!(db.resume().is_err());
    assert!(stopped(db.put("x", "y")));
    fs.clear_faults();
    db.resume().unwrap();
    for i in 50..400u32 {
        db.put(i.to_be_bytes(), [i as u8; 100]).unwrap();
        model.insert(i.to_be_bytes().to_vec(), vec![i as u8; 100]);
    }
    db.flush().unwrap();
    assert_eq!(scan(&db), model);
    db.close().unwrap();
    drop(db);
    assert_eq!(scan(&Db::open(&dir, options(&fs)).unwrap()), model);
}

/// Under every compaction style, a disk that fills while flushes and compactions write
/// tables stops writes, a resume on it still full fails, and once space is back a resume
/// continues: the style's compactions pick up where they stopped, and everything
/// acknowledged is there, also after a reopen.
#[test]
fn every_style_resumes_after_a_full_disk() {
    use bloomkv::CompactionStyle;
    let styles = [
        CompactionStyle::Leveled,
        CompactionStyle::Tiered,
        CompactionStyle::LazyLeveling,
        CompactionStyle::Fluid { k: 2, z: 2 },
        CompactionStyle::Fifo { max_bytes: u64::MAX, max_age: None },
    ];
    for style in styles {
        let fs = FaultFs::new();
        let dir = unique_dir("full-style");
        let opts = || {
            options(&fs)
                .target_table_bytes(4 << 10)
                .level_base_bytes(16 << 10)
                .level_size_ratio(4)
                .compaction_style(style)
        };
        let db = Db::open(&dir, opts()).unwrap();
        let mut model = BTreeMap::new();
        let mut put = |db: &Db, i: u32| {
            let (k, v) = (format!("k{:05}", i * 7919 % 10_000), vec![i as u8; 100]);
            db.put(&k, &v)?;
            model.insert(k.into_bytes(), v);
            Ok::<(), Error>(())
        };
        for i in 0..1500 {
            put(&db, i).unwrap();
        }
        fs.inject(Fault::on(OpKind::Append).matching(is_table));
        let mut i = 1500;
        // A resume on the still-full disk fails when it has a memtable to flush. When a
        // compaction's table met the fault first, it may have none, and succeeds: the next
        // table written (a compaction's again, or a flush) stops the database again.
        for resumed in 0.. {
            loop {
                match put(&db, i) {
                    Ok(()) => i += 1,
                    Err(e) => {
                        assert!(matches!(e, Error::Background(_)), "{style:?}: {e}");
                        break;
                    }
                }
                assert!(i < 100_000, "{style:?}: writes never stopped on the full disk");
            }
            if db.resume().is_err() {
                break;
            }
            assert!(resumed < 10, "{style:?}: resumed on a full disk again and again");
        }
        assert!(stopped(db.put("x", "y")), "{style:?}");
        fs.clear_faults();
        db.resume().unwrap_or_else(|e| panic!("{style:?}: {e}"));
        for i in i..i + 1500 {
            put(&db, i).unwrap();
        }
        db.flush().unwrap();
        let mut steps = 0;
        while db.compact_step().unwrap().is_some() {
            steps += 1;
            assert!(steps < 1000, "{style:?}: compactions never settle");
        }
        assert_eq!(scan(&db), model, "{style:?}");
        db.close().unwrap();
        drop(db);
        assert_eq!(scan(&Db::open(&dir, opts()).unwrap()), model, "{style:?} after a reopen");
    }
}

/// A database stopped by a failed synced write, holding acknowledged writes in two
/// keyspaces (some flushed, some only in the WAL), about to be resumed.
fn stopped_database(fs: &FaultFs) -> (PathBuf, Db) {
    stopped_database_with(fs, options(fs))
}

/// [`stopped_database`] opened with `opts` (on `fs`).
fn stopped_database_with(fs: &FaultFs, opts: Options) -> (PathBuf, Db) {
    let dir = unique_dir("resume-cut");
    let db = Db::open(&dir, opts).unwrap();
    let x = db.keyspace("x", KeyspaceOptions::default()).unwrap();
    for i in 0..60u32 {
        db.put(format!("d{i:03}"), [b'v'; 100]).unwrap();
        x.put(format!("x{i:03}"), [b'v'; 100]).unwrap();
    }
    // Acknowledged and durable: a power loss may not take any of it.
    db.sync().unwrap();
    fs.inject(Fault::on(OpKind::Sync).matching(is_wal).nth(1));
    assert!(db.write(&refused_batch(&x), &WriteOptions::new().sync(true)).is_err());
    (dir, db)
}

fn refused_batch(x: &bloomkv::Keyspace) -> WriteBatch {
    let mut b = WriteBatch::new();
    b.put("refused", "r");
    b.put_in(x, "refused", "r");
    b
}

/// The database after `stopped_database`, checked: every acknowledged write, nothing refused.
fn check_recovered(fs: &FaultFs, dir: &Path, what: &str) {
    let db = Db::open(dir, options(fs)).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    let x = db.existing_keyspace("x").unwrap_or_else(|| panic!("{what}: keyspace lost"));
    for i in 0..60u32 {
        assert!(db.get(format!("d{i:03}")).unwrap().is_some(), "{what}: d{i} lost");
        assert!(x.get(format!("x{i:03}")).unwrap().is_some(), "{what}: x{i} lost");
    }
    assert_eq!(db.get("refused").unwrap(), None, "{what}: refused write revived");
    assert_eq!(x.get("refused").unwrap(), None, "{what}: refused write revived");
}

/// A power loss at every file-system call a resume makes recovers every acknowledged write
/// and nothing refused.
#[test]
fn a_power_loss_during_resume_loses_nothing_and_revives_nothing() {
    // A dry run counts the resume's calls of each kind.
    let fs = FaultFs::new();
    let (dir, db) = stopped_database(&fs);
    fs.clear_faults();
    let before = OpKind::ALL.map(|k| fs.calls(k));
    db.resume().unwrap();
    let made: Vec<(OpKind, u64)> =
        OpKind::ALL.iter().zip(before).map(|(&k, b)| (k, fs.calls(k) - b)).collect();
    drop(db);
    check_recovered(&fs, &dir, "no power loss");
    let mut cuts = 0;
    for (kind, n) in made {
        for nth in 1..=n {
            let what = format!("power lost at {kind:?} #{nth} of the resume");
            let fs = FaultFs::new();
            let (dir, db) = stopped_database(&fs);
            fs.clear_faults();
            fs.inject(Fault::on(kind).nth(nth).power_off());
            // The count may include a background compaction's calls after the resume
            // returned; a power loss there must be survived all the same.
            let _ = db.resume();
            let after = fs.crash(CrashMode::TornTails { seed: nth });
            drop(db);
            check_recovered(&after, &dir, &what);
            cuts += 1;
        }
    }
    assert!(cuts >= 8, "the resume made only {cuts} file-system calls");
}

/// The files in `dir` on `fs` by kind: manifests, WAL segments, tables, and the rest (LOCK,
/// CURRENT, CURRENT.tmp).
fn file_counts(fs: &FaultFs, dir: &Path) -> [usize; 4] {
    let mut n = [0; 4];
    for p in fs.files().iter().filter(|p| p.parent() == Some(dir)) {
        let kind = [is_manifest(p), is_wal(p), is_table(p)].iter().position(|&k| k).unwrap_or(3);
        n[kind] += 1;
    }
    n
}

/// Options under which nothing happens in the background (the memtables never fill), so the
/// files in the directory change only by what the test does.
fn quiet(fs: &FaultFs) -> Options {
    options(fs).memtable_bytes(64 << 20)
}

/// A resume on a disk that is still full fails every time, and each failure takes back
/// what it created (its manifest, CURRENT.tmp, its WAL segment): retried any number of times,
/// as its documentation invites, it leaves the directory as it found it. Then, with space
/// back, one resume continues with everything acknowledged.
#[test]
fn failed_resumes_leave_no_file_behind() {
    let cases = [
        ("every append fails", Fault::on(OpKind::Append)),
        ("every fsync fails", Fault::on(OpKind::Sync)),
        ("every rename fails", Fault::on(OpKind::Rename)),
        // The manifest is replaced (one for one); starting the new WAL segment fails.
        ("every WAL append fails", Fault::on(OpKind::Append).matching(is_wal)),
    ];
    for (what, fault) in cases {
        let fs = FaultFs::new();
        let (dir, db) = stopped_database_with(&fs, quiet(&fs));
        fs.clear_faults();
        fs.inject(fault);
        let before = file_counts(&fs, &dir);
        for i in 1..=50 {
            assert!(db.resume().is_err(), "{what}: resume {i} succeeded");
            assert!(stopped(db.put("k", "v")), "{what}: a write went through");
            assert_eq!(file_counts(&fs, &dir), before, "{what}: files after {i} failed resumes");
        }
        fs.clear_faults();
        db.resume().unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(file_counts(&fs, &dir)[0], 1, "{what}: manifests after the resume");
        drop(db);
        check_recovered(&fs, &dir, what);
    }
}

/// When the directory fsync after the switch of CURRENT fails, the new manifest is the one
/// CURRENT names but a power loss may bring back the old one: both stay until a resume
/// gets through, which removes every manifest but its own; a power loss before that
/// recovers every acknowledged write.
#[test]
fn manifests_of_resumes_whose_directory_fsync_failed_go_with_the_next_resume() {
    for power_loss in [false, true] {
        let what = if power_loss { "power lost after the failed resumes" } else { "resumed" };
        let fs = FaultFs::new();
        let (dir, db) = stopped_database_with(&fs, quiet(&fs));
        fs.clear_faults();
        fs.inject(Fault::on(OpKind::SyncDir));
        for i in 1..=5 {
            assert!(db.resume().is_err(), "{what}: resume {i} succeeded");
            assert!(stopped(db.put("k", "v")), "{what}: a write went through");
        }
        let fs = if power_loss {
            fs.crash(CrashMode::DropUnsynced)
        } else {
            fs.clear_faults();
            db.resume().unwrap();
            assert_eq!(file_counts(&fs, &dir)[0], 1, "manifests left after the resume");
            fs
        };
        drop(db);
        check_recovered(&fs, &dir, what);
    }
}

/// Where the tests may mount file systems (root), a tmpfs of `bytes`; `None`, with a
/// message, elsewhere.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(bytes: u64) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().ok()?.keep();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(&dir)
            .stderr(std::process::Stdio::null())
            .status();
        if !status.is_ok_and(|s| s.success()) {
            eprintln!("skipped: cannot mount a tmpfs here (the full-disk tests need root)");
            return None;
        }
        Some(Tmpfs(dir))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Fills `dir`'s file system with a file until it is full; removing the file frees it.
fn fill(path: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![0u8; 64 << 10];
    while f.write_all(&chunk).is_ok() {}
    let _ = f.sync_all();
}

#[test]
fn a_real_full_disk_stops_writes_and_resume_continues_after_space_is_freed() {
    let Some(tmpfs) = Tmpfs::mount(8 << 20) else { return };
    let dir = tmpfs.0.join("db");
    let filler = tmpfs.0.join("filler");
    let opts = || Options::default().memtable_bytes(256 << 10);
    let db = Db::open(&dir, opts()).unwrap();
    let x = db.keyspace("x", KeyspaceOptions::default()).unwrap();
    let mut acknowledged = BTreeMap::new();
    fill(&filler);
    let value = vec![7u8; 1000];
    let mut refused = Vec::new();
    for i in 0..10_000u32 {
        let k = format!("k{i:06}");
        match x.put(&k, &value) {
            Ok(()) => {
                acknowledged.insert(k, value.clone());
            }
            Err(_) => {
                refused.push(k);
                break;
            }
        }
    }
    assert!(!refused.is_empty(), "the disk never filled");
    // A keyspace drop on the full disk fails (or the database is stopped already).
    assert!(db.drop_keyspace("x").is_err());
    assert!(x.put("after", "v").is_err());
    std::fs::remove_file(&filler).unwrap();
    db.resume().unwrap();
    x.put("after", "v").unwrap();
    acknowledged.insert("after".into(), b"v".to_vec());
    db.close().unwrap();
    drop((x, db));
    let db = Db::open(&dir, opts()).unwrap();
    let x = db.existing_keyspace("x").expect("keyspace kept");
    let got: BTreeMap<String, Vec<u8>> = x
        .range(..)
        .map(|r| r.map(|(k, v)| (String::from_utf8(k.to_vec()).unwrap(), v.to_vec())))
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(got.len(), acknowledged.len());
    assert!(got == acknowledged, "acknowledged writes lost or refused ones present");
}
