//! Counters of what the engine did, and the [`Stats`] snapshot handed to users.
//!
//! Lookups run on many threads at once; a single shared atomic per counter would bounce its
//! cache line between cores on every read. Each counter is therefore striped over a few
//! cache-padded cells, a thread always adding to "its" cell, and summed when read. A thread
//! owns its cell alone while it lives (see [`stripe`]), so it adds with a plain load and
//! store: an atomic read-modify-write costs many times that, and a short scan or a lookup
//! makes several.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam::utils::CachePadded;

use crate::sync::lock;
use crate::version::edit::KeyspaceId;
use crate::version::set::NUM_LEVELS;
use bloomkv_tree::read::{ReadTally, ScanTally};

const STRIPES: usize = 8;
/// The cell of the threads that found every other one owned: added to atomically.
const SHARED: usize = STRIPES - 1;

/// A counter that many threads can add to without contending.
#[derive(Debug, Default)]
pub(crate) struct Counter {
    cells: [CachePadded<AtomicU64>; STRIPES],
}

/// Bit `i` set while a live thread owns cell `i` of every counter.
static OWNED: AtomicU64 = AtomicU64::new(0);

/// A thread's cell, owned until the thread ends.
struct Stripe(Cell<usize>);

impl Stripe {
    /// The cell this thread adds to, claimed at its first use: a free one to own, else the
    /// shared one.
    #[inline]
    fn get(&self) -> usize {
        match self.0.get() {
            usize::MAX => {
                let s = claim();
                self.0.set(s);
                s
            }
            s => s,
        }
    }
}

impl Drop for Stripe {
    fn drop(&mut self) {
        let s = self.0.get();
        if s < SHARED {
            // Release: the next owner's claim sees every value this thread stored.
            OWNED.fetch_and(!(1 << s), Ordering::Release);
        }
    }
}

fn claim() -> usize {
    let mut owned = OWNED.load(Ordering::Relaxed);
    loop {
        let free = !owned & ((1 << SHARED) - 1);
        if free == 0 {
            return SHARED;
        }
        let s = free.trailing_zeros();
        match OWNED.compare_exchange_weak(
            owned,
            owned | 1 << s,
            Ordering::Acquire,
            Ordering::Relaxed,
        ) {
            Ok(_) => return s as usize,
            Err(now) => owned = now,
        }
    }
}

thread_local! {
    static STRIPE: Stripe = const { Stripe(Cell::new(usize::MAX)) };
}

/// The cell of every counter this thread adds to: one it owns alone (no other thread writes
/// it until this one ends), or [`SHARED`] when all are taken or the thread is ending.
#[inline]
fn stripe() -> usize {
    STRIPE.try_with(Stripe::get).unwrap_or(SHARED)
}

impl Counter {
    #[inline]
    pub(crate) fn add(&self, n: u64) {
        self.add_at(stripe(), n);
    }

