//! On-disk sorted tables (SSTables).
pub mod block;
pub mod cache;
pub mod format;
pub mod properties;

pub use format::Compression;
