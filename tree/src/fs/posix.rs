//! [`StdFs`]: the file-system seam on the operating system's files.

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::writable::StdWritable;
use super::{io_err, FileLock, FileSystem, MappedFile, RandomAccessFile, WritableFile};
use crate::{Error, Result};

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct StdFs;

#[derive(Debug)]
struct StdRandomAccess {
    path: PathBuf,
    file: File,
    size: u64,
}

impl RandomAccessFile for StdRandomAccess {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileExt;
            self.file.read_exact_at(buf, offset).map_err(|e| io_err("reading", &self.path, e))
        }
        #[cfg(windows)]
        {
            use std::os::windows::fs::FileExt;
            let mut done = 0;
            while done < buf.len() {
                let n = self
                    .file
                    .seek_read(&mut buf[done..], offset + done as u64)
                    .map_err(|e| io_err("reading", &self.path, e))?;
                if n == 0 {
                    return Err(io_err(
                        "reading",
                        &self.path,
                        std::io::ErrorKind::UnexpectedEof.into(),
                    ));
                }
                done += n;
            }
            Ok(())
        }
    }
    /// `preadv2` with `RWF_NOWAIT` on Linux: the kernel copies what its page cache holds and
    /// answers `EAGAIN` rather than start a device read. Elsewhere, or where the file system
    /// refuses the flag, an ordinary read.
    fn read_exact_at_if_cached(&self, buf: &mut [u8], offset: u64) -> Result<bool> {
        #[cfg(target_os = "linux")]
        {
            use rustix::io::{preadv2, Errno, ReadWriteFlags};
            use std::io::IoSliceMut;
            let mut done = 0;
            while done < buf.len() {
                let at = offset + done as u64;
                match preadv2(
                    &self.file,
                    &mut [IoSliceMut::new(&mut buf[done..])],
                    at,
                    ReadWriteFlags::NOWAIT,
                ) {
                    Ok(0) => {
                        let eof = std::io::ErrorKind::UnexpectedEof.into();
                        return Err(io_err("reading", &self.path, eof));
                    }
                    Ok(n) => done += n,
                    // Some of the range is not in memory (a short read stops there).
                    Err(Errno::AGAIN) => return Ok(false),
                    Err(Errno::INTR) => {}
                    Err(Errno::OPNOTSUPP | Errno::INVAL | Errno::NOSYS) => {
                        return self.read_exact_at(&mut buf[done..], at).map(|()| true)
                    }
                    Err(e) => return Err(io_err("reading", &self.path, e.into())),
                }
            }
            Ok(true)
        }
        #[cfg(not(target_os = "linux"))]
        self.read_exact_at(buf, offset).map(|()| true)
    }
    fn size(&self) -> u64 {
        self.size
    }
}

#[derive(Debug)]
struct StdLock {
    _file: File,
}
impl FileLock for StdLock {}

impl FileSystem for StdFs {
    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        // Readable too: a writable shared mapping (`map_appends`) needs a file open for both.
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| io_err("creating", path, e))?;
        Ok(Box::new(StdWritable::new(path.to_path_buf(), f)))
    }
    fn open(&self, path: &Path) -> Result<Arc<dyn RandomAccessFile>> {
        let file = File::open(path).map_err(|e| io_err("opening", path, e))?;
        let size = file.metadata().map_err(|e| io_err("stat of", path, e))?.len();
        Ok(Arc::new(StdRandomAccess { path: path.to_path_buf(), file, size }))
    }
    fn read_all(&self, path: &Path) -> Result<Vec<u8>> {
        fs::read(path).map_err(|e| io_err("reading", path, e))
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        fs::rename(from, to).map_err(|e| io_err("renaming", from, e))
    }
    fn remove(&self, path: &Path) -> Result<()> {
        fs::remove_file(path).map_err(|e| io_err("removing", path, e))
    }
    fn sync_dir(&self, dir: &Path) -> Result<()> {
        #[cfg(unix)]
        {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| io_err("syncing directory", dir, e))
        }
        #[cfg(not(unix))]
        {
            let _ = dir;
            Ok(())
        }
    }
    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        fs::create_dir_all(dir).map_err(|e| io_err("creating directory", dir, e))
    }
    fn remove_dir(&self, dir: &Path) -> Result<()> {
        fs::remove_dir(dir).map_err(|e| io_err("removing directory", dir, e))
    }
    fn rename_dir(&self, from: &Path, to: &Path) -> Result<()> {
        // POSIX rename(2) replaces an empty directory; Windows refuses to, so the empty one
        // goes first there (not atomically, but nothing else is possible).
        #[cfg(not(unix))]
        if to.is_dir() {
            fs::remove_dir(to).map_err(|e| io_err("removing directory", to, e))?;
        }
        fs::rename(from, to).map_err(|e| io_err("renaming directory", from, e))
    }
    fn canonicalize(&self, path: &Path) -> Result<PathBuf> {
        fs::canonicalize(path).map_err(|e| io_err("resolving", path, e))
    }
    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir).map_err(|e| io_err("listing", dir, e))? {
            let entry = entry.map_err(|e| io_err("listing", dir, e))?;
            if let Some(name) = entry.file_name().to_str() {
                names.push(name.to_string());
            }
        }
        Ok(names)
    }
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
    fn hard_link(&self, from: &Path, to: &Path) -> Result<()> {
        fs::hard_link(from, to).map_err(|e| io_err("linking", from, e))
    }
    /// Unix only. Windows refuses to remove a file while a view of it is mapped, and the
    /// engine removes table files a compaction retired while lookups may still hold them.
    fn map(&self, path: &Path) -> Result<Option<MappedFile>> {
        #[cfg(unix)]
        return MappedFile::open(path);
        #[cfg(not(unix))]
        {
            let _ = path;
            Ok(None)
        }
    }
    fn lock(&self, path: &Path) -> Result<Box<dyn FileLock>> {
        use fs2::FileExt;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| io_err("opening", path, e))?;
        match file.try_lock_exclusive() {
            Ok(()) => Ok(Box::new(StdLock { _file: file })),
            Err(_) => Err(Error::Locked { path: path.to_path_buf() }),
        }
    }
}