    /// Adds `n` to stripe `s` (from [`stripe`]), for callers updating several counters.
    #[inline]
    fn add_at(&self, s: usize, n: u64) {
        if n == 0 {
            return;
        }
        let cell = &self.cells[s];
        if s == SHARED {
            cell.fetch_add(n, Ordering::Relaxed);
        } else {
            // Only this thread writes the cell: readers see the old sum or the new.
            cell.store(cell.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
        }
    }

    #[inline]
    pub(crate) fn incr(&self) {
        self.add(1);
    }

    pub(crate) fn get(&self) -> u64 {
        self.cells.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }
}

/// The engine's live counters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub gets: Counter,
    pub memtable_hits: Counter,
    pub filter_negatives: Counter,
    pub filter_false_positives: Counter,
    pub range_filter_point_negatives: Counter,
    /// Also the number of filter checks: every consulted table's filter is asked.
    pub tables_consulted: Counter,
    pub block_reads: Counter,
    pub block_cache_hits: Counter,
    pub scans: Counter,
    pub prefix_filter_checks: Counter,
    pub prefix_filter_skips: Counter,
    pub memtable_prefix_skips: Counter,
    /// Per level, L0 first.
    pub range_filter_probes: [Counter; NUM_LEVELS],
    pub range_filter_skips: [Counter; NUM_LEVELS],
    /// Per level, shared with the scans that judge their tables (`RangeChecks`): added to
    /// only when a range filter let a table through that held nothing in range, so one cell
    /// per level suffices.
    pub range_filter_false_positives: Arc<bloomkv_tree::version::range_checks::LevelCounts>,
    pub user_bytes_written: Counter,
    pub wal_bytes_written: Counter,
    pub flushes: Counter,
    pub flush_bytes_written: Counter,
    pub compactions: Counter,
    pub compaction_bytes_read: Counter,
    pub compaction_bytes_written: Counter,
    pub compaction_parts: Counter,
    pub compaction_filter_removed: Counter,
    pub compaction_filter_changed: Counter,
    pub compaction_filter_failed: Counter,
    pub compaction_expired_dropped: Counter,
    pub write_stalls: Counter,
    pub write_slowdowns: Counter,
    pub write_stall_micros: Counter,
    pub ingests: Counter,
    pub ingested_bytes: Counter,
    pub ingest_bytes_written: Counter,
    pub blob_bytes_written: Counter,
    /// Per keyspace, the counters of flushes and compactions: updated once per table or
    /// compaction, so a plain map under a lock costs nothing that matters.
    pub keyspaces: Mutex<HashMap<KeyspaceId, KeyspaceCounters>>,
    /// Background work per level written to (compactions are rare: a mutex is cheap).
    pub levels: Mutex<[LevelCompactionStats; NUM_LEVELS]>,
}

/// One keyspace's share of the background work's counters.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct KeyspaceCounters {
    pub flushes: u64,
    pub flush_bytes_written: u64,
    pub compactions: u64,
    pub compaction_bytes_read: u64,
    pub compaction_bytes_written: u64,
    pub compaction_filter_removed: u64,
    pub compaction_filter_changed: u64,
    pub compaction_filter_failed: u64,
    pub compaction_expired_dropped: u64,
    pub fifo_tables_dropped: u64,
}

impl Counters {
    /// Records what a scan's choice of sources did.
    pub(crate) fn record_scan(&self, t: &ScanTally) {
        // One stripe for all: a short scan's own work is a few hundred nanoseconds.
        let s = stripe();
        if t.prefix_filter_checks > 0 {
            self.prefix_filter_checks.add_at(s, t.prefix_filter_checks);
            self.prefix_filter_skips.add_at(s, t.prefix_filter_skips);
        }
        self.memtable_prefix_skips.add_at(s, t.memtable_prefix_skips);
        for level in 0..NUM_LEVELS {
            if t.range_filter_probes[level] > 0 {
                self.range_filter_probes[level].add_at(s, t.range_filter_probes[level]);
                self.range_filter_skips[level].add_at(s, t.range_filter_skips[level]);
            }
        }
    }

    /// Records a flush (`level` 0) or a compaction into `level`.
    pub(crate) fn level(&self, level: usize, f: impl FnOnce(&mut LevelCompactionStats)) {
        if let Some(l) = lock(&self.levels).get_mut(level) {
            f(l);
        }
    }
}

