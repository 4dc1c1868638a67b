//! bloomkv as the storage of an [openraft](https://docs.rs/openraft/0.9) cluster.
//!
//! One bloomkv database per node holds everything: the raft log and vote ([`LogStore`],
//! openraft's `RaftLogStorage`), and a replicated key-value state machine with its snapshots
//! ([`StateMachine`], openraft's `RaftStateMachine`). Clients submit [`Command`]s through
//! [`openraft::Raft::client_write`]; each node applies them to keys under `data/`, and
//! [`KvReader`] reads them back. [`Client`] (feature `client`, on by default) is a client of the
//! `kv_node` example's HTTP service, over HTTPS too, whose retried writes are applied once.
//!
//! A node may run many raft groups (one `Raft` each) in that one database: [`NodeStore::group`]
//! gives each its own log store and state machine, and the groups share the database's
//! write-ahead log and its fsyncs. [`shard::ShardMap`] says which group serves which keys.
//!
//! ```no_run
//! use bloomkv_raft::{Command, Raft, TypeConfig};
//!
//! async fn start(
//!     network: impl openraft::RaftNetworkFactory<TypeConfig>,
//! ) -> Result<(), Box<dyn std::error::Error>> {
//!     let (log_store, state_machine) = bloomkv_raft::open("node-1", bloomkv::Options::default())?;
//!     let kv = state_machine.reader();
//!     let config = std::sync::Arc::new(openraft::Config::default().validate()?);
//!     let raft = Raft::new(1, config, network, log_store, state_machine).await?;
//!
//!     raft.client_write(Command::put("greeting", "hello")).await?;
//!     raft.ensure_linearizable().await?; // then a local read is linearizable
//!     assert_eq!(kv.get(b"greeting")?.as_deref(), Some(&b"hello"[..]));
//!
//!     raft.shutdown().await?;
//!     kv.close()?; // releases the directory, so it can be opened again
//!     Ok(())
//! }
//! ```
//!
//! Key layout, what is durable when, and the snapshot format: DESIGN.md, "Replication
//! (raft/)".
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]
// openraft's traits return its `StorageError` (224 bytes) by value; the helpers here pass it
// along unchanged rather than box it only to unbox it at the trait boundary.
#![allow(clippy::result_large_err)]

mod autosplit;
mod checkpoint;
#[cfg(feature = "client")]
mod client;
#[cfg(test)]
mod crash_tests;
mod group_store;
mod groups;
mod inspect;
mod keys;
mod log_store;
mod quiet;
pub mod shard;
mod shard_node;
mod snapshot;
mod state_machine;
#[cfg(test)]
mod test_util;

use std::path::Path;

#[cfg(test)]
use bloomkv::Db;
use bloomkv::{Options, Readable, Value};
use openraft::{AnyError, ErrorSubject, ErrorVerb, StorageIOError};
use serde::{Deserialize, Serialize};

use group_store::{Batch, Store};

pub use autosplit::{AutoSplit, AutoSplitStats};
#[cfg(feature = "client")]
pub use client::{Client, ClientError};
pub use group_store::GroupId;
pub use groups::NodeStore;
pub use inspect::{inspect, GroupReport, NodeReport};
pub use log_store::{LogStore, DEFAULT_MAX_APPEND_BYTES};
pub use quiet::{Following, Ping, Pong, Quiet, QuietStats};
pub use shard_node::{ShardError, ShardNode, Transport};
pub use snapshot::SnapshotFile;
pub use state_machine::{SnapshotBuilder, StateMachine};

/// The header naming a write's client id (decimal `u64`); with [`SEQ_HEADER`], the node
/// submits the write as a [`Command::Once`]. Outside the `client` feature: the service reads it
/// too.
pub const CLIENT_HEADER: &str = "x-client-id";
/// The header numbering a write among its client's (decimal `u64`).
pub const SEQ_HEADER: &str = "x-request-seq";

