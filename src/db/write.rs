//! The write path: `Db::write` → group commit → WAL append (+ fsync) → memtable insert →
//! publish the sequence number; and, before a group is written, making room (switching a full
//! memtable, slowing or stopping writers when flushes or L0 compaction fall behind).
//!
//! Direct writes: an unsynced write that finds nobody queued and room in the memtables does
//! the append itself under the WAL's lock, without queueing, then the insert and publish:
//! under the lock too, or for a single put or delete after it (`write_direct`, which says
//! why, and `db/in_flight.rs`).
//!
//! Group commit: writers queue up; the writer at the head of the queue is the leader. It takes
//! the batches queued behind it (up to a byte limit), appends them to the WAL, flushes the WAL
//! to the OS once, fsyncs once if any of them asked for `sync`, applies them to the memtable in
//! order, publishes the last sequence number, and hands every writer in the group its result.
//! Only a leader touches the WAL and assigns sequence numbers, so neither needs a lock beyond
//! the leadership itself.
//!
//! The common case — one thread writing, so every group is one write — is kept free of
//! allocations and syscalls beyond the WAL's `write(2)`: a thread reuses its queue entry and
//! batch buffer from one write to the next, the leader's group list is handed from leader to
//! leader, and the condition variable is only signalled when someone can be waiting on it.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::transaction::ReadSet;
use super::wal::WalState;
use super::{lock_mutex as lock, wal, DbInner, DbState};
use crate::batch::{check_entry_size, check_range_bound};
use crate::blob::{payload_position, BlobFile, BlobFileKind, BlobFileMeta, BlobRef};
use crate::events::{StallInfo, StallReason};
use crate::key::SeqNo;
use crate::log::LogWriter;
use crate::log::{HEADER_SIZE, PAGE_SIZE};
use crate::memtable::MemTable;
use crate::version::edit::KeyspaceId;
use crate::{Error, Result, WriteBatch};

/// Largest group a leader assembles (bytes of batch data); bounds the latency of the writers
/// that join a group.
const MAX_GROUP_BYTES: usize = 1 << 20;

/// Largest capacity of the group list kept for the next leader; a larger one (from a group of
/// many tiny writes) is freed rather than held forever.
const MAX_SPARE_GROUP: usize = 1024;

/// Largest batch buffer a thread keeps for its next write (each writing thread may hold one
/// for as long as it lives).
const MAX_SPARE_BATCH_BYTES: usize = 16 << 10;

thread_local! {
    /// This thread's last finished queue entry, reused by its next write so that a write
    /// allocates neither its entry nor, for `put` and `delete`, its batch.
    static SPARE: Cell<Option<Arc<PendingWrite>>> = const { Cell::new(None) };
}

/// Commits the batch `fill` builds (into an empty batch), with `sync`; `force_switch` asks
/// for a memtable switch (a flush) after the writes queued before this one.
pub(crate) fn write(
    inner: &DbInner,
    sync: bool,
    force_switch: bool,
    fill: impl FnOnce(&mut WriteBatch),
) -> Result<()> {
    write_entry(inner, sync, force_switch, None, fill)
}

/// Commits the batch `fill` builds, with `sync`, if the leader finds nothing `reads` read
/// written since it was read (see `db/transaction/`): checked while the leader holds the
/// write path, just before the group takes its sequence numbers, so no write can come
/// between the check and the batch. A refused batch writes nothing and returns its error.
pub(crate) fn write_checked(
    inner: &DbInner,
    sync: bool,
    reads: Option<ReadSet>,
    fill: impl FnOnce(&mut WriteBatch),
) -> Result<()> {
    write_entry(inner, sync, false, reads, fill)
}

fn write_entry(
    inner: &DbInner,
    sync: bool,
    force_switch: bool,
    reads: Option<ReadSet>,
    fill: impl FnOnce(&mut WriteBatch),
) -> Result<()> {
    // A listener's callback may be running on the leader's thread, or on the flush thread
    // making the room this write waits for.
    crate::events::refuse_in_callback()?;
    // `try_with`: a write from another thread-local's destructor just allocates.
    let mut me = SPARE.try_with(Cell::take).ok().flatten().unwrap_or_default();
    if Arc::get_mut(&mut me).is_none() {
        me = Arc::default();
    }
    if let Some(w) = Arc::get_mut(&mut me) {
        let batch = w.batch.get_mut().unwrap_or_else(|p| p.into_inner());
        batch.clear();
        fill(batch);
        super::ttl::stamp(inner, batch);
        w.bytes = batch.approximate_bytes();
        w.sync = sync;
        w.force_switch = force_switch;
        *w.settled.get_mut() = false;
        *w.result.get_mut().unwrap_or_else(|p| p.into_inner()) = None;
        w.reads = reads;
    }
    let direct = match Arc::get_mut(&mut me) {
        Some(w) if !sync && !force_switch && w.reads.is_none() => {
            write_direct(inner, w.batch.get_mut().unwrap_or_else(|p| p.into_inner()))
        }
        _ => None,
    };
    let result = match direct {
        Some(result) => result,
        None => commit(inner, &me),
    };
    if let Some(w) = Arc::get_mut(&mut me) {
        w.reads = None;
    }
    if result.is_err() {
        // A failure that stopped the database is reported before its writer hears of it.
        inner.events.report_background_error();
    }
    // Unique again unless something unexpected kept a clone; then it is simply not reused.
    if let Some(w) = Arc::get_mut(&mut me) {
        if w.batch.get_mut().is_ok_and(|b| b.capacity() <= MAX_SPARE_BATCH_BYTES) {
            let _ = SPARE.try_with(|s| s.set(Some(me)));
        }
    }
    result
}