/// The background work that wrote into one level, in [`Stats::compaction_per_level`]: for
/// L0 the flushes (and the merges of L0 tables with each other, see
/// [`crate::events::CompactionReason::L0Merge`]), for deeper levels the compactions whose
/// output went there — the figures RocksDB prints as its per-level compaction stats.
///
/// ```
/// # fn main() -> bloomkv::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
/// for round in 0..3 {
///     for i in 0..100u32 {
///         db.put(i.to_be_bytes(), [round; 100])?;
///     }
///     db.flush()?;
/// }
/// db.compact()?;
/// let stats = db.stats();
/// let levels = &stats.compaction_per_level;
/// assert_eq!(levels[0].runs, stats.flushes);
/// assert_eq!(levels[0].bytes_written, stats.flush_bytes_written);
/// let compacted: u64 = levels[1..].iter().map(|l| l.bytes_written).sum();
/// assert_eq!(compacted, stats.compaction_bytes_written);
/// // The three L0 tables were merged into one run below: a third of what was read survives.
/// let deepest = levels.iter().rposition(|l| l.runs > 0).unwrap();
/// assert!(levels[deepest].write_amplification() < 1.0);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct LevelCompactionStats {
    /// Flushes (L0) or compactions that wrote tables into the level (for L0, its merges).
    pub runs: u64,
    /// Bytes those compactions read from the level above (for L0: 0).
    pub bytes_read_from_above: u64,
    /// Bytes those compactions read from this level's tables they overlapped (and rewrote;
    /// for L0, the tables its merges took).
    pub bytes_read_from_level: u64,
    /// Bytes of tables written into the level.
    pub bytes_written: u64,
    /// Tables moved down into the level without rewriting (no overlap below them).
    pub tables_moved: u64,
    /// Bytes of those tables.
    pub bytes_moved: u64,
    /// Microseconds spent in those flushes or compactions (wall clock, summed over runs).
    pub micros: u64,
}

impl LevelCompactionStats {
    /// Bytes written into the level per byte read from the level above (RocksDB's
    /// "W-Amp" column): what one byte arriving from above costs here. 0 for L0 and for a
    /// level nothing was compacted into.
    pub fn write_amplification(&self) -> f64 {
        if self.bytes_read_from_above == 0 {
            return 0.0;
        }
        self.bytes_written as f64 / self.bytes_read_from_above as f64
    }
}

/// What the range filters of one level's tables did for scans, in
/// [`Stats::range_filter_per_level`] (see [`Stats::range_filter_probes`] for what each counts).
///
/// ```
/// # fn main() -> bloomkv::Result<()> {
/// use bloomkv::{Db, Options, Readable};
/// let dir = tempfile::tempdir().unwrap();
/// let db = Db::open(dir.path(), Options::new().range_filter_bits_per_key(Some(16.0)))?;
/// db.put(7u64.to_be_bytes(), "seven")?;
/// db.put(30u64.to_be_bytes(), "thirty")?;
/// db.flush()?;
/// // The table's key range meets 10..20, its range filter says it holds nothing there.
/// assert_eq!(db.range(10u64.to_be_bytes()..20u64.to_be_bytes()).count(), 0);
/// let l0 = db.stats().range_filter_per_level[0];
/// assert_eq!((l0.probes, l0.skips), (1, 1));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct RangeFilterLevelStats {
    /// Tables of the level whose range filter a scan asked.
    pub probes: u64,
    /// Of those, tables skipped: their filter said they hold nothing in the range.
    pub skips: u64,
    /// Tables let through that held nothing in the range: false positives.
    pub false_positives: u64,
}

impl Counters {
    /// Updates keyspace `id`'s counters with `f`.
    pub(crate) fn keyspace(&self, id: KeyspaceId, f: impl FnOnce(&mut KeyspaceCounters)) {
        f(lock(&self.keyspaces).entry(id).or_default());
    }

    /// Records finished point lookups.
    #[inline]
    pub(crate) fn record_gets(&self, t: &ReadTally) {
        let s = stripe();
        self.gets.add_at(s, t.lookups);
        self.memtable_hits.add_at(s, t.memtable_hits);
        self.tables_consulted.add_at(s, t.tables_consulted);
        self.filter_negatives.add_at(s, t.filter_negatives);
        self.filter_false_positives.add_at(s, t.filter_false_positives);
        self.range_filter_point_negatives.add_at(s, t.range_filter_point_negatives);
        self.block_reads.add_at(s, t.block_reads);
        self.block_cache_hits.add_at(s, t.block_cache_hits);
    }
}

