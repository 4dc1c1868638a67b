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
//! With `--blobs` every keyspace separates values (about half of those written) into blob
//! files and collects their garbage eagerly, so kills land in relocations too; now and then
//! an op puts a value over `MAX_VALUE_BYTES` (streamed to a file of its own) or is a batch
//! holding one, which must be refused (`R <id>`) and never appear; and writer 0 runs
//! `Db::compact` and checkpoints between its ops. After each kill the database is also
//! closed and verified as `bloomkv verify` does (clean, and no table or blob file the
//! manifest does not name), and the newest finished checkpoint is opened, checked to hold
//! each thread's state after some prefix of its ops no shorter than what was acknowledged
//! when it began, and verified.
//!
//! Long run (documented in `docs/reliability.md`):
//!
//! ```text
//! cargo run --release -p bloomkv-tools -- crash-test --cycles 2000 --seconds 3600 \
//!     --dir /tmp/bloomkv-crash --seed 1 [--blobs]
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
    WriteBatch, WriteOptions, MAX_VALUE_BYTES,
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
    /// Large values: every keyspace separates values into blob files and collects their
    /// garbage eagerly; the writers also put values over `MAX_VALUE_BYTES` and try batches
    /// the engine must refuse, and one of them compacts and checkpoints the database now and
    /// then. Each reopen is also verified (`bloomkv verify`), as is each finished checkpoint.
    #[arg(long)]
    blobs: bool,
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
    /// The workload of `crash-test --blobs`.
    #[arg(long)]
    blobs: bool,
    /// Where the checkpoints of `--blobs` go, one directory per checkpoint.
    #[arg(long)]
    checkpoints: Option<PathBuf>,
}

/// Distinct keys per keyspace; see [`owned`] for which thread writes which.
const KEYS: u64 = 3000;

/// The keyspaces written, by index: an op names a keyspace by its index here.
const KEYSPACES: [&str; 3] = ["default", "ks1", "ks2"];

/// With `--blobs`, values of at least this many bytes go to blob files (in `ks2`, four times
/// this), so that about half the values written are separated.
const BLOB_THRESHOLD: usize = 200;

/// With `--blobs`, the chance that an op puts a value over `MAX_VALUE_BYTES`, and the
/// chance that it is a batch holding one (which the engine refuses). Rare: each such value
/// is a file of its own of over 16 MiB, and the run's disk use must stay bounded.
const BIG_PUT_CHANCE: f64 = 1.0 / 1500.0;
const REFUSED_CHANCE: f64 = 1.0 / 3000.0;

/// With `--blobs`, thread 0 compacts the database every this many of its ops, and makes a
/// checkpoint every `CHECKPOINT_EVERY` (both offset so as not to coincide).
const COMPACT_EVERY: u64 = 80;
const CHECKPOINT_EVERY: u64 = 50;

fn options(blobs: bool) -> Options {
    let opts = Options::default()
        .memtable_bytes(16 << 10)
        .block_bytes(512)
        .target_table_bytes(16 << 10)
        .level_base_bytes(64 << 10)
        .l0_compaction_trigger(2)
        .l0_slowdown_trigger(4)
        .l0_stop_trigger(8);
    if !blobs {
        return opts;
    }
    // Every file holding garbage is eligible for collection, and collected as soon as a
    // fifth of it is garbage, so that relocations run all the time.
    opts.memtable_bytes(64 << 10)
        .blob_threshold(Some(BLOB_THRESHOLD))
        .blob_gc_age_cutoff(1.0)
        .blob_gc_force_threshold(0.2)
}

/// The options of the extra keyspaces. They differ from the default keyspace's (and from
/// each other) so that tables of every filter and compression kind are flushed and compacted
/// side by side, leveled, lazily leveled and tiered; the sizes stay as small as `options()`'s so that they flush and compact as
/// often.
fn keyspace_options(ks: usize, blobs: bool) -> KeyspaceOptions {
    let small = KeyspaceOptions::new().block_bytes(512).target_table_bytes(16 << 10);
    let opts = match ks {
        1 => small
            .filter_policy(FilterPolicy::ClassicBloom { bits_per_key: 10.0 })
            .compaction_style(CompactionStyle::LazyLeveling),
        _ => small
            .compression(Compression::Zstd { level: 1 })
            .compaction_style(CompactionStyle::Tiered),
    };
    if !blobs {
        return opts;
    }
    // `ks1` collects as the default keyspace does; `ks2` separates fewer values and
    // collects only its older half of files, so that files of every age stay around.
    match ks {
        1 => opts
            .blob_threshold(Some(BLOB_THRESHOLD))
            .blob_gc_age_cutoff(1.0)
            .blob_gc_force_threshold(0.2),
        _ => opts
            .blob_threshold(Some(BLOB_THRESHOLD * 4))
            .blob_gc_age_cutoff(0.5)
            .blob_gc_force_threshold(0.5),
    }
}

