//! The timed phases: each read workload over a built database, one round at a time; the
//! fills measured on a database of their own; and one point of the bits-per-key sweep.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bloomkv::{Clock, Db, Readable};
use indicatif::ProgressBar;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::build::{discard, fill, layer, load, open, Built};
use super::measure::{self, Timed};
use super::predict::{filter_bits_per_key, missing_key_theory};
use super::report::{PrefixFigures, SpacePoint, SweepRow, WorkloadResult};
use super::{bench_error, keys, latency, page_cache, result_row, Ctx, Policy, TreeShape, Workload};

/// The seed of `workload`'s random choices in round `round` (0-based): the same for every
/// policy, so within a round they all answer the same questions, and new each round, so a
/// round is a fresh sample rather than a replay that finds the round before's blocks in the
/// block cache. Round 0's is the seed of a single-round run.
pub(super) fn workload_seed(seed: u64, workload: Workload, round: u32) -> u64 {
    seed ^ (workload as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d)
        ^ u64::from(round).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Runs each of `workloads` (all of them read the loaded database) once on `b`, in the order
/// given, as round `round`; `label` tells the progress bars which round this is.
pub(super) fn run_reads(
    ctx: &Ctx,
    b: &mut Built,
    workloads: &[Workload],
    round: u32,
    label: &str,
) -> bloomkv::Result<Vec<WorkloadResult>> {
    let args = ctx.args;
    let bpk = args.bits_per_key;
    let policy = b.policy;
    let mut results = Vec::new();
    let n = ctx.plan.keys;
    let seed = args.seed;
    for &workload in workloads {
        if workload.writes() && b.read_only {
            b.close()?;
            b.read_only = false;
        }
        // Cold means the engine's block cache too: the workloads and rounds before would
        // otherwise have left their blocks there. Closed first (and dropped, mappings and
        // all), so the files are dropped with no reader between; reopening reads the filters
        // and indexes back into RAM (where they always live), not the data blocks. Opened
        // after the files are prepared, so that with `--mmap-reads` it maps the pages warming
        // brought in.
        if ctx.plan.page_cache == page_cache::PageCache::Cold {
            b.close()?;
        }
        page_cache::prepare(ctx.plan.page_cache, &b.dir)?;
        let db = b.open()?;
        let pb =
            ctx.progress(ctx.plan.reads, format!("{} {}{label}", workload.name(), policy.name()));
        let wseed = workload_seed(seed, workload, round);
        let before = db.stats();
        let mut writer = None;
        let t = match workload {
            Workload::ReadRandom => {
                measure::run_timed(args.threads, ctx.plan.reads, wseed, &pb, |w| {
                    keys::present_key(w.rng.gen_range(0..n), &mut w.key);
                    expect_present(db.get(w.key)?, &w.key)
                })?
            }
            Workload::ReadMissing => {
                measure::run_timed(args.threads, ctx.plan.reads, wseed, &pb, |w| {
                    keys::absent_key(w.rng.gen_range(0..n), &mut w.key);
                    expect_absent(db.get(w.key)?, &w.key)
                })?
            }
            Workload::MultiReadRandom | Workload::MultiReadMissing => {
                let present = workload == Workload::MultiReadRandom;
                let batch = args.batch as usize;
                measure::run_batched(args.threads, ctx.plan.reads, args.batch, wseed, &pb, |w| {
                    w.batch.clear();
                    for _ in 0..batch {
                        let mut key = [0; keys::KEY_BYTES];
                        let i = w.rng.gen_range(0..n);
                        if present {
                            keys::present_key(i, &mut key);
                        } else {
                            keys::absent_key(i, &mut key);
                        }
                        w.batch.push(key);
                    }
                    let got = db.multi_get(&w.batch)?;
                    for (v, key) in got.into_iter().zip(&w.batch) {
                        if present {
                            expect_present(v, key)?;
                        } else {
                            expect_absent(v, key)?;
                        }
                    }
                    Ok(())
                })?
            }
            Workload::ReadZipfian => {
                measure::run_timed(args.threads, ctx.plan.reads, wseed, &pb, |w| {
                    keys::present_key(ctx.zipf.item(w.rng.gen()), &mut w.key);
                    expect_present(db.get(w.key)?, &w.key)
                })?
            }
            Workload::SeekRandom => {
                measure::run_timed(args.threads, ctx.plan.reads, wseed, &pb, |w| {
                    keys::present_key(w.rng.gen_range(0..n), &mut w.key);
                    let mut seen = 0;
                    for kv in db.range(&w.key[..]..).take(10) {
                        black_box(kv?);
                        seen += 1;
                    }
                    // Only the last few keys of the key space have fewer than 10 successors.
                    if seen == 0 {
                        return Err(bench_error("seek found nothing at or after a present key"));
                    }
                    Ok(())
                })?
            }
            Workload::ReadWhileWriting => {
                let (t, wr) = read_while_writing(ctx, db, wseed, &pb)?;
                writer = Some(wr);
                t
            }
            Workload::YcsbA | Workload::YcsbB => {
                let read_share = if workload == Workload::YcsbA { 0.5 } else { 0.95 };
                measure::run_timed(args.threads, ctx.plan.reads, wseed, &pb, |w| {
                    keys::present_key(ctx.zipf.item(w.rng.gen()), &mut w.key);
                    if w.rng.gen_bool(read_share) {
                        expect_present(db.get(w.key)?, &w.key)
                    } else {
                        db.put(w.key, ctx.values.value(w.done ^ ((w.thread as u64) << 40)))
                    }
                })?
            }
            Workload::ScanMissing => {
                let prefixes = keys::prefixes(n);
                measure::run_timed(args.threads, ctx.plan.reads, wseed, &pb, |w| {
                    let mut p = [0u8; keys::PREFIX_BYTES];
                    keys::absent_prefix(w.rng.gen_range(0..prefixes), &mut p);
                    if let Some(kv) = db.prefix(p).next() {
                        let (k, _) = kv?;
                        return Err(bench_error(format!(
                            "absent prefix {} yields key {}",
                            String::from_utf8_lossy(&p),
                            String::from_utf8_lossy(&k)
                        )));
                    }
                    Ok(())
                })?
            }
            Workload::ScanRandom => {
                let prefixes = keys::prefixes(n);
                measure::run_timed(args.threads, ctx.plan.reads, wseed, &pb, |w| {
                    let mut p = [0u8; keys::PREFIX_BYTES];
                    keys::present_prefix(w.rng.gen_range(0..prefixes), &mut p);
                    let mut seen = 0;
                    for kv in db.prefix(p).take(SCAN_KEYS) {
                        black_box(kv?);
                        seen += 1;
                    }
                    if seen == 0 {
                        return Err(bench_error("a present prefix's scan found nothing"));
                    }
                    Ok(())
                })?
            }
            Workload::PrefixExists => {
                let prefixes = keys::prefixes(n);
                let batch = args.batch as usize;
                measure::run_batched(args.threads, ctx.plan.reads, args.batch, wseed, &pb, |w| {
                    // Prefixes in the first half of each key buffer; the flag in its last byte.
                    w.batch.clear();
                    for _ in 0..batch {
                        let mut k = [0u8; keys::KEY_BYTES];
                        let present = w.rng.gen_bool(0.5);
                        let j = w.rng.gen_range(0..prefixes);
                        let p: &mut [u8; keys::PREFIX_BYTES] =
                            (&mut k[..keys::PREFIX_BYTES]).try_into().expect("8 bytes");
                        if present {
                            keys::present_prefix(j, p);
                        } else {
                            keys::absent_prefix(j, p);
                        }
                        k[keys::KEY_BYTES - 1] = u8::from(present);
                        w.batch.push(k);
                    }
                    let asked: Vec<&[u8]> =
                        w.batch.iter().map(|k| &k[..keys::PREFIX_BYTES]).collect();
                    let got = db.prefixes_exist(&asked)?;
                    for (exists, k) in got.into_iter().zip(&w.batch) {
                        if exists != (k[keys::KEY_BYTES - 1] == 1) {
                            return Err(bench_error(format!(
                                "prefixes_exist says {exists} for prefix {}",
                                String::from_utf8_lossy(&k[..keys::PREFIX_BYTES])
                            )));
                        }
                    }
                    Ok(())
                })?
            }
            Workload::FillRandom
            | Workload::FillSeq
            | Workload::Writers
            | Workload::WritersSynced
            | Workload::Transactions
            | Workload::TransactionsSynced
            | Workload::Counter
            | Workload::CounterRmw
            | Workload::Ttl
            | Workload::Compact
            | Workload::Overwrite => unreachable!("filtered out above"),
        };
        pb.finish_and_clear();
        let after = db.stats();
        let d = measure::delta(&before, &after, t.ops);
        let theory = missing_key_theory(db, n, policy, bpk);
        let mut row = result_row(workload, policy, theory, args.threads, &t, &before, &after, &d);
        if workload.by_prefix() {
            row.prefix = Some(prefix_figures(workload, policy, &theory, &before, &after, t.ops));
        }
        if workload.batched() {
            row.batch = Some(args.batch);
        }
        if let Some((ops, secs)) = writer {
            row.writer_ops = Some(ops);
            row.writer_ops_per_sec = Some(ops as f64 / secs.max(1e-9));
        }
        results.push(row);
    }
    Ok(results)
}

/// Keys `scanrandom` reads of its prefix (all of them at the default 10 keys per prefix).
const SCAN_KEYS: usize = 10;

/// What a prefix workload's scans did with the tables, per scan, from the engine's
/// counters. The tables in range come from the tables' own ranges (`theory`: an absent
/// prefix lies where an absent key of the point workloads would, between present ones).
fn prefix_figures(
    workload: Workload,
    policy: Policy,
    theory: &super::predict::Theory,
    before: &bloomkv::Stats,
    after: &bloomkv::Stats,
    ops: u64,
) -> PrefixFigures {
    let per = |a: u64, b: u64| a.saturating_sub(b) as f64 / ops.max(1) as f64;
    let checks = after.prefix_filter_checks.saturating_sub(before.prefix_filter_checks);
    let skips = after.prefix_filter_skips.saturating_sub(before.prefix_filter_skips);
    let filtered =
        policy.prefix_extractor().is_some() && policy.filter(1.0) != bloomkv::FilterPolicy::None;
    let in_range = if filtered && checks > 0 { per(checks, 0) } else { theory.tables };
    PrefixFigures {
        tables_in_range: in_range,
        filter_checks: per(after.prefix_filter_checks, before.prefix_filter_checks),
        tables_skipped: per(after.prefix_filter_skips, before.prefix_filter_skips),
        tables_read: in_range - per(after.prefix_filter_skips, before.prefix_filter_skips),
        measured_prefix_fpr: (workload == Workload::ScanMissing && checks > 0)
            .then(|| (checks - skips) as f64 / checks as f64),
        expected_prefix_fpr: filtered.then(|| theory.probe_fpr()),
    }
}

pub(super) fn expect_present(v: Option<bloomkv::Value>, key: &[u8]) -> bloomkv::Result<()> {
    match v {
        Some(v) => {
            black_box(v);
            Ok(())
        }
        None => Err(bench_error(format!(
            "key {} was written but reads as absent",
            String::from_utf8_lossy(key)
        ))),
    }
}

pub(super) fn expect_absent(v: Option<bloomkv::Value>, key: &[u8]) -> bloomkv::Result<()> {
    match v {
        None => Ok(()),
        Some(_) => Err(bench_error(format!(
            "key {} was never written but reads as present",
            String::from_utf8_lossy(key)
        ))),
    }
}

/// `readrandom` on `--threads` threads while one more thread overwrites random keys for as
/// long as the readers run. Returns the readers' timing and the writer's (ops, seconds).
pub(super) fn read_while_writing(
    ctx: &Ctx,
    db: &Db,
    seed: u64,
    pb: &ProgressBar,
) -> bloomkv::Result<(Timed, (u64, f64))> {
    let n = ctx.plan.keys;
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let writer = s.spawn(|| -> bloomkv::Result<(u64, f64)> {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x77_7269_7465);
            let mut key = [0u8; keys::KEY_BYTES];
            let start = Instant::now();
            let mut ops = 0u64;
            while !stop.load(Ordering::Relaxed) {
                keys::present_key(rng.gen_range(0..n), &mut key);
                db.put(key, ctx.values.value(ops ^ (1 << 62)))?;
                ops += 1;
            }
            Ok((ops, start.elapsed().as_secs_f64()))
        });
        let readers = measure::run_timed(ctx.args.threads, ctx.plan.reads, seed, pb, |w| {
            keys::present_key(w.rng.gen_range(0..n), &mut w.key);
            expect_present(db.get(w.key)?, &w.key)
        });
        stop.store(true, Ordering::Relaxed);
        let writer = writer.join().expect("writer thread panicked");
        Ok((readers?, writer?))
    })
}

