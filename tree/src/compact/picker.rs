//! Choosing the next compaction: a pure function of the trees' shape, the options that
//! govern it and the time, so that it can be tested on a described tree and run by the
//! engine under its locks.
//!
//! In priority order:
//! - L0 → L1 when L0 holds `l0_compaction_trigger` tables: every L0 table (they may overlap
//!   each other) plus the L1 tables they overlap. Unless L1 holds so much more than L0 that
//!   the merge would mostly rewrite L1: then the newest L0 tables are merged with each other
//!   into one L0 table first ([`l0_merge`]), so that L0 → L1 later carries more per byte of
//!   L1 it rewrites.
//! - Ln → Ln+1 for the level most over its target size (`level_base_bytes` for L1, times
//!   `level_size_ratio` per level below): the table that overlaps the least of the level
//!   below per byte ([`least_overlapping`]), plus the Ln+1 tables it overlaps.
//! - When no level is over its target: a table holding enough expired values
//!   ([`worth_rewriting`]); then the tables referencing a keyspace's oldest blob file, when
//!   the files within its `blob_gc_age_cutoff` hold enough garbage ([`blob_gc_due`]); then
//!   such a keyspace's L0 into the level below, if it references values worth many times the
//!   tables' bytes, whose older versions it may shadow ([`pick_blob_shadowed`]); then a
//!   table older than `Policy::periodic` that a compaction filter or expiry may have
//!   something to drop from ([`due_periodic`]).
//!
//! A keyspace of [`CompactionStyle::Fifo`] takes no part in any of that: its tables are only
//! ever dropped ([`pick_fifo`]), before any other keyspace's compaction, as dropping costs a
//! manifest edit and nothing else.
//!
//! Whether a chosen compaction merely moves its tables down a level is decided when it
//! runs (the engine's `may_move`), not here.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::blob::{BlobFileKind, BlobFileMeta};
use crate::options::CompactionStyle;
use crate::tree::Tree;
use crate::version::set::{TableFile, Version, NUM_LEVELS};

/// Why a compaction runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub enum CompactionReason {
    /// L0 holds `Options::l0_compaction_trigger` tables or more.
    L0Tables,
    /// L0 holds `Options::l0_compaction_trigger` tables or more, but L1 so many more bytes
    /// that compacting L0 into it now would mostly rewrite L1: the newest L0 tables are
    /// merged into one L0 table instead (`input_level` and `output_level` are both 0).
    L0Merge,
    /// A level below L0 holds more bytes than its target (`Options::level_base_bytes`
    /// times `level_size_ratio` per level below L1).
    LevelSize,
    /// `Db::compact`.
    Manual,
    /// Enough of a table's expiring values have expired (see `Db::put_with_ttl`):
    /// the table is rewritten in place (an L0 table: L0 is compacted into L1) to free their
    /// space.
    Expiry,
    /// A table was written longer ago than `Options::periodic_compaction` and a compaction
    /// filter or expired values may drop some of it: rewritten in place (an L0 table: L0 is
    /// compacted into L1) as for [`CompactionReason::Expiry`].
    Periodic,
    /// The blob files within a keyspace's `blob_gc_age_cutoff` hold at least
    /// `blob_gc_force_threshold` of garbage: the tables referencing the oldest of them are
    /// rewritten, which relocates their values out of it (as for
    /// [`CompactionReason::Expiry`]: L0 is compacted into L1, another level's tables are
    /// rewritten in place). Or, at rest, L0 referencing many times its and the overlapped
    /// tables' bytes of values is merged down, dropping the older versions it shadows, whose
    /// values only then become garbage.
    BlobGarbage,
    /// A FIFO keyspace holds more than its `max_bytes`: its oldest tables are dropped,
    /// whole, with nothing written (`input_level` and `output_level` are the tables' level).
    FifoBytes,
    /// A FIFO keyspace's oldest tables were written longer ago than its `max_age`: dropped,
    /// as for [`CompactionReason::FifoBytes`].
    FifoAge,
    /// A level of a keyspace that gathers sorted runs (tiered, lazy leveling, fluid) holds
    /// more runs than its style allows: they are merged into one ([`pick_runs`]).
    Runs,
}

/// The options picking follows.
#[derive(Debug, Clone)]
pub struct Policy {
    /// L1's target bytes.
    pub level_base_bytes: u64,
    /// Each level's target over the one above's.
    pub level_size_ratio: u64,
    /// L0 tables that make L0 due for compaction.
    pub l0_compaction_trigger: usize,
    /// L0 tables at which writers slow down: an L0 merge is not chosen one short of it.
    pub l0_slowdown_trigger: usize,
    /// Tables written longer ago than this, in milliseconds, are due a periodic compaction
    /// (`None`: never).
    pub periodic_millis: Option<u64>,
    /// The size of a flushed run, about: a keyspace that gathers runs places a run of this
    /// size on its first level, `level_size_ratio` times it on the second, and so on.
    pub run_base_bytes: u64,
}

