//! Compaction: leveled, or a keyspace's other style (`CompactionStyle`: its sorted runs
//! merged into one, or a FIFO keyspace's oldest tables dropped by a deletion edit).
//!
//! What to compact is the tree's picker's choice (`bloomkv_tree::compact::picker`); this runs
//! it, under the compaction slot.
//!
//! Running: the inputs are merged; only the newest version of each key is kept (readers and
//! snapshots that need older versions hold the input files alive themselves); a tombstone is
//! dropped when no level below the output holds the key. Output is split into tables of about
//! `target_table_bytes`, never between two versions of one key, so sorted levels never overlap.
//! The new tables go in and the inputs come out in one manifest edit; input files are deleted
//! when the last reader lets go of them.
//!
//! A keyspace's compaction filter is asked as the merged entries are written (see
//! `compaction_filter_stage.rs`); for it, a manual compaction also rewrites the last level's
//! tables that nothing above overlapped, in place.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{lock_mutex as lock, DbInner, DbState, Tree};
use crate::blob::BlobFileMeta;
use crate::events::{CompactionFilterErrorInfo, CompactionInfo, CompactionReason};
use crate::filter::FilterPolicy;
use crate::iter::merge::MergingIterator;
use crate::iter::{BidirectionalIterator, InternalIterator};
use crate::key;
use crate::range_del::{clip, successor, Fragments, RangeTombstone, TombstoneSplit};
use crate::version::edit::{TableMeta, VersionEdit};
use crate::version::level_iter::LevelIter;
use crate::version::set::{TableFile, Version, NUM_LEVELS};
use crate::Result;
use bloomkv_tree::compact::filter_stage::FilterStage;
use bloomkv_tree::compact::merge_stage::MergeStage;
use bloomkv_tree::compact::newest::NewestVersions;
use bloomkv_tree::compact::picker::{self, user_range, Policy};
use bloomkv_tree::filter_budget::{table_filters, Placement, TableFilters};

/// One compaction's inputs ([`picker::Task`]). Only built and run while holding
/// `DbInner::compaction_slot`; flushes only ever add L0 tables, and an ingest adds tables
/// only while holding the slot alone, so the inputs stay live until the compaction installs.
/// Two background compactions share the slot only as `picker::pick_beside` allows: disjoint
/// inputs, the second a merge of L0 runs into one L0 table.
pub(crate) type Compaction = picker::Task;

impl DbInner {
    /// The compaction slot, held alone: no background compaction runs meanwhile, nor starts.
    pub(crate) fn slot_alone(&self) -> std::sync::RwLockWriteGuard<'_, ()> {
        self.compaction_slot.write().unwrap_or_else(|p| p.into_inner())
    }

    /// What the picker follows, from the database's options.
    pub(crate) fn picker_policy(&self) -> Policy {
        Policy {
            level_base_bytes: self.opts.level_base_bytes,
            level_size_ratio: self.opts.level_size_ratio,
            l0_compaction_trigger: self.opts.l0_compaction_trigger,
            l0_slowdown_trigger: self.opts.l0_slowdown_trigger,
            periodic_millis: self.opts.periodic_compaction.map(bloomkv_tree::clock::ttl_millis),
            run_base_bytes: self.opts.memtable_bytes as u64,
        }
    }
}

/// Whether a background compaction is due that may start now: any, while none runs; one
/// that may run beside those running ([`picker::pick_beside`]) otherwise.
pub(crate) fn needs_compaction(inner: &DbInner, state: &DbState) -> bool {
    let busy = lock(&inner.compacting);
    if busy.is_empty() {
        picker::needs_compaction(&state.trees, &inner.picker_policy(), inner.clock.peek())
    } else {
        picker::pick_beside(&state.trees, &inner.picker_policy(), &busy).is_some()
    }
}

/// The compaction the picker chooses now, if any.
pub(crate) fn pick(inner: &DbInner, state: &DbState) -> Option<Compaction> {
    picker::pick(&state.trees, &inner.picker_policy(), inner.clock.peek())
}

/// Runs one compaction if any level needs it. Background threads, two of them: while one
/// runs a long merge, the other may run one beside it ([`needs_compaction`]).
pub(crate) fn maybe_compact(inner: &DbInner) -> Result<()> {
    // Pick under the slot: a manual compaction that ran while we waited for it may have
    // replaced any table we would otherwise have chosen.
    let _slot = inner.compaction_slot.read().unwrap_or_else(|p| p.into_inner());
    {
        let bg = lock(&inner.bg);
        // An ingest that reserved its sequence number meanwhile holds compactions off.
        if bg.manual_compaction || bg.ingests > 0 {
            return Ok(());
        }
    }
    // Picked and registered under one lock, so the other thread's pick sees these inputs
    // taken; the state is loaded under it too, so it holds every table a running
    // compaction has not yet replaced.
    let picked = {
        let mut busy = lock(&inner.compacting);
        let state = inner.load_state();
        let c = match busy.is_empty() {
            true => pick(inner, &state),
            false => picker::pick_beside(&state.trees, &inner.picker_policy(), &busy),
        };
        if let Some(c) = &c {
            busy.extend(c.inputs.iter().chain(&c.next_inputs).map(|t| t.meta.number));
        }
        c
    };
    let Some(c) = picked else { return Ok(()) };
    let numbers: Vec<u64> = c.inputs.iter().chain(&c.next_inputs).map(|t| t.meta.number).collect();
    let result = run_locked(inner, c);
    let mut busy = lock(&inner.compacting);
    numbers.iter().for_each(|n| {
        busy.remove(n);
    });
    result
}

