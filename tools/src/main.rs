//! The `bloomkv` command-line tool.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod checkpoint;
mod common;
mod crash_test;
mod db;
mod delete;
mod delete_range;
mod dump;
mod filter_demo;
mod get;
mod inspect;
mod keyspace;
mod kind;
mod put;
mod raft;
mod scan;
mod trace;
mod verify;

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
    /// Run db_bench-style workloads over blocked, budgeted, classic and no filters and a
    /// bits-per-key sweep.
    Bench(Box<bench::Args>),
    /// Show a table's counts, key and sequence ranges, sizes, compression and filter.
    Inspect(inspect::Args),
    /// Check a table, WAL, manifest or whole database; exit 0 clean, 1 corrupt, 2 error.
    ///
    /// Every problem is listed with its file, offset and what is wrong. Reads files only:
    /// safe on a database another process has open.
    Verify(verify::Args),
    /// List the entries of a table, WAL, manifest or database.
    ///
    /// Tables and WALs list internal entries (key, sequence number, put/delete, value) and
    /// range deletes (kind delete-range, start in the key column, end in the value column); a
    /// database directory lists the merged user view (what `scan` shows), or with
    /// `--internal` every table's internal entries in read order followed by the live WALs'.
    Dump(dump::Args),
    /// Show a database's levels, tables, filters run by run (with the split a filter budget
    /// would make of the same memory), filter and index memory, and WAL files.
    Db(db::Args),
    /// Trace the read path of one key: which sources a lookup consults, each filter's
    /// answer, and what each source really holds ("probe" is the old name).
    #[command(alias = "probe")]
    Trace(trace::Args),
    /// Print the value of a key (read-only; exit 1 if absent).
    Get(get::Args),
    /// Set a key (opens the database for writing; fails if another process has it open).
    Put(put::Args),
    /// Delete a key (opens the database for writing; fails if another process has it open).
    Delete(delete::Args),
    /// Delete every key in start..end, end exclusive, with one range tombstone (opens the
    /// database for writing; fails if another process has it open).
    DeleteRange(delete_range::Args),
    /// List live keys and values in order (read-only).
    Scan(scan::Args),
    /// List, create or drop keyspaces (named sets of keys with their own tables and table
    /// options; `--keyspace` selects one in get, put, delete, delete-range, scan and trace).
    Keyspace(keyspace::Args),
    /// Show a bloomkv-raft node's groups (vote, log, applied state, members, key range) and
    /// the shard map it holds (read-only; safe beside a running node).
    Raft(raft::Args),
    /// Write an openable copy of a database (read-only on the source; tables hard-linked
    /// where the file system allows).
    Checkpoint(checkpoint::Args),
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
        Command::Bench(args) => bench::run(&args),
        Command::Inspect(args) => inspect::run(&args),
        Command::Verify(args) => verify::run(&args),
        Command::Dump(args) => dump::run(&args),
        Command::Db(args) => db::run(&args),
        Command::Trace(args) => trace::run(&args),
        Command::Get(args) => get::run(&args),
        Command::Put(args) => put::run(&args),
        Command::Delete(args) => delete::run(&args),
        Command::DeleteRange(args) => delete_range::run(&args),
        Command::Scan(args) => scan::run(&args),
        Command::Keyspace(args) => keyspace::run(&args),
        Command::Raft(args) => raft::run(&args),
        Command::Checkpoint(args) => checkpoint::run(&args),
        Command::CrashTest(args) => crash_test::run(&args),
        Command::CrashWorker(args) => crash_test::worker(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("bloomkv: {}", common::error_message(&e));
            ExitCode::from(2)
        }
    }
}
