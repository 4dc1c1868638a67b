//! A table file mapped into memory ([`MappedFile`]), for `Options::mmap_reads`: point
//! lookups check and search a block where it lies instead of reading it with `pread`.

use std::fmt::Debug;
use std::fs::File;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::{io_err, RandomAccessFile};
use crate::Result;

/// A whole file mapped read-only into memory (`mmap`), whose bytes are handed out as
/// [`Bytes`] slices without a copy ([`MappedFile::bytes`]), or copied out by the
/// [`RandomAccessFile`] methods.
///
/// Against `pread` on a 5.5 GB table set held in the page cache, a 4 KiB block read took
/// 0.79 µs instead of 1.38 µs on the 2-core VM DESIGN.md describes: no system call, and the
/// page tables the first touch of each page filled stand in for the page cache's lookup. The
/// file descriptor is closed once the file is mapped, so a mapped table holds none. The
/// mapping lives as long as the last slice of it.
///
/// The mapping is advised random access: a point lookup wants its block, not the 128 KiB
/// the kernel would otherwise read around a page it faults in from the device.
///
/// On Linux, the pages of the file the page cache already holds are entered into the
/// mapping's page tables when it is made ([`MappedFile::open`]), so lookups do not each pay
/// a page fault the first time they touch one. Nothing is read from the device for it.
///
/// Mapping is only sound for a file nothing writes or truncates while it is mapped, which
/// the engine's table files are: written once, completely, before they are opened, and only
/// ever removed (a removed file's mapping stays readable). A table truncated by another
/// process while mapped would end this one with `SIGBUS` on its next read there, where a
/// `pread` would have returned an error; `Options::mmap_reads` is off by default for that.
pub struct MappedFile {
    path: PathBuf,
    /// The whole mapping (a `memmap2::Mmap` owned by the `Bytes`).
    map: Bytes,
}

impl Debug for MappedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedFile")
            .field("path", &self.path)
            .field("len", &self.map.len())
            .finish()
    }
}

impl MappedFile {
    /// Maps the file at `path`; `Ok(None)` for an empty file, which has nothing to map.
    pub fn open(path: &Path) -> Result<Option<MappedFile>> {
        let file = File::open(path).map_err(|e| io_err("opening", path, e))?;
        let len = file.metadata().map_err(|e| io_err("stat of", path, e))?.len();
        if len == 0 {
            return Ok(None);
        }
        // SAFETY: memmap2 calls mapping unsafe because the bytes change under the mapping if
        // the file is written or truncated meanwhile. The engine maps only table files,
        // which are complete before they are opened and never written again (see the type's
        // documentation for the one outside threat, another process truncating them).
        let map = unsafe { memmap2::MmapOptions::new().map(&file) }
            .map_err(|e| io_err("mapping", path, e))?;
        #[cfg(unix)]
        map.advise(memmap2::Advice::Random).map_err(|e| io_err("advising", path, e))?;
        #[cfg(target_os = "linux")]
        populate_resident(&map);
        Ok(Some(MappedFile { path: path.to_path_buf(), map: Bytes::from_owner(map) }))
    }

    /// The whole file, as a `Bytes` whose slices share the mapping.
    pub fn bytes(&self) -> &Bytes {
        &self.map
    }

    /// Whether the `len` bytes at `offset` can be read without waiting for the storage
    /// device (every page of them is in memory; `mincore` on Linux, elsewhere always).
    /// Unknown, or outside the file, counts as not.
    pub fn resident(&self, offset: u64, len: usize) -> bool {
        let Ok(r) = self.range(len, offset) else { return false };
        #[cfg(target_os = "linux")]
        return self.pages_resident(r);
        #[cfg(not(target_os = "linux"))]
        {
            let _ = r;
            true
        }
    }

    fn range(&self, len: usize, offset: u64) -> Result<std::ops::Range<usize>> {
        match usize::try_from(offset).ok().and_then(|o| Some(o..o.checked_add(len)?)) {
            Some(r) if r.end <= self.map.len() => Ok(r),
            _ => Err(io_err("reading", &self.path, std::io::ErrorKind::UnexpectedEof.into())),
        }
    }

