//! `bloomkv crash-test`: kills a writing process with SIGKILL at random moments and checks
//! that the database it leaves behind holds exactly what was acknowledged.
//!
//! The parent runs cycles. Each cycle starts a child (`bloomkv crash-worker`, hidden) on the
//! same database directory. The child opens the database (recovering whatever the previous
//! child left) with small memtables, so flushes and compactions run all the time, creates or
//! opens two more keyspaces with other table options and compaction styles (`ks1` with a
//! classic Bloom filter and lazy leveling, `ks2` zstd-compressed and tiered), and writes from several threads: puts, deletes, range deletes and
//! multi-key batches, some with `sync: true`. Each write of an operation goes to one of the
//! three keyspaces, so a multi-key batch usually spans keyspaces. Every
//! operation is derived from `(seed, op id)`, so the parent can regenerate it; the child
//! prints `S <id>` before submitting an operation and `A <id>` after it is acknowledged,
//! flushing stdout each time. After a random delay the parent kills the child (SIGKILL, via
//! `Child::kill`), opens the database itself and checks it:
//!
//! - Each writer thread owns one contiguous block of the key space, the same block in every
//!   keyspace, so per key the order of operations is that thread's order, and a thread's
//!   range deletes (inside its block, in one keyspace) touch only its keys. For each thread,
//!   the recovered state of its keys in all keyspaces together must be the model after all
//!   its acknowledged operations, or that plus its one operation in flight — applied whole
//!   (a batch is all or nothing across every keyspace it touches). A process kill loses
//!   nothing that was acknowledged, synced or not: acknowledged writes have reached the
//!   operating system.
//! - No keyspace but those three, no key outside the key space, no value that no operation
//!   wrote and no value in a keyspace other than the one it was written to may appear.
//! - Point reads agree with the scan.
//!
//! The recovered state becomes the model for the next cycle, so recovered databases are
//! recovered again, including when a kill lands in the middle of recovery.
//!
//! Long run (documented in `docs/reliability.md`):
//!
//! ```text
//! cargo run --release -p bloomkv-tools -- crash-test --cycles 2000 --seconds 3600 \
//!     --dir /tmp/bloomkv-crash --seed 1
//! ```

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bloomkv::{
    CompactionStyle, Compression, Db, FilterPolicy, Keyspace, KeyspaceOptions, Options, Readable,
    WriteBatch, WriteOptions,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Options of `crash-test`.
#[derive(clap::Args)]
pub struct Args {
    /// Kill/recover cycles to run (at most).
    #[arg(long, default_value_t = 50)]
    cycles: u64,
    /// Stop starting new cycles after this many seconds.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Database directory; must not exist or be empty (it is created).
    #[arg(long)]
    dir: PathBuf,
    /// Seed of the operations and of the kill delays.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Writer threads in each child.
    #[arg(long, default_value_t = 3)]
    threads: u64,
    /// Longest delay before a kill, in milliseconds.
    #[arg(long, default_value_t = 1500)]
    max_delay_ms: u64,
}

/// Options of the hidden `crash-worker`.
#[derive(clap::Args)]
pub struct WorkerArgs {
    #[arg(long)]
    dir: PathBuf,
    #[arg(long)]
    seed: u64,
    /// First op id of this child; thread `t` uses ids `start + t + i * threads`.
    #[arg(long)]
    start_op: u64,
    #[arg(long)]
    threads: u64,
    /// Ops per thread before exiting normally (the parent normally kills first).
    #[arg(long, default_value_t = 2_000_000)]
    ops_per_thread: u64,
}

/// Distinct keys per keyspace; see [`owned`] for which thread writes which.
const KEYS: u64 = 3000;

/// The keyspaces written, by index: an op names a keyspace by its index here.
const KEYSPACES: [&str; 3] = ["default", "ks1", "ks2"];

fn options() -> Options {
    Options::default()
        .memtable_bytes(16 << 10)
        .block_bytes(512)
        .target_table_bytes(16 << 10)
        .level_base_bytes(64 << 10)
        .l0_compaction_trigger(2)
        .l0_slowdown_trigger(4)
        .l0_stop_trigger(8)
}

/// The options of the extra keyspaces. They differ from the default keyspace's (and from
/// each other) so that tables of every filter and compression kind are flushed and compacted
/// side by side, leveled, lazily leveled and tiered; the sizes stay as small as `options()`'s so that they flush and compact as
/// often.
fn keyspace_options(ks: usize) -> KeyspaceOptions {
    let small = KeyspaceOptions::new().block_bytes(512).target_table_bytes(16 << 10);
    match ks {
        1 => small
            .filter_policy(FilterPolicy::ClassicBloom { bits_per_key: 10.0 })
            .compaction_style(CompactionStyle::LazyLeveling),
        _ => small
            .compression(Compression::Zstd { level: 1 })
            .compaction_style(CompactionStyle::Tiered),
    }
}

/// Handles on the keyspaces of `KEYSPACES`, in order, creating the missing ones.
fn open_keyspaces(db: &Db) -> Result<Vec<Keyspace>, bloomkv::Error> {
    let default = db.existing_keyspace(KEYSPACES[0]).expect("the default keyspace always exists");
    let mut handles = vec![default];
    for (ks, name) in KEYSPACES.iter().enumerate().skip(1) {
        handles.push(db.keyspace(name, keyspace_options(ks))?);
    }
    Ok(handles)
}

fn key(k: u64) -> Vec<u8> {
    format!("key{k:06}").into_bytes()
}

/// The value op `op` writes to key `k` of keyspace `ks`: naming the keyspace lets the
/// checker tell a write that landed in the wrong keyspace from one that was lost.
fn value(ks: usize, k: u64, op: u64) -> Vec<u8> {
    let mut v = format!("{ks}|{k}|{op}|").into_bytes();
    v.resize(v.len() + ((op * 31 + k) % 160) as usize, b'v');
    v
}

/// Parses a value back into (keyspace, key, op id), checking its padding.
fn parse_value(v: &[u8]) -> Option<(usize, u64, u64)> {
    let s = std::str::from_utf8(v).ok()?;
    let mut parts = s.splitn(4, '|');
    let ks = parts.next()?.parse().ok()?;
    let k = parts.next()?.parse().ok()?;
    let op = parts.next()?.parse().ok()?;
    (value(ks, k, op) == v).then_some((ks, k, op))
}

/// One operation, applied as one batch: a range delete of keys `a..b` in keyspace `ks` if
/// any, then the (keyspace, key, Some(value) = put / None = delete) triples (a put after the
/// range delete in the batch is not covered by it).
struct Op {
    range: Option<(usize, u64, u64)>,
    writes: Vec<(usize, u64, Option<Vec<u8>>)>,
    sync: bool,
}

impl Op {
    /// How many keyspaces the op writes to.
    fn keyspaces(&self) -> usize {
        let touched = self.range.iter().map(|r| r.0).chain(self.writes.iter().map(|w| w.0));
        touched.collect::<std::collections::BTreeSet<_>>().len()
    }
}

/// The keys thread `thread` of `threads` owns: one contiguous block.
fn owned(thread: u64, threads: u64) -> std::ops::Range<u64> {
    let per_thread = KEYS / threads;
    thread * per_thread..(thread + 1) * per_thread
}

/// The operation with id `op`, written by thread `op % threads` relative to `start`; it
/// touches only keys of `thread`.
fn gen_op(seed: u64, op: u64, thread: u64, threads: u64) -> Op {
    let mut rng = StdRng::seed_from_u64(seed ^ op.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let n = if rng.gen_bool(0.2) { rng.gen_range(2..8) } else { 1 };
    let mine = owned(thread, threads);
    let range = rng.gen_bool(0.03).then(|| {
        let ks = rng.gen_range(0..KEYSPACES.len());
        let a = rng.gen_range(mine.clone());
        (ks, a, (a + rng.gen_range(1..60)).min(mine.end))
    });
    let writes = (0..n)
        .map(|_| {
            let ks = rng.gen_range(0..KEYSPACES.len());
            let k = rng.gen_range(mine.clone());
            (ks, k, if rng.gen_bool(0.8) { Some(value(ks, k, op)) } else { None })
        })
        .collect();
    Op { range, writes, sync: rng.gen_bool(0.25) }
}

/// The op as one batch on the keyspaces `handles` (indexed as `KEYSPACES`). The default
/// keyspace goes through the batch's own methods rather than `*_in` with its handle, so that
/// both ways of naming it are covered.
fn batch(op: &Op, handles: &[Keyspace]) -> WriteBatch {
    let mut b = WriteBatch::new();
    if let Some((ks, a, z)) = op.range {
        match ks {
            0 => b.delete_range(key(a)..key(z)),
            _ => b.delete_range_in(&handles[ks], key(a)..key(z)),
        }
    }
    for (ks, k, v) in &op.writes {
        match (ks, v) {
            (0, Some(v)) => b.put(key(*k), v),
            (0, None) => b.delete(key(*k)),
            (_, Some(v)) => b.put_in(&handles[*ks], key(*k), v),
            (_, None) => b.delete_in(&handles[*ks], key(*k)),
        }
    }
    b
}

/// The child: open (recovering), then write until killed.
pub fn worker(args: &WorkerArgs) -> Result<ExitCode, bloomkv::Error> {
    let db = Db::open(&args.dir, options())?;
    let handles = open_keyspaces(&db)?;
    let out = Arc::new(std::sync::Mutex::new(std::io::stdout()));
    let failed = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..args.threads {
            let (db, handles, out, failed) = (&db, &handles, out.clone(), &failed);
            s.spawn(move || {
                let say = |tag: char, id: u64| {
                    let mut o = out.lock().unwrap_or_else(|p| p.into_inner());
                    // A write error means the parent is gone; stop quietly.
                    let _ = writeln!(o, "{tag} {id}").and_then(|()| o.flush());
                };
                for i in 0..args.ops_per_thread {
                    let id = args.start_op + t + i * args.threads;
                    let op = gen_op(args.seed, id, t, args.threads);
                    say('S', id);
                    match db.write(&batch(&op, handles), &WriteOptions::new().sync(op.sync)) {
                        Ok(()) => say('A', id),
                        Err(e) => {
                            eprintln!(
                                "crash-worker: write {id} failed: {}",
                                crate::common::chain(&e)
                            );
                            failed.store(1, Ordering::Relaxed);
                            return;
                        }
                    }
                }
            });
        }
    });
    db.close()?;
    Ok(if failed.load(Ordering::Relaxed) == 0 { ExitCode::SUCCESS } else { ExitCode::from(3) })
}