/// A fill workload on a fresh database of its own, nothing read from it afterwards: `fillseq`
/// (the keys in ascending order), or `fillrandom` when the reads' databases were ingested.
pub(super) fn run_fill_only(
    ctx: &Ctx,
    policy: Policy,
    workload: Workload,
    order: &[u64],
) -> bloomkv::Result<WorkloadResult> {
    let bpk = ctx.args.bits_per_key;
    let dir = ctx.base.join(format!("{}-{}", workload.name(), policy.name()));
    let db = open(&dir, ctx.options(policy, bpk))?;
    let before = db.stats();
    let t = fill(ctx, &db, order, format!("{} {}", workload.name(), policy.name()))?;
    let n = order.len() as u64;
    close_and_report(ctx, db, &dir, (workload, policy, 1), n, &t, &before)
}

/// The row of a run `t` on a database of its own (`n` keys), taken from its `before` stats
/// and its stats now; then the database is closed and its directory `dir` removed.
fn close_and_report(
    ctx: &Ctx,
    db: Db,
    dir: &std::path::Path,
    (workload, policy, threads): (Workload, Policy, usize),
    n: u64,
    t: &Timed,
    before: &bloomkv::Stats,
) -> bloomkv::Result<WorkloadResult> {
    let after = db.stats();
    let d = measure::delta(before, &after, t.ops);
    let theory = missing_key_theory(&db, n, policy, ctx.args.bits_per_key);
    db.close()?;
    drop(db);
    discard(ctx, dir)?;
    Ok(result_row(workload, policy, theory, threads, t, before, &after, &d))
}