/// The header naming the version of the shard map a key-value request was routed by (decimal
/// `u64`), and on every key-value answer the version of the answering node's map. With
/// [`SHARD_GROUP_HEADER`], the node checks the route ([`shard::ShardMap::check_route`]).
pub const SHARD_VERSION_HEADER: &str = "x-shard-version";
/// The header naming the raft group a key-value request was routed to (decimal `u64`).
pub const SHARD_GROUP_HEADER: &str = "x-shard-group";

/// A node's id in the cluster.
pub type NodeId = u64;

openraft::declare_raft_types!(
    /// The openraft type configuration of a bloomkv cluster: [`Command`]s in, [`Outcome`]s out,
    /// `u64` node ids, nodes addressed by [`openraft::BasicNode`], snapshots as files
    /// ([`SnapshotFile`]).
    pub TypeConfig:
        D = Command,
        R = Outcome,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = SnapshotFile,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A raft node storing into bloomkv.
pub type Raft = openraft::Raft<TypeConfig>;

/// The storage errors this crate returns.
pub type StorageError = openraft::StorageError<NodeId>;

/// A change to the replicated key-value data, submitted with [`openraft::Raft::client_write`].
///
/// A command is applied whole or not at all: a [`Command::Batch`] is one atomic write on every
/// node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Sets `key` to `value`.
    Put {
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
    },
    /// Removes `key` (nothing happens if it is absent).
    Delete {
        /// The key.
        key: Vec<u8>,
    },
    /// The commands in order, atomically; later ones win on the same key.
    Batch(Vec<Command>),
    /// `command`, applied at most once per `(client, seq)`. The state machine records, per
    /// client, the last `seq` applied, the [`Outcome`] it returned and a digest of its
    /// `command`, and compares each `Once` of that client with the record:
    ///
    /// - a `seq` above the recorded one is a new write: it is applied and recorded;
    /// - the recorded `seq` with the same `command` is a retry: it gets the recorded outcome
    ///   and changes nothing, so a client that retries a write it got no answer for has it
    ///   applied once;
    /// - the recorded `seq` with another `command` gets [`Outcome::SeqReused`] and changes
    ///   nothing: the write recorded under that `seq` stands;
    /// - a `seq` below the recorded one gets [`Outcome::OutOfOrder`] and changes nothing.
    ///
    /// So a client numbers its writes upwards, one in flight at a time, and never gives two
    /// writes the same `seq`. A record written by an earlier version of this crate holds no
    /// digest: it takes any command with its `seq` for the retry, as that version did. A
    /// client's record is forgotten once [`SESSION_WINDOW`] log entries pass without a write
    /// from it.
    Once {
        /// The client's id, random per client.
        client: u64,
        /// The client's number for this write, above those of its earlier writes.
        seq: u64,
        /// The write; not itself a [`Command::Once`].
        command: Box<Command>,
    },
    /// A change to the shards: to a data group's range (a split) or to the metadata group's
    /// [`shard::ShardMap`]. See [`shard::ShardCommand`]. Never inside a [`Command::Batch`] or a
    /// [`Command::Once`]: each is idempotent on its own.
    Shard(shard::ShardCommand),
}

/// Log entries after a client's last write for which its record is kept: a retry that
/// arrives later is applied again. Generous, so no realistic retry outlives it (at 10 000
/// writes a second, over 100 s, beyond any client's deadline), and small enough that the
/// records of clients gone away do not pile up: each is a few dozen bytes.
pub const SESSION_WINDOW: u64 = 1 << 20;

/// The largest encoded [`Command`] a node accepts: a log entry is one bloomkv value, which may
/// be at most [`bloomkv::MAX_VALUE_BYTES`]; the rest is left for the entry's log id.
pub const MAX_COMMAND_BYTES: usize = bloomkv::MAX_VALUE_BYTES - 1024;

