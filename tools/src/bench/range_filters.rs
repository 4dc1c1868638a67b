//! `--profile range`: what range filters (`Options::range_filter_bits_per_key`) do for short
//! scans, and what they cost everything else. One dataset — 8-byte big-endian integer keys
//! spaced 1,000 apart, every 16th left out so that gaps of 1,999 integers hold the widest
//! empty ranges — is filled in random order into two databases, one with range filters and
//! one without, together (a chunk of keys to each in turn), each then brought to rest
//! (flushed, no compaction due). Then the same operations run on both, each phase in two
//! passes of half its operations, the databases' order reversed between them (AB, BA):
//!
//! - `emptyrange` at widths 2, 16, 256 and 1024: a range of that many integers inside a gap,
//!   at a random place in it; and `emptyrange-next` the same starting just past a present
//!   key (the correlated case, where a table's filter holds the key right below the range);
//! - `shortrange`: 3,000 integers from a present key (three keys);
//! - `longscan`: 100 keys' worth (100,000 integers, wider than any filter answers for);
//! - `readrandom` and `readmissing` (a key between two present ones; ten times as many
//!   lookups as the other phases' operations, see [`MISSING_READS`]).
//!
//! Per operation it reports the tables whose key range met the range (counted from
//! `Db::tables` outside the timing), the tables the scan read (with filters: those a filter
//! let through), and for empty ranges the measured false-positive rate — tables let through
//! over tables asked, all of which held nothing in range — beside the filters' bound
//! `w / 2^(B − 2)` (averaged over the tables asked, where their B differs).
//!
//! Before anything is read both databases are brought to the same shape ([`align_shapes`]):
//! the tables per level each held at rest and as read are printed and in the JSON. With
//! `--page-cache warm` (the default) each database's files are read through before each of
//! its phases: a kernel that pages out memory left idle for a while (see
//! [`page_cache::idle_pageout`]) would otherwise send a false positive's block read to the
//! disk or not by how long ago that database was last read, and a false positive that costs
//! a disk read instead of a copy from the page cache decides a phase.
//!
//! With `--range-share`, the two databases hold the same filter memory: both are
//! `Budgeted` at `--bits-per-key`, the one with range filters splitting it for that share of
//! range reads of `--range-width` integers.

use std::ops::RangeInclusive;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use bloomkv::{Db, FilterPolicy, Options, ReadMix, Readable, TableInfo};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::keys::ValuePool;
use super::page_cache::{self, PageCache};
use super::{bench_error, machine, say, Args, Plan};

/// Keys unless `--keys` says otherwise: a run of well under a minute on 2 cores.
pub(super) const KEYS: u64 = 2_000_000;

/// The memtable unless `--memtable-bytes` says otherwise: 4 MiB, the size the range
/// filters' targets are set at.
pub(super) const MEMTABLE_BYTES: usize = 4 << 20;

/// Operations per phase unless `--reads` says otherwise (long scans run a tenth, `readmissing`
/// [`MISSING_READS`] times as many).
pub(super) const READS: u64 = 50_000;

/// `readmissing`'s lookups per `--reads`: at millions a second, as many lookups as the scans
/// make would last a few tens of milliseconds, too short a phase to compare two databases
/// within a few percent.
const MISSING_READS: u64 = 10;

/// The widths of the empty ranges, in integers.
const WIDTHS: [u64; 4] = [2, 16, 256, 1024];

/// Integers between neighbouring keys.
const SPACING: u64 = 1_000;

/// Every `HOLE`-th position holds no key, so the gap around it is `2 · SPACING − 1` wide.
const HOLE: u64 = 16;

/// Integers a `shortrange` covers from a present key: it holds three keys.
const SHORT: u64 = 3 * SPACING;

/// Keys a `longscan` covers.
const LONG_KEYS: u64 = 100;

