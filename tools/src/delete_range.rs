//! `bloomkv delete-range <db-dir> <start> <end>`: deletes every key in `start..end` (end
//! exclusive) with one range tombstone, through `Db::open` like `put` and `delete` (takes the
//! LOCK; exit 2 while another process has the database open). Synced before the command
//! returns.

use std::path::PathBuf;
use std::process::ExitCode;

use bloomkv::{Error, WriteBatch};

use crate::common::{Bytes, KeyspaceArg};
use crate::put::{open_for_write, write_and_close};

/// Options of `delete-range`.
#[derive(clap::Args)]
// The shared `--hex`, with what it does in this command in its help.
#[command(mut_arg("hex", |a| a.help("Read the start and end keys as hex")))]
pub struct Args {
    /// The database directory.
    dir: PathBuf,
    /// The first key deleted (text with \xNN escapes, or hex with --hex).
    start: String,
    /// The first key kept after the range: the end is exclusive.
    end: String,
    #[command(flatten)]
    bytes: Bytes,
    #[command(flatten)]
    keyspace: KeyspaceArg,
}

/// Runs `delete-range`.
pub fn run(args: &Args) -> bloomkv::Result<ExitCode> {
    let start = args.bytes.parse(&args.start)?;
    let end = args.bytes.parse(&args.end)?;
    // The library treats an empty range as nothing to do; on the command line it is more
    // likely swapped arguments, so say so rather than succeed doing nothing.
    if start >= end {
        return Err(Error::InvalidArgument(format!(
            "empty range: the start {} is not below the end {} (the end is exclusive)",
            args.bytes.quoted(&start),
            args.bytes.quoted(&end)
        )));
    }
    let db = open_for_write(&args.dir, false)?;
    let ks = args.keyspace.resolve(&db)?;
    let mut batch = WriteBatch::new();
    batch.delete_range_in(&ks, start..end);
    write_and_close(db, batch)
}
