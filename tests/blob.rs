//! Large values in blob files (`KeyspaceOptions::blob_threshold`): every read path resolves
//! references against a model, compaction carries them, the manifest's accounting survives
//! reopens, and a blob file goes only once nothing can reach it; merges, expiry, compaction
//! filters, range deletes, dropped keyspaces and checkpoints see the real values.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bloomkv::{
    Append, CompactionFilter, Db, Decision, Error, KeyspaceOptions, ManualClock, Options, Readable,
    WriteBatch,
};

mod common;
use common::values::{pad, value};

use bloomkv_tree::blob::BlobFileKind;
use common::files::files_ending;

/// Values of at least this many bytes go to blob files in these tests.
const THRESHOLD: usize = 1000;

fn opts() -> Options {
    Options::new()
        .blob_threshold(Some(THRESHOLD))
        .memtable_bytes(256 << 10)
        .target_table_bytes(64 << 10)
        .level_base_bytes(256 << 10)
}

/// The blob files in `dir`: separated ones (`.blob`, named by the manifest or not yet
/// removed) and WAL segments the manifest names as kept blob files (`.log`).
fn blob_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = files_ending(dir, "blob");
    files.extend(kept_segments(dir));
    files.sort();
    files
}

/// The WAL segments in `dir` that the manifest names as blob files.
fn kept_segments(dir: &Path) -> Vec<PathBuf> {
    let m = bloomkv_tree::version::manifest::read_manifest(&bloomkv::fs::StdFs, dir).unwrap();
    let kept = m.blob_files.values().filter(|b| b.kind == BlobFileKind::WalSegment);
    kept.map(|b| b.path(dir)).filter(|p| p.exists()).collect()
}

/// A small deterministic generator (xorshift), so a failure replays.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Every read path agrees with the model: get, multi_get, forward and backward scans, a
/// cursor paging both ways, and a transaction's reads.
fn check(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>, probe: &[Vec<u8>]) {
    for k in probe {
        assert_eq!(db.get(k).unwrap().map(|v| v.to_vec()), model.get(k).cloned(), "get {k:?}");
    }
    let got = db.multi_get(probe).unwrap();
    for (k, v) in probe.iter().zip(got) {
        assert_eq!(v.map(|v| v.to_vec()), model.get(k).cloned(), "multi_get {k:?}");
    }
    let fwd: Vec<(Vec<u8>, Vec<u8>)> =
        db.range(..).map(|r| r.map(|(k, v)| (k, v.to_vec()))).collect::<Result<_, _>>().unwrap();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(fwd, want, "forward scan");
    let mut back: Vec<(Vec<u8>, Vec<u8>)> = db
        .range(..)
        .rev()
        .map(|r| r.map(|(k, v)| (k, v.to_vec())))
        .collect::<Result<_, _>>()
        .unwrap();
    back.reverse();
    assert_eq!(back, want, "backward scan");
    let mut c = db.cursor(..);
    c.seek_to_last().unwrap();
    let mut n = 0;
    while let (Some(k), Some(v)) = (c.key(), c.value()) {
        assert_eq!(Some(&v.to_vec()), model.get(&k.to_vec()), "cursor at {k:?}");
        c.prev().unwrap();
        n += 1;
    }
    assert_eq!(n, model.len());
    let t = db.transaction();
    for k in probe.iter().take(40) {
        assert_eq!(t.get(k).unwrap().map(|v| v.to_vec()), model.get(k).cloned());
    }
}

#[test]
fn reads_match_a_model_across_flushes_compactions_and_reopens() {
    model_test(false);
}

#[test]
fn reads_match_a_model_with_large_values_copied_out_of_their_segments() {
    model_test(true);
}

/// Random writes checked against a model across flushes, compactions and reopens; with
/// `copied`, each large value is followed by twice its bytes of small values in a keyspace
/// that separates none, so that most WAL segments are not worth keeping and their large
/// values are copied into blob files.
fn model_test(copied: bool) {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Db::open(dir.path(), opts()).unwrap();
    let padding = |db: &Db, bytes: usize| {
        if copied {
            let ks = db.keyspace("padding", KeyspaceOptions::new()).unwrap();
            for i in 0..(2 * bytes).div_ceil(900) {
                ks.put(format!("{i:05}"), value(i as u64, 900)).unwrap();
            }
        }
    };
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut rng = Rng(0x5eed);
    let key = |i: u64| format!("key{i:04}").into_bytes();
    let probe: Vec<Vec<u8>> = (0..120).map(key).collect();
    // Kept segments may be collected again by the end: counted after each flush.
    let mut kept_ever = 0;
    for round in 0..12 {
        for _ in 0..150 {
            let k = key(rng.below(120));
            match rng.below(10) {
                0 | 1 => {
                    db.delete(&k).unwrap();
                    model.remove(&k);
                }
                2 => {
                    let start = key(rng.below(120));
                    let end = key(rng.below(120));
                    if start < end {
                        db.delete_range(start.clone()..end.clone()).unwrap();
                        let doomed: Vec<_> =
                            model.range(start..end).map(|(k, _)| k.clone()).collect();
                        doomed.iter().for_each(|k| {
                            model.remove(k);
                        });
                    }
                }
                r => {
                    // Small, at the threshold, and large enough to cross 32 KiB pages.
                    let len = match r % 4 {
                        0 => 20,
                        1 => THRESHOLD,
                        2 => 3000 + rng.below(3000) as usize,
                        _ => 33_000 + rng.below(40_000) as usize,
                    };
                    let v = value(rng.next(), len);
                    db.put(&k, &v).unwrap();
                    model.insert(k, v);
                    if len >= THRESHOLD {
                        padding(&db, len);
                    }
                }
            }
        }
        match round % 4 {
            0 => {
                db.flush().unwrap();
                kept_ever += kept_segments(dir.path()).len();
            }
            1 => db.compact().unwrap(),
            2 => {
                db.close().unwrap();
                db = Db::open(dir.path(), opts()).unwrap();
            }
            _ => {}
        }
        check(&db, &model, &probe);
    }
    db.flush().unwrap();
    assert!(!blob_files(dir.path()).is_empty(), "large values went to blob files");
    let kept = kept_segments(dir.path()).len() + kept_ever;
    let separated = files_ending(dir.path(), "blob").len();
    // (Garbage collection relocates values out of the oldest files, kept segments or not.)
    if copied {
        assert!(separated > 2 * kept, "mostly copied: {separated} blob files, {kept} segments");
    } else {
        assert!(kept > 0, "kept: {separated} blob files, {kept} segments");
    }
    db.compact().unwrap();
    check(&db, &model, &probe);
    // What the manifest records adds up after a reopen, and the files check out.
    db.close().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    check(&db, &model, &probe);
    drop(db);
    let report = bloomkv::check::database(Arc::new(bloomkv::fs::StdFs), dir.path());
    assert_eq!(report.status(), bloomkv::check::Status::Ok, "{:?}", report.problems);
}

#[test]
fn small_values_and_thresholds_off_write_no_blob_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::new()).unwrap();
    db.put("big", value(1, 50_000)).unwrap();
    db.flush().unwrap();
    assert!(blob_files(dir.path()).is_empty());
    drop(db);
    // Turned on at a reopen: the next table written separates, the old one stays readable.
    let db = Db::open(dir.path(), opts()).unwrap();
    db.put("small", "tiny").unwrap();
    db.flush().unwrap();
    assert!(blob_files(dir.path()).is_empty());
    db.compact().unwrap();
    assert_eq!(blob_files(dir.path()).len(), 1, "compaction separated the inline value");
    assert_eq!(db.get("big").unwrap().unwrap(), value(1, 50_000));
    drop(db);
    let refused = Db::open(dir.path(), Options::new().blob_threshold(Some(0)));
    assert!(matches!(refused, Err(Error::InvalidArgument(_))), "{:?}", refused.map(|_| ()));
}

