//! The write-ahead log as the engine uses it: the segment being appended to, starting a new
//! segment (at a memtable switch, which an ingest's reservation also makes, and when
//! resuming after a failed one), and what a segment's header promises recovery. The record format is `crate::log`'s; replay is in
//! `recovery.rs`.

use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};

use super::{lock_mutex as lock, DbInner, Mem, Tree};
use crate::blob::BlobFile;
use crate::filename::wal_path;
use crate::fs::WritableFile;
use crate::key::SeqNo;
use crate::log::LogWriter;
use crate::{Error, Result, WriteBatch};

/// The WAL being appended to; touched only by the write leader (and close).
#[derive(Debug)]
pub(crate) struct WalState {
    pub writer: Option<LogWriter>,
    pub number: u64,
    /// Last sequence number assigned (published or not).
    pub last_seq: SeqNo,
    /// The segment as a blob file the active memtables read values from, made at the first
    /// value one holds by reference into it (`write::LoggedValues`).
    pub segment_file: Option<Arc<BlobFile>>,
}

/// Freezes the active memtables (every keyspace's) and starts new ones with a new WAL
/// segment. The old segment is fsynced first, so after a power loss only the newest segment
/// can have a torn tail and recovery never has to skip a hole.
pub(super) fn switch_memtable(inner: &DbInner) -> Result<()> {
    let number = inner.file_numbers.fetch_add(1, Ordering::SeqCst);
    let mut wal = lock(&inner.wal);
    // `close` clears the writer under this lock before it releases the LOCK: after that, no
    // new segment may appear in a directory this handle no longer owns.
    let Some(w) = wal.writer.as_mut() else { return Err(Error::Closed) };
    w.sync().inspect_err(|e| inner.set_bg_error(e.clone()))?;
    // A failed create is harmless (nothing was written; the next write retries), but a
    // failed header write or fsync, or a failed directory fsync, is never retried: after one,
    // what the segment or the directory holds on disk is unknown (the same rule as for a
    // failed WAL fsync).
    let file = inner.fs.create(&wal_path(&inner.dir, number))?;
    let writer = new_segment(inner, file, wal.last_seq + 1)
        .inspect_err(|e| inner.set_bg_error(e.clone()))?;
    switch_to(inner, wal, writer, number, true);
    inner.wake_background();
    Ok(())
}

/// Starts a segment in the new, empty `file` ([`start_wal_segment`]) and makes its
/// directory entry durable.
pub(crate) fn new_segment(
    inner: &DbInner,
    file: Box<dyn WritableFile>,
    next_seq: SeqNo,
) -> Result<LogWriter> {
    let writer = start_wal_segment(file, next_seq)?;
    inner.counters.wal_bytes_written.add(writer.len());
    inner.fs.sync_dir(&inner.dir)?;
    Ok(writer)
}

/// Makes `writer`, segment `number`, the one writes go to, and freezes the memtables whose
/// writes the previous segment holds; `sealed` if that segment was synced whole (see
/// `Mem::sealed`). Only a leader writes, and this one has not yet: the previous segment
/// ends at the last sequence assigned.
pub(crate) fn switch_to(
    inner: &DbInner,
    mut wal: MutexGuard<'_, WalState>,
    writer: LogWriter,
    number: u64,
    sealed: bool,
) {
    let old = wal.writer.replace(writer);
    wal.number = number;
    wal.segment_file = None;
    let last_seq = wal.last_seq;
    drop(wal);
    let wal_len = old.as_ref().map_or(0, |w| w.len());
    freeze_memtables(inner, number, last_seq, sealed, wal_len);
    // The previous segment was synced before the new one started; what is left is the
    // space reserved beyond its records.
    if let Some(mut old) = old {
        old.finish();
    }
}

/// Makes every keyspace's active memtable immutable, its WAL segment ending at `last_seq`,
/// and `wal_len` bytes long, and starts empty ones whose writes go to segment `number`.
fn freeze_memtables(inner: &DbInner, number: u64, last_seq: SeqNo, sealed: bool, wal_len: u64) {
    inner.swap_state(|cur| {
        cur.map_trees(|t| {
            let mut imm = Vec::with_capacity(t.imm.len() + 1);
            imm.push(Mem { last_seq, sealed, wal_len, ..t.mem.clone() });
            imm.extend(t.imm.iter().cloned());
            Tree {
                mem: Mem {
                    table: Arc::new(t.mem.table.successor(t.opts.prefix_extractor)),
                    wal_number: number,
                    last_seq: 0,
                    sealed: false,
                    wal_len: 0,
                },
                imm,
                ..t.clone()
            }
        })
    });
}

/// How far ahead of its writes a WAL segment reserves disk space: with the space reserved, a
/// synced write makes the device write the records alone, not also the segment's new size
/// (see `docs/results/` for what that buys).
const WAL_RESERVE_STEP: u64 = 1 << 20;

/// Starts a WAL segment in the new, empty `file`: writes its header record and fsyncs it.
///
/// The header is an empty write batch whose sequence number is `next_seq`, the first one the
/// segment's writes will take. Recovery requires sequence numbers to run on without a gap
/// from the manifest's last sequence through every segment, headers included. Because even a
/// segment that received no writes names where it continues from, a lost manifest edit (a
/// flush whose WAL was then deleted) shows up as a gap before the next segment's header and
/// is refused, instead of opening with the flushed writes silently gone.
pub(crate) fn start_wal_segment(
    mut file: Box<dyn WritableFile>,
    next_seq: SeqNo,
) -> Result<LogWriter> {
    // Writeback started mid-append would hold every writer waiting on the WAL's lock; only
    // the stretches mapped appends have left are handed to the device (`fs::StdWritable`).
    file.defer_writeback();
    file.map_appends();
    let mut header = WriteBatch::new();
    header.set_sequence(next_seq);
    let mut writer = LogWriter::new(file).reserving(WAL_RESERVE_STEP);
    writer.add_record(header.data())?;
    writer.sync()?;
    Ok(writer)
}