/// A point-in-time picture of the engine's counters and shape, from [`crate::Db::stats`].
///
/// With the `serde` feature it implements `serde::Serialize`, for exporting it whole.
#[derive(Debug, Clone, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Stats {
    /// Point lookups served (`get` on the database or a snapshot; each key of a `multi_get`).
    pub gets: u64,
    /// Lookups answered by a memtable without consulting any table.
    pub memtable_hits: u64,
    /// Tables a filter ruled out: no index or block work was done for them.
    pub filter_negatives: u64,
    /// Filter said "maybe", a block was searched, and the key was not there.
    pub filter_false_positives: u64,
    /// Of `filter_negatives`, tables whose point filter said "maybe" and whose range filter
    /// ([`crate::KeyspaceOptions::range_filter_bits_per_key`]), asked for the key alone,
    /// said it holds no entry of it: the point reads range filters saved a block search.
    pub range_filter_point_negatives: u64,
    /// Tables consulted by lookups: their key range covered the key, so their filter (if
    /// any) was asked.
    pub tables_consulted: u64,
    /// Data blocks read from disk (not found in the block cache).
    pub block_reads: u64,
    /// Data blocks found in the block cache.
    pub block_cache_hits: u64,
    /// Scans started: iterators and cursors (of the database, a keyspace or a snapshot).
    pub scans: u64,
    /// Tables whose prefix filter a scan asked: the scan's range lay inside one prefix of
    /// the keyspace's [`crate::PrefixExtractor`], the table's key range met it, and the
    /// table was built with that extractor.
    pub prefix_filter_checks: u64,
    /// Tables a scan skipped because their prefix filter said they hold no key of its
    /// prefix (no index or block work was done for them).
    pub prefix_filter_skips: u64,
    /// Memtables a scan left out because their filter said they hold no key of its prefix
    /// (the scan's range lay inside one prefix of the keyspace's extractor, the one the
    /// memtable was made with). Not counted in `prefix_filter_checks`, which is the tables'.
    pub memtable_prefix_skips: u64,
    /// Tables whose range filter a scan asked
    /// ([`crate::KeyspaceOptions::range_filter_bits_per_key`]): the scan was bounded at both
    /// ends, the table's key range met it, and the range was narrow enough for the table's
    /// filter.
    pub range_filter_probes: u64,
    /// Tables a scan skipped because their range filter said they hold no key in its range
    /// (and none of their range tombstones meets it): no index or block work was done for
    /// them.
    pub range_filter_skips: u64,
    /// Tables a scan read because their range filter said they may hold a key in its range,
    /// and that held none (nor a range tombstone meeting it): the filters' false positives.
    /// Judged where the scan first positions the table from an end of
    /// its range (a table it never reaches, or only from inside the range, is not judged), and
    /// counted once per scan and table.
    pub range_filter_false_positives: u64,
    /// The three counts above per level, L0 first: where the range filters' memory pays.
    pub range_filter_per_level: Vec<RangeFilterLevelStats>,
    /// Number of tables on each level, L0 first.
    pub tables_per_level: Vec<usize>,
    /// Bytes of tables on each level, L0 first.
    pub bytes_per_level: Vec<u64>,
    /// RAM held by the filters of all live tables (each array in whole 64-byte lines).
    pub filter_memory_bytes: u64,
    /// RAM held by the huge-page chunks open tables' filters (point and range) live in, for
    /// every database in the process together (the filters' huge-page arena): the filters, plus
    /// what dropped filters leave in chunks that still hold a live one, plus the unused tail of
    /// each chunk.
    pub filter_chunk_bytes: u64,
    /// Bytes of blocks and memtable entries kept allocated by values the application holds
    /// that share them (see [`crate::Value`]: only values at least an eighth of their buffer
    /// do), for every database in the process together, counted once per held value. Memory
    /// outside the block cache's budget.
    pub pinned_value_bytes: u64,
    /// RAM held by the indexes of all live tables.
    pub index_memory_bytes: u64,
    /// Table files open now (at most [`Stats::open_table_files_limit`]).
    pub open_table_files: u64,
    /// The most table files kept open: `Options::max_open_files`, lowered at open to fit the
    /// process's `RLIMIT_NOFILE` (see that option).
    pub open_table_files_limit: u64,
    /// Live tables whose point lookups read a memory mapping of their file
    /// (`Options::mmap_reads`), and the bytes mapped: address space over the page cache.
    pub mapped_table_files: u64,
    /// See [`Stats::mapped_table_files`].
    pub mapped_table_bytes: u64,
    /// Times a table file was reopened after the open-file limit had closed it.
    pub table_file_reopens: u64,
    /// Approximate bytes in the active and immutable memtables.
    pub memtable_bytes: u64,
    /// Approximate bytes in the flushed memtables kept for open transactions' commits to
    /// check ([`crate::Options::memtable_history_bytes`]), in memory besides
    /// `memtable_bytes`: 0 when no transaction is open.
    pub memtable_history_bytes: u64,
    /// Bytes in the live write-ahead log segments.
    pub wal_bytes: u64,
    /// Bytes of keys and values written by users through `put`, `delete` and `write`.
    pub user_bytes_written: u64,
    /// Bytes appended to write-ahead log segments since the database was opened: every
    /// write's record as the log stores it (batch header, fragment headers and page padding
    /// included) and the header of each segment started since. With the table counters it
    /// gives what reached the disk per user byte, where [`Stats::wal_bytes`] only tells what
    /// the live segments hold now.
    pub wal_bytes_written: u64,
    /// Completed [`crate::Db::ingest`] calls that added entries.
    pub ingests: u64,
    /// Bytes of keys and values added by ingests.
    pub ingested_bytes: u64,
    /// Bytes of tables written by ingests (their tables' files alone: the blob files they
    /// write count in [`Stats::blob_bytes_written`]).
    pub ingest_bytes_written: u64,
    /// Memtables flushed to L0 tables.
    pub flushes: u64,
    /// Bytes of tables written by flushes (the table files alone: values separated into
    /// blob files count in [`Stats::blob_bytes_written`], never in both).
    pub flush_bytes_written: u64,
    /// Compactions completed.
    pub compactions: u64,
    /// Bytes of tables read by compactions (the table files: the blob files their
    /// references name are read only for merges, compaction filters and relocation).
    pub compaction_bytes_read: u64,
    /// Bytes of tables written by compactions (the table files alone, as for
    /// [`Stats::flush_bytes_written`]).
    pub compaction_bytes_written: u64,
    /// Bytes of blob files written since the database was opened (see
    /// `KeyspaceOptions::blob_threshold`): the whole files, header and framing included, of
    /// those that flushes, compactions (values still inline, and values relocated out of old
    /// files: `KeyspaceOptions::blob_gc_age_cutoff`) and ingests wrote and installed. The table counters above do not include them.
    /// A WAL segment a flush kept as a blob file adds nothing: its bytes are in
    /// [`Stats::wal_bytes_written`].
    pub blob_bytes_written: u64,
    /// Key ranges compactions were split into, summed (equal to `compactions` when none was
    /// split; see `Options::max_subcompactions`).
    pub compaction_parts: u64,
    /// Values compaction filters removed (see [`crate::CompactionFilter`]).
    pub compaction_filter_removed: u64,
    /// Values compaction filters replaced.
    pub compaction_filter_changed: u64,
    /// Values compaction filters failed on (panicked, or gave a replacement larger than
    /// [`crate::MAX_VALUE_BYTES`]), kept as they were; counted each time a compaction meets
    /// one (see [`crate::events::EventListener::on_compaction_filter_error`]).
    pub compaction_filter_failed: u64,
    /// Expired values compaction dropped (see [`crate::Db::put_with_ttl`]).
    pub compaction_expired_dropped: u64,
    /// Writes that had to wait for a flush or compaction.
    pub write_stalls: u64,
    /// Writes delayed briefly because L0 was filling up.
    pub write_slowdowns: u64,
    /// Microseconds writers spent delayed or stopped by back-pressure (summed over writers;
    /// a group's leader waits for the whole group).
    pub write_stall_micros: u64,
    /// The background work that wrote into each level, L0 (flushes) first; the sums over
    /// keyspaces. Tables an ingest writes are not counted here.
    pub compaction_per_level: Vec<LevelCompactionStats>,
    /// The last sequence number assigned.
    pub last_sequence: u64,
    /// Each live keyspace's part of the figures above, the default keyspace first, then in
    /// creation order.
    pub keyspaces: Vec<KeyspaceStats>,
    /// Every live blob file (see `KeyspaceOptions::blob_threshold`), by number.
    pub blob_files: Vec<BlobFileStats>,
    /// Bytes of values in blob files that tables of the current version reference.
    pub blob_live_bytes: u64,
    /// Bytes of values in blob files that no table of the current version references.
    pub blob_garbage_bytes: u64,
    /// The live blob files' sizes on disk (values, keys and framing).
    pub blob_file_bytes: u64,
}

