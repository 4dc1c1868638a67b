//! `Db::checkpoint` / `Snapshot::checkpoint`: an openable copy equal to the snapshot it was
//! taken from, made while writes, flushes and compactions go on.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use bloomkv::fs::fault::{CrashMode, Fault, FaultFs, OpKind};
use bloomkv::fs::FileSystem;
use bloomkv::{Db, Error, Options, Readable, WriteBatch, WriteOptions};

mod common;

use common::keys::key6;
use common::model::{scan, to_model};
use common::options::OptionsExt;

fn small() -> Options {
    Options::default()
        .memtable_bytes(8 << 10)
        .block_bytes(512)
        .target_table_bytes(8 << 10)
        .level_base_bytes(32 << 10)
        .l0_compaction_trigger(2)
}

#[test]
fn checkpoints_taken_during_writes_equal_their_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("live"), small()).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (db, stop) = (&db, &stop);
            s.spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) || n < 2000 {
                    let k = key6((n * 7 + t * 3) % 1500);
                    if n % 9 == 0 {
                        db.delete(&k).unwrap();
                    } else {
                        db.put(&k, format!("t{t} n{n}").repeat(3)).unwrap();
                    }
                    n += 1;
                }
            });
        }
        let mut copies = Vec::new();
        for i in 0..6 {
            // Wait for real progress between checkpoints: something newer than the last one.
            while db.snapshot().sequence() < 1500 * (i + 1) {
                std::thread::yield_now();
            }
            let snap = db.snapshot();
            // Writes after the snapshot, some in the memtable the snapshot holds too.
            while db.snapshot().sequence() < snap.sequence() + 20 {
                std::thread::yield_now();
            }
            let to = dir.path().join(format!("copy{i}"));
            snap.checkpoint(&to).unwrap();
            copies.push((to, to_model(snap.range(..))));
        }
        stop.store(true, Ordering::Relaxed);
        let stats = db.stats();
        assert!(stats.flushes > 3 && stats.compactions > 0, "{stats:?}");
        for (to, want) in copies {
            let copy = Db::open(&to, small()).unwrap();
            assert!(!want.is_empty());
            assert_eq!(scan(&copy), want, "{}", to.display());
            for k in (0..1500).map(key6) {
                assert_eq!(copy.get(&k).unwrap().map(|v| v.to_vec()).as_ref(), want.get(&k));
            }
        }
    });
}

#[test]
fn the_copy_is_a_database_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("live"), small()).unwrap();
    for i in 0..3000 {
        db.put(key6(i), format!("v{i}")).unwrap();
    }
    db.compact().unwrap();
    for i in (0..3000).step_by(5) {
        db.delete(key6(i)).unwrap();
    }
    // A snapshot's checkpoint leaves out what came after it, though it is in the memtable.
    let snap = db.snapshot();
    db.put(key6(3), "later").unwrap();
    snap.checkpoint(dir.path().join("at-snapshot")).unwrap();
    let at = Db::open(dir.path().join("at-snapshot"), small()).unwrap();
    assert_eq!(at.get(key6(3)).unwrap().as_deref(), Some(&b"v3"[..]));
    // New writes to the copy take the sequence numbers after the snapshot's: nothing from
    // after the snapshot may be lying there to become visible with them.
    for i in 0..5 {
        at.put(key6(10_000 + i), "new").unwrap();
    }
    assert_eq!(at.get(key6(3)).unwrap().as_deref(), Some(&b"v3"[..]));
    db.put(key6(3), "v3").unwrap();

    let seq = db.checkpoint(dir.path().join("copy")).unwrap();
    let want = scan(&db);
    db.put(key6(1), "after").unwrap();
    assert!(seq > 3000);

    let copy = Db::open(dir.path().join("copy"), small()).unwrap();
    assert_eq!(scan(&copy), want);
    assert_eq!(copy.get(key6(1)).unwrap().as_deref(), Some(&b"v1"[..]));
    assert_eq!(copy.get(key6(5)).unwrap(), None, "a tombstone in the memtable is kept");
    // Writes to the copy go on after the checkpoint's sequence and survive a reopen; the
    // original does not see them.
    copy.put(key6(2), "copy").unwrap();
    copy.close().unwrap();
    drop(copy);
    let copy = Db::open(dir.path().join("copy"), small()).unwrap();
    assert_eq!(copy.get(key6(2)).unwrap().as_deref(), Some(&b"copy"[..]));
    assert_eq!(db.get(key6(2)).unwrap().as_deref(), Some(&b"v2"[..]));
    assert!(copy.snapshot().sequence() > seq);
}

