//! Online checkpoints: an openable copy of the database as a snapshot sees it, made while
//! writes go on.
//!
//! A snapshot pins a state (memtables and a version of the tables) and a sequence number S;
//! every table in that version holds only writes at or below S, and the tables stay on disk
//! while the snapshot holds them, whatever compactions do meanwhile. The copy is built from
//! exactly that:
//!
//! 1. every table of the version gets a second name in the new directory: a hard link where
//!    the file system allows (tables are immutable, so sharing the inode is safe and costs
//!    no space), a copy otherwise;
//! 2. the memtables' entries at or below S — newest version of each key, tombstones kept —
//!    are written as one more L0 table, numbered above every linked table so it reads as the
//!    newest;
//! 3. a fresh manifest lists those tables with last sequence number S and a log number no
//!    WAL segment has, so opening the copy replays nothing; CURRENT is written last.
//!
//! Why a table from the memtables rather than a prefix of the live WAL: the memtables are the
//! WAL's contents already parsed, filtering them at S gives a copy that equals the snapshot
//! exactly (a WAL prefix would hold whatever was written up to the moment of copying), and
//! nothing needs the write path's lock.
//!
//! All of that is written into a temporary sibling of the target, `.<name>.checkpoint-tmp-…`,
//! which is synced whole and then renamed to the target. The target's name therefore never
//! holds a partial copy: a directory without CURRENT would open as a new, empty database,
//! silently, in place of the data a caller believes is there. A checkpoint that fails takes
//! its temporary directory away again; one killed part-way leaves it, under a name no one
//! opens by mistake.
//!
//! The target is refused if it is the database directory, lies inside it (a directory made
//! where the database will later want a file, `000999.log` or `CURRENT.tmp`, stops it from
//! opening) or holds it. Paths are compared after resolving symbolic links and `..`, as
//! the kernel will when it follows them.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::table_files::{table_options, write_table, Separator};
use super::{DbInner, DbState, Tree};
use crate::blob::BlobFileKind;
use crate::filename::{current_path, table_path};
use crate::fs::FileSystem;
use crate::iter::merge::MergingIterator;
use crate::iter::{BidirectionalIterator, InternalIterator};
use crate::key::{self, SeqNo};
use crate::range_del::{Fragments, TombstoneSplit};
use crate::version::edit::{KeyspaceDef, VersionEdit};
use crate::version::manifest::{create_manifest, set_current};
use crate::{Error, Result};
use bloomkv_tree::compact::newest::NewestVersions;
use bloomkv_tree::filter_budget::{table_filters, Placement};

/// Copies through this many bytes at a time where a table cannot be linked.
const COPY_CHUNK: usize = 1 << 20;