/// Handles on the keyspaces of `KEYSPACES`, in order, creating the missing ones.
fn open_keyspaces(db: &Db, blobs: bool) -> Result<Vec<Keyspace>, bloomkv::Error> {
    let default = db.existing_keyspace(KEYSPACES[0]).expect("the default keyspace always exists");
    let mut handles = vec![default];
    for (ks, name) in KEYSPACES.iter().enumerate().skip(1) {
        handles.push(db.keyspace(name, keyspace_options(ks, blobs))?);
    }
    Ok(handles)
}

fn key(k: u64) -> Vec<u8> {
    format!("key{k:06}").into_bytes()
}

/// The value op `op` writes to key `k` of keyspace `ks`, `len` bytes (or its header's, if
/// more): naming the keyspace lets the checker tell a write that landed in the wrong
/// keyspace from one that was lost, and the padding, which depends on the op, a value cut
/// short or spliced from two.
fn value(ks: usize, k: u64, op: u64, len: usize) -> Vec<u8> {
    let mut v = format!("{ks}|{k}|{op}|{len}|").into_bytes();
    let header = v.len();
    v.extend((header..len.max(header)).map(|i| b'a' + ((i as u64 + op) % 26) as u8));
    v
}

/// Values longer than this are held by the checker's models as their header and a `#`
/// (see [`held`]), once checked in full.
const HELD_WHOLE_BYTES: usize = 1 << 20;

/// Parses a value, or its [`held`] form, back into (keyspace, key, op id), checking its
/// padding.
fn parse_value(v: &[u8]) -> Option<(usize, u64, u64)> {
    let s = std::str::from_utf8(v.get(..v.len().min(64))?).ok()?;
    let mut parts = s.splitn(5, '|');
    let ks = parts.next()?.parse().ok()?;
    let k = parts.next()?.parse().ok()?;
    let op = parts.next()?.parse().ok()?;
    let len: usize = parts.next()?.parse().ok()?;
    if len > HELD_WHOLE_BYTES && parts.next() == Some("#") {
        return Some((ks, k, op));
    }
    (value(ks, k, op, len) == v).then_some((ks, k, op))
}

/// What a model holds for the value `v`: `v` itself, or for a well-formed value over
/// `HELD_WHOLE_BYTES` its header and a `#`, so that models of values over `MAX_VALUE_BYTES`
/// stay small. A malformed value is held whole, for the checks to refuse.
fn held(v: &[u8]) -> Vec<u8> {
    if v.len() <= HELD_WHOLE_BYTES || parse_value(v).is_none() {
        return v.to_vec();
    }
    let header = v.iter().enumerate().filter(|(_, &b)| b == b'|').nth(3).map_or(0, |(i, _)| i);
    let mut h = v[..=header].to_vec();
    h.push(b'#');
    h
}

/// One operation, applied as one batch: a range delete of keys `a..b` in keyspace `ks` if
/// any, then the (keyspace, key, Some(value) = put / None = delete) triples (a put after the
/// range delete in the batch is not covered by it). A `refused` op is one the engine must
/// refuse whole (it holds a value over `MAX_VALUE_BYTES` in a batch): it never applies.
struct Op {
    range: Option<(usize, u64, u64)>,
    writes: Vec<(usize, u64, Option<Vec<u8>>)>,
    sync: bool,
    refused: bool,
}

impl Op {
    /// How many keyspaces the op writes to.
    fn keyspaces(&self) -> usize {
        let touched = self.range.iter().map(|r| r.0).chain(self.writes.iter().map(|w| w.0));
        touched.collect::<std::collections::BTreeSet<_>>().len()
    }

    /// Whether the op is a single put of a value over `MAX_VALUE_BYTES`: written with
    /// `put`, which streams it to a blob file, not as a batch.
    fn big_put(&self) -> bool {
        self.range.is_none()
            && !self.refused
            && matches!(&self.writes[..], [(_, _, Some(v))] if v.len() > MAX_VALUE_BYTES)
    }

    /// The (keyspace, key)s the op writes, range deletes included.
    fn touched(&self) -> Vec<(usize, Vec<u8>)> {
        let range = self.range.iter().flat_map(|&(ks, a, z)| (a..z).map(move |k| (ks, key(k))));
        range.chain(self.writes.iter().map(|(ks, k, _)| (*ks, key(*k)))).collect()
    }
}

/// The keys thread `thread` of `threads` owns: one contiguous block.
fn owned(thread: u64, threads: u64) -> std::ops::Range<u64> {
    let per_thread = KEYS / threads;
    thread * per_thread..(thread + 1) * per_thread
}

