//! `bloomkv inspect <table-file>`: what one table holds and what its parts cost. The report
//! is [`crate::kind::table::inspect`]'s; this file only reads the options and prints it.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::common;
use crate::kind::table;

/// Options of `inspect`.
#[derive(clap::Args)]
pub struct Args {
    /// The table file (`*.sst`).
    table: PathBuf,
    #[command(flatten)]
    output: common::OutputArgs,
}

/// Runs `inspect`.
pub fn run(args: &Args) -> bloomkv::Result<ExitCode> {
    let fmt = args.output.bytes;
    if args.table.is_dir() {
        return Err(common::not_a_file(&args.table, "a table file"));
    }
    let r = table::inspect(&args.table, fmt)?;
    let mut out = common::stdout();
    let written = args.output.write(&mut out, &r, |out, r| table::print_inspect(out, r, fmt));
    common::finish_output(written, &mut out, ExitCode::SUCCESS)
}