#[test]
fn a_blob_file_outlives_the_compaction_dropping_it_while_a_snapshot_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    db.put("k", value(7, 20_000)).unwrap();
    db.flush().unwrap();
    let first = blob_files(dir.path());
    assert_eq!(first.len(), 1);
    let snap = db.snapshot();
    db.put("k", "small now").unwrap();
    db.flush().unwrap();
    // The compaction drops the only reference to the first blob file.
    db.compact().unwrap();
    assert!(first[0].exists(), "a snapshot can still reach it");
    assert_eq!(snap.get("k").unwrap().unwrap(), value(7, 20_000));
    assert_eq!(db.get("k").unwrap().unwrap(), "small now");
    drop(snap);
    // The next manual compaction waits for the removals queued.
    db.compact().unwrap();
    assert!(!first[0].exists(), "no version or snapshot reaches it any more");
    drop(db);
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(db.get("k").unwrap().unwrap(), "small now");
}

#[test]
fn merge_operands_combine_with_a_separated_value() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts().merge_operator(Arc::new(Append::new(",")))).unwrap();
    let base = value(3, 5000);
    db.put("k", &base).unwrap();
    db.flush().unwrap();
    assert_eq!(blob_files(dir.path()).len(), 1);
    db.merge("k", "+tail").unwrap();
    let want = [&base[..], b",+tail"].concat();
    let got = db.get("k").unwrap().unwrap();
    assert_eq!(got, want);
    db.flush().unwrap();
    db.compact().unwrap();
    assert_eq!(db.get("k").unwrap().unwrap(), got);
    let scanned: Vec<_> = db.range(..).map(|r| r.unwrap().1).collect();
    assert_eq!(scanned, vec![got]);
}

#[test]
fn an_expired_blob_value_reads_as_absent_before_and_after_compaction() {
    let clock = Arc::new(ManualClock::new(1_000_000));
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts().clock(clock.clone())).unwrap();
    db.put_with_ttl("t", value(5, 8000), Duration::from_secs(10)).unwrap();
    db.put("keep", value(6, 8000)).unwrap();
    db.flush().unwrap();
    assert_eq!(db.get("t").unwrap().unwrap(), value(5, 8000));
    clock.advance(Duration::from_secs(10));
    assert_eq!(db.get("t").unwrap(), None);
    assert_eq!(db.multi_get(["t", "keep"]).unwrap()[0], None);
    assert_eq!(db.range(..).count(), 1);
    assert_eq!(db.range(..).rev().count(), 1);
    db.compact().unwrap();
    assert_eq!(db.get("t").unwrap(), None);
    assert_eq!(db.get("keep").unwrap().unwrap(), value(6, 8000));
}

/// Records the values it is shown; changes values starting with `c`, removes those
/// starting with `r`.
#[derive(Default)]
struct Seen(Mutex<Vec<(Vec<u8>, Vec<u8>)>>);
impl CompactionFilter for Seen {
    fn filter(&self, _level: usize, key: &[u8], value: &[u8]) -> Decision {
        self.0.lock().unwrap().push((key.to_vec(), value.to_vec()));
        match value.first() {
            Some(b'c') => Decision::ChangeValue([b"C", &value[1..]].concat()),
            Some(b'r') => Decision::Remove,
            _ => Decision::Keep,
        }
    }
    fn name(&self) -> &str {
        "seen"
    }
}

#[test]
fn a_compaction_filter_sees_the_value_not_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Seen::default());
    let db = Db::open(dir.path(), opts().compaction_filter(seen.clone())).unwrap();
    let big = |first: u8| [&[first][..], &value(9, 6000)].concat();
    db.put("change", big(b'c')).unwrap();
    db.put("keep", big(b'k')).unwrap();
    db.put("remove", big(b'r')).unwrap();
    db.flush().unwrap();
    db.compact().unwrap();
    let shown = seen.0.lock().unwrap().clone();
    // Asked again about the two kept when their values moved out of the segment that lost
    // the removed one (a compaction filter may be asked about a value any number of times).
    let keys: std::collections::BTreeSet<&[u8]> = shown.iter().map(|(k, _)| &k[..]).collect();
    assert_eq!(keys, [&b"change"[..], b"keep", b"remove"].into_iter().collect());
    for (k, v) in &shown {
        assert_eq!(v.len(), 6001, "{k:?} was shown its value");
        assert_eq!(&v[1..], &value(9, 6000)[..]);
    }
    assert_eq!(db.get("change").unwrap().unwrap(), big(b'C'));
    assert_eq!(db.get("keep").unwrap().unwrap(), big(b'k'));
    assert_eq!(db.get("remove").unwrap(), None);
    drop(db);
    let db = Db::open(dir.path(), opts().compaction_filter(seen)).unwrap();
    assert_eq!(db.get("change").unwrap().unwrap(), big(b'C'));
}

#[test]
fn delete_range_hides_separated_values_and_compaction_drops_their_files() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    for i in 0..20u64 {
        db.put(format!("k{i:02}"), value(i, 4000)).unwrap();
    }
    db.flush().unwrap();
    let before = blob_files(dir.path());
    assert_eq!(before.len(), 1);
    db.delete_range("k00".."k20").unwrap();
    assert_eq!(db.get("k05").unwrap(), None);
    assert_eq!(db.range(..).count(), 0);
    db.put("other", "x").unwrap();
    db.compact().unwrap();
    assert!(blob_files(dir.path()).is_empty(), "nothing references the file");
    assert_eq!(db.get("other").unwrap().unwrap(), "x");
}

#[test]
fn dropping_a_keyspace_removes_its_blob_files() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let ks_opts = || KeyspaceOptions::new().blob_threshold(Some(THRESHOLD));
    let images = db.keyspace("images", ks_opts()).unwrap();
    images.put("a", value(1, 9000)).unwrap();
    db.put("main", value(2, 9000)).unwrap();
    // Copied, into a blob file per keyspace.
    pad(&db, 20_000);
    db.flush().unwrap();
    assert!(kept_segments(dir.path()).is_empty());
    assert_eq!(blob_files(dir.path()).len(), 2);
    assert_eq!(images.get("a").unwrap().unwrap(), value(1, 9000));
    drop(images);
    db.drop_keyspace("images").unwrap();
    db.compact().unwrap();
    assert_eq!(blob_files(dir.path()).len(), 1);
    assert_eq!(db.get("main").unwrap().unwrap(), value(2, 9000));
    drop(db);
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(db.get("main").unwrap().unwrap(), value(2, 9000));
}

#[test]
fn two_keyspaces_share_a_kept_segment_until_neither_references_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let ks_opts = || KeyspaceOptions::new().blob_threshold(Some(THRESHOLD));
    let images = db.keyspace("images", ks_opts()).unwrap();
    let logs = db.keyspace("logs", KeyspaceOptions::new()).unwrap();
    images.put("a", value(1, 9000)).unwrap();
    logs.put("l", value(3, 9000)).unwrap(); // inline: its keyspace separates nothing
    db.put("main", value(2, 9000)).unwrap();
    images.put("b", value(4, 9000)).unwrap();
    db.flush().unwrap();
    let kept = kept_segments(dir.path());
    assert_eq!(blob_files(dir.path()), kept, "one segment holds both keyspaces' values");
    let shared = |db: &Db| {
        let s = db.stats();
        assert_eq!(s.blob_files.len(), 1, "{:?}", s.blob_files);
        let f = s.blob_files[0].clone();
        assert!(f.wal_segment);
        assert_eq!(f.keyspace, "default");
        assert_eq!(f.file_size, kept[0].metadata().unwrap().len());
        assert_eq!(f.live_bytes + f.garbage_bytes, f.file_size);
        (f.live_values, f.live_bytes)
    };
    assert_eq!(shared(&db), (3, 27_000));
    drop((images, logs));
    db.close().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(shared(&db), (3, 27_000), "after a reopen");
    let images = db.keyspace("images", ks_opts()).unwrap();
    assert_eq!(images.get("b").unwrap().unwrap(), value(4, 9000));
    drop(images);
    db.drop_keyspace("images").unwrap();
    // Still referenced by the default keyspace, the segment is kept; judged over every
    // keyspace, it holds garbage only once the dropped keyspace's references are gone.
    let s = db.stats();
    assert_eq!(s.blob_files.len(), 1);
    assert_eq!((s.blob_files[0].live_values, s.blob_files[0].live_bytes), (1, 9000));
    db.compact().unwrap();
    assert!(!kept[0].exists(), "its last value relocated, the segment goes");
    let s = db.stats();
    assert_eq!(s.blob_files.len(), 1, "{:?}", s.blob_files);
    assert!(!s.blob_files[0].wal_segment);
    assert_eq!((s.blob_files[0].live_values, s.blob_files[0].live_bytes), (1, 9000));
    assert_eq!(db.get("main").unwrap().unwrap(), value(2, 9000));
    let logs = db.keyspace("logs", KeyspaceOptions::new()).unwrap();
    assert_eq!(logs.get("l").unwrap().unwrap(), value(3, 9000));
    // The last reference overwritten: its file goes.
    db.put("main", "small").unwrap();
    db.flush().unwrap();
    db.compact().unwrap();
    assert!(db.stats().blob_files.is_empty());
    assert!(blob_files(dir.path()).is_empty());
}

