//! `--profile large-values`: what values of 4, 16 and 256 KiB cost the write path and the
//! disk. Each value size gets a database of its own, which goes through the phases in order:
//! `fillrandom` (every key once, in random order), `overwrite` (half the keys, or
//! `--overwrite-keys`, chosen at random, each with a new value of the same size), then `readrandom`, `readmissing` and
//! `seekrandom` (a seek and the next 10 entries) as the filter comparisons run them.
//!
//! Each phase that writes ends by letting the tree come to rest — the memtable flushed, every
//! compaction it made due run, the replaced files removed — so the bytes written that its
//! writes caused are all counted, whatever the timing of background work; the wait is
//! reported (`settle_seconds`), not counted in the phase's ops/s. Every phase then reports
//! its write amplification (WAL, table and blob-file bytes written over the keys and values
//! it wrote) and the space amplification it left (the directory's blocks, as `du` counts
//! them, over the live keys and values): see [`super::space`].

use std::process::ExitCode;
use std::time::Instant;

use bloomkv::{Db, Options, Readable};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::build::{discard, fill, open};
use super::keys::{self, ValuePool, Zipfian};
use super::measure::{self, Timed};
use super::predict::missing_key_theory;
use super::report::{self, Report, WorkloadResult};
use super::space::{self, Amplification, Written};
use super::workloads::{expect_absent, expect_present, workload_seed};
use super::{
    bench_error, config, machine, page_cache, result_row, say, write_json, Args, Ctx, Load, Plan,
    Policy, Workload,
};

/// The value sizes run when `--value-bytes` does not name one.
pub(super) const VALUE_SIZES: [usize; 3] = [4 << 10, 16 << 10, 256 << 10];

/// The memtable unless `--memtable-bytes` says otherwise: small beside the values, so a fill
/// of a few hundred MiB makes many flushes and a tree several levels deep.
pub(super) const MEMTABLE_BYTES: usize = 4 << 20;

/// Bytes of values each size's database is filled with, unless `--payload-bytes` or
/// `--keys` says otherwise: three sizes, each written one and a half times (the fill and the
/// overwrite of half), come to under 300 MiB of values and a run of about a minute.
const PAYLOAD_BYTES: u64 = 64 << 20;

/// The fewest operations a read phase runs by default, so that a size with few keys still
/// samples its latency.
const MIN_READS: u64 = 10_000;

/// Entries each `seekrandom` scan reads; scans run a tenth of the reads, so a scan phase
/// reads as many values as a point-read phase.
const SCAN_ENTRIES: u64 = 10;

/// The phases, in the order they run.
pub(super) const PHASES: [Workload; 5] = [
    Workload::FillRandom,
    Workload::Overwrite,
    Workload::ReadRandom,
    Workload::ReadMissing,
    Workload::SeekRandom,
];

/// Keys of a database of `value_bytes` values filled with `payload_bytes` of them (at least
/// two: the overwrite takes half).
pub(super) fn keys_for(payload_bytes: Option<u64>, value_bytes: usize) -> u64 {
    (payload_bytes.unwrap_or(PAYLOAD_BYTES) / value_bytes.max(1) as u64).max(2)
}

/// Operations per read phase over `keys` keys, unless `--reads` says.
pub(super) fn reads_for(keys: u64) -> u64 {
    keys.max(MIN_READS)
}

/// Refuses what the profile does not run: workloads other than its phases, and the flags of
/// the filter comparison that would change nothing here or change what is measured.
pub(super) fn check(args: &Args, plan: &Plan) -> bloomkv::Result<()> {
    let refuse = |why: String| Err(bloomkv::Error::InvalidArgument(why));
    if let Some(w) = plan.workloads.iter().find(|w| !PHASES.contains(w)) {
        let names: Vec<&str> = PHASES.iter().map(|p| p.name()).collect();
        return refuse(format!(
            "--profile large-values runs {} only, not {}",
            names.join(", "),
            w.name()
        ));
    }
    if plan.load == Load::Ingest {
        return refuse("--profile large-values measures the write path: --load fill only".into());
    }
    if args.rounds > 1 || args.plot.is_some() || args.keys_per_prefix.is_some() {
        return refuse(
            "--profile large-values takes none of --rounds, --plot and --keys-per-prefix".into(),
        );
    }
    if args.keys.is_some_and(|k| k < 2) {
        return refuse("--profile large-values needs at least 2 keys (it overwrites half)".into());
    }
    if plan.value_sizes.iter().any(|&v| v == 0 || v > bloomkv::MAX_VALUE_BYTES) {
        return refuse(format!(
            "--value-bytes must be between 1 and {} (bloomkv::MAX_VALUE_BYTES)",
            bloomkv::MAX_VALUE_BYTES
        ));
    }
    Ok(())
}