/// One live blob file, in [`Stats::blob_files`]: what it holds and how much of it the
/// current version's tables still reference. Exact: live bytes are the sum of the tables'
/// recorded references, garbage the rest of what the file was written with.
#[derive(Debug, Clone, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct BlobFileStats {
    /// Its file number (`NNNNNN.blob`, or `NNNNNN.log` for a kept WAL segment).
    pub number: u64,
    /// The keyspace whose tables reference it (of a kept WAL segment several keyspaces'
    /// tables may reference: the first of them, by creation).
    pub keyspace: String,
    /// Values written into it (a kept WAL segment: the values referenced when it was kept).
    pub values: u64,
    /// Bytes of the values written into it; for a kept WAL segment its size, since nothing
    /// in it but the live values is worth keeping.
    pub value_bytes: u64,
    /// References to it from the current version's tables.
    pub live_values: u64,
    /// Bytes of the values those references name.
    pub live_bytes: u64,
    /// Bytes of its values no current table references: `value_bytes - live_bytes` (for a
    /// kept WAL segment: its framing, small values and overwritten values too).
    pub garbage_bytes: u64,
    /// Its size on disk.
    pub file_size: u64,
    /// A write-ahead-log segment kept as a blob file: the values a flush found in it were
    /// referenced where they lay instead of being written again.
    pub wal_segment: bool,
}

