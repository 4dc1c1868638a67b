//! `bloomkv bench`: db_bench-style workloads over databases that differ only in their filter
//! policy (blocked Bloom, blocked Bloom under one memory budget split across the tree,
//! classic Bloom, none), plus a bits-per-key sweep.
//!
//! Every policy's database gets the same keys and values — filled in the same random order,
//! or ingested in one `Db::ingest` (`--load ingest`) — is flushed, and then read; per
//! workload × policy the harness reports throughput, latency percentiles (HDR histograms,
//! merged over threads), and the engine's counters per operation (blocks read, cache hits,
//! filter checks, tables skipped, measured false-positive rate, and for missing keys the blocks
//! each table's own filter predicts, with the filter memory beside). Results go to the
//! terminal, and optionally to a JSON document (`--json`, see [`report::Report`]) and an SVG
//! (`--plot`). The layout of both is described in `docs/bench.md`.
//!
//! This file holds the options and the run's order of phases; `build` makes each policy's
//! database, `workloads` runs the timed phases on it, `measure` times operations on worker
//! threads, `predict` works out what the filters should do, `report` and `plot` write the
//! results, `keys` and `page_cache` supply the keys and the page cache's state.

mod build;
mod keys;
mod large_values;
mod measure;
mod page_cache;
mod plot;
mod predict;
mod range_filters;
mod report;
mod space;
mod workloads;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use bloomkv::filter::{math, ribbon};
use bloomkv::{Compression, FilterPolicy, Options, Stats};
use indicatif::{ProgressBar, ProgressState, ProgressStyle};
use rand::seq::SliceRandom;
use rand::SeedableRng;

use build::{build, finish};
use keys::{ValuePool, Zipfian};
use measure::{Delta, Timed};
use predict::Theory;
use report::{Latency, Prediction, Report, WorkloadResult};
use workloads::{
    run_compact, run_counter, run_fill_only, run_reads, run_sweep_point, run_ttl, run_writers,
};

/// A workload, named as in db_bench (and YCSB for the mixed ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Workload {
    /// Insert every key once, in random order (measures building each policy's database).
    #[value(name = "fillrandom")]
    FillRandom,
    /// Insert every key once, in ascending order, into a separate fresh database.
    #[value(name = "fillseq")]
    FillSeq,
    /// Point lookups of uniformly chosen present keys.
    #[value(name = "readrandom")]
    ReadRandom,
    /// Point lookups of absent keys that fall inside tables' key ranges.
    #[value(name = "readmissing")]
    ReadMissing,
    /// `readrandom` through `Db::multi_get`, `--batch` keys per call.
    #[value(name = "multireadrandom")]
    MultiReadRandom,
    /// `readmissing` through `Db::multi_get`, `--batch` keys per call.
    #[value(name = "multireadmissing")]
    MultiReadMissing,
    /// Point lookups of present keys chosen by a zipfian distribution (θ = 0.99).
    #[value(name = "readzipfian")]
    ReadZipfian,
    /// Seek to a uniformly chosen key and read the next 10 entries.
    #[value(name = "seekrandom")]
    SeekRandom,
    /// `readrandom` on the reader threads while one more thread overwrites random keys.
    #[value(name = "readwhilewriting")]
    ReadWhileWriting,
    /// YCSB A: 50% zipfian reads, 50% zipfian updates.
    #[value(name = "ycsb-a")]
    YcsbA,
    /// YCSB B: 95% zipfian reads, 5% zipfian updates.
    #[value(name = "ycsb-b")]
    YcsbB,
    /// `--threads` threads putting `--writes` new keys in all into a fresh database, each
    /// put on its own (not synced). Not in the default run.
    #[value(name = "writers")]
    Writers,
    /// `writers` with every put synced (`Options::sync_writes`), `--synced-writes` in all.
    /// Not in the default run.
    #[value(name = "writers-synced")]
    WritersSynced,
    /// `writers` as read-modify-write transactions (`Db::transaction`: get the key, put it,
    /// commit), no two threads touching one key, so none conflicts. Not in the default run.
    #[value(name = "transactions")]
    Transactions,
    /// `transactions` with every commit synced, `--synced-writes` in all. Not in the default
    /// run.
    #[value(name = "transactions-synced")]
    TransactionsSynced,
    /// A prefix scan (`Db::prefix`) of a prefix no key has, inside the tables' key ranges.
    /// Keys in the prefix layout (`--keys-per-prefix`). Not in the default run.
    #[value(name = "scanmissing")]
    ScanMissing,
    /// A prefix scan of a uniformly chosen present prefix, reading its first 10 keys (all
    /// of them at the default 10 keys per prefix). Not in the default run.
    #[value(name = "scanrandom")]
    ScanRandom,
    /// `Db::prefixes_exist` of `--batch` prefixes per call, half present and half absent.
    /// Not in the default run.
    #[value(name = "prefixexists")]
    PrefixExists,
    /// `--writes` increments of counters over `--counter-keys` keys chosen by a zipfian
    /// distribution, each a `Db::merge` of the built-in `U64Add` operator, on `--threads`
    /// threads, into a fresh database; then every counter is read back and checked. Not in
    /// the default run.
    #[value(name = "counter")]
    Counter,
    /// `counter` as read-modify-write: each increment a `Db::compare_and_swap` of the value
    /// read, retried until it lands. Not in the default run.
    #[value(name = "counter-rmw")]
    CounterRmw,
    /// `--writes` puts of new keys, each with a time to live of 10 s on a manual clock that
    /// moves 40 s over the run, then 10 s more and a compaction: the tables' bytes over the
    /// clock's time, as data expires and compaction reclaims it (`space_over_time`). Not in
    /// the default run.
    #[value(name = "ttl")]
    Ttl,
    /// The keys ingested into a fresh database in four interleaved runs (every fourth key
    /// each: they overlap, so each lands on a level of its own), then one timed
    /// `Db::compact()` merging them into the deepest: ops are the keys, `ops/cpu-s` keys per
    /// CPU-second of compaction. Not in the default run.
    #[value(name = "compact")]
    Compact,
    /// `--profile large-values` only: overwrite half the keys, chosen at random, each with a
    /// new value of the same size. (Last in this list: each workload's place seeds its
    /// random choices, and the others' stay as they were.)
    #[value(name = "overwrite")]
    Overwrite,
}

