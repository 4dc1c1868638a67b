//! Checks of a database directory: the manifest as recovery reads it, every live table
//! (present, of the recorded size, intact, agreeing with the manifest), the WALs recovery
//! would replay, and notes on files recovery ignores. (Overlapping tables on a sorted level
//! are reported as the manifest's corruption: recovery refuses them.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::table::FoundRef;
use super::{check_blob_data, guarded, log, quoted, table, Report};
use crate::blob::{read_value, BlobFileMeta, BlobRefs};
use crate::filename::{self, FileKind};
use crate::fs::{FileSystem, RandomAccessFile};
use crate::version::edit::TableMeta;
use crate::version::manifest::read_manifest;
use crate::Error;

/// Checks the database in `dir`.
pub(super) fn check(fs: &dyn FileSystem, r: &mut Report, dir: &Path) {
    let files = match filename::list(fs, dir) {
        Ok(f) => f,
        Err(e) => return r.error(dir, e),
    };
    let current = filename::current_path(dir);
    let has_data = files
        .iter()
        .any(|(_, k)| matches!(k, FileKind::Manifest(_) | FileKind::Table(_) | FileKind::Wal(_)));
    let has_current = fs.exists(&current);
    if !has_current && !has_data {
        r.failed(dir, "no database here (no CURRENT and no database files)");
        return;
    }

    // The manifest as the engine reads it (CURRENT → manifest → folded edits).
    let mut manifest = None;
    if has_current {
        guarded(r, &current, |r| match read_manifest(fs, dir) {
            Ok(m) => manifest = Some(m),
            // CURRENT was read (it exists), so a missing file is the manifest it names.
            Err(Error::Io { context, source }) if source.kind() == std::io::ErrorKind::NotFound => {
                r.problem(
                    &current,
                    Some(0),
                    format!("CURRENT names a manifest that is missing ({context})"),
                )
            }
            Err(e) => r.error(&current, e),
        });
    } else {
        r.problem(&current, None, "CURRENT is missing but the directory holds database files");
    }
    // Every record of the live manifest, checked on its own for counts and tail notes.
    if let Some(m) = &manifest {
        let path = filename::manifest_path(dir, m.manifest_number);
        guarded(r, &path, |r| log::check_manifest(fs, r, &path));
    }

    let live: BTreeSet<u64> = manifest
        .iter()
        .flat_map(|m| &m.keyspaces)
        .flat_map(|k| k.levels.iter().flatten().map(|t| t.number))
        .collect();
    match &manifest {
        Some(m) => {
            // Blob files first, so that the tables' references into one that is missing or
            // unreadable are counted against a problem already reported.
            let blobs = open_live_blobs(fs, r, dir, &m.blob_files);
            // Each keyspace is a tree of its own: its levels are sorted on their own.
            for k in &m.keyspaces {
                for (level, tables) in k.levels.iter().enumerate() {
                    for meta in tables {
                        let before = (r.problems.len(), r.errors.len());
                        let refs = check_live_table(fs, r, dir, level, meta);
                        // Only a table read without trouble can be held to the manifest's
                        // counts of its references.
                        let whole = before == (r.problems.len(), r.errors.len());
                        let path = filename::table_path(dir, meta.number);
                        guarded(r, &path, |r| {
                            resolve_refs(r, dir, &path, (meta, whole), &refs, &blobs)
                        });
                    }
                }
            }
        }
        None => {
            // Without a manifest, check every table file found on its own.
            for (name, kind) in &files {
                if let FileKind::Table(_) = kind {
                    let path = dir.join(name);
                    guarded(r, &path, |r| {
                        table::check_path(fs, r, &path);
                    });
                }
            }
        }
    }
    for (name, kind) in &files {
        match kind {
            FileKind::Table(n) if manifest.is_some() && !live.contains(n) => r.note(
                &dir.join(name),
                None,
                "table not in the manifest (left over; the next writable open deletes it)",
            ),
            FileKind::Blob(n)
                if manifest.as_ref().is_some_and(|m| !m.blob_files.contains_key(n)) =>
            {
                let why =
                    "blob file not in the manifest (a value over MAX_VALUE_BYTES a WAL record \
                           puts, which the next flush adopts, or left over, which the next \
                           writable open deletes)";
                r.note(&dir.join(name), None, why)
            }
            FileKind::Temp => {
                r.note(&dir.join(name), None, "temporary file (an interrupted write)")
            }
            _ => {}
        }
    }

    // WALs: those at or above the manifest's log number hold unflushed writes and are
    // replayed oldest first; only the newest may end in a torn record.
    let log_number = manifest.as_ref().map_or(0, |m| m.log_number);
    let mut wals: Vec<u64> = files
        .iter()
        .filter_map(|(_, k)| match k {
            FileKind::Wal(n) => Some(*n),
            _ => None,
        })
        .collect();
    wals.sort_unstable();
    let newest = wals.last().copied();
    let kept = |n: u64| {
        let meta = manifest.as_ref().and_then(|m| m.blob_files.get(&n));
        meta.is_some_and(|b| b.kind == crate::blob::BlobFileKind::WalSegment)
    };
    for n in wals {
        let path = filename::wal_path(dir, n);
        if kept(n) {
            r.note(&path, None, "WAL segment kept as a blob file: tables reference its values");
            continue;
        }
        if n < log_number {
            r.note(
                &path,
                None,
                format!("obsolete WAL (below log number {log_number}); recovery ignores it"),
            );
            continue;
        }
        guarded(r, &path, |r| log::check_wal(fs, r, &path, Some(n) == newest, true));
    }
}

