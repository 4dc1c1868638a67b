//! [`KeyspaceOptions`]: how one keyspace's tables are built, read and compacted.

use std::ops::RangeInclusive;
use std::sync::Arc;

use crate::compaction_filter::{CompactionFilter, FilterSlot};
use crate::filter::FilterPolicy;
use crate::merge::{MergeOperator, MergeSlot};
use crate::prefix::PrefixExtractor;
use crate::table::Compression;
use crate::{Error, Result};

macro_rules! setter {
    ($(#[$doc:meta])* $name:ident: $ty:ty) => {
        $(#[$doc])*
        pub fn $name(mut self, value: $ty) -> Self {
            self.$name = value;
            self
        }
    };
}

/// How one keyspace's tables are built: the settings a keyspace may have of its own (see
/// `Db::keyspace`). Everything else — memtable size, compaction triggers, the block
/// cache, durability — belongs to the database and is shared by its keyspaces.
///
/// A keyspace's options are recorded in the manifest, so its background work uses them after
/// a reopen even before the keyspace is opened again. Those that only shape new tables —
/// filter policy, whole-key filtering, compression, block and table sizes, range filter —
/// may differ at each open: the new ones are recorded and apply to tables written from then
/// on (existing tables keep what they were built with, and compaction brings them along).
/// Those that
/// change what the keyspace's data means or how it is read — the
/// [`default_ttl`](KeyspaceOptions::default_ttl), the
/// [`prefix_extractor`](KeyspaceOptions::prefix_extractor), and the names of the
/// [`merge_operator`](KeyspaceOptions::merge_operator) and
/// [`compaction_filter`](KeyspaceOptions::compaction_filter) — must be the recorded ones, or
/// the open fails with [`Error::SettingMismatch`], unless
/// [`change_settings`](KeyspaceOptions::change_settings) says to record the new ones.
/// `Db::keyspace_options` gives the recorded options back, to restate only the
/// callbacks. The default keyspace takes its settings from `Options` at every open, and
/// `Db::open` checks them likewise.
///
/// ```
/// use bloomkv::{Compression, FilterPolicy, KeyspaceOptions};
/// let logs = KeyspaceOptions::new()
///     .filter_policy(FilterPolicy::None) // scanned, never looked up by key
///     .compression(Compression::Zstd { level: 3 })
///     .target_table_bytes(64 << 20);
/// # let _ = logs;
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct KeyspaceOptions {
    pub filter_policy: FilterPolicy,
    pub prefix_extractor: Option<PrefixExtractor>,
    pub whole_key_filtering: bool,
    pub compression: Compression,
    pub block_bytes: usize,
    pub target_table_bytes: u64,
    pub range_filter_bits_per_key: Option<f64>,
    /// Under a budgeted filter policy, the reads the budget is split for.
    pub read_mix: Option<ReadMix>,
    pub default_ttl: Option<std::time::Duration>,
    /// Held in memory only, as the merge operator: the manifest records the other fields.
    pub compaction_filter: FilterSlot,
    /// In memory only, as the filter it goes with.
    pub stop_on_compaction_filter_error: bool,
    pub merge_operator: MergeSlot,
    /// For the one open it is given to: never recorded, nor kept in a keyspace's options.
    pub change_settings: bool,
    /// Values of at least this many bytes go to blob files when their table is written.
    pub blob_threshold: Option<usize>,
    /// The fraction of the keyspace's blob files, oldest first, whose values compactions
    /// relocate.
    pub blob_gc_age_cutoff: f64,
    /// The garbage ratio of the files within the age cutoff at which they are compacted.
    pub blob_gc_force_threshold: f64,
    /// How the keyspace's tables are compacted.
    pub compaction_style: CompactionStyle,
}

/// What a keyspace's reads are, for a [`FilterPolicy::Budgeted`] (or
/// [`FilterPolicy::BudgetedRibbon`]) budget to split its memory between point filters and
/// range filters (see [`KeyspaceOptions::read_mix`]): the share of lookups that are short
/// range reads, and how wide those ranges are, in integers of the key bytes past a table's
/// common prefix (a range of 16 consecutive 8-byte big-endian integers is 16 wide).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReadMix {
    /// Of the reads that may find nothing (absent point keys, short ranges), the share that
    /// are range reads, 0 to 1.
    pub range_share: f64,
    /// The ranges' width, 1 to 2^37 ([`ReadMix::RANGE_WIDTH_RANGE`]).
    pub range_width: u64,
}

impl ReadMix {
    /// `range_width`: 1 to 2^37, the widest a range filter (at 40 bits per key) answers for.
    pub const RANGE_WIDTH_RANGE: RangeInclusive<u64> = 1..=1 << 37;

    /// A share `range_share` of range reads `range_width` wide.
    pub fn new(range_share: f64, range_width: u64) -> Self {
        ReadMix { range_share, range_width }
    }

    fn validate(&self) -> Result<()> {
        within_fraction("read_mix.range_share", self.range_share, &(0.0..=1.0))?;
        within("read_mix.range_width", self.range_width, &Self::RANGE_WIDTH_RANGE, Unit::Count)
    }
}

/// How a keyspace's tables are compacted (see DESIGN.md, "Compaction styles"). Recorded in
/// the manifest; it may change at any open, and the tree then takes the new shape as
/// compactions come by (see [`KeyspaceOptions::compaction_style`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub enum CompactionStyle {
    /// L0 for flushes, then sorted levels each `level_size_ratio` times the one above, every
    /// level one sorted run (the default): reads and space cost least, writes most.
    #[default]
    Leveled,
    /// No merging at all: flushes stay in L0, and the oldest tables are dropped, whole,
    /// once the keyspace's tables hold more than `max_bytes`, or once the newest of a
    /// table's entries is older than `max_age` (by the database's clock; a table's age is
    /// that of its writing). For caches and logs, where old data may go unasked: each byte
    /// is written once (WAL aside), and what is dropped is gone for snapshots too.
    Fifo {
        /// Bytes of tables the keyspace keeps at most (at least 1 KiB).
        max_bytes: u64,
        /// The age past which a table is dropped, `None` for no age bound (at least 1 ms).
        max_age: Option<std::time::Duration>,
    },
    /// Tiering at every level: each level gathers up to `level_size_ratio − 1` sorted runs,
    /// merged into one run of the next level when one more arrives; the last level likewise.
    /// Each entry is written about once per level (leveling writes it about ratio/2 times per
    /// level), while a point lookup meets up to `ratio − 1` runs per level (their filters
    /// answer it; see `FilterPolicy::Budgeted`) and obsolete versions wait longer to go.
    /// [`CompactionStyle::Fluid`] with K = Z = ratio − 1.
    Tiered,
    /// Dostoevsky's lazy leveling: tiering at every level but the last, leveling at the last
    /// (one run). Most of the data, and so most of the space and of a lookup's cost, is in
    /// the last level, kept as leveling keeps it; the smaller levels above are written once
    /// each. [`CompactionStyle::Fluid`] with K = ratio − 1, Z = 1.
    LazyLeveling,
    /// Dostoevsky's fluid LSM-tree: up to `k` runs at each level but the last, up to `z` at
    /// the last (each 1 to 64).
    Fluid {
        /// Runs a level above the last may hold.
        k: u32,
        /// Runs the last level may hold.
        z: u32,
    },
}