impl Workload {
    /// The default run's workloads: all but the `writers` pair, which measure the write path
    /// on their own and are asked for by name.
    const ALL: [Workload; 11] = [
        Workload::FillRandom,
        Workload::FillSeq,
        Workload::ReadRandom,
        Workload::ReadMissing,
        Workload::MultiReadRandom,
        Workload::MultiReadMissing,
        Workload::ReadZipfian,
        Workload::SeekRandom,
        Workload::ReadWhileWriting,
        Workload::YcsbA,
        Workload::YcsbB,
    ];

    fn name(self) -> &'static str {
        match self {
            Workload::FillRandom => "fillrandom",
            Workload::FillSeq => "fillseq",
            Workload::ReadRandom => "readrandom",
            Workload::ReadMissing => "readmissing",
            Workload::MultiReadRandom => "multireadrandom",
            Workload::MultiReadMissing => "multireadmissing",
            Workload::ReadZipfian => "readzipfian",
            Workload::SeekRandom => "seekrandom",
            Workload::ReadWhileWriting => "readwhilewriting",
            Workload::YcsbA => "ycsb-a",
            Workload::YcsbB => "ycsb-b",
            Workload::Writers => "writers",
            Workload::WritersSynced => "writers-synced",
            Workload::Transactions => "transactions",
            Workload::TransactionsSynced => "transactions-synced",
            Workload::ScanMissing => "scanmissing",
            Workload::ScanRandom => "scanrandom",
            Workload::PrefixExists => "prefixexists",
            Workload::Counter => "counter",
            Workload::CounterRmw => "counter-rmw",
            Workload::Ttl => "ttl",
            Workload::Compact => "compact",
            Workload::Overwrite => "overwrite",
        }
    }

    /// Workloads that read by prefix, on keys in the prefix layout.
    fn by_prefix(self) -> bool {
        matches!(self, Workload::ScanMissing | Workload::ScanRandom | Workload::PrefixExists)
    }

    /// Workloads that look keys up `--batch` at a time with `multi_get`.
    fn batched(self) -> bool {
        matches!(
            self,
            Workload::MultiReadRandom | Workload::MultiReadMissing | Workload::PrefixExists
        )
    }

    /// Workloads that write to the database `fillrandom` built.
    fn writes(self) -> bool {
        matches!(self, Workload::ReadWhileWriting | Workload::YcsbA | Workload::YcsbB)
    }

    /// Workloads run against the database `fillrandom` built (everything but the fills).
    fn reads_filled_db(self) -> bool {
        !matches!(
            self,
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
                | Workload::Overwrite
        )
    }
}

/// A filter policy to compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Policy {
    /// Cache-line-blocked Bloom filter.
    Blocked,
    /// Blocked Bloom filters under one budget, `--bits-per-key` on average over the tree,
    /// split across runs to minimise blocks read per missing key (`FilterPolicy::Budgeted`).
    Budgeted,
    /// Classic Bloom filter at the same bits per key.
    Classic,
    /// Ribbon filters at about the same bits per key, blocked Bloom filters with the same
    /// false-positive rate for flushes into L0 (`FilterPolicy::Ribbon`, `bloom_before_level`
    /// 1).
    Ribbon,
    /// Ribbon filters under one budget, `--bits-per-key` on average over the tree, blocked
    /// Bloom filters for the flushes into L0 (`FilterPolicy::BudgetedRibbon`, `bloom_before_level`
    /// 1).
    BudgetedRibbon,
    /// No filter.
    None,
    /// `blocked` with a prefix extractor (`Fixed(8)`): the filters hold each table's
    /// prefixes too, in about the same memory.
    #[value(name = "blocked+prefix")]
    BlockedPrefix,
    /// `budgeted` with a prefix extractor.
    #[value(name = "budgeted+prefix")]
    BudgetedPrefix,
    /// `classic` with a prefix extractor.
    #[value(name = "classic+prefix")]
    ClassicPrefix,
}

impl Policy {
    fn name(self) -> &'static str {
        match self {
            Policy::Blocked => "blocked",
            Policy::Budgeted => "budgeted",
            Policy::Classic => "classic",
            Policy::Ribbon => "ribbon",
            Policy::BudgetedRibbon => "budgeted-ribbon",
            Policy::None => "none",
            Policy::BlockedPrefix => "blocked+prefix",
            Policy::BudgetedPrefix => "budgeted+prefix",
            Policy::ClassicPrefix => "classic+prefix",
        }
    }

    /// The policy without its prefix extractor.
    fn base(self) -> Policy {
        match self {
            Policy::BlockedPrefix => Policy::Blocked,
            Policy::BudgetedPrefix => Policy::Budgeted,
            Policy::ClassicPrefix => Policy::Classic,
            p => p,
        }
    }

    /// The prefix extractor the policy's database has.
    pub(crate) fn prefix_extractor(self) -> Option<bloomkv::PrefixExtractor> {
        (self != self.base()).then_some(bloomkv::PrefixExtractor::Fixed(keys::PREFIX_BYTES))
    }

    pub(crate) fn filter(self, bits_per_key: f64) -> FilterPolicy {
        match self.base() {
            Policy::Blocked => FilterPolicy::BlockedBloom { bits_per_key },
            Policy::Budgeted => FilterPolicy::Budgeted { bits_per_key },
            Policy::Classic => FilterPolicy::ClassicBloom { bits_per_key },
            Policy::Ribbon => FilterPolicy::Ribbon { bits_per_key, bloom_before_level: 1 },
            Policy::BudgetedRibbon => {
                FilterPolicy::BudgetedRibbon { bits_per_key, bloom_before_level: 1 }
            }
            _ => FilterPolicy::None,
        }
    }

    /// Probes per key the engine's filter uses at `bits_per_key` (budgeted: at the average;
    /// each table has its own).
    fn probes(self, bits_per_key: f64) -> u32 {
        match self.base() {
            Policy::Blocked | Policy::Budgeted => math::optimal_blocked_probes(bits_per_key),
            Policy::Classic => math::classic_probes(bits_per_key),
            // A Ribbon filter's result bits: the number its "probes" column shows.
            Policy::Ribbon | Policy::BudgetedRibbon => ribbon::result_bits_for(bits_per_key),
            _ => 0,
        }
    }

    /// The false-positive rate theory predicts at `bits_per_key` (1.0 without a filter),
    /// from the policy alone (budgeted: a tree of one run); [`missing_key_theory`] prefers
    /// the tables' own figures.
    fn expected_fpr(self, bits_per_key: f64) -> f64 {
        let k = self.probes(bits_per_key);
        match self.base() {
            Policy::Blocked | Policy::Budgeted => {
                math::blocked_fpr(f64::from(math::LINE_BITS) / bits_per_key, k, math::LINE_BITS)
            }
            // The classic formula depends on n and m only through m/n at these sizes.
            Policy::Classic => math::classic_fpr(1e6, 1e6 * bits_per_key, k),
            Policy::Ribbon | Policy::BudgetedRibbon => ribbon::fpr_at(bits_per_key),
            _ => 1.0,
        }
    }
}