/// `compact` on a fresh `policy` database: the keys ingested in four interleaved runs, with
/// L0 compactions held off so the runs wait for the one timed `Db::compact()` that merges
/// them; ops are the entries compacted.
pub(super) fn run_compact(ctx: &Ctx, policy: Policy) -> bloomkv::Result<WorkloadResult> {
    const RUNS: u64 = 4;
    let args = ctx.args;
    let dir = ctx.base.join(format!("{}-{}", Workload::Compact.name(), policy.name()));
    let held_off = usize::try_from(RUNS * 4).unwrap_or(usize::MAX);
    let opts = ctx
        .options(policy, args.bits_per_key)
        .l0_compaction_trigger(held_off)
        .l0_slowdown_trigger(held_off)
        .l0_stop_trigger(held_off);
    let db = open(&dir, opts)?;
    let n = ctx.order.len() as u64;
    for run in 0..RUNS {
        let entries = (run..n).step_by(RUNS as usize).map(|i| {
            let mut key = [0u8; keys::KEY_BYTES];
            keys::present_key(i, &mut key);
            (key, ctx.values.value(i))
        });
        db.ingest(entries)?;
    }
    let pb = ctx.progress(1, format!("{} {}", Workload::Compact.name(), policy.name()));
    let before = db.stats();
    let mut t = measure::run_timed(1, 1, args.seed, &pb, |_| db.compact())?;
    pb.finish_and_clear();
    t.ops = n;
    close_and_report(ctx, db, &dir, (Workload::Compact, policy, 1), n, &t, &before)
}