/// Writes an unsynced batch without queueing, when nobody is queued and the memtables have
/// room: logs it under the WAL's lock, then applies and publishes it (see below). `None`: the batch
/// must go through the queue, whose leader makes room, reports a stopped database, or gives
/// the queued writers their turn.
///
/// A single put or delete is inserted after the lock is released, beside other writers'
/// inserts, and published out of order (`db/in_flight.rs` says why that is safe and who
/// waits for it); any other batch is applied under the lock, so readers see all of it or
/// none.
///
/// Why: a queued writer hands its batch to a leader and sleeps until the leader is done, and
/// with a few writers per core (groups of two or three) those hand-overs cost more than the
/// writes: four writers on two cores ran at half the rate of one. Unsynced writes gain
/// nothing from a group's shared fsync, so each writer does its own work and only waits for
/// the lock. With the insert, two thirds of a put's time, under the lock, a second core
/// added nothing; applying inserts in parallel but publishing them in order made each
/// writer wait for descheduled predecessors, which lost more than it gained. Synced writes
/// keep the group commit, which shares the fsync; many writers (a queue already busy) keep
/// it too.
fn write_direct(inner: &DbInner, batch: &mut WriteBatch) -> Option<Result<()>> {
    if inner.write_queue_busy.load(Ordering::Acquire)
        || inner.has_bg_error.load(Ordering::Acquire)
        || inner.closed.load(Ordering::Acquire)
        || inner.events.stalled()
    {
        return None;
    }
    let mut guard = lock_without_sleeping(&inner.wal);
    // Under the WAL's lock: a writer that queues sets the flag and then takes this lock
    // before its leader starts (`wait_for_direct_writes`), so from then on no direct write
    // begins, and the one in progress has finished.
    if inner.write_queue_busy.load(Ordering::Acquire) {
        return None;
    }
    // Only a leader switches memtables, and none leads now, so this state's memtables are
    // the active ones.
    let state = inner.state.load();
    if !has_room(inner, &state) {
        return None;
    }
    if batch.is_empty() {
        return Some(Ok(()));
    }
    let wal = &mut *guard;
    let Some(writer) = wal.writer.as_mut() else { return Some(Err(Error::Closed)) };
    let first = wal.last_seq + 1;
    let start = writer.len();
    batch.set_sequence(first);
    if let Err(e) = writer.add_record(batch.data()).and_then(|()| writer.flush()) {
        return Some(Err(refuse_logged(inner, writer, start, e)));
    }
    inner.counters.wal_bytes_written.add(writer.len() - start);
    let last = first + batch.len() as u64 - 1;
    wal.last_seq = last;
    let logged = LoggedValues::of(inner, &state, wal);
    if batch.is_single_overwrite() {
        if let Some(claim) = inner.in_flight.claim(first) {
            drop(guard);
            apply(inner, &state, [(&*batch, start)], logged.as_ref());
            // Out of order: a writer numbered later may have published already.
            inner.visible_seq.fetch_max(first, Ordering::Release);
            drop(claim);
            return Some(Ok(()));
        }
    } else if inner.in_flight.any() && batch.has_merge() {
        // A read combines an operand with the versions beneath it, so every earlier write
        // must be in place before the operand is visible.
        inner.in_flight.wait_all();
    }
    apply_and_publish(inner, &state, [(&*batch, start)], logged.as_ref(), last);
    drop(guard);
    Some(Ok(()))
}

/// `m`'s lock, taken by spinning and then yielding the core while another thread holds it,
/// before sleeping. A direct write holds the WAL's lock for the append alone, well under a
/// microsecond: sleeping on it (a futex wait and a wake-up, microseconds each) cost four
/// writers more than the inserts they ran in parallel.
fn lock_without_sleeping<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    for i in 0..LOCK_SPINS + LOCK_YIELDS {
        match m.try_lock() {
            Ok(g) => return g,
            Err(std::sync::TryLockError::Poisoned(p)) => return p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) if i < LOCK_SPINS => std::hint::spin_loop(),
            Err(std::sync::TryLockError::WouldBlock) => std::thread::yield_now(),
        }
    }
    lock(m)
}

