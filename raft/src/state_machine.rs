//! [`StateMachine`]: the replicated key-value data and its snapshots on bloomkv.

use std::io::Cursor;
use std::sync::{Arc, Mutex};

use bloomkv::{Db, WriteBatch, WriteOptions};
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    AnyError, BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder,
    SnapshotMeta, StorageIOError, StoredMembership,
};

use crate::snapshot::{self, Header};
use crate::{
    blocking, decode, encode, keys, KvReader, NodeId, OrStorage, Outcome, StorageError, TypeConfig,
};

/// The replicated key-value data of one node (keys under `data/`), its last applied log id and
/// membership, and its current snapshot, in the node's bloomkv database.
///
/// Each `apply` is one bloomkv batch holding the commands' writes together with the new
/// applied log id and membership, so after a crash the data and the applied id always agree.
#[derive(Debug)]
pub struct StateMachine {
    db: Arc<Db>,
    /// Held while the current snapshot is read and replaced: a snapshot build runs in a task
    /// of its own, beside an install, and must not put back an older snapshot over the new.
    snapshot_lock: Arc<Mutex<()>>,
}

/// Builds a snapshot from the state machine as it was when openraft asked for the builder.
#[derive(Debug)]
pub struct SnapshotBuilder {
    db: Arc<Db>,
    /// Taken in `get_snapshot_builder`, between applies: the build sees exactly the applied
    /// state of that moment, however long it takes and whatever is applied meanwhile.
    view: Arc<bloomkv::Snapshot>,
    snapshot_lock: Arc<Mutex<()>>,
}

fn read_sm(e: AnyError) -> StorageError {
    StorageIOError::read_state_machine(e).into()
}

