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
//! Each kind's entries come from its module (`crate::kind::*::dump`) into the [`Sink`]
//! (`kind/sink.rs`, with the JSON document); this file holds the options and the dispatch.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::common::{self, KeyRange, RangeArgs};
use crate::kind::sink::{DumpError, Report, Sink};
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
