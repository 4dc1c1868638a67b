//! `bloomkv dump <table | wal | manifest | db-dir>`: the entries a file holds.
//!
//! * table: every internal entry in key order — key, sequence number, kind, value.
//! * WAL segment: every operation of every record in log order, with its sequence number
//!   and the record's file offset.
//! * manifest: every version edit (tables added and deleted, counters).
//! * database directory: the merged user view (newest value of each live key, as `scan`
//!   shows it) read through `Db::open_read_only`; with `--internal`, instead every internal
//!   entry of every live table in read order (L0 newest first, then L1, L2, …) followed by
//!   the live WAL segments' operations — the raw material the merged view is made of.
//!
//! `--from/--to/--prefix/--limit` select by user key (manifests ignore them). Text output is
//! streamed; `--json` collects one document.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use bloomkv::filename;
use bloomkv::fs::{FileSystem, StdFs};
use bloomkv::iter::InternalIterator;
use bloomkv::key::{internal_key, parse_internal_key, ValueKind, KIND_FOR_SEEK, MAX_SEQNO};
use bloomkv::log::LogReader;
use bloomkv::version::edit::VersionEdit;
use bloomkv::version::set::read_manifest;
use bloomkv::{Error, WriteBatch};
use serde::Serialize;

use crate::common::{self, Bytes, KeyRange, RangeArgs, Target};

/// Options of `dump`.
#[derive(clap::Args)]
// The shared `--hex`, with what it does in this command in its help.
#[command(mut_arg("hex", |a| a.help("Print keys and values as hex instead of escaped text (and read key options as hex)")))]
pub struct Args {
    /// A table (`*.sst`), WAL segment (`*.log`), manifest (`MANIFEST-*`) or database
    /// directory.
    path: PathBuf,
    #[command(flatten)]
    range: RangeArgs,
    /// For a database directory: list every table's internal entries and the live WALs'
    /// operations instead of the merged user view.
    #[arg(long)]
    internal: bool,
    #[command(flatten)]
    output: common::OutputArgs,
}

/// One entry. `seq` and `kind` are absent in the merged user view; `file` names the table
/// or WAL (database `--internal` dumps only); `offset` is the WAL record's file offset.
#[derive(Serialize, Debug)]
struct Entry {
    key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    seq: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    value: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    offset: Option<u64>,
}

/// One manifest record.
#[derive(Serialize, Debug)]
struct Edit {
    offset: u64,
    log_number: Option<u64>,
    next_file_number: Option<u64>,
    last_seq: Option<u64>,
    added: Vec<AddedTable>,
    deleted: Vec<DeletedTable>,
}

#[derive(Serialize, Debug)]
struct AddedTable {
    level: usize,
    number: u64,
    file_size: u64,
    smallest_key: String,
    largest_key: String,
    smallest_seq: u64,
    largest_seq: u64,
    entries: u64,
}

#[derive(Serialize, Debug)]
struct DeletedTable {
    level: usize,
    number: u64,
}

/// The JSON document.
#[derive(Serialize, Debug)]
struct Report {
    path: String,
    /// "table", "wal", "manifest", "db" (merged view) or "db-internal".
    source: &'static str,
    count: u64,
    /// True when `--limit` stopped the dump early.
    truncated: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    entries: Vec<Entry>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    edits: Vec<Edit>,
}

/// Where entries go: streamed as text, or collected for one JSON document.
struct Sink {
    out: common::Out,
    json: bool,
    fmt: Bytes,
    range: KeyRange,
    report: Report,
}

