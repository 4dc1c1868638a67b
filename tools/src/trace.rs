//! `bloomkv trace <db-dir> <key>` (alias `probe`): the read path of one key made visible. For the memtable
//! (writes replayed from the WAL) and every table in read order: whether its key range covers
//! the key, what its filter answers, whether the key is really there, and which source a
//! `get` would stop at. A "maybe" from a table that does not hold the key is a filter false
//! positive; a "no" from a table that does would be a false negative (never expected).
//!
//! `bloomkv trace <db-dir> --prefix <prefix>`: the same for a prefix scan — per memtable and
//! table, whether its key range meets the scan's, what its prefix filter answers, whether
//! the scan reads it, and whether it really holds a key with the prefix.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use bloomkv::{PrefixExtractor, Presence, Readable, TraceSource};
use serde::Serialize;

use crate::common::{self, Bytes};

/// Options of `trace`.
#[derive(clap::Args)]
// The shared `--hex`, with what it does in this command in its help.
#[command(mut_arg("hex", |a| a.help("Read the key as hex and print values as hex")))]
pub struct Args {
    /// The database directory.
    dir: PathBuf,
    /// The key (escaped text as printed by the tool, or hex with --hex).
    #[arg(required_unless_present = "prefix")]
    key: Option<String>,
    /// Trace a scan of the keys starting with this prefix instead of a key's lookup.
    #[arg(long, value_name = "PREFIX", conflicts_with = "key")]
    prefix: Option<String>,
    /// With --prefix: the default keyspace's prefix extractor (`fixed:N` or
    /// `delimiter:0xHH`), which the manifest does not record. Without it, the one its tables
    /// were built with (the newest table that names one); other keyspaces use their own.
    #[arg(long, value_name = "NAME", requires = "prefix")]
    extractor: Option<String>,
    #[command(flatten)]
    keyspace: common::KeyspaceArg,
    #[command(flatten)]
    output: common::OutputArgs,
}

/// The report; field names are part of the tool's interface (see docs/tool.md).
#[derive(Serialize)]
pub struct Report {
    key: String,
    /// What `get` returns: "value", "tombstone" or "absent".
    result: &'static str,
    /// The value `get` returns, if any.
    value: Option<String>,
    steps: Vec<Step>,
    /// Tables whose filter was asked.
    filter_checks: u64,
    /// Tables whose filter said "no".
    filter_negatives: u64,
    /// Tables whose filter said "maybe" but that hold nothing for the key.
    filter_false_positives: u64,
}

#[derive(Serialize)]
struct Step {
    /// "memtable", "immutable-memtable" or "table".
    source: &'static str,
    level: Option<usize>,
    table: Option<u64>,
    /// For immutable memtables: 0 = newest.
    memtable_index: Option<usize>,
    in_range: bool,
    /// "maybe", "no", or null when the filter was not asked (memtables, out of range).
    filter: Option<&'static str>,
    /// "value", "tombstone", "absent" or "range-deleted" (a value a newer range tombstone
    /// covers).
    actual: &'static str,
    decides: bool,
    false_positive: bool,
}

fn presence(p: &Presence) -> &'static str {
    match p {
        Presence::Value => "value",
        Presence::Tombstone => "tombstone",
        Presence::Absent => "absent",
        Presence::RangeDeleted => "range-deleted",
        Presence::Expired => "expired",
        Presence::MergeOperand => "merge operand",
    }
}

/// The report of a traced prefix scan; field names are part of the tool's interface.
#[derive(Serialize)]
pub struct PrefixReport {
    prefix: String,
    /// The keyspace's extractor, or null.
    extractor: Option<String>,
    /// The prefix asked of the tables' filters, or null when the scan asks none.
    filter_prefix: Option<String>,
    steps: Vec<PrefixStep>,
    /// Tables whose key range meets the scan's.
    tables_in_range: u64,
    /// Tables whose prefix filter was asked.
    filter_checks: u64,
    /// Tables the scan skips because their prefix filter said "no".
    tables_skipped: u64,
    /// Tables whose prefix filter said "maybe" but that hold no key with the prefix.
    filter_false_positives: u64,
}