/// The compaction style of every database of a run (`KeyspaceOptions::compaction_style`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Compaction {
    /// Leveled compaction, the library's default.
    Leveled,
    /// Tiering at every level: `level_size_ratio − 1` runs per level.
    Tiered,
    /// Lazy leveling: tiering at every level but the last, one run there.
    Lazy,
    /// FIFO: nothing merged, the oldest tables dropped past `--fifo-max-bytes`.
    Fifo,
}

/// How the tree is arranged before the read workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TreeShape {
    /// Deterministic, and the same for every policy but for the levels the sorted data sits on
    /// (policies that refuse trivial moves keep it higher): after the fill, compact everything into
    /// the last level, then rewrite the most recently inserted keys (same values) as L0 tables,
    /// one flush each, one fewer than the L0 compaction trigger so no compaction follows. Reads
    /// that never write then run on a read-only handle, with no background work at all.
    Layered,
    /// Whatever the fill left after a final flush; compactions it triggered may still be
    /// running, and the shape differs between policies with the timing of background work.
    AsFilled,
}

/// How each policy's database (and each sweep database) gets its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Load {
    /// One `put` per key in random order through the write path: the `fillrandom` workload.
    Fill,
    /// One `Db::ingest` of every key in ascending order, each with the value the fill would
    /// have given it: the same data, written into tables once, without WAL, memtable or
    /// compaction. Much faster for large runs; the fill's own figures are then not measured.
    Ingest,
}

impl Load {
    fn name(self) -> &'static str {
        match self {
            Load::Fill => "fill",
            Load::Ingest => "ingest",
        }
    }
}

/// A named set of defaults; flags given explicitly override it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Profile {
    /// The flags' own defaults: 1M keys filled with `fillrandom`, every workload, the sweep
    /// at an eighth of the keys.
    Default,
    /// Filters far larger than the CPU caches: `--keys 50000000 --load ingest --workloads
    /// readrandom,readmissing,multireadrandom,multireadmissing --page-cache warm` on every
    /// policy, and the sweep at 1M keys (ingested too).
    Large,
    /// Values of 4, 16 and 256 KiB, a database of its own each (64 MiB of values, 4 MiB
    /// memtables): `fillrandom`, `overwrite` of half the keys, `readrandom`, `readmissing` and
    /// `seekrandom`, with each phase's write and space amplification. Only the
    /// blocked filter unless `--policies` names others; no sweep.
    #[value(name = "large-values")]
    LargeValues,
    /// Range filters on and off over one dataset of integer keys (2M, 4 MiB memtables):
    /// empty ranges of 2 to 1024 integers (at random in a gap, and just past a key), short
    /// and long scans, point reads and the fill, with tables read per scan and the measured
    /// false-positive rate beside its bound (docs/bench.md).
    Range,
}

impl Profile {
    fn name(self) -> &'static str {
        match self {
            Profile::Default => "default",
            Profile::Large => "large",
            Profile::LargeValues => "large-values",
            Profile::Range => "range",
        }
    }
}

/// The large profile's workloads: point reads of present and absent keys, one at a time and
/// batched.
const LARGE_WORKLOADS: [Workload; 4] = [
    Workload::ReadRandom,
    Workload::ReadMissing,
    Workload::MultiReadRandom,
    Workload::MultiReadMissing,
];

/// Keys of the large profile: 50M × 116 bytes is about 6 GB per policy.
const LARGE_KEYS: u64 = 50_000_000;

/// The large profile's cap on the sweep's keys: the false-positive rate does not depend on the
/// key count, and 16 sweep databases of 6.25M keys would cost more than the main run.
const LARGE_SWEEP_KEYS: u64 = 1_000_000;

/// The run's parameters once the profile and the explicit flags are combined.
#[derive(Debug, Clone)]
struct Plan {
    profile: Profile,
    keys: u64,
    load: Load,
    workloads: Vec<Workload>,
    policies: Vec<Policy>,
    sweep_keys: u64,
    page_cache: page_cache::PageCache,
    /// Keys per prefix (0: the flat key layout).
    keys_per_prefix: u64,
    /// Bytes per value; the large-values profile plans each of `value_sizes` in turn.
    value_bytes: usize,
    /// The value sizes of the run, one database each (the large-values profile's).
    value_sizes: Vec<usize>,
    memtable_bytes: usize,
    /// Operations per read workload.
    reads: u64,
}

/// Keys per prefix when a prefix workload is asked for without `--keys-per-prefix`.
const DEFAULT_KEYS_PER_PREFIX: u64 = 10;

/// The policies of a run with prefix workloads and no `--policies`: each filtered policy
/// with and without prefix filters, and none.
const PREFIX_POLICIES: [Policy; 7] = [
    Policy::Blocked,
    Policy::Budgeted,
    Policy::Classic,
    Policy::None,
    Policy::BlockedPrefix,
    Policy::BudgetedPrefix,
    Policy::ClassicPrefix,
];

