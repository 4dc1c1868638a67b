//! Opening a database: lock it, read CURRENT and the manifest, open every live table (filter
//! and index into RAM), replay WAL segments newer than the last flush, and leave a clean
//! starting point.
//!
//! Replayed writes are flushed to an L0 table *before* a new WAL segment is started, and the
//! old segments are deleted only after the manifest records that table. So whatever moment a
//! crash interrupts an open, the newest segment on disk is the only one that can end in a torn
//! record — which is exactly the one whose torn tail is allowed.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Condvar, Mutex};

use arc_swap::ArcSwap;

use super::table_files::{open_table, table_options, write_table, Separator, TableCaches};
use super::{BgState, DbInner, DbState, Mem, Tree, WalState};
use crate::batch::BadOp;
use crate::blob::BlobFileKind;
use crate::clock::MarkedClock;
use crate::filename::{self, current_path, lock_path, manifest_path, wal_path, FileKind};
use crate::fs::{FileLock, FileSystem};
use crate::iter::InternalIterator;
use crate::key::SeqNo;
use crate::log::LogReader;
use crate::memtable::MemTable;
use crate::options::Options;
use crate::range_del::TombstoneSplit;
use crate::stats::Counters;
use crate::version::edit::{KeyspaceDef, KeyspaceId, VersionEdit, DEFAULT_KEYSPACE};
use crate::version::manifest::{read_current, read_manifest, set_current, RecoveredKeyspace};
use crate::version::set::{
    default_keyspace_def, Version, VersionSet, DEFAULT_KEYSPACE_NAME, NUM_LEVELS,
};
use crate::{Error, Result, WriteBatch};
use bloomkv_tree::compact::newest::NewestVersions;
use bloomkv_tree::filter_budget::{table_filters, Placement};

/// One keyspace as found on disk: what the manifest says of it, its tables, and its writes
/// replayed from the WAL.
struct LoadedKeyspace {
    def: KeyspaceDef,
    version: Version,
    mem: Arc<MemTable>,
}

/// What is on disk: the keyspaces (the default first), and the manifest's counters.
struct Loaded {
    keyspaces: Vec<LoadedKeyspace>,
    next_keyspace_id: KeyspaceId,
    last_seq: SeqNo,
    log_number: u64,
    next_file: u64,
    names: Vec<String>,
    /// The manifest CURRENT named; `None` for a database being created.
    manifest_number: Option<u64>,
    /// The clock's high-water mark the manifest recorded (0 if none).
    clock_mark: u64,
}

