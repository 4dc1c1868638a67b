//! Looking inside a database: per-table facts ([`TableInfo`]), the filters run by run as the
//! memory budget sees them ([`FilterRun`]), and the read path of one key made visible
//! ([`TraceStep`]). Used by the `bloomkv` tool and the bench harness.

use std::path::PathBuf;

use std::collections::HashMap;
use std::sync::Arc;

use super::{Db, Keyspace, Tree};
use crate::clock::Clock;
use crate::filter::budget::{self, CurveKind};
use crate::filter::{ribbon, FilterKind};
use crate::key::{SeqNo, ValueKind};
use crate::version::set::TableFile;
use crate::Result;
use bloomkv_tree::filter_budget;
use bloomkv_tree::read::search::{self as read, Answer, Found, ReadObserver};
use bloomkv_tree::read::sources::{self as scan, TableChoice};
use bloomkv_tree::read::ReadTally;

/// Facts about one live table.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TableInfo {
    /// The keyspace whose table it is.
    pub keyspace: String,
    /// Level the table lives on.
    pub level: usize,
    /// File number.
    pub number: u64,
    /// Path of the file.
    pub path: PathBuf,
    /// Size of the file in bytes.
    pub file_size: u64,
    /// Smallest user key.
    pub smallest_key: Vec<u8>,
    /// Largest user key.
    pub largest_key: Vec<u8>,
    /// Smallest sequence number.
    pub smallest_seq: SeqNo,
    /// Largest sequence number.
    pub largest_seq: SeqNo,
    /// Entries (versions), tombstones included.
    pub entries: u64,
    /// Tombstones.
    pub tombstones: u64,
    /// Range tombstones (pieces, disjoint; see [`crate::Db::delete_range`]).
    pub range_tombstones: u64,
    /// Data blocks.
    pub data_blocks: u64,
    /// The filter's kind.
    pub filter_kind: FilterKind,
    /// Bits of filter per key actually used.
    pub filter_bits_per_key: f64,
    /// Bits of filter per key asked for when the table was written (under
    /// [`crate::FilterPolicy::Budgeted`], its run's share of the budget then); 0 without a
    /// filter.
    pub filter_requested_bits_per_key: f64,
    /// Probes per key.
    pub filter_probes: u32,
    /// RAM held by the filter.
    pub filter_memory_bytes: usize,
    /// RAM held by the index.
    pub index_memory_bytes: usize,
    /// The filter's expected false-positive rate at its fill (1.0 without a filter), for
    /// keys and prefixes alike: they share its bits.
    pub expected_fpr: f64,
    /// The prefix extractor whose prefixes the filter holds ([`crate::PrefixExtractor::name`]),
    /// if it holds any.
    pub prefix_extractor: Option<String>,
    /// Distinct prefixes in the filter.
    pub prefixes: u64,
    /// Whether the filter holds whole keys (point lookups use it only then).
    pub filter_whole_keys: bool,
    /// The range filter's bits per key as asked when the table was written; `None`: the
    /// table has no range filter ([`crate::KeyspaceOptions::range_filter_bits_per_key`]).
    pub range_filter_requested_bits_per_key: Option<f64>,
    /// Bits of the range filter's codes per key it holds (0 without one).
    pub range_filter_bits_per_key: f64,
    /// Distinct mapped keys the range filter holds (0 without one).
    pub range_filter_keys: u64,
    /// Bytes of the range-filter block on disk, trailer included (0 without one).
    pub range_filter_bytes: u64,
    /// RAM held by the range filter (0 without one).
    pub range_filter_memory_bytes: usize,
}