/// One compaction's inputs: the tables of `level` and those of `out_level` they overlap.
#[derive(Debug)]
pub struct Task {
    /// The keyspace whose tables these are.
    pub tree: Arc<Tree>,
    pub level: usize,
    /// `level + 1`; or `level` itself, for an L0 merge ([`l0_merge`]), for an in-place
    /// rewrite ([`CompactionReason::Expiry`], [`CompactionReason::Periodic`]) and for the
    /// in-place rewrite of the last level that a manual compaction does for a keyspace with
    /// a compaction filter; a manual compaction also passes over empty levels.
    pub out_level: usize,
    pub inputs: Vec<Arc<TableFile>>,
    pub next_inputs: Vec<Arc<TableFile>>,
    pub reason: CompactionReason,
    /// The blob files whose values the compaction relocates as it meets references to them
    /// (garbage collection, [`blob_gc_files`]), sorted.
    pub relocate: Vec<u64>,
}

impl Policy {
    /// `level`'s target bytes (L1 and below).
    pub fn level_target(&self, level: usize) -> u64 {
        let mut t = self.level_base_bytes;
        for _ in 1..level {
            t = t.saturating_mul(self.level_size_ratio);
        }
        t
    }

    /// The first level from `from` on whose target `bytes` are under (the bottom level has
    /// none).
    pub fn fitting_level(&self, bytes: u64, from: usize) -> usize {
        (from..NUM_LEVELS - 1).find(|&l| bytes < self.level_target(l)).unwrap_or(NUM_LEVELS - 1)
    }

    /// The level most in need of compaction and how badly (≥ 1.0 means needed).
    pub fn score(&self, v: &Version) -> (usize, f64) {
        let mut best = (0, v.levels[0].len() as f64 / self.l0_compaction_trigger as f64);
        for level in 1..NUM_LEVELS - 1 {
            let s = v.level_bytes(level) as f64 / self.level_target(level) as f64;
            if s > best.1 {
                best = (level, s);
            }
        }
        best
    }
}

/// True when [`pick`] would choose a compaction at `now` (milliseconds since the epoch).
pub fn needs_compaction(trees: &[Arc<Tree>], policy: &Policy, now: u64) -> bool {
    if pick_fifo(trees, now).is_some() || pick_runs(trees, policy).is_some() {
        return true;
    }
    let trees = &merging(trees);
    leveled(trees).any(|t| policy.score(&t.version).1 >= 1.0)
        || pick_rewrite(trees, policy, now).is_some()
}

/// The trees whose tables compactions merge: all but FIFO ones.
fn merging(trees: &[Arc<Tree>]) -> Vec<Arc<Tree>> {
    trees.iter().filter(|t| !t.opts.compaction_style.is_fifo()).cloned().collect()
}

/// The trees compacted by level sizes.
fn leveled(trees: &[Arc<Tree>]) -> impl Iterator<Item = &Arc<Tree>> {
    trees.iter().filter(|t| t.opts.compaction_style == CompactionStyle::Leveled)
}

/// The compaction the tree most in need of one needs at `now` (milliseconds since the
/// epoch, the database's clock), if any does.
pub fn pick(trees: &[Arc<Tree>], policy: &Policy, now: u64) -> Option<Task> {
    if let Some(task) = pick_fifo(trees, now).or_else(|| pick_runs(trees, policy)) {
        return Some(task);
    }
    let trees = &merging(trees);
    let best = leveled(trees)
        .map(|t| (t, policy.score(&t.version)))
        .max_by(|a, b| a.1 .1.total_cmp(&b.1 .1));
    let Some((tree, (level, s))) = best else { return pick_rewrite(trees, policy, now) };
    if s < 1.0 {
        return pick_rewrite(trees, policy, now);
    }
    let v = &tree.version;
    let inputs = if level == 0 {
        if let Some(inputs) = l0_merge(policy, tree, v) {
            return Some(Task {
                tree: tree.clone(),
                level: 0,
                out_level: 0,
                inputs,
                next_inputs: Vec::new(),
                reason: CompactionReason::L0Merge,
                relocate: blob_gc_files(trees, tree, false),
            });
        }
        v.levels[0].clone()
    } else {
        vec![least_overlapping(&v.levels[level], &v.levels[level + 1])?.clone()]
    };
    let (lo, hi) = user_range(&inputs);
    let next_inputs = v.overlapping(level + 1, &lo, &hi);
    let reason = if level == 0 { CompactionReason::L0Tables } else { CompactionReason::LevelSize };
    let relocate = blob_gc_files(trees, tree, false);
    let out_level = level + 1;
    Some(Task { tree: tree.clone(), level, out_level, inputs, next_inputs, reason, relocate })
}