#[cfg(unix)]
#[test]
fn checkpoints_link_blob_files() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    db.put("flushed", value(1, 7000)).unwrap();
    db.flush().unwrap();
    db.put("in memtable", value(2, 7000)).unwrap();
    let copy = dir
        .path()
        .join("..")
        .join(format!("{}-copy", dir.path().file_name().unwrap().to_string_lossy()));
    db.checkpoint(&copy).unwrap();
    let ours = blob_files(dir.path());
    let theirs = blob_files(&copy);
    assert_eq!(ours.len(), 1);
    assert_eq!(theirs.len(), 1);
    let (a, b) = (std::fs::metadata(&ours[0]).unwrap(), std::fs::metadata(&theirs[0]).unwrap());
    assert_eq!((a.dev(), a.ino()), (b.dev(), b.ino()), "a hard link, not a copy");
    let c = Db::open(&copy, opts()).unwrap();
    assert_eq!(c.get("flushed").unwrap().unwrap(), value(1, 7000));
    assert_eq!(c.get("in memtable").unwrap().unwrap(), value(2, 7000));
    drop(c);
    let _ = std::fs::remove_dir_all(&copy);
}

#[test]
fn transactions_and_batches_read_and_write_separated_values() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let mut b = WriteBatch::new();
    b.put("a", value(1, 3000));
    b.put("b", "small");
    db.write(&b, &Default::default()).unwrap();
    db.flush().unwrap();
    let mut t = db.transaction();
    assert_eq!(t.get("a").unwrap().unwrap(), value(1, 3000));
    let seen: Vec<_> = t.range(..).map(|r| r.unwrap().0).collect();
    assert_eq!(seen, vec![b"a".to_vec(), b"b".to_vec()]);
    t.put("a", value(2, 3000)).unwrap();
    t.commit().unwrap();
    db.flush().unwrap();
    db.compact().unwrap();
    assert_eq!(db.get("a").unwrap().unwrap(), value(2, 3000));
}

#[test]
fn a_damaged_blob_file_is_corruption_naming_it() {
    // The three kinds of file a value can live in: a WAL segment kept as a blob file (the
    // value outweighs the rest of its segment), a blob file the flush copied it into (small
    // values fill the segment), and the file of its own of a value over `MAX_VALUE_BYTES`.
    let big = value(5, bloomkv::MAX_VALUE_BYTES + 10);
    for (kind, v) in
        [("kept segment", value(4, 10_000)), ("copied", value(4, 10_000)), ("own", big)]
    {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), opts()).unwrap();
        db.put("k", &v).unwrap();
        if kind == "copied" {
            pad(&db, 30_000);
        }
        db.flush().unwrap();
        let blob = blob_files(dir.path()).remove(0);
        let ext = if kind == "kept segment" { "log" } else { "blob" };
        assert!(blob.extension().is_some_and(|e| e == ext), "{kind}: {}", blob.display());
        drop(db);
        let mut bytes = std::fs::read(&blob).unwrap();
        let at = bytes.len() - 100;
        bytes[at] ^= 0xff;
        std::fs::write(&blob, &bytes).unwrap();
        let db = Db::open(dir.path(), opts()).unwrap();
        // Every reader names the file and an offset in it past its header, at or before the
        // damaged byte (the value's record, or for a part, its page).
        let in_record = |offset: u64| offset > 0 && offset <= at as u64;
        let tail = v.len() as u64 - 1000;
        for (how, e) in [
            ("get", db.get("k").unwrap_err()),
            ("multi_get", db.multi_get(["k"]).unwrap_err()),
            ("get_range", db.get_range("k", tail, 1000).unwrap_err()),
            ("scan", db.range(.."l").next().unwrap().unwrap_err()),
            ("reverse scan", db.range(.."l").next_back().unwrap().unwrap_err()),
        ] {
            match &e {
                Error::Corruption { file, offset, .. } => {
                    assert_eq!(*file, blob, "{kind}: {how}");
                    assert!(in_record(*offset), "{kind}: {how}: offset {offset}, damage at {at}");
                    let msg = e.to_string();
                    assert!(msg.contains(&format!("offset {offset}")), "{kind}: {how}: {msg}");
                }
                other => panic!("{kind}: {how}: expected corruption, got {other}"),
            }
        }
        if kind == "own" {
            // A part pages away from the damage still reads.
            assert_eq!(db.get_range("k", 0, 10).unwrap().as_deref(), Some(&v[..10]));
        }
        drop(db);
        // `verify` (the library's check of a database directory) reports the same place.
        let r = bloomkv::check::database(std::sync::Arc::new(bloomkv::fs::StdFs), dir.path());
        assert_eq!(r.status(), bloomkv::check::Status::Corrupt, "{kind}: {:?}", r.problems);
        let here = |p: &&bloomkv::check::Finding| p.file == blob && p.offset.is_some_and(in_record);
        assert!(r.problems.iter().any(|p| here(&p)), "{kind}: {:?}", r.problems);
        if kind != "own" {
            continue;
        }
        // A missing blob file stops the open, naming it.
        std::fs::remove_file(&blob).unwrap();
        match Db::open(dir.path(), opts()) {
            Err(Error::Corruption { file, .. }) => assert_eq!(file, blob),
            other => panic!("expected corruption, got {:?}", other.map(|_| ())),
        }
    }
}

#[test]
fn a_value_read_again_after_its_file_is_damaged_is_the_checked_one_or_corruption() {
    use std::io::{Seek, SeekFrom, Write};
    // With a block cache the second read is served from it: the value as checked on the
    // first read. Without one it reads the file again and finds the damage. Either way the
    // damaged bytes are never returned.
    for cache in [64 << 20, 0] {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), opts().block_cache_bytes(cache)).unwrap();
        let v = value(9, 100_000);
        db.put("k", &v).unwrap();
        db.flush().unwrap();
        assert_eq!(db.get("k").unwrap().unwrap(), v);
        let blob = blob_files(dir.path()).remove(0);
        let mut f = std::fs::OpenOptions::new().write(true).open(&blob).unwrap();
        let len = f.metadata().unwrap().len();
        f.seek(SeekFrom::Start(len - 100)).unwrap();
        f.write_all(&[0x5a; 8]).unwrap();
        f.sync_all().unwrap();
        drop(f);
        match (cache, db.get("k")) {
            (0, Err(Error::Corruption { file, .. })) => assert_eq!(file, blob),
            (0, other) => panic!("expected corruption, got {:?}", other.map(|_| ())),
            (_, got) => assert_eq!(got.unwrap().unwrap(), v),
        }
    }
}

/// Per blob file, the references the tables in `dir` hold and their bytes, counted by reading
/// every entry of every table: what the manifest's accounting must equal.
fn recount(dir: &Path) -> BTreeMap<u64, (u64, u64)> {
    use bloomkv_tree::blob::BlobRef;
    use bloomkv_tree::iter::InternalIterator;
    use bloomkv_tree::key::{parse_internal_key, ValueKind, EXPIRY_LEN};
    let mut refs = BTreeMap::new();
    for path in files_ending(dir, "sst") {
        let file: Arc<dyn bloomkv::fs::RandomAccessFile> =
            bloomkv::fs::FileSystem::open(&bloomkv::fs::StdFs, &path).unwrap();
        let table = Arc::new(bloomkv_tree::table::Table::open(file, path, None).unwrap());
        let mut it = table.iter();
        it.seek_to_first().unwrap();
        while it.valid() {
            let kind = parse_internal_key(it.key()).unwrap().kind;
            let stored = match kind {
                ValueKind::BlobPut => Some(it.value()),
                ValueKind::BlobPutExpiring => Some(&it.value()[EXPIRY_LEN..]),
                _ => None,
            };
            if let Some(stored) = stored {
                let r = BlobRef::decode(stored).unwrap();
                let e: &mut (u64, u64) = refs.entry(r.file).or_default();
                e.0 += 1;
                e.1 += r.len;
            }
            it.next().unwrap();
        }
    }
    refs
}

