//! Checks of a database directory: the manifest as recovery reads it, every live table
//! (present, of the recorded size, intact, agreeing with the manifest), the WALs recovery
//! would replay, and notes on files recovery ignores. (Overlapping tables on a sorted level
//! are reported as the manifest's corruption: recovery refuses them.)

use std::collections::BTreeSet;
use std::path::Path;

use super::{guarded, log, table, Report};
use crate::filename::{self, FileKind};
use crate::fs::FileSystem;
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
            // Each keyspace is a tree of its own: its levels are sorted on their own.
            for k in &m.keyspaces {
                for (level, tables) in k.levels.iter().enumerate() {
                    for meta in tables {
                        check_live_table(fs, r, dir, level, meta);
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
    for n in wals {
        let path = filename::wal_path(dir, n);
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
/// manifest's metadata.
fn check_live_table(
    fs: &dyn FileSystem,
    r: &mut Report,
    dir: &Path,
    level: usize,
    meta: &TableMeta,
) {
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
            return;
        }
        Err(e) => {
            r.error(&path, e);
            return;
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
    guarded(r, &path, |r| props = table::check_file(r, &path, file));
    let Some(p) = props else { return };
    for d in meta.disagreements(&p) {
        r.problem(&path, None, d);
    }
}