/// The database's contents: (keyspace index, key) to value.
type Model = BTreeMap<(usize, Vec<u8>), Vec<u8>>;

fn apply(model: &mut Model, op: &Op) {
    if let Some((ks, a, z)) = op.range {
        for k in a..z {
            model.remove(&(ks, key(k)));
        }
    }
    for (ks, k, v) in &op.writes {
        match v {
            Some(v) => model.insert((*ks, key(*k)), v.clone()),
            None => model.remove(&(*ks, key(*k))),
        };
    }
}

/// What the database holds, in every keyspace. A keyspace that does not exist yet (the kill
/// came before the first child created it) reads as empty: if acknowledged writes went to
/// it, the comparison with the model reports them lost.
fn read_all(db: &Db) -> Result<Model, String> {
    let names = db.keyspace_names();
    if names.len() > KEYSPACES.len() || names.iter().zip(KEYSPACES).any(|(n, k)| n != k) {
        return Err(format!("keyspaces {names:?}, expected a prefix of {KEYSPACES:?}"));
    }
    let mut got = Model::new();
    for (ks, name) in names.iter().enumerate() {
        let handle =
            db.existing_keyspace(name).ok_or_else(|| format!("keyspace {name} vanished"))?;
        for r in handle.range(..) {
            let (k, v) =
                r.map_err(|e| format!("scan of {name} failed: {}", crate::common::chain(&e)))?;
            got.insert((ks, k), v.to_vec());
        }
    }
    Ok(got)
}