/// The accounting `Stats` reports, per blob file: (live values, live bytes), and the
/// totals, checked to add up.
fn accounting(db: &Db) -> BTreeMap<u64, (u64, u64)> {
    let s = db.stats();
    let mut live = 0;
    let mut garbage = 0;
    let mut out = BTreeMap::new();
    for b in &s.blob_files {
        assert_eq!(b.live_bytes + b.garbage_bytes, b.value_bytes, "file {}", b.number);
        live += b.live_bytes;
        garbage += b.garbage_bytes;
        out.insert(b.number, (b.live_values, b.live_bytes));
    }
    assert_eq!((s.blob_live_bytes, s.blob_garbage_bytes), (live, garbage));
    out
}

#[test]
fn live_and_garbage_bytes_are_exact_and_fully_overwritten_files_go() {
    exact_accounting(false);
}

#[test]
fn a_kept_segments_garbage_is_all_but_its_live_values() {
    exact_accounting(true);
}

/// Live and garbage bytes through a fill, half of it overwritten, and all of it, with the
/// large values in blob files of their own or (`kept`) in the WAL segments kept as such.
fn exact_accounting(kept: bool) {
    let dir = tempfile::tempdir().unwrap();
    // Room for all the values in one memtable, so one flush writes them. No garbage
    // collection: files keep their garbage, to be counted.
    let opts = || opts().memtable_bytes(4 << 20).blob_gc_age_cutoff(0.0);
    let mut db = Db::open(dir.path(), opts()).unwrap();
    let fill = |db: &Db, bytes: usize| {
        if !kept {
            pad(db, bytes);
        }
    };
    let keys = 200u64;
    for i in 0..keys {
        db.put(format!("k{i:03}"), value(i, 2000 + i as usize)).unwrap();
    }
    fill(&db, 500_000);
    db.flush().unwrap();
    let first = blob_files(dir.path());
    assert_eq!(first.len(), 1);
    assert_eq!(kept_segments(dir.path()).len(), usize::from(kept));
    let s = db.stats();
    let live = (0..keys).map(|i| 2000 + i).sum::<u64>();
    assert_eq!(s.blob_live_bytes, live);
    // A kept segment's framing and small values are garbage from the start.
    let base = if kept { s.blob_files[0].file_size - live } else { 0 };
    assert_eq!(s.blob_garbage_bytes, base);
    assert_eq!(s.blob_files[0].wal_segment, kept);
    let number = s.blob_files[0].number;
    // Half overwritten: the first file is part garbage, exactly the overwritten values.
    for i in (0..keys).step_by(2) {
        db.put(format!("k{i:03}"), value(i + 1000, 1500)).unwrap();
    }
    fill(&db, 300_000);
    db.flush().unwrap();
    db.compact().unwrap();
    let s = db.stats();
    let old = s.blob_files.iter().find(|b| b.number == number).unwrap();
    assert_eq!(old.garbage_bytes, base + (0..keys).step_by(2).map(|i| 2000 + i).sum::<u64>());
    let counted = accounting(&db);
    db.close().unwrap();
    assert_eq!(counted, recount(dir.path()), "the manifest's accounting is what the tables hold");
    // Reopened: rebuilt from the manifest, the same.
    db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(accounting(&db), counted);
    // Everything overwritten: no table references the old files, which go.
    for i in 0..keys {
        db.put(format!("k{i:03}"), value(i + 5000, 1200)).unwrap();
    }
    fill(&db, 400_000);
    db.flush().unwrap();
    db.compact().unwrap();
    let now = blob_files(dir.path());
    assert!(now.iter().all(|p| !first.contains(p)), "{now:?}");
    assert!(first.iter().all(|p| !p.exists()), "{first:?}");
    let s = db.stats();
    assert_eq!(s.blob_files.len(), 1, "{:?}", s.blob_files);
    let base = if kept { s.blob_files[0].file_size - keys * 1200 } else { 0 };
    assert_eq!(s.blob_garbage_bytes, base, "{:?}", s.blob_files);
    assert_eq!(s.blob_live_bytes, keys * 1200);
    assert_eq!(s.blob_file_bytes, now.iter().map(|p| p.metadata().unwrap().len()).sum::<u64>());
    let counted = accounting(&db);
    db.close().unwrap();
    assert_eq!(counted, recount(dir.path()));
}

/// The files ending in `ext` that are in `dir` now and not in `before`, with their sizes.
fn new_files(dir: &Path, ext: &str, before: &[PathBuf]) -> u64 {
    let now = files_ending(dir, ext);
    now.iter().filter(|p| !before.contains(p)).map(|p| p.metadata().unwrap().len()).sum()
}

#[test]
fn blob_bytes_written_counts_each_blob_file_once_and_the_table_counters_none() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path();
    // Written with blob files off: the values stay inline.
    let db = Db::open(path, Options::new()).unwrap();
    for i in 0..10u64 {
        db.put(format!("inline{i}"), value(i, 6000)).unwrap();
    }
    db.flush().unwrap();
    assert_eq!(db.stats().blob_bytes_written, 0);
    drop(db);
    // No garbage collection: the tables a compaction writes are the ones it leaves.
    let db = Db::open(path, opts().blob_gc_age_cutoff(0.0)).unwrap();
    // A flush: one blob file, counted whole; the tables' counter holds the tables alone.
    // Each key is written three times: with two of its versions overwritten, the WAL segment
    // is not worth keeping, and the flush copies the values.
    let (ssts, blobs) = (files_ending(path, "sst"), blob_files(path));
    for round in 0..3 {
        for i in 0..10u64 {
            db.put(format!("flushed{i}"), value(i + 100 + round * 1000, 5000)).unwrap();
        }
    }
    db.flush().unwrap();
    let s = db.stats();
    assert!(kept_segments(path).is_empty());
    let flushed_blobs = new_files(path, "blob", &blobs);
    assert!(flushed_blobs > 50_000, "{flushed_blobs}");
    assert_eq!(s.blob_bytes_written, flushed_blobs);
    assert_eq!(s.flush_bytes_written, new_files(path, "sst", &ssts));
    assert!(s.flush_bytes_written < 10_000, "the values are not in the table");
    // A compaction meeting the values still inline separates them into a file of its own.
    let (ssts, blobs) = (files_ending(path, "sst"), blob_files(path));
    db.compact().unwrap();
    let s = db.stats();
    let compacted_blobs = new_files(path, "blob", &blobs);
    assert!(compacted_blobs > 60_000, "{compacted_blobs}");
    assert_eq!(s.blob_bytes_written, flushed_blobs + compacted_blobs);
    assert_eq!(s.compaction_bytes_written, new_files(path, "sst", &ssts));
    // An ingest's separated values.
    let (ssts, blobs) = (files_ending(path, "sst"), blob_files(path));
    db.ingest((0..5u64).map(|i| (format!("ingested{i}"), value(i + 200, 4000)))).unwrap();
    let s = db.stats();
    let ingested_blobs = new_files(path, "blob", &blobs);
    assert!(ingested_blobs > 20_000, "{ingested_blobs}");
    assert_eq!(s.blob_bytes_written, flushed_blobs + compacted_blobs + ingested_blobs);
    assert_eq!(s.ingest_bytes_written, new_files(path, "sst", &ssts));
    // Write amplification counts every byte written once.
    let disk = s.flush_bytes_written
        + s.compaction_bytes_written
        + s.ingest_bytes_written
        + s.blob_bytes_written;
    let user = (s.user_bytes_written + s.ingested_bytes) as f64;
    assert!((s.write_amplification() - disk as f64 / user).abs() < 1e-9);
}