/// What [`pick`] chooses now, run at once on the caller's thread (`Db::compact_step`); the
/// chosen compaction, or `None` when nothing is due or a manual compaction or an ingest
/// holds compactions off.
#[cfg(feature = "internals")]
pub(crate) fn step(inner: &DbInner) -> Result<Option<crate::db::PickedCompaction>> {
    crate::events::refuse_in_callback()?;
    let _slot = inner.slot_alone();
    {
        let bg = lock(&inner.bg);
        inner.check_bg_error_locked(&bg)?;
        if bg.manual_compaction || bg.ingests > 0 {
            return Ok(None);
        }
    }
    let Some(c) = pick(inner, &inner.load_state()) else { return Ok(None) };
    let picked = crate::db::PickedCompaction::of(&c);
    if let Err(e) = run_locked(inner, c) {
        inner.set_bg_error(e.clone());
        inner.events.report_background_error();
        return Err(e);
    }
    Ok(Some(picked))
}

/// Lets go of the compaction slot while an ingest is registered, and takes it back once none
/// is: an ingest places its tables by what the levels hold when it installs, and newer
/// writes flushed meanwhile must still be on L0 then (see `ingest.rs`). A step already
/// under way when an ingest registers is harmless: its inputs predate the ingest's sequence
/// number.
fn pause_for_ingests<'a>(
    inner: &'a DbInner,
    mut slot: std::sync::RwLockWriteGuard<'a, ()>,
) -> Result<std::sync::RwLockWriteGuard<'a, ()>> {
    loop {
        let mut bg = lock(&inner.bg);
        if bg.ingests == 0 {
            return Ok(slot);
        }
        // The ingest takes the slot to write and install its tables.
        drop(slot);
        while bg.ingests > 0 {
            inner.check_bg_error_locked(&bg)?;
            if bg.shutdown {
                return Err(crate::Error::Closed);
            }
            bg = inner.bg_done_cv.wait(bg).unwrap_or_else(|p| p.into_inner());
        }
        drop(bg);
        slot = inner.slot_alone();
    }
}