#[cfg(unix)]
#[test]
fn tables_are_hard_linked() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    // Levels large enough that nothing compacts in the background after `compact`.
    let opts = small().memtable_bytes(1 << 20).level_base_bytes(1 << 20);
    let db = Db::open(dir.path().join("live"), opts).unwrap();
    for i in 0..2000 {
        db.put(key6(i), "v").unwrap();
    }
    db.compact().unwrap();
    db.checkpoint(dir.path().join("copy")).unwrap();
    let tables = |d: &Path| -> BTreeMap<String, u64> {
        std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".sst"))
            .map(|e| (e.file_name().to_string_lossy().into_owned(), e.metadata().unwrap().ino()))
            .collect()
    };
    let (live, copy) = (tables(&dir.path().join("live")), tables(&dir.path().join("copy")));
    assert!(!live.is_empty());
    for (name, ino) in &live {
        assert_eq!(copy.get(name), Some(ino), "{name} is the same file");
    }
    // The memtable was empty after the compaction: no table made from it.
    assert_eq!(copy.len(), live.len());
}

#[test]
fn a_non_empty_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("live"), small()).unwrap();
    db.put("a", "1").unwrap();
    let to = dir.path().join("busy");
    std::fs::create_dir(&to).unwrap();
    std::fs::write(to.join("keep"), b"mine").unwrap();
    assert!(matches!(db.checkpoint(&to), Err(Error::InvalidArgument(_))));
    assert_eq!(std::fs::read_dir(&to).unwrap().count(), 1);
    // An empty directory is fine.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    db.checkpoint(&empty).unwrap();
    assert_eq!(scan(&Db::open(&empty, small()).unwrap()), scan(&db));
}

#[test]
fn a_read_only_handle_can_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live");
    let db = Db::open(&live, small()).unwrap();
    for i in 0..1000 {
        db.put(key6(i), "v").unwrap();
    }
    let want = scan(&db);
    // Closed first: an owner still compacting may delete a table between the read-only
    // handle's open and its checkpoint's link of it (a known limit of checkpointing through
    // a second handle; the owner's own `checkpoint` holds its tables alive).
    db.close().unwrap();
    let ro = Db::open_read_only(&live, small()).unwrap();
    ro.checkpoint(dir.path().join("copy")).unwrap();
    assert_eq!(scan(&Db::open(dir.path().join("copy"), small()).unwrap()), want);
}

fn fault_db(fs: &FaultFs) -> Db {
    // A memtable that holds everything below: no background flush makes file-system calls
    // of its own while a checkpoint's calls are counted and cut.
    let opts = small().memtable_bytes(1 << 20).fault_fs(fs);
    let db = Db::open("/live", opts).unwrap();
    for i in 0..1200 {
        db.put(key6(i), format!("v{i}")).unwrap();
    }
    db.compact().unwrap();
    // Synced, so the live database keeps them through the power cuts below; and left in
    // the memtable, so a checkpoint writes a table of its own.
    let mut batch = WriteBatch::new();
    for i in (0..1200).step_by(4) {
        batch.put(key6(i), "newer");
    }
    db.write(&batch, &WriteOptions::new().sync(true)).unwrap();
    assert!(db.stats().tables_per_level[0] == 0);
    db
}

/// Where links fail, tables are copied, and the copy is the same.
#[test]
fn tables_are_copied_where_links_fail() {
    let fs = FaultFs::new();
    let db = fault_db(&fs);
    fs.inject(Fault::on(OpKind::Link));
    db.checkpoint("/copy").unwrap();
    assert!(fs.calls(OpKind::Link) > 0);
    let want = scan(&db);
    let copy = Db::open("/copy", small().fault_fs(&fs)).unwrap();
    assert_eq!(scan(&copy), want);
}

/// Entries of `dir` on `fs` left by checkpoints that did not finish.
fn leftover_temps(fs: &FaultFs, dir: &str) -> Vec<String> {
    if !FileSystem::exists(fs, Path::new(dir)) {
        return Vec::new();
    }
    let names = FileSystem::list(fs, Path::new(dir)).unwrap();
    names.into_iter().filter(|n| n.contains("checkpoint-tmp")).collect()
}