/// A table the manifest lists: present, of the recorded size, intact, and matching the
/// manifest's metadata. Returns the blob references its entries hold.
fn check_live_table(
    fs: &dyn FileSystem,
    r: &mut Report,
    dir: &Path,
    level: usize,
    meta: &TableMeta,
) -> Vec<FoundRef> {
    let path = filename::table_path(dir, meta.number);
    let file = match fs.open(&path) {
        Ok(f) => f,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            // An owner compacting right now may have deleted it since we read the manifest.
            let still_live = read_manifest(fs, dir)
                .map(|m| {
                    m.keyspaces
                        .iter()
                        .flat_map(|k| k.levels.iter().flatten())
                        .any(|t| t.number == meta.number)
                })
                .unwrap_or(true);
            if still_live {
                r.problem(
                    &path,
                    None,
                    format!("table listed by the manifest on level {level} is missing"),
                );
            } else {
                r.note(&path, None, "table was removed by a concurrent compaction while verifying");
            }
            return Vec::new();
        }
        Err(e) => {
            r.error(&path, e);
            return Vec::new();
        }
    };
    let size = file.size();
    if size != meta.file_size {
        r.problem(
            &path,
            Some(size.min(meta.file_size)),
            format!("table is {size} bytes but the manifest recorded {}", meta.file_size),
        );
    }
    let mut props = None;
    let mut refs = Vec::new();
    guarded(r, &path, |r| props = table::check_file(r, &path, file, &mut refs));
    if let Some(p) = props {
        for d in meta.disagreements(&p) {
            r.problem(&path, None, d);
        }
    }
    refs
}

/// A blob file the manifest lists, as [`open_live_blobs`] found it.
enum LiveBlob {
    Open(Arc<dyn RandomAccessFile>, PathBuf),
    /// Missing or unreadable (the file it is, `NNNNNN.log` for a kept segment): reported.
    Unreadable(PathBuf),
    /// Dropped and deleted by a live owner since the manifest was read: the tables that
    /// referenced it have been rewritten too, so their references are not damage.
    Dropped,
}