impl DbInner {
    /// Writes the checkpoint of `state` at `seq` to `dest`, which must not exist or be an
    /// empty directory, and must not be or hold the database directory or lie inside it.
    /// Either the whole checkpoint appears at `dest` or nothing does.
    pub(crate) fn checkpoint(&self, state: &DbState, seq: SeqNo, dest: &Path) -> Result<()> {
        let fs = self.fs.as_ref();
        let target = Target::resolve(fs, &self.dir, dest)?;
        let existed = fs.exists(&target.path);
        if existed && !fs.list(&target.path)?.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "checkpoint directory {} exists and is not empty",
                dest.display()
            )));
        }
        let tmp = target.temp_sibling(fs)?;
        let built = fs
            .create_dir_all(&tmp)
            .and_then(|()| self.write_checkpoint(state, seq, &tmp))
            .and_then(|()| target.sync_created_parents(fs))
            .and_then(|()| fs.rename_dir(&tmp, &target.path));
        if let Err(e) = built {
            remove_partial(fs, &tmp);
            return Err(e);
        }
        // The commit: until the parent directory is synced the rename may not survive a
        // power loss. If that fails the copy is taken back, so that an error always means
        // no checkpoint (best effort: if the rename back fails too, the copy stays).
        if let Err(e) = fs.sync_dir(&target.parent) {
            if fs.rename_dir(&target.path, &tmp).is_ok() {
                if existed {
                    let _ = fs.create_dir_all(&target.path);
                }
                remove_partial(fs, &tmp);
            }
            return Err(e);
        }
        Ok(())
    }

    /// Writes the checkpoint into the new, empty directory `dest` and makes it durable
    /// there: every table, the manifest, then CURRENT, each entry synced.
    fn write_checkpoint(&self, state: &DbState, seq: SeqNo, dest: &Path) -> Result<()> {
        let fs = self.fs.as_ref();
        let versions = super::lock_mutex(&self.versions);
        // The recorded definitions, not the trees' options: a keyspace not opened since the
        // database was has no callbacks in its options, yet their names are recorded.
        let def = |t: &Arc<Tree>| {
            versions.keyspace_def(t.id).cloned().unwrap_or_else(|| KeyspaceDef {
                id: t.id,
                name: t.name.to_string(),
                opts: t.opts.clone(),
                callbacks: None,
            })
        };
        let mut edit = VersionEdit {
            keyspaces: state.trees.iter().map(def).collect(),
            next_keyspace_id: Some(versions.next_keyspace_id()),
            ..VersionEdit::default()
        };
        drop(versions);
        let mut number = 0;
        for tree in &state.trees {
            for (level, t) in tree.version.all_tables() {
                let (from, to) =
                    (table_path(&self.dir, t.meta.number), table_path(dest, t.meta.number));
                link_or_copy(fs, &from, &to, t.meta.file_size)?;
                edit.added.push((level, t.meta.clone()));
            }
            // Blob files are immutable too: linked like tables. A kept WAL segment keeps its
            // name (below the copy's log number, it is never replayed there) and may hold
            // several keyspaces' values: each file is linked once.
            // With them, the files the memtables hold for values over `MAX_VALUE_BYTES`,
            // which the memtables' table below may reference (one it does not, the copy's
            // open removes).
            // Not the WAL segments memtables read their values from as they are written: the
            // memtables' table below holds those values inline.
            let logging = logging_segments(tree);
            for b in tree.blobs().0.values() {
                if edit.added_blobs.iter().any(|a| a.number == b.meta.number)
                    || logging.contains(&b.meta.number)
                {
                    continue;
                }
                let (from, to) = (b.meta.path(&self.dir), b.meta.path(dest));
                let exact = b.meta.kind == BlobFileKind::Separated;
                link_or_copy_part(fs, &from, &to, b.meta.file_size, exact)?;
                edit.added_blobs.push(b.meta);
            }
            number = self.memtables_to_table(tree, seq, dest, &mut edit)?;
        }

        let manifest = number + 1;
        // The copy has no WAL segment, so none at or above the log number: nothing is replayed.
        edit.log_number = Some(number + 2);
        edit.next_file_number = Some(number + 3);
        edit.last_seq = Some(seq);
        drop(create_manifest(fs, dest, manifest, &edit)?);
        // Makes the tables' names and the manifest durable, then commits with CURRENT.
        fs.sync_dir(dest)?;
        set_current(fs, dest, manifest)
    }
}