impl CompactionStyle {
    /// `CompactionStyle::Fifo`'s `max_bytes`: 1 KiB up.
    pub const FIFO_MAX_BYTES_RANGE: RangeInclusive<u64> = 1 << 10..=u64::MAX;

    /// `CompactionStyle::Fluid`'s `k` and `z`: 1 to 64.
    pub const FLUID_RUNS_RANGE: RangeInclusive<u32> = 1..=64;

    /// For the styles that gather sorted runs (tiered, lazy leveling, fluid), the runs a
    /// level above the last may hold and the runs the last may hold (K and Z), with
    /// `ratio` the size ratio between levels; `None` for leveled and FIFO.
    pub fn runs_per_level(&self, ratio: u64) -> Option<(usize, usize)> {
        let k = usize::try_from(ratio.saturating_sub(1)).unwrap_or(usize::MAX).max(1);
        match *self {
            CompactionStyle::Tiered => Some((k, k)),
            CompactionStyle::LazyLeveling => Some((k, 1)),
            CompactionStyle::Fluid { k, z } => Some((k as usize, z as usize)),
            CompactionStyle::Leveled | CompactionStyle::Fifo { .. } => None,
        }
    }

    /// Refuses bounds out of their ranges.
    pub fn validate(&self) -> Result<()> {
        if let CompactionStyle::Fluid { k, z } = *self {
            within("fluid k", k, &Self::FLUID_RUNS_RANGE, Unit::Count)?;
            within("fluid z", z, &Self::FLUID_RUNS_RANGE, Unit::Count)?;
        }
        if let CompactionStyle::Fifo { max_bytes, max_age } = *self {
            within("FIFO max_bytes", max_bytes, &Self::FIFO_MAX_BYTES_RANGE, Unit::Bytes)?;
            if let Some(age) = max_age {
                crate::clock::check_ttl("FIFO max_age", age)?;
            }
        }
        Ok(())
    }

