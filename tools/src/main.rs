//! The `bloomkv` command-line tool.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::FilterDemo(args) => filter_demo::run(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("bloomkv: {e}");
            ExitCode::from(2)
        }
    }
}
