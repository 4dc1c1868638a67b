//! `bloomkv crash-test`: kills a writing process with SIGKILL at random moments and checks
//! that the database it leaves behind holds exactly what was acknowledged.
//!
//! The parent runs cycles. Each cycle starts a child (`bloomkv crash-worker`, hidden) on the
//! same database directory. The child opens the database (recovering whatever the previous
//! child left) with small memtables, so flushes and compactions run all the time, and writes
//! from several threads: puts, deletes, range deletes and multi-key batches, some with
//! `sync: true`. Every
//! operation is derived from `(seed, op id)`, so the parent can regenerate it; the child
//! prints `S <id>` before submitting an operation and `A <id>` after it is acknowledged,
//! flushing stdout each time. After a random delay the parent kills the child (SIGKILL, via
//! `Child::kill`), opens the database itself and checks it:
//!
//! - Each writer thread owns one contiguous block of the key space, so per key the order of
//!   operations is that thread's order, and a thread's range deletes (inside its block) touch
//!   only its keys. For each thread, the recovered state of its keys must
//!   be the model after all its acknowledged operations, or that plus its one operation in
//!   flight — applied whole (a batch is all or nothing). A process kill loses nothing that
//!   was acknowledged, synced or not: acknowledged writes have reached the operating system.
//! - No key outside the key space and no value that no operation wrote may appear.
//! - Point reads agree with the scan.
//!
//! The recovered state becomes the model for the next cycle, so recovered databases are
//! recovered again, including when a kill lands in the middle of recovery.
//!
//! Long run (documented in `reliability-readme.md`):
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

use bloomkv::{Db, Options, WriteBatch, WriteOptions};
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

/// Distinct keys; key `k` belongs to thread `k % threads`.
const KEYS: u64 = 3000;

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

fn key(k: u64) -> Vec<u8> {
    format!("key{k:06}").into_bytes()
}

fn value(k: u64, op: u64) -> Vec<u8> {
    let mut v = format!("{k}|{op}|").into_bytes();
    v.resize(v.len() + ((op * 31 + k) % 160) as usize, b'v');
    v
}

/// Parses a value back into (key, op id), checking its padding.
fn parse_value(v: &[u8]) -> Option<(u64, u64)> {
    let s = std::str::from_utf8(v).ok()?;
    let mut parts = s.splitn(3, '|');
    let k = parts.next()?.parse().ok()?;
    let op = parts.next()?.parse().ok()?;
    (value(k, op) == v).then_some((k, op))
}

/// One operation, applied as one batch: a range delete of keys `a..b` if any, then the
/// (key, Some(value) = put / None = delete) pairs (a put after the range delete in the batch
/// is not covered by it).
struct Op {
    range: Option<(u64, u64)>,
    writes: Vec<(u64, Option<Vec<u8>>)>,
    sync: bool,
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
        let a = rng.gen_range(mine.clone());
        (a, (a + rng.gen_range(1..60)).min(mine.end))
    });
    let writes = (0..n)
        .map(|_| {
            let k = rng.gen_range(mine.clone());
            (k, if rng.gen_bool(0.8) { Some(value(k, op)) } else { None })
        })
        .collect();
    Op { range, writes, sync: rng.gen_bool(0.25) }
}

fn batch(op: &Op) -> WriteBatch {
    let mut b = WriteBatch::new();
    if let Some((a, z)) = op.range {
        b.delete_range(key(a)..key(z));
    }
    for (k, v) in &op.writes {
        match v {
            Some(v) => b.put(key(*k), v),
            None => b.delete(key(*k)),
        }
    }
    b
}

