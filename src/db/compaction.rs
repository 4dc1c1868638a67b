//! Leveled compaction.
//!
//! Picking (in priority order):
//! - L0 → L1 when L0 holds `l0_compaction_trigger` tables: every L0 table (they may overlap
//!   each other) plus the L1 tables they overlap.
//! - Ln → Ln+1 for the level most over its target size (`level_base_bytes` for L1, times
//!   `level_size_ratio` per level below): one table, chosen round-robin after the last one
//!   compacted on that level, plus the Ln+1 tables it overlaps.
//!
//! Running: the inputs are merged; only the newest version of each key is kept (readers and
//! snapshots that need older versions hold the input files alive themselves); a tombstone is
//! dropped when no level below the output holds the key. Output is split into tables of about
//! `target_table_bytes`, never between two versions of one key, so sorted levels never overlap.
//! The new tables go in and the inputs come out in one manifest edit; input files are deleted
//! when the last reader lets go of them.

use std::sync::Arc;

use super::newest_versions::NewestVersions;
use super::{lock_mutex as lock, DbInner, DbState};
use crate::iter::InternalIterator;
use crate::merge::MergingIterator;
use crate::version::edit::VersionEdit;
use crate::version::set::{TableFile, Version, NUM_LEVELS};
use crate::Result;

/// One compaction's inputs. Only built and run while holding `DbInner::compaction_slot`;
/// flushes only ever add L0 tables, and an ingest adds tables only while holding the slot, so
/// the inputs stay live, and the levels below them unchanged, until the compaction installs.
#[derive(Debug)]
pub(crate) struct Compaction {
    pub level: usize,
    pub inputs: Vec<Arc<TableFile>>,
    pub next_inputs: Vec<Arc<TableFile>>,
}

fn level_target(inner: &DbInner, level: usize) -> u64 {
    let mut t = inner.opts.level_base_bytes;
    for _ in 1..level {
        t = t.saturating_mul(inner.opts.level_size_ratio);
    }
    t
}

/// The level most in need of compaction and how badly (≥ 1.0 means needed).
fn score(inner: &DbInner, v: &Version) -> (usize, f64) {
    let mut best = (0, v.levels[0].len() as f64 / inner.opts.l0_compaction_trigger as f64);
    for level in 1..NUM_LEVELS - 1 {
        let s = v.level_bytes(level) as f64 / level_target(inner, level) as f64;
        if s > best.1 {
            best = (level, s);
        }
    }
    best
}

pub(crate) fn needs_compaction(inner: &DbInner, state: &DbState) -> bool {
    score(inner, &state.version).1 >= 1.0
}

fn user_range(tables: &[Arc<TableFile>]) -> (Vec<u8>, Vec<u8>) {
    let smallest = tables.iter().map(|t| t.smallest_user_key()).min().unwrap_or_default().to_vec();
    let largest = tables.iter().map(|t| t.largest_user_key()).max().unwrap_or_default().to_vec();
    (smallest, largest)
}

fn pick(inner: &DbInner, v: &Version) -> Option<Compaction> {
    let (level, s) = score(inner, v);
    if s < 1.0 {
        return None;
    }
    let inputs = if level == 0 {
        v.levels[0].clone()
    } else {
        let mut bg = lock(&inner.bg);
        if bg.compact_cursor.len() < NUM_LEVELS {
            bg.compact_cursor.resize(NUM_LEVELS, Vec::new());
        }
        let cursor = &bg.compact_cursor[level];
        let t = v.levels[level]
            .iter()
            .find(|t| cursor.is_empty() || t.largest_user_key() > cursor.as_slice())
            .or_else(|| v.levels[level].first())?
            .clone();
        bg.compact_cursor[level] = t.largest_user_key().to_vec();
        vec![t]
    };
    let (lo, hi) = user_range(&inputs);
    let next_inputs = v.overlapping(level + 1, &lo, &hi);
    Some(Compaction { level, inputs, next_inputs })
}