impl Command {
    /// A [`Command::Put`].
    pub fn put(key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Command {
        Command::Put { key: key.as_ref().to_vec(), value: value.as_ref().to_vec() }
    }

    /// A [`Command::Delete`].
    pub fn delete(key: impl AsRef<[u8]>) -> Command {
        Command::Delete { key: key.as_ref().to_vec() }
    }

    /// Checks that the command can be stored: every key fits bloomkv's key limit once prefixed
    /// with `data/`, every value fits its value limit, and the whole command fits one log entry
    /// ([`MAX_COMMAND_BYTES`]).
    ///
    /// Check before [`openraft::Raft::client_write`]: an entry too large for the log fails
    /// the leader's append, which openraft treats as a fatal storage error. A command that
    /// reaches the state machine anyway is answered with [`Outcome::Rejected`] on every node
    /// and changes nothing.
    pub fn validate(&self) -> Result<(), String> {
        let size = postcard::experimental::serialized_size(self).map_err(|e| e.to_string())?;
        if size > MAX_COMMAND_BYTES {
            return Err(format!("command of {size} bytes is over {MAX_COMMAND_BYTES}"));
        }
        match self {
            Command::Once { command, .. } => command.validate_entries(),
            Command::Shard(command) => command.validate(),
            other => other.validate_entries(),
        }
    }

    fn validate_entries(&self) -> Result<(), String> {
        let check_key = |key: &[u8]| {
            let max = bloomkv::MAX_KEY_BYTES - keys::DATA.len();
            match key.len() > max {
                true => Err(format!("key of {} bytes is over {max}", key.len())),
                false => Ok(()),
            }
        };
        match self {
            Command::Put { key, value } => {
                check_key(key)?;
                if value.len() > bloomkv::MAX_VALUE_BYTES {
                    return Err(format!(
                        "value of {} bytes is over {}",
                        value.len(),
                        bloomkv::MAX_VALUE_BYTES
                    ));
                }
                Ok(())
            }
            Command::Delete { key } => check_key(key),
            Command::Batch(commands) => commands.iter().try_for_each(Command::validate_entries),
            Command::Once { .. } => Err("a Once command inside another command".into()),
            Command::Shard(_) => Err("a shard command inside another command".into()),
        }
    }

    /// Adds the command's writes to `batch`.
    fn stage(&self, batch: &mut Batch) {
        match self {
            Command::Put { key, value } => batch.put(keys::data(key), value),
            Command::Delete { key } => batch.delete(keys::data(key)),
            Command::Batch(commands) => commands.iter().for_each(|c| c.stage(batch)),
            Command::Once { command, .. } => command.stage(batch),
            // Applied on their own, never staged with data (see `shard::apply`).
            Command::Shard(_) => {}
        }
    }
}

/// What applying a log entry did, as returned in
/// [`openraft::raft::ClientWriteResponse::data`].
///
/// Client sessions store the outcome of their last write (postcard, which encodes a variant
/// by its position): new variants go at the end, so stored outcomes read the same. Only
/// `Applied` and `Rejected` are ever stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// The entry was applied (for a blank or membership entry: recorded).
    Applied,
    /// The command broke a limit (see [`Command::validate`]) and changed nothing, on any node.
    Rejected {
        /// Which limit.
        reason: String,
    },
    /// A [`Command::Once`] whose `seq` is below the last one applied for its client changed
    /// nothing, on any node. Whether that `seq` was applied earlier is unknown: a session
    /// keeps only the last. A client that numbers its writes upwards, one at a time, meets
    /// this only if another client uses its id or it resumed below a `seq` already used.
    OutOfOrder {
        /// The command's `seq`.
        seq: u64,
        /// The last `seq` applied for the client.
        last: u64,
    },
    /// A [`Command::Once`] with the `seq` last applied for its client but another command
    /// changed nothing, on any node: the write first applied under that `seq` stands, and a
    /// retry of it still gets its outcome.
    SeqReused {
        /// The command's `seq`.
        seq: u64,
    },
}