/// Reads CURRENT, the manifest, every live table and the WAL segments, changing nothing.
fn load(
    dir: &Path,
    opts: &Options,
    caches: &TableCaches,
    allow_create: bool,
    read_only: bool,
) -> Result<Loaded> {
    let fs = opts.fs.clone();
    let names = list_dir(fs.as_ref(), dir)?;
    let kinds: Vec<FileKind> = names.iter().filter_map(|n| filename::parse(n)).collect();

    let mut manifest_number = None;
    let mut clock_mark = 0;
    let mut blob_files = std::collections::BTreeMap::new();
    let (recovered, next_keyspace_id, log_number, next_file, manifest_seq, manifest) = if fs
        .exists(&current_path(dir))
    {
        let mut m = read_manifest(fs.as_ref(), dir)?;
        manifest_number = Some(m.manifest_number);
        clock_mark = m.clock_mark;
        blob_files = std::mem::take(&mut m.blob_files);
        let path = manifest_path(dir, m.manifest_number);
        let facts = ManifestFacts { path, valid_len: m.valid_len, torn: m.torn_tail };
        let added_at = Some((facts, m.added_at));
        (m.keyspaces, m.next_keyspace_id, m.log_number, m.next_file_number, m.last_seq, added_at)
    } else {
        if holds_db_files(&names) {
            return Err(Error::corruption(
                current_path(dir),
                0,
                "CURRENT is missing but the directory holds database files",
            ));
        }
        if !allow_create {
            return Err(Error::NotFound { path: dir.to_path_buf() });
        }
        let default =
            RecoveredKeyspace { def: default_keyspace_def(), levels: vec![Vec::new(); NUM_LEVELS] };
        (vec![default], 1, 0, 1, 0, None)
    };

    // Every blob file a table references must be there whole; those no table references
    // are garbage, left out of the new manifest and removed as orphans.
    let referenced: std::collections::BTreeSet<u64> = recovered
        .iter()
        .flat_map(|k| k.levels.iter().flatten())
        .flat_map(|t| t.blob_refs.iter().map(|r| r.file))
        .collect();
    let mut blobs = std::collections::BTreeMap::new();
    for n in referenced {
        let Some(meta) = blob_files.get(&n) else { continue };
        let path = meta.path(dir);
        let size = fs.open(&path).map(|f| f.size()).map_err(|e| match &e {
            Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                Error::corruption(&path, 0, "blob file the manifest names is missing")
            }
            _ => e,
        })?;
        // A kept WAL segment's records end at its recorded size; beyond it there may be
        // zeros: space the segment reserved, whose cut at its switch (not synced on its own)
        // a power loss undid. No reference reaches past the recorded size.
        let kept_segment = meta.kind == BlobFileKind::WalSegment;
        if size != meta.file_size && !(kept_segment && size > meta.file_size) {
            return Err(Error::corruption(
                &path,
                size,
                format!("blob file is {size} bytes but the manifest recorded {}", meta.file_size),
            ));
        }
        blobs.insert(n, super::table_files::blob_file(dir, caches, *meta));
    }
    let lookup = |n: u64| blobs.get(&n).cloned();
    let mut keyspaces = Vec::with_capacity(recovered.len());
    for k in recovered {
        let mut levels = vec![Vec::new(); NUM_LEVELS];
        for (level, tables) in k.levels.into_iter().enumerate() {
            for meta in tables {
                let number = meta.number;
                let table = open_table(&fs, dir, caches, meta, &lookup).map_err(|e| {
                    match (&e, &manifest) {
                        (Error::Io { source, .. }, Some((m, added_at)))
                            if source.kind() == std::io::ErrorKind::NotFound =>
                        {
                            m.missing_table(
                                number,
                                level,
                                added_at.get(&number).copied().unwrap_or(0),
                            )
                        }
                        _ => e,
                    }
                })?;
                levels[level].push(table);
            }
        }
        let version = Version::new(levels);
        let mut def = k.def;
        if def.id == DEFAULT_KEYSPACE {
            let given = opts.keyspace_options();
            if !opts.change_settings {
                super::settings::check(DEFAULT_KEYSPACE_NAME, &def, &given, read_only)?;
            }
            def = KeyspaceDef::new(DEFAULT_KEYSPACE, DEFAULT_KEYSPACE_NAME, given);
        }
        let mem = Arc::new(MemTable::with_prefixes(opts.memtable_bytes, def.opts.prefix_extractor));
        keyspaces.push(LoadedKeyspace { def, version, mem });
    }

    // Segments below the log number are retired: the manifest says tables hold their
    // writes, and they are deleted once open. One holding a write beyond the manifest's last
    // sequence shows the log number is wrong, and deleting it would lose writes no table
    // holds.
    for k in &kinds {
        if let FileKind::Wal(n) = k {
            // A segment kept as a blob file is not retired: it holds values tables reference.
            if *n < log_number && !blob_files.contains_key(n) {
                check_retired_wal(fs.as_ref(), dir, *n, manifest_seq)?;
            }
        }
    }

    // Replay WAL segments at or above the log number, oldest first.
    let mut wals: Vec<u64> = kinds
        .iter()
        .filter_map(|k| match k {
            FileKind::Wal(n) if *n >= log_number => Some(*n),
            _ => None,
        })
        .collect();
    wals.sort_unstable();
    let mut last_seq: SeqNo = manifest_seq;
    // Sequence numbers run without gaps from the manifest's last one through every record
    // of every segment still to replay (a flush records the largest sequence it made
    // durable, and the segments after it hold the writes that followed, in order). A gap
    // means records are missing: a segment that is not the newest was cut at a record
    // boundary or emptied, which the torn-tail rule alone cannot see.
    let mut expected = manifest_seq + 1;
    // The blob files of values over `MAX_VALUE_BYTES` the replayed records put.
    let mut replayed_blobs = std::collections::BTreeMap::new();
    let mut previous: Option<(std::path::PathBuf, u64)> = None;
    for (i, &n) in wals.iter().enumerate() {
        let path = wal_path(dir, n);
        let data = fs.read_all(&path)?;
        let len = data.len() as u64;
        let mut reader = LogReader::new(path.clone(), data);
        let mut first_record = true;
        while let Some(record) = reader.next_record()? {
            let batch = WriteBatch::from_record(record)
                .map_err(|e| e.in_file(&path, reader.last_record_offset()))?;
            let first = batch.sequence();
            if first != expected {
                return Err(match (&previous, first_record, &manifest) {
                    (None, true, Some((m, _))) => m.wal_gap(expected - 1, n, first),
                    (Some((prev, prev_len)), true, _) => Error::corruption(
                        prev,
                        *prev_len,
                        format!(
                            "WAL segment ends before sequence {expected}, but the next segment \
                             starts at {first}: records are missing"
                        ),
                    ),
                    _ => Error::corruption(
                        &path,
                        reader.last_record_offset(),
                        format!("WAL record has sequence {first}, expected {expected}"),
                    ),
                });
            }
            expected = first + batch.len() as u64;
            first_record = false;
            // Writes are checked against the size limits when accepted, so an op over them
            // was written by a build without the check, or forged with a valid CRC. Either
            // way no table could hold it: refusing here, naming the record, is better than
            // failing every flush (and so every open) later.
            //
            // Writes to a keyspace dropped since are skipped (it took them along); a keyspace
            // the manifest never created cannot have been written to. Ids are never reused,
            // so every id below the next one was created.
            batch.check(|id| id < next_keyspace_id).map_err(|bad| {
                let reason = match bad {
                    BadOp::Size(e) => format!("WAL record cannot be stored in a table: {e}"),
                    BadOp::Keyspace(id) => format!(
                        "WAL record writes to keyspace {id}, which the manifest never created"
                    ),
                };
                Error::corruption(&path, reader.last_record_offset(), reason)
            })?;
            let at = reader.last_record_offset();
            stage_blobs(&fs, dir, caches, &batch, &blob_files, &mut replayed_blobs)
                .map_err(|reason| Error::corruption(&path, at, reason))?;
            batch.insert_into(
                |id| keyspaces.iter().find(|k| k.def.id == id).map(|k| &*k.mem),
                |n| replayed_blobs.get(&n).cloned(),
            );
            last_seq = last_seq.max((first + batch.len() as u64).saturating_sub(1));
        }
        if reader.dropped_tail_bytes() > 0 && i + 1 < wals.len() {
            return Err(Error::corruption(
                &path,
                reader.last_record_offset(),
                "torn record in a WAL segment that is not the newest",
            ));
        }
        previous = Some((path, len));
    }
    let max_number = wals.iter().copied().chain(kinds.iter().filter_map(|k| match k {
        FileKind::Table(n) | FileKind::Manifest(n) | FileKind::Blob(n) => Some(*n),
        _ => None,
    }));
    let next_file = max_number.map(|n| n + 1).max().unwrap_or(0).max(next_file);
    Ok(Loaded {
        keyspaces,
        next_keyspace_id,
        last_seq,
        log_number,
        next_file,
        names,
        manifest_number,
        clock_mark,
    })
}

