//! Fault injection and simulated power loss on [`FaultFs`], the in-memory file system.
//!
//! - `faultfs_*`: the file system itself honours its durability model and faults.
//! - `power_loss_*`: random workloads (puts, deletes, batches, with and without `sync`, with
//!   memtables small enough that flushes and compactions run all the time) cut off by a power
//!   loss at a random moment — between writes, or at the n-th call of some file operation,
//!   inside a write, a flush, a compaction or a manifest switch. After reopening, the state
//!   must be exactly the model after some prefix of the writes, and that prefix must include
//!   every write acknowledged with `sync: true` and everything before a successful `flush()`.
//!   In `power_loss_recovers_a_prefix_holding_every_synced_write` a quarter of the keys live
//!   in a second keyspace, so batches span keyspaces and must come back whole in both.
//!   Three crash/recover rounds per seed, so recovered databases are recovered again.
//! - `background_error_*`, `wal_error_*`: an injected I/O error in a flush, a compaction, the
//!   manifest or the WAL is reported to the caller, stops writes, loses nothing acknowledged,
//!   and the database reopens cleanly.
//! - `read_errors_*`: failed reads are errors from `get`, `multi_get` (its blocks read on its
//!   read threads) and scans, never panics or wrong data.
//!
//! `BLOOMKV_FAULT_SEEDS` sets the number of seeds per randomized test (default 60).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bloomkv::fs::{fault::unique_dir, CrashMode, Fault, FaultFs, FileSystem, OpKind};
use bloomkv::{
    CompactionStyle, Db, Error, Keyspace, KeyspaceOptions, Options, Readable, WriteBatch,
    WriteOptions,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

mod common;

use common::files::{is_table, is_wal, log_records};
use common::keys::key4;
use common::model::{scan, try_model, Model};
use common::options::OptionsExt;

fn seeds() -> u64 {
    common::env::u64_or("BLOOMKV_FAULT_SEEDS", 60)
}

fn options(fs: &FaultFs) -> Options {
    Options::default()
        .memtable_bytes(2 << 10)
        .block_bytes(256)
        .target_table_bytes(4 << 10)
        .level_base_bytes(8 << 10)
        .l0_compaction_trigger(2)
        .l0_slowdown_trigger(3)
        .l0_stop_trigger(5)
        .fault_fs(fs)
}

/// Values name their key and the op that wrote them, so a value from the wrong write or
/// for the wrong key cannot pass for the right one.
fn value(k: u16, op: usize) -> Vec<u8> {
    let mut v = format!("k{k}-op{op}-").into_bytes();
    v.resize(v.len() + (op * 13 + k as usize) % 90, b'.');
    v
}

/// One write, one batch: a range delete of keys `a..b` if any, then (key, Some(value) =
/// put / None = delete) pairs.
#[derive(Clone, Debug)]
struct Write {
    range: Option<(u16, u16)>,
    ops: Vec<(u16, Option<Vec<u8>>)>,
}

impl Write {
    fn one(k: u16, v: Option<Vec<u8>>) -> Write {
        Write { range: None, ops: vec![(k, v)] }
    }

    /// The keys the write may change.
    fn touched(&self) -> impl Iterator<Item = u16> + '_ {
        self.range.map_or(0..0, |(a, b)| a..b).chain(self.ops.iter().map(|(k, _)| *k))
    }
}

/// Keys from here up belong to the "side" keyspace where a test writes through
/// [`to_batch_in`] (elsewhere they are just more keys of the default one).
const SIDE: u16 = 1000;

fn random_write(rng: &mut StdRng, op: usize) -> Write {
    let n = if rng.gen_bool(0.15) { rng.gen_range(2..7) } else { 1 };
    // A quarter of the keys (and of the range deletes) are the side keyspace's, so a batch
    // of several ops often spans both keyspaces.
    let space = |rng: &mut StdRng| if rng.gen_bool(0.25) { SIDE } else { 0 };
    let range = rng.gen_bool(0.04).then(|| {
        let base = space(rng);
        let a = rng.gen_range(0..250u16);
        (base + a, base + (a + rng.gen_range(1..40)).min(250))
    });
    let ops = (0..n)
        .map(|_| {
            let k = space(rng) + rng.gen_range(0..250u16);
            (k, if rng.gen_bool(0.8) { Some(value(k, op)) } else { None })
        })
        .collect();
    Write { range, ops }
}

/// The side keyspace, created on first use (its own compression, so its flushes and
/// compactions build tables differently from the default keyspace's).
fn side(db: &Db) -> Keyspace {
    let opts = KeyspaceOptions::new().compression(bloomkv::Compression::Zstd { level: 1 });
    db.keyspace("side", opts).unwrap()
}

/// `to_batch`, with the side keyspace's keys written to it: one batch across keyspaces.
fn to_batch_in(w: &Write, side: &Keyspace) -> WriteBatch {
    let mut b = WriteBatch::new();
    if let Some((a, z)) = w.range {
        match a >= SIDE {
            true => b.delete_range_in(side, key4(a)..key4(z)),
            false => b.delete_range(key4(a)..key4(z)),
        }
    }
    for (k, v) in &w.ops {
        match (v, *k >= SIDE) {
            (Some(v), true) => b.put_in(side, key4(*k), v),
            (Some(v), false) => b.put(key4(*k), v),
            (None, true) => b.delete_in(side, key4(*k)),
            (None, false) => b.delete(key4(*k)),
        }
    }
    b
}

/// Both keyspaces' contents as one model, after checking each holds only its own keys.
fn scan_both(db: &Db, side: &Keyspace) -> bloomkv::Result<Model> {
    let mut all = try_model(db.range(..))?;
    let own = try_model(side.range(..))?;
    let is_side = |k: &[u8]| k >= key4(SIDE).as_slice();
    assert!(all.keys().all(|k| !is_side(k)), "a side keyspace key in the default keyspace");
    assert!(own.keys().all(|k| is_side(k)), "a default keyspace key in the side keyspace");
    all.extend(own);
    Ok(all)
}

fn to_batch(w: &Write) -> WriteBatch {
    let mut b = WriteBatch::new();
    if let Some((a, z)) = w.range {
        b.delete_range(key4(a)..key4(z));
    }
    for (k, v) in &w.ops {
        match v {
            Some(v) => b.put(key4(*k), v),
            None => b.delete(key4(*k)),
        }
    }
    b
}

fn apply(model: &mut Model, w: &Write) {
    if let Some((a, z)) = w.range {
        for k in a..z {
            model.remove(&key4(k));
        }
    }
    for (k, v) in &w.ops {
        match v {
            Some(v) => model.insert(key4(*k), v.clone()),
            None => model.remove(&key4(*k)),
        };
    }
}

