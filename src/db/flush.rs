//! Flush: the oldest immutable memtable becomes an L0 table.
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

use super::filter_budget::{table_filter, Placement};
use super::newest_versions::NewestVersions;
use super::{lock_mutex as lock, DbInner};
use crate::filename::wal_path;
use crate::iter::InternalIterator;
use crate::range_del::TombstoneSplit;
use crate::version::edit::VersionEdit;
use crate::Result;

/// Flushes the oldest immutable memtable. Runs on the flush thread.
pub(crate) fn flush_oldest(inner: &DbInner) -> Result<()> {
    let state = inner.load_state();
    let Some(oldest) = state.imm.last().cloned() else { return Ok(()) };
    // The oldest memtable still unflushed after this one: its WAL is the new log number.
    let next_wal = state.imm.iter().rev().nth(1).unwrap_or(&state.mem).wal_number;
    let placement = Placement { level: 0, keys: oldest.table.len() as u64, replaces: &[] };
    let filter = table_filter(inner.opts.filter_policy, &state.version, &placement);
    drop(state);

    let number = inner.file_numbers.fetch_add(1, Ordering::SeqCst);
    let range_dels = oldest.table.range_tombstones();
    let mut it = NewestVersions::new(oldest.table.iter(), Box::new(|_| false))
        .with_range_tombstones(range_dels.clone());
    it.seek_to_first()?;
    let mut split = TombstoneSplit::of(range_dels.as_deref());
    let meta = inner.write_table(number, &mut it, &mut split, filter)?;
    inner.fs.sync_dir(&inner.dir)?;
    let opened = match &meta {
        Some(m) => vec![inner.open_table(m.clone())?],
        None => vec![],
    };

    let mut edit = VersionEdit { log_number: Some(next_wal), ..VersionEdit::default() };
    if let Some(m) = &meta {
        edit.added.push((0, m.clone()));
        edit.last_seq = Some(m.largest_seq);
    }
    inner.install(&mut edit, &opened, Some(&oldest.table))?;
    if let Some(m) = &meta {
        inner.counters.flushes.incr();
        inner.counters.flush_bytes_written.add(m.file_size);
    }
    // Segments below the new log number hold nothing the tables do not.
    for n in (oldest.wal_number..next_wal).rev() {
        let p = wal_path(&inner.dir, n);
        if inner.fs.exists(&p) {
            let _ = inner.fs.remove(&p);
        }
    }
    Ok(())
}

/// Waits until every memtable frozen so far has been flushed (or background work failed).
pub(crate) fn wait_for_flushes(inner: &DbInner) -> Result<()> {
    let mut bg = lock(&inner.bg);
    loop {
        inner.check_bg_error_locked(&bg)?;
        if inner.load_state().imm.is_empty() {
            return Ok(());
        }
        if bg.shutdown {
            return Err(crate::Error::Closed);
        }
        inner.bg_cv.notify_all();
        bg = inner.bg_done_cv.wait(bg).unwrap_or_else(|p| p.into_inner());
    }
}