/// One sorted run of the tree as an absent-key lookup meets it — an L0 table, or a whole
/// deeper level, of which a lookup consults one table — with the filter memory it holds and
/// what [`crate::FilterPolicy::Budgeted`] would give it at the same total memory.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct FilterRun {
    /// The run's level.
    pub level: usize,
    /// For an L0 run, its table's file number.
    pub table: Option<u64>,
    /// Tables in the run.
    pub tables: usize,
    /// Entries in the run's tables (what the filter budget counts as keys).
    pub keys: u64,
    /// Bits in the run's filters.
    pub filter_bits: u64,
    /// The chance that a lookup for an absent key in the run's range reads one of its data
    /// blocks: its filters' expected false-positive rates, weighted by their tables' shares of
    /// the run's keys (1.0 for tables without a filter; 0 for a run without keys, such as a
    /// table holding only range tombstones, which has no data block to read).
    pub expected_fpr: f64,
    /// Bits per key this run would get if the tree's filter memory as it is now were split
    /// across the runs by [`budget::allocate_for`], each on the curve of its filters' kind
    /// (Ribbon if any of its tables has a Ribbon filter, blocked Bloom otherwise). With a
    /// prefix extractor and whole keys, the split is over filter entries (keys and prefixes)
    /// as the engine's budget makes it, and this is that share per key.
    pub budgeted_bits_per_key: f64,
    /// That kind's rate at the run's budgeted bits per filter entry ([`budget::fpr`], or
    /// `2^-r` for Ribbon): at `budgeted_bits_per_key` without prefixes.
    pub budgeted_fpr: f64,
}

impl FilterRun {
    /// Filter bits per key the run holds now (0 without keys).
    pub fn bits_per_key(&self) -> f64 {
        if self.keys == 0 {
            0.0
        } else {
            self.filter_bits as f64 / self.keys as f64
        }
    }
}

/// Where a traced lookup looked for its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceSource {
    /// The active memtable.
    Memtable,
    /// An immutable memtable waiting for flush (0 = newest).
    ImmutableMemtable(usize),
    /// A table.
    Table {
        /// Its level.
        level: usize,
        /// Its file number.
        number: u64,
    },
}

/// What one source of the read path says about a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Presence {
    /// A value is stored for the key (at or below the read's sequence number).
    Value,
    /// A tombstone is stored for the key.
    Tombstone,
    /// Nothing for the key.
    Absent,
    /// A value is stored, but a newer range tombstone visible to the read covers it: a
    /// `get` stopping here answers "absent".
    RangeDeleted,
    /// An expiring value is stored, and the clock has reached its expiry: a `get` stopping
    /// here answers "absent".
    Expired,
    /// A merge operand is stored: a `get` stopping here combines it with what lies
    /// beneath.
    MergeOperand,
}

/// One step of the read path for one key, from [`Db::trace`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceStep {
    /// Where the key was looked for.
    pub source: TraceSource,
    /// For tables: whether the key lies in the table's key range (memtables: always true).
    pub in_range: bool,
    /// For tables in range: the filter's answer ("maybe" = true); `None` when not asked.
    pub filter_maybe: Option<bool>,
    /// What the source really holds, checked without the filter.
    pub actual: Presence,
    /// True for the step where a normal `get` stops (the first value or tombstone found).
    pub decides: bool,
}

/// What a prefix scan does with each source, from [`Db::trace_prefix`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScanTrace {
    /// The keyspace's prefix extractor ([`crate::PrefixExtractor::name`]), if it has one.
    pub extractor: Option<String>,
    /// The prefix the scan asks the tables' filters about: the extracted prefix every key of
    /// the scan has, or `None` when there is none (no extractor, or a prefix shorter than the
    /// extractor's), and then no table is skipped by its filter.
    pub filter_prefix: Option<Vec<u8>>,
    /// Every memtable (newest first), then every table in read order.
    pub steps: Vec<ScanStep>,
}

/// One source of a traced prefix scan.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScanStep {
    /// The memtable or table.
    pub source: TraceSource,
    /// For tables: whether the table's key range meets the scan's (memtables: always).
    pub in_range: bool,
    /// For tables in range built with the keyspace's extractor: the prefix filter's answer
    /// ("maybe" = true); `None` when not asked.
    pub prefix_filter_maybe: Option<bool>,
    /// Whether the scan reads the source.
    pub read: bool,
    /// Whether the source holds any entry (a version of any kind) with the prefix, found by
    /// looking, whatever the filter said: a "maybe" from a source that holds none is a false
    /// positive; a "no" from one that holds some would be a false negative.
    pub holds: bool,
}