/// Reopens `dir` with no faults left and asserts it holds every acknowledged write
/// (`model`), plus at most the one write that failed (it may have reached the WAL whole).
fn reopen_as_acknowledged(
    fs: &FaultFs,
    dir: &Path,
    model: &Model,
    failed: Option<&Write>,
    what: &str,
) -> Db {
    let db = Db::open(dir, options(fs)).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    let got = scan(&db);
    let mut with_failed = model.clone();
    if let Some(w) = failed {
        apply(&mut with_failed, w);
    }
    assert!(got == *model || got == with_failed, "{what}: acknowledged data lost");
    db
}

/// The `p` in `lo..=hi` such that `base` followed by the first `p` writes equals `got`, if
/// any (the smallest). Linear: keeps a count of keys on which model and `got` disagree.
fn matching_prefix(
    base: &Model,
    writes: &[Write],
    got: &Model,
    lo: usize,
    hi: usize,
) -> Option<usize> {
    let mut model = base.clone();
    let differs = |m: &Model, k: &[u8]| m.get(k) != got.get(k);
    let mut mismatches =
        model.keys().chain(got.keys()).collect::<std::collections::BTreeSet<_>>().len();
    mismatches -= model.iter().filter(|(k, v)| got.get(*k) == Some(*v)).count();
    for p in 0..=hi.min(writes.len()) {
        if p >= lo && mismatches == 0 {
            return Some(p);
        }
        if p == writes.len() {
            break;
        }
        // Track agreement on the keys this write touches.
        let touched: std::collections::BTreeSet<Vec<u8>> = writes[p].touched().map(key4).collect();
        let before: usize = touched.iter().filter(|k| differs(&model, k)).count();
        apply(&mut model, &writes[p]);
        let after: usize = touched.iter().filter(|k| differs(&model, k)).count();
        mismatches = mismatches + after - before;
    }
    None
}

// ---------------------------------------------------------------------------------------
// The file system itself.

#[test]
fn faultfs_power_loss_keeps_only_synced_bytes_and_synced_entries() {
    let fs = FaultFs::new();
    let dir = Path::new("/d");
    fs.create_dir_all(dir).unwrap();
    let a = dir.join("a");
    let mut f = fs.create(&a).unwrap();
    f.append(b"hello ").unwrap();
    f.sync().unwrap();
    f.append(b"world").unwrap();
    // Created and synced, but the directory was not: gone after a crash.
    let after = fs.crash(CrashMode::DropUnsynced);
    assert!(!after.exists(&a));
    assert!(f.append(b"x").is_err(), "the crashed instance is dead");

    let fs = after;
    let mut f = fs.create(&a).unwrap();
    f.append(b"hello ").unwrap();
    f.sync().unwrap();
    fs.sync_dir(dir).unwrap();
    f.append(b"world").unwrap();
    // A rename and a remove that are not dir-synced revert.
    let b = dir.join("b");
    let mut g = fs.create(&b).unwrap();
    g.append(b"bee").unwrap();
    g.sync().unwrap();
    fs.sync_dir(dir).unwrap();
    fs.rename(&a, &dir.join("c")).unwrap();
    fs.remove(&b).unwrap();
    assert_eq!(fs.list(dir).unwrap(), vec!["c".to_string()]);
    let after = fs.crash(CrashMode::DropUnsynced);
    let mut names = after.list(dir).unwrap();
    names.sort();
    assert_eq!(names, vec!["a", "b"]);
    assert_eq!(after.read_all(&a).unwrap(), b"hello ");
    assert_eq!(after.read_all(&b).unwrap(), b"bee");

    // Torn tails keep the synced bytes plus some prefix of the rest.
    let mut saw_longer = false;
    for seed in 0..20 {
        let fs = FaultFs::new();
        fs.create_dir_all(dir).unwrap();
        let mut f = fs.create(&a).unwrap();
        f.append(b"synced").unwrap();
        f.sync().unwrap();
        fs.sync_dir(dir).unwrap();
        f.append(b"-unsynced-tail").unwrap();
        let got = fs.crash(CrashMode::TornTails { seed }).read_all(&a).unwrap();
        assert!(b"synced-unsynced-tail".starts_with(&got) && got.len() >= 6, "{got:?}");
        saw_longer |= got.len() > 6;
    }
    assert!(saw_longer);
}

/// A directory rename is an entry of the directory that holds the new name: undone by a power
/// loss until that directory is synced, when the renamed directory comes back under its old
/// name with its durable entries (and an empty directory it replaced comes back too).
#[test]
fn faultfs_directory_renames_last_once_their_parent_is_synced() {
    let fs = FaultFs::new();
    let (tmp, to) = (Path::new("/p/.tmp"), Path::new("/p/to"));
    fs.create_dir_all(tmp).unwrap();
    fs.create_dir_all(to).unwrap();
    let mut f = fs.create(&tmp.join("a")).unwrap();
    f.append(b"data").unwrap();
    f.sync().unwrap();
    fs.sync_dir(tmp).unwrap();
    // Only an empty directory can be replaced, and a directory cannot go inside itself.
    fs.create(&to.join("x")).unwrap();
    assert!(fs.rename_dir(tmp, to).is_err());
    fs.remove(&to.join("x")).unwrap();
    assert!(fs.rename_dir(tmp, &tmp.join("in")).is_err());
    assert!(fs.rename_dir(Path::new("/p/none"), Path::new("/p/y")).is_err());
    let mut names = fs.list(Path::new("/p")).unwrap();
    names.sort();
    assert_eq!(names, [".tmp", "to"], "listings hold subdirectories");

    fs.rename_dir(tmp, to).unwrap();
    assert_eq!(fs.read_all(&to.join("a")).unwrap(), b"data");
    assert!(!fs.exists(tmp));
    // An entry made durable through the new name belongs to the same directory.
    let mut g = fs.create(&to.join("b")).unwrap();
    g.sync().unwrap();
    fs.sync_dir(to).unwrap();
    let lost = fs.crash(CrashMode::DropUnsynced);
    let mut names = lost.list(tmp).unwrap();
    names.sort();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(lost.list(to).unwrap(), Vec::<String>::new(), "the replaced directory is back");

    // Synced: it stays.
    lost.rename_dir(tmp, to).unwrap();
    lost.sync_dir(Path::new("/p")).unwrap();
    let kept = lost.crash(CrashMode::DropUnsynced);
    assert!(!kept.exists(tmp));
    assert_eq!(kept.read_all(&to.join("a")).unwrap(), b"data");

    // Removing: only an empty directory, at once.
    assert!(kept.remove_dir(to).is_err());
    kept.remove(&to.join("a")).unwrap();
    kept.remove(&to.join("b")).unwrap();
    kept.remove_dir(to).unwrap();
    assert!(!kept.exists(to));
    assert!(!kept.crash(CrashMode::DropUnsynced).exists(to));

    // Names resolve by component; only existing ones.
    let fs = FaultFs::new();
    fs.create_dir_all(Path::new("/a/b")).unwrap();
    assert_eq!(fs.canonicalize(Path::new("/a/./b/../b")).unwrap(), Path::new("/a/b"));
    assert_eq!(fs.canonicalize(Path::new("/a/..")).unwrap(), Path::new("/"));
    assert!(fs.canonicalize(Path::new("/a/c")).is_err());
    fs.inject(Fault::on(OpKind::Canonicalize));
    fs.inject(Fault::on(OpKind::RenameDir));
    fs.inject(Fault::on(OpKind::RemoveDir));
    assert!(fs.canonicalize(Path::new("/a")).is_err());
    assert!(fs.rename_dir(Path::new("/a/b"), Path::new("/a/c")).is_err());
    assert!(fs.remove_dir(Path::new("/a/b")).is_err());
    assert_eq!(fs.faults_fired(), 3);
}

