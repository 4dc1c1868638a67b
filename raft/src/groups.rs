//! Many raft groups in one database: [`NodeStore`], which hands out each group's log store
//! and state machine over its part of the database (`group_store`).
//!
//! Each group has a keyspace of its own, holding the same keys a single-group store holds
//! (see `keys`), and a directory of snapshot files of its own. Group 0 is the default keyspace
//! and the `snapshots/` directory: the store [`crate::open`] opens, laid out as before groups
//! existed. Group `g` is the keyspace `raft-group-<g>` and `snapshots/group-<g>/`.
//!
//! The keyspaces share the database's WAL, so the appends of several groups that reach it at
//! once go out in one group commit and share one fsync. Each group's writes are its own,
//! atomic within the group, with one exception: a split's batch moves keys from the group
//! that splits to the group it makes (`shard::apply::split`), atomically in both.

use std::any::Any;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, Weak};

use bloomkv::{Db, Options, Readable};

use crate::group_store::{check_is_store, keyspace_name, snapshot_dir, Store, GROUP_DIR};
use crate::{keys, snapshot, GroupId, LogStore, StateMachine};

fn io_error(doing: &str, path: &Path, source: std::io::Error) -> bloomkv::Error {
    bloomkv::Error::Io { context: format!("{doing} {}", path.display()), source: Arc::new(source) }
}

/// An open group's state machine, and what tells when it is dropped.
type Open = (Weak<dyn Any + Send + Sync>, tokio::sync::watch::Receiver<()>);

/// The bloomkv database of a node that hosts any number of raft groups: each group's
/// [`LogStore`] and [`StateMachine`] come from [`NodeStore::group`], all in this one database.
///
/// A write to one group is atomic within that group only. The groups share the database's
/// write-ahead log, so the fsyncs of appends that several groups make at once are shared.
/// Group 0 is the store [`crate::open`] opens: a single-group store is a `NodeStore` whose only
/// group is 0, and opens here unchanged.
///
/// ```
/// use bloomkv::Options;
/// use bloomkv_raft::NodeStore;
///
/// let dir = tempfile::tempdir().unwrap();
/// let node = NodeStore::open(dir.path(), Options::default()).unwrap();
/// let (_log_7, sm_7) = node.group(7).unwrap(); // a Raft::new(..) each, sharing the database
/// let (_log_8, _sm_8) = node.group(8).unwrap();
/// assert_eq!(node.group_ids(), [7, 8]);
/// assert!(node.group(7).is_err(), "group 7 is open already");
/// drop(sm_7);
/// node.close().unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct NodeStore {
    db: Arc<Db>,
    /// The groups whose state machine is open: two state machines of one group would each
    /// think the group's snapshot files theirs.
    open: Arc<Mutex<HashMap<GroupId, Open>>>,
    shard_changes: Arc<tokio::sync::watch::Sender<u64>>,
}

impl NodeStore {
    /// Opens the node's database in `dir`, creating it if new. A database holding keys that
    /// are not a bloomkv-raft store's is refused. `options` are treated as [`crate::open`]
    /// treats them; each group's keyspace takes the default keyspace's table options.
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<NodeStore, bloomkv::Error> {
        let largest_batch = *Options::MAX_BATCH_BYTES_RANGE.end();
        let db = Arc::new(Db::open(dir, options.max_batch_bytes(largest_batch))?);
        check_is_store(&db)?;
        let shard_changes = Arc::new(tokio::sync::watch::Sender::new(0));
        let node = NodeStore { db, open: Default::default(), shard_changes };
        node.remove_stray_snapshot_dirs()?;
        Ok(node)
    }

