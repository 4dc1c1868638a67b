//! Configuration: [`Options`] for a database, [`KeyspaceOptions`] for one keyspace's tables,
//! [`WriteOptions`] for one write.

use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;

use crate::compaction_filter::{CompactionFilter, FilterSlot};
use crate::filter::FilterPolicy;
use crate::merge::{MergeOperator, MergeSlot};
use crate::prefix::PrefixExtractor;
use crate::table::Compression;
use crate::{Error, Result};
use bloomkv_tree::options::{within, Unit};
pub use bloomkv_tree::options::{CompactionStyle, KeyspaceOptions, ReadMix};

/// How a database is configured. Builder-style: start from `Options::default()` and chain
/// setters.
///
/// ```
/// use bloomkv::{Compression, FilterPolicy, Options};
/// let opts = Options::default()
///     .memtable_bytes(8 << 20)
///     .filter_policy(FilterPolicy::BlockedBloom { bits_per_key: 12.0 })
///     .compression(Compression::Zstd { level: 3 });
/// # let _ = opts;
/// ```
///
/// Setters take the plain name, builder-style; there are no getters (a `get_` prefix is
/// against the Rust API guidelines, and the plain name is the setter's): `Debug` shows the
/// whole configuration.
#[derive(Debug, Clone)]
pub struct Options {
    /// The default keyspace's settings, which the keyspace setters below set.
    pub(crate) keyspace: KeyspaceOptions,
    pub(crate) memtable_bytes: usize,
    pub(crate) max_immutable_memtables: usize,
    pub(crate) memtable_history_bytes: usize,
    pub(crate) max_successive_merges: usize,
    pub(crate) block_cache_bytes: usize,
    pub(crate) max_open_files: usize,
    pub(crate) max_batch_bytes: usize,
    pub(crate) mmap_reads: bool,
    pub(crate) sync_writes: bool,
    pub(crate) l0_compaction_trigger: usize,
    pub(crate) l0_slowdown_trigger: usize,
    pub(crate) l0_stop_trigger: usize,
    pub(crate) level_size_ratio: u64,
    pub(crate) level_base_bytes: u64,
    pub(crate) max_subcompactions: usize,
    pub(crate) create_if_missing: bool,
    pub(crate) error_if_exists: bool,
    pub(crate) fs: std::sync::Arc<dyn crate::fs::FileSystem>,
    pub(crate) listeners: crate::events::Listeners,
    pub(crate) change_settings: bool,
    pub(crate) clock: Arc<dyn crate::Clock>,
    /// `clock` is the default [`crate::SystemClock`]: scans may read it only when they meet
    /// an expiring value (`ExpiryTime`).
    pub(crate) system_clock: bool,
    /// Whether the background thread compacts (only scripts that step compactions
    /// themselves turn it off).
    pub(crate) background_compactions: bool,
    pub(crate) periodic_compaction: Option<Duration>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            keyspace: KeyspaceOptions::default(),
            memtable_bytes: 16 << 20,
            max_immutable_memtables: 2,
            memtable_history_bytes: 16 << 20,
            max_successive_merges: 64,
            block_cache_bytes: 64 << 20,
            max_open_files: 4096,
            max_batch_bytes: 64 << 20,
            mmap_reads: false,
            sync_writes: false,
            l0_compaction_trigger: 4,
            l0_slowdown_trigger: 8,
            l0_stop_trigger: 12,
            level_size_ratio: 10,
            level_base_bytes: 64 << 20,
            max_subcompactions: std::thread::available_parallelism().map_or(1, |n| n.get().min(4)),
            create_if_missing: true,
            error_if_exists: false,
            fs: std::sync::Arc::new(crate::fs::StdFs),
            listeners: crate::events::Listeners::default(),
            change_settings: false,
            clock: Arc::new(crate::SystemClock),
            system_clock: true,
            background_compactions: true,
            periodic_compaction: Some(Duration::from_secs(
                Options::DEFAULT_PERIODIC_COMPACTION_SECS,
            )),
        }
    }
}

