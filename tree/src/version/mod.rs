//! The set of live tables per level and its persistent history, the manifest.
//!
//! The manifest is a log (see [`crate::log`]) whose records are encoded
//! [`edit::VersionEdit`]s; replaying them in order rebuilds the current set of tables,
//! the WAL number to recover from, the next file number and the last sequence number.

pub mod builder;
pub mod edit;
pub mod level_iter;
pub mod lookup;
pub mod manifest;
pub mod range_checks;
pub mod set;