#[test]
fn faultfs_faults_fire_as_configured() {
    let fs = FaultFs::new();
    let dir = Path::new("/d");
    fs.create_dir_all(dir).unwrap();
    fs.inject(Fault::on(OpKind::Create).nth(2).matching(|p| p.ends_with("x")));
    fs.create(&dir.join("y")).unwrap();
    fs.create(&dir.join("x")).unwrap();
    let e = fs.create(&dir.join("x")).err().expect("second create of x fails");
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    fs.create(&dir.join("x")).unwrap();
    assert_eq!(fs.faults_fired(), 1);

    // A short write leaves a prefix.
    let mut f = fs.create(&dir.join("s")).unwrap();
    fs.inject(Fault::on(OpKind::Append).nth(1).short_write(500));
    assert!(f.append(b"0123456789").is_err());
    assert_eq!(fs.contents(&dir.join("s")).unwrap(), b"01234");

    // Locks exclude until released.
    let l = fs.lock(&dir.join("LOCK")).unwrap();
    assert!(matches!(fs.lock(&dir.join("LOCK")), Err(Error::Locked { .. })));
    drop(l);
    fs.lock(&dir.join("LOCK")).unwrap();

    // Power off: this and every later call fail.
    fs.inject(Fault::on(OpKind::SyncDir).power_off());
    assert!(fs.sync_dir(dir).is_err());
    assert!(!fs.is_powered());
    assert!(fs.create(&dir.join("z")).is_err());
    assert!(f.sync().is_err());
}

// ---------------------------------------------------------------------------------------
// The engine on FaultFs.

#[test]
fn db_runs_on_faultfs_across_close_and_reopen() {
    let fs = FaultFs::new();
    let dir = unique_dir("reopen");
    let mut rng = StdRng::seed_from_u64(7);
    let mut model = Model::new();
    for round in 0..4 {
        let db = Db::open(&dir, options(&fs)).unwrap();
        assert_eq!(scan(&db), model, "round {round}");
        for op in 0..600 {
            let w = random_write(&mut rng, round * 1000 + op);
            db.write(&to_batch(&w), &WriteOptions::default()).unwrap();
            apply(&mut model, &w);
        }
        for (k, v) in model.iter().take(40) {
            assert_eq!(db.get(k).unwrap().as_deref(), Some(&v[..]));
        }
        assert!(db.stats().flushes > 0);
        if round == 2 {
            db.compact().unwrap();
        }
        // Dropping without close: a process exit. Unsynced writes reached the "OS".
        drop(db);
    }
    let db = Db::open(&dir, options(&fs)).unwrap();
    assert_eq!(scan(&db), model);
    assert!(db.stats().wal_bytes < 64 << 10);
}

/// How one round of a power-loss test ends.
#[derive(Debug, Clone, Copy)]
enum CrashPoint {
    /// The test cuts the power after this many writes.
    AfterWrites(usize),
    /// The power goes at the n-th call of this kind.
    AtCall(OpKind, u64),
}

fn random_crash_point(rng: &mut StdRng, n: usize) -> CrashPoint {
    let (kind, max) = match rng.gen_range(0..8) {
        0 => return CrashPoint::AfterWrites(rng.gen_range(0..=n)),
        1 => (OpKind::Append, 4000),
        2 => (OpKind::Sync, 300),
        3 => (OpKind::SyncDir, 80),
        4 => (OpKind::Create, 80),
        5 => (OpKind::Rename, 4),
        6 => (OpKind::Remove, 60),
        _ => (OpKind::Flush, 1500),
    };
    CrashPoint::AtCall(kind, rng.gen_range(1..=max))
}

/// Writes until `n` writes or an error; returns (writes attempted, writes that must be
/// durable).
fn run_until_crash(
    db: &Db,
    side: &Keyspace,
    rng: &mut StdRng,
    writes: &mut Vec<Write>,
    n: usize,
    first_op: usize,
    stop_after: Option<usize>,
) -> (usize, usize) {
    let mut must = 0;
    for i in 0..n {
        if stop_after == Some(i) {
            return (i, must);
        }
        if rng.gen_bool(0.02) {
            if db.flush().is_ok() {
                must = i;
            } else {
                return (i, must);
            }
        }
        if rng.gen_bool(0.004) && db.compact().is_err() {
            return (i, must);
        }
        let w = random_write(rng, first_op + i);
        let sync = rng.gen_bool(0.2);
        writes.push(w);
        match db.write(&to_batch_in(writes.last().unwrap(), side), &WriteOptions::new().sync(sync))
        {
            Ok(()) if sync => must = i + 1,
            Ok(()) => {}
            Err(_) => return (i + 1, must),
        }
    }
    (n, must)
}

#[test]
fn power_loss_recovers_a_prefix_holding_every_synced_write() {
    power_loss(CompactionStyle::Leveled, 0..seeds());
}

/// The same through each other style that merges (FIFO drops data by design, and without a
/// bound merges nothing): both keyspaces in it, a quarter of the seeds each.
#[test]
fn power_loss_in_each_compaction_style() {
    let styles = [
        CompactionStyle::Tiered,
        CompactionStyle::LazyLeveling,
        CompactionStyle::Fluid { k: 2, z: 1 },
    ];
    for (i, style) in styles.into_iter().enumerate() {
        let from = 10_000 * (i as u64 + 1);
        power_loss(style, from..from + seeds().div_ceil(4));
    }
}