/// Refuses the flags this profile does not take.
pub(super) fn check(args: &Args, plan: &Plan) -> bloomkv::Result<()> {
    let refuse = |why: &str| Err(bloomkv::Error::InvalidArgument(why.into()));
    if !args.workloads.is_empty() || !args.policies.is_empty() {
        return refuse(
            "--profile range runs its own workloads on one policy: no --workloads or --policies",
        );
    }
    if args.rounds > 1 || args.plot.is_some() || args.keys_per_prefix.is_some() {
        return refuse("--profile range takes none of --rounds, --plot and --keys-per-prefix");
    }
    if plan.load != super::Load::Fill {
        return refuse("--profile range fills its databases: --load fill only");
    }
    if plan.page_cache == PageCache::Cold {
        return refuse("--profile range reads from the page cache: --page-cache as-is or warm");
    }
    if plan.keys < HOLE {
        return refuse("--profile range needs at least 16 keys");
    }
    let range = bloomkv::KeyspaceOptions::RANGE_FILTER_BITS_PER_KEY_RANGE;
    if !range.contains(&args.range_bits_per_key) {
        return refuse("--range-bits-per-key must be between 4 and 40");
    }
    if args.range_share.is_some_and(|s| !(0.0..=1.0).contains(&s)) {
        return refuse("--range-share must be between 0 and 1");
    }
    if !ReadMix::RANGE_WIDTH_RANGE.contains(&args.range_width) {
        return refuse("--range-width must be between 1 and 2^37");
    }
    Ok(())
}

/// The key of position `j`: its integer, 8 bytes big-endian.
fn key(x: u64) -> [u8; 8] {
    x.to_be_bytes()
}

/// Whether position `j` holds a key.
fn present(j: u64) -> bool {
    j % HOLE != HOLE - 1
}

/// The dataset: positions `0..positions`, `keys` of them present.
#[derive(Clone, Copy)]
struct Dataset {
    positions: u64,
}

impl Dataset {
    fn new(keys: u64) -> Self {
        // `keys` present positions: HOLE − 1 of every HOLE.
        let full = keys / (HOLE - 1);
        let rest = keys % (HOLE - 1);
        Dataset { positions: full * HOLE + rest }
    }

    /// A present position drawn at random, whose next one is a hole when `before_hole`.
    fn draw(&self, rng: &mut impl Rng, before_hole: bool) -> u64 {
        if before_hole {
            let blocks = self.positions / HOLE;
            return rng.gen_range(0..blocks.max(1)) * HOLE + HOLE - 2;
        }
        loop {
            let j = rng.gen_range(0..self.positions);
            if present(j) {
                return j;
            }
        }
    }

    /// An empty range of `w` integers: after position `j`'s key, at offset `1 + r` (`r`
    /// random, or 0 when `next`).
    fn empty(&self, rng: &mut impl Rng, w: u64, next: bool) -> RangeInclusive<u64> {
        let wide = w >= SPACING;
        let j = self.draw(rng, wide);
        let gap = if wide { 2 * SPACING - 1 } else { SPACING - 1 };
        let r = if next { 0 } else { rng.gen_range(0..=gap - w) };
        let lo = j * SPACING + 1 + r;
        lo..=lo + w - 1
    }
}

/// One operation kind's figures on one database.
#[derive(Debug, Serialize)]
pub(super) struct RangeRow {
    /// `fill`, `emptyrange`, `emptyrange-next`, `shortrange`, `longscan`, `readrandom`
    /// or `readmissing`.
    workload: &'static str,
    /// Whether the database has range filters.
    range_filters: bool,
    /// Integers the range covers (scans only).
    width: Option<u64>,
    /// Range filters' bits per key (under a budget, their average over the tables' keys
    /// once filled), `None` without.
    range_filter_bits_per_key: Option<f64>,
    ops: u64,
    seconds: f64,
    ops_per_sec: f64,
    /// Tables whose key range met the operation's range, per operation.
    tables_in_range_per_op: Option<f64>,
    /// Tables the scan read, per operation (without filters: those in range).
    tables_read_per_op: Option<f64>,
    range_filter_probes: u64,
    range_filter_skips: u64,
    range_filter_false_positives: u64,
    /// Empty ranges: tables let through over tables asked.
    false_positive_rate: Option<f64>,
    /// Empty ranges: `width / 2^(bits − 2)`.
    false_positive_bound: Option<f64>,
    /// `fill`: seconds to bring the tree to rest after the puts.
    settle_seconds: Option<f64>,
    /// `fill`: bits per key the tables' point filters hold in RAM once at rest.
    point_filter_memory_bits_per_key: Option<f64>,
    /// `fill`: bits per key the tables' range filters hold in RAM once at rest.
    range_filter_memory_bits_per_key: Option<f64>,
    /// Point lookups: tables whose point filter let a key through that they did not hold,
    /// per lookup (the range filter, asked next, turned most of those away: below).
    filter_false_positives_per_op: Option<f64>,
    /// Point lookups: tables whose point filter said "maybe" and whose range filter, asked
    /// for the key alone, said "absent", per lookup.
    range_filter_point_negatives_per_op: Option<f64>,
    /// Point lookups: data blocks searched (read or found in the block cache), per lookup.
    blocks_per_op: Option<f64>,
    /// `fill`: tables per level (L0 first) once at rest, and after the shapes were aligned
    /// (see `RangeReport::shape`), as the reads found them.
    tables_per_level_at_rest: Option<Vec<usize>>,
    tables_per_level: Option<Vec<usize>>,
}

