//! `bloomkv verify <table-file | wal-file | manifest | db-dir>`: checks every byte the engine
//! relies on and reports each problem with its file, offset and what is wrong.
//!
//! The checking is the library's ([`bloomkv::check`]); this command tells which kind the path
//! is, runs that kind's check (`crate::kind::*::verify`), and prints the report as text or
//! JSON — the same report for every kind.
//!
//! Exit status: 0 clean, 1 corruption found, 2 usage or I/O error (and no corruption). The
//! checker never panics on bad input; a bug in it is reported as an internal error (exit 2),
//! not a crash.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use bloomkv::check::{self, Status};
use serde::Serialize;

use crate::common;
use crate::kind::{self, blob, database, manifest, table, wal, Target};

/// Options of `verify`.
#[derive(clap::Args)]
pub struct Args {
    /// A table (`*.sst`), WAL segment (`*.log`), manifest (`MANIFEST-*`) or database
    /// directory.
    path: PathBuf,
    #[command(flatten)]
    output: common::JsonArg,
}

/// One finding: where and what.
#[derive(Serialize, Debug)]
struct Finding {
    file: String,
    offset: Option<u64>,
    what: String,
}

/// What was checked, for the summary.
#[derive(Serialize, Debug)]
struct Checked {
    tables: u64,
    data_blocks: u64,
    entries: u64,
    range_tombstones: u64,
    /// Left out when zero, as for tables without range filters.
    #[serde(skip_serializing_if = "is_zero")]
    range_filters: u64,
    wal_files: u64,
    wal_records: u64,
    manifest_edits: u64,
    /// Left out when zero, as for a database without blob files.
    #[serde(skip_serializing_if = "is_zero")]
    blob_files: u64,
    #[serde(skip_serializing_if = "is_zero")]
    blob_refs: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The report; field names are part of the tool's interface (see docs/tool.md).
#[derive(Serialize, Debug)]
struct Report {
    path: String,
    target: &'static str,
    /// "ok", "corrupt" or "error".
    status: &'static str,
    problems: Vec<Finding>,
    errors: Vec<Finding>,
    notes: Vec<Finding>,
    checked: Checked,
    #[serde(skip)]
    exit_code: u8,
}

/// Runs `verify`.
pub fn run(args: &Args) -> bloomkv::Result<ExitCode> {
    let target = kind::classify(&args.path)?;
    let report = verify(&args.path, target);
    let mut out = common::stdout();
    let written = args.output.write(&mut out, &report, print_text);
    common::finish_output(written, &mut out, ExitCode::from(report.exit_code))
}

/// Checks `path` as `target` with that kind's check and shapes the findings for printing.
fn verify(path: &Path, target: Target) -> Report {
    let r = match target {
        Target::Table => table::verify(path),
        Target::Wal => wal::verify(path),
        Target::Manifest => manifest::verify(path),
        Target::Blob => blob::verify(path),
        Target::Db => database::verify(path),
    };
    let (status, exit_code) = match r.status() {
        Status::Ok => ("ok", 0),
        Status::Corrupt => ("corrupt", 1),
        Status::Error => ("error", 2),
    };
    let findings = |fs: Vec<check::Finding>| {
        fs.into_iter()
            .map(|f| Finding { file: common::display(&f.file), offset: f.offset, what: f.what })
            .collect()
    };
    let c = r.checked;
    Report {
        path: common::display(path),
        target: target.name(),
        status,
        problems: findings(r.problems),
        errors: findings(r.errors),
        notes: findings(r.notes),
        checked: Checked {
            tables: c.tables,
            data_blocks: c.data_blocks,
            entries: c.entries,
            range_tombstones: c.range_tombstones,
            range_filters: c.range_filters,
            wal_files: c.wal_files,
            wal_records: c.wal_records,
            manifest_edits: c.manifest_edits,
            blob_files: c.blob_files,
            blob_refs: c.blob_refs,
        },
        exit_code,
    }
}

fn print_text(out: &mut common::Out, r: &Report) -> std::io::Result<()> {
    let line = |f: &Finding| match f.offset {
        Some(o) => format!("{} @ {o}: {}", f.file, f.what),
        None => format!("{}: {}", f.file, f.what),
    };
    for f in &r.problems {
        writeln!(out, "CORRUPT  {}", line(f))?;
    }
    for f in &r.errors {
        writeln!(out, "ERROR    {}", line(f))?;
    }
    for f in &r.notes {
        writeln!(out, "note     {}", line(f))?;
    }
    let c = &r.checked;
    let blobs = if c.blob_files + c.blob_refs > 0 {
        format!(", {} blob file(s), {} blob reference(s)", c.blob_files, c.blob_refs)
    } else {
        String::new()
    };
    let range_filters = match c.range_filters {
        0 => String::new(),
        n => format!(", {n} range filter(s)"),
    };
    writeln!(
        out,
        "{}: {} — {} problem(s), {} error(s); checked {} table(s), {} data block(s), {} entries, \
         {} range tombstone(s){range_filters}, {} manifest edit(s), {} WAL file(s) with {} \
         record(s){blobs}",
        r.path,
        r.status,
        r.problems.len(),
        r.errors.len(),
        c.tables,
        c.data_blocks,
        c.entries,
        c.range_tombstones,
        c.manifest_edits,
        c.wal_files,
        c.wal_records
    )
}