impl Sink {
    /// Emits an entry if its key is selected. Returns false once the limit is reached.
    fn push(&mut self, e: Entry) -> std::io::Result<bool> {
        if self.range.limit.is_some_and(|l| self.report.count >= l) {
            self.report.truncated = true;
            return Ok(false);
        }
        self.report.count += 1;
        if self.json {
            self.report.entries.push(e);
        } else {
            let q = |s: &str| if self.fmt.hex { s.to_string() } else { format!("\"{s}\"") };
            let mut line = q(&e.key);
            if let (Some(seq), Some(kind)) = (e.seq, e.kind) {
                line.push_str(&format!(" @ {seq} {kind}"));
            }
            if e.kind != Some("delete") {
                line.push_str(&format!(" => {}", q(&e.value)));
            }
            if let Some(f) = &e.file {
                line.push_str(&format!("  [{f}]"));
            }
            if let Some(o) = e.offset {
                line.push_str(&format!("  (record at {o})"));
            }
            writeln!(self.out, "{line}")?;
        }
        Ok(true)
    }

    fn entry(&self, key: &[u8], seq: Option<u64>, kind: Option<ValueKind>, value: &[u8]) -> Entry {
        Entry {
            key: self.fmt.show(key),
            seq,
            kind: kind.map(kind_name),
            value: self.fmt.show(value),
            file: None,
            offset: None,
        }
    }
}

fn kind_name(k: ValueKind) -> &'static str {
    match k {
        ValueKind::Put => "put",
        ValueKind::Delete => "delete",
    }
}

/// Runs `dump`.
pub fn run(args: &Args) -> bloomkv::Result<ExitCode> {
    let fmt = args.output.bytes;
    let target = common::classify(&args.path)?;
    let source = match (target, args.internal) {
        (Target::Table, _) => "table",
        (Target::Wal, _) => "wal",
        (Target::Manifest, _) => "manifest",
        (Target::Db, false) => "db",
        (Target::Db, true) => "db-internal",
    };
    let mut sink = Sink {
        out: common::stdout(),
        json: args.output.json(),
        fmt,
        range: KeyRange::parse(&args.range, fmt)?,
        report: Report {
            path: common::display(&args.path),
            source,
            count: 0,
            truncated: false,
            entries: Vec::new(),
            edits: Vec::new(),
        },
    };
    let written = match target {
        Target::Table => dump_table(&mut sink, &args.path, None).map(|_| ()),
        Target::Wal => dump_wal(&mut sink, &args.path, None).map(|_| ()),
        Target::Manifest => dump_manifest(&mut sink, &args.path),
        Target::Db if args.internal => dump_db_internal(&mut sink, &args.path),
        Target::Db => dump_db(&mut sink, &args.path),
    };
    // Library errors (damage) abort the dump; a closed stdout just ends it.
    let written = match written {
        Ok(()) => Ok(()),
        Err(DumpError::Lib(e)) => return Err(e),
        Err(DumpError::Io(e)) => Err(e),
    };
    let written = written.and_then(|()| {
        if sink.json {
            common::write_json(&mut sink.out, &sink.report)
        } else {
            Ok(())
        }
    });
    common::finish_output(written, &mut sink.out, ExitCode::SUCCESS)
}

/// A dump stops on damage in the input or on a failed write to stdout.
enum DumpError {
    Lib(Error),
    Io(std::io::Error),
}

impl From<Error> for DumpError {
    fn from(e: Error) -> Self {
        DumpError::Lib(e)
    }
}

impl From<std::io::Error> for DumpError {
    fn from(e: std::io::Error) -> Self {
        DumpError::Io(e)
    }
}

/// Dumps a table's selected entries; `file` labels them (database dumps). Returns false if
/// the limit stopped it.
fn dump_table(sink: &mut Sink, path: &Path, file: Option<&str>) -> Result<bool, DumpError> {
    let table = common::open_table(path)?;
    let mut it = table.iter_with(false);
    match sink.range.start() {
        Some(start) => it.seek(&internal_key(start, MAX_SEQNO, KIND_FOR_SEEK))?,
        None => it.seek_to_first()?,
    }
    while it.valid() {
        let parsed = parse_internal_key(it.key())
            .ok_or_else(|| Error::corruption(path, 0, "malformed internal key in a data block"))?;
        if sink.range.past_end(parsed.user_key) {
            break;
        }
        if sink.range.contains(parsed.user_key) {
            let mut e =
                sink.entry(parsed.user_key, Some(parsed.seq), Some(parsed.kind), it.value());
            e.file = file.map(str::to_string);
            if !sink.push(e)? {
                return Ok(false);
            }
        }
        it.next()?;
    }
    Ok(true)
}