    /// Removes the snapshot directories of groups the database no longer has (what a crash
    /// in [`NodeStore::remove_group`] leaves, after the keyspace's drop and before the files')
    /// and the files a backup cut short had set aside.
    fn remove_stray_snapshot_dirs(&self) -> bloomkv::Result<()> {
        let dir = self.db.path().join(snapshot::DIR);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_error("reading", &dir, e)),
        };
        let held = self.group_ids();
        for entry in entries {
            let entry = entry.map_err(|e| io_error("reading", &dir, e))?;
            let name = entry.file_name();
            if name.to_str().is_some_and(|n| n.starts_with(crate::checkpoint::PINS)) {
                // Files a backup set aside, left by a crash during it.
                let path = entry.path();
                std::fs::remove_dir_all(&path).map_err(|e| io_error("removing", &path, e))?;
                continue;
            }
            let Some(id) = name.to_str().and_then(|n| n.strip_prefix(GROUP_DIR)) else { continue };
            if id.parse().is_ok_and(|id: GroupId| !held.contains(&id)) {
                let path = entry.path();
                std::fs::remove_dir_all(&path).map_err(|e| io_error("removing", &path, e))?;
            }
        }
        Ok(())
    }

    /// Removes group `id` from the database: its log, state, data and snapshots. For a replica
    /// that has left the group (moved to another node); the group must not be open here.
    /// Group 0, the default keyspace, cannot be removed. Durable when this returns: the
    /// keyspace is dropped first, then the snapshot files (which the next open removes if a
    /// crash came between).
    ///
    /// ```
    /// use bloomkv_raft::NodeStore;
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let node = NodeStore::open(dir.path(), bloomkv::Options::default()).unwrap();
    /// drop(node.group(3).unwrap());
    /// node.remove_group(3).unwrap();
    /// assert!(node.group_ids().is_empty());
    /// ```
    pub fn remove_group(&self, id: GroupId) -> Result<(), bloomkv::Error> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.retain(|_, (alive, _)| alive.strong_count() > 0);
        if open.contains_key(&id) {
            return Err(bloomkv::Error::InvalidArgument(format!("raft group {id} is open")));
        }
        if id == 0 {
            return Err(bloomkv::Error::InvalidArgument(
                "raft group 0 is the default keyspace, which cannot be removed".into(),
            ));
        }
        self.db.drop_keyspace(keyspace_name(id))?;
        let dir = snapshot_dir(&self.db, id);
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(io_error("removing", &dir, e))
            }
            _ => Ok(()),
        }
    }

    /// The log and state machine of group `id`, created empty if the database has none yet,
    /// for one `openraft::Raft` of this node. Fails if the group is already open (its
    /// [`StateMachine`] not yet dropped), or if its stored layout is of another version (as
    /// [`crate::open`] says); an install a crash interrupted is finished here.
    pub fn group(&self, id: GroupId) -> Result<(LogStore, StateMachine), bloomkv::Error> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.retain(|_, (alive, _)| alive.strong_count() > 0);
        if open.contains_key(&id) {
            return Err(bloomkv::Error::InvalidArgument(format!("raft group {id} is open")));
        }
        let store = Store::open(&self.db, id, &self.shard_changes)?;
        crate::check_format(&store)?;
        let sm = StateMachine::new(store.clone());
        sm.recover()?;
        open.insert(id, (sm.liveness(), sm.closed()));
        Ok((LogStore::new(store), sm))
    }

    /// The groups the database holds, in ascending order.
    pub fn group_ids(&self) -> Vec<GroupId> {
        crate::group_store::group_ids(&self.db)
    }

    /// Returns once group `id`'s state machine is dropped (at once if it is not open): after
    /// its raft's shutdown, which may leave it to a task that ends a little later.
    pub(crate) async fn closed(&self, id: GroupId) {
        let closed = {
            let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
            open.get(&id).map(|(_, closed)| closed.clone())
        };
        if let Some(mut closed) = closed {
            while closed.changed().await.is_ok() {}
        }
    }

    /// Changes whenever a group's shard state changes here (a split applied, a snapshot
    /// installed).
    pub(crate) fn shard_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.shard_changes.subscribe()
    }

    /// The range of group `id` as its state machine here holds it, if it has one; `None` too
    /// if the group is not here.
    pub(crate) fn range(&self, id: GroupId) -> bloomkv::Result<Option<crate::shard::GroupRange>> {
        if id != 0 && self.db.existing_keyspace(keyspace_name(id)).is_none() {
            return Ok(None);
        }
        let store = Store::open(&self.db, id, &self.shard_changes)?;
        crate::decode(store.get(keys::RANGE))
            .map_err(|e| bloomkv::Error::InvalidArgument(e.to_string()))
    }

    /// Whether group `id` holds raft state here (a vote, an applied log id or log entries):
    /// it has run here, or a split made it here.
    pub(crate) fn has_state(&self, id: GroupId) -> bloomkv::Result<bool> {
        if id != 0 && self.db.existing_keyspace(keyspace_name(id)).is_none() {
            return Ok(false);
        }
        let store = Store::open(&self.db, id, &self.shard_changes)?;
        Ok(store.get(keys::APPLIED)?.is_some()
            || store.get(keys::VOTE)?.is_some()
            || store.range(keys::LOG.to_vec()..keys::LOG_END.to_vec()).next().is_some())
    }

    /// Closes the database, every group's: as [`crate::KvReader::close`].
    pub fn close(&self) -> bloomkv::Result<()> {
        self.db.close()
    }
}