/// How often [`lock_without_sleeping`] tries the lock spinning, then yielding, before it
/// sleeps.
const LOCK_SPINS: usize = 64;
const LOCK_YIELDS: usize = 16;

/// Stops the database after the WAL refused records appended from `start` on, and cuts them
/// back off, so they are never replayed: a short write leaves a torn record, a failed fsync
/// a whole one the OS may still write back. The writer refuses further records either way,
/// and the database stays stopped until `Db::resume` starts a new segment or it is reopened.
fn refuse_logged(inner: &DbInner, writer: &mut LogWriter, start: u64, e: Error) -> Error {
    let _ = writer.cut_back_to(start);
    inner.set_bg_error(e.clone());
    e
}

/// Applies logged batches, in sequence order, to `state`'s memtables, and publishes them up
/// to `last`: readers see all of them, or none. The WAL's lock is held, so no later write is
/// numbered yet and `last` is the highest number to publish.
fn apply_and_publish<B: std::ops::Deref<Target = WriteBatch>>(
    inner: &DbInner,
    state: &DbState,
    batches: impl IntoIterator<Item = (B, u64)>,
    logged: Option<&LoggedValues>,
    last: SeqNo,
) {
    apply(inner, state, batches, logged);
    inner.visible_seq.store(last, Ordering::Release);
}

/// Applies logged batches, each with where its record starts in the WAL segment, in
/// sequence order, to `state`'s memtables: a merge as a put of its result where the key
/// has `max_successive_merges` operands on top already (`db/successive_merges.rs`), and
/// with `logged`, a put of at least its keyspace's blob threshold as a reference to where
/// the segment holds it ([`LoggedValues`]).
fn apply<B: std::ops::Deref<Target = WriteBatch>>(
    inner: &DbInner,
    state: &DbState,
    batches: impl IntoIterator<Item = (B, u64)>,
    logged: Option<&LoggedValues>,
) {
    let limit = inner.opts.max_successive_merges;
    let clock = &*inner.opts.clock;
    let collapse = |id, mem: &_, key: &_, seq, operand: &_| {
        let tree = state.tree(id)?;
        super::successive_merges::collapse(tree, mem, key, seq, operand, limit, clock)
    };
    let staged = |n| lock(&inner.staged_blobs).get(&n).cloned();
    let user_bytes: u64 = batches
        .into_iter()
        .map(|(b, start)| {
            let mem_of = |id| state.tree(id).map(|t| &*t.mem.table);
            // Two instances, so that a database separating no values pays no check per put.
            match logged {
                None => b.insert_collapsing(mem_of, staged, collapse, |_, _, _, _, _| false),
                Some(l) => {
                    let by_ref = |id, mem: &_, key: &_, seq, value: &_| {
                        l.insert(state, &b, start, id, mem, key, seq, value)
                    };
                    b.insert_collapsing(mem_of, staged, collapse, by_ref)
                }
            }
        })
        .sum();
    inner.counters.user_bytes_written.add(user_bytes);
}

/// The WAL segment being written, as the blob file the active memtables read their large
/// values from: a put of at least its keyspace's blob threshold goes into the memtable as
/// a reference to where its record holds the value (`MemTable::insert_referenced`), not as
/// a copy. The memtable is charged a share of the value, so a memtable switch, with its
/// fsyncs and flush, comes once per many values; the flush keeps the segment as their blob
/// file (`flush.rs`) without reading it. The value reaches memory and the disk once.
pub(crate) struct LoggedValues {
    file: Arc<BlobFile>,
}

impl LoggedValues {
    /// For the segment `wal` writes, if a keyspace of `state` separates large values.
    fn of(inner: &DbInner, state: &DbState, wal: &mut WalState) -> Option<LoggedValues> {
        if !state.trees.iter().any(|t| t.opts.blob_threshold.is_some()) {
            return None;
        }
        let number = wal.number;
        let file = wal.segment_file.get_or_insert_with(|| {
            // Read while it grows: a reference never reaches past the records handed to
            // the OS before its entry was inserted, so no bound is needed beyond the read.
            let meta = BlobFileMeta {
                number,
                file_size: u64::MAX,
                kind: BlobFileKind::WalSegment,
                ..BlobFileMeta::default()
            };
            super::table_files::blob_file(&inner.dir, &inner.caches, meta)
        });
        Some(LoggedValues { file: file.clone() })
    }

