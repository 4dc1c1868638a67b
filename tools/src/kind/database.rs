//! Everything the tool does with a database directory as a whole: `db` (its `inspect`) — the
//! manifest's counters, the keyspaces, and per keyspace every level with its tables (sizes, key ranges, sequence ranges,
//! filters), the filters run by run next to the split of the same memory a filter budget
//! would make, the RAM the filters and indexes hold, and the WAL segments on disk; `dump` — the
//! merged user view, or with `--internal` the tables' and live WALs' internal entries;
//! `verify`.
//!
//! `db` and `dump` read through `Db::open_read_only` and `verify` reads files only, so all three
//! work while another process has the database open; they show the tables as the manifest
//! listed them at that moment.

use std::io::Write;
use std::path::Path;

use bloomkv::check;
use bloomkv::fs::StdFs;
use bloomkv::{Error, Readable, TableInfo};
use bloomkv_tree::blob::BlobFileKind;
use bloomkv_tree::filename::{self, FileKind};
use bloomkv_tree::version::edit::{KeyspaceDef, DEFAULT_KEYSPACE};
use bloomkv_tree::version::manifest::read_manifest;
use bloomkv_tree::version::set::{DEFAULT_KEYSPACE_NAME, NUM_LEVELS};
use serde::Serialize;

use super::sink::{DumpError, Sink};
use crate::common::{self, Bytes};
use crate::kind::{manifest, table, wal};

/// What `db` prints; field names are part of the tool's interface (see docs/tool.md).
///
/// `levels` and the totals cover every keyspace (each table names its keyspace); the filter
/// figures (`filter_bits_per_key`, `filter_runs` and the blocks per absent lookup) are the
/// default keyspace's, as they were before keyspaces existed, since a lookup reads one
/// keyspace's runs only. `keyspaces` has the same figures keyspace by keyspace.
#[derive(Serialize)]
pub struct Report {
    path: String,
    manifest: ManifestReport,
    /// Every keyspace's tables.
    #[serde(flatten)]
    tables: TableTotals,
    /// The default keyspace's filters.
    #[serde(flatten)]
    filters: FilterFigures,
    /// Each keyspace, the default one first, then in creation order.
    keyspaces: Vec<KeyspaceReport>,
    wal_files: Vec<Wal>,
    wal_bytes: u64,
    /// The live blob files; left out for a database without any.
    #[serde(skip_serializing_if = "Option::is_none")]
    blobs: Option<BlobsReport>,
}

/// The live blob files (see `KeyspaceOptions::blob_threshold`) and their totals, from
/// `Stats::blob_files`: exact, since live bytes are what the current tables reference.
#[derive(Serialize)]
struct BlobsReport {
    files: Vec<BlobFileReport>,
    total_files: usize,
    /// The files' sizes on disk (values, keys and framing).
    total_file_bytes: u64,
    total_values: u64,
    total_value_bytes: u64,
    total_live_bytes: u64,
    total_garbage_bytes: u64,
    /// Bytes on disk per byte of live value: `total_file_bytes / total_live_bytes` (null
    /// when nothing is live).
    space_amplification: Option<f64>,
}

#[derive(Serialize)]
struct BlobFileReport {
    number: u64,
    file: String,
    keyspace: String,
    file_size: u64,
    values: u64,
    value_bytes: u64,
    live_values: u64,
    live_bytes: u64,
    garbage_bytes: u64,
    /// A WAL segment kept as a blob file (`NNNNNN.log`), not a `NNNNNN.blob`.
    wal_segment: bool,
}

