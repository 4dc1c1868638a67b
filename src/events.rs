//! [`EventListener`]: callbacks for the engine's background work, write stalls and
//! background errors, so that a service can see why a write waited (or the database stopped)
//! without a debugger. The same events are logged through the `log` crate, target
//! `bloomkv`: flushes, compactions and stalls at `info`, background errors at `error`, a
//! resume and a compaction filter's failures at `warn`. With the `serde` feature the info
//! structs implement `serde::Serialize`; durations serialise as a number of seconds (an
//! `f64`, to the nanosecond for any duration under about 100 days), not as serde's
//! `{"secs", "nanos"}` for `Duration`, which no dashboard reads as one number.

use std::cell::Cell;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::sync::lock;
use crate::Error;

const TARGET: &str = "bloomkv";

/// Callbacks for what the engine does in the background: register one with
/// [`crate::Options::event_listener`]. Every method has an empty default, so an
/// implementation overrides only the events it cares about. RocksDB's `EventListener`.
///
/// # Where callbacks run, and what they may call
///
/// A callback runs on the thread doing the work, while that work waits for it: flushes and
/// background compactions on the database's background threads, a manual compaction on the
/// thread of [`crate::Db::compact`], a write stall on the writing thread that leads the write
/// queue, [`EventListener::on_resumed`] on the thread of [`crate::Db::resume`]. Keep callbacks
/// short: hand anything slow to a thread of your own.
///
/// No engine mutex that a read needs is held while a callback runs (a background error is
/// reported once the thread that met it has let go of its locks), so a callback may read:
/// [`crate::Db::stats`], `get`, `multi_get`, snapshots, iterators and cursors, keyspace names.
///
/// A callback may not write (to the database, a keyspace or through a transaction), `sync`,
/// `flush`, `compact`, ingest, create or drop a keyspace, `resume` or `close`: each of those
/// returns [`Error::CalledFromListener`] at once, having done nothing. The thread running the
/// callback may lead the write queue, hold the one compaction slot, or be the flush thread
/// those calls wait for, so they would wait for the callback itself. Hand such work to a
/// thread of your own, and do not wait for it in the callback. Dropping the last handle on the
/// database in a callback is allowed: it closes the database on a thread of its own, once the
/// callback has returned.
///
/// ```
/// # fn main() -> bloomkv::Result<()> {
/// use std::sync::{mpsc, Arc, Mutex, OnceLock, Weak};
/// use bloomkv::events::{EventListener, FlushInfo};
/// use bloomkv::{Db, Error, Options, Readable};
///
/// /// Records in the database which keyspace it flushed last.
/// struct LastFlush {
///     db: OnceLock<Weak<Db>>,
///     done: Mutex<mpsc::Sender<bloomkv::Result<()>>>,
/// }
///
/// impl EventListener for LastFlush {
///     fn on_flush_end(&self, info: &FlushInfo) {
///         let Some(db) = self.db.get().and_then(Weak::upgrade) else { return };
///         let done = self.done.lock().unwrap().clone();
///         // Here, on the flush thread a write may have to wait for, it is refused...
///         let _ = done.send(db.put("last-flush", &info.keyspace));
///         // ...and on a thread of its own it is an ordinary write.
///         let keyspace = info.keyspace.clone();
///         std::thread::spawn(move || done.send(db.put("last-flush", keyspace)));
///     }
/// }
///
/// let (tx, rx) = mpsc::channel();
/// let listener = Arc::new(LastFlush { db: OnceLock::new(), done: Mutex::new(tx) });
/// let dir = tempfile::tempdir().unwrap();
/// let db = Arc::new(Db::open(dir.path(), Options::new().event_listener(listener.clone()))?);
/// listener.db.set(Arc::downgrade(&db)).unwrap();
/// db.put("k", "v")?;
/// db.flush()?;
/// assert!(matches!(rx.recv().unwrap(), Err(Error::CalledFromListener)));
/// rx.recv().unwrap()?;
/// assert_eq!(db.get("last-flush")?.as_deref(), Some(&b"default"[..]));
/// # Ok(()) }
/// ```
///
/// # Panics
///
/// A panic in a callback is caught (after the panic hook has printed it, as usual) and
/// logged at `error`; the engine carries on as if the callback had returned, and no engine
/// state is left half-changed, since no event is sent from the middle of a change. A
/// program built with `panic = "abort"` aborts instead, as with any panic.
///
/// ```
/// # fn main() -> bloomkv::Result<()> {
/// use std::sync::{Arc, Mutex};
/// use bloomkv::events::{EventListener, FlushInfo, StallInfo};
///
/// #[derive(Default)]
/// struct Recorder(Mutex<Vec<String>>);
///
/// impl EventListener for Recorder {
///     fn on_flush_end(&self, info: &FlushInfo) {
///         let line = format!("{}: {} table(s) in {:?}", info.keyspace, info.tables, info.duration);
///         self.0.lock().unwrap().push(line);
///     }
///     fn on_write_stall_begin(&self, info: &StallInfo) {
///         self.0.lock().unwrap().push(format!("writes stalled: {:?}", info.reason));
///     }
/// }
///
/// let recorder = Arc::new(Recorder::default());
/// let dir = tempfile::tempdir().unwrap();
/// let opts = bloomkv::Options::new().event_listener(recorder.clone());
/// let db = bloomkv::Db::open(dir.path(), opts)?;
/// db.put("k", "v")?;
/// db.flush()?;
/// assert!(recorder.0.lock().unwrap()[0].starts_with("default: 1 table(s)"));
/// # Ok(()) }
/// ```
pub trait EventListener: Send + Sync {
    /// A memtable of `info.keyspace` is about to be written to an L0 table.
    fn on_flush_begin(&self, _info: &FlushInfo) {}
    /// The flush `on_flush_begin` announced is in the manifest: its writes no longer depend
    /// on the WAL. Not called if the flush failed; `on_background_error` reports that.
    fn on_flush_end(&self, _info: &FlushInfo) {}
    /// A compaction is about to read its inputs.
    fn on_compaction_begin(&self, _info: &CompactionInfo) {}
    /// The compaction `on_compaction_begin` announced is in the manifest. Not called if it
    /// failed; `on_background_error` reports that.
    fn on_compaction_end(&self, _info: &CompactionInfo) {}
    /// A keyspace's [`crate::CompactionFilter`] failed on values of a compaction, which kept
    /// them as they were and went on: called once the compaction is in the manifest, just
    /// before its `on_compaction_end`. Not called where the keyspace stops on filter errors
    /// ([`crate::KeyspaceOptions::stop_on_compaction_filter_error`]): the compaction fails
    /// then, and `on_background_error` reports that.
    fn on_compaction_filter_error(&self, _info: &CompactionFilterErrorInfo) {}
    /// Writes began to wait (or, for [`StallReason::L0Slowdown`], to be delayed) for
    /// background work to catch up.
    fn on_write_stall_begin(&self, _info: &StallInfo) {}
    /// The stall `on_write_stall_begin` announced is over (or gave way to one for another
    /// reason, whose `on_write_stall_begin` follows at once).
    fn on_write_stall_end(&self, _info: &StallInfo) {}
    /// An I/O error stopped the database: every write fails with [`Error::Background`]
    /// until [`crate::Db::resume`] succeeds or the database is reopened. Called once per
    /// stop, for the first error. The error is recorded under whatever locks the thread that
    /// met it holds, and reported once a thread holds none: before a failing write,
    /// `flush`, `compact` or `resume` returns; for a failing ingest or keyspace change, from
    /// a background thread soon after.
    fn on_background_error(&self, _info: &BackgroundErrorInfo) {}
    /// [`crate::Db::resume`] restarted a database that a background error had stopped.
    fn on_resumed(&self, _info: &ResumeInfo) {}
}

