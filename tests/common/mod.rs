//! Helpers shared by more than one integration test.

use bloomkv::Options;

/// Small tables and blocks, so a few thousand keys make L0 tables and sorted levels. L0 is
/// never compacted in the background (the triggers are above the 27–28 tables
/// `multi_get.rs`'s `fill_layered` flushes before its `compact`, and the 14 after), so the
/// shape a test builds does not depend on how far a background compaction got: with a
/// trigger of 4, one run in CI found every L0 table already compacted away.
pub fn small_tree() -> Options {
    Options::default()
        .memtable_bytes(16 << 10)
        .block_bytes(512)
        .target_table_bytes(16 << 10)
        .level_base_bytes(64 << 10)
        .l0_compaction_trigger(64)
        .l0_slowdown_trigger(64)
        .l0_stop_trigger(64)
}
