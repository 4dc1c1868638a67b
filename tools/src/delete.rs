//! `bloomkv delete <db-dir> <key>`: deletes one key through `Db::open` (takes the LOCK; exit
//! 2 while another process has the database open). Synced before the command returns.

use std::path::PathBuf;
use std::process::ExitCode;

use bloomkv::WriteBatch;

use crate::common::Bytes;
use crate::put::{open_for_write, write_and_close};

/// Options of `delete`.
#[derive(clap::Args)]
pub struct Args {
    /// The database directory.
    dir: PathBuf,
    /// The key (text with \xNN escapes, or hex with --hex).
    key: String,
    /// Read the key as hex.
    #[arg(long)]
    hex: bool,
}

/// Runs `delete`.
pub fn run(args: &Args) -> bloomkv::Result<ExitCode> {
    let key = Bytes { hex: args.hex }.parse(&args.key)?;
    let db = open_for_write(&args.dir, false)?;
    let mut batch = WriteBatch::new();
    batch.delete(key);
    write_and_close(db, batch)
}
