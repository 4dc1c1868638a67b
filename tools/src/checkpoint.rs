//! `bloomkv checkpoint <db-dir> <dest-dir>`: an openable copy of a database, taken through
//! `Db::open_read_only` (no LOCK, nothing in the source written), so it works on a database
//! another process has open. Tables are hard-linked where the file system allows.
//!
//! The copy is the database as the read-only view saw it when opened. If the owning process
//! compacts a table away between that moment and its link, the checkpoint fails (run it
//! again); an in-process `Db::checkpoint` has no such window.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::common;

/// Options of `checkpoint`.
#[derive(clap::Args)]
pub struct Args {
    /// The database directory.
    dir: PathBuf,
    /// Where to write the copy: a directory that does not exist yet, or an empty one.
    dest: PathBuf,
}

/// Runs `checkpoint`.
pub fn run(args: &Args) -> bloomkv::Result<ExitCode> {
    let db = common::open_db_read_only(&args.dir)?;
    let seq = db.checkpoint(&args.dest)?;
    let tables: usize = db.stats().tables_per_level.iter().sum();
    println!(
        "checkpoint of {} at sequence {seq} written to {} ({tables} tables linked or copied, \
         plus one from the WAL's unflushed writes if there were any)",
        args.dir.display(),
        args.dest.display()
    );
    Ok(ExitCode::SUCCESS)
}
