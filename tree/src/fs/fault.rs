//! [`FaultFs`]: an in-memory [`FileSystem`] for tests that simulates power loss and injects
//! I/O errors. It is test infrastructure, public so that integration tests, fuzzers and tools
//! can use it; nothing in the engine depends on it.
//!
//! # Durability model
//!
//! Every file is an append-only byte array with a *synced length*: [`WritableFile::sync`]
//! makes everything appended so far durable. Every directory has a *live* set of entries
//! (what `list`, `open` and `exists` see) and a *durable* set (what survives a power loss):
//! [`FileSystem::sync_dir`] copies the live entries of that directory into the durable set.
//! So, after a power loss ([`FaultFs::crash`]):
//!
//! - a file created since the last `sync_dir` of its directory is gone (even if its data
//!   was fsynced);
//! - a rename or remove not followed by `sync_dir` is undone (the old file is back under
//!   the old name, with its durable bytes);
//! - every file keeps exactly its fsynced bytes ([`CrashMode::DropUnsynced`]), or its
//!   fsynced bytes plus a random prefix of the unsynced ones ([`CrashMode::TornTails`]),
//!   which is what a disk that had written back some pages of an append leaves.
//!
//! `create` of an existing name makes a new, empty file (the old one stays in the durable
//! set until the directory is synced). Directories made by `create_dir_all` are durable at
//! once, and so is a directory's removal by `remove_dir` (it takes with it any durable
//! entries whose removal was not yet synced). Locks live in memory and vanish with the power.
//!
//! A directory rename (`rename_dir`) is an entry of the parent directory like a file's
//! rename, so it is undone by a power loss unless the directory holding the new name is
//! synced after it: the directory is then back under its old name, holding its durable
//! entries (those synced before or after the rename: the directory itself is the same one),
//! and an empty directory it replaced is back too. Renames not yet made durable are undone
//! newest first. `list` names a directory's subdirectories along with its files, as a real
//! listing does. There are no symbolic links and no working directory: `canonicalize`
//! resolves `.` and `..` by name, and leaves a relative path relative.
//!
//! # Faults
//!
//! [`FaultFs::inject`] adds a [`Fault`]: calls of one [`OpKind`], optionally only on paths
//! matching a predicate, fail with [`Error::Io`] — every matching call, or only the n-th one.
//! A failing append can first write a prefix of its buffer (a short write). A fault can
//! instead cut the power: that call and every later call on this file system (and on files
//! it opened) fail, and [`FaultFs::crash`] then yields the state as of that instant.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{FileLock, FileSystem, RandomAccessFile, WritableFile};
use crate::{Error, Result};

/// The kinds of operation a [`Fault`] can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    /// [`FileSystem::create`].
    Create,
    /// [`FileSystem::open`].
    Open,
    /// [`FileSystem::read_all`].
    ReadAll,
    /// [`RandomAccessFile::read_exact_at`].
    Read,
    /// [`WritableFile::append`].
    Append,
    /// [`WritableFile::flush`], and the flush that begins a [`WritableFile::sync`].
    Flush,
    /// [`WritableFile::sync`].
    Sync,
    /// [`FileSystem::rename`].
    Rename,
    /// [`FileSystem::remove`].
    Remove,
    /// [`FileSystem::sync_dir`].
    SyncDir,
    /// [`FileSystem::create_dir_all`].
    CreateDir,
    /// [`FileSystem::list`].
    List,
    /// [`FileSystem::lock`].
    Lock,
    /// [`FileSystem::hard_link`].
    Link,
    /// [`WritableFile::truncate`].
    Truncate,
    /// [`FileSystem::remove_dir`].
    RemoveDir,
    /// [`FileSystem::rename_dir`].
    RenameDir,
    /// [`FileSystem::canonicalize`].
    Canonicalize,
}

