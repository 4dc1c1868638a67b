//! The benchmark's results: the JSON document (field names are part of the tool's interface,
//! documented in `docs/bench.md`) and the terminal tables.

use std::fmt::Write;

use serde::Serialize;

use super::measure::PerOp;
use super::space::Amplification;

/// Version tag of the JSON layout; bumped when a field is renamed or removed.
pub const SCHEMA: &str = "bloomkv-bench/1";

/// The whole JSON document written by `--json`.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// What was run.
    pub config: Config,
    /// Where it ran.
    pub machine: Machine,
    /// Shape of each policy's database when the read workloads start.
    pub shapes: Vec<Shape>,
    /// One row per workload × policy.
    pub results: Vec<WorkloadResult>,
    /// For `readmissing`: blocks read per lookup next to what the tables' own filters predict,
    /// with the filter memory that bought it.
    pub predictions: Vec<Prediction>,
    /// Every round of every read-only workload × policy (`--rounds`; one round by default).
    /// `results` holds each one's median round by `ops_per_sec`.
    pub rounds: Vec<RoundRow>,
    /// One row per bits-per-key value × filter policy of `--sweep`.
    pub sweep: Vec<SweepRow>,
    /// Wall-clock seconds of the whole run.
    pub total_seconds: f64,
}

/// The run's parameters.
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    /// `default`, `large` or `large-values` (`--profile`): where the unset flags' values came
    /// from.
    pub profile: String,
    /// Entries in each policy's database (large-values: of the first value size; each row's
    /// `amplification.keys` gives its own).
    pub keys: u64,
    /// `fill` or `ingest` (`--load`): how each database got its entries.
    pub load: String,
    /// Bytes per key (always 16).
    pub key_bytes: usize,
    /// Bytes per value (large-values: the first value size).
    pub value_bytes: usize,
    /// Every value size of the run, a database each (one entry outside the large-values
    /// profile).
    pub value_sizes: Vec<usize>,
    /// `--blob-threshold`: values of at least this many bytes went to blob files; null for
    /// none.
    pub blob_threshold: Option<u64>,
    /// Bits per key of the blocked and classic filters outside the sweep, and the budgeted
    /// filters' average over the tree.
    pub bits_per_key: f64,
    /// Memtable size in bytes.
    pub memtable_bytes: usize,
    /// `Options::target_table_bytes`, when set (else the library's default).
    pub target_table_bytes: Option<u64>,
    /// `Options::level_base_bytes`, when set (else the library's default).
    pub level_base_bytes: Option<u64>,
    /// `Options::max_open_files`.
    pub max_open_files: usize,
    /// `Options::mmap_reads`: point lookups read the tables through memory mappings.
    pub mmap_reads: bool,
    /// `none` or `zstd:LEVEL`.
    pub compression: String,
    /// `as-is`, `warm` or `cold` (`--page-cache`): the page-cache state each read workload
    /// on the loaded databases started from.
    pub page_cache: String,
    /// Seconds after which this kernel pages out memory left untouched (a DAMON `pageout`
    /// scheme), or `null` when it runs none: under one, an `as-is` run's page cache holds
    /// what was read recently, not what was read.
    pub idle_pageout_secs: Option<f64>,
    /// `layered` or `as-filled` (see `--shape`).
    pub shape: String,
    /// Threads running each read workload.
    pub threads: usize,
    /// Operations per read workload.
    pub reads: u64,
    /// Seed of every random choice.
    pub seed: u64,
    /// Workloads run, in the order run.
    pub workloads: Vec<String>,
    /// Filter policies compared.
    pub policies: Vec<String>,
    /// Bits-per-key values of the sweep (empty: no sweep).
    pub sweep_bits_per_key: Vec<f64>,
    /// Entries in each sweep database.
    pub sweep_keys: u64,
    /// `readmissing` lookups per sweep database.
    pub sweep_reads: u64,
    /// Times each read-only workload ran over the same databases (`--rounds`).
    pub rounds: u32,
    /// Keys per prefix of the prefix layout (`--keys-per-prefix`); 0 for the flat layout.
    pub keys_per_prefix: u64,
}