/// The operation with id `op`, written by thread `op % threads` relative to `start`; it
/// touches only keys of `thread`. With `blobs`, about half the values are separated, and
/// now and then an op puts a value over `MAX_VALUE_BYTES` into the default keyspace (always
/// to the thread's first key, so that at most one such value per thread is live and the
/// disk they take stays bounded) or is a batch holding one, which must be refused.
fn gen_op(seed: u64, op: u64, thread: u64, threads: u64, blobs: bool) -> Op {
    let mut rng = StdRng::seed_from_u64(seed ^ op.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mine = owned(thread, threads);
    if blobs {
        let big = rng.gen_range(MAX_VALUE_BYTES + 1..MAX_VALUE_BYTES + (1 << 20));
        if rng.gen_bool(BIG_PUT_CHANCE) {
            let v = value(0, mine.start, op, big);
            return Op {
                range: None,
                writes: vec![(0, mine.start, Some(v))],
                sync: false,
                refused: false,
            };
        }
        if rng.gen_bool(REFUSED_CHANCE) {
            let k = rng.gen_range(mine.clone());
            let writes = vec![
                (1, k, Some(value(1, k, op, 100))),
                (0, mine.start, Some(value(0, mine.start, op, big))),
            ];
            return Op { range: None, writes, sync: false, refused: true };
        }
    }
    let n = if rng.gen_bool(0.2) { rng.gen_range(2..8) } else { 1 };
    let range = rng.gen_bool(0.03).then(|| {
        let ks = rng.gen_range(0..KEYSPACES.len());
        let a = rng.gen_range(mine.clone());
        (ks, a, (a + rng.gen_range(1..60)).min(mine.end))
    });
    let writes = (0..n)
        .map(|_| {
            let ks = rng.gen_range(0..KEYSPACES.len());
            let k = rng.gen_range(mine.clone());
            let len = if blobs && rng.gen_bool(0.5) {
                rng.gen_range(BLOB_THRESHOLD..4000)
            } else {
                16 + ((op * 31 + k) % 160) as usize
            };
            (ks, k, if rng.gen_bool(0.8) { Some(value(ks, k, op, len)) } else { None })
        })
        .collect();
    Op { range, writes, sync: rng.gen_bool(0.25), refused: false }
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

/// Writes `op`: a put of a value over `MAX_VALUE_BYTES` as a single put, anything else as
/// one batch.
fn write_op(db: &Db, handles: &[Keyspace], op: &Op) -> Result<(), bloomkv::Error> {
    if op.big_put() {
        let (ks, k, v) = &op.writes[0];
        return handles[*ks].put(key(*k), v.as_deref().unwrap_or_default());
    }
    db.write(&batch(op, handles), &WriteOptions::new().sync(op.sync))
}

/// The child: open (recovering), then write until killed.
pub fn worker(args: &WorkerArgs) -> Result<ExitCode, bloomkv::Error> {
    let db = Db::open(&args.dir, options(args.blobs))?;
    let handles = open_keyspaces(&db, args.blobs)?;
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
                let fail = |what: String| {
                    eprintln!("crash-worker: {what}");
                    failed.store(1, Ordering::Relaxed);
                };
                for i in 0..args.ops_per_thread {
                    if t == 0 && args.blobs {
                        if let Err(e) = maintain(db, i, args.checkpoints.as_deref(), &say) {
                            return fail(format!(
                                "maintenance failed: {}",
                                crate::common::chain(&e)
                            ));
                        }
                    }
                    let id = args.start_op + t + i * args.threads;
                    let op = gen_op(args.seed, id, t, args.threads, args.blobs);
                    say('S', id);
                    match (write_op(db, handles, &op), op.refused) {
                        (Ok(()), false) => say('A', id),
                        (Err(bloomkv::Error::ValueTooLarge { .. }), true) => say('R', id),
                        (Ok(()), true) => {
                            return fail(format!("write {id} should have been refused"));
                        }
                        (Err(e), _) => {
                            return fail(format!(
                                "write {id} failed: {}",
                                crate::common::chain(&e)
                            ));
                        }
                    }
                }
            });
        }
    });
    db.close()?;
    Ok(if failed.load(Ordering::Relaxed) == 0 { ExitCode::SUCCESS } else { ExitCode::from(3) })
}

/// The maintenance thread 0 does before its `i`-th op with `--blobs`: now and then a full
/// compaction (`P` when done: every file holding garbage collected) or a checkpoint into
/// `checkpoints/<i>` (`C <i>` before it starts, `K <i>` once it returned; the one before is
/// then removed, so that one or two are on disk at a time).
fn maintain(
    db: &Db,
    i: u64,
    checkpoints: Option<&Path>,
    say: &dyn Fn(char, u64),
) -> Result<(), bloomkv::Error> {
    if i % COMPACT_EVERY == COMPACT_EVERY - 1 {
        db.compact()?;
        say('P', i);
    }
    let Some(root) = checkpoints else { return Ok(()) };
    if i % CHECKPOINT_EVERY == CHECKPOINT_EVERY / 2 {
        say('C', i);
        db.checkpoint(root.join(i.to_string()))?;
        say('K', i);
        if let Some(before) = i.checked_sub(CHECKPOINT_EVERY) {
            let _ = std::fs::remove_dir_all(root.join(before.to_string()));
        }
    }
    Ok(())
}