/// Dumps a WAL segment's selected operations in log order. Returns false if the limit
/// stopped it.
fn dump_wal(sink: &mut Sink, path: &Path, file: Option<&str>) -> Result<bool, DumpError> {
    let mut reader = LogReader::new(path.to_path_buf(), StdFs.read_all(path)?);
    while let Some(record) = reader.next_record()? {
        let offset = reader.last_record_offset();
        let batch = WriteBatch::decode(record).map_err(|e| e.in_file(path, offset))?;
        for (seq, (kind, key, value)) in (batch.sequence()..).zip(batch.iter()) {
            if !sink.range.contains(key) {
                continue;
            }
            let mut e = sink.entry(key, Some(seq), Some(kind), value);
            e.file = file.map(str::to_string);
            e.offset = Some(offset);
            if !sink.push(e)? {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

fn dump_manifest(sink: &mut Sink, path: &Path) -> Result<(), DumpError> {
    let mut reader = LogReader::new(path.to_path_buf(), StdFs.read_all(path)?);
    let fmt = sink.fmt;
    let uk = |ik: &[u8]| fmt.show(parse_internal_key(ik).map_or(&[][..], |k| k.user_key));
    while let Some(record) = reader.next_record()? {
        let offset = reader.last_record_offset();
        let edit = VersionEdit::decode(&record).map_err(|e| e.in_file(path, offset))?;
        let e = Edit {
            offset,
            log_number: edit.log_number,
            next_file_number: edit.next_file_number,
            last_seq: edit.last_seq,
            added: edit
                .added
                .iter()
                .map(|(level, t)| AddedTable {
                    level: *level,
                    number: t.number,
                    file_size: t.file_size,
                    smallest_key: uk(&t.smallest),
                    largest_key: uk(&t.largest),
                    smallest_seq: t.smallest_seq,
                    largest_seq: t.largest_seq,
                    entries: t.num_entries,
                })
                .collect(),
            deleted: edit
                .deleted
                .iter()
                .map(|&(level, number)| DeletedTable { level, number })
                .collect(),
        };
        sink.report.count += 1;
        if sink.json {
            sink.report.edits.push(e);
            continue;
        }
        let opt = |o: Option<u64>| o.map_or("-".to_string(), |v| v.to_string());
        writeln!(
            sink.out,
            "edit @ {}: log number {}, next file {}, last seq {}",
            e.offset,
            opt(e.log_number),
            opt(e.next_file_number),
            opt(e.last_seq)
        )?;
        let q = |s: &str| if fmt.hex { s.to_string() } else { format!("\"{s}\"") };
        for t in &e.added {
            writeln!(
                sink.out,
                "  + L{} {:06}.sst {} bytes, keys {} .. {}, seq {} .. {}, {} entries",
                t.level,
                t.number,
                t.file_size,
                q(&t.smallest_key),
                q(&t.largest_key),
                t.smallest_seq,
                t.largest_seq,
                t.entries
            )?;
        }
        for t in &e.deleted {
            writeln!(sink.out, "  - L{} {:06}.sst", t.level, t.number)?;
        }
    }
    Ok(())
}

fn dump_db(sink: &mut Sink, dir: &Path) -> Result<(), DumpError> {
    let db = common::open_db_read_only(dir)?;
    let start = sink.range.start().map(<[u8]>::to_vec);
    let iter = match start {
        Some(s) => db.range(s..),
        None => db.range(..),
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

fn dump_db_internal(sink: &mut Sink, dir: &Path) -> Result<(), DumpError> {
    // Tables in read order, as the engine lists them; the view is fixed at open.
    let db = common::open_db_read_only(dir)?;
    for t in db.tables() {
        let label = format!("L{} {:06}.sst", t.level, t.number);
        if !dump_table(sink, &t.path, Some(&label))? {
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
        match dump_wal(sink, &path, Some(&label)) {
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