/// The tables a FIFO keyspace drops at `now`, if it is over a bound: of the level
/// [`fifo_order`] takes first, those whose drop brings the keyspace's bytes (its tables' and
/// the blob values they reference) within `max_bytes`, or else those, in that order, written
/// longer ago than `max_age` (by their creation time; one of unknown time, 0, never is).
/// One level at a time, so that the task's tables are all of its `level`; the next pick
/// takes the next level's.
pub fn pick_fifo(trees: &[Arc<Tree>], now: u64) -> Option<Task> {
    trees.iter().find_map(|tree| {
        let CompactionStyle::Fifo { max_bytes, max_age } = tree.opts.compaction_style else {
            return None;
        };
        let v = &tree.version;
        let order = fifo_order(v);
        let (level, _) = *order.first()?;
        let mut over =
            v.all_tables().map(|(_, t)| fifo_bytes(t)).sum::<u64>().saturating_sub(max_bytes);
        let by_bytes: Vec<Arc<TableFile>> = order
            .iter()
            .take_while(|&&(l, t)| {
                let take = over > 0 && l == level;
                over = over.saturating_sub(fifo_bytes(t));
                take
            })
            .map(|&(_, t)| t.clone())
            .collect();
        let (inputs, reason) = if !by_bytes.is_empty() {
            (by_bytes, CompactionReason::FifoBytes)
        } else {
            let age = crate::clock::ttl_millis(max_age?);
            let old = |t: &TableFile| {
                let created = t.table.properties().creation_time.saturating_mul(1000);
                created > 0 && now.saturating_sub(created) >= age
            };
            let inputs: Vec<Arc<TableFile>> = order
                .iter()
                .take_while(|&&(l, t)| l == level && old(t))
                .map(|&(_, t)| t.clone())
                .collect();
            if inputs.is_empty() {
                return None;
            }
            (inputs, CompactionReason::FifoAge)
        };
        let (tree, next_inputs) = (tree.clone(), Vec::new());
        let relocate = Vec::new(); // nothing is written
        Some(Task { tree, level, out_level: level, inputs, next_inputs, reason, relocate })
    })
}

/// One sorted run of a tree, in [`sorted_runs`]' order: an L0 table, or a sorted level.
#[derive(Debug)]
pub struct SortedRun<'v> {
    /// 0 for an L0 table.
    pub level: usize,
    pub tables: &'v [Arc<TableFile>],
    pub bytes: u64,
}

/// A tree's sorted runs from newest to oldest, as a tiered keyspace sees them (RocksDB's
/// universal compaction does likewise): each L0 table (newest first), then each non-empty
/// sorted level (shallower ones newer).
pub fn sorted_runs(v: &Version) -> Vec<SortedRun<'_>> {
    let l0 = v.levels[0].iter().enumerate().map(|(i, t)| SortedRun {
        level: 0,
        tables: &v.levels[0][i..=i],
        bytes: t.meta.file_size,
    });
    let sorted = (1..NUM_LEVELS).filter(|&l| !v.levels[l].is_empty()).map(|l| SortedRun {
        level: l,
        tables: &v.levels[l],
        bytes: v.level_bytes(l),
    });
    l0.chain(sorted).collect()
}

/// The level of the fluid LSM-tree a run of `bytes` belongs to: 1 for runs about
/// `base` (a flush), 2 for runs about `ratio` times that, and so on; the bounds lie midway
/// between, geometrically, so that `ratio` runs of one level merged (somewhat less, once
/// overwrites are dropped) make a run of the next.
pub fn run_level(bytes: u64, base: u64, ratio: u64) -> usize {
    let ratio = ratio.max(2) as f64;
    let mut bound = base.max(1) as f64 * ratio.sqrt();
    let mut level = 1;
    while bytes as f64 > bound && level < 64 {
        level += 1;
        bound *= ratio;
    }
    level
}

/// What write stalls bound for `tree`, compared with the L0 triggers: for a leveled keyspace
/// its L0 tables, which compaction must merge down; for one that gathers runs, the runs
/// beyond what its style allows ([`excess_runs`]); none for a FIFO keyspace, whose tables are
/// dropped at its own bound instead.
pub fn stall_tables(tree: &Tree, policy: &Policy) -> usize {
    match tree.opts.compaction_style {
        CompactionStyle::Leveled => tree.version.levels[0].len(),
        CompactionStyle::Fifo { .. } => 0,
        _ => excess_runs(tree, policy),
    }
}

/// For a keyspace that gathers runs, the runs it holds beyond what its style allows the
/// levels they make up (K per level above the last, Z at the last; 0 for other styles):
/// what write stalls bound for it, as they bound L0's tables for a leveled one.
pub fn excess_runs(tree: &Tree, policy: &Policy) -> usize {
    let Some((k, z)) = tree.opts.compaction_style.runs_per_level(policy.level_size_ratio) else {
        return 0;
    };
    let key = (k, z, policy.run_base_bytes, policy.level_size_ratio);
    tree.version.excess_runs.get(key, || count_excess_runs(&tree.version, policy, k, z))
}

/// [`excess_runs`], counted.
fn count_excess_runs(v: &Version, policy: &Policy, k: usize, z: usize) -> usize {
    let runs = sorted_runs(v);
    let level = |r: &SortedRun| run_level(r.bytes, policy.run_base_bytes, policy.level_size_ratio);
    let last = runs.iter().map(level).max().unwrap_or(1);
    let mut per_level = vec![0usize; last + 1];
    runs.iter().for_each(|r| per_level[level(r)] += 1);
    let allowed = |l: usize| if l == last { z } else { k };
    (1..=last).map(|l| per_level[l].saturating_sub(allowed(l))).sum()
}

