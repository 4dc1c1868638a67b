//! `bloomkv delete <db-dir> <key>`: deletes one key through `Db::open` (takes the LOCK; exit
//! 2 while another process has the database open). Synced before the command returns.

use std::path::PathBuf;
use std::process::ExitCode;

use bloomkv::WriteBatch;

use crate::common::{Bytes, KeyspaceArg};
use crate::put::{open_for_write, write_and_close};

/// Options of `delete`.
#[derive(clap::Args)]
// The shared `--hex`, with what it does in this command in its help.
#[command(mut_arg("hex", |a| a.help("Read the key as hex")))]
pub struct Args {
    /// The database directory.
    dir: PathBuf,
    /// The key (text with \xNN escapes, or hex with --hex).
    key: String,
    #[command(flatten)]
    bytes: Bytes,
    #[command(flatten)]
    keyspace: KeyspaceArg,
}

/// Runs `delete`.
pub fn run(args: &Args) -> bloomkv::Result<ExitCode> {
    let key = args.bytes.parse(&args.key)?;
    let db = open_for_write(&args.dir, false)?;
    let ks = args.keyspace.resolve(&db)?;
    let mut batch = WriteBatch::new();
    batch.delete_in(&ks, key);
    write_and_close(db, batch)
}