/// A compaction the picker chose (`bloomkv_tree::compact::picker`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PickedCompaction {
    /// The keyspace whose tables these are.
    pub keyspace: String,
    /// Why it runs.
    pub reason: crate::events::CompactionReason,
    /// The level compacted.
    pub level: usize,
    /// The level written: `level + 1`, or `level` for an L0 merge or an in-place rewrite.
    pub out_level: usize,
    /// File numbers of the tables of `level` compacted.
    pub inputs: Vec<u64>,
    /// File numbers of the tables of `out_level` they overlap, rewritten with them.
    pub overlapped: Vec<u64>,
}

impl PickedCompaction {
    pub(crate) fn of(c: &super::compaction::Compaction) -> Self {
        let numbers = |ts: &[Arc<TableFile>]| ts.iter().map(|t| t.meta.number).collect();
        PickedCompaction {
            keyspace: c.tree.name.to_string(),
            reason: c.reason,
            level: c.level,
            out_level: c.out_level,
            inputs: numbers(&c.inputs),
            overlapped: numbers(&c.next_inputs),
        }
    }
}

impl Db {
    /// The compaction the background thread would choose now, if any is due.
    pub fn picked_compaction(&self) -> Option<PickedCompaction> {
        let inner = &self.inner;
        super::compaction::pick(inner, &inner.load_state()).map(|c| PickedCompaction::of(&c))
    }

    /// Runs the compaction [`Db::picked_compaction`] chooses, on this thread, and returns
    /// it; `None` if none is due (or a manual compaction or an ingest holds compactions
    /// off). One step of what the background thread does, for tests that must see each.
    pub fn compact_step(&self) -> Result<Option<PickedCompaction>> {
        super::compaction::step(&self.inner)
    }

    /// [`Keyspace::trace_prefix`] of the default keyspace.
    pub fn trace_prefix(&self, prefix: impl AsRef<[u8]>) -> Result<ScanTrace> {
        trace_prefix(self.inner.load_state().default_tree(), prefix.as_ref())
    }

    /// Facts about every live table of every keyspace, keyspace by keyspace (the default
    /// first), level by level (L0 newest first).
    pub fn tables(&self) -> Vec<TableInfo> {
        let state = self.inner.load_state();
        state.trees.iter().flat_map(|tree| tables(tree)).collect()
    }

    /// Waits until the files of tables let go so far have been removed. They are removed on
    /// a thread of their own (`fs/deleter.rs`), so right after the last reader of an obsolete
    /// table lets go, a listing of the directory may still show its file.
    pub fn wait_for_file_removals(&self) {
        self.inner.caches.deleter.wait_idle();
    }