/// Opens the node's bloomkv database in `dir` (creating it if new) and returns the two halves
/// openraft needs, which share it.
///
/// Fails if the directory holds a database written by another version of this crate's layout
/// (one of version 1, which kept snapshots in the database, is converted). Snapshots are files in its `snapshots/` subdirectory. If a crash interrupted a snapshot
/// install, the install is finished here, before the state machine is handed out.
///
/// `options` are bloomkv's; their `sync_writes` does not matter, since every write here says
/// whether it syncs, and their `max_batch_bytes` is raised to bloomkv's bound,
/// [`Options::MAX_BATCH_BYTES_RANGE`] (1 GiB): `append` and `apply` each write all the
/// entries openraft hands them in one atomic batch, each entry up to [`MAX_COMMAND_BYTES`].
/// The bound holds them with room to spare: an append to a follower carries at most
/// [`LogStore::with_max_append_bytes`] of entries (1 MiB by default, or one entry), a leader
/// appends its clients' writes one at a time, and an `apply` gets the entries a commit made
/// committed, which arrived in such appends (or, after a crash, the few applied after the
/// last fsync).
///
/// This is group 0 of a [`NodeStore`], the only group of a node that runs one.
pub fn open(
    dir: impl AsRef<Path>,
    options: Options,
) -> Result<(LogStore, StateMachine), bloomkv::Error> {
    NodeStore::open(dir, options)?.group(0)
}

/// Checks the layout version of a group's keys, marks a new group's, converts an older one.
fn check_format(db: &Store) -> Result<(), bloomkv::Error> {
    let want = keys::FORMAT_VERSION.to_le_bytes();
    match db.get(keys::FORMAT)? {
        Some(v) if v[..] == want => Ok(()),
        Some(v) if v[..] == 1u32.to_le_bytes() => state_machine::migrate_v1(db),
        // Version 3 added client sessions and snapshot files of version 2, which version 2
        // cannot read: the store says so, so an older build refuses it.
        Some(v) if v[..] == 2u32.to_le_bytes() => {
            let mut batch = db.batch();
            batch.put(keys::FORMAT, want);
            db.commit(&batch, true)
        }
        Some(v) => Err(bloomkv::Error::InvalidArgument(format!(
            "{}: raft storage format {:?}, this build reads {:?}",
            db.db().path().display(),
            &v[..],
            want
        ))),
        // A fresh database, or one that holds something else: refuse the latter rather than
        // read its keys as raft state.
        None => match db.range(..).next() {
            None => {
                let mut batch = db.batch();
                batch.put(keys::FORMAT, want);
                db.commit(&batch, true)
            }
            Some(Err(e)) => Err(e),
            Some(Ok(_)) => Err(group_store::not_a_store(db.db())),
        },
    }
}

/// Reads the replicated data of one raft group on one node, locally.
///
/// A local read sees what this node has applied. For a linearizable read, call
/// [`openraft::Raft::ensure_linearizable`] on the leader first and read after it returns.
/// Cheap to clone.
#[derive(Debug, Clone)]
pub struct KvReader {
    db: Store,
}

impl KvReader {
    /// The value of `key`, or `None` if it is absent.
    pub fn get(&self, key: &[u8]) -> bloomkv::Result<Option<Value>> {
        self.db.get(keys::data(key))
    }

    /// Every key and value, in key order, as of one moment.
    pub fn scan(&self) -> impl Iterator<Item = bloomkv::Result<(Vec<u8>, Value)>> {
        self.prefix(b"")
    }

    /// Every key starting with `prefix` and its value, in key order, as of one moment.
    pub fn prefix(&self, prefix: &[u8]) -> impl Iterator<Item = bloomkv::Result<(Vec<u8>, Value)>> {
        self.db.prefix(keys::data(prefix)).map(|item| {
            item.map(|(mut key, value)| {
                key.drain(..keys::DATA.len());
                (key, value)
            })
        })
    }

