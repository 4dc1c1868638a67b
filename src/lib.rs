//! bloomkv: an embedded LSM key-value store whose tables carry cache-line-blocked Bloom
//! filters held in RAM, so that a point read touches disk only for tables that may hold the key.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

// The public API: the items re-exported below, plus `filter` (usable on its own), `fs`
// (the file-system seam) and `events` (the listener's trait and what it is told). Every
// other module is private; the `internals` feature, which only the `bloomkv` tool, the
// tests, benches and fuzzers enable, makes the layers below public for whitebox use. They
// are not part of the semver surface. Each is declared twice, spelled out rather than made
// by a macro, so that rustfmt (which does not look inside macros) formats their files.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod batch;
#[cfg(not(feature = "internals"))]
mod batch;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod coding;
#[cfg(not(feature = "internals"))]
mod coding;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod filename;
#[cfg(not(feature = "internals"))]
mod filename;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod iter;
#[cfg(not(feature = "internals"))]
mod iter;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod key;
#[cfg(not(feature = "internals"))]
mod key;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod log;
#[cfg(not(feature = "internals"))]
mod log;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod memtable;
#[cfg(not(feature = "internals"))]
mod memtable;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod range_del;
#[cfg(not(feature = "internals"))]
mod range_del;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod table;
#[cfg(not(feature = "internals"))]
mod table;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod version;
#[cfg(not(feature = "internals"))]
mod version;

// Offline checks for `bloomkv verify`: only built for the tool and tests, so the engine code
// it alone would use is still reported as dead in the default build.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod check;
mod clock;
mod compaction_filter;
mod db;
mod error;
pub mod events;
pub mod filter;
pub mod fs;
mod key_head;
mod key_range;
mod merge;
mod options;
mod prefetch;
mod prefix;
mod stats;
mod sync;
mod value;

pub use batch::WriteBatch;
pub use clock::{Clock, ManualClock, SystemClock};
pub use compaction_filter::{CompactionFilter, Decision};
pub use db::{
    Cursor, CursorEntries, Db, DbIterator, Keyspace, Snapshot, Transaction, TransactionCursor,
    TransactionCursorEntries, TransactionIter, TRANSACT_ATTEMPTS,
};
#[cfg(feature = "internals")]
#[doc(hidden)]
pub use db::{FilterRun, Presence, ScanStep, ScanTrace, TableInfo, TraceSource, TraceStep};
pub use error::{Error, Result};
pub use events::EventListener;
pub use filter::FilterPolicy;
pub use key::{MAX_KEY_BYTES, MAX_VALUE_BYTES};
pub use key_range::KeyRange;
pub use merge::{Append, MergeOperator, U64Add};
pub use options::{KeyspaceOptions, Options, WriteOptions};
pub use prefix::{PrefixExtractor, MAX_FIXED_PREFIX_BYTES};
pub use stats::{KeyspaceStats, LevelCompactionStats, Stats};
pub use table::Compression;
pub use value::Value;

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