/// The merge a keyspace that gathers runs (tiered, lazy leveling, fluid) needs, if any: for
/// the first level, from the top, holding more runs than its style allows (K above the last
/// level, Z at the last), all of its runs — with any run between them in age order, so the
/// merged run takes their place in it — merged into one. When that level is the one above
/// the last and the last holds its Z runs already, the last level's runs join the merge,
/// which the next pick would otherwise make, writing the level's runs a second time.
///
/// Runs live in the levels as [`sorted_runs`] describes, so reads, scans, budgets and stats
/// need nothing new: the merged run goes where its oldest input was. Where that is L0, it is
/// one L0 table, however large (written unsplit: its tables would otherwise be runs of their
/// own, and L0's order would no longer hold their age), unless it takes in L0's oldest table
/// and no run is older: then it goes to the last level, as a sorted level of tables. Where
/// the runs span L0 tables and more than one sorted level, or two sorted levels, the merge is
/// taken a step at a time, the L0 tables (or the shallower level) into the first sorted
/// level, which is each time the run just older, so age order holds throughout.
pub fn pick_runs(trees: &[Arc<Tree>], policy: &Policy) -> Option<Task> {
    trees.iter().find_map(|tree| {
        let none = BTreeSet::new();
        let level = crowded_levels(tree, policy, &none).into_iter().next()?;
        runs_merge(trees, tree, policy, level, &none)
    })
}

/// A merge of sorted runs that may run beside the compactions already running, whose inputs
/// are the tables numbered in `busy`: the first [`pick_runs`] would choose at any level of
/// any keyspace that gathers runs, from the top, counting only the runs none of them reads,
/// when its tables are all L0 tables none of them reads, merged into one L0 table. RocksDB runs compactions of disjoint inputs at once in the
/// same way; here only this kind, which is what a keyspace that gathers runs needs beside a
/// long merge into its last level (flush-sized runs arrive meanwhile, and left waiting they
/// bound the writers: `excess_runs`). Any such merge is safe beside another: its inputs are
/// a span of L0 adjacent in age, its output takes their place in L0's order, and what lies
/// beneath it (older L0 tables, deeper levels) can only lose versions, never gain them, from
/// the other merge, so its tombstones and filters judge it no less safely. It relocates no
/// blob values: two merges relocating one file's values at once could each leave the other's
/// references behind.
pub fn pick_beside(trees: &[Arc<Tree>], policy: &Policy, busy: &BTreeSet<u64>) -> Option<Task> {
    trees.iter().find_map(|tree| {
        crowded_levels(tree, policy, busy).into_iter().find_map(|level| {
            let task = runs_merge(trees, tree, policy, level, busy)?;
            let free = |ts: &[Arc<TableFile>]| ts.iter().all(|t| !busy.contains(&t.meta.number));
            let beside = task.level == 0
                && task.out_level == 0
                && free(&task.inputs)
                && free(&task.next_inputs);
            beside.then(|| Task { relocate: Vec::new(), ..task })
        })
    })
}

/// The levels of `tree`'s fluid LSM-tree holding more runs than its style allows (K above
/// the last level, Z at the last), from the top, counting no run with a table in `busy`;
/// none for a keyspace that does not gather runs.
fn crowded_levels(tree: &Tree, policy: &Policy, busy: &BTreeSet<u64>) -> Vec<usize> {
    let Some((k, z)) = tree.opts.compaction_style.runs_per_level(policy.level_size_ratio) else {
        return Vec::new();
    };
    let (levels, last) = run_levels(&sorted_runs(&tree.version), policy, busy);
    let count = |l: usize| levels.iter().filter(|&&x| x == l).count();
    (1..=last).filter(|&l| count(l) > if l == last { z } else { k }).collect()
}

/// Each run's level in the fluid LSM-tree ([`run_level`]), 0 for a run with a table in
/// `busy` (which a running compaction replaces: no level counts it); and the last level, of
/// all runs, busy or not, so that runs do not take the last level's allowance while the
/// runs that make it are being merged.
fn run_levels(runs: &[SortedRun], policy: &Policy, busy: &BTreeSet<u64>) -> (Vec<usize>, usize) {
    let level = |r: &SortedRun| run_level(r.bytes, policy.run_base_bytes, policy.level_size_ratio);
    let last = runs.iter().map(level).max().unwrap_or(0);
    let taken = |r: &SortedRun| r.tables.iter().any(|t| busy.contains(&t.meta.number));
    (runs.iter().map(|r| if taken(r) { 0 } else { level(r) }).collect(), last)
}