/// Compacts every level into the one below, top to bottom, until all data sits in the deepest
/// level in use. Holds off background compactions meanwhile (flushes go on).
pub(crate) fn compact_all(inner: &DbInner) -> Result<()> {
    // A listener's callback may be running on the compaction thread, holding the slot.
    crate::events::refuse_in_callback()?;
    {
        let mut bg = lock(&inner.bg);
        loop {
            inner.check_bg_error_locked(&bg)?;
            if !bg.manual_compaction {
                break;
            }
            bg = inner.bg_done_cv.wait(bg).unwrap_or_else(|p| p.into_inner());
        }
        bg.manual_compaction = true;
    }
    // Tables numbered from here on are this call's outputs (or newer flushes).
    let first_new = inner.file_numbers.load(std::sync::atomic::Ordering::SeqCst);
    // The compaction thread may be mid-compaction; it checks `manual_compaction` only between
    // steps, so wait for it by taking the compaction slot it holds while running.
    let result = (|| -> Result<()> {
        let mut slot = inner.slot_alone();
        // Keyspaces are dropped only while holding the slot, so every tree stays (a tree
        // dropped while the slot is let go for an ingest is skipped).
        let ids: Vec<_> = inner.load_state().trees.iter().map(|t| t.id).collect();
        for id in ids {
            let Some(mut tree) = inner.load_state().tree(id).cloned() else { continue };
            if tree.opts.compaction_style.is_fifo() {
                // Nothing is merged: what its bounds drop now goes.
                while let Some(c) = picker::pick_fifo(&[tree.clone()], inner.clock.peek()) {
                    run_locked(inner, c)?;
                    let Some(t) = inner.load_state().tree(id).cloned() else { break };
                    tree = t;
                }
                continue;
            }
            // Into the deepest level in use; for a tree held in L0 alone, the first level
            // whose target its bytes are under. Left on a level it overfills, the data would be
            // compacted again by the background as soon as this returns (see the end).
            let v = &tree.version;
            let deepest = (0..NUM_LEVELS).rev().find(|&l| !v.levels[l].is_empty()).unwrap_or(0);
            let last = match deepest {
                0 if !v.levels[0].is_empty() => {
                    inner.picker_policy().fitting_level(v.level_bytes(0), 1)
                }
                _ => deepest,
            };
            for level in 0..NUM_LEVELS - 1 {
                if inner.closed.load(std::sync::atomic::Ordering::Acquire) {
                    return Err(crate::Error::Closed);
                }
                slot = pause_for_ingests(inner, slot)?;
                let Some(tree) = inner.load_state().tree(id).cloned() else { break };
                let v = &tree.version;
                if v.levels[level].is_empty() || (level >= last && level > 0) {
                    continue;
                }
                // Into the next level that holds anything, or straight into `last`: the levels
                // passed over are empty, so nothing older is skipped, and data bound for a
                // deeper level than the tree used is written once, not once per level.
                let out_level =
                    (level + 1..last).find(|&l| !v.levels[l].is_empty()).unwrap_or(last);
                compact_whole_level(inner, &tree, level, out_level)?;
            }
            // Merged, the last level may be over its target: then on down, the whole level
            // into the empty level below, until it is under (the data has its final size now).
            let mut last = last;
            while last < NUM_LEVELS - 1 {
                slot = pause_for_ingests(inner, slot)?;
                let Some(tree) = inner.load_state().tree(id).cloned() else { break };
                let v = &tree.version;
                let bytes = v.level_bytes(last);
                if bytes == 0 || inner.picker_policy().fitting_level(bytes, last) == last {
                    break;
                }
                compact_whole_level(inner, &tree, last, last + 1)?;
                last += 1;
            }
            // The merge rewrote only the last level's tables the levels above overlap: the
            // filter must see the rest too, their expired values must go, and the values they
            // reference in blob files holding garbage must move out, so those files can go.
            let now = inner.clock.now();
            let expired = |t: &Arc<TableFile>| t.expiry().is_some_and(|(oldest, ..)| oldest <= now);
            let last_level = inner.load_state().tree(id).map_or(Vec::new(), |t| {
                let v = &t.version;
                (1..NUM_LEVELS)
                    .rev()
                    .find(|&l| !v.levels[l].is_empty())
                    .map_or(Vec::new(), |l| v.levels[l].clone())
            });
            let whole = tree.opts.compaction_filter.0.is_some() || last_level.iter().any(expired);
            let state = inner.load_state();
            let gc =
                state.tree(id).map_or(Vec::new(), |t| picker::blob_gc_files(&state.trees, t, true));
            let collects = |t: &Arc<TableFile>| {
                t.meta.blob_refs.iter().any(|r| gc.binary_search(&r.file).is_ok())
            };
            if whole || last_level.iter().any(collects) {
                slot = rewrite_last_level(inner, id, first_new, whole, slot)?;
            }
        }
        Ok(())
    })();
    let mut bg = lock(&inner.bg);
    bg.manual_compaction = false;
    if let Err(e) = &result {
        inner.set_bg_error_locked(&mut bg, e.clone());
    }
    inner.bg_cv.notify_all();
    inner.bg_done_cv.notify_all();
    drop(bg);
    if result.is_err() {
        inner.events.report_background_error();
    }
    result
}

/// `compact_all`'s step: every table of `tree`'s `level` merged into `out_level` with the
/// tables there it overlaps.
fn compact_whole_level(
    inner: &DbInner,
    tree: &Arc<Tree>,
    level: usize,
    out_level: usize,
) -> Result<()> {
    let v = &tree.version;
    let inputs = v.levels[level].clone();
    let (lo, hi) = user_range(&inputs);
    let next_inputs = v.overlapping(out_level, &lo, &hi);
    let reason = CompactionReason::Manual;
    let relocate = picker::blob_gc_files(&inner.load_state().trees, tree, true);
    let tree = tree.clone();
    run_locked(inner, Compaction { tree, level, out_level, inputs, next_inputs, reason, relocate })
}