/// Runs the profile: every value size × policy, the phases in order on one database each.
pub(super) fn run(
    args: &Args,
    plan: &Plan,
    base: &std::path::Path,
    base_options: Options,
    started: Instant,
    load_average_at_start: String,
) -> bloomkv::Result<ExitCode> {
    let sizes: Vec<String> = plan
        .value_sizes
        .iter()
        .map(|&v| format!("{} × {}", sized(args, plan, v).keys, bytes(v as u64)))
        .collect();
    say(&format!(
        "bloomkv bench (large-values profile): {} values (16 B keys), {} MiB memtables, blob \
         threshold {}, compression {}, reads on {} thread(s), dbs in {} (load average {})\n",
        sizes.join(", "),
        plan.memtable_bytes >> 20,
        args.blob_threshold.map_or_else(|| "off".to_string(), |t| format!("{t} B")),
        super::compression_name(args.compression),
        args.threads,
        base.display(),
        load_average_at_start
    ))?;
    keys::set_keys_per_prefix(0);
    let mut results = Vec::new();
    for &v in &plan.value_sizes {
        let plan = sized(args, plan, v);
        let mut order: Vec<u64> = (0..plan.keys).collect();
        order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(args.seed));
        let ctx = Ctx {
            args,
            plan: &plan,
            base,
            values: ValuePool::new(v, args.seed),
            zipf: Zipfian::new(1, Zipfian::YCSB_THETA),
            order,
            show_progress: !args.quiet && std::io::IsTerminal::is_terminal(&std::io::stdout()),
            base_options: base_options.clone(),
        };
        for &policy in &plan.policies {
            results.extend(run_one(&ctx, policy)?);
        }
    }

    let mut text = String::from("\n");
    report::write_large_values(&mut text, &results).expect("formatting into a String");
    say(&text)?;
    let idle_pageout = page_cache::idle_pageout();
    let mut config = config(args, plan, idle_pageout);
    config.shape = "as-filled".into();
    config.sweep_bits_per_key.clear();
    config.sweep_keys = 0;
    config.sweep_reads = 0;
    let report = Report {
        schema: report::SCHEMA,
        config,
        machine: machine(load_average_at_start),
        shapes: Vec::new(),
        results,
        predictions: Vec::new(),
        rounds: Vec::new(),
        sweep: Vec::new(),
        total_seconds: started.elapsed().as_secs_f64(),
    };
    write_json(args, &report)?;
    say(&format!("total {:.1} s\n", report.total_seconds))?;
    Ok(ExitCode::SUCCESS)
}

/// `plan` for values of `value_bytes`: its own key count and reads, unless given.
fn sized(args: &Args, plan: &Plan, value_bytes: usize) -> Plan {
    let keys = args.keys.unwrap_or_else(|| keys_for(args.payload_bytes, value_bytes));
    Plan { keys, value_bytes, reads: args.reads.unwrap_or_else(|| reads_for(keys)), ..plan.clone() }
}

/// `n` bytes as KiB or MiB where whole.
fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} B"),
    }
}

/// The phases on a fresh `policy` database of `ctx`'s value size; the database is removed
/// afterwards unless `--dir` keeps it.
fn run_one(ctx: &Ctx, policy: Policy) -> bloomkv::Result<Vec<WorkloadResult>> {
    let (args, plan) = (ctx.args, ctx.plan);
    let n = plan.keys;
    let v = plan.value_bytes;
    let dir = ctx.base.join(format!("large-values-{v}-{}", policy.name()));
    let db = open(&dir, ctx.options(policy, args.bits_per_key))?;
    let phase = Phase { ctx, db: &db, dir: &dir, policy };
    let label = |w: Workload| format!("{} {} {}", w.name(), bytes(v as u64), policy.name());
    let mut rows = Vec::new();

    let before = db.stats();
    let t = fill(ctx, &db, &ctx.order, label(Workload::FillRandom))?;
    rows.push(phase.row(Workload::FillRandom, 1, &t, &before)?);

    if plan.workloads.contains(&Workload::Overwrite) {
        // A second random order of its own: the keys overwritten are not the fill's last.
        let mut order: Vec<u64> = (0..n).collect();
        let seed = workload_seed(args.seed, Workload::Overwrite, 0);
        order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
        order.truncate(args.overwrite_keys.unwrap_or(n / 2).min(n) as usize);
        let pb = ctx.progress(order.len() as u64, label(Workload::Overwrite));
        let before = db.stats();
        let t = measure::run_timed(1, order.len() as u64, seed, &pb, |w| {
            keys::present_key(order[w.done as usize], &mut w.key);
            // Past the fill's operation numbers: a value other than the one it replaces.
            db.put(w.key, ctx.values.value(n + w.done))
        })?;
        pb.finish_and_clear();
        rows.push(phase.row(Workload::Overwrite, 1, &t, &before)?);
    }

    for w in [Workload::ReadRandom, Workload::ReadMissing, Workload::SeekRandom] {
        if !plan.workloads.contains(&w) {
            continue;
        }
        let ops =
            if w == Workload::SeekRandom { (plan.reads / SCAN_ENTRIES).max(1) } else { plan.reads };
        let pb = ctx.progress(ops, label(w));
        let seed = workload_seed(args.seed, w, 0);
        let before = db.stats();
        let t = measure::run_timed(args.threads, ops, seed, &pb, |wk| match w {
            Workload::ReadRandom => {
                keys::present_key(wk.rng.gen_range(0..n), &mut wk.key);
                let got = db.get(wk.key)?;
                if got.as_ref().is_some_and(|got| got.len() != v) {
                    return Err(bench_error(format!(
                        "key {} reads {} bytes, not {v}",
                        String::from_utf8_lossy(&wk.key),
                        got.map_or(0, |g| g.len())
                    )));
                }
                expect_present(got, &wk.key)
            }
            Workload::ReadMissing => {
                keys::absent_key(wk.rng.gen_range(0..n), &mut wk.key);
                expect_absent(db.get(wk.key)?, &wk.key)
            }
            _ => {
                keys::present_key(wk.rng.gen_range(0..n), &mut wk.key);
                let mut seen = 0;
                for kv in db.range(&wk.key[..]..).take(SCAN_ENTRIES as usize) {
                    std::hint::black_box(kv?);
                    seen += 1;
                }
                if seen == 0 {
                    return Err(bench_error("seek found nothing at or after a present key"));
                }
                Ok(())
            }
        })?;
        pb.finish_and_clear();
        rows.push(phase.row(w, args.threads, &t, &before)?);
    }
    db.close()?;
    drop(db);
    discard(ctx, &dir)?;
    Ok(rows)
}