/// The merge [`pick_runs`] describes for `level` of `tree`, one of its [`crowded_levels`].
fn runs_merge(
    trees: &[Arc<Tree>],
    tree: &Arc<Tree>,
    policy: &Policy,
    l: usize,
    busy: &BTreeSet<u64>,
) -> Option<Task> {
    let (_, z) = tree.opts.compaction_style.runs_per_level(policy.level_size_ratio)?;
    let v = &tree.version;
    let runs = sorted_runs(v);
    let (levels, last) = run_levels(&runs, policy, busy);
    let at = |l: usize| (0..runs.len()).filter(|&i| levels[i] == l).collect::<Vec<usize>>();
    let here = at(l);
    // The level above the last merges into it when the last holds all it may: one write of
    // those runs instead of two (Dostoevsky's lazy leveling), which a fill otherwise paid for
    // every byte reaching the last level.
    let below = at(last);
    let end = match below.last() {
        Some(&e) if l + 1 == last && below.len() >= z => e,
        _ => *here.last()?,
    };
    let (mut first, mut end) = (*here.first()?, end);
    // An ingest's L0 tables share one sequence number: the span takes all of them or
    // none, or L0's order would no longer hold the merged run's age.
    let l0_all = &v.levels[0];
    let seqs = |ts: &[Arc<TableFile>]| {
        let lo = ts.iter().map(|t| t.meta.smallest_seq).min().unwrap_or(0);
        (lo, ts.iter().map(|t| t.meta.largest_seq).max().unwrap_or(0))
    };
    while first < end.min(l0_all.len()) {
        let (lo, hi) = seqs(&l0_all[first..=end.min(l0_all.len() - 1)]);
        if first > 0 && l0_all[first - 1].meta.smallest_seq <= hi {
            first -= 1;
        } else if end + 1 < l0_all.len() && l0_all[end + 1].meta.largest_seq >= lo {
            end += 1;
        } else {
            break;
        }
    }
    let span = &runs[first..=end];
    let l0: Vec<Arc<TableFile>> =
        span.iter().filter(|r| r.level == 0).flat_map(|r| r.tables.iter().cloned()).collect();
    let sorted: Vec<usize> = span.iter().filter(|r| r.level > 0).map(|r| r.level).collect();
    let task = |level, out_level, inputs, next_inputs| Task {
        tree: tree.clone(),
        level,
        out_level,
        inputs,
        next_inputs,
        reason: CompactionReason::Runs,
        relocate: blob_gc_files(trees, tree, false),
    };
    Some(match (l0.is_empty(), sorted.first()) {
        (false, Some(&d)) => task(0, d, l0, v.levels[d].clone()),
        (true, Some(&a)) => {
            let b = *sorted.get(1)?;
            task(a, b, v.levels[a].clone(), v.levels[b].clone())
        }
        // The oldest run of all: to the last level; otherwise one L0 table.
        (false, None) if end == runs.len() - 1 => task(0, NUM_LEVELS - 1, l0, Vec::new()),
        (false, None) => task(0, 0, l0, Vec::new()),
        (true, None) => return None,
    })
}

/// The order in which FIFO drops a tree's tables: the deepest sorted level's first (left by
/// another style: nothing lies beneath them, so dropping one uncovers no older version of a
/// key), oldest first; then L0's, oldest first. Dropping in this order, a table goes only once
/// everything older that overlaps it is gone.
pub fn fifo_order(v: &Version) -> Vec<(usize, &Arc<TableFile>)> {
    let mut order = Vec::new();
    for level in (1..NUM_LEVELS).rev() {
        let mut tables: Vec<&Arc<TableFile>> = v.levels[level].iter().collect();
        tables.sort_by_key(|t| (t.meta.largest_seq, t.meta.number));
        order.extend(tables.into_iter().map(|t| (level, t)));
    }
    // L0 is newest first.
    order.extend(v.levels[0].iter().rev().map(|t| (0, t)));
    order
}

/// The bytes a FIFO keyspace counts for a table: its file and the blob values it references.
fn fifo_bytes(t: &TableFile) -> u64 {
    t.meta.blob_refs.iter().map(|r| r.bytes).fold(t.meta.file_size, u64::saturating_add)
}

/// A compaction that frees the space of expired values ([`worth_rewriting`]) or, failing
/// that, one due by age ([`due_periodic`]): the table itself, rewritten in place
/// (`out_level == level`: its output cannot overlap its level's other tables), or for an
/// L0 table, L0 into L1.
fn pick_rewrite(trees: &[Arc<Tree>], policy: &Policy, now: u64) -> Option<Task> {
    let expired = |_: &Tree, t: &TableFile| worth_rewriting(t, now);
    let periodic = |tree: &Tree, t: &TableFile| due_periodic(tree, t, policy, now);
    pick_table(trees, expired, CompactionReason::Expiry)
        .or_else(|| pick_blob_garbage(trees))
        .or_else(|| pick_blob_shadowed(trees))
        .or_else(|| pick_table(trees, periodic, CompactionReason::Periodic))
}

/// Input bytes a blob garbage collection takes at most on a level below L0, in tables of
/// the keyspace's target size (RocksDB's `max_compaction_bytes` is 25 target files): one
/// blob file's references may be spread over a whole level, which is then rewritten in
/// steps rather than at once.
const BLOB_GC_MAX_TABLES: u64 = 25;