/// `writers` or `writers-synced` on a fresh `policy` database: `--threads` threads each
/// putting its own share of the keys, in the fill's random order, one put per write; or
/// `transactions` (`-synced`), each write a transaction that reads the key first.
pub(super) fn run_writers(
    ctx: &Ctx,
    policy: Policy,
    workload: Workload,
) -> bloomkv::Result<WorkloadResult> {
    let args = ctx.args;
    let synced = matches!(workload, Workload::WritersSynced | Workload::TransactionsSynced);
    let transactions = matches!(workload, Workload::Transactions | Workload::TransactionsSynced);
    let total = if synced { args.synced_writes } else { args.writes };
    let dir = ctx.base.join(format!("{}-{}", workload.name(), policy.name()));
    let db = open(&dir, ctx.options(policy, args.bits_per_key).sync_writes(synced))?;
    let threads = args.threads.max(1) as u64;
    let per_thread = total.div_ceil(threads);
    let n = ctx.order.len() as u64;
    let pb = ctx.progress(total, format!("{} {}", workload.name(), policy.name()));
    let before = db.stats();
    let t = measure::run_timed(args.threads, total, args.seed, &pb, |w| {
        // Thread t takes positions t·per_thread.. of the order: no two threads write one key
        // (while `total` ≤ the key count; beyond it keys are overwritten).
        let at = (w.thread as u64 * per_thread + w.done) % n;
        keys::present_key(ctx.order[at as usize], &mut w.key);
        if !transactions {
            return db.put(w.key, ctx.values.value(at));
        }
        // No other thread writes the key; a transaction outliving the memtable history could
        // still be refused (DESIGN.md, "Transactions"), and then it runs again.
        loop {
            let mut tx = db.transaction();
            let old = tx.get(w.key)?;
            tx.put(w.key, ctx.values.value(at + u64::from(old.is_some())))?;
            match tx.commit() {
                Err(bloomkv::Error::Conflict) => continue,
                done => return done,
            }
        }
    })?;
    pb.finish_and_clear();
    close_and_report(ctx, db, &dir, (workload, policy, args.threads), n, &t, &before)
}

