//! `bloomkv trace <db-dir> <key>` (alias `probe`): the read path of one key made visible. For the memtable
//! (writes replayed from the WAL) and every table in read order: whether its key range covers
//! the key, what its filter answers, whether the key is really there, and which source a
//! `get` would stop at. A "maybe" from a table that does not hold the key is a filter false
//! positive; a "no" from a table that does would be a false negative (never expected).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use bloomkv::{Presence, TraceSource};
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
    key: String,
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
    }
}

/// Runs `trace`.
pub fn run(args: &Args) -> bloomkv::Result<ExitCode> {
    let fmt = args.output.bytes;
    let key = fmt.parse(&args.key)?;
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
        let (source, level, table, memtable_index) = match s.source {
            TraceSource::Memtable => ("memtable", None, None, None),
            TraceSource::ImmutableMemtable(i) => ("immutable-memtable", None, None, Some(i)),
            TraceSource::Table { level, number } => ("table", Some(level), Some(number), None),
        };
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
        let source = match (s.source, s.level, s.table, s.memtable_index) {
            ("table", Some(l), Some(n), _) => format!("L{l} {n:06}.sst"),
            ("immutable-memtable", _, _, Some(i)) => format!("immutable memtable {i}"),
            (other, ..) => other.to_string(),
        };
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