fn blobs_report(dir: &Path, stats: &bloomkv::Stats) -> Option<BlobsReport> {
    if stats.blob_files.is_empty() {
        return None;
    }
    let files: Vec<BlobFileReport> = stats
        .blob_files
        .iter()
        .map(|b| BlobFileReport {
            number: b.number,
            file: common::display(&match b.wal_segment {
                true => filename::wal_path(dir, b.number),
                false => filename::blob_path(dir, b.number),
            }),
            keyspace: b.keyspace.clone(),
            file_size: b.file_size,
            values: b.values,
            value_bytes: b.value_bytes,
            live_values: b.live_values,
            live_bytes: b.live_bytes,
            garbage_bytes: b.garbage_bytes,
            wal_segment: b.wal_segment,
        })
        .collect();
    let live: u64 = files.iter().map(|b| b.live_bytes).sum();
    let disk: u64 = files.iter().map(|b| b.file_size).sum();
    Some(BlobsReport {
        total_files: files.len(),
        total_file_bytes: disk,
        total_values: files.iter().map(|b| b.values).sum(),
        total_value_bytes: files.iter().map(|b| b.value_bytes).sum(),
        total_live_bytes: live,
        total_garbage_bytes: files.iter().map(|b| b.garbage_bytes).sum(),
        space_amplification: (live > 0).then(|| disk as f64 / live as f64),
        files,
    })
}

/// One keyspace's tree: the figures the report has for the whole database, for this
/// keyspace alone.
#[derive(Serialize)]
struct KeyspaceReport {
    name: String,
    /// The id WAL records and the manifest name the keyspace by (null if the manifest
    /// changed between the open and its reading).
    id: Option<u32>,
    /// The options the manifest records; for the default keyspace, which takes its options
    /// from whoever opens the database, those of the `Options` the tool opens it with.
    /// (Null only for options this tool cannot read.)
    options: Option<manifest::OptionsReport>,
    /// Where `options` come from: "manifest", or "open" for the default keyspace.
    options_source: &'static str,
    #[serde(flatten)]
    tables: TableTotals,
    #[serde(flatten)]
    filters: FilterFigures,
}