/// Brings `db` to rest: the memtable flushed, every compaction the picker finds due run (a
/// step waits for the background thread's compaction in progress, so when none is left to
/// pick none is running either), the replaced files removed.
fn settle(db: &Db) {
    db.flush().unwrap();
    while db.compact_step().unwrap().is_some() {}
    db.wait_for_file_removals();
}

/// Bytes of every file in `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum()
}

#[test]
fn garbage_collection_removes_overwritten_blob_files_and_keeps_space_near_the_live_data() {
    let dir = tempfile::tempdir().unwrap();
    // Small tables: an L0 table merged from newer ones is cut at the target size, so the
    // versions it makes obsolete, which stay in L1 while the tree is at rest (and keep their
    // values referenced), are few.
    let opts =
        || opts().memtable_bytes(128 << 10).target_table_bytes(4 << 10).blob_gc_age_cutoff(0.5);
    let db = Db::open(dir.path(), opts()).unwrap();
    let (keys, len) = (2400u64, 8000);
    let key = |i: u64| format!("key{i:05}").into_bytes();
    let mut rng = Rng(0x6c0b);
    let mut old = Vec::new();
    for round in 0..3u64 {
        let mut order: Vec<u64> = (0..keys).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        for &i in &order {
            db.put(key(i), value(round * keys + i, len)).unwrap();
        }
        if round < 2 {
            // Every value in these files is overwritten by the next round.
            settle(&db);
            old.extend(blob_files(dir.path()));
        }
    }
    settle(&db);
    let now = blob_files(dir.path());
    assert!(now.iter().all(|p| !old.contains(p)), "old files left: {now:?} of {old:?}");
    let live = keys * (key(0).len() + len) as u64;
    let space = dir_bytes(dir.path()) as f64 / live as f64;
    // Where background flushes fall among the puts shapes the tree at rest, and with it how
    // many obsolete versions stay referenced: runs measure 1.2 to just over 1.3 here (the
    // bench measures the target at full size), so the bound leaves that room.
    assert!(space <= 1.4, "space amplification {space:.3}");
    for i in (0..keys).step_by(7) {
        assert_eq!(db.get(key(i)).unwrap().unwrap(), value(2 * keys + i, len), "key {i}");
    }
    let counted = accounting(&db);
    db.close().unwrap();
    assert_eq!(counted, recount(dir.path()), "the manifest's accounting is what the tables hold");
}

#[test]
fn a_snapshot_held_across_garbage_collection_reads_the_old_values_until_dropped() {
    let dir = tempfile::tempdir().unwrap();
    // Every blob file is old enough: each compaction relocates every value it meets.
    let db = Db::open(dir.path(), opts().blob_gc_age_cutoff(1.0)).unwrap();
    let key = |i: u64| format!("k{i:02}");
    for i in 0..20 {
        db.put(key(i), value(i, 5000)).unwrap();
    }
    db.flush().unwrap();
    let first = blob_files(dir.path());
    assert_eq!(first.len(), 1);
    let snap = db.snapshot();
    for i in (0..20).step_by(2) {
        db.put(key(i), value(i + 100, 5000)).unwrap();
    }
    // The odd keys' values move out of the first file; the even keys' old ones are dropped.
    // The new values' file has lost none: it stays as it is.
    db.compact().unwrap();
    let live = db.stats().blob_files;
    assert!(first[0].exists(), "the snapshot can still reach it");
    assert_eq!(live.len(), 2, "the overwrites' file and the odd keys' new one: {live:?}");
    assert!(live.iter().all(|b| b.garbage_bytes < b.value_bytes / 50), "{live:?}");
    assert!(!first.contains(&blob_files(dir.path()).into_iter().max().unwrap()));
    for i in 0..20 {
        assert_eq!(snap.get(key(i)).unwrap().unwrap(), value(i, 5000), "snapshot, key {i}");
        let now = if i % 2 == 0 { i + 100 } else { i };
        assert_eq!(db.get(key(i)).unwrap().unwrap(), value(now, 5000), "key {i}");
    }
    drop(snap);
    db.wait_for_file_removals();
    assert!(!first[0].exists(), "nothing reaches it any more");
    let counted = accounting(&db);
    db.close().unwrap();
    assert_eq!(counted, recount(dir.path()));
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(db.get(key(3)).unwrap().unwrap(), value(3, 5000));
}

#[test]
fn garbage_collection_on_a_full_disk_loses_nothing_and_resume_recovers() {
    use bloomkv::fs::{fault::unique_dir, Fault, FaultFs, OpKind};
    use common::options::OptionsExt;
    let fs = FaultFs::new();
    let dir = unique_dir("blob-gc");
    let opts = || opts().blob_gc_age_cutoff(1.0).fault_fs(&fs);
    let db = Db::open(&dir, opts()).unwrap();
    let mut model = BTreeMap::new();
    for round in 0..3u64 {
        for i in 0..40u64 {
            let (k, v) = (format!("k{i:02}").into_bytes(), value(round * 100 + i, 3000));
            if round < 2 || i % 3 == 0 {
                db.put(&k, &v).unwrap();
                model.insert(k, v);
            }
        }
        db.flush().unwrap();
    }
    let scan = |db: &Db| -> BTreeMap<Vec<u8>, Vec<u8>> {
        db.range(..).map(|r| r.map(|(k, v)| (k, v.to_vec()))).collect::<Result<_, _>>().unwrap()
    };
    // Relocating a value into a new blob file finds the disk full.
    let is_blob = |p: &Path| p.extension().is_some_and(|e| e == "blob");
    fs.inject(Fault::on(OpKind::Append).matching(is_blob));
    assert!(db.compact().is_err());
    assert!(matches!(db.put("x", "y"), Err(Error::Background(_))), "the database stopped");
    assert_eq!(scan(&db), model, "nothing lost");
    fs.clear_faults();
    db.resume().unwrap();
    assert_eq!(scan(&db), model);
    db.compact().unwrap();
    assert_eq!(scan(&db), model);
    let s = db.stats();
    // Every file that lost a value collected (a kept segment's framing is never referenced).
    assert!(s.blob_files.iter().all(|b| b.live_values == b.values), "{:?}", s.blob_files);
    db.close().unwrap();
    drop(db);
    let db = Db::open(&dir, opts()).unwrap();
    assert_eq!(scan(&db), model);
}