fn power_loss(style: CompactionStyle, seeds: std::ops::Range<u64>) {
    let mut faults = 0;
    let mut rounds = 0;
    let options = |fs: &FaultFs| options(fs).compaction_style(style);
    let side = |db: &Db| {
        let opts = KeyspaceOptions::new().compression(bloomkv::Compression::Zstd { level: 1 });
        db.keyspace("side", opts.compaction_style(style)).unwrap()
    };
    for seed in seeds {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut fs = FaultFs::new();
        let dir = unique_dir("power");
        let mut first_op = 0;
        for round in 0..3 {
            let db = Db::open(&dir, options(&fs))
                .unwrap_or_else(|e| panic!("seed {seed} round {round}: reopen failed: {e}"));
            // Before any fault is armed: created (durably) in the first round, found after.
            let side = side(&db);
            // The state recovered by the previous round, the base of this one.
            let base = scan_both(&db, &side).unwrap();
            let n = rng.gen_range(50..700);
            let point = random_crash_point(&mut rng, n);
            let stop_after = match point {
                CrashPoint::AfterWrites(k) => Some(k),
                CrashPoint::AtCall(kind, nth) => {
                    fs.inject(Fault::on(kind).nth(nth).power_off());
                    None
                }
            };
            let mut writes = Vec::new();
            let (attempted, must) =
                run_until_crash(&db, &side, &mut rng, &mut writes, n, first_op, stop_after);
            let mode = if rng.gen_bool(0.5) {
                CrashMode::DropUnsynced
            } else {
                CrashMode::TornTails { seed: rng.gen() }
            };
            faults += u64::from(!fs.is_powered());
            let new_fs = fs.crash(mode);
            drop(side);
            drop(db);
            fs = new_fs;
            rounds += 1;

            let db = Db::open(&dir, options(&fs)).unwrap_or_else(|e| {
                panic!("seed {seed} round {round} {point:?}: open failed: {e}")
            });
            let side = db.existing_keyspace("side").expect("created durably before any fault");
            let after = scan_both(&db, &side).unwrap();
            let p = matching_prefix(&base, &writes, &after, must, attempted).unwrap_or_else(|| {
                panic!(
                    "seed {seed} round {round} {point:?} {mode:?}: recovered state is not a \
                     prefix of {attempted} writes holding the first {must}"
                )
            });
            let mut model = base;
            for w in &writes[..p] {
                apply(&mut model, w);
            }
            assert_eq!(after, model);
            for (k, v) in model.iter().step_by(17) {
                let got = if k >= &key4(SIDE) { side.get(k) } else { db.get(k) };
                assert_eq!(got.unwrap().as_deref(), Some(&v[..]), "seed {seed}");
            }
            first_op += n + 1;
            drop(db);
        }
    }
    eprintln!(
        "power loss ({style:?}): {rounds} crash/recover rounds, {faults} at an injected call"
    );
    assert!(faults > 0);
}

/// Faults in background work: flush and compaction output, manifest, directory syncs,
/// reads of tables being compacted.
fn background_fault(rng: &mut StdRng) -> Fault {
    let manifest = |p: &Path| p.to_string_lossy().contains("MANIFEST");
    match rng.gen_range(0..8) {
        0 => Fault::on(OpKind::Create).matching(is_table).nth(rng.gen_range(1..10)),
        1 => Fault::on(OpKind::Append)
            .matching(is_table)
            .nth(rng.gen_range(1..200))
            .short_write(rng.gen_range(0..1000)),
        2 => Fault::on(OpKind::Sync).matching(is_table).nth(rng.gen_range(1..10)),
        3 => Fault::on(OpKind::Append)
            .matching(manifest)
            .nth(rng.gen_range(1..20))
            .short_write(rng.gen_range(0..1000)),
        4 => Fault::on(OpKind::Sync).matching(manifest).nth(rng.gen_range(1..10)),
        5 => Fault::on(OpKind::SyncDir).nth(rng.gen_range(1..20)),
        6 => Fault::on(OpKind::Open).matching(is_table).nth(rng.gen_range(1..10)),
        _ => Fault::on(OpKind::Read).matching(is_table).nth(rng.gen_range(1..300)),
    }
}

fn assert_stopped(db: &Db, what: &str) {
    let e = db.put(b"after", b"error").expect_err(what);
    assert!(matches!(e, Error::Background(_)), "{what}: later write gave {e:?}");
    let e = db.flush().expect_err(what);
    assert!(matches!(e, Error::Background(_)), "{what}: flush gave {e:?}");
}

#[test]
fn background_errors_stop_writes_and_lose_nothing_acknowledged() {
    let mut fired = 0;
    for seed in 0..seeds() {
        let mut rng = StdRng::seed_from_u64(1000 + seed);
        let fs = FaultFs::new();
        let dir = unique_dir("bg");
        let db = Db::open(&dir, options(&fs)).unwrap();
        let fault = background_fault(&mut rng);
        let what = format!("seed {seed} {fault:?}");
        fs.inject(fault);
        let mut model = Model::new();
        let mut failed: Option<Write> = None;
        for op in 0..800 {
            let w = random_write(&mut rng, op);
            let r = if rng.gen_bool(0.01) {
                db.flush().map(|()| false)
            } else {
                db.write(&to_batch(&w), &WriteOptions::new().sync(rng.gen_bool(0.1))).map(|()| true)
            };
            match r {
                Ok(true) => apply(&mut model, &w),
                Ok(false) => {}
                Err(e) => {
                    assert!(matches!(e, Error::Background(_) | Error::Io { .. }), "{what}: {e:?}");
                    failed = Some(w);
                    break;
                }
            }
        }
        if fs.faults_fired() > 0 {
            fired += 1;
            if failed.is_none() {
                // The fault hit after the last write (or in a failed removal, which only
                // leaves an orphan): flushing reports it unless it was harmless.
                let _ = db.flush();
            }
        }
        if failed.is_some() {
            assert_stopped(&db, &what);
        }
        fs.clear_faults();
        if seed % 2 == 1 && failed.is_some() {
            // Resumed instead of reopened: it holds every acknowledged write and takes more.
            resume_and_write_on(&db, &mut rng, &mut model, &what);
        }
        drop(db);
        let db = reopen_as_acknowledged(&fs, &dir, &model, failed.as_ref(), &what);
        // And the reopened database works.
        db.put(b"zz", b"ok").unwrap();
        db.flush().unwrap();
        assert_eq!(db.get(b"zz").unwrap().as_deref(), Some(&b"ok"[..]));
    }
    eprintln!("background faults fired in {fired} of {} seeds", seeds());
    assert!(fired > seeds() / 2);
}

#[test]
fn wal_errors_fail_the_write_and_every_later_one() {
    for seed in 0..seeds() {
        let mut rng = StdRng::seed_from_u64(2000 + seed);
        let fs = FaultFs::new();
        let dir = unique_dir("wal");
        let db = Db::open(&dir, options(&fs)).unwrap();
        let fault = match rng.gen_range(0..3) {
            0 => Fault::on(OpKind::Append)
                .matching(is_wal)
                .nth(rng.gen_range(1..1500))
                .short_write(rng.gen_range(0..1000)),
            1 => Fault::on(OpKind::Sync).matching(is_wal).nth(rng.gen_range(1..60)),
            _ => Fault::on(OpKind::Flush).matching(is_wal).nth(rng.gen_range(1..500)),
        };
        let what = format!("seed {seed} {fault:?}");
        fs.inject(fault);
        let mut model = Model::new();
        let mut failed = None;
        for op in 0..700 {
            let w = random_write(&mut rng, op);
            match db.write(&to_batch(&w), &WriteOptions::new().sync(rng.gen_bool(0.1))) {
                Ok(()) => apply(&mut model, &w),
                Err(e) => {
                    assert!(matches!(e, Error::Io { .. }), "{what}: {e:?}");
                    failed = Some(w);
                    break;
                }
            }
        }
        if failed.is_none() {
            assert_eq!(fs.faults_fired(), 0, "{what}: fault fired but no write failed");
            continue;
        }
        assert_stopped(&db, &what);
        fs.clear_faults();
        if seed % 2 == 1 {
            resume_and_write_on(&db, &mut rng, &mut model, &what);
        }
        drop(db);
        // The refused write was cut off the WAL: it is not there, whole or in part.
        reopen_as_acknowledged(&fs, &dir, &model, None, &what);
    }
}