impl Plan {
    fn resolve(args: &Args) -> Plan {
        let profile = args.profile.unwrap_or(Profile::Default);
        let large = profile == Profile::Large;
        let large_values = profile == Profile::LargeValues;
        let range = profile == Profile::Range;
        let value_sizes = match args.value_bytes {
            Some(v) => vec![v],
            None if large_values => large_values::VALUE_SIZES.to_vec(),
            None => vec![DEFAULT_VALUE_BYTES],
        };
        let value_bytes = value_sizes[0];
        let keys = match args.keys {
            Some(keys) => keys,
            None if large => LARGE_KEYS,
            None if large_values => large_values::keys_for(args.payload_bytes, value_bytes),
            None if range => range_filters::KEYS,
            None => 1_000_000,
        };
        let load = args.load.unwrap_or(if large { Load::Ingest } else { Load::Fill });
        let mut workloads = if !args.workloads.is_empty() {
            args.workloads.clone()
        } else if large {
            LARGE_WORKLOADS.to_vec()
        } else if large_values {
            large_values::PHASES.to_vec()
        } else {
            Workload::ALL.to_vec()
        };
        workloads.sort();
        workloads.dedup();
        if large_values {
            // In the order they run: the writes first, each read after them.
            workloads.sort_by_key(|w| large_values::PHASES.iter().position(|p| p == w));
        }
        let by_prefix = workloads.iter().any(|w| w.by_prefix());
        let mut policies = if !args.policies.is_empty() {
            args.policies.clone()
        } else if by_prefix {
            PREFIX_POLICIES.to_vec()
        } else if large_values {
            vec![Policy::Blocked]
        } else {
            vec![
                Policy::Blocked,
                Policy::Budgeted,
                Policy::Classic,
                Policy::Ribbon,
                Policy::BudgetedRibbon,
                Policy::None,
            ]
        };
        let keys_per_prefix =
            args.keys_per_prefix.unwrap_or(if by_prefix { DEFAULT_KEYS_PER_PREFIX } else { 0 });
        policies.sort();
        policies.dedup();
        let eighth = (keys / 8).max(1);
        let sweep_keys =
            args.sweep_keys.unwrap_or(if large { eighth.min(LARGE_SWEEP_KEYS) } else { eighth });
        // A large tree sits in the page cache only partly, and only for a while (see
        // `page_cache`): the large profile starts every read workload warm unless told not to.
        let page_cache = args.page_cache.unwrap_or(if large || range {
            page_cache::PageCache::Warm
        } else {
            page_cache::PageCache::AsIs
        });
        let memtable_bytes = args.memtable_bytes.unwrap_or(if large_values {
            large_values::MEMTABLE_BYTES
        } else if range {
            range_filters::MEMTABLE_BYTES
        } else {
            DEFAULT_MEMTABLE_BYTES
        });
        let reads = args.reads.unwrap_or(if large_values {
            large_values::reads_for(keys)
        } else if range {
            range_filters::READS
        } else {
            DEFAULT_READS
        });
        Plan {
            profile,
            keys,
            load,
            workloads,
            policies,
            sweep_keys,
            page_cache,
            keys_per_prefix,
            value_bytes,
            value_sizes,
            memtable_bytes,
            reads,
        }
    }
}

/// Parses `none`, `zstd` or `zstd:LEVEL`.
fn parse_compression(s: &str) -> Result<Compression, String> {
    match s.split_once(':') {
        None if s == "none" => Ok(Compression::None),
        None if s == "zstd" => Ok(Compression::Zstd { level: 3 }),
        Some(("zstd", level)) => level
            .parse()
            .map(|level| Compression::Zstd { level })
            .map_err(|_| format!("bad zstd level {level:?}")),
        _ => Err(format!("expected none, zstd or zstd:LEVEL, got {s:?}")),
    }
}

/// A list of bits-per-key values, or `none` for no sweep.
#[derive(Debug, Clone)]
pub struct Sweep(Vec<f64>);