/// A flush of one keyspace's memtable, for [`EventListener::on_flush_begin`] and
/// [`EventListener::on_flush_end`].
///
/// The memtables of all keyspaces are flushed together, in one manifest edit: each
/// keyspace whose memtable holds anything gets its own pair of events, all `begin`s before
/// the work and all `end`s after it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct FlushInfo {
    /// The keyspace's name (`"default"` for the database's own).
    pub keyspace: String,
    /// Entries (versions of keys, and tombstones) in the memtable.
    pub memtable_entries: u64,
    /// Approximate bytes held by the memtable.
    pub memtable_bytes: u64,
    /// Tables written: 1, or 0 if range tombstones left nothing to write. 0 at the begin.
    pub tables: usize,
    /// Bytes of the tables written. 0 at the begin.
    pub table_bytes: u64,
    /// How long the whole flush (every keyspace's) took. Zero at the begin. Serialised in
    /// seconds.
    #[cfg_attr(feature = "serde", serde(serialize_with = "as_secs_f64"))]
    pub duration: Duration,
}

/// Why a compaction runs (the tree's picker chooses it).
pub use bloomkv_tree::compact::picker::CompactionReason;

/// A compaction, for [`EventListener::on_compaction_begin`] and
/// [`EventListener::on_compaction_end`]: the tables of `input_level` and the tables of
/// `output_level` they overlap, merged into new tables on `output_level`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct CompactionInfo {
    /// The keyspace whose tables these are.
    pub keyspace: String,
    /// Why it runs.
    pub reason: CompactionReason,
    /// The level compacted.
    pub input_level: usize,
    /// The level it is compacted into: `input_level + 1`, or `input_level` itself when a
    /// level's tables are rewritten in place (for [`CompactionReason::Expiry`], and by
    /// [`crate::Db::compact`] for a compaction filter or expired values).
    pub output_level: usize,
    /// Tables read from `input_level`.
    pub input_level_tables: usize,
    /// Tables read from `output_level`: those the inputs overlap, rewritten with them.
    pub output_level_tables: usize,
    /// Bytes of all the tables read.
    pub input_bytes: u64,
    /// Tables written. 0 at the begin.
    pub output_tables: usize,
    /// Bytes of the tables written. 0 at the begin.
    pub output_bytes: u64,
    /// Key ranges the compaction was split into, each merged on its own thread
    /// (`Options::max_subcompactions`). 0 at the begin.
    pub parts: usize,
    /// How long it took. Zero at the begin (serialised in seconds).
    #[cfg_attr(feature = "serde", serde(serialize_with = "as_secs_f64"))]
    pub duration: Duration,
    /// The input tables were moved into `output_level` as they are, by a manifest edit
    /// alone: nothing there overlapped them, nor did they each other, so there was nothing
    /// to merge (`output_bytes` is 0).
    pub moved: bool,
}