    /// Whether this is [`CompactionStyle::Fifo`].
    pub fn is_fifo(&self) -> bool {
        matches!(self, CompactionStyle::Fifo { .. })
    }
}

impl Default for KeyspaceOptions {
    fn default() -> Self {
        KeyspaceOptions {
            filter_policy: FilterPolicy::default(),
            prefix_extractor: None,
            whole_key_filtering: true,
            compression: Compression::None,
            block_bytes: 4096,
            target_table_bytes: 16 << 20,
            range_filter_bits_per_key: None,
            read_mix: None,
            default_ttl: None,
            compaction_filter: FilterSlot::default(),
            stop_on_compaction_filter_error: false,
            merge_operator: MergeSlot::default(),
            change_settings: false,
            blob_threshold: None,
            blob_gc_age_cutoff: KeyspaceOptions::DEFAULT_BLOB_GC_AGE_CUTOFF,
            blob_gc_force_threshold: KeyspaceOptions::DEFAULT_BLOB_GC_FORCE_THRESHOLD,
            compaction_style: CompactionStyle::Leveled,
        }
    }
}

impl KeyspaceOptions {
    /// `block_bytes`: 64 bytes to 16 MiB.
    pub const BLOCK_BYTES_RANGE: RangeInclusive<usize> = 64..=16 << 20;
    /// `target_table_bytes`: 1 KiB to 4 GiB.
    pub const TARGET_TABLE_BYTES_RANGE: RangeInclusive<u64> = 1 << 10..=4 << 30;
    /// `range_filter_bits_per_key`: 4 to 40.
    pub const RANGE_FILTER_BITS_PER_KEY_RANGE: RangeInclusive<f64> =
        crate::range_filter::RangeFilter::BITS_PER_KEY_RANGE;
    /// `blob_threshold`: 1 byte to 16 MiB (`MAX_VALUE_BYTES`).
    pub const BLOB_THRESHOLD_RANGE: RangeInclusive<usize> = 1..=crate::MAX_VALUE_BYTES;

    /// Keeps values of at least `threshold` bytes in blob files, the table holding a small
    /// reference to each, so compactions move the reference and not the value
    /// (`docs/format/blob.md`). `None` (the default): every value stays in its table. 1 byte
    /// to 16 MiB ([`KeyspaceOptions::BLOB_THRESHOLD_RANGE`]). Values are separated when
    /// their table is written (a flush, or a compaction or ingest meeting a value still
    /// inline), so changing it at an open is safe: it applies to tables written from then
    /// on. A named keyspace's is recorded in the manifest with the garbage collection
    /// options (as its other options are): background work after a reopen follows it before
    /// the keyspace is opened again, and an open giving another value records that one.
    ///
    /// ```
    /// # fn main() -> bloomkv::Result<()> {
    /// use bloomkv::{Db, KeyspaceOptions, Options, Readable};
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = Db::open(dir.path(), Options::new())?;
    /// let images = db.keyspace("images", KeyspaceOptions::new().blob_threshold(Some(4096)))?;
    /// images.put("logo", vec![7u8; 64 << 10])?;
    /// db.flush()?; // the value now lives in a blob file
    /// assert_eq!(images.get("logo")?.map(|v| v.len()), Some(64 << 10));
    /// # Ok(()) }
    /// ```
    pub fn blob_threshold(mut self, threshold: Option<usize>) -> Self {
        self.blob_threshold = threshold;
        self
    }

    /// `blob_gc_age_cutoff` and `blob_gc_force_threshold`: 0 to 1.
    pub const BLOB_GC_FRACTION_RANGE: RangeInclusive<f64> = 0.0..=1.0;
    /// `blob_gc_age_cutoff` unless set (RocksDB's default).
    pub const DEFAULT_BLOB_GC_AGE_CUTOFF: f64 = 0.25;
    /// `blob_gc_force_threshold` unless set.
    pub const DEFAULT_BLOB_GC_FORCE_THRESHOLD: f64 = 0.5;

