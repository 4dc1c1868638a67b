//! What the tool does with each kind of file, one module per kind: a table, a WAL segment, a
//! manifest, a database directory. Each module holds that kind's `inspect`, `dump` and
//! `verify`; the command files only parse their options, tell which kind a path is
//! ([`classify`]) and call the kind's function.
//!
//! The commands that work only on a database and take a key (`trace`, `get`, `scan`, `put`,
//! `delete`) stay in their own files: they never dispatch on a kind.

pub mod blob;
pub mod database;
pub mod manifest;
pub mod sink;
pub mod table;
pub mod wal;

// Telling the kinds apart is below them: `common`'s errors name the command for a path's kind.
pub use crate::common::{classify, Target};
