//! Options presets that more than one test file builds its trees with, and setters for what
//! tests set together. A preset only one file uses stays in that file, beside the tests whose
//! shapes explain its numbers.

use std::sync::Arc;

use bloomkv::fs::FaultFs;
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
        .l0_triggers(64)
}

/// Small memtables and tables, so a few thousand keys reach L0 and deeper levels; L0 is
/// compacted in the background as usual.
pub fn small_tables() -> Options {
    Options::default()
        .memtable_bytes(16 << 10)
        .target_table_bytes(8 << 10)
        .level_base_bytes(32 << 10)
}

/// Setters for what tests set together.
pub trait OptionsExt {
    /// L0's compaction, slowdown and stop triggers all at `tables`: below that many L0
    /// tables, nothing in the background changes L0 or holds writes back.
    fn l0_triggers(self, tables: usize) -> Self;

    /// The database on `fs` (a handle to the same in-memory files).
    fn fault_fs(self, fs: &FaultFs) -> Self;
}

impl OptionsExt for Options {
    fn l0_triggers(self, tables: usize) -> Self {
        self.l0_compaction_trigger(tables).l0_slowdown_trigger(tables).l0_stop_trigger(tables)
    }

    fn fault_fs(self, fs: &FaultFs) -> Self {
        self.file_system(Arc::new(fs.clone()))
    }
}
