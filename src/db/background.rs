//! Background work: the flush thread and the two compaction threads, the error that stops
//! the database when one of them (or a write) fails, and shutdown.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::{compaction, flush, lock_mutex as lock, DbInner};
use crate::{Error, Result};

/// Background thread coordination.
#[derive(Debug, Default)]
pub(crate) struct BgState {
    pub shutdown: bool,
    pub error: Option<Error>,
    /// Background jobs (flush or compaction steps) running now.
    pub running: usize,
    pub manual_compaction: bool,
    /// Ingests between reserving their sequence number and installing their tables: no
    /// compaction starts meanwhile (a manual one pauses between steps), see `ingest.rs`.
    pub ingests: usize,
}

/// What keeps a database open: held by its [`Db`] and by every [`Keyspace`] handle taken
/// from it, so the database closes when the last of them is dropped (or at once by
/// [`Db::close`]). Snapshots, iterators and cursors do not hold it: a view that silently
/// kept the LOCK would make the next open fail, and they are meant to be short-lived.
pub(crate) struct OpenDb {
    inner: Arc<DbInner>,
    /// The flush thread and the compaction threads (none for a read-only handle).
    bg_threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for OpenDb {
    fn drop(&mut self) {
        if crate::events::in_callback() {
            self.shutdown_elsewhere();
        } else {
            let _ = self.shutdown();
        }
    }
}

impl OpenDb {
    pub(crate) fn new(inner: Arc<DbInner>) -> Self {
        OpenDb { inner, bg_threads: Mutex::new(Vec::new()) }
    }

    /// Starts the flush thread and the compaction threads: the second runs only merges that
    /// may go on beside the first's (`compaction::needs_compaction`), so a keyspace that
    /// gathers runs merges its newest ones while a long merge into its last level runs.
    pub(crate) fn start_background(&self) -> Result<()> {
        for job in [BgJob::Flush, BgJob::Compact, BgJob::Compact] {
            let inner = self.inner.clone();
            let handle = std::thread::Builder::new()
                .name(job.thread_name().into())
                .spawn(move || background_loop(&inner, job))
                .map_err(|e| Error::io("starting a background thread", e))?;
            lock(&self.bg_threads).push(handle);
        }
        self.inner.wake_background();
        Ok(())
    }

    pub(crate) fn shutdown(&self) -> Result<()> {
        if !self.stop_background() {
            return Ok(());
        }
        finish_shutdown(&self.inner, std::mem::take(&mut *lock(&self.bg_threads)))
    }

    /// Tells the background threads to stop after their current step; false if the database
    /// was closed already.
    fn stop_background(&self) -> bool {
        let inner = &self.inner;
        if inner.closed.swap(true, Ordering::AcqRel) {
            return false;
        }
        let mut bg = lock(&inner.bg);
        bg.shutdown = true;
        inner.bg_cv.notify_all();
        inner.bg_done_cv.notify_all();
        true
    }

    /// [`OpenDb::shutdown`] for the last handle dropped inside a listener's callback, which
    /// may run on a background thread the shutdown joins: the threads are told to stop here;
    /// a thread of its own joins them, once the callback has returned, and does the rest. If
    /// that thread cannot be started, the background threads still stop, but the WAL's
    /// closing fsync is missed and the LOCK is released only when the engine's last reference
    /// goes.
    fn shutdown_elsewhere(&self) {
        if !self.stop_background() {
            return;
        }
        let (inner, threads) = (self.inner.clone(), std::mem::take(&mut *lock(&self.bg_threads)));
        let closing = std::thread::Builder::new()
            .name("bloomkv-close".into())
            .spawn(move || finish_shutdown(&inner, threads));
        if let Err(e) = closing {
            let dir = self.inner.dir.display();
            log::error!(target: "bloomkv", "closing {dir}: cannot start a thread to close on: {e}");
        }
    }
}

/// The rest of [`OpenDb::shutdown`] once the background threads were told to stop: waits for
/// them (`threads`) and for work on callers' threads, fsyncs the WAL and releases the LOCK.
fn finish_shutdown(inner: &DbInner, threads: Vec<JoinHandle<()>>) -> Result<()> {
    for h in threads {
        let _ = h.join();
    }
    // `multi_get`'s read threads hold nothing between jobs; a call still running finishes
    // its reads (those queued run first, later ones on its own thread).
    inner.caches.reads.close();
    // A manual compaction or an ingest runs on its caller's thread and stops soon once it
    // sees `closed`; wait for it, so no file is written after the LOCK is released.
    let _slot = inner.slot_alone();
    // Nor is one removed after it: the tables let go so far are removed now.
    inner.caches.deleter.close();
    let marked = record_clock_mark(inner);
    // Writers that raced with close may still be in the queue; the WAL lock orders us
    // after any leader that is mid-write, and a leader that comes later finds no writer
    // (and will not start a new segment).
    let mut wal = lock(&inner.wal);
    let synced = match wal.writer.as_mut() {
        Some(w) => w.sync().map(|()| w.finish()),
        None => Ok(()),
    };
    wal.writer = None;
    drop(wal);
    lock(&inner.file_lock).take();
    synced?;
    marked?;
    inner.check_bg_error()
}

/// Records the clock's high-water mark in the manifest if it moved since the last edit, so
/// that a reopen with the clock set back judges expiry no earlier than this run did.
fn record_clock_mark(inner: &DbInner) -> Result<()> {
    if inner.read_only || inner.has_bg_error.load(Ordering::Acquire) {
        return Ok(());
    }
    let _g = lock(&inner.state_lock);
    let mut versions = lock(&inner.versions);
    if !versions.clock_mark_moved() {
        return Ok(());
    }
    let mut edit = crate::version::edit::VersionEdit::default();
    let state = inner.state.load();
    let applied =
        versions.apply(&mut edit, state.trees.iter().map(|t| (t.id, &*t.version)), &[])?;
    versions.log(&edit, &applied)
}

impl DbInner {
    /// The error that stopped background work, if any.
    pub(crate) fn check_bg_error(&self) -> Result<()> {
        if !self.has_bg_error.load(Ordering::Acquire) {
            return Ok(());
        }
        match &lock(&self.bg).error {
            Some(e) => Err(Error::Background(Arc::new(e.clone()))),
            None => Ok(()),
        }
    }