    /// Waits until no background job (flush or compaction) is running. Jobs may start again
    /// at once, except on a database stopped by an error, where none starts: after this,
    /// every file a job wrote is named by the manifest, removed, or left for a resume
    /// ([`Db::resume`]) to settle.
    pub fn wait_for_background_jobs(&self) {
        let inner = &self.inner;
        let mut bg = super::lock_mutex(&inner.bg);
        while bg.running > 0 {
            bg = inner.bg_done_cv.wait(bg).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// [`Keyspace::filter_runs`] of the default keyspace.
    pub fn filter_runs(&self) -> Vec<FilterRun> {
        filter_runs(self.inner.load_state().default_tree())
    }

    /// [`Keyspace::trace`] of the default keyspace.
    pub fn trace(&self, key: impl AsRef<[u8]>) -> Result<Vec<TraceStep>> {
        let view = self.inner.read_view();
        trace(view.state().default_tree(), key.as_ref(), view.seq(), &*self.inner.clock)
    }
}

impl Db {
    /// [`Keyspace::memtable_versions`] of the default keyspace.
    pub fn memtable_versions(&self, key: impl AsRef<[u8]>) -> Result<Vec<(SeqNo, ValueKind)>> {
        memtable_versions(self.inner.load_state().default_tree(), key.as_ref())
    }
}

/// The versions of `key` in `tree`'s active memtable, newest first.
fn memtable_versions(tree: &Tree, key: &[u8]) -> Result<Vec<(SeqNo, ValueKind)>> {
    use crate::iter::InternalIterator;
    use crate::key::{internal_key, parse_internal_key, KIND_FOR_SEEK, MAX_SEQNO};
    let mut it = tree.mem.table.iter();
    it.seek(&internal_key(key, MAX_SEQNO, KIND_FOR_SEEK))?;
    let mut versions = Vec::new();
    while let Some(p) = it.valid().then(|| parse_internal_key(it.key())).flatten() {
        if p.user_key != key {
            break;
        }
        versions.push((p.seq, p.kind));
        it.next()?;
    }
    Ok(versions)
}

impl Keyspace {
    /// The versions of `key` the active memtable holds (sequence number and kind), newest
    /// first: what a test of the memtable's shape counts.
    pub fn memtable_versions(&self, key: impl AsRef<[u8]>) -> Result<Vec<(SeqNo, ValueKind)>> {
        let state = self.inner.load_state();
        memtable_versions(state.tree(self.id).ok_or_else(|| self.dropped())?, key.as_ref())
    }

    /// Facts about every live table of this keyspace, level by level (L0 newest first).
    pub fn tables(&self) -> Result<Vec<TableInfo>> {
        let state = self.inner.load_state();
        Ok(tables(state.tree(self.id).ok_or_else(|| self.dropped())?))
    }

    /// The runs an absent-key lookup consults (each L0 table, newest first, then each
    /// non-empty deeper level), with their filters as they are and as the memory budget
    /// would split the same total memory ([`FilterRun`]). `Σ expected_fpr` is the expected
    /// number of data blocks an absent key whose range every run covers costs.
    pub fn filter_runs(&self) -> Result<Vec<FilterRun>> {
        let state = self.inner.load_state();
        Ok(filter_runs(state.tree(self.id).ok_or_else(|| self.dropped())?))
    }

    /// Walks the read path for `key` and reports, for every memtable and every table in read
    /// order, whether the walk consulted it, what its filter said and what it really holds.
    /// The steps are observed on the walk `get` makes (`db::read`), told not to stop at the
    /// first answer, so filter false positives (and the absence of false negatives) can be
    /// seen everywhere; tables the walk did not consult are listed with `in_range: false`.
    pub fn trace(&self, key: impl AsRef<[u8]>) -> Result<Vec<TraceStep>> {
        let view = self.inner.read_view();
        let tree = view.state().tree(self.id).ok_or_else(|| self.dropped())?;
        trace(tree, key.as_ref(), view.seq(), &*self.inner.clock)
    }

    /// Shows what a scan of the keys starting with `prefix` does with every memtable and
    /// table: whether the table's key range meets it, what the table's prefix filter says,
    /// whether the scan reads it, and whether it really holds an entry with the prefix. The
    /// choice is the one [`Keyspace::prefix`] makes (`db::scan`), not a second
    /// implementation of it.
    pub fn trace_prefix(&self, prefix: impl AsRef<[u8]>) -> Result<ScanTrace> {
        let state = self.inner.load_state();
        trace_prefix(state.tree(self.id).ok_or_else(|| self.dropped())?, prefix.as_ref())
    }
}

fn trace_prefix(tree: &Tree, prefix: &[u8]) -> Result<ScanTrace> {
    use crate::iter::InternalIterator;
    use crate::key::{internal_key, user_key, KIND_FOR_SEEK, MAX_SEQNO};
    let (lower, upper) = crate::key_range::prefix_bounds(prefix);
    let (lo, hi) = (scan::as_slices(&lower), scan::as_slices(&upper));
    let target = internal_key(prefix, MAX_SEQNO, KIND_FOR_SEEK);
    let holds = |it: &mut dyn InternalIterator| -> Result<bool> {
        it.seek(&target)?;
        Ok(it.valid() && user_key(it.key()).starts_with(prefix))
    };
    let mut steps = Vec::new();
    for (i, m) in tree.mems().enumerate() {
        let source =
            if i == 0 { TraceSource::Memtable } else { TraceSource::ImmutableMemtable(i - 1) };
        let holds = holds(&mut m.table.iter())?;
        steps.push(ScanStep {
            source,
            in_range: true,
            prefix_filter_maybe: None,
            read: true,
            holds,
        });
    }
    let mut chosen = Vec::new();
    scan::choose_tables(tree, lo, hi, |level, t, choice| chosen.push((level, t.clone(), choice)));
    for (level, t) in tree.version.all_tables() {
        let source = TraceSource::Table { level, number: t.meta.number };
        let choice = chosen.iter().find(|(_, c, _)| c.meta.number == t.meta.number).map(|c| c.2);
        let (in_range, prefix_filter_maybe, read) = match choice {
            None | Some(TableChoice::OutOfRange) => (false, None, false),
            Some(TableChoice::PrefixSkipped) => (true, Some(false), false),
            Some(TableChoice::RangeSkipped) => (true, None, false),
            Some(TableChoice::Read { prefix_checked, .. }) => {
                (true, prefix_checked.then_some(true), true)
            }
        };
        let holds = holds(&mut t.table.iter())?;
        steps.push(ScanStep { source, in_range, prefix_filter_maybe, read, holds });
    }
    Ok(ScanTrace {
        extractor: tree.opts.prefix_extractor.map(|e| e.name()),
        filter_prefix: scan::scan_prefix(tree, lo, hi).map(|(_, p)| p.to_vec()),
        steps,
    })
}

fn tables(tree: &Tree) -> Vec<TableInfo> {
    tree.version
        .all_tables()
        .map(|(level, t)| {
            let p = t.table.properties();
            let f = t.table.filter();
            let rf = t.table.range_filter();
            TableInfo {
                keyspace: tree.name.to_string(),
                level,
                number: t.meta.number,
                path: t.path().to_path_buf(),
                file_size: t.meta.file_size,
                smallest_key: t.smallest_user_key().to_vec(),
                largest_key: t.largest_user_key().to_vec(),
                smallest_seq: t.meta.smallest_seq,
                largest_seq: t.meta.largest_seq,
                entries: p.num_entries,
                tombstones: p.num_tombstones,
                range_tombstones: p.num_range_deletions,
                data_blocks: p.num_data_blocks,
                filter_kind: f.kind(),
                filter_bits_per_key: f.bits_per_key(),
                filter_requested_bits_per_key: f.requested_bits_per_key(),
                filter_probes: f.num_probes(),
                filter_memory_bytes: t.table.filter_memory_bytes(),
                index_memory_bytes: t.table.index_memory_bytes(),
                expected_fpr: f.expected_fpr(),
                prefix_extractor: t.table.prefix_extractor().map(|e| e.name()),
                prefixes: p.num_prefixes,
                filter_whole_keys: f.contents().whole_keys,
                range_filter_requested_bits_per_key: rf.map(|f| f.bits_per_key()),
                range_filter_bits_per_key: rf
                    .map_or(0.0, |f| f.num_bits() as f64 / f.num_keys().max(1) as f64),
                range_filter_keys: rf.map_or(0, |f| f.num_keys()),
                range_filter_bytes: rf.map_or(0, |_| {
                    p.range_filter.size + crate::table::format::BLOCK_TRAILER_LEN as u64
                }),
                range_filter_memory_bytes: t.table.range_filter_memory_bytes(),
            }
        })
        .collect()
}

fn filter_runs(state: &Tree) -> Vec<FilterRun> {
    let runs = filter_budget::runs(&state.version, &[]);
    let keys: Vec<u64> = runs.iter().map(filter_budget::Run::keys).collect();
    // As the engine's budget does: with prefixes beside the keys, each run weighs its filter
    // entries, and the memory is split per entry.
    let by_entries = filter_budget::weighs_entries(&state.opts);
    let entries: Vec<u64> = runs.iter().map(|r| r.weight(by_entries)).collect();
    let bits: Vec<u64> =
        runs.iter().map(|r| r.tables.iter().map(|t| t.table.filter().num_bits()).sum()).collect();
    let sum = |v: &[u64]| v.iter().fold(0u64, |a, &n| a.saturating_add(n));
    let (all_entries, all_bits) = (sum(&entries), sum(&bits));
    let average = if all_entries == 0 { 0.0 } else { all_bits as f64 / all_entries as f64 };
    let kinds: Vec<CurveKind> = runs
        .iter()
        .map(|r| match r.tables.iter().any(|t| t.table.filter().kind() == FilterKind::Ribbon) {
            true => CurveKind::Ribbon,
            false => CurveKind::Blocked,
        })
        .collect();
    let budgeted = budget::allocate_for(&entries, &kinds, average);
    runs.iter()
        .zip(keys.iter().zip(bits))
        .zip(entries.iter().zip(budgeted))
        .zip(kinds)
        .map(|(((run, (&keys, filter_bits)), (&entries, per_entry)), kind)| {
            let budgeted_bits_per_key = match keys {
                0 => per_entry,
                _ => per_entry * entries as f64 / keys as f64,
            };
            let weighted: f64 = run
                .tables
                .iter()
                .map(|t| t.table.filter().expected_fpr() * t.meta.num_entries as f64)
                .sum();
            FilterRun {
                level: run.level,
                table: (run.level == 0).then(|| run.tables[0].meta.number),
                tables: run.tables.len(),
                keys,
                filter_bits,
                expected_fpr: if keys == 0 { 0.0 } else { weighted / keys as f64 },
                budgeted_bits_per_key,
                budgeted_fpr: match kind {
                    CurveKind::Ribbon if per_entry > 0.0 => ribbon::fpr_at(per_entry),
                    _ => budget::fpr(per_entry),
                },
            }
        })
        .collect()
}

fn trace(state: &Tree, key: &[u8], seq: SeqNo, clock: &dyn Clock) -> Result<Vec<TraceStep>> {
    let mut seen = Recorder::default();
    read::search(state, key, seq, clock, &mut ReadTally::default(), &mut seen)?;

    let mut steps = Vec::new();
    let mut decided = false;
    let mut push = |source, in_range, filter_maybe, actual: Presence| {
        let decides = !decided && actual != Presence::Absent;
        decided |= decides;
        steps.push(TraceStep { source, in_range, filter_maybe, actual, decides });
    };
    for (i, actual) in seen.memtables {
        let source =
            if i == 0 { TraceSource::Memtable } else { TraceSource::ImmutableMemtable(i - 1) };
        push(source, true, None, actual);
    }
    for (level, t) in state.version.all_tables() {
        let source = TraceSource::Table { level, number: t.meta.number };
        match seen.tables.get(&t.meta.number) {
            Some(Some(actual)) => push(source, true, Some(true), actual.clone()),
            // The filter said no: look anyway, to show it was right.
            Some(None) => {
                let got = t.table.get(key, seq)?;
                let mut tally = ReadTally::default();
                let answer = read::resolve(state, key, seq, Found::Table(got), &mut tally, clock);
                push(source, true, Some(false), Presence::of(&answer));
            }
            None => push(source, false, None, Presence::Absent),
        }
    }
    Ok(steps)
}

impl Presence {
    /// A step's picture of what the read path answered for a source.
    fn of(answer: &Answer) -> Presence {
        match answer {
            Answer::Value(_) | Answer::Blob(_) => Presence::Value,
            Answer::Deleted => Presence::Tombstone,
            Answer::Expired => Presence::Expired,
            Answer::RangeDeleted => Presence::RangeDeleted,
            Answer::Absent => Presence::Absent,
            Answer::Operand => Presence::MergeOperand,
        }
    }
}

/// What the read path visited: each memtable's answer, and per consulted table the table's
/// answer (`None` where the filter said no and the table was not searched).
#[derive(Default)]
struct Recorder {
    memtables: Vec<(usize, Presence)>,
    tables: HashMap<u64, Option<Presence>>,
}

impl ReadObserver for Recorder {
    const EXHAUSTIVE: bool = true;

    fn memtable(&mut self, index: usize, answer: &Answer) {
        self.memtables.push((index, Presence::of(answer)));
    }

    fn table(&mut self, t: &Arc<TableFile>, searched: Option<&Answer>) {
        self.tables.insert(t.meta.number, searched.map(Presence::of));
    }
}
