//! Resuming after a failed write to the WAL, the manifest or a table (a full disk, most
//! often) without reopening: RocksDB's `DB::Resume`.
//!
//! A failure stops the database (`DbInner::set_bg_error`): the call that met it fails, and
//! so does every later write, because the file that failed refuses further records and what
//! reached its disk is unknown. Resuming replaces both logs instead of trusting them:
//!
//! 1. Wait until no background job runs, and hold the write queue and the compaction slot,
//!    so nothing writes while the files are replaced.
//! 2. Write a new manifest holding the engine's state as it is in memory, which never
//!    includes a failed edit, and point CURRENT at it. A failed edit that did reach the old
//!    manifest is gone with it.
//! 3. If the WAL failed: its refused records were cut off when they failed (`write_group`;
//!    retried here if that cut failed too). Start a new segment and freeze the memtables,
//!    whose writes are all acknowledged ones.
//! 4. Clear the error and wait until every frozen memtable is flushed (a flush that failed
//!    is retried): the old segments are retired, and the disk has shown it takes writes
//!    again, before any write is accepted.
//!
//! Any step failing leaves the database stopped, with the new error, and `resume` can be
//! called again. A failed step removes the files it created (a new manifest and CURRENT.tmp,
//! a new WAL segment, a table it could not write), so retrying on a full disk fills nothing
//! up. Two kinds stay: a manifest CURRENT was renamed to when the directory fsync after it
//! failed (a power loss could bring back the CURRENT naming the one before, so both stay
//! until a resume gets through), and the tables of a flush whose manifest edit failed (the
//! edit may be on disk; the next open removes them). A compaction's tables and blob files
//! whose edit failed go once step 2 is done: its manifest names none of them.

use std::sync::atomic::Ordering;

use super::wal::{new_segment, switch_to};
use super::write;
use super::{flush, lock_mutex as lock, DbInner};
use crate::filename::wal_path;
use crate::Result;

impl DbInner {
    /// See the module documentation.
    pub(crate) fn resume(&self) -> Result<()> {
        self.check_writable()?;
        write::exclusive_while_stopped(self, |_| {
            {
                let mut bg = lock(&self.bg);
                if bg.error.is_none() {
                    return Ok(());
                }
                // No job starts while the error is set; wait for one that started before.
                while bg.running > 0 {
                    bg = self.bg_done_cv.wait(bg).unwrap_or_else(|p| p.into_inner());
                }
            }
            // Manual compactions and ingests hold this while they run.
            let _slot = self.slot_alone();
            {
                let _g = lock(&self.state_lock);
                let state = self.state.load();
                lock(&self.versions).write_snapshot(state.trees.iter().map(|t| &*t.version))?;
            }
            // The manifest now on disk is the one just written, which names none of them.
            for path in std::mem::take(&mut *lock(&self.unsettled_outputs)) {
                let _ = self.fs.remove(&path);
            }
            self.roll_failed_wal()?;
            {
                let mut bg = lock(&self.bg);
                bg.error = None;
                self.has_bg_error.store(false, Ordering::Release);
                self.bg_cv.notify_all();
            }
            // Retries a flush that failed, and flushes the memtables a failed WAL segment
            // backs: either way the disk has to take a table before writes go on.
            flush::wait_for_flushes(self)?;
            self.events.resumed();
            Ok(())
        })
    }

    /// If the WAL writer failed: starts a new segment after the last acknowledged write and
    /// freezes the active memtables, whose writes are in the failed segment.
    fn roll_failed_wal(&self) -> Result<()> {
        let mut wal = lock(&self.wal);
        let Some(old) = wal.writer.as_mut() else { return Err(crate::Error::Closed) };
        if !old.has_failed() {
            return Ok(());
        }
        // A refused record left in the old segment would be replayed by the next open.
        old.finish_cut()?;
        let number = self.file_numbers.fetch_add(1, Ordering::SeqCst);
        let path = wal_path(&self.dir, number);
        let file = self.fs.create(&path)?;
        let writer = match new_segment(self, file, wal.last_seq + 1) {
            Ok(writer) => writer,
            Err(e) => {
                // The segment holds nothing but its header: remove it, or a resume retried
                // while the disk is full would leave one behind per call.
                let _ = self.fs.remove(&path);
                return Err(e);
            }
        };
        // What reached the device of the failed segment is unknown: it is never kept.
        switch_to(self, wal, writer, number, false);
        Ok(())
    }
}