    /// Garbage collection of blob files (RocksDB's integrated BlobDB's scheme): of the
    /// keyspace's blob files holding garbage (values no table references any more), the
    /// oldest by file number, as many as `cutoff` of all its files, are *eligible*, and every
    /// compaction of the keyspace relocates the values its tables reference in them — reads
    /// each and writes it into the compaction's own new blob file (or back into the table, if
    /// it is now under the threshold) — so that such a file loses its references as
    /// compactions pass over its tables, and goes once the last one is gone. A file that has
    /// lost nothing is never copied (that would free nothing), nor counted among the oldest.
    /// Default 0.25 (of 8 files, the 2 oldest holding garbage); 0 turns collection off. 0 to 1 ([`KeyspaceOptions::BLOB_GC_FRACTION_RANGE`]). Nothing is
    /// relocated in a keyspace without a [`blob_threshold`](KeyspaceOptions::blob_threshold).
    ///
    /// Compactions come by as the tree needs them; where the eligible files' garbage (the
    /// bytes of their values no table references) reaches
    /// [`blob_gc_force_threshold`](KeyspaceOptions::blob_gc_force_threshold) of their bytes,
    /// the tables referencing the oldest of them are compacted for that alone. `Db::compact`
    /// relocates out of every file holding garbage, whatever its age (unless the cutoff is 0),
    /// so that every value the files left hold is live.
    ///
    /// ```
    /// # fn main() -> bloomkv::Result<()> {
    /// use bloomkv::{Db, KeyspaceOptions, Options};
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = Db::open(dir.path(), Options::new())?;
    /// // Relocate out of the oldest half, and as soon as a fifth of it is garbage.
    /// let gc = KeyspaceOptions::new().blob_threshold(Some(4096)).blob_gc_age_cutoff(0.5);
    /// let images = db.keyspace("images", gc.blob_gc_force_threshold(0.2))?;
    /// images.put("logo", vec![7u8; 64 << 10])?;
    /// # Ok(()) }
    /// ```
    pub fn blob_gc_age_cutoff(mut self, cutoff: f64) -> Self {
        self.blob_gc_age_cutoff = cutoff;
        self
    }

    /// The share of garbage in the blob files within the
    /// [`blob_gc_age_cutoff`](KeyspaceOptions::blob_gc_age_cutoff) at which the tables
    /// referencing the oldest of them are compacted even though the tree needs no compaction
    /// (RocksDB's `blob_garbage_collection_force_threshold`). Default 0.5; 1 compacts for
    /// garbage only once those files hold nothing else. 0 to 1
    /// ([`KeyspaceOptions::BLOB_GC_FRACTION_RANGE`]).
    pub fn blob_gc_force_threshold(mut self, threshold: f64) -> Self {
        self.blob_gc_force_threshold = threshold;
        self
    }

    /// The default options (those of a default `Options`), to chain setters on.
    pub fn new() -> Self {
        KeyspaceOptions::default()
    }

    setter!(
        /// The keyspace's filter (see `Options::filter_policy`). A
        /// [`FilterPolicy::Budgeted`] budget is split across this keyspace's tree alone.
        filter_policy: FilterPolicy);
    setter!(
        /// The keyspace's prefix extractor (see `Options::prefix_extractor`).
        prefix_extractor: Option<PrefixExtractor>);
    setter!(
        /// Whether the keyspace's filters hold whole keys (see
        /// `Options::whole_key_filtering`).
        whole_key_filtering: bool);
    setter!(
        /// Data block compression (see `Options::compression`).
        compression: Compression);
    setter!(
        /// Target uncompressed size of a data block (see `Options::block_bytes`): 64 bytes
        /// to 16 MiB, as there.
        block_bytes: usize);
    setter!(
        /// Size at which compaction output is split into a new table (see
        /// `Options::target_table_bytes`): 1 KiB to 4 GiB, as there.
        target_table_bytes: u64);

    /// Bits per key of a range filter in each new table (default `None`: no range filter),
    /// 4 to 40 ([`KeyspaceOptions::RANGE_FILTER_BITS_PER_KEY_RANGE`]). A short bounded scan
    /// (a `range`, bounded cursor or transaction read over a few keys' worth of key space)
    /// then skips each table whose filter says it holds nothing in the range, instead of
    /// reading a block of it. A range of `w` integers (the key bytes past a table's common
    /// prefix, as a number) is a false positive with probability at most `w / 2^(bits − 2)`:
    /// 16 bits per key give 1.6% at width 256. Ranges wider than `2^(⌊bits⌋ − 3)` are not
    /// asked. Recorded in the manifest, so background work keeps building filters after a
    /// reopen; it may change at any open (existing tables keep what they were built with).
    /// See DESIGN.md, "Range filters".
    ///
    /// ```
    /// # fn main() -> bloomkv::Result<()> {
    /// use bloomkv::{Db, KeyspaceOptions, Options, Readable};
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = Db::open(dir.path(), Options::new())?;
    /// let events = db.keyspace("events", KeyspaceOptions::new().range_filter_bits_per_key(Some(16.0)))?;
    /// events.put(7u64.to_be_bytes(), "seven")?;
    /// db.flush()?;
    /// // A scan of an empty window skips the table.
    /// assert_eq!(events.range(10u64.to_be_bytes()..20u64.to_be_bytes()).count(), 0);
    /// # Ok(()) }
    /// ```
    pub fn range_filter_bits_per_key(mut self, bits_per_key: Option<f64>) -> Self {
        self.range_filter_bits_per_key = bits_per_key;
        self
    }