impl OpKind {
    /// Every kind, for tests that pick one at random.
    pub const ALL: [OpKind; 18] = [
        OpKind::Create,
        OpKind::Open,
        OpKind::ReadAll,
        OpKind::Read,
        OpKind::Append,
        OpKind::Flush,
        OpKind::Sync,
        OpKind::Rename,
        OpKind::Remove,
        OpKind::SyncDir,
        OpKind::CreateDir,
        OpKind::List,
        OpKind::Lock,
        OpKind::Link,
        OpKind::Truncate,
        OpKind::RemoveDir,
        OpKind::RenameDir,
        OpKind::Canonicalize,
    ];
}

type PathPredicate = Arc<dyn Fn(&Path) -> bool + Send + Sync>;

/// What an injected fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effect {
    /// Fail the call.
    Fail,
    /// Append only this fraction (per mille) of the buffer, then fail.
    ShortWrite { per_mille: u32 },
    /// Cut the power: fail this call and every later one.
    PowerOff,
}

/// One injected fault; build with [`Fault::on`] and the chained setters, add with
/// [`FaultFs::inject`].
#[derive(Clone)]
pub struct Fault {
    kind: OpKind,
    path: Option<PathPredicate>,
    nth: Option<u64>,
    effect: Effect,
    /// Matching calls seen so far.
    seen: u64,
}

impl fmt::Debug for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fault")
            .field("kind", &self.kind)
            .field("has_path_filter", &self.path.is_some())
            .field("nth", &self.nth)
            .field("effect", &self.effect)
            .finish()
    }
}

impl Fault {
    /// A fault on every call of `kind` (narrow it with [`Fault::nth`] and
    /// [`Fault::matching`]).
    pub fn on(kind: OpKind) -> Self {
        Fault { kind, path: None, nth: None, effect: Effect::Fail, seen: 0 }
    }

    /// Only the `n`-th matching call (1-based, counted from injection) fails; the fault is
    /// spent afterwards.
    pub fn nth(mut self, n: u64) -> Self {
        self.nth = Some(n.max(1));
        self
    }

    /// Only calls on paths for which `pred` is true match (for `rename` and `rename_dir`, the
    /// source path; for `hard_link`, the new name).
    pub fn matching(mut self, pred: impl Fn(&Path) -> bool + Send + Sync + 'static) -> Self {
        self.path = Some(Arc::new(pred));
        self
    }

    /// For [`OpKind::Append`]: write the first `per_mille`/1000 of the buffer, then fail.
    pub fn short_write(mut self, per_mille: u32) -> Self {
        self.effect = Effect::ShortWrite { per_mille: per_mille.min(1000) };
        self
    }

    /// Instead of failing one call, cut the power at it: it and every later call fail, and
    /// [`FaultFs::crash`] returns the state as of that moment.
    pub fn power_off(mut self) -> Self {
        self.effect = Effect::PowerOff;
        self
    }
}

/// What happens to bytes that were appended but never fsynced when the power goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// They are all lost.
    DropUnsynced,
    /// A random prefix of them survives (chosen per file from this seed).
    TornTails {
        /// Seed of the choice.
        seed: u64,
    },
}

/// A directory rename not yet made durable by a sync of the directory holding `to`.
#[derive(Debug, Clone)]
struct DirRename {
    from: PathBuf,
    to: PathBuf,
    /// `to` was an empty directory, which the rename replaced.
    replaced: bool,
}

/// Moves every key at or under `from` to the same place under `to`.
fn move_under<V>(map: &mut BTreeMap<PathBuf, V>, from: &Path, to: &Path) {
    let keys: Vec<PathBuf> = map.keys().filter(|p| p.starts_with(from)).cloned().collect();
    for k in keys {
        if let (Some(v), Ok(rest)) = (map.remove(&k), k.strip_prefix(from)) {
            map.insert(join_rest(to, rest), v);
        }
    }
}

/// `base` joined with `rest`, where an empty `rest` leaves `base` as it is (no trailing `/`).
fn join_rest(base: &Path, rest: &Path) -> PathBuf {
    if rest.as_os_str().is_empty() {
        base.to_path_buf()
    } else {
        base.join(rest)
    }
}