/// Every blob file the manifest lists as live, opened, each checked whole and against the
/// size the manifest recorded.
fn open_live_blobs(
    fs: &dyn FileSystem,
    r: &mut Report,
    dir: &Path,
    live: &BTreeMap<u64, BlobFileMeta>,
) -> BTreeMap<u64, LiveBlob> {
    let mut open = BTreeMap::new();
    for (&n, meta) in live {
        // A kept WAL segment is `NNNNNN.log`.
        let path = meta.path(dir);
        let kept = meta.kind == crate::blob::BlobFileKind::WalSegment;
        let file = match fs.open(&path) {
            Ok(f) => f,
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                // An owner may have dropped it (no table of its version references it any
                // more) since the manifest was read.
                let still_live =
                    read_manifest(fs, dir).map(|m| m.blob_files.contains_key(&n)).unwrap_or(true);
                if still_live {
                    r.problem(&path, None, "blob file listed by the manifest is missing");
                    open.insert(n, LiveBlob::Unreadable(path));
                } else {
                    r.note(&path, None, "blob file was dropped by a concurrent compaction");
                    open.insert(n, LiveBlob::Dropped);
                }
                continue;
            }
            Err(e) => {
                r.error(&path, e);
                open.insert(n, LiveBlob::Unreadable(path));
                continue;
            }
        };
        let size = file.size();
        // A kept segment may end in zeros past its records (its reserved space, whose cut a
        // power loss undid): no reference reaches them.
        if size != meta.file_size && !(kept && size > meta.file_size) {
            r.problem(
                &path,
                Some(size.min(meta.file_size)),
                format!("blob file is {size} bytes but the manifest recorded {}", meta.file_size),
            );
        }
        if kept {
            // Its records are write batches: checked as the WAL segment it still is.
            guarded(r, &path, |r| log::check_wal(fs, r, &path, false, true));
        } else {
            guarded(r, &path, |r| {
                let mut data = vec![0; size as usize];
                match file.read_exact_at(&mut data, 0) {
                    Ok(()) => check_blob_data(r, &path, data),
                    Err(e) => r.error(&path, e),
                }
            });
        }
        open.insert(n, LiveBlob::Open(file, path));
    }
    open
}

/// Resolves the blob references `refs` found in the table `meta` (at `path`): each names a
/// live blob file, lies inside it, and reads back a value matching its checksum. Also, the
/// manifest's per-file reference counts for the table (from which live and garbage bytes
/// are derived) must be what the table holds, when the table could be read `whole`.
fn resolve_refs(
    r: &mut Report,
    dir: &Path,
    path: &Path,
    (meta, whole): (&TableMeta, bool),
    refs: &[FoundRef],
    blobs: &BTreeMap<u64, LiveBlob>,
) {
    let table =
        path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into());
    let mut counted: Vec<BlobRefs> = Vec::new();
    // Per blob file that is not live or could not be opened: references and the first one.
    let mut unresolved: BTreeMap<u64, (u64, &FoundRef)> = BTreeMap::new();
    for f in refs {
        let rf = &f.reference;
        crate::blob::count_ref(&mut counted, rf);
        let file = match blobs.get(&rf.file) {
            Some(LiveBlob::Open(file, blob)) => (file, blob),
            Some(LiveBlob::Dropped) => continue,
            Some(LiveBlob::Unreadable(_)) | None => {
                unresolved.entry(rf.file).or_insert((0, f)).0 += 1;
                continue;
            }
        };
        let (file, blob) = file;
        r.checked.blob_refs += 1;
        match read_value(file.as_ref(), blob, file.size(), rf) {
            Ok(_) => {}
            Err(Error::Corruption { offset, reason, .. }) => r.problem(
                blob,
                Some(offset),
                format!(
                    "{reason} (the value of key {} in table {table}, data block at {})",
                    quoted(&f.key),
                    f.block
                ),
            ),
            Err(e) => r.error(blob, e),
        }
    }
    for (n, (count, first)) in unresolved {
        let (blob, why) = match blobs.get(&n) {
            Some(LiveBlob::Unreadable(path)) => (path.clone(), "which is missing or unreadable"),
            _ => (filename::blob_path(dir, n), "which the manifest does not list as live"),
        };
        r.problem(
            path,
            Some(first.block),
            format!(
                "{count} blob reference(s) name {}, {why} (first: key {} at offset {})",
                blob.display(),
                quoted(&first.key),
                first.reference.offset
            ),
        );
    }
    if whole && counted != meta.blob_refs {
        let show = |v: &[BlobRefs]| {
            let parts: Vec<String> = v
                .iter()
                .map(|b| format!("{} ref(s) of {} bytes into {:06}.blob", b.count, b.bytes, b.file))
                .collect();
            if parts.is_empty() {
                "none".to_string()
            } else {
                parts.join(", ")
            }
        };
        r.problem(
            path,
            None,
            format!(
                "manifest records blob references {} but the table holds {}",
                show(&meta.blob_refs),
                show(&counted)
            ),
        );
    }
}
