//! [`LogStore`]: openraft's log and vote storage on bloomkv.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex};

use bloomkv::Readable;
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{
    AnyError, Entry, EntryPayload, ErrorSubject, ErrorVerb, LogId, OptionalSend, RaftLogReader,
    StorageIOError, Vote,
};

use crate::group_store::{Batch, Store};
use crate::{
    blocking, decode, encode, keys, storage_error, NodeId, OrStorage, StorageError, TypeConfig,
};

/// The raft log, the vote and the committed log id of one raft group on one node, in the
/// node's bloomkv database.
///
/// Entries are keyed by index (see DESIGN.md, "Replication (raft/)"); every change is one
/// atomic, fsynced bloomkv batch: `append` writes all its entries in one, `truncate` and `purge`
/// delete their range (and `purge` records the last purged log id) in one. The log is always
/// one run of consecutive indexes after the last purged one.
///
/// Cloning is cheap; a clone is also the log reader openraft's replication tasks use.
#[derive(Debug, Clone)]
pub struct LogStore {
    db: Store,
    max_append_bytes: usize,
    /// Encoded size by index of the entries in the log, as far as known (entries written
    /// before this process are filled in when first asked for): what a follower's lag is in
    /// bytes, without reading the entries again at every look.
    sizes: Arc<Mutex<BTreeMap<u64, u32>>>,
    /// The last membership appended here that leaves out the leader that wrote it.
    leaving: Arc<tokio::sync::watch::Sender<Option<LeaderLeaving>>>,
}

/// A membership entry, appended to this node's log, whose voters leave out the leader that
/// wrote it: once it is committed that leader steps down, and the group has no leader until
/// one of `voters` is elected (see `shard_node::take_over`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaderLeaving {
    /// The entry's index.
    pub index: u64,
    /// The leader that wrote it.
    pub leader: NodeId,
    /// Its voters.
    pub voters: BTreeSet<NodeId>,
}

impl LeaderLeaving {
    /// What `entry` says, if it is a membership leaving out its leader (a joint one, the first
    /// step of a change, still holds the old voters: its leader stays).
    fn of(entry: &Entry<TypeConfig>) -> Option<LeaderLeaving> {
        let EntryPayload::Membership(m) = &entry.payload else { return None };
        let leader = entry.log_id.leader_id.node_id;
        let voters: BTreeSet<NodeId> = m.voter_ids().collect();
        (m.get_joint_config().len() == 1 && !voters.contains(&leader)).then_some(LeaderLeaving {
            index: entry.log_id.index,
            leader,
            voters,
        })
    }
}

/// The default of [`LogStore::with_max_append_bytes`]: TiKV's `raft-max-size-per-msg`. One
/// append must reach a follower and be fsynced there within openraft's append timeout (its
/// heartbeat interval); an append of a few MiB does that on a loaded disk, one of tens of MiB
/// does not, is sent again, and queues behind itself until the follower stops answering.
pub const DEFAULT_MAX_APPEND_BYTES: usize = 1 << 20;

fn read_logs(e: AnyError) -> StorageError {
    StorageIOError::read_logs(e).into()
}

fn write_logs(e: AnyError) -> StorageError {
    StorageIOError::write_logs(e).into()
}

fn delete_logs(e: AnyError) -> StorageError {
    storage_error(ErrorSubject::Logs, ErrorVerb::Delete, e)
}

impl LogStore {
    pub(crate) fn new(db: Store) -> LogStore {
        LogStore {
            db,
            max_append_bytes: DEFAULT_MAX_APPEND_BYTES,
            sizes: Default::default(),
            leaving: Arc::new(tokio::sync::watch::Sender::new(None)),
        }
    }

    /// Bounds the encoded bytes of the entries one append to a follower carries (default
    /// [`DEFAULT_MAX_APPEND_BYTES`]); an append always carries at least one entry, however
    /// large. openraft's `max_payload_entries` bounds the same appends by count. A follower's
    /// network layer must accept request bodies of this size (or of the largest entry, if
    /// larger), else it refuses every large append and replication stalls. A follower writes
    /// an append in one bloomkv batch, so it must stay well below bloomkv's largest,
    /// [`bloomkv::Options::MAX_BATCH_BYTES_RANGE`] (1 GiB), or the follower's append fails.
    ///
    /// ```
    /// let dir = tempfile::tempdir().unwrap();
    /// let (log, _sm) = bloomkv_raft::open(dir.path(), bloomkv::Options::default()).unwrap();
    /// let log = log.with_max_append_bytes(4 << 20);
    /// # drop(log);
    /// ```
    pub fn with_max_append_bytes(mut self, bytes: usize) -> LogStore {
        self.max_append_bytes = bytes.max(1);
        self
    }

    fn last_purged(&self) -> Result<Option<LogId<NodeId>>, StorageError> {
        decode(self.db.get(keys::PURGED)).map_err(read_logs)
    }