fn parse_sweep(s: &str) -> Result<Sweep, String> {
    if s.is_empty() || s == "none" {
        return Ok(Sweep(Vec::new()));
    }
    s.split(',')
        .map(|p| {
            let v: f64 = p.trim().parse().map_err(|_| format!("bad bits per key {p:?}"))?;
            FilterPolicy::BlockedBloom { bits_per_key: v }.validate().map_err(|e| e.to_string())?;
            Ok(v)
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Sweep)
}

/// Options of `bench`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A preset: `large` is `--keys 50000000 --load ingest --workloads
    /// readrandom,readmissing,multireadrandom,multireadmissing --page-cache warm` with the
    /// sweep at 1M keys; `large-values` runs values of 4, 16 and 256 KiB through fill,
    /// overwrite and reads, reporting write and space amplification (docs/bench.md); flags
    /// given explicitly override either.
    #[arg(long, value_enum)]
    profile: Option<Profile>,
    /// Entries in each policy's database [default: 1000000, db_bench's (the whole default run
    /// takes about a minute on a 2-core VM); large profile: 50000000].
    #[arg(long)]
    keys: Option<u64>,
    /// How each database gets its entries: `fill` (fillrandom through the write path) or
    /// `ingest` (one `Db::ingest`, same keys and values) [default: fill; large profile: ingest].
    #[arg(long, value_enum)]
    load: Option<Load>,
    /// Bytes per value (keys are always 16 bytes) [default: 100; large-values profile: 4096,
    /// 16384 and 262144, a database each].
    #[arg(long)]
    value_bytes: Option<usize>,
    /// Large-values profile: bytes of values each value size's database is filled with,
    /// which makes its key count (this over the value size) unless `--keys` is given;
    /// 1638400000 is 400,000 keys of 4 KiB and 100,000 of 16 KiB [default: 67108864].
    #[arg(long)]
    payload_bytes: Option<u64>,
    /// Large-values profile: keys the `overwrite` phase rewrites, chosen at random, each
    /// once; as many as `--keys` overwrites every key, for the space a style leaves after
    /// that [default: half the keys].
    #[arg(long)]
    overwrite_keys: Option<u64>,
    /// Values of at least this many bytes go to blob files, apart from the keys
    /// (`KeyspaceOptions::blob_threshold`) [default: none: every value in the tables].
    #[arg(long)]
    blob_threshold: Option<u64>,
    /// Range profile: bits per key of the range filters (`Options::range_filter_bits_per_key`),
    /// 4 to 40.
    #[arg(long, default_value_t = 16.0)]
    range_bits_per_key: f64,
    /// Range profile: compare at equal memory instead. Both databases get
    /// `FilterPolicy::Budgeted` at `--bits-per-key`; the one with range filters splits it
    /// between point and range filters for this share of range reads
    /// (`KeyspaceOptions::read_mix`, 0 to 1), and `--range-bits-per-key` is not used.
    #[arg(long)]
    range_share: Option<f64>,
    /// Range profile with `--range-share`: the width of the range reads the budget is split
    /// for, in integers.
    #[arg(long, default_value_t = 256)]
    range_width: u64,
    /// Bits per key of the blocked and classic filters, and the budgeted filters' average
    /// over the whole tree (at most 32 for those): every filtered policy gets the same memory.
    #[arg(long, default_value_t = 10.0)]
    bits_per_key: f64,
    /// Memtable size in bytes (`Options::memtable_bytes`) [default: 16777216, the library's;
    /// large-values profile: 4194304].
    #[arg(long)]
    memtable_bytes: Option<usize>,
    /// Size at which tables are split (`Options::target_table_bytes`; default: the library's).
    #[arg(long)]
    target_table_bytes: Option<u64>,
    /// Target size of the first sorted level (`Options::level_base_bytes`; default: the
    /// library's).
    #[arg(long)]
    level_base_bytes: Option<u64>,
    /// L0 tables at which writes slow down (`Options::l0_slowdown_trigger`; default: the
    /// library's).
    #[arg(long)]
    l0_slowdown_trigger: Option<usize>,
    /// L0 tables at which writes stop (`Options::l0_stop_trigger`; default: the library's).
    #[arg(long)]
    l0_stop_trigger: Option<usize>,
    /// Compaction style of every database: leveled, tiered, lazy (lazy leveling) or fifo.
    /// The report's write amplification, tables per level after each workload (for the
    /// styles that gather runs, each L0 table is a run and each sorted level one), and
    /// blocks per lookup compare them; with `--shape as-filled` the reads see the style's
    /// own shape.
    #[arg(long, value_enum, default_value = "leveled")]
    compaction: Compaction,
    /// The FIFO style's bound on each database's table bytes [default: none].
    #[arg(long)]
    fifo_max_bytes: Option<u64>,
    /// Table files kept open at once (`Options::max_open_files`); below the table count,
    /// reads reopen files the bound closed.
    #[arg(long, default_value_t = 4096)]
    max_open_files: usize,
    /// Point lookups read the tables through memory mappings (`Options::mmap_reads`; off by
    /// default, as in the library).
    #[arg(long)]
    mmap_reads: bool,
    /// Block compression: none, zstd or zstd:LEVEL.
    #[arg(long, default_value = "none", value_parser = parse_compression)]
    compression: Compression,
    /// Tree shape for the read workloads: `layered` (compact, then L0 tables of rewritten
    /// keys: the same for every policy) or `as-filled` (the state after fill and flush).
    #[arg(long, value_enum, default_value = "layered")]
    shape: TreeShape,
    /// Keep the databases in this directory (which must be empty or absent) instead of a
    /// temporary directory deleted at the end.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Threads running each read workload, sharing one database.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Workloads to run (comma-separated) [default: all; large profile: readrandom,readmissing,multireadrandom,multireadmissing].
    #[arg(long, value_enum, value_delimiter = ',')]
    workloads: Vec<Workload>,
    /// Filter policies to compare (comma-separated; default all: blocked, budgeted, classic,
    /// none).
    #[arg(long, value_enum, value_delimiter = ',')]
    policies: Vec<Policy>,
    /// Keys per `multi_get` call in the multiread workloads, and prefixes per
    /// `prefixes_exist` call in `prefixexists`.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    batch: u64,
    /// Keys in the prefix layout, this many per prefix (8-byte prefix + 8-byte suffix; see
    /// docs/bench.md) [default: 10 when a prefix workload runs, else the flat layout].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    keys_per_prefix: Option<u64>,
    /// Operations per read workload (and per sweep point). 100,000 missing-key lookups over
    /// four tables meet a few thousand false positives: enough for a rate within a few percent.
    /// [default: 100000; large-values profile: the keys, at least 10000 (scans: a tenth); range
    /// profile: 50000 (long scans: a tenth; readmissing: ten times as many)]
    #[arg(long)]
    reads: Option<u64>,
    /// Puts in all for `writers` (over `--threads` threads).
    #[arg(long, default_value_t = 400_000)]
    writes: u64,
    /// Keys the `counter` workloads' increments go to.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    counter_keys: u64,
    /// Puts in all for `writers-synced` (each costs an fsync, or a share of one).
    #[arg(long, default_value_t = 20_000)]
    synced_writes: u64,
    /// Bits-per-key values to sweep (every filtered policy, readmissing), or "none".
    #[arg(long, default_value = "2,4,6,8,10,12,16,20", value_parser = parse_sweep)]
    sweep: Sweep,
    /// Entries in each sweep database [default: an eighth of --keys (the sweep builds 16
    /// databases, and the false-positive rate does not depend on the key count); large
    /// profile: the same, at most 1000000].
    #[arg(long)]
    sweep_keys: Option<u64>,
    /// Write every figure to this JSON file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw throughput, latency and sweep charts into this SVG file.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Run the read-only workloads this many times over the same databases. With more than
    /// one round every policy's database is built first and all are kept side by side (disk
    /// for all of them at once); each round runs each workload on every policy, one after the
    /// other, starting one policy later than the round before, so no policy always goes
    /// first. The results table shows each workload × policy's median round by ops/s, and a
    /// rounds table every round and the per-round ratios to `classic`. Workloads that write
    /// run once, after the last round.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    rounds: u32,
    /// The page-cache state each read workload on the loaded databases starts from: `as-is`
    /// (whatever the kernel holds), `warm` (every file of the database read through first)
    /// or `cold` (the database closed, every file dropped from the page cache, and reopened:
    /// its block cache empty, its filters and indexes read back; Linux). On a tree near the
    /// size of RAM, `as-is` lets earlier workloads and the other policies' trees decide how
    /// many block reads reach the disk; `warm` and `cold` give every policy the same start.
    /// The sweep's small databases are left as they are. The range profile takes `as-is` or
    /// `warm`. [default: as-is; large and range profiles: warm]
    #[arg(long, value_enum)]
    page_cache: Option<page_cache::PageCache>,
    /// Seed for key order and every random choice.
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    /// No progress bars (they are also hidden when stdout is not a terminal).
    #[arg(long)]
    quiet: bool,
}

/// Writes `text` to stdout. Once the reader has gone (`bench ... | head`), the rest of the
/// report is dropped without error: the run still finishes, writes its `--json` and
/// `--plot` files and removes its databases.
fn say(text: &str) -> bloomkv::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(bloomkv::Error::io("writing to stdout", e))
        }
        _ => Ok(()),
    }
}

fn bench_error(msg: impl Into<String>) -> bloomkv::Error {
    bloomkv::Error::io("bench", std::io::Error::other(msg.into()))
}

/// Everything a phase needs to know about the run.
struct Ctx<'a> {
    args: &'a Args,
    plan: &'a Plan,
    base: &'a Path,
    values: ValuePool,
    zipf: Zipfian,
    /// The random insertion order shared by every policy's `fillrandom`.
    order: Vec<u64>,
    show_progress: bool,
    /// What every database's options start from ([`base_options`]).
    base_options: Options,
}

/// The options every database of the run starts from: the library's defaults, with blob
/// files for values of at least `blob_threshold` bytes when given.
fn base_options(blob_threshold: Option<u64>) -> bloomkv::Result<Options> {
    let opts = Options::default();
    match blob_threshold {
        None => Ok(opts),
        // Out of `usize` is out of the option's range too, which the open refuses by name.
        Some(t) => Ok(opts.blob_threshold(Some(usize::try_from(t).unwrap_or(usize::MAX)))),
    }
}

/// Bytes per value of the filter comparisons, db_bench's.
const DEFAULT_VALUE_BYTES: usize = 100;

/// The memtable outside the large-values profile: the library's default.
const DEFAULT_MEMTABLE_BYTES: usize = 16 << 20;

