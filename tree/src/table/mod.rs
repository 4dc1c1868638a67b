//! On-disk sorted tables (SSTables): an immutable file of internal-key/value entries with an
//! index, a whole-key filter and properties, written once by [`TableBuilder`] and read by
//! [`Table`].
//!
//! # File layout
//!
//! ```text
//! data block 0 | … | data block n-1 | filter block | properties block | index block | footer
//! ```
//!
//! Every block is stored as `payload | kind u8 | crc32 u32 LE` (see [`mod@format`]); the CRC covers
//! the stored payload and the kind byte, so every byte of the file except the footer is
//! verified by a block checksum, and the footer carries its own.
//!
//! * **Data blocks** ([`block`]): prefix-compressed entries whose keys are internal keys
//!   (`user_key | u64 LE (seq << 8 | kind)`), sorted by [`crate::key::compare_internal`], with
//!   a restart array. A block is cut once its encoded size reaches
//!   [`TableOptions::block_bytes`].
//! * **Filter block**: exactly the bytes of [`crate::filter::Filter::encode`] over the table's
//!   distinct user keys, stored uncompressed.
//! * **Properties block** ([`properties`]): tagged fields, stored uncompressed.
//! * **Index block**: the data-block format with one entry per data block: key = a separator
//!   internal key `s` with `last key of block i <= s < first key of block i+1` (the last
//!   block's is a short successor of its last key), value = the block's handle
//!   (`offset varint | size varint`). Compressed like data blocks.
//! * **Footer** ([`format::Footer`]): 64 bytes at the end of the file: the index, filter and
//!   properties handles as fixed `u64` pairs, the format version (1), a CRC32 of those 52
//!   bytes, and the magic `b"bloomkv1"`.
//!
//! The filter, properties and index are read once at open and held in RAM (the index decoded
//! into a flat array), so a point lookup does range check → filter → binary search of the
//! index → one data block, and the first two steps touch neither the disk nor the allocator.
//!
//! Everything read from disk is checked before use: handles against the file size and the
//! region they belong to before any allocation, CRCs before decoding, restart arrays against
//! block sizes, and every length against the bytes that remain. Damage surfaces as
//! [`crate::Error::Corruption`] naming the file and the offset of the block (or footer) that
//! failed.

pub mod block;
pub mod block_iter;
pub mod builder;
pub mod cache;
pub mod file_cache;
pub mod format;
pub mod iter;
pub mod properties;
pub mod read_pool;
pub mod reader;

pub use builder::{TableBuilder, TableOptions};
pub use cache::BlockCache;
pub use file_cache::FileCache;
pub use format::Compression;
pub use reader::{GetOutcome, Table, TableGet};
// Only the tool and tests (through the `internals` feature) name these by the short path.
pub use {
    block::{Block, BlockBuilder},
    block_iter::BlockIter,
    format::{BlockHandle, Footer},
    iter::TableIter,
    properties::TableProperties,
};