/// Rewrites, in place, the tables of keyspace `id`'s last level that `compact_all` (which
/// began when file number `first_new` was next) has not written: the merge into the last
/// level rewrites only the tables the level above overlaps, and a compaction filter must
/// see the rest too (`whole`). And every table, written by this call or not, referencing a
/// blob file that holds garbage: the merge is what made most of it garbage (it dropped the
/// overwritten versions' references), so only now can the rest of its values move out. Each
/// step takes a run of neighbouring such tables, so its output cannot overlap a table of the
/// level it leaves alone; an output references no file it collected, so the steps end.
fn rewrite_last_level<'a>(
    inner: &'a DbInner,
    id: crate::version::edit::KeyspaceId,
    first_new: u64,
    whole: bool,
    mut slot: std::sync::RwLockWriteGuard<'a, ()>,
) -> Result<std::sync::RwLockWriteGuard<'a, ()>> {
    loop {
        if inner.closed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(crate::Error::Closed);
        }
        slot = pause_for_ingests(inner, slot)?;
        let Some(tree) = inner.load_state().tree(id).cloned() else { return Ok(slot) };
        let v = &tree.version;
        let Some(last) = (1..NUM_LEVELS).rev().find(|&l| !v.levels[l].is_empty()) else {
            return Ok(slot);
        };
        let relocate = picker::blob_gc_files(&inner.load_state().trees, &tree, true);
        let collects = |t: &TableFile| {
            t.meta.blob_refs.iter().any(|r| relocate.binary_search(&r.file).is_ok())
        };
        let old = |t: &&Arc<TableFile>| (whole && t.meta.number < first_new) || collects(t);
        let level = &v.levels[last];
        let Some(start) = level.iter().position(|t| old(&t)) else { return Ok(slot) };
        let inputs: Vec<Arc<TableFile>> = level[start..].iter().take_while(old).cloned().collect();
        let reason = CompactionReason::Manual;
        let c = Compaction {
            tree: tree.clone(),
            level: last,
            out_level: last,
            inputs,
            next_inputs: Vec::new(),
            reason,
            relocate,
        };
        run_locked(inner, c)?;
    }
}

/// True when the compaction's input tables may simply be moved down a level: nothing on the
/// output level overlaps them, nor do they each other, so merging would copy them byte for
/// byte. A sequential load
/// then writes each table once; a random one skips rewriting the first tables to reach an
/// empty level. As in LevelDB, not when the table overlaps much of the level below the
/// output (the later compaction of the moved table into it would be that much larger); never
/// for a manual compaction, which promises to drop what is obsolete; never under a budget
/// (`FilterPolicy::Budgeted`, `BudgetedRibbon`), whose filters are sized for the run their
/// table is written into: a moved table would keep a share meant for another run; and never
/// across a Ribbon policy's `bloom_before_level`, where a moved table would keep its Bloom
/// filter on a level of Ribbon filters.
fn may_move(c: &Compaction) -> bool {
    let filter_changes = match c.tree.opts.filter_policy {
        FilterPolicy::Budgeted { .. } | FilterPolicy::BudgetedRibbon { .. } => true,
        FilterPolicy::Ribbon { bloom_before_level, .. } => {
            c.level < usize::from(bloom_before_level)
                && c.out_level >= usize::from(bloom_before_level)
        }
        _ => false,
    };
    if c.inputs.is_empty()
        || c.out_level == c.level
        || !c.next_inputs.is_empty()
        || c.reason == CompactionReason::Manual
        || c.reason == CompactionReason::Expiry
        // A moved table keeps its creation time, and would be due again at once.
        || c.reason == CompactionReason::Periodic
        // Moved, a table keeps its references, and the blob file would still be due.
        || c.reason == CompactionReason::BlobGarbage
        || filter_changes
    {
        return false;
    }
    // L0 tables may overlap each other; moved together they must not.
    let mut by_key: Vec<&Arc<TableFile>> = c.inputs.iter().collect();
    by_key.sort_by(|a, b| a.smallest_user_key().cmp(b.smallest_user_key()));
    if by_key.windows(2).any(|w| w[0].largest_user_key() >= w[1].smallest_user_key()) {
        return false;
    }
    let below = c.level + 2;
    below >= NUM_LEVELS
        || c.inputs.iter().all(|t| {
            let overlap: u64 = c
                .tree
                .version
                .overlapping(below, t.smallest_user_key(), t.largest_user_key())
                .iter()
                .map(|t| t.meta.file_size)
                .sum();
            overlap <= 10 * c.tree.opts.target_table_bytes
        })
}

/// Moves the compaction's input tables down a level as they are (see [`may_move`]).
fn move_down(
    inner: &DbInner,
    c: &Compaction,
    mut info: CompactionInfo,
    started: Instant,
) -> Result<()> {
    let out_level = c.out_level;
    let mut edit = VersionEdit::default();
    for t in &c.inputs {
        edit.deleted.push((c.level, t.meta.number));
        edit.added.push((out_level, t.meta.clone()));
    }
    inner.install(&mut edit, &c.inputs, None)?;
    info.output_tables = c.inputs.len();
    info.duration = started.elapsed();
    inner.counters.level(out_level, |l| {
        l.tables_moved += c.inputs.len() as u64;
        l.bytes_moved += c.inputs.iter().map(|t| t.meta.file_size).sum::<u64>();
    });
    inner.events.compaction_end(&info);
    Ok(())
}

/// Drops a FIFO keyspace's tables: one manifest edit deleting them, nothing read or
/// written. Their files go when the last reader lets go of them, as a compaction's inputs.
fn drop_tables(inner: &DbInner, c: &Compaction, mut info: CompactionInfo) -> Result<()> {
    let started = Instant::now();
    inner.events.compaction_begin(&info);
    let mut edit = VersionEdit::default();
    edit.deleted.extend(c.inputs.iter().map(|t| (c.level, t.meta.number)));
    inner.install(&mut edit, &[], None)?;
    inner.counters.keyspace(c.tree.id, |k| k.fifo_tables_dropped += c.inputs.len() as u64);
    info.duration = started.elapsed();
    inner.events.compaction_end(&info);
    Ok(())
}