/// The compaction for a tree with a blob file due collection ([`blob_gc_due`]): on the
/// smallest level holding tables that reference the file, L0 into L1 (L0's
/// tables may overlap; also for L1's, while L0 holds tables), or else the first run of neighbouring such tables (rewritten in
/// place, so the output cannot overlap the level's other tables), within
/// [`BLOB_GC_MAX_TABLES`] tables' bytes. Each such compaction relocates the run's
/// references out of the file, so the file goes after a pass over its tables.
fn pick_blob_garbage(trees: &[Arc<Tree>]) -> Option<Task> {
    let live = live_blob_refs(trees);
    for tree in trees {
        let Some(due) = blob_gc_due(tree, &live) else { continue };
        let v = &tree.version;
        let refers = |t: &&Arc<TableFile>| t.meta.blob_refs.iter().any(|r| r.file == due);
        for (level, tables) in v.levels.iter().enumerate() {
            let Some(start) = tables.iter().position(|t| refers(&t)) else { continue };
            // L1's references may be to versions L0 holds newer ones of, which L0 into L1
            // drops where a rewrite in place would relocate them.
            let level = if level == 1 && !v.levels[0].is_empty() { 0 } else { level };
            let (inputs, out_level, next_inputs) = if level == 0 {
                let inputs = v.levels[0].clone();
                let (lo, hi) = user_range(&inputs);
                (inputs, 1, v.overlapping(1, &lo, &hi))
            } else {
                let cap = tree.opts.target_table_bytes.saturating_mul(BLOB_GC_MAX_TABLES);
                let mut bytes = 0u64;
                let run = tables[start..].iter().take_while(|t| {
                    let first = bytes == 0;
                    bytes = bytes.saturating_add(t.meta.file_size);
                    refers(t) && (first || bytes <= cap)
                });
                (run.cloned().collect(), level, Vec::new())
            };
            let relocate = blob_gc_files(trees, tree, false);
            let tree = tree.clone();
            let reason = CompactionReason::BlobGarbage;
            return Some(Task { tree, level, out_level, inputs, next_inputs, reason, relocate });
        }
    }
    None
}

/// How many times the bytes of L0 and of the tables below it overlaps must the values L0's
/// tables reference be for [`pick_blob_shadowed`] to merge them.
const SHADOWED_RATIO: u64 = 8;

/// At rest, in a keyspace collecting blob garbage, L0 merged into the first level below it
/// holding tables, for the older versions there that L0's shadow: an overwritten value is
/// garbage only once no table references it, and a tree at rest keeps L0 — merged flushes
/// that can hold the newer versions of half the keys (see [`l0_merge`]), pinning as many old
/// values. Only when the values L0's tables reference are at least [`SHADOWED_RATIO`] times
/// the bytes of the tables the merge rewrites: a reference is small beside its value, so this
/// costs at most an eighth of a byte written per byte it may free, and a tree whose tables
/// are large beside what L0 holds (where L0 pins a small part of the values) is left alone.
/// Deeper levels are not merged so: at rest, what L0 holds is what was written last.
fn pick_blob_shadowed(trees: &[Arc<Tree>]) -> Option<Task> {
    for tree in trees {
        let v = &tree.version;
        if blob_gc_files_off(tree) || v.levels[0].is_empty() {
            continue;
        }
        let Some(out_level) = (1..NUM_LEVELS).find(|&l| !v.levels[l].is_empty()) else {
            continue;
        };
        let inputs = v.levels[0].clone();
        let referenced: u64 = inputs.iter().flat_map(|t| &t.meta.blob_refs).map(|r| r.bytes).sum();
        let (lo, hi) = user_range(&inputs);
        let next_inputs = v.overlapping(out_level, &lo, &hi);
        let rewritten: u64 = inputs.iter().chain(&next_inputs).map(|t| t.meta.file_size).sum();
        if next_inputs.is_empty() || referenced < rewritten.saturating_mul(SHADOWED_RATIO) {
            continue;
        }
        // It relocates nothing: it is what makes the old files' garbage known, for the
        // collection that follows to judge; copying the window's values on every such merge
        // (one after every few flushes while writes go on) rewrote the oldest quarter of the
        // values each time.
        let (tree, reason) = (tree.clone(), CompactionReason::BlobGarbage);
        let relocate = Vec::new();
        return Some(Task { tree, level: 0, out_level, inputs, next_inputs, reason, relocate });
    }
    None
}

/// Whether `tree` collects no blob garbage: no threshold, or an age cutoff of 0.
fn blob_gc_files_off(tree: &Tree) -> bool {
    tree.opts.blob_threshold.is_none() || tree.opts.blob_gc_age_cutoff <= 0.0
}

/// The oldest blob file of `tree` due collection (RocksDB's forced blob garbage collection),
/// if any: of the files eligible ([`blob_gc_eligible`]), the oldest whose garbage is at least
/// `blob_gc_force_threshold` of its bytes. Exact: `live` ([`live_blob_refs`]) sums every
/// keyspace's recorded references.
///
/// Why file by file: RocksDB sums over its oldest *batch* (the oldest file and the next ones
/// no table references first), and gives up when that batch reaches past the cutoff. Here one
/// table often references every file (a tree at rest in L0 and L1), so the batch would be
/// most files and the old files' garbage never judged; summing over every eligible file
/// instead lets the less collectable ones dilute it. The compaction chosen rewrites every
/// table referencing the file, which relocates its live values (it is eligible), so it goes,
/// and the next is judged.
pub fn blob_gc_due(tree: &Tree, live: &BTreeMap<u64, (u64, u64)>) -> Option<u64> {
    let threshold = tree.opts.blob_gc_force_threshold;
    blob_gc_eligible(tree, live, false).into_iter().find(|number| {
        let file = &tree.version.blobs.0[number];
        let total = file.meta.value_bytes;
        let garbage = total.saturating_sub(live.get(number).map_or(0, |r| r.1));
        garbage as f64 >= threshold * total as f64
    })
}

