//! [`StateMachine`]: the replicated key-value data on bloomkv, and its snapshot files.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bloomkv::Readable;
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    AnyError, BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder,
    SnapshotMeta, StorageIOError, StoredMembership,
};

use crate::group_store::{Batch, Store};
use crate::shard::apply::ShardState;
use crate::shard::ShardCommand;
use crate::snapshot::{self, Header, Receipt, SnapshotFile, Stored};
use crate::{
    blocking, decode, encode, keys, Command, KvReader, NodeId, OrStorage, Outcome, StorageError,
    TypeConfig, SESSION_WINDOW,
};

/// The replicated key-value data of one raft group on one node (keys under `data/`, client
/// sessions under `client/`, see [`crate::Command::Once`]), its last applied log id and
/// membership in the node's bloomkv database, and its current snapshot, a file beside it.
///
/// Each `apply` is one bloomkv batch holding the commands' writes together with the new
/// applied log id and membership, so after a crash the data and the applied id always agree.
/// An install is several steps; see [`StateMachine::install_snapshot`] for how it keeps that
/// promise.
#[derive(Debug)]
pub struct StateMachine {
    shared: Arc<Shared>,
}

/// What the state machine and its snapshot builders share.
#[derive(Debug)]
struct Shared {
    db: Store,
    /// The directory of snapshot files.
    dir: PathBuf,
    /// Held while the current snapshot is read or replaced: a snapshot build runs in a task
    /// of its own, beside an install, and must not put back an older snapshot over the new;
    /// and a reader must open the file its record names before a replacement removes it.
    lock: Mutex<()>,
    /// Makes file names unique within this process (with the database's sequence number,
    /// across restarts too).
    next_file: AtomicU64,
    /// Dropped with the state machine (and its last snapshot builder): its receivers then
    /// learn the group is closed.
    alive: tokio::sync::watch::Sender<()>,
}

/// Builds a snapshot from the state machine as it was when openraft asked for the builder.
#[derive(Debug)]
pub struct SnapshotBuilder {
    shared: Arc<Shared>,
    /// Taken in `get_snapshot_builder`, between applies: the build sees exactly the applied
    /// state of that moment, however long it takes and whatever is applied meanwhile.
    view: Arc<bloomkv::Snapshot>,
}

fn read_sm(e: AnyError) -> StorageError {
    StorageIOError::read_state_machine(e).into()
}

fn lock(m: &Mutex<()>) -> std::sync::MutexGuard<'_, ()> {
    // The guarded state is in the database, written by whole batches, and in files renamed
    // into place: a panic while holding the lock cannot leave it half changed.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn io_error(doing: &str, path: &Path, source: io::Error) -> bloomkv::Error {
    bloomkv::Error::Io { context: format!("{doing} {}", path.display()), source: Arc::new(source) }
}

/// Removes `path`; one already gone is fine.
fn remove(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

impl StateMachine {
    pub(crate) fn new(db: Store) -> StateMachine {
        let dir = db.snapshot_dir().to_path_buf();
        let (lock, next_file) = (Mutex::new(()), AtomicU64::new(0));
        let alive = tokio::sync::watch::Sender::new(());
        let shared = Shared { db, dir, lock, next_file, alive };
        StateMachine { shared: Arc::new(shared) }
    }

    /// Alive while this state machine (or a snapshot builder of it) is.
    pub(crate) fn liveness(&self) -> std::sync::Weak<dyn std::any::Any + Send + Sync> {
        let shared: Arc<dyn std::any::Any + Send + Sync> = self.shared.clone();
        Arc::downgrade(&shared)
    }

    /// Ends (with an error) once this state machine and its snapshot builders are dropped.
    pub(crate) fn closed(&self) -> tokio::sync::watch::Receiver<()> {
        self.shared.alive.subscribe()
    }

    /// A reader of the data, for the application's reads.
    pub fn reader(&self) -> KvReader {
        KvReader { db: self.shared.db.clone() }
    }

    /// Finishes an install a crash interrupted, and removes snapshot files nothing names.
    /// Fails if the file the record names is missing (it is removed only once another
    /// replaces it), or if an unfinished install's file no longer checks out.
    pub(crate) fn recover(&self) -> bloomkv::Result<()> {
        let s = &self.shared;
        let current = snapshot::stored(&s.db.snapshot()).map_err(|e| {
            bloomkv::Error::InvalidArgument(format!("reading the snapshot record: {e}"))
        })?;
        if let Some(current) = &current {
            let path = s.dir.join(&current.file);
            if !path.is_file() {
                return Err(bloomkv::Error::Corruption {
                    file: path,
                    offset: 0,
                    reason: "the current snapshot's file is missing".into(),
                });
            }
            if s.db.get(keys::INSTALLING)?.is_some() {
                s.load_current(current)?;
            }
        }
        let keep = current.as_ref().map(|c| c.file.as_str());
        snapshot::remove_others(&s.dir, keep).map_err(|e| io_error("cleaning", &s.dir, e))
    }
}

/// Converts a store of layout version 1, which kept the current snapshot in the database as
/// 1 MiB values (`snapshot/meta`, `snapshot/chunk/<n: u32 BE>`): the snapshot is copied to a
/// file chunk by chunk and checked, then one fsynced batch records it, removes the old keys
/// and sets the version. A crash before that batch leaves version 1 (and a stray file the
/// next open removes); after it, version 2.
pub(crate) fn migrate_v1(db: &Store) -> bloomkv::Result<()> {
    const META_V1: &[u8] = b"snapshot/meta";
    const CHUNKS_V1: &[u8] = b"snapshot/chunk/";
    let invalid = |e: AnyError| bloomkv::Error::InvalidArgument(format!("layout 1: {e}"));
    let view = db.snapshot();
    let mut batch = db.batch();
    if let Some(old) = decode::<StoredV1>(view.get(META_V1)).map_err(invalid)? {
        let dir = db.snapshot_dir().to_path_buf();
        snapshot::ensure_dir(&dir).map_err(|e| io_error("creating", &dir, e))?;
        let stem = format!("{}-v1", view.sequence());
        let part = dir.join(snapshot::part_name(&stem));
        let copy = || -> bloomkv::Result<()> {
            let mut out = File::create(&part).map_err(|e| io_error("creating", &part, e))?;
            for n in 0..old.chunks {
                let mut key = CHUNKS_V1.to_vec();
                key.extend_from_slice(&n.to_be_bytes());
                let chunk = view.get(&key)?.ok_or_else(|| bloomkv::Error::Corruption {
                    file: db.db().path().to_path_buf(),
                    offset: 0,
                    reason: format!("layout 1: snapshot chunk {n} is missing"),
                })?;
                out.write_all(&chunk).map_err(|e| io_error("writing", &part, e))?;
            }
            out.sync_all().map_err(|e| io_error("syncing", &part, e))?;
            snapshot::verify(&part, &Header::of(&old.meta)).map(|_| ())
        };
        if let Err(e) = copy() {
            let _ = remove(&part);
            return Err(e);
        }
        let name = snapshot::done_name(&stem);
        let path = dir.join(&name);
        std::fs::rename(&part, &path).map_err(|e| io_error("renaming", &part, e))?;
        snapshot::sync_dir(&dir).map_err(|e| io_error("syncing", &dir, e))?;
        let len = std::fs::metadata(&path).map_err(|e| io_error("reading", &path, e))?.len();
        let stored = Stored { meta: old.meta, file: name, len };
        batch.put(keys::SNAPSHOT_CURRENT, encode(&stored).map_err(invalid)?);
        batch.delete(META_V1);
        batch.delete_range(CHUNKS_V1.to_vec()..b"snapshot/chunk0".to_vec());
    }
    batch.put(keys::FORMAT, keys::FORMAT_VERSION.to_le_bytes());
    db.commit(&batch, true)
}

/// The current snapshot's record in layout version 1.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct StoredV1 {
    meta: SnapshotMeta<NodeId, BasicNode>,
    len: u64,
    chunks: u32,
}