/// Tables level by level, and their totals.
#[derive(Serialize)]
struct TableTotals {
    levels: Vec<Level>,
    total_tables: usize,
    total_table_bytes: u64,
    total_entries: u64,
    filter_memory_bytes: u64,
    index_memory_bytes: u64,
    /// RAM the tables' range filters hold; left out when none has one.
    #[serde(skip_serializing_if = "is_zero")]
    range_filter_memory_bytes: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl TableTotals {
    fn of(tables: &[TableInfo], fmt: Bytes) -> Self {
        TableTotals {
            levels: levels(tables, fmt),
            total_tables: tables.len(),
            total_table_bytes: tables.iter().map(|t| t.file_size).sum(),
            total_entries: tables.iter().map(|t| t.entries).sum(),
            filter_memory_bytes: tables.iter().map(|t| t.filter_memory_bytes as u64).sum(),
            index_memory_bytes: tables.iter().map(|t| t.index_memory_bytes as u64).sum(),
            range_filter_memory_bytes: tables
                .iter()
                .map(|t| t.range_filter_memory_bytes as u64)
                .sum(),
        }
    }
}

/// What one keyspace's filters cost an absent-key lookup (a lookup reads one keyspace's runs).
#[derive(Serialize, Clone)]
struct FilterFigures {
    /// Filter bits per key over the tree (bits of every filter / entries of every table).
    filter_bits_per_key: f64,
    /// The runs an absent-key lookup consults, as `Keyspace::filter_runs` reports them.
    filter_runs: Vec<FilterRunReport>,
    /// Σ `filter_runs[].expected_fpr`: data blocks an absent key inside every run's range costs.
    expected_blocks_per_absent_lookup: f64,
    /// The same with the runs' budgeted shares of the same memory.
    budgeted_blocks_per_absent_lookup: f64,
}

#[derive(Serialize, Clone)]
struct FilterRunReport {
    level: usize,
    /// The table of an L0 run; null for a deeper level.
    table: Option<u64>,
    tables: usize,
    keys: u64,
    bits_per_key: f64,
    expected_fpr: f64,
    budgeted_bits_per_key: f64,
    budgeted_fpr: f64,
}

#[derive(Serialize)]
struct ManifestReport {
    file: String,
    log_number: u64,
    next_file_number: u64,
    last_seq: u64,
    next_keyspace_id: u32,
}

#[derive(Serialize)]
struct Level {
    level: usize,
    table_count: usize,
    bytes: u64,
    tables: Vec<TableReport>,
}

#[derive(Serialize)]
struct TableReport {
    keyspace: String,
    number: u64,
    file: String,
    file_size: u64,
    smallest_key: String,
    largest_key: String,
    smallest_seq: u64,
    largest_seq: u64,
    entries: u64,
    tombstones: u64,
    range_tombstones: u64,
    data_blocks: u64,
    filter_kind: String,
    filter_bits_per_key: f64,
    filter_requested_bits_per_key: f64,
    filter_probes: u32,
    filter_memory_bytes: usize,
    index_memory_bytes: usize,
    expected_fpr: f64,
    /// The range filter; left out when the table has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    range_filter: Option<TableRangeFilter>,
}

/// A table's range filter in the `db` report.
#[derive(Serialize)]
struct TableRangeFilter {
    keys: u64,
    /// Bits of its codes per key.
    bits_per_key: f64,
    requested_bits_per_key: f64,
    /// On disk, trailer included.
    bytes: u64,
    memory_bytes: usize,
}

#[derive(Serialize)]
struct Wal {
    number: u64,
    file: String,
    size: u64,
    /// At or above the manifest's log number: holds writes not yet in a table.
    live: bool,
    /// Below it, but kept as a blob file: tables reference values in it.
    kept: bool,
}

/// `tables` by level: every level below NUM_LEVELS, and any deeper one a table is on.
fn levels(tables: &[TableInfo], fmt: Bytes) -> Vec<Level> {
    let mut levels: Vec<Level> = (0..NUM_LEVELS)
        .map(|level| Level { level, table_count: 0, bytes: 0, tables: Vec::new() })
        .collect();
    for t in tables {
        // `Db::tables` reports levels below NUM_LEVELS; grow rather than index blindly.
        while levels.len() <= t.level {
            let level = levels.len();
            levels.push(Level { level, table_count: 0, bytes: 0, tables: Vec::new() });
        }
        let l = &mut levels[t.level];
        l.table_count += 1;
        l.bytes += t.file_size;
        l.tables.push(TableReport {
            keyspace: t.keyspace.clone(),
            number: t.number,
            file: common::display(&t.path),
            file_size: t.file_size,
            smallest_key: fmt.show(&t.smallest_key),
            largest_key: fmt.show(&t.largest_key),
            smallest_seq: t.smallest_seq,
            largest_seq: t.largest_seq,
            entries: t.entries,
            tombstones: t.tombstones,
            range_tombstones: t.range_tombstones,
            data_blocks: t.data_blocks,
            filter_kind: t.filter_kind.to_string(),
            filter_bits_per_key: t.filter_bits_per_key,
            filter_requested_bits_per_key: t.filter_requested_bits_per_key,
            filter_probes: t.filter_probes,
            filter_memory_bytes: t.filter_memory_bytes,
            index_memory_bytes: t.index_memory_bytes,
            expected_fpr: t.expected_fpr,
            range_filter: t.range_filter_requested_bits_per_key.map(|requested| TableRangeFilter {
                keys: t.range_filter_keys,
                bits_per_key: t.range_filter_bits_per_key,
                requested_bits_per_key: requested,
                bytes: t.range_filter_bytes,
                memory_bytes: t.range_filter_memory_bytes,
            }),
        });
    }
    levels
}

/// One keyspace's section of the report.
fn keyspace_report(
    ks: &bloomkv::Keyspace,
    def: Option<&KeyspaceDef>,
    fmt: Bytes,
) -> bloomkv::Result<KeyspaceReport> {
    let tables = ks.tables()?;
    let runs = ks.filter_runs()?;
    let filter_bits: u64 = runs.iter().map(|r| r.filter_bits).sum();
    let run_keys: u64 = runs.iter().map(|r| r.keys).sum();
    let filter_runs: Vec<FilterRunReport> = runs
        .iter()
        .map(|r| FilterRunReport {
            level: r.level,
            table: r.table,
            tables: r.tables,
            keys: r.keys,
            bits_per_key: r.bits_per_key(),
            expected_fpr: r.expected_fpr,
            budgeted_bits_per_key: r.budgeted_bits_per_key,
            budgeted_fpr: r.budgeted_fpr,
        })
        .collect();
    Ok(KeyspaceReport {
        name: ks.name().to_string(),
        id: def.map(|d| d.id),
        options: match def.filter(|d| d.id != DEFAULT_KEYSPACE) {
            Some(d) => manifest::options_report(d),
            None => manifest::options_report_of(&common::default_keyspace_options()),
        },
        options_source: if def.is_some_and(|d| d.id != DEFAULT_KEYSPACE) {
            "manifest"
        } else {
            "open"
        },
        tables: TableTotals::of(&tables, fmt),
        filters: FilterFigures {
            filter_bits_per_key: if run_keys == 0 {
                0.0
            } else {
                filter_bits as f64 / run_keys as f64
            },
            expected_blocks_per_absent_lookup: filter_runs.iter().map(|r| r.expected_fpr).sum(),
            budgeted_blocks_per_absent_lookup: filter_runs.iter().map(|r| r.budgeted_fpr).sum(),
            filter_runs,
        },
    })
}

/// `db`: the report for the database in `dir`.
pub fn inspect(dir: &Path, fmt: Bytes) -> bloomkv::Result<Report> {
    let db = common::open_db_read_only(dir)?;
    let manifest = read_manifest(&StdFs, dir)?;
    let mut keyspaces = Vec::new();
    for name in db.keyspace_names() {
        let ks = common::existing_keyspace(&db, &name)?;
        let def = manifest.keyspaces.iter().map(|k| &k.def).find(|d| d.name == name);
        keyspaces.push(keyspace_report(&ks, def, fmt)?);
    }
    let tables = db.tables();
    let blobs = blobs_report(dir, &db.stats());
    let mut wal_files = Vec::new();
    for (name, kind) in filename::list(&StdFs, dir)? {
        if let FileKind::Wal(n) = kind {
            // A segment the owner retires meanwhile is simply not listed.
            if let Ok(m) = std::fs::metadata(dir.join(&name)) {
                wal_files.push(Wal {
                    number: n,
                    file: common::display(&filename::wal_path(dir, n)),
                    size: m.len(),
                    live: n >= manifest.log_number,
                    kept: manifest
                        .blob_files
                        .get(&n)
                        .is_some_and(|b| b.kind == BlobFileKind::WalSegment),
                });
            }
        }
    }
    wal_files.sort_by_key(|w| w.number);
    // The default keyspace always exists and comes first: its filters are the top level's.
    Ok(Report {
        path: common::display(dir),
        manifest: ManifestReport {
            file: common::display(&filename::manifest_path(dir, manifest.manifest_number)),
            log_number: manifest.log_number,
            next_file_number: manifest.next_file_number,
            last_seq: manifest.last_seq,
            next_keyspace_id: manifest.next_keyspace_id,
        },
        tables: TableTotals::of(&tables, fmt),
        filters: keyspaces[0].filters.clone(),
        keyspaces,
        wal_bytes: wal_files.iter().map(|w| w.size).sum(),
        wal_files,
        blobs,
    })
}

/// `db`'s text form of `r`: the header, then each keyspace's levels, tables and filter runs,
/// then the totals over all keyspaces and the WAL segments.
pub fn print_inspect(out: &mut common::Out, r: &Report, fmt: Bytes) -> std::io::Result<()> {
    let q = |s: &str| if fmt.hex { s.to_string() } else { format!("\"{s}\"") };
    writeln!(out, "database {}", r.path)?;
    writeln!(
        out,
        "manifest {}: log number {}, next file {}, last sequence {}, next keyspace id {}",
        r.manifest.file,
        r.manifest.log_number,
        r.manifest.next_file_number,
        r.manifest.last_seq,
        r.manifest.next_keyspace_id
    )?;
    for k in &r.keyspaces {
        let id = k.id.map_or(String::new(), |id| format!(" (id {id})"));
        let source = if k.options_source == "open" {
            " (from the opener's Options, not the manifest: the library's defaults)"
        } else {
            ""
        };
        match &k.options {
            Some(o) => writeln!(out, "keyspace {:?}{id}: {o}{source}", k.name)?,
            None => writeln!(out, "keyspace {:?}{id}", k.name)?,
        }
        for l in k.tables.levels.iter() {
            writeln!(out, "  L{}: {} table(s), {} bytes", l.level, l.table_count, l.bytes)?;
            for t in &l.tables {
                writeln!(
                    out,
                    "    {:06}.sst {:>10} bytes  keys {} .. {}  seq {} .. {}  {} entries ({} tombstones), \
                     {} range tombstones, {} blocks, filter {} {:.1} bits/key (asked {:.1}) {} bytes, index {} bytes{}",
                    t.number,
                    t.file_size,
                    q(&t.smallest_key),
                    q(&t.largest_key),
                    t.smallest_seq,
                    t.largest_seq,
                    t.entries,
                    t.tombstones,
                    t.range_tombstones,
                    t.data_blocks,
                    t.filter_kind,
                    t.filter_bits_per_key,
                    t.filter_requested_bits_per_key,
                    t.filter_memory_bytes,
                    t.index_memory_bytes,
                    t.range_filter.as_ref().map_or(String::new(), |f| format!(
                        ", range filter {:.1} bits/key (asked {:.1}) {} keys {} bytes",
                        f.bits_per_key, f.requested_bits_per_key, f.keys, f.memory_bytes
                    ))
                )?;
            }
        }
        print_filter_runs(out, &k.filters)?;
        writeln!(
            out,
            "  keyspace total: {} table(s), {} bytes, {} entries; RAM: filters {} bytes, indexes {} bytes{}",
            k.tables.total_tables,
            k.tables.total_table_bytes,
            k.tables.total_entries,
            k.tables.filter_memory_bytes,
            k.tables.index_memory_bytes,
            range_filter_ram(&k.tables)
        )?;
    }
    writeln!(
        out,
        "total: {} table(s), {} bytes, {} entries; RAM: filters {} bytes, indexes {} bytes{}",
        r.tables.total_tables,
        r.tables.total_table_bytes,
        r.tables.total_entries,
        r.tables.filter_memory_bytes,
        r.tables.index_memory_bytes,
        range_filter_ram(&r.tables)
    )?;
    if let Some(b) = &r.blobs {
        print_blobs(out, b)?;
    }
    for w in &r.wal_files {
        writeln!(
            out,
            "WAL {:06}.log {} bytes{}",
            w.number,
            w.size,
            match (w.live, w.kept) {
                (true, _) => "",
                (false, true) => " (kept as a blob file)",
                (false, false) => " (obsolete)",
            }
        )?;
    }
    writeln!(out, "WAL total: {} bytes", r.wal_bytes)
}

/// The totals' range-filter RAM, for a tree with any.
fn range_filter_ram(t: &TableTotals) -> String {
    match t.range_filter_memory_bytes {
        0 => String::new(),
        n => format!(", range filters {n} bytes"),
    }
}

/// The live blob files, one line each, then their totals.
fn print_blobs(out: &mut common::Out, b: &BlobsReport) -> std::io::Result<()> {
    for f in &b.files {
        writeln!(
            out,
            "blob {:06}.{} {:>10} bytes  keyspace {:?}  {} values ({} bytes), live {} ({} bytes), \
             garbage {} bytes{}",
            f.number,
            if f.wal_segment { "log" } else { "blob" },
            f.file_size,
            f.keyspace,
            f.values,
            f.value_bytes,
            f.live_values,
            f.live_bytes,
            f.garbage_bytes,
            if f.wal_segment { " (kept WAL segment)" } else { "" }
        )?;
    }
    let amp = b.space_amplification.map_or("-".to_string(), |a| format!("{a:.2}"));
    writeln!(
        out,
        "blob total: {} file(s), {} bytes, {} values ({} bytes), live {} bytes, garbage {} bytes; \
         space amplification {amp} (file bytes per live value byte)",
        b.total_files,
        b.total_file_bytes,
        b.total_values,
        b.total_value_bytes,
        b.total_live_bytes,
        b.total_garbage_bytes
    )
}

/// The runs a lookup for an absent key meets, each with its filter bits and expected rate now,
/// beside what `FilterPolicy::Budgeted` would give it out of the same total memory.
fn print_filter_runs(out: &mut common::Out, r: &FilterFigures) -> std::io::Result<()> {
    if r.filter_runs.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "  filter runs (an absent key asks each L0 table and one table per deeper level), \
         {:.2} bits/key on average:",
        r.filter_bits_per_key
    )?;
    writeln!(
        out,
        "    {:<16} {:>12} {:>9} {:>9} | {:>9} {:>9} (budgeted, same memory)",
        "run", "keys", "bits/key", "FPR", "bits/key", "FPR"
    )?;
    for run in &r.filter_runs {
        let name = match (run.table, run.tables) {
            (Some(n), _) => format!("L{} {n:06}.sst", run.level),
            (None, 1) => format!("L{} (1 table)", run.level),
            (None, n) => format!("L{} ({n} tables)", run.level),
        };
        writeln!(
            out,
            "    {:<16} {:>12} {:>9.2} {:>8.4}% | {:>9.2} {:>8.4}%",
            name,
            run.keys,
            run.bits_per_key,
            run.expected_fpr * 100.0,
            run.budgeted_bits_per_key,
            run.budgeted_fpr * 100.0
        )?;
    }
    writeln!(
        out,
        "    expected data blocks per absent lookup: {:.4} now, {:.4} with the budgeted split",
        r.expected_blocks_per_absent_lookup, r.budgeted_blocks_per_absent_lookup
    )
}