/// Resumes a stopped database (its faults cleared) and checks that it holds exactly the
/// acknowledged writes and takes new ones, which `model` then includes.
fn resume_and_write_on(db: &Db, rng: &mut StdRng, model: &mut Model, what: &str) {
    db.resume().unwrap_or_else(|e| panic!("{what}: resume: {e}"));
    assert!(scan(db) == *model, "{what}: resumed database differs");
    for op in 0..200 {
        let w = random_write(rng, 10_000 + op);
        db.write(&to_batch(&w), &WriteOptions::new().sync(rng.gen_bool(0.1)))
            .unwrap_or_else(|e| panic!("{what}: write after resume: {e}"));
        apply(model, &w);
    }
    db.flush().unwrap_or_else(|e| panic!("{what}: flush after resume: {e}"));
}

#[test]
fn read_errors_are_errors_not_panics_or_wrong_data() {
    let fs = FaultFs::new();
    let dir: PathBuf = unique_dir("read");
    // No block cache: every lookup reads its blocks, so every one can meet a fault.
    let db = Db::open(&dir, options(&fs).block_cache_bytes(0)).unwrap();
    let mut rng = StdRng::seed_from_u64(3);
    let mut model = Model::new();
    for op in 0..1500 {
        let w = random_write(&mut rng, op);
        db.write(&to_batch(&w), &WriteOptions::default()).unwrap();
        apply(&mut model, &w);
    }
    db.compact().unwrap();
    // Reads say they would wait for the device, so `multi_get` reads its blocks on its read
    // threads: their failures must come back the same way.
    fs.set_reads_wait(true);
    let want = |k: u16| model.get(&key4(k)).cloned();
    // A `multi_get` is all right or an I/O error.
    let multi = |keys: &[u16]| {
        let ks: Vec<_> = keys.iter().map(|&k| key4(k)).collect();
        match db.multi_get(&ks) {
            Ok(got) => {
                for (&k, v) in keys.iter().zip(got) {
                    assert_eq!(v.map(|v| v.to_vec()), want(k), "key {k}");
                }
                true
            }
            Err(Error::Io { .. }) => false,
            Err(e) => panic!("unexpected {e:?}"),
        }
    };
    // Every table read fails: lookups of keys in tables are I/O errors.
    fs.inject(Fault::on(OpKind::Read).matching(is_table));
    let mut errors = 0;
    for k in 0..250u16 {
        match db.get(key4(k)) {
            Ok(v) => assert_eq!(v.map(|v| v.to_vec()), want(k)),
            Err(Error::Io { .. }) => errors += 1,
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    assert!(errors > 100, "{errors}");
    assert!(try_model(db.range(..)).is_err());
    let all: Vec<u16> = (0..250).collect();
    assert!(all.chunks(32).filter(|c| !multi(c)).count() > 3, "multi_get failed too");
    fs.clear_faults();
    // Sporadic failures: each read is right or an error.
    let mut multi_failed = 0;
    for round in 0..30u64 {
        fs.inject(Fault::on(OpKind::Read).matching(is_table).nth(round % 7 + 1));
        for k in (round as u16..250).step_by(5) {
            if let Ok(v) = db.get(key4(k)) {
                assert_eq!(v.map(|v| v.to_vec()), want(k));
            }
        }
        fs.clear_faults();
        fs.inject(Fault::on(OpKind::Read).matching(is_table).nth(round % 5 + 1));
        let keys: Vec<u16> = (round as u16..250).step_by(3).collect();
        multi_failed += usize::from(!multi(&keys));
        fs.clear_faults();
        fs.inject(Fault::on(OpKind::Read).matching(is_table).nth(round % 7 + 1));
        match try_model(db.range(..)) {
            Ok(got) => assert_eq!(got, model),
            Err(e) => assert!(matches!(e, Error::Io { .. }), "{e:?}"),
        }
        fs.clear_faults();
    }
    assert!(multi_failed > 20, "only {multi_failed} of 30 multi_gets met their fault");
    assert_eq!(scan(&db), model);
    assert!(multi(&all));
}

/// Regression: a failed directory fsync while switching to a new WAL segment used to fail
/// only that write; later writes went on as if the directory were durable.
#[test]
fn failed_dir_fsync_at_memtable_switch_stops_writes() {
    let fs = FaultFs::new();
    let dir = unique_dir("switch");
    let db = Db::open(&dir, options(&fs)).unwrap();
    db.put(b"a", b"1").unwrap();
    fs.inject(Fault::on(OpKind::SyncDir).nth(1));
    // The flush request switches the memtable: that directory fsync fails.
    let e = db.flush().expect_err("the switch's directory fsync fails");
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    assert_stopped(&db, "after a failed directory fsync");
    drop(db);
    fs.clear_faults();
    let db = Db::open(&dir, options(&fs)).unwrap();
    assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
}

/// Regression: `Stats::wal_bytes` read file sizes with `std::fs`, bypassing the file-system
/// seam, so on any other `FileSystem` it was always 0.
#[test]
fn stats_measure_the_wal_through_the_file_system_seam() {
    let fs = FaultFs::new();
    let db = Db::open(unique_dir("stats"), options(&fs)).unwrap();
    db.put(b"k", vec![7u8; 500]).unwrap();
    assert!(db.stats().wal_bytes >= 500, "{:?}", db.stats().wal_bytes);
}

/// Regression: a crash while creating a database, after its first manifest was written but
/// before CURRENT was renamed into place, left a directory that could never be opened
/// ("CURRENT is missing but the directory holds database files"). Found by `crash-test`.
#[test]
fn crash_during_creation_leaves_an_openable_directory() {
    for kind in [OpKind::Create, OpKind::Sync, OpKind::Rename, OpKind::SyncDir] {
        let fs = FaultFs::new();
        let dir = unique_dir("create");
        // The n-th call of `kind` fails: somewhere in writing the manifest or CURRENT.
        for nth in 1..4 {
            fs.inject(Fault::on(kind).nth(nth));
            let _ = Db::open(&dir, options(&fs));
            fs.clear_faults();
        }
        let db = Db::open(&dir, options(&fs))
            .unwrap_or_else(|e| panic!("{kind:?}: reopen after an interrupted creation: {e}"));
        db.put(b"k", b"v").unwrap();
        drop(db);
        let db = Db::open(&dir, options(&fs)).unwrap();
        assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
        let manifests =
            fs.files().iter().filter(|p| p.to_string_lossy().contains("MANIFEST")).count();
        assert_eq!(manifests, 1, "stale manifests are removed");
    }
}

/// Regression: recovery replayed every WAL segment it found without checking that their
/// records follow on from each other, so a segment that is not the newest, cut at a record
/// boundary (or emptied), left a hole in the history: later writes were recovered while
/// earlier ones were silently gone. Found by `damaged_wal_recovers_a_prefix_or_fails_naming_the_wal`.
#[test]
fn a_hole_between_wal_segments_is_corruption() {
    use bloomkv_tree::filename::{parse, wal_path, FileKind};
    use bloomkv_tree::log::LogWriter;
    for cut in [None, Some(1), Some(10)] {
        let fs = FaultFs::new();
        let dir = unique_dir("hole");
        let opts = || options(&fs).memtable_bytes(1 << 20);
        let db = Db::open(&dir, opts()).unwrap();
        for i in 0..20 {
            db.put(format!("k{i:02}"), format!("v{i}")).unwrap();
        }
        drop(db);
        let wal = fs
            .files()
            .into_iter()
            .filter(|p| {
                matches!(parse(&p.file_name().unwrap().to_string_lossy()), Some(FileKind::Wal(_)))
            })
            .max_by_key(|p| fs.contents(p).unwrap().len())
            .unwrap();
        let records = log_records(&wal, fs.contents(&wal).unwrap());
        // The segment's header (an empty batch naming its first sequence) and 20 writes.
        assert_eq!(records.len(), 21);
        let Some(FileKind::Wal(n)) = parse(&wal.file_name().unwrap().to_string_lossy()) else {
            unreachable!()
        };
        // Split the segment in two, dropping `cut` records from the end of the first.
        let keep = 11 - cut.unwrap_or(0);
        let frame = |recs: &[Vec<u8>], path: &Path| {
            let mut w = LogWriter::new(fs.create(path).unwrap());
            for r in recs {
                w.add_record(r).unwrap();
            }
            w.sync().unwrap();
        };
        frame(&records[..keep], &wal);
        frame(&records[11..], &wal_path(&dir, n + 1));
        match (cut, Db::open(&dir, opts())) {
            (None, Ok(db)) => assert_eq!(scan(&db).len(), 20),
            (Some(_), Err(Error::Corruption { file, .. })) => assert_eq!(file, wal),
            (cut, r) => panic!("cut {cut:?}: {:?}", r.map(|db| scan(&db).len())),
        }
    }
}

/// Counts WAL fsyncs: `write` with default `WriteOptions` inherits `Options::sync_writes`,
/// and an explicit `sync` overrides it either way.
#[test]
fn write_options_inherit_sync_writes_unless_set() {
    let fs = FaultFs::new();
    // Every fsync of a file; with data this small nothing but the WAL is synced while the
    // database is open (no memtable switch, flush or compaction runs).
    let syncs = |fs: &FaultFs| fs.calls(OpKind::Sync);
    let batch = || {
        let mut b = WriteBatch::new();
        b.put(b"k", b"v");
        b
    };
    for sync_writes in [true, false] {
        let dir = unique_dir("write-options-sync");
        let db = Db::open(&dir, options(&fs).sync_writes(sync_writes)).unwrap();
        let count = |f: &dyn Fn()| {
            let before = syncs(&fs);
            f();
            syncs(&fs) - before
        };
        let inherited = if sync_writes { 3 } else { 0 };
        assert_eq!(
            count(&|| (0..3).for_each(|_| db.write(&batch(), &WriteOptions::default()).unwrap())),
            inherited,
            "default WriteOptions, sync_writes({sync_writes})"
        );
        assert_eq!(
            count(&|| (0..3).for_each(|_| db.put(b"p", b"v").unwrap())),
            inherited,
            "put, sync_writes({sync_writes})"
        );
        assert_eq!(
            count(&|| (0..3).for_each(|_| db.delete(b"p").unwrap())),
            inherited,
            "delete, sync_writes({sync_writes})"
        );
        assert_eq!(
            count(&|| (0..3)
                .for_each(|_| db.write(&batch(), &WriteOptions::new().sync(true)).unwrap())),
            3,
            "sync(true) overrides sync_writes({sync_writes})"
        );
        assert_eq!(
            count(&|| (0..3)
                .for_each(|_| db.write(&batch(), &WriteOptions::new().sync(false)).unwrap())),
            0,
            "sync(false) overrides sync_writes({sync_writes})"
        );
        db.close().unwrap();
    }
}

// ---------------------------------------------------------------------------------------
// Ingest.

/// Options for the ingest fault tests: nothing runs in the background unless asked, so the
/// n-th call of a kind after the setup is the same call in every run.
fn still_options(fs: &FaultFs) -> Options {
    options(fs)
        .memtable_bytes(1 << 20)
        .level_base_bytes(1 << 20)
        .l0_compaction_trigger(50)
        .l0_slowdown_trigger(60)
        .l0_stop_trigger(70)
}

/// A database with a compacted level, an L0 table and synced writes in the memtable (so
/// the ingest has a flush to make first). Returns it and its contents.
fn ingest_setup(fs: &FaultFs, dir: &Path) -> (Db, Model) {
    let db = Db::open(dir, still_options(fs)).unwrap();
    let mut model = Model::new();
    let mut put = |db: &Db, k: u16, op: usize, sync: bool| {
        db.write(&to_batch(&Write::one(k, Some(value(k, op)))), &WriteOptions::new().sync(sync))
            .unwrap();
        model.insert(key4(k), value(k, op));
    };
    for k in 0..250 {
        put(&db, k, 0, false);
    }
    db.compact().unwrap();
    for k in (0..250).step_by(3) {
        put(&db, k, 1, false);
    }
    db.flush().unwrap();
    for k in (0..250).step_by(7) {
        put(&db, k, 2, true);
    }
    (db, model)
}

/// What the ingests of the fault tests write: over the existing keys (the ingest lands on
/// L0) or beyond them (it lands on the last level).
fn ingest_entries(over_existing: bool) -> Model {
    let keys = if over_existing { 100..400 } else { 1000..1300 };
    keys.map(|k| (key4(k), value(k, 99))).collect()
}

/// Runs the ingest of `entries` once without faults (with the writes of
/// [`ingest_with_writes`] if `with_writes`) and returns how many calls of each of `kinds`
/// it made, with the contents before and after the ingest (writes not included).
fn ingest_call_counts(
    kinds: &[OpKind],
    entries: &Model,
    with_writes: bool,
) -> (Vec<u64>, Model, Model) {
    let fs = FaultFs::new();
    let dir = unique_dir("ingest-count");
    let (db, before) = ingest_setup(&fs, &dir);
    let counts_before: Vec<u64> = kinds.iter().map(|&k| fs.calls(k)).collect();
    let mut after = before.clone();
    after.extend(entries.clone());
    if with_writes {
        let (ingested, acked) = ingest_with_writes(&db, entries);
        assert!(ingested && acked == INGEST_WRITES.len());
    } else {
        db.ingest(entries.clone()).unwrap();
    }
    let counts = kinds.iter().zip(&counts_before).map(|(&k, b)| fs.calls(k) - b).collect();
    let mut want = after.clone();
    if with_writes {
        want.extend(ingest_writes(entries));
    }
    assert_eq!(scan(&db), want);
    (counts, before, after)
}

/// The writes [`ingest_with_writes`] makes, in order: one over an ingested key while the
/// ingest runs, then one once it returned.
const INGEST_WRITES: [&str; 2] = ["during", "after"];

fn ingest_writes(entries: &Model) -> Vec<(Vec<u8>, Vec<u8>)> {
    let during = entries.keys().nth(entries.len() / 2).unwrap().clone();
    vec![(during, b"written during".to_vec()), (b"zz-after".to_vec(), b"written after".to_vec())]
}

/// Ingests `entries` while writing: halfway through, the ingest's source has another thread
/// make a synced write over an ingested key (newer than the ingest, so it wins) and waits for
/// it to return; once the ingest returns, another synced write. Returns whether the ingest
/// returned `Ok` and how many of the writes did (in order: each waits for the one before).
/// A write that waited for the ingest would never return: after a generous timeout the test
/// fails instead of hanging.
fn ingest_with_writes(db: &Db, entries: &Model) -> (bool, usize) {
    let writes = ingest_writes(entries);
    let put = |(k, v): &(Vec<u8>, Vec<u8>)| {
        let mut b = WriteBatch::new();
        b.put(k, v);
        db.write(&b, &WriteOptions::new().sync(true)).is_ok()
    };
    let mut during_ok = None;
    let ingested = std::thread::scope(|s| {
        let (go, start) = std::sync::mpsc::channel::<()>();
        let (done, finished) = std::sync::mpsc::channel::<bool>();
        let during = &writes[0];
        s.spawn(move || {
            if start.recv().is_ok() {
                let _ = done.send(put(during));
            }
        });
        let source = entries.iter().enumerate().map(|(i, (k, v))| {
            if i == entries.len() / 2 {
                go.send(()).unwrap();
                let ok = finished
                    .recv_timeout(std::time::Duration::from_secs(120))
                    .expect("a write made while an ingest runs waited for the ingest");
                during_ok = Some(ok);
            }
            (k.clone(), v.clone())
        });
        db.ingest(source).is_ok()
    });
    let mut acked = usize::from(during_ok == Some(true));
    if acked == 1 && put(&writes[1]) {
        acked = 2;
    }
    (ingested, acked)
}

/// A power loss at every file-system call an ingest makes — the reserved sequence number's
/// WAL record and memtable switch, the flush of the memtable it froze, writing and syncing
/// its tables, the manifest edit — and at those of writes made while it runs and after it,
/// leaves a database that opens with all of the ingest or none of it, and all of it if the
/// ingest had returned `Ok`; with every write that returned `Ok`, each newer than the ingest;
/// never a corruption.
#[test]
fn power_loss_during_an_ingest_keeps_all_or_none_of_it() {
    const KINDS: [OpKind; 7] = [
        OpKind::Create,
        OpKind::Append,
        OpKind::Flush,
        OpKind::Sync,
        OpKind::SyncDir,
        OpKind::Rename,
        OpKind::Remove,
    ];
    let mut runs = 0;
    let mut outcomes = [0usize; 2]; // recovered without / with the ingest
    for over_existing in [true, false] {
        let entries = ingest_entries(over_existing);
        let (counts, before, after) = ingest_call_counts(&KINDS, &entries, true);
        let writes = ingest_writes(&entries);
        for (&kind, &count) in KINDS.iter().zip(&counts) {
            for nth in 1..=count {
                for mode in [CrashMode::DropUnsynced, CrashMode::TornTails { seed: nth }] {
                    let what = format!("{kind:?} #{nth} {mode:?} over_existing={over_existing}");
                    let fs = FaultFs::new();
                    let dir = unique_dir("ingest-power");
                    let (db, _) = ingest_setup(&fs, &dir);
                    fs.inject(Fault::on(kind).nth(nth).power_off());
                    let (acknowledged, writes_acked) = ingest_with_writes(&db, &entries);
                    let fs = fs.crash(mode);
                    drop(db);
                    let db = Db::open(&dir, still_options(&fs))
                        .unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
                    let got =
                        try_model(db.range(..)).unwrap_or_else(|e| panic!("{what}: scan: {e}"));
                    // Without or with the ingest, then a prefix of the writes, which take
                    // their sequence numbers after the ingest's and so win over it.
                    let found = [&before, &after].into_iter().enumerate().find_map(|(w, base)| {
                        (0..=writes.len()).find_map(|n| {
                            let mut want = base.clone();
                            want.extend(writes[..n].iter().cloned());
                            (want == got).then_some((w == 1, n))
                        })
                    });
                    let Some((with_ingest, kept)) = found else {
                        panic!("{what}: recovered neither all nor none of the ingest");
                    };
                    assert!(
                        (with_ingest || !acknowledged) && kept >= writes_acked,
                        "{what}: lost acknowledged work (ingest {acknowledged}, writes \
                         {writes_acked}): recovered ingest {with_ingest}, writes {kept}"
                    );
                    outcomes[usize::from(with_ingest)] += 1;
                    // And it goes on: a write and a reopen.
                    db.put(b"next", b"1").unwrap();
                    drop(db);
                    let db = Db::open(&dir, still_options(&fs)).unwrap();
                    assert_eq!(db.get(b"next").unwrap().as_deref(), Some(&b"1"[..]), "{what}");
                    runs += 1;
                }
            }
        }
    }
    eprintln!("ingest power loss: {runs} runs, {outcomes:?} recovered without / with it");
    assert!(outcomes[0] > 10 && outcomes[1] > 10, "{outcomes:?}");
}

/// An I/O error at every file-system call of an ingest: either the ingest returns the
/// error and the database is unchanged, usable and holds no table the version does not name,
/// or the database stopped (the error came once the manifest edit was under way); either
/// way reopening gives all of the ingest or none of it, and all of it after an `Ok`.
#[test]
fn io_errors_during_an_ingest_keep_all_or_none_of_it() {
    const KINDS: [OpKind; 8] = [
        OpKind::Create,
        OpKind::Open,
        OpKind::Append,
        OpKind::Flush,
        OpKind::Sync,
        OpKind::SyncDir,
        OpKind::Rename,
        OpKind::Remove,
    ];
    let (mut refused, mut stopped) = (0, 0);
    for over_existing in [true, false] {
        let entries = ingest_entries(over_existing);
        let (counts, before, after) = ingest_call_counts(&KINDS, &entries, false);
        for (&kind, &count) in KINDS.iter().zip(&counts) {
            for nth in 1..=count {
                let what = format!("{kind:?} #{nth} over_existing={over_existing}");
                let fs = FaultFs::new();
                let dir = unique_dir("ingest-error");
                let (db, _) = ingest_setup(&fs, &dir);
                fs.inject(Fault::on(kind).nth(nth));
                let result = db.ingest(entries.clone());
                fs.clear_faults();
                let mut want = if result.is_ok() { vec![&after] } else { vec![&before, &after] };
                let mut probe = before.clone();
                if let Err(e) = &result {
                    assert!(!e.is_corruption(), "{what}: {e:?}");
                    match db.put(b"probe", b"1") {
                        Ok(()) => {
                            // Refused: nothing changed, nothing left behind.
                            refused += 1;
                            probe.insert(b"probe".to_vec(), b"1".to_vec());
                            assert_eq!(scan(&db), probe, "{what}");
                            let tables = fs.files().iter().filter(|p| is_table(p)).count();
                            let live: usize = db.stats().tables_per_level.iter().sum();
                            assert_eq!(tables, live, "{what}: tables left behind");
                            want = vec![&probe];
                        }
                        Err(Error::Background(_)) => stopped += 1,
                        Err(e) => panic!("{what}: write after the failed ingest: {e:?}"),
                    }
                }
                drop(db);
                let db = Db::open(&dir, still_options(&fs))
                    .unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
                let got = scan(&db);
                assert!(want.contains(&&got), "{what}: {result:?}, then recovered the wrong data");
            }
        }
    }
    eprintln!("ingest I/O errors: {refused} refused, {stopped} stopped the database");
    assert!(refused > 10 && stopped > 3, "{refused} refused, {stopped} stopped");
}

// ---------------------------------------------------------------------------------------
// Failed opens.

/// The calls an open makes: every kind that can fail it.
const OPEN_KINDS: [OpKind; 11] = [
    OpKind::List,
    OpKind::Lock,
    OpKind::ReadAll,
    OpKind::Open,
    OpKind::Create,
    OpKind::Append,
    OpKind::Flush,
    OpKind::Sync,
    OpKind::Rename,
    OpKind::SyncDir,
    OpKind::Remove,
];

/// A closed database with tables in two keyspaces and writes in its WAL in both (so an open
/// replays them into new tables, a new manifest and a new WAL segment). Returns its contents.
fn replay_setup(fs: &FaultFs, dir: &Path) -> Model {
    let db = Db::open(dir, still_options(fs)).unwrap();
    let side = side(&db);
    let mut model = Model::new();
    for round in 0..2 {
        for k in (0..250).step_by(round + 1) {
            let k = if k % 4 == 0 { SIDE + k } else { k };
            let w = Write::one(k, Some(value(k, round)));
            db.write(&to_batch_in(&w, &side), &WriteOptions::new()).unwrap();
            apply(&mut model, &w);
        }
        if round == 0 {
            db.flush().unwrap();
        }
    }
    drop(side);
    db.close().unwrap();
    model
}

/// Every file in the directory with its bytes, except the LOCK (a failed open may create it
/// and leaves it: see `undo_failed_open`).
fn dir_state(fs: &FaultFs) -> BTreeMap<PathBuf, Vec<u8>> {
    fs.files()
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n != "LOCK"))
        .map(|p| (p.clone(), fs.contents(&p).unwrap()))
        .collect()
}