    /// Inserts the put of `value` (which lies in `batch`, whose record starts at `start`)
    /// at `seq` into `mem`, the memtable of keyspace `id`, as a reference, if the value is
    /// at least the keyspace's blob threshold; false if it is not (the caller copies it).
    #[allow(clippy::too_many_arguments)]
    fn insert(
        &self,
        state: &DbState,
        batch: &WriteBatch,
        start: u64,
        id: KeyspaceId,
        mem: &MemTable,
        key: &[u8],
        seq: SeqNo,
        value: &[u8],
    ) -> bool {
        let threshold = state.tree(id).and_then(|t| t.opts.blob_threshold);
        if threshold.map_or(true, |t| value.len() < t) {
            return false;
        }
        // The op borrows from the batch's bytes, which are the record's payload.
        let logical = value.as_ptr() as usize - batch.data().as_ptr() as usize;
        let r = BlobRef {
            file: self.file.meta.number,
            offset: payload_position(record_start(start), logical as u64),
            len: value.len() as u64,
            crc: crate::coding::crc32(&[value]),
        };
        let mut stored = Vec::with_capacity(32);
        r.encode_to(&mut stored);
        mem.hold_blob(self.file.clone());
        mem.insert_referenced(key, seq, &stored, value.len());
        true
    }
}

/// Where a record appended at `end`, the log's length before it, starts: past the padding
/// the writer adds when too little of the page is left for a fragment header.
fn record_start(end: u64) -> u64 {
    let left = PAGE_SIZE as u64 - end % PAGE_SIZE as u64;
    if left < HEADER_SIZE as u64 {
        end + left
    } else {
        end
    }
}

/// Whether a write may go into `state`'s memtables without the leader's `make_room`: they
/// are not full and no back-pressure applies.
fn has_room(inner: &DbInner, state: &DbState) -> bool {
    let opts = &inner.opts;
    active_memtables(state).0 < opts.memtable_bytes
        && state.max_l0_tables(&inner.picker_policy()) < opts.l0_slowdown_trigger
}

/// The bytes the active memtables (every keyspace's) hold together, and whether all are empty.
fn active_memtables(state: &DbState) -> (usize, bool) {
    match &state.trees[..] {
        // The common case, kept to one memtable's counters.
        [only] => (only.mem.table.charged_bytes(), only.mem.table.is_empty()),
        trees => trees.iter().fold((0, true), |(b, e), t| {
            (b + t.mem.table.charged_bytes(), e && t.mem.table.is_empty())
        }),
    }
}

/// Waits until the direct writes in progress (`write_direct`), if any, have finished,
/// inserts outside the lock included. Called by a leader (or an exclusive task) at the head
/// of the queue: the queue is busy, so no more begin, and a direct write holds the WAL's lock
/// from its check of that until it has either applied its batch or claimed its slot.
fn wait_for_direct_writes(inner: &DbInner) {
    let wal = lock(&inner.wal);
    inner.in_flight.wait_all();
    drop(wal);
}

/// Queues `me` (under the queue's lock), marking the queue busy so that no write logs
/// directly until it is empty again.
fn enqueue(inner: &DbInner, queue: &mut WriteQueue, me: &Arc<PendingWrite>) {
    if queue.pending.is_empty() {
        inner.write_queue_busy.store(true, Ordering::Release);
    }
    queue.pending.push_back(me.clone());
}

/// Marks the queue idle once its last entry is popped (under the queue's lock).
fn note_if_idle(inner: &DbInner, queue: &WriteQueue) {
    if queue.pending.is_empty() {
        inner.write_queue_busy.store(false, Ordering::Release);
    }
}

fn commit(inner: &DbInner, me: &Arc<PendingWrite>) -> Result<()> {
    let mut queue = lock(&inner.write_queue);
    enqueue(inner, &mut queue, me);
    let mut yielded = false;
    loop {
        if let Some(r) = lock(&me.result).take() {
            return r;
        }
        if Arc::ptr_eq(&queue.pending[0], me) {
            break;
        }
        if !yielded {
            // A group's work takes microseconds, less than a sleep and its wake-up: give the
            // leader the core a few times before sleeping.
            yielded = true;
            drop(queue);
            for _ in 0..YIELDS_BEFORE_SLEEP {
                if me.settled.load(Ordering::Acquire) {
                    break;
                }
                std::thread::yield_now();
            }
            queue = lock(&inner.write_queue);
            continue;
        }
        queue = sleep(me, queue);
    }
    // Leader: gather the group while still holding the queue lock, then release it for I/O so
    // new writers can queue behind us. Only a leader pops the queue, so the group stays the
    // first `group.len()` entries until we pop them.
    let mut group = std::mem::take(&mut queue.spare_group);
    let mut bytes = 0;
    let mut need_sync = false;
    for w in &queue.pending {
        // A memtable switch request leads its own group so it applies to exactly the writes
        // before it; an exclusive task leads alone, and the writers behind it wait for it.
        if !group.is_empty() && (w.force_switch || w.exclusive || bytes + w.bytes > MAX_GROUP_BYTES)
        {
            break;
        }
        bytes += w.bytes;
        need_sync |= w.sync;
        group.push(w.clone());
    }
    drop(queue);

    let result = write_group(inner, &group, need_sync, me.force_switch);
    let mine = refusal_or(me, &result);
    let group_len = group.len();
    // Dropped before the followers learn their results, so each finds its entry unique
    // again and can reuse it.
    group.clear();

    let mut queue = lock(&inner.write_queue);
    let popped = queue.pending.pop_front();
    debug_assert!(popped.is_some_and(|p| Arc::ptr_eq(&p, me)));
    // Each waiting writer sleeps on its own condition variable, so exactly those with
    // something to do are woken: the followers, whose results are in, and the new head of
    // the queue, which leads next. One shared variable woke every queued writer at each
    // hand-over, only for all but one of them to find nothing changed and sleep again. With
    // nobody queued no notify is made at all: std's condvar makes a futex syscall per notify
    // even when nobody waits, and a writer arriving later finds itself at the head.
    for _ in 1..group_len {
        if let Some(w) = queue.pending.pop_front() {
            *lock(&w.result) = Some(refusal_or(&w, &result));
            wake(&w);
        }
    }
    // Keep the list for the next leader unless an unusually large group grew it.
    if group.capacity() <= MAX_SPARE_GROUP {
        queue.spare_group = group;
    }
    if let Some(next) = queue.pending.front() {
        wake(next);
    }
    note_if_idle(inner, &queue);
    mine
}