/// The machine, for reading the numbers in context.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// CPU model from /proc/cpuinfo (empty if unknown).
    pub cpu_model: String,
    /// Logical CPUs available to the process.
    pub logical_cpus: usize,
    /// L3 cache size as the kernel reports it, e.g. "32768K" (empty if unknown).
    pub l3_cache: String,
    /// Operating system and architecture.
    pub os: String,
    /// 1-, 5- and 15-minute load averages when the run started (from /proc/loadavg): other
    /// work competing for the cores makes every figure lower and noisier.
    pub load_average_at_start: String,
}

/// A database's shape when the read workloads start.
#[derive(Debug, Clone, Serialize)]
pub struct Shape {
    /// Filter policy.
    pub policy: String,
    /// Tables on each level right after the load (`fillrandom`, or the ingest) and a flush, L0
    /// first.
    pub after_fill_tables_per_level: Vec<usize>,
    /// Tables on each level when the reads start (after `--shape layered` arranged them).
    pub tables_per_level: Vec<usize>,
    /// Bytes on each level when the reads start, L0 first.
    pub bytes_per_level: Vec<u64>,
    /// RAM held by all filters.
    pub filter_memory_bytes: u64,
    /// RAM held by the huge-page chunks the open tables' filters live in, right after the
    /// load and its flush: `filter_memory_bytes` then, plus what compactions' dropped filters
    /// left in chunks still in use, plus chunk tails.
    pub after_fill_filter_chunk_bytes: u64,
    /// The same when the reads start.
    pub filter_chunk_bytes: u64,
    /// Filter bits per table entry over the whole tree (the budgeted policy's average, as
    /// reached; line rounding adds a little to every policy's).
    pub filter_bits_per_key: f64,
    /// The same per level, L0 first (0 for an empty level): where a budget put its bits.
    pub filter_bits_per_key_per_level: Vec<f64>,
    /// RAM held by all table indexes.
    pub index_memory_bytes: u64,
    /// Table files open when the reads start (bounded by `max_open_files`).
    pub open_table_files: u64,
    /// Tables whose lookups read a memory mapping of their file (`--mmap-reads`).
    pub mapped_table_files: u64,
    /// Bytes written to tables per byte of keys and values loaded, over the load and its
    /// flush (an ingest writes each byte about once).
    pub write_amplification: f64,
    /// `fill` or `ingest`.
    pub load: String,
    /// Seconds the load took (the whole fill, or the `Db::ingest` call).
    pub load_seconds: f64,
    /// Bytes of keys and values loaded.
    pub load_bytes: u64,
    /// `load_bytes` in MiB per `load_seconds`.
    pub load_mib_per_sec: f64,
    /// Seconds spent arranging the tree after the fill (compaction and L0 rewrites; 0 for
    /// `--shape as-filled`). Not part of any workload's figures.
    pub settle_seconds: f64,
}

/// Latency summary in nanoseconds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Latency {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Slowest operation.
    pub max: u64,
}