/// The database's contents: (keyspace index, key) to value ([`held`]).
type Model = BTreeMap<(usize, Vec<u8>), Vec<u8>>;

fn apply(model: &mut Model, op: &Op) {
    if op.refused {
        return;
    }
    if let Some((ks, a, z)) = op.range {
        for k in a..z {
            model.remove(&(ks, key(k)));
        }
    }
    for (ks, k, v) in &op.writes {
        match v {
            Some(v) => model.insert((*ks, key(*k)), held(v)),
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
            got.insert((ks, k), held(&v));
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
    /// Ops refused as they should be (`R`).
    refused: u64,
    /// Full compactions done (`P`).
    compactions: u64,
    /// The newest checkpoint that returned (`K`), if any.
    checkpoint: Option<Checkpoint>,
}

/// A finished checkpoint: its directory's name, and per thread how many ops had been
/// acknowledged when it began (`C`): each thread's keys in it must be the state after at
/// least those.
#[derive(Clone, Debug, PartialEq)]
struct Checkpoint {
    name: u64,
    acked_before: Vec<usize>,
}

fn read_report(lines: &[String], start: u64, threads: u64) -> Result<Report, String> {
    let mut r = Report {
        acked: vec![Vec::new(); threads as usize],
        in_flight: vec![None; threads as usize],
        next_op: start,
        ..Report::default()
    };
    let mut begun: Option<Checkpoint> = None;
    for line in lines {
        let (tag, id) = line.split_once(' ').ok_or_else(|| format!("bad line {line:?}"))?;
        let id: u64 = id.parse().map_err(|_| format!("bad line {line:?}"))?;
        // Maintenance, numbered by thread 0's op count rather than by op id.
        match tag {
            "P" => {
                r.compactions += 1;
                continue;
            }
            "C" => {
                let acked_before = r.acked.iter().map(Vec::len).collect();
                begun = Some(Checkpoint { name: id, acked_before });
                continue;
            }
            "K" => {
                match begun.take() {
                    Some(c) if c.name == id => r.checkpoint = Some(c),
                    _ => return Err(format!("checkpoint {id} ended but never began")),
                }
                continue;
            }
            _ => {}
        }
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
            "A" | "R" => {
                if r.in_flight[t] != Some(id) {
                    return Err(format!("ack of {id} that was not in flight"));
                }
                r.in_flight[t] = None;
                if tag == "A" {
                    r.acked[t].push(id);
                } else {
                    r.refused += 1;
                }
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
    big_puts: u64,
    refused: u64,
    compactions: u64,
    checkpoints: u64,
    verified: u64,
}

/// What a cycle's checks need to know besides the databases: how its ops are generated.
struct Cycle {
    seed: u64,
    /// The first op id of the cycle's child.
    start: u64,
    threads: u64,
    blobs: bool,
}

impl Cycle {
    /// The op with id `id` of this cycle.
    fn op(&self, id: u64) -> Op {
        gen_op(self.seed, id, (id - self.start) % self.threads, self.threads, self.blobs)
    }
}

fn show_key(ks: usize, k: &[u8]) -> String {
    format!("{}/{}", KEYSPACES[ks], String::from_utf8_lossy(k))
}

fn key_number(k: &[u8]) -> Option<u64> {
    k.strip_prefix(b"key").and_then(|n| std::str::from_utf8(n).ok()?.parse().ok())
}

/// `m`'s entries on the keys of thread `t`, in every keyspace at once.
fn restrict(m: &Model, t: u64, threads: u64) -> Model {
    let mine = |k: &[u8]| key_number(k).is_some_and(|n| owned(t, threads).contains(&n));
    m.iter().filter(|((_, k), _)| mine(k)).map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// Every value in `got` is one some op wrote, to its key, in its keyspace, on a key some
/// thread owns.
fn check_values(got: &Model, threads: u64) -> Result<(), String> {
    for ((ks, k), v) in got {
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
        // Keys no thread owns are never written; the per-thread comparison would not look
        // at them.
        if key_number(k).is_none_or(|n| n >= owned(threads - 1, threads).end) {
            return Err(format!("key {} is outside every thread's block", show_key(*ks, k)));
        }
    }
    Ok(())
}

/// Checks the reopened database against `model` plus the child's report; returns the new
/// model (the recovered state).
fn check(
    db: &Db,
    model: &Model,
    report: &Report,
    cycle: &Cycle,
    totals: &mut Totals,
) -> Result<Model, String> {
    let got = read_all(db)?;
    let threads = cycle.threads;
    check_values(&got, threads)?;
    for t in 0..threads {
        // The thread's block in every keyspace at once, so that an op applied in some
        // keyspaces and not in others matches neither of the states allowed below.
        let mut expect = restrict(model, t, threads);
        for &id in &report.acked[t as usize] {
            apply(&mut expect, &cycle.op(id));
        }
        let actual = restrict(&got, t, threads);
        totals.keys_checked += expect.len() as u64;
        if actual == expect {
            continue;
        }
        if let Some(id) = report.in_flight[t as usize] {
            let mut with = expect.clone();
            apply(&mut with, &cycle.op(id));
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
        if g.map(|g| held(&g)).as_ref() != Some(v) {
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
            if f.map(|f| held(&f)).as_ref() != Some(w) {
                return Err(format!("multi_get({}) disagrees with the scan", show_key(ks, k)));
            }
        }
    }
    Ok(got)
}

/// Checks a checkpoint the child finished, opened as `db`: a snapshot, so each thread's
/// keys hold the state after some prefix of its ops at least as long as what it had
/// acknowledged when the checkpoint began (`model`: the state the cycle started from).
fn check_checkpoint(
    db: &Db,
    model: &Model,
    report: &Report,
    checkpoint: &Checkpoint,
    cycle: &Cycle,
) -> Result<(), String> {
    let got = read_all(db)?;
    check_values(&got, cycle.threads)?;
    for t in 0..cycle.threads {
        let mut ops: Vec<u64> = report.acked[t as usize].clone();
        ops.extend(report.in_flight[t as usize]);
        let ops: Vec<Op> = ops.into_iter().map(|id| cycle.op(id)).collect();
        let (start, actual) = (restrict(model, t, cycle.threads), restrict(&got, t, cycle.threads));
        if !matches_a_prefix(start, &actual, &ops, checkpoint.acked_before[t as usize]) {
            return Err(format!(
                "checkpoint {}: thread {t}'s keys are not the state after any prefix of its \
                 ops from the {} acknowledged when it began",
                checkpoint.name, checkpoint.acked_before[t as usize]
            ));
        }
    }
    Ok(())
}

/// Whether `actual` is `start` with the first `n` of `ops` applied, for some `n >= min`.
/// Only the keys an op touches can change whether the two agree, so the keys where they
/// differ are kept as a set and updated op by op.
fn matches_a_prefix(mut expect: Model, actual: &Model, ops: &[Op], min: usize) -> bool {
    let mut differ: std::collections::BTreeSet<(usize, Vec<u8>)> = expect
        .keys()
        .chain(actual.keys())
        .filter(|k| expect.get(*k) != actual.get(*k))
        .cloned()
        .collect();
    for (n, op) in ops.iter().enumerate() {
        if n >= min && differ.is_empty() {
            return true;
        }
        apply(&mut expect, op);
        for k in op.touched() {
            if expect.get(&k) == actual.get(&k) {
                differ.remove(&k);
            } else {
                differ.insert(k);
            }
        }
    }
    ops.len() >= min && differ.is_empty()
}

/// `bloomkv verify` of the closed database (or checkpoint) in `dir`: clean, and no table or
/// blob file left that the manifest does not name (an open removes those).
fn verify(dir: &Path) -> Result<(), String> {
    let r = bloomkv::check::database(Arc::new(bloomkv::fs::StdFs), dir);
    let show =
        |f: &bloomkv::check::Finding| format!("{} @ {:?}: {}", f.file.display(), f.offset, f.what);
    if r.status() != bloomkv::check::Status::Ok {
        let found: Vec<String> = r.problems.iter().chain(&r.errors).map(show).collect();
        return Err(format!("verify of {}: {}", dir.display(), found.join("; ")));
    }
    let orphans: Vec<String> =
        r.notes.iter().filter(|n| n.what.contains("not in the manifest")).map(show).collect();
    if !orphans.is_empty() {
        return Err(format!("verify of {}: {}", dir.display(), orphans.join("; ")));
    }
    Ok(())
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
    // Beside the database, not in it: a checkpoint inside its database is refused.
    let checkpoints = args.blobs.then(|| {
        let mut name = args.dir.file_name().unwrap_or_default().to_os_string();
        name.push(".checkpoints");
        args.dir.with_file_name(name)
    });
    let exe =
        std::env::current_exe().map_err(|e| bloomkv::Error::io("finding the executable", e))?;
    let mut rng = StdRng::seed_from_u64(args.seed);
    let started = Instant::now();
    let mut model = Model::new();
    let mut next_op = 0u64;
    let mut totals = Totals::default();
    while totals.cycles < args.cycles && started.elapsed() < Duration::from_secs(args.seconds) {
        let cycle = totals.cycles;
        let child = Child {
            exe: &exe,
            dir: &args.dir,
            checkpoints: checkpoints.as_deref(),
            seed: args.seed,
            start: next_op,
            threads,
            blobs: args.blobs,
        };
        let report = match run_child(&child, &mut rng, args.max_delay_ms, &mut totals) {
            Ok(r) => r,
            Err(msg) => {
                eprintln!("crash-test: cycle {cycle}: {msg}");
                return Ok(ExitCode::FAILURE);
            }
        };
        let c = Cycle { seed: args.seed, start: next_op, threads, blobs: args.blobs };
        match check_cycle(args, checkpoints.as_deref(), &model, &report, &c, &mut totals) {
            Ok(m) => model = m,
            Err(msg) => {
                eprintln!(
                    "crash-test: cycle {cycle} (ops from {next_op}, seed {}): {msg}",
                    args.seed
                );
                return Ok(ExitCode::FAILURE);
            }
        }
        totals.acked += report.acked.iter().map(|a| a.len() as u64).sum::<u64>();
        for op in report.acked.iter().flatten().map(|&id| c.op(id)) {
            totals.range_deletes += u64::from(op.range.is_some());
            totals.cross_keyspace += u64::from(op.keyspaces() > 1);
            totals.big_puts += u64::from(op.big_put());
        }
        totals.in_flight += report.in_flight.iter().flatten().count() as u64;
        totals.refused += report.refused;
        totals.compactions += report.compactions;
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
    if let Some(root) = &checkpoints {
        let _ = std::fs::remove_dir_all(root);
    }
    let live: Vec<String> = (0..KEYSPACES.len())
        .map(|ks| format!("{} {}", KEYSPACES[ks], model.keys().filter(|(s, _)| *s == ks).count()))
        .collect();
    let blobs = if args.blobs {
        format!(
            ", {} puts over MAX_VALUE_BYTES, {} batches refused, {} full compactions, {} \
             checkpoints checked, {} clean verifies",
            totals.big_puts,
            totals.refused,
            totals.compactions,
            totals.checkpoints,
            totals.verified
        )
    } else {
        String::new()
    };
    println!(
        "crash-test: {} cycles, {} acknowledged ops ({} with a range delete, {} across \
         keyspaces), {} in flight at a kill ({} of them applied), {} kills before the first \
         ack, {} key checks, {} keys live ({}){blobs}: OK",
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

/// After a kill: reopens the database and checks it against `model` and the report, closes
/// it and (with `--blobs`) verifies it, then checks the newest finished checkpoint and
/// removes every checkpoint. Returns the recovered state.
fn check_cycle(
    args: &Args,
    checkpoints: Option<&Path>,
    model: &Model,
    report: &Report,
    cycle: &Cycle,
    totals: &mut Totals,
) -> Result<Model, String> {
    let chain = |e: bloomkv::Error| crate::common::chain(&e);
    let db = Db::open(&args.dir, options(args.blobs))
        .map_err(|e| format!("reopening after the kill failed: {}", chain(e)))?;
    let got = check(&db, model, report, cycle, totals)?;
    db.close().map_err(|e| format!("closing failed: {}", chain(e)))?;
    drop(db);
    if !args.blobs {
        return Ok(got);
    }
    verify(&args.dir)?;
    totals.verified += 1;
    let Some(root) = checkpoints else { return Ok(got) };
    if let Some(c) = &report.checkpoint {
        let dir = root.join(c.name.to_string());
        let db = Db::open(&dir, options(true))
            .map_err(|e| format!("opening checkpoint {} failed: {}", c.name, chain(e)))?;
        check_checkpoint(&db, model, report, c, cycle)?;
        db.close().map_err(|e| format!("closing checkpoint {} failed: {}", c.name, chain(e)))?;
        drop(db);
        verify(&dir)?;
        totals.checkpoints += 1;
    }
    // A kill during a checkpoint may leave its temporary directory beside it.
    match std::fs::remove_dir_all(root) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(format!("removing {}: {e}", root.display()))
        }
        _ => Ok(got),
    }
}

/// What a child is started with.
struct Child<'a> {
    exe: &'a Path,
    dir: &'a Path,
    checkpoints: Option<&'a Path>,
    seed: u64,
    start: u64,
    threads: u64,
    blobs: bool,
}

fn run_child(
    child: &Child,
    rng: &mut StdRng,
    max_delay_ms: u64,
    totals: &mut Totals,
) -> Result<Report, String> {
    let (start, threads) = (child.start, child.threads);
    let mut cmd = Command::new(child.exe);
    cmd.arg("crash-worker")
        .arg("--dir")
        .arg(child.dir)
        .args(["--seed", &child.seed.to_string(), "--start-op", &start.to_string()])
        .args(["--threads", &threads.to_string()]);
    if child.blobs {
        cmd.arg("--blobs");
    }
    if let Some(root) = child.checkpoints {
        cmd.arg("--checkpoints").arg(root);
    }
    let mut child = cmd
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

    fn cycle(seed: u64, threads: u64) -> Cycle {
        Cycle { seed, start: 0, threads, blobs: false }
    }

    fn report(acked: Vec<Vec<u64>>, in_flight: Vec<Option<u64>>) -> Report {
        Report { acked, in_flight, next_op: 4, ..Report::default() }
    }

    fn open(dir: &Path) -> (Db, Vec<Keyspace>) {
        let db = Db::open(dir, options(false)).unwrap();
        let handles = open_keyspaces(&db, false).unwrap();
        (db, handles)
    }

    /// The report of one thread (of `threads`) with `acked` acknowledged and `in_flight`.
    fn one_thread(threads: u64, id: u64, acked: bool, in_flight: bool) -> Report {
        let t = (id % threads) as usize;
        let mut r = Report {
            acked: vec![Vec::new(); threads as usize],
            in_flight: vec![None; threads as usize],
            next_op: id + 1,
            ..Report::default()
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
            let op = gen_op(seed, id, id % threads, threads, false);
            db.write(&batch(&op, &handles), &WriteOptions::default()).unwrap();
        }
        let check_with = |r: &Report| {
            check(&db, &Model::new(), r, &cycle(seed, threads), &mut Totals::default())
        };
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
        handles[1].put(key(2999), value(1, 2999, 0, 20)).unwrap();
        let r = Report {
            acked: vec![vec![]; 7],
            in_flight: vec![None; 7],
            next_op: 7,
            ..Report::default()
        };
        let all: Model = read_all(&db).unwrap();
        assert!(check(&db, &all, &r, &cycle(seed, 7), &mut Totals::default()).is_err());
        handles[1].delete(key(2999)).unwrap();
        let all: Model = read_all(&db).unwrap();
        assert!(check(&db, &all, &r, &cycle(seed, 7), &mut Totals::default()).is_ok());
    }

    /// A range delete that was acknowledged must have removed its keys, and only its
    /// thread's and only in its keyspace.
    #[test]
    fn the_checker_knows_range_deletes() {
        let (seed, threads) = (9, 2);
        let ranged =
            (0..).find(|&id| gen_op(seed, id, id % threads, threads, false).range.is_some());
        let id = ranged.unwrap();
        let op = gen_op(seed, id, id % threads, threads, false);
        let (rks, a, z) = op.range.unwrap();
        assert!(owned(id % threads, threads).contains(&a) && z <= owned(id % threads, threads).end);
        let mut model = Model::new();
        for ks in 0..KEYSPACES.len() {
            for k in a.saturating_sub(3)..z + 3 {
                model.insert((ks, key(k)), value(ks, k, 0, 20));
            }
        }
        let written = |range: Option<(usize, u64, u64)>| {
            let tmp = tempfile::tempdir().unwrap();
            let (db, handles) = open(tmp.path());
            for ((ks, k), v) in &model {
                handles[*ks].put(k, v).unwrap();
            }
            let op = Op { range, writes: op.writes.clone(), sync: false, refused: false };
            db.write(&batch(&op, &handles), &WriteOptions::default()).unwrap();
            (tmp, db)
        };
        let r = one_thread(threads, id, true, false);
        let (_t, db) = written(op.range);
        assert!(check(&db, &model, &r, &cycle(seed, threads), &mut Totals::default()).is_ok());
        let (_t, db) = written(None);
        assert!(check(&db, &model, &r, &cycle(seed, threads), &mut Totals::default()).is_err());
        let elsewhere = Some(((rks + 1) % KEYSPACES.len(), a, z));
        let (_t, db) = written(elsewhere);
        assert!(check(&db, &model, &r, &cycle(seed, threads), &mut Totals::default()).is_err());
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
            refused: false,
        };
        // An op whose part outside the default keyspace is neither nothing nor the whole.
        let id = (0..)
            .find(|&id| {
                let op = gen_op(seed, id, id % threads, threads, false);
                let part = modelled(&without_default(&op));
                op.range.is_none() && !part.is_empty() && part != modelled(&op)
            })
            .unwrap();
        let op = gen_op(seed, id, id % threads, threads, false);
        assert!(op.keyspaces() > 1);
        let tmp = tempfile::tempdir().unwrap();
        let (db, handles) = open(tmp.path());
        db.write(&batch(&without_default(&op), &handles), &WriteOptions::default()).unwrap();
        let check_with = |r: &Report| {
            check(&db, &Model::new(), r, &cycle(seed, threads), &mut Totals::default())
        };
        assert!(check_with(&one_thread(threads, id, true, false)).is_err());
        assert!(check_with(&one_thread(threads, id, false, true)).is_err());
        // The rest of the batch makes it whole.
        let rest = Op {
            range: None,
            writes: op.writes.iter().filter(|w| w.0 == 0).cloned().collect(),
            sync: false,
            refused: false,
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
                let op = gen_op(seed, id, id % threads, threads, false);
                op.range.is_none() && op.writes.iter().any(|w| w.0 == 1 && w.2.is_some())
            })
            .unwrap();
        let op = gen_op(seed, id, id % threads, threads, false);
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
                                value(swap(*ks), *k, id, v.len())
                            } else {
                                v.clone()
                            }
                        });
                        (swap(*ks), *k, v)
                    })
                    .collect(),
                sync: false,
                refused: false,
            };
            let tmp = tempfile::tempdir().unwrap();
            let (db, handles) = open(tmp.path());
            db.write(&batch(&moved, &handles), &WriteOptions::default()).unwrap();
            let got = check(&db, &Model::new(), &r, &cycle(seed, threads), &mut Totals::default());
            assert!(got.is_err(), "retag {retag}");
        }
    }

    /// Values over `MAX_VALUE_BYTES` are held by the models as their header, but only once
    /// checked whole: one cut short or with a byte changed is a value no op wrote.
    #[test]
    fn the_checker_checks_large_values_whole() {
        let v = value(0, 3, 17, MAX_VALUE_BYTES + 5);
        let h = held(&v);
        assert!(h.len() < 64, "{}", String::from_utf8_lossy(&h));
        assert_eq!(parse_value(&h), Some((0, 3, 17)));
        assert_eq!(parse_value(&v), Some((0, 3, 17)));
        let mut flipped = v.clone();
        flipped[MAX_VALUE_BYTES / 2] ^= 1;
        let cut = &v[..v.len() - 1];
        for bad in [&flipped[..], cut] {
            assert_eq!(held(bad), bad, "a malformed value is held whole");
            let got = Model::from([((0, key(3)), held(bad))]);
            assert!(check_values(&got, 3).is_err());
        }
        assert!(check_values(&Model::from([((0, key(3)), h)]), 3).is_ok());
    }

    /// A checkpoint must hold, per thread, the state after a prefix of its ops no shorter
    /// than what was acknowledged when it began: not less, and no later op without the ones
    /// before it.
    #[test]
    fn a_checkpoint_holds_a_long_enough_prefix_of_each_threads_ops() {
        let (seed, threads) = (12, 1);
        let ops: Vec<Op> = (0..6).map(|id| gen_op(seed, id, 0, threads, true)).collect();
        let after = |ops: &[Op]| {
            let mut m = Model::new();
            ops.iter().for_each(|op| apply(&mut m, op));
            m
        };
        let differs =
            |a: usize| (0..=ops.len()).all(|b| b == a || after(&ops[..b]) != after(&ops[..a]));
        let n = (1..ops.len()).find(|&n| differs(n)).expect("ops that change the state");
        let state = after(&ops[..n]);
        assert!(matches_a_prefix(Model::new(), &state, &ops, n));
        assert!(matches_a_prefix(Model::new(), &state, &ops, 0));
        assert!(!matches_a_prefix(Model::new(), &state, &ops, n + 1), "older than its start");
        let mut hole = after(&ops[..n - 1]);
        apply(&mut hole, &ops[n]);
        if (0..=ops.len()).all(|b| after(&ops[..b]) != hole) {
            assert!(
                !matches_a_prefix(Model::new(), &hole, &ops, 0),
                "an op without its predecessor"
            );
        }
    }

    /// The verification after each cycle refuses a blob file the manifest does not name.
    #[test]
    fn verify_refuses_an_orphan_blob_file() {
        let tmp = tempfile::tempdir().unwrap();
        let db = Db::open(tmp.path(), options(true)).unwrap();
        let handles = open_keyspaces(&db, true).unwrap();
        for id in 0..40 {
            let op = gen_op(3, id, 0, 1, true);
            write_op(&db, &handles, &op).unwrap();
        }
        db.close().unwrap();
        drop((db, handles));
        verify(tmp.path()).unwrap();
        std::fs::write(tmp.path().join("999999.blob"), b"orphan").unwrap();
        assert!(verify(tmp.path()).unwrap_err().contains("999999.blob"));
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
        // Refusals end an op without acknowledging it; maintenance lines name checkpoints.
        let lines: Vec<String> = ["S 10", "C 90", "A 10", "S 12", "R 12", "K 90", "P 249"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let r = read_report(&lines, 10, 2).unwrap();
        assert_eq!(r.acked, vec![vec![10], vec![]]);
        assert_eq!((r.refused, r.compactions), (1, 1));
        assert_eq!(r.checkpoint, Some(Checkpoint { name: 90, acked_before: vec![0, 0] }));
        assert!(read_report(&["K 90".to_string()], 10, 2).is_err());
    }
}