/// Operations per read workload outside the large-values profile.
const DEFAULT_READS: u64 = 100_000;

/// The bench's L0 compaction trigger (the engine's default), set explicitly because the
/// layered shape depends on it.
const L0_COMPACTION_TRIGGER: usize = 4;

impl Ctx<'_> {
    fn options(&self, policy: Policy, bits_per_key: f64) -> Options {
        let mut opts = self.base_options.clone();
        if let Some(n) = self.args.target_table_bytes {
            opts = opts.target_table_bytes(n);
        }
        if let Some(n) = self.args.level_base_bytes {
            opts = opts.level_base_bytes(n);
        }
        if let Some(n) = self.args.l0_slowdown_trigger {
            opts = opts.l0_slowdown_trigger(n);
        }
        if let Some(n) = self.args.l0_stop_trigger {
            opts = opts.l0_stop_trigger(n);
        }
        let style = match self.args.compaction {
            Compaction::Leveled => bloomkv::CompactionStyle::Leveled,
            Compaction::Tiered => bloomkv::CompactionStyle::Tiered,
            Compaction::Lazy => bloomkv::CompactionStyle::LazyLeveling,
            Compaction::Fifo => bloomkv::CompactionStyle::Fifo {
                max_bytes: self.args.fifo_max_bytes.unwrap_or(u64::MAX),
                max_age: None,
            },
        };
        opts.compaction_style(style)
            .memtable_bytes(self.plan.memtable_bytes)
            .max_open_files(self.args.max_open_files)
            .mmap_reads(self.args.mmap_reads)
            .l0_compaction_trigger(L0_COMPACTION_TRIGGER)
            .filter_policy(policy.filter(bits_per_key))
            .prefix_extractor(policy.prefix_extractor())
            .compression(self.args.compression)
    }

    fn progress(&self, total: u64, label: String) -> ProgressBar {
        if !self.show_progress {
            return ProgressBar::hidden();
        }
        let pb = ProgressBar::new(total).with_prefix(label);
        pb.set_style(
            ProgressStyle::with_template(
                "{prefix:>28} [{bar:25}] {human_pos}/{human_len} {rate:>11} eta {eta}",
            )
            .expect("valid template")
            // indicatif's own {per_sec} prints four decimals; whole operations suffice.
            .with_key("rate", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.0}/s", s.per_sec());
            })
            .progress_chars("=> "),
        );
        pb
    }
}

/// Before `built[at]`'s workload, with `--page-cache warm` or `cold` on Linux: every other
/// policy's database gives up its pages ([`Built::make_way`]), so the one measured has the
/// memory to itself. Four 50M-key trees (22 GB) do not fit in this VM's 24 GiB together: with
/// all of them cached the kernel reclaimed pages through the workloads, the measured tree's
/// among them, so a present-key round spent its time faulting pages back in (some from the
/// disk) and ran at a third of the speed of the next.
fn make_way_for(ctx: &Ctx, built: &mut [build::Built], at: usize) -> bloomkv::Result<()> {
    if ctx.plan.page_cache == page_cache::PageCache::AsIs || !cfg!(target_os = "linux") {
        return Ok(());
    }
    for (j, b) in built.iter_mut().enumerate() {
        if j != at {
            b.make_way(ctx.args.mmap_reads)?;
        }
    }
    Ok(())
}

/// The directory the databases go in: `--dir` (which must be empty or absent), or a new
/// temporary directory, removed when the returned guard drops.
fn bench_dir(args: &Args) -> bloomkv::Result<(Option<tempfile::TempDir>, PathBuf)> {
    Ok(match &args.dir {
        Some(d) => {
            if d.exists()
                && std::fs::read_dir(d)
                    .map_err(|e| bloomkv::Error::io(d.display().to_string(), e))?
                    .next()
                    .is_some()
            {
                return Err(bloomkv::Error::InvalidArgument(format!(
                    "--dir {} is not empty; give an empty or new directory",
                    d.display()
                )));
            }
            std::fs::create_dir_all(d)
                .map_err(|e| bloomkv::Error::io(format!("creating {}", d.display()), e))?;
            (None, d.clone())
        }
        None => {
            let t = tempfile::Builder::new()
                .prefix("bloomkv-bench-")
                .tempdir()
                .map_err(|e| bloomkv::Error::io("creating a temporary directory", e))?;
            let p = t.path().to_path_buf();
            (Some(t), p)
        }
    })
}