    /// The keys starting with `prefix` that sort after `after` (all of them if `None`), with
    /// their values, in key order, as of one moment: the next page of a scan that stopped at
    /// `after`.
    ///
    /// ```
    /// let dir = tempfile::tempdir().unwrap();
    /// let (_log, sm) = bloomkv_raft::open(dir.path(), bloomkv::Options::default()).unwrap();
    /// let kv = sm.reader();
    /// assert_eq!(kv.prefix_after(b"user/", Some(&b"user/7"[..])).count(), 0);
    /// ```
    pub fn prefix_after(
        &self,
        prefix: &[u8],
        after: Option<&[u8]>,
    ) -> impl Iterator<Item = bloomkv::Result<(Vec<u8>, Value)>> {
        use std::ops::Bound;
        let start = match after {
            Some(after) if after >= prefix => Bound::Excluded(keys::data(after)),
            _ => Bound::Included(keys::data(prefix)),
        };
        // The first key after every key with the prefix: its last byte below 0xff raised by
        // one (`data/` guarantees there is one).
        let mut end = keys::data(prefix);
        while end.last() == Some(&0xff) {
            end.pop();
        }
        if let Some(last) = end.last_mut() {
            *last += 1;
        }
        self.db.range((start, Bound::Excluded(end))).map(|item| {
            item.map(|(mut key, value)| {
                key.drain(..keys::DATA.len());
                (key, value)
            })
        })
    }

    /// The group's range, if it has one (see [`shard::ShardCommand::Assign`]): the keys it
    /// serves, and the groups its splits made. `None`: it serves every key.
    pub fn range(&self) -> bloomkv::Result<Option<shard::GroupRange>> {
        decode(self.db.get(keys::RANGE)).map_err(|e| bloomkv::Error::InvalidArgument(e.to_string()))
    }

    /// The metadata group's map, if this is its replica and it has one.
    pub(crate) fn shard_map(&self) -> bloomkv::Result<Option<shard::ShardMap>> {
        self.db.get(keys::MAP)?.map(|bytes| shard::ShardMap::decode(&bytes)).transpose()
    }

    /// Writes a copy of the node's whole store (log, vote, applied state, data, and the
    /// current snapshot file; of every group) as it is at one moment to `dir`, which must not
    /// exist or be empty: a backup that [`open`] and [`NodeStore::open`] open as a node, and
    /// whose data [`KvReader::scan`] reads. Returns the database sequence number the copy was
    /// taken at. `dir` appears whole or not at all (see [`bloomkv::Db::checkpoint`]).
    ///
    /// ```
    /// let dir = tempfile::tempdir().unwrap();
    /// let (_log, sm) = bloomkv_raft::open(dir.path().join("node"), bloomkv::Options::default()).unwrap();
    /// sm.reader().checkpoint(dir.path().join("backup")).unwrap();
    /// let (_log, copy) = bloomkv_raft::open(dir.path().join("backup"), bloomkv::Options::default()).unwrap();
    /// assert_eq!(copy.reader().scan().count(), 0);
    /// ```
    pub fn checkpoint(&self, dir: impl AsRef<Path>) -> bloomkv::Result<u64> {
        checkpoint::checkpoint(self.db.db(), dir.as_ref())
    }

    /// The statistics of the node's database (log, state machine and data together, of every
    /// group).
    pub fn stats(&self) -> bloomkv::Stats {
        self.db.db().stats()
    }

    /// Closes the node's database (the log's and the state machine's too, every group's): call
    /// it after
    /// [`openraft::Raft::shutdown`], to release the directory at once instead of when the last
    /// handle is dropped. Every later call through any handle fails with
    /// [`bloomkv::Error::Closed`].
    pub fn close(&self) -> bloomkv::Result<()> {
        self.db.db().close()
    }
}