impl Shared {
    /// A name no other snapshot file of this node has had.
    fn stem(&self) -> String {
        let n = self.next_file.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n}", self.db.snapshot().sequence())
    }

    /// Makes the state machine's data, applied id and membership those of `current`, the
    /// recorded current snapshot, whose install is marked unfinished.
    ///
    /// The old data goes in one range tombstone, the snapshot's pairs in one bloomkv ingest
    /// (built straight into tables, read from the file as they go, all or nothing), then one
    /// fsynced batch sets the applied id and membership and clears the mark. Run again after a
    /// crash anywhere in it, it does the same again: the install is redone, never half kept.
    fn load_current(&self, current: &Stored) -> bloomkv::Result<()> {
        let path = self.dir.join(&current.file);
        let mut batch = self.db.batch();
        batch.delete_range(keys::CLIENT.to_vec()..keys::DATA_END.to_vec());
        self.db.commit(&batch, false)?;
        let pairs = snapshot::Reader::open(&path)?;
        // The reader checks the checksum when it reaches the end, before the ingest installs
        // anything: a file damaged since it was verified leaves the data empty and the install
        // marked unfinished, an error rather than half a state.
        self.db.try_ingest(pairs)?;
        let invalid = |e: AnyError| bloomkv::Error::InvalidArgument(e.to_string());
        let mut batch = self.db.batch();
        match &current.meta.last_log_id {
            Some(id) => batch.put(keys::APPLIED, encode(id).map_err(invalid)?),
            None => batch.delete(keys::APPLIED),
        }
        batch.put(keys::MEMBERSHIP, encode(&current.meta.last_membership).map_err(invalid)?);
        batch.delete(keys::INSTALLING);
        self.db.commit(&batch, true)
    }

    /// Opens the current snapshot.
    fn current(&self) -> Result<Option<(Stored, File, PathBuf)>, AnyError> {
        let _guard = lock(&self.lock);
        let Some(stored) = snapshot::stored(&self.db.snapshot())? else { return Ok(None) };
        let path = self.dir.join(&stored.file);
        let file = File::open(&path).map_err(|e| AnyError::new(&io_error("opening", &path, e)))?;
        let len = file.metadata().map_err(|e| AnyError::new(&e))?.len();
        if len != stored.len {
            let why = format!(
                "snapshot {} is {len} bytes, its record says {}",
                path.display(),
                stored.len
            );
            return Err(AnyError::error(why));
        }
        Ok(Some((stored, file, path)))
    }

    /// Writes a snapshot of `view` to a new file and makes it the current one, unless a newer
    /// one was installed meanwhile.
    fn build(
        &self,
        view: &bloomkv::Snapshot,
    ) -> Result<(SnapshotMeta<NodeId, BasicNode>, SnapshotFile), AnyError> {
        let any = |e: io::Error| AnyError::new(&e);
        snapshot::ensure_dir(&self.dir).map_err(any)?;
        let stem = self.stem();
        let part = self.dir.join(snapshot::part_name(&stem));
        let mut file = File::create(&part).map_err(any)?;
        let written = snapshot::write(view, &mut file).and_then(|(header, len)| {
            file.sync_all().map_err(any)?;
            Ok((header, len))
        });
        let (header, len) = match written {
            Ok(w) => w,
            Err(e) => {
                let _ = remove(&part);
                return Err(e);
            }
        };
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
        let _guard = lock(&self.lock);
        let previous = snapshot::stored(&self.db.snapshot())?;
        // An install may have put a newer snapshot in place while this one was built: this
        // one is handed back to openraft, but as a file nothing names, gone once closed.
        if previous.as_ref().is_some_and(|p| p.meta.last_log_id > meta.last_log_id) {
            let file = File::open(&part).map_err(any)?;
            remove(&part).map_err(any)?;
            return Ok((meta, SnapshotFile::reading(file, part)));
        }
        let name = snapshot::done_name(&stem);
        let path = self.dir.join(&name);
        std::fs::rename(&part, &path).map_err(any)?;
        snapshot::sync_dir(&self.dir).map_err(any)?;
        let stored = Stored { meta: meta.clone(), file: name, len };
        let mut batch = self.db.batch();
        batch.put(keys::SNAPSHOT_CURRENT, encode(&stored)?);
        self.db.commit(&batch, true).map_err(|e| AnyError::new(&e))?;
        // A leader may still be sending the old file: its open handle keeps reading it, as
        // removing a file only unlinks its name.
        if let Some(previous) = previous.filter(|p| p.file != stored.file) {
            remove(&self.dir.join(previous.file)).map_err(any)?;
        }
        let file = File::open(&path).map_err(any)?;
        Ok((meta, SnapshotFile::reading(file, path)))
    }

    /// Installs the snapshot in `file`; see [`StateMachine::install_snapshot`].
    fn install(
        &self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        mut file: File,
        path: PathBuf,
        receipt: Option<Receipt>,
    ) -> Result<(), StorageError> {
        let read = |e: AnyError| -> StorageError {
            StorageIOError::read_snapshot(Some(meta.signature()), e).into()
        };
        let write = |e: AnyError| -> StorageError {
            StorageIOError::write_snapshot(Some(meta.signature()), e).into()
        };
        let io = |e: io::Error| write(AnyError::new(&e));
        snapshot::ensure_dir(&self.dir).map_err(io)?;
        // A file received here is moved into place; any other (a snapshot of another store,
        // or this store's own current one) is copied, never moved from under its owner.
        let part = match receipt.is_some() && path.parent() == Some(self.dir.as_path()) {
            true => {
                file.sync_all().map_err(io)?;
                path
            }
            false => {
                let part = self.dir.join(snapshot::part_name(&self.stem()));
                let copied = (|| {
                    file.seek(SeekFrom::Start(0))?;
                    let mut out = File::create(&part)?;
                    io::copy(&mut file, &mut out)?;
                    out.sync_all()
                })();
                if let Err(e) = copied {
                    let _ = remove(&part);
                    return Err(io(e));
                }
                part
            }
        };
        drop(file);
        // Everything is checked before anything changes.
        if let Err(e) = snapshot::verify(&part, &Header::of(meta)) {
            let _ = remove(&part);
            return Err(read(AnyError::new(&e)));
        }
        let _guard = lock(&self.lock);
        let name = snapshot::done_name(&self.stem());
        let path = self.dir.join(&name);
        std::fs::rename(&part, &path).map_err(io)?;
        snapshot::sync_dir(&self.dir).map_err(io)?;
        let len = std::fs::metadata(&path).map_err(io)?.len();
        let previous = snapshot::stored(&self.db.snapshot()).map_err(write)?;
        let stored = Stored { meta: meta.clone(), file: name.clone(), len };
        // The new snapshot becomes the current one and the install is marked unfinished in
        // one fsynced batch: from here a crash redoes the install at the next open.
        let mut batch = self.db.batch();
        batch.put(keys::SNAPSHOT_CURRENT, encode(&stored).map_err(write)?);
        batch.put(keys::INSTALLING, name.as_bytes());
        // The log the snapshot covers goes in the same batch. openraft purges it only later,
        // and meanwhile appends the entries after the snapshot: a node killed between the two
        // would hold a log starting past the snapshot with none purged, which openraft reads
        // from index 0 at the next start, and refuses ("Failed to get log entries").
        if let Some(last) = meta.last_log_id {
            let purged: Option<LogId<NodeId>> = decode(self.db.get(keys::PURGED)).map_err(write)?;
            if purged.is_none_or(|p| p.index < last.index) {
                crate::log_store::purge_into(&mut batch, purged, last).map_err(write)?;
            }
        }
        self.db.commit(&batch, true).or_storage(write)?;
        self.load_current(&stored).or_storage(write)?;
        if let Some(previous) = previous.filter(|p| p.file != stored.file) {
            remove(&self.dir.join(previous.file)).map_err(io)?;
        }
        Ok(())
    }

    /// A new file to receive a snapshot into. Only one snapshot is received at a time, so
    /// the files of earlier receives that never finished go.
    fn begin_receiving(&self) -> io::Result<SnapshotFile> {
        snapshot::ensure_dir(&self.dir)?;
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            if entry.file_name().to_str().is_some_and(|n| n.starts_with(RECEIVING)) {
                remove(&entry.path())?;
            }
        }
        let path = self.dir.join(snapshot::part_name(&format!("{RECEIVING}{}", self.stem())));
        let file = File::options().read(true).write(true).create_new(true).open(&path)?;
        Ok(SnapshotFile::receiving(file, path))
    }
}

