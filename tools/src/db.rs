//! `bloomkv db <db-dir>`: the shape of a database — levels, tables, filter and index memory,
//! WAL segments. The report is [`crate::kind::database::inspect`]'s; this file only reads the
//! options and prints it.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::common;
use crate::kind::database;

/// Options of `db`.
#[derive(clap::Args)]
pub struct Args {
    /// The database directory.
    dir: PathBuf,
    #[command(flatten)]
    output: common::OutputArgs,
}

/// Runs `db`.
pub fn run(args: &Args) -> bloomkv::Result<ExitCode> {
    let fmt = args.output.bytes;
    let r = database::inspect(&args.dir, fmt)?;
    let mut out = common::stdout();
    let written = args.output.write(&mut out, &r, |out, r| database::print_inspect(out, r, fmt));
    common::finish_output(written, &mut out, ExitCode::SUCCESS)
}