/// The database the phases run on, and what a row of theirs needs to know.
struct Phase<'a> {
    ctx: &'a Ctx<'a>,
    db: &'a Db,
    dir: &'a std::path::Path,
    policy: Policy,
}

impl Phase<'_> {
    /// The row of `workload`, timed as `t`, from the stats `before` it: after a phase that
    /// wrote, once the tree is at rest, so every byte its writes caused is counted.
    fn row(
        &self,
        workload: Workload,
        threads: usize,
        t: &Timed,
        before: &bloomkv::Stats,
    ) -> bloomkv::Result<WorkloadResult> {
        let (args, plan) = (self.ctx.args, self.ctx.plan);
        // Only after writes: a flush of an empty memtable would start a WAL segment, and
        // a read phase would be charged its header.
        let settle_seconds = if matches!(workload, Workload::FillRandom | Workload::Overwrite) {
            settle(self.db)?
        } else {
            0.0
        };
        let after = self.db.stats();
        let d = measure::delta(before, &after, t.ops);
        let theory = missing_key_theory(self.db, plan.keys, self.policy, args.bits_per_key);
        let mut row = result_row(workload, self.policy, theory, threads, t, before, &after, &d);
        let written = Written::between(before, &after);
        let disk = space::dir_size(self.dir)
            .map_err(|e| bloomkv::Error::io(format!("measuring {}", self.dir.display()), e))?;
        // Every key is present once, with a value of the run's size.
        let live = plan.keys * (keys::KEY_BYTES + plan.value_bytes) as u64;
        let sizes = (plan.value_bytes, plan.keys, args.blob_threshold);
        row.amplification = Some(Amplification::of(sizes, written, live, disk, settle_seconds));
        Ok(row)
    }
}

/// Brings `db` to rest: the memtable flushed, no compaction due, the replaced files gone.
/// Returns the seconds it took.
fn settle(db: &Db) -> bloomkv::Result<f64> {
    let start = Instant::now();
    db.flush()?;
    // Compactions run one at a time: a step waits for the background thread's compaction in
    // progress, so when none is left to pick, none is running either.
    while db.compact_step()?.is_some() {}
    db.wait_for_file_removals();
    Ok(start.elapsed().as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_counts_follow_the_payload_and_reads_the_keys() {
        // The default payload: 64 MiB of values each.
        assert_eq!(keys_for(None, 4 << 10), 16_384);
        assert_eq!(keys_for(None, 256 << 10), 256);
        // The full sizes: one payload makes both.
        assert_eq!(keys_for(Some(1_638_400_000), 16 << 10), 100_000);
        assert_eq!(keys_for(Some(1_638_400_000), 4 << 10), 400_000);
        // Never fewer than the overwrite needs.
        assert_eq!(keys_for(Some(10), 4 << 10), 2);
        assert_eq!(reads_for(256), MIN_READS);
        assert_eq!(reads_for(400_000), 400_000);
        assert_eq!(bytes(256 << 10), "256 KiB");
        assert_eq!(bytes(4 << 20), "4 MiB");
        assert_eq!(bytes(1000), "1000 B");
    }
}