fn run_locked(inner: &DbInner, c: Compaction) -> Result<()> {
    let tree = c.tree.clone();
    let v = &tree.version;
    let out_level = c.out_level;
    let bytes = |tables: &[Arc<TableFile>]| tables.iter().map(|t| t.meta.file_size).sum::<u64>();
    // An L0 merge or an in-place rewrite reads only its own level.
    let (from_above, from_level) = match c.level == out_level {
        true => (0, bytes(&c.inputs) + bytes(&c.next_inputs)),
        false => (bytes(&c.inputs), bytes(&c.next_inputs)),
    };
    let input_bytes = from_above + from_level;
    let started = Instant::now();
    let mut info = CompactionInfo {
        keyspace: tree.name.to_string(),
        reason: c.reason,
        input_level: c.level,
        output_level: out_level,
        input_level_tables: c.inputs.len(),
        output_level_tables: c.next_inputs.len(),
        input_bytes,
        output_tables: 0,
        output_bytes: 0,
        parts: 0,
        duration: Duration::ZERO,
        moved: false,
    };
    if matches!(c.reason, CompactionReason::FifoBytes | CompactionReason::FifoAge) {
        return drop_tables(inner, &c, info);
    }
    if may_move(&c) {
        info.moved = true;
        inner.events.compaction_begin(&info);
        return move_down(inner, &c, info, started);
    }
    inner.events.compaction_begin(&info);
    // What lies beneath the output, where an older version of a key may be: the deeper
    // levels, and for an L0 merge the older L0 tables too, each a "level" of its own, since
    // L0 tables overlap each other.
    let is_input = |t: &Arc<TableFile>| c.inputs.iter().any(|i| Arc::ptr_eq(i, t));
    let older_l0 = v.levels[0].iter().filter(|t| out_level == 0 && !is_input(t));
    let deeper: Vec<Vec<Arc<TableFile>>> = older_l0
        .map(|t| vec![t.clone()])
        .chain(v.levels[out_level + 1..].iter().cloned())
        .collect();
    // Every part's tables join one run, so they share one filter size, from the tree as it
    // will be once this compaction installs (the entries of the inputs bound the output's).
    let replaced: Vec<Arc<TableFile>> = c.inputs.iter().chain(&c.next_inputs).cloned().collect();
    let keys = replaced.iter().fold(0u64, |a, t| a.saturating_add(t.meta.num_entries));
    let placement = Placement { level: out_level, keys, replaces: &replaced };
    let filter = table_filters(&tree.opts, v, &placement);
    // An L0 output is one table, one run (see `picker::pick_runs`): not split.
    let bounds = match out_level {
        0 => Vec::new(),
        l => split_points(&c, inner.opts.max_subcompactions, tree.opts.table_bytes_at(l)),
    };
    // One part per key range between split points, each merged and written by its own thread
    // (the first on this one): a compaction is CPU-bound — merging, building blocks and
    // filters, checksums — and a single thread for it left the second core idle whenever the
    // writer was held back waiting for it. Parts split between user keys, so each key's
    // versions are all in one part and the level stays sorted and non-overlapping.
    let parts: Vec<PartRange> = (0..=bounds.len())
        .map(|i| {
            let after = i.checked_sub(1).map(|p| bounds[p].as_slice());
            (after, bounds.get(i).map(Vec::as_slice))
        })
        .collect();
    let range_dels = compaction_range_tombstones(v, &replaced);
    let run =
        |&(after, upto): &PartRange| run_part(inner, &c, &deeper, &range_dels, filter, after, upto);
    let results: Vec<Result<PartOutput>> = if parts.len() == 1 {
        vec![run(&parts[0])]
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = parts[1..].iter().map(|p| scope.spawn(move || run(p))).collect();
            let mut results = vec![run(&parts[0])];
            for h in handles {
                results.push(h.join().unwrap_or_else(|_| {
                    Err(crate::Error::io(
                        "compacting",
                        std::io::Error::other("a compaction thread panicked"),
                    ))
                }));
            }
            results
        })
    };
    let mut outputs: Vec<TableMeta> = Vec::new();
    let mut blob_metas: Vec<BlobFileMeta> = Vec::new();
    let mut first_error = None;
    let mut filtered = FilterCounts::default();
    for r in results {
        match r {
            Ok((mut metas, counts, mut blobs)) => {
                outputs.append(&mut metas);
                blob_metas.append(&mut blobs);
                filtered.removed += counts.removed;
                filtered.expired += counts.expired;
                filtered.changed += counts.changed;
                filtered.failed += counts.failed;
                // Parts come in key order.
                if filtered.first_failure.is_none() {
                    filtered.first_failure = counts.first_failure;
                }
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        // Nothing refers to the tables and blob files the other parts wrote.
        inner.remove_tables(&outputs);
        inner.remove_blob_files(&blob_metas);
        return Err(e);
    }
    let blob_bytes: u64 = blob_metas.iter().map(|m| m.file_size).sum();
    let opened = inner.fs.sync_dir(&inner.dir).and_then(|()| {
        let new_blobs = inner.open_blob_files(&blob_metas);
        // References carried through point into the blob files the inputs hold.
        let lookup = super::table_files::blobs_in([&**v], &new_blobs);
        outputs.iter().map(|m| inner.open_table(m.clone(), &lookup)).collect::<Result<Vec<_>>>()
    });
    let opened = match opened {
        Ok(opened) => opened,
        Err(e) => {
            // No edit names them yet: on a full disk, a resume would go on beside them.
            inner.remove_tables(&outputs);
            inner.remove_blob_files(&blob_metas);
            return Err(e);
        }
    };

    let mut edit = VersionEdit { added_blobs: blob_metas, ..VersionEdit::default() };
    for t in &c.inputs {
        edit.deleted.push((c.level, t.meta.number));
    }
    for t in &c.next_inputs {
        edit.deleted.push((out_level, t.meta.number));
    }
    for m in &outputs {
        edit.added.push((out_level, m.clone()));
    }
    if let Err(e) = inner.install(&mut edit, &opened, None) {
        let tables = outputs.iter().map(|m| crate::filename::table_path(&inner.dir, m.number));
        let blobs =
            edit.added_blobs.iter().map(|m| crate::filename::blob_path(&inner.dir, m.number));
        lock(&inner.unsettled_outputs).extend(tables.chain(blobs));
        return Err(e);
    }
    let written: u64 = outputs.iter().map(|m| m.file_size).sum();
    inner.counters.compactions.incr();
    inner.counters.compaction_parts.add(parts.len() as u64);
    inner.counters.compaction_bytes_read.add(input_bytes);
    inner.counters.compaction_bytes_written.add(written);
    inner.counters.blob_bytes_written.add(blob_bytes);
    inner.counters.compaction_filter_removed.add(filtered.removed);
    inner.counters.compaction_filter_changed.add(filtered.changed);
    inner.counters.compaction_expired_dropped.add(filtered.expired);
    inner.counters.compaction_filter_failed.add(filtered.failed);
    inner.counters.keyspace(tree.id, |k| {
        k.compactions += 1;
        k.compaction_bytes_read += input_bytes;
        k.compaction_bytes_written += written;
        k.compaction_filter_removed += filtered.removed;
        k.compaction_filter_changed += filtered.changed;
        k.compaction_expired_dropped += filtered.expired;
        k.compaction_filter_failed += filtered.failed;
    });
    info.output_tables = outputs.len();
    info.output_bytes = written;
    info.parts = parts.len();
    info.duration = started.elapsed();
    inner.counters.level(out_level, |l| {
        l.runs += 1;
        l.bytes_read_from_above += from_above;
        l.bytes_read_from_level += from_level;
        l.bytes_written += written;
        l.micros += info.duration.as_micros() as u64;
    });
    if let Some((key, reason)) = filtered.first_failure {
        inner.events.compaction_filter_error(&CompactionFilterErrorInfo {
            keyspace: tree.name.to_string(),
            level: out_level,
            failed: filtered.failed,
            key,
            reason,
        });
    }
    inner.events.compaction_end(&info);
    Ok(())
}

/// What one part wrote: its tables, what its filter stage did, and its blob files.
type PartOutput = (Vec<TableMeta>, FilterCounts, Vec<BlobFileMeta>);

/// A part's user keys: after the first bound (exclusive), up to the second (inclusive);
/// `None` is unbounded.
type PartRange<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// User keys at which to split a compaction into at most `max_parts` parts of about equal
/// input size, ascending. The output level's input tables' boundaries serve when there are
/// enough of them (for one table compacted into the level below, nearly all of the input);
/// otherwise the index of the largest input table, whose block separators are spread evenly
/// through its bytes. Small compactions are not split: a part costs a thread start, and each
/// part ends its last table short, so each part gets at least a table's worth of input.
fn split_points(c: &Compaction, max_parts: usize, table_bytes: u64) -> Vec<Vec<u8>> {
    let total: u64 = c.inputs.iter().chain(&c.next_inputs).map(|t| t.meta.file_size).sum();
    let largest = c.inputs.iter().chain(&c.next_inputs).map(|t| t.meta.file_size).max();
    let min_part = largest.unwrap_or(0).max(table_bytes).max(1);
    let parts = (max_parts as u64).min(total / min_part).max(1) as usize;
    if parts < 2 {
        return Vec::new();
    }
    let candidates: Vec<(Vec<u8>, u64)> = if c.next_inputs.len() >= parts {
        // Each boundary after a table, weighted by that table's size.
        c.next_inputs[..c.next_inputs.len() - 1]
            .iter()
            .map(|t| (t.largest_user_key().to_vec(), t.meta.file_size))
            .collect()
    } else {
        let Some(t) = c.inputs.iter().chain(&c.next_inputs).max_by_key(|t| t.meta.file_size) else {
            return Vec::new();
        };
        t.table
            .index_entries()
            .map(|(sep, handle)| (key::user_key(sep).to_vec(), handle.size))
            .collect()
    };
    let weight: u64 = candidates.iter().map(|(_, w)| w).sum::<u64>().max(1);
    let mut bounds: Vec<Vec<u8>> = Vec::new();
    let mut seen = 0u64;
    for (k, w) in candidates {
        seen += w;
        let wanted = bounds.len() as u64 + 1;
        let due = bounds.len() + 1 < parts && seen * parts as u64 >= wanted * weight;
        if due && bounds.last().map_or(true, |b| b < &k) {
            bounds.push(k);
        }
    }
    bounds
}

/// Merges the inputs' entries with user keys in `(after, upto]` (unbounded where `None`) and
/// writes them into tables of about `target_table_bytes`.
fn run_part(
    inner: &DbInner,
    c: &Compaction,
    deeper: &[Vec<Arc<TableFile>>],
    range_dels: &CompactionTombstones,
    filter: TableFilters,
    after: Option<&[u8]>,
    upto: Option<&[u8]>,
) -> Result<PartOutput> {
    let mut children: Vec<Box<dyn BidirectionalIterator>> = Vec::new();
    // L0 inputs newest first, then the older level: the merge prefers earlier children for
    // equal keys, though distinct sequence numbers make ties impossible.
    for t in &c.inputs {
        // A compaction reads each input block once: caching them would only evict the
        // blocks readers use.
        children.push(Box::new(t.table.iter_ahead()));
    }
    // The output level's tables are sorted and disjoint: one child that reads them in turn,
    // so each merge step compares two or a few children instead of one per table.
    children.push(Box::new(LevelIter::for_compaction(c.next_inputs.clone())));
    let base_level = move |uk: &[u8]| nothing_below(deeper, uk);
    let bounded = KeyRangePart::new(MergingIterator::new(children), after, upto);
    let merged = NewestVersions::new(bounded, Box::new(base_level))
        .with_range_tombstones(range_dels.all.clone());
    // This part's user keys are (after, upto], that is [after ++ 0, upto ++ 0).
    let (lo, hi) = (after.map(successor), upto.map(successor));
    let mut split = TombstoneSplit::new(clip(&range_dels.kept, lo.as_deref(), hi.as_deref()));
    let user_filter = c.tree.opts.compaction_filter.0.as_deref();
    let expiring = c.inputs.iter().chain(&c.next_inputs).any(|t| t.expiry().is_some());
    let nothing_below = move |uk: &[u8]| nothing_below(deeper, uk);
    let now = inner.clock.now();
    let mut merged = MergeStage::new(merged, c.tree.merger(), now, &nothing_below)
        .with_blobs(c.tree.version.blobs.clone());
    // Garbage collection: references into the files the picker chose are relocated, so that
    // those files lose their references as compactions pass over their tables.
    let live = c.tree.version.blobs.clone();
    let mut blobs = inner.separator(&c.tree).relocating(c.relocate.clone(), live);
    // An L0 output is one table, however large (see `picker::pick_runs`); deeper levels'
    // tables grow with the level.
    let sized;
    let out_tree = match c.out_level {
        1 => &c.tree,
        level => {
            let mut t = (*c.tree).clone();
            t.opts.target_table_bytes = match level {
                0 => u64::MAX,
                _ => t.opts.table_bytes_at(level),
            };
            sized = Arc::new(t);
            &sized
        }
    };
    let written = (|| {
        if user_filter.is_none() && !expiring {
            merged.seek_to_first()?;
            let tables =
                inner.write_tables(out_tree, &mut merged, &mut split, filter, &mut blobs)?;
            return Ok((tables, FilterCounts::default()));
        }
        let mut filtered =
            FilterStage::new(merged, user_filter, now, c.out_level, &c.tree, &nothing_below);
        filtered.seek_to_first()?;
        let tables = inner.write_tables(out_tree, &mut filtered, &mut split, filter, &mut blobs)?;
        let (removed, changed, expired) = (filtered.removed, filtered.changed, filtered.expired);
        let (failed, first_failure) = (filtered.failed, filtered.first_failure.take());
        Ok((tables, FilterCounts { removed, changed, expired, failed, first_failure }))
    })();
    let (tables, counts) = match written {
        Ok(w) => w,
        Err(e) => {
            blobs.abandon();
            return Err(e);
        }
    };
    match blobs.finish() {
        Ok(blob_metas) => Ok((tables, counts, blob_metas)),
        Err(e) => {
            inner.remove_tables(&tables);
            Err(e)
        }
    }
}

/// What a compaction's [`FilterStage`]s did, summed over its parts.
#[derive(Debug, Default, Clone)]
struct FilterCounts {
    removed: u64,
    changed: u64,
    /// Expired values dropped (or replaced by tombstones).
    expired: u64,
    /// Values the filter failed on, kept as they were.
    failed: u64,
    /// The first of them in key order: its user key, and the reason.
    first_failure: Option<(Vec<u8>, String)>,
}

/// True when no level in `deeper` has a table whose range covers `uk`, so nothing older
/// than the compaction's inputs holds the key. Deeper levels are sorted and
/// non-overlapping, so one binary search per level finds the only candidate (this runs for
/// every tombstone a compaction meets).
fn nothing_below(deeper: &[Vec<Arc<TableFile>>], uk: &[u8]) -> bool {
    !deeper.iter().any(|level| {
        let i = level.partition_point(|t| t.largest_user_key() < uk);
        level.get(i).is_some_and(|t| t.smallest_user_key() <= uk)
    })
}

/// A compaction's range tombstones: all of its inputs' (which drop the entries they cover)
/// and the pieces the output keeps.
struct CompactionTombstones {
    all: Option<Arc<Fragments>>,
    /// Disjoint, sorted, at their newest sequence numbers.
    kept: Vec<RangeTombstone>,
}

/// The inputs' range tombstones, and which of them the output must keep: a piece can go
/// once no table outside the compaction, on any level, overlaps it and holds anything
/// written before it — then nothing it could cover is left anywhere. (Memtables only hold
/// writes newer than every table.) Tables' key ranges include their tombstones, so a
/// tombstone-only table counts too, harmlessly.
fn compaction_range_tombstones(v: &Version, inputs: &[Arc<TableFile>]) -> CompactionTombstones {
    let all = Fragments::new(inputs.iter().flat_map(|t| t.table.range_tombstones()));
    if all.is_empty() {
        return CompactionTombstones { all: None, kept: Vec::new() };
    }
    let is_input = |t: &Arc<TableFile>| inputs.iter().any(|i| Arc::ptr_eq(i, t));
    let outside: Vec<&Arc<TableFile>> =
        v.levels.iter().flatten().filter(|t| !is_input(t)).collect();
    let kept = all
        .newest()
        .into_iter()
        .filter(|p| {
            outside.iter().any(|t| {
                t.meta.smallest_seq < p.seq
                    && t.smallest_user_key() < p.end.as_slice()
                    && t.largest_user_key() >= p.start.as_slice()
            })
        })
        .collect();
    CompactionTombstones { all: Some(Arc::new(all)), kept }
}

/// The entries of `inner` whose user keys lie in `(after, upto]`.
struct KeyRangePart<'a, I: InternalIterator> {
    inner: I,
    after: Option<&'a [u8]>,
    upto: Option<&'a [u8]>,
    /// Whether `inner` stands on an entry within the range, found once per move: the layers
    /// above ask `valid` several times per entry.
    within: bool,
}