#[derive(Serialize)]
struct RangeReport {
    schema: &'static str,
    profile: &'static str,
    keys: u64,
    value_bytes: usize,
    memtable_bytes: usize,
    bits_per_key: f64,
    range_filter_bits_per_key: f64,
    /// With `--range-share`: both databases `Budgeted` at `bits_per_key`, the one with range
    /// filters split for this share of range reads.
    range_share: Option<f64>,
    range_width: Option<u64>,
    reads: u64,
    seed: u64,
    /// `as-is` or `warm`: the page cache each phase starts from.
    page_cache: &'static str,
    /// Seconds after which this kernel pages out idle memory, if it does.
    idle_pageout_seconds: Option<f64>,
    /// What was done so that both databases are read in the same shape (see
    /// [`align_shapes`]).
    shape: String,
    machine: super::report::Machine,
    results: Vec<RangeRow>,
    total_seconds: f64,
}

/// Runs the profile.
pub(super) fn run(
    args: &Args,
    plan: &Plan,
    base: &Path,
    base_options: Options,
    started: Instant,
    load_average_at_start: String,
) -> bloomkv::Result<ExitCode> {
    let reads = args.reads.unwrap_or(READS);
    let b = args.range_bits_per_key;
    let mix = args.range_share.map(|s| ReadMix::new(s, args.range_width));
    let filters = match mix {
        None => format!(
            "blocked filter {} bits/key, range filters {b} bits/key vs none",
            args.bits_per_key
        ),
        Some(m) => format!(
            "a budget of {} bits/key split for {} range reads {} wide vs point filters only",
            args.bits_per_key, m.range_share, m.range_width
        ),
    };
    say(&format!(
        "bloomkv bench (range profile): {} keys (8-byte big-endian, {SPACING} apart, every \
         {HOLE}th left out), {} B values, {} MiB memtables, {filters}, {reads} operations per \
         phase, page cache {}{}, dbs in {} (load average {load_average_at_start})\n",
        plan.keys,
        plan.value_bytes,
        plan.memtable_bytes >> 20,
        plan.page_cache.name(),
        page_cache::reclaim_note(page_cache::idle_pageout()),
        base.display(),
    ))?;
    let data = Dataset::new(plan.keys);
    let mut order: Vec<u64> = (0..data.positions).filter(|&j| present(j)).collect();
    order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(args.seed));
    let values = ValuePool::new(plan.value_bytes, args.seed);
    let mut results = Vec::new();
    // Both databases are filled together and every phase then runs on both (see the phase
    // loop), so a change in the machine's load falls on both alike.
    let mut dbs = Vec::new();
    for on in [true, false] {
        let opts =
            base_options.clone().memtable_bytes(plan.memtable_bytes).compression(args.compression);
        let (opts, bits) = match (mix, on) {
            (None, on) => {
                let bits = on.then_some(b);
                let point = super::Policy::Blocked.filter(args.bits_per_key);
                (opts.filter_policy(point).range_filter_bits_per_key(bits), bits)
            }
            (Some(m), on) => {
                let point = FilterPolicy::Budgeted { bits_per_key: args.bits_per_key };
                (opts.filter_policy(point).read_mix(on.then_some(m)), None)
            }
        };
        let dir = base.join(if on { "range-filters" } else { "no-range-filters" });
        let db = Db::open(&dir, opts.clone())?;
        dbs.push((db, dir, bits, on, opts));
    }
    let filling: Vec<&Db> = dbs.iter().map(|d| &d.0).collect();
    let put_seconds = fill_together(&filling, &order, &values)?;
    for ((db, _, bits, on, _), seconds) in dbs.iter_mut().zip(put_seconds) {
        let budgeted = mix.is_some();
        let mut run = Run { db, data, reads, seed: args.seed, bits: *bits, on: *on, budgeted };
        let mut row = run.settle(order.len() as u64, seconds)?;
        if mix.is_some() && *on {
            // Under the budget each table got its own share: their mean over the keys.
            run.bits = Some(mean_range_bits(&db.tables()));
            row.range_filter_bits_per_key = run.bits;
        }
        *bits = run.bits;
        row.tables_per_level_at_rest = Some(levels_in_use(db));
        results.push(row);
    }
    let (dbs, shape) = align_shapes(dbs)?;
    for ((db, _, _, on, _), row) in dbs.iter().zip(results.iter_mut()) {
        let (at_rest, now) = (row.tables_per_level_at_rest.clone(), levels_in_use(db));
        say(&format!(
            "{}: tables per level {:?} at rest, {now:?} read\n",
            if *on { "range filters" } else { "no range filters" },
            at_rest.unwrap_or_default(),
        ))?;
        row.tables_per_level = Some(now);
    }
    say(&format!("shapes: {shape}\n"))?;
    let mut phases: Vec<Scan> = Vec::new();
    for next in [false, true] {
        phases.extend(WIDTHS.map(|w| Scan::Empty { w, next }));
    }
    phases.extend([Scan::Short, Scan::Long, Scan::Point(true), Scan::Point(false)]);
    for (i, &scan) in phases.iter().enumerate() {
        let mut runs = Vec::new();
        for (db, dir, bits, on, _) in &dbs {
            page_cache::prepare(plan.page_cache, dir)?;
            let budgeted = mix.is_some();
            let run = Run { db, data, reads, seed: args.seed, bits: *bits, on: *on, budgeted };
            runs.push(run.phase(scan));
        }
        // Each database runs half its operations in the first pass and half in the second,
        // the order reversed between the passes (AB, then BA; which goes first alternating
        // from phase to phase): the one that runs right after the other meets the caches
        // and the machine as the other left them, and across the two passes each does so
        // once.
        let n = runs[0].len();
        let (a, b) = (i % 2, 1 - i % 2);
        for (k, half) in [(a, 0..n / 2), (b, 0..n / 2), (b, n / 2..n), (a, n / 2..n)] {
            runs[k].run_part(half)?;
        }
        for phase in runs {
            results.push(phase.finish()?);
        }
    }
    for (db, dir, _, _, _) in dbs {
        db.close()?;
        drop(db);
        if args.dir.is_none() {
            std::fs::remove_dir_all(&dir)
                .map_err(|e| bloomkv::Error::io(format!("removing {}", dir.display()), e))?;
        }
    }
    say(&format!("\n{}", table(&results)))?;
    let report = RangeReport {
        schema: "bloomkv-bench-range/1",
        profile: "range",
        keys: plan.keys,
        value_bytes: plan.value_bytes,
        memtable_bytes: plan.memtable_bytes,
        bits_per_key: args.bits_per_key,
        range_filter_bits_per_key: b,
        range_share: args.range_share,
        range_width: mix.map(|m| m.range_width),
        reads,
        seed: args.seed,
        page_cache: plan.page_cache.name(),
        idle_pageout_seconds: page_cache::idle_pageout().map(|d| d.as_secs_f64()),
        shape,
        machine: machine(load_average_at_start),
        results,
        total_seconds: started.elapsed().as_secs_f64(),
    };
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report).map_err(|e| bench_error(e.to_string()))?;
        std::fs::write(path, text)
            .map_err(|e| bloomkv::Error::io(format!("writing {}", path.display()), e))?;
    }
    say(&format!("total {:.1} s\n", report.total_seconds))?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Clone, Copy)]