/// `counter` or `counter-rmw` on a fresh `policy` database: `--writes` increments over
/// `--counter-keys` zipfian-chosen counters on `--threads` threads, each a merge of the
/// built-in `U64Add` operand or a `compare_and_swap` of the value read; then every counter is
/// read back and the total checked, so the two ways are known to count alike.
pub(super) fn run_counter(
    ctx: &Ctx,
    policy: Policy,
    workload: Workload,
) -> bloomkv::Result<WorkloadResult> {
    use bloomkv::U64Add;
    let args = ctx.args;
    let rmw = workload == Workload::CounterRmw;
    let dir = ctx.base.join(format!("{}-{}", workload.name(), policy.name()));
    let opts = ctx.options(policy, args.bits_per_key).merge_operator(Arc::new(U64Add));
    let db = open(&dir, opts)?;
    let zipf = keys::Zipfian::new(args.counter_keys, keys::Zipfian::YCSB_THETA);
    let pb = ctx.progress(args.writes, format!("{} {}", workload.name(), policy.name()));
    let before = db.stats();
    let t = measure::run_timed(args.threads, args.writes, args.seed, &pb, |w| {
        keys::present_key(zipf.item(w.rng.gen()), &mut w.key);
        if !rmw {
            return db.merge(w.key, U64Add::operand(1));
        }
        loop {
            let old = db.get(w.key)?;
            let n = old.as_deref().and_then(U64Add::decode).unwrap_or(0);
            let new = U64Add::operand(n + 1);
            if db.compare_and_swap(w.key, old.as_deref(), Some(&new[..]))? {
                return Ok(());
            }
        }
    })?;
    pb.finish_and_clear();
    let after = db.stats();
    let mut total = 0u64;
    let mut key = [0u8; keys::KEY_BYTES];
    for i in 0..args.counter_keys {
        keys::present_key(i, &mut key);
        total += db.get(key)?.as_deref().and_then(U64Add::decode).unwrap_or(0);
    }
    if total != t.ops {
        return Err(bench_error(format!(
            "{}: counters sum to {total}, not {}",
            workload.name(),
            t.ops
        )));
    }
    let d = measure::delta(&before, &after, t.ops);
    let theory = missing_key_theory(&db, args.counter_keys, policy, args.bits_per_key);
    db.close()?;
    drop(db);
    discard(ctx, &dir)?;
    Ok(result_row(workload, policy, theory, args.threads, &t, &before, &after, &d))
}