    /// Writes `entries` in one fsynced batch: when this returns they are readable and durable.
    pub(crate) async fn write_entries(
        &self,
        entries: impl IntoIterator<Item = Entry<TypeConfig>>,
    ) -> Result<(), StorageError> {
        let mut batch = self.db.batch();
        let mut sizes = Vec::new();
        let mut leaving = None;
        for entry in entries {
            leaving = LeaderLeaving::of(&entry).or(leaving);
            let encoded = encode(&entry).map_err(write_logs)?;
            sizes.push((entry.log_id.index, encoded.len() as u32));
            batch.put(keys::log(entry.log_id.index), encoded);
        }
        if batch.is_empty() {
            return Ok(());
        }
        let db = self.db.clone();
        blocking(move || db.commit(&batch, true))
            .await
            .map_err(write_logs)?
            .or_storage(write_logs)?;
        self.sizes.lock().unwrap().extend(sizes);
        if let Some(leaving) = leaving {
            self.leaving.send_replace(Some(leaving));
        }
        Ok(())
    }

    /// Tells of each membership appended here that leaves out its leader ([`LeaderLeaving`]),
    /// the last one first; ends once the log store is dropped (its group stopped).
    pub(crate) fn leader_leaving(&self) -> tokio::sync::watch::Receiver<Option<LeaderLeaving>> {
        self.leaving.subscribe()
    }

    /// Encoded bytes of the log's entries after index `after` (from the first if `None`) up to
    /// and including `upto`: on a leader, how far behind a follower that matched `after` is.
    /// Entries already purged count nothing (a follower that far behind needs a snapshot).
    pub fn bytes_between(&self, after: Option<u64>, upto: u64) -> bloomkv::Result<u64> {
        let from = after.map_or(0, |a| a.saturating_add(1));
        if from > upto {
            return Ok(0);
        }
        let (mut total, mut missing) = (0u64, Vec::new());
        {
            let sizes = self.sizes.lock().unwrap();
            let mut next = from;
            for (&index, &size) in sizes.range(from..=upto) {
                if index > next {
                    missing.push(next..index);
                }
                total += u64::from(size);
                next = index + 1;
            }
            if next <= upto {
                missing.push(next..upto + 1);
            }
        }
        for gap in missing {
            let range = keys::log(gap.start).to_vec()..keys::log(gap.end).to_vec();
            let mut found = Vec::new();
            for item in self.db.range(range) {
                let (key, value) = item?;
                if let Some(index) = keys::log_index(&key) {
                    found.push((index, value.len() as u32));
                    total += value.len() as u64;
                }
            }
            self.sizes.lock().unwrap().extend(found);
        }
        Ok(total)
    }