/// Opens, into `staged`, the blob file of each put in `batch` of a value over
/// `MAX_VALUE_BYTES` (written straight to a file of its own, synced before its record was
/// logged): the file must be there, not already a blob file of the manifest's (`known`), and
/// long enough for the reference. Otherwise the reason the record is corrupt.
fn stage_blobs(
    fs: &Arc<dyn FileSystem>,
    dir: &Path,
    caches: &TableCaches,
    batch: &WriteBatch,
    known: &std::collections::BTreeMap<u64, crate::blob::BlobFileMeta>,
    staged: &mut std::collections::BTreeMap<u64, Arc<crate::blob::BlobFile>>,
) -> std::result::Result<(), String> {
    use crate::batch::BatchOp;
    use crate::blob::{physical_span, BlobFileMeta, BlobRef};
    for (_, op) in batch.iter() {
        let BatchOp::BlobPut { reference, .. } = op else { continue };
        let r = BlobRef::decode(reference).map_err(|e| e.to_string())?;
        if staged.contains_key(&r.file) {
            continue;
        }
        let path = filename::blob_path(dir, r.file);
        if known.contains_key(&r.file) {
            return Err(format!(
                "WAL record puts a value in {}, already a blob file",
                path.display()
            ));
        }
        let size = fs.open(&path).map(|f| f.size()).map_err(|e| {
            format!("WAL record puts a value in {}, which cannot be opened: {e}", path.display())
        })?;
        let end = physical_span(r.offset, r.len).and_then(|(o, l)| o.checked_add(l));
        if end.map_or(true, |end| end > size) {
            return Err(format!(
                "WAL record puts a value of {} bytes in {}, which is {size} bytes long",
                r.len,
                path.display()
            ));
        }
        let meta = BlobFileMeta {
            number: r.file,
            value_bytes: r.len,
            values: 1,
            file_size: size,
            ..BlobFileMeta::default()
        };
        staged.insert(r.file, super::table_files::blob_file(dir, caches, meta));
    }
    Ok(())
}