/// How often, in log entries, sessions older than [`SESSION_WINDOW`] are looked for: a scan of
/// every session, so rarely, which lets a session outlive the window by up to this much.
const PRUNE_EVERY: u64 = SESSION_WINDOW / 16;

/// A client's record under `client/<id>`: its last applied write.
///
/// Stored as the postcard encoding of `(seq, index, outcome)` followed by the digest, 8 bytes
/// little-endian. Records written before digests were kept end after the outcome; they decode
/// with no digest. Older builds read only the fields they know and ignore the digest after
/// them, so neither the store layout nor the snapshot format changed with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Session {
    /// The write's `seq`.
    pub seq: u64,
    /// The log index it was applied at: the session lapses [`SESSION_WINDOW`] entries on.
    pub index: u64,
    /// What applying it returned, returned again for a retry.
    pub outcome: Outcome,
    /// [`digest`] of the write, to tell its retry from another write given the same `seq`.
    /// `None` in a record from before digests: any write with its `seq` is taken for the retry.
    pub digest: Option<u64>,
}

impl Session {
    pub(crate) fn encode(&self) -> Result<Vec<u8>, AnyError> {
        // A tuple encodes as the struct of the same fields did: the record's old prefix.
        let mut bytes = encode(&(self.seq, self.index, &self.outcome))?;
        if let Some(digest) = self.digest {
            bytes.extend_from_slice(&digest.to_le_bytes());
        }
        Ok(bytes)
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Session, AnyError> {
        let ((seq, index, outcome), rest) =
            postcard::take_from_bytes(bytes).map_err(|e| AnyError::new(&e))?;
        let digest = match rest.len() {
            0 => None,
            8 => Some(u64::from_le_bytes(rest.try_into().expect("8 bytes"))),
            n => return Err(AnyError::error(format!("session: {n} bytes after the outcome"))),
        };
        Ok(Session { seq, index, outcome, digest })
    }
}

/// The digest a session keeps of a [`Command::Once`]'s write: XXH3-64 (no seed) of its postcard
/// encoding. Stored, and carried by snapshots to other nodes, so it must never change: XXH3's
/// output is fixed by its specification, postcard's encoding by its documented wire format.
/// Two different writes share a digest with odds of 2^-64, and then the second is taken for
/// a retry of the first.
fn digest(write: &Command) -> Result<u64, AnyError> {
    Ok(xxhash_rust::xxh3::xxh3_64(&encode(write)?))
}

/// The sessions one `apply` call has changed (`None`: removed), over those in the database.
/// A command must see the writes of the commands before it in the same call, not yet in the
/// database: how openraft splits the log into calls differs from node to node, and what a
/// command does must not.
#[derive(Default)]
struct Sessions(HashMap<u64, Option<Session>>);

impl Sessions {
    fn get(&self, db: &Store, client: u64) -> Result<Option<Session>, AnyError> {
        match self.0.get(&client) {
            Some(staged) => Ok(staged.clone()),
            None => match db.get(keys::client(client)).map_err(|e| AnyError::new(&e))? {
                Some(bytes) => Session::decode(&bytes).map(Some),
                None => Ok(None),
            },
        }
    }

    /// Stages `command`, applied at `index`; a [`Command::Once`] only if its session says it
    /// is a new write (see there). The outcome depends on nothing but the command and the
    /// sessions, which every node changes alike, so every node answers alike.
    fn apply(
        &mut self,
        db: &Store,
        command: Command,
        index: u64,
        batch: &mut Batch,
    ) -> Result<Outcome, AnyError> {
        let run = |command: &Command, batch: &mut Batch| match command.validate() {
            Ok(()) => {
                command.stage(batch);
                Outcome::Applied
            }
            Err(reason) => Outcome::Rejected { reason },
        };
        let Command::Once { client, seq, command: write } = &command else {
            return Ok(run(&command, batch));
        };
        let (client, seq) = (*client, *seq);
        let last = self.get(db, client)?;
        if let Some(last) = last.as_ref().filter(|last| seq < last.seq) {
            return Ok(Outcome::OutOfOrder { seq, last: last.seq });
        }
        let digest = digest(write)?;
        if let Some(last) = last.filter(|last| seq == last.seq) {
            return Ok(match last.digest {
                Some(recorded) if recorded != digest => Outcome::SeqReused { seq },
                _ => last.outcome,
            });
        }
        let outcome = run(&command, batch);
        let session = Session { seq, index, outcome: outcome.clone(), digest: Some(digest) };
        batch.put(keys::client(client), session.encode()?);
        self.0.insert(client, Some(session));
        Ok(outcome)
    }

    /// Stages the removal of every session with no write in the [`SESSION_WINDOW`] entries
    /// before `index`.
    fn prune(&mut self, db: &Store, index: u64, batch: &mut Batch) -> bloomkv::Result<()> {
        for item in db.prefix(keys::CLIENT) {
            let (key, value) = item?;
            let Ok(id) = key[keys::CLIENT.len()..].try_into().map(u64::from_be_bytes) else {
                continue;
            };
            // One changed in this call was written within the window.
            if self.0.contains_key(&id) {
                continue;
            }
            let session = Session::decode(&value).map_err(|e| {
                bloomkv::Error::InvalidArgument(format!("session of client {id}: {e}"))
            })?;
            if session.index.saturating_add(SESSION_WINDOW) < index {
                batch.delete(&key);
                self.0.insert(id, None);
            }
        }
        Ok(())
    }
}

/// Applies `entries` in one batch; see [`StateMachine`]. A split is applied on a database that
/// holds every earlier entry's writes: the batch so far is written first, then the split's.
/// Returns the outcomes, and whether the group's shard state changed by a split.
fn apply_entries(
    db: &Store,
    entries: Vec<Entry<TypeConfig>>,
) -> Result<(Vec<Outcome>, bool), StorageError> {
    let mut batch = db.batch();
    let mut outcomes = Vec::new();
    let mut last: Option<LogId<NodeId>> = None;
    let mut membership = None;
    let mut sessions = Sessions::default();
    let mut shard = ShardState::default();
    let mut split = false;
    // Writes the batch so far with the applied id and membership it brings.
    let commit = |batch: Batch, last: Option<LogId<NodeId>>, membership: &Option<_>| {
        let Some(last) = last else { return Ok(()) };
        let apply_err = |e: AnyError| -> StorageError { StorageIOError::apply(last, e).into() };
        let mut batch = batch;
        batch.put(keys::APPLIED, encode(&last).map_err(apply_err)?);
        if let Some(m) = membership {
            batch.put(keys::MEMBERSHIP, encode::<StoredMembership<_, _>>(m).map_err(apply_err)?);
        }
        // Not fsynced: the entries are already durable in the log, which every later fsync of
        // this database covers too (bloomkv recovers a prefix of its writes). After a crash the
        // state machine may be a few entries behind, never torn, and openraft applies the rest
        // again from the log up to the saved committed id.
        db.commit(&batch, false).or_storage(apply_err)
    };
    for entry in entries {
        let index = entry.log_id.index;
        let log_id = entry.log_id;
        let apply_err = |e: AnyError| StorageError::from(StorageIOError::apply(log_id, e));
        if index % PRUNE_EVERY == 0 {
            sessions.prune(db, index, &mut batch).map_err(|e| apply_err(AnyError::new(&e)))?;
        }
        let outcome = match entry.payload {
            EntryPayload::Blank => Outcome::Applied,
            EntryPayload::Normal(Command::Shard(ShardCommand::Split { at, new_group })) => {
                commit(std::mem::replace(&mut batch, db.batch()), last, &membership)?;
                let outcome =
                    crate::shard::apply::split(db, &mut shard, log_id, at, new_group, &mut batch)
                        .map_err(apply_err)?;
                split |= outcome == Outcome::Applied;
                outcome
            }
            EntryPayload::Normal(Command::Shard(command)) => {
                shard.apply(db, command, &mut batch).map_err(apply_err)?
            }
            EntryPayload::Normal(command) => {
                let range = shard.range(db).map_err(apply_err)?;
                match range.and_then(|r| command_keys(&command).find(|k| !r.contains(k))) {
                    // Refused before the session is looked at: nothing happened here, and the
                    // client's retry goes to the group that has the key now.
                    Some(key) => crate::shard::apply::not_in_range(range.unwrap(), key),
                    None => sessions.apply(db, command, index, &mut batch).map_err(apply_err)?,
                }
            }
            EntryPayload::Membership(m) => {
                membership = Some(StoredMembership::new(Some(log_id), m));
                Outcome::Applied
            }
        };
        last = Some(log_id);
        outcomes.push(outcome);
    }
    commit(batch, last, &membership)?;
    Ok((outcomes, split))
}

/// The keys `command` writes.
fn command_keys(command: &Command) -> Box<dyn Iterator<Item = &[u8]> + '_> {
    match command {
        Command::Put { key, .. } | Command::Delete { key } => Box::new(std::iter::once(&key[..])),
        Command::Batch(commands) => Box::new(commands.iter().flat_map(command_keys)),
        Command::Once { command, .. } => command_keys(command),
        Command::Shard(_) => Box::new(std::iter::empty()),
    }
}