/// A setter of the default keyspace's settings.
macro_rules! keyspace_setter {
    ($(#[$doc:meta])* $name:ident: $ty:ty) => {
        $(#[$doc])*
        pub fn $name(mut self, value: $ty) -> Self {
            self.keyspace.$name = value;
            self
        }
    };
}

macro_rules! setter {
    ($(#[$doc:meta])* $name:ident: $ty:ty) => {
        $(#[$doc])*
        pub fn $name(mut self, value: $ty) -> Self {
            self.$name = value;
            self
        }
    };
}

/// `bytes` as a `usize`; the largest one where a `usize` cannot hold it.
const fn usize_bytes(bytes: u64) -> usize {
    if bytes > usize::MAX as u64 {
        usize::MAX
    } else {
        bytes as usize
    }
}

/// The values each numeric option accepts: `Db::open` (and `Db::keyspace`, for a keyspace's
/// options) refuses any other with [`Error::InvalidArgument`] naming the option and its
/// range. Every bound is far beyond what RocksDB's or fjall's defaults and tuning guides
/// use, and keeps what the engine allocates or computes from the option within reach.
impl Options {
    /// [`Options::memtable_bytes`]: 1 KiB to 4 GiB.
    pub const MEMTABLE_BYTES_RANGE: RangeInclusive<usize> = 1 << 10..=usize_bytes(4 << 30);
    /// [`Options::max_immutable_memtables`]: 1 to 64.
    pub const MAX_IMMUTABLE_MEMTABLES_RANGE: RangeInclusive<usize> = 1..=64;
    /// [`Options::memtable_history_bytes`]: 0 to 16 GiB.
    pub const MEMTABLE_HISTORY_BYTES_RANGE: RangeInclusive<usize> = 0..=usize_bytes(16 << 30);
    /// [`Options::max_successive_merges`]: 0 (off) to 1,000,000.
    pub const MAX_SUCCESSIVE_MERGES_RANGE: RangeInclusive<usize> = 0..=1_000_000;
    /// [`Options::block_bytes`] and [`KeyspaceOptions::block_bytes`]: 64 bytes to 16 MiB.
    pub const BLOCK_BYTES_RANGE: RangeInclusive<usize> = KeyspaceOptions::BLOCK_BYTES_RANGE;
    /// [`Options::block_cache_bytes`]: 0 to 1 TiB.
    pub const BLOCK_CACHE_BYTES_RANGE: RangeInclusive<usize> = 0..=usize_bytes(1 << 40);
    /// [`Options::max_open_files`]: 1 to 1,048,576.
    pub const MAX_OPEN_FILES_RANGE: RangeInclusive<usize> = 1..=1 << 20;
    /// [`Options::max_batch_bytes`]: 1 KiB to 1 GiB.
    pub const MAX_BATCH_BYTES_RANGE: RangeInclusive<usize> = 1 << 10..=1 << 30;
    /// [`Options::l0_compaction_trigger`], [`Options::l0_slowdown_trigger`] and
    /// [`Options::l0_stop_trigger`]: 1 to 1,000.
    pub const L0_TRIGGERS_RANGE: RangeInclusive<usize> = 1..=1000;
    /// [`Options::level_size_ratio`]: 2 to 1,000.
    pub const LEVEL_SIZE_RATIO_RANGE: RangeInclusive<u64> = 2..=1000;
    /// [`Options::level_base_bytes`]: 1 KiB to 1 PiB.
    pub const LEVEL_BASE_BYTES_RANGE: RangeInclusive<u64> = 1 << 10..=1 << 50;
    /// [`Options::target_table_bytes`] and [`KeyspaceOptions::target_table_bytes`]: 1 KiB
    /// to 4 GiB.
    pub const TARGET_TABLE_BYTES_RANGE: RangeInclusive<u64> =
        KeyspaceOptions::TARGET_TABLE_BYTES_RANGE;
    /// [`Options::max_subcompactions`]: 1 to 64.
    pub const MAX_SUBCOMPACTIONS_RANGE: RangeInclusive<usize> = 1..=64;
    /// [`Options::periodic_compaction`], in seconds: a minute (how often an idle database
    /// looks) to ten years.
    pub const PERIODIC_COMPACTION_RANGE: RangeInclusive<u64> = 60..=10 * 365 * 86_400;
    /// [`Options::periodic_compaction`]'s default, in seconds: 30 days.
    const DEFAULT_PERIODIC_COMPACTION_SECS: u64 = 30 * 86_400;
}

impl Options {
    /// The default options (the same as `Options::default()`), to chain setters on.
    pub fn new() -> Self {
        Options::default()
    }

    setter!(
        /// Size at which the memtable becomes immutable and is flushed (default 16 MiB; at
        /// most `1 + max_immutable_memtables` of them are held at once). With keyspaces, the
        /// limit is on the memtables of all keyspaces together, which switch together.
        ///
        /// 1 KiB to 4 GiB ([`Options::MEMTABLE_BYTES_RANGE`]; RocksDB's `write_buffer_size`
        /// is 64 MiB by default): each keyspace's memtable gets a key filter of 1/64 of
        /// this (1/32 with a prefix extractor), allocated at its first write, so 4 GiB
        /// memtables cost 64 MiB of filter each.
        memtable_bytes: usize);
    setter!(
        /// Immutable memtables allowed to wait for flushing before writers stop (default 2).
        /// 1 to 64 ([`Options::MAX_IMMUTABLE_MEMTABLES_RANGE`]): memtables held in memory are
        /// up to `(1 + max_immutable_memtables) × memtable_bytes`.
        max_immutable_memtables: usize);
    setter!(
        /// Bytes of flushed memtables kept as a record of recent writes for transactions'
        /// commits to check (default 16 MiB; RocksDB's `max_write_buffer_size_to_maintain`).
        /// A commit checks what it read against every memtable since the one receiving writes
        /// when it began; once that memtable has left this history, a transaction that read
        /// anything is refused with [`Error::Conflict`] whatever was written. The newest
        /// flushed memtables are kept while those newer than them hold less than this, so
        /// memory goes up to this plus one memtable (any value above 0 keeps at least one),
        /// and a transaction survives about `memtable_history_bytes` of other writes. 0
        /// keeps none: a transaction outliving its memtable always conflicts. Only memtables
        /// an open transaction began before the flush of are kept: without transactions the
        /// history costs nothing ([`crate::Stats::memtable_history_bytes`]).
        ///
        /// 0 to 16 GiB ([`Options::MEMTABLE_HISTORY_BYTES_RANGE`]).
        ///
        /// ```
        /// # use bloomkv::Readable;
        /// # fn main() -> bloomkv::Result<()> {
        /// let dir = tempfile::tempdir().unwrap();
        /// let opts = bloomkv::Options::new().memtable_bytes(64 << 10).memtable_history_bytes(1 << 20);
        /// let db = bloomkv::Db::open(dir.path(), opts)?;
        /// let mut tx = db.transaction();
        /// let seen = tx.get("config")?;
        /// db.put("unrelated", "x")?;
        /// db.flush()?; // the memtable active at the transaction's start leaves for a table
        /// tx.put("config", seen.as_deref().unwrap_or(b"default"))?;
        /// tx.commit()?; // checked against the history: no conflict
        /// # Ok(()) }
        /// ```
        memtable_history_bytes: usize);
    setter!(
        /// How many merge operands of one key in a row the active memtable holds at most
        /// (default 64; RocksDB's `max_successive_merges`, which defaults to 0). A merge
        /// written for a key whose newest entries in the memtable are that many operands is
        /// combined, as the write is applied, with everything beneath it into a put of the
        /// result; older snapshots still read the operands, which stay. A read combines
        /// operands at about 0.1 µs each (a hot counter's 200,000 in one memtable took 25 ms);
        /// with the bound it combines at most this many from the active memtable. The price:
        /// each merge of a key the memtable holds counts the operands on top (a search, then
        /// a step each, up to this many: a hot key's merge took 1.1–1.3 µs at 64 against
        /// 0.4–0.7 without, 1.7 at 256), and one merge in this many reads the key, which may
        /// read a table while the write path waits. 0 turns it off. Not applied over a live
        /// expiring value (the combination changes when it expires; each merge past the
        /// bound then reads the key in vain), nor where the operator fails (the operand is
        /// written as it is). The bound is the database's; each keyspace combines with its
        /// own operator.
        ///
        /// 0 to 1,000,000 ([`Options::MAX_SUCCESSIVE_MERGES_RANGE`]).
        max_successive_merges: usize);
    keyspace_setter!(
        /// The per-table filter (default: blocked Bloom at 10 bits per key), or with
        /// [`FilterPolicy::Budgeted`] one filter memory budget split across the tree.
        filter_policy: FilterPolicy);
    keyspace_setter!(
        /// The default keyspace's prefix extractor (default none): each table's filter also
        /// holds its keys' distinct prefixes, and scans inside one prefix skip the tables
        /// that hold none of it (see [`PrefixExtractor`]). The prefixes come out of the same
        /// memory: the tree's filters hold about bits per key times keys, spread evenly over
        /// keys and prefixes, so a table holding one key per prefix (a flush of scattered
        /// writes) gets about twice the bits per key of one holding ten.
        prefix_extractor: Option<PrefixExtractor>);
    keyspace_setter!(
        /// Whether the filters hold whole keys (default true), for point lookups. With a
        /// [`prefix extractor`](Options::prefix_extractor) and `false`, they hold only the
        /// prefixes, sized at the filter's bits per key times the table's distinct prefixes:
        /// much less memory when only scans matter, but a point lookup then reads every table
        /// whose key range covers the key and whose filter may hold the key's prefix. With
        /// both, a lookup asks for the key and, where that says "maybe", for its prefix.
        /// Without an extractor it has no effect.
        whole_key_filtering: bool);
    keyspace_setter!(
        /// Bits per key of a range filter in each new table of the default keyspace (default
        /// `None`, none), 4 to 40: short bounded scans skip the tables that hold nothing in
        /// their range (see [`KeyspaceOptions::range_filter_bits_per_key`]).
        range_filter_bits_per_key: Option<f64>);
    keyspace_setter!(
        /// Under a budgeted filter policy, the default keyspace's reads the budget is split
        /// for between point and range filters (default `None`: point filters only); see
        /// [`KeyspaceOptions::read_mix`].
        read_mix: Option<ReadMix>);
    /// How the default keyspace's tables are compacted (default
    /// [`CompactionStyle::Leveled`]); see [`KeyspaceOptions::compaction_style`]. Taken from
    /// these options at every open, as the default keyspace's other settings.
    pub fn compaction_style(mut self, style: CompactionStyle) -> Self {
        self.keyspace = self.keyspace.compaction_style(style);
        self
    }
    keyspace_setter!(
        /// Data block compression (default none: point reads are the priority).
        compression: Compression);
    keyspace_setter!(
        /// Keeps the default keyspace's values of at least this many bytes in blob files
        /// (default `None`: none); see [`KeyspaceOptions::blob_threshold`]. 1 byte to 16 MiB
        /// ([`KeyspaceOptions::BLOB_THRESHOLD_RANGE`]).
        blob_threshold: Option<usize>);
    keyspace_setter!(
        /// The fraction of the default keyspace's blob files, oldest first, whose values
        /// compactions relocate (default 0.25; 0: none); see
        /// [`KeyspaceOptions::blob_gc_age_cutoff`]. 0 to 1
        /// ([`KeyspaceOptions::BLOB_GC_FRACTION_RANGE`]).
        blob_gc_age_cutoff: f64);
    keyspace_setter!(
        /// The garbage ratio of the default keyspace's blob files within the age cutoff at
        /// which the tables referencing the oldest are compacted (default 0.5); see
        /// [`KeyspaceOptions::blob_gc_force_threshold`]. 0 to 1
        /// ([`KeyspaceOptions::BLOB_GC_FRACTION_RANGE`]).
        blob_gc_force_threshold: f64);
    keyspace_setter!(
        /// Target uncompressed size of a data block (default 4 KiB). 64 bytes to 16 MiB
        /// ([`Options::BLOCK_BYTES_RANGE`]): a block is read, checked and cached whole.
        block_bytes: usize);
    setter!(
        /// Capacity of the shared cache of decompressed blocks (default 64 MiB). 0 (no
        /// cache) to 1 TiB ([`Options::BLOCK_CACHE_BYTES_RANGE`]); the cache takes memory as
        /// it fills, not up front.
        block_cache_bytes: usize);
    setter!(
        /// Table files kept open at once (default 4096). Filters and indexes of every table
        /// stay in RAM regardless; a table whose file was closed reopens it on its next data
        /// block read (correct, only slower).
        ///
        /// On Unix, the value used is clipped at open to the process's soft `RLIMIT_NOFILE`
        /// less 16 descriptors and an eighth of the limit (room for the WAL, the manifest, the
        /// LOCK, directory fsyncs, tables being written and the application's own files),
        /// but not below 16: with `ulimit -n 1024` it is 880; with 256 it is 208; with 64 it
        /// is 40. The limit is read once, when the database opens, and each database clips to
        /// it alone: a process that opens several should divide the limit between them. The
        /// value in use is [`crate::Stats::open_table_files_limit`].
        ///
        /// 1 to 1,048,576 ([`Options::MAX_OPEN_FILES_RANGE`], Linux's default ceiling on any
        /// process's descriptors, `fs.nr_open`).
        max_open_files: usize);
    setter!(
        /// Largest write batch [`crate::Db::write`] accepts, in encoded bytes
        /// ([`crate::WriteBatch::approximate_bytes`]); a larger one fails with
        /// [`Error::BatchTooLarge`] before any of it is copied, logged or applied. Single
        /// writes (`put`, `delete`, `delete_range`, of the database or a keyspace) are held
        /// to it too. 1 KiB to 1 GiB ([`Options::MAX_BATCH_BYTES_RANGE`]).
        ///
        /// Why a limit: a batch is copied into the write queue and then into its WAL record,
        /// so one write briefly costs about three times its size in memory, and every other
        /// writer waits while it is logged and applied. The default, 64 MiB, is four times
        /// [`crate::MAX_VALUE_BYTES`] (so the largest single `put` fits with room to spare),
        /// keeps that peak near 200 MB, and bounds the stall to one 64 MiB append. Bulk loads
        /// belong in [`crate::Db::ingest`], or in several batches. The bound is for callers
        /// that need large atomic batches (a replicated log's appends, say): a 1 GiB batch
        /// already costs about 3 GiB while it is written and holds every writer for seconds.
        ///
        /// ```
        /// # fn main() -> bloomkv::Result<()> {
        /// use bloomkv::{Db, Error, Options, Readable, WriteBatch, WriteOptions};
        /// let dir = tempfile::tempdir().unwrap();
        /// let db = Db::open(dir.path(), Options::default().max_batch_bytes(4 << 10))?;
        /// let mut batch = WriteBatch::new();
        /// batch.put("big", vec![0u8; 8 << 10]);
        /// let r = db.write(&batch, &WriteOptions::default());
        /// assert!(matches!(r, Err(Error::BatchTooLarge { limit: 4096, .. })));
        /// assert_eq!(db.get("big")?, None);
        /// # Ok(()) }
        /// ```
        max_batch_bytes: usize);
    setter!(
        /// Whether point lookups read table files through memory mappings instead of
        /// `pread` (default false). A data block the page cache holds is then checked and
        /// searched where it lies, with no system call, copy or block-cache probe (blocks of
        /// uncompressed tables skip the block cache): at 50M keys, present-key lookups ran
        /// 1.5–1.6× faster and absent-key ones 1.2–1.3× (docs/results/, large profile). On
        /// Linux, mapping a table also enters the pages of its file that the page cache holds
        /// into the mapping (nothing is read from the device for it), so lookups take no page
        /// fault on first touching them; opening a database of 5.5 GB of tables held in
        /// memory took about 0.5 s longer for it. A mapped table holds no file descriptor
        /// for its lookups (`max_open_files` then bounds only the files scans and
        /// compactions read through), but its whole file in address space. Off by default
        /// for one reason: a table file truncated by another process while mapped (also
        /// through a hard link, such as a checkpoint's copy of it), or a device error under
        /// a mapped page, ends this process with `SIGBUS` at its next read there, where
        /// `pread` would have returned an error. File systems that cannot map (such as
        /// `FaultFs`, and `StdFs` off Unix) read as if this were off.
        mmap_reads: bool);
    setter!(
        /// Whether writes fsync the WAL before they are acknowledged (default false). Applies
        /// to `put`, `delete`, and to `write` unless its [`WriteOptions`] set `sync`.
        sync_writes: bool);
    setter!(
        /// Number of L0 tables that starts an L0 compaction (default 4): into L1, or, while L1
        /// holds much more than L0, of the newest L0 tables with each other.
        ///
        /// The three L0 triggers are each 1 to 1,000 ([`Options::L0_TRIGGERS_RANGE`]; RocksDB's
        /// defaults are 4, 20 and 36), with `l0_compaction_trigger <= l0_slowdown_trigger <=
        /// l0_stop_trigger`. Every read consults every L0 table and a scan holds a block of
        /// each, so the stop trigger bounds what a read costs and a scan holds.
        l0_compaction_trigger: usize);
    setter!(
        /// Number of L0 tables at which each write is delayed a little (default 8, LevelDB's).
        /// Every read consults each L0 table, so this bounds what reads pay while writes
        /// outrun compaction. A bulk load can raise it with [`Options::l0_stop_trigger`]:
        /// RocksDB's 20 and 36 fill faster and write less, at the price of more L0 tables
        /// for reads to consult until compaction catches up (measured in `docs/results/`).
        /// 1 to 1,000, see [`Options::l0_compaction_trigger`].
        l0_slowdown_trigger: usize);
    setter!(
        /// Number of L0 tables at which writes wait for compaction (default 12). 1 to 1,000,
        /// see [`Options::l0_compaction_trigger`].
        l0_stop_trigger: usize);
    setter!(
        /// Each level below L1 may hold this many times the bytes of the one above (default
        /// 10). 2 to 1,000 ([`Options::LEVEL_SIZE_RATIO_RANGE`]).
        level_size_ratio: u64);
    setter!(
        /// Target size of L1 in bytes (default 64 MiB: about what L0 holds when it triggers a
        /// compaction, so an L0 compaction rewrites about as much of L1 as it brings in).
        /// 1 KiB to 1 PiB ([`Options::LEVEL_BASE_BYTES_RANGE`]): a target nothing reaches
        /// leaves everything in L1.
        level_base_bytes: u64);
    keyspace_setter!(
        /// Size at which compaction output on L1 is split into a new table (default 16 MiB);
        /// L2's tables are twice it, those of L3 and below five times
        /// (`KeyspaceOptions::table_bytes_at`: the deep levels hold nearly all the data).
        /// 1 KiB to 4 GiB ([`Options::TARGET_TABLE_BYTES_RANGE`]; RocksDB's
        /// `target_file_size_base` is 64 MiB by default): a table's filter and index are
        /// built in memory, and a compaction may read ten times a table of the level below.
        target_table_bytes: u64);
    setter!(
        /// Threads one compaction may use (default: the machine's cores, at most 4). A large
        /// compaction is split into this many key ranges, merged and written in parallel; the
        /// first runs on the compaction thread. RocksDB calls this `max_subcompactions`.
        /// 1 to 64 ([`Options::MAX_SUBCOMPACTIONS_RANGE`]).
        max_subcompactions: usize);
    setter!(
        /// Create the database if the directory holds none (default true). A database is
        /// only created in a directory that is new, empty, or holds nothing but what an
        /// interrupted creation leaves: `Db::open` refuses, with [`Error::NotADatabase`], a
        /// directory holding other files, rather than write its own beside them. Without it,
        /// opening where there is no database fails with [`Error::NotFound`].
        create_if_missing: bool);
    setter!(
        /// Fail with [`Error::AlreadyExists`] if the directory already holds a database
        /// (default false), for callers that mean to create a fresh one.
        error_if_exists: bool);

    /// Routes all file access through `fs` (tests use this to inject faults).
    pub fn file_system(mut self, fs: std::sync::Arc<dyn crate::fs::FileSystem>) -> Self {
        self.fs = fs;
        self
    }

    /// Adds `listener` to those told of flushes, compactions, write stalls, background
    /// errors and resumes (see [`crate::events::EventListener`] for where its callbacks run
    /// and what they may do). Call it once per listener; they are called in the order
    /// added. The same events are logged through the `log` crate (target `bloomkv`)
    /// whether or not a listener is registered.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use bloomkv::events::{BackgroundErrorInfo, EventListener};
    ///
    /// struct Alert;
    /// impl EventListener for Alert {
    ///     fn on_background_error(&self, info: &BackgroundErrorInfo) {
    ///         eprintln!("bloomkv stopped taking writes: {}", info.error);
    ///     }
    /// }
    ///
    /// let opts = bloomkv::Options::new().event_listener(Arc::new(Alert));
    /// # let _ = opts;
    /// ```
    pub fn event_listener(mut self, listener: std::sync::Arc<dyn crate::EventListener>) -> Self {
        self.listeners.0.push(listener);
        self
    }

    /// The default keyspace's compaction filter (see [`crate::CompactionFilter`], which says
    /// when it is asked and what it never sees). The database records its name only: give
    /// it at every open (see [`Options::change_settings`]).
    pub fn compaction_filter(mut self, filter: Arc<dyn CompactionFilter>) -> Self {
        self.keyspace.compaction_filter = FilterSlot(Some(filter));
        self
    }

    /// Whether a failure of the default keyspace's compaction filter stops the database
    /// (default `false`: the entry it failed on is kept as it was, and the failure counted
    /// and reported; see [`crate::CompactionFilter`]). Not recorded in the database: give it
    /// at every open, with the filter.
    pub fn stop_on_compaction_filter_error(mut self, stop: bool) -> Self {
        self.keyspace.stop_on_compaction_filter_error = stop;
        self
    }

    /// The default keyspace's merge operator (see [`crate::MergeOperator`]), which
    /// [`crate::Db::merge`] needs. The database records its name only: give it at every
    /// open (see [`Options::change_settings`]).
    pub fn merge_operator(mut self, operator: Arc<dyn MergeOperator>) -> Self {
        self.keyspace.merge_operator = MergeSlot(Some(operator));
        self
    }

    /// Whether `Db::open` may record default-keyspace settings other than those the
    /// database holds (default `false`): [`KeyspaceOptions::change_settings`] for the
    /// default keyspace, whose checked settings are its
    /// [`prefix extractor`](Options::prefix_extractor) and the names of its
    /// [`merge operator`](Options::merge_operator) and
    /// [`compaction filter`](Options::compaction_filter).
    ///
    /// ```
    /// # fn main() -> bloomkv::Result<()> {
    /// use std::sync::Arc;
    /// use bloomkv::{Db, Error, Options, U64Add};
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// Db::open(dir.path(), Options::new().merge_operator(Arc::new(U64Add)))?.close()?;
    /// // Forgetting the operator is refused...
    /// let r = Db::open(dir.path(), Options::new());
    /// assert!(matches!(r, Err(Error::SettingMismatch { setting: "merge_operator", .. })));
    /// // ...dropping it on purpose is recorded.
    /// Db::open(dir.path(), Options::new().change_settings(true))?.close()?;
    /// Db::open(dir.path(), Options::new())?;
    /// # Ok(()) }
    /// ```
    pub fn change_settings(mut self, change: bool) -> Self {
        self.change_settings = change;
        self
    }

    /// The clock expiry is judged by ([`crate::Db::put_with_ttl`]): [`crate::SystemClock`]
    /// by default; a [`crate::ManualClock`] lets tests move time without sleeping.
    pub fn clock(mut self, clock: Arc<dyn crate::Clock>) -> Self {
        self.clock = clock;
        self.system_clock = false;
        self
    }

    /// How old a table may grow before it is rewritten so that a compaction filter and
    /// expiry run over it again (RocksDB's `periodic_compaction_seconds`); `None`: never.
    /// Only tables whose rewrite may drop something are due: those of a keyspace with a
    /// [`crate::CompactionFilter`], and those holding an expired value
    /// ([`crate::Db::put_with_ttl`]). Compaction otherwise reaches a table only when
    /// writes push data down onto it, so in a database that has gone quiet, expired values
    /// and values a filter would drop stay on disk for good; a table with only a few
    /// expired values is not worth rewriting for them alone (see
    /// [`crate::events::CompactionReason::Expiry`]).
    ///
    /// 30 days by default, as RocksDB's default when a compaction filter is in use: such
    /// leftovers are freed within a month, and a table is rewritten at most once a month
    /// for it (the rewritten table is new), a small cost next to what writes compact. Between
    /// a minute and ten years
    /// ([`Options::PERIODIC_COMPACTION_RANGE`], whole seconds); an idle database looks once
    /// a minute.
    ///
    /// ```
    /// # fn main() -> bloomkv::Result<()> {
    /// use std::time::Duration;
    /// use bloomkv::{Db, Options};
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let week = Options::new().periodic_compaction(Some(Duration::from_secs(7 * 86_400)));
    /// let db = Db::open(dir.path(), week)?;
    /// # drop(db);
    /// let too_short = Options::new().periodic_compaction(Some(Duration::from_secs(1)));
    /// assert!(Db::open(dir.path(), too_short).is_err());
    /// # Ok(()) }
    /// ```
    pub fn periodic_compaction(mut self, period: Option<Duration>) -> Self {
        self.periodic_compaction = period;
        self
    }

    /// With `false`, the background thread never compacts: compactions run only when
    /// asked for (`Db::compact`, `Db::compact_step`), at moments a test script can see.
    /// Internals only: a database left so would grow L0 without bound.
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn background_compactions(mut self, on: bool) -> Self {
        self.background_compactions = on;
        self
    }

    /// The settings of the default keyspace (whose `change_settings` is `Options`' own).
    pub(crate) fn keyspace_options(&self) -> KeyspaceOptions {
        KeyspaceOptions { change_settings: false, ..self.keyspace.clone() }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        self.keyspace_options().validate()?;
        use Unit::{Bytes, Count};
        if let Some(p) = self.periodic_compaction {
            let secs = p.as_secs();
            let range = &Self::PERIODIC_COMPACTION_RANGE;
            within("periodic_compaction", secs, range, Unit::Seconds)?;
        }
        within("memtable_bytes", self.memtable_bytes, &Self::MEMTABLE_BYTES_RANGE, Bytes)?;
        within(
            "max_immutable_memtables",
            self.max_immutable_memtables,
            &Self::MAX_IMMUTABLE_MEMTABLES_RANGE,
            Count,
        )?;
        let history = &Self::MEMTABLE_HISTORY_BYTES_RANGE;
        within("memtable_history_bytes", self.memtable_history_bytes, history, Bytes)?;
        let merges = &Self::MAX_SUCCESSIVE_MERGES_RANGE;
        within("max_successive_merges", self.max_successive_merges, merges, Count)?;
        within("block_cache_bytes", self.block_cache_bytes, &Self::BLOCK_CACHE_BYTES_RANGE, Bytes)?;
        within("max_open_files", self.max_open_files, &Self::MAX_OPEN_FILES_RANGE, Count)?;
        within("max_batch_bytes", self.max_batch_bytes, &Self::MAX_BATCH_BYTES_RANGE, Bytes)?;
        let l0 = &Self::L0_TRIGGERS_RANGE;
        within("l0_compaction_trigger", self.l0_compaction_trigger, l0, Count)?;
        within("l0_slowdown_trigger", self.l0_slowdown_trigger, l0, Count)?;
        within("l0_stop_trigger", self.l0_stop_trigger, l0, Count)?;
        if self.l0_slowdown_trigger < self.l0_compaction_trigger
            || self.l0_stop_trigger < self.l0_slowdown_trigger
        {
            return Err(Error::InvalidArgument(
                "need l0_compaction_trigger <= l0_slowdown_trigger <= l0_stop_trigger".into(),
            ));
        }
        within("level_size_ratio", self.level_size_ratio, &Self::LEVEL_SIZE_RATIO_RANGE, Count)?;
        within("level_base_bytes", self.level_base_bytes, &Self::LEVEL_BASE_BYTES_RANGE, Bytes)?;
        within(
            "max_subcompactions",
            self.max_subcompactions,
            &Self::MAX_SUBCOMPACTIONS_RANGE,
            Count,
        )
    }
}

/// Options for one write.
///
/// The default inherits the database's settings: a write fsyncs the WAL exactly when the
/// database was opened with [`Options::sync_writes`]`(true)`. Override per write with the
/// builder:
///
/// ```
/// # fn main() -> bloomkv::Result<()> {
/// use bloomkv::{Db, Options, WriteBatch, WriteOptions};
/// let dir = tempfile::tempdir().unwrap();
/// let db = Db::open(dir.path(), Options::default().sync_writes(true))?;
/// let mut batch = WriteBatch::new();
/// batch.put("k", "v");
/// db.write(&batch, &WriteOptions::default())?; // fsyncs: inherits sync_writes(true)
/// db.write(&batch, &WriteOptions::new().sync(false))?; // this write only: no fsync
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WriteOptions {
    sync: Option<bool>,
}

impl WriteOptions {
    /// Options that inherit every setting from the database (the same as `default()`).
    pub fn new() -> Self {
        WriteOptions::default()
    }

    /// Whether to fsync the WAL before acknowledging, for this write only. With `true` the
    /// write survives a power loss when this returns; with `false` it survives a process
    /// crash (it has reached the operating system). Unset, the database's
    /// [`Options::sync_writes`] decides.
    pub fn sync(mut self, sync: bool) -> Self {
        self.sync = Some(sync);
        self
    }

    /// Whether a write with these options fsyncs, on a database opened with `opts`.
    pub(crate) fn resolve_sync(&self, opts: &Options) -> bool {
        self.sync.unwrap_or(opts.sync_writes)
    }
}