/// The names in the database directory `dir`, with the two mistakes a caller can make in
/// the path reported as such rather than as a failure to list: no directory there
/// ([`Error::NotFound`]), or a file where the directory should be.
fn list_dir(fs: &dyn FileSystem, dir: &Path) -> Result<Vec<String>> {
    fs.list(dir).map_err(|e| {
        let Error::Io { source, .. } = &e else { return e };
        let not_a_dir = is_not_a_directory(source);
        if !not_a_dir && source.kind() != std::io::ErrorKind::NotFound {
            return e;
        }
        // A file system without error numbers (one held in memory) says only that there is
        // no directory; that the path exists then means something else is there.
        if fs.exists(dir) {
            Error::InvalidArgument(format!("{} is a file, not a database directory", dir.display()))
        } else if not_a_dir {
            e
        } else {
            Error::NotFound { path: dir.to_path_buf() }
        }
    })
}

/// True for `ENOTDIR`: a path component is not a directory. (`ErrorKind::NotADirectory`
/// is newer than the minimum supported Rust.)
fn is_not_a_directory(e: &std::io::Error) -> bool {
    #[cfg(unix)]
    return e.raw_os_error() == Some(rustix::io::Errno::NOTDIR.raw_os_error());
    #[cfg(not(unix))]
    return {
        let _ = e;
        false
    };
}

/// Refuses retired WAL segment `n` if it holds a write newer than `last_seq`, the
/// manifest's last sequence. Only whole records that decode count: a retired segment is
/// never replayed, so damage in it must not make the database unopenable.
fn check_retired_wal(fs: &dyn FileSystem, dir: &Path, n: u64, last_seq: SeqNo) -> Result<()> {
    let path = wal_path(dir, n);
    let Ok(data) = fs.read_all(&path) else { return Ok(()) };
    let mut reader = LogReader::new(path.clone(), data);
    while let Ok(Some(record)) = reader.next_record() {
        let Ok(batch) = WriteBatch::from_record(record) else { break };
        let newest = batch.sequence().saturating_add(batch.len() as u64).saturating_sub(1);
        if !batch.is_empty() && newest > last_seq {
            return Err(Error::corruption(
                &path,
                reader.last_record_offset(),
                format!(
                    "WAL segment {n} is below the manifest's log number (so retired, and deleted \
                     at open) but holds sequence {newest}, beyond the manifest's last sequence \
                     {last_seq}: no table holds those writes"
                ),
            ));
        }
    }
    Ok(())
}