/// A writer's result: why validation refused its batch, if it did, else the group's.
fn refusal_or(w: &PendingWrite, group: &Result<()>) -> Result<()> {
    match lock(&w.refused).take() {
        Some(e) => Err(e),
        None => group.clone(),
    }
}

/// Validates the batches of the group that carry reads, in order, each against the state
/// and the batches before it in the group, which take sequence numbers first. A refused
/// batch is emptied (so nothing of it is logged or applied) and its error kept for its
/// writer. The leader holds the write path, so every write numbered before the group is in
/// `state`'s memtables.
fn validate_group(inner: &DbInner, state: &DbState, group: &[Arc<PendingWrite>]) {
    if group.iter().all(|w| w.reads.is_none()) {
        return;
    }
    let mut batches: Vec<_> = group.iter().map(|w| lock(&w.batch)).collect();
    for (i, w) in group.iter().enumerate() {
        let Some(reads) = &w.reads else { continue };
        let (earlier, rest) = batches.split_at_mut(i);
        if let Err(e) = reads.validate(inner, state, earlier.iter().map(|b| &**b)) {
            rest[0].clear();
            *lock(&w.refused) = Some(e);
        }
    }
}

/// How often a queued writer yields its core, checking whether it has been settled, before it
/// sleeps.
const YIELDS_BEFORE_SLEEP: usize = 16;

/// Sleeps on `me`'s condition variable (with the queue's lock, as every change it waits for is
/// made under it) until notified.
fn sleep<'a>(
    me: &PendingWrite,
    queue: std::sync::MutexGuard<'a, WriteQueue>,
) -> std::sync::MutexGuard<'a, WriteQueue> {
    me.sleeping.store(true, Ordering::Relaxed);
    let queue = me.woken.wait(queue).unwrap_or_else(|p| p.into_inner());
    me.sleeping.store(false, Ordering::Relaxed);
    queue
}

/// Tells a queued writer (under the queue's lock) that its result is in or that it leads now:
/// a writer still yielding sees the flag, a sleeping one is notified. A notify is a futex call
/// even when nobody waits, so it is made only for a writer that sleeps.
fn wake(w: &PendingWrite) {
    w.settled.store(true, Ordering::Release);
    if w.sleeping.load(Ordering::Relaxed) {
        w.woken.notify_one();
    }
}