    pub(crate) fn set_bg_error(&self, e: Error) {
        self.set_bg_error_locked(&mut lock(&self.bg), e);
    }

    /// Stops the database with `e` unless an error already did. The listeners are told
    /// later (`Events::report_background_error`): the caller may hold any lock.
    pub(crate) fn set_bg_error_locked(&self, bg: &mut BgState, e: Error) {
        if bg.error.is_none() {
            self.events.stopped(&e);
            bg.error = Some(e);
            self.has_bg_error.store(true, Ordering::Release);
        }
        self.bg_done_cv.notify_all();
        // A background thread reports the error if the thread that met it does not.
        self.bg_cv.notify_all();
    }

    pub(crate) fn wake_background(&self) {
        let _g = lock(&self.bg);
        self.bg_cv.notify_all();
    }

    /// [`DbInner::check_bg_error`] with the `bg` lock held.
    pub(crate) fn check_bg_error_locked(&self, bg: &BgState) -> Result<()> {
        match &bg.error {
            Some(e) => Err(Error::Background(Arc::new(e.clone()))),
            None => Ok(()),
        }
    }
}

/// What a background thread does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BgJob {
    /// Flush immutable memtables.
    Flush,
    /// Compact while any level is over its target.
    Compact,
}

impl BgJob {
    fn thread_name(self) -> &'static str {
        match self {
            BgJob::Flush => "bloomkv-flush",
            BgJob::Compact => "bloomkv-compact",
        }
    }
}

/// A background thread. Flushes get a thread of their own so that a frozen memtable is
/// written out while a long compaction runs: with one thread for both, writers stopped for
/// whole compactions whenever the immutable memtables filled up behind one. The two only meet
/// in `DbInner::install`, and a compaction's inputs stay valid while a flush adds L0 tables.
/// How often an idle compaction thread checks whether tables hold enough expired values to
/// be worth rewriting (see `picker::worth_rewriting` in the tree crate). A flush, or [`crate::Db::compact`],
/// checks at once.
const EXPIRY_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

fn background_loop(inner: &Arc<DbInner>, job: BgJob) {
    loop {
        let report = {
            let mut bg = lock(&inner.bg);
            loop {
                if inner.events.has_unreported() {
                    break true;
                }
                if bg.shutdown {
                    return;
                }
                if bg.error.is_none() {
                    let state = inner.load_state();
                    let ready = match job {
                        BgJob::Flush => state.imm_len() > 0,
                        BgJob::Compact => {
                            inner.opts.background_compactions
                                && !bg.manual_compaction
                                && bg.ingests == 0
                                && compaction::needs_compaction(inner, &state)
                        }
                    };
                    if ready {
                        bg.running += 1;
                        break false;
                    }
                }
                bg = match job {
                    // Values expire without any write to wake the thread: it looks again
                    // at least this often.
                    BgJob::Compact => inner
                        .bg_cv
                        .wait_timeout(bg, EXPIRY_CHECK_INTERVAL)
                        .map_or_else(|p| p.into_inner().0, |(bg, _)| bg),
                    BgJob::Flush => inner.bg_cv.wait(bg).unwrap_or_else(|p| p.into_inner()),
                };
            }
        };
        if report {
            // An error recorded by a thread that has not reported it (yet): this thread
            // holds no lock, so the listeners may call back into the database.
            inner.events.report_background_error();
            continue;
        }
        let result = match job {
            BgJob::Flush => flush::flush_oldest(inner),
            BgJob::Compact => compaction::maybe_compact(inner),
        };
        if let Err(e) = result {
            inner.set_bg_error(e);
            inner.events.report_background_error();
        }
        let mut bg = lock(&inner.bg);
        bg.running -= 1;
        // A flush may have made compaction necessary, and a compaction may have released
        // writers or `flush` callers: wake everyone waiting on either.
        inner.bg_cv.notify_all();
        inner.bg_done_cv.notify_all();
    }
}
