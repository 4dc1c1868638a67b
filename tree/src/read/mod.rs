//! Reading a [`crate::tree::Tree`]: a point read's walk ([`search`]), many keys at once
//! ([`multi_get`]), and the visible versions of a merged stream for scans ([`visible`]).

pub mod multi_get;
pub mod search;
pub mod sources;
pub mod visible;

/// What point lookups did (one `get`, or every key of a `multi_get`), tallied in plain
/// integers while they run and added to the shared counters once at the end: an atomic
/// add costs tens of cycles, and a lookup that consults several tables would otherwise pay
/// for a handful per table.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReadTally {
    pub lookups: u64,
    pub memtable_hits: u64,
    pub tables_consulted: u64,
    pub filter_negatives: u64,
    pub filter_false_positives: u64,
    /// Of `filter_negatives`, the tables whose point filter said "maybe" and whose range
    /// filter, asked for the key alone, said "absent".
    pub range_filter_point_negatives: u64,
    pub block_reads: u64,
    pub block_cache_hits: u64,
}

/// What a scan's choice of sources did, added to the engine's counters by the caller.
#[derive(Debug, Default, Clone, Copy)]
pub struct ScanTally {
    /// Tables whose prefix filter was asked.
    pub prefix_filter_checks: u64,
    /// Of those, tables skipped: the filter said no key has the scan's prefix.
    pub prefix_filter_skips: u64,
    /// Memtables skipped by their prefix filter.
    pub memtable_prefix_skips: u64,
    /// Tables whose range filter answered for the scan's range (probed, or ruled out by
    /// its key map), per level.
    pub range_filter_probes: [u64; crate::version::set::NUM_LEVELS],
    /// Of those, tables skipped: the filter (and the table's range tombstones) say it holds
    /// nothing in the range.
    pub range_filter_skips: [u64; crate::version::set::NUM_LEVELS],
}