/// The blob files of `tree` eligible for collection, oldest first: those that
/// [`holds_garbage`] (by `live`), and of them the oldest `blob_gc_age_cutoff` of the
/// keyspace's live files, rounded down (of 8 files, 2), as RocksDB counts its cutoff; with
/// `all` (a manual compaction, which promises to drop what is obsolete), all of them. None in
/// a keyspace without a `blob_threshold`, or with a cutoff of 0.
///
/// Files that have lost nothing take no place in the count: a fully live file is never
/// relocated, so old cold files would otherwise hold the window for good, and the garbage of
/// every newer file (relocation's own outputs among them) would never be collected.
pub fn blob_gc_eligible(tree: &Tree, live: &BTreeMap<u64, (u64, u64)>, all: bool) -> Vec<u64> {
    let blobs = &tree.version.blobs.0;
    let cutoff = tree.opts.blob_gc_age_cutoff;
    if tree.opts.blob_threshold.is_none() || cutoff <= 0.0 {
        return Vec::new();
    }
    let count = if all { usize::MAX } else { (cutoff * blobs.len() as f64) as usize };
    let refs = |n: &u64| live.get(n).copied().unwrap_or_default();
    let garbage = blobs.iter().filter(|(n, f)| holds_garbage(&f.meta, refs(n)));
    garbage.map(|(&n, _)| n).take(count).collect()
}

/// References into each blob file from every keyspace's tables: their count and bytes. A
/// kept WAL segment may hold several keyspaces' values, so one keyspace's tables alone
/// would take the others' values for its garbage.
pub fn live_blob_refs(trees: &[Arc<Tree>]) -> BTreeMap<u64, (u64, u64)> {
    let mut live = BTreeMap::new();
    for tree in trees {
        for (number, (count, bytes)) in tree.version.blob_live_bytes() {
            let e: &mut (u64, u64) = live.entry(number).or_default();
            e.0 += count;
            e.1 += bytes;
        }
    }
    live
}

/// Whether a blob file has lost any of its values: a compaction that relocated the values of
/// one that has not would copy it whole to free nothing. A separated file holds its values
/// alone, so any byte of them unreferenced is garbage; a kept WAL segment also holds framing
/// and small values, which were there when it was kept, so it counts references instead.
pub fn holds_garbage(meta: &BlobFileMeta, (count, bytes): (u64, u64)) -> bool {
    match meta.kind {
        BlobFileKind::Separated => bytes < meta.value_bytes,
        BlobFileKind::WalSegment => count < meta.values,
    }
}

/// The blob files of `tree` whose values a compaction of it relocates (garbage collection):
/// those [`blob_gc_eligible`], judged over every keyspace of `trees`.
pub fn blob_gc_files(trees: &[Arc<Tree>], tree: &Tree, all: bool) -> Vec<u64> {
    if tree.version.blobs.0.is_empty() {
        return Vec::new();
    }
    blob_gc_eligible(tree, &live_blob_refs(trees), all)
}

/// The compaction for the first table `due` says is, as [`pick_rewrite`] describes.
fn pick_table(
    trees: &[Arc<Tree>],
    due: impl Fn(&Tree, &TableFile) -> bool,
    reason: CompactionReason,
) -> Option<Task> {
    for tree in trees {
        let v = &tree.version;
        for (level, tables) in v.levels.iter().enumerate() {
            let Some(t) = tables.iter().find(|t| due(tree, t)) else { continue };
            let (inputs, out_level, next_inputs) = if level == 0 {
                let inputs = v.levels[0].clone();
                let (lo, hi) = user_range(&inputs);
                let next = v.overlapping(1, &lo, &hi);
                (inputs, 1, next)
            } else {
                (vec![t.clone()], level, Vec::new())
            };
            let relocate = blob_gc_files(trees, tree, false);
            let tree = tree.clone();
            return Some(Task { tree, level, out_level, inputs, next_inputs, reason, relocate });
        }
    }
    None
}

/// Whether enough of `t`'s data has expired at `now` to rewrite it: its oldest expiry has
/// passed, and the bytes of its expiring entries expired by now — estimated as spread evenly
/// between its oldest and newest expiry — are at least a quarter of its entries' bytes.
pub fn worth_rewriting(t: &TableFile, now: u64) -> bool {
    let Some((oldest, newest, bytes)) = t.expiry() else { return false };
    if oldest > now {
        return false;
    }
    let expired = if newest <= now {
        u128::from(bytes)
    } else {
        // The share of the span (oldest, newest] already past.
        u128::from(bytes) * u128::from(now - oldest) / u128::from((newest - oldest).max(1))
    };
    expired * 4 >= u128::from(t.entry_bytes().max(1))
}