/// One workload on one policy.
#[derive(Debug, Clone, Serialize)]
pub struct WorkloadResult {
    /// db_bench-style workload name.
    pub workload: String,
    /// `blocked`, `budgeted`, `classic` or `none`.
    pub policy: String,
    /// Threads that ran the measured operations.
    pub threads: usize,
    /// Measured operations (for the multiread workloads: keys looked up).
    pub ops: u64,
    /// Keys per `multi_get` call in the multiread workloads, whose latency figures time whole
    /// calls; null for the others.
    pub batch: Option<u64>,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Operations per second over all threads.
    pub ops_per_sec: f64,
    /// CPU seconds the whole process used during the workload (all threads, including the
    /// engine's background thread and a `readwhilewriting` writer); null if unknown.
    pub cpu_seconds: Option<f64>,
    /// Operations per CPU-second (`ops / cpu_seconds`): less sensitive than `ops_per_sec` to
    /// other work sharing the cores.
    pub ops_per_cpu_sec: Option<f64>,
    /// Page faults the process took during the workload, served from memory and from the
    /// storage device, and the machine's steal time in seconds; null where the platform does
    /// not tell (see [`super::measure::Disturbance`]).
    pub minor_faults: Option<u64>,
    /// See `minor_faults`.
    pub major_faults: Option<u64>,
    /// See `minor_faults`.
    pub steal_seconds: Option<f64>,
    /// Per-operation latency, nanoseconds.
    pub latency_ns: Latency,
    /// Latency curve: pairs of (percentile in 0..=100, nanoseconds).
    pub latency_percentiles: Vec<(f64, u64)>,
    /// Engine counter deltas per operation (point lookups only: scans and writes do not
    /// move the block counters).
    pub per_op: PerOp,
    /// Measured false-positive rate of table filters over the workload's lookups, when any
    /// table was asked about a key it does not hold; 1.0 for no filter.
    pub measured_fpr: Option<f64>,
    /// False-positive rate theory predicts per consulted table, from the tables' own filters
    /// (`Db::tables`: each filter's formula at its actual fill; 1.0 for no filter), each
    /// weighted by the chance that a missing key lies in its range:
    /// `predicted_blocks_per_missing_lookup` / the tables a missing key meets.
    pub expected_fpr: f64,
    /// Data blocks a lookup of a missing key should search: Σ over tables of the chance the
    /// key lies in the table's range × the table's own expected false-positive rate.
    pub predicted_blocks_per_missing_lookup: f64,
    /// RAM held by all filters at the end of the workload.
    pub filter_memory_bytes: u64,
    /// Tables per level when the workload started.
    pub tables_per_level: Vec<usize>,
    /// Compactions that completed while the workload ran.
    pub compactions_during: u64,
    /// Memtable flushes while the workload ran.
    pub flushes_during: u64,
    /// Writes that had to wait for background work.
    pub write_stalls: u64,
    /// Writes delayed briefly because L0 was filling up.
    pub write_slowdowns: u64,
    /// Seconds writers spent delayed or stopped by back-pressure during the workload.
    pub write_stall_seconds: f64,
    /// Table bytes written per user byte during the workload (writes only, else 0).
    pub write_amplification: f64,
    /// The background work during the workload, per level written into (L0: flushes);
    /// empty when there was none.
    pub level_work: Vec<LevelWork>,
    /// Tables per level when the workload ended.
    pub tables_after: Vec<usize>,
    /// `readwhilewriting`: overwrites completed by the writer thread.
    pub writer_ops: Option<u64>,
    /// `readwhilewriting`: the writer thread's overwrites per second.
    pub writer_ops_per_sec: Option<f64>,
    /// The prefix workloads: what their scans did with the tables; null for the others.
    pub prefix: Option<PrefixFigures>,
    /// `ttl`: the tables' bytes as the clock moves; null for the others.
    pub space_over_time: Option<Vec<SpacePoint>>,
    /// The large-values profile: the phase's write and space amplification (WAL included)
    /// and what they come from; null elsewhere.
    pub amplification: Option<Amplification>,
}

/// The tables' size at one moment of the `ttl` workload.
#[derive(Debug, Clone, Serialize)]
pub struct SpacePoint {
    /// The manual clock's time since the workload began, seconds.
    pub clock_seconds: f64,
    /// Puts made so far.
    pub puts: u64,
    /// Bytes of every table (`Stats::bytes_per_level` summed).
    pub table_bytes: u64,
}

/// What one prefix workload's scans did with the tables, per scan (per prefix asked, for
/// `prefixexists`).
#[derive(Debug, Clone, Serialize)]
pub struct PrefixFigures {
    /// Tables whose key range holds the prefix, per scan (from the tables' ranges: the
    /// tables a scan without prefix filters reads).
    pub tables_in_range: f64,
    /// Tables whose prefix filter was asked, per scan (0 without an extractor).
    pub filter_checks: f64,
    /// Tables skipped because their prefix filter said no, per scan.
    pub tables_skipped: f64,
    /// Tables the scan read: `tables_in_range − tables_skipped`.
    pub tables_read: f64,
    /// `scanmissing`: (checks − skips) / checks, the prefix filters' measured rate (every
    /// prefix asked is absent from every table); null elsewhere or without checks.
    pub measured_prefix_fpr: Option<f64>,
    /// The tables' filters' own expected rate, weighted by the chance the prefix lies in
    /// each table's range (keys and prefixes share the bits: one rate for both); null
    /// without prefix filters.
    pub expected_prefix_fpr: Option<f64>,
}