fn move_dirs_under(dirs: &mut BTreeSet<PathBuf>, from: &Path, to: &Path) {
    let moved: Vec<PathBuf> = dirs.iter().filter(|p| p.starts_with(from)).cloned().collect();
    for d in moved {
        dirs.remove(&d);
        if let Ok(rest) = d.strip_prefix(from) {
            dirs.insert(join_rest(to, rest));
        }
    }
}

/// `path` with `.` and `..` resolved by name.
fn normalize(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                let at_top = matches!(
                    out.components().next_back(),
                    None | Some(Component::RootDir | Component::Prefix(_) | Component::ParentDir)
                );
                if !at_top {
                    out.pop();
                } else if !out.has_root() {
                    out.push("..");
                }
            }
            c => out.push(c),
        }
    }
    out
}

#[derive(Debug, Default, Clone)]
struct Inode {
    data: Vec<u8>,
    synced: usize,
}

/// The whole state of one file system instance.
#[derive(Default)]
struct State {
    /// False once the power went off.
    powered: bool,
    inodes: HashMap<u64, Inode>,
    next_inode: u64,
    /// Live directory entries: path → inode.
    live: BTreeMap<PathBuf, u64>,
    /// Durable directory entries.
    durable: BTreeMap<PathBuf, u64>,
    dirs: BTreeSet<PathBuf>,
    /// Directory renames whose new name is not durable yet, oldest first. The durable
    /// entries above already carry the new names; a power loss moves them back.
    pending_dir_renames: Vec<DirRename>,
    locks: BTreeSet<PathBuf>,
    faults: Vec<Fault>,
    faults_fired: u64,
    calls: HashMap<OpKind, u64>,
    /// Reads answer that they would wait for the device (see [`FaultFs::set_reads_wait`]).
    reads_wait: bool,
}

struct Shared {
    state: Mutex<State>,
}

/// An in-memory file system that simulates power loss and injects I/O errors; see the
/// [module documentation](self). Cloning shares the same state.
#[derive(Clone)]
pub struct FaultFs {
    shared: Arc<Shared>,
}

impl fmt::Debug for FaultFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.lock();
        f.debug_struct("FaultFs")
            .field("powered", &s.powered)
            .field("files", &s.live.len())
            .field("faults", &s.faults)
            .finish()
    }
}

impl Default for FaultFs {
    fn default() -> Self {
        Self::new()
    }
}

fn injected(what: &str, path: &Path, why: &str) -> Error {
    Error::io(format!("{what} {}", path.display()), std::io::Error::other(why.to_string()))
}

fn not_found(what: &str, path: &Path) -> Error {
    Error::io(
        format!("{what} {}", path.display()),
        std::io::Error::from(std::io::ErrorKind::NotFound),
    )
}

/// SplitMix64: enough randomness for choosing torn-tail lengths.
fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl State {
    /// Counts the call and applies any matching fault. `Ok(None)`: go ahead.
    /// `Ok(Some(per_mille))`: short write. `Err`: fail.
    fn check(&mut self, kind: OpKind, path: &Path, what: &str) -> Result<Option<u32>> {
        if !self.powered {
            return Err(injected(what, path, "power lost (simulated)"));
        }
        *self.calls.entry(kind).or_default() += 1;
        let mut hit = None;
        for (i, f) in self.faults.iter_mut().enumerate() {
            if f.kind != kind || !f.path.as_ref().map_or(true, |p| p(path)) {
                continue;
            }
            f.seen += 1;
            if f.nth.map_or(true, |n| n == f.seen) {
                hit = Some((i, f.effect));
                break;
            }
        }
        let Some((i, effect)) = hit else { return Ok(None) };
        if self.faults[i].nth.is_some() {
            self.faults.remove(i);
        }
        self.faults_fired += 1;
        match effect {
            Effect::Fail => Err(injected(what, path, "injected fault")),
            Effect::ShortWrite { per_mille } => Ok(Some(per_mille)),
            Effect::PowerOff => {
                self.powered = false;
                Err(injected(what, path, "power lost (simulated)"))
            }
        }
    }

    /// True if `dir` holds a file or a directory.
    fn has_entries(&self, dir: &Path) -> bool {
        let inside = |p: &PathBuf| p.parent() == Some(dir);
        self.live.keys().any(inside) || self.dirs.iter().any(inside)
    }

    fn new_inode(&mut self) -> u64 {
        self.next_inode += 1;
        self.inodes.insert(self.next_inode, Inode::default());
        self.next_inode
    }
}