/// `ttl` on a fresh `policy` database: `--writes` puts of new keys, one thread, each living
/// [`TTL`] on a manual clock that moves [`TTL_SPAN`] over the run (so about a quarter of
/// what was put is live at any time), the tables' bytes sampled 20 times (with a memtable of
/// at most 1 MiB, so a short run makes tables); then the clock
/// passes every expiry and a compaction runs, the last sample. Compaction drops expired
/// values as it meets them, and picks tables whose data has mostly expired.
pub(super) fn run_ttl(ctx: &Ctx, policy: Policy) -> bloomkv::Result<WorkloadResult> {
    const TTL: Duration = Duration::from_secs(10);
    const TTL_SPAN: Duration = Duration::from_secs(40);
    const TTL_MEMTABLE_BYTES: usize = 1 << 20;
    let args = ctx.args;
    let workload = Workload::Ttl;
    let dir = ctx.base.join(format!("{}-{}", workload.name(), policy.name()));
    let clock = Arc::new(bloomkv::ManualClock::new(1_700_000_000_000));
    let start = clock.now_millis();
    // A memtable small enough that the run makes tables for expiry to empty.
    let memtable = ctx.plan.memtable_bytes.min(TTL_MEMTABLE_BYTES);
    let opts = ctx.options(policy, args.bits_per_key).memtable_bytes(memtable);
    let db = open(&dir, opts.clock(clock.clone()))?;
    let total = args.writes.max(1);
    let step_micros = (TTL_SPAN.as_micros() as u64 / total).max(1);
    let sample_every = (total / 20).max(1);
    let n = ctx.order.len() as u64;
    let samples = std::sync::Mutex::new(Vec::new());
    let sample = |db: &Db, puts: u64| {
        let point = SpacePoint {
            clock_seconds: (clock.now_millis() - start) as f64 / 1000.0,
            puts,
            table_bytes: db.stats().bytes_per_level.iter().sum(),
        };
        samples.lock().unwrap_or_else(|p| p.into_inner()).push(point);
    };
    let pb = ctx.progress(total, format!("{} {}", workload.name(), policy.name()));
    let before = db.stats();
    // One thread: the clock moves with the puts, and the samples are taken between them.
    let t = measure::run_timed(1, total, args.seed, &pb, |w| {
        let at = w.done % n;
        keys::present_key(ctx.order[at as usize], &mut w.key);
        db.put_with_ttl(w.key, ctx.values.value(at), TTL)?;
        let micros = (w.done + 1) * step_micros;
        let (now, then) = (micros / 1000, micros.saturating_sub(step_micros) / 1000);
        if now > then {
            clock.advance(Duration::from_millis(now - then));
        }
        if (w.done + 1) % sample_every == 0 {
            sample(&db, w.done + 1);
        }
        Ok(())
    })?;
    pb.finish_and_clear();
    let after = db.stats();
    clock.advance(TTL);
    db.flush()?;
    db.compact()?;
    sample(&db, total);
    let d = measure::delta(&before, &after, t.ops);
    let theory = missing_key_theory(&db, n, policy, args.bits_per_key);
    db.close()?;
    drop(db);
    discard(ctx, &dir)?;
    let mut row = result_row(workload, policy, theory, 1, &t, &before, &after, &d);
    row.space_over_time = Some(samples.into_inner().unwrap_or_else(|p| p.into_inner()));
    Ok(row)
}