/// A compaction filter's failures in one compaction, for
/// [`EventListener::on_compaction_filter_error`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct CompactionFilterErrorInfo {
    /// The keyspace whose filter it is.
    pub keyspace: String,
    /// The level the compaction wrote, as the filter was told.
    pub level: usize,
    /// Values the filter failed on in this compaction, each kept as it was.
    pub failed: u64,
    /// The first of them in key order: its key.
    pub key: Vec<u8>,
    /// What went wrong with it (for a panic, its message when it has one).
    pub reason: String,
}

/// Why writes stall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub enum StallReason {
    /// The memtable is full and `Options::max_immutable_memtables` more wait to be
    /// flushed: writes stop until a flush completes. Flushing is slower than writing (or
    /// stuck: a failing disk shows up as a background error).
    ImmutableMemtables,
    /// A keyspace's L0 holds `Options::l0_stop_trigger` tables: writes stop until an L0
    /// compaction completes.
    L0Stop,
    /// A keyspace's L0 holds `Options::l0_slowdown_trigger` tables or more: each write is
    /// delayed by up to a millisecond, to give compaction a head start. It ends with the
    /// first write that finds L0 below the trigger.
    L0Slowdown,
}

/// A write stall, for [`EventListener::on_write_stall_begin`] and
/// [`EventListener::on_write_stall_end`]: the figures are those at its beginning, in both.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct StallInfo {
    /// Why writes wait.
    pub reason: StallReason,
    /// For the L0 reasons, the keyspace with the most L0 tables (the one L0 compaction has
    /// to catch up on); `None` for [`StallReason::ImmutableMemtables`], since every
    /// keyspace's memtables are flushed together.
    pub keyspace: Option<String>,
    /// Immutable memtables waiting to be flushed.
    pub immutable_memtables: usize,
    /// Tables in the L0 of `keyspace` (the most L0 tables any keyspace has); for a keyspace
    /// that gathers sorted runs (`CompactionStyle::Tiered`, `LazyLeveling`, `Fluid`), the
    /// runs it holds beyond what its style allows, which the L0 triggers bound for it. A FIFO
    /// keyspace's tables do not count.
    pub l0_tables: usize,
    /// How long the stall lasted. Zero at the begin (serialised in seconds).
    #[cfg_attr(feature = "serde", serde(serialize_with = "as_secs_f64"))]
    pub duration: Duration,
}

