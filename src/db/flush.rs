//! Flush: the oldest immutable memtables (one per keyspace, holding one WAL segment's writes)
//! become L0 tables.
//!
//! 1. Build the table from the memtable (newest version of each key, unless one of the
//!    memtable's range tombstones covers it; tombstones of both kinds are kept, older data
//!    may lie below). The builder fsyncs the file; the directory is fsynced too.
//! 2. Record it in the manifest together with the new log number — the WAL number of the oldest
//!    memtable still unflushed — and fsync the manifest. From here on the table, not the WAL,
//!    holds these writes.
//! 3. Swap in a state without the memtable and with the table, then delete the WAL segments
//!    below the new log number.
//!
//! When the memtables' large values make up at least half of their WAL segment, the segment
//! is kept as a blob file instead of deleted, and the tables reference the values where it
//! holds them: the values are not written a second time. The manifest edit of step 2 records
//! it (tag 18); until then it is an ordinary segment recovery replays. Memtables that hold
//! their large values as references into the segment (`write::LoggedValues`) say where
//! they lie; only for values held inline (expiring puts) is the segment read and indexed
//! (`kept_wal.rs`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::kept_wal::{worth_keeping, SegmentIndex};
use super::{lock_mutex as lock, DbInner, DbState};
use crate::blob::{BlobFile, BlobFileKind, BlobFileMeta, BlobRef};
use crate::events::FlushInfo;
use crate::filename::wal_path;
use crate::iter::InternalIterator;
use crate::key::{self, ValueKind, EXPIRY_LEN};
use crate::range_del::TombstoneSplit;
use crate::version::edit::{KeyspaceId, VersionEdit};
use crate::Result;
use bloomkv_tree::compact::merge_stage::MergeStage;
use bloomkv_tree::compact::newest::NewestVersions;
use bloomkv_tree::filter_budget::{table_filters, Placement};

