//! The narrow file-system seam every writer and reader goes through, as LevelDB routes all OS
//! access through `Env`. [`StdFs`] is the real implementation; tests substitute `FaultFs`, an
//! in-memory one that injects faults and simulates power loss (with the `fault-injection`
//! feature).

use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::{Error, Result};

mod deleter;
mod file_cache;
pub use deleter::Deleter;
pub use file_cache::{next_file_id, FileCache};
mod posix;
pub use posix::StdFs;
#[cfg(any(test, feature = "fault-injection"))]
pub mod fault;
mod mapped;
mod writable;
pub use mapped::MappedFile;
#[cfg(any(test, feature = "fault-injection"))]
mod mem;
#[cfg(any(test, feature = "fault-injection"))]
pub use fault::{CrashMode, Fault, FaultFs, OpKind};
#[cfg(any(test, feature = "fault-injection"))]
pub use mem::MemFile;

/// A file opened for appending: the WAL, the manifest, a table being built.
pub trait WritableFile: Send {
    /// Appends bytes (possibly buffered in user space).
    fn append(&mut self, data: &[u8]) -> Result<()>;
    /// Hands buffered bytes to the operating system: after this they survive a process
    /// crash, but not a power loss.
    fn flush(&mut self) -> Result<()>;
    /// Flushes and fsyncs: after this the bytes survive a power loss.
    fn sync(&mut self) -> Result<()>;
    /// Cuts the file back to its first `len` bytes (at most [`WritableFile::len`]),
    /// discarding anything buffered beyond them. After a failed append, flush or sync, the
    /// engine cuts a log back to where the refused record began, so that record cannot
    /// surface on the next open; the file stays refused for appends. File systems that
    /// cannot truncate keep this default, which fails.
    fn truncate(&mut self, len: u64) -> Result<()> {
        let _ = len;
        Err(Error::io("truncating a file", std::io::ErrorKind::Unsupported.into()))
    }
    /// Reserves disk space for the file's first `len` bytes, so that appending up to there
    /// allocates nothing: a log synced after every append then makes the device write its
    /// data alone, not also the file's new size and extents each time. The file's size on
    /// disk covers the reserved bytes, which read as zeros, until [`WritableFile::truncate`]
    /// cuts them off; [`WritableFile::len`] still counts only what was appended. Only an
    /// optimisation: file systems that cannot reserve keep this default, which reserves
    /// nothing.
    fn preallocate(&mut self, len: u64) -> Result<()> {
        let _ = len;
        Ok(())
    }
    /// Leaves writing this file's data to the device to its syncs and the operating system.
    /// Files otherwise ask the device to start writing each MiB they hand to the OS, so that
    /// the sync ending a table waits for the last stretch alone (see `StdWritable`); the WAL
    /// opts out, because its appends run under the lock every writer waits for (appends
    /// copied into a mapping still start the writeback of each MiB the copies have left
    /// behind). File systems that never start writeback keep this default, which does
    /// nothing.
    fn defer_writeback(&mut self) {}
    /// Hands appends that [`WritableFile::flush`] hands over inside the space
    /// [`WritableFile::preallocate`] reserved to the OS by copying them into a shared memory
    /// mapping of the file instead of with `write(2)`: for the WAL, whose every unsynced
    /// write would otherwise make a system call under the lock all writers wait for (a
    /// [`WritableFile::sync`] still writes). Bytes copied into a shared mapping are in
    /// the OS's page cache at once, as written bytes are: they survive a crash of the process
    /// and reach the device with the file's next sync. File systems that cannot map keep this
    /// default, which does nothing.
    fn map_appends(&mut self) {}
    /// Bytes appended so far.
    fn len(&self) -> u64;
    /// True when nothing has been appended.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A file read at arbitrary offsets by many threads at once, without a lock
/// (positional reads, `pread`).
pub trait RandomAccessFile: Send + Sync + Debug {
    /// Fills `buf` from `offset`; reading past the end is an error.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()>;
    /// Like [`RandomAccessFile::read_exact_at`], but only if the bytes can be had without
    /// waiting for the storage device: `Ok(true)` when `buf` was filled, `Ok(false)` when the
    /// read would have had to wait (what `buf` then holds is unspecified). `multi_get` uses it
    /// to do the reads the operating system's cache can answer at once on the calling thread
    /// and to hand the rest to several threads, so their waits for the device overlap.
    ///
    /// The default reads and answers `Ok(true)`: right for files held in memory.
    fn read_exact_at_if_cached(&self, buf: &mut [u8], offset: u64) -> Result<bool> {
        self.read_exact_at(buf, offset).map(|()| true)
    }
    /// The file's size when it was opened.
    fn size(&self) -> u64;
}

/// A held lock on a database directory; dropping it releases the lock.
pub trait FileLock: Send + Sync + Debug {}

/// The file-system operations bloomkv needs, and nothing more.
pub trait FileSystem: Send + Sync + Debug {
    /// Creates (or truncates) a file for appending.
    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>>;
    /// Opens a file for positional reads.
    fn open(&self, path: &Path) -> Result<Arc<dyn RandomAccessFile>>;
    /// Reads a whole file (WAL segments and manifests, which are bounded in size).
    fn read_all(&self, path: &Path) -> Result<Vec<u8>>;
    /// Atomically renames `from` to `to`, replacing `to`.
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;
    /// Removes a file.
    fn remove(&self, path: &Path) -> Result<()>;
    /// Makes the directory's entries (created, renamed, removed files) durable.
    fn sync_dir(&self, dir: &Path) -> Result<()>;
    /// Creates a directory and its parents.
    fn create_dir_all(&self, dir: &Path) -> Result<()>;
    /// Removes an empty directory.
    fn remove_dir(&self, dir: &Path) -> Result<()>;
    /// Atomically renames the directory `from` to `to`, which must not exist or be an empty
    /// directory (then it is replaced). Like a file's rename, the new name is durable once
    /// the directory holding it is synced. Checkpoints are built under a temporary name and
    /// renamed into place, so that their directory appears whole or not at all.
    fn rename_dir(&self, from: &Path, to: &Path) -> Result<()>;
    /// The absolute form of `path`, which must exist, with `.` and `..` resolved and every
    /// symbolic link followed: what tells whether two names lead to the same directory.
    fn canonicalize(&self, path: &Path) -> Result<PathBuf>;
    /// The names of the entries in a directory.
    fn list(&self, dir: &Path) -> Result<Vec<String>>;
    /// True if the path exists.
    fn exists(&self, path: &Path) -> bool;
    /// Takes an exclusive lock on `path` (created if missing); fails with
    /// [`Error::Locked`] if another handle holds it.
    fn lock(&self, path: &Path) -> Result<Box<dyn FileLock>>;
    /// Maps the file at `path` into memory, where this file system can: `Ok(None)` where it
    /// cannot (the default, right for file systems held in memory, whose reads are already
    /// copies from RAM). The engine maps table files when `Options::mmap_reads` asks for
    /// it, for its point lookups; see [`MappedFile`].
    fn map(&self, path: &Path) -> Result<Option<MappedFile>> {
        let _ = path;
        Ok(None)
    }
    /// Makes `to` a second name for the file `from` (a hard link), failing if `to` exists.
    /// Like a created file, the new name is durable once its directory is synced. File
    /// systems without links keep this default, which fails, and callers copy instead.
    fn hard_link(&self, from: &Path, to: &Path) -> Result<()> {
        let _ = to;
        Err(io_err("linking", from, std::io::ErrorKind::Unsupported.into()))
    }
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::io(format!("{what} {}", path.display()), e)
}
