//! `bloomkv inspect <table-file | blob-file | WAL segment>`: what one table holds and what its
//! parts cost, a blob file's header and values, or what a WAL segment holds (a segment kept as
//! a blob file among them). The reports are [`crate::kind::table::inspect`]'s,
//! [`crate::kind::blob::inspect`]'s and [`crate::kind::wal::inspect`]'s; this file only reads
//! the options and prints them.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::common;
use crate::kind::{blob, table, wal, Target};

/// Options of `inspect`.
#[derive(clap::Args)]
pub struct Args {
    /// The table file (`*.sst`), blob file (`*.blob`) or WAL segment (`*.log`, as a segment
    /// kept as a blob file is).
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
    if matches!(common::classify(&args.table), Ok(Target::Blob)) {
        let r = blob::inspect(&args.table)?;
        let mut out = common::stdout();
        let written = args.output.write(&mut out, &r, blob::print_inspect);
        return common::finish_output(written, &mut out, ExitCode::SUCCESS);
    }
    if matches!(common::classify(&args.table), Ok(Target::Wal)) {
        let r = wal::inspect(&args.table)?;
        let mut out = common::stdout();
        let written = args.output.write(&mut out, &r, wal::print_inspect);
        return common::finish_output(written, &mut out, ExitCode::SUCCESS);
    }
    let r = table::inspect(&args.table, fmt)?;
    let mut out = common::stdout();
    let written = args.output.write(&mut out, &r, |out, r| table::print_inspect(out, r, fmt));
    common::finish_output(written, &mut out, ExitCode::SUCCESS)
}