/// What recovery knows about the manifest it read, to name it in errors.
///
/// A manifest can end early in two ways: a torn last record (ignored as a crash mid-append)
/// or a clean cut at a record boundary (indistinguishable from a shorter log). Either is
/// harmless exactly when everything the lost edits retired is still on disk: nothing is
/// deleted before the edit retiring it is synced, and a crash can only lose what was not.
/// A flush retires WAL segments, and every segment starts with a header naming its first
/// sequence number, so a lost flush shows up as a gap between the manifest's last sequence
/// and the first segment still here; a compaction retires tables, so a lost compaction
/// shows up as a missing table. Both are refused as corruption in the manifest.
struct ManifestFacts {
    path: std::path::PathBuf,
    valid_len: u64,
    torn: bool,
}

impl ManifestFacts {
    fn ending(&self) -> String {
        if self.torn {
            format!("its last record (from offset {}) is damaged", self.valid_len)
        } else {
            "it may have lost its last records".to_string()
        }
    }

    fn missing_table(&self, number: u64, level: usize, added_at: u64) -> Error {
        let (offset, what) = if self.torn {
            (self.valid_len, "a compaction in the damaged last record probably deleted it")
        } else {
            (added_at, "the edit at this offset added it")
        };
        Error::corruption(
            &self.path,
            offset,
            format!("table {number} on level {level} is missing ({what}); {}", self.ending()),
        )
    }

    fn wal_gap(&self, manifest_seq: SeqNo, wal: u64, first: SeqNo) -> Error {
        Error::corruption(
            &self.path,
            self.valid_len,
            format!(
                "the manifest ends at sequence {manifest_seq}, but WAL segment {wal}, the \
                 oldest to replay, continues from {first}: writes in between are neither in a \
                 table nor in a WAL; {} (a flush whose WAL segment was then deleted), or WAL \
                 segments were removed",
                self.ending()
            ),
        )
    }
}

/// Refuses to create a database in a directory holding files a database does not make
/// (checked before the LOCK is taken, so a refused open leaves no file behind). A mount
/// point's `lost+found` is allowed: a dedicated disk is a natural home for a database.
fn refuse_foreign_files(dir: &Path, names: &[String]) -> Result<()> {
    let mut foreign: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| filename::parse(n).is_none() && *n != "lost+found")
        .collect();
    if foreign.is_empty() {
        return Ok(());
    }
    foreign.sort_unstable();
    Err(Error::NotADatabase {
        path: dir.to_path_buf(),
        foreign: foreign.into_iter().map(String::from).collect(),
    })
}

/// True if the directory holds WAL segments or tables. Creating a database writes its first
/// manifest and then CURRENT; WAL segments and tables come only after CURRENT exists. So
/// manifests without CURRENT are what a creation interrupted by a crash leaves (they are
/// removed as stale when the creation is redone), while a WAL or table without CURRENT means
/// CURRENT itself was lost.
fn holds_db_files(names: &[String]) -> bool {
    names
        .iter()
        .filter_map(|n| filename::parse(n))
        .any(|k| matches!(k, FileKind::Table(_) | FileKind::Wal(_)))
}