fn write_group(
    inner: &DbInner,
    group: &[Arc<PendingWrite>],
    need_sync: bool,
    force: bool,
) -> Result<()> {
    inner.check_bg_error()?;
    if inner.closed.load(Ordering::Acquire) {
        return Err(Error::Closed);
    }
    wait_for_direct_writes(inner);
    let mem = make_room(inner, force)?;
    validate_group(inner, &mem, group);

    // The batches are locked one at a time, never contended: their writers wait in the
    // queue until this leader pops them.
    let mut wal = lock(&inner.wal);
    if group.iter().all(|w| lock(&w.batch).is_empty()) {
        // `sync()` and flush requests carry no data; `sync()` still fsyncs what is there.
        if need_sync {
            if let Some(writer) = wal.writer.as_mut() {
                writer.sync().inspect_err(|e| inner.set_bg_error(e.clone()))?;
            }
        }
        return Ok(());
    }
    let wal = &mut *wal;
    let first_seq = wal.last_seq + 1;
    // Where each batch's record starts, for values the memtables hold by reference; no
    // list (and no allocation) when no keyspace separates values.
    let values = LoggedValues::of(inner, &mem, wal);
    let mut starts = Vec::new();
    let writer = wal.writer.as_mut().ok_or(Error::Closed)?;
    let start = writer.len();
    let mut seq = first_seq;
    let logged = (|| -> Result<()> {
        for w in group {
            let mut b = lock(&w.batch);
            if values.is_some() {
                starts.push(writer.len());
            }
            if b.is_empty() {
                continue;
            }
            b.set_sequence(seq);
            seq += b.len() as u64;
            writer.add_record(b.data())?;
        }
        // A sync hands the records to the OS itself, and differently from a flush (see
        // `WritableFile::map_appends`).
        if need_sync {
            writer.sync()
        } else {
            writer.flush()
        }
    })();
    if let Err(e) = logged {
        return Err(refuse_logged(inner, writer, start, e));
    }
    inner.counters.wal_bytes_written.add(writer.len() - start);
    wal.last_seq = seq - 1;
    let batches = group
        .iter()
        .enumerate()
        .map(|(i, w)| (lock(&w.batch), starts.get(i).copied().unwrap_or(0)));
    apply_and_publish(inner, &mem, batches, values.as_ref(), seq - 1);
    Ok(())
}

/// One put, delete or range delete, as `Db` and `Keyspace` take them.
#[derive(Clone, Copy)]
pub(crate) enum SingleWrite<'a> {
    Put(&'a [u8], &'a [u8]),
    Merge(&'a [u8], &'a [u8]),
    Delete(&'a [u8]),
    DeleteRange(&'a [u8], &'a [u8]),
}

/// Writes one operation to `keyspace` with the database's default durability, after the
/// checks every single-key write makes: the handle is writable, the key and value are within
/// the limits (an empty range writes nothing), and then `live` — whether the keyspace still
/// exists — so a bad argument is reported before a dropped keyspace.
pub(crate) fn write_one(
    inner: &DbInner,
    keyspace: KeyspaceId,
    op: SingleWrite<'_>,
    live: impl FnOnce() -> Result<()>,
) -> Result<()> {
    inner.check_writable()?;
    match op {
        SingleWrite::Put(key, value) if value.len() > crate::MAX_VALUE_BYTES => {
            return super::large_value::put(inner, keyspace, key, value, live);
        }
        SingleWrite::Put(key, value) | SingleWrite::Merge(key, value) => {
            check_entry_size(key, value)?
        }
        SingleWrite::Delete(key) => check_entry_size(key, &[])?,
        SingleWrite::DeleteRange(start, end) => {
            check_range_bound(start)?;
            check_range_bound(end)?;
            if start >= end {
                return Ok(());
            }
        }
    }
    live()?;
    if let SingleWrite::Merge(key, operand) = op {
        check_merge(&inner.state.load(), keyspace, key, operand)?;
    }
    let bytes = match op {
        SingleWrite::Put(key, value) | SingleWrite::Merge(key, value) => key.len() + value.len(),
        SingleWrite::Delete(key) => key.len(),
        SingleWrite::DeleteRange(start, end) => start.len() + end.len(),
    };
    // The ops' own bytes: a lower bound of the encoding, exact enough for a limit meant for
    // batches (and no copy is made to learn the exact size).
    check_batch_bytes(inner, bytes)?;
    write(inner, inner.opts.sync_writes, false, |b| match op {
        SingleWrite::Put(key, value) => b.put_to(keyspace, key, value),
        SingleWrite::Merge(key, operand) => b.merge_to(keyspace, key, operand),
        SingleWrite::Delete(key) => b.delete_to(keyspace, key),
        SingleWrite::DeleteRange(start, end) => b.delete_range_to(keyspace, start, end),
    })
}

/// Refuses a merge into `keyspace` when it has no merge operator, or when the operator
/// refuses the operand ([`crate::MergeOperator::check_operand`]): no read could combine it.
/// A keyspace that no longer exists is left to the write's own check.
pub(crate) fn check_merge(
    state: &DbState,
    keyspace: KeyspaceId,
    key: &[u8],
    operand: &[u8],
) -> Result<()> {
    match state.tree(keyspace) {
        Some(t) => t.merger().check(key, operand),
        None => Ok(()),
    }
}

/// Refuses a write of `bytes` over [`crate::Options::max_batch_bytes`].
pub(crate) fn check_batch_bytes(inner: &DbInner, bytes: usize) -> Result<()> {
    let limit = inner.opts.max_batch_bytes;
    match bytes > limit {
        true => Err(Error::BatchTooLarge { bytes, limit }),
        false => Ok(()),
    }
}

/// The leadership of the write queue held with no group, by [`exclusive`]: while it lives no
/// write is logged, sequenced or applied, and its methods do what otherwise only a leader
/// does.
pub(crate) struct Exclusive<'a> {
    inner: &'a DbInner,
}