enum Scan {
    Empty {
        w: u64,
        next: bool,
    },
    Short,
    Long,
    /// `readrandom` (true) or `readmissing`.
    Point(bool),
}

struct Run<'a> {
    db: &'a Db,
    data: Dataset,
    reads: u64,
    seed: u64,
    bits: Option<f64>,
    /// The database with range filters.
    on: bool,
    /// Both databases under one budget (`--range-share`).
    budgeted: bool,
}

impl<'a> Run<'a> {
    fn row(&self, workload: &'static str, width: Option<u64>, ops: u64, seconds: f64) -> RangeRow {
        RangeRow {
            workload,
            range_filters: self.on,
            width,
            range_filter_bits_per_key: self.bits,
            ops,
            seconds,
            ops_per_sec: ops as f64 / seconds.max(1e-9),
            tables_in_range_per_op: None,
            tables_read_per_op: None,
            range_filter_probes: 0,
            range_filter_skips: 0,
            range_filter_false_positives: 0,
            false_positive_rate: None,
            false_positive_bound: None,
            settle_seconds: None,
            point_filter_memory_bits_per_key: None,
            range_filter_memory_bits_per_key: None,
            filter_false_positives_per_op: None,
            range_filter_point_negatives_per_op: None,
            blocks_per_op: None,
            tables_per_level_at_rest: None,
            tables_per_level: None,
        }
    }

