//! `bloomkv keyspace list|create|drop`: a database's keyspaces. `list` reads through
//! `Db::open_read_only`; `create` and `drop` open the database for writing as `put` does
//! (taking its LOCK) and are durable when the command returns.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use bloomkv::{Compression, Error, KeyspaceOptions, PrefixExtractor};
use serde::Serialize;

use crate::bench::Policy;
use crate::common::{self, JsonArg};
use crate::put::open_for_write;

/// Options of `keyspace`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// List the keyspaces, the default one first, then in creation order (read-only).
    List(ListArgs),
    /// Create a keyspace (opens the database for writing; fails if the keyspace exists).
    Create(CreateArgs),
    /// Drop a keyspace and every key in it (opens the database for writing; the default
    /// keyspace cannot be dropped).
    Drop(DropArgs),
}

#[derive(clap::Args)]
#[command(mut_arg("json", |a| a.help("Print one JSON document: {\"keyspaces\": [name, …]}")))]
struct ListArgs {
    /// The database directory.
    dir: PathBuf,
    #[command(flatten)]
    json: JsonArg,
}

#[derive(clap::Args)]
struct CreateArgs {
    /// The database directory.
    dir: PathBuf,
    /// The new keyspace's name (UTF-8, 1 to 255 bytes).
    name: String,
    /// The keyspace's filter [default: blocked].
    #[arg(long, value_enum)]
    filter: Option<Policy>,
    /// Filter bits per key (the average for budgeted) [default: 10].
    #[arg(long)]
    bits_per_key: Option<f64>,
    /// Compress data blocks with zstd at this level (-7 to 22).
    #[arg(long, value_name = "LEVEL", allow_negative_numbers = true)]
    zstd: Option<i32>,
    /// Put each key's prefix in the filters too, so scans inside one prefix skip tables:
    /// `fixed:N` (the first N bytes) or `delimiter:0xHH` (up to and including the first
    /// byte HH).
    #[arg(long, value_name = "EXTRACTOR")]
    prefix_extractor: Option<String>,
    /// Filters hold the prefixes alone, not whole keys (needs --prefix-extractor).
    #[arg(long)]
    no_whole_key_filtering: bool,
}

#[derive(clap::Args)]
struct DropArgs {
    /// The database directory.
    dir: PathBuf,
    /// The keyspace to drop.
    name: String,
}

#[derive(Serialize)]
struct ListReport {
    keyspaces: Vec<String>,
}

/// Runs `keyspace`.
pub fn run(args: &Args) -> bloomkv::Result<ExitCode> {
    match &args.command {
        Command::List(a) => list(a),
        Command::Create(a) => create(a),
        Command::Drop(a) => drop_keyspace(a),
    }
}

fn list(args: &ListArgs) -> bloomkv::Result<ExitCode> {
    let db = common::open_db_read_only(&args.dir)?;
    let r = ListReport { keyspaces: db.keyspace_names() };
    let mut out = common::stdout();
    let written = args.json.write(&mut out, &r, |out, r| {
        r.keyspaces.iter().try_for_each(|name| writeln!(out, "{name}"))
    });
    common::finish_output(written, &mut out, ExitCode::SUCCESS)
}

/// The options `args` ask for, on top of the library's defaults.
fn create_options(args: &CreateArgs) -> bloomkv::Result<KeyspaceOptions> {
    let mut opts = KeyspaceOptions::new();
    let policy = match (args.filter, args.bits_per_key) {
        (Some(Policy::None), Some(_)) => {
            return Err(Error::InvalidArgument(
                "--bits-per-key does not apply to --filter none".into(),
            ))
        }
        (Some(p), _) if p.prefix_extractor().is_some() => {
            return Err(Error::InvalidArgument(
                "the +prefix policies are the bench's: give --prefix-extractor".into(),
            ))
        }
        (Some(p), bits) => Some(p.filter(bits.unwrap_or(10.0))),
        (None, Some(bits)) => Some(Policy::Blocked.filter(bits)),
        (None, None) => None,
    };
    if let Some(p) = policy {
        opts = opts.filter_policy(p);
    }
    if let Some(level) = args.zstd {
        opts = opts.compression(Compression::Zstd { level });
    }
    if let Some(name) = &args.prefix_extractor {
        let e = PrefixExtractor::from_name(name).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "unknown prefix extractor {name:?} (expected fixed:N or delimiter:0xHH)"
            ))
        })?;
        opts = opts.prefix_extractor(Some(e));
    } else if args.no_whole_key_filtering {
        return Err(Error::InvalidArgument(
            "--no-whole-key-filtering needs --prefix-extractor: the filters would hold nothing"
                .into(),
        ));
    }
    Ok(opts.whole_key_filtering(!args.no_whole_key_filtering))
}

fn create(args: &CreateArgs) -> bloomkv::Result<ExitCode> {
    let opts = create_options(args)?;
    let db = open_for_write(&args.dir, false)?;
    // `Db::keyspace` opens an existing keyspace, and records new options for it if they
    // differ: neither is what "create" promises.
    if db.existing_keyspace(&args.name).is_some() {
        return Err(Error::InvalidArgument(format!("keyspace {:?} already exists", args.name)));
    }
    db.keyspace(&args.name, opts)?;
    db.close()?;
    Ok(ExitCode::SUCCESS)
}

fn drop_keyspace(args: &DropArgs) -> bloomkv::Result<ExitCode> {
    let db = open_for_write(&args.dir, false)?;
    // The library reports an unknown name as already dropped; listing the names helps more.
    common::existing_keyspace(&db, &args.name)?;
    db.drop_keyspace(&args.name)?;
    db.close()?;
    Ok(ExitCode::SUCCESS)
}
