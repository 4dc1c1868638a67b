//! On-disk sorted tables (SSTables): an immutable file of internal-key/value entries sorted by
//! [`crate::key::compare_internal`], written once by [`TableBuilder`] and read by [`Table`].
//! The bytes are specified in `docs/format/table.md`; in short:
//!
//! ```text
//! data block 0 | … | data block n-1 | filter block | [range-deletion block] | properties block | index block | footer
//! ```
//!
//! Every block is stored as `payload | kind u8 | crc32 u32 LE` (see [`mod@format`]), so every
//! byte of the file but the footer's is covered by a block checksum, and the footer carries its
//! own. Data and index blocks ([`block`]) are prefix-compressed with restart arrays, the index
//! holding one separator and block handle per data block; the filter block is the bytes of
//! [`crate::filter::Filter::encode`]; the range-deletion block exists only in a table with
//! range tombstones, and the properties ([`properties`]), not the footer, name it. The 64-byte
//! footer ([`format::Footer`]) holds the index, filter and properties handles and the format
//! version: 1, 2 with a range-deletion block, 3 with expiring entries, 4 with merge operands
//! ([`format::MERGE_FORMAT_VERSION`]); a build refuses a version it does not know.
//!
//! The filter, properties, index and range tombstones are read once at open and held in RAM,
//! so a point lookup does range check → filter → index search → one data block, and the first
//! two steps touch neither the disk nor the allocator.
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
pub mod false_maybes;
pub mod format;
pub mod iter;
pub mod properties;
pub mod read_pool;
pub mod reader;

pub use crate::fs::FileCache;
pub use builder::{TableBuilder, TableOptions};
pub use cache::BlockCache;
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