    /// The reads a budgeted filter policy splits its memory for (default `None`: the budget
    /// is the point filters', and range filters, if any, are
    /// [`range_filter_bits_per_key`](KeyspaceOptions::range_filter_bits_per_key) on top).
    /// With a [`ReadMix`] under [`FilterPolicy::Budgeted`] or
    /// [`FilterPolicy::BudgetedRibbon`], the budget's bits per key pay for both kinds of
    /// filter: each new table gets a point filter and a range filter sized so that the
    /// expected blocks read in vain per read — absent keys asking point filters, empty
    /// ranges of `range_width` asking range filters, in the proportion `range_share` — are
    /// as few as the budget allows across the tree (DESIGN.md, "Range filters"). A table whose
    /// range filter's share could not answer for ranges that wide gets none. It requires a
    /// budgeted policy and no `range_filter_bits_per_key` (which it replaces). Recorded in the
    /// manifest; it may change at any open, and applies to tables written from then on.
    ///
    /// ```
    /// # fn main() -> bloomkv::Result<()> {
    /// use bloomkv::{Db, FilterPolicy, KeyspaceOptions, Options, ReadMix, Readable};
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = Db::open(dir.path(), Options::new())?;
    /// // 26 bits per key in all; a third of the reads are windows of 64 timestamps.
    /// let opts = KeyspaceOptions::new()
    ///     .filter_policy(FilterPolicy::Budgeted { bits_per_key: 26.0 })
    ///     .read_mix(Some(ReadMix::new(1.0 / 3.0, 64)));
    /// let events = db.keyspace("events", opts)?;
    /// events.put(7u64.to_be_bytes(), "seven")?;
    /// events.put(30u64.to_be_bytes(), "thirty")?;
    /// db.flush()?;
    /// // The table got a range filter out of the budget: the empty window skips it.
    /// assert_eq!(events.range(10u64.to_be_bytes()..20u64.to_be_bytes()).count(), 0);
    /// assert_eq!(db.stats().range_filter_skips, 1);
    /// # Ok(()) }
    /// ```
    pub fn read_mix(mut self, mix: Option<ReadMix>) -> Self {
        self.read_mix = mix;
        self
    }

    /// How the keyspace's tables are compacted (default [`CompactionStyle::Leveled`]).
    /// Recorded in the manifest, so background work follows it after a reopen; it may
    /// change at any open, the new style is recorded and the tree converges to its shape as
    /// compactions come by: from FIFO, the tables FIFO kept in L0 are compacted down as
    /// leveled compaction would any L0; to FIFO, the sorted levels' tables are kept until the
    /// bound drops them, the deepest level first (nothing older lies beneath them, so no
    /// dropped version uncovers an older one), as RocksDB's FIFO treats a leveled tree.
    /// See DESIGN.md, "Compaction styles".
    ///
    /// ```
    /// # fn main() -> bloomkv::Result<()> {
    /// use std::time::Duration;
    /// use bloomkv::{CompactionStyle, Db, KeyspaceOptions, Options};
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = Db::open(dir.path(), Options::new())?;
    /// // A log keyspace: at most 64 MiB of tables, none kept past a day.
    /// let fifo = CompactionStyle::Fifo {
    ///     max_bytes: 64 << 20,
    ///     max_age: Some(Duration::from_secs(86400)),
    /// };
    /// let logs = db.keyspace("logs", KeyspaceOptions::new().compaction_style(fifo))?;
    /// logs.put("2026-11-29T10:00:00 started", "")?;
    /// # Ok(()) }
    /// ```
    pub fn compaction_style(mut self, mut style: CompactionStyle) -> Self {
        // The manifest records whole milliseconds, as for `default_ttl`.
        if let CompactionStyle::Fifo { max_age: Some(age), .. } = &mut style {
            *age = std::time::Duration::from_millis(crate::clock::ttl_millis(*age));
        }
        self.compaction_style = style;
        self
    }