/// Runs `task` as the write leader with no group: it waits for the writes queued before it,
/// and the writes queued after it wait until `task` returns, then proceed as usual. Reads and
/// background work go on meanwhile.
pub(crate) fn exclusive<T>(
    inner: &DbInner,
    task: impl FnOnce(&Exclusive<'_>) -> Result<T>,
) -> Result<T> {
    exclusive_while_stopped(inner, |ex| {
        inner.check_bg_error()?;
        task(ex)
    })
}

/// [`exclusive`], also when a background error has stopped the database: for resuming it.
pub(crate) fn exclusive_while_stopped<T>(
    inner: &DbInner,
    task: impl FnOnce(&Exclusive<'_>) -> Result<T>,
) -> Result<T> {
    // As for a write: the callback's thread may be what the leadership waits for.
    crate::events::refuse_in_callback()?;
    let me = Arc::new(PendingWrite { exclusive: true, ..PendingWrite::default() });
    let mut queue = lock(&inner.write_queue);
    enqueue(inner, &mut queue, &me);
    // No leader groups an exclusive entry, so nobody hands it a result: it only waits to
    // reach the head.
    while !Arc::ptr_eq(&queue.pending[0], &me) {
        queue = sleep(&me, queue);
    }
    drop(queue);
    // Stepping down happens even if `task` panics, or every later writer would wait forever.
    struct StepDown<'a>(&'a DbInner);
    impl Drop for StepDown<'_> {
        fn drop(&mut self) {
            let mut queue = lock(&self.0.write_queue);
            queue.pending.pop_front();
            if let Some(next) = queue.pending.front() {
                wake(next);
            }
            note_if_idle(self.0, &queue);
        }
    }
    let _step_down = StepDown(inner);
    wait_for_direct_writes(inner);
    inner.check_open()?;
    task(&Exclusive { inner })
}

impl Exclusive<'_> {
    /// Takes the next sequence number `N` for an ingest: logs a batch holding nothing but a
    /// reserved op at `N` and freezes the memtables, so the segment they were written to ends
    /// at `N` and writes from now on take `N + 1` onwards in a new segment. Returns `N` and
    /// the number of the segment that ends at it: once the memtables frozen with it are
    /// flushed, the manifest records a last sequence of at least `N` and recovery no longer
    /// reads that segment.
    ///
    /// If the memtable switch fails, `N` stays taken (recovery replays the reserved op as a
    /// sequence number that holds nothing), and writes go on after it.
    pub(crate) fn reserve_seq(&self) -> Result<(SeqNo, u64)> {
        let inner = self.inner;
        let (seq, segment) = {
            let mut wal = lock(&inner.wal);
            let wal = &mut *wal;
            let seq = wal.last_seq + 1;
            let writer = wal.writer.as_mut().ok_or(Error::Closed)?;
            let start = writer.len();
            let mut batch = WriteBatch::reserved();
            batch.set_sequence(seq);
            if let Err(e) = writer.add_record(batch.data()).and_then(|()| writer.flush()) {
                // As for a refused group in `write_group`: the record must never be replayed.
                let _ = writer.cut_back_to(start);
                inner.set_bg_error(e.clone());
                return Err(e);
            }
            inner.counters.wal_bytes_written.add(writer.len() - start);
            wal.last_seq = seq;
            (seq, wal.number)
        };
        // Fsyncs the segment, reserved op included, before any write can follow it.
        wal::switch_memtable(inner)?;
        Ok((seq, segment))
    }
}

/// Ensures the memtable has room, switching to a new one when it is full (or `force`), and
/// applies back-pressure: a short delay per write while L0 is filling, a wait when immutable
/// memtables or L0 tables reach their limits. Memory stays bounded whatever the write rate.
///
/// The memtables of every keyspace count together against `memtable_bytes`, and switch
/// together.
///
/// Returns the state whose active memtables the group inserts into: only a leader switches
/// memtables (and keyspaces are created and dropped only by an exclusive leader), so they
/// stay the active ones until this leadership ends.
///
/// Tells the event listeners when writes begin and stop stalling: each call is made by the
/// one leader there is at a time, holding no lock.
fn make_room(inner: &DbInner, force: bool) -> Result<Arc<DbState>> {
    let mut slowed = false;
    let room = make_room_or_wait(inner, force, &mut slowed);
    // A delay is a stall from the first delayed write to the first one not delayed.
    let now = match room {
        Ok(_) if slowed => Some(StallReason::L0Slowdown),
        _ => None,
    };
    inner.events.set_stall(now, |reason| stall_info(inner, reason));
    room
}