/// The child: open (recovering), then write until killed.
pub fn worker(args: &WorkerArgs) -> Result<ExitCode, bloomkv::Error> {
    let db = Db::open(&args.dir, options())?;
    let out = Arc::new(std::sync::Mutex::new(std::io::stdout()));
    let failed = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..args.threads {
            let (db, out, failed) = (&db, out.clone(), &failed);
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
                    match db.write(&batch(&op), &WriteOptions::new().sync(op.sync)) {
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

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn apply(model: &mut Model, op: &Op) {
    if let Some((a, z)) = op.range {
        for k in a..z {
            model.remove(&key(k));
        }
    }
    for (k, v) in &op.writes {
        match v {
            Some(v) => model.insert(key(*k), v.clone()),
            None => model.remove(&key(*k)),
        };
    }
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
    let got: Model = db
        .range(..)
        .map(|r| r.map(|(k, v)| (k, v.to_vec())))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("scan failed: {}", crate::common::chain(&e)))?;
    for (k, v) in &got {
        let (vk, _) = parse_value(v).ok_or_else(|| {
            format!("key {:?} holds a value no op wrote", String::from_utf8_lossy(k))
        })?;
        if key(vk) != *k {
            return Err(format!(
                "key {:?} holds the value of key {vk}",
                String::from_utf8_lossy(k)
            ));
        }
    }
    let gen = |id: u64| gen_op(seed, id, (id - start) % threads, threads);
    for t in 0..threads {
        let mine = |k: &Vec<u8>| -> bool {
            let n: u64 =
                std::str::from_utf8(&k[3..]).ok().and_then(|s| s.parse().ok()).unwrap_or(u64::MAX);
            owned(t, threads).contains(&n)
        };
        let restrict = |m: &Model| -> Model {
            m.iter().filter(|(k, _)| mine(k)).map(|(k, v)| (k.clone(), v.clone())).collect()
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
                let show = |v: Option<&Vec<u8>>| v.and_then(|v| parse_value(v)).map(|(_, op)| op);
                format!(
                    "{}: expected op {:?}, found op {:?}",
                    String::from_utf8_lossy(k),
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
    for (k, v) in got.iter().step_by(7) {
        let g = db.get(k).map_err(|e| format!("get failed: {}", crate::common::chain(&e)))?;
        if g.as_deref() != Some(&v[..]) {
            return Err(format!("get({}) disagrees with the scan", String::from_utf8_lossy(k)));
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
        totals.range_deletes +=
            report.acked.iter().flatten().filter(|&&id| gen(id).range.is_some()).count() as u64;
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
    println!(
        "crash-test: {} cycles, {} acknowledged ops ({} with a range delete), {} in flight at a \
         kill ({} of them applied), {} kills before the first ack, {} key checks, {} keys live: OK",
        totals.cycles,
        totals.acked,
        totals.range_deletes,
        totals.in_flight,
        totals.in_flight_applied,
        totals.killed_during_open,
        totals.keys_checked,
        model.len()
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

    /// The checker is the oracle of the crash test: it must reject a lost acknowledged
    /// write and a value nobody wrote, and accept an in-flight write either way.
    #[test]
    fn the_checker_catches_lost_and_invented_writes() {
        let tmp = tempfile::tempdir().unwrap();
        let db = Db::open(tmp.path(), options()).unwrap();
        let (seed, threads) = (5, 2);
        for id in 0..3 {
            db.write(&batch(&gen_op(seed, id, id % threads, threads)), &WriteOptions::default())
                .unwrap();
        }
        let check_with =
            |r: &Report| check(&db, &Model::new(), r, seed, 0, threads, &mut Totals::default());
        // Op 3 acknowledged but absent.
        assert!(check_with(&report(vec![vec![0, 2], vec![1, 3]], vec![None, None])).is_err());
        // Op 3 in flight: absent is fine.
        assert!(check_with(&report(vec![vec![0, 2], vec![1]], vec![None, Some(3)])).is_ok());
        // Op 2 in flight: present is fine too.
        assert!(check_with(&report(vec![vec![0], vec![1]], vec![Some(2), None])).is_ok());
        // A value no op wrote.
        db.put(key(4), b"invented").unwrap();
        assert!(check_with(&report(vec![vec![0, 2], vec![1]], vec![None, None])).is_err());
    }

    /// A range delete that was acknowledged must have removed its keys, and only its
    /// thread's.
    #[test]
    fn the_checker_knows_range_deletes() {
        let (seed, threads) = (9, 2);
        let ranged = (0..).find(|&id| gen_op(seed, id, id % threads, threads).range.is_some());
        let id = ranged.unwrap();
        let op = gen_op(seed, id, id % threads, threads);
        let (a, z) = op.range.unwrap();
        assert!(owned(id % threads, threads).contains(&a) && z <= owned(id % threads, threads).end);
        let mut model = Model::new();
        for k in a.saturating_sub(3)..z + 3 {
            model.insert(key(k), value(k, 0));
        }
        let written = |with_range: bool| {
            let tmp = tempfile::tempdir().unwrap();
            let db = Db::open(tmp.path(), options()).unwrap();
            for (k, v) in &model {
                db.put(k, v).unwrap();
            }
            let mut b = batch(&op);
            if !with_range {
                b = batch(&Op { range: None, writes: op.writes.clone(), sync: false });
            }
            db.write(&b, &WriteOptions::default()).unwrap();
            (tmp, db)
        };
        let mut acked = vec![Vec::new(); threads as usize];
        acked[(id % threads) as usize].push(id);
        let r = Report { acked, in_flight: vec![None; threads as usize], next_op: id + 1 };
        let (_t, db) = written(true);
        assert!(check(&db, &model, &r, seed, 0, threads, &mut Totals::default()).is_ok());
        let (_t, db) = written(false);
        assert!(check(&db, &model, &r, seed, 0, threads, &mut Totals::default()).is_err());
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
