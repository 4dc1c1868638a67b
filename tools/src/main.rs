//! The `bloomkv` command-line tool.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod crash_test;
mod filter_demo;

/// Inspect bloomkv files and measure what its filters buy.
#[derive(Parser)]
#[command(name = "bloomkv", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build filters over many keys and print measured false-positive rates next to theory.
    FilterDemo(filter_demo::Args),
    /// Kill a writing child process with SIGKILL at random moments, reopen, and check that
    /// every acknowledged write survived and nothing else appeared.
    CrashTest(crash_test::Args),
    /// The child process of `crash-test`.
    #[command(hide = true)]
    CrashWorker(crash_test::WorkerArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::FilterDemo(args) => filter_demo::run(&args),
        Command::CrashTest(args) => crash_test::run(&args),
        Command::CrashWorker(args) => crash_test::worker(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("bloomkv: {e}");
            ExitCode::from(2)
        }
    }
}