#[cfg(test)]
mod tests {
    use crate::test_util::{keys, put};
    use openraft::storage::{RaftLogStorage, RaftSnapshotBuilder, RaftStateMachine};
    use openraft::testing::log_id;
    use openraft::RaftLogReader;

    use super::*;

    #[tokio::test]
    async fn groups_keep_their_logs_data_and_snapshots_apart() {
        let dir = tempfile::tempdir().unwrap();
        let node = NodeStore::open(dir.path(), Options::default()).unwrap();
        let (mut log0, mut sm0) = node.group(0).unwrap();
        let (mut log5, mut sm5) = node.group(5).unwrap();
        let err = node.group(5).unwrap_err().to_string();
        assert!(err.contains("raft group 5 is open"), "{err}");

        // The same indexes in two logs, each its own.
        log0.write_entries([put(1, "a")]).await.unwrap();
        log5.write_entries([put(1, "b"), put(2, "c")]).await.unwrap();
        let log0_got = log0.try_get_log_entries(..).await.unwrap();
        assert_eq!(log0_got, [put(1, "a")]);
        assert_eq!(log5.try_get_log_entries(..).await.unwrap(), [put(1, "b"), put(2, "c")]);
        log5.purge(log_id(1, 1, 1)).await.unwrap();
        assert_eq!(log0.get_log_state().await.unwrap().last_purged_log_id, None);

        sm0.apply([put(1, "a")]).await.unwrap();
        sm5.apply([put(1, "b"), put(2, "c")]).await.unwrap();
        assert_eq!(keys(&sm0.reader()), [b"a".to_vec()]);
        assert_eq!(keys(&sm5.reader()), [b"b".to_vec(), b"c".to_vec()]);
        assert_eq!(sm0.applied_state().await.unwrap().0, Some(log_id(1, 1, 1)));

        // Group 5's snapshot is its own file, in its own directory; installed in group 7 it
        // brings group 5's data and nothing of group 0's.
        let snapshot = sm5.get_snapshot_builder().await.build_snapshot().await.unwrap();
        let group_dir = dir.path().join("snapshots").join("group-5");
        assert_eq!(snapshot.snapshot.path.parent(), Some(group_dir.as_path()));
        let (_log7, mut sm7) = node.group(7).unwrap();
        sm7.install_snapshot(&snapshot.meta, snapshot.snapshot).await.unwrap();
        assert_eq!(keys(&sm7.reader()), [b"b".to_vec(), b"c".to_vec()]);
        assert_eq!(keys(&sm0.reader()), [b"a".to_vec()]);
        assert!(sm0.get_current_snapshot().await.unwrap().is_none());

        // Reopened, a group dropped here can be opened again; a single-group open is group 0.
        drop(sm5);
        node.group(5).unwrap();
        node.close().unwrap();
        drop((log0, sm0, log5, sm7));
        let (_log, sm) = crate::open(dir.path(), Options::default()).unwrap();
        assert_eq!(keys(&sm.reader()), [b"a".to_vec()]);
        sm.reader().close().unwrap();
        drop(sm);
        let node = NodeStore::open(dir.path(), Options::default()).unwrap();
        assert_eq!(node.group_ids(), [0, 5, 7]);
        let (_log, sm7) = node.group(7).unwrap();
        assert_eq!(keys(&sm7.reader()), [b"b".to_vec(), b"c".to_vec()]);
    }

