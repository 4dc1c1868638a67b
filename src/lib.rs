//! bloomkv: an embedded LSM key-value store whose tables carry cache-line-blocked Bloom
//! filters held in RAM, so that a point read touches disk only for tables that may hold the key.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod batch;
pub mod coding;
mod db;
mod error;
pub mod filename;
pub mod filter;
pub mod fs;
pub mod iter;
pub mod key;
mod key_prefix;
pub mod log;
pub mod memtable;
pub mod merge;
mod options;
mod stats;
pub mod table;
pub mod version;

pub use batch::{WriteBatch, MAX_KEY_BYTES, MAX_VALUE_BYTES};
pub use db::{Db, DbIterator, Presence, ProbeSource, ProbeStep, Snapshot, TableInfo};
pub use error::{Error, Result};
pub use filter::FilterPolicy;
pub use key::Value;
pub use options::{Options, WriteOptions};
pub use stats::Stats;
pub use table::Compression;

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