/// What flushes (L0) or compactions wrote into one level during a workload.
#[derive(Debug, Clone, Serialize)]
pub struct LevelWork {
    /// The level written into.
    pub level: usize,
    /// Flushes or compactions.
    pub runs: u64,
    /// Bytes read from the level above.
    pub bytes_read_from_above: u64,
    /// Bytes read from this level (the overlapped tables rewritten).
    pub bytes_read_from_level: u64,
    /// Bytes written into the level.
    pub bytes_written: u64,
    /// Tables moved down without rewriting, and their bytes.
    pub tables_moved: u64,
    /// See `tables_moved`.
    pub bytes_moved: u64,
    /// Seconds of those runs (wall clock, summed).
    pub seconds: f64,
    /// `bytes_written / bytes_read_from_above` (0 for L0).
    pub write_amplification: f64,
}

/// One round of one read-only workload on one policy.
#[derive(Debug, Clone, Serialize)]
pub struct RoundRow {
    /// Counted from 0. Round r ran the policies starting with the r-th (rotating).
    pub round: u32,
    /// Workload name.
    pub workload: String,
    /// Filter policy.
    pub policy: String,
    /// Operations per second over all threads.
    pub ops_per_sec: f64,
    /// Operations per CPU-second of the whole process; null if unknown.
    pub ops_per_cpu_sec: Option<f64>,
    /// Median latency, nanoseconds.
    pub p50_ns: u64,
    /// 99th-percentile latency, nanoseconds.
    pub p99_ns: u64,
    /// The round's page faults and steal time, as in [`WorkloadResult`].
    pub minor_faults: Option<u64>,
    /// See `minor_faults`.
    pub major_faults: Option<u64>,
    /// See `minor_faults`.
    pub steal_seconds: Option<f64>,
}

/// Splits rows measured in rounds into each workload × policy's median round by
/// `ops_per_sec` (the lower middle one for an even count) and one [`RoundRow`] per round.
pub fn by_round(measured: Vec<(u32, WorkloadResult)>) -> (Vec<WorkloadResult>, Vec<RoundRow>) {
    let rounds: Vec<RoundRow> = measured
        .iter()
        .map(|(round, r)| RoundRow {
            round: *round,
            workload: r.workload.clone(),
            policy: r.policy.clone(),
            ops_per_sec: r.ops_per_sec,
            ops_per_cpu_sec: r.ops_per_cpu_sec,
            p50_ns: r.latency_ns.p50,
            p99_ns: r.latency_ns.p99,
            minor_faults: r.minor_faults,
            major_faults: r.major_faults,
            steal_seconds: r.steal_seconds,
        })
        .collect();
    let mut groups: Vec<Vec<WorkloadResult>> = Vec::new();
    for (_, r) in measured {
        match groups.iter_mut().find(|g| g[0].workload == r.workload && g[0].policy == r.policy) {
            Some(g) => g.push(r),
            None => groups.push(vec![r]),
        }
    }
    let medians = groups
        .into_iter()
        .map(|mut g| {
            g.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
            g.swap_remove((g.len() - 1) / 2)
        })
        .collect();
    (medians, rounds)
}

/// The middle value (the lower middle one for an even count); `None` for no values.
fn median(mut xs: Vec<f64>) -> Option<f64> {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len().saturating_sub(1) / 2).copied()
}

/// Prints every round's ops/s and, where `classic` ran too, each other policy's ratio to
/// it in the same round. Nothing for a single round (the results table says it all).
pub fn write_rounds(out: &mut String, rows: &[RoundRow], rounds: u32) -> std::fmt::Result {
    if rounds < 2 || rows.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "\nrounds: ops/s in each of {rounds} rounds over the same databases (policies in rotated \
         order); the table above shows the median round"
    )?;
    let header = cells((1..=rounds).map(|r| format!("round {r}")));
    writeln!(out, "{:<33} {header}   median", "")?;
    let mut workloads: Vec<&str> = Vec::new();
    let mut policies: Vec<&str> = Vec::new();
    for r in rows {
        if !workloads.contains(&r.workload.as_str()) {
            workloads.push(&r.workload);
        }
        if !policies.contains(&r.policy.as_str()) {
            policies.push(&r.policy);
        }
    }
    // One policy's ops/s for one workload, in round order.
    let series = |w: &str, p: &str| -> Vec<f64> {
        let mut v: Vec<(u32, f64)> = rows
            .iter()
            .filter(|r| r.workload == w && r.policy == p)
            .map(|r| (r.round, r.ops_per_sec))
            .collect();
        v.sort_by_key(|&(round, _)| round);
        v.into_iter().map(|(_, x)| x).collect()
    };
    for &w in &workloads {
        for &p in &policies {
            let xs = series(w, p);
            let m = median(xs.clone()).map_or_else(|| "-".to_string(), si);
            writeln!(out, "{w:<17} {p:<15} {}   {m:>6}", cells(xs.iter().map(|&x| si(x))))?;
        }
        let base = series(w, "classic");
        for &p in policies.iter().filter(|&&p| p != "classic" && !base.is_empty()) {
            let ratios: Vec<f64> = series(w, p).iter().zip(&base).map(|(x, c)| x / c).collect();
            let m = median(ratios.clone()).map_or_else(|| "-".to_string(), |r| format!("{r:.2}"));
            let label = format!("  {p} / classic");
            let row = cells(ratios.iter().map(|r| format!("{r:.2}")));
            writeln!(out, "{label:<33} {row}   {m:>6}")?;
        }
    }
    Ok(())
}