/// What one child reported: per thread, ops acknowledged (in order) and the op in flight.
#[derive(Default)]
struct Report {
    acked: Vec<Vec<u64>>,
    in_flight: Vec<Option<u64>>,
    next_op: u64,
}

fn read_report(lines: &[String], start: u64, threads: u64) -> Result<Report, String> {
    let mut r = Report {
        acked: vec![Vec::new(); threads as usize],
        in_flight: vec![None; threads as usize],
        next_op: start,
    };
    for line in lines {
        let (tag, id) = line.split_once(' ').ok_or_else(|| format!("bad line {line:?}"))?;
        let id: u64 = id.parse().map_err(|_| format!("bad line {line:?}"))?;
        if id < start {
            return Err(format!("op id {id} below the start {start}"));
        }
        let t = ((id - start) % threads) as usize;
        match tag {
            "S" => {
                if let Some(prev) = r.in_flight[t] {
                    return Err(format!("thread {t} sent {id} while {prev} was in flight"));
                }
                r.in_flight[t] = Some(id);
                r.next_op = r.next_op.max(id + 1);
            }
            "A" => {
                if r.in_flight[t] != Some(id) {
                    return Err(format!("ack of {id} that was not in flight"));
                }
                r.in_flight[t] = None;
                r.acked[t].push(id);
            }
            _ => return Err(format!("bad line {line:?}")),
        }
    }
    // Round up so every thread's next id is above all ids used.
    r.next_op = start + (r.next_op - start).div_ceil(threads) * threads;
    Ok(r)
}