pub(crate) fn open(dir: &Path, opts: Options) -> Result<DbInner> {
    let fs = opts.fs.clone();
    if !fs.exists(dir) {
        if !opts.create_if_missing {
            return Err(Error::NotFound { path: dir.to_path_buf() });
        }
        fs.create_dir_all(dir)?;
    }
    // Every refusal comes before the lock is taken: taking it creates a LOCK file, which a
    // directory that gets no database must not be left with.
    if fs.exists(&current_path(dir)) {
        if opts.error_if_exists {
            return Err(Error::AlreadyExists { path: dir.to_path_buf() });
        }
    } else {
        let names = list_dir(fs.as_ref(), dir)?;
        // With WAL segments or tables but no CURRENT it is a damaged database, which `load`
        // reports as such.
        if !holds_db_files(&names) {
            if !opts.create_if_missing {
                return Err(Error::NotFound { path: dir.to_path_buf() });
            }
            refuse_foreign_files(dir, &names)?;
        }
    }
    let lock = fs.lock(&lock_path(dir))?;
    let caches = TableCaches::new(&opts);
    let loaded = load(dir, &opts, &caches, opts.create_if_missing, false)?;
    let (names, manifest_number) = (loaded.names.clone(), loaded.manifest_number);
    let clock =
        Arc::new(MarkedClock::new(opts.clock.clone(), opts.system_clock, loaded.clock_mark));
    match recover(dir, &opts, &caches, loaded, &clock) {
        Ok((state, versions, wal)) => {
            Ok(assemble(dir, opts, clock, Some(lock), state, versions, wal, caches))
        }
        Err(e) => {
            // Best effort: if undoing fails part-way, what is left is a state some open
            // would have reached anyway, and the next successful open sweeps it.
            let _ = undo_failed_open(fs.as_ref(), dir, &names, manifest_number);
            Err(e)
        }
    }
}

/// Puts the directory back as a failed open found it (`names` listed, CURRENT naming
/// `manifest_number`, or absent if `None`): without this, every open that fails for want of
/// space leaves a replay table and a manifest behind, and a retried open fills the disk.
///
/// If the new manifest was already committed (CURRENT renamed, but its directory fsync or
/// the new WAL segment failed), CURRENT is pointed back at the old one first and only then
/// are the new files removed: both manifests describe the same writes (the old one through
/// its WAL segments, which are still there), so every moment of this is recoverable. Removal
/// is confined to files bloomkv names that were not listed before; the LOCK stays, because
/// unlinking a lock file another opener may have just opened would let two handles own the
/// database.
fn undo_failed_open(
    fs: &dyn FileSystem,
    dir: &Path,
    names: &[String],
    manifest_number: Option<u64>,
) -> Result<()> {
    let current = current_path(dir);
    let named = if fs.exists(&current) { Some(read_current(fs, dir)?) } else { None };
    if named != manifest_number {
        match manifest_number {
            Some(n) => set_current(fs, dir, n)?,
            None => {
                fs.remove(&current)?;
                fs.sync_dir(dir)?;
            }
        }
    }
    let before: std::collections::HashSet<&str> = names.iter().map(String::as_str).collect();
    for name in fs.list(dir)? {
        let ours = match filename::parse(&name) {
            Some(FileKind::Lock | FileKind::Current) | None => false,
            Some(_) => !before.contains(name.as_str()),
        };
        if ours {
            fs.remove(&dir.join(&name))?;
        }
    }
    fs.sync_dir(dir)
}