#[derive(Serialize)]
struct PrefixStep {
    source: &'static str,
    level: Option<usize>,
    table: Option<u64>,
    memtable_index: Option<usize>,
    in_range: bool,
    /// "maybe", "no", or null when the prefix filter was not asked.
    filter: Option<&'static str>,
    /// The scan reads this source.
    read: bool,
    /// The source holds an entry with the prefix (checked without the filter).
    holds: bool,
    false_positive: bool,
}

fn source_parts(s: &TraceSource) -> (&'static str, Option<usize>, Option<u64>, Option<usize>) {
    match *s {
        TraceSource::Memtable => ("memtable", None, None, None),
        TraceSource::ImmutableMemtable(i) => ("immutable-memtable", None, None, Some(i)),
        TraceSource::Table { level, number } => ("table", Some(level), Some(number), None),
    }
}

/// A step's source as the text output names it: `L2 000042.sst`, `immutable memtable 0`.
fn source_name(
    source: &str,
    level: Option<usize>,
    table: Option<u64>,
    memtable_index: Option<usize>,
) -> String {
    match (source, level, table, memtable_index) {
        ("table", Some(l), Some(n), _) => format!("L{l} {n:06}.sst"),
        ("immutable-memtable", _, _, Some(i)) => format!("immutable memtable {i}"),
        (other, ..) => other.to_string(),
    }
}

/// The default keyspace's extractor for a traced scan: `--extractor`, else the newest table's.
fn default_extractor(args: &Args, db: &bloomkv::Db) -> bloomkv::Result<Option<PrefixExtractor>> {
    if let Some(name) = &args.extractor {
        return PrefixExtractor::from_name(name).map(Some).ok_or_else(|| {
            bloomkv::Error::InvalidArgument(format!(
                "unknown prefix extractor {name:?} (expected fixed:N or delimiter:0xHH)"
            ))
        });
    }
    let tables = db.tables();
    let newest = tables
        .iter()
        .filter(|t| t.keyspace == "default")
        .filter_map(|t| t.prefix_extractor.as_deref().map(|e| (t.largest_seq, e)))
        .max_by_key(|(seq, _)| *seq);
    Ok(newest.and_then(|(_, e)| PrefixExtractor::from_name(e)))
}

fn run_prefix(args: &Args, prefix: &str) -> bloomkv::Result<ExitCode> {
    let fmt = args.output.bytes;
    let prefix = fmt.parse(prefix)?;
    let mut db = common::open_db_read_only(&args.dir)?;
    if args.keyspace.keyspace == "default" {
        if let Some(e) = default_extractor(args, &db)? {
            db.close()?;
            let opts = common::read_only_options().prefix_extractor(Some(e));
            db = bloomkv::Db::open_read_only(&args.dir, opts)?;
        }
    }
    let ks = args.keyspace.resolve(&db)?;
    let trace = ks.trace_prefix(&prefix)?;
    let mut r = PrefixReport {
        prefix: fmt.show(&prefix),
        extractor: trace.extractor.clone(),
        filter_prefix: trace.filter_prefix.as_deref().map(|p| fmt.show(p)),
        steps: Vec::with_capacity(trace.steps.len()),
        tables_in_range: 0,
        filter_checks: 0,
        tables_skipped: 0,
        filter_false_positives: 0,
    };
    for s in &trace.steps {
        let (source, level, table, memtable_index) = source_parts(&s.source);
        let false_positive = s.prefix_filter_maybe == Some(true) && !s.holds;
        r.tables_in_range += u64::from(source == "table" && s.in_range);
        if let Some(maybe) = s.prefix_filter_maybe {
            r.filter_checks += 1;
            r.tables_skipped += u64::from(!maybe);
            r.filter_false_positives += u64::from(false_positive);
        }
        r.steps.push(PrefixStep {
            source,
            level,
            table,
            memtable_index,
            in_range: s.in_range,
            filter: s.prefix_filter_maybe.map(|m| if m { "maybe" } else { "no" }),
            read: s.read,
            holds: s.holds,
            false_positive,
        });
    }
    let mut out = common::stdout();
    let written = args.output.write(&mut out, &r, |out, r| print_prefix_text(out, r, fmt));
    common::finish_output(written, &mut out, ExitCode::SUCCESS)
}