/// A second name for table `from` at `to`: a hard link, or a copy checked against the size
/// the manifest recorded.
impl DbInner {
    /// Writes the entries of `tree`'s memtables at or below `seq` into one more L0 table of
    /// the copy in `dest`, recorded in `edit`; returns the file number it took (used or not),
    /// above every table the copy links.
    fn memtables_to_table(
        &self,
        tree: &Tree,
        seq: SeqNo,
        dest: &Path,
        edit: &mut VersionEdit,
    ) -> Result<u64> {
        // The memtables become one more L0 run of the copy: a budgeted filter gets that run's
        // share, as a flush would give it.
        let keys = tree.mems().map(|m| m.table.len() as u64).sum();
        let placement = Placement { level: 0, keys, replaces: &[] };
        let filter = table_filters(&tree.opts, &tree.version, &placement);
        let children: Vec<Box<dyn BidirectionalIterator>> = tree
            .mems()
            .map(|m| Box::new(m.table.iter()) as Box<dyn BidirectionalIterator>)
            .collect();
        // The memtables' range tombstones the snapshot sees go with their entries.
        let sets: Vec<_> = tree.mems().filter_map(|m| m.table.range_tombstones()).collect();
        let range_dels = Fragments::union(sets.iter().map(|s| s.as_ref())).at_or_below(seq);
        let range_dels = (!range_dels.is_empty()).then(|| Arc::new(range_dels));
        let visible = AtOrBelow { inner: MergingIterator::new(children), seq };
        let mut newest = NewestVersions::new(visible, Box::new(|_| false))
            .with_range_tombstones(range_dels.clone());
        newest.seek_to_first()?;
        let number = self.file_numbers.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut split = TombstoneSplit::of(range_dels.as_deref());
        let topts = table_options(&tree.opts, filter);
        let fs = self.fs.as_ref();
        // The memtables' values stay inline in the copy: its tables are all it writes. Those
        // they hold as references into WAL segments are read back: the copy has no WAL.
        let mut inline =
            Separator::off(self.fs.clone()).relocating(logging_segments(tree), tree.blobs());
        let written =
            write_table(fs, dest, topts, tree.id, number, &mut newest, &mut split, &mut inline)?;
        if let Some(meta) = written {
            edit.added.push((0, meta));
        }
        Ok(number)
    }
}

/// The WAL segments `tree`'s memtables hold values in by reference (`write::LoggedValues`),
/// sorted.
fn logging_segments(tree: &Tree) -> Vec<u64> {
    let mut numbers: Vec<u64> = tree
        .mems()
        .filter(|m| m.table.held_blob(m.wal_number).is_some())
        .map(|m| m.wal_number)
        .collect();
    numbers.sort_unstable();
    numbers.dedup();
    numbers
}

/// Takes away what a failed checkpoint wrote to its temporary directory, and the directory.
/// Best effort: the caller reports the first failure, not a failure to clean up after it.
fn remove_partial(fs: &dyn FileSystem, dir: &Path) {
    if let Ok(mut names) = fs.list(dir) {
        // CURRENT first: should removing stop part-way, what is left does not open.
        let current = current_path(dir);
        names.sort_by_key(|n| dir.join(n) != current);
        for name in names {
            let _ = fs.remove(&dir.join(name));
        }
    }
    let _ = fs.remove_dir(dir);
}

/// Where a checkpoint goes, resolved.
struct Target {
    /// The target with symbolic links and `..` resolved, absolute where the file system has
    /// a working directory.
    path: PathBuf,
    /// The directory that holds it, where the temporary directory is made: on the same
    /// file system, so the final rename is possible.
    parent: PathBuf,
    /// The nearest ancestor of `path` (or `path` itself) that existed.
    existing: PathBuf,
}

/// Distinguishes temporary directories of checkpoints running at once in this process.
static TEMP_SEQ: AtomicU64 = AtomicU64::new(0);

impl Target {
    /// Resolves `dest` and refuses it if it is, lies inside or holds `db_dir`.
    ///
    /// Only a path that exists can be canonicalized, so the nearest existing ancestor is,
    /// and the missing components are added back by name (none of them exists, so none is
    /// a link).
    fn resolve(fs: &dyn FileSystem, db_dir: &Path, dest: &Path) -> Result<Target> {
        let db = fs.canonicalize(db_dir)?;
        let parts: Vec<Component> = dest.components().collect();
        let mut found = None;
        for k in (1..=parts.len()).rev() {
            let prefix: PathBuf = parts[..k].iter().collect();
            if fs.exists(&prefix) {
                found = Some((fs.canonicalize(&prefix)?, k));
                break;
            }
        }
        let (existing, k) = match found {
            Some(f) => f,
            // A relative path none of whose components exists: the working directory.
            None => (fs.canonicalize(Path::new("."))?, 0),
        };
        let mut path = existing.clone();
        for part in &parts[k..] {
            match part {
                Component::ParentDir => {
                    path.pop();
                }
                Component::CurDir => {}
                // Only where nothing of `dest` exists, not even its root (a file system
                // held in memory may lack one): an absolute part replaces what came before.
                other => path.push(other.as_os_str()),
            }
        }
        let refuse = |why: &str| {
            Err(Error::InvalidArgument(format!(
                "checkpoint directory {} {why} {}",
                dest.display(),
                db_dir.display()
            )))
        };
        if path == db {
            return refuse("is the database directory");
        }
        if path.starts_with(&db) {
            return refuse("is inside the database directory");
        }
        if db.starts_with(&path) {
            return refuse("holds the database directory");
        }
        let Some(parent) = path.parent().map(Path::to_path_buf) else {
            return refuse("has no parent directory to build it in next to");
        };
        Ok(Target { path, parent, existing })
    }