impl<'a, I: InternalIterator> KeyRangePart<'a, I> {
    fn new(inner: I, after: Option<&'a [u8]>, upto: Option<&'a [u8]>) -> Self {
        KeyRangePart { inner, after, upto, within: false }
    }

    /// Steps over entries at or before `after`: the seek lands on the first version of the
    /// `after` key itself when one exists.
    fn skip_after(&mut self) -> Result<()> {
        if let Some(after) = self.after {
            while self.inner.valid() && key::user_key(self.inner.key()) <= after {
                self.inner.next()?;
            }
        }
        Ok(())
    }

    /// Notes whether `inner`, just moved by `moved`, stands within the range.
    fn settle(&mut self, moved: Result<()>) -> Result<()> {
        self.within = false;
        moved?;
        self.within =
            self.inner.valid() && self.upto.map_or(true, |u| key::user_key(self.inner.key()) <= u);
        Ok(())
    }
}

impl<I: InternalIterator> InternalIterator for KeyRangePart<'_, I> {
    fn valid(&self) -> bool {
        self.within
    }
    fn key(&self) -> &[u8] {
        self.inner.key()
    }
    fn value(&self) -> &[u8] {
        self.inner.value()
    }
    fn next(&mut self) -> Result<()> {
        let moved = self.inner.next();
        self.settle(moved)
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let moved = self.inner.seek(target).and_then(|()| self.skip_after());
        self.settle(moved)
    }
    fn seek_to_first(&mut self) -> Result<()> {
        let moved = match self.after {
            // The last internal key of `after` sorts at or before every entry past it.
            Some(after) => self.inner.seek(&key::internal_key(after, 0, key::ValueKind::Delete)),
            None => self.inner.seek_to_first(),
        };
        let moved = moved.and_then(|()| self.skip_after());
        self.settle(moved)
    }
}