impl FaultFs {
    /// An empty, powered file system with no faults.
    pub fn new() -> Self {
        let state = State { powered: true, ..State::default() };
        FaultFs { shared: Arc::new(Shared { state: Mutex::new(state) }) }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a fault.
    pub fn inject(&self, fault: Fault) {
        self.lock().faults.push(fault);
    }

    /// Removes every fault that has not fired yet (spent `nth` faults are already gone).
    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// With `true`, every read asked to succeed only without waiting for the device
    /// ([`RandomAccessFile::read_exact_at_if_cached`]) declines, as if nothing were in the
    /// page cache, so `Db::multi_get` hands its block reads to its read threads; plain reads
    /// are unaffected. The default, `false`, behaves like memory: every such read succeeds.
    pub fn set_reads_wait(&self, on: bool) {
        self.lock().reads_wait = on;
    }

    /// How many faults have fired (failed calls, short writes and power cuts).
    pub fn faults_fired(&self) -> u64 {
        self.lock().faults_fired
    }

    /// How many calls of `kind` were made (including failed ones, excluding calls after a
    /// power cut). Tests use it to pick a random call to fail.
    pub fn calls(&self, kind: OpKind) -> u64 {
        self.lock().calls.get(&kind).copied().unwrap_or(0)
    }

    /// Cuts the power now (if a [`Fault::power_off`] has not already), and returns a new,
    /// powered file system holding only what was durable at that moment, as
    /// [`CrashMode::DropUnsynced`] or [`CrashMode::TornTails`] decide. This instance stays
    /// dead: every later call on it, or on files it opened, fails — so the handle of a
    /// database that was running on it can be dropped without touching the new state.
    pub fn crash(&self, mode: CrashMode) -> FaultFs {
        let mut s = self.lock();
        s.powered = false;
        let mut rng = match mode {
            CrashMode::DropUnsynced => 0,
            CrashMode::TornTails { seed } => seed,
        };
        // Directory renames not made durable come undone, newest first.
        let (mut durable, mut dirs) = (s.durable.clone(), s.dirs.clone());
        for r in s.pending_dir_renames.iter().rev() {
            move_under(&mut durable, &r.to, &r.from);
            move_dirs_under(&mut dirs, &r.to, &r.from);
            if r.replaced {
                dirs.insert(r.to.clone());
            }
        }
        let mut inodes = HashMap::new();
        for (_, &ino) in durable.iter() {
            if inodes.contains_key(&ino) {
                continue;
            }
            let old = &s.inodes[&ino];
            let keep = match mode {
                CrashMode::DropUnsynced => old.synced,
                CrashMode::TornTails { .. } => {
                    let extra = old.data.len() - old.synced;
                    // Half the files keep nothing unsynced; the others a random prefix.
                    let r = splitmix(&mut rng);
                    if extra == 0 || r & 1 == 0 {
                        old.synced
                    } else {
                        old.synced + (r >> 1) as usize % (extra + 1)
                    }
                }
            };
            let data = old.data[..keep].to_vec();
            inodes.insert(ino, Inode { synced: data.len(), data });
        }
        let state = State {
            powered: true,
            inodes,
            next_inode: s.next_inode,
            live: durable.clone(),
            durable,
            dirs,
            pending_dir_renames: Vec::new(),
            locks: BTreeSet::new(),
            faults: Vec::new(),
            faults_fired: 0,
            calls: HashMap::new(),
            // A setting of the test, like the faults' absence: kept.
            reads_wait: s.reads_wait,
        };
        FaultFs { shared: Arc::new(Shared { state: Mutex::new(state) }) }
    }

    /// True until the power is cut.
    pub fn is_powered(&self) -> bool {
        self.lock().powered
    }

    /// The current (live, not necessarily durable) contents of a file, for tests.
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let s = self.lock();
        s.live.get(path).map(|ino| s.inodes[ino].data.clone())
    }