/// A background error, for [`EventListener::on_background_error`].
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct BackgroundErrorInfo {
    /// The error (serialised as its message). Writes fail with [`Error::Background`]
    /// holding it.
    #[cfg_attr(feature = "serde", serde(serialize_with = "as_display"))]
    pub error: Error,
}

/// A resume, for [`EventListener::on_resumed`].
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct ResumeInfo {
    /// The error that had stopped the database (serialised as its message).
    #[cfg_attr(feature = "serde", serde(serialize_with = "as_display"))]
    pub error: Error,
    /// How long the database was stopped (serialised in seconds).
    #[cfg_attr(feature = "serde", serde(serialize_with = "as_secs_f64"))]
    pub stopped_for: Duration,
}

/// A duration as seconds, the unit of the other durations services export.
#[cfg(feature = "serde")]
fn as_secs_f64<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

#[cfg(feature = "serde")]
fn as_display<S: serde::Serializer>(e: &Error, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(e)
}

/// The listeners registered in an [`crate::Options`].
#[derive(Clone, Default)]
pub(crate) struct Listeners(pub Vec<Arc<dyn EventListener>>);

impl fmt::Debug for Listeners {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} listener(s)", self.0.len())
    }
}

thread_local! {
    /// Whether this thread is running a listener's callback.
    static IN_CALLBACK: Cell<bool> = const { Cell::new(false) };
}

/// Refuses, with [`Error::CalledFromListener`], a call that writes or waits for the engine's
/// work when it comes from a listener's callback: the thread running the callback may be
/// the one that call would wait for.
pub(crate) fn refuse_in_callback() -> crate::Result<()> {
    match in_callback() {
        true => Err(Error::CalledFromListener),
        false => Ok(()),
    }
}

/// Whether this thread is running a listener's callback.
pub(crate) fn in_callback() -> bool {
    IN_CALLBACK.try_with(Cell::get).unwrap_or(false)
}

/// The stall writers are in now.
#[derive(Debug)]
struct ActiveStall {
    info: StallInfo,
    since: Instant,
}

/// Sends events to the listeners and logs them: one per open database.
pub(crate) struct Events {
    listeners: Vec<Arc<dyn EventListener>>,
    /// Only the write leader changes it, so it is never contended; `stalled` lets a write
    /// that finds no stall skip the lock.
    stall: Mutex<Option<ActiveStall>>,
    stalled: AtomicBool,
    /// A background error recorded but not yet reported to the listeners: it is recorded
    /// under whatever locks its thread holds, and reported once a thread holds none.
    unreported: Mutex<Option<BackgroundErrorInfo>>,
    has_unreported: AtomicBool,
    /// Held while reporting a background error or a resume, so a listener hears of an
    /// error before it hears of the resume that cleared it, and a caller that finds nothing
    /// left to report knows the report is over.
    reporting: Mutex<()>,
    /// The error that stopped the database and when, until a resume.
    stopped: Mutex<Option<(Error, Instant)>>,
}