/// Background collection (picked for garbage, not asked for) that finds the disk full at a
/// call it makes — the append of its new blob file (failed or short) or its sync, its
/// table's append, the directory's sync, the manifest edit: the database stops, the error
/// reaches listeners once and every later write, nothing is lost, no file it wrote stays
/// behind, and once space is back `resume` goes on and the collection completes, across a
/// reopen.
#[test]
fn background_garbage_collection_on_a_full_disk_is_reported_and_resumes() {
    use bloomkv::events::{
        BackgroundErrorInfo, CompactionInfo, CompactionReason, EventListener, ResumeInfo,
    };
    use bloomkv::fs::{fault::unique_dir, Fault, FaultFs, OpKind};
    use common::options::OptionsExt;
    use std::sync::mpsc;

    /// Injects its fault when the first collection begins; sends what it hears after: an
    /// error's message, or "resumed".
    struct Listener {
        fs: FaultFs,
        fault: Mutex<Option<Fault>>,
        heard: Mutex<mpsc::Sender<String>>,
    }
    impl EventListener for Listener {
        fn on_compaction_begin(&self, info: &CompactionInfo) {
            if info.reason == CompactionReason::BlobGarbage {
                if let Some(fault) = self.fault.lock().unwrap().take() {
                    self.fs.inject(fault);
                }
            }
        }
        fn on_background_error(&self, info: &BackgroundErrorInfo) {
            let _ = self.heard.lock().unwrap().send(info.error.to_string());
        }
        fn on_resumed(&self, _info: &ResumeInfo) {
            let _ = self.heard.lock().unwrap().send("resumed".into());
        }
    }
    let ends = |ext: &'static str| move |p: &Path| p.extension().is_some_and(|e| e == ext);
    let manifest =
        |p: &Path| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("MANIFEST"));
    let faults: [(&str, Fault); 6] = [
        ("blob append", Fault::on(OpKind::Append).matching(ends("blob"))),
        (
            "short blob append",
            Fault::on(OpKind::Append).matching(ends("blob")).nth(2).short_write(300),
        ),
        ("blob sync", Fault::on(OpKind::Sync).matching(ends("blob"))),
        ("table append", Fault::on(OpKind::Append).matching(ends("sst"))),
        ("directory sync", Fault::on(OpKind::SyncDir)),
        ("manifest append", Fault::on(OpKind::Append).matching(manifest)),
    ];
    for (what, fault) in faults {
        let fs = FaultFs::new();
        let dir = unique_dir("blob-gc-bg");
        let (tx, rx) = mpsc::channel();
        let listener = Arc::new(Listener {
            fs: fs.clone(),
            fault: Mutex::new(Some(fault)),
            heard: Mutex::new(tx),
        });
        let opts = || {
            let gc = opts().blob_gc_age_cutoff(1.0).blob_gc_force_threshold(0.2);
            gc.l0_compaction_trigger(2).fault_fs(&fs)
        };
        let db = Db::open(&dir, opts().event_listener(listener.clone())).unwrap();
        let mut model = BTreeMap::new();
        // Two flushes, each keeping its WAL segment as the blob file of its values (every
        // value is large); the second overwrites half the first's keys. The two L0 tables
        // are compacted, which drops the older versions: the first file is then half
        // garbage, and due for collection.
        for round in 0..2u64 {
            for i in 0..40u64 {
                if round == 0 || i % 2 == 0 {
                    let (k, v) = (format!("k{i:02}").into_bytes(), value(round * 100 + i, 3000));
                    db.put(&k, &v).unwrap();
                    model.insert(k, v);
                }
            }
            // The collection the flush leads to may already have stopped the database when
            // it returns.
            match db.flush() {
                Ok(()) | Err(Error::Background(_)) => {}
                Err(e) => panic!("{what}: {e}"),
            }
        }
        let scan = |db: &Db| -> BTreeMap<Vec<u8>, Vec<u8>> {
            let all = db.range(..).map(|r| r.map(|(k, v)| (k, v.to_vec())));
            all.collect::<Result<_, _>>().unwrap()
        };
        let error = rx.recv_timeout(Duration::from_secs(120)).expect("no background error");
        assert_eq!(fs.faults_fired(), 1, "{what}: {error}");
        match db.put("x", "y") {
            Err(Error::Background(cause)) => assert_eq!(cause.to_string(), error, "{what}"),
            other => panic!("{what}: the database did not stop: {other:?}"),
        }
        assert_eq!(scan(&db), model, "{what}: nothing lost");
        // Tables and blob files no manifest names: those of the failed collection.
        let stray = |db: &Db| -> Vec<PathBuf> {
            // A job that started before the stop finishes (installing or removing what it
            // wrote) after the error was heard.
            db.wait_for_background_jobs();
            db.wait_for_file_removals();
            let m = bloomkv_tree::version::manifest::read_manifest(&fs, &dir).unwrap();
            let number = |p: &Path| p.file_stem().and_then(|s| s.to_str()?.parse::<u64>().ok());
            let named = |p: &PathBuf| match number(p) {
                Some(n) if ends("blob")(p) => m.blob_files.contains_key(&n),
                Some(n) if ends("sst")(p) => m.added_at.contains_key(&n),
                _ => true,
            };
            fs.files().into_iter().filter(|p| !named(p)).collect()
        };
        // Removed at once, except after a failed manifest append: whether the edit naming
        // them reached the disk is unknown until a resume writes a manifest of its own.
        if what != "manifest append" {
            assert_eq!(stray(&db), Vec::<PathBuf>::new(), "{what}: the failed collection's files");
        }
        fs.clear_faults();
        db.resume().unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(120)).as_deref(), Ok("resumed"));
        assert!(rx.try_recv().is_err(), "{what}: one error per stop");
        settle(&db);
        assert_eq!(scan(&db), model, "{what}");
        let s = db.stats();
        assert!(s.blob_files.iter().all(|b| b.live_values == b.values), "{what}: {s:?}");
        assert_eq!(stray(&db), Vec::<PathBuf>::new(), "{what}: after the resume");
        db.close().unwrap();
        drop(db);
        let db = Db::open(&dir, opts()).unwrap();
        assert_eq!(scan(&db), model, "{what}");
    }
}

/// A fill of 16 KiB values, flushed and fully compacted: `Stats`' bytes written (WAL,
/// tables, blob files) over the keys and values written. Garbage collection on, every file
/// old enough for it (age cutoff 1): a fill overwrites nothing, so no file holds garbage and
/// none is copied.
fn fill_write_amplification(dir: &Path, pad_bytes: usize) -> f64 {
    let opts = || opts().blob_gc_age_cutoff(1.0);
    let db = Db::open(dir, opts().memtable_bytes(1 << 20)).unwrap();
    let key = |i: u64| format!("key{:013}", i.wrapping_mul(0x9e37_79b9) % 1_000_003).into_bytes();
    for i in 0..640u64 {
        db.put(key(i), value(i, 16 << 10)).unwrap();
        if pad_bytes > 0 {
            pad(&db, pad_bytes);
        }
    }
    db.flush().unwrap();
    db.compact().unwrap();
    let s = db.stats();
    let written = s.wal_bytes_written
        + s.flush_bytes_written
        + s.compaction_bytes_written
        + s.ingest_bytes_written
        + s.blob_bytes_written;
    drop(db);
    let db = Db::open(dir, opts()).unwrap();
    for i in (0..640u64).step_by(7) {
        assert_eq!(db.get(key(i)).unwrap().unwrap(), value(i, 16 << 10), "after a reopen");
    }
    written as f64 / s.user_bytes_written as f64
}

#[test]
fn a_large_value_reaches_the_disk_once() {
    let dir = tempfile::tempdir().unwrap();
    let amp = fill_write_amplification(dir.path(), 0);
    assert!(amp <= 1.1, "{amp:.3} bytes written per byte of keys and values");
    assert!(files_ending(dir.path(), "blob").is_empty(), "nothing was copied");
    assert!(!kept_segments(dir.path()).is_empty());
    // Mostly small values: the segments are not kept, the large values are copied and
    // counted in `blob_bytes_written`.
    let dir = tempfile::tempdir().unwrap();
    let amp = fill_write_amplification(dir.path(), 24 << 10);
    assert!(amp > 1.3, "{amp:.3}: the copies count");
    assert!(kept_segments(dir.path()).is_empty());
    assert!(!files_ending(dir.path(), "blob").is_empty());
}

/// Half the keys of a fill of 16 KiB values overwritten, in random order: each of the fill's
/// kept segments is then about half garbage. `compact` relocates the live values out of every
/// file holding garbage, so the blob files on disk hold the live values and little more (the
/// segments' framing); background collection alone, once the writes stop, brings the space
/// down to near that too.
#[test]
fn overwriting_half_the_keys_leaves_blob_files_near_the_live_values_once_collected() {
    let on_disk = |manual: bool| {
        let dir = tempfile::tempdir().unwrap();
        // Segments of about 512 KiB (memtables hold the values by reference, charged a
        // sixteenth): some 20 over the fill, so that how many cross the collection's
        // threshold averages out as it does over a large database.
        let db = Db::open(dir.path(), opts().memtable_bytes(32 << 10)).unwrap();
        let (keys, len) = (640u64, 16 << 10);
        let key = |i: u64| format!("key{i:05}").into_bytes();
        let mut rng = Rng(0x5eed);
        let mut order: Vec<u64> = (0..keys).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        for &i in &order {
            db.put(key(i), value(i, len)).unwrap();
        }
        settle(&db);
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        for &i in &order[..keys as usize / 2] {
            db.put(key(i), value(keys + i, len)).unwrap();
        }
        if manual {
            db.compact().unwrap();
        } else {
            settle(&db);
        }
        db.wait_for_file_removals();
        let s = db.stats();
        let payload = keys * len as u64;
        if manual {
            assert_eq!(s.blob_live_bytes, payload, "no old version left: {:?}", s.blob_files);
        }
        let on_disk: u64 = blob_files(dir.path()).iter().map(|p| p.metadata().unwrap().len()).sum();
        assert_eq!(on_disk, s.blob_file_bytes, "the files on disk are the live ones");
        for &i in &order {
            let v = if order[..keys as usize / 2].contains(&i) { keys + i } else { i };
            assert_eq!(db.get(key(i)).unwrap().unwrap(), value(v, len), "key {i}");
        }
        s.blob_file_bytes as f64 / payload as f64
    };
    let compacted = on_disk(true);
    assert!(compacted <= 1.05, "after compact: {compacted:.3} bytes on disk per live byte");
    let background = on_disk(false);
    assert!(background <= 1.3, "background: {background:.3} bytes on disk per live byte");
}