/// Flushes the oldest immutable memtables: one per keyspace, all holding the writes of the
/// same WAL segment, into one L0 table per keyspace that has data, recorded in one manifest
/// edit. Runs on the flush thread.
pub(crate) fn flush_oldest(inner: &DbInner) -> Result<()> {
    let state = inner.load_state();
    let default = state.default_tree();
    let Some((oldest_wal, segment_last_seq, sealed, wal_len)) =
        default.imm.last().map(|m| (m.wal_number, m.last_seq, m.sealed, m.wal_len))
    else {
        return Ok(());
    };
    // The oldest memtables still unflushed after these: their WAL is the new log number.
    let next_wal = default.imm.iter().rev().nth(1).unwrap_or(&default.mem).wal_number;

    let started = Instant::now();
    // The keyspaces with something to flush, each with its event.
    let mut jobs: Vec<(KeyspaceId, FlushInfo)> = Vec::new();
    for tree in &state.trees {
        let Some(oldest) = tree.imm.last() else { continue };
        debug_assert_eq!(oldest.wal_number, oldest_wal, "keyspaces' memtables out of step");
        if !oldest.table.is_empty() {
            let info = FlushInfo {
                keyspace: tree.name.to_string(),
                memtable_entries: oldest.table.len() as u64,
                memtable_bytes: oldest.table.approximate_bytes() as u64,
                tables: 0,
                table_bytes: 0,
                duration: Duration::ZERO,
            };
            inner.events.flush_begin(&info);
            jobs.push((tree.id, info));
        }
    }

    // Decided here, once for the segment: every keyspace's memtable of it is flushed below,
    // into the one manifest edit that keeps the segment or retires it. Memtables that hold
    // their large values as references into it (`write::LoggedValues`) tell what their
    // tables would reference without reading it; their values are relocated (copied out,
    // read from it) if it is not kept.
    let logged = held_segment(&state, oldest_wal);
    let keep_logged =
        logged.is_some() && sealed && worth_keeping(referenced_in(&state, oldest_wal), wal_len);
    let relocate = logged.as_ref().filter(|_| !keep_logged).map(|_| vec![oldest_wal]);
    let segment = match (&logged, sealed) {
        (None, true) => segment_to_keep(inner, &state, oldest_wal),
        _ => None,
    };
    let mut metas = Vec::new();
    // Which job each of `metas` belongs to.
    let mut owners = Vec::new();
    // The blob files each keyspace's large values went to.
    let mut separators = Vec::new();
    let written = (|| -> Result<()> {
        for (job, (id, _)) in jobs.iter().enumerate() {
            let Some(tree) = state.tree(*id) else { continue };
            let Some(oldest) = tree.imm.last() else { continue };
            let placement = Placement { level: 0, keys: oldest.table.len() as u64, replaces: &[] };
            let filter = table_filters(&tree.opts, &tree.version, &placement);
            let number = inner.file_numbers.fetch_add(1, Ordering::SeqCst);
            let range_dels = oldest.table.range_tombstones();
            let newest = NewestVersions::new(oldest.table.iter(), Box::new(|_| false))
                .with_range_tombstones(range_dels.clone());
            // Tables below may hold the keys: operands fold only onto what the memtable holds.
            let below = |_: &[u8]| false;
            let now = inner.clock.now();
            let mut it = MergeStage::new(newest, tree.merger(), now, &below);
            it.seek_to_first()?;
            let mut split = TombstoneSplit::of(range_dels.as_deref());
            separators.push(match (&segment, &relocate) {
                (Some(s), _) => inner.separator(tree).in_segment(s.clone(), tree.id),
                (None, Some(files)) => {
                    inner.separator(tree).relocating(files.clone(), tree.blobs())
                }
                (None, None) => inner.separator(tree),
            });
            let Some(blobs) = separators.last_mut() else { continue };
            if let Some(meta) =
                inner.write_table(tree, number, &mut it, &mut split, filter, blobs)?
            {
                metas.push(meta);
                owners.push(job);
            }
        }
        Ok(())
    })();
    // Values over `MAX_VALUE_BYTES` written straight to files of their own: each is adopted
    // below if a table references it, and otherwise goes with the memtable.
    let held: Vec<_> = jobs
        .iter()
        .filter_map(|(id, _)| state.tree(*id)?.imm.last())
        .flat_map(|m| m.table.held_blobs())
        .filter(|b| b.meta.kind != BlobFileKind::WalSegment)
        .collect();
    drop(state);
    let finished = written.and_then(|()| {
        let mut all = Vec::new();
        for s in separators.drain(..) {
            all.extend(s.finish()?);
        }
        Ok(all)
    });
    let mut blob_metas = match finished {
        Ok(b) => b,
        Err(e) => {
            // Nothing refers to the tables and blob files written so far if one failed.
            inner.remove_tables(&metas);
            separators.into_iter().for_each(|s| s.abandon());
            return Err(e);
        }
    };
    // The values copied; a kept segment's bytes were counted as the WAL's.
    let blob_bytes: u64 = blob_metas.iter().map(|m| m.file_size).sum();
    // Kept only if a table references it after all (a merge may have folded every value).
    let kept_len = match (&segment, keep_logged) {
        (Some(s), _) => Some(s.len),
        (None, true) => Some(wal_len),
        (None, false) => None,
    };
    let kept = kept_len.and_then(|len| {
        let refs = metas.iter().flat_map(|m| &m.blob_refs).filter(|r| r.file == oldest_wal);
        let values: u64 = refs.map(|r| r.count).sum();
        (values > 0).then_some(BlobFileMeta {
            number: oldest_wal,
            value_bytes: len,
            values,
            file_size: len,
            kind: BlobFileKind::WalSegment,
        })
    });
    blob_metas.extend(kept);
    inner.fs.sync_dir(&inner.dir)?;
    let mut new_blobs = inner.open_blob_files(&blob_metas);
    // The file the memtables read the segment through, under the record kept: the file
    // goes once neither a version nor a memtable still read can reach it.
    if let (Some(meta), Some(file)) = (kept, &logged) {
        new_blobs.retain(|b| b.meta.number != meta.number);
        new_blobs.push(Arc::new(BlobFile::alias(meta, file.clone())));
    }
    let referenced = |n: u64| metas.iter().flat_map(|m| &m.blob_refs).any(|r| r.file == n);
    let (adopted, unreferenced): (Vec<_>, Vec<_>) =
        held.into_iter().partition(|b| referenced(b.meta.number));
    // The memtable's handle itself, so that the file goes once neither it nor a version can
    // reach it.
    blob_metas.extend(adopted.iter().map(|b| b.meta));
    new_blobs.extend(adopted);
    let lookup = super::table_files::blobs_in([], &new_blobs);
    let opened =
        metas.iter().map(|m| inner.open_table(m.clone(), &lookup)).collect::<Result<Vec<_>>>()?;

    let mut edit = VersionEdit {
        log_number: Some(next_wal),
        added_blobs: blob_metas,
        ..VersionEdit::default()
    };
    for m in &metas {
        edit.added.push((0, m.clone()));
    }
    // Everything the retired segment holds is accounted for, in the tables or dropped with
    // a keyspace: the next segment continues from here.
    edit.last_seq = metas.iter().map(|m| m.largest_seq).chain([segment_last_seq]).max();
    inner.install(&mut edit, &opened, Some(oldest_wal))?;
    unreferenced.iter().for_each(|b| b.mark_obsolete());
    // A segment not kept that memtables read values from goes once none can be read:
    // a snapshot or iterator may still hold them.
    let logged = logged.filter(|_| kept.is_none());
    if let Some(file) = &logged {
        file.mark_obsolete();
    }
    inner.counters.blob_bytes_written.add(blob_bytes);
    for (m, &job) in metas.iter().zip(&owners) {
        inner.counters.flushes.incr();
        inner.counters.flush_bytes_written.add(m.file_size);
        let (id, info) = &mut jobs[job];
        inner.counters.keyspace(*id, |k| {
            k.flushes += 1;
            k.flush_bytes_written += m.file_size;
        });
        info.tables += 1;
        info.table_bytes += m.file_size;
    }
    // Segments below the new log number hold nothing the tables do not (a kept one is a
    // blob file now, which goes once nothing references it).
    for n in (oldest_wal..next_wal).rev() {
        if kept.is_some_and(|k| k.number == n)
            || logged.as_ref().is_some_and(|f| f.meta.number == n)
        {
            continue;
        }
        let p = wal_path(&inner.dir, n);
        if inner.fs.exists(&p) {
            let _ = inner.fs.remove(&p);
        }
    }
    let duration = started.elapsed();
    inner.counters.level(0, |l| {
        l.runs += 1;
        l.bytes_written += metas.iter().map(|m| m.file_size).sum::<u64>();
        l.micros += duration.as_micros() as u64;
    });
    for (_, mut info) in jobs {
        info.duration = duration;
        inner.events.flush_end(&info);
    }
    Ok(())
}