    /// A name next to the target that nothing holds: a leading dot and the suffix keep it
    /// from being taken for the checkpoint, and the process id and a counter keep
    /// checkpoints running at once apart.
    fn temp_sibling(&self, fs: &dyn FileSystem) -> Result<PathBuf> {
        let name = self.path.file_name().unwrap_or_default();
        for _ in 0..1000 {
            let mut tmp = OsString::from(".");
            tmp.push(name);
            let n = TEMP_SEQ.fetch_add(1, Ordering::Relaxed);
            tmp.push(format!(".checkpoint-tmp-{}-{n}", std::process::id()));
            let tmp = self.parent.join(tmp);
            if !fs.exists(&tmp) {
                return Ok(tmp);
            }
        }
        Err(Error::InvalidArgument(format!(
            "no free temporary name next to checkpoint directory {}",
            self.path.display()
        )))
    }

    /// Makes the entries of the directories that making the temporary directory created
    /// on the way to the target durable, so that the rename's sync of the parent is all
    /// the commit needs.
    fn sync_created_parents(&self, fs: &dyn FileSystem) -> Result<()> {
        let mut dir = self.parent.as_path();
        while dir != self.existing && dir.starts_with(&self.existing) {
            let Some(up) = dir.parent() else { break };
            fs.sync_dir(up)?;
            dir = up;
        }
        Ok(())
    }
}

fn link_or_copy(fs: &dyn crate::fs::FileSystem, from: &Path, to: &Path, size: u64) -> Result<()> {
    link_or_copy_part(fs, from, to, size, true)
}

/// [`link_or_copy`], where a copy takes the first `size` bytes of a file that may be longer
/// unless `exact` (a kept WAL segment may end in zeros reserved beyond its records).
fn link_or_copy_part(
    fs: &dyn crate::fs::FileSystem,
    from: &Path,
    to: &Path,
    size: u64,
    exact: bool,
) -> Result<()> {
    if fs.hard_link(from, to).is_ok() {
        return Ok(());
    }
    let src = fs.open(from)?;
    if src.size() < size || (exact && src.size() != size) {
        return Err(Error::corruption(
            from,
            src.size(),
            format!("table is {} bytes but the manifest recorded {size}", src.size()),
        ));
    }
    let mut out = fs.create(to)?;
    let mut buf = vec![0u8; COPY_CHUNK.min(size as usize)];
    let mut offset = 0;
    while offset < size {
        let n = (size - offset).min(buf.len() as u64) as usize;
        src.read_exact_at(&mut buf[..n], offset)?;
        out.append(&buf[..n])?;
        offset += n as u64;
    }
    out.sync()
}

/// Passes on only the entries written at or below `seq`: what a snapshot at `seq` sees.
struct AtOrBelow<I> {
    inner: I,
    seq: SeqNo,
}

impl<I: InternalIterator> AtOrBelow<I> {
    fn skip_newer(&mut self) -> Result<()> {
        while self.inner.valid()
            && key::parse_internal_key(self.inner.key()).is_some_and(|p| p.seq > self.seq)
        {
            self.inner.next()?;
        }
        Ok(())
    }
}

impl<I: InternalIterator> InternalIterator for AtOrBelow<I> {
    fn valid(&self) -> bool {
        self.inner.valid()
    }
    fn key(&self) -> &[u8] {
        self.inner.key()
    }
    fn value(&self) -> &[u8] {
        self.inner.value()
    }
    fn next(&mut self) -> Result<()> {
        self.inner.next()?;
        self.skip_newer()
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.inner.seek(target)?;
        self.skip_newer()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.inner.seek_to_first()?;
        self.skip_newer()
    }
}