    /// The fill's row, `puts` of them in `seconds`, once the tree is brought to rest.
    fn settle(&self, puts: u64, seconds: f64) -> bloomkv::Result<RangeRow> {
        let settle = Instant::now();
        self.db.flush()?;
        while self.db.compact_step()?.is_some() {}
        self.db.wait_for_file_removals();
        let mut row = self.row("fill", None, puts, seconds);
        row.settle_seconds = Some(settle.elapsed().as_secs_f64());
        let tables = self.db.tables();
        let keys = tables.iter().map(|t| t.entries).sum::<u64>().max(1) as f64;
        let bits = |f: &dyn Fn(&TableInfo) -> usize| {
            8.0 * tables.iter().map(f).sum::<usize>() as f64 / keys
        };
        row.point_filter_memory_bits_per_key = Some(bits(&|t| t.filter_memory_bytes));
        row.range_filter_memory_bits_per_key = Some(bits(&|t| t.range_filter_memory_bytes));
        Ok(row)
    }

    fn ranges(&self, scan: Scan, ops: u64) -> Vec<RangeInclusive<u64>> {
        let salt = match scan {
            Scan::Empty { w, next } => w * 2 + u64::from(next),
            Scan::Short => 1,
            Scan::Long | Scan::Point(_) => 3,
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(self.seed ^ salt.wrapping_mul(0x9e37));
        (0..ops)
            .map(|_| match scan {
                Scan::Empty { w, next } => self.data.empty(&mut rng, w, next),
                Scan::Short => {
                    let lo = self.data.draw(&mut rng, false) * SPACING;
                    lo..=lo + SHORT - 1
                }
                Scan::Long | Scan::Point(_) => {
                    let lo = self.data.draw(&mut rng, false) * SPACING;
                    lo..=lo + LONG_KEYS * SPACING - 1
                }
            })
            .collect()
    }

    /// The phase `scan` on this database: its operations drawn, its tables and counters
    /// taken, nothing run yet.
    fn phase(self, scan: Scan) -> Phase<'a> {
        let work = match scan {
            Scan::Point(present) => Work::Keys(self.keys(present), present),
            Scan::Long => Work::Ranges(self.ranges(scan, (self.reads / 10).max(1))),
            _ => Work::Ranges(self.ranges(scan, self.reads)),
        };
        let (tables, before) = (self.db.tables(), self.db.stats());
        Phase { run: self, scan, work, tables, before, seconds: 0.0, found: 0 }
    }

    /// The keys `readrandom` (`present`) or `readmissing` looks up: present keys, or integers
    /// halfway between two.
    fn keys(&self, present: bool) -> Vec<[u8; 8]> {
        let salt = if present { 5 } else { 7 };
        let mut rng = rand::rngs::StdRng::seed_from_u64(self.seed ^ salt);
        let ops = if present { self.reads } else { self.reads * MISSING_READS };
        (0..ops)
            .map(|_| {
                let j = self.data.draw(&mut rng, false) * SPACING;
                key(if present { j } else { j + SPACING / 2 })
            })
            .collect()
    }
}