/// Power lost at each call of the kinds a flush makes, while 16 KiB values are written and
/// flushed (the flush keeping their WAL segments): every acknowledged write is there after
/// recovery, exactly, and again after a second open.
#[test]
fn power_loss_around_flushes_keeping_segments_loses_no_acknowledged_write() {
    use bloomkv::fs::{fault::unique_dir, CrashMode, Fault, FaultFs, OpKind};
    use bloomkv::WriteOptions;
    use common::options::OptionsExt;
    let kinds = [
        (OpKind::ReadAll, 1),
        (OpKind::Create, 1),
        (OpKind::Sync, 1),
        (OpKind::SyncDir, 1),
        (OpKind::Remove, 1),
        (OpKind::Truncate, 1),
        (OpKind::Append, 7),
    ];
    let mut rounds = 0;
    for (kind, step) in kinds {
        for nth in (1..).step_by(step) {
            let fs = FaultFs::new();
            let dir = unique_dir("kept-wal");
            let db = Db::open(&dir, opts().fault_fs(&fs)).unwrap();
            fs.inject(Fault::on(kind).nth(nth).power_off());
            let mut acked = BTreeMap::new();
            for i in 0..40u64 {
                let (k, v) = (format!("k{i:02}"), value(i, 16 << 10));
                let mut b = WriteBatch::new();
                b.put(&k, &v);
                if db.write(&b, &WriteOptions::default().sync(true)).is_err() {
                    break;
                }
                acked.insert(k, v);
            }
            let _ = db.flush();
            let fired = fs.faults_fired() > 0;
            drop(db);
            let mode = if nth % 2 == 0 {
                CrashMode::DropUnsynced
            } else {
                CrashMode::TornTails { seed: nth }
            };
            let fs = fs.crash(mode);
            for open in 0..2 {
                let db = Db::open(&dir, opts().fault_fs(&fs)).unwrap();
                for (k, v) in &acked {
                    let got = db.get(k).unwrap();
                    assert_eq!(got.as_deref(), Some(&v[..]), "{kind:?} #{nth}, open {open}: {k}");
                }
                db.close().unwrap();
            }
            rounds += 1;
            if !fired {
                break;
            }
        }
    }
    assert!(rounds > 40, "{rounds} crash points");
}

/// A transaction open across flushes that keep their segments: the flushed memtables stay in
/// the history its commit checks, its snapshot reads the values in the kept segments, and a
/// write to what it read, flushed meanwhile, is a conflict.
#[test]
fn a_transactions_memtable_history_spans_kept_segments() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts().memtable_history_bytes(1 << 20)).unwrap();
    db.put("read", value(1, 20_000)).unwrap();
    db.put("other", value(2, 20_000)).unwrap();
    db.flush().unwrap();
    let mut reader = db.transaction();
    let mut bystander = db.transaction();
    assert_eq!(reader.get("read").unwrap().unwrap(), value(1, 20_000));
    assert_eq!(bystander.get("other").unwrap().unwrap(), value(2, 20_000));
    db.put("read", value(3, 20_000)).unwrap();
    db.flush().unwrap();
    assert_eq!(kept_segments(dir.path()).len(), 2);
    assert!(db.stats().memtable_history_bytes > 0, "the flushed memtable stays for the commits");
    // Its snapshot reads the first kept segment's value, not the newer one.
    assert_eq!(reader.get("read").unwrap().unwrap(), value(1, 20_000));
    reader.put("out", value(4, 20_000)).unwrap();
    assert!(matches!(reader.commit(), Err(Error::Conflict)));
    bystander.put("mine", value(5, 20_000)).unwrap();
    bystander.commit().unwrap();
    db.flush().unwrap();
    db.compact().unwrap();
    assert_eq!(db.get("read").unwrap().unwrap(), value(3, 20_000));
    assert_eq!(db.get("mine").unwrap().unwrap(), value(5, 20_000));
    assert_eq!(db.get("out").unwrap(), None);
    assert_eq!(db.stats().memtable_history_bytes, 0, "released with the transactions");
    drop(db);
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(db.get("mine").unwrap().unwrap(), value(5, 20_000));
    assert_eq!(db.get("read").unwrap().unwrap(), value(3, 20_000));
}

/// A named keyspace's blob threshold and collection settings are recorded: after a reopen
/// that does not open the keyspace, `keyspace_options` gives them back and the writes the
/// WAL replays go to blob files; an open giving other settings records those.
#[test]
fn a_keyspace_keeps_its_blob_settings_across_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let base = || Options::new().memtable_bytes(1 << 20);
    let ks_opts = KeyspaceOptions::new()
        .blob_threshold(Some(THRESHOLD))
        .blob_gc_age_cutoff(0.5)
        .blob_gc_force_threshold(0.3);
    let db = Db::open(dir.path(), base()).unwrap();
    let images = db.keyspace("images", ks_opts.clone()).unwrap();
    for i in 0..20 {
        images.put(format!("k{i:02}"), value(i, 5000)).unwrap();
    }
    drop(images);
    // Closed with the values in the WAL alone: the open's recovery writes their table.
    db.close().unwrap();
    drop(db);
    let db = Db::open(dir.path(), base()).unwrap();
    let recorded = db.keyspace_options("images").unwrap();
    assert_eq!(recorded.blob_threshold, Some(THRESHOLD));
    assert_eq!((recorded.blob_gc_age_cutoff, recorded.blob_gc_force_threshold), (0.5, 0.3));
    db.compact().unwrap();
    assert_eq!(db.stats().blob_live_bytes, 20 * 5000, "{:?}", db.stats().blob_files);
    let images = db.keyspace("images", db.keyspace_options("images").unwrap()).unwrap();
    assert_eq!(images.get("k07").unwrap().unwrap(), value(7, 5000));
    drop(images);
    db.close().unwrap();
    drop(db);
    // Other settings given at an open: recorded, as a range filter's are.
    let db = Db::open(dir.path(), base()).unwrap();
    db.keyspace("images", ks_opts.blob_threshold(Some(8000)).blob_gc_age_cutoff(0.25)).unwrap();
    db.close().unwrap();
    drop(db);
    let db = Db::open(dir.path(), base()).unwrap();
    let recorded = db.keyspace_options("images").unwrap();
    assert_eq!(recorded.blob_threshold, Some(8000));
    assert_eq!((recorded.blob_gc_age_cutoff, recorded.blob_gc_force_threshold), (0.25, 0.3));
    let images = db.keyspace("images", KeyspaceOptions::new()).unwrap();
    assert_eq!(images.get("k07").unwrap().unwrap(), value(7, 5000));
    drop(images);
    db.close().unwrap();
    drop(db);
    let db = Db::open(dir.path(), base()).unwrap();
    assert_eq!(db.keyspace_options("images").unwrap(), KeyspaceOptions::new());
}