    /// A time to live given to every plain put of the keyspace (`put`, `WriteBatch::put_in`):
    /// each then expires that long after it is written, as with
    /// `Keyspace::put_with_ttl`. `None` (the default): plain puts never expire.
    /// Recorded in the manifest; a later open must give the same one, or set
    /// [`change_settings`](KeyspaceOptions::change_settings) (the new one applies to later
    /// puts only).
    ///
    /// Rounded *up* to whole milliseconds, as the `ttl` of
    /// `Db::put_with_ttl`: any non-zero time to live keeps a put readable until the
    /// clock has passed at least one more millisecond. `Some(Duration::ZERO)` is refused
    /// (with [`Error::InvalidArgument`]) when the keyspace is opened.
    ///
    /// ```
    /// # fn main() -> bloomkv::Result<()> {
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use bloomkv::{Db, KeyspaceOptions, ManualClock, Options, Readable};
    ///
    /// let clock = Arc::new(ManualClock::new(0));
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = Db::open(dir.path(), Options::new().clock(clock.clone()))?;
    /// let opts = KeyspaceOptions::new().default_ttl(Some(Duration::from_secs(3600)));
    /// let sessions = db.keyspace("sessions", opts)?;
    /// sessions.put("s1", "user 7")?;
    /// clock.advance(Duration::from_secs(3600));
    /// assert_eq!(sessions.get("s1")?, None);
    /// # Ok(()) }
    /// ```
    pub fn default_ttl(mut self, ttl: Option<std::time::Duration>) -> Self {
        self.default_ttl =
            ttl.map(|t| std::time::Duration::from_millis(crate::clock::ttl_millis(t)));
        self
    }

    /// The keyspace's compaction filter (see [`crate::compaction_filter::CompactionFilter`]). The manifest
    /// records its [name](crate::compaction_filter::CompactionFilter::name) only: pass it each time the keyspace
    /// is opened (an open without it fails, see
    /// [`change_settings`](KeyspaceOptions::change_settings)).
    ///
    /// ```
    /// # fn main() -> bloomkv::Result<()> {
    /// use std::sync::Arc;
    /// use bloomkv::{CompactionFilter, Db, Decision, KeyspaceOptions, Options, Readable};
    ///
    /// /// Keeps only the first 4 bytes of each value.
    /// struct Truncate;
    /// impl CompactionFilter for Truncate {
    ///     fn filter(&self, _level: usize, _key: &[u8], value: &[u8]) -> Decision {
    ///         match value.get(..4) {
    ///             Some(head) if value.len() > 4 => Decision::ChangeValue(head.to_vec()),
    ///             _ => Decision::Keep,
    ///         }
    ///     }
    /// }
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = Db::open(dir.path(), Options::new())?;
    /// let logs = db.keyspace("logs", KeyspaceOptions::new().compaction_filter(Arc::new(Truncate)))?;
    /// logs.put("k", "abcdefgh")?;
    /// db.compact()?;
    /// assert_eq!(logs.get("k")?.as_deref(), Some(&b"abcd"[..]));
    /// # Ok(()) }
    /// ```
    pub fn compaction_filter(mut self, filter: Arc<dyn CompactionFilter>) -> Self {
        self.compaction_filter = FilterSlot(Some(filter));
        self
    }

    /// Whether a failure of the keyspace's compaction filter stops the database (see
    /// `Options::stop_on_compaction_filter_error`; default `false`). Like the filter, it is
    /// not recorded in the manifest: pass it each time the keyspace is opened.
    pub fn stop_on_compaction_filter_error(mut self, stop: bool) -> Self {
        self.stop_on_compaction_filter_error = stop;
        self
    }

    /// The keyspace's merge operator (see [`crate::merge::MergeOperator`]), which
    /// `Keyspace::merge` needs. The manifest records its
    /// [name](crate::merge::MergeOperator::name) only: give it again to `Db::keyspace`
    /// after every open (an open without it fails, see
    /// [`change_settings`](KeyspaceOptions::change_settings)).
    ///
    /// ```
    /// # fn main() -> bloomkv::Result<()> {
    /// use std::sync::Arc;
    /// use bloomkv::{Db, KeyspaceOptions, Options, Readable, U64Add};
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = Db::open(dir.path(), Options::new())?;
    /// let hits = db.keyspace("hits", KeyspaceOptions::new().merge_operator(Arc::new(U64Add)))?;
    /// hits.merge("/index.html", U64Add::operand(1))?;
    /// hits.merge("/index.html", U64Add::operand(1))?;
    /// assert_eq!(U64Add::decode(&hits.get("/index.html")?.unwrap()), Some(2));
    /// # Ok(()) }
    /// ```
    pub fn merge_operator(mut self, operator: Arc<dyn MergeOperator>) -> Self {
        self.merge_operator = MergeSlot(Some(operator));
        self
    }