/// A checkpoint failing at any one of its file-system calls (with tables linked or copied,
/// into a missing target, one under missing parents, or an empty directory) returns the
/// error and leaves the target as it was: nothing that opens, no temporary directory, and
/// a live database that goes on working.
#[test]
fn a_checkpoint_failing_at_any_call_leaves_no_target() {
    let mut failed = 0;
    for copy in [false, true] {
        let fs = FaultFs::new();
        let db = fault_db(&fs);
        let want = scan(&db);
        let mut run = 0;
        // With copies every link fails already.
        for kind in OpKind::ALL.into_iter().filter(|&k| !(copy && k == OpKind::Link)) {
            // Until the checkpoint makes fewer than `nth` calls of `kind`.
            for nth in 1.. {
                let mut hit = false;
                for shape in ["missing", "nested", "empty"] {
                    run += 1;
                    let to = match shape {
                        "nested" => format!("/n{run}/sub/copy"),
                        _ => format!("/t{run}"),
                    };
                    let to = Path::new(&to);
                    if shape == "empty" {
                        FileSystem::create_dir_all(&fs, to).unwrap();
                    }
                    if copy {
                        fs.inject(Fault::on(OpKind::Link));
                    }
                    let (fired, links) = (fs.faults_fired(), fs.calls(OpKind::Link));
                    fs.inject(Fault::on(kind).nth(nth));
                    let got = db.checkpoint(to);
                    let link_faults = if copy { fs.calls(OpKind::Link) - links } else { 0 };
                    let this_hit = fs.faults_fired() - fired > link_faults;
                    fs.clear_faults();
                    hit |= this_hit;
                    let opts = small().fault_fs(&fs);
                    let what = format!("{kind:?} #{nth} {shape} copy={copy}");
                    let e = match got {
                        Ok(_) => {
                            // A fault fails the checkpoint, but for a failed link, which
                            // the checkpoint answers by copying.
                            let ok = !this_hit || kind == OpKind::Link;
                            assert!(ok, "{what}: a fault fired and yet the call succeeded");
                            let copy = Db::open(to, opts.create_if_missing(false)).unwrap();
                            assert!(scan(&copy) == want, "{what}: the copy differs");
                            continue;
                        }
                        Err(e) => e,
                    };
                    failed += 1;
                    assert!(this_hit, "{what}: failed with no fault: {e}");
                    assert!(matches!(e, Error::Io { .. }), "{what}: {e}");
                    if shape == "empty" {
                        let names = FileSystem::list(&fs, to).unwrap();
                        assert!(names.is_empty(), "{what}: {e}: the target holds {names:?}");
                    } else {
                        assert!(!FileSystem::exists(&fs, to), "{what}: {e}: the target exists");
                    }
                    let opened = Db::open(to, opts.create_if_missing(false));
                    assert!(opened.is_err(), "{what}: {e}: the target opens");
                    let parent = to.parent().unwrap().to_str().unwrap();
                    assert_eq!(leftover_temps(&fs, parent), Vec::<String>::new(), "{what}");
                    db.put("after", "a failed checkpoint").unwrap();
                    db.delete("after").unwrap();
                    assert!(scan(&db) == want, "{what}: the live database changed");
                }
                if !hit {
                    break;
                }
            }
        }
    }
    assert!(failed > 100, "{failed} failed checkpoints");
}

/// The data only in the memtable, as when a checkpoint follows writes closely: a checkpoint
/// cut short by a failed write (a full disk's short write among them) or a failed create
/// must not leave what opens, with the default `create_if_missing`, as an empty database.
#[test]
fn a_failed_checkpoint_of_memtable_data_never_opens_as_an_empty_database() {
    let fs = FaultFs::new();
    let opts = small().memtable_bytes(1 << 20).fault_fs(&fs);
    let db = Db::open("/live", opts.clone()).unwrap();
    for i in 0..500 {
        db.put(key6(i), format!("v{i}")).unwrap();
    }
    assert_eq!(db.stats().tables_per_level.iter().sum::<usize>(), 0);
    let want = scan(&db);
    type NthFault = fn(u64) -> Fault;
    let faults: [(&str, NthFault); 4] = [
        ("create", |n| Fault::on(OpKind::Create).nth(n)),
        ("full disk", |n| Fault::on(OpKind::Append).nth(n).short_write(300)),
        ("sync", |n| Fault::on(OpKind::Sync).nth(n)),
        ("rename", |n| Fault::on(OpKind::RenameDir).nth(n)),
    ];
    let mut cut = 0;
    for (name, fault) in faults {
        for nth in 1.. {
            let to = format!("/copy-{name}-{nth}");
            let fired = fs.faults_fired();
            fs.inject(fault(nth));
            let got = db.checkpoint(&to);
            fs.clear_faults();
            if fs.faults_fired() == fired {
                got.unwrap();
                break;
            }
            cut += 1;
            assert!(got.is_err(), "{to}");
            // Were it there, the default options would open it.
            assert!(!FileSystem::exists(&fs, Path::new(&to)), "{to}: a partial copy is there");
            // And what is opened there is a new database (made now), not a copy.
            let fresh = Db::open(&to, opts.clone()).unwrap();
            assert!(scan(&fresh).is_empty());
        }
    }
    assert!(cut >= 4, "{cut}");
    assert!(scan(&db) == want);
}