/// One keyspace's shape and background work, in [`Stats::keyspaces`]. Over all keyspaces,
/// the tables, bytes and memory add up to the totals in [`Stats`]; so do the flush and
/// compaction counters, unless a keyspace was dropped (its work stays in the totals).
///
/// ```
/// # fn main() -> bloomkv::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let db = bloomkv::Db::open(dir.path(), bloomkv::Options::default())?;
/// db.keyspace("users", bloomkv::KeyspaceOptions::default())?.put("u1", "ada")?;
/// db.flush()?;
/// let stats = db.stats();
/// let users = stats.keyspace("users").unwrap();
/// assert_eq!(users.tables_per_level[0], 1);
/// assert_eq!(users.flushes, 1);
/// assert_eq!(stats.keyspace("default").unwrap().flushes, 0); // it held nothing
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct KeyspaceStats {
    /// The keyspace's name (`"default"` for the database's own).
    pub name: String,
    /// Number of tables on each level, L0 first.
    pub tables_per_level: Vec<usize>,
    /// Bytes of tables on each level, L0 first.
    pub bytes_per_level: Vec<u64>,
    /// Approximate bytes in the keyspace's active and immutable memtables.
    pub memtable_bytes: u64,
    /// Approximate bytes in the keyspace's flushed memtables kept for open transactions
    /// (see [`Stats::memtable_history_bytes`]).
    pub memtable_history_bytes: u64,
    /// RAM held by the filters of the keyspace's tables.
    pub filter_memory_bytes: u64,
    /// RAM held by the indexes of the keyspace's tables.
    pub index_memory_bytes: u64,
    /// Tables flushed from the keyspace's memtables.
    pub flushes: u64,
    /// Bytes of those tables.
    pub flush_bytes_written: u64,
    /// Compactions of the keyspace's tables completed.
    pub compactions: u64,
    /// Bytes of tables read by them.
    pub compaction_bytes_read: u64,
    /// Bytes of tables written by them.
    pub compaction_bytes_written: u64,
    /// Values the keyspace's compaction filter removed.
    pub compaction_filter_removed: u64,
    /// Values the keyspace's compaction filter replaced.
    pub compaction_filter_changed: u64,
    /// Values the keyspace's compaction filter failed on, kept as they were.
    pub compaction_filter_failed: u64,
    /// Expired values compaction dropped from the keyspace.
    pub compaction_expired_dropped: u64,
    /// Tables a FIFO keyspace dropped at its bounds (see `CompactionStyle::Fifo`).
    pub fifo_tables_dropped: u64,
}