/// Whether `t`, a table of `tree`, is due a periodic compaction at `now`: it was written
/// longer ago than the period, and rewriting it may drop something — its keyspace has a
/// compaction filter (whose verdicts may change with time), or a value in it has expired.
/// Rewriting other tables would copy them byte for byte. A table whose creation time is
/// unknown (0) is never due: it would be rewritten on every pass. The output is written
/// now, so each table is rewritten at most once a period.
pub fn due_periodic(tree: &Tree, t: &TableFile, policy: &Policy, now: u64) -> bool {
    let Some(period) = policy.periodic_millis else { return false };
    let created = t.table.properties().creation_time.saturating_mul(1000);
    if created == 0 || now.saturating_sub(created) < period {
        return false;
    }
    tree.opts.compaction_filter.0.is_some()
        || t.expiry().is_some_and(|(oldest, ..)| crate::clock::expired(oldest, now))
}

/// The smallest and largest user keys of `tables`.
pub fn user_range(tables: &[Arc<TableFile>]) -> (Vec<u8>, Vec<u8>) {
    let smallest = tables.iter().map(|t| t.smallest_user_key()).min().unwrap_or_default().to_vec();
    let largest = tables.iter().map(|t| t.largest_user_key()).max().unwrap_or_default().to_vec();
    (smallest, largest)
}

/// The table of `level` that overlaps the fewest bytes of `next` per byte of its own, so
/// that each compaction rewrites as little of the level below as it can (RocksDB's
/// `kMinOverlappingRatio`, its default). Taking the tables in turn instead rewrote about
/// the size ratio's worth of the level below per byte moved down; this measured lower (see
/// `docs/results/`). Both levels are sorted and disjoint, so one pass finds every overlap.
fn least_overlapping<'a>(
    level: &'a [Arc<TableFile>],
    next: &[Arc<TableFile>],
) -> Option<&'a Arc<TableFile>> {
    let mut first = 0; // the first table of `next` that can still overlap
    let mut best: Option<(&Arc<TableFile>, u128)> = None;
    for t in level {
        while first < next.len() && next[first].largest_user_key() < t.smallest_user_key() {
            first += 1;
        }
        let overlap: u64 = next[first..]
            .iter()
            .take_while(|n| n.smallest_user_key() <= t.largest_user_key())
            .map(|n| n.meta.file_size)
            .sum();
        // Compared as overlap / size without dividing.
        let ratio = (u128::from(overlap) << 32) / u128::from(t.meta.file_size.max(1));
        if best.map_or(true, |(_, r)| ratio < r) {
            best = Some((t, ratio));
        }
    }
    best.map(|(t, _)| t)
}

/// How many times the bytes of L0 the L1 tables they overlap must hold for L0's tables to be
/// merged with each other rather than into L1 ([`l0_merge`]).
const L0_MERGE_RATIO: u64 = 2;

/// The newest L0 tables, when merging them into one L0 table is cheaper than compacting L0
/// into L1 now (RocksDB's intra-L0 compaction does the like when L1 is busy).
///
/// Why: L0 → L1 rewrites every L1 table L0 overlaps, and random keys overlap all of L1, so
/// each byte it moves down costs `(L0 + L1) / L0` bytes written. With small memtables L0
/// gathers a few MiB between compactions against an L1 of `level_base_bytes`, and L1 became
/// the costliest level of a fill. Merging the small tables first costs about one more write
/// of each byte and lets L0 gather several times as much before it goes down.
///
/// Only when L1 holds at least [`L0_MERGE_RATIO`] times L0's bytes; only the newest tables
/// that together stay within `target_table_bytes` (so the output is one table, and a table
/// is merged again only while it is small); at least two of them; and never once L0 is one
/// table short of slowing writers down, when what L0 needs is to shrink. The tables taken
/// are the newest ones, so the output sits in L0's order where they did: every L0 table left
/// is older, every one flushed meanwhile newer (see `version::set::l0_newest_first`).
fn l0_merge(policy: &Policy, tree: &Tree, v: &Version) -> Option<Vec<Arc<TableFile>>> {
    let l0 = &v.levels[0];
    if l0.len() + 1 >= policy.l0_slowdown_trigger {
        return None;
    }
    let cap = tree.opts.target_table_bytes;
    let mut bytes = 0u64;
    let mut n = l0
        .iter()
        .take_while(|t| {
            bytes = bytes.saturating_add(t.meta.file_size);
            bytes <= cap
        })
        .count();
    // Every table left must be older than everything merged, or the output would overlap
    // it without holding only newer entries, which lookups and the manifest's check rely on.
    // Only an ingest's tables share sequence numbers (all at one), and a merge may not take
    // some of them and leave the rest.
    while n >= 2
        && l0.get(n).is_some_and(|next| {
            l0[..n].iter().any(|t| t.meta.smallest_seq <= next.meta.largest_seq)
        })
    {
        n -= 1;
    }
    if n < 2 {
        return None;
    }
    let (lo, hi) = user_range(l0);
    let l1: u64 = v.overlapping(1, &lo, &hi).iter().map(|t| t.meta.file_size).sum();
    (l1 >= v.level_bytes(0).saturating_mul(L0_MERGE_RATIO)).then(|| l0[..n].to_vec())
}
