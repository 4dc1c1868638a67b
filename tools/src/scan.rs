//! `bloomkv scan <db-dir>`: the live keys and values in key order (the merged user view),
//! read through `Db::open_read_only` (no LOCK, nothing written), selected with `--from`
//! (inclusive), `--to` (exclusive), `--prefix` and `--limit`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use serde::Serialize;

use crate::common::{self, KeyRange, RangeArgs};

/// Options of `scan`.
#[derive(clap::Args)]
// The shared `--hex` and `--json`, with what they do in this command in their help.
#[command(mut_arg("hex", |a| a.help("Print keys and values as hex (and read the key options as hex)")))]
#[command(mut_arg("json", |a| a.help("Print one JSON document: {\"count\", \"truncated\", \"entries\": [{\"key\", \"value\"}]}")))]
pub struct Args {
    /// The database directory.
    dir: PathBuf,
    #[command(flatten)]
    range: RangeArgs,
    #[command(flatten)]
    keyspace: common::KeyspaceArg,
    #[command(flatten)]
    output: common::OutputArgs,
}

#[derive(Serialize)]
struct Pair {
    key: String,
    value: String,
}

#[derive(Serialize)]
struct Report {
    count: u64,
    truncated: bool,
    entries: Vec<Pair>,
}

/// Runs `scan`.
pub fn run(args: &Args) -> bloomkv::Result<ExitCode> {
    let fmt = args.output.bytes;
    let range = KeyRange::parse(&args.range, fmt)?;
    let db = common::open_db_read_only(&args.dir)?;
    let ks = args.keyspace.resolve(&db)?;
    let iter = match range.start() {
        Some(s) => ks.range(s.to_vec()..),
        None => ks.range(..),
    };
    let mut out = common::stdout();
    let mut r = Report { count: 0, truncated: false, entries: Vec::new() };
    let mut written = Ok(());
    for kv in iter {
        let (key, value) = kv?;
        if range.past_end(&key) {
            break;
        }
        if !range.contains(&key) {
            continue;
        }
        if range.limit.is_some_and(|l| r.count >= l) {
            r.truncated = true;
            break;
        }
        r.count += 1;
        if args.output.json() {
            r.entries.push(Pair { key: fmt.show(&key), value: fmt.show(&value) });
        } else {
            written = writeln!(out, "{} => {}", fmt.quoted(&key), fmt.quoted(&value));
            if written.is_err() {
                break;
            }
        }
    }
    if args.output.json() {
        written = common::write_json(&mut out, &r);
    }
    common::finish_output(written, &mut out, ExitCode::SUCCESS)
}
