//! bloomkv: an embedded LSM key-value store whose tables carry cache-line-blocked Bloom
//! filters held in RAM, so that a point read touches disk only for tables that may hold the key.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

// The public API: the items re-exported below, plus `filter` (usable on its own), `fs`
// (the file-system seam) and `events` (the listener's trait and what it is told). The tree's
// layers come from `bloomkv-tree`; the `internals` feature, which only the `bloomkv` tool,
// the tests, benches and fuzzers enable, makes `batch`, `check` and those layers public
// here for whitebox use. They are not part of the semver surface.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod batch;
#[cfg(not(feature = "internals"))]
mod batch;
use bloomkv_tree::{blob, coding, filename, iter, key, log, memtable, range_del, table, version};

// Offline checks for `bloomkv verify`: only built for the tool and tests, so the engine code
// it alone would use is still reported as dead in the default build.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod check;
mod db;
pub mod events;
mod key_range;
mod options;
mod stats;
use bloomkv_tree::{clock, compaction_filter, error, merge, prefix, sync, value};
pub use bloomkv_tree::{filter, fs};

pub use batch::WriteBatch;
pub use clock::{Clock, ManualClock, SystemClock};
pub use compaction_filter::{CompactionFilter, Decision};
pub use db::readable::{ReadCursor, Readable};
pub use db::{
    Cursor, CursorEntries, Db, DbIterator, Keyspace, Snapshot, Transaction, TransactionCursor,
    TransactionCursorEntries, TransactionIter, TransactionKeyspace, TRANSACT_ATTEMPTS,
};
#[cfg(feature = "internals")]
#[doc(hidden)]
pub use db::{
    FilterRun, PickedCompaction, Presence, ScanStep, ScanTrace, TableInfo, TraceSource, TraceStep,
};
pub use error::{Error, Result};
pub use events::EventListener;
pub use filter::FilterPolicy;
pub use key::{MAX_KEY_BYTES, MAX_LARGE_VALUE_BYTES, MAX_VALUE_BYTES};
pub use key_range::KeyRange;
pub use merge::{Append, MergeOperator, U64Add};
pub use options::{CompactionStyle, KeyspaceOptions, Options, ReadMix, WriteOptions};
pub use prefix::{PrefixExtractor, MAX_FIXED_PREFIX_BYTES};
pub use stats::{BlobFileStats, KeyspaceStats, LevelCompactionStats, RangeFilterLevelStats, Stats};
pub use table::Compression;
pub use value::Value;

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
