//! A node's backup: the database's checkpoint plus the snapshot file each group's copied
//! state names as current.
//!
//! The database's own checkpoint leaves the snapshot directories out, but a group's state
//! names its current snapshot, its log is purged up to it, and a redone install reads it: a
//! copy without the file fails the first time openraft asks for the snapshot. So the files
//! named at the copy's moment go with it. Each is first linked aside (in a `backup-pins-…`
//! directory of the node's own, removed after, and at the next open if a crash left it),
//! because the node deletes a snapshot file once a newer one is current; the copy is then
//! built beside `dir` and renamed into place, so `dir` appears whole or not at all, as
//! [`bloomkv::Db::checkpoint`]'s does.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bloomkv::Db;

use crate::group_store::{group_ids, keyspace_name, snapshot_dir_in};
use crate::snapshot;

/// How many times a copy is tried again when a snapshot it names was replaced (and its file
/// deleted) before it could be set aside: each try takes a new view.
const ATTEMPTS: usize = 4;

fn io_error(doing: &str, path: &Path, source: io::Error) -> bloomkv::Error {
    bloomkv::Error::Io { context: format!("{doing} {}", path.display()), source: Arc::new(source) }
}

/// The prefix of the directories, in a node's `snapshots/`, that hold a backup's files aside.
pub(crate) const PINS: &str = "backup-pins-";

/// A name nothing else in this process uses: `<pid>-<n>`.
fn unique() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Writes the backup of `db` (every group) to `dir`; returns the sequence number it was taken
/// at. `dir` must not exist or be an empty directory.
pub(crate) fn checkpoint(db: &Db, dir: &Path) -> bloomkv::Result<u64> {
    if let Ok(mut entries) = std::fs::read_dir(dir) {
        if entries.next().is_some() {
            let why = format!("{}: a backup's directory must be empty", dir.display());
            return Err(bloomkv::Error::InvalidArgument(why));
        }
    }
    let name = dir.file_name().ok_or_else(|| {
        bloomkv::Error::InvalidArgument(format!(
            "{}: a backup needs a directory name",
            dir.display()
        ))
    })?;
    for _ in 0..ATTEMPTS {
        let pins = db.path().join(snapshot::DIR).join(format!("{PINS}{}", unique()));
        let staged = dir.with_file_name(format!(".{}.backup-{}", name.to_string_lossy(), unique()));
        let result = attempt(db, dir, &pins, &staged);
        let _ = std::fs::remove_dir_all(&pins);
        if let Some(done) = result? {
            return Ok(done);
        }
    }
    Err(bloomkv::Error::Io {
        context: format!("backing up to {}", dir.display()),
        source: Arc::new(io::Error::other("the snapshots changed during every attempt")),
    })
}

/// One try: `None` when a snapshot the view names was gone before it could be set aside.
fn attempt(db: &Db, dir: &Path, pins: &Path, staged: &Path) -> bloomkv::Result<Option<u64>> {
    let view = db.snapshot();
    let mut named = Vec::new();
    for group in group_ids(db) {
        let Some(keyspace) = db.existing_keyspace(keyspace_name(group)) else { continue };
        let group_view = view.keyspace(&keyspace)?;
        let stored = snapshot::stored(&group_view)
            .map_err(|e| bloomkv::Error::InvalidArgument(format!("group {group}: {e}")))?;
        if let Some(stored) = stored {
            named.push((group, stored.file));
        }
    }
    // Set each named file aside before the copy, which may take a while: a link keeps the
    // file's bytes even after the node deletes its name.
    for (group, file) in &named {
        let from = snapshot_dir_in(db.path(), *group).join(file);
        let to = snapshot_dir_in(pins, *group).join(file);
        std::fs::create_dir_all(to.parent().unwrap_or(pins))
            .map_err(|e| io_error("creating", &to, e))?;
        match link_or_copy(&from, &to) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error("setting aside", &from, e)),
        }
    }
    let built = stage(&view, &named, pins, staged).and_then(|()| {
        std::fs::rename(staged, dir).map_err(|e| io_error("renaming into place", dir, e))?;
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            snapshot::sync_dir(parent).map_err(|e| io_error("syncing", parent, e))?;
        }
        Ok(())
    });
    if let Err(e) = built {
        let _ = std::fs::remove_dir_all(staged);
        return Err(e);
    }
    Ok(Some(view.sequence()))
}