impl Events {
    pub(crate) fn new(listeners: &Listeners) -> Events {
        Events {
            listeners: listeners.0.clone(),
            stall: Mutex::new(None),
            stalled: AtomicBool::new(false),
            unreported: Mutex::new(None),
            has_unreported: AtomicBool::new(false),
            reporting: Mutex::new(()),
            stopped: Mutex::new(None),
        }
    }

    fn each(&self, event: &str, f: impl Fn(&dyn EventListener)) {
        let outer = IN_CALLBACK.with(|c| c.replace(true));
        for l in &self.listeners {
            if catch_unwind(AssertUnwindSafe(|| f(&**l))).is_err() {
                log::error!(target: TARGET, "an event listener panicked in {event}; ignored");
            }
        }
        IN_CALLBACK.with(|c| c.set(outer));
    }

    pub(crate) fn flush_begin(&self, info: &FlushInfo) {
        log::info!(
            target: TARGET,
            "flush begins: keyspace {}, memtable of {} entries, {} bytes",
            info.keyspace,
            info.memtable_entries,
            info.memtable_bytes
        );
        self.each("on_flush_begin", |l| l.on_flush_begin(info));
    }

    pub(crate) fn flush_end(&self, info: &FlushInfo) {
        log::info!(
            target: TARGET,
            "flush done: keyspace {}, {} table(s), {} bytes, in {:?}",
            info.keyspace,
            info.tables,
            info.table_bytes,
            info.duration
        );
        self.each("on_flush_end", |l| l.on_flush_end(info));
    }

    pub(crate) fn compaction_begin(&self, info: &CompactionInfo) {
        log::info!(
            target: TARGET,
            "compaction begins: keyspace {}, L{} -> L{} ({:?}), {} + {} table(s), {} bytes",
            info.keyspace,
            info.input_level,
            info.output_level,
            info.reason,
            info.input_level_tables,
            info.output_level_tables,
            info.input_bytes
        );
        self.each("on_compaction_begin", |l| l.on_compaction_begin(info));
    }

    pub(crate) fn compaction_end(&self, info: &CompactionInfo) {
        log::info!(
            target: TARGET,
            "compaction done: keyspace {}, L{} -> L{}, {} table(s), {} bytes, in {:?}",
            info.keyspace,
            info.input_level,
            info.output_level,
            info.output_tables,
            info.output_bytes,
            info.duration
        );
        self.each("on_compaction_end", |l| l.on_compaction_end(info));
    }

    pub(crate) fn compaction_filter_error(&self, info: &CompactionFilterErrorInfo) {
        log::warn!(
            target: TARGET,
            "compaction filter failed: keyspace {}, L{}, {} value(s) kept as they were, the \
             first of key {:?}: {}",
            info.keyspace,
            info.level,
            info.failed,
            String::from_utf8_lossy(&info.key),
            info.reason
        );
        self.each("on_compaction_filter_error", |l| l.on_compaction_filter_error(info));
    }

    /// Whether a stall is in progress (as last recorded by [`Events::set_stall`]).
    pub(crate) fn stalled(&self) -> bool {
        self.stalled.load(Ordering::Relaxed)
    }