fn make_room_or_wait(inner: &DbInner, force: bool, slowed: &mut bool) -> Result<Arc<DbState>> {
    let opts = &inner.opts;
    loop {
        // A guard, not a clone of the state: it is dropped before any wait below.
        let state = inner.state.load();
        let l0 = state.max_l0_tables(&inner.picker_policy());
        if !*slowed && l0 >= opts.l0_slowdown_trigger && l0 < opts.l0_stop_trigger {
            // Give compaction a head start without stopping writes outright (LevelDB's 1 ms).
            *slowed = true;
            drop(state);
            let reason = Some(StallReason::L0Slowdown);
            inner.events.set_stall(reason, |reason| stall_info(inner, reason));
            inner.counters.write_slowdowns.incr();
            let started = Instant::now();
            let bg = lock(&inner.bg);
            inner.check_bg_error_locked(&bg)?;
            drop(inner.bg_done_cv.wait_timeout(bg, Duration::from_millis(1)));
            inner.counters.write_stall_micros.add(started.elapsed().as_micros() as u64);
            continue;
        }
        let (bytes, empty) = active_memtables(&state);
        let wants_switch = bytes >= opts.memtable_bytes || (force && !empty);
        if !wants_switch {
            return Ok(arc_swap::Guard::into_inner(state));
        }
        if state.imm_len() >= opts.max_immutable_memtables || l0 >= opts.l0_stop_trigger {
            let reason = match state.imm_len() >= opts.max_immutable_memtables {
                true => StallReason::ImmutableMemtables,
                false => StallReason::L0Stop,
            };
            drop(state);
            inner.events.set_stall(Some(reason), |reason| stall_info(inner, reason));
            inner.counters.write_stalls.incr();
            let _timer = StallTimer(inner, Instant::now());
            let mut bg = lock(&inner.bg);
            loop {
                inner.check_bg_error_locked(&bg)?;
                if bg.shutdown {
                    return Err(Error::Closed);
                }
                let s = inner.load_state();
                if s.imm_len() < opts.max_immutable_memtables
                    && s.max_l0_tables(&inner.picker_policy()) < opts.l0_stop_trigger
                {
                    break;
                }
                inner.bg_cv.notify_all();
                bg = inner.bg_done_cv.wait(bg).unwrap_or_else(|p| p.into_inner());
            }
            continue;
        }
        drop(state);
        wal::switch_memtable(inner)?;
        return Ok(inner.load_state());
    }
}

/// What the listeners are told of a stall for `reason` beginning now.
fn stall_info(inner: &DbInner, reason: StallReason) -> StallInfo {
    let state = inner.load_state();
    let fullest = state
        .trees
        .iter()
        .max_by_key(|t| bloomkv_tree::compact::picker::stall_tables(t, &inner.picker_policy()));
    let keyspace = match reason {
        StallReason::ImmutableMemtables => None,
        _ => fullest.map(|t| t.name.to_string()),
    };
    StallInfo {
        reason,
        keyspace,
        immutable_memtables: state.imm_len(),
        l0_tables: state.max_l0_tables(&inner.picker_policy()),
        duration: Duration::ZERO,
    }
}

/// Adds the time since `.1` to the stall counter when dropped, so a stop that ends in an
/// error is counted too.
struct StallTimer<'a>(&'a DbInner, Instant);

impl Drop for StallTimer<'_> {
    fn drop(&mut self) {
        self.0.counters.write_stall_micros.add(self.1.elapsed().as_micros() as u64);
    }
}

/// A writer's entry in the write queue.
#[derive(Default)]
pub(crate) struct PendingWrite {
    /// Read in place by the leader that writes the group (so the batch is never copied).
    batch: Mutex<WriteBatch>,
    /// Bytes of the batch, for sizing groups without locking it.
    bytes: usize,
    sync: bool,
    /// A flush request: switch the memtable even if it is not full.
    force_switch: bool,
    /// Not a write but an exclusive task (`write::exclusive`): it leads alone, and no leader
    /// takes it into a group.
    exclusive: bool,
    result: Mutex<Option<Result<()>>>,
    /// What a transaction read: the batch is written only if none of it changed since.
    reads: Option<ReadSet>,
    /// Why validation refused the batch (set by the leader, taken with the result).
    refused: Mutex<Option<Error>>,
    /// What the writer sleeps on while queued (always with the queue's lock): notified when
    /// its result is in or when it reaches the head of the queue.
    woken: std::sync::Condvar,
    /// Set (under the queue's lock) when its result is in or it reaches the head: what a
    /// writer yielding before it sleeps looks at.
    settled: std::sync::atomic::AtomicBool,
    /// True while the writer sleeps on `woken` (read and written under the queue's lock).
    sleeping: std::sync::atomic::AtomicBool,
}

/// Writers waiting to commit, head first; the head is the leader. See `write.rs`.
#[derive(Default)]
pub(crate) struct WriteQueue {
    pending: VecDeque<Arc<PendingWrite>>,
    /// The leader's list of its group, handed from leader to leader so that committing a
    /// group does not allocate one.
    spare_group: Vec<Arc<PendingWrite>>,
}