/// A value at the threshold goes into the memtable as a reference to where the WAL logged
/// it, charged a sixteenth of its bytes: a megabyte of 16 KiB values fills a 256 KiB
/// memtable a quarter, so no switch (and no flush) comes while it is written, and every read
/// path serves the values from the segment, before and after the flush keeps it and after
/// a reopen.
#[test]
fn large_values_are_held_by_reference_and_charged_a_share_of_the_memtable() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Db::open(dir.path(), opts()).unwrap();
    let key = |i: u64| format!("key{i:03}").into_bytes();
    let mut model = BTreeMap::new();
    for i in 0..64 {
        db.put(key(i), value(i, 16 << 10)).unwrap();
        model.insert(key(i), value(i, 16 << 10));
        // Small values count whole, as before.
        db.put(format!("small{i:03}"), value(i, 20)).unwrap();
        model.insert(format!("small{i:03}").into_bytes(), value(i, 20));
    }
    let s = db.stats();
    assert_eq!(s.flushes, 0, "no memtable switch for a megabyte of large values");
    assert!(s.memtable_bytes < 64 << 10, "references, not values: {} bytes", s.memtable_bytes);
    let probe: Vec<Vec<u8>> = model.keys().cloned().collect();
    check(&db, &model, &probe);
    assert_eq!(db.get_range(key(3), 100, 50).unwrap().unwrap(), value(3, 16 << 10)[100..150]);
    db.flush().unwrap();
    assert_eq!(kept_segments(dir.path()).len(), 1, "the segment is the values' blob file");
    check(&db, &model, &probe);
    db.close().unwrap();
    db = Db::open(dir.path(), opts()).unwrap();
    check(&db, &model, &probe);
    // Written again and not flushed: recovery replays them from the segment.
    for i in 0..8 {
        db.put(key(i), value(100 + i, 16 << 10)).unwrap();
        model.insert(key(i), value(100 + i, 16 << 10));
    }
    drop(db);
    let db = Db::open(dir.path(), opts()).unwrap();
    check(&db, &model, &probe);
    drop(db);
    let report = bloomkv::check::database(Arc::new(bloomkv::fs::StdFs), dir.path());
    assert_eq!(report.status(), bloomkv::check::Status::Ok, "{:?}", report.problems);
}

/// A segment whose values are not kept (mostly small values around them) has its large
/// values copied out at the flush; a snapshot and an iterator taken before still read them
/// from the segment, which goes only once they are dropped.
#[test]
fn a_snapshot_reads_values_held_by_reference_after_their_segment_is_flushed_and_not_kept() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let padding = db.keyspace("padding", KeyspaceOptions::new()).unwrap();
    for i in 0..4u64 {
        db.put(format!("large{i}"), value(i, 5000)).unwrap();
        for j in 0..40u64 {
            padding.put(format!("{i}-{j}"), value(j, 900)).unwrap();
        }
    }
    let snapshot = db.snapshot();
    let mut iter = db.range(..);
    db.put("large0", value(99, 5000)).unwrap();
    db.flush().unwrap();
    assert!(kept_segments(dir.path()).is_empty(), "mostly small values: copied, not kept");
    db.wait_for_file_removals();
    let logs = files_ending(dir.path(), "log");
    assert!(logs.len() >= 2, "the flushed segment stays while read: {logs:?}");
    for i in 0..4u64 {
        assert_eq!(snapshot.get(format!("large{i}")).unwrap().unwrap(), value(i, 5000));
    }
    let (k, v) = iter.next().unwrap().unwrap();
    assert_eq!((k, v.to_vec()), (b"large0".to_vec(), value(0, 5000)));
    assert_eq!(db.get("large0").unwrap().unwrap(), value(99, 5000));
    drop((snapshot, iter));
    db.wait_for_file_removals();
    assert_eq!(files_ending(dir.path(), "log").len(), 1, "only the live segment is left");
    for i in 1..4u64 {
        assert_eq!(db.get(format!("large{i}")).unwrap().unwrap(), value(i, 5000));
    }
}

/// Power lost at every file-system call of maintenance over blob files — a `compact` that
/// collects garbage (relocating the live values of files that lost some), dropping a keyspace
/// that separates values, and a checkpoint — loses nothing acknowledged: after recovery (twice)
/// every value is there exactly, an acknowledged drop stays done (and one in flight is done or
/// not, never half), and a checkpoint is whole or absent.
#[test]
fn power_loss_during_blob_gc_a_drop_and_a_checkpoint_loses_nothing() {
    use bloomkv::fs::{fault::unique_dir, CrashMode, Fault, FaultFs, FileSystem, OpKind};
    use common::options::OptionsExt;
    let ks = || KeyspaceOptions::new().blob_threshold(Some(THRESHOLD));
    let want = |i: u64| if i < 10 { value(100 + i, 3000) } else { value(i, 3000) };
    // A database whose "images" keyspace has blob files holding garbage (half its values
    // overwritten), beside a "scratch" keyspace of blob values; all of it flushed.
    let setup = || {
        let fs = FaultFs::new();
        let dir = unique_dir("blob-gc");
        let db = Db::open(&dir, opts().fault_fs(&fs)).unwrap();
        let images = db.keyspace("images", ks()).unwrap();
        let scratch = db.keyspace("scratch", ks()).unwrap();
        for i in 0..20u64 {
            images.put(format!("k{i:02}"), value(i, 3000)).unwrap();
            scratch.put(format!("s{i:02}"), value(200 + i, 3000)).unwrap();
        }
        db.flush().unwrap();
        for i in 0..10u64 {
            images.put(format!("k{i:02}"), want(i)).unwrap();
        }
        db.flush().unwrap();
        (fs, dir, db)
    };
    let maintain = |db: &Db, copy: &Path| -> [bool; 3] {
        let compacted = db.compact().is_ok();
        let dropped = compacted && db.drop_keyspace("scratch").is_ok();
        let copied = dropped && db.checkpoint(copy).is_ok();
        [compacted, dropped, copied]
    };
    let counts: Vec<u64> = {
        let (fs, _dir, db) = setup();
        let before: Vec<u64> = OpKind::ALL.iter().map(|&k| fs.calls(k)).collect();
        assert_eq!(maintain(&db, &unique_dir("blob-gc-copy")), [true; 3]);
        OpKind::ALL.iter().zip(before).map(|(&k, b)| fs.calls(k) - b).collect()
    };
    let check = |db: &Db, what: &str| {
        let images = db.keyspace("images", ks()).unwrap();
        for i in 0..20u64 {
            let got = images.get(format!("k{i:02}")).unwrap();
            assert_eq!(got.as_deref(), Some(&want(i)[..]), "{what}: k{i:02}");
        }
    };
    let mut runs = 0;
    let mut failed = [0u32; 4];
    for (&kind, &n) in OpKind::ALL.iter().zip(&counts) {
        // Every call of the rarer kinds; about 25 spread over the many appends and reads.
        let step = (n / 25).max(1) as usize;
        for nth in (1..=n).step_by(step) {
            let (fs, dir, db) = setup();
            let copy = unique_dir("blob-gc-copy");
            fs.inject(Fault::on(kind).nth(nth).power_off());
            let [compacted, dropped, copied] = maintain(&db, &copy);
            failed[usize::from(compacted) + usize::from(dropped) + usize::from(copied)] += 1;
            let mode = if nth % 2 == 0 {
                CrashMode::DropUnsynced
            } else {
                CrashMode::TornTails { seed: nth }
            };
            let fs = fs.crash(mode);
            drop(db);
            let what = format!("{kind:?} #{nth}");
            for open in 0..2 {
                let db = Db::open(&dir, opts().fault_fs(&fs)).unwrap();
                check(&db, &format!("{what}, open {open}"));
                if db.keyspace_names().iter().any(|k| k == "scratch") {
                    assert!(!dropped, "{what}: an acknowledged drop came back");
                    let scratch = db.keyspace("scratch", ks()).unwrap();
                    for i in 0..20u64 {
                        let got = scratch.get(format!("s{i:02}")).unwrap();
                        assert_eq!(got.as_deref(), Some(&value(200 + i, 3000)[..]), "{what}");
                    }
                }
                db.close().unwrap();
            }
            if FileSystem::exists(&fs, &copy) {
                let db = Db::open(&copy, opts().fault_fs(&fs)).unwrap();
                check(&db, &format!("{what}, the checkpoint"));
            } else {
                assert!(!copied, "{what}: the acknowledged checkpoint is gone");
            }
            runs += 1;
        }
    }
    assert!(runs > 100, "{runs} crash points");
    // Cut in the compaction, in the drop and in the checkpoint (by how many succeeded).
    assert!(failed[..3].iter().all(|&n| n > 0), "cuts by stage: {failed:?}");
}
