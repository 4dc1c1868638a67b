//! [`inspect`]: what a node's directory holds, read without starting the node — each group's
//! raft state, its key range, and the metadata group's shard map. What `bloomkv raft` prints.
//!
//! It opens the database read-only (no lock, no file changed), so it works beside a running
//! node, and shows what the node had written when it was opened.

use std::path::Path;

use bloomkv::{Db, Options, Readable};
use openraft::{BasicNode, LogId, StoredMembership, Vote};
use serde::de::DeserializeOwned;

use crate::group_store::{check_is_store, group_ids, keyspace_name};
use crate::shard::{GroupRange, ShardMap};
use crate::{keys, snapshot, GroupId, NodeId};

/// What a node's directory holds: see [`inspect`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NodeReport {
    /// Every group the node holds state of, by id.
    pub groups: Vec<GroupReport>,
}

/// One group's state on a node, as its log store and state machine keep it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GroupReport {
    /// The group's id ([`crate::shard::META_GROUP`] for the metadata group).
    pub id: GroupId,
    /// The node's last vote in the group.
    pub vote: Option<Vote<NodeId>>,
    /// The last log id the node knew committed when it saved it.
    pub committed: Option<LogId<NodeId>>,
    /// The last entry purged from the log (its snapshot holds it and those before).
    pub purged: Option<LogId<NodeId>>,
    /// The first and last log entries held; `None`: the log holds none.
    pub log: Option<(LogId<NodeId>, LogId<NodeId>)>,
    /// The last entry the state machine applied.
    pub applied: Option<LogId<NodeId>>,
    /// The membership the state machine last applied.
    pub membership: StoredMembership<NodeId, BasicNode>,
    /// The data group's key range and the splits it made; `None`: it has none (it serves
    /// every key, or it is the metadata group).
    pub range: Option<GroupRange>,
    /// The metadata group's shard map, as its state machine holds it.
    pub map: Option<ShardMap>,
    /// The current snapshot: the last log id it holds, its file's name and length.
    pub snapshot: Option<(Option<LogId<NodeId>>, String, u64)>,
    /// Set while a snapshot install is unfinished: the file being installed.
    pub installing: Option<String>,
}

/// Reads what the node's database in `dir` holds: every group's vote, log, applied state,
/// membership and range, and the shard map if the metadata group is here.
///
/// Read-only: nothing in `dir` changes, so it may run beside the node that owns it. A
/// database that is not a bloomkv-raft store, or a record that does not decode, is an error.
///
/// ```
/// use bloomkv_raft::{inspect, NodeStore};
///
/// let dir = tempfile::tempdir().unwrap();
/// let node = NodeStore::open(dir.path(), bloomkv::Options::default()).unwrap();
/// drop(node.group(7).unwrap());
/// node.close().unwrap();
///
/// let report = inspect(dir.path()).unwrap();
/// assert_eq!(report.groups.len(), 1);
/// assert_eq!((report.groups[0].id, report.groups[0].applied), (7, None));
/// ```
pub fn inspect(dir: impl AsRef<Path>) -> bloomkv::Result<NodeReport> {
    let largest_batch = *Options::MAX_BATCH_BYTES_RANGE.end();
    let db = Db::open_read_only(dir, Options::default().max_batch_bytes(largest_batch))?;
    check_is_store(&db)?;
    let ids = group_ids(&db);
    let groups = ids.into_iter().map(|id| group(&db, id)).collect::<bloomkv::Result<_>>()?;
    Ok(NodeReport { groups })
}

fn group(db: &Db, id: GroupId) -> bloomkv::Result<GroupReport> {
    let name = keyspace_name(id);
    let keyspace = db.existing_keyspace(&name).ok_or_else(|| {
        bloomkv::Error::InvalidArgument(format!("keyspace {name} vanished while reading"))
    })?;
    // One view, so the records agree with each other as the node wrote them.
    let view = keyspace.snapshot();
    let purged: Option<LogId<NodeId>> = stored(&view, &name, keys::PURGED)?;
    let from = keys::log(purged.map_or(0, |p| p.index + 1)).to_vec();
    let mut entries = view.range(from..keys::LOG_END.to_vec());
    let entry_id = |pair: Option<bloomkv::Result<(Vec<u8>, bloomkv::Value)>>| {
        pair.map(|pair| {
            let (key, value) = pair?;
            let index = keys::log_index(&key)
                .ok_or_else(|| corrupt(&name, "a log key", &"it names no index"))?;
            let entry: openraft::Entry<crate::TypeConfig> = postcard::from_bytes(&value)
                .map_err(|e| corrupt(&name, &format!("log entry {index}"), &e))?;
            Ok(entry.log_id)
        })
        .transpose()
    };
    let first = entry_id(entries.next())?;
    let last = entry_id(entries.next_back())?;
    let log = first.map(|first| (first, last.unwrap_or(first)));
    let snapshot = snapshot::stored(&view)
        .map_err(|e| corrupt(&name, "snapshot/current", &e))?
        .map(|s| (s.meta.last_log_id, s.file, s.len));
    let map = match view.get(keys::MAP)? {
        Some(bytes) => {
            Some(ShardMap::decode(&bytes).map_err(|e| corrupt(&name, "cluster/map", &e))?)
        }
        None => None,
    };
    let installing =
        view.get(keys::INSTALLING)?.map(|name| String::from_utf8_lossy(&name).into_owned());
    Ok(GroupReport {
        id,
        vote: stored(&view, &name, keys::VOTE)?,
        committed: stored(&view, &name, keys::COMMITTED)?,
        purged,
        log,
        applied: stored(&view, &name, keys::APPLIED)?,
        membership: stored(&view, &name, keys::MEMBERSHIP)?.unwrap_or_default(),
        range: stored(&view, &name, keys::RANGE)?,
        map,
        snapshot,
        installing,
    })
}

/// The record stored under `key` in `keyspace`'s `view`, decoded.
fn stored<T: DeserializeOwned>(
    view: &bloomkv::Snapshot,
    keyspace: &str,
    key: &[u8],
) -> bloomkv::Result<Option<T>> {
    match view.get(key)? {
        None => Ok(None),
        Some(bytes) => postcard::from_bytes(&bytes)
            .map(Some)
            .map_err(|e| corrupt(keyspace, &String::from_utf8_lossy(key), &e)),
    }
}

/// A record the node wrote that does not decode: its bytes are not what the node wrote.
fn corrupt(keyspace: &str, what: &str, e: &dyn std::fmt::Display) -> bloomkv::Error {
    bloomkv::Error::bad_bytes(0, format!("keyspace {keyspace}: {what} does not decode: {e}"))
}