/// One column per round, right-aligned.
fn cells(xs: impl Iterator<Item = String>) -> String {
    xs.map(|x| format!("{x:>8}")).collect::<Vec<_>>().join(" ")
}

/// The `readmissing` prediction check for one policy.
#[derive(Debug, Clone, Serialize)]
pub struct Prediction {
    /// Filter policy.
    pub policy: String,
    /// Data blocks searched per lookup (disk or cache).
    pub blocks_per_lookup: f64,
    /// Tables whose key range covered the key, per lookup.
    pub tables_consulted_per_lookup: f64,
    /// Expected false-positive rate per consulted table (1.0 for no filter).
    pub expected_fpr: f64,
    /// Σ over tables of the chance a missing key lies in the table's range × the table's own
    /// expected false-positive rate.
    pub predicted_blocks_per_lookup: f64,
    /// RAM held by all filters: what the blocks per lookup cost.
    pub filter_memory_bytes: u64,
    /// Filter bits per table entry over the whole tree.
    pub filter_bits_per_key: f64,
}

/// One database of the bits-per-key sweep.
#[derive(Debug, Clone, Serialize)]
pub struct SweepRow {
    /// `blocked`, `budgeted` or `classic`.
    pub policy: String,
    /// Requested bits per key (budgeted: the average over the tree).
    pub bits_per_key: f64,
    /// Probes per key the filter uses (budgeted: at the average; each table has its own).
    pub probes: u32,
    /// Entries in the database.
    pub keys: u64,
    /// RAM held by all filters.
    pub filter_memory_bytes: u64,
    /// Filter bits per table entry over the whole tree.
    pub filter_bits_per_key: f64,
    /// Measured false-positive rate of `readmissing`.
    pub measured_fpr: f64,
    /// Theory's false-positive rate, from the tables' filters as in [`WorkloadResult`].
    pub expected_fpr: f64,
    /// `readmissing` lookups per second.
    pub readmissing_ops_per_sec: f64,
    /// Data blocks searched per lookup (disk or cache).
    pub blocks_per_op: f64,
    /// What the tables' own filters predict for `blocks_per_op` (see [`Prediction`]).
    pub predicted_blocks_per_op: f64,
    /// Data blocks read from disk per lookup.
    pub blocks_read_per_op: f64,
    /// Tables whose range covered the key, per lookup.
    pub tables_consulted_per_op: f64,
    /// `readmissing` latency, nanoseconds.
    pub latency_ns: Latency,
    /// Tables per level of the sweep database.
    pub tables_per_level: Vec<usize>,
}

/// Human-readable count: 1234567 → "1.23M".
pub fn si(x: f64) -> String {
    match x {
        x if x >= 1e9 => format!("{:.2}G", x / 1e9),
        x if x >= 1e6 => format!("{:.2}M", x / 1e6),
        x if x >= 1e3 => format!("{:.1}k", x / 1e3),
        x => format!("{x:.0}"),
    }
}

/// Nanoseconds as µs with a precision that suits the magnitude.
fn us(ns: u64) -> String {
    let u = ns as f64 / 1e3;
    if u < 10.0 {
        format!("{u:.2}")
    } else if u < 1000.0 {
        format!("{u:.1}")
    } else {
        format!("{u:.0}")
    }
}