    /// Whether this open may record settings other than those the keyspace holds (default
    /// `false`). The checked settings are the
    /// [`default_ttl`](KeyspaceOptions::default_ttl), the
    /// [`prefix_extractor`](KeyspaceOptions::prefix_extractor) and the names of the
    /// [`merge_operator`](KeyspaceOptions::merge_operator) and
    /// [`compaction_filter`](KeyspaceOptions::compaction_filter): opening an existing
    /// keyspace with others fails with [`Error::SettingMismatch`], naming the setting, the
    /// recorded value and the given one, since forgetting one (the default `new()`
    /// options) would silently change what stored data means. With `true` the given ones
    /// are recorded, and later opens must give them. It applies to that one open and is
    /// never recorded.
    ///
    /// A read-only database records nothing, so it checks only what would make its reads
    /// wrong: a merge operator whose name differs from the recorded one. Without the
    /// recorded operator, a read that meets operands fails with
    /// [`Error::MergeOperatorMissing`].
    ///
    /// ```
    /// # fn main() -> bloomkv::Result<()> {
    /// use std::time::Duration;
    /// use bloomkv::{Db, Error, KeyspaceOptions, Options};
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = Db::open(dir.path(), Options::new())?;
    /// let hour = KeyspaceOptions::new().default_ttl(Some(Duration::from_secs(3600)));
    /// db.keyspace("sessions", hour.clone())?;
    /// let r = db.keyspace("sessions", KeyspaceOptions::new());
    /// assert!(matches!(r, Err(Error::SettingMismatch { setting: "default_ttl", .. })));
    /// // Meant: record the new time to live.
    /// let day = KeyspaceOptions::new().default_ttl(Some(Duration::from_secs(86400)));
    /// db.keyspace("sessions", day.clone().change_settings(true))?;
    /// db.keyspace("sessions", day)?;
    /// # Ok(()) }
    /// ```
    pub fn change_settings(mut self, change: bool) -> Self {
        self.change_settings = change;
        self
    }

    /// The size at which compaction output on `level` is split into tables:
    /// `target_table_bytes` on L0 and L1, twice that on L2, five times on L3 and below.
    ///
    /// ```
    /// use bloomkv::KeyspaceOptions;
    /// let opts = KeyspaceOptions::new().target_table_bytes(16 << 20);
    /// assert_eq!(opts.table_bytes_at(1), 16 << 20);
    /// assert_eq!(opts.table_bytes_at(2), 32 << 20);
    /// assert_eq!(opts.table_bytes_at(3), 80 << 20);
    /// assert_eq!(opts.table_bytes_at(6), 80 << 20);
    /// ```
    ///
    /// Why: the deep levels hold nearly all the data, and each compaction there ends its
    /// last table (each part's) short, so at one size everywhere a 20M-key tree of 16 MiB
    /// tables held 183 of them, 12 MiB on average; growing with the level (RocksDB's
    /// `target_file_size_multiplier`) keeps L1 — where L0 compactions land and the input
    /// of each L1 compaction is one table — fine-grained. At four times on L3, its tables
    /// still averaged 0.44 of their target (one L2 table and the three or so of L3 it
    /// overlaps make one full table and a short one), and the tree held 106; five times
    /// gives the last level of a 20M-key tree about 60. L2, where most of a fill's bytes are
    /// written, keeps its size: larger tables there would widen every L1 → L2 compaction's
    /// overlap. Only where tables are written: a database's existing tables keep their size
    /// until compactions rewrite them, so an old database takes this up at any open, with
    /// nothing recorded.
    pub fn table_bytes_at(&self, level: usize) -> u64 {
        let times = match level {
            0 | 1 => 1,
            2 => 2,
            _ => 5,
        };
        self.target_table_bytes.saturating_mul(times)
    }

    /// The settings one by one, for the tool's reports: (filter policy, compression, block
    /// bytes, target table bytes). Not part of the stable API.
    #[doc(hidden)]
    pub fn parts(&self) -> (FilterPolicy, Compression, usize, u64) {
        (self.filter_policy, self.compression, self.block_bytes, self.target_table_bytes)
    }