/// A phase's operations on one database: scans of ranges, or point lookups.
enum Work {
    Ranges(Vec<RangeInclusive<u64>>),
    /// The keys, and whether they are present (`readrandom`) or not (`readmissing`).
    Keys(Vec<[u8; 8]>, bool),
}

/// One phase on one database, run in parts ([`Phase::run_part`]) and then reported.
struct Phase<'a> {
    run: Run<'a>,
    scan: Scan,
    work: Work,
    /// The database's tables and counters before the phase's first part.
    tables: Vec<TableInfo>,
    before: bloomkv::Stats,
    /// Time in the parts run so far, and the keys their scans found.
    seconds: f64,
    found: u64,
}

impl<'a> Phase<'a> {
    fn len(&self) -> usize {
        match &self.work {
            Work::Ranges(r) => r.len(),
            Work::Keys(k, _) => k.len(),
        }
    }

    /// Runs the operations `part` (indexes into the phase's), timed.
    fn run_part(&mut self, part: std::ops::Range<usize>) -> bloomkv::Result<()> {
        let db = self.run.db;
        let start = Instant::now();
        match &self.work {
            Work::Ranges(ranges) => {
                for r in &ranges[part] {
                    for kv in db.range(key(*r.start())..=key(*r.end())) {
                        std::hint::black_box(kv?);
                        self.found += 1;
                    }
                }
            }
            Work::Keys(keys, present) => {
                let present = *present;
                for k in &keys[part] {
                    let got = db.get(k)?;
                    if got.is_some() != present {
                        return Err(bench_error(format!("key {k:?}: present {}", got.is_some())));
                    }
                }
            }
        }
        self.seconds += start.elapsed().as_secs_f64();
        Ok(())
    }

    /// The phase's row, from its time and what its counters moved by.
    fn finish(self) -> bloomkv::Result<RangeRow> {
        let (run, after, before) = (&self.run, self.run.db.stats(), &self.before);
        let ops = self.len() as u64;
        let ranges = match &self.work {
            &Work::Keys(_, present) => {
                let name = if present { "readrandom" } else { "readmissing" };
                let per_op = |n: u64| Some(n as f64 / ops.max(1) as f64);
                let mut row = run.row(name, None, ops, self.seconds);
                row.filter_false_positives_per_op =
                    per_op(after.filter_false_positives - before.filter_false_positives);
                row.range_filter_point_negatives_per_op = per_op(
                    after.range_filter_point_negatives - before.range_filter_point_negatives,
                );
                row.blocks_per_op = per_op(
                    after.block_reads + after.block_cache_hits
                        - before.block_reads
                        - before.block_cache_hits,
                );
                return Ok(row);
            }
            Work::Ranges(ranges) => ranges,
        };
        let (scan, tables, found) = (self.scan, &self.tables, self.found);
        let in_range: u64 = ranges.iter().map(|r| tables_meeting(tables, r).count() as u64).sum();
        let (name, width) = match scan {
            Scan::Empty { w, next: false } => ("emptyrange", w),
            Scan::Empty { w, next: true } => ("emptyrange-next", w),
            Scan::Short => ("shortrange", SHORT),
            Scan::Long | Scan::Point(_) => ("longscan", LONG_KEYS * SPACING),
        };
        if matches!(scan, Scan::Empty { .. }) && found != 0 {
            return Err(bench_error(format!("{name} {width}: found {found} keys in empty ranges")));
        }
        if !matches!(scan, Scan::Empty { .. }) && found == 0 {
            return Err(bench_error(format!("{name}: found nothing from present keys")));
        }
        let mut row = run.row(name, Some(width), ops, self.seconds);
        let probes = after.range_filter_probes - before.range_filter_probes;
        let skips = after.range_filter_skips - before.range_filter_skips;
        row.range_filter_probes = probes;
        row.range_filter_skips = skips;
        row.range_filter_false_positives =
            after.range_filter_false_positives - before.range_filter_false_positives;
        row.tables_in_range_per_op = Some(in_range as f64 / ops as f64);
        // Every table in range is asked when the range is narrow enough for its filter.
        let read = in_range - skips;
        row.tables_read_per_op = Some(read as f64 / ops as f64);
        if let (Scan::Empty { .. }, Some(b), true) = (scan, run.bits, run.on) {
            row.false_positive_rate = Some((probes - skips) as f64 / probes.max(1) as f64);
            row.false_positive_bound = Some(match run.budgeted {
                false => width as f64 / 2f64.powf(b - 2.0),
                true => mean_bound(tables, ranges, width),
            });
        }
        Ok(row)
    }
}