fn print_prefix_text(out: &mut common::Out, r: &PrefixReport, fmt: Bytes) -> std::io::Result<()> {
    let q = |s: &str| if fmt.hex { s.to_string() } else { format!("\"{s}\"") };
    writeln!(out, "prefix scan {}", q(&r.prefix))?;
    match (&r.extractor, &r.filter_prefix) {
        (Some(e), Some(p)) => writeln!(out, "extractor {e}; filters asked about {}", q(p))?,
        (Some(e), None) => {
            writeln!(out, "extractor {e}; the prefix is shorter than its: no filter is asked")?
        }
        (None, _) => writeln!(out, "no prefix extractor: no filter is asked")?,
    }
    writeln!(out, "{:<22} {:<9} {:<7} {:<6} holds", "source", "in range", "filter", "read")?;
    for s in &r.steps {
        let source = source_name(s.source, s.level, s.table, s.memtable_index);
        let yes = |b: bool| if b { "yes" } else { "no" };
        let note = if s.false_positive { "  filter false positive" } else { "" };
        writeln!(
            out,
            "{source:<22} {:<9} {:<7} {:<6} {}{note}",
            yes(s.in_range),
            s.filter.unwrap_or("-"),
            yes(s.read),
            yes(s.holds)
        )?;
    }
    writeln!(
        out,
        "tables in range: {}, filters asked: {}, skipped: {}, false positives: {}",
        r.tables_in_range, r.filter_checks, r.tables_skipped, r.filter_false_positives
    )
}

/// Runs `trace`.
pub fn run(args: &Args) -> bloomkv::Result<ExitCode> {
    if let Some(prefix) = &args.prefix {
        return run_prefix(args, prefix);
    }
    let fmt = args.output.bytes;
    let key = fmt.parse(args.key.as_deref().unwrap_or_default())?;
    let db = common::open_db_read_only(&args.dir)?;
    let ks = args.keyspace.resolve(&db)?;
    let steps = ks.trace(&key)?;
    let value = ks.get(&key)?;
    let decided = steps.iter().find(|s| s.decides).map(|s| presence(&s.actual));
    let mut r = Report {
        key: fmt.show(&key),
        result: decided.unwrap_or("absent"),
        value: value.as_deref().map(|v| fmt.show(v)),
        steps: Vec::with_capacity(steps.len()),
        filter_checks: 0,
        filter_negatives: 0,
        filter_false_positives: 0,
    };
    for s in &steps {
        let (source, level, table, memtable_index) = source_parts(&s.source);
        let false_positive = s.filter_maybe == Some(true) && s.actual == Presence::Absent;
        if let Some(maybe) = s.filter_maybe {
            r.filter_checks += 1;
            r.filter_negatives += u64::from(!maybe);
            r.filter_false_positives += u64::from(false_positive);
        }
        r.steps.push(Step {
            source,
            level,
            table,
            memtable_index,
            in_range: s.in_range,
            filter: s.filter_maybe.map(|m| if m { "maybe" } else { "no" }),
            actual: presence(&s.actual),
            decides: s.decides,
            false_positive,
        });
    }
    let mut out = common::stdout();
    let written = args.output.write(&mut out, &r, |out, r| print_text(out, r, fmt));
    common::finish_output(written, &mut out, ExitCode::SUCCESS)
}

fn print_text(out: &mut common::Out, r: &Report, fmt: Bytes) -> std::io::Result<()> {
    let q = |s: &str| if fmt.hex { s.to_string() } else { format!("\"{s}\"") };
    writeln!(out, "key {}", q(&r.key))?;
    writeln!(out, "{:<22} {:<9} {:<7} {:<10} note", "source", "in range", "filter", "actual")?;
    for s in &r.steps {
        let source = source_name(s.source, s.level, s.table, s.memtable_index);
        let mut note = String::new();
        if s.decides {
            note.push_str("<- get stops here");
        }
        if s.false_positive {
            note.push_str("filter false positive");
        }
        writeln!(
            out,
            "{source:<22} {:<9} {:<7} {:<10} {note}",
            if s.in_range { "yes" } else { "no" },
            s.filter.unwrap_or("-"),
            s.actual
        )?;
    }
    match &r.value {
        Some(v) => writeln!(out, "get: {}", q(v))?,
        None => writeln!(out, "get: not found ({})", r.result)?,
    }
    writeln!(
        out,
        "filters asked: {}, said no: {}, false positives: {}",
        r.filter_checks, r.filter_negatives, r.filter_false_positives
    )
}
