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

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{lock_mutex as lock, DbInner};
use crate::events::FlushInfo;
use crate::filename::wal_path;
use crate::iter::InternalIterator;
use crate::range_del::TombstoneSplit;
use crate::version::edit::{KeyspaceId, VersionEdit};
use crate::Result;
use bloomkv_tree::compact::merge_stage::MergeStage;
use bloomkv_tree::compact::newest::NewestVersions;
use bloomkv_tree::filter_budget::{table_filter, Placement};

/// Flushes the oldest immutable memtables: one per keyspace, all holding the writes of the
/// same WAL segment, into one L0 table per keyspace that has data, recorded in one manifest
/// edit. Runs on the flush thread.
pub(crate) fn flush_oldest(inner: &DbInner) -> Result<()> {
    let state = inner.load_state();
    let default = state.default_tree();
    let Some((oldest_wal, segment_last_seq)) =
        default.imm.last().map(|m| (m.wal_number, m.last_seq))
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
            let filter = table_filter(&tree.opts, &tree.version, &placement);
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
            separators.push(inner.separator(tree));
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
    drop(state);
    let finished = written.and_then(|()| {
        let mut all = Vec::new();
        for s in separators.drain(..) {
            all.extend(s.finish()?);
        }
        Ok(all)
    });
    let blob_metas = match finished {
        Ok(b) => b,
        Err(e) => {
            // Nothing refers to the tables and blob files written so far if one failed.
            inner.remove_tables(&metas);
            separators.into_iter().for_each(|s| s.abandon());
            return Err(e);
        }
    };
    inner.fs.sync_dir(&inner.dir)?;
    let blob_bytes: u64 = blob_metas.iter().map(|m| m.file_size).sum();
    let new_blobs = inner.open_blob_files(&blob_metas);
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
    // Segments below the new log number hold nothing the tables do not.
    for n in (oldest_wal..next_wal).rev() {
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
