//! One raft group's part of a node's database: [`Store`], its keyspace and snapshot
//! directory, and [`Batch`], the writes that cannot reach another group's keys. Below the
//! log store and the state machine, which keep their state through it; `groups` above them
//! hands each group's pair out.

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bloomkv::{Db, KeyRange, Keyspace, Readable, WriteBatch, WriteOptions};

use crate::{keys, snapshot};

/// A raft group's id on a node. Group 0 is the one [`crate::open`] opens.
pub type GroupId = u64;

/// The name of group `id`'s keyspace.
pub(crate) fn keyspace_name(id: GroupId) -> String {
    match id {
        0 => "default".to_string(),
        id => format!("{GROUP_KEYSPACE}{id}"),
    }
}

pub(crate) const GROUP_KEYSPACE: &str = "raft-group-";
/// The prefix of a group's snapshot directory's name, in `snapshots/`.
pub(crate) const GROUP_DIR: &str = "group-";

/// The directory of group `id`'s snapshot files.
pub(crate) fn snapshot_dir(db: &Db, id: GroupId) -> PathBuf {
    snapshot_dir_in(db.path(), id)
}

/// The directory of group `id`'s snapshot files in a store whose database is in `root`.
pub(crate) fn snapshot_dir_in(root: &Path, id: GroupId) -> PathBuf {
    match id {
        0 => root.join(snapshot::DIR),
        id => root.join(snapshot::DIR).join(format!("{GROUP_DIR}{id}")),
    }
}

/// The groups whose state `db` holds: every `raft-group-<g>` keyspace, and group 0 (the
/// default keyspace) once it has been opened as a group.
pub(crate) fn group_ids(db: &Db) -> Vec<GroupId> {
    let mut ids: Vec<GroupId> = db
        .keyspace_names()
        .iter()
        .filter_map(|name| name.strip_prefix(GROUP_KEYSPACE)?.parse().ok())
        .collect();
    if matches!(db.get(keys::FORMAT), Ok(Some(_))) {
        ids.push(0);
    }
    ids.sort_unstable();
    ids
}

/// Fails if `db` holds keys but no store's format record: another program's database.
pub(crate) fn check_is_store(db: &Db) -> bloomkv::Result<()> {
    if db.get(keys::FORMAT)?.is_none() {
        if let Some(first) = db.range(..).next() {
            first?;
            return Err(not_a_store(db));
        }
    }
    Ok(())
}

pub(crate) fn not_a_store(db: &Db) -> bloomkv::Error {
    bloomkv::Error::InvalidArgument(format!(
        "{}: not a bloomkv-raft store (no {})",
        db.path().display(),
        String::from_utf8_lossy(keys::FORMAT)
    ))
}

/// One group's part of the node's database: its keyspace (which it reads through, as
/// `Deref`), and the directory of its snapshot files. Its writes go through [`Batch`], which
/// cannot reach another group's keys.
#[derive(Debug, Clone)]
pub(crate) struct Store {
    id: GroupId,
    db: Arc<Db>,
    /// Bumped after a change of any group's shard state (a split applied, a snapshot
    /// installed): what `ShardNode` watches to start the groups splits made.
    shard_changes: Arc<tokio::sync::watch::Sender<u64>>,
    keyspace: Keyspace,
    snapshot_dir: PathBuf,
}

impl Store {
    pub(crate) fn open(
        db: &Arc<Db>,
        id: GroupId,
        shard_changes: &Arc<tokio::sync::watch::Sender<u64>>,
    ) -> bloomkv::Result<Store> {
        let name = keyspace_name(id);
        let keyspace = match db.existing_keyspace(&name) {
            Some(keyspace) => keyspace,
            None => {
                let options = db.keyspace_options("default").unwrap_or_default();
                db.keyspace(&name, options)?
            }
        };
        let shard_changes = shard_changes.clone();
        Ok(Store {
            id,
            db: db.clone(),
            shard_changes,
            keyspace,
            snapshot_dir: snapshot_dir(db, id),
        })
    }

    /// Group `id`'s store in the same database.
    pub(crate) fn sibling(&self, id: GroupId) -> bloomkv::Result<Store> {
        Store::open(&self.db, id, &self.shard_changes)
    }

    /// Tells whoever watches that a group's shard state changed.
    pub(crate) fn shard_changed(&self) {
        self.shard_changes.send_modify(|n| *n += 1);
    }

    pub(crate) fn id(&self) -> GroupId {
        self.id
    }

    pub(crate) fn db(&self) -> &Arc<Db> {
        &self.db
    }

    pub(crate) fn snapshot_dir(&self) -> &Path {
        &self.snapshot_dir
    }

    /// An empty batch of writes to this group.
    pub(crate) fn batch(&self) -> Batch {
        Batch { keyspace: self.keyspace.clone(), inner: WriteBatch::new() }
    }

    /// Writes `batch` atomically, durably before this returns if `sync`.
    pub(crate) fn commit(&self, batch: &Batch, sync: bool) -> bloomkv::Result<()> {
        self.db.write(&batch.inner, &WriteOptions::new().sync(sync))
    }

    /// Writes a batch of the default keyspace: for tests that put group 0 in a given state.
    #[cfg(test)]
    pub(crate) fn write(&self, batch: &WriteBatch, options: &WriteOptions) -> bloomkv::Result<()> {
        self.db.write(batch, options)
    }

    /// The whole database's: for tests that drive its background work.
    #[cfg(test)]
    pub(crate) fn flush(&self) -> bloomkv::Result<()> {
        self.db.flush()
    }

    #[cfg(test)]
    pub(crate) fn compact(&self) -> bloomkv::Result<()> {
        self.db.compact()
    }

    #[cfg(test)]
    pub(crate) fn stats(&self) -> bloomkv::Stats {
        self.db.stats()
    }

    #[cfg(test)]
    pub(crate) fn close(&self) -> bloomkv::Result<()> {
        self.db.close()
    }
}

impl Deref for Store {
    type Target = Keyspace;

    fn deref(&self) -> &Keyspace {
        &self.keyspace
    }
}

/// A batch of writes to one group's keys.
#[derive(Debug)]
pub(crate) struct Batch {
    keyspace: Keyspace,
    inner: WriteBatch,
}

impl Batch {
    pub(crate) fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
        self.inner.put_in(&self.keyspace, key, value);
    }

    /// A write to another group's keys, in the same atomic batch: only a split makes one,
    /// which moves keys from the group to the one it makes.
    pub(crate) fn put_to(&mut self, other: &Store, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
        self.inner.put_in(&other.keyspace, key, value);
    }

    pub(crate) fn delete(&mut self, key: impl AsRef<[u8]>) {
        self.inner.delete_in(&self.keyspace, key);
    }

    pub(crate) fn delete_range(&mut self, range: impl KeyRange) {
        self.inner.delete_range_in(&self.keyspace, range);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }
}
