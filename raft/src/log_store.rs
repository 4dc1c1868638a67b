//! [`LogStore`]: openraft's log and vote storage on bloomkv.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use bloomkv::{Db, WriteBatch, WriteOptions};
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{
    AnyError, Entry, ErrorSubject, ErrorVerb, LogId, OptionalSend, RaftLogReader, StorageIOError,
    Vote,
};

use crate::{
    blocking, decode, encode, keys, storage_error, NodeId, OrStorage, StorageError, TypeConfig,
};

/// The end of the log's key range: the first key after every `log/...` key.
const LOG_END: &[u8] = b"log0";

/// The raft log, the vote and the committed log id of one node, in its bloomkv database.
///
/// Entries are keyed by index (see DESIGN.md, "Replication (raft/)"); every change is one
/// atomic, fsynced bloomkv batch: `append` writes all its entries in one, `truncate` and `purge`
/// delete their range (and `purge` records the last purged log id) in one. The log is always
/// one run of consecutive indexes after the last purged one.
///
/// Cloning is cheap; a clone is also the log reader openraft's replication tasks use.
#[derive(Debug, Clone)]
pub struct LogStore {
    db: Arc<Db>,
}

fn read_logs(e: AnyError) -> StorageError {
    StorageIOError::read_logs(e).into()
}

fn write_logs(e: AnyError) -> StorageError {
    StorageIOError::write_logs(e).into()
}

fn delete_logs(e: AnyError) -> StorageError {
    storage_error(ErrorSubject::Logs, ErrorVerb::Delete, e)
}

fn synced() -> WriteOptions {
    WriteOptions::new().sync(true)
}

impl LogStore {
    pub(crate) fn new(db: Arc<Db>) -> LogStore {
        LogStore { db }
    }

    fn last_purged(&self) -> Result<Option<LogId<NodeId>>, StorageError> {
        decode(self.db.get(keys::PURGED)).map_err(read_logs)
    }

    /// Writes `entries` in one fsynced batch: when this returns they are readable and durable.
    pub(crate) async fn write_entries(
        &self,
        entries: impl IntoIterator<Item = Entry<TypeConfig>>,
    ) -> Result<(), StorageError> {
        let mut batch = WriteBatch::new();
        for entry in entries {
            batch.put(keys::log(entry.log_id.index), encode(&entry).map_err(write_logs)?);
        }
        if batch.is_empty() {
            return Ok(());
        }
        let db = self.db.clone();
        blocking(move || db.write(&batch, &synced()))
            .await
            .map_err(write_logs)?
            .or_storage(write_logs)
    }

    async fn write_synced(
        &self,
        batch: WriteBatch,
        err: fn(AnyError) -> StorageError,
    ) -> Result<(), StorageError> {
        let db = self.db.clone();
        blocking(move || db.write(&batch, &synced())).await.map_err(err)?.or_storage(err)
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
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
            Bound::Unbounded => Bound::Excluded(LOG_END.to_vec()),
        };
        let mut entries = Vec::new();
        for item in self.db.range((Bound::Included(keys::log(from).to_vec()), end)) {
            let (key, value) = item.or_storage(read_logs)?;
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
        let last = view.range(keys::log(from).to_vec()..LOG_END.to_vec()).next_back();
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
        let mut batch = WriteBatch::new();
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
        let mut batch = WriteBatch::new();
        match committed {
            Some(id) => batch.put(keys::COMMITTED, encode(&id).map_err(write)?),
            None => batch.delete(keys::COMMITTED),
        }
        self.write_synced(batch, write).await
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
        let mut batch = WriteBatch::new();
        batch.delete_range(keys::log(log_id.index).to_vec()..LOG_END.to_vec());
        self.write_synced(batch, delete_logs).await
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError> {
        let purged = self.last_purged()?;
        if purged.is_some_and(|p| p.index >= log_id.index) {
            return Ok(());
        }
        let from = purged.map_or(0, |p| p.index + 1);
        // One range tombstone up to and including the purged id (entries past the log's end
        // may be covered: a snapshot can move the log past them), in the same batch as the
        // new purged id, so that a crash leaves either the old log or the new one, never a
        // hole.
        let end = log_id.index.checked_add(1).map_or(LOG_END.to_vec(), |i| keys::log(i).to_vec());
        let mut batch = WriteBatch::new();
        batch.delete_range(keys::log(from).to_vec()..end);
        batch.put(keys::PURGED, encode(&log_id).map_err(delete_logs)?);
        self.write_synced(batch, delete_logs).await
    }
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
}
