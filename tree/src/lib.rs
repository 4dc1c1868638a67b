//! bloomkv-tree: the log-structured merge tree under the bloomkv engine.
//!
//! Tables (blocks, index, filters, properties), memtables, the version of each keyspace's
//! levels and the manifest edits that change it, the iterators that merge them, and the
//! settings a keyspace's tree is built with. It starts no thread and knows nothing of the
//! write-ahead log, the write queue or background work: those are the engine's (`bloomkv`),
//! which builds on this crate. Its API follows the engine's needs and is not yet stable.
#![deny(unsafe_op_in_unsafe_fn)]
// Item docs are written for the engine's maintainers too, and name the private helpers
// they lean on.
#![allow(rustdoc::private_intra_doc_links)]

pub mod blob;
pub mod clock;
pub mod coding;
pub mod compact;
pub mod compaction_filter;
pub mod error;
pub mod filename;
pub mod filter;
pub mod filter_budget;
pub mod filter_memory;
pub mod fs;
pub mod iter;
pub mod key;
pub mod key_head;
pub mod log;
pub mod memtable;
pub mod merge;
pub mod options;
pub mod prefetch;
pub mod prefix;
pub mod range_del;
pub mod range_filter;
pub mod read;
pub mod sync;
pub mod table;
pub mod tree;
pub mod value;
pub mod version;

pub use error::{Error, Result};
pub use key::{MAX_KEY_BYTES, MAX_LARGE_VALUE_BYTES, MAX_VALUE_BYTES};
pub use prefix::PrefixExtractor;
pub use table::Compression;
pub use value::Value;