/// Makes the loaded state the database's starting point: flushes the replayed writes to
/// tables, writes a new manifest retiring the replayed WAL segments, starts a new segment,
/// and removes what no longer belongs.
fn recover(
    dir: &Path,
    opts: &Options,
    caches: &TableCaches,
    loaded: Loaded,
    clock: &Arc<MarkedClock>,
) -> Result<(DbState, VersionSet, WalState)> {
    let fs = opts.fs.clone();
    let Loaded { mut keyspaces, next_keyspace_id, last_seq, log_number, next_file, names, .. } =
        loaded;
    let mut versions = VersionSet::new(dir, fs.clone(), next_file, log_number, last_seq);
    versions.record_clock_mark(clock.clone());
    versions.set_keyspaces(keyspaces.iter().map(|k| k.def.clone()).collect(), next_keyspace_id);
    let new_wal = versions.new_file_number();
    // The replayed writes' tables, one L0 table per keyspace with any, as one edit.
    let mut flushed = VersionEdit::default();
    let mut opened = Vec::new();
    for k in &keyspaces {
        let mem = &k.mem;
        if mem.is_empty() {
            continue;
        }
        let number = versions.new_file_number();
        let placement = Placement { level: 0, keys: mem.len() as u64, replaces: &[] };
        let filter = table_filters(&k.def.opts, &k.version, &placement);
        let topts = table_options(&k.def.opts, filter);
        let range_dels = mem.range_tombstones();
        let mut it = NewestVersions::new(mem.iter(), Box::new(|_| false))
            .with_range_tombstones(range_dels.clone());
        it.seek_to_first()?;
        let mut split = TombstoneSplit::of(range_dels.as_deref());
        let id = k.def.id;
        let numbers = versions.file_numbers();
        let mut sep = Separator::new(fs.clone(), dir, numbers, k.def.opts.blob_threshold);
        let written =
            write_table(fs.as_ref(), dir, topts, id, number, &mut it, &mut split, &mut sep);
        let written = match written {
            Ok(w) => w,
            Err(e) => {
                sep.abandon();
                return Err(e);
            }
        };
        let mut new_blobs: Vec<_> = sep
            .finish()?
            .into_iter()
            .map(|m| super::table_files::blob_file(dir, caches, m))
            .collect();
        // Files of values over `MAX_VALUE_BYTES` the replayed writes put: adopted by the
        // table if it references them (one it does not is removed below, as an orphan).
        new_blobs.extend(mem.held_blobs());
        if let Some(meta) = written {
            fs.sync_dir(dir)?;
            let t = {
                let lookup = super::table_files::blobs_in([&k.version], &new_blobs);
                open_table(&fs, dir, caches, meta.clone(), &lookup)?
            };
            opened.push(t);
            flushed.added.push((0, meta));
        }
    }
    // Applied like any edit, though never logged on its own: the new manifest records every
    // keyspace and table, including those just written, and a log number that retires every
    // replayed segment.
    let tables = keyspaces.iter().map(|k| (k.def.id, &k.version));
    let applied = versions.apply(&mut flushed, tables, &opened)?;
    for k in &mut keyspaces {
        if let Some(built) = applied.keyspace(k.def.id).filter(|_| applied.changed(k.def.id)) {
            k.version = Version::new(built.levels.clone());
        }
    }
    versions.set_log_number(new_wal);
    versions.write_snapshot(keyspaces.iter().map(|k| &k.version))?;
    let wal_writer =
        super::wal::start_wal_segment(fs.create(&wal_path(dir, new_wal))?, last_seq + 1)?;
    fs.sync_dir(dir)?;

    // Remove what no longer belongs: retired WALs, tables not in the version, old manifests,
    // temporary files.
    let live: std::collections::HashSet<u64> =
        keyspaces.iter().flat_map(|k| k.version.all_tables().map(|(_, t)| t.meta.number)).collect();
    let live_blobs: std::collections::HashSet<u64> =
        keyspaces.iter().flat_map(|k| k.version.blobs.0.keys().copied()).collect();
    for name in &names {
        let stale = match filename::parse(name) {
            // A segment kept as a blob file goes as one: when no table references it.
            Some(FileKind::Wal(n)) => n < new_wal && !live_blobs.contains(&n),
            Some(FileKind::Table(n)) => !live.contains(&n),
            Some(FileKind::Blob(n)) => !live_blobs.contains(&n),
            Some(FileKind::Manifest(n)) => n != versions.manifest_number(),
            Some(FileKind::Temp) => true,
            _ => false,
        };
        if stale {
            let _ = fs.remove(&dir.join(name));
        }
    }

    let state = state_of(keyspaces, new_wal, true);
    let wal = WalState { writer: Some(wal_writer), number: new_wal, last_seq, segment_file: None };
    Ok((state, versions, wal))
}