impl Stats {
    /// The entry of [`Stats::keyspaces`] for keyspace `name`, if it exists.
    pub fn keyspace(&self, name: impl AsRef<str>) -> Option<&KeyspaceStats> {
        let name = name.as_ref();
        self.keyspaces.iter().find(|k| k.name == name)
    }

    /// Bytes written to tables and blob files (flushes, compactions and ingests) per byte of
    /// keys and values users wrote or ingested. An ingested byte is written into a table once, as a flushed
    /// one is; both sides count it, so an ingest moves the figure towards what its table
    /// write costs rather than charging its later compactions to the other writes.
    pub fn write_amplification(&self) -> f64 {
        let user = self.user_bytes_written + self.ingested_bytes;
        if user == 0 {
            return 0.0;
        }
        (self.flush_bytes_written
            + self.compaction_bytes_written
            + self.ingest_bytes_written
            + self.blob_bytes_written) as f64
            / user as f64
    }

    /// The filters' measured false-positive rate: of the filter checks on tables that did
    /// not hold the key, the fraction answered "maybe" (`false_positives / (false_positives +
    /// negatives)`). 0 when no such check happened.
    pub fn filter_false_positive_rate(&self) -> f64 {
        let absent = self.filter_false_positives + self.filter_negatives;
        if absent == 0 {
            return 0.0;
        }
        self.filter_false_positives as f64 / absent as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_rates() {
        let s = Stats {
            filter_negatives: 990,
            filter_false_positives: 10,
            user_bytes_written: 100,
            flush_bytes_written: 150,
            compaction_bytes_written: 250,
            ..Stats::default()
        };
        assert!((s.filter_false_positive_rate() - 0.01).abs() < 1e-12);
        assert!((s.write_amplification() - 4.0).abs() < 1e-12);
        let with_ingest = Stats { ingested_bytes: 100, ingest_bytes_written: 120, ..s.clone() };
        assert!((with_ingest.write_amplification() - 2.6).abs() < 1e-12);
        let with_blobs = Stats { blob_bytes_written: 300, ..s.clone() };
        assert!((with_blobs.write_amplification() - 7.0).abs() < 1e-12);
        assert_eq!(Stats::default().filter_false_positive_rate(), 0.0);
        assert_eq!(Stats::default().write_amplification(), 0.0);
    }

    /// More threads at once than cells, some ending while others start: those past the
    /// owned cells share one, added to atomically, and an ended thread's cell passes to a
    /// new one with its sum. A plain add on a cell two threads wrote would lose counts.
    #[test]
    fn counter_loses_nothing_with_more_threads_than_cells_and_threads_coming_and_going() {
        let c = Counter::default();
        std::thread::scope(|s| {
            for _ in 0..3 * STRIPES {
                s.spawn(|| {
                    for _ in 0..20_000 {
                        c.incr();
                    }
                    // A thread of its own, started and ended while the others count.
                    std::thread::scope(|s| {
                        s.spawn(|| c.add(5));
                    });
                });
            }
        });
        assert_eq!(c.get(), 3 * STRIPES as u64 * 20_005);
    }

    #[test]
    fn striped_counter_sums_across_threads() {
        let c = Counter::default();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        c.incr();
                    }
                });
            }
        });
        assert_eq!(c.get(), 4000);
    }
}