/// Writes the database's copy to `staged` and moves the set-aside files into its snapshot
/// directories, durably.
fn stage(
    view: &bloomkv::Snapshot,
    named: &[(u64, String)],
    pins: &Path,
    staged: &Path,
) -> bloomkv::Result<()> {
    view.checkpoint(staged)?;
    for (group, file) in named {
        let into = snapshot_dir_in(staged, *group);
        snapshot::ensure_dir(&into).map_err(|e| io_error("creating", &into, e))?;
        let from = snapshot_dir_in(pins, *group).join(file);
        let to = into.join(file);
        // A link where the backup shares the node's file system, else a copy.
        link_or_copy(&from, &to).map_err(|e| io_error("copying", &from, e))?;
        std::fs::File::open(&to)
            .and_then(|f| f.sync_all())
            .map_err(|e| io_error("syncing", &to, e))?;
        snapshot::sync_dir(&into).map_err(|e| io_error("syncing", &into, e))?;
    }
    let top = staged.join(snapshot::DIR);
    if top.is_dir() {
        snapshot::sync_dir(&top).map_err(|e| io_error("syncing", &top, e))?;
    }
    snapshot::sync_dir(staged).map_err(|e| io_error("syncing", staged, e))
}

fn link_or_copy(from: &Path, to: &Path) -> io::Result<()> {
    match std::fs::hard_link(from, to) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(e),
        Err(_) => std::fs::copy(from, to).map(|_| ()),
    }
}

#[cfg(test)]
mod tests {
    use crate::test_util::{keys, put};
    use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};

    use crate::NodeStore;
    use bloomkv::Options;

    #[tokio::test]
    async fn a_backup_carries_each_groups_current_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let node = NodeStore::open(dir.path().join("node"), Options::default()).unwrap();
        let (_log0, mut sm0) = node.group(0).unwrap();
        let (_log5, mut sm5) = node.group(5).unwrap();
        sm0.apply([put(1, "a")]).await.unwrap();
        sm0.get_snapshot_builder().await.build_snapshot().await.unwrap();
        sm5.apply([put(1, "b")]).await.unwrap();
        sm5.get_snapshot_builder().await.build_snapshot().await.unwrap();
        // A second snapshot replaces the first, whose file the node then deletes.
        sm5.apply([put(2, "c")]).await.unwrap();
        let built = sm5.get_snapshot_builder().await.build_snapshot().await.unwrap();
        sm5.apply([put(3, "d")]).await.unwrap();

        let backup = dir.path().join("backup");
        std::fs::create_dir(&backup).unwrap();
        sm5.reader().checkpoint(&backup).unwrap();
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        let snapshots = std::fs::read_dir(dir.path().join("node").join("snapshots")).unwrap();
        let pins: Vec<_> = snapshots
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with(super::PINS))
            .collect();
        assert!(pins.is_empty(), "{pins:?}");
        let err = sm0.reader().checkpoint(&backup).unwrap_err();
        assert!(matches!(err, bloomkv::Error::InvalidArgument(_)), "{err}");

        let copy = NodeStore::open(&backup, Options::default()).unwrap();
        let (_log, mut copy5) = copy.group(5).unwrap();
        let current = copy5.get_current_snapshot().await.unwrap().expect("group 5's snapshot");
        assert_eq!(current.meta, built.meta);
        assert_eq!(keys(&copy5.reader()), [b"b".to_vec(), b"c".to_vec(), b"d".to_vec()]);
        let (_log, mut copy0) = copy.group(0).unwrap();
        assert!(copy0.get_current_snapshot().await.unwrap().is_some());

        // The copied snapshot installs, bringing exactly what it held.
        let (_log, mut copy9) = copy.group(9).unwrap();
        copy9.install_snapshot(&current.meta, current.snapshot).await.unwrap();
        assert_eq!(keys(&copy9.reader()), [b"b".to_vec(), b"c".to_vec()]);
    }
}