/// A power cut at any call of a checkpoint (any kind of call; tables linked, or copied
/// because links fail) leaves either no checkpoint at all or a whole one, and the live
/// database as it was; a power cut just after a checkpoint returned leaves a copy that
/// opens to exactly the snapshot. A directory cut short never stands under the target's
/// name, where even the default options would open it, as an empty database.
#[test]
fn power_loss_during_a_checkpoint_leaves_no_copy_or_a_whole_one() {
    // Tables linked, or copied because links fail.
    let setup = |copy: bool| {
        let fs = FaultFs::new();
        let db = fault_db(&fs);
        if copy {
            fs.inject(Fault::on(OpKind::Link));
        }
        (fs, db)
    };
    let mut runs = 0;
    for copy in [false, true] {
        let counts: Vec<u64> = {
            let (fs, db) = setup(copy);
            let before: Vec<u64> = OpKind::ALL.iter().map(|&k| fs.calls(k)).collect();
            db.checkpoint("/copy").unwrap();
            OpKind::ALL.iter().zip(before).map(|(&k, b)| fs.calls(k) - b).collect()
        };
        let cuts = OpKind::ALL
            .iter()
            .zip(&counts)
            .filter(|&(&k, _)| !(copy && k == OpKind::Link))
            .flat_map(|(&k, &n)| (1..=n).map(move |i| Some((k, i))));
        for cut in cuts.chain([None]) {
            let (fs, db) = setup(copy);
            let snap = db.snapshot();
            let want = to_model(snap.range(..));
            if let Some((kind, nth)) = cut {
                fs.inject(Fault::on(kind).nth(nth).power_off());
            }
            let acknowledged = snap.checkpoint("/copy").is_ok();
            assert_eq!(acknowledged, cut.is_none(), "{cut:?}");
            let fs = fs.crash(CrashMode::DropUnsynced);
            drop((snap, db));
            let opts = small().fault_fs(&fs);
            if FileSystem::exists(&fs, Path::new("/copy")) {
                let copy = Db::open("/copy", opts.clone()).unwrap();
                assert!(scan(&copy) == want, "{cut:?}: the copy differs from the snapshot");
            } else {
                assert!(!acknowledged, "{cut:?}: the acknowledged copy is gone");
            }
            // Only a temporary directory may be left, under a name of its own.
            for name in FileSystem::list(&fs, Path::new("/")).unwrap() {
                let known = ["live", "copy"].contains(&name.as_str());
                assert!(known || name.starts_with(".copy.checkpoint-tmp-"), "{cut:?}: {name}");
            }
            let live = Db::open("/live", opts).unwrap();
            assert!(scan(&live) == want, "{cut:?}: the live database changed");
            runs += 1;
        }
    }
    assert!(runs > 40, "{runs} runs");
}

/// A checkpoint into the database's own directory, under any name that leads there, would
/// put a directory where the database later wants a file (`000999.log`, `CURRENT.tmp`) and
/// it would no longer open: refused, and nothing is made.
#[test]
fn targets_inside_the_database_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live");
    let db = Db::open(&live, small()).unwrap();
    for i in 0..100 {
        db.put(key6(i), "v").unwrap();
    }
    db.flush().unwrap();
    db.put(key6(0), "in the memtable").unwrap();
    let want = scan(&db);
    let mut targets = vec![
        live.clone(),
        live.join("000999.log"),
        live.join("CURRENT.tmp"),
        live.join("sub/dir"),
        live.join("..").join("live").join("x"),
        live.join("sub/../../live/y"),
        // Holds the database: not empty either.
        dir.path().to_path_buf(),
    ];
    #[cfg(unix)]
    {
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&live, &link).unwrap();
        targets.push(link.clone());
        targets.push(link.join("000998.log"));
    }
    let before: Vec<_> = std::fs::read_dir(&live).unwrap().map(|e| e.unwrap().path()).collect();
    for to in &targets {
        match db.checkpoint(to) {
            Err(Error::InvalidArgument(msg)) => {
                assert!(msg.contains("database directory"), "{}: {msg}", to.display())
            }
            other => panic!("{}: {other:?}", to.display()),
        }
        match db.snapshot().checkpoint(to) {
            Err(Error::InvalidArgument(_)) => {}
            other => panic!("{}: {other:?}", to.display()),
        }
    }
    let after: Vec<_> = std::fs::read_dir(&live).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(after, before, "nothing was made in the database directory");
    assert!(!live.join("sub").exists());
    // The live database works on and reopens.
    db.put(key6(1), "after").unwrap();
    db.close().unwrap();
    drop(db);
    let db = Db::open(&live, small().create_if_missing(false)).unwrap();
    let mut want = want;
    want.insert(key6(1), b"after".to_vec());
    assert_eq!(scan(&db), want);
    // A sibling whose name starts with the database's is not inside it.
    db.checkpoint(dir.path().join("live2")).unwrap();
    assert_eq!(scan(&Db::open(dir.path().join("live2"), small()).unwrap()), want);
}
