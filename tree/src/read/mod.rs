//! Reading a [`crate::tree::Tree`]: the visible versions of a merged stream for scans.

pub mod visible;