/// WAL segment `number`, indexed, if it is worth keeping as a blob file for the large values
/// of the memtables flushed from it (the oldest immutable ones of `state`): if the values
/// their tables would reference in it are at least half of it (`kept_wal::worth_keeping`).
/// `None` if no keyspace separates values, or the segment cannot be read whole: its values
/// are copied then, as without keeping.
fn segment_to_keep(inner: &DbInner, state: &DbState, number: u64) -> Option<Arc<SegmentIndex>> {
    let flushed = |t: &&Arc<super::Tree>| t.imm.last().is_some_and(|m| !m.table.is_empty());
    let thresholds: Vec<_> = state
        .trees
        .iter()
        .filter(flushed)
        .filter_map(|t| Some((t.id, t.opts.blob_threshold?)))
        .collect();
    if thresholds.is_empty() {
        return None;
    }
    let path = wal_path(&inner.dir, number);
    let data = inner.fs.read_all(&path).ok()?;
    let threshold = |k| thresholds.iter().find(|(id, _)| *id == k).map(|(_, t)| *t);
    let index = SegmentIndex::build(&path, number, data, threshold).ok()?;
    // The values indexed bound what the tables can reference: often that settles it.
    if !worth_keeping(index.indexed_bytes(), index.len) {
        return None;
    }
    // What the tables would reference: the newest version of each key the memtable holds,
    // unless its range tombstones delete it (as the flush writes them; a value a merge
    // folds is counted though copied, which the rule's margin absorbs).
    let mut referenced = 0;
    for tree in state.trees.iter().filter(flushed) {
        let (Some(min), Some(mem)) = (tree.opts.blob_threshold, tree.imm.last()) else { continue };
        let range_dels = mem.table.range_tombstones();
        let mut it = NewestVersions::new(mem.table.iter(), Box::new(|_| false))
            .with_range_tombstones(range_dels);
        it.seek_to_first().ok()?;
        while it.valid() {
            if let Some(p) = key::parse_internal_key(it.key()) {
                let len = match p.kind {
                    ValueKind::Put => Some(it.value().len()),
                    ValueKind::PutExpiring => it.value().len().checked_sub(EXPIRY_LEN),
                    _ => None,
                };
                if let Some(len) = len.filter(|&len| len >= min) {
                    if index.holds(tree.id, p.seq, len) {
                        referenced += len as u64;
                    }
                }
            }
            it.next().ok()?;
        }
    }
    worth_keeping(referenced, index.len).then(|| Arc::new(index))
}

