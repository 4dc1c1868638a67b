//! `bloomkv put <db-dir> <key> <value>`: writes one key through `Db::open`, which takes the
//! database's LOCK — so it fails (exit 2) while another process has the database open. The
//! write is synced to the WAL before the command returns.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use bloomkv::{Db, WriteBatch, WriteOptions};

use crate::common::{self, Bytes, KeyspaceArg};

/// Options of `put`.
#[derive(clap::Args)]
// The shared `--hex`, with what it does in this command in its help.
#[command(mut_arg("hex", |a| a.help("Read the key and value as hex")))]
pub struct Args {
    /// The database directory.
    dir: PathBuf,
    /// The key (text with \xNN escapes, or hex with --hex).
    key: String,
    /// The value (text with \xNN escapes, or hex with --hex).
    value: String,
    #[command(flatten)]
    bytes: Bytes,
    #[command(flatten)]
    keyspace: KeyspaceArg,
    /// Create the database if the directory holds none.
    #[arg(long)]
    create: bool,
}

/// Opens the database for writing. A held LOCK stays `Error::Locked`, which the tool
/// reports as the database being in use by another process.
pub fn open_for_write(dir: &Path, create: bool) -> bloomkv::Result<Db> {
    // A file where the directory should be: say what it is, rather than pass on the open's
    // "Not a directory".
    if dir.exists() && !dir.is_dir() {
        return Err(common::not_a_db_dir(dir));
    }
    let opts = common::recorded_default_settings(dir, bloomkv::Options::default())?;
    Db::open(dir, opts.create_if_missing(create))
}

/// Applies `batch` durably and closes the database cleanly.
pub fn write_and_close(db: Db, batch: WriteBatch) -> bloomkv::Result<ExitCode> {
    db.write(&batch, &WriteOptions::new().sync(true))?;
    db.close()?;
    Ok(ExitCode::SUCCESS)
}

/// Runs `put`.
pub fn run(args: &Args) -> bloomkv::Result<ExitCode> {
    let fmt = args.bytes;
    let key = fmt.parse(&args.key)?;
    let value = fmt.parse(&args.value)?;
    // A new database has only the default keyspace: refuse before creating one, rather than
    // create it and then fail on the keyspace, leaving a database nobody asked for.
    let name = &args.keyspace.keyspace;
    if args.create && name != "default" && !args.dir.join("CURRENT").exists() {
        return Err(bloomkv::Error::InvalidArgument(format!(
            "no keyspace {name:?}: a new database has only \"default\" (create the database, \
             then `bloomkv keyspace create`)"
        )));
    }
    let db = open_for_write(&args.dir, args.create)?;
    let ks = args.keyspace.resolve(&db)?;
    let mut batch = WriteBatch::new();
    batch.put_in(&ks, key, value);
    write_and_close(db, batch)
}