/// Encodes a stored value.
fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, AnyError> {
    postcard::to_allocvec(value).map_err(|e| AnyError::new(&e))
}

/// Decodes a stored value, if there is one.
fn decode<T: serde::de::DeserializeOwned>(
    got: bloomkv::Result<Option<Value>>,
) -> Result<Option<T>, AnyError> {
    match got.map_err(|e| AnyError::new(&e))? {
        None => Ok(None),
        Some(bytes) => postcard::from_bytes(&bytes).map(Some).map_err(|e| AnyError::new(&e)),
    }
}

/// Turns a bloomkv error into a [`StorageError`] with the subject and verb `err` gives it.
trait OrStorage<T> {
    fn or_storage(self, err: impl FnOnce(AnyError) -> StorageError) -> Result<T, StorageError>;
}

impl<T> OrStorage<T> for bloomkv::Result<T> {
    fn or_storage(self, err: impl FnOnce(AnyError) -> StorageError) -> Result<T, StorageError> {
        self.map_err(|e| err(AnyError::new(&e)))
    }
}

fn storage_error(
    subject: ErrorSubject<NodeId>,
    verb: ErrorVerb,
    source: impl Into<AnyError>,
) -> StorageError {
    StorageIOError::new(subject, verb, source).into()
}

/// Runs bloomkv work that may block (an fsync, a large scan) on tokio's blocking pool, so the
/// async workers that drive raft and the network keep running meanwhile.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, AnyError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(value) => Ok(value),
        // A panic in storage code is a bug: let it surface as one, not as an I/O error.
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(AnyError::new(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_checks_each_limit() {
        assert_eq!(Command::put("k", "v").validate(), Ok(()));
        let long_key = vec![b'k'; bloomkv::MAX_KEY_BYTES - keys::DATA.len()];
        assert_eq!(Command::put(&long_key, "v").validate(), Ok(()));
        let too_long = vec![b'k'; bloomkv::MAX_KEY_BYTES - keys::DATA.len() + 1];
        assert!(Command::delete(&too_long).validate().is_err());
        let nested = Command::Batch(vec![Command::put("a", "1"), Command::delete(&too_long)]);
        assert!(nested.validate().is_err());
        let once = |command| Command::Once { client: 1, seq: 1, command: Box::new(command) };
        assert_eq!(once(Command::put("k", "v")).validate(), Ok(()));
        assert!(once(once(Command::put("k", "v"))).validate().is_err());
        assert!(Command::Batch(vec![once(Command::put("k", "v"))]).validate().is_err());
        let big = Command::put("k", vec![0u8; MAX_COMMAND_BYTES]);
        assert!(big.validate().unwrap_err().contains("command of"));
    }

    #[test]
    fn open_refuses_a_database_that_is_not_a_raft_store() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), Options::default()).unwrap();
        db.put("user:1", "x").unwrap();
        db.close().unwrap();
        let err = open(dir.path(), Options::default()).unwrap_err();
        assert!(err.to_string().contains("not a bloomkv-raft store"), "{err}");

        let fresh = tempfile::tempdir().unwrap();
        let (_, sm) = open(fresh.path(), Options::default()).unwrap();
        sm.reader().close().unwrap();
        open(fresh.path(), Options::default()).unwrap(); // reopens its own store
    }

    #[test]
    fn a_layout_2_store_is_marked_3_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let (_, sm) = open(dir.path(), Options::default()).unwrap();
        let kv = sm.reader();
        kv.db.put(keys::FORMAT, 2u32.to_le_bytes()).unwrap();
        kv.close().unwrap();
        let (_, sm) = open(dir.path(), Options::default()).unwrap();
        let format = sm.reader().db.get(keys::FORMAT).unwrap();
        assert_eq!(format.as_deref(), Some(&FORMAT_V3[..]));
    }

    const FORMAT_V3: [u8; 4] = 3u32.to_le_bytes();
}