/// Totals over a run.
#[derive(Default, Debug)]
struct Totals {
    range_deletes: u64,
    cross_keyspace: u64,
    cycles: u64,
    acked: u64,
    in_flight: u64,
    in_flight_applied: u64,
    keys_checked: u64,
    killed_during_open: u64,
}

/// Checks the reopened database against `model` plus the child's report; returns the new
/// model (the recovered state).
fn check(
    db: &Db,
    model: &Model,
    report: &Report,
    seed: u64,
    start: u64,
    threads: u64,
    totals: &mut Totals,
) -> Result<Model, String> {
    let got = read_all(db)?;
    let show_key =
        |ks: usize, k: &[u8]| format!("{}/{}", KEYSPACES[ks], String::from_utf8_lossy(k));
    let key_number = |k: &[u8]| -> Option<u64> {
        k.strip_prefix(b"key").and_then(|n| std::str::from_utf8(n).ok()?.parse().ok())
    };
    for ((ks, k), v) in &got {
        let (vks, vk, _) = parse_value(v)
            .ok_or_else(|| format!("key {} holds a value no op wrote", show_key(*ks, k)))?;
        if key(vk) != *k {
            return Err(format!("key {} holds the value of key {vk}", show_key(*ks, k)));
        }
        if vks != *ks {
            return Err(format!(
                "key {} holds a value written to keyspace {}",
                show_key(*ks, k),
                KEYSPACES.get(vks).unwrap_or(&"?")
            ));
        }
        // Keys no thread owns are never written; the per-thread comparison below would
        // not look at them.
        if key_number(k).is_none_or(|n| n >= owned(threads - 1, threads).end) {
            return Err(format!("key {} is outside every thread's block", show_key(*ks, k)));
        }
    }
    let gen = |id: u64| gen_op(seed, id, (id - start) % threads, threads);
    for t in 0..threads {
        // The thread's block in every keyspace at once, so that an op applied in some
        // keyspaces and not in others matches neither of the states allowed below.
        let mine = |k: &[u8]| key_number(k).is_some_and(|n| owned(t, threads).contains(&n));
        let restrict = |m: &Model| -> Model {
            m.iter().filter(|((_, k), _)| mine(k)).map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        let mut expect = restrict(model);
        for &id in &report.acked[t as usize] {
            apply(&mut expect, &gen(id));
        }
        let actual = restrict(&got);
        totals.keys_checked += expect.len() as u64;
        if actual == expect {
            continue;
        }
        if let Some(id) = report.in_flight[t as usize] {
            let mut with = expect.clone();
            apply(&mut with, &gen(id));
            if actual == with {
                totals.in_flight_applied += 1;
                continue;
            }
        }
        let diff: Vec<String> = expect
            .keys()
            .chain(actual.keys())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .filter(|k| expect.get(*k) != actual.get(*k))
            .take(5)
            .map(|k| {
                let show =
                    |v: Option<&Vec<u8>>| v.and_then(|v| parse_value(v)).map(|(_, _, op)| op);
                format!(
                    "{}: expected op {:?}, found op {:?}",
                    show_key(k.0, &k.1),
                    show(expect.get(k)),
                    show(actual.get(k))
                )
            })
            .collect();
        return Err(format!(
            "thread {t}: recovered state differs from the acknowledged writes (in flight: {:?}): {}",
            report.in_flight[t as usize],
            diff.join("; ")
        ));
    }
    let handles: Vec<Option<Keyspace>> =
        KEYSPACES.iter().map(|name| db.existing_keyspace(name)).collect();
    for ((ks, k), v) in got.iter().step_by(7) {
        let handle = handles[*ks].as_ref().expect("the scan found the keyspace");
        let g = handle.get(k).map_err(|e| format!("get failed: {}", crate::common::chain(&e)))?;
        if g.as_deref() != Some(&v[..]) {
            return Err(format!("get({}) disagrees with the scan", show_key(*ks, k)));
        }
    }
    // The same keys again through `multi_get`, one call per keyspace.
    for (ks, handle) in handles.iter().enumerate() {
        let Some(handle) = handle else { continue };
        let (keys, want): (Vec<&Vec<u8>>, Vec<&Vec<u8>>) = got
            .iter()
            .filter(|((at, _), _)| *at == ks)
            .step_by(7)
            .map(|((_, k), v)| (k, v))
            .unzip();
        let found = handle
            .multi_get(&keys)
            .map_err(|e| format!("multi_get failed: {}", crate::common::chain(&e)))?;
        for ((k, w), f) in keys.iter().zip(want).zip(found) {
            if f.as_deref() != Some(&w[..]) {
                return Err(format!("multi_get({}) disagrees with the scan", show_key(ks, k)));
            }
        }
    }
    Ok(got)
}

/// The parent.
pub fn run(args: &Args) -> Result<ExitCode, bloomkv::Error> {
    let threads = args.threads.clamp(1, 16);
    if args.dir.exists()
        && std::fs::read_dir(&args.dir).map(|mut d| d.next().is_some()).unwrap_or(true)
    {
        eprintln!("crash-test: {} exists and is not empty", args.dir.display());
        return Ok(ExitCode::from(2));
    }
    let exe =
        std::env::current_exe().map_err(|e| bloomkv::Error::io("finding the executable", e))?;
    let mut rng = StdRng::seed_from_u64(args.seed);
    let started = Instant::now();
    let mut model = Model::new();
    let mut next_op = 0u64;
    let mut totals = Totals::default();
    while totals.cycles < args.cycles && started.elapsed() < Duration::from_secs(args.seconds) {
        let cycle = totals.cycles;
        let report = match run_child(
            &exe,
            &args.dir,
            args.seed,
            next_op,
            threads,
            &mut rng,
            args.max_delay_ms,
            &mut totals,
        ) {
            Ok(r) => r,
            Err(msg) => {
                eprintln!("crash-test: cycle {cycle}: {msg}");
                return Ok(ExitCode::FAILURE);
            }
        };
        let db = match Db::open(&args.dir, options()) {
            Ok(db) => db,
            Err(e) => {
                eprintln!(
                    "crash-test: cycle {cycle}: reopening after the kill failed: {}",
                    crate::common::chain(&e)
                );
                return Ok(ExitCode::FAILURE);
            }
        };
        match check(&db, &model, &report, args.seed, next_op, threads, &mut totals) {
            Ok(m) => model = m,
            Err(msg) => {
                eprintln!(
                    "crash-test: cycle {cycle} (ops from {next_op}, seed {}): {msg}",
                    args.seed
                );
                return Ok(ExitCode::FAILURE);
            }
        }
        db.close()?;
        totals.acked += report.acked.iter().map(|a| a.len() as u64).sum::<u64>();
        let gen = |id: u64| gen_op(args.seed, id, (id - next_op) % threads, threads);
        for op in report.acked.iter().flatten().map(|&id| gen(id)) {
            totals.range_deletes += u64::from(op.range.is_some());
            totals.cross_keyspace += u64::from(op.keyspaces() > 1);
        }
        totals.in_flight += report.in_flight.iter().flatten().count() as u64;
        next_op = report.next_op;
        totals.cycles += 1;
        if totals.cycles % 100 == 0 {
            eprintln!(
                "crash-test: {} cycles, {} acknowledged ops so far ({:.0} s)",
                totals.cycles,
                totals.acked,
                started.elapsed().as_secs_f64()
            );
        }
    }
    let live: Vec<String> = (0..KEYSPACES.len())
        .map(|ks| format!("{} {}", KEYSPACES[ks], model.keys().filter(|(s, _)| *s == ks).count()))
        .collect();
    println!(
        "crash-test: {} cycles, {} acknowledged ops ({} with a range delete, {} across \
         keyspaces), {} in flight at a kill ({} of them applied), {} kills before the first \
         ack, {} key checks, {} keys live ({}): OK",
        totals.cycles,
        totals.acked,
        totals.range_deletes,
        totals.cross_keyspace,
        totals.in_flight,
        totals.in_flight_applied,
        totals.killed_during_open,
        totals.keys_checked,
        model.len(),
        live.join(", ")
    );
    Ok(ExitCode::SUCCESS)
}

#[allow(clippy::too_many_arguments)]
fn run_child(
    exe: &Path,
    dir: &Path,
    seed: u64,
    start: u64,
    threads: u64,
    rng: &mut StdRng,
    max_delay_ms: u64,
    totals: &mut Totals,
) -> Result<Report, String> {
    let mut child = Command::new(exe)
        .arg("crash-worker")
        .arg("--dir")
        .arg(dir)
        .args(["--seed", &seed.to_string(), "--start-op", &start.to_string()])
        .args(["--threads", &threads.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("starting the worker: {e}"))?;
    let stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        // Only whole lines count: a kill can cut the last one short.
        let mut lines = Vec::new();
        let mut r = BufReader::new(stdout);
        let mut buf = String::new();
        while r.read_line(&mut buf).unwrap_or(0) > 0 {
            if buf.ends_with('\n') {
                lines.push(buf.trim_end().to_string());
            }
            buf.clear();
        }
        lines
    });
    // The kill moment is the point of the test: sometimes during recovery, mostly while
    // writes, flushes and compactions run.
    let delay = if rng.gen_bool(0.15) {
        rng.gen_range(0..15)
    } else {
        rng.gen_range(15..max_delay_ms.max(16))
    };
    std::thread::sleep(Duration::from_millis(delay));
    let _ = child.kill();
    let status = child.wait().map_err(|e| format!("waiting for the worker: {e}"))?;
    let lines = reader.join().map_err(|_| "reader thread panicked".to_string())?;
    if status.success() {
        // It finished all its ops before the kill: fine, everything is acknowledged.
    } else if status.code().is_some() {
        return Err(format!("the worker failed on its own: {status}"));
    }
    if lines.iter().all(|l| !l.starts_with('A')) {
        totals.killed_during_open += 1;
    }
    read_report(&lines, start, threads)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(acked: Vec<Vec<u64>>, in_flight: Vec<Option<u64>>) -> Report {
        Report { acked, in_flight, next_op: 4 }
    }

    fn open(dir: &Path) -> (Db, Vec<Keyspace>) {
        let db = Db::open(dir, options()).unwrap();
        let handles = open_keyspaces(&db).unwrap();
        (db, handles)
    }

    /// The report of one thread (of `threads`) with `acked` acknowledged and `in_flight`.
    fn one_thread(threads: u64, id: u64, acked: bool, in_flight: bool) -> Report {
        let t = (id % threads) as usize;
        let mut r = Report {
            acked: vec![Vec::new(); threads as usize],
            in_flight: vec![None; threads as usize],
            next_op: id + 1,
        };
        if acked {
            r.acked[t].push(id);
        }
        if in_flight {
            r.in_flight[t] = Some(id);
        }
        r
    }

    fn modelled(op: &Op) -> Model {
        let mut m = Model::new();
        apply(&mut m, op);
        m
    }

    /// The checker is the oracle of the crash test: it must reject a lost acknowledged
    /// write and a value nobody wrote, and accept an in-flight write either way.
    #[test]
    fn the_checker_catches_lost_and_invented_writes() {
        let tmp = tempfile::tempdir().unwrap();
        let (db, handles) = open(tmp.path());
        let (seed, threads) = (5, 2);
        for id in 0..3 {
            let op = gen_op(seed, id, id % threads, threads);
            db.write(&batch(&op, &handles), &WriteOptions::default()).unwrap();
        }
        let check_with =
            |r: &Report| check(&db, &Model::new(), r, seed, 0, threads, &mut Totals::default());
        // Op 3 acknowledged but absent.
        assert!(check_with(&report(vec![vec![0, 2], vec![1, 3]], vec![None, None])).is_err());
        // Op 3 in flight: absent is fine.
        assert!(check_with(&report(vec![vec![0, 2], vec![1]], vec![None, Some(3)])).is_ok());
        // Op 2 in flight: present is fine too.
        assert!(check_with(&report(vec![vec![0], vec![1]], vec![Some(2), None])).is_ok());
        // A value no op wrote, in any keyspace.
        for h in &handles {
            h.put(key(4), b"invented").unwrap();
            assert!(check_with(&report(vec![vec![0, 2], vec![1]], vec![None, None])).is_err());
            h.delete(key(4)).unwrap();
        }
        assert!(check_with(&report(vec![vec![0, 2], vec![1]], vec![None, None])).is_ok());
        // A well-formed value on a key no thread owns (7 threads own 7 * 428 = 2996 keys),
        // even one the model expects.
        handles[1].put(key(2999), value(1, 2999, 0)).unwrap();
        let r = Report { acked: vec![vec![]; 7], in_flight: vec![None; 7], next_op: 7 };
        let all: Model = read_all(&db).unwrap();
        assert!(check(&db, &all, &r, seed, 0, 7, &mut Totals::default()).is_err());
        handles[1].delete(key(2999)).unwrap();
        let all: Model = read_all(&db).unwrap();
        assert!(check(&db, &all, &r, seed, 0, 7, &mut Totals::default()).is_ok());
    }

    /// A range delete that was acknowledged must have removed its keys, and only its
    /// thread's and only in its keyspace.
    #[test]
    fn the_checker_knows_range_deletes() {
        let (seed, threads) = (9, 2);
        let ranged = (0..).find(|&id| gen_op(seed, id, id % threads, threads).range.is_some());
        let id = ranged.unwrap();
        let op = gen_op(seed, id, id % threads, threads);
        let (rks, a, z) = op.range.unwrap();
        assert!(owned(id % threads, threads).contains(&a) && z <= owned(id % threads, threads).end);
        let mut model = Model::new();
        for ks in 0..KEYSPACES.len() {
            for k in a.saturating_sub(3)..z + 3 {
                model.insert((ks, key(k)), value(ks, k, 0));
            }
        }
        let written = |range: Option<(usize, u64, u64)>| {
            let tmp = tempfile::tempdir().unwrap();
            let (db, handles) = open(tmp.path());
            for ((ks, k), v) in &model {
                handles[*ks].put(k, v).unwrap();
            }
            let op = Op { range, writes: op.writes.clone(), sync: false };
            db.write(&batch(&op, &handles), &WriteOptions::default()).unwrap();
            (tmp, db)
        };
        let r = one_thread(threads, id, true, false);
        let (_t, db) = written(op.range);
        assert!(check(&db, &model, &r, seed, 0, threads, &mut Totals::default()).is_ok());
        let (_t, db) = written(None);
        assert!(check(&db, &model, &r, seed, 0, threads, &mut Totals::default()).is_err());
        let elsewhere = Some(((rks + 1) % KEYSPACES.len(), a, z));
        let (_t, db) = written(elsewhere);
        assert!(check(&db, &model, &r, seed, 0, threads, &mut Totals::default()).is_err());
    }

    /// A batch spanning keyspaces is all or nothing: its writes to the extra keyspaces
    /// present and its default-keyspace writes missing is a violation, acknowledged or in
    /// flight.
    #[test]
    fn the_checker_wants_a_batch_whole_across_keyspaces() {
        let (seed, threads) = (3, 2);
        let without_default = |op: &Op| Op {
            range: None,
            writes: op.writes.iter().filter(|w| w.0 != 0).cloned().collect(),
            sync: false,
        };
        // An op whose part outside the default keyspace is neither nothing nor the whole.
        let id = (0..)
            .find(|&id| {
                let op = gen_op(seed, id, id % threads, threads);
                let part = modelled(&without_default(&op));
                op.range.is_none() && !part.is_empty() && part != modelled(&op)
            })
            .unwrap();
        let op = gen_op(seed, id, id % threads, threads);
        assert!(op.keyspaces() > 1);
        let tmp = tempfile::tempdir().unwrap();
        let (db, handles) = open(tmp.path());
        db.write(&batch(&without_default(&op), &handles), &WriteOptions::default()).unwrap();
        let check_with =
            |r: &Report| check(&db, &Model::new(), r, seed, 0, threads, &mut Totals::default());
        assert!(check_with(&one_thread(threads, id, true, false)).is_err());
        assert!(check_with(&one_thread(threads, id, false, true)).is_err());
        // The rest of the batch makes it whole.
        let rest = Op {
            range: None,
            writes: op.writes.iter().filter(|w| w.0 == 0).cloned().collect(),
            sync: false,
        };
        db.write(&batch(&rest, &handles), &WriteOptions::default()).unwrap();
        assert_eq!(read_all(&db).unwrap(), modelled(&op));
        assert!(check_with(&one_thread(threads, id, true, false)).is_ok());
        assert!(check_with(&one_thread(threads, id, false, true)).is_ok());
    }

    /// A write that lands in another keyspace than its own is a violation, whether its value
    /// still names its keyspace (a misrouted write) or was rewritten for the wrong one (only
    /// the model can tell).
    #[test]
    fn the_checker_finds_writes_in_the_wrong_keyspace() {
        let (seed, threads) = (4, 2);
        let id = (0..)
            .find(|&id| {
                let op = gen_op(seed, id, id % threads, threads);
                op.range.is_none() && op.writes.iter().any(|w| w.0 == 1 && w.2.is_some())
            })
            .unwrap();
        let op = gen_op(seed, id, id % threads, threads);
        let swap = |ks: usize| [0, 2, 1][ks];
        let r = one_thread(threads, id, true, false);
        for retag in [false, true] {
            let moved = Op {
                range: None,
                writes: op
                    .writes
                    .iter()
                    .map(|(ks, k, v)| {
                        let v = v.as_ref().map(|v| {
                            if retag {
                                value(swap(*ks), *k, id)
                            } else {
                                v.clone()
                            }
                        });
                        (swap(*ks), *k, v)
                    })
                    .collect(),
                sync: false,
            };
            let tmp = tempfile::tempdir().unwrap();
            let (db, handles) = open(tmp.path());
            db.write(&batch(&moved, &handles), &WriteOptions::default()).unwrap();
            let got = check(&db, &Model::new(), &r, seed, 0, threads, &mut Totals::default());
            assert!(got.is_err(), "retag {retag}");
        }
    }

    #[test]
    fn reports_parse_whole_lines_only() {
        let lines: Vec<String> =
            ["S 10", "A 10", "S 11", "S 12", "A 12"].iter().map(|s| s.to_string()).collect();
        let r = read_report(&lines, 10, 2).unwrap();
        assert_eq!(r.acked, vec![vec![10, 12], vec![]]);
        assert_eq!(r.in_flight, vec![None, Some(11)]);
        assert_eq!(r.next_op, 14);
        assert!(read_report(&["A 10".to_string()], 10, 2).is_err());
    }
}