    /// Whether every page of `range` is in memory now (`mincore`), so reading it cannot wait
    /// for the device. Unknown counts as not: the caller then reads it on a read thread.
    #[cfg(target_os = "linux")]
    fn pages_resident(&self, range: std::ops::Range<usize>) -> bool {
        const MAX_PAGES: usize = 64;
        let page = rustix::param::page_size();
        // The mapping starts on a page boundary, so rounding down stays inside it.
        let start = range.start & !(page - 1);
        let pages = (range.end - start).div_ceil(page);
        if pages > MAX_PAGES {
            return false;
        }
        let mut state = [0u8; MAX_PAGES];
        residency(&self.map, start..range.end, &mut state[..pages])
            && state[..pages].iter().all(|s| s & 1 == 1)
    }
}

/// Fills `state` with one byte per page of `map[range]` (`range.start` on a page boundary)
/// whose lowest bit says whether the page is in memory (`mincore`); false if the kernel
/// would not say.
#[cfg(target_os = "linux")]
fn residency(map: &[u8], range: std::ops::Range<usize>, state: &mut [u8]) -> bool {
    let page = rustix::param::page_size();
    assert!(range.start % page == 0 && range.end <= map.len());
    assert!(state.len() >= range.len().div_ceil(page));
    if range.is_empty() {
        return true;
    }
    // SAFETY: `range` lies within the live mapping `map` (asserted above; a mapping starts
    // on a page boundary, so `range.start` is one too), and `state` has room for one byte
    // per page of it, as mincore writes.
    let rc = unsafe {
        libc::mincore(
            map[range.start..].as_ptr() as *mut libc::c_void,
            range.len(),
            state.as_mut_ptr(),
        )
    };
    rc == 0
}

/// Enters the pages of `map` that the page cache holds into its page tables
/// (`MADV_POPULATE_READ`, run by run), so the first lookup to touch each does not take a
/// page fault for it. Pages not in memory are left alone: populating them would read them
/// from the device, the whole file for a cold table.
///
/// A populated page costs the mapping 8 bytes of page table, what touching it would cost
/// anyway, and the kernel can still reclaim it. For the 373 tables (5.5 GB) of a 50M-key
/// tree held in the page cache, opening took about 0.5 s longer, and a new process's first
/// 300,000 lookups took no page faults instead of 48,700, about 7 µs each (DESIGN.md,
/// "Mapped reads"). It is only a speed-up: where the kernel refuses (before Linux 5.14), is
/// interrupted, or a page leaves memory meanwhile, lookups fault pages in as they would have.
#[cfg(target_os = "linux")]
fn populate_resident(map: &memmap2::Mmap) {
    let page = rustix::param::page_size();
    let mut state = vec![0u8; map.len().div_ceil(page)];
    if !residency(map, 0..map.len(), &mut state) {
        return;
    }
    let mut first = 0;
    for run in state.chunk_by(|a, b| a & 1 == b & 1) {
        let start = first * page;
        first += run.len();
        let len = (run.len() * page).min(map.len() - start);
        if run[0] & 1 == 1 && map.advise_range(memmap2::Advice::PopulateRead, start, len).is_err() {
            return;
        }
    }
}

impl RandomAccessFile for MappedFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let r = self.range(buf.len(), offset)?;
        buf.copy_from_slice(&self.map[r]);
        Ok(())
    }
    fn read_exact_at_if_cached(&self, buf: &mut [u8], offset: u64) -> Result<bool> {
        let r = self.range(buf.len(), offset)?;
        #[cfg(target_os = "linux")]
        if !self.pages_resident(r.clone()) {
            return Ok(false);
        }
        buf.copy_from_slice(&self.map[r]);
        Ok(true)
    }
    fn size(&self) -> u64 {
        self.map.len() as u64
    }
}