/// Keys each database is given in turn while both fill.
const FILL_CHUNK: usize = 10_000;

/// Puts every present key in `order` into each of `dbs`, [`FILL_CHUNK`] keys at a time to
/// each in turn (which goes first alternating), and returns each one's seconds in its puts.
/// Filled one after the other, the second ran on a machine the first had left (its files in
/// the page cache, the disk's state), which moved their ratio by several percent; filled
/// together, each one's puts also meet both databases' background work alike.
fn fill_together(dbs: &[&Db], order: &[u64], values: &ValuePool) -> bloomkv::Result<Vec<f64>> {
    let mut seconds = vec![0.0; dbs.len()];
    for (c, chunk) in order.chunks(FILL_CHUNK).enumerate() {
        for k in 0..dbs.len() {
            let d = (c + k) % dbs.len();
            let start = Instant::now();
            for (n, &j) in chunk.iter().enumerate() {
                dbs[d].put(key(j * SPACING), values.value((c * FILL_CHUNK + n) as u64))?;
            }
            seconds[d] += start.elapsed().as_secs_f64();
        }
    }
    Ok(seconds)
}

/// A database of the profile: the database, its directory, its range filters' bits per key,
/// whether it has range filters, and the options it was opened with.
type Opened = (Db, std::path::PathBuf, Option<f64>, bool, Options);

/// Tables per level, L0 first, up to the deepest level in use.
fn levels_in_use(db: &Db) -> Vec<usize> {
    let shape = db.stats().tables_per_level;
    shape[..shape.iter().rposition(|&n| n > 0).map_or(0, |l| l + 1)].to_vec()
}

/// Brings the databases, each at rest, to the same shape before anything is read, so a
/// difference in what they read is the filters' and not where each one's compaction cycle
/// stopped: at rest, one may hold a few L0 tables that the other has just compacted, which
/// every scan then merges. When their L0 table counts differ, each is reopened with an L0
/// compaction trigger of 1 and compacted until no compaction is due; if they still differ at L0,
/// both are compacted whole ([`Db::compact`]). Deeper levels are left as they are: their
/// table counts differ by a few percent with the filters' sizes, and a read consults one
/// table per level there whatever the count. Returns the databases, reopened or not, and
/// what was done.
fn align_shapes(dbs: Vec<Opened>) -> bloomkv::Result<(Vec<Opened>, String)> {
    let l0 = |dbs: &[Opened]| -> Vec<usize> {
        dbs.iter().map(|d| d.0.stats().tables_per_level[0]).collect()
    };
    let at_rest = l0(&dbs);
    if at_rest.windows(2).all(|w| w[0] == w[1]) {
        return Ok((dbs, format!("as at rest: both with {} L0 tables", at_rest[0])));
    }
    let mut reopened = Vec::new();
    for (db, dir, bits, on, opts) in dbs {
        db.close()?;
        drop(db);
        let db = Db::open(&dir, opts.clone().l0_compaction_trigger(1))?;
        // An L0 merge may precede the move into L1, and the move may leave L1 over its
        // size: every compaction due runs here (a few, bounded), not in the background
        // during the first phase, where it would swap tables under the reads.
        for _ in 0..64 {
            if db.compact_step()?.is_none() {
                break;
            }
        }
        db.wait_for_file_removals();
        reopened.push((db, dir, bits, on, opts));
    }
    let emptied = l0(&reopened);
    if emptied.windows(2).all(|w| w[0] == w[1]) {
        return Ok((
            reopened,
            format!(
                "L0 tables at rest {at_rest:?} (with range filters first); both reopened \
                 with l0_compaction_trigger 1 and compacted to {} L0 tables",
                emptied[0]
            ),
        ));
    }
    for d in &reopened {
        d.0.compact()?;
    }
    Ok((
        reopened,
        format!(
            "L0 tables at rest {at_rest:?} (with range filters first), {emptied:?} after \
             emptying L0 failed to agree: both compacted whole (Db::compact)"
        ),
    ))
}