/// One point of the sweep: a `policy` database at `bits_per_key` over `keys` entries, probed
/// with `readmissing`.
pub(super) fn run_sweep_point(
    ctx: &Ctx,
    policy: Policy,
    bits_per_key: f64,
    keys: u64,
) -> bloomkv::Result<SweepRow> {
    let args = ctx.args;
    let dir = ctx.base.join(format!("sweep-{}-{}", policy.name(), bits_per_key));
    let db = open(&dir, ctx.options(policy, bits_per_key))?;
    let mut order: Vec<u64> = (0..keys).collect();
    order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(args.seed));
    let label = format!("sweep {} {} {}", ctx.plan.load.name(), policy.name(), bits_per_key);
    load(ctx, &db, &order, label)?;
    db.flush()?;
    let db = if args.shape == TreeShape::Layered {
        layer(ctx, &db, &order)?;
        db.close()?;
        Db::open_read_only(&dir, ctx.options(policy, bits_per_key))?
    } else {
        db
    };
    let pb = ctx
        .progress(ctx.plan.reads, format!("sweep readmissing {} {}", policy.name(), bits_per_key));
    let before = db.stats();
    let t =
        measure::run_timed(args.threads, ctx.plan.reads, args.seed ^ 0x53_5745_4550, &pb, |w| {
            keys::absent_key(w.rng.gen_range(0..keys), &mut w.key);
            expect_absent(db.get(w.key)?, &w.key)
        })?;
    pb.finish_and_clear();
    let after = db.stats();
    let d = measure::delta(&before, &after, t.ops);
    let theory = missing_key_theory(&db, keys, policy, bits_per_key);
    let (filter_bits_per_key, _) = filter_bits_per_key(&db);
    db.close()?;
    drop(db);
    discard(ctx, &dir)?;
    Ok(SweepRow {
        policy: policy.name().to_string(),
        bits_per_key,
        probes: policy.probes(bits_per_key),
        keys,
        filter_memory_bytes: after.filter_memory_bytes,
        filter_bits_per_key,
        measured_fpr: d.measured_fpr.unwrap_or(0.0),
        expected_fpr: theory.fpr(),
        predicted_blocks_per_op: theory.blocks,
        readmissing_ops_per_sec: t.ops as f64 / t.elapsed.as_secs_f64().max(1e-9),
        blocks_per_op: d.per_op.blocks_touched,
        blocks_read_per_op: d.per_op.blocks_read,
        tables_consulted_per_op: d.per_op.tables_consulted,
        latency_ns: latency(&t),
        tables_per_level: after.tables_per_level,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_round_draws_new_keys_and_a_single_round_keeps_its_old_ones() {
        let w = Workload::ReadRandom;
        // Round 0 is what a one-round run has always used, so its figures stay comparable.
        assert_eq!(workload_seed(7, w, 0), 7 ^ (w as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d));
        let seeds: Vec<u64> = (0..16).map(|r| workload_seed(7, w, r)).collect();
        let mut distinct = seeds.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), seeds.len(), "every round its own stream: {seeds:?}");
        assert_ne!(workload_seed(7, Workload::ReadMissing, 1), workload_seed(7, w, 1));
    }
}