/// Runs one compaction if any level needs it. Background thread.
pub(crate) fn maybe_compact(inner: &DbInner) -> Result<()> {
    // Pick under the slot: a manual compaction that ran while we waited for it may have
    // replaced any table we would otherwise have chosen.
    let _slot = lock(&inner.compaction_slot);
    if lock(&inner.bg).manual_compaction {
        return Ok(());
    }
    let state = inner.load_state();
    match pick(inner, &state.version) {
        Some(c) => run_locked(inner, &state.version, c),
        None => Ok(()),
    }
}

/// Compacts every level into the one below, top to bottom, until all data sits in the deepest
/// level in use. Holds off background compactions meanwhile (flushes go on).
pub(crate) fn compact_all(inner: &DbInner) -> Result<()> {
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
    // The background thread may be mid-compaction; it checks `manual_compaction` only between
    // steps, so wait for it by taking the compaction slot it holds while running.
    let result = (|| -> Result<()> {
        let _slot = lock(&inner.compaction_slot);
        let state = inner.load_state();
        let last =
            (0..NUM_LEVELS).rev().find(|&l| !state.version.levels[l].is_empty()).unwrap_or(0);
        drop(state);
        for level in 0..NUM_LEVELS - 1 {
            if inner.closed.load(std::sync::atomic::Ordering::Acquire) {
                return Err(crate::Error::Closed);
            }
            let state = inner.load_state();
            let v = &state.version;
            if v.levels[level].is_empty() || (level >= last && level > 0) {
                continue;
            }
            let inputs = v.levels[level].clone();
            let (lo, hi) = user_range(&inputs);
            let next_inputs = v.overlapping(level + 1, &lo, &hi);
            run_locked(inner, v, Compaction { level, inputs, next_inputs })?;
        }
        Ok(())
    })();
    let mut bg = lock(&inner.bg);
    bg.manual_compaction = false;
    if let Err(e) = &result {
        if bg.error.is_none() {
            bg.error = Some(e.clone());
            inner.has_bg_error.store(true, std::sync::atomic::Ordering::Release);
        }
    }
    inner.bg_cv.notify_all();
    inner.bg_done_cv.notify_all();
    result
}

fn run_locked(inner: &DbInner, v: &Version, c: Compaction) -> Result<()> {
    let out_level = c.level + 1;
    let mut children: Vec<Box<dyn InternalIterator>> = Vec::new();
    // L0 inputs newest first, then the older level: the merge prefers earlier children for
    // equal keys, though distinct sequence numbers make ties impossible.
    for t in c.inputs.iter().chain(&c.next_inputs) {
        children.push(Box::new(t.table.iter()));
    }
    let input_bytes: u64 = c.inputs.iter().chain(&c.next_inputs).map(|t| t.meta.file_size).sum();
    let deeper: Vec<Vec<Arc<TableFile>>> = v.levels[out_level + 1..].to_vec();
    let base_level = move |uk: &[u8]| {
        // A tombstone can go when no deeper level has a table whose range covers the key.
        // Deeper levels are sorted and non-overlapping, so one binary search per level finds
        // the only candidate (this runs for every tombstone a compaction meets).
        !deeper.iter().any(|level| {
            let i = level.partition_point(|t| t.largest_user_key() < uk);
            level.get(i).is_some_and(|t| t.smallest_user_key() <= uk)
        })
    };
    let mut merged = NewestVersions::new(MergingIterator::new(children), Box::new(base_level));
    merged.seek_to_first()?;

    let outputs = inner.write_tables(&mut merged)?;
    inner.fs.sync_dir(&inner.dir)?;
    let opened = outputs.iter().map(|m| inner.open_table(m.clone())).collect::<Result<Vec<_>>>()?;

    let mut edit = VersionEdit::default();
    for t in &c.inputs {
        edit.deleted.push((c.level, t.meta.number));
    }
    for t in &c.next_inputs {
        edit.deleted.push((out_level, t.meta.number));
    }
    for m in &outputs {
        edit.added.push((out_level, m.clone()));
    }
    inner.install(&mut edit, &opened, None)?;
    let written: u64 = outputs.iter().map(|m| m.file_size).sum();
    inner.counters.compactions.incr();
    inner.counters.compaction_bytes_read.add(input_bytes);
    inner.counters.compaction_bytes_written.add(written);
    Ok(())
}