/// The prefix of the names of files being received.
const RECEIVING: &str = "recv-";

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let (shared, view) = (self.shared.clone(), self.view.clone());
        let (meta, file) = blocking(move || shared.build(&view))
            .await
            .and_then(|r| r)
            .map_err(|e| StorageError::from(StorageIOError::write_snapshot(None, e)))?;
        Ok(Snapshot { meta, snapshot: Box::new(file) })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), StorageError> {
        // One view: the two keys are written together, and must be read together too.
        let view = self.shared.db.snapshot();
        let applied = decode(view.get(keys::APPLIED)).map_err(read_sm)?;
        let membership = decode(view.get(keys::MEMBERSHIP)).map_err(read_sm)?;
        Ok((applied, membership.unwrap_or_default()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Outcome>, StorageError>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // Reading the sessions may hit the disk, like the write: both run off the async
        // workers.
        let entries: Vec<Entry<TypeConfig>> = entries.into_iter().collect();
        let Some(last) = entries.last().map(|e| e.log_id) else { return Ok(Vec::new()) };
        let db = self.shared.db.clone();
        let (outcomes, split) = blocking(move || apply_entries(&db, entries))
            .await
            .map_err(|e| StorageError::from(StorageIOError::apply(last, e)))??;
        if split {
            self.shared.db.shard_changed();
        }
        Ok(outcomes)
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        SnapshotBuilder { shared: self.shared.clone(), view: Arc::new(self.shared.db.snapshot()) }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotFile>, StorageError> {
        let shared = self.shared.clone();
        let file = blocking(move || shared.begin_receiving().map_err(|e| AnyError::new(&e)))
            .await
            .and_then(|r| r)
            .map_err(|e| StorageError::from(StorageIOError::write_snapshot(None, e)))?;
        Ok(Box::new(file))
    }

    /// Installs a snapshot without holding it in memory: the file is checked whole (framing,
    /// limits, checksum, header against `meta`) before anything changes; then it is renamed
    /// into place and recorded as the current snapshot, with a mark that the install is
    /// unfinished, in one fsynced batch; then the old data is replaced from the file and one
    /// fsynced batch sets the applied id and membership and clears the mark. A crash before
    /// the first batch leaves the old state and snapshot; after it, `open` finds the mark and
    /// redoes the replacement from the file before openraft reads anything. Meanwhile a
    /// stale read on this node may see the data emptied, not yet refilled.
    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<SnapshotFile>,
    ) -> Result<(), StorageError> {
        let signature = meta.signature();
        let write = |e: io::Error| {
            StorageError::from(StorageIOError::write_snapshot(Some(signature.clone()), &e))
        };
        let (file, path, receipt) = snapshot.into_std().await.map_err(write)?;
        let (shared, meta) = (self.shared.clone(), meta.clone());
        blocking(move || shared.install(&meta, file, path, receipt)).await.map_err(|e| {
            StorageError::from(StorageIOError::write_snapshot(Some(signature), e))
        })??;
        // The snapshot may bring a range whose splits made groups this node does not run.
        self.shared.db.shard_changed();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let shared = self.shared.clone();
        let found = blocking(move || shared.current())
            .await
            .and_then(|r| r)
            .map_err(|e| StorageError::from(StorageIOError::read_snapshot(None, e)))?;
        Ok(found.map(|(stored, file, path)| Snapshot {
            meta: stored.meta,
            snapshot: Box::new(SnapshotFile::reading(file, path)),
        }))
    }
}

#[cfg(test)]
mod tests {
    use crate::test_util::{keys, put};
    use std::path::Path;

    use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};
    use openraft::testing::log_id;
    use openraft::{Entry, EntryPayload};
    use tokio::io::{AsyncSeekExt, AsyncWriteExt};

    use super::*;
    use crate::{Command, TypeConfig};
    use bloomkv::{WriteBatch, WriteOptions};

    fn files(dir: &Path) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(dir.join(snapshot::DIR)) else { return Vec::new() };
        let mut names: Vec<String> =
            entries.map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        names
    }

    fn once(index: u64, client: u64, seq: u64, command: Command) -> Entry<TypeConfig> {
        let command = Command::Once { client, seq, command: Box::new(command) };
        Entry { log_id: log_id(1, 1, index), payload: EntryPayload::Normal(command) }
    }

    fn value(kv: &KvReader, key: &str) -> Option<Vec<u8>> {
        kv.get(key.as_bytes()).unwrap().map(|v| v.to_vec())
    }

    /// A client's session record as stored.
    fn record(sm: &StateMachine, client: u64) -> Option<Vec<u8>> {
        sm.shared.db.get(keys::client(client)).unwrap().map(|v| v.to_vec())
    }

    fn session(sm: &StateMachine, client: u64) -> Option<Session> {
        record(sm, client).map(|bytes| Session::decode(&bytes).unwrap())
    }

    #[tokio::test]
    async fn a_write_retried_with_its_seq_is_applied_once_and_answered_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let (_log, mut sm) = crate::open(dir.path(), bloomkv::Options::default()).unwrap();
        let kv = sm.reader();
        let too_long = vec![b'k'; bloomkv::MAX_KEY_BYTES];
        // A retry in the same apply call as the write, and in a later one, after another
        // client's write: neither puts the old value back.
        let first = sm
            .apply([
                once(1, 7, 1, Command::put("k", "a")),
                put(2, "k"),
                once(3, 7, 1, Command::put("k", "a")),
                once(4, 8, 1, Command::delete(&too_long)),
            ])
            .await
            .unwrap();
        assert_eq!(value(&kv, "k").as_deref(), Some(&b"v2"[..]));
        let recorded = record(&sm, 7);
        let again = sm
            .apply([
                once(5, 7, 1, Command::put("k", "a")),
                once(6, 8, 1, Command::delete(&too_long)),
            ])
            .await
            .unwrap();
        assert_eq!(value(&kv, "k").as_deref(), Some(&b"v2"[..]));
        assert_eq!(record(&sm, 7), recorded, "a retry leaves the session as it was");
        assert_eq!(first[0], Outcome::Applied);
        assert!(matches!(first[3], Outcome::Rejected { .. }));
        assert_eq!(again, [first[0].clone(), first[3].clone()]);
        assert_eq!(first[2], first[0]);
        // The next seq is a new write; writes without ids are unaffected.
        sm.apply([once(8, 7, 2, Command::put("k", "b"))]).await.unwrap();
        assert_eq!(value(&kv, "k").as_deref(), Some(&b"b"[..]));
        sm.apply([put(9, "k"), put(10, "k")]).await.unwrap();
        assert_eq!(value(&kv, "k").as_deref(), Some(&b"v10"[..]));
        // The sessions are state, not data.
        assert_eq!(keys(&kv), [b"k".to_vec()]);
    }

    #[tokio::test]
    async fn a_lower_seq_is_answered_out_of_order_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (_log, mut sm) = crate::open(dir.path(), bloomkv::Options::default()).unwrap();
        let kv = sm.reader();
        let got = sm
            .apply([once(1, 7, 1, Command::put("k", "a")), once(2, 7, 2, Command::put("k", "b"))])
            .await
            .unwrap();
        assert_eq!(got, [Outcome::Applied, Outcome::Applied]);
        // Seq 1's very write, another write under a lower seq, and, after a new write staged
        // in the same call, the seq that was last until then.
        let got = sm
            .apply([
                once(3, 7, 1, Command::put("k", "a")),
                once(4, 7, 0, Command::put("k", "z")),
                once(5, 7, 3, Command::put("j", "c")),
                once(6, 7, 2, Command::put("k", "b")),
            ])
            .await
            .unwrap();
        let out_of_order = |seq, last| Outcome::OutOfOrder { seq, last };
        assert_eq!(
            got,
            [out_of_order(1, 2), out_of_order(0, 2), Outcome::Applied, out_of_order(2, 3)]
        );
        assert_eq!(value(&kv, "k").as_deref(), Some(&b"b"[..]));
        assert_eq!(value(&kv, "j").as_deref(), Some(&b"c"[..]));
        let seq_3 = Session {
            seq: 3,
            index: 5,
            outcome: Outcome::Applied,
            digest: Some(digest(&Command::put("j", "c")).unwrap()),
        };
        assert_eq!(session(&sm, 7), Some(seq_3));

        let recorded = record(&sm, 7);
        let got = sm.apply([once(7, 7, 1, Command::put("k", "x"))]).await.unwrap();
        assert_eq!(got, [out_of_order(1, 3)]);
        assert_eq!(record(&sm, 7), recorded);
        assert_eq!(value(&kv, "k").as_deref(), Some(&b"b"[..]));
        // The next seq still applies.
        let got = sm.apply([once(8, 7, 4, Command::put("k", "d"))]).await.unwrap();
        assert_eq!(got, [Outcome::Applied]);
        assert_eq!(value(&kv, "k").as_deref(), Some(&b"d"[..]));
    }

    #[tokio::test]
    async fn a_seq_reused_for_another_write_is_refused_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (_log, mut sm) = crate::open(dir.path(), bloomkv::Options::default()).unwrap();
        let kv = sm.reader();
        sm.apply([once(1, 7, 1, Command::put("k", "a"))]).await.unwrap();
        let recorded = record(&sm, 7);
        // Another value, another key, another kind of write, the write inside a batch; then
        // the retry, which the refused ones did not displace.
        let got = sm
            .apply([
                once(2, 7, 1, Command::put("k", "b")),
                once(3, 7, 1, Command::put("j", "a")),
                once(4, 7, 1, Command::delete("k")),
                once(5, 7, 1, Command::Batch(vec![Command::put("k", "a")])),
                once(6, 7, 1, Command::put("k", "a")),
            ])
            .await
            .unwrap();
        let reused = Outcome::SeqReused { seq: 1 };
        assert_eq!(got, [reused.clone(), reused.clone(), reused.clone(), reused, Outcome::Applied]);
        assert_eq!(keys(&kv), [b"k".to_vec()]);
        assert_eq!(value(&kv, "k").as_deref(), Some(&b"a"[..]));
        assert_eq!(record(&sm, 7), recorded);

        // Against a session staged earlier in the same call.
        let got = sm
            .apply([
                once(7, 7, 2, Command::put("k", "b")),
                once(8, 7, 2, Command::put("k", "c")),
                once(9, 7, 2, Command::put("k", "b")),
            ])
            .await
            .unwrap();
        assert_eq!(got, [Outcome::Applied, Outcome::SeqReused { seq: 2 }, Outcome::Applied]);
        assert_eq!(value(&kv, "k").as_deref(), Some(&b"b"[..]));
        // A rejected write's seq is spent too.
        let too_long = vec![b'k'; bloomkv::MAX_KEY_BYTES];
        let got = sm
            .apply([
                once(10, 8, 1, Command::delete(&too_long)),
                once(11, 8, 1, Command::put("k", "e")),
                once(12, 8, 1, Command::delete(&too_long)),
            ])
            .await
            .unwrap();
        assert!(matches!(&got[0], Outcome::Rejected { .. }), "{got:?}");
        assert_eq!(got[1..], [Outcome::SeqReused { seq: 1 }, got[0].clone()]);
        // The next seq still applies.
        let got = sm.apply([once(13, 7, 3, Command::put("k", "d"))]).await.unwrap();
        assert_eq!(got, [Outcome::Applied]);
        assert_eq!(value(&kv, "k").as_deref(), Some(&b"d"[..]));
    }

    #[tokio::test]
    async fn the_outcomes_and_the_state_do_not_depend_on_how_the_log_is_split_into_calls() {
        let log = || {
            vec![
                once(1, 7, 1, Command::put("k", "a")),
                once(2, 7, 1, Command::put("k", "a")),
                once(3, 7, 1, Command::put("k", "b")),
                put(4, "k"),
                once(5, 8, 1, Command::put("j", "a")),
                once(6, 7, 2, Command::delete("k")),
                once(7, 7, 1, Command::put("k", "a")),
                once(8, 8, 1, Command::put("j", "b")),
                once(9, 7, 2, Command::delete("k")),
                once(10, 7, 3, Command::put("k", "c")),
            ]
        };
        let mut runs = Vec::new();
        for split in [10, 1, 3] {
            let dir = tempfile::tempdir().unwrap();
            let (_log, mut sm) = crate::open(dir.path(), bloomkv::Options::default()).unwrap();
            let mut outcomes = Vec::new();
            let mut entries = log().into_iter().peekable();
            while entries.peek().is_some() {
                let call: Vec<_> = entries.by_ref().take(split).collect();
                outcomes.extend(sm.apply(call).await.unwrap());
            }
            let db = &sm.shared.db;
            let state: Vec<_> = db
                .range(keys::CLIENT.to_vec()..keys::DATA_END.to_vec())
                .map(|r| r.unwrap())
                .map(|(k, v)| (k, v.to_vec()))
                .collect();
            runs.push((outcomes, state));
        }
        let reused = Outcome::SeqReused { seq: 1 };
        let out_of_order = Outcome::OutOfOrder { seq: 1, last: 2 };
        let applied = Outcome::Applied;
        let want = [
            applied.clone(),
            applied.clone(),
            reused.clone(),
            applied.clone(),
            applied.clone(),
            applied.clone(),
            out_of_order,
            reused,
            applied.clone(),
            applied,
        ];
        assert_eq!(runs[0].0, want);
        assert_eq!(runs[1], runs[0]);
        assert_eq!(runs[2], runs[0]);
    }

    #[tokio::test]
    async fn a_session_installed_from_a_snapshot_keeps_its_digest() {
        let (dirs, dirt) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (_l1, mut source) = crate::open(dirs.path(), bloomkv::Options::default()).unwrap();
        source.apply([once(1, 7, 1, Command::put("k", "a")), put(2, "k")]).await.unwrap();
        let snapshot = source.get_snapshot_builder().await.build_snapshot().await.unwrap();
        let (_l2, mut target) = crate::open(dirt.path(), bloomkv::Options::default()).unwrap();
        target.install_snapshot(&snapshot.meta, snapshot.snapshot).await.unwrap();

        let installed = session(&target, 7).expect("the session came with the snapshot");
        assert_eq!(installed.digest, Some(digest(&Command::put("k", "a")).unwrap()));
        assert_eq!(Some(installed), session(&source, 7));
        let got = target
            .apply([
                once(3, 7, 1, Command::put("k", "a")),
                once(4, 7, 1, Command::put("k", "b")),
                once(5, 7, 0, Command::put("k", "c")),
            ])
            .await
            .unwrap();
        let want = [
            Outcome::Applied,
            Outcome::SeqReused { seq: 1 },
            Outcome::OutOfOrder { seq: 0, last: 1 },
        ];
        assert_eq!(got, want);
        assert_eq!(value(&target.reader(), "k").as_deref(), Some(&b"v2"[..]));
    }

    /// The record a session was before digests: postcard `Session { seq, index, outcome }`
    /// (an `Outcome` encodes as its variant's index, then its fields).
    const OLD_APPLIED: [u8; 3] = [2, 1, 0]; // seq 2, index 1, Applied
    const OLD_REJECTED: [u8; 5] = [1, 1, 1, 1, b'x']; // seq 1, index 1, Rejected { reason: "x" }

    #[test]
    fn a_session_record_is_the_old_one_with_the_digest_after_it() {
        let rejected = Outcome::Rejected { reason: "x".into() };
        let old = Session::decode(&OLD_REJECTED).unwrap();
        assert_eq!(old, Session { seq: 1, index: 1, outcome: rejected.clone(), digest: None });
        assert_eq!(old.encode().unwrap(), OLD_REJECTED);
        let new = Session { digest: Some(0x0102_0304_0506_0708), ..old };
        let bytes = new.encode().unwrap();
        assert_eq!(bytes[..5], OLD_REJECTED);
        assert_eq!(bytes[5..], 0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(Session::decode(&bytes).unwrap(), new);
        // An older build decodes its struct and ignores the bytes after it.
        #[derive(Debug, PartialEq, serde::Deserialize)]
        struct Previous {
            seq: u64,
            index: u64,
            outcome: Outcome,
        }
        let previous: Previous = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(previous, Previous { seq: 1, index: 1, outcome: rejected });
        assert!(Session::decode(&bytes[..bytes.len() - 1]).is_err());
        // Digests are stored and compared across nodes and builds: pinned.
        assert_eq!(encode(&Command::put("k", "a")).unwrap(), [0, 1, b'k', 1, b'a']);
        assert_eq!(digest(&Command::put("k", "a")).unwrap(), 0xb3ef_b0c7_fa27_8179);
    }

    #[tokio::test]
    async fn a_session_stored_before_digests_still_answers_its_retry_after_reopen() {
        let (dir, dirt) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        {
            let (_log, mut sm) = crate::open(dir.path(), bloomkv::Options::default()).unwrap();
            sm.apply([put(1, "k")]).await.unwrap();
            let mut batch = WriteBatch::new();
            batch.put(keys::client(7), OLD_APPLIED);
            batch.put(keys::client(8), OLD_REJECTED);
            sm.shared.db.write(&batch, &WriteOptions::new().sync(true)).unwrap();
            sm.reader().close().unwrap();
        }
        let (_log, mut sm) = crate::open(dir.path(), bloomkv::Options::default()).unwrap();
        let format = sm.shared.db.get(keys::FORMAT).unwrap();
        assert_eq!(format.as_deref(), Some(&keys::FORMAT_VERSION.to_le_bytes()[..]));
        // A node that joins by a snapshot holding such records answers the same.
        let snapshot = sm.get_snapshot_builder().await.build_snapshot().await.unwrap();
        let (_l2, mut joined) = crate::open(dirt.path(), bloomkv::Options::default()).unwrap();
        joined.install_snapshot(&snapshot.meta, snapshot.snapshot).await.unwrap();
        assert_eq!(record(&joined, 7).as_deref(), Some(&OLD_APPLIED[..]));

        let log = || {
            [
                // With no digest, any write under the recorded seq is its retry, as before.
                once(2, 7, 2, Command::put("k", "other")),
                once(3, 8, 1, Command::put("j", "a")),
                once(4, 7, 1, Command::put("k", "older")),
                once(5, 7, 3, Command::put("k", "new")),
                once(6, 7, 3, Command::put("k", "other")),
                once(7, 7, 3, Command::put("k", "new")),
            ]
        };
        let rejected = Outcome::Rejected { reason: "x".into() };
        let want = [
            Outcome::Applied,
            rejected,
            Outcome::OutOfOrder { seq: 1, last: 2 },
            Outcome::Applied,
            Outcome::SeqReused { seq: 3 },
            Outcome::Applied,
        ];
        for node in [&mut sm, &mut joined] {
            assert_eq!(node.apply(log()).await.unwrap(), want);
            let kv = node.reader();
            assert_eq!(keys(&kv), [b"k".to_vec()]);
            assert_eq!(value(&kv, "k").as_deref(), Some(&b"new"[..]));
            let digest = digest(&Command::put("k", "new")).unwrap();
            assert_eq!(session(node, 7).unwrap().digest, Some(digest), "rewritten with one");
            assert_eq!(record(node, 8).as_deref(), Some(&OLD_REJECTED[..]));
        }
        // Sessions with no digest lapse like any other.
        let mut sessions = Sessions::default();
        let mut batch = sm.shared.db.batch();
        sessions.prune(&sm.shared.db, 2 + SESSION_WINDOW, &mut batch).unwrap();
        assert_eq!(sessions.0.get(&8), Some(&None));
        assert!(!sessions.0.contains_key(&7));
    }

    #[tokio::test]
    async fn sessions_survive_a_restart_and_travel_in_snapshots() {
        let (dirs, dirt) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        {
            let (_log, mut source) = crate::open(dirs.path(), bloomkv::Options::default()).unwrap();
            source.apply([once(1, 7, 1, Command::put("k", "a")), put(2, "k")]).await.unwrap();
            source.reader().close().unwrap();
        }
        let (_log, mut source) = crate::open(dirs.path(), bloomkv::Options::default()).unwrap();
        source.apply([once(3, 7, 1, Command::put("k", "a"))]).await.unwrap();
        assert_eq!(value(&source.reader(), "k").as_deref(), Some(&b"v2"[..]));

        let snapshot = source.get_snapshot_builder().await.build_snapshot().await.unwrap();
        let (_l2, mut target) = crate::open(dirt.path(), bloomkv::Options::default()).unwrap();
        target.apply([once(1, 7, 5, Command::put("stale", "session"))]).await.unwrap();
        target.install_snapshot(&snapshot.meta, snapshot.snapshot).await.unwrap();
        let kv = target.reader();
        assert_eq!(keys(&kv), [b"k".to_vec()]);
        // The installed session replaced the target's own (seq 5): seq 2 is new there too.
        let got = target
            .apply([once(4, 7, 1, Command::put("k", "a")), once(5, 7, 2, Command::put("j", "b"))])
            .await
            .unwrap();
        assert_eq!(got, [Outcome::Applied, Outcome::Applied]);
        assert_eq!(value(&kv, "k").as_deref(), Some(&b"v2"[..]));
        assert_eq!(value(&kv, "j").as_deref(), Some(&b"b"[..]));
    }

    #[tokio::test]
    async fn a_session_lapses_once_the_window_passes_without_its_client() {
        let dir = tempfile::tempdir().unwrap();
        let (_log, mut sm) = crate::open(dir.path(), bloomkv::Options::default()).unwrap();
        let kv = sm.reader();
        let later = SESSION_WINDOW + PRUNE_EVERY;
        sm.apply([
            once(1, 7, 1, Command::put("k", "a")),
            once(later - 5, 8, 1, Command::put("j", "a")),
        ])
        .await
        .unwrap();
        let blank = |index| Entry { log_id: log_id(1, 1, index), payload: EntryPayload::Blank };
        sm.apply([put(later - 1, "k"), put(later - 1, "j"), blank(later)]).await.unwrap();
        let db = &sm.shared.db;
        assert!(db.get(keys::client(7)).unwrap().is_none(), "client 7 wrote last at 1");
        assert!(db.get(keys::client(8)).unwrap().is_some(), "client 8 is within the window");
        // A retry after the window is a new write.
        sm.apply([
            once(later + 1, 7, 1, Command::put("k", "a")),
            once(later + 2, 8, 1, Command::put("j", "a")),
        ])
        .await
        .unwrap();
        assert_eq!(value(&kv, "k").as_deref(), Some(&b"a"[..]));
        assert_eq!(value(&kv, "j").as_deref(), Some(&format!("v{}", later - 1).into_bytes()[..]));
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

    /// Installing a snapshot purges the log it covers, in the batch that makes it current: a
    /// node killed after an install, its log grown past the snapshot before openraft purged,
    /// would otherwise hold entries from past the snapshot with none purged, a log openraft
    /// refuses to start from.
    #[tokio::test]
    async fn installing_a_snapshot_purges_the_log_it_covers() {
        use openraft::storage::RaftLogStorage;
        let (dirs, dirt) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (_l1, mut source) = crate::open(dirs.path(), bloomkv::Options::default()).unwrap();
        let (mut log, mut target) = crate::open(dirt.path(), bloomkv::Options::default()).unwrap();
        source.apply([put(1, "a"), put(2, "b"), put(3, "c")]).await.unwrap();

        let snapshot = source.get_snapshot_builder().await.build_snapshot().await.unwrap();
        target.install_snapshot(&snapshot.meta, snapshot.snapshot).await.unwrap();

        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(log_id(1, 1, 3)));
        assert_eq!(state.last_log_id, Some(log_id(1, 1, 3)));
    }

    /// Large values a node keeps in blob files (a kept WAL segment, a blob file a flush
    /// copied them into, one a compaction relocated them into) travel in a snapshot as the
    /// values they are: a node installing it, with blob files or without, reads each one, and
    /// again after a reopen.
    #[tokio::test]
    async fn a_snapshot_of_blob_values_installs_with_every_value_readable() {
        let blobs = || bloomkv::Options::default().blob_threshold(Some(1024));
        let big =
            |i: u64| -> Vec<u8> { (0..(4096 + i * 97)).map(|b| (b * 31 + i) as u8).collect() };
        let (dirs, dirt, diru) = (
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        );
        let (_l1, mut source) = crate::open(dirs.path(), blobs()).unwrap();
        let entry = |index: u64, key: String, value: Vec<u8>| Entry {
            log_id: log_id(1, 1, index),
            payload: EntryPayload::Normal(Command::put(key, value)),
        };
        let mut index = 0;
        for round in 0..3u64 {
            let mut batch = Vec::new();
            for i in 0..40 {
                index += 1;
                batch.push(entry(index, format!("k{i:03}"), big(round * 100 + i)));
                // Small values too: the last round's segment is not worth keeping, so its
                // large values are copied into a blob file.
                if round == 2 {
                    index += 1;
                    batch.push(entry(index, format!("small{i:03}"), vec![b's'; 900]));
                    index += 1;
                    batch.push(entry(index, format!("small{i:03}b"), vec![b't'; 900 * 8]));
                }
            }
            source.apply(batch).await.unwrap();
            source.shared.db.flush().unwrap();
        }
        // Half overwritten, then compacted: the survivors are relocated.
        let mut batch = Vec::new();
        for i in (0..40).step_by(2) {
            index += 1;
            batch.push(entry(index, format!("k{i:03}"), big(1000 + i)));
        }
        source.apply(batch).await.unwrap();
        source.shared.db.compact().unwrap();
        let s = source.shared.db.stats();
        assert!(s.blob_files.iter().any(|b| b.wal_segment), "{:?}", s.blob_files);
        assert!(s.blob_files.iter().any(|b| !b.wal_segment), "{:?}", s.blob_files);
        let want: Vec<(Vec<u8>, Vec<u8>)> =
            source.reader().scan().map(|r| r.map(|(k, v)| (k, v.to_vec())).unwrap()).collect();
        assert_eq!(want.len(), 40 + 80);
        assert_eq!(want[1], (b"k001".to_vec(), big(201)));
        assert_eq!(want[2], (b"k002".to_vec(), big(1002)));

        let snapshot = source.get_snapshot_builder().await.build_snapshot().await.unwrap();
        for (dir, opts) in [(&dirt, blobs()), (&diru, bloomkv::Options::default())] {
            let (log, mut target) = crate::open(dir.path(), opts.clone()).unwrap();
            target.apply([put(1, "stale")]).await.unwrap();
            let file = std::fs::File::open(&snapshot.snapshot.path).unwrap();
            let copy = Box::new(SnapshotFile::reading(file, snapshot.snapshot.path.clone()));
            target.install_snapshot(&snapshot.meta, copy).await.unwrap();
            let read = |sm: &StateMachine| -> Vec<(Vec<u8>, Vec<u8>)> {
                sm.reader().scan().map(|r| r.map(|(k, v)| (k, v.to_vec())).unwrap()).collect()
            };
            assert_eq!(read(&target), want);
            target.shared.db.compact().unwrap();
            assert_eq!(read(&target), want);
            target.shared.db.close().unwrap();
            drop((log, target));
            let (_log, target) = crate::open(dir.path(), opts).unwrap();
            assert_eq!(read(&target), want, "after a reopen");
        }
    }

    /// A source with a snapshot of many pairs (so the file spans several receive chunks),
    /// and its bytes.
    async fn source_snapshot(dir: &Path) -> (StateMachine, Snapshot<TypeConfig>, Vec<u8>) {
        let (_log, mut source) = crate::open(dir, bloomkv::Options::default()).unwrap();
        let entries: Vec<_> = (1..=200).map(|i| put(i, &format!("key{i:04}"))).collect();
        source.apply(entries).await.unwrap();
        let snapshot = source.get_snapshot_builder().await.build_snapshot().await.unwrap();
        let bytes = std::fs::read(&snapshot.snapshot.path).unwrap();
        (source, snapshot, bytes)
    }

    #[tokio::test]
    async fn a_damaged_or_cut_snapshot_is_refused_and_changes_nothing() {
        let (dirs, dirt) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (_source, snapshot, bytes) = source_snapshot(dirs.path()).await;
        let (_log, mut target) = crate::open(dirt.path(), bloomkv::Options::default()).unwrap();
        target.apply([put(1, "mine")]).await.unwrap();

        let mut flipped = bytes.clone();
        flipped[bytes.len() / 2] ^= 0x10;
        let cut = &bytes[..bytes.len() - 100];
        for (what, damaged, out_of_order) in
            [("flipped", &flipped[..], false), ("cut", cut, false), ("flipped", &flipped[..], true)]
        {
            let mut received = target.begin_receiving_snapshot().await.unwrap();
            if out_of_order {
                // Chunks written back to front: the receipt cannot check them, the install
                // must.
                let half = damaged.len() / 2;
                received.seek(SeekFrom::Start(half as u64)).await.unwrap();
                received.write_all(&damaged[half..]).await.unwrap();
                received.seek(SeekFrom::Start(0)).await.unwrap();
                received.write_all(&damaged[..half]).await.unwrap();
                received.shutdown().await.unwrap();
            } else {
                for chunk in damaged.chunks(1000) {
                    received.write_all(chunk).await.unwrap();
                }
                let refused = received.shutdown().await.unwrap_err();
                assert!(refused.to_string().contains("checksum mismatch"), "{what}: {refused}");
            }
            // Installed anyway, the file is checked whole and refused.
            let err = target.install_snapshot(&snapshot.meta, received).await.unwrap_err();
            let err = err.to_string();
            assert!(err.contains("bad snapshot"), "{what}, out of order {out_of_order}: {err}");
            assert_eq!(keys(&target.reader()), [b"mine".to_vec()]);
            let (applied, _) = target.applied_state().await.unwrap();
            assert_eq!(applied, Some(log_id(1, 1, 1)));
            assert!(target.get_current_snapshot().await.unwrap().is_none());
            assert_eq!(files(dirt.path()), Vec::<String>::new(), "the refused file is removed");
        }

        // The same bytes undamaged, received in chunks, install.
        let mut received = target.begin_receiving_snapshot().await.unwrap();
        for chunk in bytes.chunks(1000) {
            received.write_all(chunk).await.unwrap();
        }
        received.shutdown().await.unwrap();
        target.install_snapshot(&snapshot.meta, received).await.unwrap();
        assert_eq!(keys(&target.reader()).len(), 200);
        assert_eq!(files(dirt.path()).len(), 1);
    }

    #[tokio::test]
    async fn a_snapshot_whose_header_disagrees_with_its_meta_is_refused() {
        let (dirs, dirt) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (_source, snapshot, _) = source_snapshot(dirs.path()).await;
        let (_log, mut target) = crate::open(dirt.path(), bloomkv::Options::default()).unwrap();
        let mut meta = snapshot.meta.clone();
        meta.last_log_id = Some(log_id(1, 1, 7));
        let err = target.install_snapshot(&meta, snapshot.snapshot).await.unwrap_err();
        assert!(err.to_string().contains("its meta says"), "{err}");
        assert!(keys(&target.reader()).is_empty());
    }

    #[tokio::test]
    async fn the_current_snapshot_is_found_after_reopen_and_strays_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let (mut source, first, _) = source_snapshot(dir.path()).await;
        source.apply([put(201, "later")]).await.unwrap();
        let second = source.get_snapshot_builder().await.build_snapshot().await.unwrap();
        let second_path = second.snapshot.path.clone();
        // The first snapshot's file went once the second was recorded.
        assert!(!first.snapshot.path.exists());
        assert_eq!(files(dir.path()), [second_path.file_name().unwrap().to_str().unwrap()]);
        let bytes = std::fs::read(&second_path).unwrap();
        // What a crash can leave: a build never finished, a receive never finished, a file
        // renamed but never recorded.
        let snapshots = dir.path().join(snapshot::DIR);
        for stray in ["1-0.part", "recv-2-0.part", "3-0.snap"] {
            std::fs::write(snapshots.join(stray), b"partial").unwrap();
        }
        source.reader().close().unwrap();
        drop(source);

        let (_log, mut reopened) = crate::open(dir.path(), bloomkv::Options::default()).unwrap();
        assert_eq!(files(dir.path()), [second_path.file_name().unwrap().to_str().unwrap()]);
        let current = reopened.get_current_snapshot().await.unwrap().expect("a snapshot");
        assert_eq!(current.meta, second.meta);
        assert_eq!(std::fs::read(&current.snapshot.path).unwrap(), bytes);
    }

    #[tokio::test]
    async fn an_install_a_crash_cut_short_is_finished_at_open() {
        let (dirs, dirt) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (_source, snapshot, _) = source_snapshot(dirs.path()).await;
        let meta = snapshot.meta.clone();
        {
            let (_log, mut target) = crate::open(dirt.path(), bloomkv::Options::default()).unwrap();
            target.apply([put(1, "stale")]).await.unwrap();
            target.install_snapshot(&meta, snapshot.snapshot).await.unwrap();
            // Put the database back as a crash between the install's first batch and its
            // last would leave it: the new snapshot current and marked unfinished, the data
            // half replaced, the old applied id.
            let db = &target.shared.db;
            let mut batch = WriteBatch::new();
            batch.put(keys::INSTALLING, b"x");
            batch.delete_range(keys::data(b"key0100")..keys::DATA_END.to_vec());
            batch.put(keys::data(b"stale"), b"v1");
            batch.put(keys::APPLIED, encode(&log_id(1, 1, 1)).unwrap());
            db.write(&batch, &WriteOptions::new().sync(true)).unwrap();
            target.reader().close().unwrap();
        }
        let (_log, mut target) = crate::open(dirt.path(), bloomkv::Options::default()).unwrap();
        let got = keys(&target.reader());
        let want: Vec<Vec<u8>> = (1..=200).map(|i| format!("key{i:04}").into_bytes()).collect();
        assert_eq!(got, want);
        let (applied, membership) = target.applied_state().await.unwrap();
        assert_eq!((applied, membership), (meta.last_log_id, meta.last_membership.clone()));
        assert!(target.shared.db.get(keys::INSTALLING).unwrap().is_none());
        let current = target.get_current_snapshot().await.unwrap().expect("a snapshot");
        assert_eq!(current.meta, meta);
    }

    #[tokio::test]
    async fn a_layout_1_store_has_its_snapshot_moved_to_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let (source, snapshot, bytes) = source_snapshot(dir.path()).await;
        // Put the store back as layout 1 kept it: the snapshot in 1 KiB values, no file.
        let db = source.shared.db.clone();
        let chunks: Vec<&[u8]> = bytes.chunks(1 << 10).collect();
        let old = StoredV1 {
            meta: snapshot.meta.clone(),
            len: bytes.len() as u64,
            chunks: chunks.len() as u32,
        };
        let mut batch = WriteBatch::new();
        batch.put(keys::FORMAT, 1u32.to_le_bytes());
        batch.delete(keys::SNAPSHOT_CURRENT);
        batch.put(b"snapshot/meta", encode(&old).unwrap());
        for (n, chunk) in chunks.iter().enumerate() {
            let mut key = b"snapshot/chunk/".to_vec();
            key.extend_from_slice(&(n as u32).to_be_bytes());
            batch.put(key, chunk);
        }
        db.write(&batch, &WriteOptions::new().sync(true)).unwrap();
        source.reader().close().unwrap();
        drop((source, snapshot, db));
        std::fs::remove_dir_all(dir.path().join(snapshot::DIR)).unwrap();

        let (_log, mut reopened) = crate::open(dir.path(), bloomkv::Options::default()).unwrap();
        let current = reopened.get_current_snapshot().await.unwrap().expect("a snapshot");
        assert_eq!(current.meta, old.meta);
        assert_eq!(std::fs::read(&current.snapshot.path).unwrap(), bytes);
        let db = &reopened.shared.db;
        assert_eq!(db.get(keys::FORMAT).unwrap().as_deref(), Some(&3u32.to_le_bytes()[..]));
        assert!(db.prefix(b"snapshot/meta").next().is_none());
        assert!(db.prefix(b"snapshot/chunk/").next().is_none());
        assert_eq!(keys(&reopened.reader()).len(), 200);
        reopened.reader().close().unwrap();
        crate::open(dir.path(), bloomkv::Options::default()).unwrap(); // and opens again as 3
    }
}