    /// Records the stall condition the write leader is in now (`None`: writes go through
    /// undelayed), and reports the change, if it is one. `describe` is only called for a
    /// new stall.
    pub(crate) fn set_stall(
        &self,
        now: Option<StallReason>,
        describe: impl FnOnce(StallReason) -> StallInfo,
    ) {
        if now.is_none() && !self.stalled.load(Ordering::Relaxed) {
            return;
        }
        let mut cur = lock(&self.stall);
        if cur.as_ref().map(|s| s.info.reason) == now {
            return;
        }
        let ended = cur.take();
        let began = now.map(describe);
        if let Some(info) = &began {
            *cur = Some(ActiveStall { info: info.clone(), since: Instant::now() });
        }
        self.stalled.store(cur.is_some(), Ordering::Relaxed);
        drop(cur);
        if let Some(ActiveStall { mut info, since }) = ended {
            info.duration = since.elapsed();
            log::info!(
                target: TARGET,
                "write stall over: {:?} after {:?}",
                info.reason,
                info.duration
            );
            self.each("on_write_stall_end", |l| l.on_write_stall_end(&info));
        }
        if let Some(info) = began {
            log::info!(
                target: TARGET,
                "write stall: {:?} ({} immutable memtable(s), {} L0 table(s){}{})",
                info.reason,
                info.immutable_memtables,
                info.l0_tables,
                if info.keyspace.is_some() { " in keyspace " } else { "" },
                info.keyspace.as_deref().unwrap_or("")
            );
            self.each("on_write_stall_begin", |l| l.on_write_stall_begin(&info));
        }
    }

    /// Notes the error that stopped the database; called under the lock that records it,
    /// once per stop. The listeners hear of it from [`Events::report_background_error`].
    pub(crate) fn stopped(&self, error: &Error) {
        // Closing while a manual compaction runs makes it fail with `Closed`: no fault.
        if matches!(error, Error::Closed) {
            return;
        }
        log::error!(target: TARGET, "background error, writes stopped until resumed: {error}");
        *lock(&self.stopped) = Some((error.clone(), Instant::now()));
        *lock(&self.unreported) = Some(BackgroundErrorInfo { error: error.clone() });
        self.has_unreported.store(true, Ordering::Release);
    }

    /// Whether a background error waits to be reported.
    pub(crate) fn has_unreported(&self) -> bool {
        self.has_unreported.load(Ordering::Acquire)
    }

    /// Reports a recorded background error to the listeners, unless that is done already.
    /// Only called where the thread holds no engine lock. When it returns, any error
    /// recorded before the call has been reported, by this thread or another.
    pub(crate) fn report_background_error(&self) {
        // A callback that writes (against the rules) and fails would otherwise wait for the
        // report it is part of.
        if IN_CALLBACK.with(Cell::get) {
            return;
        }
        let _reporting = lock(&self.reporting);
        self.report_locked();
    }

    fn report_locked(&self) {
        let info = lock(&self.unreported).take();
        self.has_unreported.store(false, Ordering::Release);
        if let Some(info) = info {
            self.each("on_background_error", |l| l.on_background_error(&info));
        }
    }

    /// A resume cleared the error that stopped the database.
    pub(crate) fn resumed(&self) {
        let _reporting = lock(&self.reporting);
        self.report_locked();
        let Some((error, since)) = lock(&self.stopped).take() else { return };
        let info = ResumeInfo { error, stopped_for: since.elapsed() };
        log::warn!(
            target: TARGET,
            "resumed after {:?} stopped by: {}",
            info.stopped_for,
            info.error
        );
        self.each("on_resumed", |l| l.on_resumed(&info));
    }
}

#[cfg(all(test, feature = "serde"))]
mod tests {
    use super::*;

    /// Durations are one number of seconds, not serde's `{"secs", "nanos"}`.
    #[test]
    fn durations_serialise_as_seconds() {
        let info = ResumeInfo {
            error: Error::Closed,
            stopped_for: Duration::from_millis(1500) + Duration::from_nanos(1),
        };
        let json = serde_json::to_value(&info).unwrap();
        assert_eq!(json["stopped_for"], serde_json::json!(1.500000001));
        let stall = StallInfo {
            reason: StallReason::L0Stop,
            keyspace: None,
            immutable_memtables: 0,
            l0_tables: 0,
            duration: Duration::from_micros(250),
        };
        assert_eq!(serde_json::to_value(&stall).unwrap()["duration"], serde_json::json!(0.00025));
    }
}