    /// Replaces a file's contents (durably, as if written and fsynced), for tests that
    /// damage files. Fails if the file does not exist.
    pub fn set_contents(&self, path: &Path, data: Vec<u8>) -> Result<()> {
        let mut s = self.lock();
        let ino = *s.live.get(path).ok_or_else(|| not_found("overwriting", path))?;
        s.inodes.insert(ino, Inode { synced: data.len(), data });
        Ok(())
    }

    /// Paths of the live files, sorted.
    pub fn files(&self) -> Vec<PathBuf> {
        self.lock().live.keys().cloned().collect()
    }
}

struct FaultWritable {
    fs: FaultFs,
    path: PathBuf,
    ino: u64,
    len: u64,
}

impl WritableFile for FaultWritable {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        let mut s = self.fs.lock();
        let short = s.check(OpKind::Append, &self.path, "writing")?;
        let n = match short {
            Some(per_mille) => data.len() * per_mille as usize / 1000,
            None => data.len(),
        };
        let inode = s.inodes.get_mut(&self.ino).expect("open files keep their inode");
        inode.data.extend_from_slice(&data[..n]);
        self.len += n as u64;
        match short {
            Some(_) => Err(injected("writing", &self.path, "injected short write")),
            None => Ok(()),
        }
    }
    fn flush(&mut self) -> Result<()> {
        self.fs.lock().check(OpKind::Flush, &self.path, "writing").map(|_| ())
    }
    fn sync(&mut self) -> Result<()> {
        let mut s = self.fs.lock();
        // A sync hands buffered bytes to the OS first, as a flush does, and can fail there.
        s.check(OpKind::Flush, &self.path, "writing")?;
        s.check(OpKind::Sync, &self.path, "syncing")?;
        let inode = s.inodes.get_mut(&self.ino).expect("open files keep their inode");
        inode.synced = inode.data.len();
        Ok(())
    }
    /// Cuts the live bytes and the durable ones alike. The engine only cuts the tail of a
    /// record it reported as failed, and promises to keep it out only as far as the file
    /// system keeps the cut (see docs/reliability.md).
    fn truncate(&mut self, len: u64) -> Result<()> {
        let mut s = self.fs.lock();
        s.check(OpKind::Truncate, &self.path, "truncating")?;
        let inode = s.inodes.get_mut(&self.ino).expect("open files keep their inode");
        let len = (len as usize).min(inode.data.len());
        inode.data.truncate(len);
        inode.synced = inode.synced.min(len);
        self.len = len as u64;
        Ok(())
    }
    fn len(&self) -> u64 {
        self.len
    }
}

struct FaultRandomAccess {
    fs: FaultFs,
    path: PathBuf,
    ino: u64,
    size: u64,
}

impl fmt::Debug for FaultRandomAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultRandomAccess").field("path", &self.path).finish()
    }
}

impl RandomAccessFile for FaultRandomAccess {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let mut s = self.fs.lock();
        s.check(OpKind::Read, &self.path, "reading")?;
        let data = &s.inodes.get(&self.ino).expect("open files keep their inode").data;
        let end = offset.checked_add(buf.len() as u64).filter(|&e| e <= data.len() as u64);
        match end {
            Some(end) => {
                buf.copy_from_slice(&data[offset as usize..end as usize]);
                Ok(())
            }
            None => Err(Error::io(
                format!("reading {}", self.path.display()),
                std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
            )),
        }
    }
    fn read_exact_at_if_cached(&self, buf: &mut [u8], offset: u64) -> Result<bool> {
        if self.fs.lock().reads_wait {
            return Ok(false);
        }
        self.read_exact_at(buf, offset).map(|()| true)
    }
    fn size(&self) -> u64 {
        self.size
    }
}