/// `dump`: the merged user view of `keyspace` (what `scan` shows), read through
/// `Db::open_read_only`.
pub fn dump(sink: &mut Sink, dir: &Path, keyspace: &str) -> Result<(), DumpError> {
    let db = common::open_db_read_only(dir)?;
    let ks = common::existing_keyspace(&db, keyspace)?;
    let start = sink.range.start().map(<[u8]>::to_vec);
    let iter = match start {
        Some(s) => ks.range(s..),
        None => ks.range(..),
    };
    for kv in iter {
        let (key, value) = kv?;
        if sink.range.past_end(&key) {
            break;
        }
        if sink.range.contains(&key) {
            let e = sink.entry(&key, None, None, &value);
            if !sink.push(e)? {
                break;
            }
        }
    }
    Ok(())
}

/// `dump --internal`: every internal entry of every live table in read order (L0 newest
/// first, then L1, L2, …), then the live WAL segments' operations — the raw material the
/// merged view is made of.
pub fn dump_internal(sink: &mut Sink, dir: &Path) -> Result<(), DumpError> {
    // Tables in read order, as the engine lists them; the view is fixed at open.
    let db = common::open_db_read_only(dir)?;
    for t in db.tables() {
        // Tables of other keyspaces hold keys the merged view (the default keyspace's)
        // does not show; say whose they are.
        let label = if t.keyspace == DEFAULT_KEYSPACE_NAME {
            format!("L{} {:06}.sst", t.level, t.number)
        } else {
            format!("{} L{} {:06}.sst", t.keyspace, t.level, t.number)
        };
        if !table::dump(sink, &t.path, Some(&label))? {
            return Ok(());
        }
    }
    // Live WAL segments (at or above the manifest's log number), oldest first.
    let m = read_manifest(&StdFs, dir)?;
    let mut wals: Vec<u64> = filename::list(&StdFs, dir)?
        .into_iter()
        .filter_map(|(_, k)| match k {
            filename::FileKind::Wal(n) if n >= m.log_number => Some(n),
            _ => None,
        })
        .collect();
    wals.sort_unstable();
    for n in wals {
        let path = filename::wal_path(dir, n);
        let label = format!("{n:06}.log");
        match wal::dump(sink, &path, Some(&label)) {
            Ok(true) => {}
            Ok(false) => return Ok(()),
            // The owner may have retired the segment since the manifest was read.
            Err(DumpError::Lib(Error::Io { source, .. }))
                if source.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `verify`: the library's check of the whole database.
pub fn verify(dir: &Path) -> check::Report {
    check::database(std::sync::Arc::new(StdFs), dir)
}