    /// The prefix extractor and whether filters hold whole keys. Not part of the stable API.
    #[doc(hidden)]
    pub fn prefix_parts(&self) -> (Option<PrefixExtractor>, bool) {
        (self.prefix_extractor, self.whole_key_filtering)
    }

    /// The default time to live of plain puts. Not part of the stable API.
    #[doc(hidden)]
    pub fn ttl_part(&self) -> Option<std::time::Duration> {
        self.default_ttl
    }

    /// Whether the tables' filters hold whole keys: always without an extractor.
    pub fn filters_whole_keys(&self) -> bool {
        self.whole_key_filtering || self.prefix_extractor.is_none()
    }

    pub fn validate(&self) -> Result<()> {
        self.filter_policy.validate()?;
        self.compaction_style.validate()?;
        if let Some(e) = self.prefix_extractor {
            e.validate()?;
        }
        let bad = |m: &str| Err(Error::InvalidArgument(m.to_string()));
        within("block_bytes", self.block_bytes, &Self::BLOCK_BYTES_RANGE, Unit::Bytes)?;
        let tables = &Self::TARGET_TABLE_BYTES_RANGE;
        within("target_table_bytes", self.target_table_bytes, tables, Unit::Bytes)?;
        if let Some(ttl) = self.default_ttl {
            crate::clock::check_ttl("default_ttl", ttl)?;
        }
        if let Some(t) = self.blob_threshold {
            within("blob_threshold", t, &Self::BLOB_THRESHOLD_RANGE, Unit::Bytes)?;
        }
        if let Some(b) = self.range_filter_bits_per_key {
            if !Self::RANGE_FILTER_BITS_PER_KEY_RANGE.contains(&b) {
                return bad("range_filter_bits_per_key must be between 4 and 40");
            }
        }
        if let Some(mix) = self.read_mix {
            mix.validate()?;
            if !matches!(
                self.filter_policy,
                FilterPolicy::Budgeted { .. } | FilterPolicy::BudgetedRibbon { .. }
            ) {
                return bad("read_mix splits a budgeted filter policy's memory: it needs FilterPolicy::Budgeted or BudgetedRibbon");
            }
            if self.range_filter_bits_per_key.is_some() {
                return bad("read_mix sizes the range filters from the budget: leave range_filter_bits_per_key unset");
            }
        }
        let fractions = &Self::BLOB_GC_FRACTION_RANGE;
        within_fraction("blob_gc_age_cutoff", self.blob_gc_age_cutoff, fractions)?;
        within_fraction("blob_gc_force_threshold", self.blob_gc_force_threshold, fractions)?;
        if let Compression::Zstd { level } = self.compression {
            if !(-7..=22).contains(&level) {
                return bad("zstd level must be in -7..=22");
            }
        }
        Ok(())
    }
}

/// Refuses the fraction `value` of the option `name` unless it is in `range` (NaN never is),
/// naming both.
pub fn within_fraction(name: &str, value: f64, range: &RangeInclusive<f64>) -> Result<()> {
    if range.contains(&value) {
        return Ok(());
    }
    Err(Error::InvalidArgument(format!(
        "{name} must be between {} and {}, got {value}",
        range.start(),
        range.end()
    )))
}

/// How a refusal shows an option's values.
#[derive(Clone, Copy)]
pub enum Unit {
    /// In bytes, with the largest binary unit that divides them.
    Bytes,
    /// As a plain number.
    Count,
    /// In seconds.
    Seconds,
}

impl Unit {
    fn show(self, n: u64) -> String {
        if let Unit::Bytes = self {
            for (shift, unit) in [(50, "PiB"), (40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
                if n >= 1 << shift && n % (1 << shift) == 0 {
                    return format!("{} {unit}", n >> shift);
                }
            }
            return format!("{n} byte{}", if n == 1 { "" } else { "s" });
        }
        if let Unit::Seconds = self {
            return format!("{n} s");
        }
        n.to_string()
    }
}

/// Refuses `value` of the option `name` unless it is in `range`, naming both.
pub fn within<T>(name: &str, value: T, range: &RangeInclusive<T>, unit: Unit) -> Result<()>
where
    T: Copy + PartialOrd + TryInto<u64>,
{
    if range.contains(&value) {
        return Ok(());
    }
    let show = |v: T| unit.show(v.try_into().unwrap_or(u64::MAX));
    Err(Error::InvalidArgument(format!(
        "{name} must be between {} and {}, got {}",
        show(*range.start()),
        show(*range.end()),
        show(value)
    )))
}