#[derive(Debug)]
struct FaultLock {
    fs: FaultFs,
    path: PathBuf,
}

impl FileLock for FaultLock {}

impl Drop for FaultLock {
    fn drop(&mut self) {
        self.fs.lock().locks.remove(&self.path);
    }
}

impl FileSystem for FaultFs {
    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        let mut s = self.lock();
        s.check(OpKind::Create, path, "creating")?;
        if !path.parent().is_some_and(|d| s.dirs.contains(d)) {
            return Err(not_found("creating", path));
        }
        let ino = s.new_inode();
        s.live.insert(path.to_path_buf(), ino);
        Ok(Box::new(FaultWritable { fs: self.clone(), path: path.to_path_buf(), ino, len: 0 }))
    }

    fn open(&self, path: &Path) -> Result<Arc<dyn RandomAccessFile>> {
        let mut s = self.lock();
        s.check(OpKind::Open, path, "opening")?;
        let ino = *s.live.get(path).ok_or_else(|| not_found("opening", path))?;
        let size = s.inodes[&ino].data.len() as u64;
        Ok(Arc::new(FaultRandomAccess { fs: self.clone(), path: path.to_path_buf(), ino, size }))
    }

    fn read_all(&self, path: &Path) -> Result<Vec<u8>> {
        let mut s = self.lock();
        s.check(OpKind::ReadAll, path, "reading")?;
        let ino = *s.live.get(path).ok_or_else(|| not_found("reading", path))?;
        Ok(s.inodes[&ino].data.clone())
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut s = self.lock();
        s.check(OpKind::Rename, from, "renaming")?;
        let ino = s.live.remove(from).ok_or_else(|| not_found("renaming", from))?;
        s.live.insert(to.to_path_buf(), ino);
        Ok(())
    }

    fn remove(&self, path: &Path) -> Result<()> {
        let mut s = self.lock();
        s.check(OpKind::Remove, path, "removing")?;
        s.live.remove(path).ok_or_else(|| not_found("removing", path))?;
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        let mut s = self.lock();
        s.check(OpKind::SyncDir, dir, "syncing directory")?;
        if !s.dirs.contains(dir) {
            return Err(not_found("syncing directory", dir));
        }
        let in_dir = |p: &PathBuf| p.parent() == Some(dir);
        let live: Vec<(PathBuf, u64)> =
            s.live.iter().filter(|(p, _)| in_dir(p)).map(|(p, i)| (p.clone(), *i)).collect();
        s.durable.retain(|p, _| !in_dir(p));
        s.durable.extend(live);
        // Inodes no name refers to stay: open handles may still use them. `crash` keeps
        // only the durable ones.
        s.pending_dir_renames.retain(|r| r.to.parent() != Some(dir));
        Ok(())
    }

    fn remove_dir(&self, dir: &Path) -> Result<()> {
        let mut s = self.lock();
        s.check(OpKind::RemoveDir, dir, "removing directory")?;
        if !s.dirs.contains(dir) {
            return Err(not_found("removing directory", dir));
        }
        if s.has_entries(dir) {
            let e = std::io::Error::other("directory not empty");
            return Err(Error::io(format!("removing directory {}", dir.display()), e));
        }
        s.dirs.remove(dir);
        s.durable.retain(|p, _| p.parent() != Some(dir));
        Ok(())
    }

    fn rename_dir(&self, from: &Path, to: &Path) -> Result<()> {
        let mut s = self.lock();
        s.check(OpKind::RenameDir, from, "renaming directory")?;
        let what = || format!("renaming directory {} to {}", from.display(), to.display());
        if !s.dirs.contains(from) {
            return Err(not_found("renaming directory", from));
        }
        if !to.parent().is_some_and(|d| s.dirs.contains(d)) {
            return Err(not_found("renaming directory to", to));
        }
        if to == from {
            return Ok(());
        }
        if to.starts_with(from) {
            let e = std::io::Error::from(std::io::ErrorKind::InvalidInput);
            return Err(Error::io(what(), e));
        }
        if s.live.contains_key(to) {
            return Err(Error::io(what(), std::io::Error::other("target is not a directory")));
        }
        let replaced = s.dirs.contains(to);
        if replaced && s.has_entries(to) {
            return Err(Error::io(what(), std::io::Error::other("directory not empty")));
        }
        if replaced {
            s.dirs.remove(to);
            s.durable.retain(|p, _| p.parent() != Some(to));
        }
        move_dirs_under(&mut s.dirs, from, to);
        move_under(&mut s.live, from, to);
        move_under(&mut s.durable, from, to);
        s.pending_dir_renames.push(DirRename {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
            replaced,
        });
        Ok(())
    }

    fn canonicalize(&self, path: &Path) -> Result<PathBuf> {
        let mut s = self.lock();
        s.check(OpKind::Canonicalize, path, "resolving")?;
        let p = normalize(path);
        let found = p.as_os_str().is_empty()
            || p.parent().is_none()
            || s.dirs.contains(&p)
            || s.live.contains_key(&p);
        if found {
            Ok(p)
        } else {
            Err(not_found("resolving", path))
        }
    }

    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        let mut s = self.lock();
        s.check(OpKind::CreateDir, dir, "creating directory")?;
        let mut d = Some(dir);
        while let Some(p) = d {
            if p.as_os_str().is_empty() {
                break;
            }
            s.dirs.insert(p.to_path_buf());
            d = p.parent();
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        let mut s = self.lock();
        s.check(OpKind::List, dir, "listing")?;
        if !s.dirs.contains(dir) {
            return Err(not_found("listing", dir));
        }
        // Subdirectories too, as a real directory listing has them.
        Ok(s.live
            .keys()
            .chain(s.dirs.iter())
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
            .collect())
    }

    fn exists(&self, path: &Path) -> bool {
        let s = self.lock();
        s.powered && (s.live.contains_key(path) || s.dirs.contains(path))
    }

    fn hard_link(&self, from: &Path, to: &Path) -> Result<()> {
        let mut s = self.lock();
        s.check(OpKind::Link, to, "linking")?;
        if !to.parent().is_some_and(|d| s.dirs.contains(d)) {
            return Err(not_found("linking", to));
        }
        let ino = *s.live.get(from).ok_or_else(|| not_found("linking", from))?;
        if s.live.contains_key(to) {
            return Err(Error::io(
                format!("linking {}", to.display()),
                std::io::ErrorKind::AlreadyExists.into(),
            ));
        }
        s.live.insert(to.to_path_buf(), ino);
        Ok(())
    }

    fn lock(&self, path: &Path) -> Result<Box<dyn FileLock>> {
        let mut s = self.lock();
        s.check(OpKind::Lock, path, "locking")?;
        if !path.parent().is_some_and(|d| s.dirs.contains(d)) {
            return Err(not_found("locking", path));
        }
        if !s.live.contains_key(path) {
            let ino = s.new_inode();
            s.live.insert(path.to_path_buf(), ino);
        }
        if !s.locks.insert(path.to_path_buf()) {
            return Err(Error::Locked { path: path.to_path_buf() });
        }
        Ok(Box::new(FaultLock { fs: self.clone(), path: path.to_path_buf() }))
    }
}

/// A process-wide counter tests can use to name distinct in-memory directories.
pub fn unique_dir(prefix: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    PathBuf::from(format!("/faultfs/{prefix}-{}", N.fetch_add(1, Ordering::Relaxed)))
}
