//! `bloomkv dump <table | wal | manifest | db-dir>`: the entries a file holds.
//!
//! * table: every internal entry in key order — key, sequence number, kind, value — then its
//!   range tombstones in key order.
//! * WAL segment: every operation of every record in log order, with its sequence number,
//!   keyspace id and the record's file offset.
//! * manifest: every version edit (tables added and deleted with their keyspace, keyspaces
//!   defined and dropped, counters).
//! * database directory: the merged user view (newest value of each live key, as `scan`
//!   shows it) read through `Db::open_read_only`; with `--internal`, instead every internal
//!   entry of every live table in read order (L0 newest first, then L1, L2, …) followed by
//!   the live WAL segments' operations — the raw material the merged view is made of.
//!
//! `--from/--to/--prefix/--limit` select by user key (manifests ignore them); a range delete
//! (kind `delete-range`, start in the key column, end in the value column) is selected if
//! it covers some selected key. Text output is
//! streamed; `--json` collects one document.
//!
//! Each kind's entries come from its module (`crate::kind::*::dump`); this file holds what
//! every dump shares: the options, the [`Sink`] entries go to, and the JSON document.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use bloomkv::Error;
use bloomkv_tree::key::ValueKind;
use serde::Serialize;

use crate::common::{self, Bytes, KeyRange, RangeArgs};
use crate::kind::{self, blob, database, manifest, table, wal, Target};

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
    /// For a database directory's merged view: the keyspace to list (`--internal` lists
    /// every keyspace's tables, each labelled).
    #[arg(long, value_name = "NAME", default_value = "default")]
    keyspace: String,
    #[command(flatten)]
    output: common::OutputArgs,
}

/// One entry. `seq` and `kind` are absent in the merged user view; `keyspace` is the WAL
/// operation's keyspace id (WAL entries only: a WAL segment names keyspaces by id); `file`
/// names the table or WAL (database `--internal` dumps only); `offset` is the WAL record's
/// file offset.
#[derive(Serialize, Debug)]
pub struct Entry {
    key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    seq: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    value: String,
    /// An expiring put's expiry, milliseconds since the Unix epoch (its value is shown
    /// without it).
    #[serde(skip_serializing_if = "Option::is_none")]
    expires: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keyspace: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
}

/// The JSON document.
#[derive(Serialize, Debug)]
pub struct Report {
    path: String,
    /// "table", "wal", "manifest", "db" (merged view) or "db-internal".
    source: &'static str,
    pub count: u64,
    /// True when `--limit` stopped the dump early.
    truncated: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    entries: Vec<Entry>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub edits: Vec<manifest::Edit>,
}

/// Where entries go: streamed as text, or collected for one JSON document.
pub struct Sink {
    pub out: common::Out,
    pub json: bool,
    pub fmt: Bytes,
    pub range: KeyRange,
    pub report: Report,
}

impl Sink {
    /// Emits an entry if its key is selected. Returns false once the limit is reached.
    pub fn push(&mut self, e: Entry) -> std::io::Result<bool> {
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
            match e.kind {
                Some("delete") | Some(RESERVED) => {}
                Some(RANGE_DELETE) => line.push_str(&format!(" .. {}", q(&e.value))),
                _ => line.push_str(&format!(" => {}", q(&e.value))),
            }
            if let Some(ms) = e.expires {
                let at = common::utc_date_time(ms / 1000);
                line.push_str(&format!("  (expires {at}, {ms} ms)"));
            }
            // Most writes go to the default keyspace; naming it on every line is noise.
            if let Some(k) = e.keyspace.filter(|&k| k != 0) {
                line.push_str(&format!("  [keyspace {k}]"));
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

    /// An entry with `key` and `value` shown in the chosen format.
    pub fn entry(
        &self,
        key: &[u8],
        seq: Option<u64>,
        kind: Option<ValueKind>,
        value: &[u8],
    ) -> Entry {
        let (expires, value) = match kind {
            Some(ValueKind::PutExpiring) => match bloomkv_tree::key::split_expiring(value) {
                Some((at, v)) => (Some(at), v),
                None => (None, value),
            },
            Some(ValueKind::MergeExpiring) => {
                match bloomkv_tree::key::split_merge_expiring(value) {
                    Some((at, _, v)) => (Some(at), v),
                    None => (None, value),
                }
            }
            _ => (None, value),
        };
        Entry {
            key: self.fmt.show(key),
            seq,
            kind: kind.map(kind_name),
            value: self.fmt.show(value),
            expires,
            keyspace: None,
            file: None,
            offset: None,
        }
    }
}

impl Sink {
    /// A WAL operation that reserves sequence number `seq` for an ingest: no key, no value,
    /// kind `reserved`, in record `offset` of WAL `file`.
    pub fn reserved_entry(&self, seq: u64, offset: u64, file: Option<&str>) -> Entry {
        Entry {
            key: String::new(),
            seq: Some(seq),
            kind: Some(RESERVED),
            value: String::new(),
            expires: None,
            keyspace: None,
            file: file.map(str::to_string),
            offset: Some(offset),
        }
    }

    /// A range tombstone: `start` in the key column, `end` (exclusive) in the value column,
    /// kind `delete-range`.
    pub fn range_delete_entry(&self, start: &[u8], end: &[u8], seq: u64) -> Entry {
        Entry {
            key: self.fmt.show(start),
            seq: Some(seq),
            kind: Some(RANGE_DELETE),
            value: self.fmt.show(end),
            expires: None,
            keyspace: None,
            file: None,
            offset: None,
        }
    }
}

/// The kind shown for a range tombstone.
const RANGE_DELETE: &str = "delete-range";

/// The kind shown for a WAL record that only takes a sequence number for an ingest.
const RESERVED: &str = "reserved";

fn kind_name(k: ValueKind) -> &'static str {
    match k {
        ValueKind::Put => "put",
        ValueKind::Delete => "delete",
        ValueKind::PutExpiring => "put-expiring",
        ValueKind::Merge => "merge",
        ValueKind::MergeExpiring => "merge-expiring",
        ValueKind::BlobPut => "put-blob",
        ValueKind::BlobPutExpiring => "put-blob-expiring",
    }
}

/// Runs `dump`.
pub fn run(args: &Args) -> bloomkv::Result<ExitCode> {
    let fmt = args.output.bytes;
    let target = kind::classify(&args.path)?;
    let source = match (target, args.internal) {
        (Target::Db, true) => "db-internal",
        (other, _) => other.name(),
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
        Target::Table => table::dump(&mut sink, &args.path, None).map(|_| ()),
        Target::Wal => wal::dump(&mut sink, &args.path, None).map(|_| ()),
        Target::Manifest => manifest::dump(&mut sink, &args.path),
        Target::Blob => blob::dump(&mut sink, &args.path).map(|_| ()),
        Target::Db if args.internal => database::dump_internal(&mut sink, &args.path),
        Target::Db => database::dump(&mut sink, &args.path, &args.keyspace),
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
pub enum DumpError {
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