    #[test]
    fn an_open_removes_what_a_backup_cut_short_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        let node = NodeStore::open(dir.path(), Options::default()).unwrap();
        node.group(0).unwrap();
        node.close().unwrap();
        drop(node);
        let snapshots = dir.path().join("snapshots");
        let pins = snapshots.join(format!("{}1-0", crate::checkpoint::PINS));
        std::fs::create_dir_all(pins.join("group-3")).unwrap();
        std::fs::write(pins.join("group-3").join("x.snap"), b"bytes").unwrap();
        let kept = snapshots.join("not-ours");
        std::fs::create_dir_all(&kept).unwrap();

        NodeStore::open(dir.path(), Options::default()).unwrap();
        assert!(!pins.exists());
        assert!(kept.exists());
    }

    #[tokio::test]
    async fn a_removed_group_is_gone_with_its_snapshots_and_others_stay() {
        let dir = tempfile::tempdir().unwrap();
        let node = NodeStore::open(dir.path(), Options::default()).unwrap();
        let (_log0, mut sm0) = node.group(0).unwrap();
        let (_log4, mut sm4) = node.group(4).unwrap();
        sm0.apply([put(1, "a")]).await.unwrap();
        sm4.apply([put(1, "b")]).await.unwrap();
        sm4.get_snapshot_builder().await.build_snapshot().await.unwrap();
        let group_dir = dir.path().join("snapshots").join("group-4");
        assert!(group_dir.is_dir());

        assert!(node.remove_group(4).unwrap_err().to_string().contains("is open"));
        assert!(node.remove_group(0).is_err());
        drop(sm4);
        node.remove_group(4).unwrap();
        assert!(!group_dir.exists());
        assert_eq!(node.group_ids(), [0]);
        assert_eq!(keys(&sm0.reader()), [b"a".to_vec()]);
        // Opened again, the group starts empty.
        let (_log4, sm4) = node.group(4).unwrap();
        assert!(keys(&sm4.reader()).is_empty());
        drop(sm4);
        node.remove_group(4).unwrap();

        // A crash between the keyspace's drop and the files' leaves the directory: the next
        // open removes it, and nothing of a group that still exists.
        std::fs::create_dir_all(&group_dir).unwrap();
        std::fs::write(group_dir.join("1-0.snap"), b"stale").unwrap();
        let (_log5, sm5) = node.group(5).unwrap();
        std::fs::create_dir_all(dir.path().join("snapshots").join("group-5")).unwrap();
        drop((sm0, sm5));
        node.close().unwrap();
        let _node = NodeStore::open(dir.path(), Options::default()).unwrap();
        assert!(!group_dir.exists());
        assert!(dir.path().join("snapshots").join("group-5").is_dir());
    }

    #[test]
    fn a_database_that_is_not_a_raft_store_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), Options::default()).unwrap();
        db.put("user:1", "x").unwrap();
        db.close().unwrap();
        let err = NodeStore::open(dir.path(), Options::default()).unwrap_err();
        assert!(err.to_string().contains("not a bloomkv-raft store"), "{err}");
    }
}