/// Runs `bloomkv bench`.
pub fn run(args: &Args) -> Result<ExitCode, bloomkv::Error> {
    let started = Instant::now();
    let load_average_at_start = std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    let plan = Plan::resolve(args);
    if plan.keys == 0 || plan.reads == 0 || args.threads == 0 {
        return Err(bloomkv::Error::InvalidArgument(
            "--keys, --reads and --threads must be positive".into(),
        ));
    }
    let base_options = base_options(args.blob_threshold)?;
    if plan.profile == Profile::LargeValues {
        large_values::check(args, &plan)?;
        for &p in &plan.policies {
            p.filter(args.bits_per_key).validate()?;
        }
        let (_tmp, base) = bench_dir(args)?;
        return large_values::run(args, &plan, &base, base_options, started, load_average_at_start);
    }
    if plan.profile == Profile::Range {
        range_filters::check(args, &plan)?;
        let (_tmp, base) = bench_dir(args)?;
        let avg = load_average_at_start;
        return range_filters::run(args, &plan, &base, base_options, started, avg);
    }
    if let Some(w) = plan.workloads.iter().find(|w| **w == Workload::Overwrite) {
        return Err(bloomkv::Error::InvalidArgument(format!(
            "{} runs in --profile large-values only",
            w.name()
        )));
    }
    if plan.load == Load::Ingest && plan.keys.max(plan.sweep_keys) > u64::from(u32::MAX) + 1 {
        // The ingest maps each key to its fill position in a u32.
        return Err(bloomkv::Error::InvalidArgument(
            "--load ingest supports at most 2^32 keys".into(),
        ));
    }
    let workloads = plan.workloads.clone();
    let policies = plan.policies.clone();
    // The sweep measures the key filters: one database per filter kind.
    let sweep_policies: Vec<Policy> =
        policies.iter().copied().filter(|p| *p != Policy::None && *p == p.base()).collect();
    keys::set_keys_per_prefix(plan.keys_per_prefix);
    if plan.keys_per_prefix > 0 && plan.keys.div_ceil(plan.keys_per_prefix) * 2 > 100_000_000 {
        return Err(bloomkv::Error::InvalidArgument(
            "the prefix layout holds at most 5·10^7 prefixes (8 decimal digits)".into(),
        ));
    }
    // Refuse bits per key a policy would refuse before any database is built.
    FilterPolicy::BlockedBloom { bits_per_key: args.bits_per_key }.validate()?;
    for &p in &policies {
        p.filter(args.bits_per_key).validate()?;
    }
    for &bpk in &args.sweep.0 {
        for &p in &sweep_policies {
            p.filter(bpk).validate()?;
        }
    }
    let sweep_keys = plan.sweep_keys;

    // The temporary directory (when no --dir) is removed when `_tmp` drops at the end.
    let (_tmp, base) = bench_dir(args)?;

    let mut order: Vec<u64> = (0..plan.keys).collect();
    order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(args.seed));
    let ctx = Ctx {
        args,
        plan: &plan,
        base: &base,
        values: ValuePool::new(plan.value_bytes, args.seed),
        zipf: Zipfian::new(plan.keys, Zipfian::YCSB_THETA),
        order,
        show_progress: !args.quiet && std::io::stdout().is_terminal(),
        base_options,
    };

    let idle_pageout = page_cache::idle_pageout();
    let reclaim_note = page_cache::reclaim_note(idle_pageout);
    say(&format!(
        "bloomkv bench ({} profile): {} keys × ({} B key + {} B value) loaded by {}, {} \
         reads/workload on {} thread(s), {} bits/key, compression {}, page cache {}{}, \
         lookups through {}, dbs in {} (load average {})\n",
        plan.profile.name(),
        plan.keys,
        keys::KEY_BYTES,
        plan.value_bytes,
        plan.load.name(),
        plan.reads,
        args.threads,
        args.bits_per_key,
        compression_name(args.compression),
        plan.page_cache.name(),
        reclaim_note,
        if args.mmap_reads { "memory mappings" } else { "pread" },
        base.display(),
        load_average_at_start
    ))?;

    let mut results = Vec::new();
    let mut shapes = Vec::new();
    let fill_measured_by_load =
        plan.load == Load::Fill && workloads.contains(&Workload::FillRandom);
    let needs_load = fill_measured_by_load || workloads.iter().any(|w| w.reads_filled_db());
    // The workloads that read the loaded databases: those that only read may run in rounds;
    // the writers run once, last.
    let (repeated, once): (Vec<Workload>, Vec<Workload>) =
        workloads.iter().filter(|w| w.reads_filled_db()).partition(|w| !w.writes());
    let mut measured: Vec<(u32, WorkloadResult)> = Vec::new();
    let mut built = Vec::new();
    for &policy in &policies {
        if needs_load {
            let mut b = build(&ctx, policy, &workloads, &mut results, &mut shapes)?;
            if args.rounds == 1 {
                // Read and removed before the next policy's is built: one database on disk.
                // (The writers come last in `Workload::ALL`, so this is the order asked.)
                let rows = run_reads(&ctx, &mut b, &repeated, 0, "")?;
                measured.extend(rows.into_iter().map(|row| (0, row)));
                results.extend(run_reads(&ctx, &mut b, &once, 0, "")?);
                finish(&ctx, b)?;
            } else {
                built.push(b);
            }
        }
        if workloads.contains(&Workload::FillRandom) && !fill_measured_by_load {
            // The reads' databases were ingested: fillrandom gets a database of its own.
            results.push(run_fill_only(&ctx, policy, Workload::FillRandom, &ctx.order)?);
        }
        if workloads.contains(&Workload::FillSeq) {
            let order: Vec<u64> = (0..plan.keys).collect();
            results.push(run_fill_only(&ctx, policy, Workload::FillSeq, &order)?);
        }
        for w in [
            Workload::Writers,
            Workload::WritersSynced,
            Workload::Transactions,
            Workload::TransactionsSynced,
        ] {
            if workloads.contains(&w) {
                results.push(run_writers(&ctx, policy, w)?);
            }
        }
        for w in [Workload::Counter, Workload::CounterRmw] {
            if workloads.contains(&w) {
                results.push(run_counter(&ctx, policy, w)?);
            }
        }
        if workloads.contains(&Workload::Compact) {
            results.push(run_compact(&ctx, policy)?);
        }
        if workloads.contains(&Workload::Ttl) {
            results.push(run_ttl(&ctx, policy)?);
        }
    }
    // Within a round each workload runs on every policy before the next workload starts, so
    // the policies' runs of one workload are neighbours in time: what else the machine is
    // doing, and how much of each tree the OS still caches, changes little between them. Round
    // r starts with the policy after round r−1's first. (`built` is empty unless there are
    // several rounds.)
    let n = built.len();
    for round in (0..args.rounds).filter(|_| n > 0) {
        let label = format!(" (round {}/{})", round + 1, args.rounds);
        for workload in &repeated {
            for k in 0..n {
                let at = (k + round as usize) % n;
                make_way_for(&ctx, &mut built, at)?;
                let b = &mut built[at];
                let rows = run_reads(&ctx, b, std::slice::from_ref(workload), round, &label)?;
                measured.extend(rows.into_iter().map(|row| (round, row)));
            }
        }
    }
    // The writers, if any (the large profile has none: then nothing is dropped or closed).
    for at in (0..n).filter(|_| !once.is_empty()) {
        make_way_for(&ctx, &mut built, at)?;
        results.extend(run_reads(&ctx, &mut built[at], &once, 0, "")?);
    }
    for b in built {
        finish(&ctx, b)?;
    }
    let (medians, rounds) = report::by_round(measured);
    results.extend(medians);
    // Present rows in workload order, policies side by side.
    results.sort_by_key(|r: &WorkloadResult| {
        (
            <Workload as clap::ValueEnum>::value_variants()
                .iter()
                .position(|w| w.name() == r.workload),
            policies.iter().position(|p| p.name() == r.policy),
        )
    });

    let predictions: Vec<Prediction> = results
        .iter()
        .filter(|r| r.workload == Workload::ReadMissing.name())
        .map(|r| {
            let shape = shapes.iter().find(|s| s.policy == r.policy);
            Prediction {
                policy: r.policy.clone(),
                blocks_per_lookup: r.per_op.blocks_touched,
                tables_consulted_per_lookup: r.per_op.tables_consulted,
                expected_fpr: r.expected_fpr,
                predicted_blocks_per_lookup: r.predicted_blocks_per_missing_lookup,
                filter_memory_bytes: r.filter_memory_bytes,
                filter_bits_per_key: shape.map_or(0.0, |s| s.filter_bits_per_key),
            }
        })
        .collect();

    let mut sweep = Vec::new();
    for &bpk in &args.sweep.0 {
        for &policy in &sweep_policies {
            sweep.push(run_sweep_point(&ctx, policy, bpk, sweep_keys)?);
        }
    }

    let mut text = String::from("\n");
    report::write_shapes(&mut text, &shapes)
        .and_then(|()| report::write_results(&mut text, &results))
        .and_then(|()| report::write_rounds(&mut text, &rounds, args.rounds))
        .and_then(|()| report::write_prefix_scans(&mut text, &results))
        .and_then(|()| report::write_predictions(&mut text, &predictions))
        .and_then(|()| report::write_sweep(&mut text, &sweep))
        .expect("formatting into a String cannot fail");
    say(&text)?;

    let report = Report {
        schema: report::SCHEMA,
        config: config(args, &plan, idle_pageout),
        machine: machine(load_average_at_start),
        shapes,
        results,
        predictions,
        rounds,
        sweep,
        total_seconds: started.elapsed().as_secs_f64(),
    };
    write_json(args, &report)?;
    if let Some(path) = &args.plot {
        plot::draw(&report, path).map_err(|e| bench_error(format!("plotting: {e}")))?;
        say(&format!("wrote {}\n", path.display()))?;
    }
    say(&format!("total {:.1} s\n", report.total_seconds))?;
    Ok(ExitCode::SUCCESS)
}