    async fn write_synced(
        &self,
        batch: Batch,
        err: fn(AnyError) -> StorageError,
    ) -> Result<(), StorageError> {
        let db = self.db.clone();
        blocking(move || db.commit(&batch, true)).await.map_err(err)?.or_storage(err)
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError> {
        self.read_entries(range, usize::MAX)
    }

    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError> {
        self.read_entries(start..end, self.max_append_bytes)
    }
}

impl LogStore {
    /// The entries in `range`, stopping before the first that would take their encoded size
    /// past `budget` (the first entry is always taken).
    fn read_entries<RB: RangeBounds<u64>>(
        &self,
        range: RB,
        budget: usize,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError> {
        let from = match range.start_bound() {
            Bound::Included(&i) => i,
            Bound::Excluded(&i) => match i.checked_add(1) {
                Some(i) => i,
                None => return Ok(Vec::new()),
            },
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&i) => Bound::Included(keys::log(i).to_vec()),
            Bound::Excluded(&i) => Bound::Excluded(keys::log(i).to_vec()),
            Bound::Unbounded => Bound::Excluded(keys::LOG_END.to_vec()),
        };
        let mut entries = Vec::new();
        let mut bytes = 0usize;
        for item in self.db.range((Bound::Included(keys::log(from).to_vec()), end)) {
            let (key, value) = item.or_storage(read_logs)?;
            bytes = bytes.saturating_add(value.len());
            if bytes > budget && !entries.is_empty() {
                break;
            }
            let index = keys::log_index(&key).unwrap_or_default();
            let entry: Entry<TypeConfig> = postcard::from_bytes(&value)
                .map_err(|e| StorageIOError::read_log_at_index(index, AnyError::new(&e)))?;
            if entry.log_id.index != index {
                return Err(StorageIOError::read_log_at_index(
                    index,
                    AnyError::error(format!("entry under log key {index} is {}", entry.log_id)),
                )
                .into());
            }
            entries.push(entry);
        }
        Ok(entries)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        // One view, so the first entry, the search for the last and the purged id agree.
        let view = self.db.snapshot();
        let last_purged_log_id: Option<LogId<NodeId>> =
            decode(view.get(keys::PURGED)).map_err(read_logs)?;
        let from = last_purged_log_id.map_or(0, |p| p.index + 1);
        // The last entry is the last key of the log's range: one step back from its end.
        let last = view.range(keys::log(from).to_vec()..keys::LOG_END.to_vec()).next_back();
        let Some(last) = last else {
            return Ok(LogState { last_purged_log_id, last_log_id: last_purged_log_id });
        };
        let (key, value) = last.or_storage(read_logs)?;
        let index =
            keys::log_index(&key).ok_or_else(|| read_logs(AnyError::error("malformed log key")))?;
        let entry: Entry<TypeConfig> = postcard::from_bytes(&value)
            .map_err(|e| StorageIOError::read_log_at_index(index, AnyError::new(&e)))?;
        let last_log_id = Some(entry.log_id);
        Ok(LogState { last_purged_log_id, last_log_id: last_log_id.or(last_purged_log_id) })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError> {
        let write_vote = |e: AnyError| StorageIOError::write_vote(e).into();
        let mut batch = self.db.batch();
        batch.put(keys::VOTE, encode(vote).map_err(write_vote)?);
        self.write_synced(batch, write_vote).await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError> {
        decode(self.db.get(keys::VOTE)).map_err(|e| StorageIOError::read_vote(e).into())
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<NodeId>>,
    ) -> Result<(), StorageError> {
        let write = |e: AnyError| storage_error(ErrorSubject::Store, ErrorVerb::Write, e);
        let mut batch = self.db.batch();
        match committed {
            Some(id) => batch.put(keys::COMMITTED, encode(&id).map_err(write)?),
            None => batch.delete(keys::COMMITTED),
        }
        // Not synced: openraft reads it back only to apply sooner after a restart, and an
        // older one (or none) is safe; the entries it names are in the fsynced log, and the
        // WAL recovers a prefix, so a committed id that survives never outlives its entries.
        let db = self.db.clone();
        blocking(move || db.commit(&batch, false)).await.map_err(write)?.or_storage(write)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError> {
        decode(self.db.get(keys::COMMITTED))
            .map_err(|e| storage_error(ErrorSubject::Store, ErrorVerb::Read, e))
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // The batch is fsynced before `write_entries` returns, so the entries are readable
        // and durable at once and the callback can be called right away.
        self.write_entries(entries).await?;
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError> {
        // One range tombstone for the whole tail, however long.
        let mut batch = self.db.batch();
        batch.delete_range(keys::log(log_id.index).to_vec()..keys::LOG_END.to_vec());
        self.write_synced(batch, delete_logs).await?;
        self.sizes.lock().unwrap().split_off(&log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError> {
        let purged = self.last_purged()?;
        if purged.is_some_and(|p| p.index >= log_id.index) {
            // Purged already (a snapshot's install purges the log it covers).
            let mut sizes = self.sizes.lock().unwrap();
            *sizes = sizes.split_off(&(log_id.index + 1));
            return Ok(());
        }
        let mut batch = self.db.batch();
        purge_into(&mut batch, purged, log_id).map_err(delete_logs)?;
        self.write_synced(batch, delete_logs).await?;
        let mut sizes = self.sizes.lock().unwrap();
        *sizes = sizes.split_off(&(log_id.index + 1));
        Ok(())
    }
}

/// Adds to `batch` the purge of the log up to and including `upto`, the log having been
/// purged up to `purged`: one range tombstone (entries past the log's end may be covered: a
/// snapshot can move the log past them) in the same batch as the new purged id, so that a
/// crash leaves either the old log or the new one, never a hole. For [`LogStore`]'s `purge`
/// and a snapshot's install, which purges the log it covers in the batch that makes it
/// current.
pub(crate) fn purge_into(
    batch: &mut Batch,
    purged: Option<LogId<NodeId>>,
    upto: LogId<NodeId>,
) -> Result<(), AnyError> {
    let from = purged.map_or(0, |p| p.index + 1);
    let end = upto.index.checked_add(1).map_or(keys::LOG_END.to_vec(), |i| keys::log(i).to_vec());
    batch.delete_range(keys::log(from).to_vec()..end);
    batch.put(keys::PURGED, encode(&upto)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use openraft::testing::log_id;
    use openraft::EntryPayload;

    use super::*;

    fn blank(term: u64, index: u64) -> Entry<TypeConfig> {
        Entry { log_id: log_id(term, 1, index), payload: EntryPayload::Blank }
    }

    fn store() -> (tempfile::TempDir, LogStore) {
        let dir = tempfile::tempdir().unwrap();
        let (log, _) = crate::open(dir.path(), bloomkv::Options::default()).unwrap();
        (dir, log)
    }

    async fn indexes(log: &mut LogStore) -> Vec<u64> {
        log.try_get_log_entries(..).await.unwrap().iter().map(|e| e.log_id.index).collect()
    }

    #[tokio::test]
    async fn the_log_state_names_the_end_of_every_run() {
        let (_dir, mut log) = store();
        let mut written = 0;
        for len in [1u64, 2, 3, 7, 8, 9, 100, 1025] {
            log.write_entries((written + 1..=len).map(|i| blank(1, i))).await.unwrap();
            written = len;
            let state = log.get_log_state().await.unwrap();
            assert_eq!(state.last_log_id, Some(log_id(1, 1, len)), "run 1..={len}");
        }
    }

    #[tokio::test]
    async fn truncate_and_purge_leave_one_consecutive_run() {
        let (_dir, mut log) = store();
        log.write_entries((1..=20).map(|i| blank(1, i))).await.unwrap();

        log.truncate(log_id(1, 1, 15)).await.unwrap();
        assert_eq!(indexes(&mut log).await, (1..=14).collect::<Vec<_>>());
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_log_id, Some(log_id(1, 1, 14)));

        // Replacing the truncated tail with entries of a later term.
        log.write_entries((15..=16).map(|i| blank(2, i))).await.unwrap();
        log.purge(log_id(1, 1, 5)).await.unwrap();
        assert_eq!(indexes(&mut log).await, (6..=16).collect::<Vec<_>>());
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(log_id(1, 1, 5)));
        assert_eq!(state.last_log_id, Some(log_id(2, 1, 16)));

        // An older purge changes nothing; purging past the end empties the log.
        log.purge(log_id(1, 1, 3)).await.unwrap();
        assert_eq!(indexes(&mut log).await.len(), 11);
        log.purge(log_id(3, 1, 30)).await.unwrap();
        assert!(indexes(&mut log).await.is_empty());
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_log_id, Some(log_id(3, 1, 30)));
        log.write_entries([blank(3, 31)]).await.unwrap();
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_log_id, Some(log_id(3, 1, 31)));
    }

    #[tokio::test]
    async fn an_append_is_bounded_in_bytes_but_carries_at_least_one_entry() {
        let (_dir, log) = store();
        let value = |i: u64| crate::Command::put(format!("k{i:03}"), vec![7u8; 1000]);
        let entry =
            |i: u64| Entry { log_id: log_id(1, 1, i), payload: EntryPayload::Normal(value(i)) };
        log.write_entries((1..=50).map(entry)).await.unwrap();
        let one = encode(&entry(1)).unwrap().len();

        let mut limited = log.clone().with_max_append_bytes(10 * one);
        let got = limited.limited_get_log_entries(1, 51).await.unwrap();
        assert_eq!(
            got.iter().map(|e| e.log_id.index).collect::<Vec<_>>(),
            (1..=10).collect::<Vec<_>>()
        );
        // Below one entry's size, one entry still goes: replication must always progress.
        let mut tiny = log.clone().with_max_append_bytes(1);
        let got = tiny.limited_get_log_entries(20, 51).await.unwrap();
        assert_eq!(got.iter().map(|e| e.log_id.index).collect::<Vec<_>>(), vec![20]);
        // Reads for other purposes are not limited.
        assert_eq!(tiny.try_get_log_entries(1..51).await.unwrap().len(), 50);
    }

    #[tokio::test]
    async fn lag_in_bytes_counts_the_entries_between_and_forgets_purged_ones() {
        let (dir, log) = store();
        let entry = |i: u64| Entry {
            log_id: log_id(1, 1, i),
            payload: EntryPayload::Normal(crate::Command::put("k", vec![0u8; 100 * i as usize])),
        };
        log.write_entries((1..=10).map(entry)).await.unwrap();
        let size = |i: u64| encode(&entry(i)).unwrap().len() as u64;
        let sum = |r: std::ops::RangeInclusive<u64>| r.map(size).sum::<u64>();
        assert_eq!(log.bytes_between(None, 10).unwrap(), sum(1..=10));
        assert_eq!(log.bytes_between(Some(4), 7).unwrap(), sum(5..=7));
        assert_eq!(log.bytes_between(Some(10), 10).unwrap(), 0);
        let mut purging = log.clone();
        purging.purge(log_id(1, 1, 3)).await.unwrap();
        assert_eq!(log.bytes_between(None, 10).unwrap(), sum(4..=10));
        // Entries written by an earlier process are read once, then known.
        drop((log, purging));
        let (log, _) = crate::open(dir.path(), bloomkv::Options::default()).unwrap();
        assert_eq!(log.bytes_between(Some(5), 10).unwrap(), sum(6..=10));
        assert_eq!(log.sizes.lock().unwrap().len(), 5);
        assert_eq!(log.bytes_between(None, 10).unwrap(), sum(4..=10));
    }
}
