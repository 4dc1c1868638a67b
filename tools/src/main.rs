//! The `bloomkv` command-line tool.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
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
    /// Run db_bench-style workloads over blocked, classic and no filters and a bits-per-key sweep.
    Bench(bench::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::FilterDemo(args) => filter_demo::run(&args),
        Command::Bench(args) => bench::run(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("bloomkv: {e}");
            ExitCode::from(2)
        }
    }
}