fn pct(x: Option<f64>) -> String {
    x.map_or_else(|| "-".to_string(), |x| format!("{:.3}%", x * 100.0))
}

/// Prints the main results table.
pub fn write_results(out: &mut String, rows: &[WorkloadResult]) -> std::fmt::Result {
    writeln!(
        out,
        "{:<17} {:<15} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>8}",
        "workload",
        "policy",
        "ops/s",
        "ops/cpu-s",
        "p50 µs",
        "p99 µs",
        "p99.9 µs",
        "blk/op",
        "cache/op",
        "chk/op",
        "skip/op",
        "FPR meas",
        "FPR exp",
        "filt MiB"
    )?;
    for r in rows {
        writeln!(
                out,
            "{:<17} {:<15} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>9} {:>9} {:>8.2}",
            r.workload,
            r.policy,
            si(r.ops_per_sec),
            r.ops_per_cpu_sec.map_or_else(|| "-".to_string(), si),
            us(r.latency_ns.p50),
            us(r.latency_ns.p99),
            us(r.latency_ns.p999),
            r.per_op.blocks_read,
            r.per_op.cache_hits,
            r.per_op.tables_consulted,
            r.per_op.tables_skipped,
            pct(r.measured_fpr),
            pct(Some(r.expected_fpr)),
            r.filter_memory_bytes as f64 / (1 << 20) as f64,
        )?;
        if r.write_stalls + r.write_slowdowns > 0 || r.write_amplification > 0.0 {
            writeln!(
                out,
                "{:<26} {} write stalls, {} slowdowns ({:.1} s waiting), {} compactions, write amp {:.2}",
                "",
                r.write_stalls,
                r.write_slowdowns,
                r.write_stall_seconds,
                r.compactions_during,
                r.write_amplification
            )?;
        }
        for l in &r.level_work {
            let mib = |b: u64| b as f64 / (1 << 20) as f64;
            writeln!(
                out,
                "{:<26} L{}: {} runs, read {:.0}+{:.0} MiB, wrote {:.0} MiB (amp {:.1}), moved {} tables, {:.1} s",
                "",
                l.level,
                l.runs,
                mib(l.bytes_read_from_above),
                mib(l.bytes_read_from_level),
                mib(l.bytes_written),
                l.write_amplification,
                l.tables_moved,
                l.seconds
            )?;
        }
        if !r.level_work.is_empty() {
            writeln!(out, "{:<26} tables per level after: {:?}", "", r.tables_after)?;
        }
        if let (Some(n), Some(rate)) = (r.writer_ops, r.writer_ops_per_sec) {
            writeln!(out, "{:<26} writer thread: {} overwrites ({}/s)", "", n, si(rate))?;
        }
        if let Some(points) = &r.space_over_time {
            let kib =
                |p: &SpacePoint| format!("{:.0}s {} KiB", p.clock_seconds, p.table_bytes >> 10);
            let series: Vec<String> = points.iter().map(kib).collect();
            writeln!(out, "{:<26} tables over clock time: {}", "", series.join(", "))?;
        }
    }
    writeln!(
        out,
        "\nops/cpu-s: operations per CPU-second of the whole process (all its threads);\n\
         blk/op: data blocks read from disk per op; cache/op: block-cache hits per op; \
         chk/op: filters asked per op;\nskip/op: tables a filter ruled out per op \
         (block counters move only for point lookups, not scans or writes);\n\
         latency columns: one op in {} timed, so reading the clock costs the throughput little;\n\
         multiread*: an op is one key of a multi_get call, but the latency columns time \
         every whole call.",
        super::measure::LATENCY_SAMPLE_EVERY
    )?;
    Ok(())
}