fn lock(m: &Mutex<()>) -> std::sync::MutexGuard<'_, ()> {
    // The guarded state is in the database, written by whole batches: a panic while holding
    // the lock cannot leave it half changed.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl StateMachine {
    pub(crate) fn new(db: Arc<Db>) -> StateMachine {
        StateMachine { db, snapshot_lock: Arc::new(Mutex::new(())) }
    }

    /// A reader of the data, for the application's reads.
    pub fn reader(&self) -> KvReader {
        KvReader { db: self.db.clone() }
    }
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let (db, view, snapshot_lock) =
            (self.db.clone(), self.view.clone(), self.snapshot_lock.clone());
        let (meta, bytes) = blocking(move || -> Result<_, StorageError> {
            let (header, bytes) = snapshot::build(&view).map_err(read_sm)?;
            // The view's sequence number makes the id unique on this node: it grows with
            // every write, across restarts too.
            let id = match &header.last_applied {
                Some(l) => format!("{}-{}-{}", l.leader_id, l.index, view.sequence()),
                None => format!("none-{}", view.sequence()),
            };
            let meta = SnapshotMeta {
                last_log_id: header.last_applied,
                last_membership: header.last_membership,
                snapshot_id: id,
            };
            let write = |e: AnyError| -> StorageError {
                StorageIOError::write_snapshot(Some(meta.signature()), e).into()
            };
            let _guard = lock(&snapshot_lock);
            let current = db.snapshot();
            let previous = snapshot::stored(&current).map_err(write)?;
            // An install may have put a newer snapshot in place while this one was built.
            let newer_installed =
                previous.as_ref().is_some_and(|p| p.meta.last_log_id > meta.last_log_id);
            if !newer_installed {
                let mut batch = WriteBatch::new();
                snapshot::stage_store(&mut batch, previous.as_ref(), &meta, &bytes)
                    .map_err(write)?;
                db.write(&batch, &WriteOptions::new().sync(true)).or_storage(write)?;
            }
            Ok((meta, bytes))
        })
        .await
        .map_err(read_sm)??;
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(bytes)) })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), StorageError> {
        // One view: the two keys are written together, and must be read together too.
        let view = self.db.snapshot();
        let applied = decode(view.get(keys::APPLIED)).map_err(read_sm)?;
        let membership = decode(view.get(keys::MEMBERSHIP)).map_err(read_sm)?;
        Ok((applied, membership.unwrap_or_default()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Outcome>, StorageError>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut batch = WriteBatch::new();
        let mut outcomes = Vec::new();
        let mut last = None;
        let mut membership = None;
        for entry in entries {
            last = Some(entry.log_id);
            let outcome = match entry.payload {
                EntryPayload::Blank => Outcome::Applied,
                EntryPayload::Normal(command) => match command.validate() {
                    Ok(()) => {
                        command.stage(&mut batch);
                        Outcome::Applied
                    }
                    Err(reason) => Outcome::Rejected { reason },
                },
                EntryPayload::Membership(m) => {
                    membership = Some(StoredMembership::new(Some(entry.log_id), m));
                    Outcome::Applied
                }
            };
            outcomes.push(outcome);
        }
        let Some(last) = last else { return Ok(outcomes) };
        let apply_err = |e: AnyError| -> StorageError { StorageIOError::apply(last, e).into() };
        batch.put(keys::APPLIED, encode(&last).map_err(apply_err)?);
        if let Some(m) = &membership {
            batch.put(keys::MEMBERSHIP, encode(m).map_err(apply_err)?);
        }
        // Not fsynced: the entries are already durable in the log, which every later fsync of
        // this database covers too (bloomkv recovers a prefix of its writes). After a crash the
        // state machine may be a few entries behind, never torn, and openraft applies the
        // rest again from the log up to the saved committed id.
        let db = self.db.clone();
        blocking(move || db.write(&batch, &WriteOptions::new().sync(false)))
            .await
            .map_err(apply_err)?
            .or_storage(apply_err)?;
        Ok(outcomes)
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        SnapshotBuilder {
            db: self.db.clone(),
            view: Arc::new(self.db.snapshot()),
            snapshot_lock: self.snapshot_lock.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let (db, snapshot_lock, meta) = (self.db.clone(), self.snapshot_lock.clone(), meta.clone());
        let signature = meta.signature();
        blocking(move || -> Result<(), StorageError> {
            let bytes = snapshot.into_inner();
            let read = |e: AnyError| -> StorageError {
                StorageIOError::read_snapshot(Some(meta.signature()), e).into()
            };
            let write = |e: AnyError| -> StorageError {
                StorageIOError::write_snapshot(Some(meta.signature()), e).into()
            };
            // One batch replaces the data, the applied id and membership, and the current
            // snapshot: a crash leaves the state machine before the install or after it.
            let mut batch = WriteBatch::new();
            let _guard = lock(&snapshot_lock);
            let current = db.snapshot();
            // The old data goes in one range tombstone; the snapshot's keys, put after it
            // in the batch, are not covered by it.
            batch.delete_range(keys::DATA.to_vec()..keys::DATA_END.to_vec());
            let header = snapshot::read(&bytes, |key, value| batch.put(keys::data(key), value))
                .map_err(read)?;
            let want = Header {
                last_applied: meta.last_log_id,
                last_membership: meta.last_membership.clone(),
            };
            if header != want {
                return Err(read(AnyError::error(format!(
                    "snapshot holds {:?}, its meta says {:?}",
                    header, want
                ))));
            }
            match &header.last_applied {
                Some(id) => batch.put(keys::APPLIED, encode(id).map_err(write)?),
                None => batch.delete(keys::APPLIED),
            }
            batch.put(keys::MEMBERSHIP, encode(&header.last_membership).map_err(write)?);
            let previous = snapshot::stored(&current).map_err(write)?;
            snapshot::stage_store(&mut batch, previous.as_ref(), &meta, &bytes).map_err(write)?;
            // Fsynced: openraft purges the log up to the snapshot next, and the leader counts
            // this node as holding everything up to it.
            db.write(&batch, &WriteOptions::new().sync(true)).or_storage(write)
        })
        .await
        .map_err(|e| StorageError::from(StorageIOError::write_snapshot(Some(signature), e)))?
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let db = self.db.clone();
        let found = blocking(move || -> Result<_, AnyError> {
            // One view, so the record and its chunks belong to the same snapshot.
            let view = db.snapshot();
            let Some(stored) = snapshot::stored(&view)? else { return Ok(None) };
            let bytes = snapshot::load(&view, &stored)?;
            Ok(Some((stored.meta, bytes)))
        })
        .await
        .and_then(|r| r)
        .map_err(|e| StorageError::from(StorageIOError::read_snapshot(None, e)))?;
        Ok(found.map(|(meta, bytes)| Snapshot { meta, snapshot: Box::new(Cursor::new(bytes)) }))
    }
}

#[cfg(test)]
mod tests {
    use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};
    use openraft::testing::log_id;
    use openraft::{Entry, EntryPayload};

    use crate::{Command, TypeConfig};

    fn put(index: u64, key: &str) -> Entry<TypeConfig> {
        let command = Command::put(key, format!("v{index}"));
        Entry { log_id: log_id(1, 1, index), payload: EntryPayload::Normal(command) }
    }

    #[tokio::test]
    async fn installing_a_snapshot_replaces_every_key_the_node_held() {
        let (dirs, dirt) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (_l1, mut source) = crate::open(dirs.path(), bloomkv::Options::default()).unwrap();
        let (_l2, mut target) = crate::open(dirt.path(), bloomkv::Options::default()).unwrap();
        source.apply([put(1, "kept"), put(2, "shared")]).await.unwrap();
        target.apply([put(1, "stale"), put(2, "shared"), put(3, "also stale")]).await.unwrap();

        let snapshot = source.get_snapshot_builder().await.build_snapshot().await.unwrap();
        target.install_snapshot(&snapshot.meta, snapshot.snapshot).await.unwrap();

        let kv = target.reader();
        let keys: Vec<Vec<u8>> = kv.scan().map(|r| r.unwrap().0).collect();
        assert_eq!(keys, [b"kept".to_vec(), b"shared".to_vec()]);
        assert_eq!(kv.get(b"shared").unwrap().as_deref(), Some(&b"v2"[..]));
        let (applied, _) = target.applied_state().await.unwrap();
        assert_eq!(applied, Some(log_id(1, 1, 2)));
    }
}