/// The blob file through which the oldest immutable memtables of `state` read the values
/// they hold by reference into their WAL segment `number`, if any does.
fn held_segment(state: &DbState, number: u64) -> Option<Arc<BlobFile>> {
    state.trees.iter().filter_map(|t| t.imm.last()?.table.held_blob(number)).next()
}

/// Bytes of the values the tables flushed from the oldest immutable memtables of `state`
/// would reference in WAL segment `number`: the newest version of each key that is a
/// reference into it, unless a range tombstone of the memtable deletes it. (A value a merge
/// folds onto one is counted though copied, which `worth_keeping`'s margin absorbs.)
fn referenced_in(state: &DbState, number: u64) -> u64 {
    let mut referenced = 0;
    for tree in &state.trees {
        let Some(mem) = tree.imm.last().filter(|m| !m.table.is_empty()) else { continue };
        let range_dels = mem.table.range_tombstones();
        let mut it = NewestVersions::new(mem.table.iter(), Box::new(|_| false))
            .with_range_tombstones(range_dels);
        if it.seek_to_first().is_err() {
            return 0;
        }
        while it.valid() {
            let blob =
                key::parse_internal_key(it.key()).is_some_and(|p| p.kind == ValueKind::BlobPut);
            if let Some(r) = blob.then(|| BlobRef::decode(it.value()).ok()).flatten() {
                if r.file == number {
                    referenced += r.len;
                }
            }
            if it.next().is_err() {
                return 0;
            }
        }
    }
    referenced
}

/// Waits until every memtable frozen so far has been flushed (or background work failed).
pub(crate) fn wait_for_flushes(inner: &DbInner) -> Result<()> {
    wait_for_flushes_through(inner, u64::MAX)
}

/// Waits until every memtable frozen with WAL segment `wal_number` or an older one has been
/// flushed (or background work failed); memtables frozen later may remain.
pub(crate) fn wait_for_flushes_through(inner: &DbInner, wal_number: u64) -> Result<()> {
    // A listener's callback may be running on the flush thread itself.
    crate::events::refuse_in_callback()?;
    let pending = || {
        let state = inner.load_state();
        state.trees.iter().any(|t| t.imm.iter().any(|m| m.wal_number <= wal_number))
    };
    let mut bg = lock(&inner.bg);
    loop {
        if let Err(e) = inner.check_bg_error_locked(&bg) {
            drop(bg);
            // The caller learns of the error from the listeners no later than from this.
            inner.events.report_background_error();
            return Err(e);
        }
        if !pending() {
            return Ok(());
        }
        if bg.shutdown {
            return Err(crate::Error::Closed);
        }
        inner.bg_cv.notify_all();
        bg = inner.bg_done_cv.wait(bg).unwrap_or_else(|p| p.into_inner());
    }
}