/// Prints the `readmissing` prediction check, and how the budgeted filters compare with the
/// uniform blocked ones: blocks per missing lookup and the memory each spent.
pub fn write_predictions(out: &mut String, preds: &[Prediction]) -> std::fmt::Result {
    if preds.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "\nreadmissing prediction check (blocks searched per lookup, from disk or cache; \
         predicted: Σ over tables of the chance the key is in range × the table's own FPR):"
    )?;
    for p in preds {
        if p.policy == "none" {
            writeln!(
                out,
                "  no filter: {:.3} blocks/lookup, tables whose range covers the key per lookup = {:.3}",
                p.blocks_per_lookup, p.tables_consulted_per_lookup
            )?;
        } else {
            writeln!(
                out,
                "  {:<15} {:.4} blocks/lookup read vs predicted {:.4} ({:.3} tables × {:.4}% on \
                 average); filters {:.2} MiB, {:.2} bits/key",
                p.policy,
                p.blocks_per_lookup,
                p.predicted_blocks_per_lookup,
                p.tables_consulted_per_lookup,
                p.expected_fpr * 100.0,
                p.filter_memory_bytes as f64 / (1 << 20) as f64,
                p.filter_bits_per_key
            )?;
        }
    }
    let find = |name: &str| preds.iter().find(|p| p.policy == name);
    let pairs = [("budgeted", "blocked"), ("ribbon", "blocked"), ("budgeted-ribbon", "budgeted")];
    for (new_name, old_name) in pairs {
        let (Some(b), Some(u)) = (find(new_name), find(old_name)) else { continue };
        let change = |new: f64, old: f64| (new / old.max(1e-12) - 1.0) * 100.0;
        writeln!(
            out,
            "  {new_name} vs {old_name}: {:+.1}% blocks per missing lookup ({:+.1}% predicted) \
             with {:+.1}% filter memory",
            change(b.blocks_per_lookup, u.blocks_per_lookup),
            change(b.predicted_blocks_per_lookup, u.predicted_blocks_per_lookup),
            change(b.filter_memory_bytes as f64, u.filter_memory_bytes as f64)
        )?;
    }
    Ok(())
}

/// Prints the database shapes.
pub fn write_shapes(out: &mut String, shapes: &[Shape]) -> std::fmt::Result {
    if shapes.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "LSM shape for the reads (tables per level, L0 first; in brackets: right after the load):"
    )?;
    for s in shapes {
        writeln!(
                out,
            "  {:<15} tables {:?} ({:?})  MiB {:?}  filters {:.2} MiB ({:.2} bits/key; per level {:?}; in chunks {:.2} MiB, after the load {:.2} MiB)  indexes {:.2} MiB  open files {}  mapped {}  {} {:.1} s ({:.0} MiB/s)  write amp {:.2}",
            s.policy,
            s.tables_per_level,
            s.after_fill_tables_per_level,
            s.bytes_per_level
                .iter()
                .map(|b| (*b as f64 / (1 << 20) as f64).round())
                .collect::<Vec<_>>(),
            s.filter_memory_bytes as f64 / (1 << 20) as f64,
            s.filter_bits_per_key,
            s.filter_bits_per_key_per_level
                .iter()
                .map(|b| (b * 10.0).round() / 10.0)
                .collect::<Vec<_>>(),
            s.filter_chunk_bytes as f64 / (1 << 20) as f64,
            s.after_fill_filter_chunk_bytes as f64 / (1 << 20) as f64,
            s.index_memory_bytes as f64 / (1 << 20) as f64,
            s.open_table_files,
            s.mapped_table_files,
            s.load,
            s.load_seconds,
            s.load_mib_per_sec,
            s.write_amplification
        )?;
    }
    writeln!(out)?;
    Ok(())
}

/// Prints the sweep table.
pub fn write_sweep(out: &mut String, rows: &[SweepRow]) -> std::fmt::Result {
    if rows.is_empty() {
        return Ok(());
    }
    writeln!(
                out,
        "\nbits-per-key sweep ({} keys each, readmissing; budgeted: bpk is the tree's average, k at it):\n{:<15} {:>5} {:>3} {:>10} {:>8} {:>10} {:>10} {:>9} {:>8} {:>8} {:>8} {:>8}",
        rows[0].keys,
        "policy",
        "bpk",
        "k",
        "filt MiB",
        "bits/key",
        "FPR meas",
        "FPR exp",
        "ops/s",
        "blk/op",
        "touch/op",
        "pred/op",
        "tbl/op"
    )?;
    for r in rows {
        writeln!(
                out,
            "{:<15} {:>5} {:>3} {:>10.3} {:>8.2} {:>10} {:>10} {:>9} {:>8.4} {:>8.4} {:>8.4} {:>8.3}",
            r.policy,
            r.bits_per_key,
            r.probes,
            r.filter_memory_bytes as f64 / (1 << 20) as f64,
            r.filter_bits_per_key,
            pct(Some(r.measured_fpr)),
            pct(Some(r.expected_fpr)),
            si(r.readmissing_ops_per_sec),
            r.blocks_read_per_op,
            r.blocks_per_op,
            r.predicted_blocks_per_op,
            r.tables_consulted_per_op
        )?;
    }
    Ok(())
}