/// Tables whose key range meets `r`.
fn tables_meeting<'t>(
    tables: &'t [TableInfo],
    r: &RangeInclusive<u64>,
) -> impl Iterator<Item = &'t TableInfo> {
    let (lo, hi) = (key(*r.start()), key(*r.end()));
    tables.iter().filter(move |t| {
        t.smallest_key.as_slice() <= &hi[..] && t.largest_key.as_slice() >= &lo[..]
    })
}

/// The tables' range filters' requested bits per key, averaged over their keys (0 without).
fn mean_range_bits(tables: &[TableInfo]) -> f64 {
    let with: Vec<(f64, f64)> = tables
        .iter()
        .filter_map(|t| t.range_filter_requested_bits_per_key.map(|b| (b, t.entries as f64)))
        .collect();
    let keys: f64 = with.iter().map(|&(_, n)| n).sum();
    with.iter().map(|&(b, n)| b * n).sum::<f64>() / keys.max(1.0)
}

/// The bound `w / 2^(B − 2)` averaged over the tables `ranges` ask: those meeting a range
/// whose range filter answers for `w` (where tables hold filters of different B).
fn mean_bound(tables: &[TableInfo], ranges: &[RangeInclusive<u64>], w: u64) -> f64 {
    let (mut sum, mut asked) = (0.0, 0u64);
    for r in ranges {
        for t in tables_meeting(tables, r) {
            let Some(b) = t.range_filter_requested_bits_per_key else { continue };
            // A filter answers for `2^(⌊B⌋ − 3)` integers at most; wider is not asked.
            if 1u64 << (b.floor() as u32).saturating_sub(3) >= w {
                sum += bloomkv::filter::budget::range_fpr(b, w);
                asked += 1;
            }
        }
    }
    sum / asked.max(1) as f64
}

/// The text report: each operation with range filters beside without, and their ratio.
fn table(rows: &[RangeRow]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<16} {:>7} | {:>11} {:>7} {:>9} {:>9} | {:>11} {:>7} | {:>6}",
        "workload", "width", "on ops/s", "tables", "FPR", "bound", "off ops/s", "tables", "on/off"
    );
    let (on, off): (Vec<&RangeRow>, Vec<&RangeRow>) = rows.iter().partition(|r| r.range_filters);
    for a in on {
        let Some(b) = off.iter().find(|b| b.workload == a.workload && b.width == a.width) else {
            continue;
        };
        let opt = |v: Option<f64>, p: usize| v.map_or("-".to_string(), |v| format!("{v:.p$}"));
        let width = a.width.map_or("-".to_string(), |w| w.to_string());
        let ratio = a.ops_per_sec / b.ops_per_sec.max(1e-9);
        let _ = writeln!(
            out,
            "{:<16} {:>7} | {:>11.0} {:>7} {:>9} {:>9} | {:>11.0} {:>7} | {:>6.2}",
            a.workload,
            width,
            a.ops_per_sec,
            opt(a.tables_read_per_op, 3),
            opt(a.false_positive_rate, 5),
            opt(a.false_positive_bound, 5),
            b.ops_per_sec,
            opt(b.tables_read_per_op, 3),
            ratio
        );
        if let (Some(x), Some(y)) = (a.blocks_per_op, b.blocks_per_op) {
            let _ = writeln!(
                out,
                "  (blocks searched per lookup: {x:.5} with range filters, {y:.5} without; \
                 point-filter maybes the range filter turned away per lookup: {})",
                opt(a.range_filter_point_negatives_per_op, 5)
            );
        }
        if let (Some(p), Some(r), Some(q)) = (
            a.point_filter_memory_bits_per_key,
            a.range_filter_memory_bits_per_key,
            b.point_filter_memory_bits_per_key,
        ) {
            let _ = writeln!(
                out,
                "  (filters in RAM, bits/key: {p:.2} point + {r:.2} range with range filters, \
                 {q:.2} point without)"
            );
        }
        if let (Some(x), Some(y)) = (a.settle_seconds, b.settle_seconds) {
            let _ =
                writeln!(out, "  (then to rest: {x:.2} s with range filters, {y:.2} s without)");
        }
    }
    out
}