/// The engine state of recovered keyspaces: with their replayed writes as the active
/// memtables (a read-only open), or with empty ones (`fresh`: the writes are in tables now).
fn state_of(keyspaces: Vec<LoadedKeyspace>, wal_number: u64, fresh: bool) -> DbState {
    let trees = keyspaces
        .into_iter()
        .map(|k| {
            let table =
                if fresh { Arc::new(k.mem.successor(k.def.opts.prefix_extractor)) } else { k.mem };
            Arc::new(Tree {
                id: k.def.id,
                name: k.def.name.into(),
                opts: k.def.opts,
                mem: Mem { table, wal_number, last_seq: 0, sealed: false, wal_len: 0 },
                imm: Vec::new(),
                history: Vec::new(),
                version: Arc::new(k.version),
            })
        })
        .collect();
    DbState { trees }
}

/// Builds the engine around recovered state; shared by the read-write and read-only opens.
#[allow(clippy::too_many_arguments)]
fn assemble(
    dir: &Path,
    opts: Options,
    clock: Arc<MarkedClock>,
    lock: Option<Box<dyn FileLock>>,
    state: DbState,
    versions: VersionSet,
    wal: WalState,
    caches: TableCaches,
) -> DbInner {
    let visible = wal.last_seq;
    static INSTANCES: AtomicU64 = AtomicU64::new(1);
    DbInner {
        instance: INSTANCES.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        dir: dir.to_path_buf(),
        fs: opts.fs.clone(),
        events: crate::events::Events::new(&opts.listeners),
        opts,
        clock,
        read_only: lock.is_none(),
        file_lock: Mutex::new(lock),
        state: ArcSwap::from_pointee(state),
        state_changes: AtomicU64::new(0),
        state_lock: Mutex::new(()),
        compaction_slot: std::sync::RwLock::new(()),
        compacting: Mutex::default(),
        ingest_order: Mutex::new(()),
        file_numbers: versions.file_numbers(),
        staged_blobs: Mutex::default(),
        unsettled_outputs: Mutex::default(),
        versions: Mutex::new(versions),
        wal: Mutex::new(wal),
        write_queue: Mutex::new(Default::default()),
        write_queue_busy: AtomicBool::new(false),
        visible_seq: AtomicU64::new(visible),
        in_flight: Default::default(),
        bg: Mutex::new(BgState::default()),
        has_bg_error: AtomicBool::new(false),
        bg_cv: Condvar::new(),
        bg_done_cv: Condvar::new(),
        caches,
        counters: Counters::default(),
        closed: AtomicBool::new(false),
        ingests_begun: AtomicU64::new(0),
        ingests_done: AtomicU64::new(0),
        ingest_log: Default::default(),
        live_transactions: Default::default(),
    }
}

/// Opens a database for reading only: no LOCK is taken and nothing on disk is changed, so it
/// works while another process has the database open. The view is the tables in the manifest
/// plus the writes in the WAL segments at the moment of opening; it does not follow later
/// writes. If the owning process deletes a table (compaction) while the view is being built,
/// the open is retried a few times.
pub(crate) fn open_read_only(dir: &Path, opts: Options) -> Result<DbInner> {
    let caches = TableCaches::new(&opts);
    let mut attempt = 0;
    let loaded = loop {
        match load(dir, &opts, &caches, false, true) {
            // The owner may retire a table or a WAL segment (or finish an edit) between
            // the listing, the manifest read and the file reads; a fresh look settles it.
            Err(Error::Io { ref source, .. })
                if source.kind() == std::io::ErrorKind::NotFound && attempt < 5 =>
            {
                attempt += 1;
            }
            Err(Error::Corruption { .. }) if attempt < 5 => attempt += 1,
            other => break other?,
        }
    };
    let mut versions =
        VersionSet::new(dir, opts.fs.clone(), loaded.next_file, loaded.log_number, loaded.last_seq);
    let defs = loaded.keyspaces.iter().map(|k| k.def.clone()).collect();
    versions.set_keyspaces(defs, loaded.next_keyspace_id);
    let clock =
        Arc::new(MarkedClock::new(opts.clock.clone(), opts.system_clock, loaded.clock_mark));
    let state = state_of(loaded.keyspaces, 0, false);
    let wal = WalState { writer: None, number: 0, last_seq: loaded.last_seq, segment_file: None };
    Ok(assemble(dir, opts, clock, None, state, versions, wal, caches))
}