/// The prefix workloads' table figures: per scan, tables in range, asked, skipped and read,
/// and the measured against the expected prefix false-positive rate.
pub fn write_prefix_scans(out: &mut String, results: &[WorkloadResult]) -> std::fmt::Result {
    let rows: Vec<_> = results.iter().filter_map(|r| r.prefix.as_ref().map(|p| (r, p))).collect();
    if rows.is_empty() {
        return Ok(());
    }
    writeln!(out, "\nprefix workloads: tables per scan (prefixexists: per prefix asked)")?;
    writeln!(
        out,
        "{:<13} {:<16} {:>9} {:>9} {:>8} {:>8} {:>8} {:>11} {:>11}",
        "workload",
        "policy",
        "ops/s",
        "in range",
        "asked",
        "skipped",
        "read",
        "prefix FPR",
        "expected"
    )?;
    let pct = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |f| format!("{:.3}%", f * 100.0));
    for (r, p) in rows {
        writeln!(
            out,
            "{:<13} {:<16} {:>9} {:>9.2} {:>8.2} {:>8.2} {:>8.2} {:>11} {:>11}",
            r.workload,
            r.policy,
            si(r.ops_per_sec),
            p.tables_in_range,
            p.filter_checks,
            p.tables_skipped,
            p.tables_read,
            pct(p.measured_prefix_fpr),
            pct(p.expected_prefix_fpr)
        )?;
    }
    Ok(())
}

/// The large-values profile's table: per value size, policy and phase, throughput and
/// latency, then write amplification split into its WAL, table and blob-file parts (each per
/// byte of keys and values written), and the space amplification the phase left.
pub fn write_large_values(out: &mut String, results: &[WorkloadResult]) -> std::fmt::Result {
    writeln!(
        out,
        "{:>8} {:>7} {:<9} {:<11} {:>8} {:>8} {:>8} {:>7} {:>6} {:>6} {:>6} {:>7} {:>9} {:>7}",
        "value",
        "keys",
        "policy",
        "phase",
        "ops/s",
        "p50 µs",
        "p99 µs",
        "w-amp",
        "WAL",
        "tables",
        "blobs",
        "s-amp",
        "disk MiB",
        "settle"
    )?;
    for r in results {
        let Some(a) = &r.amplification else { continue };
        let part = |bytes: u64| match a.write_amplification {
            Some(_) => format!("{:.2}", bytes as f64 / a.payload_bytes_written as f64),
            None => "-".to_string(),
        };
        let value = match a.value_bytes {
            v if v >= 1 << 10 && v % (1 << 10) == 0 => format!("{} KiB", v >> 10),
            v => format!("{v} B"),
        };
        writeln!(
            out,
            "{:>8} {:>7} {:<9} {:<11} {:>8} {:>8} {:>8} {:>7} {:>6} {:>6} {:>6} {:>7.2} {:>9.1} {:>6.1}s",
            value,
            a.keys,
            r.policy,
            r.workload,
            si(r.ops_per_sec),
            us(r.latency_ns.p50),
            us(r.latency_ns.p99),
            a.write_amplification.map_or_else(|| "-".to_string(), |w| format!("{w:.2}")),
            part(a.wal_bytes_written),
            part(a.table_bytes_written),
            part(a.blob_bytes_written),
            a.space_amplification,
            a.disk.allocated_bytes as f64 / (1 << 20) as f64,
            a.settle_seconds
        )?;
    }
    writeln!(
        out,
        "\nw-amp: bytes written to disk (WAL + tables + blob files) per byte of keys and values the \
         phase wrote, split into those three\n(counted until the tree was at rest again: memtable \
         flushed, no compaction due; `settle` is that wait, outside ops/s);\ns-amp: the database \
         directory's blocks on disk (as du counts them) per byte of live keys and values; \
         seekrandom: a seek and the next 10 entries"
    )
}