/// How many calls of each of `OPEN_KINDS` a clean open of the database `setup` builds makes.
fn open_call_counts(setup: impl Fn(&FaultFs, &Path)) -> Vec<u64> {
    let fs = FaultFs::new();
    let dir = unique_dir("open-count");
    setup(&fs, &dir);
    let before: Vec<u64> = OPEN_KINDS.iter().map(|&k| fs.calls(k)).collect();
    let db = Db::open(&dir, still_options(&fs)).unwrap();
    let counts = OPEN_KINDS.iter().zip(&before).map(|(&k, b)| fs.calls(k) - b).collect();
    drop(db);
    counts
}

/// An open that fails at any file-system call — flushing the replayed WAL into tables,
/// writing the new manifest or CURRENT, starting the new WAL segment — leaves the directory
/// byte for byte as it found it (bar the LOCK): no replay table, manifest, CURRENT.tmp or
/// WAL segment of its own, the old manifest still current. So retried opens on a full disk
/// do not eat the space, and the next open without the fault recovers every write.
#[test]
fn a_failed_open_leaves_the_directory_as_it_found_it() {
    let counts = open_call_counts(|fs, dir| {
        replay_setup(fs, dir);
    });
    let (mut failed, mut opened) = (0, 0);
    for (&kind, &count) in OPEN_KINDS.iter().zip(&counts) {
        for nth in 1..=count {
            let what = format!("{kind:?} #{nth} of {count}");
            let fs = FaultFs::new();
            let dir = unique_dir("open-fail");
            let model = replay_setup(&fs, &dir);
            let before = dir_state(&fs);
            fs.inject(Fault::on(kind).nth(nth));
            let result = Db::open(&dir, still_options(&fs));
            fs.clear_faults();
            match result {
                Err(e) => {
                    assert!(!e.is_corruption(), "{what}: {e}");
                    failed += 1;
                    let after = dir_state(&fs);
                    let added: Vec<_> = after.keys().filter(|p| !before.contains_key(*p)).collect();
                    assert!(added.is_empty(), "{what}: the failed open left {added:?} ({e})");
                    assert!(after == before, "{what}: the failed open changed files ({e})");
                }
                // Only the removal of stale files may fail without failing the open.
                Ok(db) => {
                    assert_eq!(kind, OpKind::Remove, "{what}: the fault did not fail the open");
                    opened += 1;
                    drop(db);
                }
            }
            let db = Db::open(&dir, still_options(&fs))
                .unwrap_or_else(|e| panic!("{what}: reopen without the fault: {e}"));
            let side = side(&db);
            assert!(scan_both(&db, &side).unwrap() == model, "{what}: writes lost");
        }
    }
    eprintln!("failed opens: {failed} failed, {opened} opened despite the fault");
    assert!(failed > 30, "{failed}");
}

/// The same when the open creates the database: a creation that fails leaves nothing but
/// the LOCK, and the directory then takes a database.
#[test]
fn a_failed_creation_leaves_nothing_behind() {
    let counts = open_call_counts(|_, _| {});
    let mut failed = 0;
    for (&kind, &count) in OPEN_KINDS.iter().zip(&counts) {
        for nth in 1..=count {
            let what = format!("{kind:?} #{nth} of {count}");
            let fs = FaultFs::new();
            let dir = unique_dir("create-fail");
            fs.inject(Fault::on(kind).nth(nth));
            if Db::open(&dir, still_options(&fs)).is_err() {
                failed += 1;
                fs.clear_faults();
                assert_eq!(dir_state(&fs), BTreeMap::new(), "{what}");
            }
            fs.clear_faults();
            let db = Db::open(&dir, still_options(&fs))
                .unwrap_or_else(|e| panic!("{what}: open without the fault: {e}"));
            db.put(b"k", b"v").unwrap();
            drop(db);
            let db = Db::open(&dir, still_options(&fs)).unwrap();
            assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"v"[..]), "{what}");
        }
    }
    assert!(failed > 5, "{failed}");
}
