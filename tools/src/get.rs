//! `bloomkv get <db-dir> <key>`: the newest value of one key, read through
//! `Db::open_read_only` (no LOCK taken, nothing written). Exit status 0 when found, 1 when
//! the key is absent or deleted (like `grep`), 2 on errors.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use bloomkv::Readable;
use serde::Serialize;

use crate::common;

/// Options of `get`.
#[derive(clap::Args)]
// The shared `--hex` and `--json`, with what they do in this command in their help.
#[command(mut_arg("hex", |a| a.help("Read the key as hex and print the value as hex")))]
#[command(mut_arg("json", |a| a.help("Print one JSON document: {\"key\", \"found\", \"value\"}")))]
pub struct Args {
    /// The database directory.
    dir: PathBuf,
    /// The key (escaped text as printed by the tool, or hex with --hex).
    key: String,
    #[command(flatten)]
    keyspace: common::KeyspaceArg,
    #[command(flatten)]
    output: common::OutputArgs,
}

#[derive(Serialize)]
struct Report {
    key: String,
    found: bool,
    value: Option<String>,
}

/// Runs `get`.
pub fn run(args: &Args) -> bloomkv::Result<ExitCode> {
    let fmt = args.output.bytes;
    let key = fmt.parse(&args.key)?;
    let db = common::open_db_read_only(&args.dir)?;
    let value = args.keyspace.resolve(&db)?.get(&key)?;
    let r = Report {
        key: fmt.show(&key),
        found: value.is_some(),
        value: value.as_deref().map(|v| fmt.show(v)),
    };
    let code = if r.found { ExitCode::SUCCESS } else { ExitCode::from(1) };
    let mut out = common::stdout();
    let written = if args.output.json() {
        common::write_json(&mut out, &r)
    } else {
        match &r.value {
            Some(v) => writeln!(out, "{}", if fmt.hex { v.clone() } else { format!("\"{v}\"") }),
            None => {
                eprintln!("not found");
                Ok(())
            }
        }
    };
    common::finish_output(written, &mut out, code)
}