/// The run's parameters as the JSON records them.
fn config(args: &Args, plan: &Plan, idle_pageout: Option<std::time::Duration>) -> report::Config {
    report::Config {
        profile: plan.profile.name().to_string(),
        keys: plan.keys,
        load: plan.load.name().to_string(),
        key_bytes: keys::KEY_BYTES,
        value_bytes: plan.value_bytes,
        value_sizes: plan.value_sizes.clone(),
        blob_threshold: args.blob_threshold,
        bits_per_key: args.bits_per_key,
        memtable_bytes: plan.memtable_bytes,
        target_table_bytes: args.target_table_bytes,
        level_base_bytes: args.level_base_bytes,
        max_open_files: args.max_open_files,
        mmap_reads: args.mmap_reads,
        compression: compression_name(args.compression),
        page_cache: plan.page_cache.name().into(),
        idle_pageout_secs: idle_pageout.map(|d| d.as_secs_f64()),
        shape: match args.shape {
            TreeShape::Layered => "layered".into(),
            TreeShape::AsFilled => "as-filled".into(),
        },
        threads: args.threads,
        reads: plan.reads,
        seed: args.seed,
        workloads: plan.workloads.iter().map(|w| w.name().to_string()).collect(),
        policies: plan.policies.iter().map(|p| p.name().to_string()).collect(),
        sweep_bits_per_key: args.sweep.0.clone(),
        sweep_keys: plan.sweep_keys,
        sweep_reads: plan.reads,
        rounds: args.rounds,
        keys_per_prefix: plan.keys_per_prefix,
    }
}

/// Writes `report` to `--json`'s file, if asked.
fn write_json(args: &Args, report: &Report) -> bloomkv::Result<()> {
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(report).map_err(|e| bench_error(e.to_string()))?;
        std::fs::write(path, text)
            .map_err(|e| bloomkv::Error::io(format!("writing {}", path.display()), e))?;
        say(&format!("\nwrote {}\n", path.display()))?;
    }
    Ok(())
}

fn compression_name(c: Compression) -> String {
    match c {
        Compression::Zstd { level } => format!("zstd:{level}"),
        _ => "none".to_string(),
    }
}

fn latency(t: &Timed) -> Latency {
    Latency {
        mean: t.hist.mean(),
        p50: t.hist.value_at_quantile(0.50),
        p99: t.hist.value_at_quantile(0.99),
        p999: t.hist.value_at_quantile(0.999),
        max: t.hist.max(),
    }
}

/// Percentiles sampled for the latency curves of the JSON and the plot.
const CURVE_PERCENTILES: [f64; 12] =
    [0.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99];

#[allow(clippy::too_many_arguments)]
fn result_row(
    workload: Workload,
    policy: Policy,
    theory: Theory,
    threads: usize,
    t: &Timed,
    before: &Stats,
    after: &Stats,
    delta: &Delta,
) -> WorkloadResult {
    let secs = t.elapsed.as_secs_f64();
    let point_reads = delta.gets > 0;
    WorkloadResult {
        workload: workload.name().to_string(),
        policy: policy.name().to_string(),
        threads,
        ops: t.ops,
        batch: None,
        seconds: secs,
        ops_per_sec: t.ops as f64 / secs.max(1e-9),
        cpu_seconds: t.cpu_seconds,
        ops_per_cpu_sec: t.cpu_seconds.map(|c| t.ops as f64 / c.max(1e-9)),
        minor_faults: t.disturbance.map(|d| d.minor_faults),
        major_faults: t.disturbance.map(|d| d.major_faults),
        steal_seconds: t.disturbance.map(|d| d.steal_seconds),
        latency_ns: latency(t),
        latency_percentiles: CURVE_PERCENTILES
            .iter()
            .map(|&p| (p, t.hist.value_at_percentile(p)))
            .chain(std::iter::once((100.0, t.hist.max())))
            .collect(),
        per_op: delta.per_op,
        measured_fpr: if point_reads { delta.measured_fpr } else { None },
        expected_fpr: theory.fpr(),
        predicted_blocks_per_missing_lookup: theory.blocks,
        filter_memory_bytes: after.filter_memory_bytes,
        tables_per_level: before.tables_per_level.clone(),
        compactions_during: delta.compactions,
        flushes_during: delta.flushes,
        write_stalls: delta.write_stalls,
        write_slowdowns: delta.write_slowdowns,
        write_stall_seconds: delta.write_stall_seconds,
        write_amplification: delta.write_amplification,
        level_work: measure::level_work(before, after),
        tables_after: after.tables_per_level.clone(),
        writer_ops: None,
        writer_ops_per_sec: None,
        prefix: None,
        space_over_time: None,
        amplification: None,
    }
}

/// CPU model, logical CPUs and L3 size from /proc and /sys (Linux); empty where unknown.
fn machine(load_average_at_start: String) -> report::Machine {
    let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_default();
    let l3_cache = (0..8)
        .find_map(|i| {
            let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
            let level = std::fs::read_to_string(format!("{dir}/level")).ok()?;
            (level.trim() == "3")
                .then(|| std::fs::read_to_string(format!("{dir}/size")).ok())
                .flatten()
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_default();
    report::Machine {
        cpu_model,
        logical_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        l3_cache,
        os: format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
        load_average_at_start,
    }
}
